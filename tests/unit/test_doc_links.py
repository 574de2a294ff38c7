"""Every relative link in the project's markdown (README, docs/, the result reports) points to a
file that exists, so a reader who follows a figure or a table to its source finds it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = {"outputs", "multirun"}
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)


def markdown_files(root: Path) -> list[Path]:
    """Every .md file under root outside outputs/, multirun/ and hidden folders (.venv)."""
    return sorted(
        path
        for path in root.rglob("*.md")
        if not any(part in SKIPPED or part.startswith(".") for part in path.relative_to(root).parts)
    )


def broken_links(path: Path, root: Path) -> list[str]:
    """'file:line target' for each relative link in path whose file does not exist."""
    text = path.read_text(encoding="utf-8")
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1).split("#")[0]
        if not target or re.match(r"[a-z]+:", target):  # an anchor, a URL, mailto:
            continue
        if not (path.parent / target).exists():
            line = text.count("\n", 0, match.start()) + 1
            broken.append(f"{path.relative_to(root).as_posix()}:{line} {target}")
    return broken


def test_every_relative_link_resolves():
    files = markdown_files(ROOT)
    assert ROOT / "README.md" in files and len(files) > 10
    assert [b for path in files for b in broken_links(path, ROOT)] == []


def test_the_checker_catches_a_link_written_from_the_wrong_folder(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "table.md").write_text("| a |\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "[ok](../results/table.md) [web](https://example.org) [here](#top)\n"
        "![plot](results/table.md)\n"
    )
    assert broken_links(page, tmp_path) == ["docs/page.md:2 results/table.md"]
