"""The decoding benchmark: tokens/s of our beam search, optionally against HF Marian's generate,
A/B interleaved in one process with equal output lengths (scripts/benchmark.py decode).

Both systems produce exactly the same number of tokens: every source has ``length`` random
subwords + EOS, and every output exactly ``length`` subwords + EOS (ours: the EOS logit held at
-1e9 and ``max_len_b = 1``, so beam_search forces EOS at ``length + 1``; theirs:
``min_new_tokens=length``, ``max_new_tokens=length + 1``, ``forced_eos_token_id``). No beam
finishes early and both run ``length + 1`` decoder steps on ``batch x beam`` rows with a cache.

``benchmark_engines`` (``decode --run-dir RUN``): decoding speed and BLEU of one trained run
through every engine, on the same sentences: our search (model/search.py), CTranslate2 in
float32 and int8 (interop/ctranslate2_engine.py) and Hugging Face
``MarianMTModel.generate`` on the run's weights mapped by interop/marian.py (LayerNorm eps set to
ours, so it is the same network). A/B interleaved in one process: one warm-up of each, then
``repeats`` rounds of ours, CTranslate2 float32, CTranslate2 int8, HF. Every system reads our
subword ids (source + EOS) and returns output ids, so tokenization is not timed; tokens/s counts
output tokens including the EOS that ends each one, over the wall time of all sentences. Same
threads for all (torch's count; CTranslate2 ``intra_threads``). Search: beam, GNMT length
penalty (ours; CTranslate2 re-ranks its n-best by it); HF's beam search divides log P by
|Y|^lenpen instead (no GNMT option there). Batches: ours by token budget (``max_tokens``/beam),
the others by source length (for the per-sentence length cap).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import sacrebleu
import torch
from omegaconf import OmegaConf
from torch.profiler import ProfilerActivity, profile

from benchmarks.flops import native_bf16
from benchmarks.models import build_models
from common.errors import UserError, optional_module
from data.batching import TokenBatchSampler, collate
from data.corpus import load_split
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from evaluation.evaluate import MAX_BEAM
from interop.ctranslate2_engine import ctranslate2_translator, translate_pieces
from interop.marian import marian_generate, to_marian
from model.search import beam_search
from runs.checkpoint import check_finite_weights
from runs.run import load_run, rebuild_model


class EosSuppressed:
    """Our model with the EOS logit at -1e9, so no beam ends before its length limit."""

    def __init__(self, model, eos_id: int):
        self.model = model
        self.eos_id = eos_id

    def encode(self, src):
        """The model's encoder output and source mask."""
        return self.model.encode(src)

    def new_cache(self, memory=None, repeat: int = 1):
        """The model's key/value cache."""
        return self.model.new_cache(memory, repeat)

    def decode(self, *args, **kwargs):
        """The model's logits [B, T, V] with EOS made (almost) impossible."""
        logits = self.model.decode(*args, **kwargs)
        logits[..., self.eos_id] = -1e9
        return logits


def decode_ours(model, batches, beam: int, length: int) -> int:
    """Beam-search every batch with EOS held back to `length`; returns output tokens (EOS incl.)."""
    suppressed = EosSuppressed(model, EOS_ID)
    tokens = 0
    for src in batches:
        hyps = beam_search(suppressed, src, BOS_ID, EOS_ID, beam, 0.6, max_len_b=1)
        if any(len(h) != length for h in hyps):
            raise RuntimeError(
                f"ours produced lengths {sorted({len(h) for h in hyps})} != {length}"
            )
        tokens += len(hyps) * (length + 1)
    return tokens


