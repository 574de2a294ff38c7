"""A tiny study end to end: trained through Hydra's launchers, scored, recorded and reported."""

import json
import math
import shlex
import shutil
from pathlib import Path

import pytest
import sacrebleu
import torch
from omegaconf import OmegaConf

from common.configs import compose_config
from common.errors import UserError
from data.corpus import load_split
from runs.device import machine_description
from runs.record import code_version
from runs.run import Run
from studies.plan import KS, POOLED, SEARCH, STUDY_FILE, StudyError
from studies.records import StudyRecord, retrain_command, scored_runs
from studies.report import write_report
from studies.runner import run_study
from studies.tuning import Protocol, tune
from tests.conftest import script_main
from training.launch import train

N_EVAL = 61  # sentences in the toy validation and test splits: 61 % k leaves 1 line for k > 1
VARIANTS = ["sinusoidal", "learned"]


def tiny_overrides(cache_dir) -> list[str]:
    """The study's experiments shrunk to seconds: the toy corpus, a tiny model, 20 steps."""
    return [
        "data=toy",
        f"cache_dir={cache_dir}",
        "data.corpus.train_size=3000",
        f"+data.corpus.validation_size={N_EVAL}",
        f"+data.corpus.test_size={N_EVAL}",
        "data.vocab_size=400",
        "data.max_tokens=1024",
        "model=tiny",
        "model.d_model=64",
        "model.d_ff=128",
        "trainer.effective_tokens=1024",
        "trainer.max_steps=20",
        "trainer.eval_every=20",
        "trainer.eval_bleu_sentences=0",
        "trainer.save_every_steps=10",
        "optim.warmup=10",
    ]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A study root: the all-lengths condition, 2 variants x 1 seed, through submitit_local (both
    runs at once), and one short run through the basic launcher; what the runner said."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    root = tmp_path_factory.mktemp("study")
    cache = tmp_path_factory.mktemp("cache")
    lines = []
    overrides = tiny_overrides(cache)
    records = run_study(
        root, ["all"], VARIANTS, [1], 2, overrides, lines.append, launcher="submitit_local"
    )
    records += run_study(root, ["short"], ["sinusoidal"], [1], 1, overrides, lines.append)
    return root, overrides, records, lines


def snapshot(root) -> dict:
    """Every file under root with its modification time."""
    return {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_runs_train_through_the_launcher_to_the_budget_and_score_once(study):
    root, _, records, lines = study
    assert [(r.condition, r.variant) for r in records] == [
        ("all", "learned"),
        ("all", "sinusoidal"),
        ("short", "sinusoidal"),
    ]
    for record in records:
        run_dir = root / record.condition / record.variant / "seed-1"
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert record.step == metrics["steps"] == 20 and record.precision == "fp32"
        assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / "train.log").is_file()
        assert record.hardware == [machine_description(torch.device("cpu"))]
        assert record.code == [code_version()]
        assert StudyRecord.read(run_dir / STUDY_FILE) == record
    # one sweep of both runs through submitit (its job folders), one through the basic launcher
    jobs = [p for p in (root / "all" / ".submitit").iterdir() if p.name.isdigit()]
    assert len(jobs) == 2 and all(any(job.glob("*_log.out")) for job in jobs)
    assert not (root / "short" / ".submitit").exists()
    said = "\n".join(lines)
    assert "study: 2 runs of all through hydra/launcher=submitit_local:" in said
    assert f"position=learned,sinusoidal seed=1 hydra.sweep.dir={root / 'all'}" in said
    short = json.loads((root / "short/sinusoidal/seed-1/data.json").read_text())
    assert short["train_cleaning"]["over_max_words"] > 0


