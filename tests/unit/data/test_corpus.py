"""Tests for data/corpus.py: loaders, direction selection, cleaning and prepare_data caching."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import datasets
import pytest
from omegaconf import OmegaConf

from data import corpus as corpus_module
from data.corpus import (
    MULTI30K_HUB,
    DataError,
    clean_train,
    data_identity,
    load_hub,
    load_multi30k,
    load_split,
    load_text_pairs,
    prepare_data,
    read_lines,
    select_direction,
)
from data.tokenizer import EOS_ID, UNK_ID, Tokenizer
from tests.conftest import SHARED_DATA, compose_config, shared_data

WMT14_LAYOUT = SHARED_DATA / "wmt14_layout_multi30k"
MULTI30K = SHARED_DATA / "multi30k"
SPLIT_SIZES = {"train": 29000, "validation": 1014, "test": 1000}  # Multi30k


@pytest.fixture(autouse=True, scope="module")
def quiet_progress_bars():
    datasets.disable_progress_bars()
    yield
    datasets.enable_progress_bars()


def write_lines(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def multi30k_files() -> dict:
    names = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
    return {
        split: {lang: str(MULTI30K / f"{name}.{lang}") for lang in ("en", "de")}
        for split, name in names.items()
    }


# load_hub ------------------------------------------------------------------------------------


def test_load_hub_wmt14_layout(tmp_path):
    folder = shared_data("wmt14_layout_multi30k")
    corpus = load_hub(str(folder), "de-en", cache_dir=str(tmp_path / "hf"))
    assert {split: len(ds) for split, ds in corpus.items()} == {
        "train": 29000,
        "validation": 1014,
        "test": 1000,
    }
    assert corpus["train"].column_names == ["translation"]
    row = corpus["train"][0]["translation"]

    en_de = select_direction(corpus, "en", "de")
    de_en = select_direction(corpus, "de", "en")
    for split in corpus:
        assert en_de[split].column_names == ["src", "tgt"]
        assert len(en_de[split]) == len(corpus[split])
    assert en_de["train"][0] == {"src": row["en"], "tgt": row["de"]}
    assert de_en["train"][0] == {"src": row["de"], "tgt": row["en"]}
    assert row["en"].startswith("Two young")


def test_load_hub_missing_local_folder(tmp_path):
    missing = tmp_path / "no_such_corpus"
    with pytest.raises(DataError) as info:
        load_hub(str(missing), "de-en")
    assert str(missing) in str(info.value) and "data.corpus.path" in str(info.value)


def test_load_hub_accepts_flat_language_columns(tmp_path):
    folder = tmp_path / "flat"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"en": "a dog", "de": "ein Hund"}\n')
    (folder / "validation.jsonl").write_text('{"en": "a cat", "de": "eine Katze"}\n')
    corpus = load_hub(str(folder), cache_dir=str(tmp_path / "hf"))
    assert set(corpus) == {"train", "validation"}
    pairs = select_direction(corpus, "en", "de")
    assert pairs["validation"][0] == {"src": "a cat", "tgt": "eine Katze"}
    with pytest.raises(DataError, match=r"found columns \{de,en\}"):
        select_direction(corpus, "en", "fr")


# load_text_pairs -------------------------------------------------------------------------------


def test_load_text_pairs_multi30k(tmp_path):
    shared_data("multi30k")
    corpus = load_text_pairs(multi30k_files())
    assert {split: len(ds) for split, ds in corpus.items()} == {
        "train": 29000,
        "validation": 1014,
        "test": 1000,
    }
    first_en = (MULTI30K / "train.en").read_text(encoding="utf-8").split("\n", 1)[0]
    assert corpus["train"][0]["translation"]["en"] == first_en
    if WMT14_LAYOUT.is_dir():
        hub = load_hub(str(WMT14_LAYOUT), "de-en", cache_dir=str(tmp_path / "hf"))
        assert corpus["test"][-1]["translation"] == hub["test"][-1]["translation"]


def test_load_text_pairs_line_handling(tmp_path):
    en = tmp_path / "x.en"
    de = tmp_path / "x.de"
    en.write_bytes("\ufeffone\r\ntwo \u2028 still two\n\nfour".encode())
    de.write_bytes(b"eins\nzwei\n\nvier\n")
    corpus = load_text_pairs({"train": {"en": str(en), "de": str(de)}})
    rows = [r["translation"] for r in corpus["train"]]
    assert [r["en"] for r in rows] == ["one", "two \u2028 still two", "", "four"]
    assert [r["de"] for r in rows] == ["eins", "zwei", "", "vier"]


def test_load_text_pairs_missing_file(tmp_path):
    en = write_lines(tmp_path / "a.en", ["x"])
    missing = tmp_path / "a.de"
    with pytest.raises(DataError) as info:
        load_text_pairs({"train": {"en": en, "de": str(missing)}})
    message = str(info.value)
    assert str(missing) in message and "data.corpus.files.train.de" in message
    assert "\n" not in message


def test_load_text_pairs_unequal_line_counts(tmp_path):
    en = write_lines(tmp_path / "a.en", ["a", "b", "c"])
    de = write_lines(tmp_path / "a.de", ["a", "b"])
    with pytest.raises(DataError) as info:
        load_text_pairs({"validation": {"en": en, "de": de}})
    message = str(info.value)
    assert en in message and de in message
    assert f"{en} has 3 lines" in message and f"{de} has 2" in message
    assert "'validation'" in message


def test_load_text_pairs_invalid_utf8(tmp_path):
    en = write_lines(tmp_path / "a.en", ["a", "b", "c"])
    de = tmp_path / "a.de"
    de.write_bytes(b"gut\nauch gut\nschlecht \xff\xfe\n")
    with pytest.raises(DataError) as info:
        load_text_pairs({"train": {"en": en, "de": str(de)}})
    message = str(info.value)
    assert str(de) in message and "line 3" in message and "UTF-8" in message
    assert isinstance(info.value.__cause__, UnicodeDecodeError)


# load_multi30k (configs/data/multi30k.yaml) ------------------------------------------------------


def multi30k_pairs(*overrides: str) -> dict[str, list[tuple[str, str]]]:
    """Every split's (en, de) pairs as configs/data/multi30k.yaml loads them with overrides."""
    data = compose_config(["data=multi30k", "run_dir=unused", *overrides]).data
    pairs = {}
    for split in SPLIT_SIZES:
        ds = load_split(data, split)
        pairs[split] = list(zip(ds["src"], ds["tgt"], strict=True))
    return pairs


