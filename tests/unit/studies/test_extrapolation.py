"""The length-extrapolation study: the training-length filter, the buckets, the report, a run."""

import json
from dataclasses import asdict

import datasets
import pytest
import sacrebleu
from omegaconf import OmegaConf

from data.corpus import DataError, clean_train, load_split, prepare_data
from data.tokenizer import EOS_ID
from evaluation.plots import plot_extrapolation
from studies.extrapolation import (
    BucketScores,
    Extrapolation,
    RunScores,
    Scored,
    bleu_by_bucket,
    bleu_by_range,
    bucket_of,
    markdown,
    run_lines,
    summarize_variant,
)
from tests.conftest import CONFIG_DIR, compose_config, script_main

main = script_main("extrapolation")

# a seconds-long study: small corpus splits, a small model, a few steps, sources of <= 6 words
TINY_STUDY = [
    "data.corpus.train_size=2000",
    "+data.corpus.validation_size=20",
    "+data.corpus.test_size=30",
    "+data.corpus.test_long_size=20",
    "data.vocab_size=400",
    "data.max_tokens=1024",
    "model.d_model=32",
    "model.d_ff=64",
    "trainer.effective_tokens=1024",
    "trainer.max_minutes=null",
    "trainer.max_steps=4",
    "trainer.eval_every=4",
    "trainer.num_threads=1",
]


def encoded(srcs: list[str]) -> datasets.Dataset:
    """A training split in prepare_data's encoded layout, one subword per source word."""
    return datasets.Dataset.from_dict(
        {
            "src": srcs,
            "tgt": ["x " * len(s.split()) for s in srcs],
            "src_ids": [[5] * len(s.split()) + [EOS_ID] for s in srcs],
            "tgt_ids": [[6] * len(s.split()) + [EOS_ID] for s in srcs],
        }
    )


def test_train_max_src_words_drops_long_sources_after_the_other_reasons():
    srcs = ["one two", "one two three", "a b c d", "", " spaced   out  words here ", "x " * 40]
    kept, counts = clean_train(encoded(srcs), max_len=20, max_src_words=3)
    assert counts == {
        "input": 6,
        "empty": 1,
        "too_long": 1,
        "ratio": 0,
        "over_max_words": 2,
        "kept": 2,
    }
    assert list(kept["src"]) == ["one two", "one two three"]
    _, off = clean_train(encoded(srcs), max_len=20)
    assert "over_max_words" not in off and off["kept"] == 4
    with pytest.raises(DataError, match="train_max_src_words must be a positive"):
        clean_train(encoded(srcs), max_src_words=0)


def test_the_filter_applies_to_the_train_split_only(cache_dir):
    overrides = ["experiment=extrapolation_toy", f"cache_dir={cache_dir}", *TINY_STUDY[:5]]
    cfg = compose_config([*overrides, "data.train_max_src_words=8"])
    assert compose_config(["experiment=quickstart"]).data.get("train_max_src_words") is None
    data = prepare_data(cfg.data, cache_dir, log=lambda _: None)
    train_words = [len(s.split()) for s in load_split(cfg.data, "train")["src"]]
    assert data.counts["over_max_words"] == sum(w > 8 for w in train_words) > 0
    assert data.counts["kept"] == len(data.splits["train"]) == sum(w <= 8 for w in train_words)
    assert max(len(s.split()) for s in data.splits["train"]["src"]) <= 8
    for split, size in (("validation", 20), ("test", 30), ("test_long", 20)):
        assert len(data.splits[split]) == size
    assert min(len(s.split()) for s in data.splits["test_long"]["src"]) >= 25


def test_buckets_are_aligned_on_the_training_length():
    assert [bucket_of(w, 12, 6) for w in (0, 1, 6, 7, 12, 13, 24, 25, 40)] == [
        (1, 6),
        (1, 6),
        (1, 6),
        (7, 12),
        (7, 12),
        (13, 18),
        (19, 24),
        (25, 30),
        (37, 42),
    ]
    assert [bucket_of(w, 7, 4) for w in (1, 3, 4, 7, 8, 11, 12)] == [
        (1, 3),
        (1, 3),
        (4, 7),
        (4, 7),
        (8, 11),
        (8, 11),
        (12, 15),
    ]