def check_concatenation(record: StudyRecord, run_dir) -> None:
    """k = 1 is the plain test evaluation; n // k lines per k; BP and length ratio agree.

    The joined sets are checked line by line against the corpus splits the run trained with.
    """
    data_cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml").data
    (sets,) = (run_dir.parents[2] / "concat_sets").iterdir()
    for split in ("test", "validation"):
        corpus = load_split(data_cfg, split)
        for k in KS:
            for side, lang in (("src", "en"), ("tgt", "de")):
                lines = (sets / f"{split}-k{k}.{lang}").read_text(encoding="utf-8").splitlines()
                texts = list(corpus[side])
                assert lines == [" ".join(texts[i : i + k]) for i in range(0, N_EVAL - k + 1, k)]
    plain = json.loads((run_dir / "eval" / "test-last-beam4.json").read_text())
    plain_hyps = (run_dir / "eval" / "test-last-beam4.hyp").read_text()
    assert (run_dir / "eval" / "concat-test-k1.hyp").read_text() == plain_hyps
    by = {(row.split, row.k): row for row in record.concat}
    assert by[("test", 1)].bleu == plain["bleu"] == record.test.bleu
    assert by[("test", 1)].chrf == plain["chrf"] == record.test.chrf
    for k in KS:
        for split in ("test", "validation"):
            row = by[(split, k)]
            assert row.lines == N_EVAL // k and row.left_out == N_EVAL % k
            hyps = (run_dir / "eval" / f"concat-{split}-k{k}.hyp").read_text().splitlines()
            assert len(hyps) == row.lines
        pooled = by[(POOLED, k)]
        assert pooled.lines == 2 * (N_EVAL // k) and pooled.left_out == 2 * (N_EVAL % k)
        ratio = pooled.hyp_len / pooled.ref_len
        assert pooled.length_ratio == pytest.approx(ratio, abs=1e-4)
        bp = 0.0 if ratio == 0 else 1.0 if ratio > 1 else math.exp(1 - 1 / ratio)
        assert pooled.bp == pytest.approx(bp, abs=1e-4)
    assert sum(b.n for b in record.by_bucket) == 2 * N_EVAL
    assert any(b.beyond for b in record.by_bucket) and record.by_bucket[0].low == 1
    check_buckets(record, run_dir, sets)


def check_buckets(record: StudyRecord, run_dir, sets) -> None:
    """Each bucket's BLEU, brevity penalty and length ratio recompute from its lines (k = 1)."""
    srcs, hyps, refs = [], [], []
    for split in ("test", "validation"):
        srcs += (sets / f"{split}-k1.en").read_text(encoding="utf-8").splitlines()
        refs += (sets / f"{split}-k1.de").read_text(encoding="utf-8").splitlines()
        hyps += (run_dir / "eval" / f"concat-{split}-k1.hyp").read_text().splitlines()
    for bucket in record.by_bucket:
        lines = [i for i, s in enumerate(srcs) if bucket.low <= len(s.split()) <= bucket.high]
        bleu = sacrebleu.corpus_bleu([hyps[i] for i in lines], [[refs[i] for i in lines]])
        assert bucket.n == len(lines) and bucket.bleu == round(bleu.score, 2)
        assert bucket.bp == round(bleu.bp, 4)
        assert bucket.length_ratio == round(bleu.sys_len / bleu.ref_len, 4)


def test_concatenation_numbers(study):
    root, _, records, _ = study
    for record in records:
        check_concatenation(record, root / record.condition / record.variant / "seed-1")


def test_a_second_call_launches_nothing_and_scores_nothing(study):
    root, overrides, records, _ = study
    before = snapshot(root)
    lines = []
    again = run_study(
        root, ["all"], VARIANTS, [1], 2, overrides, lines.append, launcher="submitit_local"
    )
    assert again == records[:2]
    assert not any("through hydra/launcher" in line for line in lines)  # no sweep launched
    assert sum("not trained again" in line for line in lines) == 2
    assert sum("not scored again" in line for line in lines) == 2
    assert lines[-1] == (
        "study: 2 of 2 runs scored: 0 trained here, 2 finished before (skipped), 0 failed"
    )
    assert snapshot(root) == before


def test_a_run_folder_finished_with_other_settings_is_refused_not_recorded(study, tmp_path):
    """A root's finished run trained at another rate than the overrides now ask: refused in one
    line naming the setting, nothing scored, recorded or written."""
    root, overrides, _, _ = study
    before = snapshot(root)
    store = tmp_path / "store"
    with pytest.raises(StudyError, match=r"seed-1 finished with other settings .*optim.lr_scale"):
        run_study(
            root,
            ["all"],
            ["sinusoidal"],
            [1],
            1,
            [*overrides, "optim.lr_scale=0.123"],
            lambda _: None,
            records=store,
        )
    assert snapshot(root) == before and not store.exists()


def test_a_record_of_another_search_is_rescored_not_mixed(study, tmp_path):
    """A study.json without the study's search is left out of a report until `run` rescores it;
    an eval JSON of another search is evaluated again, one from before min_len is kept."""
    root, overrides, _, _ = study
    copy = tmp_path / "study"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("short"))
    runs = {v: copy / "all" / v / "seed-1" for v in VARIANTS}
    for variant, run_dir in runs.items():
        record = json.loads((run_dir / STUDY_FILE).read_text())
        assert record["search"] == SEARCH == {"beam": 4, "lenpen": 0.6, "min_len": 0}
        del record["search"]  # as written before the search was recorded
        (run_dir / STUDY_FILE).write_text(json.dumps(record))
        for path in (run_dir / "eval").glob("*.json"):
            scores = json.loads(path.read_text())
            del scores["min_len"]  # as evaluate.py wrote before min_len: EOS could come first
            if variant == "sinusoidal" and path.stem == "test-last-beam4":
                scores["min_len"] = 1
            path.write_text(json.dumps(scores))
    assert scored_runs(copy) == ([], ["all/learned/seed-1", "all/sinusoidal/seed-1"])
    lines = []
    records = run_study(copy, ["all"], VARIANTS, [1], 1, overrides, lines.append)
    said = [line.split(": evaluated ") for line in lines]
    evaluated = [parts[1].split(" (")[0] for parts in said if len(parts) == 2]
    assert evaluated == ["test-last-beam4"] and "not scored again" not in " ".join(lines)
    assert "all/sinusoidal/seed-1: evaluated" in " ".join(lines)
    assert [r.search for r in records] == [SEARCH, SEARCH]
    rescored = json.loads((runs["sinusoidal"] / "eval" / "test-last-beam4.json").read_text())
    assert rescored["min_len"] == 0 and len(scored_runs(copy)[0]) == 2
    record = json.loads((runs["learned"] / STUDY_FILE).read_text())
    (runs["learned"] / STUDY_FILE).write_text(json.dumps(record | {"search": {"beam": 5}}))
    said = []
    report = write_report(copy, tmp_path / "report", resamples=0, echo=said.append)
    assert [r.variant for r in report.runs] == ["sinusoidal"]
    assert any("left out" in line and "all/learned/seed-1" in line for line in said)