def decode_ours_bf16(model, batches, beam: int, length: int) -> int:
    """decode_ours under bf16 autocast (what evaluate.py's precision=bf16 does)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return decode_ours(model, batches, beam, length)


def decode_theirs(model, batches, beam: int, length: int) -> int:
    """Marian generate() on every batch, exactly `length` tokens + EOS; returns output tokens."""
    # transformers deferred: optional (the bench extra), needed only with --vs hf
    GenerationConfig = optional_module("transformers", "bench").GenerationConfig

    generation = GenerationConfig(
        num_beams=beam,
        max_new_tokens=length + 1,
        min_new_tokens=length,
        forced_eos_token_id=EOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        decoder_start_token_id=BOS_ID,
        length_penalty=0.6,
        early_stopping=False,
        do_sample=False,
        use_cache=True,
    )
    tokens = 0
    with torch.no_grad():
        for src in batches:
            out = model.generate(
                input_ids=src, attention_mask=src.ne(PAD_ID), generation_config=generation
            )
            # [B, 1 + length + 1]: decoder start, length tokens, EOS
            if out.shape[1] != length + 2 or bool((out[:, 1:-1] == EOS_ID).any()):
                raise RuntimeError(f"theirs produced shape {tuple(out.shape)}, not EOS at {length}")
            tokens += out.shape[0] * (length + 1)
    return tokens


def profile_ours(model, batches, beam: int, length: int, top: int = 15) -> str:
    """Top operators (torch.profiler, self CPU time) and Python functions (cProfile) of ours."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        decode_ours(model, batches, beam, length)
    ops = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)
    profiler = cProfile.Profile()
    profiler.enable()
    decode_ours(model, batches, beam, length)
    profiler.disable()
    with tempfile.TemporaryFile("w+") as stream:
        stats = pstats.Stats(profiler, stream=stream).sort_stats("tottime")
        stats.print_stats(top)
        stream.seek(0)
        python = stream.read()
    return f"torch.profiler, one run of ours:\n{ops}\ncProfile, one run of ours:\n{python}"


def time_interleaved(
    systems: dict[str, tuple[Callable, object]],
    batches: list,
    beam: int,
    length: int,
    repeats: int,
    echo: Callable[[str], None],
) -> dict[str, list[float]]:
    """Seconds per run of each system: one warm-up each, then A/B/A/B... `repeats` times."""
    tokens = sum(len(b) for b in batches) * (length + 1)
    seconds: dict[str, list[float]] = {name: [] for name in systems}
    for run in range(repeats + 1):
        for name, (decode, model) in systems.items():
            start = time.perf_counter()
            produced = decode(model, batches, beam, length)
            elapsed = time.perf_counter() - start
            if produced != tokens:
                raise RuntimeError(f"{name} decoded {produced} tokens, expected {tokens}")
            what = "warm-up" if run == 0 else f"run {run}/{repeats}"
            echo(f"{name:>4} {what}: {elapsed:.2f} s, {tokens / elapsed:,.0f} tokens/s")
            if run:
                seconds[name].append(elapsed)
    return seconds


def decode_figures(times: list[float], tokens: int, sentences: int) -> dict:
    """One system's tokens/s (median and range), sentences/s and seconds over the timed runs."""
    rates = [tokens / t for t in times]
    return {
        "tokens_per_s": statistics.median(rates),
        "tokens_per_s_min": min(rates),
        "tokens_per_s_max": max(rates),
        "sentences_per_s": statistics.median(sentences / t for t in times),
        "seconds": statistics.median(times),
    }


def add_hf_ratios(fig: dict) -> None:
    """Add ours' tokens/s over HF Marian's (fp32; bf16 where timed) and transformers' version."""
    # transformers deferred: optional (the bench extra), needed only with --vs hf
    transformers = optional_module("transformers", "bench")

    fig["ratio"] = fig["ours"]["tokens_per_s"] / fig["hf"]["tokens_per_s"]
    if "ours bf16" in fig:
        fig["ratio_bf16"] = fig["ours bf16"]["tokens_per_s"] / fig["hf"]["tokens_per_s"]
    fig["transformers_version"] = transformers.__version__


