"""Table 3-style comparison of runs: discovery, grouping by position variant, tables, numbers.

Finds run directories (those holding metrics.json), groups them by position variant, and
summarizes each variant over its seeds beside the paper's numbers. Each variant is compared with
the baseline (sinusoidal) two ways: across seeds (a t-interval over per-seed BLEU, paired by
seed when both variants ran the same seeds) and by sacreBLEU's paired bootstrap on one seed pair;
each of the two is one family of tests, its p-values Holm-adjusted (``p_holm``).
``compare`` writes compare.md, compare.json and three plots (evaluation/plots.py).
"""

import functools
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import sacrebleu
from omegaconf import OmegaConf

from common.errors import UserError
from common.files import read_json, replaced_folder, write_json, write_text
from data.corpus import load_split, loads_multi30k, read_lines
from evaluation.evaluate import EVAL_NAME, evaluate_run
from evaluation.plots import plot_bleu_by_length, plot_bleu_by_variant, plot_dev_ppl_curves
from evaluation.statistics import (
    add_holm,
    difference_over_seeds,
    mean,
    paired_bootstrap,
    stdev,
    welch_interval,
)
from runs.events import missing_launch_files, read_scalars
from runs.resume import flatten, setting_differences
from runs.run import Run, RunFileError, lines_sha256, search_settings

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
POSITION_CONFIGS = ROOT / "configs" / "position"
# Vaswani et al. 2017, Table 3: (dev PPL, BLEU) of "base" (sinusoids) and row (E) (learned).
PAPER = {"sinusoidal": (4.92, 25.8), "learned": (4.92, 25.7)}
PAPER_NOTE = (
    "Paper: Vaswani et al. 2017, Table 3 (base = sinusoidal, row E = learned), single runs on "
    "newstest2013 without checkpoint averaging. Its BLEU is tokenized, compound-split BLEU: "
    "compare it with the tok. BLEU column, not with sacreBLEU."
)
METRIC_KEYS = ("position", "seed", "dev_ppl", "parameters", "steps", "wall_seconds")
# Table 3's evaluation (validation = newstest2013, last checkpoint, beam 4): what --score makes
# when no --eval is named, and what trainer.evaluate_at_end writes.
TABLE3_EVAL = "validation-last-beam4"


# a run's budget: a resume may change it, but seeds trained to two budgets are not one row
BUDGETS = ("trainer.max_steps", "trainer.max_epochs", "trainer.max_minutes")


class CompareError(UserError):
    """A problem with the runs given to compare, stated in one line."""


@dataclass
class ScoredRun:
    """One finished training run and the evaluation chosen for it (stale: older than the run)."""

    run: Run
    variant: str
    seed: int
    metrics: dict
    scores: dict
    stale: bool = False

    @property
    def path(self) -> Path:
        return self.run.path


def path_from_cwd(path: Path) -> str:
    """path relative to the working directory where it lies inside it (a report that travels)."""
    resolved, here = Path(path).resolve(), Path.cwd()
    return str(resolved.relative_to(here)) if resolved.is_relative_to(here) else str(path)


def find_run_dirs(paths: list[Path]) -> list[Path]:
    """Run directories (with metrics.json) among paths and below them, links followed (a link
    back to a folder above it is a loop, not walked again); unfinished runs fail."""
    found = []
    for path in paths:
        if not path.is_dir():
            raise CompareError(f"{path} is not a directory: pass a multirun folder or run folders")
        above: dict[str, frozenset[Path]] = {str(path): frozenset()}  # resolved folders above
        for folder, subdirs, _ in os.walk(path, followlinks=True):
            here, real = Run(folder), Path(folder).resolve()
            if real in above[folder]:  # a link loop: this folder is being walked already
                subdirs.clear()
            elif here.is_finished():
                found.append(here.path)
                subdirs.clear()
            elif here.is_run():
                raise CompareError(
                    f"{here.path} has no metrics.json: its training has not finished (see its "
                    "train.log); wait for it or pass only finished run directories"
                )
            else:
                subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
                above.update({os.path.join(folder, d): above[folder] | {real} for d in subdirs})
    if not found:
        raise CompareError(
            f"no run directories (folders with metrics.json) under {', '.join(map(str, paths))}"
        )
    return sorted(found)  # a folder found twice stays twice: check_distinct_trainings refuses it


def variant_names() -> dict[str, str]:
    """Position class name -> config name, read from configs/position/*.yaml."""
    names = {}
    for path in sorted(POSITION_CONFIGS.glob("*.yaml")):
        target = OmegaConf.load(path).get("_target_")
        if target:
            names[str(target).rsplit(".", 1)[-1]] = path.stem
    return names


