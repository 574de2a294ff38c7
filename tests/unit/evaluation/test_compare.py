"""evaluation/compare.py via scripts/compare.py on real-format run folders; the SLURM launcher."""

import json
import math
import random
import shutil
import statistics

import pytest
import sacrebleu
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from data.corpus import multi30k_text_files
from runs.run import lines_sha256
from tests.conftest import CONFIG_DIR, compose_config, script_main

main = script_main("compare")

DROP = {"SinusoidalPositionEncoding": 0.05, "LearnedPositionEncoding": 0.1}
VARIANT = {"SinusoidalPositionEncoding": "sinusoidal", "LearnedPositionEncoding": "learned"}
DATA = ["data.corpus.train_size=10"]


@pytest.fixture(scope="module")
def toy_validation():
    """Sources and references of the toy validation split, as the runs' config names it."""
    from data.corpus import load_split

    split = load_split(compose_config(DATA).data, "validation")
    return list(split["src"]), list(split["tgt"])


def corrupt(refs: list[str], drop: float, seed: int) -> list[str]:
    """References with each word dropped with probability drop: a worse system for larger drop."""
    rng = random.Random(seed)
    return [" ".join(w for w in ref.split() if rng.random() >= drop) for ref in refs]


def make_run(
    root,
    position: str,
    seed: int,
    toy_validation,
    name="validation-last-beam4",
    choice: str | None = None,
    eval_step: int | None = None,
    tokenizer: str = "ab" * 32,
):
    """A run folder as train.py + evaluate.py write it, with hypotheses of a known quality.

    choice: the position choice name (default: the class's config name); eval_step: the step
    its evaluation scored (default: the run's last); tokenizer: the sha256 it records.
    """
    from torch.utils.tensorboard import SummaryWriter

    from evaluation.bleu import bleu_by_length, tokenized_bleu

    srcs, refs = toy_validation
    choice = choice or VARIANT[position]
    run = root / f"position={choice},seed={seed}"
    (run / ".hydra").mkdir(parents=True)
    config = compose_config([*DATA, f"position={VARIANT[position]}", f"seed={seed}"])
    if choice != VARIANT[position]:  # a variant config of its own trains something else
        OmegaConf.set_struct(config, False)
        config.position.variant_in_test = choice
    OmegaConf.save(config, run / ".hydra" / "config.yaml")
    curve = [(100 * k, 40.0 / k + DROP[position] + seed / 100) for k in range(1, 5)]
    writer = SummaryWriter(run / "tensorboard")
    for step, ppl in curve:
        writer.add_scalar("dev/ppl", ppl, step)
    writer.close()
    metrics = {
        "complete": True,
        "steps": 400 + seed,
        "wall_seconds": 3600.0 * seed,
        "dev_ppl": curve[-1][1],
        "parameters": 1_000_000,
        "position": position,
        "position_choice": choice,
        "seed": seed,
    }
    (run / "metrics.json").write_text(json.dumps(metrics))
    hyps = corrupt(refs, DROP[position], seed)
    (run / "eval").mkdir()
    hyp_path = run / "eval" / f"{name}.hyp"
    hyp_path.write_text("".join(h + "\n" for h in hyps))
    scores = {
        "name": name,
        "step": metrics["steps"] if eval_step is None else eval_step,
        "position": choice,
        "split": "validation",
        "data": OmegaConf.to_container(config.data, resolve=True),
        "tokenizer_sha256": tokenizer,
        "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
        "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2",
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
        "tok_bleu": round(tokenized_bleu(hyps, refs), 2),
        "ppl": curve[-1][1],
        "n_sentences": len(hyps),
        "hypotheses": str(hyp_path),
        "by_length": bleu_by_length(srcs, hyps, refs),
    }
    (run / "eval" / f"{name}.json").write_text(json.dumps(scores))
    return run, metrics, scores, curve


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, toy_validation):
    """A multirun folder: sinusoidal and learned, seeds 1 and 2, and compare's result on it."""
    root = tmp_path_factory.mktemp("multirun")
    runs = {(VARIANT[p], s): make_run(root, p, s, toy_validation) for p in DROP for s in (1, 2)}
    result = main([str(root)])
    return root, runs, result


def test_table_rows_are_the_means_over_seeds(sweep):
    root, runs, result = sweep
    rows = {row["variant"]: row for row in result["variants"]}
    assert [row["variant"] for row in result["variants"]] == ["sinusoidal", "learned"]
    for variant, row in rows.items():
        bleu = [runs[variant, s][2]["bleu"] for s in (1, 2)]
        ppl = [runs[variant, s][1]["dev_ppl"] for s in (1, 2)]
        assert row["n"] == 2 and row["seeds"] == [1, 2]
        assert row["bleu_mean"] == pytest.approx(statistics.fmean(bleu))
        assert row["bleu_std"] == pytest.approx(statistics.stdev(bleu))
        assert row["dev_ppl_mean"] == pytest.approx(statistics.fmean(ppl))
        assert row["tok_bleu_mean"] == pytest.approx(
            statistics.fmean(runs[variant, s][2]["tok_bleu"] for s in (1, 2))
        )
        assert row["hours"] == pytest.approx(1.5) and row["steps"] == round(401.5)
    assert (rows["sinusoidal"]["paper_ppl"], rows["sinusoidal"]["paper_bleu"]) == (4.92, 25.8)
    assert (rows["learned"]["paper_ppl"], rows["learned"]["paper_bleu"]) == (4.92, 25.7)

    table = (root / "compare" / "compare.md").read_text()
    sin = rows["sinusoidal"]
    assert f"| sinusoidal | 1, 2 (2) | {sin['dev_ppl_mean']:.2f} ± {sin['dev_ppl_std']:.2f} " in (
        table
    )
    assert f"{sin['bleu_mean']:.2f} ± {sin['bleu_std']:.2f}" in table
    assert "tokenized" in table and "newstest2013" in table


