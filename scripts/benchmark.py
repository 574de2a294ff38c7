"""Speed benchmarks that print medians, ratios and projections as a compact table.

    python scripts/benchmark.py data   [--pairs 1000000] [--num-proc N] [--max-tokens 4096]
    python scripts/benchmark.py decode [--sentences 256] [--beam 4] [--vs hf] [--repeats 5]
    python scripts/benchmark.py train  [--model base small] [--vs hf] [--device cpu|cuda]

``data`` replicates the Multi30k training text (../shared/data/multi30k, 29k pairs) to ``--pairs``
pairs, writes it as plain-text files to a temporary folder and runs the project's real path on it,
``data.corpus.prepare_data`` with a ``load_text_pairs`` corpus and a fresh cache: tokenizer
training, encoding (``datasets.map`` with ``--num-proc`` workers) and cleaning. It then times
``TokenBatchSampler`` (construction + one epoch), measures the padding fraction on the original
29k Multi30k pairs (``configs/data/multi30k.yaml``) and projects the time to prepare WMT14
(4,508,785 pairs) on 16 cores. Projection assumptions, printed with the result:

- reading the text and cleaning are single-process and linear in the number of pairs (WMT14
  itself comes through ``load_hub``: its download and Arrow conversion are not counted);
- tokenizer training is bounded by its sample (``tokenizer_sample`` sentences, WMT14's 2M by
  default), so it costs the same on WMT14 as here once the benchmark corpus fills the sample
  (a smaller benchmark corpus is scaled up linearly to the sample);
  the replicated corpus repeats 29k sentences, which makes SentencePiece's word counting cheaper
  than on real text, and WMT14's vocabulary is 37k (``--vocab-size`` sets this one), so this
  term is optimistic;
- encoding is linear in pairs and divides by the number of worker processes (16 / ``--num-proc``);
- batching (sampler construction + one epoch) is single-process and linear in pairs.

``decode`` times ``model.search.beam_search`` on a randomly initialised model of the dims of
``configs/model/<--model>.yaml`` (sinusoidal positions, vocabulary ``--vocab-size``). With
``--vs hf`` it times Hugging Face ``MarianMTModel.generate(num_beams=...)`` on a model of
identical dims, A/B interleaved in one process (warm-up of each, then ours, theirs, ours, ...)
with the same torch thread count, and prints the ratio of tokens/s.

A fair comparison with random weights: how long a beam search runs depends on when EOS wins, so
both systems are made to produce exactly the same number of tokens.

- Every source has ``--length`` random subwords + EOS (no padding), and both systems decode the
  same batches of ``--batch-size`` sentences.
- Every output is exactly ``--length`` subwords + EOS: EOS is masked for the first ``--length``
  tokens and forced at the next one. Ours: a wrapper sets the EOS logit to -1e9 at every step
  (one column write per step) and ``max_len_b = 1`` makes ``length + 1`` the limit at which
  ``beam_search`` forces EOS. Theirs: ``min_new_tokens=length`` (HF's min-new-tokens logits
  processor, one column write per step), ``max_new_tokens=length + 1`` and
  ``forced_eos_token_id``. No beam finishes before the last step, so neither system stops early,
  and both run ``length + 1`` decoder steps on ``batch x beam`` rows with a key/value cache. The
  token counts are checked.
- Same architecture: d_model, heads, layers, d_ff, vocabulary, ReLU, one embedding matrix shared
  by encoder, decoder and output projection, embeddings scaled by sqrt(d_model), fixed sinusoids,
  post-LN (Marian's layers are post-LN with static sinusoids by construction), SDPA attention on
  both sides, dropout off (eval mode). Differences left: Marian adds a final logits bias and
  lays sinusoids out as concatenated halves; neither changes the cost measurably.

``train`` times full training steps (forward, label-smoothed loss, backward, gradient clipping,
optimizer step) on random batches of ``--batch-size`` sentences x ``--length`` tokens per side
(no padding), for each ``configs/model/<--model>.yaml`` at vocabulary ``--vocab-size``: ours
through ``model.loss.forward_backward`` with the Adam train.py builds (fused, float32 master
weights), in fp32 and under bf16 autocast. With ``--vs hf`` the same for Hugging Face
``MarianMTModel`` of identical dims the way its Trainer trains it (``LabelSmoother``, fused
AdamW, max_grad_norm 1.0), A/B interleaved in one process: one warm-up step each, then
``--repeats`` rounds of one step per system. It prints target and source+target tokens/s
(median and range), achieved GFLOP/s by the formula of ``transformer_flops`` (checked against
torch's FLOP counter in the tests), MFU against the best matmul GFLOP/s measured in the same
run (fp32 and bf16, square 2048 on CPU, 8192 on CUDA, before and after each model), the memory
autograd saves for backward, and our/their ratios. ``--device cuda`` runs bf16 only, at 25k
tokens a step (``--batch-size`` 781 x 32), with ``torch.compile`` off and on, reports the CUDA
allocator's peak and projects 100k steps at the fastest setting.

tokens/s counts output tokens including the EOS (``sentences x (length + 1)``) over the wall time
of decoding all sentences, encoder included. ``--profile`` prints where our time goes. Run it on an
otherwise idle machine: with more busy processes than cores, OpenMP threads wait on each other and
both systems slow down erratically (the load average is printed; ``--threads 1`` suffers least).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import platform
import pstats
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
WMT14_TRAIN_PAIRS = 4_508_785
WMT14_EVAL_SENTENCES = 3_000 + 3_003  # newstest2013 + newstest2014
TARGET_CORES = 16
TARGET_SECONDS = 600.0


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None
) -> str:
    """Plain-text table; align has one letter per column, l or r (default: l then r's)."""
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [
            c.ljust(w) if a == "l" else c.rjust(w)
            for c, w, a in zip(row, widths, align, strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


class PeakMemory:
    """Peak resident memory (MiB): sampled over the process tree in the block, and getrusage's.

    With psutil installed, a thread samples the sum of the RSS of this process and its children
    while the block runs (pages shared copy-on-write are counted once per process, so this
    overstates); ``rusage_mib`` gives the lifetime high-water marks of this process and of its
    largest finished child.
    """

    def __init__(self, interval: float = 0.2):
        self.interval = interval
        self.tree_peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakMemory:
        try:
            import psutil
        except ImportError:
            return self
        self.tree_peak_mib = 0.0
        process = psutil.Process()

        def sample() -> None:
            while True:
                total = 0
                for p in [process, *process.children(recursive=True)]:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.tree_peak_mib = max(self.tree_peak_mib, total / 2**20)
                if self._stop.wait(self.interval):
                    return

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @staticmethod
    def rusage_mib() -> tuple[float, float]:
        """High-water RSS of this process and of its largest waited-for child (MiB, Linux)."""
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
        return own * unit / 2**20, child * unit / 2**20


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
    from data.corpus import prepare_data
    from data.tokenizer import default_num_threads

    corpus_dir = Path(corpus_dir)
    if not (corpus_dir / "train.en").is_file():
        raise FileNotFoundError(
            f"Multi30k not found at {corpus_dir}: pass --corpus-dir <folder with train.en/train.de>"
        )
    num_proc = num_proc or default_num_threads()
    wmt14 = OmegaConf.load(ROOT / "configs" / "data" / "wmt14_en_de.yaml")
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
            train_lengths(kept, "src_ids"), train_lengths(kept, "tgt_ids"), max_tokens, seed=0
        )
        n_batches = sum(1 for _ in sampler)
        batching = time.perf_counter() - start

        echo("padding on the original Multi30k (configs/data/multi30k.yaml)")
        m30k_cfg = OmegaConf.create(
            {"data": OmegaConf.load(ROOT / "configs" / "data" / "multi30k.yaml")}
        )
        m30k_cfg.data.path = str(corpus_dir)
        m30k_cfg.data.max_tokens = max_tokens
        m30k = prepare_data(m30k_cfg.data, tmp / "cache", log=TimedLog(echo)).splits["train"]
        src, tgt = train_lengths(m30k, "src_ids"), train_lengths(m30k, "tgt_ids")
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


def train_lengths(dataset, column: str):
    """Lengths of a list column as a NumPy array, read from Arrow without Python lists."""
    import pyarrow.compute as pc

    return pc.list_value_length(dataset.with_format("arrow")[column]).to_numpy()


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


def build_models(model_name: str, vocab_size: int, with_hf: bool, **dims):
    """Our Transformer of configs/model/<name>.yaml (+ dims) and optionally Marian of equal dims."""
    import torch
    from omegaconf import OmegaConf

    from data.tokenizer import BOS_ID, EOS_ID, PAD_ID
    from model.transformer import build_model

    model_cfg = OmegaConf.merge(
        OmegaConf.load(ROOT / "configs" / "model" / f"{model_name}.yaml"),
        {k: v for k, v in dims.items() if v is not None},
    )
    position = OmegaConf.load(ROOT / "configs" / "position" / "sinusoidal.yaml")
    torch.manual_seed(0)
    ours = build_model(model_cfg, position, vocab_size, PAD_ID).eval()
    if not with_hf:
        return ours, None, model_cfg
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=vocab_size,
        d_model=model_cfg.d_model,
        encoder_layers=model_cfg.n_encoder_layers,
        decoder_layers=model_cfg.n_decoder_layers,
        encoder_attention_heads=model_cfg.n_heads,
        decoder_attention_heads=model_cfg.n_heads,
        encoder_ffn_dim=model_cfg.d_ff,
        decoder_ffn_dim=model_cfg.d_ff,
        max_position_embeddings=model_cfg.max_positions,
        activation_function="relu",
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID,
        forced_eos_token_id=EOS_ID,
    )
    torch.manual_seed(0)
    theirs = MarianMTModel._from_config(config, attn_implementation="sdpa").eval()
    return ours, theirs, model_cfg


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
        raise ValueError("need --length >= 1, --sentences >= 1, --repeats >= 1 and --beam >= 2")
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


def transformer_flops(dims: dict, vocab_size: int, batch: int, src_len: int, tgt_len: int) -> int:
    """Matmul FLOPs of one training step (forward + backward = 3 x forward), 2 per multiply-add.

    Per forward, with d = d_model, f = d_ff, S/T source/target tokens, B sentences:
    encoder layer  8 d^2 S (q, k, v, out) + 4 B S^2 d (scores, weighted values) + 4 d f S;
    decoder layer  8 d^2 T + 4 B T^2 d (self; causal masking not subtracted, as it is computed)
                   + 4 d^2 T + 4 d^2 S + 4 B T S d (cross: q, out on T; k, v on S)
                   + 4 d f T;
    output projection 2 d V T. Embedding lookups, norms, softmax and the loss are not counted.
    """
    d, f = dims["d_model"], dims["d_ff"]
    s, t = batch * src_len, batch * tgt_len
    encoder = 8 * d * d * s + 4 * batch * src_len**2 * d + 4 * d * f * s
    decoder = (
        8 * d * d * t
        + 4 * batch * tgt_len**2 * d
        + 4 * d * d * t
        + 4 * d * d * s
        + 4 * batch * tgt_len * src_len * d
        + 4 * d * f * t
    )
    forward = (
        dims["n_encoder_layers"] * encoder
        + dims["n_decoder_layers"] * decoder
        + 2 * d * vocab_size * t
    )
    return 3 * forward


def gemm_peak(dtype, device, size: int = 2048, repeats: int = 10) -> float:
    """Measured matmul GFLOP/s of [size x size] @ [size x size] in dtype, best of repeats."""
    import torch

    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    calls = 1 if device.type == "cpu" else 50
    rates = []
    for run in range(repeats + 1):
        start = _synchronized_time(device)
        for _ in range(calls):
            a @ b
        elapsed = _synchronized_time(device) - start
        if run:
            rates.append(2 * size**3 * calls / elapsed / 1e9)
    return max(rates)


def hardware_name(device) -> str:
    """The GPU's name, or the CPU's model name from /proc/cpuinfo (else the architecture)."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line]
    return names[0] if names else platform.machine()


def cpu_flags() -> list[str]:
    """The CPU flags that decide bf16 speed (avx512_bf16, amx_bf16, ...) from /proc/cpuinfo."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    words = next(
        (
            line.split(":", 1)[1].split()
            for line in cpuinfo.splitlines()
            if line.startswith("flags")
        ),
        [],
    )
    return sorted(
        w for w in set(words) if w in ("avx2", "avx512f", "avx512_bf16") or w.startswith("amx")
    )