def test_multi30k_is_the_hub_id_by_default_and_a_hub_layout_folder_loads_as_it_does(tmp_path):
    """The default names the hub; a folder in the hub's layout goes datasets.load_dataset's way,
    load_hub's, as the hub id does, and gives the hub's split names and columns."""
    folder = shared_data("multi30k_hub_layout")
    data = compose_config(["data=multi30k", "run_dir=unused"]).data
    assert data.path == data.corpus.path == MULTI30K_HUB == "bentrevett/multi30k"
    assert data.corpus._target_ == "data.corpus.load_multi30k"
    raw = datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "hf"))
    assert {split: len(ds) for split, ds in raw.items()} == SPLIT_SIZES
    assert raw["train"].column_names == ["en", "de"]
    loaded = load_multi30k(str(folder), cache_dir=str(tmp_path / "hf"))
    for split in SPLIT_SIZES:
        assert loaded[split][:] == raw[split][:]
    assert raw["train"][0]["en"] == "Two young, White males are outside near many bushes."


def test_the_three_multi30k_sources_give_the_same_pairs_in_the_same_order(tmp_path):
    """A folder in the hub's layout, a plain-text folder, and the study's records' config
    (load_text_pairs on the text files): every split, pair by pair."""
    hub_layout, text = shared_data("multi30k_hub_layout"), shared_data("multi30k")
    from_hub_layout = multi30k_pairs(
        f"data.path={hub_layout}", f"+data.corpus.cache_dir={tmp_path / 'hf'}"
    )
    from_text = multi30k_pairs(f"data.path={text}")
    recorded = select_direction(load_text_pairs(multi30k_files()), "en", "de")
    assert {split: len(pairs) for split, pairs in from_text.items()} == SPLIT_SIZES
    for split, pairs in from_text.items():
        assert from_hub_layout[split] == pairs, split
        assert list(zip(recorded[split]["src"], recorded[split]["tgt"], strict=True)) == pairs
    de_en = multi30k_pairs(f"data.path={text}", "data.src_lang=de", "data.tgt_lang=en")
    assert de_en["test"][-1] == from_hub_layout["test"][-1][::-1]


