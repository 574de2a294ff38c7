"""Reliability: SIGKILLed runs resume bitwise; bad checkpoints, disk full, NaN losses, bad input.

The fault test runs the real command line (`python train.py ... hydra.run.dir=<dir>`), kills it
with SIGKILL at moments drawn from a seeded RNG, checks that every checkpoint on disk still loads
and resumes it the same way, until the run completes; the result must equal an uninterrupted run
bit for bit. The bad-input matrix checks each input error once in-process (fast) and a few of them
through the command line (exit status, one `error:` line, no traceback); `slow` runs all of them
through the command line.
"""

import errno
import io
import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pytest
import torch

import runs.checkpoint as checkpoint
from common.errors import UserError
from data.corpus import prepare_data
from data.toy import main as write_toy_corpus
from evaluation.evaluate import evaluate, translate_stdin
from runs.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, step_checkpoints
from tests.conftest import ROOT, compose_config
from training.launch import train

LOG_STEP = re.compile(r"step (\d+) loss \S+ nll \S+ lr (\S+)")
RESUMED = re.compile(r"resumed from step (\d+)")


def quick_overrides(cache_dir: Path, *extra: str) -> list[str]:
    """A 50k-parameter model on 300 toy pairs: an update (and its save) in well under 0.1 s."""
    return [
        "experiment=quickstart",
        f"cache_dir={cache_dir}",
        "data.corpus.train_size=300",
        "+data.corpus.validation_size=20",
        "+data.corpus.test_size=1",
        "+data.corpus.test_long_size=1",
        "data.vocab_size=200",
        "data.max_tokens=256",
        "model.d_model=32",
        "model.d_ff=64",
        "trainer.update_freq=1",  # one batch per update (the plan would split 256 in two)
        "trainer.max_minutes=null",
        "trainer.save_every_minutes=null",
        "trainer.save_every_steps=1",
        "trainer.num_threads=1",
        "trainer.eval_every=100000",
        "trainer.log_every=1",
        *extra,
    ]


def run_cli(
    script: str,
    overrides: list[str],
    prelude: str = "",
    full_error: bool = False,
    stdin: bytes | None = None,
) -> subprocess.CompletedProcess:
    """Run `python <script> <overrides>` from the project root; prelude runs first, in-process."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    if full_error:
        env["HYDRA_FULL_ERROR"] = "1"
    if prelude:
        launch = f"import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path({script!r}, "
        launch += "run_name='__main__')"
        command = [sys.executable, "-c", f"{prelude}\n{launch}", script, *overrides]
    else:
        command = [sys.executable, script, *overrides]
    result = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, input=stdin or b"", timeout=300
    )
    out, err = (b.decode("utf-8", errors="replace") for b in (result.stdout, result.stderr))
    return subprocess.CompletedProcess(result.args, result.returncode, out, err)


def assert_same_training_state(a: dict, b: dict) -> None:
    """Equal step, schedule, learning rate, and bitwise-equal model and optimizer tensors."""
    assert a["step"] == b["step"] == a["schedule"]["last_epoch"] == b["schedule"]["last_epoch"]
    assert a["optimizer"]["param_groups"][0]["lr"] == b["optimizer"]["param_groups"][0]["lr"]
    assert a["sampler"] == b["sampler"] and a["tokens_seen"] == b["tokens_seen"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for index, moments in a["optimizer"]["state"].items():
        for key, tensor in moments.items():
            assert torch.equal(tensor, b["optimizer"]["state"][index][key]), (index, key)


# --- SIGKILL at random moments ----------------------------------------------------------------


def newest_step(ckpt_dir: Path) -> int:
    """The highest step among the step_<n>.pt files (0 if none)."""
    steps = step_checkpoints(ckpt_dir)
    return int(checkpoint.STEP_FILE.search(steps[-1].name).group(1)) if steps else 0


def check_every_checkpoint_loads(ckpt_dir: Path) -> int:
    """Load every *.pt in ckpt_dir and return the highest step a resume can start from."""
    resumable = 0
    for path in sorted(ckpt_dir.glob("*.pt")):
        state = load_checkpoint(path)  # raises CheckpointError if a kill left it unreadable
        if path.name != "best.pt":
            resumable = max(resumable, state["step"])
    return resumable


def wait_for(condition, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    """Poll condition() every 20 ms until it holds; fail with the log if the process ends first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"training ended (exit {proc.returncode}):\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no progress in {timeout} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.02)


