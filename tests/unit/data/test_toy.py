"""Tests for data/toy.py: the offline toy En->De corpus (splits, lengths, grammar, determinism)."""

import os
import random
import subprocess
import sys

import datasets
import pytest

from common.errors import DataError
from data.toy import (
    NP,
    PP,
    TRANSITIVE,
    Clause,
    Sentence,
    Unit,
    _parse_argv,
    en_length,
    generate_pair,
    main,
    render,
    sample_sentence,
    toy_corpus,
    toy_pairs,
)
from tests.conftest import ROOT

SIZES = {"train_size": 2000, "validation_size": 200, "test_size": 200, "test_long_size": 100}


@pytest.fixture(scope="module")
def corpus() -> datasets.DatasetDict:
    return toy_corpus(seed=0, **SIZES)


def english(ds: datasets.Dataset) -> list[str]:
    return [row["en"] for row in ds["translation"]]


def one(clause: Clause) -> tuple[str, str]:
    """Render a single main clause."""
    return render(Sentence((Unit(clause),)))


# ------------------------------------------------------------------------------ corpus properties
def test_schema(corpus):
    assert list(corpus) == ["train", "validation", "test", "test_long"]
    expected = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    for split, size in zip(corpus, SIZES.values(), strict=True):
        ds = corpus[split]
        assert ds.features == expected
        assert ds.column_names == ["translation"]
        assert len(ds) == size
        row = ds[0]["translation"]
        assert set(row) == {"de", "en"}
        assert row["en"].endswith(".") and row["de"].endswith(".")
        assert row["en"][0].isupper() and row["de"][0].isupper()


def test_deterministic(corpus):
    again = toy_corpus(seed=0, **SIZES)
    other = toy_corpus(seed=1, **SIZES)
    for split in corpus:
        assert corpus[split]["translation"] == again[split]["translation"]
        assert corpus[split]["translation"] != other[split]["translation"]


def test_deterministic_across_hash_seeds():
    code = "from data.toy import toy_pairs; print(repr(toy_pairs(3, 300, 20, 20, 20)))"
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        outputs.add(result.stdout)
    assert outputs == {repr(toy_pairs(3, 300, 20, 20, 20)) + "\n"}


def test_lengths(corpus):
    lengths = {split: [en_length(en) for en in english(corpus[split])] for split in corpus}
    for split in ("train", "validation", "test"):
        assert 3 <= min(lengths[split]) and max(lengths[split]) <= 24
    assert 25 <= min(lengths["test_long"]) and max(lengths["test_long"]) <= 40
    assert min(lengths["test_long"]) > max(lengths["train"])
    train = lengths["train"]
    assert 10 <= sum(train) / len(train) <= 14
    assert min(train) <= 4 and max(train) >= 23  # spread over the whole range
    assert len(set(lengths["test_long"])) >= 10


def test_splits_disjoint_and_unique(corpus):
    sets = {split: set(english(corpus[split])) for split in corpus}
    for split in corpus:
        assert len(sets[split]) == len(corpus[split])
    splits = list(sets)
    for i, a in enumerate(splits):
        for b in splits[i + 1 :]:
            assert not sets[a] & sets[b], (a, b)


def test_eval_splits_do_not_depend_on_train_size():
    small = toy_pairs(5, 100, 50, 50, 50)
    large = toy_pairs(5, 3000, 50, 50, 50)
    for split in ("validation", "test", "test_long"):
        assert small[split] == large[split]


@pytest.mark.parametrize(
    "sizes, named",
    [
        ((-5, 50, 50, 50), "data.corpus.train_size=-5"),
        ((100, 0, 50, 50), "data.corpus.validation_size=0"),
        ((100, 50, -1, 50), "data.corpus.test_size=-1"),
        ((100, 50, 50, 2.5), "data.corpus.test_long_size=2.5"),
    ],
)
def test_a_split_size_out_of_range_is_one_line_naming_it(sizes, named):
    """A negative size drew an empty split, then blamed the corpus's files (probe 15-19)."""
    with pytest.raises(DataError, match="whole number") as raised:
        toy_pairs(5, *sizes)
    assert str(raised.value).startswith(named)


def test_closed_vocabulary(corpus):
    for lang in ("en", "de"):
        words = {
            word.strip(",.").lower()
            for split in corpus
            for row in corpus[split]["translation"]
            for word in row[lang].split()
        }
        assert 100 < len(words) < 500, lang


def test_generate_pair_bounds():
    rng = random.Random(0)
    for low, high in ((3, 8), (10, 12), (25, 40)):
        for _ in range(50):
            en, de = generate_pair(rng, low, high)
            assert low <= en_length(en) <= high
            assert de.endswith(".")


# ------------------------------------------------------------------------------------ the grammar
def test_nominative_and_accusative():
    big_dog = NP("dog", "the", adjs=("big",))
    assert one(Clause(big_dog, "sees", NP("cat", "a", adjs=("small",)))) == (
        "The big dog sees a small cat.",
        "Der große Hund sieht eine kleine Katze.",
    )
    assert one(Clause(NP("cat"), "sees", big_dog)) == (
        "The cat sees the big dog.",
        "Die Katze sieht den großen Hund.",
    )
    assert one(Clause(NP("dog", "a", adjs=("big",)), "sees", NP("dog", "a", adjs=("big",)))) == (
        "A big dog sees a big dog.",
        "Ein großer Hund sieht einen großen Hund.",
    )
    assert one(Clause(NP("horse", "a", adjs=("old",)), "has", NP("car", "a", adjs=("new",)))) == (
        "An old horse has a new car.",
        "Ein altes Pferd hat ein neues Auto.",
    )


