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
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from model.checkpoint import CheckpointError, average_checkpoints, load_checkpoint, step_checkpoints
from model.position import PositionRangeError
from model.search import beam_search, greedy_search

log = logging.getLogger("evaluate")

LENGTH_BUCKETS = [(1, 10), (11, 20), (21, 30), (31, 40), (41, 60), (61, None)]


def write_json(path: str | Path, obj) -> None:
    """Write obj as indented JSON atomically (temporary file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """cuda:<local rank> if asked for or available (auto), else the named device."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(f"cuda:{local_rank}") if name == "cuda" else torch.device(name)


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
) -> list[str]:
    """Translations of sentences, batched by length; beam 1 is greedy search."""
    model.eval()
    src_ids = [ids + [EOS_ID] for ids in tokenizer.encode(list(sentences))]
    lengths = [len(s) for s in src_ids]
    out: list[str] = [""] * len(src_ids)
    budget = max(max_tokens // max(beam, 1), max(lengths, default=1))
    for indices in TokenBatchSampler(lengths, lengths, budget, shuffle=False):
        src = collate([{"src_ids": src_ids[i], "tgt_ids": [EOS_ID]} for i in indices])["src"].to(
            device
        )
        if beam == 1:
            hyps = greedy_search(model, src, BOS_ID, EOS_ID, max_len_b)
        else:
            hyps = beam_search(model, src, BOS_ID, EOS_ID, beam, lenpen, max_len_b)
        for i, text in zip(indices, tokenizer.decode(hyps), strict=True):
            out[i] = text
    return out


def bleu_by_length(srcs: list[str], hyps: list[str], refs: list[str]) -> list[dict]:
    """sacreBLEU and sentence count per source-length bucket (words)."""
    rows = []
    for low, high in LENGTH_BUCKETS:
        picked = [
            i
            for i, s in enumerate(srcs)
            if low <= len(s.split()) and (high is None or len(s.split()) <= high)
        ]
        if picked:
            bleu = sacrebleu_score([hyps[i] for i in picked], [refs[i] for i in picked])
            rows.append({"bucket": f"{low}-{high or ''}", "n": len(picked), "bleu": round(bleu, 2)})
    return rows


def load_run(run_dir: Path, checkpoint: str) -> tuple[dict, str]:
    """The checkpoint named by last | best | avg:N | <file>, and a short tag for file names."""
    ckpt_dir = run_dir / "checkpoints"
    if checkpoint.startswith("avg:"):
        n = int(checkpoint[4:])
        paths = step_checkpoints(ckpt_dir)[-n:]
        if len(paths) < n:
            raise CheckpointError(
                f"checkpoint={checkpoint}: only {len(paths)} step checkpoints in {ckpt_dir}"
            )
        return average_checkpoints(paths), f"avg{n}"
    if checkpoint in ("last", "best"):
        if not ckpt_dir.is_dir():
            raise CheckpointError(
                f"{run_dir} has no checkpoints/ directory: is it a training run directory?"
            )
        return load_checkpoint(ckpt_dir / f"{checkpoint}.pt"), checkpoint
    return load_checkpoint(checkpoint), Path(checkpoint).stem


def rebuild_model(state: dict, device) -> tuple[torch.nn.Module, Tokenizer]:
    """The model and tokenizer described by a checkpoint's stored config."""
    config = OmegaConf.create(state["config"])
    tokenizer = Tokenizer(state["tokenizer"]["path"])
    if tokenizer.sha256 != state["tokenizer"]["sha256"]:
        raise CheckpointError(
            f"tokenizer {tokenizer.path} differs from the one this checkpoint was trained with "
            "(sha256 mismatch): restore that tokenizer file or retrain"
        )
    model = instantiate(
        config.model, position=config.position, vocab_size=tokenizer.vocab_size, pad_id=PAD_ID
    )
    model.load_state_dict(state["model"])
    return model.to(device).eval(), tokenizer


def evaluate(cfg: DictConfig) -> dict:
    """Translate a split (or files) with a run's checkpoint and write and return the scores."""
    from data.corpus import load_split

    device = resolve_device(cfg.device)
    run_dir = Path(cfg.run_dir)
    state, tag = load_run(run_dir, str(cfg.checkpoint))
    model, tokenizer = rebuild_model(state, device)
    if cfg.src_file:
        srcs = Path(cfg.src_file).read_text(encoding="utf-8").splitlines()
        refs = Path(cfg.ref_file).read_text(encoding="utf-8").splitlines() if cfg.ref_file else None
        stem = Path(cfg.src_file).stem
    else:
        dataset = load_split(OmegaConf.create(state["config"]["data"]), cfg.split)
        srcs, refs, stem = dataset["src"], dataset["tgt"], cfg.split
    srcs, refs, skipped = drop_long_inputs(model, tokenizer, srcs, refs, cfg)
    hyps = translate(
        model, tokenizer, srcs, device, cfg.beam, cfg.lenpen, cfg.max_len_b, cfg.max_tokens
    )
    name = cfg.name or f"{stem}-{tag}-beam{cfg.beam}"
    out_dir = run_dir / "eval"
    out_dir.mkdir(parents=True, exist_ok=True)
    hyp_path = out_dir / f"{name}.hyp"
    hyp_path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    scores = {
        "name": name,
        "checkpoint": tag,
        "beam": cfg.beam,
        "lenpen": cfg.lenpen,
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
    write_json(out_dir / f"{name}.json", scores)
    return scores


def drop_long_inputs(model, tokenizer, srcs, refs, cfg) -> tuple[list[str], list[str] | None, dict]:
    """Sources the position encodings hold; others raise, or with long_inputs=skip are counted."""
    kept, skipped = [], {}
    for i, ids in enumerate(tokenizer.encode(list(srcs))):
        try:
            model.encoder_position.check_length(len(ids) + 1)
            model.decoder_position.check_length(len(ids) + cfg.max_len_b)
            kept.append(i)
        except PositionRangeError as e:
            if cfg.long_inputs != "skip":
                raise PositionRangeError(
                    f"source line {i + 1} ({len(ids)} subwords): {e}, or pass long_inputs=skip"
                ) from e
            words = len(srcs[i].split())
            bucket = next(
                f"{lo}-{hi or ''}"
                for lo, hi in LENGTH_BUCKETS
                if lo <= words and (hi is None or words <= hi)
            )
            skipped[bucket] = skipped.get(bucket, 0) + 1
    if skipped:
        log.warning(
            f"skipped {sum(skipped.values())} sources too long for the position encoding: {skipped}"
        )
    return [srcs[i] for i in kept], [refs[i] for i in kept] if refs is not None else None, skipped


@hydra.main(version_base="1.3", config_path="configs", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    """Command-line entry: score (or translate stdin) and print; known errors as one line."""
    try:
        if cfg.translate:
            device = resolve_device(cfg.device)
            model, tokenizer = rebuild_model(
                load_run(Path(cfg.run_dir), str(cfg.checkpoint))[0], device
            )
            lines = [line.rstrip("\n") for line in sys.stdin]
            for text in translate(
                model, tokenizer, lines, device, cfg.beam, cfg.lenpen, cfg.max_len_b, cfg.max_tokens
            ):
                print(text)
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


if __name__ == "__main__":
    main()
