"""The data benchmark: the project's real data path on replicated Multi30k, timed step by step,
padding of the token-budget batches, and a projection to WMT14 (scripts/benchmark.py data).

Projection assumptions, printed with the result: reading the text and cleaning are
single-process and linear in pairs (WMT14 itself comes through ``load_hub``: download and Arrow
conversion are not counted); tokenizer training is bounded by its sample, so it costs the same
on WMT14 once the benchmark corpus fills the sample (the replicated corpus repeats 29k sentences
and WMT14's vocabulary is 37k: this term is optimistic); encoding is linear in pairs and divides
by the worker processes (16 / ``num_proc``); batching is single-process and linear in pairs.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from data.errors import DataError
from evaluation.configs import compose_config
from evaluation.memory import PeakMemory

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
WMT14_TRAIN_PAIRS = 4_508_785
WMT14_EVAL_SENTENCES = 3_000 + 3_003  # newstest2013 + newstest2014
TARGET_CORES = 16
TARGET_SECONDS = 600.0


def write_replicated_pairs(corpus_dir: Path, out_dir: Path, pairs: int) -> dict[str, Path]:
    """Write the first `pairs` lines of Multi30k train repeated end to end: {lang: path}."""
    paths = {}
    for lang in ("en", "de"):
        lines = (corpus_dir / f"train.{lang}").read_bytes().splitlines(keepends=True)
        paths[lang] = out_dir / f"train.{lang}"
        with paths[lang].open("wb") as f:
            f.writelines(itertools.islice(itertools.cycle(lines), pairs))
    return paths


class TimedLog:
    """A `log` callback for prepare_data that prints with elapsed time and keeps timestamps."""

    def __init__(self, echo: Callable[[str], None] = print):
        self.echo = echo
        self.start = time.perf_counter()
        self.events: list[tuple[float, str]] = []

    def __call__(self, message: str) -> None:
        now = time.perf_counter()
        self.events.append((now, message))
        self.echo(f"[{now - self.start:7.1f}s] {message}")

    def at(self, prefix: str) -> float:
        """Time of the first message starting with prefix."""
        for t, message in self.events:
            if message.startswith(prefix):
                return t
        seen = "; ".join(m for _, m in self.events)
        raise RuntimeError(f"prepare_data never logged {prefix!r} (it logged: {seen})")


def benchmark_data(
    pairs: int = 1_000_000,
    num_proc: int | None = None,
    max_tokens: int = 4096,
    vocab_size: int = 8000,
    tokenizer_sample: int | None = None,
    corpus_dir: Path = MULTI30K,
    echo: Callable[[str], None] = print,
) -> dict:
    """Prepare and batch replicated Multi30k; Multi30k padding; projection to WMT14."""
    from omegaconf import OmegaConf

    from data.batching import TokenBatchSampler, padding_fraction
    from data.corpus import prepare_data, sequence_lengths
    from data.tokenizer import default_num_threads

    corpus_dir = Path(corpus_dir)
    if not (corpus_dir / "train.en").is_file():
        raise DataError(
            f"Multi30k not found at {corpus_dir}: pass --corpus-dir <folder with train.en/train.de>"
        )
    num_proc = num_proc or default_num_threads()
    wmt14 = compose_config(["data=wmt14_en_de"]).data
    tokenizer_sample = tokenizer_sample or int(wmt14.tokenizer_sample)

    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp, PeakMemory() as memory:
        tmp = Path(tmp)
        echo(f"writing {pairs} replicated Multi30k pairs to {tmp}")
        files = write_replicated_pairs(corpus_dir, tmp, pairs)
        data_cfg = OmegaConf.create(
            {
                "corpus": {
                    "_target_": "data.corpus.load_text_pairs",
                    "files": {
                        "train": {lang: str(path) for lang, path in files.items()},
                        "validation": {lang: str(corpus_dir / f"val.{lang}") for lang in files},
                        "test": {
                            lang: str(corpus_dir / f"test_2016_flickr.{lang}") for lang in files
                        },
                    },
                },
                "src_lang": "en",
                "tgt_lang": "de",
                "vocab_size": vocab_size,
                "tokenizer_sample": tokenizer_sample,
                "max_len": int(wmt14.max_len),
                "max_ratio": wmt14.max_ratio,
                "max_tokens": max_tokens,
                "num_proc": num_proc,
            }
        )
        log = TimedLog(echo)
        prepared = prepare_data(data_cfg, tmp / "cache", log=log)
        end = time.perf_counter()
        t_tok_start = log.at("data: training tokenizer")
        t_tok_end = log.at("data: tokenizer trained")
        t_train = log.at("data: split 'train'")
        t_eval = log.at("data: split 'test'")
        t_clean = log.at("data: train cleaning")
        kept = prepared.splits["train"]

        echo(f"batching {len(kept)} pairs (max_tokens {max_tokens}): construction + one epoch")
        start = time.perf_counter()
        sampler = TokenBatchSampler(
            sequence_lengths(kept, "src_ids"), sequence_lengths(kept, "tgt_ids"), max_tokens, seed=0
        )
        n_batches = sum(1 for _ in sampler)
        batching = time.perf_counter() - start

        echo("padding on the original Multi30k (configs/data/multi30k.yaml)")
        m30k_cfg = compose_config(
            ["data=multi30k", f"data.path={corpus_dir}", f"data.max_tokens={max_tokens}"]
        )
        m30k = prepare_data(m30k_cfg.data, tmp / "cache", log=TimedLog(echo)).splits["train"]
        src, tgt = sequence_lengths(m30k, "src_ids"), sequence_lengths(m30k, "tgt_ids")
        padding = padding_fraction(TokenBatchSampler(src, tgt, max_tokens, seed=0), src, tgt)

    own_mib, child_mib = PeakMemory.rusage_mib()
    sentences = 2 * pairs
    load = t_tok_start - log.start
    tokenizer = t_tok_end - t_tok_start
    encode = t_train - t_tok_end
    encode_eval = t_eval - t_train
    clean = t_clean - t_eval
    prepare = end - log.start
    eval_sentences = 2 * sum(len(prepared.splits[s]) for s in ("validation", "test"))
    scale = WMT14_TRAIN_PAIRS / pairs
    sample_fill = min(sentences, tokenizer_sample) / tokenizer_sample
    projection = {
        "load": load * scale,
        "tokenizer": tokenizer / sample_fill,
        "encode": encode * scale * num_proc / TARGET_CORES,
        "encode_eval": encode_eval * 2 * WMT14_EVAL_SENTENCES / eval_sentences,
        "clean": clean * scale,
        "batching": batching * scale,
    }
    projected = sum(projection.values())
    return {
        "pairs": pairs,
        "num_proc": num_proc,
        "cpus": default_num_threads(),
        "vocab_size": vocab_size,
        "tokenizer_sample": tokenizer_sample,
        "tokenizer_sentences": min(sentences, tokenizer_sample),
        "kept_pairs": len(kept),
        "load_s": load,
        "tokenizer_s": tokenizer,
        "encode_s": encode,
        "encode_sentences_per_s": sentences / encode,
        "encode_eval_s": encode_eval,
        "clean_s": clean,
        "prepare_s": prepare,
        "batching_s": batching,
        "batches": n_batches,
        "multi30k_pairs": len(m30k),
        "multi30k_padding": padding,
        "peak_rss_self_mib": own_mib,
        "peak_rss_largest_child_mib": child_mib,
        "peak_rss_tree_mib": memory.tree_peak_mib,
        "max_tokens": max_tokens,
        "load_average": os.getloadavg(),
        "projection": projection,
        "projected_wmt14_s": projected,
        "meets_target": projected <= TARGET_SECONDS,
    }


def data_rows(fig: dict) -> list[tuple[str, str, str]]:
    """Table rows (measure, value, note) for benchmark_data's figures."""
    proj = fig["projection"]
    tree = fig["peak_rss_tree_mib"]
    return [
        ("pairs (replicated Multi30k)", f"{fig['pairs']:,}", f"{fig['kept_pairs']:,} kept"),
        ("load text pairs", f"{fig['load_s']:.1f} s", f"-> {proj['load']:.0f} s on WMT14"),
        (
            "tokenizer training",
            f"{fig['tokenizer_s']:.1f} s",
            f"{fig['tokenizer_sentences']:,} sentences, vocab {fig['vocab_size']}"
            f" -> {proj['tokenizer']:.0f} s (sample-bounded)",
        ),
        (
            "encode train",
            f"{fig['encode_s']:.1f} s",
            f"{fig['encode_sentences_per_s']:,.0f} sentences/s, num_proc {fig['num_proc']}"
            f" -> {proj['encode']:.0f} s on {TARGET_CORES} procs",
        ),
        ("encode validation+test", f"{fig['encode_eval_s']:.1f} s", ""),
        ("clean train", f"{fig['clean_s']:.1f} s", f"-> {proj['clean']:.0f} s"),
        ("prepare_data total", f"{fig['prepare_s']:.1f} s", ""),
        (
            "batching (build + 1 epoch)",
            f"{fig['batching_s']:.2f} s",
            f"{fig['batches']:,} batches -> {proj['batching']:.0f} s",
        ),
        (
            "padding, Multi30k train",
            f"{100 * fig['multi30k_padding']:.2f} %",
            f"{fig['multi30k_pairs']:,} pairs, max_tokens {fig['max_tokens']}; target < 10 %",
        ),
        (
            "peak RSS",
            f"{fig['peak_rss_self_mib']:,.0f} MiB",
            f"largest child {fig['peak_rss_largest_child_mib']:,.0f} MiB"
            + (f", process tree (sampled) {tree:,.0f} MiB" if tree is not None else ""),
        ),
        (
            f"WMT14 {WMT14_TRAIN_PAIRS:,} pairs, {TARGET_CORES} cores",
            f"{fig['projected_wmt14_s']:.0f} s",
            f"target <= {TARGET_SECONDS:.0f} s: {'MET' if fig['meets_target'] else 'NOT MET'}",
        ),
    ]