@pytest.mark.parametrize("present", [[], ["train.jsonl", "val.jsonl"], ["train.en", "train.de"]])
def test_a_folder_in_neither_multi30k_layout_is_one_line_naming_it_and_the_files(tmp_path, present):
    folder = tmp_path / "copy"
    folder.mkdir()
    for name in present:
        write_lines(folder / name, ['{"en": "a", "de": "b"}'])
    for path, what in (
        (folder, "is not a Multi30k en-de folder"),
        (tmp_path / "absent", "not found"),
    ):
        with pytest.raises(DataError) as info:
            load_multi30k(str(path))
        message = str(info.value)
        assert message.startswith(f"data.path={path} {what}: expected train.jsonl, val.jsonl, ")
        assert "test.jsonl (the hub's layout) or train, val, test_2016_flickr .en/.de" in message
        assert "\n" not in message


@pytest.mark.parametrize("lang", ["fr", "cs"])
def test_a_multi30k_folder_of_another_target_loads_through_data_tgt_lang(lang):
    """multi30k_<lang>/ holds NAME.en / NAME.<lang>: data.tgt_lang names the pair it reads, its
    English side is the German folder's line for line, and the target is not the German."""
    folder = shared_data(f"multi30k_{lang}")
    other = multi30k_pairs(f"data.path={folder}", f"data.tgt_lang={lang}")
    german = multi30k_pairs(f"data.path={shared_data('multi30k')}")
    assert {split: len(pairs) for split, pairs in other.items()} == SPLIT_SIZES
    for split in SPLIT_SIZES:
        assert [en for en, _ in other[split]] == [en for en, _ in german[split]], split
        assert [t for _, t in other[split]] != [de for _, de in german[split]], split
    with pytest.raises(
        DataError, match=rf"is not a Multi30k en-{lang} folder: expected .*\.en/\.{lang} "
    ):
        load_multi30k(str(shared_data("multi30k")), langs=("en", lang))


def test_the_hub_layout_of_english_german_refuses_another_target_naming_the_languages():
    with pytest.raises(DataError, match=r"set data.src_lang/data.tgt_lang to one of them"):
        multi30k_pairs(f"data.path={shared_data('multi30k_hub_layout')}", "data.tgt_lang=fr")


def test_a_hub_option_on_a_text_folder_is_refused(tmp_path):
    text = shared_data("multi30k")
    with pytest.raises(DataError, match=r"^data.corpus.revision applies to the hub's layout"):
        load_multi30k(str(text), revision="main")


def test_select_direction_unknown_language(tmp_path):
    en = write_lines(tmp_path / "a.en", ["a"])
    de = write_lines(tmp_path / "a.de", ["b"])
    corpus = load_text_pairs({"train": {"en": en, "de": de}})
    with pytest.raises(DataError) as info:
        select_direction(corpus, "fr", "de")
    message = str(info.value)
    assert "split 'train'" in message and "'fr'" in message
    assert "found translation.{de,en}" in message and "data.src_lang" in message
    with pytest.raises(DataError, match="both 'en'"):
        select_direction(corpus, "en", "en")


def test_select_direction_fills_missing_texts():
    ds = datasets.Dataset.from_dict({"en": ["a", None], "de": ["b", "c"]})
    pairs = select_direction(datasets.DatasetDict({"test": ds}), "en", "de")["test"]
    assert list(pairs["src"]) == ["a", ""] and list(pairs["tgt"]) == ["b", "c"]


# clean_train ---------------------------------------------------------------------------------