def test_difference_across_seeds_is_a_paired_t_interval(sweep):
    _, runs, result = sweep
    (diff,) = result["differences"]
    assert (diff["variant"], diff["baseline"]) == ("learned", "sinusoidal")
    seeds = diff["across_seeds"]
    d = [runs["learned", s][2]["bleu"] - runs["sinusoidal", s][2]["bleu"] for s in (1, 2)]
    half = math.tan(math.pi * 0.475) * statistics.stdev(d) / math.sqrt(2)  # Cauchy = t with df 1
    assert seeds["method"].startswith("paired") and seeds["df"] == 1
    assert seeds["difference"] == pytest.approx(statistics.fmean(d))
    assert seeds["low"] == pytest.approx(statistics.fmean(d) - half)
    assert seeds["high"] == pytest.approx(statistics.fmean(d) + half)
    t = abs(statistics.fmean(d)) / (statistics.stdev(d) / math.sqrt(2))
    assert seeds["p"] == pytest.approx(1 - 2 * math.atan(t) / math.pi)  # df 1: Cauchy
    assert seeds["p_holm"] == seeds["p"] and seeds["family_size"] == 1  # a family of one


def test_paired_bootstrap_finds_the_worse_system(sweep, toy_validation):
    root, runs, result = sweep
    boot = result["differences"][0]["bootstrap"]
    refs = toy_validation[1]
    hyps = {v: corrupt(refs, DROP[p], 1) for p, v in VARIANT.items()}
    expected = (
        sacrebleu.corpus_bleu(hyps["learned"], [refs]).score
        - sacrebleu.corpus_bleu(hyps["sinusoidal"], [refs]).score
    )
    assert boot["seeds"] == [1, 1] and boot["resamples"] == 1000
    assert boot["difference"] == pytest.approx(expected)
    assert boot["low"] < expected < boot["high"] < 0
    assert boot["p_value"] < 0.05
    assert "bs:1000" in boot["signature"]
    assert "paired bootstrap" in (root / "compare" / "compare.md").read_text()


def test_files_and_curves_are_written(sweep):
    root, runs, result = sweep
    out = root / "compare"
    for name in ("bleu_by_variant.png", "bleu_by_length.png", "dev_ppl_curves.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "compare.json").read_text()) == json.loads(json.dumps(result))
    for run in result["runs"]:
        curve = runs[run["variant"], run["seed"]][3]
        assert [step for step, _ in run["dev_ppl_curve"]] == [step for step, _ in curve]
        assert [ppl for _, ppl in run["dev_ppl_curve"]] == pytest.approx([p for _, p in curve])
    for bucket in result["variants"][0]["by_length"]:
        per_seed = [
            row["bleu"]
            for s in (1, 2)
            for row in runs["sinusoidal", s][2]["by_length"]
            if row["bucket"] == bucket["bucket"]
        ]
        assert bucket["bleu_mean"] == pytest.approx(statistics.fmean(per_seed))


def test_unpaired_seeds_use_welch_and_eval_can_be_named(tmp_path, toy_validation):
    make_run(tmp_path, "SinusoidalPositionEncoding", 1, toy_validation, name="mine")
    make_run(tmp_path, "SinusoidalPositionEncoding", 2, toy_validation, name="mine")
    make_run(tmp_path, "LearnedPositionEncoding", 3, toy_validation, name="mine")
    make_run(tmp_path, "LearnedPositionEncoding", 4, toy_validation, name="mine")
    result = main(
        [str(tmp_path), "--eval", "mine", "--resamples", "0", "--out", str(tmp_path / "o")]
    )
    seeds = result["differences"][0]["across_seeds"]
    assert seeds["method"].startswith("Welch") and seeds["seeds"] == [1, 2, 3, 4]
    assert seeds["low"] < seeds["difference"] < seeds["high"]
    assert result["differences"][0]["bootstrap"] is None
    assert (tmp_path / "o" / "compare.md").is_file()


def error_of(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*map(str, argv)])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def test_errors_are_one_clear_line(tmp_path, capsys, toy_validation):
    assert "no run directories" in error_of(capsys, tmp_path)
    unfinished = tmp_path / "unfinished"
    (unfinished / ".hydra").mkdir(parents=True)
    assert "has no metrics.json" in error_of(capsys, unfinished)

    run = make_run(tmp_path / "a", "SinusoidalPositionEncoding", 1, toy_validation)[0]
    assert "keeps no checkpoints to score" in error_of(capsys, run, "--eval", "nope")
    (run / "checkpoints").mkdir()  # a training run's folder: evaluate.py makes it
    (run / "checkpoints" / "last.pt").write_bytes(b"weights")
    assert "python evaluate.py run_dir=" in error_of(capsys, run, "--eval", "nope")
    (run / "eval" / "validation-last-beam4.json").unlink()
    assert "python evaluate.py run_dir=" in error_of(capsys, run)

    make_run(tmp_path / "b", "SinusoidalPositionEncoding", 1, toy_validation, name="validation-x")
    make_run(tmp_path / "b", "LearnedPositionEncoding", 1, toy_validation, name="validation-y")
    assert "--eval NAME" in error_of(capsys, tmp_path / "b")
    refs = tmp_path / "refs.de"
    refs.write_text("a\n")  # read by the bootstrap alone: with --resamples 0, never
    err = error_of(
        capsys, tmp_path / "b", "--eval", "validation-x", "--refs", refs, "--resamples", "0"
    )
    assert "--refs" in err and "--resamples 0 turns it off" in err


