"""Speed benchmarks that print medians, ratios and projections as a compact table.

    python scripts/benchmark.py data   [--pairs 4508785] [--workdir DIR] [--no-ddp] [--keep]
    python scripts/benchmark.py data --workdir DIR --warm-only [--no-ddp]
    python scripts/benchmark.py decode [--sentences 256] [--beam 4] [--vs hf] [--repeats 5]
    python scripts/benchmark.py decode --run-dir RUN [--split test] [--sentences 256] [--beam 4]
    python scripts/benchmark.py train  [--model base small] [--vs hf] [--profile] [--device cuda]
    python scripts/benchmark.py train --variants [relative t5 ...] [--model small base]

``data`` (benchmarks/data.py) writes a corpus of WMT14's size (``--pairs``, 4,508,785
by default) in the hub's wmt/wmt14 layout (parquet shards; Multi30k sentences joined, a long tail
of rare words) under ``--workdir`` (a new or empty folder, a temporary one by default; what it
wrote there is deleted at the end unless ``--keep``), then times launches of the real data path,
each in its own process as train.py runs it (``prepare_data``, lengths, ``plan_update``,
``TokenBatchSampler``): cold, warm, and warm on two gloo DDP ranks, phase by phase, with peak RSS
and each rank's private memory.
``--warm-only`` reuses the corpus and caches a finished ``--keep`` run left in ``--workdir``
(recognised by the ``pe-nmt-benchmark-data.json`` it writes there last; any other folder is
refused, nothing written in it): the warm launches again, without generating or preparing
anything.

``decode`` (benchmarks/decode.py) times ``model.search.beam_search`` on a randomly
initialised model of the dims of ``configs/model/<--model>.yaml``; ``--vs hf`` times Hugging Face
``MarianMTModel.generate`` on a model of identical dims, A/B interleaved, both producing exactly
the same number of tokens, and prints the ratio of tokens/s. ``--profile`` prints where our time
goes.

``decode --run-dir RUN`` (benchmarks/decode.py, ``benchmark_engines``) decodes real
sentences of a trained run through every engine, interleaved, and scores each: our search,
CTranslate2 float32 and int8, HF ``generate`` on the mapped weights.

``train`` (benchmarks/train.py) times full training steps, the ``train_step`` train.py
runs (forward, label-smoothed loss, backward, clipping, Adam and schedule step), on random
batches of ``--batch-size`` sentences x ``--length`` tokens a side, in fp32 and bf16; ``--vs hf``
adds HF Marian trained the way its Trainer does. It prints tokens/s, GFLOP/s by
``benchmarks.flops.transformer_flops`` (checked against torch's FLOP counter in the tests), MFU
against the GEMM peak measured in the same run, and the memory autograd saves for backward.
``--profile [STEPS]`` then profiles STEPS more steps of each system (torch.profiler, self CPU
time): seconds per step by operator group (GEMMs, attention, dropout masks, copies, ...), what no
operator covers, and the top operators of each; with ``--vs hf``, what a 1.5x lead would leave
for all that is not a GEMM (``lead_budget``). ``--device cuda`` runs bf16 only, at 25k
tokens a step, with ``torch.compile`` off and on, reports the CUDA allocator's peak and projects
100k steps. ``--variants`` (evaluation/
benchmark_variants.py) instead times that step for each position variant (default: all of
configs/position) against sinusoidal, interleaved, on the CPU in fp32: CPU seconds and wall
seconds, medians and ratios, and the parameters each variant adds.

Run it on an otherwise idle machine: with more busy processes than cores, OpenMP threads wait on
each other and both systems slow down erratically (the load average is printed; ``--threads 1``
suffers least).
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

import torch

from benchmarks.data import MULTI30K, WMT14_TRAIN_PAIRS, benchmark_data, data_rows
from benchmarks.decode import (
    benchmark_decode,
    benchmark_engines,
    decode_rows,
    engine_rows,
)
from benchmarks.train import (
    benchmark_train,
    lead_budget,
    profile_rows,
    top_operator_rows,
    train_rows,
)
from benchmarks.variants import variant_cost_rows, variant_step_times
from common.errors import UserError, report_user_errors
from evaluation.tables import format_table, machine_line


def run_data(args: argparse.Namespace) -> dict:
    """Run the data benchmark from parsed arguments and print its table."""
    fig = benchmark_data(
        pairs=args.pairs,
        workdir=args.workdir,
        num_proc=args.num_proc,
        vocab_size=args.vocab_size,
        tokenizer_sample=args.tokenizer_sample,
        max_tokens=args.max_tokens,
        ddp=not args.no_ddp,
        keep=args.keep,
        corpus_dir=args.corpus_dir,
        warm_only=args.warm_only,
    )
    print(
        f"\ndata benchmark, {fig['date']}, {fig['cpu']}, {fig['cpus']} CPUs, "
        f"{fig['pairs']:,} pairs ({fig['corpus_gib']:.2f} GiB parquet), {fig['settings']}"
    )
    rows = data_rows(fig)
    print(format_table(rows[0], rows[1:]))
    cache = ", ".join(f"{k} {v:.2f} GiB" for k, v in fig["cache_gib"].items())
    print(f"cache: {cache}; load average at the end {fig['load_average']}")
    return fig


def run_engines(args: argparse.Namespace) -> dict:
    """decode --run-dir: ours vs CTranslate2 fp32/int8 vs HF generate on a trained run."""
    fig = benchmark_engines(
        args.run_dir,
        args.split,
        args.sentences,
        args.beam,
        repeats=args.repeats,
        num_threads=args.threads,
    )
    print(
        f"\ndecode engines, {machine_line(fig)}, {fig['num_threads']} threads: "
        f"{fig['sentences']} sentences of {fig['split']} from {fig['run_dir']} "
        f"({fig['checkpoint']}), beam {fig['beam']}, median of {fig['repeats']} interleaved runs"
    )
    headers = ("system", "tokens/s", "range", "s/run", "sacreBLEU", "same as ours")
    print(format_table(headers, engine_rows(fig)))
    return fig


def run_decode(args: argparse.Namespace) -> dict:
    """Run the decode benchmark from parsed arguments and print its table."""
    if args.run_dir is not None:
        return run_engines(args)
    fig = benchmark_decode(
        args.sentences,
        args.beam,
        args.vs,
        args.repeats,
        args.length,
        args.batch_size,
        args.model,
        args.vocab_size,
        args.threads,
        args.profile,
    )
    dims = ", ".join(f"{k} {v}" for k, v in fig["model"].items())
    print(f"\ndecode benchmark, {machine_line(fig)}, torch {fig['torch_version']}")
    print(
        f"beam {fig['beam']}, {fig['sentences']} sentences x {fig['length']} subwords + EOS in "
        f"and out, batches of {fig['batch_size']}, {fig['num_threads']} torch threads, median "
        f"of {fig['repeats']} runs\nmodel: {dims}"
    )
    headers = ("system", "tokens/s", "range", "sentences/s", "s/run")
    print(format_table(headers, decode_rows(fig)))
    if "ratio" in fig:
        verdict = "meets" if fig["ratio"] >= 2 else "misses"
        print(
            f"ours fp32 / hf fp32 tokens/s: {fig['ratio']:.2f}x (same precision: {verdict} the "
            f"2x goal; transformers {fig['transformers_version']})"
        )
        if "ratio_bf16" in fig:
            print(f"ours bf16 / hf fp32 tokens/s: {fig['ratio_bf16']:.2f}x (cross-precision)")
    if "profile" in fig:
        print("\n" + fig["profile"])
    return fig


def run_variant_cost(args: argparse.Namespace) -> dict:
    """`train --variants`: each position variant's step time relative to sinusoidal."""
    fig = variant_step_times(
        args.model,
        args.variants,
        args.batch_size,
        args.length,
        args.vocab_size,
        args.repeats,
        args.threads,
    )
    print(
        f"\nposition variants, train.py's train_step (forward, backward, Adam), fp32, torch "
        f"{fig['torch_version']}, {fig['num_threads']} threads, {fig['batch_size']} sentences x "
        f"{fig['length']} tokens per side, vocab {fig['vocab_size']}, median of {fig['repeats']} "
        "interleaved steps"
    )
    headers = (
        "model",
        "position",
        "CPU s",
        "range",
        "vs sinusoidal (CPU)",
        "wall s",
        "vs sinusoidal (wall)",
        "parameters added",
    )
    print(format_table(headers, variant_cost_rows(fig), align="llrrrrrr"))
    return fig


