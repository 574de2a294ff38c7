"""Translate and score a trained run: `python evaluate.py run_dir=<dir> [split=test] [beam=4]`.

Rebuilds the model from the config stored in the checkpoint (never today's YAML), translates
with the paper's beam search (§6.1: beam 4, GNMT length penalty 0.6, max length source + 50)
and writes `<run_dir>/eval/<name>.json` with BLEU scored two ways (RECIPE.md):
`bleu` is detokenized sacreBLEU with its signature (today's practice); `tok_bleu` is the
paper's: Moses-tokenized, hyphenated compounds split as `A ##AT##-##AT## B`, BLEU on tokens.
"""

import json
import logging
import math
import os
import re
import sys
import tempfile
from pathlib import Path

import hydra
import sacrebleu
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from data.batching import TokenBatchSampler, collate
from data.corpus import DataError, load_split
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from model.checkpoint import CheckpointError, average_checkpoints, load_checkpoint, step_checkpoints
from model.position import PositionRangeError
from model.search import beam_search

log = logging.getLogger("evaluate")

# Source-length buckets in words, (low, high) inclusive; high None = no upper bound.
LENGTH_BUCKETS = [(0, 10), (11, 20), (21, 30), (31, 40), (41, 60), (61, None)]
BUCKET_LABELS = [f"{low}-{high or ''}" for low, high in LENGTH_BUCKETS]  # '0-10', ..., '61-'


def write_text(path: str | Path, text: str) -> None:
    """Write text to path atomically (temporary file, then rename): never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj) -> None:
    """Write obj as indented JSON atomically (temporary file, then rename)."""
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """cuda:<local rank> if asked for or available (auto), else the named device."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(f"cuda:{local_rank}") if name == "cuda" else torch.device(name)