def benchmark_decode(
    sentences: int = 256,
    beam: int = 4,
    vs: str | None = None,
    repeats: int = 5,
    length: int = 20,
    batch_size: int = 64,
    model_name: str = "small",
    vocab_size: int = 8000,
    num_threads: int | None = None,
    profile: bool = False,
    echo: Callable[[str], None] = print,
    **dims,
) -> dict:
    """Tokens/s of our beam search (and of HF Marian's with vs='hf'), median over repeats."""
    if length < 1 or sentences < 1 or repeats < 1 or beam < 2:
        raise UserError("need --length >= 1, --sentences >= 1, --repeats >= 1 and --beam >= 2")
    ours, theirs, model_cfg = build_models(model_name, vocab_size, vs == "hf", **dims)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab_size, (sentences, length + 1), generator=generator)  # [N, S]
    src[:, -1] = EOS_ID
    batches = list(src.split(batch_size))
    systems = {"ours": (decode_ours, ours)}
    if native_bf16(torch.device("cpu")):  # emulated bf16 decodes slower than float32
        systems["ours bf16"] = (decode_ours_bf16, ours)
    if theirs is not None:
        systems["hf"] = (decode_theirs, theirs)
    threads_before = torch.get_num_threads()
    torch.set_num_threads(num_threads or threads_before)
    try:
        threads = torch.get_num_threads()
        seconds = time_interleaved(systems, batches, beam, length, repeats, echo)
        report = profile_ours(ours, batches, beam, length) if profile else None
    finally:
        torch.set_num_threads(threads_before)
    dim_keys = ("d_model", "n_heads", "n_encoder_layers", "n_decoder_layers", "d_ff")
    fig = {
        "sentences": sentences,
        "beam": beam,
        "length": length,
        "batch_size": batch_size,
        "repeats": repeats,
        "num_threads": threads,
        "model": {k: model_cfg[k] for k in dim_keys} | {"vocab_size": vocab_size},
        "tokens": sentences * (length + 1),
        "torch_version": torch.__version__,
        "load_average": os.getloadavg(),
    }
    for name, times in seconds.items():
        fig[name] = decode_figures(times, fig["tokens"], sentences)
    if "hf" in fig:
        add_hf_ratios(fig)
    if report is not None:
        fig["profile"] = report
    return fig


def decode_rows(fig: dict) -> list[tuple[str, ...]]:
    """Table rows (system, tokens/s median, range, sentences/s, s per run) for decode figures."""
    rows = []
    for name, label in (
        ("ours", "ours: model.search.beam_search, fp32"),
        ("ours bf16", "ours: the same, bf16 autocast"),
        ("hf", "hf: Marian generate, fp32"),
    ):
        if name in fig:
            f = fig[name]
            rows.append(
                (
                    label,
                    f"{f['tokens_per_s']:,.0f}",
                    f"{f['tokens_per_s_min']:,.0f}-{f['tokens_per_s_max']:,.0f}",
                    f"{f['sentences_per_s']:,.1f}",
                    f"{f['seconds']:.2f}",
                )
            )
    return rows