def print_train_header(fig: dict) -> None:
    """The training benchmark's first lines: machine, settings, GEMM peaks, precisions timed."""
    peaks = fig["gemm_peak_gflops"]
    print(
        f"\ntrain benchmark, {machine_line(fig)}, {fig['device_name']}, torch "
        f"{fig['torch_version']}, {fig['num_threads']} threads\n{fig['batch_size']} sentences x "
        f"{fig['length']} tokens per side, vocab {fig['vocab_size']}, median of {fig['repeats']} "
        f"steps (forward, backward, gradient norm or clip, optimizer); GEMM peak fp32 "
        f"{peaks['fp32']:,.0f}, bf16 {peaks['bf16']:,.1f} GFLOP/s; CPU flags: "
        f"{' '.join(fig['cpu_flags']) or '-'}; precisions timed: {', '.join(fig['precisions'])}"
    )
    if "bf16" not in fig["precisions"] and not fig["native_bf16"]:
        print("bf16 not timed: this CPU has no AVX512-BF16/AMX (bf16 GEMMs are emulated)")


def print_train_model(model_name: str, entry: dict, fig: dict) -> None:
    """One model's notes under the table: dims, ratios to HF and their bounds, failures."""
    peaks = fig["gemm_peak_gflops"]
    dims = ", ".join(f"{k} {v}" for k, v in entry["dims"].items())
    print(f"{model_name}: {dims}; {entry['flops_per_step'] / 1e9:,.1f} GFLOP per step")
    for label, ratio in entry.get("ratios", {}).items():
        if label in ("ours fp32 / hf fp32", "ours bf16 / hf bf16"):
            note = f" (same precision: {'meets' if ratio >= 1.5 else 'misses'} the 1.5x goal)"
        else:
            note = " (cross-precision, not like for like)"
        print(f"  {model_name} {label} tokens/s: {ratio:.2f}x{note}")
    for precision, bound in entry.get("ratio_bound", {}).items():
        print(
            f"  {model_name} {precision}: at 100% MFU ours would be {bound:.2f}x hf "
            f"{precision} (hf at {100 * entry['systems'][f'hf {precision}']['mfu']:.0f}% MFU)"
        )
    blas = fig.get("numpy_blas_peak")
    if blas and blas["fp32"] > 0:
        mfus = ", ".join(
            f"{name} {100 * row['mfu_numpy_blas']:.0f}%"
            for name, row in entry["systems"].items()
            if "mfu_numpy_blas" in row
        )
        print(
            f"  {model_name} fp32 MFU against numpy's BLAS ({blas['name']}, "
            f"{blas['fp32']:,.0f} GFLOP/s = {blas['fp32'] / peaks['fp32']:.2f}x torch's "
            f"GEMM peak): {mfus}"
            + (
                f"; at 100% of it ours would be {entry['ratio_bound_numpy_blas']:.2f}x hf fp32"
                if "ratio_bound_numpy_blas" in entry
                else ""
            )
        )
    for name, error in entry.get("failed", {}).items():
        print(f"  {model_name} {name}: failed, left out ({error})")
    if "projected_100k_steps_h" in entry:
        print(
            f"  {model_name}: 100k steps at the fastest setting: "
            f"{entry['projected_100k_steps_h']:.1f} h"
        )