def test_variants_are_told_apart_by_choice_name_not_class(tmp_path, toy_validation):
    for seed in (1, 2):
        make_run(tmp_path, "SinusoidalPositionEncoding", seed, toy_validation)
        make_run(tmp_path, "SinusoidalPositionEncoding", seed, toy_validation, choice="sin_b500")
    result = main([str(tmp_path), "--resamples", "0"])
    assert [row["variant"] for row in result["variants"]] == ["sinusoidal", "sin_b500"]
    assert [row["n"] for row in result["variants"]] == [2, 2]


def test_a_stale_evaluation_is_refused_or_flagged(tmp_path, capsys, toy_validation):
    make_run(tmp_path, "SinusoidalPositionEncoding", 1, toy_validation)
    stale = make_run(tmp_path, "LearnedPositionEncoding", 1, toy_validation, eval_step=30)[0]
    err = error_of(capsys, tmp_path)
    assert f"{stale}/eval/validation-last-beam4.json scored step 30" in err
    assert "trained to step 401" in err and "--allow-stale" in err
    result = main([str(tmp_path), "--resamples", "0", "--allow-stale"])
    assert [r["stale"] for r in result["runs"]] == [True, False]  # learned, sinusoidal
    assert "learned (stale)" in (tmp_path / "compare" / "compare.md").read_text()


def test_runs_of_other_corpora_or_tokenizers_are_never_pooled(tmp_path, capsys, toy_validation):
    make_run(tmp_path / "a", "SinusoidalPositionEncoding", 1, toy_validation)
    make_run(tmp_path / "a", "LearnedPositionEncoding", 1, toy_validation, tokenizer="cd" * 32)
    assert "different tokenizers" in error_of(capsys, tmp_path / "a", "--resamples", "0")
    make_run(tmp_path / "b", "SinusoidalPositionEncoding", 1, toy_validation)
    other = make_run(tmp_path / "b", "LearnedPositionEncoding", 1, toy_validation)[0]
    scores_path = other / "eval" / "validation-last-beam4.json"
    scores = json.loads(scores_path.read_text())
    scores["data"]["corpus"]["train_size"] = 99  # another toy corpus
    scores_path.write_text(json.dumps(scores))
    err = error_of(capsys, tmp_path / "b", "--resamples", "0")
    assert "different corpus or evaluation splits" in err


def test_multi30k_from_a_folder_pools_with_its_text_files(tmp_path, capsys, toy_validation):
    """Row (E)'s final runs named Multi30k's text files, the later ones the folder
    (data.path): one corpus, as load_multi30k reads it, so their runs pool; a toy does not."""
    folder = "/data/multi30k"
    configs = [
        {"_target_": "data.corpus.load_multi30k", "path": folder},
        {"_target_": "data.corpus.load_text_pairs", "files": multi30k_text_files(folder)},
    ]
    for variant, corpus in zip(("Sinusoidal", "Learned"), configs, strict=True):
        run = make_run(tmp_path, f"{variant}PositionEncoding", 1, toy_validation)[0]
        scores_path = run / "eval" / "validation-last-beam4.json"
        scores = json.loads(scores_path.read_text())
        scores["data"]["corpus"] = corpus
        scores_path.write_text(json.dumps(scores))
    result = main([str(tmp_path), "--resamples", "0"])
    assert [row["n"] for row in result["variants"]] == [1, 1]
    make_run(tmp_path, "LearnedPositionEncoding", 2, toy_validation)  # the toy corpus
    assert "different corpus or evaluation splits" in error_of(capsys, tmp_path, "--resamples", "0")


