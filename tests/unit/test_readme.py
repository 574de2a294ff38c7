"""The README's answer is taken in at a glance, and its table is the report's, from the records."""

import re

from common.files import read_json
from studies.compared import Table3
from studies.report import GLANCE, glance_markdown
from tests.conftest import ROOT

REPORT = ROOT / "results" / "pe_multi30k" / "report"


def answer_section() -> list[str]:
    """The lines of the README's "The answer so far", up to the next section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The answer so far", 1)[1].split("\n## ", 1)[0]
    return section.strip("\n").splitlines()


def test_the_answer_fits_a_screen_with_one_table_one_figure_and_six_findings():
    lines = answer_section()
    assert len(lines) <= 70, f"the answer is {len(lines)} lines"
    findings = [line for line in lines if line.startswith("- ")]
    assert 1 <= len(findings) <= 6, findings
    separators = [line for line in lines if re.fullmatch(r"\|(-+:?\|)+", line.replace("-:", "--:"))]
    assert len(separators) == 1, "one table"
    figures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", "\n".join(lines))
    assert len(figures) == 1 and (ROOT / figures[0]).is_file(), figures


def test_the_readme_table_is_the_reports_and_the_report_is_its_records():
    lines = answer_section()
    table = [line for line in lines if line.startswith("|")]
    glance = (REPORT / GLANCE).read_text(encoding="utf-8")
    assert "\n".join(table) + "\n" == glance, "copy results/pe_multi30k/report/glance.md"
    compared = Table3.from_json(read_json(REPORT / "compare.json"))
    assert glance_markdown(compared) == glance  # the report is current