def eval_path(run_dir: Path, eval_name: str | None) -> Path:
    """The eval JSON named eval_name, or the newest eval/validation*.json."""
    if eval_name:
        run = Run(run_dir)
        path = run.evaluation_file(eval_name)
        if not path.is_file() and not run.has_checkpoints():  # a record: nothing to score
            kept = ", ".join(run.evaluation_names(".json")) or "none"
            raise CompareError(
                f"{path} is missing, and {run_dir} keeps no checkpoints to score (a study's "
                f"record keeps its evaluations only: {kept}): name one of those with --eval, "
                "or leave that folder out"
            )
        if not path.is_file():
            raise CompareError(
                f"{path} is missing: create it with `python evaluate.py run_dir={run_dir} "
                f"name={eval_name}` (with the split or files it should score), or pass --score"
            )
        return path
    newest = Run(run_dir).newest_evaluation_file("validation")
    if newest is None:
        raise CompareError(
            f"{run_dir} has no eval/validation*.json: pass --score to create {TABLE3_EVAL} "
            f"(newstest2013, beam 4), run `python evaluate.py run_dir={run_dir}`, or name "
            "another with --eval"
        )
    return newest


def evaluation_overrides(eval_name: str) -> list[str]:
    """The evaluate.py overrides that write eval/<eval_name>.json (<split>-<tag>-beam<k>)."""
    match = EVAL_NAME.match(eval_name)
    if not match or match["more"]:  # an override or another engine: evaluate.py makes those
        raise CompareError(
            f"--score cannot make the evaluation {eval_name!r}: it makes names like "
            f"{TABLE3_EVAL} (<split>-<last|best|avgN>-beam<k>); create it with evaluate.py"
        )
    tag = match["tag"]
    checkpoint = f"avg:{tag[3:]}" if tag.startswith("avg") else tag
    return [
        f"split={match['split']}",
        f"checkpoint={checkpoint}",
        f"beam={match['beam']}",
        f"name={eval_name}",
    ]


def score_run(run_dir: Path, eval_name: str) -> None:
    """Write run_dir's eval/<eval_name>.json as evaluate.py would, in this process."""
    overrides = evaluation_overrides(eval_name)
    print(
        f"scoring {run_dir}: python evaluate.py run_dir={run_dir.resolve()} {' '.join(overrides)}",
        file=sys.stderr,
    )
    try:
        evaluate_run(run_dir.resolve(), *overrides)
    except UserError as e:
        raise CompareError(f"evaluating {run_dir} failed: {e}; fix that run or leave it out") from e


def read_run(
    run_dir: Path,
    eval_name: str | None,
    names: dict[str, str],
    allow_stale: bool = False,
    score: bool = False,
) -> ScoredRun:
    """A run's metrics.json and chosen eval JSON, checked for the fields the table needs.

    score: an evaluation that is missing or not current (runs.Run.is_current) is made first
    (evaluate.py; eval_name, or Table 3's validation-last-beam4).
    """
    run = Run(run_dir)
    metrics = run.metrics()
    missing = [key for key in METRIC_KEYS if key not in metrics]
    if missing:
        raise CompareError(
            f"{run.metrics_file} lacks {', '.join(missing)}: was it written by train.py?"
        )
    if score:  # another run's evaluation under this name is refused, never replaced
        eval_name = eval_name or TABLE3_EVAL
        scored = run.evaluation(eval_name)
        if scored is not None:
            check_scored_this_run(run_dir, run.evaluation_file(eval_name), metrics, scored)
        if scored is None or not run.is_current(scored, metrics["steps"]):
            score_run(run_dir, eval_name)
    path = eval_path(run_dir, eval_name)
    scores = read_json(path)
    if "bleu" not in scores:
        raise CompareError(
            f"{path} has no BLEU (it was made without references): evaluate a split, or pass "
            "ref_file=, and name that evaluation with --eval"
        )
    check_scored_this_run(run_dir, path, metrics, scores)
    stale = check_fresh(run, path, metrics, scores, allow_stale)
    variant = run.variant(metrics, scores, names)
    return ScoredRun(run, variant, int(metrics["seed"]), metrics, scores, stale)


def check_scored_this_run(run_dir: Path, path: Path, metrics: dict, scores: dict) -> None:
    """CompareError unless the evaluation scored this run's weights (checkpoint, position, seed).

    Evaluations written before the checkpoint's identity was recorded are checked on position.
    """
    fix = (
        f"evaluate this run's own checkpoint (`python evaluate.py run_dir={run_dir}`, or pass "
        "--score after removing that file) or name another evaluation with --eval"
    )
    if scores.get("own_checkpoint") is False:
        raise CompareError(
            f"{path} scored another run's checkpoint ({scores.get('checkpoint_file')}), not "
            f"{run_dir}'s: {fix}"
        )
    position = scores.get("position")
    accepted = {metrics.get("position_choice"), metrics.get("position")} - {None}
    if position and accepted and position not in accepted:
        raise CompareError(
            f"{path} scored a model with position encoding {position} but {run_dir} trained "
            f"{' / '.join(sorted(map(str, accepted)))}: {fix}"
        )
    step, last = scores.get("step"), metrics.get("steps")
    if step is not None and last is not None and int(step) > int(last):
        raise CompareError(
            f"{path} scored step {step} but {run_dir} trained to step {last}: it scored "
            f"another run's checkpoint; {fix}"
        )
    seed = scores.get("checkpoint_seed")
    if seed is not None and int(seed) != int(metrics["seed"]):
        raise CompareError(
            f"{path} scored a checkpoint of seed {seed} but {run_dir} trained seed "
            f"{metrics['seed']}: {fix}"
        )