def native_bf16(device) -> bool:
    """True on CUDA and on CPUs with AVX512-BF16 or AMX; elsewhere bf16 GEMMs are emulated."""
    if device.type == "cuda":
        return True
    flags = cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def default_precisions(device) -> list[str]:
    """bf16 on CUDA; fp32 on a CPU, plus bf16 where the CPU has it natively."""
    if device.type == "cuda":
        return ["bf16"]
    return ["fp32", "bf16"] if native_bf16(device) else ["fp32"]


def _synchronized_time(device) -> float:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class StepMemory:
    """Memory (MiB) one training step holds: what autograd saves for backward, and CUDA's peak.

    ``saved_mib``: distinct storages autograd keeps for the backward pass (activations and
    bf16 weight copies; the parameters themselves are not counted), the same measure for any
    model and device (None with track_saved off, for compiled models). ``peak_mib`` (CUDA
    only): the allocator's peak above its level at entry.
    """

    def __init__(self, device, parameters, track_saved: bool = True):
        self.device = device
        self.track_saved = track_saved
        self.saved_mib: float | None = None
        self.peak_mib: float | None = None
        self._params = {p.untyped_storage().data_ptr() for p in parameters}
        self._storages: dict[int, int] = {}

    def _pack(self, tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self._params:
            self._storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    def __enter__(self) -> StepMemory:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.track_saved:
            self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
            self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        import torch

        if self.track_saved:
            self._hooks.__exit__(*exc)
            self.saved_mib = sum(self._storages.values()) / 2**20
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mib = (torch.cuda.max_memory_allocated(self.device) - self._base) / 2**20


def train_systems(
    model_name: str, vocab_size: int, with_hf: bool, device, compile_modes, precisions, **dims
):
    """Name -> (one training step, its model) for ours (fp32, bf16, compiled) and HF Marian."""
    import torch
    from omegaconf import OmegaConf

    from model.loss import forward_backward
    from model.optim import clip_gradients

    optim = OmegaConf.load(ROOT / "configs" / "optim" / "noam.yaml")
    ours, theirs, model_cfg = build_models(model_name, vocab_size, with_hf, **dims)
    systems = {}

    def our_step(model, optimizer, bf16: bool) -> Callable:
        def step(batch: dict) -> None:
            forward_backward(
                model, batch, optim.label_smoothing, 1 / batch["tgt_out"].numel(), bf16
            )
            clip_gradients(model.parameters(), optim.clip_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return step

    ours = ours.to(device).train()
    # the optimizer train.py builds: fused Adam, float32 master weights
    adam = torch.optim.Adam(
        ours.parameters(), lr=1e-4, betas=tuple(optim.betas), eps=optim.eps, fused=True
    )
    for precision in precisions:
        for compiled in compile_modes:
            model = torch.compile(ours) if compiled else ours
            name = f"ours {precision}" + (" compiled" if compiled else "")
            systems[name] = (our_step(model, adam, precision == "bf16"), ours)
    if theirs is not None:
        from transformers.trainer_pt_utils import LabelSmoother

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
    **dims,
) -> dict:
    """Training-step throughput, GFLOP/s, MFU and step memory per model size and system.

    dims override the model configs' (d_model=..., ...), as in benchmark_decode. compile_modes:
    eager and/or torch.compile'd steps of ours (default: eager on CPU, both on CUDA); a compiled
    step that fails is reported under "failed" and left out. precisions: fp32 and/or bf16
    (default: ``default_precisions``, so a CPU without native bf16 times fp32 only).
    """
    import torch

    if repeats < 1 or batch_size < 1 or length < 1:
        raise ValueError("need --repeats >= 1, --batch-size >= 1 and --length >= 1")
    device = torch.device(device_name)
    precisions = list(precisions or default_precisions(device))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    if num_threads:
        torch.set_num_threads(num_threads)
    gemm_size = 2048 if device.type == "cpu" else 8192
    peaks = {"fp32": 0.0, "bf16": 0.0}

    def measure_peaks() -> None:  # before and after each model; the best figure is the peak
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            # a precision not timed (emulated bf16 on a CPU): one 512-square figure for the record
            size, repeats = (gemm_size, 10) if name in precisions or name == "fp32" else (512, 1)
            peaks[name] = max(peaks[name], gemm_peak(dtype, device, size, repeats))
        echo(f"GEMM peak: fp32 {peaks['fp32']:,.1f} GFLOP/s, bf16 {peaks['bf16']:,.1f} GFLOP/s")

    measure_peaks()
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab_size, (batch_size, length), generator=generator)  # [B, S]
    tgt = torch.randint(4, vocab_size, (batch_size, length + 1), generator=generator)  # [B, T+1]
    batch = {"src": src, "tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:]}
    batch = {k: v.to(device) for k, v in batch.items()}
    if compile_modes is None:
        compile_modes = [False] if device.type == "cpu" else [False, True]
    fig = {
        "device": device_name,
        "device_name": hardware_name(device),
        "cpu_flags": cpu_flags() if device.type == "cpu" else [],
        "precisions": precisions,
        "batch_size": batch_size,
        "length": length,
        "vocab_size": vocab_size,
        "repeats": repeats,
        "num_threads": torch.get_num_threads(),
        "gemm_peak_gflops": peaks,
        "torch_version": torch.__version__,
        "models": {},
    }
    tokens = batch_size * length  # per side
    for model_name in model_names:
        systems, model_cfg = train_systems(
            model_name, vocab_size, vs == "hf", device, compile_modes, precisions, **dims
        )
        model_dims = {
            k: model_cfg[k]
            for k in ("d_model", "n_heads", "n_encoder_layers", "n_decoder_layers", "d_ff")
        }
        flops = transformer_flops(model_dims, vocab_size, batch_size, length, length)
        seconds = {name: [] for name in systems}
        memory, failed = {}, {}
        for run in range(repeats + 1):
            for name, (step, _) in systems.items():
                if name in failed:
                    continue
                # saved-tensor hooks and torch.compile do not mix: compiled steps report none
                track = "compiled" not in name
                with StepMemory(device, systems[name][1].parameters(), track) as mem:
                    start = _synchronized_time(device)
                    try:
                        step(batch)
                    except Exception as e:  # a compiler missing on this machine: report, go on
                        if "compiled" not in name:
                            raise
                        failed[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
                        echo(f"{model_name} {name}: failed ({failed[name]}); left out")
                        systems[name][1].zero_grad(set_to_none=True)
                        continue
                    elapsed = _synchronized_time(device) - start
                what = "warm-up" if run == 0 else f"run {run}/{repeats}"
                echo(
                    f"{model_name} {name:>18} {what}: {elapsed:.3f} s, "
                    f"{tokens / elapsed:,.0f} target tokens/s"
                )
                if run:
                    seconds[name].append(elapsed)
                    memory[name] = (mem.saved_mib, mem.peak_mib)
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
                "parameters": sum(
                    p.numel() for p in systems[name][1].parameters() if p.requires_grad
                ),
            }
        entry = {"dims": model_dims, "flops_per_step": flops, "systems": rows, "failed": failed}
        if vs == "hf":
            # like for like first (the verdicts); the cross-precision ratio is labelled as such
            entry["ratios"] = {
                f"{a} / {b}": rows[b]["seconds"] / rows[a]["seconds"]
                for a, b in (
                    ("ours fp32", "hf fp32"),
                    ("ours bf16", "hf bf16"),
                    ("ours bf16", "hf fp32"),
                )
                if a in rows and b in rows
            }
        if device.type == "cuda":
            fastest = min(rows.values(), key=lambda r: r["seconds"])
            entry["projected_100k_steps_h"] = fastest["seconds"] * 100_000 / 3600
        fig["models"][model_name] = entry
        del systems
        measure_peaks()
    for entry in fig["models"].values():
        for row in entry["systems"].values():
            row["mfu"] = row["gflops"] / peaks[row["precision"]]
        # the most any system could lead theirs: ours at 100% MFU (every step a peak GEMM)
        entry["ratio_bound"] = {
            precision: entry["systems"][f"hf {precision}"]["seconds"]
            / (entry["flops_per_step"] / peaks[precision] / 1e9)
            for precision in ("fp32", "bf16")
            if f"hf {precision}" in entry["systems"] and peaks[precision] > 0
        }
    fig["load_average"] = os.getloadavg()
    return fig


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


def machine_line(fig: dict) -> str:
    """One line saying when and where figures were measured."""
    load = ", ".join(f"{x:.2f}" for x in fig["load_average"])
    return (
        f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()} {platform.system()}, "
        f"{os.cpu_count()} CPUs, load average (1/5/15 min) at the end {load}"
    )


