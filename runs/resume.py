"""What a resumed run may change: only settings that leave the training trajectory as it was.

A resume continues the checkpoint's run, so every setting that changes a number of the training
(seed, optimizer, data and its batching and cleaning, label smoothing, model, position encoding,
effective batch, precision) must equal the checkpoint's; a difference is refused, each key named
(old -> new). Everything else (the keys below) may change and is recorded with the segment.
Keys a checkpoint does not know yet (added to the configs since) count as differences unless
listed here: a resume is refused rather than silently continued with new behaviour.

Of the keys that may change, CHANGE_THE_ROUNDING (threads, device, compilation) keep the
trajectory but not its floating-point rounding: a resume that changes one is allowed with a
warning, and the weights are then no longer bitwise those of an uninterrupted run.
"""

from collections.abc import Mapping

from common.errors import UserError
from data.corpus import loads_multi30k

# Where files go, how often the run logs, saves and validates, threads, device and compilation,
# and when it stops (a stop below the checkpoint's step is refused by the trainer).
# trainer.precision is compared as the precision it resolved to (bf16/fp16/fp32), not its name.
KEEP_THE_MATH = (
    "run_dir",
    "cache_dir",
    "data.num_proc",
    "trainer.device",
    "trainer.precision",
    "trainer.compile",
    "trainer.num_threads",
    "trainer.dist_timeout_minutes",
    "trainer.max_steps",
    "trainer.max_epochs",
    "trainer.max_minutes",
    "trainer.eval_every",
    "trainer.eval_bleu_sentences",
    "trainer.log_every",
    "trainer.save_every_steps",
    "trainer.save_every_minutes",
    "trainer.keep_last",
    "trainer.evaluate_at_end",
    "trainer.start_over",
)
# Allowed changes that alter the order of floating-point sums (CPU threads split reductions
# differently; another device or a compiled graph rounds differently): bitwise resume holds only
# where these are as they were.
CHANGE_THE_ROUNDING = ("trainer.device", "trainer.compile", "trainer.num_threads")


def changes_the_rounding(change: str) -> bool:
    """Whether an allowed change ('key: old -> new') is one of CHANGE_THE_ROUNDING's."""
    return change.split(":", 1)[0] in CHANGE_THE_ROUNDING


def flatten(node: Mapping, prefix: str = "") -> dict[str, object]:
    """{dotted key: leaf value} of a nested config dict."""
    out = {}
    for key, value in node.items():
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def setting_differences(stored: Mapping, wanted: Mapping) -> tuple[list[str], list[str]]:
    """(refused, allowed): 'key: old -> new' for each leaf that differs, split by KEEP_THE_MATH.

    Where both load Multi30k, data.path and data.corpus (its location: the hub, a folder in the
    hub's layout or as text) keep the math too: the sources hold the same pairs in one order.
    """
    old, new = flatten(stored), flatten(wanted)
    both = all(loads_multi30k(config.get("data")) for config in (stored, wanted))
    keep = KEEP_THE_MATH + (("data.path", "data.corpus") if both else ())
    refused, allowed = [], []
    for key in sorted(set(old) | set(new)):
        if old.get(key, "<absent>") != new.get(key, "<absent>"):
            line = f"{key}: {old.get(key, '<absent>')} -> {new.get(key, '<absent>')}"
            keeps = any(key == k or key.startswith(f"{k}.") for k in keep)
            (allowed if keeps else refused).append(line)
    return refused, allowed


class ResumeError(UserError):
    """A resume that would continue a run with settings that change its training."""


def check_resume(
    state: dict, path, config: dict, precision: str, world_size: int, max_steps: int
) -> list[str]:
    """The allowed changes ('key: old -> new') of resuming state with config.

    config: the new resolved config, its corpus paths absolute as the checkpoint stores them.
    precision: what trainer.precision resolved to ("bf16", "fp16" or "fp32"); world_size: processes.
    Every refused difference is named in one ResumeError.
    """
    refused, allowed = setting_differences(state.get("config") or {}, config)
    for what, old, new in [
        ("precision (trainer.precision on this device)", state.get("precision"), precision),
        ("world size (processes)", state.get("world_size"), world_size),
    ]:
        if old is not None and old != new:
            refused.append(f"{what}: {old} -> {new}")
    if max_steps < state["step"]:
        refused.append(
            f"trainer.max_steps: {max_steps} is below the checkpoint's step {state['step']}"
        )
    if refused:
        raise ResumeError(
            f"checkpoint {path} was trained with other settings ({'; '.join(refused)}): resume "
            "with the settings it was trained with or set a new run_dir"
        )
    return allowed


def stop_reason(state: dict, trainer) -> str | None:
    """Why a checkpoint's run has nothing left to train under these trainer settings, or None."""
    if state["step"] >= trainer.max_steps:
        return f"trainer.max_steps={trainer.max_steps} reached"
    if trainer.max_minutes and state.get("wall_seconds", 0) >= 60 * trainer.max_minutes:
        return f"trainer.max_minutes={trainer.max_minutes} reached"
    if trainer.max_epochs is not None and state["sampler"]["epoch"] >= trainer.max_epochs:
        return f"trainer.max_epochs={trainer.max_epochs} reached"
    return None
