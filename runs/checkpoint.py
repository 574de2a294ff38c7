"""Checkpoints: atomic writes, code-free loading, rotation, averaging and resume.

A checkpoint is a dict of tensors and plain Python values (model and optimizer state, step,
RNG states, sampler state, the resolved config as a dict, the tokenizer's path and sha256), so
it loads with ``torch.load(weights_only=True)``: nothing in a checkpoint can run code. Each
file carries the sha256 of its content (``content_sha256``), verified on load: a damaged (bit-
flipped) file is refused like a truncated one. Checkpoints written before the checksum load as
they are, if they hold only the keys such checkpoints had (PRE_CHECKSUM_KEYS).
"""

import hashlib
import os
import re
import tempfile
from pathlib import Path

import torch

from common.errors import NO_SPACE, UserError, os_error_in
from common.files import left_by_dead_writers, writer_prefix
from runs.resume import setting_differences

STEP_FILE = re.compile(r"step_(\d+)\.pt$")
TRAINING_FILE = re.compile(r"last\.pt|best\.pt|step_\d+\.pt")  # the files training writes
# Where a run keeps its own copy of the tokenizer, relative to the run directory.
RUN_TOKENIZER = "tokenizer/spm.model"
TEMP_SUFFIX = ".tmp"
# The key under which a checkpoint keeps the sha256 of the rest of its content.
CHECKSUM = "checksum"
# Every top-level key a checkpoint written before the checksum (13cc861) could hold: the
# training state, what the run kept beside it, and what averaging and loading added. A file
# without the checksum that holds any other key (a newer key, or "checksum" with a flipped bit
# in its name) is damaged, not old.
PRE_CHECKSUM_KEYS = frozenset(
    {"model", "optimizer", "schedule", "sampler", "rng", "step", "best_ppl", "tokens_seen"}
    | {"config", "choices", "tokenizer", "precision", "world_size", "wall_seconds"}
    | {"averaged", "averaged_steps", "file"}
)


class CheckpointError(UserError):
    """A checkpoint is missing, unreadable or not what was asked for."""


class CheckpointWriteError(UserError, OSError):
    """A checkpoint could not be written (disk full, no permission); the previous one is kept."""