def encoded(rows: list[tuple[str, list[int], str, list[int]]]) -> datasets.Dataset:
    """Build a dataset in prepare_data's encoded layout from (src, src_ids, tgt, tgt_ids)."""
    return datasets.Dataset.from_dict(
        {
            "src": [r[0] for r in rows],
            "tgt": [r[2] for r in rows],
            "src_ids": [r[1] + [EOS_ID] for r in rows],
            "tgt_ids": [r[3] + [EOS_ID] for r in rows],
        }
    )


def test_clean_train_counts():
    rows = [
        ("ok", [5, 6], "gut", [7]),
        ("", [], "leer", [8]),
        ("blank", [9], "  \t", []),
        ("long", [5] * 8, "x", [6]),
        ("fits", [5] * 7, "y", [6] * 7),
        ("short", [5], "lang", [6] * 4),
        ("", [], "long and empty", [6] * 20),
        ("text", [], "normalised away", [6]),
    ]
    kept, counts = clean_train(encoded(rows), max_len=8, max_ratio=3)
    assert counts == {"input": 8, "empty": 4, "too_long": 1, "ratio": 1, "kept": 2}
    assert list(kept["src"]) == ["ok", "fits"]

    kept, counts = clean_train(encoded(rows), max_len=None, max_ratio=None)
    assert counts == {"input": 8, "empty": 4, "too_long": 0, "ratio": 0, "kept": 4}
    assert list(kept["src"]) == ["ok", "long", "fits", "short"]


def test_clean_train_keeps_everything_when_clean():
    ds = encoded([("a", [5], "b", [6]), ("c", [7, 8], "d", [9])])
    kept, counts = clean_train(ds, max_len=256)
    assert kept is ds and counts["kept"] == 2


def test_clean_train_empty_result_is_a_data_error():
    ds = encoded([("", [], "x", [5]), ("y", [5] * 10, "z", [6])])
    with pytest.raises(DataError, match="empty after cleaning.*empty 1, too_long 1"):
        clean_train(ds, max_len=4)


# prepare_data --------------------------------------------------------------------------------


def toy_parallel(n: int, seed: int) -> tuple[list[str], list[str]]:
    """Return n pseudo English/German sentence pairs (German = word-wise mapped English)."""
    rng = random.Random(seed)
    en_words = [
        "".join(rng.choice("abcdefghijklmnoprstuvw") for _ in range(rng.randint(2, 7)))
        for _ in range(60)
    ]
    de_of = {w: w[::-1] + "en" for w in en_words}
    en, de = [], []
    for _ in range(n):
        words = [rng.choice(en_words) for _ in range(rng.randint(3, 10))]
        en.append(" ".join(words))
        de.append(" ".join(de_of[w] for w in words))
    return en, de


@pytest.fixture
def toy_cfg(tmp_path):
    """A data config reading small text files: train has one empty and one over-long pair."""
    root = tmp_path / "corpus"
    root.mkdir()
    files = {}
    for split, n, seed in (("train", 300, 0), ("validation", 20, 1), ("test", 20, 2)):
        en, de = toy_parallel(n, seed)
        if split == "train":
            en[10] = "   "
            en[20] = " ".join([en[20]] * 30)
        else:
            en[3] = ""
            de[4] = " ".join([de[4]] * 30)
        files[split] = {
            "en": write_lines(root / f"{split}.en", en),
            "de": write_lines(root / f"{split}.de", de),
        }
    return OmegaConf.create(
        {
            "corpus": {"_target_": "data.corpus.load_text_pairs", "files": files},
            "src_lang": "en",
            "tgt_lang": "de",
            "vocab_size": 200,
            "tokenizer_sample": 100_000,
            "max_len": 64,
            "max_ratio": None,
            "num_proc": 1,
        }
    )


def cache_state(cache_dir: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in sorted(cache_dir.rglob("*")) if p.is_file()}


