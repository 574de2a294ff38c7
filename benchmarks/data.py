"""The data benchmark (scripts/benchmark.py data): a launch of the real data path on a corpus of
WMT14's size in the hub's layout, cold and warm, phase by phase, and on two gloo DDP ranks.

The corpus (``write_hub_corpus``) is written like ``wmt/wmt14`` de-en (parquet shards of a
``translation: {de, en}`` column, splits train / validation / test, a README naming the config):
lines join 1-3 random Multi30k pairs (23 English words a line on average), 1% of them 9-21 pairs
(about 100-250 words), and most lines carry rare words drawn from a Zipf law over five million
made-up types (the same word on both sides, as names and numbers are), so the vocabulary has a
long tail.

Each launch runs in its own process, as ``train.py`` would: imports, ``prepare_data`` (the same
call train.py makes: corpus load, tokenizer, encoding, cleaning), then what train.py's
``build_state`` does with the data (lengths, ``plan_update``, ``TokenBatchSampler``, the length
check) and the training pairs' fingerprint its checkpoints keep; the phases are timed from
prepare_data's log lines. Cold: empty caches (the Hugging Face parquet-to-Arrow conversion
included); warm: the same command again. DDP: the warm launch under
``torch.distributed.run --nproc_per_node=2`` on gloo, each rank's figures and private memory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed as dist

from common.configs import compose_config
from common.errors import UserError, optional_module
from common.files import write_json
from data.batching import TokenBatchSampler, plan_update
from data.corpus import MULTI30K_HUB, load_multi30k, prepare_data, select_direction
from data.tokenizer import default_num_threads
from runs.device import hardware_name

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = MULTI30K_HUB  # the corpus the generated lines are joined from (or a local copy)
# the README.md of a folder in wmt/wmt14's layout: it names the de-en config and its splits
WMT14_README = """---
configs:
- config_name: de-en
  data_files:
  - split: train
    path: de-en/train-*
  - split: validation
    path: de-en/validation-*
  - split: test
    path: de-en/test-*
---
"""
WMT14_TRAIN_PAIRS = 4_508_785
EVAL_PAIRS = {"validation": 3_000, "test": 3_003}  # newstest2013, newstest2014
SHARDS = 3
CHUNK = 250_000  # pairs generated and written at a time
# written last by a finished --keep run into --workdir: --warm-only reuses only such a folder
KEPT_MARKER = "pe-nmt-benchmark-data.json"
ZIPF_A, RARE_TYPES = 1.1, 5_000_000  # rare words: ~400k types in 4.5M lines, most seen once
SYLLABLES = [c + v for c in "bdfgklmnprstvwz" for v in "aeiou"] + ["sch", "ck", "th", "ng"]
PHASES = ("imports", "load corpus", "tokenizer", "encode train", "other splits", "cleaning")
PHASES += ("lengths + batching", "fingerprint", "data ready")


def rare_word(rank: int) -> str:
    """A made-up word naming a vocabulary rank (distinct ranks give distinct words)."""
    parts = []
    while True:
        rank, digit = divmod(rank, len(SYLLABLES))
        parts.append(SYLLABLES[digit])
        if rank == 0:
            break
        rank -= 1
    return "".join(parts).capitalize()


def synthetic_lines(
    rng: random.Random, zipf: np.ndarray, en: list[str], de: list[str], n: int
) -> tuple[list[str], list[str]]:
    """n parallel lines joined from Multi30k pairs, with rare words (zipf: their ranks)."""
    out_en, out_de, next_rare = [], [], 0
    for _ in range(n):
        k = rng.randint(9, 21) if rng.random() < 0.01 else rng.choices((1, 2, 3), (8, 9, 3))[0]
        picks = [rng.randrange(len(en)) for _ in range(k)]
        line_en, line_de = [en[i] for i in picks], [de[i] for i in picks]
        for _ in range(rng.choices((0, 1, 2), (4, 4, 2))[0]):
            word = rare_word(int(zipf[next_rare % len(zipf)]))
            next_rare += 1
            line_en.append(word)
            line_de.append(word)
        out_en.append(" ".join(line_en))
        out_de.append(" ".join(line_de))
    return out_en, out_de


def write_hub_corpus(
    out: Path, pairs: int, corpus_dir: str | Path = MULTI30K, seed: int = 0
) -> Path:
    """Write a corpus of `pairs` training pairs in wmt/wmt14's de-en layout under out, joined
    from Multi30k's training pairs (corpus_dir: its hub id or a local copy, as data.path)."""
    multi30k = load_multi30k(str(corpus_dir), setting="--corpus-dir")
    train = select_direction(multi30k, "en", "de")["train"]
    en, de = list(train["src"]), list(train["tgt"])
    (out / "de-en").mkdir(parents=True, exist_ok=True)
    (out / "README.md").write_text(WMT14_README)
    rng, np_rng = random.Random(seed), np.random.default_rng(seed)
    sizes = {"train": pairs, **EVAL_PAIRS}
    for split, size in sizes.items():
        shards = SHARDS if split == "train" else 1
        bounds = np.linspace(0, size, shards + 1).astype(int)
        for shard in range(shards):
            name = out / "de-en" / f"{split}-{shard:05d}-of-{shards:05d}.parquet"
            schema = pa.schema(
                [("translation", pa.struct([("de", pa.string()), ("en", pa.string())]))]
            )
            with pq.ParquetWriter(name, schema) as writer:
                for start in range(bounds[shard], bounds[shard + 1], CHUNK):
                    n = min(CHUNK, bounds[shard + 1] - start)
                    zipf = np.minimum(np_rng.zipf(ZIPF_A, 2 * n), RARE_TYPES)
                    lines_en, lines_de = synthetic_lines(rng, zipf, en, de, n)
                    column = pa.StructArray.from_arrays(
                        [pa.array(lines_de), pa.array(lines_en)], names=["de", "en"]
                    )
                    writer.write_table(pa.table({"translation": column}), row_group_size=100_000)
    return out