def train_with_kills(tmp_path: Path, cache_dir: Path, kills: int, steps: int, seed: int) -> None:
    """Kill a CLI run `kills` times at random moments, resume it each time, compare at the end."""
    overrides = quick_overrides(cache_dir, f"trainer.max_steps={steps}")
    prepare_data(compose_config(overrides).data, cache_dir, log=lambda _: None)  # warm the cache
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    rng, ckpt_dir, expected_resumes, started = random.Random(seed), killed / "checkpoints", [], []

    def start(run_dir: Path, log: Path) -> subprocess.Popen:
        with open(log, "w") as out:
            command = [sys.executable, "train.py", *overrides, f"hydra.run.dir={run_dir}"]
            proc = subprocess.Popen(
                command, cwd=ROOT, stdout=out, stderr=out, start_new_session=True
            )
        started.append(proc)
        return proc

    try:
        reference = start(straight, tmp_path / "straight.log")  # alongside the killed run
        for attempt in range(kills + 1):
            log = tmp_path / f"attempt{attempt}.log"
            proc = start(killed, log)
            if attempt == kills:
                assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
                break
            begin = newest_step(ckpt_dir)
            wait_for(lambda b=begin: newest_step(ckpt_dir) > b, proc, log)  # training, not starting
            # A random moment in the next 1.5 s, but before this attempt's share of the steps is
            # used up, so that every attempt is killed mid-training whatever the machine's speed.
            ceiling = max(begin + 1, steps * (attempt + 1) // (kills + 1))
            kill_at = time.monotonic() + rng.uniform(0.0, 1.5)
            while time.monotonic() < kill_at and newest_step(ckpt_dir) < ceiling:
                time.sleep(0.005)
            os.killpg(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=60) == -signal.SIGKILL, f"attempt {attempt} finished unkilled"
            assert not (killed / "metrics.json").exists()
            expected_resumes.append(check_every_checkpoint_loads(ckpt_dir))
        assert reference.wait(timeout=300) == 0, (tmp_path / "straight.log").read_text()[-3000:]
    finally:
        for proc in started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    logs = [(tmp_path / f"attempt{i}.log").read_text() for i in range(kills + 1)]
    resumed = [int(m) for text in logs for m in RESUMED.findall(text)]
    assert resumed == expected_resumes and 0 < resumed[0] <= resumed[-1] < steps
    reference_lr = dict(LOG_STEP.findall((tmp_path / "straight.log").read_text()))
    logged = [(step, lr) for text in logs for step, lr in LOG_STEP.findall(text)]
    assert {int(step) for step, _ in logged} == set(range(1, steps + 1))
    assert all(reference_lr[step] == lr for step, lr in logged)  # the schedule continues
    metrics = json.loads((killed / "metrics.json").read_text())
    assert metrics["complete"] is True and metrics["steps"] == steps
    assert not [p for p in ckpt_dir.iterdir() if p.name.endswith(".tmp")]  # killed saves' leftovers
    assert_same_training_state(
        load_checkpoint(straight / "checkpoints" / "last.pt"), load_checkpoint(ckpt_dir / "last.pt")
    )


def test_training_killed_three_times_at_random_moments_resumes_bitwise(tmp_path, cache_dir):
    train_with_kills(tmp_path, cache_dir, kills=3, steps=80, seed=0)


@pytest.mark.slow
def test_training_killed_ten_times_at_random_moments_resumes_bitwise(tmp_path, cache_dir):
    train_with_kills(tmp_path, cache_dir, kills=10, steps=240, seed=1)


# --- resuming from damaged or odd checkpoint directories (in-process) -------------------------


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory, cache_dir) -> Path:
    """A pristine run directory checkpointed at every one of 6 steps (copy it before changing)."""
    run_dir = tmp_path_factory.mktemp("six_steps")
    overrides = ["trainer.max_steps=6", f"run_dir={run_dir}"]
    train(compose_config(quick_overrides(cache_dir, *overrides)))
    return run_dir


