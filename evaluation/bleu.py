"""BLEU two ways (RECIPE.md, "Inference and scoring"), and BLEU per source-length bucket.

`sacrebleu_score` is detokenized sacreBLEU (today's practice); `tokenized_bleu` is the paper's:
Moses-tokenized, hyphenated compounds split as `A ##AT##-##AT## B`, BLEU on tokens. The split is
the English-German convention (t2t's get_ende_bleu.sh); for any other target the tokenized BLEU
is the target language's Moses tokenizer without it (deviation: the paper scores German only).
"""

import re

import sacrebleu

# Source-length buckets in words, (low, high) inclusive; high None = no upper bound.
LENGTH_BUCKETS = [(0, 10), (11, 20), (21, 30), (31, 40), (41, 60), (61, None)]
BUCKET_LABELS = [f"{low}-{high or ''}" for low, high in LENGTH_BUCKETS]  # '0-10', ..., '61-'


def sacrebleu_score(hyps: list[str], refs: list[str]) -> float:
    """Detokenized, cased corpus BLEU (sacreBLEU's defaults, 13a tokenization)."""
    return sacrebleu.corpus_bleu(hyps, [refs]).score


COMPOUND_SPLIT_LANG = "de"  # the target whose hyphenated compounds the paper's BLEU splits


def split_compounds(text: str) -> str:
    """t2t's get_ende_bleu.sh: 'A-B' -> 'A ##AT##-##AT## B'."""
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", text)


def tokenized_bleu(hyps: list[str], refs: list[str], lang: str = "de") -> float:
    """The paper's BLEU: Moses-tokenize, split compounds (German only), tokenize='none'."""
    # sacremoses deferred: its import takes over a second, and only the tokenized BLEU needs it
    from sacremoses import MosesTokenizer

    moses = MosesTokenizer(lang=lang)
    split = split_compounds if lang == COMPOUND_SPLIT_LANG else str

    def prepare(text: str) -> str:
        return split(moses.tokenize(text, return_str=True))

    return sacrebleu.corpus_bleu(
        [prepare(h) for h in hyps], [[prepare(r) for r in refs]], tokenize="none", force=True
    ).score


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