def test_the_record_store_outlives_the_run_folders(study, tmp_path):
    """Runs recorded without checkpoints: a machine that lost the run folders trains nothing again,
    rebuilds the same report from the store alone, and refuses a record of other settings."""
    root, overrides, records, _ = study
    copy, store = tmp_path / "study", tmp_path / "records"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("short"))
    kept = run_study(copy, ["all"], VARIANTS, [1], 1, overrides, lambda _: None, records=store)
    assert [(r.variant, r.test) for r in kept] == [(r.variant, r.test) for r in records[:2]]
    record = store / "all" / "sinusoidal" / "seed-1"
    assert (record / "eval" / "test-last-beam4.hyp").read_text() == (
        root / "all" / "sinusoidal" / "seed-1" / "eval" / "test-last-beam4.hyp"
    ).read_text()
    assert not (record / "checkpoints").exists() and any((record / "tensorboard").iterdir())
    shutil.rmtree(copy)  # the machine is gone; the committed store is all that is left
    lines = []
    again = run_study(copy, ["all"], VARIANTS, [1], 1, overrides, lines.append, records=store)
    assert [r.test for r in again] == [r.test for r in records[:2]] and not (copy / "all").exists()
    assert sum("not trained again" in line for line in lines) == 2
    assert "2 of 2 runs scored: 0 trained here, 2 finished before" in lines[-1]
    reports = {}
    for name, source in (("root", root), ("store", store)):
        write_report(source, tmp_path / name, resamples=20, echo=lambda _: None)
        reports[name] = json.loads((tmp_path / name / "compare.json").read_text())
    for key in ("variants", "differences"):
        assert reports["store"][key] == reports["root"][key]
    changed = [*overrides, "optim.warmup=11"]  # refused before anything is launched
    with pytest.raises(StudyError, match=r"seed-1 was trained with other settings .*10 -> 11"):
        run_study(copy, ["all"], ["learned"], [1], 1, changed, lambda _: None, records=store)
    assert not (copy / "all").exists()