@pytest.fixture(scope="module")
def ten_steps(tmp_path_factory, cache_dir) -> dict:
    """The last.pt of an uninterrupted 10-step run."""
    run_dir = tmp_path_factory.mktemp("ten_steps")
    overrides = ["trainer.max_steps=10", f"run_dir={run_dir}"]
    train(compose_config(quick_overrides(cache_dir, *overrides)))
    return load_checkpoint(run_dir / "checkpoints" / "last.pt")


def resume(run_dir: Path, cache_dir: Path, steps: int = 10, *extra: str) -> dict:
    """Continue the run in run_dir to `steps` steps, in-process."""
    overrides = [f"trainer.max_steps={steps}", f"run_dir={run_dir}"]
    return train(compose_config(quick_overrides(cache_dir, *overrides, *extra)))


def test_a_kill_between_step_file_and_last_pt_resumes_from_the_newer_step(
    tmp_path, cache_dir, six_steps, ten_steps, caplog
):
    run_dir = tmp_path / "run"
    shutil.copytree(six_steps, run_dir)
    ckpt_dir = run_dir / "checkpoints"
    shutil.copy(ckpt_dir / "step_5.pt", ckpt_dir / "last.pt")  # step_6.pt written, last.pt not
    half = (ckpt_dir / "step_6.pt").read_bytes()[:10_000]
    (ckpt_dir / ".last.pt.k1ll3d.tmp").write_bytes(half)  # the save a kill interrupted
    with caplog.at_level("INFO", logger="train"):
        metrics = resume(run_dir, cache_dir)
    assert "resumed from step 6" in caplog.text and metrics["steps"] == 10
    assert not (ckpt_dir / ".last.pt.k1ll3d.tmp").exists()
    assert_same_training_state(ten_steps, load_checkpoint(ckpt_dir / "last.pt"))


def test_a_truncated_last_pt_falls_back_with_a_warning_naming_it(
    tmp_path, cache_dir, six_steps, ten_steps, caplog
):
    run_dir = tmp_path / "run"
    shutil.copytree(six_steps, run_dir)
    ckpt_dir = run_dir / "checkpoints"
    last = ckpt_dir / "last.pt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    (ckpt_dir / "step_6.pt").write_bytes(os.urandom(4096))  # and the newest step file is junk
    with caplog.at_level("INFO", logger="train"):
        resume(run_dir, cache_dir)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(str(last) in w for w in warnings), warnings
    assert any(str(ckpt_dir / "step_6.pt") in w for w in warnings), warnings
    assert "resumed from step 5" in caplog.text
    assert_same_training_state(ten_steps, load_checkpoint(last))


def test_no_readable_checkpoint_is_a_clear_error_that_overwrites_nothing(
    tmp_path, cache_dir, six_steps
):
    run_dir = tmp_path / "run"
    shutil.copytree(six_steps, run_dir)
    ckpt_dir = run_dir / "checkpoints"
    for path in ckpt_dir.glob("*.pt"):
        path.write_bytes(path.read_bytes()[:100])
    before = {p.name: p.read_bytes() for p in ckpt_dir.iterdir()}
    with pytest.raises(CheckpointError, match="no readable checkpoint in .*move the directory"):
        resume(run_dir, cache_dir)
    assert {p.name: p.read_bytes() for p in ckpt_dir.iterdir()} == before
    assert (run_dir / "metrics.json").exists()  # the finished 6-step run's, left as it was


def test_resume_never_unpickles_arbitrary_objects(tmp_path, cache_dir, six_steps, caplog):
    marker = tmp_path / "code_ran"

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    run_dir = tmp_path / "run"
    shutil.copytree(six_steps, run_dir)
    last = run_dir / "checkpoints" / "last.pt"
    torch.save({"step": 99, "payload": Payload()}, last)  # a planted last.pt that runs code
    with caplog.at_level("INFO", logger="train"):
        resume(run_dir, cache_dir, 7)
    assert not marker.exists() and "resumed from step 6" in caplog.text
    assert any(str(last) in r.getMessage() and "unsafe" in r.getMessage() for r in caplog.records)


# --- disk full while saving (simulated) ----------------------------------------------------------


