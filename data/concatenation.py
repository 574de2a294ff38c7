"""Inputs longer than a training sentence, built by joining consecutive sentences.

Two uses in the length study (Variš & Bojar 2021, "Sequence Length is a Domain"):

- ``join_consecutive_lines``: a test set whose lines join k consecutive test sentences (and the
  references joined the same way), so inputs reach far past the longest training sentence while
  each part stays an ordinary sentence;
- ``join_training_pairs``: a training condition where a share of the training lines join 2..4
  consecutive pairs, which removes the end-of-sentence prior learned from one-sentence lines
  (length overfitting), so what is left of a length drop is what the position encoding owes.

Parts are joined with one space. Nothing is dropped silently: a test set of n lines gives
n // k joined lines and the n % k lines left over are counted by the caller
(``leftover_lines``).
"""

from __future__ import annotations

import datasets
import numpy as np

from common.errors import UserError

JOIN = " "


def leftover_lines(n_lines: int, k: int) -> int:
    """Lines at the end of a set of n_lines that do not fill a last group of k."""
    return n_lines % k


def join_consecutive_lines(lines: list[str], k: int) -> list[str]:
    """Lines 0..k-1, k..2k-1, ... each joined with a space; the last n % k lines are left out."""
    if int(k) < 1:
        raise UserError(f"k={k}: join at least 1 line per group")
    k = int(k)
    return [JOIN.join(lines[i : i + k]) for i in range(0, len(lines) - k + 1, k)]


def _group_sizes(n: int, share: float, max_parts: int, rng: np.random.Generator) -> list[int]:
    """Sizes of consecutive groups covering n pairs: ~share of the groups join 2..max_parts."""
    sizes, used = [], 0
    while used < n:
        size = int(rng.integers(2, max_parts + 1)) if rng.random() < share else 1
        size = min(size, n - used)
        sizes.append(size)
        used += size
    return sizes


def _join_ids(parts: list[list[int]]) -> list[int]:
    """Subwords of every part in order, one EOS at the end (each part ends with its EOS)."""
    return [i for part in parts[:-1] for i in part[:-1]] + list(parts[-1])


def join_training_pairs(
    train: datasets.Dataset, share: float, max_parts: int = 4, seed: int = 0
) -> tuple[datasets.Dataset, dict[str, int]]:
    """Training lines where about ``share`` of them join 2..max_parts consecutive pairs.

    ``train`` has columns ``src``, ``tgt``, ``src_ids``, ``tgt_ids`` (subwords + EOS). Every
    pair is used exactly once, in corpus order, so the condition sees the same sentences and
    tokens as the one-sentence corpus, segmented differently. The ids of a joined line are the
    parts' subwords with one EOS at the end: SentencePiece splits at whitespace, so this equals
    encoding the joined text (tests/unit/data/test_concatenation.py checks it on a real tokenizer).
    Returns the new split and counts: ``input`` pairs, ``lines`` out and ``joined`` lines.
    """
    if not 0.0 <= float(share) <= 1.0:
        raise UserError(f"data.train_join_share={share}: pass a share between 0 and 1, or null")
    if int(max_parts) < 2:
        raise UserError(f"data.train_join_max={max_parts}: join at least 2 pairs")
    n = len(train)
    sizes = _group_sizes(n, float(share), int(max_parts), np.random.default_rng(seed))
    columns = train.select_columns(["src", "tgt", "src_ids", "tgt_ids"]).to_dict()
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).tolist()
    joined = {"src": [], "tgt": [], "src_ids": [], "tgt_ids": []}
    for start, size in zip(starts, sizes, strict=True):
        end = start + size
        joined["src"].append(JOIN.join(columns["src"][start:end]))
        joined["tgt"].append(JOIN.join(columns["tgt"][start:end]))
        joined["src_ids"].append(_join_ids(columns["src_ids"][start:end]))
        joined["tgt_ids"].append(_join_ids(columns["tgt_ids"][start:end]))
    out = datasets.Dataset.from_dict(joined, features=train.select_columns(list(joined)).features)
    counts = {"input": n, "lines": len(sizes), "joined": sum(s > 1 for s in sizes)}
    return out, counts
