"""pyproject.toml: `pip install -e .` installs the dependencies only, never a module of ours.

Hugging Face's `evaluate` (and any `model`, `data`, `runs`, `common` or `train`) must stay
importable beside this project: an editable install of a copy of the checkout into a temporary
prefix must leave none of our top-level names importable from outside the checkout.
"""

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = (
    "common", "model", "data", "runs", "interop", "evaluation", "training", "benchmarks", "scripts"
)  # fmt: skip
OUR_NAMES = ("evaluate", "train", *PACKAGES)
CHECK = """
import importlib, site, sys
site.addsitedir(sys.argv[1])  # processes the .pth files an editable install writes
for name in sys.argv[2:]:
    try:
        found = importlib.import_module(name)
    except ImportError:
        continue
    print(name, getattr(found, "__file__", None) or list(getattr(found, "__path__", [])))
"""


def test_an_editable_install_puts_none_of_our_modules_on_the_path(tmp_path):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md", "train.py", "evaluate.py"):
        shutil.copy(ROOT / name, checkout / name)
    for folder in PACKAGES:
        shutil.copytree(ROOT / folder, checkout / folder, ignore=shutil.ignore_patterns("__py*"))
    prefix = tmp_path / "prefix"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation"]
    install += ["--no-index", "--quiet", "--prefix", str(prefix), "-e", str(checkout)]
    result = subprocess.run(install, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    purelib = sysconfig.get_path("purelib", vars={"base": str(prefix)})
    assert list(Path(purelib).glob("*pe_nmt*")), (
        "the install wrote nothing: the test checks nothing"
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    check = [sys.executable, "-c", CHECK, purelib, *OUR_NAMES]
    found = subprocess.run(check, cwd=outside, capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr[-3000:]
    ours = [line for line in found.stdout.splitlines() if str(tmp_path) in line]
    assert not ours, f"importable from outside the checkout after pip install -e: {ours}"