def fail_third_save(monkeypatch, how: str) -> None:
    """Make the third checkpoint save hit a full disk, by a failing write or a failing fsync."""
    saves = {"n": 0}
    real_save, real_fsync = torch.save, os.fsync

    def save(obj, f, *args, **kwargs):
        saves["n"] += 1
        if saves["n"] == 3 and how == "write":
            if not Path("/dev/full").exists():
                raise RuntimeError("writer failed") from OSError(errno.ENOSPC, "No space left")
            with open("/dev/full", "wb") as full:  # the kernel's ENOSPC, through torch's writer
                real_save(obj, full, *args, **kwargs)
        return real_save(obj, f, *args, **kwargs)

    def fsync(fd):
        if saves["n"] == 3 and how == "fsync" and stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(checkpoint.torch, "save", save)
    monkeypatch.setattr(checkpoint.os, "fsync", fsync)


@pytest.mark.parametrize("how", ["write", "fsync"])
def test_disk_full_while_saving_keeps_the_previous_checkpoint(tmp_path, monkeypatch, how):
    ckpt_dir = tmp_path / "checkpoints"
    fail_third_save(monkeypatch, how)
    save_checkpoint({"step": 1, "w": torch.ones(3)}, ckpt_dir / "last.pt")
    save_checkpoint({"step": 1, "w": torch.ones(3)}, ckpt_dir / "step_1.pt")
    with pytest.raises(OSError, match="No space left on device.*last.pt is intact.*free space"):
        save_checkpoint({"step": 2, "w": torch.zeros(3)}, ckpt_dir / "last.pt")
    assert load_checkpoint(ckpt_dir / "last.pt")["step"] == 1
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["last.pt", "step_1.pt"]  # no temp file


def test_disk_full_during_training_is_one_error_and_keeps_the_last_checkpoint(
    tmp_path, cache_dir, monkeypatch
):
    fail_third_save(monkeypatch, "write")  # saves: step_1.pt, last.pt, then step_2.pt fails
    with pytest.raises(OSError, match="No space left on device"):
        resume(tmp_path, cache_dir, 4)
    ckpt_dir = tmp_path / "checkpoints"
    assert load_checkpoint(ckpt_dir / "last.pt")["step"] == 1
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["last.pt", "step_1.pt"]
    assert not (tmp_path / "metrics.json").exists()


# --- non-finite losses ---------------------------------------------------------------------------


def poison_losses(monkeypatch, bad_calls: range) -> None:
    """Make the training loss NaN on the given (0-based) calls of label_smoothed_loss."""
    import training.loss

    real, calls = training.loss.label_smoothed_loss, {"n": 0}

    def loss(*args, **kwargs):
        value, nll = real(*args, **kwargs)
        calls["n"] += 1
        return (value * float("nan"), nll) if calls["n"] - 1 in bad_calls else (value, nll)

    monkeypatch.setattr(training.loss, "label_smoothed_loss", loss)


def test_non_finite_updates_are_skipped_and_counted(tmp_path, cache_dir, monkeypatch, caplog):
    poison_losses(monkeypatch, range(3, 6))
    with caplog.at_level("WARNING", logger="train"):
        metrics = resume(tmp_path, cache_dir, 8)
    skipped = [r.getMessage() for r in caplog.records if "update skipped" in r.getMessage()]
    assert [m.split("(")[1] for m in skipped] == [f"{i} in a row)" for i in (1, 2, 3)]
    assert all(m.startswith("step 4:") for m in skipped)  # no step counted while skipping
    state = load_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert metrics["steps"] == state["step"] == state["schedule"]["last_epoch"] == 8
    assert all(torch.isfinite(t).all() for t in state["model"].values())


def test_ten_non_finite_updates_in_a_row_stop_with_the_last_good_checkpoint(
    tmp_path, cache_dir, monkeypatch
):
    resume(tmp_path, cache_dir, 4)  # a complete run, then extended with poisoned losses
    ckpt_dir = tmp_path / "checkpoints"
    before = {p.name: p.read_bytes() for p in ckpt_dir.iterdir()}
    poison_losses(monkeypatch, range(0, 10**6))
    with pytest.raises(FloatingPointError, match="10 non-finite updates in a row.*optim.lr_scale"):
        resume(tmp_path, cache_dir, 20)
    assert {p.name: p.read_bytes() for p in ckpt_dir.iterdir()} == before
    state = load_checkpoint(ckpt_dir / "last.pt")
    assert state["step"] == 4 and all(torch.isfinite(t).all() for t in state["model"].values())
    assert not (tmp_path / "metrics.json").exists()  # the 4-step metrics no longer describe it


