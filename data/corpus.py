"""Parallel corpora: loading, direction selection, tokenisation, caching and train cleaning.

``prepare_data(cfg.data, cache_dir)`` is the one entry point the trainer needs. It instantiates
``data.corpus`` (a Hydra ``_target_`` returning a ``datasets.DatasetDict``), keeps the two
languages as ``src``/``tgt`` columns, trains (or reuses) one joint SentencePiece BPE model on the
train split, encodes every split (``src_ids``/``tgt_ids`` = subwords + EOS) into Arrow files under
``cache_dir`` and drops unusable training pairs (validation/test are never dropped or truncated).

Cache layout under ``cache_dir``::

    tokenizers/<tokenizer key>/spm.model    the SentencePiece model
    tokenizers/<tokenizer key>/meta.json    the options it was trained with
    encoded/<split key>-<split>.arrow       encoded split (<...>_00000_of_0000N.arrow shards when
                                            first written with num_proc=N)

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

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from data.concatenation import join_training_pairs
from data.errors import DataError, first_line
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
    train_tokenizer,
)

ENCODING_VERSION = 1
TEXT_TYPES = ("string", "large_string")
IDS_FEATURE = datasets.Sequence(datasets.Value("int32"))
ENCODED_FEATURES = datasets.Features(
    {
        "src": datasets.Value("string"),
        "tgt": datasets.Value("string"),
        "src_ids": IDS_FEATURE,
        "tgt_ids": IDS_FEATURE,
    }
)


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


def decode_lines(raw_lines: Iterable[bytes], where: str) -> list[str]:
    """UTF-8 lines of a binary stream without their terminators (see read_lines); where names it."""
    lines = []
    for number, raw in enumerate(raw_lines, start=1):
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
    """
    missing = {"src", "tgt", "src_ids", "tgt_ids"} - set(train.column_names)
    if missing:
        raise DataError(
            f"clean_train needs columns src, tgt, src_ids, tgt_ids; missing {sorted(missing)}"
        )
    if max_len is not None and int(max_len) < 2:
        raise DataError(f"data.max_len must be at least 2 (subwords + EOS), got {max_len}")
    if max_ratio is not None and float(max_ratio) < 1:
        raise DataError(f"data.max_ratio must be >= 1 or null, got {max_ratio}")
    if max_src_words is not None and int(max_src_words) < 1:
        raise DataError(
            f"data.train_max_src_words must be a positive word count or null, got {max_src_words}"
        )
    n = len(train)
    counts = {"input": n, "empty": 0, "too_long": 0, "ratio": 0}
    if max_src_words is not None:
        counts["over_max_words"] = 0
    counts["kept"] = 0
    if n:
        table = train.select_columns(["src", "tgt", "src_ids", "tgt_ids"]).with_format("arrow")[:]
        src_len = pc.list_value_length(table["src_ids"]).to_numpy(zero_copy_only=False)
        tgt_len = pc.list_value_length(table["tgt_ids"]).to_numpy(zero_copy_only=False)
        src_sub = src_len - (src_len > 0)
        tgt_sub = tgt_len - (tgt_len > 0)
        empty = _blank(table["src"]) | _blank(table["tgt"]) | (src_sub == 0) | (tgt_sub == 0)
        drop = empty.copy()
        too_long = np.zeros(n, dtype=bool)
        if max_len is not None:
            too_long = ~drop & ((src_len > int(max_len)) | (tgt_len > int(max_len)))
            drop |= too_long
        ratio = np.zeros(n, dtype=bool)
        if max_ratio is not None:
            longer = np.maximum(src_sub, tgt_sub)
            shorter = np.minimum(src_sub, tgt_sub)
            ratio = ~drop & (longer > float(max_ratio) * shorter)
            drop |= ratio
        if max_src_words is not None:
            texts = (t or "" for chunk in table["src"].chunks for t in chunk.to_pylist())
            words = np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=n)
            over_max_words = ~drop & (words > int(max_src_words))
            drop |= over_max_words
            counts["over_max_words"] = int(over_max_words.sum())
        counts.update(
            empty=int(empty.sum()),
            too_long=int(too_long.sum()),
            ratio=int(ratio.sum()),
            kept=int(n - drop.sum()),
        )
        if drop.any():
            train = train.select(np.flatnonzero(~drop).tolist())
    if counts["kept"] == 0:
        raise DataError(
            f"the training split is empty after cleaning ({_counts_line(counts)}); check the "
            "corpus and data.max_len/data.max_ratio/data.train_max_src_words"
        )
    return train, counts


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
    """Lengths of a list column (e.g. src_ids), read from Arrow without building Python lists."""
    return pc.list_value_length(dataset.with_format("arrow")[column]).to_numpy()