def test_a_record_without_bucket_lengths_is_rescored_where_its_run_is(study, tmp_path):
    """A store record from before the buckets' length ratios: scored again, without a search,
    while its run folder is here; kept as it is (never trained again) once the folder is gone."""
    root, overrides, _, _ = study
    copy, store = tmp_path / "study", tmp_path / "records"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("short"))
    run_study(copy, ["all"], ["learned"], [1], 1, overrides, lambda _: None, records=store)
    path = store / "all" / "learned" / "seed-1" / STUDY_FILE
    full = json.loads(path.read_text())
    old = [
        {k: v for k, v in b.items() if k not in ("bp", "length_ratio")} for b in full["by_bucket"]
    ]
    for study_json in (path, copy / "all" / "learned" / "seed-1" / STUDY_FILE):
        study_json.write_text(json.dumps(full | {"by_bucket": old}))
    lines = []
    (record,) = run_study(
        copy, ["all"], ["learned"], [1], 1, overrides, lines.append, records=store
    )
    assert any("recorded before the buckets' length ratios; scored again" in x for x in lines)
    assert not any(": evaluated " in line for line in lines)  # the kept translations, no search
    rescored = json.loads(path.read_text())
    assert record.has_bucket_lengths and rescored["run_dir"] == str(copy / "all/learned/seed-1")
    assert {**rescored, "run_dir": None} == {**full, "run_dir": None}  # the same numbers again
    path.write_text(json.dumps(full | {"by_bucket": old}))
    shutil.rmtree(copy)
    lines = []
    (record,) = run_study(
        copy, ["all"], ["learned"], [1], 1, overrides, lines.append, records=store
    )
    assert not record.has_bucket_lengths and "0 trained here" in lines[-1]
    assert not (copy / "all").exists()


def test_an_interrupted_joined_run_resumes_and_is_rescored(study, tmp_path):
    """A run killed at step 10 (no metrics.json) is launched again, resumes to 20 and is scored."""
    _, overrides, _, _ = study
    root = tmp_path / "study"
    run_study(root, ["joined"], ["sinusoidal"], [1], 1, [*overrides, "trainer.max_steps=10"])
    run_dir = root / "joined" / "sinusoidal" / "seed-1"
    assert json.loads((run_dir / STUDY_FILE).read_text())["step"] == 10
    (run_dir / "metrics.json").unlink()  # what a killed run leaves: checkpoints, no metrics
    lines = []
    (record,) = run_study(root, ["joined"], ["sinusoidal"], [1], 1, overrides, lines.append)
    assert any("unfinished, resuming" in line for line in lines)
    assert "resumed from step 10" in (run_dir / "train.log").read_text()
    assert record.step == 20
    last = (run_dir / "checkpoints" / "last.pt").stat().st_mtime
    for name in ("test-last-beam4", "concat-test-k4", "concat-validation-k1"):
        assert (run_dir / "eval" / f"{name}.json").stat().st_mtime >= last
    cleaning = json.loads((run_dir / "data.json").read_text())["train_cleaning"]
    assert 0 < cleaning["joined"] < cleaning["join_lines"] == cleaning["kept"] < 3000
    assert record.train_cleaning == cleaning
    check_concatenation(record, run_dir)