def test_seeds_of_one_variant_at_other_settings_are_never_pooled(tmp_path, capsys, toy_validation):
    """Two sinusoidal seeds, one at half the rate: refused in one line naming the setting (no
    row mixes two rates); a setting that keeps the math (the evaluation interval) does not."""
    make_run(tmp_path, "SinusoidalPositionEncoding", 1, toy_validation)
    second = make_run(tmp_path, "SinusoidalPositionEncoding", 2, toy_validation)[0]
    config = OmegaConf.load(second / ".hydra" / "config.yaml")
    config.optim.lr_scale, config.trainer.eval_every = 0.5, 7
    OmegaConf.save(config, second / ".hydra" / "config.yaml")
    err = error_of(capsys, tmp_path, "--resamples", "0")
    assert "the sinusoidal runs" in err and "(optim.lr_scale: 1.0 -> 0.5)" in err
    assert "not pooled" in err and not (tmp_path / "compare").exists()
    config.optim.lr_scale, config.trainer.max_steps = 1.0, 9
    OmegaConf.save(config, second / ".hydra" / "config.yaml")
    assert "(trainer.max_steps: 100000 -> 9)" in error_of(capsys, tmp_path, "--resamples", "0")
    config.trainer.max_steps = 100000
    OmegaConf.save(config, second / ".hydra" / "config.yaml")
    main([str(tmp_path), "--resamples", "0"])
    assert (tmp_path / "compare" / "compare.json").is_file()


def test_runs_of_another_search_are_never_pooled(tmp_path, capsys, toy_validation):
    make_run(tmp_path, "SinusoidalPositionEncoding", 1, toy_validation)
    other = make_run(tmp_path, "LearnedPositionEncoding", 1, toy_validation)[0]
    scores_path = other / "eval" / "validation-last-beam4.json"
    scores = json.loads(scores_path.read_text())
    assert "min_len" not in scores  # as written before min_len: 0, so the two pool
    main([str(tmp_path), "--resamples", "0"])
    scores["min_len"] = 1  # no empty translation: another search
    scores_path.write_text(json.dumps(scores))
    err = error_of(capsys, tmp_path, "--resamples", "0")
    assert "different search settings (min_len: 1 vs 0)" in err


def test_compare_reads_a_real_run(trained_run, tmp_path):
    from evaluation.evaluate import evaluate

    scores = evaluate(compose_config([f"run_dir={trained_run}"], config_name="evaluate"))
    metrics = json.loads((trained_run / "metrics.json").read_text())
    result = main(
        [str(trained_run), "--eval", scores["name"], "--out", str(tmp_path), "--resamples", "0"]
    )
    (row,) = result["variants"]
    assert row["variant"] == "sinusoidal" and row["bleu_mean"] == scores["bleu"]
    assert row["dev_ppl_mean"] == metrics["dev_ppl"] and row["steps"] == metrics["steps"]
    curve = result["runs"][0]["dev_ppl_curve"]
    assert curve[-1][0] == metrics["steps"]
    assert curve[-1][1] == pytest.approx(metrics["dev_ppl"], rel=1e-6)