def _hash_into(digest, value) -> None:
    """Feed value (nested dicts, lists, tensors and plain values) into digest, in stored order."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"tensor {flat.dtype} {tuple(value.shape)}:".encode())
        digest.update(memoryview(flat.view(torch.uint8).numpy()))
    elif isinstance(value, dict):
        digest.update(f"dict {len(value)}:".encode())
        for key, item in value.items():
            _hash_into(digest, key)
            _hash_into(digest, item)
    elif isinstance(value, list | tuple):
        digest.update(f"{type(value).__name__} {len(value)}:".encode())
        for item in value:
            _hash_into(digest, item)
    else:
        digest.update(f"{type(value).__name__} {value!r};".encode())


def content_sha256(state: dict) -> str:
    """The sha256 of a checkpoint's content (every tensor's bytes, every value), checksum aside."""
    digest = hashlib.sha256()
    _hash_into(digest, {k: v for k, v in state.items() if k != CHECKSUM})
    return digest.hexdigest()


def save_checkpoint(state: dict, path: str | Path, checksum: str | None = None) -> None:
    """Write state and its content_sha256 to path atomically: a temporary file, fsync, rename.

    checksum: content_sha256(state), where the caller computed it already (to record it).

    A failed write (disk full, ...) removes the temporary file, leaves any previous file at path
    untouched and raises one CheckpointWriteError (an OSError) saying what to do.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in left_by_dead_writers(path, TEMP_SUFFIX):  # a killed writer's (probe 14-8)
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=writer_prefix(path), suffix=TEMP_SUFFIX)
    try:
        umask = os.umask(0o022)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would make it (mkstemp's is 0600)
        with os.fdopen(fd, "wb") as f:
            torch.save(state | {CHECKSUM: checksum or content_sha256(state)}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        cause = os_error_in(e)  # torch.save wraps a failed write in a RuntimeError
        if cause is None:
            raise
        advice = (
            "free space on that disk, lower trainer.keep_last or set run_dir to another disk"
            if cause.errno in NO_SPACE
            else "make the directory writable or set run_dir to another directory"
        )
        previous = f"the previous {path.name} is intact" if path.exists() else "nothing was written"
        raise CheckpointWriteError(
            cause.errno,
            f"{cause.strerror or cause} while writing checkpoint {path} ({previous}): {advice}",
        ) from e
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint on the CPU without unpickling arbitrary objects (file: where from).

    A checkpoint whose content does not match its stored sha256 (a damaged file) is refused.
    """
    path = Path(path)
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise CheckpointError(f"checkpoint {path} {what}: train first or pick another")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated file, foreign pickle, ...
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path} is unreadable or unsafe: {first_line}") from e
    if isinstance(state, dict):
        check_content(state, path)
        state["file"] = str(path.resolve())
    return state


def check_content(state: dict, path: Path) -> None:
    """Pop the checksum and verify it; CheckpointError for a mismatch or a damaged old file.

    A file without the checksum loads as written before checkpoints had one only if it holds
    no key such files never had (PRE_CHECKSUM_KEYS): a flipped bit in the checksum's own key
    name would otherwise pass a damaged file unverified.
    """
    stored = state.pop(CHECKSUM, None)
    if stored is None:
        unknown = sorted(str(key) for key in state if key not in PRE_CHECKSUM_KEYS)
        if unknown:
            raise CheckpointError(
                f"checkpoint {path} is corrupt: it has no {CHECKSUM!r} but holds keys that no "
                f"checkpoint without one had ({', '.join(map(repr, unknown))}): a damaged "
                "file; use another checkpoint"
            )
    elif stored != content_sha256(state):
        raise CheckpointError(
            f"checkpoint {path} is corrupt: its content does not match the sha256 it was "
            "saved with (a damaged file); use another checkpoint"
        )


def step_checkpoints(directory: str | Path) -> list[Path]:
    """The step_<n>.pt files in directory, oldest (lowest step) first."""
    directory = Path(directory)
    found = [
        (int(m.group(1)), p) for p in directory.glob("step_*.pt") if (m := STEP_FILE.search(p.name))
    ]
    return [p for _, p in sorted(found)]


def prune_checkpoints(directory: str | Path, keep: int) -> None:
    """Delete all but the newest keep step_<n>.pt files."""
    for path in step_checkpoints(directory)[:-keep] if keep > 0 else []:
        path.unlink(missing_ok=True)


def check_same_run(first: dict, first_path: Path, other: dict, other_path: Path) -> None:
    """CheckpointError unless two checkpoints share the tokenizer and every trajectory setting.

    Settings that leave the training as it was (runs.resume.KEEP_THE_MATH: a raised max_steps,
    logging, ...) may differ, as they do between the segments of one resumed run.
    """
    tokenizers = [str(s.get("tokenizer", {}).get("sha256"))[:12] for s in (first, other)]
    if tokenizers[0] != tokenizers[1]:
        raise CheckpointError(
            f"checkpoints {first_path} and {other_path} were trained with different tokenizers "
            f"(sha256 {tokenizers[0]} vs {tokenizers[1]}): average checkpoints of one run"
        )
    refused, _ = setting_differences(first.get("config") or {}, other.get("config") or {})
    if refused:
        raise CheckpointError(
            f"checkpoints {first_path} and {other_path} were trained with different settings "
            f"({'; '.join(refused)}): average checkpoints of one run"
        )


def weights_sha256(state: dict) -> str:
    """The sha256 of a checkpoint's model weights alone (one set of weights under any name)."""
    return content_sha256({"model": state["model"]})


def check_distinct_weights(paths: list[Path], digests: list[str]) -> None:
    """CheckpointError naming every input that holds weights an earlier input already holds."""
    first: dict[str, int] = {}
    repeats = [(i, first.setdefault(digest, i)) for i, digest in enumerate(digests)]
    repeats = [(paths[i], paths[earlier]) for i, earlier in repeats if i != earlier]
    if repeats:
        same = "; ".join(f"{path} holds the same weights as {earlier}" for path, earlier in repeats)
        raise CheckpointError(
            f"{same}: those weights would count more than once in the mean; average each once "
            f"(leave out {', '.join(str(path) for path, _ in repeats)})"
        )


def check_not_averaged(state: dict, path: Path) -> None:
    """CheckpointError if a checkpoint is itself an average, naming the step files it averaged."""
    if state.get("averaged") is None and state.get("averaged_steps") is None:
        return
    steps = ", ".join(str(step) for step in state.get("averaged_steps") or [])
    files = ", ".join(str(file) for file in state.get("averaged") or []) or "its step files"
    raise CheckpointError(
        f"{path} is itself an average (of steps {steps or 'unrecorded'}): averaging it again "
        f"would count its weights unevenly; pass the step checkpoints it averaged instead "
        f"({files})"
    )


def check_finite_weights(state: dict, what: str) -> None:
    """CheckpointError where a checkpoint's weights hold NaN or infinity (a diverged or damaged
    model that its checksum still vouches for): nothing is made from them."""
    bad = [
        name
        for name, tensor in state["model"].items()
        if torch.is_floating_point(tensor) and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        listed = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise CheckpointError(
            f"{what}: the weights hold NaN or infinity ({listed}): a diverged or damaged model; "
            "pick another checkpoint (checkpoint=best, a step_<n>.pt before it diverged)"
        )


def average_checkpoints(paths: list[Path], check=None) -> dict:
    """The first checkpoint with its model weights replaced by the mean over all of them.

    Refused (CheckpointError) for checkpoints of different runs (other tokenizers or settings),
    for weights holding NaN or infinity (the mean would too), for inputs holding the same
    weights (best.pt, last.pt, a copy: they would count twice) and for an input that is itself
    an average (its steps would count unevenly or twice).
    averaged_steps records the step of each input (the newest is the average's age),
    averaged_sha256 the weights_sha256 of each (all distinct). check(state, path): called with
    each input as loaded (runs.Run.check_written: a run averages the files it wrote).
    """
    if not paths:
        raise CheckpointError("no checkpoints to average")
    first = load_checkpoint(paths[0])
    if check:
        check(first, paths[0])
    check_not_averaged(first, paths[0])
    check_finite_weights(first, str(paths[0]))
    total = {k: v.double() for k, v in first["model"].items()}
    steps, digests = [first.get("step")], [weights_sha256(first)]
    for path in paths[1:]:
        state = load_checkpoint(path)
        if check:
            check(state, path)
        check_not_averaged(state, path)
        check_finite_weights(state, str(path))
        check_same_run(first, paths[0], state, path)
        steps.append(state.get("step"))
        digests.append(weights_sha256(state))
        for k, v in state["model"].items():
            total[k] += v.double()
    check_distinct_weights(paths, digests)
    first["model"] = {k: (v / len(paths)).to(first["model"][k].dtype) for k, v in total.items()}
    first["averaged"] = [str(p) for p in paths]
    first["averaged_steps"] = steps
    first["averaged_sha256"] = digests
    return first


def remove_temporary_files(directory: str | Path) -> list[Path]:
    """Delete the temporary files that a killed save_checkpoint left in directory: those whose
    writer (named in the file's name: common/files.writer_prefix) is gone from this machine,
    and those of saves from before names carried it. A live writer's (an averaging writing
    there: probe m-3), or another machine's, stay; the next save of its file clears it."""
    removed = []
    named = re.compile(rf"^\.(?P<file>.+?\.pt)\.[^@/]+@\d+\.[^.]+{re.escape(TEMP_SUFFIX)}$")
    older = re.compile(rf"^\.(?P<file>.+?\.pt)\.[^.@]+{re.escape(TEMP_SUFFIX)}$")
    for path in Path(directory).glob(f".*.pt.*{TEMP_SUFFIX}"):
        if found := named.match(path.name):
            gone = path in left_by_dead_writers(path.with_name(found["file"]), TEMP_SUFFIX)
        else:  # unnamed: a save of training's own files from before (not a user's .x.pt.y.tmp)
            found = older.match(path.name)
            gone = found is not None and bool(TRAINING_FILE.fullmatch(found["file"]))
        if gone:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _config_differences(stored: dict, wanted: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested config dicts, as 'key: a -> b'."""
    out = []
    for key in sorted(set(stored) | set(wanted), key=str):
        a, b = stored.get(key), wanted.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _config_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a} -> {b}")
    return out


def check_compatible(
    state: dict, path: Path, tokenizer_sha256: str | None = None, config: dict | None = None
) -> None:
    """Raise CheckpointError if a checkpoint was trained with another tokenizer or config."""
    fix = "resume with the settings it was trained with or set a new run_dir"
    trained_with = state.get("tokenizer", {}).get("sha256")
    if tokenizer_sha256 is not None and trained_with != tokenizer_sha256:
        raise CheckpointError(
            f"checkpoint {path} was trained with another tokenizer/vocabulary (sha256 "
            f"{str(trained_with)[:12]}, this data config gives {tokenizer_sha256[:12]}): {fix}"
        )
    stored = {key: state.get("config", {}).get(key) for key in config or {}}
    differences = _config_differences(stored, config or {})
    if differences:
        raise CheckpointError(
            f"checkpoint {path} was trained with another config ({'; '.join(differences)}): {fix}"
        )


def load_latest_checkpoint(
    directory: str | Path,
    warn=print,
    tokenizer_sha256: str | None = None,
    config: dict | None = None,
) -> dict | None:
    """The readable checkpoint with the highest step among last.pt and step_<n>.pt, or None.

    last.pt can be older than the newest step_<n>.pt (a run killed between the two saves), so
    the newest step file is preferred when its step is higher. An unreadable file is skipped
    with a warning naming it; if files exist but none is readable, CheckpointError (nothing is
    overwritten). With tokenizer_sha256 and config (top-level sections of the resolved config),
    a checkpoint trained with other ones is refused with CheckpointError.
    """
    directory = Path(directory)
    last_path = directory / "last.pt"
    candidates = [p for p in [last_path, *step_checkpoints(directory)] if p.is_file()]

    def read(path: Path) -> dict | None:
        try:
            return load_checkpoint(path)
        except CheckpointError as e:
            warn(f"{e}; falling back to an older checkpoint")
            return None

    found, found_path = (read(last_path), last_path) if last_path.is_file() else (None, None)
    for path in reversed(step_checkpoints(directory)):
        if found is not None and int(STEP_FILE.search(path.name).group(1)) <= found["step"]:
            break
        state = read(path)
        if state is not None and (found is None or state["step"] > found["step"]):
            found, found_path = state, path
            break
    if found is None and candidates:
        raise CheckpointError(
            f"no readable checkpoint in {directory}: move the directory away to start afresh"
        )
    if found is not None:
        check_compatible(found, found_path, tokenizer_sha256, config)
    return found