def test_a_run_retrained_from_its_records_command_reproduces_it(study, tmp_path, capsys):
    """The issue's check, in small: train.py from a record's command (plus where files go)
    retrains it to the last bit, and `reproduce` says so; another seed differs from step 1."""
    root, overrides, records, _ = study
    record = records[1]  # all/sinusoidal/seed-1
    words = shlex.split(retrain_command(record))[2:]
    cache = next(o for o in overrides if o.startswith("cache_dir="))
    for seed, run in ((1, tmp_path / "retrain"), (2, tmp_path / "seed-2")):
        again = [w if not w.startswith("seed=") else f"seed={seed}" for w in words]
        train(compose_config([*again, cache, f"run_dir={run}"]))
    check = script_main("study")
    assert (
        check(["reproduce", "--record", record.run_dir, "--run", str(tmp_path / "retrain")]) is None
    )
    said = capsys.readouterr().out
    assert "reproduced: all" in said and "| dev/ppl | 1 | 1 |" in said
    assert "| metrics.json:train_loss | 1 | 1 |" in said
    with pytest.raises(SystemExit):
        check(["reproduce", "--record", record.run_dir, "--run", str(tmp_path / "seed-2")])
    assert "differs: " in capsys.readouterr().out


def test_report_writes_the_tables_json_and_plots(study, tmp_path):
    root, _, _, _ = study
    out = tmp_path / "report"
    report = write_report(root, out, resamples=20, echo=lambda _: None)
    compare = json.loads((out / "compare.json").read_text())
    assert {r["variant"] for r in compare["runs"]} == set(VARIANTS)
    assert compare["study"] == {
        "condition": "all",
        "steps": [20],
        "equal_steps": True,
        "rates_checked_against_tuning": False,
    }
    (diff,) = compare["differences"]
    bleu = {r["variant"]: r["bleu"] for r in compare["runs"]}
    assert diff["across_seeds"]["difference"] == pytest.approx(bleu["learned"] - bleu["sinusoidal"])
    boot = compare["row_e"]["two_level_bootstrap"]
    assert boot["seeds"] == [1] and boot["resamples"] == 20
    concat = json.loads((out / "concat.json").read_text())
    keys = {(r["condition"], r["variant"], r["k"], r["seed"]) for r in concat["runs"]}
    runs = {("all", "sinusoidal"), ("all", "learned"), ("short", "sinusoidal")}
    assert keys == {(c, v, k, 1) for c, v in runs for k in KS}
    buckets = json.loads((out / "buckets.json").read_text())
    assert buckets["max_words"] == 10 and {r["variant"] for r in buckets["rows"]} == {"sinusoidal"}
    for name in ("table3.md", "concat.md", "buckets.md", "README.md", "bleu_by_variant.png"):
        assert (out / name).is_file()
    readme = (out / "README.md").read_text()
    assert f"counts under each): {machine_description(torch.device('cpu'))} (3)." in readme
    assert "all/sinusoidal/seed-2" in report.missing
    assert "short/learned/seed-1" in report.missing
    assert "Pictures of trained runs: not made yet" in readme
    for run in report.runs:  # the toy corpus and tiny model: settings added and removed
        again = compose_config([*shlex.split(run.command)[2:], "run_dir=."])
        trained = Run(root / run.condition / run.variant / f"seed-{run.seed}").config()
        again.run_dir = trained.run_dir
        again.cache_dir = trained.cache_dir
        assert OmegaConf.to_container(again) == OmegaConf.to_container(trained), run.command
    assert "~data.corpus.path" in report.runs[0].command
    assert f"e.g. `{report.runs[0].command}`" in readme
    runs = [str(root / "all" / v / "seed-1") for v in VARIANTS]
    script_main("study")(["pictures", "--runs", *runs, "--out", str(out)])
    pictured = json.loads((out / "pictures.json").read_text())["runs"]
    assert [(r["variant"], r["step"]) for r in pictured] == [("sinusoidal", 20), ("learned", 20)]
    (out / "NOTE.md").write_text("**Superseded** by\nanother study.\n")  # by hand, kept
    write_report(root, out, resamples=0, echo=lambda _: None)
    readme = (out / "README.md").read_text()
    assert "[What the trained models do with positions](pictures.md)" in readme
    assert readme.split("\n")[2:5] == ["> **Superseded** by", "> another study.", ""]
    assert (out / "NOTE.md").read_text() == "**Superseded** by\nanother study.\n"