def test_dative_and_genitive():
    clause = Clause(
        NP("child", adjs=("small",)),
        "helps",
        NP("woman", "this", adjs=("old",)),
        PP("in", NP("garden")),
    )
    assert one(clause) == (
        "The small child helps this old woman in the garden.",
        "Das kleine Kind hilft dieser alten Frau im Garten.",
    )
    house = NP("house", of=NP("man", adjs=("old",)), pp=PP("with", NP("door", "a", adjs=("red",))))
    assert one(Clause(NP("friend", "my", plural=True), "buys", house)) == (
        "My friends buy the house of the old man with a red door.",
        "Meine Freunde kaufen das Haus des alten Mannes mit einer roten Tür.",
    )
    clause = Clause(NP("teacher", "our"), "sleeps", pp=PP("from", NP("city")))
    assert one(clause)[1] == "Unser Lehrer schläft von der Stadt."
    clause = clause._replace(pp=PP("from", NP("ship")))
    assert one(clause) == ("Our teacher sleeps from the ship.", "Unser Lehrer schläft vom Schiff.")


def test_plural_with_numbers():
    dogs = NP("dog", "three", plural=True, adjs=("big",))
    assert one(Clause(dogs, "sees", NP("cat", "two", plural=True, adjs=("small",)))) == (
        "Three big dogs see two small cats.",
        "Drei große Hunde sehen zwei kleine Katzen.",
    )
    clause = Clause(NP("man", "no", plural=True), "works", pp=PP("with", dogs))
    assert one(clause) == (
        "No men work with three big dogs.",
        "Keine Männer arbeiten mit drei großen Hunden.",
    )


def test_verb_second_after_fronted_time():
    clause = Clause(NP("dog"), "sees", NP("cat"), time="today", front=True)
    en, de = one(clause)
    assert (en, de) == ("Today the dog sees the cat.", "Heute sieht der Hund die Katze.")
    assert en.split().index("sees") == 3 and de.split().index("sieht") == 1
    assert one(clause._replace(front=False)) == (
        "The dog sees the cat today.",
        "Der Hund sieht heute die Katze.",
    )


def test_verb_final_in_subordinate_clauses():
    unit = Unit(Clause(NP("man"), "laughs"), "because", Clause(NP("dog"), "sees", NP("cat")))
    assert render(Sentence((unit,))) == (
        "The man laughs because the dog sees the cat.",
        "Der Mann lacht, weil der Hund die Katze sieht.",
    )
    that = Clause(NP("woman"), "says", that=Clause(NP("child", plural=True), "loves", NP("dog")))
    assert one(that) == (
        "The woman says that the children love the dog.",
        "Die Frau sagt, dass die Kinder den Hund lieben.",
    )
    fronted = Unit(
        Clause(NP("cat"), "sees", NP("bird"), time="now"),
        "when",
        Clause(NP("dog"), "sleeps"),
        sub_first=True,
    )
    assert render(Sentence((fronted,))) == (
        "When the dog sleeps, the cat sees the bird now.",
        "Wenn der Hund schläft, sieht die Katze jetzt den Vogel.",
    )
    with pytest.raises(ValueError):
        render(Sentence((fronted._replace(main=fronted.main._replace(front=True)),)))


def test_coordination():
    first = Unit(Clause(NP("man"), "laughs"), "because", Clause(NP("dog"), "sleeps"))
    second = Unit(Clause(NP("cat"), "sings"))
    assert render(Sentence((first, second), ("and",))) == (
        "The man laughs because the dog sleeps and the cat sings.",
        "Der Mann lacht, weil der Hund schläft, und die Katze singt.",
    )
    assert render(Sentence((second, second), ("but",))) == (
        "The cat sings, but the cat sings.",
        "Die Katze singt, aber die Katze singt.",
    )


def test_german_word_order_differs_from_english():
    """Random subordinate clauses: the German verb is last, the English one follows the subject."""
    rng = random.Random(0)
    english_verbs = {form for v in TRANSITIVE.values() for form in (v.en, v.en_pl)}
    checked = 0
    for _ in range(300):
        unit = sample_sentence(rng, 2).units[0]
        sub = unit.sub
        if sub is None or unit.sub_first or sub.obj is None:
            continue
        verb = TRANSITIVE[sub.verb]
        en, de = render(Sentence((unit,)))
        assert de.rstrip(".").split()[-1] == (verb.de_pl if sub.subj.plural else verb.de)
        en_sub = en.rstrip(".").split()[-en_length(render(Sentence((Unit(sub),)))[0]) :]
        assert en_sub[-1] not in english_verbs
        assert any(word in english_verbs for word in en_sub[1:-1])
        checked += 1
    assert checked > 50


# ------------------------------------------------------------------------------------ command line
def test_main_writes_text_files(tmp_path):
    sizes = {"train_size": 50, "validation_size": 5, "test_size": 5, "test_long_size": 5}
    main(tmp_path, seed=2, **sizes)
    pairs = toy_pairs(2, **sizes)
    for split, split_pairs in pairs.items():
        en = (tmp_path / f"{split}.en").read_text(encoding="utf-8").splitlines()
        de = (tmp_path / f"{split}.de").read_text(encoding="utf-8").splitlines()
        assert list(zip(en, de, strict=True)) == split_pairs


def test_parse_argv():
    assert _parse_argv(["--out", "d"]) == ("d", 0)
    assert _parse_argv(["--seed", "4", "--out", "d"]) == ("d", 4)
    for bad in ([], ["--out"], ["--seed", "1"], ["--out", "d", "--size", "3"]):
        with pytest.raises(SystemExit):
            _parse_argv(bad)