def launcher_config(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        return compose("train", overrides=list(overrides), return_hydra_config=True)


def test_slurm_launcher_composes_one_rank_per_gpu():
    cfg = launcher_config("hydra/launcher=slurm", "experiment=table3_base")
    launcher = cfg.hydra.launcher
    assert (
        launcher._target_ == "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
    )
    assert launcher.nodes == 1 and launcher.gpus_per_node == launcher.tasks_per_node == 8
    assert launcher.partition is None and launcher.timeout_min > 0


def test_run_dirs_in_compare_json_are_relative_to_where_it_ran(sweep, monkeypatch):
    """A committed report must not carry this machine's absolute paths."""
    root, _, _ = sweep
    monkeypatch.chdir(root.parent)
    result = main([str(root.resolve()), "--out", str(root / "compare-here"), "--resamples", "0"])
    dirs = [run["run_dir"] for run in result["runs"]]
    assert all(d.startswith(f"{root.name}/") for d in dirs), dirs
    written = json.loads((root / "compare-here" / "compare.json").read_text())
    assert [run["run_dir"] for run in written["runs"]] == dirs


def test_each_family_carries_holm_p_and_each_run_its_steps_and_lr_scale(tmp_path, toy_validation):
    """Three variants against sinusoidal: Holm over the family, by hand; lr_scale per run."""
    for seed in (1, 2):
        make_run(tmp_path, "SinusoidalPositionEncoding", seed, toy_validation)
        make_run(tmp_path, "SinusoidalPositionEncoding", seed, toy_validation, choice="sin_copy")
        make_run(tmp_path, "LearnedPositionEncoding", seed, toy_validation)
        run = make_run(tmp_path, "LearnedPositionEncoding", seed, toy_validation, choice="lrn_b")[0]
        config = OmegaConf.load(run / ".hydra" / "config.yaml")
        config.optim.lr_scale = 0.5  # as `optim.lr_scale=0.5` records it
        OmegaConf.save(config, run / ".hydra" / "config.yaml")
    metrics_path = tmp_path / "position=learned,seed=2" / "metrics.json"
    metrics = json.loads(metrics_path.read_text())
    metrics_path.write_text(json.dumps(metrics | {"lr_scale": 2.0}))  # metrics.json wins
    main([str(tmp_path), "--resamples", "20", "--out", str(tmp_path / "o")])
    result = json.loads((tmp_path / "o" / "compare.json").read_text())
    got = {(r["variant"], r["seed"]): (r["steps"], r["lr_scale"]) for r in result["runs"]}
    assert got[("lrn_b", 1)] == (401, 0.5) and got[("learned", 2)] == (402, 2.0)
    assert got[("sinusoidal", 1)] == (401, 1.0) and got[("learned", 1)] == (401, 1.0)
    seeds = {d["variant"]: d["across_seeds"] for d in result["differences"]}
    assert seeds["sin_copy"]["p"] == 1.0  # no difference at all
    p = seeds["learned"]["p"]
    assert seeds["lrn_b"]["p"] == p and 0 < p < 1 / 3  # the same hypotheses: the same test
    # Holm by hand: p, p, 1 sorted; times 3, 2, 1; kept monotone
    assert [seeds[v]["p_holm"] for v in ("learned", "lrn_b")] == pytest.approx([3 * p, 3 * p])
    assert seeds["sin_copy"]["p_holm"] == 1.0
    assert all(s["family_size"] == 3 for s in seeds.values())
    boots = {d["variant"]: d["bootstrap"] for d in result["differences"]}
    assert boots["sin_copy"]["p_value"] is None  # the same outputs: no spread, no p
    tested = [boots[v] for v in ("learned", "lrn_b")]
    assert holm_by_hand([b["p_value"] for b in tested]) == pytest.approx(
        [b["p_holm"] for b in tested]
    )
    table = (tmp_path / "o" / "compare.md").read_text()
    assert "paired bootstrap, 20 resamples | +0.00 | [+0.00, +0.00] | n/a | n/a |" in table
    assert "| p | p (Holm) |" in table and f"| {p:.3f} | {3 * p:.3f} |" in table


def holm_by_hand(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment, written out: the i-th smallest times (m - i), monotone."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def test_a_seed_given_twice_is_refused_not_pooled(tmp_path, toy_validation, capsys):
    """A link to a run, or a copy of it, would count as a second seed (± 0.00, a Welch test)."""
    run = make_run(tmp_path / "runs", "SinusoidalPositionEncoding", 1, toy_validation)[0]
    make_run(tmp_path / "runs", "LearnedPositionEncoding", 1, toy_validation)
    link = tmp_path / "link"
    link.symlink_to(run, target_is_directory=True)
    out = tmp_path / "o"
    err = error_of(capsys, tmp_path / "runs", link, "--resamples", "0", "--out", out)
    assert "are one training (run id " in err and "seed, trained to 401 steps)" in err
    shutil.copytree(run, tmp_path / "copy")
    err = error_of(capsys, tmp_path / "runs", tmp_path / "copy", "--resamples", "0", "--out", out)
    assert "are one training (run id " in err and not out.exists()
    again = tmp_path / "again" / "position=sinusoidal,seed=1"  # another run of seed 1
    shutil.copytree(run, again)
    config = again / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("label_smoothing: 0.1", "label_smoothing: 0.2"))
    err = error_of(capsys, tmp_path / "runs", again.parent, "--resamples", "0", "--out", out)
    assert "both sinusoidal seed 1 (two folders)" in err and not out.exists()
    err = error_of(capsys, tmp_path / "runs", run, "--resamples", "0", "--out", out)
    assert f"{run} is given twice: a run counts once" in err and not out.exists()  # probe a-01


def test_an_out_folder_holding_a_users_compare_md_is_refused(tmp_path, toy_validation, capsys):
    """Probe 1-20: --out a folder with a user's compare.md (and notes): the file was replaced."""
    make_run(tmp_path / "a", "SinusoidalPositionEncoding", 1, toy_validation)
    make_run(tmp_path / "a", "LearnedPositionEncoding", 1, toy_validation)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "compare.md").write_text("my own compare\n")
    (out / "notes.txt").write_text("notes\n")
    err = error_of(capsys, tmp_path / "a", "--resamples", "0", "--out", out)
    assert "holds compare.md, which no comparison wrote there" in err
    assert (out / "compare.md").read_text() == "my own compare\n"
    (out / "compare.md").unlink()  # notes alone: written beside them, kept
    main([str(tmp_path / "a"), "--resamples", "0", "--out", str(out)])
    main([str(tmp_path / "a"), "--resamples", "0", "--out", str(out)])  # its own: replaced
    assert (out / "notes.txt").read_text() == "notes\n" and (out / "compare.json").is_file()
    assert "not recomputed from its .hyp (--resamples 0)" in (out / "compare.md").read_text()


def test_another_search_under_the_name_or_an_override_is_refused(tmp_path, toy_validation, capsys):
    """The name says the beam; an inference-only position override is a search of its own."""
    base = make_run(tmp_path / "a", "SinusoidalPositionEncoding", 1, toy_validation)[0]
    other = make_run(tmp_path / "a", "LearnedPositionEncoding", 1, toy_validation)[0]
    out = tmp_path / "o"
    result = main([str(tmp_path / "a"), "--resamples", "0", "--out", str(out)])
    assert result["search"]["position_override"] == {}
    assert "Search: ours engine, beam None" in (out / "compare.md").read_text()
    assert ", fp32 search" in (out / "compare.md").read_text()
    path = other / "eval" / "validation-last-beam4.json"
    scores = json.loads(path.read_text())
    path.write_text(json.dumps(scores | {"position_override": {"scaling": "ntk", "factor": 2}}))
    err = error_of(capsys, tmp_path / "a", "--resamples", "0", "--out", tmp_path / "o2")
    assert "different search settings" in err and not (tmp_path / "o2").exists()
    for run in (base, other):
        path = run / "eval" / "validation-last-beam4.json"
        path.write_text(
            json.dumps(json.loads(path.read_text()) | {"beam": 1, "position_override": {}})
        )
    err = error_of(capsys, tmp_path / "a", "--resamples", "0", "--out", tmp_path / "o3")
    assert "searched with beam 1, not the beam 4 its name says" in err


