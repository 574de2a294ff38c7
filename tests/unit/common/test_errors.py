"""common/errors.py: one base class for user errors, one wrapper shared by every entry point.

In process: the wrapper turns a UserError (or an OSError naming a file) into one `error:` line
and exit status 1, and lets anything else through. On the command line, for each entry point:
a user error is one line with exit 1 and no traceback; a bug (a RuntimeError planted by a
prelude) keeps its traceback and is never printed as `error:`.
"""

import subprocess
import sys

import pytest

from common.errors import (
    DataError,
    MissingDependencyError,
    UserError,
    optional_module,
    report_user_errors,
)
from evaluation.compare import CompareError
from model.position import PositionRangeError
from runs.checkpoint import CheckpointError, CheckpointWriteError
from studies.extrapolation import StudyError
from tests.conftest import ROOT
from training.step import DivergenceError


@pytest.mark.parametrize(
    "error",
    [
        DataError,
        CheckpointError,
        CheckpointWriteError,
        PositionRangeError,
        CompareError,
        StudyError,
        DivergenceError,
    ],
)
def test_every_user_error_class_is_a_user_error_not_a_value_error(error):
    assert issubclass(error, UserError) and not issubclass(error, ValueError)


def entry(error: BaseException):
    @report_user_errors
    def main():
        raise error

    return main


def test_a_user_error_is_one_line_and_exit_1(capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as exited:
        entry(DataError("data.path=x: not found\n(second line)"))()
    assert exited.value.code == 1
    assert capsys.readouterr().err == "error: data.path=x: not found (second line)\n"


def test_an_os_error_of_a_user_path_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit):
        entry(FileNotFoundError(2, "No such file or directory", "refs.txt"))()
    assert "refs.txt" in capsys.readouterr().err


@pytest.mark.parametrize(
    "bug", [RuntimeError("a bug"), KeyError("k"), ValueError("v"), OSError(5, "no path")]
)
def test_anything_else_keeps_its_exception(bug, capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(type(bug)):
        entry(bug)()
    assert capsys.readouterr().err == ""


def test_hydra_full_error_reraises_user_errors(monkeypatch):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(DataError):
        entry(DataError("x"))()


def hide_module(monkeypatch, name: str) -> None:
    """Make `import name` (and of its submodules) fail as if name were not installed."""
    for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setitem(sys.modules, name, None)  # None: import raises ModuleNotFoundError


@pytest.mark.parametrize(
    "name, top", [("psutil", "psutil"), ("not_installed_xyz.specs", "not_installed_xyz")]
)
def test_a_missing_optional_module_is_one_line_naming_its_extra(name, top, capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    hide_module(monkeypatch, "psutil")
    with pytest.raises(SystemExit) as exited:
        report_user_errors(lambda: optional_module(name, "bench"))()
    assert exited.value.code == 1
    assert capsys.readouterr().err == (
        f"error: {top} is not installed (an optional dependency): pip install -e '.[bench]'\n"
    )
    assert issubclass(MissingDependencyError, UserError)


def test_an_installed_module_missing_a_dependency_keeps_its_traceback(tmp_path, monkeypatch):
    (tmp_path / "half_installed_xyz.py").write_text("import not_installed_xyz\n")
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(ModuleNotFoundError, match="not_installed_xyz"):
        optional_module("half_installed_xyz", "bench")
    assert optional_module("json", "bench") is sys.modules["json"]


def run(
    command: list[str], prelude: str = "", env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run an entry point from the checkout; prelude runs first, in the same process; env: more
    environment variables."""
    script, args = command[0], command[1:]
    launch = f"import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path({script!r}, "
    launch += "run_name='__main__')"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", f"{prelude}\n{launch}", script, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# (entry point and arguments that fail for a reason the user can fix, text of the error line)
USER_ERRORS = {
    "train": (["train.py", "data=text", "data.files.train.en=/absent.en"], "data.files.train.de"),
    "train_multi30k": (
        ["train.py", "experiment=multi30k_small", "data.path=/absent_multi30k"],
        "data.path=/absent_multi30k not found: expected train.jsonl",
    ),
    "evaluate": (["evaluate.py", "run_dir=/absent_run"], "/absent_run"),
    "compare": (["scripts/compare.py", "/absent_runs"], "/absent_runs"),
    "extrapolation": (["scripts/extrapolation.py", "--variants", "fourier"], "fourier"),
    "average_checkpoints": (["scripts/average_checkpoints.py", "--out", "x.pt"], "--run-dir"),
}
# a bug planted in a function each entry point calls (a RuntimeError no user can fix)
BUGS = {
    "train": ("data.corpus", "prepare_data", ["train.py", "hydra.run.dir={tmp}"]),
    "evaluate": ("runs.run", "load_run", ["evaluate.py", "run_dir=/tmp"]),
    "compare": ("evaluation.compare", "find_run_dirs", ["scripts/compare.py", "{tmp}"]),
    "average_checkpoints": (
        "runs.checkpoint",
        "step_checkpoints",
        ["scripts/average_checkpoints.py", "--run-dir", "{tmp}", "--out", "{tmp}/avg.pt"],
    ),
}


@pytest.mark.parametrize("name", USER_ERRORS)
def test_user_errors_on_the_command_line_are_one_line_and_exit_1(name, tmp_path):
    command, text = USER_ERRORS[name]
    train = name.startswith("train")
    result = run([*command, f"hydra.run.dir={tmp_path}"] if train else command)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert lines[-1].startswith("error: ") and text in lines[-1], result.stderr[-2000:]


def test_multi30k_without_the_hub_is_one_line_saying_to_pass_data_path(tmp_path):
    """The default hub id, offline (HF_*_OFFLINE: datasets fails at once, without retrying)."""
    offline = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    command = ["train.py", "experiment=multi30k_small", f"hydra.run.dir={tmp_path / 'run'}"]
    result = run(command, env=offline)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert lines[-1].startswith(
        "error: could not load Multi30k from the hub (bentrevett/multi30k): ConnectionError: "
    )
    assert "without the hub pass data.path=<folder>" in lines[-1]


@pytest.mark.parametrize("name", BUGS)
def test_a_bug_on_the_command_line_keeps_its_traceback(name, tmp_path):
    module, function, command = BUGS[name]
    command = [part.format(tmp=tmp_path) for part in command]
    (tmp_path / "checkpoints").mkdir()
    prelude = (
        f"import {module}\n"
        "def planted(*args, **kwargs):\n"
        "    raise RuntimeError('a planted bug')\n"
        f"{module}.{function} = planted"
    )
    result = run(command, prelude)
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "RuntimeError: a planted bug" in result.stderr
    assert "error: " not in result.stderr, result.stderr[-2000:]
