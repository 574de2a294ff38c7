"""Declared, not coded: no module of studies/ names a variant or a condition, and no module of the
project names a folder under results/.

What differs between studies lives in configs/study/*.yaml: every module of studies/ (the
declared study's schema, rules, store, stages, scores and answer, and the German study's report,
which reads its conditions, baselines and plan from its config) holds no string equal to a
position variant's name or a condition's name. Where records lie is the caller's: no module
outside tests/ (scripts included) holds a string starting with results/ or joins a segment to a
"results" folder (docs/declare-a-study.md); docstrings may name them.
"""

import ast
import functools
from pathlib import Path

import pytest

from studies.protocol import STUDY_DIR, load_study
from tests.conftest import POSITION_CONFIGS, ROOT
from tests.unit.test_layers import project_files

RESULTS = "results"
STUDIES = sorted(p.stem for p in (ROOT / "studies").glob("*.py") if p.stem != "__init__")


@functools.cache
def names() -> frozenset[str]:
    """Every variant of configs/position and every condition of configs/study."""
    found = {p.stem for p in POSITION_CONFIGS}
    for path in STUDY_DIR.glob("*.yaml"):
        study = load_study(path.stem)
        found |= set(study.conditions) | set(study.variants)
    return frozenset(found)


def string_literals(tree: ast.AST) -> set[str]:
    """Every str constant of a module (docstrings and f-strings' literal parts included)."""
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_every_module_of_studies_is_scanned():
    assert {"report", "buckets", "concat", "tuning", "records", "migration"} <= set(STUDIES)


@pytest.mark.parametrize("module", STUDIES)
def test_no_study_module_names_a_variant_or_condition(module):
    tree = ast.parse((ROOT / "studies" / f"{module}.py").read_text(encoding="utf-8"))
    named = string_literals(tree) & names()
    assert not named, f"studies/{module}.py names {sorted(named)}"


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string statements (docstrings, bare strings) of a module."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def is_results(node: ast.AST) -> bool:
    """Whether an expression is a "results" folder: the string, `<path> / "results"`, or
    `Path("results")`."""
    if isinstance(node, ast.Constant):
        return node.value == RESULTS
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return is_results(node.right)
    if isinstance(node, ast.Call) and len(node.args) == 1:
        return is_results(node.args[0])
    return False


def results_folders(tree: ast.AST) -> list[str]:
    """Where a module names a folder under results/: a string (not a docstring) starting with
    results/, a segment joined to a "results" folder, or Path("results", <segment>)."""
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if node.value.startswith(f"{RESULTS}/"):
                found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and is_results(node.left):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and len(node.args) > 1 and is_results(node.args[0]):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


LIBRARY = [str(p.relative_to(ROOT)) for p in project_files()]


@pytest.mark.parametrize("path", LIBRARY)
def test_no_module_names_a_folder_under_results(path):
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    found = results_folders(tree)
    assert not found, f"{path} names a folder under {RESULTS}/: {'; '.join(found)}"


@pytest.mark.parametrize(
    "source",
    [
        'STORE = ROOT / "results" / "archive" / "pe_study"',
        'STORE = Path("results") / "pe_multi30k"',
        'STORE = "results/pe_multi30k/final/runs"',
        'STORE = Path("results", "pe_multi30k")',
        'OUT = f"results/{name}/report"',
    ],
)
def test_the_scan_finds_a_folder_under_results(source):
    assert results_folders(ast.parse(source))


def test_the_scan_lets_the_stores_root_and_docstrings_be():
    source = '"""Records lie in results/<study>/."""\nparser.add_argument(default=Path("results"))'
    assert results_folders(ast.parse(source)) == []
    assert Path(ROOT / "tests").is_dir()  # tests (and docs) may name them: not scanned