def test_evaluations_against_edited_references_are_not_pooled(tmp_path, toy_validation, capsys):
    """The path or split says which file; the hash says which lines (was: pooled by path)."""
    runs = [
        make_run(tmp_path / "a", position, 1, toy_validation)[0]
        for position in ("SinusoidalPositionEncoding", "LearnedPositionEncoding")
    ]
    for run, refs in zip(runs, ("x", "y"), strict=True):
        path = run / "eval" / "validation-last-beam4.json"
        scores = json.loads(path.read_text()) | {"references_sha256": refs * 64}
        path.write_text(json.dumps(scores))
    err = error_of(capsys, tmp_path / "a", "--resamples", "0", "--out", tmp_path / "o")
    assert f"other reference lines (references_sha256: {'y' * 64} vs {'x' * 64})" in err


def test_an_evaluation_is_current_while_the_checkpoint_it_scored_is_unchanged(
    tmp_path, toy_validation, capsys
):
    """best.pt older than the last step is current (was: stale for ever); a changed one is not;
    a step past the run's last is another run's."""
    name = "validation-best-beam4"
    runs = [
        make_run(tmp_path / "a", position, 1, toy_validation, name=name, eval_step=300)[0]
        for position in ("SinusoidalPositionEncoding", "LearnedPositionEncoding")
    ]
    for run in runs:
        best = run / "checkpoints" / "best.pt"
        best.parent.mkdir()
        best.write_bytes(b"weights of step 300")
        path = run / "eval" / f"{name}.json"
        scores = json.loads(path.read_text())
        scores |= {"checkpoint_file": str(best), "checkpoint_sha256": sha256(best.read_bytes())}
        path.write_text(json.dumps(scores))
    result = main(
        [str(tmp_path / "a"), "--eval", name, "--resamples", "0", "--out", str(tmp_path / "o")]
    )
    assert not any(r["stale"] for r in result["runs"])  # step 300 of a 401-step run, current
    (runs[1] / "checkpoints" / "best.pt").write_bytes(b"a later best")
    err = error_of(capsys, tmp_path / "a", "--eval", name, "--resamples", "0")
    assert "best.pt with sha256" in err and "no longer has" in err and "--allow-stale" in err
    path = runs[1] / "eval" / f"{name}.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"step": 500}))
    err = error_of(capsys, tmp_path / "a", "--eval", name, "--resamples", "0")
    assert "scored step 500 but" in err and "another run's checkpoint" in err


def sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_the_bootstrap_reads_the_runs_own_hypotheses_and_checks_them(
    tmp_path, toy_validation, capsys
):
    """A moved run reads its own .hyp, never the path its JSON names; a truncated or edited
    one is refused (was: the original folder's file was read, or an edit went unseen)."""
    runs = [
        make_run(tmp_path / "a", position, 1, toy_validation)[0]
        for position in ("SinusoidalPositionEncoding", "LearnedPositionEncoding")
    ]
    hyp = runs[1] / "eval" / "validation-last-beam4.hyp"
    path = hyp.with_suffix(".json")
    scores = json.loads(path.read_text())
    lines = hyp.read_text().split("\n")[:-1]
    scores |= {"hypotheses": "/elsewhere/x.hyp", "hypotheses_sha256": lines_sha256(lines)}
    path.write_text(json.dumps(scores))
    args = [tmp_path / "a", "--resamples", "10", "--out", tmp_path / "o"]
    main([*map(str, args)])  # its own copy, checked: accepted
    hyp.write_text("".join(line + "\n" for line in reversed(lines)))
    assert "another sha256" in error_of(capsys, *args)
    hyp.write_text("".join(line + "\n" for line in lines[:-1]))
    assert f"({len(lines) - 1} lines, {len(lines)} scored" in error_of(capsys, *args)
    hyp.unlink()
    assert "is missing" in error_of(capsys, *args)


TABLE3 = "validation-last-beam4"