def check_fresh(run: Run, path: Path, metrics: dict, scores: dict, allow_stale: bool) -> bool:
    """Whether an evaluation is stale: not current by runs.Run.is_current (the weights it
    scored are no longer the run's). A stale evaluation (or one that records no step: written
    before evaluations did) is a CompareError, or with allow_stale a flagged row.
    """
    step, last, run_dir = scores.get("step"), metrics.get("steps"), run.path
    if run.is_current(scores, last):
        return False
    if allow_stale:
        return True
    name, recorded = scores.get("checkpoint_file"), scores.get("checkpoint_sha256")
    kept = run.checkpoints / Path(str(name)).name
    if name and recorded and kept.is_file():  # the file is there, its content is not
        age = f"scored {kept} with sha256 {str(recorded)[:12]}, which that file no longer has,"
    elif step is not None:
        age = f"scored step {step}"
    else:
        age = "records no checkpoint step"
    raise CompareError(
        f"{path} {age} but {run_dir} trained to step {last}: pass --score to re-evaluate it "
        f"(or run `python evaluate.py run_dir={run_dir} name={scores.get('name')}` with its "
        "split or files), or --allow-stale to compare it flagged"
    )


def lr_scale(run: ScoredRun) -> float | None:
    """The run's optim.lr_scale: from metrics.json, else its stored config (None: neither)."""
    if run.metrics.get("lr_scale") is not None:
        return float(run.metrics["lr_scale"])
    value = run.run.setting("optim.lr_scale")
    return None if value is None else float(value)


# what an evaluation records of the lines it scored, by content (written since they were kept)
LINE_KEYS = (("sources_sha256", "source"), ("references_sha256", "reference"))


def scored_by_content(*runs: ScoredRun) -> bool:
    """Whether every evaluation records the sha256 of the sources and references it scored."""
    return all(run.scores.get(key) for run in runs for key, _ in LINE_KEYS)


def corpus_identity(run: ScoredRun, by_content: bool = False) -> dict:
    """What a run's evaluation scored: the corpus, direction and (unless by_content: the lines'
    sha256 say which, check_same_lines) the split or reference file by name.

    Multi30k is one corpus from any source (the hub, a local copy in its layout or as text:
    data.corpus.load_multi30k gives the same pairs), as it is for resume and the records."""
    data = run.scores.get("data") or {}
    corpus = {
        "corpus": "Multi30k" if loads_multi30k(data) else data.get("corpus"),
        "direction": [data.get("src_lang"), data.get("tgt_lang")],
    }
    if not by_content:  # evaluations written before the sha256 were kept: by name
        corpus |= {"split": run.scores.get("split"), "ref_file": run.scores.get("ref_file")}
    return corpus


def differences(a: dict, b: dict) -> list[str]:
    """'key: a vs b' for each (dotted) key whose values differ, both values in full."""
    a, b = flatten(a), flatten(b)
    return [
        f"{key}: {shown(a, key)} vs {shown(b, key)}"
        for key in sorted(a.keys() | b.keys())
        if shown(a, key) != shown(b, key)
    ]


def shown(values: dict, key: str) -> str:
    """values[key] as JSON, or (absent)."""
    return json.dumps(values[key], default=str, sort_keys=True) if key in values else "(absent)"


def stated_search(scores: dict) -> dict:
    """search_settings with fp32, which they leave unsaid, said: a message names both values
    (probe q-27: a recorded fp32 was shown as "(absent)")."""
    return {"precision": "fp32"} | search_settings(scores)


def check_poolable(runs: list[ScoredRun]) -> None:
    """CompareError unless every run was scored on one corpus's lines with one tokenizer and one
    search; the message names each differing setting with both values.

    Perplexity per subword and BLEU on different sentences, or BLEU of different searches or
    checkpoints (one run's last step beside another's step 10), do not compare: such runs are
    never pooled into one table. The lines are told by content
    where both evaluations record their sha256 (a copy of the files at another path is one
    corpus), by the split's or file's name where one does not.
    """
    first = runs[0]
    for run in runs[1:]:
        by_content = scored_by_content(first, run)
        tokenizers = [{"tokenizer_sha256": r.scores.get("tokenizer_sha256")} for r in (first, run)]
        checkpoints = [{"checkpoint": r.scores.get("checkpoint")} for r in (first, run)]
        for what, a, b in (
            ("corpus or evaluation split", *(corpus_identity(r, by_content) for r in (first, run))),
            ("tokenizer", *tokenizers),
            ("search setting", *(stated_search(r.scores) for r in (first, run))),
            ("checkpoint", *checkpoints),  # last, best, avgN or a step file: one for all (9-4)
        ):
            changed = differences(a, b)
            if changed:
                raise CompareError(
                    f"{first.path} and {run.path} were scored with different {what}s "
                    f"({'; '.join(changed)}): compare runs of one corpus, tokenizer, search and "
                    "checkpoint"
                )
        check_same_lines(first, run)


