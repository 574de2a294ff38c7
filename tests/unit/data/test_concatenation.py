"""Joined test lines and the joined-training condition of the length study."""

import pytest

from common.errors import UserError
from data.concatenation import join_consecutive_lines, join_training_pairs, leftover_lines
from data.corpus import prepare_data
from data.tokenizer import EOS_ID
from tests.conftest import compose_config


def test_join_consecutive_lines_groups_in_order_and_counts_the_rest():
    lines = ["a b", "c", "d e", "f", "g"]
    assert join_consecutive_lines(lines, 1) == lines
    assert join_consecutive_lines(lines, 2) == ["a b c", "d e f"]
    assert join_consecutive_lines(lines, 3) == ["a b c d e"]
    assert leftover_lines(len(lines), 2) == 1 and leftover_lines(len(lines), 3) == 2
    with pytest.raises(UserError, match="k=0"):
        join_consecutive_lines(lines, 0)


@pytest.fixture(scope="module")
def toy_train(tmp_path_factory):
    """The encoded toy training split (a real SentencePiece model) and its tokenizer."""
    cfg = compose_config(["data.corpus.train_size=600", "data.vocab_size=300"])
    data = prepare_data(cfg.data, tmp_path_factory.mktemp("cache"), log=lambda _: None)
    return data.splits["train"], data.tokenizer


def test_joined_training_pairs_use_every_pair_once_in_order(toy_train):
    train, _ = toy_train
    joined, counts = join_training_pairs(train, share=0.5, max_parts=4, seed=3)
    assert counts["input"] == len(train) and counts["lines"] == len(joined)
    assert 0 < counts["joined"] < counts["lines"]
    assert " ".join(joined["src"]) == " ".join(train["src"])  # nothing lost, nothing repeated
    assert " ".join(joined["tgt"]) == " ".join(train["tgt"])
    n_eos = sum(ids.count(EOS_ID) for ids in joined["tgt_ids"])
    assert n_eos == len(joined)  # one EOS per line, at its end
    assert all(ids[-1] == EOS_ID for ids in joined["src_ids"])
    # the share of joined lines follows the setting; share 0 is the corpus itself
    assert 0.35 < counts["joined"] / counts["lines"] < 0.65
    same, none = join_training_pairs(train, share=0.0)
    assert none["joined"] == 0 and same["src_ids"] == train["src_ids"]


def test_joined_ids_equal_encoding_the_joined_text(toy_train):
    train, tokenizer = toy_train
    joined, _ = join_training_pairs(train.select(range(200)), share=1.0, max_parts=4, seed=0)
    for side in ("src", "tgt"):
        encoded = [ids + [EOS_ID] for ids in tokenizer.encode(joined[side])]
        assert encoded == joined[f"{side}_ids"]


def test_bad_settings_are_one_line_errors(toy_train):
    train, _ = toy_train
    with pytest.raises(UserError, match="train_join_share"):
        join_training_pairs(train, share=1.5)
    with pytest.raises(UserError, match="train_join_max"):
        join_training_pairs(train, share=0.5, max_parts=1)


def test_prepare_data_joins_training_lines_and_rechecks_max_len(tmp_path):
    """data.train_join_share joins cleaned lines; joined lines over data.max_len are dropped."""
    base = ["data.corpus.train_size=600", "data.vocab_size=300"]
    plain = prepare_data(compose_config(base).data, tmp_path, log=lambda _: None)
    cfg = compose_config([*base, "data.train_join_share=0.5", "data.max_len=40"])
    data = prepare_data(cfg.data, tmp_path, log=lambda _: None)
    counts, train = data.counts, data.splits["train"]
    assert counts["kept"] == len(train) == counts["join_lines"] - counts["join_too_long"]
    assert counts["join_too_long"] > 0 and 0 < counts["joined"] < counts["join_lines"]
    assert max(len(ids) for side in ("src_ids", "tgt_ids") for ids in train[side]) <= 40
    assert counts["join_lines"] < plain.counts["kept"]  # fewer, longer lines
    for split in ("validation", "test"):  # never joined
        assert list(data.splits[split]["src"]) == list(plain.splits[split]["src"])
    again = prepare_data(cfg.data, tmp_path, log=lambda _: None)
    assert list(again.splits["train"]["src"]) == list(train["src"])  # the same lines for every run
