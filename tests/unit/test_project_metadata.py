"""pyproject.toml declares what the code imports, each optional import names its extra, and
CITATION.cff and LICENSE agree with pyproject.toml.

Every .py of the checkout (tests included) is parsed with ``ast``. Each third-party module it
imports (not the standard library, not the project's own) belongs to a distribution
(importlib.metadata) that pyproject.toml declares: in ``dependencies`` where the project's code
imports it at module level (what ``pip install -e .`` must make importable), else there or in
an extra. Each ``optional_module(name, extra)`` call outside the tests names an extra that
declares name's distribution, so its `pip install` line installs it. CITATION.cff names
pyproject.toml's version and license, and the license file is the MIT license.
"""

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import tomllib
import yaml

from tests.conftest import ROOT
from tests.unit.test_layers import internal_tops, project_files

SKIPPED = {".venv", "outputs", "multirun", ".cache", ".git", "build"}
OWN = internal_tops() | {"tests"}
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DISTRIBUTIONS = packages_distributions()


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them: lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    """The distribution a requirement names: "omegaconf>=2.3" -> "omegaconf"."""
    return canonical(re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0])


REQUIRED = {requirement_name(spec) for spec in PROJECT["dependencies"]}
EXTRAS = {
    extra: {requirement_name(spec) for spec in specs}
    for extra, specs in PROJECT["optional-dependencies"].items()
}
DECLARED = REQUIRED.union(*EXTRAS.values())


def distributions_of(module: str) -> set[str]:
    """The distributions that install top-level module (its own name where none is installed)."""
    return {canonical(name) for name in DISTRIBUTIONS.get(module, [module])}


def python_files(root: Path = ROOT) -> list[Path]:
    """Every .py of the checkout, the tests included."""
    return sorted(p for p in root.rglob("*.py") if not SKIPPED & set(p.relative_to(root).parts))


def imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(top-level module, imported at module level) for each absolute import in tree."""
    in_functions = set()
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            in_functions |= {id(node) for node in ast.walk(function)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module]
        else:
            continue
        found += [(name.split(".")[0], id(node) not in in_functions) for name in names]
    return found


def third_party(module: str) -> bool:
    """Neither the standard library nor the project's own."""
    return module not in sys.stdlib_module_names and module not in OWN


def undeclared(path: Path, root: Path = ROOT) -> list[str]:
    """What path imports that pyproject.toml does not declare (where it must)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_test = path.relative_to(root).parts[0] == "tests"
    found = []
    for module, at_module_level in imports(tree):
        if not third_party(module):
            continue
        needed = REQUIRED if at_module_level and not is_test else DECLARED
        if not distributions_of(module) & needed:
            where = "dependencies" if needed is REQUIRED else "dependencies or an extra"
            found.append(f"{path.relative_to(root)} imports {module}: declare it in {where}")
    return found


def optional_calls(tree: ast.Module) -> list[tuple[str, str]]:
    """(module, extra) of each optional_module("module", "extra") call in tree."""
    return [
        (node.args[0].value, node.args[1].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "optional_module"
        and len(node.args) == 2
        and all(isinstance(arg, ast.Constant) for arg in node.args)
    ]


def test_every_third_party_import_is_declared():
    found = [line for path in python_files() for line in undeclared(path)]
    assert not found, "\n".join(found)


def test_each_optional_module_names_an_extra_that_installs_it():
    calls = []
    for path in project_files():  # the tests call it on made-up names
        calls += optional_calls(ast.parse(path.read_text(encoding="utf-8")))
    assert len(calls) >= 5, "no optional_module calls found: the test checks nothing"
    wrong = [
        f"optional_module({module!r}, {extra!r})"
        for module, extra in calls
        if not distributions_of(module.split(".")[0]) & EXTRAS.get(extra, set())
    ]
    assert not wrong, f"the extra does not exist or does not declare the module: {wrong}"


def test_the_checks_catch_undeclared_imports_and_read_optional_calls(tmp_path):
    files = {
        "benchmarks/top.py": "import os\nimport numpy\nimport psutil\n",  # psutil: an extra's
        "benchmarks/deferred.py": "def f():\n    import psutil\n    import no_such_dist_xyz\n",
        "tests/test_x.py": "import psutil\nimport yaml\nfrom common.errors import UserError\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    found = [line for name in files for line in undeclared(tmp_path / name, tmp_path)]
    assert found == [
        "benchmarks/top.py imports psutil: declare it in dependencies",
        "benchmarks/deferred.py imports no_such_dist_xyz: declare it in dependencies or an extra",
    ]
    assert distributions_of("yaml") == {"pyyaml"}
    assert optional_calls(ast.parse('optional_module("a.b", "x")\nf("c", "y")')) == [("a.b", "x")]


def test_citation_cff_names_this_version_and_license():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0"
    assert citation["version"] == PROJECT["version"], "bump CITATION.cff's version too"
    assert citation["license"] == PROJECT["license"] == "MIT"
    assert (ROOT / PROJECT["license-files"][0]).read_text().startswith("MIT License\n")
    assert "1706.03762" in str(citation["references"])  # Vaswani et al. 2017


POSIX_ONLY = {"resource", "fcntl", "termios", "pwd", "grp"}  # not importable on Windows
LIBRARY = ("common", "data", "model", "runs", "training", "evaluation", "interop", "studies")


def test_the_library_imports_no_posix_only_module_at_module_level():
    """train.py, evaluate.py and the library import on every OS (was: resource, fcntl)."""
    found = []
    for path in sorted(p for top in LIBRARY for p in (ROOT / top).rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:  # module level only
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n in POSIX_ONLY]
    assert not found, found
