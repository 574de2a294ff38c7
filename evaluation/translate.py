"""Sentences in, sentences out: which lines fit the model, and their beam-search translations."""

import logging
import math
from collections.abc import Iterable, Iterator

import torch

from common.progress import progress_bar
from data.batching import TokenBatchSampler, collate
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from evaluation.bleu import BUCKET_LABELS, length_bucket
from model.position import PositionRangeError
from model.search import beam_search, beam_search_nbest
from runs.device import autocast

log = logging.getLogger(__name__)


def search_batches(
    tokenizer: Tokenizer, sentences: list[str], beam: int, max_tokens: int, progress: bool
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """(indices into sentences, their sources [B, S]) per batch, sorted by length, empty lines
    left out; a bar of sentences on a terminal unless progress is False (common/progress.py)."""
    encoded = tokenizer.encode(list(sentences))
    nonempty = [i for i, ids in enumerate(encoded) if ids]
    src_ids = [encoded[i] + [EOS_ID] for i in nonempty]
    lengths = [len(s) for s in src_ids]
    budget = max(max_tokens // max(beam, 1), max(lengths, default=1))
    sampler = TokenBatchSampler(lengths, lengths, budget, shuffle=False) if nonempty else []
    with progress_bar(len(nonempty), "translate", "sent", enabled=progress) as bar:
        for batch in sampler:
            log.debug("search batch of %d sentences", len(batch))  # the tests count them
            examples = [{"src_ids": src_ids[i], "tgt_ids": [EOS_ID]} for i in batch]
            src = collate(examples, pad_id=PAD_ID, bos_id=BOS_ID)["src"]  # [B, S]
            yield [nonempty[i] for i in batch], src
            bar.update(len(batch))


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
    precision: str = "fp32",
    min_len: int = 0,
    progress: bool = True,
) -> list[str]:
    """Translations of sentences, batched by length; beam 1 is greedy; an empty line gives ''.

    precision: search under bf16 or fp16 autocast (scores still summed in float32) or in
    float32 (fp32). min_len: the fewest output subwords before EOS (model/search.py).
    progress: a bar on a terminal's stderr.
    """
    model.eval()
    out: list[str] = [""] * len(sentences)
    for rows, src in search_batches(tokenizer, sentences, beam, max_tokens, progress):
        with autocast(device, precision):
            hyps = beam_search(
                model, src.to(device), BOS_ID, EOS_ID, beam, lenpen, max_len_b, min_len
            )
        for i, text in zip(rows, tokenizer.decode(hyps), strict=True):
            out[i] = text
    return out


@torch.no_grad()
def translate_nbest(
    model,
    tokenizer: Tokenizer,
    sentences: list[str],
    device,
    beam: int = 4,
    lenpen: float = 0.6,
    max_len_b: int = 50,
    max_tokens: int = 4096,
    precision: str = "fp32",
    min_len: int = 0,
    nbest: int = 2,
    progress: bool = True,
) -> list[list[tuple[str, float]]]:
    """Each sentence's nbest (<= beam) translations and log P(Y) / lp(Y), best first (as
    translate's arguments; model/search.py's beam_search_nbest); an empty line gives []."""
    model.eval()
    out: list[list[tuple[str, float]]] = [[] for _ in sentences]
    for rows, src in search_batches(tokenizer, sentences, beam, max_tokens, progress):
        with autocast(device, precision):
            found = beam_search_nbest(
                model, src.to(device), BOS_ID, EOS_ID, beam, lenpen, max_len_b, min_len, nbest
            )
        for i, hyps in zip(rows, found, strict=True):
            texts = tokenizer.decode([ids for ids, _ in hyps])
            out[i] = [(text, score) for text, (_, score) in zip(texts, hyps, strict=True)]
    return out


def nbest_lines(found: list[list[tuple[str, float]]], nbest: int, ids: Iterable[int]) -> str:
    """fairseq's n-best output, nbest lines per sentence: `H-<id>\t<score>\t<hypothesis>`, id
    from ids (its line from 0), score log2 P(Y) / lp(Y) in base 2 as fairseq prints it; a
    sentence with fewer (an empty or skipped line: none) is padded with -inf and ''."""
    lines = []
    for i, hyps in zip(ids, found, strict=True):
        padded = [*hyps, *[("", float("-inf"))] * (nbest - len(hyps))]
        lines += [f"H-{i}\t{score / math.log(2):.4f}\t{text}\n" for text, score in padded]
    return "".join(lines)


def position_needs(
    src: list[int], ref: list[int] | None, max_len_b: int, where: str, ref_where: str
) -> list[tuple[dict[str, int], str, str, str]]:
    """(check_lengths arguments, what needs them, the advice, its file) for one pair."""
    needs = [
        ({"src_len": len(src) + 1}, f"source ({len(src)} subwords + EOS)", "", where),
        (
            {"tgt_len": len(src) + max_len_b},
            f"output (source {len(src)} subwords + max_len_b={max_len_b})",
            "lower max_len_b, or ",
            where,
        ),
    ]
    if ref is not None:
        what = f"reference ({len(ref)} subwords + BOS)"
        needs.append(({"tgt_len": len(ref) + 1}, what, "", ref_where))
    return needs


def pair_fits(
    model,
    i: int,
    src: list[int],
    ref: list[int] | None,
    max_len_b: int,
    long_inputs: str,
    where: str,
    max_input_len: int | None,
    ref_where: str,
) -> bool:
    """Whether pair i fits max_input_len and the positions; else raise, or False with skip."""
    longest = max(len(src), len(ref) if ref is not None else 0)
    if max_input_len is not None and longest > max_input_len:
        if long_inputs != "skip":
            side = "source" if len(src) == longest else "reference"
            file = where if side == "source" else ref_where
            raise PositionRangeError(
                f"line {i + 1} of {file}: its {side} has {longest} subwords, more than "
                f"max_input_len={max_input_len}; raise max_input_len, or pass "
                "long_inputs=skip to leave such lines out"
            )
        return False
    for lengths, what, also, file in position_needs(src, ref, max_len_b, where, ref_where):
        try:
            model.check_lengths(**lengths)
        except PositionRangeError as e:
            if long_inputs != "skip":
                n_positions = next(iter(lengths.values()))
                raise PositionRangeError(
                    f"line {i + 1} of {file}: its {what} needs {n_positions} positions, but "
                    f"{e}; or {also}pass long_inputs=skip to leave such lines out"
                ) from e
            return False
    return True


def fitting_lines(
    model,
    tokenizer: Tokenizer,
    srcs: list[str],
    refs: list[str] | None,
    max_len_b: int,
    long_inputs: str,
    where: str,
    max_input_len: int | None = None,
    ref_where: str | None = None,
    first: int = 0,
) -> tuple[list[int], dict[str, int]]:
    """Indices of the pairs the position encodings hold, and the skipped count per length bucket.

    A source of L subwords needs L + 1 encoder positions (its EOS) and L + max_len_b decoder
    positions (the longest output search may produce); a reference of R subwords needs R + 1
    decoder positions for teacher-forced perplexity. Neither may exceed max_input_len subwords
    (search and perplexity grow with the square of the length: a 50k-subword line would run
    for hours). A pair that does not fit raises PositionRangeError naming its line, or with
    long_inputs=skip is left out and counted. where names the sources, ref_where the references
    (default: where, as for a split); first is the first line's index there (a later part of
    stdin).
    """
    src_ids = tokenizer.encode(list(srcs))
    ref_ids = tokenizer.encode(list(refs)) if refs is not None else [None] * len(srcs)
    kept, skipped = [], {}
    for i, (src, ref) in enumerate(zip(src_ids, ref_ids, strict=True)):
        if pair_fits(
            model,
            first + i,
            src,
            ref,
            max_len_b,
            long_inputs,
            where,
            max_input_len,
            ref_where or where,
        ):
            kept.append(i)
        else:
            bucket = length_bucket(srcs[i])
            skipped[bucket] = skipped.get(bucket, 0) + 1
    skipped = {label: skipped[label] for label in BUCKET_LABELS if label in skipped}
    if skipped:
        log.warning(
            f"skipped {sum(skipped.values())} of {len(srcs)} lines of {where} too long for "
            f"max_input_len or the position encoding, per source-length bucket: {skipped}"
        )
    return kept, skipped