@dataclass
class PreparedData:
    """The tokenizer and the encoded splits the trainer consumes."""

    tokenizer: Tokenizer
    splits: datasets.DatasetDict
    counts: dict


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
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

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
        train = train.select(np.sort(rng.choice(len(train), n_pairs, replace=False)).tolist())
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
    if tokenizer is not None:
        log(f"data: tokenizer loaded from cache {tokenizer.path} (vocab {tokenizer.vocab_size})")
        return tokenizer
    log(f"data: training tokenizer (BPE, vocab {vocab_size}, sample <= {sample_size} sentences)")
    start = time.perf_counter()
    tokenizer = train_tokenizer(
        _tokenizer_texts(train, sample_size, seed),
        vocab_size,
        out_dir,
        sample_size=sample_size,
        seed=seed,
    )
    log(f"data: tokenizer trained in {time.perf_counter() - start:.1f}s -> {tokenizer.path}")
    return tokenizer


class _Encoder:
    """Batched `datasets.map` function adding `src_ids`/`tgt_ids` (subwords + EOS)."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, batch: dict[str, list]) -> dict[str, list]:
        out = {}
        for side in ("src", "tgt"):
            ids = self.tokenizer.encode(["" if t is None else t for t in batch[side]])
            out[f"{side}_ids"] = [seq + [EOS_ID] for seq in ids]
        return out


def _encode_split(
    ds: datasets.Dataset,
    split: str,
    tokenizer: Tokenizer,
    identity: str,
    cache_dir: Path,
    num_proc: int,
    log: Callable,
) -> datasets.Dataset:
    """Encode one split into (or load it from) its Arrow cache file."""
    key = _sha256_json(
        {"data": identity, "split": split, "tokenizer": tokenizer.sha256, "v": ENCODING_VERSION}
    )
    out_dir = cache_dir / "encoded"
    out_dir.mkdir(parents=True, exist_ok=True)
    cache_file = out_dir / f"{key}-{split}.arrow"
    start = time.perf_counter()
    with open(out_dir / ".lock", "a") as lock:  # one process encodes into the folder at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in out_dir.glob("tmp*"):  # datasets' temporary files of a killed encoding
            stale.unlink(missing_ok=True)
        cached = cache_file.exists() or any(out_dir.glob(f"{key}-{split}_*_of_*.arrow"))
        encoded = ds.map(
            _Encoder(tokenizer),
            batched=True,
            num_proc=num_proc if num_proc > 1 and len(ds) > 1 else None,
            cache_file_name=str(cache_file),
            load_from_cache_file=True,
            new_fingerprint=key[:40],
            features=ENCODED_FEATURES,
            desc=f"encode {split}",
        )
    what = "loaded from cache" if cached else "encoded"
    log(
        f"data: split '{split}': {len(encoded)} pairs {what} in "
        f"{time.perf_counter() - start:.1f}s ({cache_file.name})"
    )
    return encoded


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
    num_proc = int(cfg.get("num_proc") or 1)
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
    identity = data_identity(cfg)
    if tokenizer_path is not None:
        tokenizer = Tokenizer(tokenizer_path)
        log(f"data: tokenizer {tokenizer.path} (vocab {tokenizer.vocab_size})")
    else:
        tokenizer = _load_or_train_tokenizer(corpus["train"], identity, cfg, cache_dir, log)
    splits = datasets.DatasetDict(
        {
            split: _encode_split(ds, split, tokenizer, identity, cache_dir, num_proc, log)
            for split, ds in corpus.items()
        }
    )
    splits["train"], counts = clean_train(
        splits["train"], cfg.get("max_len"), cfg.get("max_ratio"), cfg.get("train_max_src_words")
    )
    if cfg.get("train_join_share") is not None:
        splits["train"], counts = join_train(
            splits["train"],
            counts,
            float(cfg.train_join_share),
            int(cfg.get("train_join_max") or 4),
            int(cfg.get("train_join_seed") or 0),
            cfg.get("max_len"),
        )
    log(f"data: train cleaning: {_counts_line(counts)}")
    return PreparedData(tokenizer=tokenizer, splits=splits, counts=counts)


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