def grid_point(run, store, rate: float, seed: int, dev_ppl: float) -> None:
    """A copy of a finished run in <store>/all/<variant>/seed-<seed>, its config saying it
    trained at optim.lr_scale=rate with that seed, its last dev PPL dev_ppl: what tune reads."""
    copy = store / "all" / run.parent.name / f"seed-{seed}"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("checkpoints"))
    config = OmegaConf.load(copy / ".hydra" / "config.yaml")
    config.optim.lr_scale, config.seed = rate, seed
    OmegaConf.save(config, copy / ".hydra" / "config.yaml")
    metrics = json.loads((copy / "metrics.json").read_text())
    (copy / "metrics.json").write_text(json.dumps(metrics | {"dev_ppl": dev_ppl}))


def made_tuning(root, overrides, shifts: dict, out) -> Path:
    """tune's tuning.json over a grid made of the study's seed-1 runs: shifts[variant][rate] is
    the dev PPL of that rate (seeds 1 and 2) minus the seed-1 run's."""
    for variant, points in shifts.items():
        run = root / "all" / variant / "seed-1"
        ppl = json.loads((run / "metrics.json").read_text())["dev_ppl"]
        for point, shift in points.items():
            for seed in (1, 2):
                grid_point(run, out / "grid" / f"lr{point}", point, seed, ppl + shift)
    rates = sorted({point for points in shifts.values() for point in points})
    protocol = Protocol(overrides=tuple(overrides), variants=tuple(shifts), rates=tuple(rates))
    tune(sorted((out / "grid").iterdir()), protocol, out, echo=lambda _: None)
    return out / "tuning.json"


def edit_config(run, old: str, new: str) -> None:
    """Make a run's .hydra/config.yaml say it trained with new where it says old."""
    config = run / ".hydra" / "config.yaml"
    assert old in config.read_text()
    config.write_text(config.read_text().replace(old, new))


