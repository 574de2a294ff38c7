"""Parallel corpora: loading, direction selection, tokenisation, caching and train cleaning.

``prepare_data(cfg.data, cache_dir)`` is the one entry point the trainer needs. It instantiates
``data.corpus`` (a Hydra ``_target_`` returning a ``datasets.DatasetDict``), keeps the two
languages as ``src``/``tgt`` columns, trains (or reuses) one joint SentencePiece BPE model on the
train split, encodes every split (``src_ids``/``tgt_ids`` = subwords + EOS) into Arrow files under
``cache_dir`` and drops unusable training pairs (validation/test are never dropped or truncated).

Cache layout under ``cache_dir``::

    tokenizers/<tokenizer key>/spm.model    the SentencePiece model
    tokenizers/<tokenizer key>/meta.json    the options it was trained with
    encoded/<split key>-<split>/            one encoded split: data*.arrow (one file per encoding
                                            process) and meta.json (rows, files)
    locks/<data key>.lock                   held while a process trains or encodes for this data

An encoded split holds ids and what cleaning needs, not the text: ``src_ids``/``tgt_ids``
(subwords + EOS), ``blank`` (a side is empty or whitespace-only) and ``src_words``
(whitespace-separated source words). The returned splits join these columns to the corpus's own
(memory-mapped) ``src``/``tgt`` text without copying it. Sequence lengths are read once from the
Arrow offsets (NumPy) and cleaning is a NumPy mask over them (``PreparedData.lengths``).

One preparation per cache: a process that must train or encode takes ``locks/<data key>.lock``
(an exclusive ``filelock`` lock, the kernel's: released if the process dies); a second process
(another DDP rank, another run of a sweep) waits on that lock, not in a collective, then maps the
files the first one wrote. A split is encoded into ``encoded/.staging-<host>-<pid>-<name>/`` and
renamed into place when complete; an interrupted encoding removes its staging folder, and a
killed one's is removed by the next preparation on that host.

Cache keys. ``datasets`` gives in-memory datasets (``Dataset.from_dict``) random fingerprints, so
the keys never use ``_fingerprint``. The *data identity* is a sha256 over the resolved
``data.corpus`` node (JSON, sorted keys), the source/target languages and, for every string in
that node naming an existing local file or folder, the absolute path, size and mtime of each
file (cheap to compute; touching or replacing a file invalidates its caches, a hub id is
identified by its config alone, so pin ``revision`` in ``data.corpus`` to freeze a hub copy).
The tokenizer key adds the vocabulary size, sample size, seed and model options; a split key
adds the split name and the tokenizer's sha256.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets.table import InMemoryTable
from filelock import FileLock, Timeout
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from common.errors import DataError, first_line
from data.concatenation import join_training_pairs
from data.tokenizer import (
    BOS_ID,
    CHARACTER_COVERAGE,
    EOS_ID,
    MODEL_TYPE,
    NORMALIZATION,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    cached_tokenizer,
    default_num_threads,
    train_tokenizer,
)

ENCODING_VERSION = 2  # 2: ids + cleaning columns in a folder per split, no text
TEXT_TYPES = ("string", "large_string")
IDS_FEATURE = datasets.Sequence(datasets.Value("int32"))
ENCODED_FEATURES = datasets.Features(
    {
        "src_ids": IDS_FEATURE,
        "tgt_ids": IDS_FEATURE,
        "blank": datasets.Value("bool"),
        "src_words": datasets.Value("int32"),
    }
)
MAX_AUTO_PROCS = 16  # data.num_proc=auto: at most this many encoding processes
ROWS_PER_PROC = 50_000  # data.num_proc=auto: one process per this many rows at least


def load_hub(path: str, name: str | None = None, **kwargs: Any) -> datasets.DatasetDict:
    """Load a dataset from the Hugging Face hub or from a local folder in the same layout."""
    path = str(path)
    local = Path(path).expanduser()
    looks_local = os.path.isabs(path) or path.startswith((".", "~")) or local.exists()
    if looks_local and not local.exists():
        raise DataError(
            f"dataset folder not found: {local.resolve()}; set data.corpus.path to an existing "
            "folder in the hub layout or to a hub id such as wmt/wmt14"
        )
    try:
        loaded = datasets.load_dataset(str(local) if looks_local else path, name, **kwargs)
    except Exception as e:
        raise DataError(
            f"could not load dataset {path!r} (config {name!r}): {type(e).__name__}: "
            f"{first_line(e)}; check data.corpus.path/name (hub ids need network access)"
        ) from e
    if isinstance(loaded, datasets.Dataset):
        loaded = datasets.DatasetDict({str(kwargs.get("split") or "train"): loaded})
    if not isinstance(loaded, datasets.DatasetDict):
        raise DataError(
            f"dataset {path!r} loaded as {type(loaded).__name__}, not a DatasetDict; "
            "streaming is not supported, remove data.corpus.streaming"
        )
    return loaded


MULTI30K_HUB = "bentrevett/multi30k"  # the default of configs/data/multi30k.yaml
# The hub's copy holds English and German; a local folder holds any pair (multi30k_fr: NAME.en /
# NAME.fr), named by data.src_lang / data.tgt_lang (configs/data/multi30k.yaml passes them)
MULTI30K_LANGS = ("en", "de")
# Multi30k's three splits in its two local layouts: the hub's (one JSON object a line, as
# bentrevett/multi30k holds them) and plain text (NAME.<lang>, line-aligned)
MULTI30K_JSONL = {"train": "train.jsonl", "validation": "val.jsonl", "test": "test.jsonl"}
MULTI30K_TEXT = {"train": "train", "validation": "val", "test": "test_2016_flickr"}


def multi30k_expected(langs: Sequence[str] = MULTI30K_LANGS) -> str:
    """The files a Multi30k folder must hold, for messages."""
    return (
        "train.jsonl, val.jsonl, test.jsonl (the hub's layout) or train, val, test_2016_flickr "
        f".{'/.'.join(langs)} (plain text)"
    )


def multi30k_text_files(
    folder: str | Path, langs: Sequence[str] = MULTI30K_LANGS
) -> dict[str, dict[str, str]]:
    """The load_text_pairs files (split -> {lang: path}) of Multi30k as plain text in folder."""
    return {
        split: {lang: str(Path(folder) / f"{name}.{lang}") for lang in langs}
        for split, name in MULTI30K_TEXT.items()
    }


def multi30k_layout(folder: Path, langs: Sequence[str] = MULTI30K_LANGS) -> str | None:
    """'hub' or 'text': the Multi30k layout whose files are all in folder (None: neither)."""
    if all((folder / name).is_file() for name in MULTI30K_JSONL.values()):
        return "hub"
    text = multi30k_text_files(folder, langs)
    if all(Path(p).is_file() for langs in text.values() for p in langs.values()):
        return "text"
    return None


def load_multi30k(
    path: str = MULTI30K_HUB,
    setting: str = "data.path",
    langs: Sequence[str] = MULTI30K_LANGS,
    **kwargs: Any,
) -> datasets.DatasetDict:
    """Multi30k from a hub id, or a local folder in the hub's layout or as plain text.

    The layout of a folder is read from its files; kwargs (cache_dir, revision, ...) go to
    load_hub (a hub id or a folder in the hub's layout). Every source of one pair gives the same
    pairs. langs: the languages whose NAME.<lang> files a plain-text folder holds (data.src_lang,
    data.tgt_lang); setting: what names path, for the messages (data.path, or a script's option).
    """
    langs = tuple(str(lang) for lang in langs)
    path = str(path)
    local = Path(path).expanduser()
    if not (os.path.isabs(path) or path.startswith((".", "~")) or local.exists()):
        return _load_multi30k_hub(path, setting, **kwargs)
    layout = multi30k_layout(local, langs) if local.is_dir() else None
    if layout == "hub":
        return load_hub(str(local), **kwargs)
    if layout == "text" and kwargs:
        raise DataError(
            f"data.corpus.{next(iter(kwargs))} applies to the hub's layout, but {setting}={path} "
            "holds plain text; remove it"
        )
    if layout == "text":
        return load_text_pairs(multi30k_text_files(local, langs))
    what = f"is not a Multi30k {'-'.join(langs)} folder" if local.is_dir() else "not found"
    what = "is a file, not a folder" if local.is_file() else what
    where = "" if str(local.resolve()) == path else f" ({local.resolve()})"
    raise DataError(
        f"{setting}={path}{where} {what}: expected {multi30k_expected(langs)}; "
        f"pass {setting}=<a folder holding one of them>"
    )


def _load_multi30k_hub(hub_id: str, setting: str, **kwargs: Any) -> datasets.DatasetDict:
    """Multi30k from the hub (load_hub), its failure one line that says to pass a folder."""
    try:
        return load_hub(hub_id, **kwargs)
    except DataError as e:
        cause = e.__cause__ if e.__cause__ is not None else e
        raise DataError(
            f"could not load Multi30k from the hub ({hub_id}): {type(cause).__name__}: "
            f"{first_line(cause)}; without the hub pass {setting}=<folder>, a local copy "
            f"holding {multi30k_expected()}"
        ) from e


def loads_multi30k(data: Any) -> bool:
    """Whether a data node loads Multi30k: load_multi30k, or its text files (the old config)."""
    corpus = data.get("corpus") if isinstance(data, Mapping) else None
    if not isinstance(corpus, Mapping):
        return False
    if corpus.get("_target_") == "data.corpus.load_multi30k":
        return True
    files = corpus.get("files")
    if corpus.get("_target_") != "data.corpus.load_text_pairs" or not isinstance(files, Mapping):
        return False
    if not all(isinstance(langs, Mapping) for langs in files.values()):
        return False
    names = {
        split: {lang: Path(str(p)).name for lang, p in langs.items()}
        for split, langs in files.items()
    }
    folders = {Path(str(p)).parent for langs in files.values() for p in langs.values()}
    expected = {
        split: {lang: f"{name}.{lang}" for lang in MULTI30K_LANGS}
        for split, name in MULTI30K_TEXT.items()
    }
    return len(folders) == 1 and names == expected


def read_lines(path: str | Path, field: str) -> list[str]:
    """The lines of the UTF-8 text file that `field=path` names, without their terminators.

    Lines end at "\n" (or "\r\n") only, so every line pairs with the same line of an aligned
    file; a leading byte-order mark is dropped. A missing or undecodable file: one DataError.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        what = "is not a file" if path.exists() else "not found"
        raise DataError(f"{field}={path}: {what}; create it or pass an existing UTF-8 text file")
    with path.open("rb") as f:
        return decode_lines(f, f"{field}={path}")


def decode_lines(raw_lines: Iterable[bytes], where: str, start: int = 1) -> list[str]:
    """UTF-8 lines of a binary stream without their terminators (see read_lines); where names it,
    start numbers its first line (a later part of a stream: its first line's number)."""
    lines = []
    for number, raw in enumerate(raw_lines, start=start):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(
                f"{where}: invalid UTF-8 on line {number} (byte {e.start} of the line); "
                "re-encode it as UTF-8"
            ) from e
        if number == 1 and line.startswith("\ufeff"):
            line = line[1:]
        if line.endswith("\n"):
            line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
        lines.append(line)
    return lines


def load_text_pairs(files: Mapping[str, Mapping[str, str]]) -> datasets.DatasetDict:
    """Load line-aligned plain-text files (split -> {lang: path}) as a `translation` column."""
    if not isinstance(files, Mapping) or not files:
        raise DataError(
            "data.corpus.files must map each split to {language: path}, e.g. "
            "{train: {en: train.en, de: train.de}}"
        )
    splits = {}
    for split, langs in files.items():
        split = str(split)
        if not isinstance(langs, Mapping) or not langs:
            raise DataError(
                f"data.corpus.files.{split} must map each language to a file path, got {langs!r}"
            )
        paths = {str(lang): Path(str(p)).expanduser() for lang, p in langs.items()}
        columns = {
            lang: read_lines(p, f"data.corpus.files.{split}.{lang}") for lang, p in paths.items()
        }
        (first, first_lines), *others = columns.items()
        for lang, lines in others:
            if len(lines) != len(first_lines):
                raise DataError(
                    f"unequal line counts in split '{split}': {paths[first]} has "
                    f"{len(first_lines)} lines but {paths[lang]} has {len(lines)}; "
                    "the files must be line-aligned (one sentence per line)"
                )
        names = sorted(columns)
        struct = pa.StructArray.from_arrays(
            [pa.array(columns[lang], type=pa.string()) for lang in names], names=names
        )
        splits[split] = datasets.Dataset.from_dict({"translation": struct})
    return datasets.DatasetDict(splits)


def _language_fields(ds: datasets.Dataset) -> tuple[dict[str, str], str]:
    """Return {language: column after flatten()} and a description of what was found."""
    feature = ds.features.get("translation")
    if isinstance(feature, datasets.Translation):
        langs = [str(lang) for lang in feature.languages]
    elif isinstance(feature, dict):
        langs = [str(lang) for lang in feature]
    else:
        langs = []
    if langs:
        return {lang: f"translation.{lang}" for lang in langs}, (
            "translation.{" + ",".join(sorted(langs)) + "}"
        )
    flat = [
        name
        for name, f in ds.features.items()
        if isinstance(f, datasets.Value) and f.dtype in TEXT_TYPES
    ]
    found = "columns {" + ",".join(sorted(flat)) + "}" if flat else "no text columns"
    return {name: name for name in flat}, found


def _fill_nulls(batch: dict[str, list]) -> dict[str, list]:
    """Replace missing texts by empty strings."""
    return {k: ["" if t is None else t for t in v] for k, v in batch.items()}


def select_direction(
    corpus: datasets.DatasetDict, src_lang: str, tgt_lang: str
) -> datasets.DatasetDict:
    """Return every split with exactly the string columns `src` and `tgt`."""
    if src_lang == tgt_lang:
        raise DataError(
            f"data.src_lang and data.tgt_lang are both {src_lang!r}; set two different languages"
        )
    out = {}
    for split, ds in corpus.items():
        fields, found = _language_fields(ds)
        for lang in (src_lang, tgt_lang):
            if lang not in fields:
                raise DataError(
                    f"split '{split}' has no language '{lang}': found {found}; "
                    "set data.src_lang/data.tgt_lang to one of them"
                )
        if fields[src_lang].startswith("translation."):
            ds = ds.flatten()
        ds = ds.select_columns([fields[src_lang], fields[tgt_lang]])
        ds = ds.rename_columns({fields[src_lang]: "src", fields[tgt_lang]: "tgt"})
        if any(ds.data.column(c).null_count for c in ("src", "tgt")):
            ds = ds.map(_fill_nulls, batched=True, desc=f"fill missing texts ({split})")
        out[split] = ds
    return datasets.DatasetDict(out)


def _counts_line(counts: Mapping[str, int]) -> str:
    """Format cleaning counts on one line."""
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def _blank(column: pa.ChunkedArray) -> np.ndarray:
    """Return a mask of missing, empty or whitespace-only texts."""
    length = pc.utf8_length(pc.utf8_trim_whitespace(column))
    return pc.fill_null(pc.equal(length, 0), True).to_numpy(zero_copy_only=False)


@dataclass
class PairStats:
    """What cleaning reads of each pair, as NumPy arrays with one entry per pair."""

    src_len: np.ndarray  # source ids, EOS included
    tgt_len: np.ndarray  # target ids, EOS included
    blank: np.ndarray  # a side is missing, empty or whitespace-only
    src_words: np.ndarray  # whitespace-separated source words


def list_lengths(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Lengths of an Arrow list column from its offsets (int32, no Python objects)."""
    return np.asarray(pc.list_value_length(column).to_numpy(zero_copy_only=False), np.int32)


def _text_stats(train: datasets.Dataset) -> PairStats:
    """PairStats of a dataset with src, tgt, src_ids and tgt_ids columns, read from its text."""
    table = train.select_columns(["src", "tgt", "src_ids", "tgt_ids"]).with_format("arrow")[:]
    texts = (t or "" for chunk in table["src"].chunks for t in chunk.to_pylist())
    return PairStats(
        src_len=list_lengths(table["src_ids"]),
        tgt_len=list_lengths(table["tgt_ids"]),
        blank=_blank(table["src"]) | _blank(table["tgt"]),
        src_words=np.fromiter((len(t.split()) for t in texts), dtype=np.int32, count=len(train)),
    )


def _number(value) -> float:
    """value as a float, nan when it is not a number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _whole_at_least(value, minimum: int) -> bool:
    """Whether value is a whole number >= minimum."""
    number = _number(value)
    return math.isfinite(number) and number == int(number) and number >= minimum


def _check_cleaning(max_len, max_ratio, max_src_words) -> None:
    """Raise DataError for a cleaning setting out of range (also a value that is not a number)."""
    if max_len is not None and not _whole_at_least(max_len, 2):
        raise DataError(f"data.max_len must be a whole number >= 2 (subwords + EOS), got {max_len}")
    if max_ratio is not None and not _number(max_ratio) >= 1:  # also nan
        raise DataError(f"data.max_ratio must be a number >= 1 or null, got {max_ratio}")
    if max_src_words is not None and not _whole_at_least(max_src_words, 1):
        raise DataError(
            f"data.train_max_src_words must be a positive word count or null, got {max_src_words}"
        )


def cleaning_mask(
    stats: PairStats,
    max_len: int | None = None,
    max_ratio: float | None = None,
    max_src_words: int | None = None,
) -> tuple[np.ndarray, dict[str, int]]:
    """The pairs clean_train keeps (a boolean mask) and the counts per reason (see clean_train)."""
    _check_cleaning(max_len, max_ratio, max_src_words)
    n = len(stats.src_len)
    src_len, tgt_len = stats.src_len.astype(np.int64), stats.tgt_len.astype(np.int64)
    src_sub, tgt_sub = src_len - (src_len > 0), tgt_len - (tgt_len > 0)
    empty = stats.blank | (src_sub == 0) | (tgt_sub == 0)
    drop = empty.copy()
    too_long = np.zeros(n, dtype=bool)
    if max_len is not None:
        too_long = ~drop & ((src_len > int(max_len)) | (tgt_len > int(max_len)))
        drop |= too_long
    ratio = np.zeros(n, dtype=bool)
    if max_ratio is not None:
        longer, shorter = np.maximum(src_sub, tgt_sub), np.minimum(src_sub, tgt_sub)
        ratio = ~drop & (longer > float(max_ratio) * shorter)
        drop |= ratio
    counts = {"input": n, "empty": int(empty.sum()), "too_long": int(too_long.sum())}
    counts["ratio"] = int(ratio.sum())
    if max_src_words is not None:
        over_max_words = ~drop & (stats.src_words > int(max_src_words))
        drop |= over_max_words
        counts["over_max_words"] = int(over_max_words.sum())
    counts["kept"] = int(n - drop.sum())
    if counts["kept"] == 0:
        raise DataError(
            f"the training split is empty after cleaning ({_counts_line(counts)}); check the "
            "corpus and data.max_len/data.max_ratio/data.train_max_src_words"
        )
    return ~drop, counts


def select_rows(ds: datasets.Dataset, keep: np.ndarray) -> datasets.Dataset:
    """The rows of ds where keep is true: an index map built from NumPy, as `ds.select` makes.

    (`select` turns the indices into a Python list first: seconds and GBs on millions of rows.)
    """
    if keep.all():
        return ds
    indices = pa.array(np.flatnonzero(keep).astype(np.uint64))
    if ds._indices is not None:
        indices = ds._indices.column(0).take(indices)
    digest = hashlib.sha256(np.asarray(indices).tobytes()).hexdigest()[:16]
    return datasets.Dataset(
        ds.data,
        info=ds.info,
        split=ds.split,
        indices_table=InMemoryTable(pa.table({"indices": indices})),
        fingerprint=f"{ds._fingerprint}-keep-{digest}"[:64],
    )


def clean_train(
    train: datasets.Dataset,
    max_len: int | None = None,
    max_ratio: float | None = None,
    max_src_words: int | None = None,
) -> tuple[datasets.Dataset, dict[str, int]]:
    """Drop unusable training pairs and return the kept pairs with counts per reason.

    ``train`` has columns ``src``, ``tgt`` and ``src_ids``/``tgt_ids`` (subwords + EOS). Each
    dropped pair is counted once, under the first reason that applies:

    - ``empty``: a side is empty or whitespace-only, or encodes to no subword;
    - ``too_long``: a side has more than ``max_len`` ids counting its EOS (t2t's rule), so every
      kept sequence fits a model with ``max_len`` positions;
    - ``ratio``: the longer side has more than ``max_ratio`` times the subwords of the shorter;
    - ``over_max_words`` (counted only when ``max_src_words`` is set, ``data.train_max_src_words``):
      the source has more than ``max_src_words`` whitespace-separated words, to train on short
      sentences only (the length-extrapolation study; validation/test are never filtered).

    prepare_data computes the same mask from the cached PairStats (cleaning_mask), not the text.
    """
    missing = {"src", "tgt", "src_ids", "tgt_ids"} - set(train.column_names)
    if missing:
        raise DataError(
            f"clean_train needs columns src, tgt, src_ids, tgt_ids; missing {sorted(missing)}"
        )
    keep, counts = cleaning_mask(_text_stats(train), max_len, max_ratio, max_src_words)
    return select_rows(train, keep), counts


def join_train(
    train: datasets.Dataset,
    counts: dict[str, int],
    share: float,
    max_parts: int,
    seed: int,
    max_len: int | None,
) -> tuple[datasets.Dataset, dict[str, int]]:
    """The cleaned train split with ~share of its lines joining 2..max_parts consecutive pairs.

    The joined-training condition of the length study (``data.train_join_share``,
    ``data.train_join_max``, ``data.train_join_seed``; data/concatenation.py). A joined line over
    ``max_len`` ids on a side is dropped, so every kept line still fits the model. The counts
    gain ``join_lines`` (lines after joining), ``joined`` (of them, lines of 2+ pairs) and
    ``join_too_long`` (joined lines dropped); ``kept`` becomes the number of lines trained on.
    """
    joined, join_counts = join_training_pairs(train, share, max_parts, seed)
    too_long = np.zeros(len(joined), dtype=bool)
    if max_len is not None:
        src_len, tgt_len = sequence_lengths(joined, "src_ids"), sequence_lengths(joined, "tgt_ids")
        too_long = (src_len > int(max_len)) | (tgt_len > int(max_len))
        if too_long.any():
            joined = joined.select(np.flatnonzero(~too_long).tolist())
    counts = {k: v for k, v in counts.items() if k != "kept"}
    counts.update(
        join_lines=join_counts["lines"],
        joined=join_counts["joined"],
        join_too_long=int(too_long.sum()),
        kept=len(joined),
    )
    return joined, counts


def sequence_lengths(dataset: datasets.Dataset, column: str) -> np.ndarray:
    """Lengths of a list column (e.g. src_ids) from the Arrow offsets, without Python lists.

    Read from the dataset's whole table and gathered by its index map (if any) in NumPy, never
    through datasets' row-by-row index map.
    """
    lengths = list_lengths(dataset.data.column(column))
    if dataset._indices is not None:
        lengths = lengths[dataset._indices.column(0).to_numpy()]
    return lengths


def train_fingerprint(dataset: datasets.Dataset, batch_size: int = 100_000) -> dict:
    """{"pairs": N, "sha256": ...} of the subword ids a run trains on, in order (both sides).

    Cheap (one pass over the encoded ids) and independent of paths, file times and the cache:
    a checkpoint keeps it, so a resume on other training data is refused. Per batch of
    batch_size rows and per side, the hash reads the int32 lengths, then the int32 ids.
    """
    digest = hashlib.sha256()
    for start in range(0, len(dataset), batch_size):
        for column in ("src_ids", "tgt_ids"):
            ids = _gather_rows(dataset, column, start, min(batch_size, len(dataset) - start))
            digest.update(np.ascontiguousarray(list_lengths(ids)).data)  # [rows] int32
            flat = pc.list_flatten(ids).to_numpy(zero_copy_only=False)  # [ids in rows] int32
            digest.update(np.ascontiguousarray(flat, np.int32).data)
    return {"pairs": len(dataset), "sha256": digest.hexdigest()}


def text_fingerprint(dataset: datasets.Dataset, batch_size: int = 100_000) -> dict:
    """{"pairs": N, "sha256": ...} of a split's raw src/tgt text, in order: what it holds, not
    where it came from (a copy elsewhere, another layout or a hub id give the same)."""
    digest = hashlib.sha256()
    for batch in dataset.select_columns(["src", "tgt"]).iter(batch_size=batch_size):
        for column in ("src", "tgt"):
            lines = batch[column]
            digest.update(np.asarray([len(t) for t in lines], np.int64).tobytes())  # [rows]
            digest.update("".join(lines).encode("utf-8"))
    return {"pairs": len(dataset), "sha256": digest.hexdigest()}


def text_fingerprints(data_cfg: Any) -> dict[str, dict]:
    """text_fingerprint of every split of the corpus a data config names, in its direction."""
    cfg = _as_config(data_cfg)
    corpus = select_direction(
        _instantiate_corpus(cfg), str(_require(cfg, "src_lang")), str(_require(cfg, "tgt_lang"))
    )
    return {split: text_fingerprint(ds) for split, ds in corpus.items()}


def _gather_rows(dataset: datasets.Dataset, column: str, start: int, size: int) -> pa.Array:
    """Rows start..start+size of a column through the index map (if any), gathered by Arrow.

    Only the span of the table those rows come from is joined into one array before the take
    (the whole column for a shuffled index map; an ascending one, as select_rows makes, spans
    about its own rows). datasets' own iteration makes one slice per row: ~40 s at 4.5M rows.
    """
    whole = dataset.data.column(column)
    if dataset._indices is None:
        return whole.slice(start, size).combine_chunks()
    rows = dataset._indices.column(0).slice(start, size).to_numpy()
    low, high = int(rows.min()), int(rows.max()) + 1
    return whole.slice(low, high - low).combine_chunks().take(pa.array(rows - low))


@dataclass
class PreparedData:
    """The tokenizer and the encoded splits the trainer consumes."""

    tokenizer: Tokenizer
    splits: datasets.DatasetDict
    counts: dict
    # split -> (source lengths, target lengths), ids with EOS, one entry per row of the split
    lengths: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # where train_fingerprint's result is kept beside the encoded train split (None: not kept)
    fingerprint_file: Path | None = None
    # split -> text_fingerprint of its raw pairs, before encoding and cleaning
    texts: dict[str, dict] = field(default_factory=dict)

    def fingerprint(self) -> dict:
        """train_fingerprint of the train split, computed once per encoding and cleaning."""
        path = self.fingerprint_file
        kept = _read_json(path) if path is not None else None
        if isinstance(kept, dict) and kept.get("pairs") == len(self.splits["train"]):
            if isinstance(kept.get("sha256"), str) and len(kept["sha256"]) == 64:
                return {"pairs": kept["pairs"], "sha256": kept["sha256"]}
        fingerprint = train_fingerprint(self.splits["train"])
        if path is not None:
            temporary = path.with_name(f".{path.name}.{socket.gethostname()}-{os.getpid()}")
            try:
                temporary.write_text(json.dumps(fingerprint) + "\n")
                os.replace(temporary, path)
            except OSError:  # a read-only cache: computed again at the next launch
                temporary.unlink(missing_ok=True)
        return fingerprint

    def split_lengths(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(source, target) lengths of a split: the ones computed once, else read from Arrow."""
        if split not in self.lengths:
            ds = self.splits[split]
            self.lengths[split] = (
                sequence_lengths(ds, "src_ids"),
                sequence_lengths(ds, "tgt_ids"),
            )
        return self.lengths[split]


def _read_json(path: Path) -> Any:
    """The JSON in path, or None where it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _as_config(data_cfg: Any) -> DictConfig:
    """Return the data config as a DictConfig."""
    if isinstance(data_cfg, DictConfig):
        return data_cfg
    if isinstance(data_cfg, Mapping):
        return OmegaConf.create(dict(data_cfg))
    raise DataError(f"the data config must be a mapping, got {type(data_cfg).__name__}")


def _require(cfg: DictConfig, key: str) -> Any:
    """Return a required data config value."""
    value = cfg.get(key)
    if value is None:
        raise DataError(f"data.{key} is not set; add it to the data config")
    return value


def _instantiate_corpus(cfg: DictConfig) -> datasets.DatasetDict:
    """Build the corpus named by `data.corpus`."""
    node = _require(cfg, "corpus")
    try:  # full keys when cfg is the data node of a whole config, else relative to it
        unset = OmegaConf.missing_keys(cfg)
    except OmegaConfBaseException:  # an interpolation that fails: instantiate reports it
        unset = set()
    missing = sorted(k if k.startswith("data.") else f"data.{k}" for k in unset)
    if missing:
        more = f" (also unset: {', '.join(missing[1:])})" if missing[1:] else ""
        raise DataError(f"{missing[0]} is not set (???){more}: pass {missing[0]}=<value>")
    try:
        corpus = instantiate(node, _convert_="all")
    except InstantiationException as e:
        cause = e.__cause__
        if isinstance(cause, DataError):
            raise cause from cause.__cause__
        detail = f"{type(cause).__name__}: {first_line(cause)}" if cause else first_line(e)
        raise DataError(f"data.corpus could not be instantiated: {detail}") from e
    if not isinstance(corpus, datasets.DatasetDict):
        raise DataError(
            f"data.corpus returned {type(corpus).__name__}, not a datasets.DatasetDict; "
            "point data.corpus._target_ at a corpus loader"
        )
    return corpus


def _strings(node: Any) -> Iterator[str]:
    """Yield every string leaf of a nested config container."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _strings(value)


def _file_stats(path: Path) -> list[list]:
    """Return [absolute path, size, mtime_ns] for a file or every file under a folder."""
    path = path.expanduser().resolve()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    stats = []
    for p in files:
        st = p.stat()
        stats.append([str(p), st.st_size, st.st_mtime_ns])
    return stats


def _sha256_json(payload: Any) -> str:
    """Return the sha256 of a JSON-serialisable payload."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def data_identity(data_cfg: Any) -> str:
    """Return a sha256 identifying the corpus config, the direction and the local files read."""
    cfg = _as_config(data_cfg)
    corpus = OmegaConf.to_container(_require(cfg, "corpus"), resolve=True)
    local = {}
    for text in _strings(corpus):
        try:
            exists = bool(text) and Path(text).expanduser().exists()
        except (OSError, ValueError):
            exists = False
        if exists:
            local[text] = _file_stats(Path(text))
    return _sha256_json(
        {
            "corpus": corpus,
            "src_lang": str(_require(cfg, "src_lang")),
            "tgt_lang": str(_require(cfg, "tgt_lang")),
            "local_files": local,
        }
    )


def _tokenizer_texts(train: datasets.Dataset, sample_size: int, seed: int) -> Iterator[str]:
    """Yield source and target texts of a random subset of at most sample_size/2 pairs."""
    n_pairs = min(len(train), (sample_size + 1) // 2)
    if n_pairs < len(train):
        rng = np.random.default_rng(seed)
        keep = np.zeros(len(train), dtype=bool)
        keep[rng.choice(len(train), n_pairs, replace=False)] = True
        train = select_rows(train, keep)
    for batch in train.iter(batch_size=10_000):
        yield from batch["src"]
        yield from batch["tgt"]


def _load_or_train_tokenizer(
    train: datasets.Dataset, identity: str, cfg: DictConfig, cache_dir: Path, log: Callable
) -> Tokenizer:
    """Return the cached tokenizer for this data and these settings, training it if needed."""
    vocab_size = int(_require(cfg, "vocab_size"))
    sample_size = int(cfg.get("tokenizer_sample") or 2_000_000)
    seed = int(cfg.get("tokenizer_seed") or 0)
    key = _sha256_json(
        {
            "data": identity,
            "split": "train",
            "vocab_size": vocab_size,
            "tokenizer_sample": sample_size,
            "seed": seed,
            "model_type": MODEL_TYPE,
            "character_coverage": CHARACTER_COVERAGE,
            "normalization": NORMALIZATION,
            "special_ids": [PAD_ID, UNK_ID, BOS_ID, EOS_ID],
        }
    )
    out_dir = cache_dir / "tokenizers" / key
    tokenizer = cached_tokenizer(out_dir, log)  # verified against the sha256 it was saved with
    if tokenizer is None:
        with preparation_lock(cache_dir, identity, log):
            tokenizer = cached_tokenizer(out_dir, log)  # written while this process waited?
            if tokenizer is None:
                log(
                    f"data: training tokenizer (BPE, vocab {vocab_size}, sample <= "
                    f"{sample_size} sentences)"
                )
                start = time.perf_counter()
                tokenizer = train_tokenizer(
                    _tokenizer_texts(train, sample_size, seed),
                    vocab_size,
                    out_dir,
                    sample_size=sample_size,
                    seed=seed,
                )
                seconds = time.perf_counter() - start
                log(f"data: tokenizer trained in {seconds:.1f}s -> {tokenizer.path}")
                return tokenizer
    log(f"data: tokenizer loaded from cache {tokenizer.path} (vocab {tokenizer.vocab_size})")
    return tokenizer


@contextmanager
def preparation_lock(cache_dir: Path, identity: str, log: Callable) -> Iterator[None]:
    """Hold cache_dir/locks/<identity>.lock exclusively: one process prepares this data at a time.

    A kernel lock (filelock): it ends when its process dies, and a waiting process waits on the
    file (no collective, no timeout), then finds what the holder wrote. The file stays.
    """
    path = cache_dir / "locks" / f"{identity[:32]}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, preserve_lock_file=True)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        log(f"data: waiting for another process preparing the same data ({path})")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def resolve_num_proc(value: Any, rows: int) -> int:
    """Encoding processes: data.num_proc, or for `auto` one per CPU (capped, and by rows)."""
    if value is None:
        return 1
    if str(value) == "auto":
        return max(1, min(default_num_threads(), MAX_AUTO_PROCS, rows // ROWS_PER_PROC))
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or str(number) != str(value).strip():
        raise DataError(f"data.num_proc={value}: pass a positive number of processes or auto")
    return number


class _Encoder:
    """Batched `datasets.map` function: ids (subwords + EOS) and cleaning columns, no text."""

    def __init__(self, tokenizer: Tokenizer, num_threads: int):
        self.tokenizer = tokenizer
        self.num_threads = num_threads

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        texts = {side: ["" if t is None else t for t in batch[side]] for side in ("src", "tgt")}
        out = {}
        for side, side_texts in texts.items():
            ids = self.tokenizer.encode(side_texts, num_threads=self.num_threads)
            out[f"{side}_ids"] = [seq + [EOS_ID] for seq in ids]
        blank = _blank(pa.array(batch["src"], pa.string())) | _blank(
            pa.array(batch["tgt"], pa.string())
        )
        out["blank"] = blank.tolist()
        out["src_words"] = [len(t.split()) for t in texts["src"]]
        return out


def _remove_stale_staging(encoded_dir: Path) -> None:
    """Remove staging folders of encodings killed on this host (their process is gone)."""
    host = socket.gethostname()
    for folder in encoded_dir.glob(f".staging-{host}-*"):
        pid = folder.name[len(f".staging-{host}-") :].split("-", 1)[0]
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (ValueError, PermissionError):
            continue


def _write_encoded(
    ds: datasets.Dataset, split: str, tokenizer: Tokenizer, final: Path, num_proc: int
) -> None:
    """Encode ds into a staging folder and rename it to `final` once complete."""
    _remove_stale_staging(final.parent)
    staging = final.parent / f".staging-{socket.gethostname()}-{os.getpid()}-{final.name}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        procs = num_proc if num_proc > 1 and len(ds) > 1 else None
        encoded = ds.map(
            _Encoder(tokenizer, max(1, default_num_threads() // (procs or 1))),
            batched=True,
            num_proc=procs,
            cache_file_name=str(staging / "data.arrow"),
            load_from_cache_file=False,
            new_fingerprint=final.name[:40],
            features=ENCODED_FEATURES,
            remove_columns=["src", "tgt"],
            desc=f"encode {split}",
        )
        files = sorted(p.name for p in staging.glob("data*.arrow"))
        meta = {"rows": len(encoded), "files": files, "version": ENCODING_VERSION}
        del encoded
        (staging / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        os.rename(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _read_encoded(final: Path) -> datasets.Dataset:
    """The encoded split in `final`, memory-mapped."""
    meta = json.loads((final / "meta.json").read_text())
    parts = [datasets.Dataset.from_file(str(final / name)) for name in meta["files"]]
    if not parts:  # an empty split: map writes no file (evaluation then says it has no lines)
        return datasets.Dataset.from_dict({k: [] for k in ENCODED_FEATURES}, ENCODED_FEATURES)
    encoded = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    if len(encoded) != meta["rows"]:
        raise DataError(
            f"encoded cache {final} has {len(encoded)} rows, its meta.json says {meta['rows']}; "
            "delete that folder and rerun"
        )
    return encoded


def _encoded_dir(cache_dir: Path, identity: str, split: str, tokenizer: Tokenizer) -> Path:
    """The cache folder of a split's encoding: keyed by the data, the split and the tokenizer."""
    key = _sha256_json(
        {"data": identity, "split": split, "tokenizer": tokenizer.sha256, "v": ENCODING_VERSION}
    )
    return cache_dir / "encoded" / f"{key}-{split}"


def _encode_split(
    ds: datasets.Dataset,
    split: str,
    tokenizer: Tokenizer,
    identity: str,
    cache_dir: Path,
    num_proc: Any,
    log: Callable,
) -> tuple[datasets.Dataset, PairStats]:
    """One split with its ids (encoded into, or mapped from, the cache) and its PairStats."""
    final = _encoded_dir(cache_dir, identity, split, tokenizer)
    final.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    what = "loaded from cache"
    if not final.is_dir():
        with preparation_lock(cache_dir, identity, log):
            if not final.is_dir():  # not written while this process waited
                procs = resolve_num_proc(num_proc, len(ds))
                _write_encoded(ds, split, tokenizer, final, procs)
                what = f"encoded ({procs} process{'es' if procs > 1 else ''})"
    encoded = _read_encoded(final)
    if len(encoded) != len(ds):
        raise DataError(
            f"encoded cache {final} has {len(encoded)} rows but split '{split}' has {len(ds)}; "
            "delete that folder and rerun"
        )
    table = encoded.data
    stats = PairStats(
        src_len=list_lengths(table.column("src_ids")),
        tgt_len=list_lengths(table.column("tgt_ids")),
        blank=table.column("blank").to_numpy(),
        src_words=np.asarray(table.column("src_words").to_numpy(), np.int32),
    )
    ids = encoded.select_columns(["src_ids", "tgt_ids"])
    joined = datasets.concatenate_datasets([ds, ids], axis=1)
    log(
        f"data: split '{split}': {len(joined)} pairs {what} in "
        f"{time.perf_counter() - start:.1f}s ({final.name})"
    )
    return joined, stats


def prepare_data(
    data_cfg: Any,
    cache_dir: str | Path,
    log: Callable[[str], None] = print,
    tokenizer_path: str | Path | None = None,
    required_splits: tuple[str, ...] = ("train",),
) -> PreparedData:
    """Load, tokenise (with caching) and clean the corpus described by the data config.

    tokenizer_path: use this SentencePiece model (a resumed run's own) instead of the cached or
    newly trained one. required_splits: splits that must exist, checked before any tokenizing.
    """
    cfg = _as_config(data_cfg)
    cache_dir = Path(cache_dir)
    num_proc = cfg.get("num_proc")
    corpus = select_direction(
        _instantiate_corpus(cfg), str(_require(cfg, "src_lang")), str(_require(cfg, "tgt_lang"))
    )
    for split in ("train", *required_splits):
        if split not in corpus:
            raise DataError(
                f"the corpus has no '{split}' split (found {', '.join(corpus) or 'none'}); "
                "add one to data.corpus"
            )
    for split in ("train", *required_splits):
        if len(corpus[split]) == 0:
            raise DataError(f"the '{split}' split is empty; check data.corpus (its files)")
    resolve_num_proc(num_proc, len(corpus["train"]))  # a bad value: refused before any work
    _check_cleaning(cfg.get("max_len"), cfg.get("max_ratio"), cfg.get("train_max_src_words"))
    identity = data_identity(cfg)
    texts = {split: text_fingerprint(ds) for split, ds in corpus.items()}
    if tokenizer_path is not None:
        tokenizer = Tokenizer(tokenizer_path)
        log(f"data: tokenizer {tokenizer.path} (vocab {tokenizer.vocab_size})")
    else:
        tokenizer = _load_or_train_tokenizer(corpus["train"], identity, cfg, cache_dir, log)
    splits, stats = datasets.DatasetDict(), {}
    for split, ds in corpus.items():
        splits[split], stats[split] = _encode_split(
            ds, split, tokenizer, identity, cache_dir, num_proc, log
        )
    keep, counts = cleaning_mask(
        stats["train"], cfg.get("max_len"), cfg.get("max_ratio"), cfg.get("train_max_src_words")
    )
    splits["train"] = select_rows(splits["train"], keep)
    mask = hashlib.sha256(np.packbits(keep).tobytes()).hexdigest()[:32]
    kept_at = _encoded_dir(cache_dir, identity, "train", tokenizer) / f"fingerprint-{mask}.json"
    lengths = {split: (s.src_len, s.tgt_len) for split, s in stats.items()}
    lengths["train"] = (stats["train"].src_len[keep], stats["train"].tgt_len[keep])
    if cfg.get("train_join_share") is not None:
        splits["train"], counts = join_train(
            splits["train"],
            counts,
            float(cfg.train_join_share),
            int(cfg.get("train_join_max") or 4),
            int(cfg.get("train_join_seed") or 0),
            cfg.get("max_len"),
        )
        del lengths["train"]  # joined lines: PreparedData.split_lengths reads them
        kept_at = None  # (joined lines: their fingerprint is computed each launch)
    log(f"data: train cleaning: {_counts_line(counts)}")
    return PreparedData(tokenizer, splits, counts, lengths, fingerprint_file=kept_at, texts=texts)


def absolute_local_paths(node: Any, base: str | Path) -> Any:
    """A copy of a resolved config node whose relative paths that exist under base are absolute.

    A run stores its data config this way, so evaluation finds the corpus from any working
    directory; strings that name nothing under base (hub ids, languages) stay as they are.
    """
    if isinstance(node, Mapping):
        return {key: absolute_local_paths(value, base) for key, value in node.items()}
    if isinstance(node, (list, tuple)):
        return [absolute_local_paths(value, base) for value in node]
    if isinstance(node, str) and node and not os.path.isabs(node):
        try:
            candidate = Path(base) / Path(node).expanduser()
            if candidate.exists():
                return str(candidate.resolve())
        except (OSError, ValueError):
            pass
    return node


def load_split(data_cfg: Any, split: str) -> datasets.Dataset:
    """Return the raw `src`/`tgt` texts of one split."""
    cfg = _as_config(data_cfg)
    corpus = _instantiate_corpus(cfg)
    if split not in corpus:
        raise DataError(
            f"unknown split {split!r}: available splits are {', '.join(corpus)}; pick one of them"
        )
    one = datasets.DatasetDict({split: corpus[split]})
    return select_direction(one, str(_require(cfg, "src_lang")), str(_require(cfg, "tgt_lang")))[
        split
    ]
