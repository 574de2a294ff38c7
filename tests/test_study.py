"""The study runner and report (evaluation/study.py, scripts/study.py) on tiny real runs."""

import json
import logging
import math
import shutil
import statistics

import pytest
import torch
from omegaconf import OmegaConf

from common.errors import UserError
from data.corpus import load_split
from evaluation.study import (
    CONDITIONS,
    KS,
    POOLED,
    RECORDS,
    SEARCH,
    STUDY_FILE,
    Job,
    StudyError,
    bucket_markdown,
    bucket_table,
    concat_markdown,
    differences_to,
    job_command,
    planned_jobs,
    provenance_line,
    record_mismatch,
    row_e,
    row_e_markdown,
    run_study,
    scored_runs,
    seeds_cell,
    write_report,
)
from runs.device import machine_description
from runs.record import code_version
from scripts.study import main as study_main
from scripts.study import parse
from tests.conftest import compose_config

N_EVAL = 61  # sentences in the toy validation and test splits: 61 % k leaves 1 line for k > 1


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
    """A study root with all-lengths and short runs of 2 variants x 1 seed, and what it said."""
    root = tmp_path_factory.mktemp("study")
    cache = tmp_path_factory.mktemp("cache")
    lines = []
    overrides = tiny_overrides(cache)
    records = run_study(root, ["all"], ["sinusoidal", "learned"], [1], 1, overrides, lines.append)
    records += run_study(root, ["short"], ["sinusoidal"], [1], 1, overrides, lines.append)
    return root, overrides, records, lines


def test_experiments_differ_only_in_their_condition():
    """One step budget and precision for every condition; only the condition's keys differ."""
    base = OmegaConf.to_container(compose_config([f"experiment={CONDITIONS['all']}"]))
    assert base["trainer"]["max_steps"] == 2000 and base["trainer"]["max_minutes"] is None
    assert base["trainer"]["precision"] == "fp32" and base["data"]["train_join_share"] is None
    expected = {"joined": {"train_join_share": 0.2}, "short": {"train_max_src_words": 10}}
    for condition, keys in expected.items():
        cfg = OmegaConf.to_container(compose_config([f"experiment={CONDITIONS[condition]}"]))
        assert {k: cfg["data"].get(k) for k in keys} == keys
        cfg["data"] = {k: v for k, v in cfg["data"].items() if k not in keys}
        assert cfg == base | {"data": {k: v for k, v in base["data"].items() if k not in keys}}


def test_plan_puts_row_e_first_and_gives_it_five_seeds(tmp_path):
    jobs = planned_jobs(tmp_path, ["all", "joined", "short"])
    all_runs = [j for j in jobs if j.condition == "all"]
    assert [(j.variant, j.seed) for j in all_runs[:4]] == [
        ("learned", 1),
        ("sinusoidal", 1),
        ("learned", 2),
        ("sinusoidal", 2),
    ]
    seeds = {}
    for job in all_runs:
        seeds.setdefault(job.variant, []).append(job.seed)
    assert seeds["sinusoidal"] == seeds["learned"] == [1, 2, 3, 4, 5]
    assert all(s == [1, 2, 3] for v, s in seeds.items() if v not in ("sinusoidal", "learned"))
    joined = [j for j in jobs if j.condition == "joined"]
    assert "none" not in {j.variant for j in joined} and {j.seed for j in joined} == {1, 2, 3}
    short = {j.variant for j in jobs if j.condition == "short"}
    assert "learned_shape" in seeds and "learned_shape" not in short | {j.variant for j in joined}
    assert "sinusoidal_shape" in short and len(jobs) == 31 + 21 + 24
    assert all_runs[0].run_dir == tmp_path / "all" / "learned" / "seed-1"


def test_runs_train_to_the_budget_and_score_once(study):
    root, _, records, lines = study
    assert [(r["condition"], r["variant"]) for r in records] == [
        ("all", "learned"),
        ("all", "sinusoidal"),
        ("short", "sinusoidal"),
    ]
    for record in records:
        run_dir = root / record["condition"] / record["variant"] / "seed-1"
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert record["step"] == metrics["steps"] == 20
        assert (run_dir / ".hydra" / "config.yaml").is_file()
        assert record["precision"] == "fp32"
        assert record["hardware"] == [machine_description(torch.device("cpu"))]
        assert record["code"] == [code_version()]
    short = json.loads((root / "short/sinusoidal/seed-1/data.json").read_text())
    assert short["train_cleaning"]["over_max_words"] > 0
    by_hand = (
        f"python train.py experiment=pe_study_multi30k position=learned seed=1 hydra.run.dir={root}"
    )
    assert any(by_hand in line for line in lines)