def test_bleu_per_bucket_is_sacrebleu_on_the_lines_of_that_bucket():
    srcs = ["a b", "a b c d", "a " * 5, "a " * 6, "a " * 9, "a " * 11, "a " * 12]
    refs = [
        "Der Hund sieht die Katze.",
        "Die Katze schläft im Haus.",
        "Ein Vogel singt heute.",
        "Mein Freund liest ein Buch.",
        "Der alte Mann trinkt Wasser.",
        "Zwei Kinder spielen mit dem Ball.",
        "Unser Lehrer sagt, dass der Hund schläft.",
    ]
    hyps = [
        "Der Hund sieht die Katze.",
        "Die Katze schläft.",
        "Ein Vogel singt.",
        None,
        "Der Mann trinkt Wasser.",
        "Kinder spielen Ball.",
        "Unser Lehrer sagt, dass der Hund schläft.",
    ]
    rows = bleu_by_bucket(srcs, hyps, refs, max_words=4, width=4)
    assert [(r.bucket, r.n, r.scored, r.beyond) for r in rows] == [
        ("1-4", 2, 2, False),
        ("5-8", 2, 1, True),
        ("9-12", 3, 3, True),
    ]
    for row, lines in zip(rows, ([0, 1], [2], [4, 5, 6]), strict=True):
        expected = sacrebleu.corpus_bleu([hyps[i] for i in lines], [[refs[i] for i in lines]])
        assert row.bleu == round(expected.score, 2) and row.bp == round(expected.bp, 4)
        assert row.length_ratio == round(expected.sys_len / expected.ref_len, 4)
    ranges = bleu_by_range(srcs, hyps, refs, max_words=4)
    assert list(ranges) == ["1-4", "5-8", ">8"]
    assert [r.n for r in ranges.values()] == [2, 2, 3]
    assert ranges["1-4"].bleu == rows[0].bleu and ranges[">8"].bleu == rows[2].bleu
    only_skipped = bleu_by_bucket(["a"], [None], ["x"], max_words=4, width=4)
    assert only_skipped[0].bleu is None and only_skipped[0].scored == 0
    assert only_skipped[0].bp is None and only_skipped[0].length_ratio is None


def fake_run(variant: str, seed: int, bleus: list[float | None]) -> RunScores:
    """A run record as the study makes it, with buckets 1-3, 4-6 (L = 6), 7-9, 10-12, 13-15."""
    buckets = [(1, 3), (4, 6), (7, 9), (10, 12), (13, 15)]
    return RunScores(
        variant=variant,
        seed=seed,
        run_dir=f"{variant}-s{seed}",
        steps=100 * seed,
        wall_seconds=1.0,
        dev_ppl=10.0,
        train_pairs=655,
        train_cleaning={"kept": 655},
        skipped=0,
        by_bucket=[
            BucketScores(f"{lo}-{hi}", lo, hi, lo > 6, 10, 10 if bleu is not None else 0, bleu,
                         None, None)
            for (lo, hi), bleu in zip(buckets, bleus, strict=True)
        ],
        by_range={
            "1-6": Scored(20, 20, bleus[1], None, None),
            "7-12": Scored(20, 20, bleus[2], None, None),
            ">12": Scored(10, 10 if bleus[4] is not None else 0, bleus[4], None, None),
        },
    )  # fmt: skip


def test_the_report_averages_seeds_and_marks_buckets_past_the_training_length(tmp_path):
    sinusoidal = [fake_run("sinusoidal", s, [30.0 + s, 28.0, 20.0, 10.0 + s, 5.0]) for s in (1, 2)]
    learned = [fake_run("learned", 1, [31.0, 29.0, 5.0, 1.0, None])]
    result = Extrapolation(
        corpus="toy",
        experiment="extrapolation_toy",
        max_words=6,
        bucket_width=3,
        splits=["test", "test_long"],
        beam=4,
        seeds=[1, 2],
        overrides=[],
        runs=sinusoidal + learned,
        variants=[
            summarize_variant("sinusoidal", sinusoidal),
            summarize_variant("learned", learned),
        ],
    )
    first = result.variants[0].by_bucket[0]
    assert first.bleu_mean == 31.5 and first.bleu_std == pytest.approx(0.71)
    assert first.bleu_by_seed == {"1": 31.0, "2": 32.0}
    title, note, by_bucket, by_range = markdown(result).strip().split("\n\n")
    assert "trained on sources of <= 6 words" in title and "* = beyond L" in note
    header, _, sinusoidal_row, learned_row, sentences = by_bucket.splitlines()
    assert header == "| variant | 1-3 | 4-6 | 7-9* | 10-12* | 13-15** |"
    assert sinusoidal_row.startswith("| sinusoidal | 31.5 ± 0.7 | 28.0 ± 0.0 | 20.0 ± 0.0 | 11.5")
    assert learned_row == "| learned | 31.0 | 29.0 | 5.0 | 1.0 | – (0/10) |"
    assert sentences == "| sentences | 10 | 10 | 10 | 10 | 10 |"
    assert by_range.splitlines()[0] == "| variant | 1-6 words | 7-12 words | >12 words | steps |"
    assert by_range.splitlines()[2] == "| sinusoidal | 28.0 ± 0.0 | 20.0 ± 0.0 | 5.0 ± 0.0 | 150 |"
    plot_extrapolation(asdict(result), tmp_path / "bleu_by_length.png")
    assert (tmp_path / "bleu_by_length.png").stat().st_size > 0