def print_train_profile(model_name: str, entry: dict, precisions: list[str]) -> None:
    """One model's profile: time by operator group, the top operators, what a lead leaves."""
    steps = next(iter(entry["profile"].values()))["steps"]
    print(f"\n{model_name}: torch.profiler, {steps} steps of each system after the timing")
    print(format_table(*profile_rows(entry["profile"])) + "\n")
    align = "ll" + "r" * len(entry["profile"])
    print(format_table(*top_operator_rows(entry["profile"]), align=align))
    for precision in precisions:
        if budget := lead_budget(entry, precision):
            print(
                f"{model_name} {precision}: ours' GEMMs take {budget['gemm_seconds']:.3f} s a "
                f"step ({budget['gemm_gflops']:,.1f} GFLOP/s, profiled); hf's median step "
                f"over {budget['goal']} is {budget['target_seconds']:.3f} s, leaving "
                f"{budget['budget_seconds']:.3f} s for all else, where ours' median step "
                f"spends {budget['ours_rest_seconds']:.3f} s"
            )


def run_train(args: argparse.Namespace) -> dict:
    """Run the training benchmark from parsed arguments and print its table."""
    if args.variants is not None:
        return run_variant_cost(args)
    fig = benchmark_train(
        args.model,
        args.vs,
        args.batch_size,
        args.length,
        args.vocab_size,
        args.repeats,
        args.device,
        args.threads,
        precisions=args.precision,
        profile_steps=args.profile,
    )
    print_train_header(fig)
    headers = (
        "model",
        "system",
        "tgt tok/s",
        "range",
        "src+tgt tok/s",
        "GFLOP/s",
        "MFU",
        "saved MiB",
        "CUDA peak MiB",
    )
    print(format_table(headers, train_rows(fig), align="llrrrrrrr"))
    for model_name, entry in fig["models"].items():
        print_train_model(model_name, entry, fig)
    for model_name, entry in fig["models"].items():
        if "profile" in entry:
            print_train_profile(model_name, entry, fig["precisions"])
    return fig


