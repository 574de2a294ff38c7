"""Joint source-target SentencePiece BPE tokenizer with fixed special ids.

One BPE model is shared by both languages (Vaswani et al. 2017 use a shared ~37k vocabulary for
En-De). The special ids are fixed project-wide: PAD=0, UNK=1, BOS=2, EOS=3.

Training choices:

- ``character_coverage=1.0``: every character seen in the training sample gets a piece, so
  nothing in the training text maps to UNK (appropriate for alphabetic languages such as English
  and German; CJK-heavy corpora would want 0.9995).
- Default SentencePiece normalisation (``nmt_nfkc``), so encode-then-decode returns NFKC text
  with runs of whitespace collapsed.
- The training text is a bounded uniform random sample drawn here (reservoir sampling with a
  fixed seed, blank lines skipped), so the sample does not depend on SentencePiece's own
  sampler. The texts are spooled to an unlinked temporary file and the reservoir holds their
  positions only; SentencePiece reads the sample back from that file, one sentence at a time
  (a 2M-sentence sample is never held as Python strings).
- The model is serialised in memory and written atomically (temporary directory, then rename):
  a killed or concurrent run never leaves a half-written model, and the file bytes (hence
  ``Tokenizer.sha256``) depend only on the sample and the options: SentencePiece writes its
  ``num_threads`` into the model, which is cleared before saving, so a model trained on 1 CPU
  and one trained on 16 are the same file (the pieces and scores do not depend on it).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2

from common.errors import DataError, first_line
from common.files import new_file_mode

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

MODEL_FILE = "spm.model"
MODEL_TYPE = "bpe"
CHARACTER_COVERAGE = 1.0
NORMALIZATION = "nmt_nfkc"


def default_num_threads() -> int:
    """Return the number of CPUs this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


