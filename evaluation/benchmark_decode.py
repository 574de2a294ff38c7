"""The decoding benchmark: tokens/s of our beam search, optionally against HF Marian's generate,
A/B interleaved in one process with equal output lengths (scripts/benchmark.py decode).

Both systems produce exactly the same number of tokens: every source has ``length`` random
subwords + EOS, and every output exactly ``length`` subwords + EOS (ours: the EOS logit held at
-1e9 and ``max_len_b = 1``, so beam_search forces EOS at ``length + 1``; theirs:
``min_new_tokens=length``, ``max_new_tokens=length + 1``, ``forced_eos_token_id``). No beam
finishes early and both run ``length + 1`` decoder steps on ``batch x beam`` rows with a cache.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable

from data.errors import UserError
from evaluation.benchmark_models import build_models
from evaluation.flops import native_bf16


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
    from data.tokenizer import BOS_ID, EOS_ID
    from model.search import beam_search

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
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16):
        return decode_ours(model, batches, beam, length)


def decode_theirs(model, batches, beam: int, length: int) -> int:
    """Marian generate() on every batch, exactly `length` tokens + EOS; returns output tokens."""
    import torch
    from transformers import GenerationConfig

    from data.tokenizer import BOS_ID, EOS_ID, PAD_ID

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
    from torch.profiler import ProfilerActivity, profile

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
    import torch

    from data.tokenizer import EOS_ID

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
        rates = [fig["tokens"] / t for t in times]
        fig[name] = {
            "tokens_per_s": statistics.median(rates),
            "tokens_per_s_min": min(rates),
            "tokens_per_s_max": max(rates),
            "sentences_per_s": statistics.median(sentences / t for t in times),
            "seconds": statistics.median(times),
        }
    if "hf" in fig:
        import transformers

        fig["ratio"] = fig["ours"]["tokens_per_s"] / fig["hf"]["tokens_per_s"]
        if "ours bf16" in fig:
            fig["ratio_bf16"] = fig["ours bf16"]["tokens_per_s"] / fig["hf"]["tokens_per_s"]
        fig["transformers_version"] = transformers.__version__
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