def test_report_shows_each_variants_rate_and_refuses_one_variant_at_two(study, tmp_path):
    """The rate column against tune's choice; seeds of one variant at two rates, or of two
    settings, never pooled; a variant's position settings other than its yaml's are shown."""
    root, overrides, _, _ = study
    rate = OmegaConf.load(root / "all/learned/seed-1/.hydra/config.yaml").optim.lr_scale
    shifts = {
        "learned": {rate / 2: 1.0, rate: 0.0, rate * 2: 1.0},
        "sinusoidal": {rate / 2: -1.0, rate: 0.0, rate * 2: 1.0},
    }
    tuning = made_tuning(root, overrides, shifts, tmp_path / "tuning")
    out = tmp_path / "report"
    report = write_report(root, out, resamples=0, echo=lambda _: None, tuning=tuning)
    rows = {row.variant: row for row in report.table3.variants}
    assert rows["learned"].lr_scale == rows["learned"].chosen_lr_scale == rate
    table = (out / "table3.md").read_text()
    assert f"| learned | 1 | 20 | ×{rate:g} (chosen at 20 steps) |" in table
    so_far = f"(≠ chosen so far ×{rate / 2:g} at 20 steps)"  # at the low edge: not final
    assert f"| sinusoidal | 1 | 20 | ×{rate:g} {so_far} |" in table
    copy = tmp_path / "study"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("short"))
    edit_config(copy / "all/sinusoidal/seed-1", "base: 10000.0", "base: 500.0")
    write_report(copy, tmp_path / "base", resamples=0, echo=lambda _: None)
    assert (
        f"| sinusoidal (base=500.0) | 1 | 20 | ×{rate:g} |"
        in (tmp_path / "base" / "table3.md").read_text()
    )
    second = copy / "all/learned/seed-2"
    shutil.copytree(copy / "all/learned/seed-1", second)
    record = json.loads((second / STUDY_FILE).read_text())
    (second / STUDY_FILE).write_text(json.dumps(record | {"seed": 2}))
    for old, new, message in (
        (f"lr_scale: {rate}", "lr_scale: 0.25", r"learned is trained at 2 learning rates in one"),
        ("d_ff: 128", "d_ff: 96", r"learned's runs were trained with other settings \(all/learn"),
    ):
        edit_config(second, old, new)
        with pytest.raises(StudyError, match=message + r".*keep the others in another store"):
            write_report(copy, tmp_path / "mixed", resamples=0, echo=lambda _: None)
        edit_config(second, new, old)
    edit_config(copy / "all/sinusoidal/seed-1", "vocab_size: 400", "vocab_size: 300")
    with pytest.raises(StudyError, match=r"the all runs .*data.vocab_size: 400 -> 300"):
        write_report(copy, tmp_path / "mixed", resamples=0, echo=lambda _: None)
    assert not (tmp_path / "mixed").exists()


def test_run_with_tuning_trains_each_variant_at_its_chosen_rate(study, tmp_path):
    """`run --tuning`: the variant trains at the rate tune chose (half the configs' here), with
    the grid's overrides, only the budget changed; a rate not final, an override of the rate or
    of a tuned setting are refused before anything is written."""
    root, overrides, _, _ = study
    rate = OmegaConf.load(root / "all/sinusoidal/seed-1/.hydra/config.yaml").optim.lr_scale
    shifts = {"sinusoidal": {rate / 4: 5.0, rate / 2: -1.0, rate: 0.0}}  # half: lowest, interior
    tuning = made_tuning(root, overrides, shifts, tmp_path / "tuning")
    final, store = tmp_path / "final", tmp_path / "store"
    for variant, extra, message in (
        ("learned", [], r"tuning.json tuned no rate for learned"),
        ("sinusoidal", ["optim.lr_scale=1.0"], r"optim.lr_scale=1.0 with --tuning"),
        ("sinusoidal", ["data.vocab_size=300"], r"change what .* \(data.vocab_size: 400 -> 300\)"),
    ):
        with pytest.raises(UserError, match=message):
            run_study(final, ["all"], [variant], [2], 1, extra, print, store, tuning=tuning)
    assert not final.exists() and not store.exists()
    lines = []
    budget = ["trainer.max_steps=30"]
    (record,) = run_study(
        final, ["all"], ["sinusoidal"], [2], 1, budget, lines.append, store, tuning=tuning
    )
    config = OmegaConf.load(final / "all" / "sinusoidal" / "seed-2" / ".hydra" / "config.yaml")
    assert config.optim.lr_scale == rate / 2 and config.data.vocab_size == 400
    assert (config.trainer.max_steps, record.step) == (30, 30)
    assert f"rate chosen on dev in {tuning}: sinusoidal ×{rate / 2:g}" in lines[1]
    assert (store / "all" / "sinusoidal" / "seed-2" / STUDY_FILE).is_file()


def test_bad_input_is_one_line_and_launches_nothing(tmp_path, capsys):
    main = script_main("study")
    for argv, message in (
        (["report", "--root", str(tmp_path)], "error: no scored runs"),
        (["run", "--root", str(tmp_path), "--launcher", "basic", "--jobs", "2"], "error: --jobs 2"),
        (
            ["run", "--root", str(tmp_path), "--", "trainer.nope=1"],
            "error: the overrides after -- do not compose",
        ),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 1
        err = capsys.readouterr().err
        assert err.startswith(message) and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