def our_ids(model, sources, beam, lenpen, max_len_b, max_tokens=4096) -> list[list[int]]:
    """Our search over sources (ids + EOS), batched as evaluation/translate.py does."""
    lengths = [len(s) for s in sources]
    out: list[list[int]] = [[] for _ in sources]
    budget = max(max_tokens // beam, max(lengths))
    for batch in TokenBatchSampler(lengths, lengths, budget, shuffle=False):
        examples = [{"src_ids": sources[i], "tgt_ids": [EOS_ID]} for i in batch]
        src = collate(examples, pad_id=PAD_ID, bos_id=BOS_ID)["src"]
        hyps = beam_search(model, src, BOS_ID, EOS_ID, beam, lenpen, max_len_b)
        for i, hyp in zip(batch, hyps, strict=True):
            out[i] = hyp
    return out


def time_engines(
    systems: dict[str, Callable[[], list[list[int]]]], repeats: int, echo: Callable[[str], None]
) -> tuple[dict[str, list[float]], dict[str, list[list[int]]]]:
    """Each system's decode timed repeats times after a warm-up, A/B interleaved; its last ids."""
    seconds: dict[str, list[float]] = {name: [] for name in systems}
    outputs: dict[str, list[list[int]]] = {}
    for run in range(repeats + 1):
        for name, decode in systems.items():
            start = time.perf_counter()
            outputs[name] = decode()
            elapsed = time.perf_counter() - start
            tokens = sum(len(h) + 1 for h in outputs[name])
            what = "warm-up" if run == 0 else f"run {run}/{repeats}"
            echo(f"{name:>16} {what}: {elapsed:.2f} s, {tokens / elapsed:,.0f} tokens/s")
            if run:
                seconds[name].append(elapsed)
    return seconds, outputs


def engine_figures(
    times: list[float], ids: list[list[int]], ours: list[list[int]], tokenizer, refs: list[str]
) -> dict:
    """One system's tokens/s (median, range), seconds, sacreBLEU, outputs identical to ours."""
    tokens = sum(len(h) + 1 for h in ids)
    rates = [tokens / t for t in times]
    hyps = tokenizer.decode(ids)
    return {
        "tokens": tokens,
        "tokens_per_s": statistics.median(rates),
        "tokens_per_s_min": min(rates),
        "tokens_per_s_max": max(rates),
        "seconds": statistics.median(times),
        "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
        "same_as_ours": sum(a == b for a, b in zip(ids, ours, strict=True)),
    }


def benchmark_engines(
    run_dir: str | Path,
    split: str = "test",
    sentences: int = 200,
    beam: int = 4,
    lenpen: float = 0.6,
    max_len_b: int = 50,
    repeats: int = 3,
    checkpoint: str = "last",
    echo: Callable[[str], None] = print,
    num_threads: int | None = None,
) -> dict:
    """Per system: tokens/s (median and range over repeats), seconds, sacreBLEU on the sentences."""
    if sentences < 1 or beam < 1 or repeats < 1 or max_len_b < 1:
        raise UserError(
            f"--sentences {sentences}, --beam {beam}, --repeats {repeats}: pass --sentences >= "
            "1, --beam >= 1 and --repeats >= 1"
        )
    if num_threads:
        torch.set_num_threads(num_threads)
    state, tag = load_run(Path(run_dir), checkpoint)
    check_finite_weights(state, f"checkpoint {tag} of {run_dir}")  # probe 13-27: timed anyway
    model, tokenizer = rebuild_model(state, torch.device("cpu"), run_dir)
    if beam > min(MAX_BEAM, tokenizer.vocab_size):  # as evaluate.py refuses it (probe i-8)
        raise UserError(
            f"--beam {beam}: pass 1 to {min(MAX_BEAM, tokenizer.vocab_size)} (this run's "
            f"vocabulary has {tokenizer.vocab_size} subwords; the search keeps at most {MAX_BEAM})"
        )
    dataset = load_split(OmegaConf.create(state["config"]["data"]), split)
    srcs, refs = list(dataset["src"])[:sentences], list(dataset["tgt"])[:sentences]
    sources = [ids + [EOS_ID] for ids in tokenizer.encode(srcs)]
    vocabulary = tokenizer.pieces()
    with ExitStack() as stack:
        cpu = torch.device("cpu")
        ct2_fp32 = stack.enter_context(ctranslate2_translator(model, tokenizer, cpu, "float32"))
        ct2_int8 = stack.enter_context(ctranslate2_translator(model, tokenizer, cpu, "int8"))
        marian = to_marian(model)
        systems = {
            "ours fp32": lambda: our_ids(model, sources, beam, lenpen, max_len_b),
            "ctranslate2 fp32": lambda: translate_pieces(
                ct2_fp32, sources, vocabulary, beam, lenpen, max_len_b
            ),
            "ctranslate2 int8": lambda: translate_pieces(
                ct2_int8, sources, vocabulary, beam, lenpen, max_len_b
            ),
            "hf generate fp32": lambda: marian_generate(marian, sources, beam, lenpen, max_len_b),
        }
        seconds, outputs = time_engines(systems, repeats, echo)
    fig = {
        "run_dir": str(run_dir),
        "checkpoint": tag,
        "split": split,
        "sentences": len(srcs),
        "beam": beam,
        "lenpen": lenpen,
        "num_threads": torch.get_num_threads(),
        "repeats": repeats,
        "load_average": os.getloadavg(),
    }
    for name, times in seconds.items():
        fig[name] = engine_figures(times, outputs[name], outputs["ours fp32"], tokenizer, refs)
    return fig


def engine_rows(fig: dict) -> list[tuple[str, ...]]:
    """Table rows: system, tokens/s median, range, seconds, BLEU, outputs identical to ours."""
    rows = []
    for name in ("ours fp32", "ctranslate2 fp32", "ctranslate2 int8", "hf generate fp32"):
        f = fig[name]
        rows.append(
            (
                name,
                f"{f['tokens_per_s']:,.0f}",
                f"{f['tokens_per_s_min']:,.0f}-{f['tokens_per_s_max']:,.0f}",
                f"{f['seconds']:.2f}",
                f"{f['bleu']:.2f}",
                f"{f['same_as_ours']}/{fig['sentences']}",
            )
        )
    return rows