def add_data_command(commands) -> None:
    """The `data` subcommand and its options."""
    data = commands.add_parser("data", help="tokenizer, encoding, batching, padding, memory")
    data.add_argument("--pairs", type=int, default=WMT14_TRAIN_PAIRS, help="training pairs")
    data.add_argument("--workdir", type=Path, default=None, help="corpus and caches: new or empty")
    data.add_argument("--keep", action="store_true", help="keep --workdir at the end")
    data.add_argument(
        "--warm-only",
        action="store_true",
        help="time warm launches on the corpus and caches a --keep run left in --workdir",
    )
    data.add_argument("--num-proc", default="auto", help="data.num_proc: a number or auto")
    data.add_argument("--no-ddp", action="store_true", help="skip the two-rank launch")
    data.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch and side")
    data.add_argument("--vocab-size", type=int, default=37_000)
    data.add_argument("--tokenizer-sample", type=int, default=2_000_000)
    data.add_argument(
        "--corpus-dir",
        default=MULTI30K,
        help="Multi30k: its hub id, or a local copy (a folder in the hub's layout or as text)",
    )
    data.set_defaults(run=run_data)


def add_decode_command(commands) -> None:
    """The `decode` subcommand and its options."""
    decode = commands.add_parser("decode", help="beam-search tokens/s, optionally vs HF Marian")
    decode.add_argument("--sentences", type=int, default=256)
    decode.add_argument("--beam", type=int, default=4)
    decode.add_argument("--vs", choices=["hf"], default=None, help="compare with HF Marian")
    decode.add_argument("--repeats", type=int, default=5, help="timed runs after one warm-up")
    decode.add_argument("--length", type=int, default=20, help="source and output subwords")
    decode.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    decode.add_argument("--model", default="small", help="configs/model/<name>.yaml")
    decode.add_argument("--vocab-size", type=int, default=8000)
    decode.add_argument("--threads", type=int, default=None, help="torch threads (default all)")
    decode.add_argument("--profile", action="store_true", help="print where our time goes")
    decode.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="a trained run: ours vs CTranslate2 fp32/int8 vs HF generate, tokens/s and BLEU "
        "on --sentences of --split",
    )
    decode.add_argument("--split", default="test", help="with --run-dir: the split to decode")
    decode.set_defaults(run=run_decode)