def test_evaluations_of_different_checkpoints_under_one_name_are_not_pooled(
    tmp_path, toy_validation, capsys
):
    """Third outside probe 9-4: one seed's step-10 evaluation, named like the others' last-step
    ones, was pooled with them (every row shown at the run's last step)."""
    for position in ("SinusoidalPositionEncoding", "LearnedPositionEncoding"):
        for seed in (1, 2):
            run, _, scores, _ = make_run(tmp_path / "runs", position, seed, toy_validation)
            scores["checkpoint"] = "step_10" if seed == 2 else "last"
            (run / "eval" / f"{TABLE3}.json").write_text(json.dumps(scores))
    err = error_of(capsys, tmp_path / "runs", "--resamples", "0", "--out", tmp_path / "o")
    assert 'were scored with different checkpoints (checkpoint: "last" vs "step_10")' in err
    for path in (tmp_path / "runs").glob(f"*/eval/{TABLE3}.json"):  # probe d-2: one in bf16
        scores = json.loads(path.read_text()) | {"checkpoint": "last"}
        scores["precision"] = "bf16" if "seed=2" in str(path) else "fp32"
        path.write_text(json.dumps(scores))
    err = error_of(capsys, tmp_path / "runs", "--resamples", "0", "--out", tmp_path / "o")
    assert 'different search settings (precision: "fp32" vs "bf16")' in err  # q-27: "(absent)"
    for path in (tmp_path / "runs").glob(f"*/eval/{TABLE3}.json"):  # all bf16: said (d-6)
        path.write_text(json.dumps(json.loads(path.read_text()) | {"precision": "bf16"}))
    main([str(tmp_path / "runs"), "--resamples", "0", "--out", str(tmp_path / "bf16")])
    assert ", bf16 search" in (tmp_path / "bf16" / "compare.md").read_text()


def test_a_record_and_its_longer_training_are_one_run_and_a_record_is_not_scored(
    tmp_path, toy_validation, capsys
):
    """Third outside probe 6-25: a study's grid records given beside the finals trained from
    them were refused for a missing test evaluation, with advice (evaluate.py on a record) that
    cannot work, and no word that they are the same trainings."""
    run = make_run(tmp_path / "final", "SinusoidalPositionEncoding", 1, toy_validation)[0]
    make_run(tmp_path / "final", "LearnedPositionEncoding", 1, toy_validation)
    grid = tmp_path / "grid" / "seed-1"
    shutil.copytree(run, grid)
    shutil.rmtree(grid / "eval")
    metrics = json.loads((grid / "metrics.json").read_text()) | {"steps": 100}
    (grid / "metrics.json").write_text(json.dumps(metrics))  # the same run, a shorter budget
    args = ["--resamples", "0", "--out", tmp_path / "o"]
    err = error_of(capsys, tmp_path / "final", tmp_path / "grid", *args)
    assert f"{run} and {grid} are one training (run id " in err
    assert "trained to 100 and 401 steps): a run counts once" in err
    (grid / ".hydra" / "config.yaml").write_text(
        (grid / ".hydra" / "config.yaml").read_text().replace("seed: 1", "seed: 3")
    )
    err = error_of(capsys, tmp_path / "final", tmp_path / "grid", "--eval", TABLE3, *args)
    assert f"{grid}/eval/{TABLE3}.json is missing, and {grid} keeps no checkpoints to score" in err
    assert "(a study's record keeps its evaluations only: none)" in err
    assert "name one of those with --eval" in err and "evaluate.py" not in err


def test_links_to_run_folders_are_followed(tmp_path, toy_validation, capsys):
    """A folder of links to runs is searched through them, a link loop walked once; two links
    to one run are one run (was: no run directories, either way)."""
    runs = [
        make_run(tmp_path / "runs", position, 1, toy_validation)[0]
        for position in ("SinusoidalPositionEncoding", "LearnedPositionEncoding")
    ]
    for i, run in enumerate(runs):
        (tmp_path / "multi2" / f"r{i}").parent.mkdir(exist_ok=True)
        (tmp_path / "multi2" / f"r{i}").symlink_to(run, target_is_directory=True)
    (tmp_path / "multi2" / "loop").symlink_to(tmp_path / "multi2", target_is_directory=True)
    result = main([str(tmp_path / "multi2"), "--resamples", "0", "--out", str(tmp_path / "o")])
    assert [row["n"] for row in result["variants"]] == [1, 1]
    (tmp_path / "same").mkdir()
    for name in ("a", "b"):
        (tmp_path / "same" / name).symlink_to(runs[0], target_is_directory=True)
    err = error_of(capsys, tmp_path / "same", "--resamples", "0", "--out", tmp_path / "o2")
    assert "are one training (run id " in err and "pass one of them" in err


def scored_files(run, folder, toy_validation, by_content: bool = True) -> None:
    """Make run's evaluation one of src_file/ref_file copies in folder (as evaluate.py records
    them: absolute paths, no split; by_content: with the sha256 of the lines it scored)."""
    srcs, refs = toy_validation
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "a.en").write_text("".join(line + "\n" for line in srcs))
    (folder / "a.de").write_text("".join(line + "\n" for line in refs))
    path = run / "eval" / "validation-last-beam4.json"
    scores = json.loads(path.read_text()) | {
        "split": None,
        "src_file": str(folder / "a.en"),
        "ref_file": str(folder / "a.de"),
    }
    hashes = {"sources_sha256": lines_sha256(srcs), "references_sha256": lines_sha256(refs)}
    scores = scores | hashes if by_content else {k: v for k, v in scores.items() if k not in hashes}
    path.write_text(json.dumps(scores))