def check_concatenation(record: dict, run_dir) -> None:
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
    by = {(row["split"], row["k"]): row for row in record["concat"]}
    assert by[("test", 1)]["bleu"] == plain["bleu"] == record["test"]["bleu"]
    assert by[("test", 1)]["chrf"] == plain["chrf"] == record["test"]["chrf"]
    for k in KS:
        for split in ("test", "validation"):
            row = by[(split, k)]
            assert row["lines"] == N_EVAL // k and row["left_out"] == N_EVAL % k
            hyps = (run_dir / "eval" / f"concat-{split}-k{k}.hyp").read_text().splitlines()
            assert len(hyps) == row["lines"]
        pooled = by[(POOLED, k)]
        assert pooled["lines"] == 2 * (N_EVAL // k) and pooled["left_out"] == 2 * (N_EVAL % k)
        ratio = pooled["hyp_len"] / pooled["ref_len"]
        assert pooled["length_ratio"] == pytest.approx(ratio, abs=1e-4)
        bp = 0.0 if ratio == 0 else 1.0 if ratio > 1 else math.exp(1 - 1 / ratio)
        assert pooled["bp"] == pytest.approx(bp, abs=1e-4)
    buckets = record["by_bucket"]
    assert sum(b["n"] for b in buckets) == 2 * N_EVAL
    assert any(b["beyond"] for b in buckets) and buckets[0]["low"] == 1


def test_concatenation_numbers(study):
    root, _, records, _ = study
    for record in records:
        check_concatenation(record, root / record["condition"] / record["variant"] / "seed-1")


def test_second_call_skips_finished_runs_and_scores(study):
    root, overrides, records, _ = study
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    lines = []
    again = run_study(root, ["all"], ["sinusoidal"], [1], 1, overrides, lines.append)
    assert again == [r for r in records if (r["condition"], r["variant"]) == ("all", "sinusoidal")]
    assert any("not trained again" in line for line in lines)
    assert any("not scored again" in line for line in lines)
    assert lines[-1] == (
        "study: 1 of 1 runs scored: 0 trained here, 1 finished before (skipped), 0 failed"
    )
    assert before == {p: p.stat().st_mtime_ns for p in before if p.exists()}


def test_a_record_of_another_search_is_rescored_not_mixed(study, tmp_path):
    """A study.json without the study's search is left out of a report until `run` rescores it;
    an eval JSON of another search is evaluated again, one from before min_len is kept."""
    root, overrides, _, _ = study
    copy = tmp_path / "study"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("short"))
    runs = {v: copy / "all" / v / "seed-1" for v in ("sinusoidal", "learned")}
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
    records = run_study(copy, ["all"], ["sinusoidal", "learned"], [1], 1, overrides, lines.append)
    said = [line.split(": evaluated ") for line in lines]
    evaluated = [parts[1].split(" (")[0] for parts in said if len(parts) == 2]
    assert evaluated == ["test-last-beam4"] and "not scored again" not in " ".join(lines)
    assert "all/sinusoidal/seed-1: evaluated" in " ".join(lines)
    assert [r["search"] for r in records] == [SEARCH, SEARCH]
    assert (
        json.loads((runs["sinusoidal"] / "eval" / "test-last-beam4.json").read_text())["min_len"]
        == 0
    )
    assert len(scored_runs(copy)[0]) == 2
    record = json.loads((runs["learned"] / STUDY_FILE).read_text())
    (runs["learned"] / STUDY_FILE).write_text(json.dumps(record | {"search": {"beam": 5}}))
    said = []
    report = write_report(copy, tmp_path / "report", resamples=0, echo=said.append)
    assert [r["variant"] for r in report["runs"]] == ["sinusoidal"]
    assert any("left out" in line and "all/learned/seed-1" in line for line in said)


