"""Layers point one way: each package imports only its own and lower layers (docs/layout.md).

Every .py of the project outside tests/ is parsed with ``ast``: no import climbs a layer or
crosses to a sibling of the same layer, no module imports train.py or evaluate.py, the modules'
import graph has no cycle, and an import inside a function (kept there only to defer a heavy
optional dependency) says so in a comment naming the dependency.
"""

import ast
import re
from pathlib import Path

import pytest
import tomllib

from tests.conftest import ROOT

# Bottom layer first; a package may import its own modules and those of lower layers only.
LAYERS = [
    {"common"},  # the error base and file writes: every layer may import them
    {"model", "data"},  # the network, its positions and search; corpora and batching
    {"runs"},  # run management: directory, lock, checkpoints, resume, preemption, device
    {"interop"},  # Hugging Face Marian and CTranslate2
    {"evaluation"},  # scoring, translation, comparison; evaluate.py's logic
    {"training"},  # loss, optimizer, the update; train.py's logic
    {"studies", "benchmarks"},  # the position-encoding study; timing and cost
    {"train", "evaluate", "scripts"},  # entry points: nothing imports them
]
ENTRY_MODULES = {"train", "evaluate"}
SKIPPED = {"tests", ".venv", "outputs", "multirun", ".cache", ".git", "build"}


def layer_of(top: str) -> int:
    """The index of the layer holding top-level package (or module) top."""
    for index, layer in enumerate(LAYERS):
        if top in layer:
            return index
    raise AssertionError(f"{top}/ is in no layer: add it to LAYERS and docs/layout.md")


def project_files(root: Path = ROOT) -> list[Path]:
    """Every .py of the project but the tests (and virtual environments, outputs, caches)."""
    return sorted(
        path
        for path in root.rglob("*.py")
        if not SKIPPED & set(path.relative_to(root).parts[:-1]) and path.parent.name != "tests"
    )


def module_name(path: Path, root: Path = ROOT) -> str:
    """data/corpus.py -> data.corpus; train.py -> train; runs/__init__.py -> runs."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def internal_tops(root: Path = ROOT) -> set[str]:
    """The project's top-level packages and modules."""
    return {module_name(path, root).split(".")[0] for path in project_files(root)}


def dependency_names(root: Path = ROOT) -> set[str]:
    """The distributions pyproject.toml names (dependencies and extras), lower-case."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    return {re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0].lower() for spec in specs}


def imported_modules(node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The dotted modules an import statement names (from x import y: x.y when y is a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def function_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements inside a function or method."""
    found = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            body = ast.Module(body=function.body, type_ignores=[])
            found += [n for n in ast.walk(body) if isinstance(n, ast.Import | ast.ImportFrom)]
    return found


def comment_near(lines: list[str], node: ast.stmt) -> str:
    """The comment on an import's first line or on the line above it."""
    near = lines[node.lineno - 2 : node.lineno] if node.lineno > 1 else lines[:1]
    return " ".join(line.split("#", 1)[1] for line in near if "#" in line).lower()


def violations(path: Path, root: Path, known: set[str], tops: set[str], deps: set[str]):
    """What path's imports break: a climb or a sibling, an entry point, an unexplained deferral."""
    source = path.read_text(encoding="utf-8")
    tree, lines, me = ast.parse(source), source.splitlines(), module_name(path, root)
    mine, found = me.split(".")[0], []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or getattr(node, "level", 0):
            continue
        for target in imported_modules(node, known):
            top = target.split(".")[0]
            if top in ENTRY_MODULES:
                found.append(f"line {node.lineno}: imports {target} (an entry point)")
            elif top in tops and top != mine and layer_of(top) >= layer_of(mine):
                found.append(f"line {node.lineno}: {mine}/ imports {target} (not a lower layer)")
    for node in function_imports(tree):
        comment = comment_near(lines, node)
        named = {t.split(".")[0] for t in imported_modules(node, known)} | deps
        if "deferred" not in comment or not any(name in comment for name in named):
            what = ", ".join(imported_modules(node, known))
            found.append(
                f"line {node.lineno}: imports {what} inside a function without a comment "
                "saying which dependency it defers"
            )
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a package's __init__ counted as the package)."""
    files = {module_name(path, root): path for path in project_files(root)}
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
                targets |= {t for t in imported_modules(node, set(files)) if t in files}
        graph[name] = targets - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a list of nodes (first = last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt, path + [nxt])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


FILES = project_files()
KNOWN = {module_name(path) for path in FILES}
TOPS = internal_tops()
DEPS = dependency_names()


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_and_deferrals_say_why(path):
    found = violations(path, ROOT, KNOWN, TOPS, DEPS)
    assert not found, "\n".join(found)


def test_the_module_graph_has_no_cycle():
    assert find_cycle(import_graph()) is None


def test_every_top_level_package_has_a_layer():
    for top in TOPS:
        layer_of(top)  # raises, naming the folder


def test_the_checker_catches_a_climb_a_sibling_an_entry_point_and_a_silent_deferral(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndependencies = ["torch"]\n'
        '[project.optional-dependencies]\nplots = ["matplotlib"]\n'
    )
    files = {
        "model/net.py": "from runs.state import X\nfrom data.corpus import Y\n",
        "runs/state.py": "from evaluate import evaluate\n",
        "data/corpus.py": (
            "def f():\n    import json\n\n"
            "def g():\n    # matplotlib deferred: optional\n    import matplotlib\n"
        ),
        "evaluate.py": "from runs.state import X\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    paths = project_files(tmp_path)
    known, tops = {module_name(p, tmp_path) for p in paths}, internal_tops(tmp_path)
    deps = dependency_names(tmp_path)
    found = {
        str(p.relative_to(tmp_path)): violations(p, tmp_path, known, tops, deps) for p in paths
    }
    assert len(found["model/net.py"]) == 2  # runs/ is above; data/ is a sibling
    assert "an entry point" in found["runs/state.py"][0]
    assert len(found["data/corpus.py"]) == 1 and "line 2" in found["data/corpus.py"][0]
    assert found["evaluate.py"] == []
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