def native_bf16(device: torch.device) -> bool:
    """Whether the device multiplies bf16 natively: a bf16 GPU, or a CPU with AVX512-BF16/AMX."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return re.search(r"\b(avx512_bf16|amx_bf16)\b", cpuinfo) is not None


def use_bf16(precision: str, device: torch.device) -> bool:
    """bf16 autocast for precision bf16, or auto on a native-bf16 device; fp32 otherwise."""
    if precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"precision={precision}: pass auto, bf16 or fp32")
    return precision == "bf16" or (precision == "auto" and native_bf16(device))


def sacrebleu_score(hyps: list[str], refs: list[str]) -> float:
    """Detokenized, cased corpus BLEU (sacreBLEU's defaults, 13a tokenization)."""
    return sacrebleu.corpus_bleu(hyps, [refs]).score


def split_compounds(text: str) -> str:
    """t2t's get_ende_bleu.sh: 'A-B' -> 'A ##AT##-##AT## B'."""
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", text)


def tokenized_bleu(hyps: list[str], refs: list[str], lang: str = "de") -> float:
    """The paper's BLEU: Moses-tokenize, split compounds, BLEU with tokenize='none'."""
    from sacremoses import MosesTokenizer

    moses = MosesTokenizer(lang=lang)

    def prepare(text: str) -> str:
        return split_compounds(moses.tokenize(text, return_str=True))

    return sacrebleu.corpus_bleu(
        [prepare(h) for h in hyps], [[prepare(r) for r in refs]], tokenize="none", force=True
    ).score


@torch.no_grad()
def perplexity(
    model, src_ids: list[list[int]], tgt_ids: list[list[int]], max_tokens: int, device
) -> float:
    """exp(mean NLL per target subword, EOS included), teacher-forced, no label smoothing."""
    model.eval()
    sampler = TokenBatchSampler(
        [len(s) for s in src_ids], [len(t) for t in tgt_ids], max_tokens, shuffle=False
    )
    nll, count = 0.0, 0
    for indices in sampler:
        batch = collate([{"src_ids": src_ids[i], "tgt_ids": tgt_ids[i]} for i in indices])
        batch = {k: v.to(device) for k, v in batch.items()}
        logits = model(batch["src"], batch["tgt_in"]).float()  # [B, T, V]
        nll += F.cross_entropy(
            logits.flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=PAD_ID, reduction="sum"
        ).item()
        count += int((batch["tgt_out"] != PAD_ID).sum())
    return math.exp(nll / max(count, 1))


@torch.no_grad()
def translate(
    model,
    tokenizer: Tokenizer,
    sentences: list[str],
    device,
    beam: int = 4,
    lenpen: float = 0.6,
    max_len_b: int = 50,
    max_tokens: int = 4096,
    bf16: bool = False,
) -> list[str]:
    """Translations of sentences, batched by length; beam 1 is greedy; an empty line gives ''.

    bf16: search under bf16 autocast (scores still summed in float32).
    """
    model.eval()
    encoded = tokenizer.encode(list(sentences))
    nonempty = [i for i, ids in enumerate(encoded) if ids]
    src_ids = [encoded[i] + [EOS_ID] for i in nonempty]
    lengths = [len(s) for s in src_ids]
    out: list[str] = [""] * len(encoded)
    budget = max(max_tokens // max(beam, 1), max(lengths, default=1))
    for batch in TokenBatchSampler(lengths, lengths, budget, shuffle=False) if nonempty else []:
        src = collate([{"src_ids": src_ids[i], "tgt_ids": [EOS_ID]} for i in batch])["src"]
        src = src.to(device)  # [B, S]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            hyps = beam_search(model, src, BOS_ID, EOS_ID, beam, lenpen, max_len_b)
        for i, text in zip(batch, tokenizer.decode(hyps), strict=True):
            out[nonempty[i]] = text
    return out


def length_bucket(text: str) -> str:
    """The LENGTH_BUCKETS label ('11-20', '61-') of a sentence's length in words."""
    words = len(text.split())
    return next(
        label
        for (_, high), label in zip(LENGTH_BUCKETS, BUCKET_LABELS, strict=True)
        if high is None or words <= high
    )


def bleu_by_length(srcs: list[str], hyps: list[str], refs: list[str]) -> list[dict]:
    """sacreBLEU and sentence count per source-length bucket (words)."""
    picked: dict[str, list[int]] = {}
    for i, src in enumerate(srcs):
        picked.setdefault(length_bucket(src), []).append(i)
    rows = []
    for label in BUCKET_LABELS:
        if rows_of := picked.get(label):
            bleu = sacrebleu_score([hyps[i] for i in rows_of], [refs[i] for i in rows_of])
            rows.append({"bucket": label, "n": len(rows_of), "bleu": round(bleu, 2)})
    return rows


def fitting_lines(
    model,
    tokenizer: Tokenizer,
    srcs: list[str],
    refs: list[str] | None,
    max_len_b: int,
    long_inputs: str,
    where: str,
) -> tuple[list[int], dict[str, int]]:
    """Indices of the pairs the position encodings hold, and the skipped count per length bucket.

    A source of L subwords needs L + 1 encoder positions (its EOS) and L + max_len_b decoder
    positions (the longest output search may produce); a reference of R subwords needs R + 1
    decoder positions for teacher-forced perplexity. A pair that does not fit raises
    PositionRangeError naming its line, or with long_inputs=skip is left out and counted.
    """
    src_ids = tokenizer.encode(list(srcs))
    ref_ids = tokenizer.encode(list(refs)) if refs is not None else [None] * len(srcs)
    kept, skipped = [], {}
    for i, (src, ref) in enumerate(zip(src_ids, ref_ids, strict=True)):
        needs = [
            (model.encoder_position, len(src) + 1, f"source ({len(src)} subwords + EOS)", ""),
            (
                model.decoder_position,
                len(src) + max_len_b,
                f"output (source {len(src)} subwords + max_len_b={max_len_b})",
                "lower max_len_b, or ",
            ),
        ]
        if ref is not None:
            needs.append(
                (model.decoder_position, len(ref) + 1, f"reference ({len(ref)} subwords + BOS)", "")
            )
        for position, n_positions, what, also in needs:
            try:
                position.check_length(n_positions)
            except PositionRangeError as e:
                if long_inputs != "skip":
                    raise PositionRangeError(
                        f"line {i + 1} of {where}: its {what} needs {n_positions} positions, but "
                        f"{e}; or {also}pass long_inputs=skip to leave such lines out"
                    ) from e
                bucket = length_bucket(srcs[i])
                skipped[bucket] = skipped.get(bucket, 0) + 1
                break
        else:
            kept.append(i)
    skipped = {label: skipped[label] for label in BUCKET_LABELS if label in skipped}
    if skipped:
        log.warning(
            f"skipped {sum(skipped.values())} of {len(srcs)} lines of {where} too long for the "
            f"position encoding, per source-length bucket: {skipped}"
        )
    return kept, skipped


def read_lines(path: str, field: str) -> list[str]:
    """The lines of a UTF-8 text file given as `field=path`, or one clear DataError."""
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as e:
        raise DataError(f"{field}={path} does not exist: pass an existing text file") from e
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{field}={path} is unreadable ({e}): pass a UTF-8 text file") from e


def read_sources(cfg: DictConfig) -> tuple[list[str], list[str] | None, str]:
    """Sources, references (None without ref_file) and a description, from src_file/ref_file."""
    if not cfg.src_file:
        raise DataError("ref_file is set without src_file: pass both, or a split=<name>")
    srcs = read_lines(cfg.src_file, "src_file")
    if not srcs:
        raise DataError(f"src_file={cfg.src_file} is empty: pass a file of source sentences")
    refs = read_lines(cfg.ref_file, "ref_file") if cfg.ref_file else None
    if refs is not None and len(refs) != len(srcs):
        raise DataError(
            f"src_file={cfg.src_file} has {len(srcs)} lines but ref_file={cfg.ref_file} has "
            f"{len(refs)}: pass line-aligned files"
        )
    return srcs, refs, str(cfg.src_file)


def check_options(cfg: DictConfig) -> None:
    """Raise ValueError naming the first evaluation option out of range."""
    if int(cfg.beam) < 1:
        raise ValueError(f"beam={cfg.beam}: pass beam=1 (greedy) or more")
    if int(cfg.max_len_b) < 1:
        raise ValueError(f"max_len_b={cfg.max_len_b}: pass 1 or more (the paper: 50)")
    use_bf16(cfg.precision, torch.device("cpu"))  # checks the name
    if cfg.long_inputs not in ("error", "skip"):
        raise ValueError(f"long_inputs={cfg.long_inputs}: pass long_inputs=error or skip")
    name = str(cfg.name or "")
    if name and (Path(name).name != name or name in (".", "..")):
        raise ValueError(f"name={cfg.name}: pass a plain file name (no directories)")


def load_run(run_dir: Path, checkpoint: str) -> tuple[dict, str]:
    """The checkpoint named by last | best | avg:N | <file>, and a short tag for file names.

    A <file> that does not exist as given is also looked for in <run_dir>/checkpoints.
    """
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / "checkpoints"
    if not run_dir.is_dir():
        raise CheckpointError(
            f"run directory {run_dir} does not exist: pass run_dir=<a training run directory>"
        )
    if checkpoint in ("last", "best") or checkpoint.startswith("avg:"):
        if not ckpt_dir.is_dir():
            raise CheckpointError(
                f"{run_dir} has no checkpoints/ directory: is it a training run directory?"
            )
    if checkpoint.startswith("avg:"):
        n = int(checkpoint[4:]) if checkpoint[4:].isdigit() else 0
        if n < 1:
            raise CheckpointError(f"checkpoint={checkpoint}: pass avg:N with N a positive integer")
        paths = step_checkpoints(ckpt_dir)[-n:]
        if len(paths) < n:
            raise CheckpointError(
                f"checkpoint={checkpoint}: only {len(paths)} step checkpoints in {ckpt_dir}; "
                "pass a smaller N"
            )
        return checked(average_checkpoints(paths), f"{checkpoint} in {ckpt_dir}"), f"avg{n}"
    if checkpoint in ("last", "best"):
        path = ckpt_dir / f"{checkpoint}.pt"
        return checked(load_checkpoint(path), path), checkpoint
    path = Path(checkpoint)
    if not path.exists() and (ckpt_dir / checkpoint).is_file():
        path = ckpt_dir / checkpoint
    return checked(load_checkpoint(path), path), path.stem


def checked(state, source) -> dict:
    """state if it holds weights, config and tokenizer (what evaluation needs), else an error."""
    missing = [
        key
        for key in ("model", "config", "tokenizer")
        if not isinstance(state, dict) or key not in state
    ]
    if missing:
        raise CheckpointError(
            f"checkpoint {source} lacks {', '.join(missing)}: pass a checkpoint written by "
            "train.py or scripts/average_checkpoints.py"
        )
    return state


def rebuild_model(state: dict, device) -> tuple[torch.nn.Module, Tokenizer]:
    """The model and tokenizer described by a checkpoint's stored config."""
    config = OmegaConf.create(state["config"])
    tokenizer = Tokenizer(state["tokenizer"]["path"])
    if tokenizer.sha256 != state["tokenizer"]["sha256"]:
        raise CheckpointError(
            f"tokenizer {tokenizer.path} differs from the one this checkpoint was trained with "
            f"(sha256 {tokenizer.sha256[:12]} != {str(state['tokenizer']['sha256'])[:12]}): "
            "restore that tokenizer file or retrain"
        )
    model = instantiate(
        config.model, position=config.position, vocab_size=tokenizer.vocab_size, pad_id=PAD_ID
    )
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise CheckpointError(
            "checkpoint weights do not fit the model its config describes "
            f"({str(e).strip().splitlines()[0]}): pass a checkpoint written by train.py"
        ) from e
    return model.to(device).eval(), tokenizer


def evaluate(cfg: DictConfig) -> dict:
    """Translate a split (or files) with a run's checkpoint; write and return the scores.

    Nothing is written unless the whole evaluation succeeds; the hypotheses and the JSON are
    each written atomically.
    """
    check_options(cfg)
    if cfg.src_file or cfg.ref_file:
        srcs, refs, where = read_sources(cfg)
    device = resolve_device(cfg.device)
    run_dir = Path(cfg.run_dir)
    state, tag = load_run(run_dir, str(cfg.checkpoint))
    model, tokenizer = rebuild_model(state, device)
    if cfg.src_file:
        name = cfg.name or Path(cfg.src_file).stem
    else:
        dataset = load_split(OmegaConf.create(state["config"]["data"]), cfg.split)
        srcs, refs, where = list(dataset["src"]), list(dataset["tgt"]), f"split {cfg.split}"
        name = cfg.name or f"{cfg.split}-{tag}-beam{cfg.beam}"
    kept, skipped = fitting_lines(
        model, tokenizer, srcs, refs, cfg.max_len_b, cfg.long_inputs, where
    )
    if not kept:
        raise PositionRangeError(
            f"no line of {where} fits the model's position table: nothing to evaluate"
        )
    srcs = [srcs[i] for i in kept]
    refs = [refs[i] for i in kept] if refs is not None else None
    bf16 = use_bf16(cfg.precision, device)
    hyps = translate(
        model, tokenizer, srcs, device, cfg.beam, cfg.lenpen, cfg.max_len_b, cfg.max_tokens, bf16
    )
    hyp_path = run_dir / "eval" / f"{name}.hyp"
    scores = {
        "name": name,
        "checkpoint": tag,
        "beam": cfg.beam,
        "lenpen": cfg.lenpen,
        "max_len_b": cfg.max_len_b,
        "precision": "bf16" if bf16 else "fp32",
        "n_sentences": len(hyps),
        "hypotheses": str(hyp_path),
        "skipped": skipped,
    }
    if refs is not None:
        metric = sacrebleu.BLEU()
        bleu = metric.corpus_score(hyps, [refs])
        tgt_lang = state["config"]["data"]["tgt_lang"]
        src_ids = [ids + [EOS_ID] for ids in tokenizer.encode(srcs)]
        tgt_ids = [ids + [EOS_ID] for ids in tokenizer.encode(refs)]
        scores.update(
            bleu=round(bleu.score, 2),
            signature=str(metric.get_signature()),
            chrf=round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
            tok_bleu=round(tokenized_bleu(hyps, refs, tgt_lang), 2),
            ppl=round(perplexity(model, src_ids, tgt_ids, cfg.max_tokens, device), 3),
            by_length=bleu_by_length(srcs, hyps, refs),
        )
    write_text(hyp_path, "".join(h + "\n" for h in hyps))
    write_json(run_dir / "eval" / f"{name}.json", scores)
    return scores


def translate_stdin(cfg: DictConfig) -> None:
    """Translate the lines of stdin to stdout, one line for each (skipped or empty lines: '')."""
    for handler in logging.getLogger().handlers:  # stdout carries the translations only
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)
    check_options(cfg)
    device = resolve_device(cfg.device)
    model, tokenizer = rebuild_model(load_run(Path(cfg.run_dir), str(cfg.checkpoint))[0], device)
    lines = [line.rstrip("\r\n") for line in sys.stdin]
    kept, _ = fitting_lines(model, tokenizer, lines, None, cfg.max_len_b, cfg.long_inputs, "stdin")
    out = [""] * len(lines)
    hyps = translate(
        model,
        tokenizer,
        [lines[i] for i in kept],
        device,
        cfg.beam,
        cfg.lenpen,
        cfg.max_len_b,
        cfg.max_tokens,
        use_bf16(cfg.precision, device),
    )
    for i, text in zip(kept, hyps, strict=True):
        out[i] = text
    sys.stdout.write("".join(text + "\n" for text in out))


@hydra.main(version_base="1.3", config_path="configs", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    """Command-line entry: score (or translate stdin) and print; known errors as one line."""
    try:
        if cfg.translate:
            translate_stdin(cfg)
            return
        scores = evaluate(cfg)
    except (ValueError, OSError) as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(
        json.dumps(
            {k: v for k, v in scores.items() if k != "by_length"}, indent=2, ensure_ascii=False
        )
    )
    print(f"run directory: {cfg.run_dir}")
    if "bleu" in scores:
        print(
            f"sacreBLEU {scores['bleu']:.2f} on {scores['name']} "
            f"({scores['n_sentences']} sentences, {scores['signature']})"
        )
    else:
        print(f"translations of {scores['n_sentences']} lines in {scores['hypotheses']}")


if __name__ == "__main__":
    main()