def test_the_record_store_outlives_the_run_folders(study, tmp_path):
    """Runs recorded without checkpoints: a machine that lost the run folders trains nothing again,
    rebuilds the same report from the store alone, and refuses a record of other settings."""
    root, overrides, records, _ = study
    copy, store = tmp_path / "study", tmp_path / "records"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("short"))
    variants = ["sinusoidal", "learned"]
    kept = run_study(copy, ["all"], variants, [1], 1, overrides, lambda _: None, records=store)
    assert kept == records[:2]
    record = store / "all" / "sinusoidal" / "seed-1"
    assert (record / "eval" / "test-last-beam4.hyp").read_text() == (
        root / "all" / "sinusoidal" / "seed-1" / "eval" / "test-last-beam4.hyp"
    ).read_text()
    assert not (record / "checkpoints").exists() and any((record / "tensorboard").iterdir())
    shutil.rmtree(copy)  # the machine is gone; the committed store is all that is left
    lines = []
    again = run_study(copy, ["all"], variants, [1], 1, overrides, lines.append, records=store)
    assert again == records[:2] and not (copy / "all").exists()
    assert sum("not trained again" in line for line in lines) == 2
    assert "2 of 2 runs scored: 0 trained here, 2 finished before" in lines[-1]
    reports = {}
    for name, source in (("root", root), ("store", store)):
        write_report(source, tmp_path / name, resamples=20, echo=lambda _: None)
        reports[name] = json.loads((tmp_path / name / "compare.json").read_text())
    for key in ("variants", "differences"):
        assert reports["store"][key] == reports["root"][key]
    assert [r["dev_ppl_curve"] for r in reports["store"]["runs"]] == [
        r["dev_ppl_curve"] for r in reports["root"]["runs"]
    ]
    lines = []
    with pytest.raises(StudyError, match="1 runs failed"):
        run_study(
            copy,
            ["all"],
            ["learned"],
            [1],
            1,
            [*overrides, "optim.warmup=11"],
            lines.append,
            records=store,
        )
    assert any(
        "all/learned/seed-1 was trained with other settings" in line
        and "optim.warmup: 10 -> 11" in line
        for line in lines
    )


def test_an_interrupted_joined_run_resumes_and_is_rescored(study, tmp_path, caplog):
    """A run killed at step 10 (no metrics.json) resumes to 20 and is scored at step 20."""
    caplog.set_level(logging.INFO)  # what scripts/study.py sets: train.log gets train's lines
    _, overrides, _, _ = study
    root = tmp_path / "study"
    run_study(root, ["joined"], ["sinusoidal"], [1], 1, [*overrides, "trainer.max_steps=10"])
    run_dir = root / "joined" / "sinusoidal" / "seed-1"
    assert json.loads((run_dir / STUDY_FILE).read_text())["step"] == 10
    (run_dir / "metrics.json").unlink()  # what a killed run leaves: checkpoints, no metrics
    lines = []
    (record,) = run_study(root, ["joined"], ["sinusoidal"], [1], 1, overrides, lines.append)
    assert any("resuming" in line for line in lines)
    assert "resumed from step 10" in (run_dir / "train.log").read_text()
    assert record["step"] == 20
    last = (run_dir / "checkpoints" / "last.pt").stat().st_mtime
    for name in ("test-last-beam4", "concat-test-k4", "concat-validation-k1"):
        assert (run_dir / "eval" / f"{name}.json").stat().st_mtime >= last
    cleaning = json.loads((run_dir / "data.json").read_text())["train_cleaning"]
    assert 0 < cleaning["joined"] < cleaning["join_lines"] == cleaning["kept"] < 3000
    assert record["train_cleaning"] == cleaning
    check_concatenation(record, run_dir)