def test_prepare_data_encodes_cleans_and_keeps_eval_splits(toy_cfg, tmp_path):
    logs: list[str] = []
    prepared = prepare_data(toy_cfg, tmp_path / "cache", log=logs.append)
    tok = prepared.tokenizer
    assert tok.vocab_size == 200
    assert prepared.counts == {"input": 300, "empty": 1, "too_long": 1, "ratio": 0, "kept": 298}
    assert any("empty 1, too_long 1" in line for line in logs)

    for split in ("train", "validation", "test"):
        ds = prepared.splits[split]
        assert ds.column_names == ["src", "tgt", "src_ids", "tgt_ids"]
        for row in ds.select(range(5)):
            assert row["src_ids"] == tok.encode([row["src"]])[0] + [EOS_ID]
            assert row["tgt_ids"][-1] == EOS_ID
    train = prepared.splits["train"]
    assert max(len(ids) for ids in train["src_ids"]) <= 64

    raw = load_split(toy_cfg, "validation")
    val = prepared.splits["validation"]
    assert len(val) == 20
    assert list(val["src"]) == list(raw["src"]) and list(val["tgt"]) == list(raw["tgt"])
    assert val[3]["src"] == "" and val[3]["src_ids"] == [EOS_ID]
    assert len(val[4]["tgt_ids"]) > 64