def run_data(args: argparse.Namespace) -> dict:
    """Run the data benchmark from parsed arguments and print its table."""
    fig = benchmark_data(
        args.pairs,
        args.num_proc,
        args.max_tokens,
        args.vocab_size,
        args.tokenizer_sample,
        args.corpus_dir,
    )
    print(f"\ndata benchmark, {machine_line(fig)}")
    print(format_table(("measure", "value", "note"), data_rows(fig), align="lrl"))
    print(
        f"projection to WMT14 on {TARGET_CORES} cores: loading, cleaning and batching linear in "
        "pairs (one process); tokenizer training constant (sample-bounded; optimistic here: "
        f"repeated text, vocab {fig['vocab_size']} vs 37k); encoding linear in pairs, divided "
        f"by {TARGET_CORES} / {fig['num_proc']} processes"
    )
    return fig


def run_decode(args: argparse.Namespace) -> dict:
    """Run the decode benchmark from parsed arguments and print its table."""
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
    from evaluation.variant_cost import variant_cost_rows, variant_step_times

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
        f"\nposition variants, training step (forward, backward, Adam), fp32, torch "
        f"{fig['torch_version']}, {fig['num_threads']} threads, {fig['batch_size']} sentences x "
        f"{fig['length']} tokens per side, vocab {fig['vocab_size']}, median of {fig['repeats']} "
        "interleaved steps"
    )
    headers = ("model", "position", "step s", "range", "vs sinusoidal", "parameters added")
    print(format_table(headers, variant_cost_rows(fig), align="llrrrr"))
    return fig


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
    )
    peaks = fig["gemm_peak_gflops"]
    print(
        f"\ntrain benchmark, {machine_line(fig)}, {fig['device_name']}, torch "
        f"{fig['torch_version']}, {fig['num_threads']} threads\n{fig['batch_size']} sentences x "
        f"{fig['length']} tokens per side, vocab {fig['vocab_size']}, median of {fig['repeats']} "
        f"steps (forward, backward, gradient norm or clip, optimizer); GEMM peak fp32 "
        f"{peaks['fp32']:,.0f}, bf16 {peaks['bf16']:,.0f} GFLOP/s; CPU flags: "
        f"{' '.join(fig['cpu_flags']) or '-'}; precisions timed: {', '.join(fig['precisions'])}"
    )
    if fig["device"] == "cpu" and "bf16" not in fig["precisions"]:
        print("bf16 not timed: this CPU has no AVX512-BF16/AMX (bf16 GEMMs are emulated)")
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
        for name, error in entry.get("failed", {}).items():
            print(f"  {model_name} {name}: failed, left out ({error})")
        if "projected_100k_steps_h" in entry:
            print(
                f"  {model_name}: 100k steps at the fastest setting: "
                f"{entry['projected_100k_steps_h']:.1f} h"
            )
    return fig