def check_same_lines(first: ScoredRun, run: ScoredRun) -> None:
    """CompareError where two evaluations scored other sources or references (same path or
    split, edited lines); evaluations written before the hashes were kept are not checked."""
    for key, what in LINE_KEYS:
        a, b = first.scores.get(key), run.scores.get(key)
        if None not in (a, b) and a != b:
            raise CompareError(
                f"{first.path} and {run.path} were scored against other {what} lines ({key}: "
                f"{a} vs {b}): evaluate them again on one copy of the same lines"
            )


def seed_difference(baseline: list[ScoredRun], other: list[ScoredRun]) -> dict:
    """Mean BLEU difference other - baseline with a 95% t-interval over seeds.

    Paired by seed over the seeds both sides ran (at least two), else Welch over all runs; a
    side with two runs of one seed cannot be paired.
    """
    base_bleu = {r.seed: r.scores["bleu"] for r in baseline}
    other_bleu = {r.seed: r.scores["bleu"] for r in other}
    if len(base_bleu) == len(baseline) and len(other_bleu) == len(other):
        return difference_over_seeds(base_bleu, other_bleu)
    seeds = sorted({r.seed for r in baseline} | {r.seed for r in other})
    a, b = [r.scores["bleu"] for r in baseline], [r.scores["bleu"] for r in other]
    return {"method": "Welch t (unpaired seeds)", "seeds": seeds, **welch_interval(a, b)}


def hypotheses(run: ScoredRun) -> list[str]:
    """The hypotheses of a run's evaluation from the run's own eval/<name>.hyp (never the path
    its JSON names: a moved or copied run reads its own), one line per sentence, checked
    against the JSON's count and, where kept, its sha256."""
    fix = f"rerun `python evaluate.py run_dir={run.path}` or pass --resamples 0"
    try:
        return run.run.hypotheses(run.scores, fix)
    except RunFileError as e:
        raise CompareError(str(e)) from None


def references(run: ScoredRun, refs_file: Path | None) -> list[str]:
    """References for a run's evaluation: --refs, its ref_file, or its split from the config it
    recorded (else the run's stored config), checked against what it scored (check_references)."""
    if refs_file is not None:
        return file_references(run, refs_file, "--refs")
    if run.scores.get("ref_file"):  # an evaluation of files records them (absolute)
        return file_references(run, Path(run.scores["ref_file"]), "the ref_file")
    if run.scores.get("split") and run.scores.get("data"):  # the corpus config it scored
        data_cfg, split = run.scores["data"], run.scores["split"]
    else:  # evaluations that recorded neither
        split = str(run.scores["name"]).split("-", 1)[0]
        if not run.run.has_config():
            raise CompareError(
                f"{run.path} has no stored training config to find the references of "
                f"{run.scores['name']}: pass --refs FILE (one reference a line) or --resamples 0"
            )
        data_cfg = run.run.resolved_config()["data"]
    try:
        refs = split_references(json.dumps(data_cfg, sort_keys=True), split)
    except (UserError, ValueError) as e:
        raise CompareError(
            f"cannot load the references of {run.scores['name']} (split {split!r}) for "
            f"{run.path}: {e}; pass --refs FILE or --resamples 0"
        ) from e
    return check_references(run, refs, f"split {split!r}")


@functools.lru_cache(maxsize=8)
def split_references(data_json: str, split: str) -> list[str]:
    """The target side of a corpus split (data config as JSON), loaded once per comparison."""
    return list(load_split(json.loads(data_json), split)["tgt"])


def check_scores_from_hypotheses(runs: list[ScoredRun], refs_file: Path | None) -> None:
    """CompareError unless each run's BLEU and chrF are sacreBLEU's on its own checked .hyp
    against the references it scored: a score edited in its JSON is never pooled."""
    for run in runs:
        hyps, refs = hypotheses(run), references(run, refs_file)
        bleu = round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
        chrf = round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2)
        recorded = (run.scores.get("bleu"), run.scores.get("chrf", chrf))
        if recorded != (bleu, chrf):
            raise CompareError(
                f"{run.run.evaluation_file(run.scores['name'])} records BLEU {recorded[0]} and "
                f"chrF {recorded[1]}, but its translations score {bleu} and {chrf} against the "
                "references it scored: the JSON was edited or its .hyp replaced; score the run "
                "again (--score after deleting that evaluation)"
            )


def file_references(run: ScoredRun, path: Path, named: str) -> list[str]:
    """The references in a file (--refs, or the ref_file an evaluation recorded), read as
    evaluate.py reads them and checked against what the evaluation scored."""
    if not path.is_file():
        raise CompareError(f"{named} {path} is not a file: give the references, one a line")
    try:
        refs = read_lines(path, named)
    except UserError as e:
        raise CompareError(f"{e}; pass the references as UTF-8 text, one a line") from None
    return check_references(run, refs, f"{named} {path}")


