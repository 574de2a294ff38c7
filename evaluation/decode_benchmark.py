"""Decoding speed and BLEU of one trained run through every engine, on the same sentences.

``python scripts/benchmark.py decode --run-dir RUN`` runs it: our search (model/search.py),
CTranslate2 in float32 and int8 (evaluation/ctranslate2_engine.py) and Hugging Face
``MarianMTModel.generate`` on the run's weights mapped by model/marian.py (LayerNorm eps set to
ours, so it is the same network). A/B interleaved in one process: one warm-up of each, then
``repeats`` rounds of ours, CTranslate2 float32, CTranslate2 int8, HF. Every system reads our
subword ids (source + EOS) and returns output ids, so tokenization is not timed; tokens/s counts
output tokens including the EOS that ends each one, over the wall time of all sentences. Same
threads for all (torch's count; CTranslate2 ``intra_threads``). Search: beam, GNMT length
penalty (ours; CTranslate2 re-ranks its n-best by it); HF's beam search divides log P by
|Y|^lenpen instead (no GNMT option there). Batches: ours by token budget (``max_tokens``/beam),
the others by source length (for the per-sentence length cap).
"""

import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import sacrebleu
import torch
from omegaconf import OmegaConf

from data.batching import TokenBatchSampler, collate
from data.corpus import load_split
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from evaluation.ctranslate2_engine import ctranslate2_translator, translate_pieces
from evaluation.run import load_run, rebuild_model
from model.marian import marian_generate, to_marian
from model.search import beam_search


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
) -> dict:
    """Per system: tokens/s (median and range over repeats), seconds, sacreBLEU on the sentences."""
    state, tag = load_run(Path(run_dir), checkpoint)
    model, tokenizer = rebuild_model(state, torch.device("cpu"))
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
    fig = {
        "run_dir": str(run_dir),
        "checkpoint": tag,
        "split": split,
        "sentences": len(srcs),
        "beam": beam,
        "lenpen": lenpen,
        "num_threads": torch.get_num_threads(),
        "repeats": repeats,
    }
    reference = outputs["ours fp32"]
    for name, times in seconds.items():
        tokens = sum(len(h) + 1 for h in outputs[name])
        rates = [tokens / t for t in times]
        hyps = tokenizer.decode(outputs[name])
        fig[name] = {
            "tokens": tokens,
            "tokens_per_s": statistics.median(rates),
            "tokens_per_s_min": min(rates),
            "tokens_per_s_max": max(rates),
            "seconds": statistics.median(times),
            "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
            "same_as_ours": sum(a == b for a, b in zip(outputs[name], reference, strict=True)),
        }
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
