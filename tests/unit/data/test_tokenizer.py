"""Tests for data/tokenizer.py: training, special ids, round trips, hashing and errors."""

from __future__ import annotations

import hashlib
import json
import pickle
import random

import pytest
import sentencepiece as spm

from data.corpus import DataError
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer

VOCAB = 300


def synthetic_sentences(n: int, seed: int = 0) -> list[str]:
    """Return n lowercase sentences over a fixed set of pseudo-words."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(400)
    ]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 14))) for _ in range(n)]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return synthetic_sentences(3000)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, texts) -> Tokenizer:
    out = tmp_path_factory.mktemp("tok") / "model"
    return train_tokenizer(texts, VOCAB, out, sample_size=len(texts), seed=0, num_threads=2)


def test_special_ids_and_vocab_size(tokenizer):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert tokenizer.vocab_size == VOCAB
    sp = spm.SentencePieceProcessor(model_file=str(tokenizer.path))
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
    assert sp.get_piece_size() == VOCAB


def test_encode_has_no_specials_and_round_trips(tokenizer, texts):
    sample = texts[:200] + ["unseen wordz qqq", ""]
    ids = tokenizer.encode(sample)
    assert len(ids) == len(sample)
    assert ids[-1] == []
    for seq in ids:
        assert all(isinstance(i, int) and 4 <= i < VOCAB for i in seq)
    assert tokenizer.decode(ids) == sample


def test_decode_stops_at_eos_and_ignores_pad_bos(tokenizer):
    first, second = tokenizer.encode(["abc def", "ghi"])
    assert tokenizer.decode([[BOS_ID, *first, EOS_ID, *second, PAD_ID]]) == ["abc def"]
    assert tokenizer.decode([[PAD_ID, BOS_ID, *first, PAD_ID, PAD_ID]]) == ["abc def"]
    assert tokenizer.decode([[EOS_ID, *first], []]) == ["", ""]


def test_unknown_character_maps_to_unk(tokenizer):
    (ids,) = tokenizer.encode(["abc \u4e2d"])
    assert UNK_ID in ids


def test_sha256_matches_file_and_is_reproducible(tmp_path, tokenizer, texts):
    assert tokenizer.sha256 == hashlib.sha256(tokenizer.path.read_bytes()).hexdigest()
    assert Tokenizer(tokenizer.path).sha256 == tokenizer.sha256
    again = train_tokenizer(
        texts, VOCAB, tmp_path / "again", sample_size=len(texts), seed=0, num_threads=2
    )
    assert again.sha256 == tokenizer.sha256
    smaller = train_tokenizer(
        texts, VOCAB - 20, tmp_path / "smaller", sample_size=len(texts), seed=0, num_threads=2
    )
    assert smaller.sha256 != tokenizer.sha256


def test_one_or_two_threads_give_the_same_model_bytes(tmp_path, tokenizer, texts):
    one = train_tokenizer(texts, VOCAB, tmp_path / "one", sample_size=len(texts), num_threads=1)
    assert one.path.read_bytes() == tokenizer.path.read_bytes()  # the fixture used 2 threads
    assert one.sha256 == tokenizer.sha256


def test_written_atomically_with_meta(tmp_path, texts):
    out = tmp_path / "tok"
    tok = train_tokenizer(texts, VOCAB, out, sample_size=1000, seed=1, num_threads=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "spm.model"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["vocab_size"] == VOCAB and meta["model_type"] == "bpe"
    assert meta["character_coverage"] == 1.0
    assert meta["sample_sentences"] == 1000
    assert tok.path == (out / "spm.model").resolve()


def test_existing_model_wins_over_a_concurrent_training(tmp_path, texts):
    out = tmp_path / "tok"
    first = train_tokenizer(texts, VOCAB, out, sample_size=3000, seed=0, num_threads=2)
    second = train_tokenizer(texts, VOCAB - 20, out, sample_size=3000, seed=0, num_threads=2)
    assert second.sha256 == first.sha256
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]


def test_vocab_too_high_is_a_data_error(tmp_path):
    texts = synthetic_sentences(50)
    with pytest.raises(DataError) as info:
        train_tokenizer(texts, 50_000, tmp_path / "tok", sample_size=100)
    message = str(info.value)
    assert "data.vocab_size" in message and "50000" in message
    assert "at most" in message and "\n" not in message
    assert not (tmp_path / "tok").exists()


def test_no_text_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="no non-empty training text"):
        train_tokenizer(["", "   "], 100, tmp_path / "tok", sample_size=10)


def test_missing_or_invalid_model_file(tmp_path):
    with pytest.raises(DataError, match="tokenizer model not found"):
        Tokenizer(tmp_path / "nope.model")
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(DataError, match="not a valid SentencePiece model"):
        Tokenizer(bad)


def test_pickles_by_path(tokenizer):
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.sha256 == tokenizer.sha256
    assert clone.encode(["abc def"]) == tokenizer.encode(["abc def"])