# --- the bad-input matrix ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> Path:
    """Corpora (good and broken), a wrong-schema dataset and a 2-step run, under one folder."""
    root = tmp_path_factory.mktemp("bad_inputs")
    write_toy_corpus(
        root / "corpus", train_size=200, validation_size=20, test_size=20, test_long_size=1
    )
    train_de = (root / "corpus" / "train.de").read_text(encoding="utf-8").splitlines(True)
    (root / "short.de").write_text("".join(train_de[:-3]), encoding="utf-8")
    train_en = (root / "corpus" / "train.en").read_bytes()
    (root / "latin1.en").write_bytes(train_en + "caf\xe9\n".encode("latin-1"))
    (root / "latin1.de").write_text("".join(train_de) + "Kaffee\n", encoding="utf-8")
    (root / "schema").mkdir()
    datasets.Dataset.from_dict({"id": ["1", "2"], "text": ["a b", "c d"]}).to_json(
        root / "schema" / "train.jsonl"
    )
    (root / "empty_run").mkdir()
    words = "the small dog sees a red cat near the house "
    (root / "long_line.en").write_text((words * (100_000 // len(words) + 1))[:100_000] + "\n")
    (root / "blank.en").write_text("\n  \n\t\n", encoding="utf-8")
    (root / "three.en").write_text("the dog\na cat\nthe house\n", encoding="utf-8")
    (root / "not_a_folder").write_text("a file where a run directory should go\n")
    overrides = [*text_overrides(root), f"run_dir={root / 'run'}", "trainer.max_steps=2"]
    train(compose_config(overrides))
    state = load_checkpoint(root / "run" / "checkpoints" / "last.pt")
    state["tokenizer"]["sha256"] = "0" * 64
    save_checkpoint(state, root / "foreign_tokenizer.pt")
    return root


def text_overrides(root: Path, **files: Path) -> list[str]:
    """A tiny model on the plain-text corpus in root/corpus, with some files replaced."""
    paths = {
        f"{split}.{lang}": root / "corpus" / f"{split}.{lang}"
        for split in ("train", "validation", "test")
        for lang in ("en", "de")
    }
    paths.update({k.replace("_", "."): v for k, v in files.items()})
    return [
        "data=text",
        *[f"data.files.{k}={v}" for k, v in paths.items()],
        "model=tiny",
        f"cache_dir={root / 'cache'}",
        "data.vocab_size=100",
        "trainer.num_threads=1",
        "trainer.effective_tokens=4096",
        "trainer.save_every_minutes=null",
    ]


def copy_of_run(root: Path, name: str) -> Path:
    """A fresh copy of the 2-step run directory, without its metrics.json."""
    target = root / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(root / "run", target)
    (target / "metrics.json").unlink()
    return target


# A CUDA device this machine lacks: cuda on a CPU-only machine, else one past the last GPU.
MISSING_CUDA = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"
# Each case: (entry point, overrides given the fixture folder, texts the one line must contain).
CASES = {
    "missing data path": (
        "train",
        lambda r: text_overrides(r, train_en=r / "absent.en"),
        ["absent.en", "not found"],
    ),
    "unequal line counts": (
        "train",
        lambda r: text_overrides(r, train_de=r / "short.de"),
        ["short.de", "197", "line-aligned"],
    ),
    "invalid UTF-8": (
        "train",
        lambda r: text_overrides(r, train_en=r / "latin1.en", train_de=r / "latin1.de"),
        ["latin1.en", "line 201", "UTF-8"],
    ),
    "empty corpus after cleaning": (
        "train",
        lambda r: [*text_overrides(r), "data.max_len=2"],
        ["empty after cleaning", "data.max_len"],
    ),
    "unknown language key": (
        "train",
        lambda r: [*text_overrides(r), "data.src_lang=fr"],
        ["'fr'", "data.src_lang"],
    ),
    "wrong dataset schema": (
        "train",
        lambda r: [
            *text_overrides(r),
            "data.corpus._target_=data.corpus.load_hub",
            f"+data.corpus.path={r / 'schema'}",
            f"+data.corpus.cache_dir={r / 'hub_cache'}",
            "~data.corpus.files",
            "~data.files",  # read by nothing now: refused as such (probe 16-23)
        ],
        ["columns {id,text}", "data.src_lang"],
    ),
    "vocab_size too large for the corpus": (
        "train",
        lambda r: [*text_overrides(r), "data.vocab_size=5000"],
        ["5000", "data.vocab_size"],
    ),
    "max_tokens below the longest sentence": (
        "train",
        lambda r: [*text_overrides(r), "data.max_tokens=8"],
        ["max_tokens=8", "data.max_tokens"],
    ),
    "unknown position variant": (
        "train",
        lambda r: [*text_overrides(r), "position=fourier"],
        ["position/fourier", "sinusoidal"],  # Hydra's own message, listing the valid options
    ),
    "d_model not divisible by heads": (
        "train",
        lambda r: [*text_overrides(r), "model.d_model=30"],
        ["model.d_model=30", "model.n_heads=4"],
    ),
    "odd d_model with sinusoidal": (
        "train",
        lambda r: [*text_overrides(r), "model.d_model=33", "model.n_heads=3"],
        ["position=sinusoidal", "model.d_model", "33"],
    ),
    "learned table overflow": (
        "train",
        lambda r: [*text_overrides(r), "position=learned", "model.max_positions=8"],
        ["model.max_positions=8", "learned"],
    ),
    "resume with another vocabulary": (
        "train",
        lambda r: [*text_overrides(r), "data.vocab_size=120", f"run_dir={copy_of_run(r, 'vocab')}"],
        ["data.vocab_size: 100 -> 120", "last.pt", "run_dir"],
    ),
    "resume with another model": (
        "train",
        lambda r: [*text_overrides(r), "model.d_ff=256", f"run_dir={copy_of_run(r, 'model')}"],
        ["model.d_ff: 512 -> 256", "last.pt", "run_dir"],
    ),
    "missing checkpoint": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", f"checkpoint={r / 'absent.pt'}"],
        ["absent.pt", "does not exist"],
    ),
    "checkpoint from another tokenizer": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", f"checkpoint={r / 'foreign_tokenizer.pt'}"],
        ["tokenizer", "sha256"],
    ),
    "run directory without checkpoints": (
        "evaluate",
        lambda r: [f"run_dir={r / 'empty_run'}"],
        ["empty_run", "checkpoints"],
    ),
    "disk full while saving": (
        "train",
        lambda r: [
            *text_overrides(r),
            *("model.d_model=32", "model.d_ff=64", "trainer.save_every_steps=1"),
            "trainer.max_steps=3",
        ],
        ["No space left on device", "last.pt is intact", "free space"],
    ),
    # training settings, resumes and run directories (issue: tracebacks, accepted nonsense)
    "missing validation split": (
        "train",
        lambda r: [*text_overrides(r), "~data.files.validation"],
        ["no 'validation' split", "found train, test", "data.corpus"],
    ),
    "warmup not positive": (
        "train",
        lambda r: [*text_overrides(r), "optim.warmup=0"],
        ["optim.warmup=0", "whole number >= 1"],
    ),
    "eval_every zero": (
        "train",
        lambda r: [*text_overrides(r), "trainer.eval_every=0"],
        ["trainer.eval_every=0", "whole number >= 1"],
    ),
    "log_every zero": (
        "train",
        lambda r: [*text_overrides(r), "trainer.log_every=0"],
        ["trainer.log_every=0", "whole number >= 1"],
    ),
    "negative update_freq": (
        "train",
        lambda r: [*text_overrides(r), "trainer.update_freq=-1"],
        ["trainer.update_freq=-1", "or null"],
    ),
    "negative max_steps": (
        "train",
        lambda r: [*text_overrides(r), "trainer.max_steps=-1"],
        ["trainer.max_steps=-1", "whole number >= 1"],
    ),
    "training on an unknown device": (
        "train",
        lambda r: [*text_overrides(r), "trainer.device=foo"],
        ["trainer.device=foo", "not a device name"],
    ),
    "training on CUDA without CUDA": (
        "train",
        lambda r: [*text_overrides(r), f"trainer.device={MISSING_CUDA}"],
        [f"trainer.device={MISSING_CUDA}", "usable CUDA device", "trainer.device=cpu"],
    ),
    "unwritable run directory": (
        "train",
        lambda r: [*text_overrides(r), f"run_dir={r / 'not_a_folder' / 'run'}"],
        ["not_a_folder/run", "cannot write there", "writable directory"],
    ),
    "resume with another seed": (
        "train",
        lambda r: [*text_overrides(r), "seed=2", f"run_dir={copy_of_run(r, 'seed')}"],
        ["seed: 1 -> 2", "last.pt", "run_dir"],
    ),
    "resume with another schedule": (
        "train",
        lambda r: [
            *text_overrides(r),
            *("optim.warmup=10", "optim.lr_scale=50"),
            f"run_dir={copy_of_run(r, 'schedule')}",
        ],
        ["optim.lr_scale: 1.0 -> 50", "optim.warmup: 4000 -> 10", "last.pt"],
    ),
    "resume with another max_len": (
        "train",
        lambda r: [*text_overrides(r), "data.max_len=64", f"run_dir={copy_of_run(r, 'max_len')}"],
        ["data.max_len: 256 -> 64", "last.pt"],
    ),
    "resume below the checkpoint's step": (
        "train",
        lambda r: [*text_overrides(r), "trainer.max_steps=1", f"run_dir={copy_of_run(r, 'low')}"],
        ["trainer.max_steps: 1 is below the checkpoint's step 2", "last.pt"],
    ),
    # evaluation options and inputs (issue: raw tracebacks, accepted nonsense, hangs)
    "evaluate without run_dir": ("evaluate", lambda r: [], ["run_dir is not set", "run_dir="]),
    "lenpen too large": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", "lenpen=1e9"],
        ["lenpen=1000000000.0", "from 0 to 10"],
    ),
    "negative lenpen": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", "lenpen=-1"],
        ["lenpen=-1", "from 0 to 10"],
    ),
    "nan lenpen": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", "lenpen=nan"],
        ["lenpen=nan", "pass a finite number"],
    ),
    "max_len_b far too large": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", "max_len_b=100000"],
        ["max_len_b=100000", "max_input_len=1024"],
    ),
    "min_len above max_len_b": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", "min_len=60"],
        ["min_len=60", "max_len_b=50"],
    ),
    "a 100k-character source line": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", f"src_file={r / 'long_line.en'}"],
        ["line 1 of", "long_line.en", "max_input_len=1024", "long_inputs=skip"],
    ),
    "blank-only source file": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", f"src_file={r / 'blank.en'}"],
        ["src_file=", "blank.en", "no non-blank line"],
    ),
    "blank-only reference file": (
        "evaluate",
        lambda r: [
            f"run_dir={r / 'run'}",
            f"src_file={r / 'three.en'}",
            f"ref_file={r / 'blank.en'}",
        ],
        ["ref_file=", "blank.en", "no non-blank line"],
    ),
    "evaluation on an unknown device": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", "device=foo"],
        ["device=foo", "not a device name"],
    ),
    "evaluation on CUDA without CUDA": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", f"device={MISSING_CUDA}"],
        [f"device={MISSING_CUDA}", "usable CUDA device", "device=cpu"],
    ),
    "non-UTF-8 stdin with translate=true": (
        "evaluate",
        lambda r: [f"run_dir={r / 'run'}", "translate=true"],
        ["stdin", "invalid UTF-8 on line 2", "UTF-8"],
    ),
}
# What the stdin cases read.
STDIN = {"non-UTF-8 stdin with translate=true": "the dog\ncaf\xe9\n".encode("latin-1")}
FULL_DISK = """
import errno, torch
real_save, calls = torch.save, []
def save(obj, f, *args, **kwargs):
    calls.append(1)
    if len(calls) == 4:
        raise RuntimeError("unexpected pos") from OSError(errno.ENOSPC, "No space left on device")
    return real_save(obj, f, *args, **kwargs)
torch.save = save
"""
CLI_CASES = [
    "missing data path",
    "unknown position variant",
    "run directory without checkpoints",
    "disk full while saving",
    "evaluate without run_dir",
    "a 100k-character source line",
    "non-UTF-8 stdin with translate=true",
    "resume with another seed",
    "unwritable run directory",
    "negative max_steps",
]