def launch_figures(corpus: Path, cache: Path, settings: dict, start: float) -> dict:
    """One launch's data path, as train.py runs it, timed by phase (this process's figures)."""
    imported = time.time()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        dist.init_process_group("gloo", timeout=timedelta(minutes=30))
    cfg = compose_config(
        ["data=wmt14_en_de", f"data.path={corpus}", f"cache_dir={cache}"]
        + [f"data.{key}={value}" for key, value in settings.items()]
    )
    events: list[tuple[float, str]] = []
    data = prepare_data(cfg.data, cfg.cache_dir, log=lambda m: events.append((time.time(), m)))
    src, tgt = data.split_lengths("train")
    plan = plan_update(src, tgt, 25_000, int(cfg.data.max_tokens), max(world, 1))
    TokenBatchSampler(src, tgt, plan.max_tokens, seed=1, num_replicas=world, rank=rank)
    longest = max(int(x.max()) for x in (*data.split_lengths("validation"), src, tgt))
    batched = time.time()
    fingerprint = data.fingerprint()  # train.py's, for its checkpoints (kept after the first)
    ready = time.time()
    if world > 1:
        dist.barrier()
    at = {}
    for t, message in events:
        for key, prefix in (
            ("first", "data: "),
            ("tokenizer", "data: tokenizer "),
            ("train", "data: split 'train'"),
            ("splits", "data: split "),
            ("cleaning", "data: train cleaning"),
        ):
            if message.startswith(prefix) and (key not in at or key == "splits"):
                at[key] = t
    own, child = (
        resource.getrusage(who).ru_maxrss / 2**20
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return {
        "rank": rank,
        "phases": {
            "imports": imported - start,
            "load corpus": at["first"] - imported,
            "tokenizer": at["tokenizer"] - at["first"],
            "encode train": at["train"] - at["tokenizer"],
            "other splits": at["splits"] - at["train"],
            "cleaning": at["cleaning"] - at["splits"],
            "lengths + batching": batched - at["cleaning"],
            "fingerprint": ready - batched,
            "data ready": ready - start,
        },
        "peak_rss_gib": own,
        "largest_child_gib": child,
        "private_gib": _psutil().Process().memory_full_info().uss / 2**30,
        "kept": data.counts["kept"],
        "longest": longest,
        "fingerprint": fingerprint,
        "log": [m for _, m in events],
    }


def run_launch(corpus: Path, cache: Path, settings: dict, out: Path, ranks: int = 1) -> list:
    """Run one launch in fresh processes (ranks > 1: torch.distributed.run on gloo)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_DATASETS_CACHE": str(cache / "hf")}
    env.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    module = ["-m", "benchmarks.data", str(corpus), str(cache), str(out)]
    module += [f"{key}={value}" for key, value in settings.items()]
    command = [sys.executable, *module]
    if ranks > 1:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}"]
        command += [f"--master_port={free_port()}", *module]
    out.mkdir(parents=True, exist_ok=True)
    with (out / "stderr.log").open("w") as errors:
        result = subprocess.run(command, cwd=ROOT, env=env, stdout=errors, stderr=errors)
    if result.returncode != 0:
        tail = (out / "stderr.log").read_text()[-3000:]
        raise RuntimeError(f"launch failed ({' '.join(command)}):\n{tail}")
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]


def free_port() -> int:
    """A free TCP port on this host for the DDP rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def benchmark_data(
    pairs: int = WMT14_TRAIN_PAIRS,
    workdir: Path | None = None,
    num_proc: str = "auto",
    vocab_size: int = 37_000,
    tokenizer_sample: int = 2_000_000,
    max_tokens: int = 4096,
    ddp: bool = True,
    keep: bool = False,
    corpus_dir: str | Path = MULTI30K,
    echo: Callable[[str], None] = print,
    warm_only: bool = False,
) -> dict:
    """Generate the corpus, then time a cold, a warm and (ddp) a two-rank warm launch.

    warm_only: reuse the corpus and caches a finished `keep` run left in workdir (its
    KEPT_MARKER; kept again): no generation, no cold launch; the warm launches must find
    everything prepared. keep: write KEPT_MARKER into workdir once every launch has finished.
    """
    _psutil()  # missing: one line now, not a traceback from the first launch
    settings = {"num_proc": num_proc, "vocab_size": vocab_size}
    settings.update(tokenizer_sample=tokenizer_sample, max_tokens=max_tokens)
    if warm_only:
        check_kept_workdir(workdir)
    else:
        check_fresh_workdir(workdir)
    made = workdir is None or not Path(workdir).exists()  # a folder it may delete whole
    work = Path(workdir or tempfile.mkdtemp(prefix="bench-data-"))
    try:
        start = time.perf_counter()
        if warm_only:
            corpus, written = work / "corpus", None
            pairs = sum(pq.ParquetFile(f).metadata.num_rows for f in corpus.glob("*/train-*"))
        else:
            echo(f"writing {pairs:,} pairs in the wmt/wmt14 layout to {work / 'corpus'}")
            corpus = write_hub_corpus(work / "corpus", pairs, corpus_dir)
            written = time.perf_counter() - start
        size = sum(p.stat().st_size for p in corpus.rglob("*.parquet"))
        launches = (("cold", 1), ("warm", 1), ("ddp", 2))[int(warm_only) : 3 if ddp else 2]
        runs = time_launches(corpus, work, settings, launches, warm_only, echo)
        cache_gib = cache_sizes(work / "cache")
        if keep and not warm_only:
            write_kept_marker(work, pairs, settings)
    finally:
        if not keep and not warm_only:
            remove_own(work, made)
    return {
        "pairs": pairs,
        "corpus_gib": size / 2**30,
        "generate_s": written,
        "settings": settings,
        "cpus": default_num_threads(),
        "cpu": hardware_name(torch.device("cpu")),
        "cache_gib": cache_gib,
        "runs": runs,
        "load_average": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def time_launches(
    corpus: Path, work: Path, settings: dict, launches: tuple, warm_only: bool, echo: Callable
) -> dict[str, list]:
    """Run each (name, ranks) launch in turn on work's cache; warm_only: each must find it all."""
    runs = {}
    for name, ranks in launches:
        echo(f"{name} launch ({ranks} process{'es' if ranks > 1 else ''})")
        runs[name] = run_launch(corpus, work / "cache", settings, work / name, ranks)
        if warm_only and any(prepared(run) for run in runs[name]):
            raise UserError(
                f"--warm-only: the cache in {work / 'cache'} lacked this corpus's tokenizer "
                f"or encoding for these settings (the {name} launch made them); rerun it"
            )
    return runs


def cache_sizes(cache: Path) -> dict[str, float]:
    """GiB of each part of a launch cache (hf, encoded, tokenizers)."""
    return {
        part: sum(p.stat().st_size for p in (cache / part).rglob("*") if p.is_file()) / 2**30
        for part in ("hf", "encoded", "tokenizers")
    }


def write_kept_marker(work: Path, pairs: int, settings: dict) -> None:
    """Mark work as a finished --keep run's folder (what --warm-only accepts)."""
    write_json(work / KEPT_MARKER, {"pairs": pairs, "settings": settings})  # whole or absent


def is_kept_marker(path: Path) -> bool:
    """Whether path is the marker write_kept_marker writes (a JSON record of the kept run)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(record, dict) and {"pairs", "settings"} <= set(record)


def check_kept_workdir(workdir: Path | None) -> None:
    """Refuse --warm-only unless workdir is a finished --keep run's folder (marker and parts)."""
    if workdir is None:
        raise UserError("--warm-only reuses a kept run's folder: pass --workdir DIR")
    work = Path(workdir)
    needed = {KEPT_MARKER: is_kept_marker, "corpus/README.md": Path.is_file}
    needed["cache/encoded"] = Path.is_dir
    missing = [part for part, test in needed.items() if not test(work / part)]
    if missing:
        raise UserError(
            f"--warm-only: --workdir {workdir} is not a folder that a finished "
            f"`scripts/benchmark.py data --keep` run left (it lacks {work / missing[0]}); nothing "
            "was written: pass such a folder, or make one with `scripts/benchmark.py data "
            "--workdir NEW_FOLDER --keep`"
        )


def check_fresh_workdir(workdir: Path | None) -> None:
    """Refuse a --workdir that holds anything (the cold launch needs empty caches)."""
    # and so the cleanup at the end never meets, nor deletes, a file the benchmark did not write
    if workdir is not None and Path(workdir).is_dir() and any(Path(workdir).iterdir()):
        raise UserError(
            f"--workdir {workdir} is not empty: pass a new or empty folder (or --warm-only to "
            "reuse a --keep run's folder)"
        )


def remove_own(work: Path, made: bool) -> None:
    """Delete what the benchmark wrote in work: the whole folder only where it made it."""
    if made:
        shutil.rmtree(work, ignore_errors=True)
        return
    for part in ("corpus", "cache", "cold", "warm", "ddp"):
        shutil.rmtree(work / part, ignore_errors=True)


def prepared(run: dict) -> bool:
    """Whether a launch trained a tokenizer or encoded a split (so it was not warm)."""
    return any("training tokenizer" in m or " encoded (" in m for m in run["log"])


def data_rows(fig: dict) -> list[tuple[str, ...]]:
    """Table rows: each phase and the memory, per launch (cold, warm, DDP rank 0, rank 1)."""
    launches = [(name, fig["runs"][name][0]) for name in ("cold", "warm") if name in fig["runs"]]
    launches += [(f"DDP rank {r['rank']}", r) for r in fig["runs"].get("ddp", [])]
    rows = [("phase", *(name for name, _ in launches))]
    for phase in PHASES:
        rows.append((phase, *(f"{run['phases'][phase]:.1f} s" for _, run in launches)))
    for key, label in (
        ("peak_rss_gib", "peak RSS"),
        ("private_gib", "private memory at the end"),
        ("largest_child_gib", "largest encoding worker, peak RSS"),
    ):
        rows.append((label, *(f"{run[key]:.2f} GiB" for _, run in launches)))
    return rows


def _launch_main(argv: list[str]) -> None:
    """Entry of one launch process: corpus, cache, out folder, then key=value data settings."""
    start = _process_start()
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", type=Path)
    parser.add_argument("cache", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("settings", nargs="*")
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.settings)
    fig = launch_figures(args.corpus, args.cache, settings, start)
    (args.out / f"rank-{fig['rank']}.json").write_text(json.dumps(fig, indent=1) + "\n")


def _process_start() -> float:
    """When this process started (seconds since the epoch), imports included."""
    return _psutil().Process().create_time()


def _psutil():
    """psutil, an optional dependency (the bench extra): each launch measures its memory with it."""
    return optional_module("psutil", "bench")


if __name__ == "__main__":
    _launch_main(sys.argv[1:])