def check_references(run: ScoredRun, refs: list[str], where: str) -> list[str]:
    """refs without the lines the evaluation skipped (skipped_indices), CompareError unless they
    are as many as its hypotheses and, where it kept their sha256, the lines it scored."""
    scored, skipped = len(hypotheses(run)), run.scores.get("skipped_indices") or []
    if skipped and len(refs) == scored + len(skipped):  # the whole file, as evaluate.py read it
        left_out = set(skipped)
        refs = [ref for i, ref in enumerate(refs) if i not in left_out]
    name = f"{run.path}'s {run.scores['name']}"
    if len(refs) != scored:
        raise CompareError(
            f"{where} has {len(refs)} lines but {name} has {scored} hypotheses: pass the "
            "references of those sentences, one a line"
        )
    kept = run.scores.get("references_sha256")
    if kept is not None and lines_sha256(refs) != kept:
        raise CompareError(
            f"{where} holds other lines than {name} scored against (references_sha256: "
            f"{lines_sha256(refs)} vs {kept}): pass --refs with the references it scored, "
            "or --resamples 0"
        )
    return refs


def seed_pair(baseline: list[ScoredRun], other: list[ScoredRun]) -> tuple[ScoredRun, ScoredRun]:
    """The runs of the lowest seed both variants share, else each variant's lowest seed."""
    shared = sorted({r.seed for r in baseline} & {r.seed for r in other})
    if shared:
        return (
            next(r for r in baseline if r.seed == shared[0]),
            next(r for r in other if r.seed == shared[0]),
        )
    return min(baseline, key=lambda r: r.seed), min(other, key=lambda r: r.seed)


def summarize(variant: str, runs: list[ScoredRun]) -> dict:
    """Table 3's columns for one variant: means and spreads over its seeds."""
    bleu = [r.scores["bleu"] for r in runs]
    ppl = [r.metrics["dev_ppl"] for r in runs if r.metrics["dev_ppl"] is not None]
    tok = [r.scores["tok_bleu"] for r in runs if r.scores.get("tok_bleu") is not None]
    chrf = [r.scores["chrf"] for r in runs if r.scores.get("chrf") is not None]
    buckets: dict[str, list[float]] = {}
    for run in runs:
        for row in run.scores.get("by_length", []):
            buckets.setdefault(row["bucket"], []).append(row["bleu"])
    paper_ppl, paper_bleu = PAPER.get(variant, (None, None))
    return {
        "variant": variant,
        "n": len(runs),
        "seeds": sorted(r.seed for r in runs),
        "dev_ppl_mean": mean(ppl),
        "dev_ppl_std": stdev(ppl),
        "bleu_mean": mean(bleu),
        "bleu_std": stdev(bleu),
        "tok_bleu_mean": mean(tok),
        "chrf_mean": mean(chrf),
        "parameters": round(mean([r.metrics["parameters"] for r in runs])),
        "steps": round(mean([r.metrics["steps"] for r in runs])),
        "hours": mean([r.metrics["wall_seconds"] / 3600 for r in runs]),
        "paper_ppl": paper_ppl,
        "paper_bleu": paper_bleu,
        "by_length": [
            {"bucket": b, "bleu_mean": mean(v), "bleu_std": stdev(v), "n_runs": len(v)}
            for b, v in sorted(buckets.items(), key=lambda item: int(item[0].split("-")[0]))
        ],
    }


def number(value: float | None, digits: int = 2, spread: float | None = None) -> str:
    """value (± spread) with fixed digits, or an em dash for none."""
    if value is None:
        return "—"
    return f"{value:.{digits}f}" + (f" ± {spread:.{digits}f}" if spread is not None else "")


def p_text(value: float | None, missing: str = "—") -> str:
    """A p-value with three digits, or what stands for none (an em dash; n/a: no spread)."""
    return missing if value is None else f"{value:.3f}"


def signed(value: float | None) -> str:
    """A difference with its sign, or an em dash."""
    return "—" if value is None else f"{value:+.2f}"