def run_dir_of(overrides: list[str], fallback: Path) -> Path:
    """The run_dir an override list sets, else fallback."""
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("run_dir=")]
    return Path(given[-1]) if given else fallback


def assert_no_result_written(run_dir: Path, entry: str) -> None:
    """No metrics.json (training) or evaluation output (evaluation) in run_dir."""
    if entry == "train":
        assert not (run_dir / "metrics.json").exists()
    assert not [p.name for p in (run_dir / "eval").glob("*") if p.suffix in (".json", ".hyp")]


@pytest.mark.parametrize("case", [c for c in CASES if c != "disk full while saving"])
def test_bad_input_is_one_clear_error_in_process(case, bad, tmp_path, monkeypatch):
    entry, make_overrides, expected = CASES[case]
    overrides = make_overrides(bad)
    run_dir = run_dir_of(overrides, tmp_path)
    if entry == "train":
        if not any(o.startswith("run_dir=") for o in overrides):
            overrides.append(f"run_dir={run_dir}")
        with pytest.raises(Exception) as raised:
            train(compose_config(overrides))
    else:
        cfg = compose_config(overrides, config_name="evaluate")
        if case in STDIN:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(STDIN[case])))
        with pytest.raises(Exception) as raised:
            translate_stdin(cfg) if cfg.translate else evaluate(cfg)
    message = str(raised.value)
    if case != "unknown position variant":  # Hydra's error, raised while composing the config
        assert isinstance(raised.value, UserError | OSError), repr(raised.value)
        assert "\n" not in message, message
    for text in expected:
        assert text in message, message
    assert_no_result_written(run_dir, entry)