def test_report_writes_the_tables_json_and_plots(study, tmp_path):
    root, _, records, _ = study
    out = tmp_path / "report"
    report = write_report(root, out, resamples=20, echo=lambda _: None)
    compare = json.loads((out / "compare.json").read_text())
    assert {r["variant"] for r in compare["runs"]} == {"sinusoidal", "learned"}
    assert all(r["steps"] == 20 for r in compare["runs"])
    assert compare["study"] == {"condition": "all", "steps": [20], "equal_steps": True}
    sinusoidal = next(v for v in compare["variants"] if v["variant"] == "sinusoidal")
    assert sinusoidal["paper_bleu"] == 25.8 and sinusoidal["intervals"]["bleu"]["n"] == 1
    (diff,) = compare["differences"]
    bleu = {r["variant"]: r["bleu"] for r in compare["runs"]}
    assert diff["across_seeds"]["difference"] == pytest.approx(bleu["learned"] - bleu["sinusoidal"])
    row = compare["row_e"]  # one seed a side: no t-test, but the two-level bootstrap runs
    boot = row["two_level_bootstrap"]
    assert row["seeds"] == [1] and boot["seeds"] == [1] and boot["resamples"] == 20
    assert boot["difference"] == pytest.approx(bleu["learned"] - bleu["sinusoidal"], abs=0.01)
    assert boot["low"] <= boot["difference"] <= boot["high"]
    assert row["equivalence"]["p"] is None and row["paper"]["difference"] == -0.1
    (to_learned,) = compare["differences_to_learned"]
    assert (to_learned["variant"], to_learned["baseline"]) == ("sinusoidal", "learned")
    table = (out / "table3.md").read_text()
    assert "## Each variant minus learned, paired by seed" in table
    assert "## Row (E): learned minus sinusoidal" in table and "two-level bootstrap" in table
    concat = json.loads((out / "concat.json").read_text())
    keys = {(r["condition"], r["variant"], r["k"], r["seed"]) for r in concat["runs"]}
    runs = {("all", "sinusoidal"), ("all", "learned"), ("short", "sinusoidal")}
    assert keys == {(c, v, k, 1) for c, v in runs for k in KS}
    for row in concat["runs"]:
        assert {"bleu", "chrf", "bp", "length_ratio", "lines", "left_out"} <= set(row)
        if row["k"] == 1:  # None where BLEU(1) is 0 (a 20-step model)
            assert row["bleu_ratio_to_k1"] == (1.0 if row["bleu"] else None)
    buckets = json.loads((out / "buckets.json").read_text())
    assert buckets["max_words"] == 10
    assert {r["variant"] for r in buckets["rows"]} == {"sinusoidal"}  # the short runs' variants
    for variant in ("sinusoidal",):
        rows = [r for r in buckets["rows"] if r["variant"] == variant]
        assert sum(r["n"] for r in rows) == 2 * N_EVAL
        for r in rows:
            if r["short"]["mean"] and r["control"]["mean"]:
                assert r["ratio"] == pytest.approx(r["short"]["mean"] / r["control"]["mean"], 1e-3)
    for name in ("table3.md", "concat.md", "buckets.md", "README.md", "bleu_by_variant.png"):
        assert (out / name).is_file()
    for name in ("bleu_vs_k.png", "bucket_ratio.png"):
        assert (out / name).stat().st_size > 1000
    machine = machine_description(torch.device("cpu"))
    readme = (out / "README.md").read_text()
    assert f"counts under each): {machine} (3). One seed" in readme
    assert f"counts under each): {code_version()} (3)." in readme
    assert "all/sinusoidal/seed-2" in report["missing"]
    assert "joined/learned/seed-1" in report["missing"]
    assert "short/learned/seed-1" in report["missing"]


def test_one_run_command_round_trips(tmp_path):
    (job,) = planned_jobs(tmp_path, ["short"], ["learned"], [3])
    args = parse(job_command(job, tmp_path, ["cache_dir=/tmp/x"])[2:])
    assert (args.condition, args.variants, args.seeds) == (["short"], ["learned"], [3])
    assert args.overrides == ["cache_dir=/tmp/x"] and args.root == tmp_path


def test_bad_input_is_one_line(tmp_path, capsys, study):
    with pytest.raises(StudyError, match="unknown position variant sinus"):
        planned_jobs(tmp_path, ["all"], ["sinus"])
    with pytest.raises(StudyError, match="--condition long"):
        planned_jobs(tmp_path, ["long"])
    with pytest.raises(StudyError, match="no scored runs"):
        write_report(tmp_path, tmp_path / "out")
    with pytest.raises(SystemExit) as exit_info:
        study_main(["report", "--root", str(tmp_path)])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no scored runs") and len(err.splitlines()) == 1
    root = study[0]
    broken = tmp_path / "broken" / "all" / "sinusoidal" / "seed-1"
    broken.mkdir(parents=True)
    source = root / "all" / "sinusoidal" / "seed-1"
    (broken / "metrics.json").write_text((source / "metrics.json").read_text())
    record = json.loads((source / STUDY_FILE).read_text())
    del record["concat"]
    (broken / STUDY_FILE).write_text(json.dumps(record))
    with pytest.raises(UserError, match="has no 'concat' field"):
        scored_runs(tmp_path / "broken")


