"""What each position variant costs: its training step time relative to sinusoidal (§3.5).

The step is ``training.step.train_step``, the update train.py runs (forward, label-smoothed
loss, backward, clipping, Adam and schedule step).

Every variant of ``configs/position/`` trains the same model on the same random batch; the steps
are interleaved (sinusoidal, learned, ..., then again) so a machine that slows down or is shared
slows all of them alike, and each variant's median step is divided by sinusoidal's. Each step is
timed twice: wall-clock seconds, and the CPU seconds this process spent (all its threads). On a
shared machine the wall clock measures the neighbours as much as the step; the CPU seconds do
not (run with OMP_WAIT_POLICY=PASSIVE so threads waiting for a core do not spin), so the ratio is
taken on CPU seconds.
"""

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from omegaconf import OmegaConf

from common.errors import UserError
from model.transformer import build_model, count_parameters
from training.optim import noam_adam
from training.step import train_step

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
BASELINE = "sinusoidal"


def position_variants() -> list[str]:
    """The names of configs/position/*.yaml, sinusoidal first."""
    names = sorted(p.stem for p in (CONFIG_DIR / "position").glob("*.yaml"))
    return sorted(names, key=lambda name: name != BASELINE)


def variant_steps(
    model_name: str,
    variants: Sequence[str],
    batch_size: int,
    length: int,
    vocab_size: int,
    bf16: bool,
    **dims,
) -> dict[str, tuple[Callable[[], None], int]]:
    """Variant -> (train.py's update on one batch, its model's parameter count)."""
    optim = OmegaConf.load(CONFIG_DIR / "optim" / "noam.yaml")
    model_cfg = OmegaConf.merge(
        OmegaConf.load(CONFIG_DIR / "model" / f"{model_name}.yaml"),
        {k: v for k, v in dims.items() if v is not None},
    )
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab_size, (batch_size, length), generator=generator)  # [B, S]
    tgt = torch.randint(4, vocab_size, (batch_size, length + 1), generator=generator)
    batch = {"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}  # [B, T] each
    steps = {}
    smoothing, clip, precision = optim.label_smoothing, optim.clip_norm, "bf16" if bf16 else "fp32"
    for name in variants:
        torch.manual_seed(0)
        position = OmegaConf.load(CONFIG_DIR / "position" / f"{name}.yaml")
        model = build_model(model_cfg, position, vocab_size).train()
        # what train.py builds: fused Adam (float32 master weights) with the §5.3 schedule
        adam, schedule = noam_adam(
            model.parameters(),
            model_cfg.d_model,
            optim.betas,
            optim.eps,
            optim.warmup,
            optim.lr_scale,
        )

        def step(model=model, adam=adam, schedule=schedule) -> None:
            train_step(model, adam, schedule, [batch], smoothing, clip, precision)

        steps[name] = (step, count_parameters(model))
    return steps


def checked_variants(variants: Sequence[str] | None) -> list[str]:
    """The variants to time (default: all), known ones only, the baseline first if not named."""
    known = position_variants()
    variants = list(variants or known)
    unknown = [name for name in variants if name not in known]
    if unknown:
        raise UserError(
            f"unknown position variant(s) {', '.join(unknown)}: pass some of {', '.join(known)}"
        )
    if BASELINE not in variants:
        variants.insert(0, BASELINE)
    return variants


def time_variant_steps(
    steps: dict, repeats: int, model_name: str, echo: Callable[[str], None]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """CPU and wall seconds of each variant's step, repeats rounds after a warm-up, interleaved."""
    cpu: dict[str, list[float]] = {name: [] for name in steps}
    wall: dict[str, list[float]] = {name: [] for name in steps}
    for run in range(repeats + 1):
        for name, (step, _) in steps.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            step()
            elapsed_cpu = time.process_time() - start_cpu
            elapsed = time.perf_counter() - start
            what = "warm-up" if run == 0 else f"step {run}/{repeats}"
            echo(f"{model_name} {name:>16} {what}: {elapsed_cpu:.3f} CPU s, {elapsed:.3f} s")
            if run:
                cpu[name].append(elapsed_cpu)
                wall[name].append(elapsed)
    return cpu, wall


def variant_figures(steps: dict, cpu: dict, wall: dict) -> dict:
    """Variant -> median CPU and wall seconds, their ratios to sinusoidal, parameters (added)."""
    baseline = statistics.median(cpu[BASELINE])
    return {
        name: {
            "cpu_seconds": statistics.median(cpu[name]),
            "min_cpu_s": min(cpu[name]),
            "max_cpu_s": max(cpu[name]),
            "ratio": statistics.median(cpu[name]) / baseline,
            "wall_seconds": statistics.median(wall[name]),
            "wall_ratio": statistics.median(wall[name]) / statistics.median(wall[BASELINE]),
            "parameters": steps[name][1],
            "added_parameters": steps[name][1] - steps[BASELINE][1],
        }
        for name in steps
    }


def variant_step_times(
    model_names: Sequence[str] = ("small", "base"),
    variants: Sequence[str] | None = None,
    batch_size: int = 32,
    length: int = 32,
    vocab_size: int = 8000,
    repeats: int = 3,
    num_threads: int | None = None,
    bf16: bool = False,
    echo: Callable[[str], None] = print,
    **dims,
) -> dict:
    """Median training-step seconds per variant and model size, and the ratio to sinusoidal.

    One warm-up step per variant, then `repeats` rounds of one step each, interleaved.
    """
    if repeats < 1 or batch_size < 1 or length < 1:
        raise UserError("need repeats >= 1, batch_size >= 1 and length >= 1")
    variants = checked_variants(variants)
    if num_threads:
        torch.set_num_threads(num_threads)
    fig = {
        "batch_size": batch_size,
        "length": length,
        "vocab_size": vocab_size,
        "repeats": repeats,
        "precision": "bf16" if bf16 else "fp32",
        "num_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "models": {},
    }
    for model_name in model_names:
        steps = variant_steps(model_name, variants, batch_size, length, vocab_size, bf16, **dims)
        cpu, wall = time_variant_steps(steps, repeats, model_name, echo)
        fig["models"][model_name] = variant_figures(steps, cpu, wall)
    return fig


def variant_cost_rows(fig: dict) -> list[tuple[str, ...]]:
    """Rows: model, variant, CPU s (median, range), ratio, wall s and ratio, parameters added."""
    rows = []
    for model_name, entry in fig["models"].items():
        for name, figures in entry.items():
            rows.append(
                (
                    model_name,
                    name,
                    f"{figures['cpu_seconds']:.3f}",
                    f"{figures['min_cpu_s']:.3f}-{figures['max_cpu_s']:.3f}",
                    f"{figures['ratio']:.2f}x",
                    f"{figures['wall_seconds']:.3f}",
                    f"{figures['wall_ratio']:.2f}x",
                    f"{figures['added_parameters']:+,}",
                )
            )
    return rows