def check_cli_case(case: str, bad: Path, tmp_path: Path) -> None:
    """Run one case through the command line and check its exit status and last stderr line."""
    entry, make_overrides, expected = CASES[case]
    overrides = make_overrides(bad)
    run_dir = run_dir_of(overrides, tmp_path / "run")
    if entry == "train":
        overrides = [o for o in overrides if not o.startswith("run_dir=")]
        overrides.append(f"hydra.run.dir={run_dir}")
    prelude = FULL_DISK if case == "disk full while saving" else ""
    result = run_cli(f"{entry}.py", overrides, prelude=prelude, stdin=STDIN.get(case))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode != 0 and lines, result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[-1].startswith("error: "), result.stderr[-3000:]  # Hydra's errors too
    detail = lines[-1]
    for text in expected:
        assert text in detail, result.stderr[-3000:]
    assert_no_result_written(run_dir, entry)
    if case == "disk full while saving":
        assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["step"] == 1


@pytest.mark.parametrize("case", CLI_CASES)
def test_bad_input_on_the_command_line_is_one_line_and_exit_1(case, bad, tmp_path):
    check_cli_case(case, bad, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c not in CLI_CASES])
def test_every_bad_input_on_the_command_line_is_one_line_and_exit_1(case, bad, tmp_path):
    check_cli_case(case, bad, tmp_path)


@pytest.mark.slow
def test_hydra_full_error_shows_the_traceback(bad, tmp_path):
    overrides = [*CASES["missing data path"][1](bad), f"hydra.run.dir={tmp_path}"]
    result = run_cli("train.py", overrides, full_error=True)
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "DataError" in result.stderr
    assert "\nerror: " not in result.stderr


def test_a_genuine_bug_keeps_its_traceback(bad, tmp_path):
    bug = "import runs.settings as m\nm.check_training_settings = lambda cfg, *more: 1 / 0"
    overrides = [*text_overrides(bad), f"hydra.run.dir={tmp_path / 'run'}"]
    result = run_cli("train.py", overrides, prelude=bug)
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr
    assert "\nerror: " not in f"\n{result.stderr}"