def variant_lines(result: dict) -> list[str]:
    """The Table 3 style table: one row per variant (mean ± std over seeds) beside the paper's."""
    lines = [
        "| variant | seeds (n) | dev PPL | BLEU (sacreBLEU) | tok. BLEU | params | steps | hours "
        "| paper PPL | paper BLEU |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["variants"]:
        seeds = ", ".join(map(str, row["seeds"]))
        stale = any(r["stale"] for r in result["runs"] if r["variant"] == row["variant"])
        lines.append(
            f"| {row['variant']}{' (stale)' if stale else ''} | {seeds} ({row['n']}) "
            f"| {number(row['dev_ppl_mean'], 2, row['dev_ppl_std'])} "
            f"| {number(row['bleu_mean'], 2, row['bleu_std'])} "
            f"| {number(row['tok_bleu_mean'])} | {row['parameters'] / 1e6:.1f}M "
            f"| {row['steps']} | {row['hours']:.2f} "
            f"| {number(row['paper_ppl'])} | {number(row['paper_bleu'], 1)} |"
        )
    return lines


def difference_lines(result: dict) -> list[str]:
    """The rows of the differences table: across seeds and, where run, the paired bootstrap."""
    lines = []
    for diff in result["differences"]:
        name = f"{diff['variant']} − {diff['baseline']}"
        seeds = diff["across_seeds"]
        df = f", df {seeds['df']}" if seeds["df"] is not None else ""
        lines.append(
            f"| {name} | {seeds['method']}{df} | {signed(seeds['difference'])} "
            f"| [{signed(seeds['low'])}, {signed(seeds['high'])}] | {p_text(seeds.get('p'))} "
            f"| {p_text(seeds.get('p_holm'))} | {', '.join(map(str, seeds['seeds']))} |"
        )
        boot = diff["bootstrap"]
        if boot is not None:
            lines.append(
                f"| {name} | paired bootstrap, {boot['resamples']} resamples "
                f"| {signed(boot['difference'])} | [{signed(boot['low'])}, {signed(boot['high'])}] "
                f"| {p_text(boot['p_value'], 'n/a')} | {p_text(boot.get('p_holm'), 'n/a')} "
                f"| {boot['seeds'][0]} vs {boot['seeds'][1]} |"
            )
    return lines


def search_line(search: dict) -> str:
    """'beam 4, length penalty 0.6, ...' of a comparison's search (one for every run)."""
    words = [
        f"{search.get('engine', 'ours')} engine",
        f"beam {search.get('beam')}",
        f"length penalty {search.get('lenpen')}",
        f"max length source + {search.get('max_len_b')}",
        f"min_len {search.get('min_len')}",
        f"{search.get('precision', 'fp32')} search",
    ]  # the precision said, fp32 too (probe d-6)
    override = search.get("position_override")
    if override:
        words.append("position override " + ", ".join(f"{k}={v}" for k, v in override.items()))
    return ", ".join(words)


def markdown(result: dict) -> str:
    """compare.md: the Table 3 style table, its notes, and the differences to the baseline."""
    lines = [f"# Position encodings compared ({result['eval']})", "", *variant_lines(result)]
    lines += [
        "",
        f"Search: {search_line(result.get('search') or {})}.",
        "",
        f"Ours: eval/{result['eval']}.json of each run ({result['signature']}); dev PPL from "
        "metrics.json (per subword, teacher-forced, last step); ± is the standard deviation "
        "over seeds."
        + (
            ""
            if result.get("scores_checked", True)
            else " The scores are as each eval JSON records them, not recomputed from its .hyp "
            "(--resamples 0)."
        ),
        PAPER_NOTE,
    ]
    if any(r["stale"] for r in result["runs"]):
        lines += [
            "",
            "(stale): at least one run's evaluation scored an older checkpoint than its last "
            "step (--allow-stale); see eval_step and steps in compare.json.",
        ]
    if not result["differences"] and len(result["variants"]) > 1:
        lines += ["", f"No {result['baseline']} runs: no differences to a baseline (--baseline)."]
    if result["differences"]:
        lines += [
            "",
            f"## BLEU differences to {result['baseline']}",
            "",
            "| comparison | method | Δ BLEU | 95% interval | p | p (Holm) | seeds |",
            "|---|---|---|---|---|---|---|",
            *difference_lines(result),
            "",
            "p (Holm): Holm's adjustment within each family of rows (the across-seed rows; the "
            "bootstrap rows), so a family's p-values hold together at the 5% level.",
        ]
    return "\n".join(lines) + "\n"


def dev_ppl_curve(run_dir: Path) -> list[tuple[int, float]]:
    """(step, dev PPL) from a run's tensorboard events; a resumed step keeps its last value. A
    launch whose recorded events file is gone is left out, and said."""
    for name in missing_launch_files(run_dir):
        log.warning(
            f"warning: {run_dir}: the events file its launch recorded ({name}) is missing: its "
            "dev PPL curve lacks that launch"
        )
    return sorted(read_scalars(run_dir).get("dev/ppl", {}).items())


def read_runs(
    paths: list[Path], eval_name: str | None, allow_stale: bool, score: bool
) -> tuple[list[ScoredRun], str]:
    """The runs under paths and the one evaluation that scored them all; stale ones warned of."""
    names = variant_names()
    run_dirs = find_run_dirs(paths)
    check_distinct_trainings([Run(d) for d in run_dirs])  # before any is read or scored
    runs = [read_run(d, eval_name, names, allow_stale, score) for d in run_dirs]
    used = sorted({str(r.scores["name"]) for r in runs})
    if len(used) > 1:
        raise CompareError(
            f"the runs were scored by different evaluations ({', '.join(used)}): "
            "name one for all with --eval NAME"
        )
    check_poolable(runs)
    check_distinct(runs)
    check_named_search(runs[0], used[0])
    for run in runs:
        if run.stale:
            log.warning(
                f"warning: {run.path}: its {run.scores['name']} scored step "
                f"{run.scores.get('step')}, the run trained to {run.metrics['steps']} (stale, "
                "flagged in the table)"
            )
    return runs, used[0]


def check_named_search(run: ScoredRun, name: str) -> None:
    """CompareError where an evaluation's name says another beam than it searched with (one
    written under a chosen name before evaluate.py refused that)."""
    said, beam = EVAL_NAME.match(name), run.scores.get("beam")  # None: written before it was kept
    if said and beam is not None and int(said["beam"]) != beam:
        raise CompareError(
            f"{run.run.evaluation_file(name)} searched with beam {run.scores.get('beam')}, not the "
            f"beam {said['beam']} its name says: evaluate again without name= (or pass --eval "
            "the evaluation you mean)"
        )


def check_distinct_trainings(runs: list[Run]) -> None:
    """CompareError where one training is given twice: by a path and a link, a copied folder,
    or the same settings, data and seed trained to two budgets (one run id, runs.Run.identity:
    a study's grid record and the final trained from it). Pooled, they would count as two seeds."""
    by_id: dict[str, Run] = {}
    for run in runs:
        other = by_id.setdefault(run.identity() or str(run.path.resolve()), run)
        if other is not run and other.path == run.path:
            raise CompareError(f"{run.path} is given twice: a run counts once; pass it once")
        if other is not run:
            steps = sorted({r.metrics().get("steps") for r in (other, run)}, key=str)
            raise CompareError(
                f"{other.path} and {run.path} are one training (run id {run.identity()}: the "
                f"same settings, data and seed, trained to {' and '.join(map(str, steps))} "
                "steps): a run counts once; pass one of them"
            )


def check_distinct(runs: list[ScoredRun]) -> None:
    """CompareError where a variant holds a seed twice: pooled, they would count as two seeds
    (one training given twice: check_distinct_trainings)."""
    seen: dict[tuple[str, int], ScoredRun] = {}
    for run in runs:
        other = seen.setdefault((run.variant, run.seed), run)
        if other is not run:
            same = "one folder" if other.path.resolve() == run.path.resolve() else "two folders"
            raise CompareError(
                f"{other.path} and {run.path} are both {run.variant} seed {run.seed} ({same}): "
                "a seed counts once; pass one of them"
            )


def training_config(run: ScoredRun) -> dict | None:
    """The run's resolved .hydra/config.yaml without its seed (None: it has none)."""
    if not run.run.has_config():
        return None
    config = run.run.resolved_config()
    config.pop("seed", None)
    return config


def check_one_setup(variant: str, runs: list[ScoredRun]) -> None:
    """CompareError where a variant's runs were trained with settings other than the seed that
    change the math (runs.resume's refused differences, e.g. another optim.lr_scale) or to
    another budget: their seeds are never pooled into one row."""
    configs = [(run, config) for run in runs if (config := training_config(run)) is not None]
    for run, config in configs[1:]:
        refused, allowed = setting_differences(configs[0][1], config)
        refused += [line for line in allowed if line.split(":")[0] in BUDGETS]
        if refused:
            raise CompareError(
                f"the {variant} runs {configs[0][0].path} and {run.path} were trained with other "
                f"settings ({'; '.join(refused)}): their seeds are not pooled; compare each "
                "setting in a call of its own"
            )


def group_runs(
    runs: list[ScoredRun], baseline: str
) -> tuple[dict[str, list[ScoredRun]], list[str]]:
    """Variant -> its runs by seed, and the variants baseline first; a variant whose runs differ
    in a setting other than the seed refused, mixed sizes warned of."""
    groups: dict[str, list[ScoredRun]] = {}
    for run in sorted(runs, key=lambda r: (r.variant, r.seed)):
        groups.setdefault(run.variant, []).append(run)
    for variant, its_runs in groups.items():
        check_one_setup(variant, its_runs)
    order = sorted(groups, key=lambda v: (v != baseline, v))
    for variant in order:
        sizes = sorted({r.metrics["parameters"] for r in groups[variant]})
        if len(sizes) > 1:
            log.warning(
                f"warning: the {variant} runs differ in parameter count ({sizes}): "
                "they may not share one setup"
            )
    return groups, order


def run_row(run: ScoredRun, curve: list[tuple[int, float]]) -> dict:
    """One run's line of compare.json: where, which variant and seed, its metrics and scores."""
    return {
        "run_dir": path_from_cwd(run.path),
        "variant": run.variant,
        "seed": run.seed,
        "stale": run.stale,
        "eval_step": run.scores.get("step"),
        "lr_scale": lr_scale(run),
        **{k: run.metrics[k] for k in ("dev_ppl", "parameters", "steps", "wall_seconds")},
        **{k: run.scores.get(k) for k in ("bleu", "tok_bleu", "chrf", "ppl", "n_sentences")},
        "dev_ppl_curve": [[step, value] for step, value in curve],
        "dev_ppl_curve_lacks": missing_launch_files(run.path),  # events files gone (8-4)
    }


def baseline_differences(
    groups: dict[str, list[ScoredRun]],
    order: list[str],
    baseline: str,
    resamples: int,
    refs_file: Path | None,
) -> list[dict]:
    """Each variant's BLEU difference to baseline: across seeds, and a paired bootstrap."""
    differences = []
    if baseline in groups:
        for variant in order[1:]:
            bootstrap = None
            if resamples > 0:
                base_run, other_run = seed_pair(groups[baseline], groups[variant])
                refs = references(base_run, refs_file)
                bootstrap = paired_bootstrap(
                    hypotheses(base_run), hypotheses(other_run), refs, resamples
                )
                bootstrap["seeds"] = [base_run.seed, other_run.seed]
            differences.append(
                {
                    "variant": variant,
                    "baseline": baseline,
                    "across_seeds": seed_difference(groups[baseline], groups[variant]),
                    "bootstrap": bootstrap,
                }
            )
    add_holm([diff["across_seeds"] for diff in differences])
    add_holm([diff["bootstrap"] for diff in differences], key="p_value")
    return differences


# What write_comparison writes into its folder (and so replaces there)
COMPARISON_FILES = (
    "compare.md", "compare.json", "bleu_by_variant.png", "bleu_by_length.png",
    "dev_ppl_curves.png",
)  # fmt: skip


def check_own_output(folder: Path) -> None:
    """CompareError where folder holds a file of a comparison's names that no comparison wrote
    (no compare.json of one beside it): a user's compare.md was replaced (probe 1-20)."""
    taken = [name for name in COMPARISON_FILES if (folder / name).exists()]
    if not taken:
        return
    try:
        ours = {"eval", "runs", "differences"} <= set(read_json(folder / "compare.json"))
    except (OSError, UserError):  # missing, or not a JSON object
        ours = False
    if not ours:
        raise CompareError(
            f"--out {folder} holds {taken[0]}, which no comparison wrote there (no compare.json "
            "of one beside it): pass a new folder, or move that file away"
        )


def write_comparison(result: dict, out_dir: Path) -> None:
    """compare.md, compare.json and the three plots into out_dir, swapped in as a whole: a kill
    leaves the earlier comparison there, never new tables beside old figures (other files of
    the folder stay)."""
    result["out_dir"] = str(out_dir)
    folder = Path(out_dir).resolve()
    check_own_output(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with replaced_folder(folder) as staging:
        write_text(staging / "compare.md", markdown(result))
        write_json(staging / "compare.json", result)
        plot_bleu_by_variant(result, staging / "bleu_by_variant.png")
        plot_bleu_by_length(result, staging / "bleu_by_length.png")
        plot_dev_ppl_curves(result, staging / "dev_ppl_curves.png")


def compare(
    paths: list[Path],
    eval_name: str | None = None,
    out_dir: Path | None = None,
    refs_file: Path | None = None,
    resamples: int = 1000,
    baseline: str = "sinusoidal",
    allow_stale: bool = False,
    score: bool = False,
) -> dict:
    """Compare the runs under paths; write the table, compare.json and plots into out_dir.

    out_dir None: <common parent of the runs>/compare. Returns every number (compare.json).
    Runs are grouped by the name their position variant was chosen by (position=rope_base500k
    is not rope); evaluations older than their run's last step are refused unless allow_stale;
    with score, runs lacking a fresh evaluation are scored first (evaluate.py).
    """
    if resamples < 0:  # a negative count would turn the bootstrap off without a word
        raise CompareError(f"--resamples {resamples}: pass 0 (no bootstrap) or more")
    if refs_file is not None and resamples == 0:  # read by the bootstrap alone
        raise CompareError(
            f"--refs {refs_file} is read by the paired bootstrap only, and --resamples 0 turns it "
            "off: leave --refs out, or pass --resamples N"
        )
    runs, used = read_runs(paths, eval_name, allow_stale, score)
    split_references.cache_clear()  # a corpus file may have changed since the last comparison
    if resamples > 0:  # the references are needed then: each score is checked from its .hyp
        check_scores_from_hypotheses(runs, refs_file)
    groups, order = group_runs(runs, baseline)
    curves = {r.path: dev_ppl_curve(r.path) for r in runs}
    result = {
        "eval": used,
        "search": search_settings(runs[0].scores),  # every run's (check_poolable)
        "signature": runs[0].scores.get("signature", ""),
        "baseline": baseline,
        "paper_note": PAPER_NOTE,
        "runs": [run_row(r, curves[r.path]) for r in runs],
        "variants": [summarize(v, groups[v]) for v in order],
        "differences": baseline_differences(groups, order, baseline, resamples, refs_file),
        "scores_checked": resamples > 0,  # each BLEU recomputed from its .hyp (probe 5-22)
    }
    if out_dir is None:
        out_dir = Path(os.path.commonpath([str(r.path.resolve().parent) for r in runs])) / "compare"
    write_comparison(result, out_dir)
    return result