def add_train_command(commands) -> None:
    """The `train` subcommand and its options."""
    train = commands.add_parser("train", help="train-step tokens/s, MFU, memory; vs HF Marian")
    train.add_argument("--model", nargs="+", default=["base", "small"], help="configs/model names")
    train.add_argument("--vs", choices=["hf"], default=None, help="compare with HF Marian")
    train.add_argument(
        "--batch-size", type=int, default=None, help="sentences (CPU 128; CUDA 25k tokens)"
    )
    train.add_argument("--length", type=int, default=32, help="tokens per sentence and side")
    train.add_argument("--vocab-size", type=int, default=8000)
    train.add_argument("--repeats", type=int, default=5, help="timed steps after one warm-up")
    train.add_argument("--device", default="cpu", help="cpu or cuda")
    train.add_argument("--threads", type=int, default=None, help="torch threads (default all)")
    train.add_argument(
        "--precision",
        nargs="+",
        choices=["fp32", "bf16"],
        default=None,
        help="precisions to time (default fp32, + bf16 on a CPU with AVX512-BF16/AMX; CUDA: bf16)",
    )
    train.add_argument(
        "--profile",
        type=int,
        nargs="?",
        const=2,
        default=0,
        metavar="STEPS",
        help="then profile STEPS more steps of each system (default 2): self CPU time by "
        "operator group, the top operators, and with --vs hf what a 1.5x lead leaves (CPU only)",
    )
    train.add_argument(
        "--variants",
        nargs="*",
        default=None,
        help="time position variants relative to sinusoidal instead (none named: all of "
        "configs/position; CPU, fp32; default batch 32 sentences)",
    )
    train.set_defaults(run=run_train)


def check_train_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse `train` options that cannot go together (parser.error); fill in the batch size."""
    if args.device not in ("cpu", "cuda"):
        parser.error(f"--device {args.device}: pass cpu or cuda")
    if args.profile and args.device != "cpu":
        parser.error("--profile reads CPU operator times: drop --device or --profile")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here; run it on a GPU machine")
    if args.variants is not None and args.device != "cpu":
        parser.error("--variants times CPU steps only: drop --device")
    if args.profile and args.variants is not None:
        parser.error("--profile profiles the systems of --vs, not --variants: drop one")
    if args.profile < 0:
        parser.error(f"--profile {args.profile}: pass a number of steps >= 1")
    if args.batch_size is None and args.variants is not None:
        args.batch_size = 32
    if args.batch_size is None:
        args.batch_size = 128 if args.device == "cpu" else 25_000 // args.length


# options that count something: each at least 1 where given (0 or less failed late, with a
# traceback (--batch-size 0), or meant "all" without a word (--threads 0))
COUNTS = (
    "sentences", "beam", "repeats", "length", "batch_size", "vocab_size", "threads", "pairs",
    "max_tokens", "tokenizer_sample",
)  # fmt: skip


def check_counts(args: argparse.Namespace) -> None:
    """UserError naming the first count option below 1."""
    for name in COUNTS:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} {value}: pass a whole number >= 1")


@report_user_errors
def main(argv: Sequence[str] | None = None) -> dict:
    """Command-line entry: one subcommand per benchmark; prints its table, returns its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_data_command(commands)
    add_decode_command(commands)
    add_train_command(commands)
    args = parser.parse_args(argv)
    check_counts(args)
    if getattr(args, "command", None) == "train":
        check_train_args(parser, args)
    if getattr(args, "command", None) == "decode" and args.run_dir is not None:
        decode = commands.choices["decode"]
        given = [f"--{dest.replace('_', '-')}" for dest in SYNTHETIC_DECODE
                 if getattr(args, dest) != decode.get_default(dest)]  # fmt: skip
        if given:  # probe i-25: --model big timed the run's own model without a word
            parser.error(f"{', '.join(given)}: --run-dir decodes that run's own model, which "
                         "these options do not change: drop them (or --run-dir)")  # fmt: skip
    return args.run(args)


# decode's options for a random model of configs/model dims: read by nothing with --run-dir
SYNTHETIC_DECODE = ("model", "vocab_size", "length", "batch_size", "vs", "profile")


if __name__ == "__main__":
    main()