def test_prepare_data_second_call_reuses_caches(toy_cfg, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = prepare_data(toy_cfg, cache, log=lambda _: None)
    state = cache_state(cache)
    assert len(list((cache / "tokenizers").glob("*/spm.model"))) == 1
    folders = sorted(p.name for p in (cache / "encoded").iterdir())
    assert len(folders) == 3 and all(
        name.endswith(("-train", "-validation", "-test")) for name in folders
    )
    encoded_files = {str(p) for p in (cache / "encoded").glob("*/data*.arrow")}
    assert len(encoded_files) == 3

    def fail(*args, **kwargs):
        raise AssertionError("cache miss: this should not run on the second call")

    monkeypatch.setattr(corpus_module, "train_tokenizer", fail)
    monkeypatch.setattr(Tokenizer, "encode", fail)
    logs: list[str] = []
    second = prepare_data(toy_cfg, cache, log=logs.append)
    assert cache_state(cache) == state
    assert second.tokenizer.sha256 == first.tokenizer.sha256
    assert second.counts == first.counts
    for split in first.splits:
        assert list(second.splits[split]["tgt_ids"]) == list(first.splits[split]["tgt_ids"])
        files = {f["filename"] for f in second.splits[split].cache_files}
        assert files and files <= encoded_files  # the ids are mapped from the cache
    assert sum("pairs loaded from cache" in line for line in logs) == 3
    assert any("tokenizer loaded from cache" in line for line in logs)


def test_a_tokenizer_slot_copied_whole_from_another_key_is_trained_again(toy_cfg, tmp_path):
    """spm.model with its own meta.json copied into this data's slot was used silently; the
    slot records the key it was trained for, so a foreign one is trained again."""
    cache = tmp_path / "cache"
    first = prepare_data(toy_cfg, cache, log=lambda _: None)
    (slot,) = (cache / "tokenizers").iterdir()
    other = OmegaConf.merge(toy_cfg, {"vocab_size": int(toy_cfg.vocab_size) - 20})
    prepare_data(other, tmp_path / "other", log=lambda _: None)
    (foreign,) = (tmp_path / "other" / "tokenizers").iterdir()
    for name in ("spm.model", "meta.json"):
        shutil.copy(foreign / name, slot / name)
    logs: list[str] = []
    again = prepare_data(toy_cfg, cache, log=logs.append)
    assert any(f"trained for slot {foreign.name[:12]}" in line for line in logs), logs
    assert any("training tokenizer" in line for line in logs)
    assert again.tokenizer.sha256 == first.tokenizer.sha256


def test_prepare_data_cache_follows_the_files(toy_cfg, tmp_path):
    cache = tmp_path / "cache"
    before = data_identity(toy_cfg)
    prepare_data(toy_cfg, cache, log=lambda _: None)
    val_en = Path(toy_cfg.corpus.files.validation.en)
    stat = val_en.stat()
    os.utime(val_en, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert data_identity(toy_cfg) != before
    logs: list[str] = []
    prepare_data(toy_cfg, cache, log=logs.append)
    assert any("training tokenizer" in line for line in logs)
    assert len(list((cache / "encoded").iterdir())) == 6


def test_prepare_data_reports_corpus_errors_as_data_errors(toy_cfg, tmp_path):
    toy_cfg.corpus.files.train.de = str(tmp_path / "missing.de")
    with pytest.raises(DataError, match="missing.de"):
        prepare_data(toy_cfg, tmp_path / "cache", log=lambda _: None)
    toy_cfg.corpus = {"_target_": "data.corpus.no_such_loader"}
    with pytest.raises(DataError, match="data.corpus could not be instantiated"):
        prepare_data(toy_cfg, tmp_path / "cache", log=lambda _: None)


def test_prepare_data_vocab_too_high(toy_cfg, tmp_path):
    toy_cfg.vocab_size = 100_000
    with pytest.raises(DataError, match="lower data.vocab_size"):
        prepare_data(toy_cfg, tmp_path / "cache", log=lambda _: None)
    assert not list((tmp_path / "cache" / "tokenizers").glob("*/spm.model"))


def test_load_split_unknown_split(toy_cfg):
    with pytest.raises(DataError) as info:
        load_split(toy_cfg, "dev")
    assert "'dev'" in str(info.value) and "train, validation, test" in str(info.value)


def test_prepare_data_num_proc_shards_are_reused(toy_cfg, tmp_path, monkeypatch):
    single = prepare_data(toy_cfg, tmp_path / "one", log=lambda _: None)
    toy_cfg.num_proc = 2
    sharded = prepare_data(toy_cfg, tmp_path / "two", log=lambda _: None)
    shards = (tmp_path / "two" / "encoded").glob("*-train/data_0000[01]_of_00002.arrow")
    assert len(list(shards)) == 2
    for split in single.splits:
        assert list(sharded.splits[split]["src_ids"]) == list(single.splits[split]["src_ids"])

    def fail(*args, **kwargs):
        raise AssertionError("cache miss: this should not run")

    monkeypatch.setattr(Tokenizer, "encode", fail)
    toy_cfg.num_proc = 1
    again = prepare_data(toy_cfg, tmp_path / "two", log=lambda _: None)
    assert list(again.splits["train"]["tgt_ids"]) == list(single.splits["train"]["tgt_ids"])


def test_prepare_data_on_wmt14_layout(tmp_path):
    folder = shared_data("wmt14_layout_multi30k")
    cfg = OmegaConf.create(
        {
            "corpus": {
                "_target_": "data.corpus.load_hub",
                "path": str(folder),
                "name": "de-en",
                "cache_dir": str(tmp_path / "hf"),
            },
            "src_lang": "en",
            "tgt_lang": "de",
            "vocab_size": 8000,
            "tokenizer_sample": 2_000_000,
            "max_len": 256,
            "max_ratio": None,
            "num_proc": 1,
        }
    )
    prepared = prepare_data(cfg, tmp_path / "cache", log=lambda _: None)
    assert prepared.tokenizer.vocab_size == 8000
    assert prepared.counts == {"input": 29000, "empty": 0, "too_long": 0, "ratio": 0, "kept": 29000}
    assert {split: len(ds) for split, ds in prepared.splits.items()} == {
        "train": 29000,
        "validation": 1014,
        "test": 1000,
    }
    train = prepared.splits["train"][:]
    assert not any(UNK_ID in ids for ids in train["src_ids"] + train["tgt_ids"])
    row = prepared.splits["test"][0]
    assert prepared.tokenizer.decode([row["tgt_ids"]]) == [row["tgt"]]


def test_read_lines_splits_at_newlines_only(tmp_path):
    path = tmp_path / "odd.en"
    path.write_bytes("\ufeffa\u2028b\r\nc\x0bd\x1ce\n\nf".encode())
    assert read_lines(path, "src_file") == ["a\u2028b", "c\x0bd\x1ce", "", "f"]
    with pytest.raises(DataError, match=r"src_file=.*absent.en: not found"):
        read_lines(tmp_path / "absent.en", "src_file")
