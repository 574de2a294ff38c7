"""No function or method outside tests/ is longer than 80 lines (from its def to its last
line), so each procedure reads in about one screen."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 80
SKIPPED = {"tests", "outputs", "multirun"}


def project_files(root: Path) -> list[Path]:
    """Every .py file under root outside tests/, outputs/, multirun/ and hidden folders (.venv)."""
    return sorted(
        path
        for path in root.rglob("*.py")
        if not any(part in SKIPPED or part.startswith(".") for part in path.relative_to(root).parts)
    )


def long_functions(path: Path, root: Path, limit: int = MAX_LINES) -> list[str]:
    """'file:line name length' for each function or method in path longer than limit lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name} "
        f"{node.end_lineno - node.lineno + 1}"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_the_scan_names_each_long_function_and_skips_tests_and_hidden_folders(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))  # 79 lines
    method_body = body.replace("\n", "\n    ")
    source = (
        f"def exactly_80():\n{body}\n\n\ndef eighty_one():\n{body}\n    return x0\n\n\n"
        f"class A:\n    async def method_81(self):\n    {method_body}\n        return 1\n"
    )
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(source)
    for folder in ("tests", ".venv", "outputs"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "long.py").write_text(f"def long():\n{body}\n{body}\n")
    files = project_files(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in files] == ["pkg/mod.py"]
    assert long_functions(files[0], tmp_path) == [
        "pkg/mod.py:83 eighty_one 81",
        "pkg/mod.py:167 method_81 81",
    ]
    assert long_functions(files[0], tmp_path, limit=81) == []


def test_no_function_outside_tests_is_longer_than_80_lines():
    found = [line for path in project_files(ROOT) for line in long_functions(path, ROOT)]
    assert not found, (
        f"{len(found)} functions over {MAX_LINES} lines (file:line name length):\n"
        + ("\n".join(found))
    )