class Tokenizer:
    """A joint source-target SentencePiece BPE model with fixed special ids."""

    def __init__(self, model_path: str | Path):
        self.path = Path(model_path).resolve()
        if not self.path.is_file():
            raise DataError(
                f"tokenizer model not found: {self.path}; run data preparation to train it "
                "or point to an existing spm.model"
            )
        data = self.path.read_bytes()
        self.sha256 = hashlib.sha256(data).hexdigest()
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(data)
        except Exception as e:
            raise DataError(
                f"tokenizer model {self.path} is not a valid SentencePiece model "
                f"({first_line(e)}); delete it and rerun data preparation"
            ) from e
        found = (self._sp.pad_id(), self._sp.unk_id(), self._sp.bos_id(), self._sp.eos_id())
        if found != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise DataError(
                f"tokenizer model {self.path} has special ids pad/unk/bos/eos={found}, "
                f"expected {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}; retrain it with train_tokenizer"
            )
        self.vocab_size = self._sp.get_piece_size()

    def __repr__(self) -> str:
        return f"Tokenizer({str(self.path)!r}, vocab_size={self.vocab_size})"

    def __getstate__(self) -> dict:
        return {"path": str(self.path), "sha256": self.sha256}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])
        if self.sha256 != state["sha256"]:
            raise DataError(
                f"tokenizer model {self.path} changed on disk (sha256 {self.sha256} != "
                f"{state['sha256']}); rerun data preparation"
            )

    def pieces(self) -> list[str]:
        """Every piece of the vocabulary, indexed by id (what other toolkits' vocabularies list)."""
        return [self._sp.id_to_piece(i) for i in range(self.vocab_size)]

    def copy_to(self, path: str | Path) -> Tokenizer:
        """This model copied to path atomically (kept as it is if path holds the same bytes)."""
        path = Path(path)
        if not (path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == self.sha256):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            try:
                os.fchmod(fd, new_file_mode())  # as any new file (mkstemp's is 0600)
                with os.fdopen(fd, "wb") as f:
                    f.write(self.path.read_bytes())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return Tokenizer(path)

    def encode(self, texts: list[str], num_threads: int = -1) -> list[list[int]]:
        """Return the subword ids of each text, without BOS/EOS (num_threads -1: every CPU)."""
        return self._sp.encode(list(texts), out_type=int, num_threads=num_threads)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Return the text of each id sequence, cut at its first EOS, ignoring PAD and BOS."""
        texts = []
        for seq in ids:
            pieces = []
            for i in seq:
                i = int(i)
                if i == EOS_ID:
                    break
                if i not in (PAD_ID, BOS_ID):
                    pieces.append(i)
            texts.append(self._sp.decode(pieces))
        return texts


def _reservoir(texts: Iterable[str], size: int, seed: int, spool: BinaryIO) -> np.ndarray:
    """Spool the non-blank texts to `spool`; return a uniform sample of at most `size` of them.

    The sample is an array of (offset, length) rows into the spool, in reservoir order (the
    same choices as a reservoir of the strings themselves, with rng = random.Random(seed)).
    """
    rng = random.Random(seed)
    sample = np.zeros((min(size, 1 << 16), 2), dtype=np.int64)  # [slot, (offset, length)]
    seen = offset = 0
    for text in texts:
        if not text or not text.strip():
            continue
        data = text.encode("utf-8")
        spool.write(data)
        slot = seen if seen < size else rng.randrange(seen + 1)
        if slot < size:
            if slot >= len(sample):
                sample = np.resize(sample, (min(size, 2 * len(sample)), 2))
            sample[slot] = (offset, len(data))
        offset += len(data)
        seen += 1
    return sample[: min(seen, size)]


def _spooled(spool: BinaryIO, sample: np.ndarray) -> Iterator[str]:
    """Yield the sampled texts back from the spool, in sample order."""
    spool.flush()
    for offset, length in sample:
        spool.seek(int(offset))
        yield spool.read(int(length)).decode("utf-8")


def _training_error(error: Exception, vocab_size: int) -> DataError:
    """Translate a SentencePiece training failure into a one-line DataError."""
    message = first_line(error)
    if "Vocabulary size too high" in message:
        limit = re.search(r"<=\s*(\d+)", message)
        supported = f" (it supports at most {limit.group(1)})" if limit else ""
        return DataError(
            f"tokenizer: vocabulary size {vocab_size} is too high for the training text"
            f"{supported}; lower data.vocab_size"
        )
    if "smaller than required_chars" in message:
        need = re.search(r"required_chars\.\s*(\d+)\s*vs\s*(\d+)", message)
        chars = f" ({need.group(2)} distinct characters)" if need else ""
        return DataError(
            f"tokenizer: vocabulary size {vocab_size} cannot hold every character of the "
            f"training text{chars}; raise data.vocab_size"
        )
    return DataError(f"tokenizer training failed: {message}")


def without_thread_count(model: bytes) -> bytes:
    """A serialized SentencePiece model with its trainer's ``num_threads`` cleared.

    The thread count changes neither the pieces nor their scores, only this recorded field;
    clearing it makes the bytes (and the sha256 checkpoints keep) independent of the CPU count.
    """
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    proto.trainer_spec.ClearField("num_threads")
    return proto.SerializeToString(deterministic=True)


def trainer_options(vocab_size: int, num_threads: int | None) -> dict:
    """SentencePiece trainer options: our BPE settings, special ids and thread count."""
    return {
        "model_type": MODEL_TYPE,
        "vocab_size": int(vocab_size),
        "character_coverage": CHARACTER_COVERAGE,
        "normalization_rule_name": NORMALIZATION,
        "pad_id": PAD_ID,
        "unk_id": UNK_ID,
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "num_threads": int(num_threads or default_num_threads()),
        "minloglevel": 1,
    }


def write_tokenizer_slot(out_dir: Path, trained: bytes, meta: dict) -> None:
    """spm.model (thread count cleared) and meta.json (its sha256 added) into out_dir at once.

    Both are written into a temporary folder renamed to out_dir; a slot another process
    completed first is kept.
    """
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        model = without_thread_count(trained)
        (tmp_dir / MODEL_FILE).write_bytes(model)
        meta = {
            **meta,
            "model_sha256": hashlib.sha256(model).hexdigest(),  # checked by cached_tokenizer
            "slot": out_dir.name,  # the cache key it was trained for: a slot copied elsewhere
        }
        (tmp_dir / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if out_dir.exists() and not (out_dir / MODEL_FILE).is_file():
            shutil.rmtree(out_dir)
        try:
            os.rename(tmp_dir, out_dir)
        except OSError:
            if not (out_dir / MODEL_FILE).is_file():
                raise
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    out_dir: Path,
    *,
    sample_size: int,
    seed: int = 0,
    num_threads: int | None = None,
) -> Tokenizer:
    """Train a BPE model on a random sample of ``texts`` and save it as ``out_dir/spm.model``."""
    out_dir = Path(out_dir)
    if sample_size < 1:
        raise DataError(f"tokenizer sample size must be positive, got {sample_size}")
    options = trainer_options(vocab_size, num_threads)
    writer = io.BytesIO()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=out_dir.parent, prefix=".sample-") as spool:
        sample = _reservoir(texts, sample_size, seed, spool)
        if not len(sample):
            raise DataError("tokenizer: no non-empty training text; check the training split")
        spm.set_random_generator_seed(seed)
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=_spooled(spool, sample), model_writer=writer, **options
            )
        except RuntimeError as e:
            raise _training_error(e, vocab_size) from e
    meta = {**options, "seed": seed, "sample_size": sample_size, "sample_sentences": len(sample)}
    write_tokenizer_slot(out_dir, writer.getvalue(), meta)
    return Tokenizer(out_dir / MODEL_FILE)


def cached_tokenizer(out_dir: Path, log) -> Tokenizer | None:
    """The tokenizer in a cache slot if its spm.model is the one trained there, else None.

    train_tokenizer records the model's sha256 and the slot it was trained for (its cache key)
    in the slot's meta.json; a slot whose model does not match it (a file copied in, an edit, a
    slot written before the hash was recorded) or that was trained for another slot (another
    slot's files copied in whole) is removed, so the caller trains the slot's tokenizer again.
    """
    path = Path(out_dir) / MODEL_FILE
    if not path.is_file():
        return None
    try:
        meta = json.loads((path.parent / "meta.json").read_text())
        recorded, slot = meta.get("model_sha256"), meta.get("slot", path.parent.name)
    except (OSError, ValueError, AttributeError):
        recorded, slot = None, None
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if recorded == actual and slot == path.parent.name:  # no slot: written before it was kept
        return Tokenizer(path)
    log(
        f"data: cached tokenizer {path} is not the one its cache key describes (sha256 "
        f"{actual[:12]}, recorded {str(recorded)[:12]}; trained for slot {str(slot)[:12]}): "
        "training it again"
    )
    shutil.rmtree(path.parent)
    return None