def main(argv: Sequence[str] | None = None) -> dict:
    """Command-line entry: one subcommand per benchmark; prints its table, returns its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    data = commands.add_parser("data", help="tokenizer, encoding, batching, padding, memory")
    data.add_argument("--pairs", type=int, default=1_000_000, help="replicated training pairs")
    data.add_argument("--num-proc", type=int, default=None, help="encoding workers (all CPUs)")
    data.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch and side")
    data.add_argument("--vocab-size", type=int, default=8000)
    data.add_argument("--tokenizer-sample", type=int, default=None, help="WMT14's by default")
    data.add_argument("--corpus-dir", type=Path, default=MULTI30K, help="Multi30k text folder")
    data.set_defaults(run=run_data)

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
    decode.set_defaults(run=run_decode)

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
        "--variants",
        nargs="*",
        default=None,
        help="time position variants relative to sinusoidal instead (none named: all of "
        "configs/position; CPU, fp32; default batch 32 sentences)",
    )
    train.set_defaults(run=run_train)

    args = parser.parse_args(argv)
    if getattr(args, "command", None) == "train":
        import torch

        if args.device not in ("cpu", "cuda"):
            parser.error(f"--device {args.device}: pass cpu or cuda")
        if args.device == "cuda" and not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA device here; run it on a GPU machine")
        if args.variants is not None and args.device != "cpu":
            parser.error("--variants times CPU steps only: drop --device")
        if args.batch_size is None and args.variants is not None:
            args.batch_size = 32
        if args.batch_size is None:
            args.batch_size = 128 if args.device == "cpu" else 25_000 // args.length
    return args.run(args)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # `python scripts/benchmark.py` from the checkout imports model/
    main()
