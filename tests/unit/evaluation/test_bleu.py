"""evaluation/bleu.py: the paper's tokenized BLEU, and BLEU per source-length bucket."""

import pytest
import sacrebleu

from evaluation.bleu import (
    BUCKET_LABELS,
    bleu_by_length,
    length_bucket,
    split_compounds,
    tokenized_bleu,
)


def test_tokenized_bleu_splits_compounds_the_papers_way():
    assert (
        split_compounds("Das Rot-Kreuz-Haus, 3-4 mal")
        == "Das Rot ##AT##-##AT## Kreuz ##AT##-##AT## Haus, 3 ##AT##-##AT## 4 mal"
    )
    assert split_compounds("A-B-C") == "A ##AT##-##AT## B-C"  # as perl's s///g: no overlaps
    hyp, ref = "Das ist ein Rot-Kreuz-Test.", "Das ist ein Rot-Kreuz-Fall."
    expected = sacrebleu.corpus_bleu(
        ["Das ist ein Rot ##AT##-##AT## Kreuz ##AT##-##AT## Test ."],
        [["Das ist ein Rot ##AT##-##AT## Kreuz ##AT##-##AT## Fall ."]],
        tokenize="none",
    ).score
    assert tokenized_bleu([hyp], [ref]) == pytest.approx(expected)
    assert tokenized_bleu([hyp], [hyp]) == pytest.approx(100.0)


def test_tokenized_bleu_of_another_target_uses_its_moses_tokenizer_without_the_split():
    """The compound split is t2t's English-German convention: French keeps 'grand-père'."""
    hyp, ref = "C'est le grand-père.", "C'est le grand-oncle."
    expected = sacrebleu.corpus_bleu(["C' est le grand-père ."], [["C' est le grand-oncle ."]],
                                     tokenize="none").score  # fmt: skip
    assert tokenized_bleu([hyp], [ref], "fr") == pytest.approx(expected)
    assert tokenized_bleu([hyp], [ref], "fr") != pytest.approx(tokenized_bleu([hyp], [ref], "de"))


def test_length_buckets_have_inclusive_bounds():
    assert [length_bucket(" ".join(["w"] * n)) for n in (0, 10, 11, 60, 61, 500)] == [
        "0-10",
        "0-10",
        "11-20",
        "41-60",
        "61-",
        "61-",
    ]
    assert BUCKET_LABELS == ["0-10", "11-20", "21-30", "31-40", "41-60", "61-"]


def test_bleu_by_length_scores_each_bucket_on_its_own_sentences():
    short, long = "a b c d", " ".join(f"w{i}" for i in range(25))
    srcs = [short, short, long]
    refs = ["the cat sat down", "a dog ran far", "one two three four five six"]
    hyps = [refs[0], refs[1], "nothing alike here"]
    rows = bleu_by_length(srcs, hyps, refs)
    assert [(r["bucket"], r["n"]) for r in rows] == [("0-10", 2), ("21-30", 1)]
    assert rows[0]["bleu"] == 100.0
    assert rows[1]["bleu"] == round(sacrebleu.corpus_bleu([hyps[2]], [[refs[2]]]).score, 2)