def test_the_experiment_configs_train_on_short_sources():
    for corpus, max_words in (("toy", 12), ("multi30k", 10)):
        path = CONFIG_DIR / "experiment" / f"extrapolation_{corpus}.yaml"
        assert OmegaConf.load(path).defaults[0] == "_self_"
        cfg = compose_config([f"experiment=extrapolation_{corpus}"])
        assert cfg.data.train_max_src_words == max_words and cfg.trainer.max_steps


def test_unknown_variant_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--variants", "sinusoidal", "spiral", "--out", str(tmp_path)])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.startswith("error: unknown position variant(s) spiral")


def test_a_tiny_study_writes_the_table_json_and_plot(tmp_path, cache_dir):
    out = tmp_path / "study"
    argv = ["--corpus", "toy", "--max-words", "6", "--out", str(out)]
    argv += ["--variants", "sinusoidal", "learned", "--", f"cache_dir={cache_dir}", *TINY_STUDY]
    argv += ["trainer.precision=bf16"]  # the study searches in the precision a run trained in
    # 60 rows: the learned table holds sources of up to 10 subwords (+ 50 output positions)
    result = main([*argv, "model.max_positions=60"])
    for name in ("extrapolation.md", "extrapolation.json", "bleu_by_length.png"):
        assert (out / name).is_file()
    assert json.loads((out / "extrapolation.json").read_text()) == asdict(result)
    table = (out / "extrapolation.md").read_text().splitlines()
    rows = [line.split(" | ")[0] for line in table if line.startswith("| ")]
    assert rows[:4] == ["| variant", "| sinusoidal", "| learned", "| sentences"]
    buckets = result.variants[0].by_bucket
    assert any(b.beyond for b in buckets) and max(b.high for b in buckets) >= 2 * 6
    data = json.loads((out / "learned-s1" / "data.json").read_text())
    assert data["train_cleaning"]["over_max_words"] > 0
    learned = result.variants[1]
    assert learned.by_bucket[-1].scored == 0  # 25+ word sources never fit 60 positions
    assert sum(b.n for b in buckets) == 30 + 20
    scores = json.loads((out / "sinusoidal-s1" / "eval" / "test_long-last-beam4.json").read_text())
    assert scores["precision"] == "bf16"
    again = main([*argv, "model.max_positions=60"])  # resumable: reuses runs and evaluations
    assert again.runs[0].by_bucket == result.runs[0].by_bucket


def test_the_skipped_lines_come_from_the_evaluation_not_from_a_rebuilt_model(tmp_path):
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save(
        OmegaConf.create({"data": {"src_lang": "en"}}), tmp_path / ".hydra" / "config.yaml"
    )
    (tmp_path / "eval").mkdir()  # no checkpoints/: a model could not be rebuilt here
    (tmp_path / "eval" / "test-last-beam4.hyp").write_text("h0\nh2\nh3\n", encoding="utf-8")
    scores = {"name": "test-last-beam4", "skipped": {"0-10": 1}, "skipped_indices": [1]}

    class Splits:  # the split's texts, as SplitCache would load them from the corpus
        def get(self, data_cfg, split):
            assert data_cfg.src_lang == "en" and split == "test"
            return ["s0", "s1", "s2", "s3"], ["r0", "r1", "r2", "r3"]

    srcs, hyps, refs = run_lines(tmp_path, {"test": scores}, Splits())
    assert srcs == ["s0", "s1", "s2", "s3"] and refs == ["r0", "r1", "r2", "r3"]
    assert hyps == ["h0", None, "h2", "h3"]