def test_two_runs_at_a_time_each_in_its_own_process(study, tmp_path):
    _, overrides, _, _ = study
    lines = []
    store = tmp_path / "records"
    records = run_study(
        tmp_path, ["short"], ["sinusoidal", "learned"], [2], 2, overrides, lines.append, store
    )
    assert [(r["variant"], r["seed"], r["step"]) for r in records] == [
        ("learned", 2, 20),
        ("sinusoidal", 2, 20),
    ]
    for variant in ("sinusoidal", "learned"):
        out = (tmp_path / "short" / variant / "seed-2" / "study.out").read_text()
        assert f"short/{variant}/seed-2: test sacreBLEU" in out  # the run's own process said it
        kept = json.loads((store / "short" / variant / "seed-2" / STUDY_FILE).read_text())
        scored = json.loads((tmp_path / "short" / variant / "seed-2" / STUDY_FILE).read_text())
        assert kept == scored  # and recorded it in the store
    assert lines[-1] == (
        "study: 2 of 2 runs scored: 2 trained here, 0 finished before (skipped), 0 failed"
    )


def test_ratios_per_seed_and_per_bucket():
    """BLEU(k)/BLEU(1) is taken per seed before summarizing; short/control per bucket."""
    from evaluation.study import bucket_table, concat_table

    def record(condition, seed, bleus, buckets):
        concat = [
            {"split": POOLED, "k": k, "bleu": b, "chrf": b, "bp": 1.0, "length_ratio": 1.0}
            | {"unigram_precision": 50.0, "lines": 100 // k, "left_out": 100 % k}
            for k, b in zip(KS, bleus, strict=True)
        ]
        rows = [
            {"bucket": f"{low}-{low + 4}", "low": low, "high": low + 4, "beyond": low > 10}
            | {"n": 7, "bleu": b}
            for low, b in zip((1, 6, 11), buckets, strict=True)
        ]
        head = {"condition": condition, "variant": "rope", "seed": seed, "step": 5}
        return head | {"concat": concat, "by_bucket": rows, "max_words": 10}

    records = [
        record("all", 1, [40, 20, 10, 8], [40, 30, 20]),
        record("all", 2, [20, 20, 20, 20], [40, 30, 10]),
        record("short", 1, [30, 15, 9, 6], [40, 15, 5]),
    ]
    concat = concat_table(records)
    k2 = next(r for r in concat["summary"] if r["condition"] == "all" and r["k"] == 2)
    assert k2["bleu_ratio_to_k1"]["mean"] == pytest.approx((20 / 40 + 20 / 20) / 2)
    assert k2["bleu"]["mean"] == 20 and k2["lines"] == 50 and k2["left_out"] == 0
    buckets = {r["bucket"]: r for r in bucket_table(records)["rows"]}
    assert buckets["11-15"]["ratio"] == pytest.approx(5 / 15, abs=1e-4)  # short / control means
    baseline = [dict(r, variant="sinusoidal") for r in records]
    for r, bleus in zip(baseline, ([30, 20, 10, 5], [20, 10, 10, 10], [30, 15, 9, 6]), strict=True):
        r["concat"] = [dict(row, bleu=b) for row, b in zip(r["concat"], bleus, strict=True)]
    concat = concat_table(records + baseline)
    diffs = {(d["condition"], d["k"]): d for d in concat["differences"]}
    assert {d["variant"] for d in concat["differences"]} == {"rope"}  # none of the baseline
    k2 = diffs["all", 2]  # rope minus sinusoidal, seeds 1 and 2 paired
    assert k2["bleu"]["seeds"] == [1, 2] and k2["bleu"]["difference"] == pytest.approx(5.0)
    ratio_diffs = [20 / 40 - 20 / 30, 20 / 20 - 10 / 20]
    assert k2["bleu_ratio_to_k1"]["difference"] == pytest.approx(
        statistics.fmean(ratio_diffs), abs=1e-3
    )
    assert k2["bleu_ratio_to_k1"]["low"] is not None and diffs["short", 1]["bleu"]["low"] is None
    assert "## Each variant minus sinusoidal, per condition and k" in concat_markdown(concat)
    learned = [dict(r, variant="learned") for r in records]  # row E's other encoding, also a base
    concat = concat_table(records + baseline + learned)
    pairs = {(d["variant"], d["baseline"]) for d in concat["differences"]}
    assert pairs == {("rope", "sinusoidal"), ("learned", "sinusoidal"), ("rope", "learned")}
    rope_vs_learned = [d for d in concat["differences"] if d["baseline"] == "learned"]
    assert all(d["bleu"]["difference"] == pytest.approx(0.0) for d in rope_vs_learned)  # copies
    text = concat_markdown(concat)
    assert text.count("## Each variant minus ") == 2 and "## Each variant minus learned" in text
    # Holm within each (baseline, condition, k): rope and learned minus sinusoidal, the same p
    family = [d for d in concat["differences"] if (d["baseline"], d["k"]) == ("sinusoidal", 2)]
    family = [d["bleu_ratio_to_k1"] for d in family if d["condition"] == "all"]
    assert len(family) == 2 and family[0]["p"] == family[1]["p"] is not None
    assert [d["p_holm"] for d in family] == pytest.approx([min(1, 2 * family[0]["p"])] * 2)
    assert all(d["family_size"] == 2 for d in family)
    alone = [d for d in concat["differences"] if d["baseline"] == "learned"]
    assert all(d["bleu"]["family_size"] <= 1 for d in alone)  # rope alone at each k
    assert f"Holm p {min(1, 2 * family[0]['p']):.3f}" in text
    assert buckets["11-15"]["ratio_by_seed"] == {"1": pytest.approx(5 / 20, abs=1e-4)}
    assert buckets["6-10"]["n"] == 7 and buckets["6-10"]["control_seeds"] == [1, 2]


def test_joined_minus_all_pairs_each_variant_with_its_control():
    """The remedy's effect: each variant's joined runs minus its all-lengths runs, by seed."""
    from evaluation.study import concat_table

    def record(condition, seed, bleus, ratios):
        concat = [
            {"split": POOLED, "k": k, "bleu": b, "chrf": b, "bp": 1.0, "length_ratio": r}
            | {"unigram_precision": 50.0, "lines": 100 // k, "left_out": 100 % k}
            for k, b, r in zip(KS, bleus, ratios, strict=True)
        ]
        return {"condition": condition, "variant": "rope", "seed": seed, "step": 5} | {
            "concat": concat
        }

    records = [
        record("all", 1, [40, 20, 10, 8], [1.0, 0.6, 0.5, 0.4]),
        record("all", 2, [30, 15, 10, 6], [1.0, 0.7, 0.5, 0.3]),
        record("all", 3, [30, 15, 10, 6], [1.0, 0.7, 0.5, 0.3]),  # no joined seed 3: left out
        record("joined", 1, [38, 30, 25, 20], [1.0, 0.9, 0.9, 0.8]),
        record("joined", 2, [30, 24, 21, 18], [1.0, 1.0, 0.9, 0.9]),
    ]
    concat = concat_table(records)
    remedy = {d["k"]: d for d in concat["joined_minus_all"]}
    assert sorted(remedy) == list(KS) and concat["differences"] == []  # no sinusoidal runs
    k4 = remedy[4]
    assert k4["variant"] == "rope" and k4["length_ratio"]["seeds"] == [1, 2]
    assert k4["length_ratio"]["difference"] == pytest.approx(((0.8 - 0.4) + (0.9 - 0.3)) / 2)
    ratio_diffs = [20 / 38 - 8 / 40, 18 / 30 - 6 / 30]
    assert k4["bleu_ratio_to_k1"]["difference"] == pytest.approx(
        statistics.fmean(ratio_diffs), abs=1e-3
    )
    assert k4["bleu"]["method"] == "paired t, shared seeds" and k4["bleu"]["low"] is not None
    text = concat_markdown(concat)
    assert "## Trained on joined lines minus trained on single sentences" in text
    assert "| rope | 4 | 1, 2 |" in text


def test_bucket_ratios_minus_sinusoidal_are_paired_by_seed():
    """Per bucket: a variant's short/control ratio minus sinusoidal's, over the seeds both ran."""

    def record(condition, variant, seed, bleus):
        rows = [
            {"bucket": f"{low}-{low + 4}", "low": low, "high": low + 4, "beyond": low > 10}
            | {"n": 9, "bleu": b}
            for low, b in zip((1, 6, 11), [30, *bleus], strict=True)  # 1-5: all alike
        ]
        head = {"condition": condition, "variant": variant, "seed": seed, "max_words": 10}
        return head | {"by_bucket": rows}

    records = [
        record("all", "sinusoidal", 1, [30, 20]),
        record("all", "sinusoidal", 2, [30, 30]),
        record("short", "sinusoidal", 1, [30, 10]),
        record("short", "sinusoidal", 2, [30, 18]),
        record("all", "learned", 1, [40, 20]),
        record("all", "learned", 2, [40, 40]),
        record("all", "learned", 3, [40, 40]),
        record("short", "learned", 1, [20, 8]),  # half its control within the lengths
        record("short", "learned", 2, [40, 16]),
        record("short", "learned", 3, [40, 4]),  # no sinusoidal seed 3: left out of the pairs
    ]
    table = bucket_table(records)
    diffs = {d["bucket"]: d for d in table["differences"]}
    assert {d["variant"] for d in table["differences"]} == {"learned"}
    beyond = diffs["11-15"]
    assert beyond["ratio"]["seeds"] == [1, 2] and beyond["n"] == 9 and beyond["beyond"]
    # learned 8/20, 16/40 against sinusoidal 10/20, 18/30
    assert beyond["ratio"]["difference"] == pytest.approx(((0.4 - 0.5) + (0.4 - 0.6)) / 2)
    assert beyond["ratio"]["low"] < beyond["ratio"]["difference"] < beyond["ratio"]["high"]
    assert diffs["6-10"]["ratio"]["difference"] == pytest.approx(((0.5 - 1) + (1 - 1)) / 2)
    # over the in-range (6-10) ratio: learned seed 1 0.4 / 0.5, seed 2 0.4 / 1; sinusoidal 0.5, 0.6
    assert table["in_range"] == "6-10"
    rows = {(r["variant"], r["bucket"]): r for r in table["rows"]}
    assert rows["learned", "11-15"]["over_in_range_by_seed"] == {"1": 0.8, "2": 0.4, "3": 0.1}
    assert rows["learned", "6-10"]["over_in_range"]["mean"] == pytest.approx(1.0)
    relative = beyond["over_in_range"]
    assert relative["seeds"] == [1, 2]
    assert relative["difference"] == pytest.approx(((0.8 - 0.5) + (0.4 - 0.6)) / 2)
    assert beyond["ratio"]["family_size"] == 1  # one variant at each bucket: a family of one
    assert beyond["ratio"]["p_holm"] == beyond["ratio"]["p"] is not None
    text = bucket_markdown(table)
    assert "## Each variant's ratio minus sinusoidal's, per bucket" in text
    assert f"Holm p {beyond['ratio']['p']:.3f}" in text
    assert "| learned | 11-15* | 9 | 1, 2 | -0.150 [" in text
    assert "ratio over its ratio at 6-10 words" in text


def test_buckets_without_short_runs_say_so_and_keep_l():
    """Control runs alone: no rows, the short condition's L in the title, one line saying why."""
    record = {
        "condition": "all",
        "variant": "sinusoidal",
        "seed": 1,
        "max_words": 10,
        "by_bucket": [
            {"bucket": "1-10", "low": 1, "high": 10, "beyond": False, "n": 5, "bleu": 3.0}
        ],
    }
    table = bucket_table([record])
    assert table["rows"] == [] and table["max_words"] == 10
    text = bucket_markdown(table)
    assert text.startswith("# Trained on <= 10 source words")
    assert "No run of the short condition is scored yet." in text and "| variant |" not in text


def test_the_provenance_lines_name_the_runs_whose_machine_or_code_is_unrecorded():
    runs = [
        {"condition": "all", "variant": "learned", "seed": 1, "hardware": ["A", "unrecorded"]},
        {"condition": "all", "variant": "sinusoidal", "seed": 2, "hardware": ["A", "B"]},
        {"condition": "short", "variant": "rope", "seed": 3, "hardware": ["B"], "code": ["c1"]},
    ]
    line = provenance_line(runs, "hardware", "on")
    assert line.startswith("Trained on (runs; one resumed on other hardware counts under each): ")
    assert "each): A (2); B (2); unrecorded (1: all/learned/seed-1, with a segment" in line
    assert "all/sinusoidal/seed-2" not in line
    assert "unrecorded" not in provenance_line(runs[1:], "hardware", "on")
    code = provenance_line(runs, "code", "with")  # records from before the code was recorded
    assert "each): c1 (1); unrecorded (2: all/learned/seed-1, all/sinusoidal/seed-2," in code
    assert "each): unrecorded (1: all/learned" in provenance_line(runs[:1], "code", "with")


def test_an_unpaired_difference_names_each_side_s_seeds():
    paired = {"method": "paired t, shared seeds", "seeds": [1, 2]}
    assert seeds_cell(paired) == "1, 2"
    welch = {"method": "Welch t (unpaired seeds)", "seeds": [1, 2, 3]}
    assert seeds_cell(welch | {"base_seeds": [1, 2, 3], "other_seeds": [1]}) == (
        "1 vs 1, 2, 3 (unpaired)"
    )
    assert seeds_cell(welch) == "1, 2, 3 (unpaired)"  # a record from before the sides were kept


def test_row_e_tests_equivalence_and_states_power_from_eight_seeds():
    """Learned minus sinusoidal over 8 seeds: t-interval, TOST at ±1 BLEU, power, the paper."""
    sinusoidal = [30.0, 31.0, 29.5, 30.5, 31.5, 30.0, 29.0, 30.8]
    shifts = {"close": [0.2, -0.3, 0.1, 0.0, 0.3, -0.1, 0.2, -0.2], "far": [-2, 1, -3, 0.5] * 2}

    def records(shift: list[float]) -> dict[str, list[dict]]:
        return {
            variant: [
                {"seed": seed, "test": {"bleu": b + d, "chrf": 50 + d, "tok_bleu": b + d}}
                for seed, (b, d) in enumerate(zip(sinusoidal, values, strict=True), start=1)
            ]
            for variant, values in (("sinusoidal", [0.0] * 8), ("learned", shift))
        }

    close = row_e(records(shifts["close"]), resamples=0)
    assert close["seeds"] == list(range(1, 9)) and close["two_level_bootstrap"] is None
    assert close["bleu"]["difference"] == pytest.approx(statistics.fmean(shifts["close"]))
    eq = close["equivalence"]
    assert eq["margin"] == 1.0 and eq["equivalent"] and eq["smallest_margin"] < 1.0
    power = close["power"]
    assert power["n"] == 8 and power["sd"] == pytest.approx(statistics.stdev(shifts["close"]))
    assert power["detectable"] < 1.0
    far = row_e(records(shifts["far"]), resamples=0)
    assert not far["equivalence"]["equivalent"] and far["equivalence"]["smallest_margin"] > 1.0
    assert far["power"]["detectable"] > 1.0 and far["power"]["seeds_for_one"] > 8
    assert close["paper"] == far["paper"] and far["paper"]["difference"] == -0.1
    text = "\n".join(row_e_markdown(far))
    assert "equivalence not shown" in text and "25.7 vs 25.8 (-0.1)" in text
    assert f"±{far['equivalence']['smallest_margin']:.2f} BLEU" in text
    assert ": equivalent |" in "\n".join(row_e_markdown(close))
    learned = differences_to(records(shifts["far"]), "learned")
    assert [d["variant"] for d in learned] == ["sinusoidal"]
    assert learned[0]["across_seeds"]["difference"] == pytest.approx(
        -statistics.fmean(shifts["far"])
    )
    assert learned[0]["across_seeds"]["p_holm"] == learned[0]["across_seeds"]["p"]


@pytest.mark.parametrize("data_path", [None, "../shared/data/multi30k_hub_layout"])
def test_a_committed_record_on_the_text_folder_still_counts_with_multi30k_from_the_hub(data_path):
    """The records were trained on ../shared/data/multi30k (plain text); the hub default, or a
    folder in the hub's layout, is the same corpus at another location, not another setting."""
    record = RECORDS / "all" / "learned" / "seed-2"
    overrides = [] if data_path is None else [f"data.path={data_path}"]
    assert record_mismatch(Job("all", "learned", 2, record), record, overrides) == []
    changed = record_mismatch(Job("all", "learned", 2, record), record, ["data.max_len=64"])
    assert changed == ["data.max_len: 256 -> 64"]