def test_one_corpus_at_two_paths_pools_by_content(tmp_path, toy_validation, capsys):
    """Byte-identical copies of the scored files pool (was: refused by path, the message cut
    off before the difference); evaluations without the sha256 still differ by path, named."""
    runs = [
        make_run(tmp_path / "a", position, 1, toy_validation)[0]
        for position in ("SinusoidalPositionEncoding", "LearnedPositionEncoding")
    ]
    for run, folder in zip(runs, ("p", "copy"), strict=True):
        scored_files(run, tmp_path / folder, toy_validation)
    result = main([str(tmp_path / "a"), "--resamples", "20", "--out", str(tmp_path / "o")])
    assert [row["n"] for row in result["variants"]] == [1, 1]
    assert result["differences"][0]["bootstrap"]["resamples"] == 20
    scored_files(runs[1], tmp_path / "copy", toy_validation, by_content=False)  # an older one
    err = error_of(capsys, tmp_path / "a", "--resamples", "0", "--out", tmp_path / "o2")
    copy, original = tmp_path / "copy" / "a.de", tmp_path / "p" / "a.de"
    assert f'(ref_file: "{copy}" vs "{original}")' in err
    assert "different corpus or evaluation splits" in err


def test_the_tokenizer_difference_is_named_in_full(tmp_path, capsys, toy_validation):
    make_run(tmp_path, "SinusoidalPositionEncoding", 1, toy_validation)
    make_run(tmp_path, "LearnedPositionEncoding", 1, toy_validation, tokenizer="cd" * 32)
    err = error_of(capsys, tmp_path, "--resamples", "0")
    assert f'(tokenizer_sha256: "{"cd" * 32}" vs "{"ab" * 32}")' in err


def test_refs_are_checked_against_the_lines_scored(tmp_path, toy_validation, capsys):
    """--refs byte-identical to what the evaluations scored is accepted; one with an edited
    line is refused, naming --refs and the sha256 (was: its line count alone was checked)."""
    runs = [
        make_run(tmp_path / "a", position, 1, toy_validation)[0]
        for position in ("SinusoidalPositionEncoding", "LearnedPositionEncoding")
    ]
    for run, folder in zip(runs, ("p", "copy"), strict=True):
        scored_files(run, tmp_path / folder, toy_validation)
    refs = tmp_path / "refs.de"
    shutil.copyfile(tmp_path / "p" / "a.de", refs)
    args = [tmp_path / "a", "--refs", refs, "--resamples", "20", "--out", tmp_path / "o"]
    main([*map(str, args)])
    lines = refs.read_text().split("\n")
    refs.write_text("\n".join(["edited", *lines[1:]]))
    err = error_of(capsys, *args[:-1], tmp_path / "o2")
    assert f"--refs {refs} holds other lines than" in err and "(references_sha256: " in err
    assert not (tmp_path / "o2").exists()
    refs.write_text("\n".join([*lines[:2], "too long", *lines[2:]]))  # as long_inputs=skip left
    for run in runs:
        path = run / "eval" / "validation-last-beam4.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"skipped_indices": [2]}))
    main([*map(str, args)])


def test_a_comparison_killed_while_writing_leaves_the_earlier_one_whole(
    tmp_path, toy_validation, monkeypatch
):
    """The tables and figures of one comparison, or of the earlier one, never mixed (was: a kill
    after compare.json left the earlier figures beside the new tables)."""
    import evaluation.compare

    for position in VARIANT:
        make_run(tmp_path / "runs", position, 1, toy_validation)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    main([str(tmp_path / "runs"), "--resamples", "0", "--out", str(out)])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for position in VARIANT:  # a second seed: the next comparison differs in every file
        make_run(tmp_path / "runs", position, 2, toy_validation)

    def killed(*args):
        raise KeyboardInterrupt  # after compare.md and compare.json were written

    monkeypatch.setattr(evaluation.compare, "plot_dev_ppl_curves", killed)
    with pytest.raises(KeyboardInterrupt):
        main([str(tmp_path / "runs"), "--resamples", "0", "--out", str(out)])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "runs"]  # no staging left
    monkeypatch.undo()
    result = main([str(tmp_path / "runs"), "--resamples", "0", "--out", str(out)])
    assert json.loads((out / "compare.json").read_text())["runs"] == result["runs"]
    assert (out / "notes.txt").read_text() == "mine\n"


def test_a_score_edited_in_its_json_is_refused_by_its_own_translations(
    tmp_path, toy_validation, capsys
):
    """BLEU edited in the eval JSON (was: pooled, beside a bootstrap of the real translations
    saying +0.00); with --resamples 0 nothing reads the translations, as documented."""
    runs = [
        make_run(tmp_path / "a", position, 1, toy_validation)[0]
        for position in ("SinusoidalPositionEncoding", "LearnedPositionEncoding")
    ]
    path = runs[1] / "eval" / "validation-last-beam4.json"
    scores = json.loads(path.read_text())
    path.write_text(json.dumps(scores | {"bleu": scores["bleu"] + 17.5}))
    err = error_of(capsys, tmp_path / "a", "--resamples", "10", "--out", tmp_path / "o")
    assert f"{path} records BLEU {scores['bleu'] + 17.5}" in err and "score the run again" in err
    assert not (tmp_path / "o").exists()
