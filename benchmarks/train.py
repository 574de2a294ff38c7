"""The training benchmark: full training steps (the one train.py runs, ``training.step.
train_step``) in fp32 and bf16, optionally against HF Marian trained the way its Trainer does,
A/B interleaved; tokens/s, GFLOP/s, MFU against the measured GEMM peak, step memory, and where
a step's time goes (torch.profiler, ``--profile``) (scripts/benchmark.py train)."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence

import torch
from omegaconf import OmegaConf
from torch.profiler import ProfilerActivity, profile

from benchmarks.flops import (
    default_precisions,
    gemm_peak,
    native_bf16,
    numpy_blas_peak,
    synchronized_time,
    transformer_flops,
)
from benchmarks.memory import StepMemory
from benchmarks.models import ROOT, build_models
from common.errors import UserError, optional_module
from runs.device import cpu_flags, hardware_name
from training.optim import noam_adam
from training.step import train_step

# torch.profiler operators (self CPU time, so the groups do not overlap) in the groups a profile
# reports; an operator not named here is counted under "other operators"
GEMMS = "GEMMs (mm, addmm, bmm)"
PROFILE_GROUPS = {
    GEMMS: ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "fused attention (SDPA fwd + bwd)": (
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    ),
    "dropout masks (random_, bernoulli_)": ("aten::random_", "aten::bernoulli_", "aten::uniform_"),
    "copies (copy_, clone, cat)": ("aten::copy_", "aten::clone", "aten::cat"),
    "softmax and loss": (
        "aten::_softmax",
        "aten::_softmax_backward_data",
        "aten::_log_softmax",
        "aten::_log_softmax_backward_data",
        "aten::exp",
        "aten::gather",
        "aten::scatter_add_",
    ),
    "LayerNorm fwd + bwd": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
    "fill_, zero_, where, sum, threshold_backward": (
        "aten::fill_",
        "aten::zero_",
        "aten::where",
        "aten::sum",
        "aten::threshold_backward",
        "aten::masked_fill_",
    ),
    "add, mul, div, ReLU, addcmul": (
        "aten::add",
        "aten::add_",
        "aten::mul",
        "aten::mul_",
        "aten::div",
        "aten::div_",
        "aten::relu",
        "aten::relu_",
        "aten::clamp_min",
        "aten::clamp_min_",
        "aten::addcmul",
        "aten::addcmul_",
    ),
    "Adam and gradient norm": (
        "aten::_fused_adam_",
        "aten::_fused_adamw_",
        "aten::_foreach_norm",
        "aten::_foreach_mul_",
        "aten::_foreach_add_",
        "aten::linalg_vector_norm",
    ),
}
OTHER_OPERATORS = "other operators"
OUTSIDE_OPERATORS = "outside any operator (Python, the profiler)"


def profile_group(operator: str) -> str:
    """The PROFILE_GROUPS label of a torch.profiler operator name (OTHER_OPERATORS if none)."""
    for label, operators in PROFILE_GROUPS.items():
        if operator in operators:
            return label
    return OTHER_OPERATORS


def profile_step(step: Callable, batch: dict, steps: int = 2) -> dict:
    """Where one training step's time goes: torch.profiler self CPU seconds per step, by group.

    Self time is an operator's own, without the operators it calls, so the groups add up to the
    profiled steps' wall time (under the profiler, which adds its own overhead): what no
    operator covers is OUTSIDE_OPERATORS. Also every operator's seconds, calls and FLOPs (the
    profiler's count, matrix products only) per step, and the rate of the step's GEMMs.
    """
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step(batch)
        wall = (time.perf_counter() - start) / steps
    operators = {
        e.key: {
            "seconds": e.self_cpu_time_total / 1e6 / steps,
            "calls": e.count / steps,
            "flops": e.flops / steps,
        }
        for e in prof.key_averages()
        if e.self_cpu_time_total > 0
    }
    groups = dict.fromkeys([*PROFILE_GROUPS, OTHER_OPERATORS], 0.0)
    for operator, row in operators.items():
        groups[profile_group(operator)] += row["seconds"]
    groups[OUTSIDE_OPERATORS] = max(0.0, wall - sum(groups.values()))
    gemms = [row for op, row in operators.items() if profile_group(op) == GEMMS]
    seconds = sum(row["seconds"] for row in gemms)
    gemm_gflops = sum(row["flops"] for row in gemms) / seconds / 1e9 if seconds else 0.0
    return {
        "steps": steps,
        "wall_s": wall,
        "groups": groups,
        "gemm_gflops": gemm_gflops,
        "operators": operators,
    }


def train_systems(
    model_name: str, vocab_size: int, with_hf: bool, device, compile_modes, precisions, **dims
):
    """Name -> (one training step, its model) for ours (fp32, bf16, compiled) and HF Marian."""
    optim = OmegaConf.load(ROOT / "configs" / "optim" / "noam.yaml")
    ours, theirs, model_cfg = build_models(model_name, vocab_size, with_hf, **dims)
    systems = {}
    ours = ours.to(device).train()
    # what train.py builds: fused Adam (float32 master weights) with the §5.3 schedule
    adam, schedule = noam_adam(
        ours.parameters(), model_cfg.d_model, optim.betas, optim.eps, optim.warmup, optim.lr_scale
    )

    def our_step(model, precision: str) -> Callable:
        def step(batch: dict) -> None:  # train.py's update, on one micro-batch
            smoothing, clip = optim.label_smoothing, optim.clip_norm
            train_step(model, adam, schedule, [batch], smoothing, clip, precision)

        return step

    for precision in precisions:
        for compiled in compile_modes:
            model = torch.compile(ours) if compiled else ours
            name = f"ours {precision}" + (" compiled" if compiled else "")
            systems[name] = (our_step(model, precision), ours)
    if theirs is not None:
        # transformers deferred: optional (the bench extra), needed only with --vs hf
        LabelSmoother = optional_module("transformers.trainer_pt_utils", "bench").LabelSmoother

        theirs = theirs.to(device).train()
        smoother = LabelSmoother(epsilon=optim.label_smoothing)
        # HF Trainer's defaults: fused AdamW (torch >= 2.8), max_grad_norm 1.0
        adamw = torch.optim.AdamW(theirs.parameters(), lr=1e-4, fused=True)

        def their_step(bf16: bool) -> Callable:
            def step(batch: dict) -> None:
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    out = theirs(
                        input_ids=batch["src"],
                        attention_mask=batch["src"].ne(0),
                        decoder_input_ids=batch["tgt_in"],
                    )
                    loss = smoother(out, batch["tgt_out"])
                loss.backward()
                torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
                adamw.step()
                adamw.zero_grad(set_to_none=True)

            return step

        for precision in precisions:
            systems[f"hf {precision}"] = (their_step(precision == "bf16"), theirs)
    return systems, model_cfg


def measure_peaks(peaks: dict, numpy_blas: dict | None, device, gemm_size: int, echo) -> None:
    """Raise peaks (and numpy_blas) in place to the best GEMM rates measured now, and echo them."""
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        # emulated bf16 (a CPU without AVX512-BF16/AMX) runs one 2048-square GEMM in minutes:
        # there one 512-square figure is kept for the record, timed or not
        full = name == "fp32" or native_bf16(device)
        size, repeats = (gemm_size, 10) if full else (min(gemm_size, 512), 1)
        peaks[name] = max(peaks[name], gemm_peak(dtype, device, size, repeats))
    line = f"GEMM peak: fp32 {peaks['fp32']:,.1f} GFLOP/s, bf16 {peaks['bf16']:,.1f} GFLOP/s"
    if numpy_blas is not None:
        measured = numpy_blas_peak(gemm_size)
        numpy_blas.update(name=measured["name"], fp32=max(numpy_blas["fp32"], measured["fp32"]))
        line += f"; numpy's BLAS ({numpy_blas['name']}) fp32 {numpy_blas['fp32']:,.1f}"
    echo(line)


def random_train_batch(batch_size: int, length: int, vocab_size: int, device) -> dict:
    """A seeded batch of random token ids (src, tgt_in, tgt_out) on device."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab_size, (batch_size, length), generator=generator)  # [B, S]
    tgt = torch.randint(4, vocab_size, (batch_size, length + 1), generator=generator)  # [B, T+1]
    batch = {"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}
    return {k: v.to(device) for k, v in batch.items()}


def time_train_steps(
    systems: dict, batch: dict, repeats: int, device, model_name: str, tokens: int, echo
) -> tuple[dict, dict, dict]:
    """Each system's step timed repeats times after a warm-up, A/B interleaved.

    Returns seconds (name -> timed runs), memory (name -> (saved MiB, peak MiB)) and failed
    (name -> why a compiled step failed; it is left out from then on).
    """
    seconds = {name: [] for name in systems}
    memory, failed = {}, {}
    for run in range(repeats + 1):
        for name, (step, _) in systems.items():
            if name in failed:
                continue
            # saved-tensor hooks and torch.compile do not mix: compiled steps report none
            track = "compiled" not in name
            with StepMemory(device, systems[name][1].parameters(), track) as mem:
                start = synchronized_time(device)
                try:
                    step(batch)
                except Exception as e:  # a compiler missing on this machine: report, go on
                    if "compiled" not in name:
                        raise
                    failed[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
                    echo(f"{model_name} {name}: failed ({failed[name]}); left out")
                    systems[name][1].zero_grad(set_to_none=True)
                    continue
                elapsed = synchronized_time(device) - start
            what = "warm-up" if run == 0 else f"run {run}/{repeats}"
            echo(
                f"{model_name} {name:>18} {what}: {elapsed:.3f} s, "
                f"{tokens / elapsed:,.0f} target tokens/s"
            )
            if run:
                seconds[name].append(elapsed)
                memory[name] = (mem.saved_mib, mem.peak_mib)
    return seconds, memory, failed


def train_system_rows(
    systems: dict, seconds: dict, memory: dict, failed: dict, tokens: int, flops: int
) -> dict:
    """Name -> median step time, its range, tokens/s, GFLOP/s, memory and parameters."""
    rows = {}
    for name, times in seconds.items():
        if name in failed:
            continue
        median = statistics.median(times)
        precision = "bf16" if "bf16" in name else "fp32"
        rows[name] = {
            "seconds": median,
            "seconds_min": min(times),
            "seconds_max": max(times),
            "target_tokens_per_s": tokens / median,
            "tokens_per_s": 2 * tokens / median,
            "gflops": flops / median / 1e9,
            "precision": precision,
            "saved_for_backward_mib": memory[name][0],
            "cuda_peak_mib": memory[name][1],
            "parameters": sum(p.numel() for p in systems[name][1].parameters() if p.requires_grad),
        }
    return rows


def hf_ratios(rows: dict) -> dict:
    """Ours' speed-up over HF Marian: like for like first (the verdicts), then across precisions."""
    return {
        f"{a} / {b}": rows[b]["seconds"] / rows[a]["seconds"]
        for a, b in (
            ("ours fp32", "hf fp32"),
            ("ours bf16", "hf bf16"),
            ("ours bf16", "hf fp32"),
        )
        if a in rows and b in rows
    }


def benchmark_train_model(
    model_name: str,
    vs: str | None,
    batch: dict,
    repeats: int,
    device,
    echo,
    compile_modes,
    precisions,
    profile_steps: int,
    vocab_size: int,
    **dims,
) -> dict:
    """One model size's entry: its systems' rows, failures, profile, ratios and projection."""
    batch_size, length = batch["src"].shape
    systems, model_cfg = train_systems(
        model_name, vocab_size, vs == "hf", device, compile_modes, precisions, **dims
    )
    model_dims = {
        k: model_cfg[k]
        for k in ("d_model", "n_heads", "n_encoder_layers", "n_decoder_layers", "d_ff")
    }
    flops = transformer_flops(model_dims, vocab_size, batch_size, length, length)
    tokens = batch_size * length  # per side
    seconds, memory, failed = time_train_steps(
        systems, batch, repeats, device, model_name, tokens, echo
    )
    rows = train_system_rows(systems, seconds, memory, failed, tokens, flops)
    entry = {"dims": model_dims, "flops_per_step": flops, "systems": rows, "failed": failed}
    if profile_steps:
        entry["profile"] = {
            name: profile_step(step, batch, profile_steps)
            for name, (step, _) in systems.items()
            if name not in failed
        }
    if vs == "hf":
        entry["ratios"] = hf_ratios(rows)
    if device.type == "cuda":
        fastest = min(rows.values(), key=lambda r: r["seconds"])
        entry["projected_100k_steps_h"] = fastest["seconds"] * 100_000 / 3600
    return entry


def train_figure(
    device_name: str,
    device,
    precisions: list,
    batch_size: int,
    length: int,
    vocab_size: int,
    repeats: int,
    peaks: dict,
    numpy_blas: dict | None,
) -> dict:
    """The training figure before its models: the device, the settings, the GEMM peaks."""
    return {
        "device": device_name,
        "device_name": hardware_name(device),
        "cpu_flags": cpu_flags() if device.type == "cpu" else [],
        "precisions": precisions,
        "native_bf16": native_bf16(device),
        "batch_size": batch_size,
        "length": length,
        "vocab_size": vocab_size,
        "repeats": repeats,
        "num_threads": torch.get_num_threads(),
        "gemm_peak_gflops": peaks,
        "numpy_blas_peak": numpy_blas,
        "torch_version": torch.__version__,
        "models": {},
    }


def benchmark_train(
    model_names: Sequence[str] = ("base", "small"),
    vs: str | None = None,
    batch_size: int = 128,
    length: int = 32,
    vocab_size: int = 8000,
    repeats: int = 5,
    device_name: str = "cpu",
    num_threads: int | None = None,
    echo: Callable[[str], None] = print,
    compile_modes: Sequence[bool] | None = None,
    precisions: Sequence[str] | None = None,
    gemm_size: int | None = None,
    profile_steps: int = 0,
    **dims,
) -> dict:
    """Training-step throughput, GFLOP/s, MFU and step memory per model size and system.

    dims override the model configs' (d_model=..., ...), as in benchmark_decode. compile_modes:
    eager and/or torch.compile'd steps of ours (default: eager on CPU, both on CUDA); a compiled
    step that fails is reported under "failed" and left out. precisions: fp32 and/or bf16
    (default: ``default_precisions``, so a CPU without native bf16 times fp32 only). gemm_size:
    the side of the square GEMMs whose best rate is the peak (default 2048 on a CPU, 8192 on CUDA).
    profile_steps: after the timing, profile that many more steps of each system on the CPU
    (``profile_step``; 0: none).
    """
    if repeats < 1 or batch_size < 1 or length < 1:
        raise UserError("need --repeats >= 1, --batch-size >= 1 and --length >= 1")
    device = torch.device(device_name)
    if profile_steps and device.type != "cpu":
        raise UserError("--profile reads CPU operator times: drop --device or --profile")
    precisions = list(precisions or default_precisions(device))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    if num_threads:
        torch.set_num_threads(num_threads)
    gemm_size = gemm_size or (2048 if device.type == "cpu" else 8192)
    peaks = {"fp32": 0.0, "bf16": 0.0}
    # numpy's BLAS uses every CPU: its peak is comparable only where torch does too
    all_cpus = device.type == "cpu" and torch.get_num_threads() == len(os.sched_getaffinity(0))
    numpy_blas = {"name": None, "fp32": 0.0} if all_cpus else None
    # before and after each model; the best figure is the peak
    measure_peaks(peaks, numpy_blas, device, gemm_size, echo)
    batch = random_train_batch(batch_size, length, vocab_size, device)
    if compile_modes is None:
        compile_modes = [False] if device.type == "cpu" else [False, True]
    fig = train_figure(
        device_name, device, precisions, batch_size, length, vocab_size, repeats, peaks, numpy_blas
    )
    for model_name in model_names:
        fig["models"][model_name] = benchmark_train_model(
            model_name,
            vs,
            batch,
            repeats,
            device,
            echo,
            compile_modes,
            precisions,
            profile_steps,
            vocab_size,
            **dims,
        )
        measure_peaks(peaks, numpy_blas, device, gemm_size, echo)
    for entry in fig["models"].values():
        add_mfu(entry, peaks, numpy_blas)
    fig["load_average"] = os.getloadavg()
    return fig


def add_mfu(entry: dict, peaks: dict, numpy_blas: dict | None) -> None:
    """Add each row's MFU (and fp32 rows' MFU at numpy's BLAS peak) and the ratio bounds to entry.

    Pure arithmetic on figures already measured, so it is tested with given numbers.
    """
    for row in entry["systems"].values():
        row["mfu"] = row["gflops"] / peaks[row["precision"]]
        if numpy_blas is not None and row["precision"] == "fp32":
            row["mfu_numpy_blas"] = row["gflops"] / numpy_blas["fp32"]
    # the most any system could lead theirs: ours at 100% MFU (every step a peak GEMM)
    entry["ratio_bound"] = {
        precision: entry["systems"][f"hf {precision}"]["seconds"]
        / (entry["flops_per_step"] / peaks[precision] / 1e9)
        for precision in ("fp32", "bf16")
        if f"hf {precision}" in entry["systems"] and peaks[precision] > 0
    }
    if numpy_blas is not None and "hf fp32" in entry["systems"]:  # the same, at numpy's peak
        entry["ratio_bound_numpy_blas"] = entry["systems"]["hf fp32"]["seconds"] / (
            entry["flops_per_step"] / numpy_blas["fp32"] / 1e9
        )


def train_rows(fig: dict) -> list[tuple[str, ...]]:
    """Table rows (model, system, tokens/s, range, GFLOP/s, MFU, step memory) for train figures."""
    rows = []
    for model_name, entry in fig["models"].items():
        tokens = fig["batch_size"] * fig["length"]
        for name, r in entry["systems"].items():
            rows.append(
                (
                    model_name,
                    name,
                    f"{r['target_tokens_per_s']:,.0f}",
                    f"{tokens / r['seconds_max']:,.0f}-{tokens / r['seconds_min']:,.0f}",
                    f"{r['tokens_per_s']:,.0f}",
                    f"{r['gflops']:,.0f}",
                    f"{100 * r['mfu']:.0f}%",
                    "-"
                    if r["saved_for_backward_mib"] is None
                    else f"{r['saved_for_backward_mib']:,.0f}",
                    "-" if r["cuda_peak_mib"] is None else f"{r['cuda_peak_mib']:,.0f}",
                )
            )
    return rows


def profile_rows(profiles: dict) -> tuple[list[str], list[tuple[str, ...]]]:
    """Headers and rows of a model's profile: seconds per step and share, group by system."""
    names = list(profiles)
    headers = ["where the step goes (self CPU s/step)", *names]
    labels = [*profiles[names[0]]["groups"]]

    def cell(name: str, label: str | None) -> str:  # None: the whole step
        profiled = profiles[name]
        seconds = profiled["groups"][label] if label else profiled["wall_s"]
        return f"{seconds:.3f} ({100 * seconds / profiled['wall_s']:.0f}%)"

    rows = [("whole step (wall, under the profiler)", *(cell(n, None) for n in names))]
    rows += [(label, *(cell(n, label) for n in names)) for label in labels]
    rows.append(
        ("the GEMMs' rate, GFLOP/s", *(f"{profiles[n]['gemm_gflops']:,.1f}" for n in names))
    )
    return headers, rows


def top_operator_rows(profiles: dict, top: int = 10) -> tuple[list[str], list[tuple[str, ...]]]:
    """Headers and rows of the operators in any system's ``top``: ms and calls per step."""
    names = list(profiles)

    def ranked(name: str) -> list[str]:
        operators = profiles[name]["operators"]
        return sorted(operators, key=lambda op: -operators[op]["seconds"])[:top]

    operators = list(dict.fromkeys(op for name in names for op in ranked(name)))
    first = profiles[names[0]]["operators"]
    operators.sort(key=lambda op: -first.get(op, {"seconds": 0.0})["seconds"])
    headers = ["operator", "group", *(f"{n} ms (calls)" for n in names)]

    def cell(name: str, operator: str) -> str:
        row = profiles[name]["operators"].get(operator)
        return "-" if row is None else f"{1000 * row['seconds']:,.0f} ({row['calls']:.0f})"

    rows = [(op, profile_group(op), *(cell(n, op) for n in names)) for op in operators]
    return headers, rows


def lead_budget(entry: dict, precision: str, goal: float = 1.5) -> dict | None:
    """What a ``goal``x lead over HF at one precision leaves for all that is not a GEMM.

    From a model's entry with a profile and HF timed: ours' GEMM seconds a step (profiled: the
    GEMMs' own time barely moves under the profiler), HF's median step over ``goal`` (the step
    ours would need), the difference (the budget for everything else; negative: out of reach
    whatever the rest costs), and what ours' median step spends outside its GEMMs now.
    """
    ours, theirs = f"ours {precision}", f"hf {precision}"
    profiles, systems = entry.get("profile", {}), entry["systems"]
    if ours not in profiles or theirs not in systems or ours not in systems:
        return None
    gemm_seconds = profiles[ours]["groups"][GEMMS]
    target = systems[theirs]["seconds"] / goal
    return {
        "goal": goal,
        "gemm_seconds": gemm_seconds,
        "gemm_gflops": profiles[ours]["gemm_gflops"],
        "target_seconds": target,
        "budget_seconds": target - gemm_seconds,
        "ours_rest_seconds": systems[ours]["seconds"] - gemm_seconds,
    }
