"""The position-encoding study: Table 3 (E) for every variant, length extrapolation with controls.

Three training conditions on Multi30k, one fixed step budget (configs/experiment/pe_study_*):
``all`` (every training length: Table 3 (E) extended, and the control), ``joined`` (about half
of the training lines join 2-4 consecutive pairs, Variš & Bojar 2021) and ``short`` (sources of
at most L = 10 words). ``run_study`` trains each (condition, variant, seed) into
``<root>/<condition>/<variant>/seed-<s>/`` with train.py's ``train`` (one thread a run, in this
process or, N at a time, one process each; a second call resumes unfinished runs and skips
finished ones), then scores each finished run once with evaluate.py's ``evaluate`` (beam 4,
alpha 0.6, last checkpoint, the precision the run trained in):

- ``test-last-beam4``: test_2016_flickr, the Table 3 evaluation (sacreBLEU, chrF, tok. BLEU);
- ``concat-<split>-k<k>``: the concatenation test, test and validation lines joined k = 1..4
  at a time, references joined the same way (data/concatenation.py); per k: BLEU, chrF, the
  brevity penalty, the hypothesis/reference length ratio and the number of lines;
- BLEU per source-length bucket (words, one bucket ending at L) on test + validation (k = 1).

Each run's numbers go to ``<run_dir>/study.json`` with the step they belong to; a run whose
study.json matches its final step is not scored again. A scored run's record (what the report
reads: its config, metrics, data.json, study.json, segments.json, the Table 3 evaluation with
its translations, train.log and tensorboard events; no checkpoints) is kept in the record
store, ``results/pe_study/runs/<condition>/<variant>/seed-<s>/``, which is committed: a run
recorded there is not trained again, even on a machine that lacks its run folder, and the
report can be rebuilt from the store alone. A record whose training config differs from the
one the study would train now is refused, each setting named, rather than mixed in.
``write_report`` turns every scored run into the tables, JSON and plots of ``results/<study>/``
(README "The study").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import sacrebleu
from omegaconf import DictConfig, OmegaConf

from data.concatenation import join_consecutive_lines, leftover_lines
from data.errors import UserError
from data.files import read_json, write_json, write_text
from evaluation.compare import PAPER, compare, hypotheses, read_run, references, variant_names
from evaluation.configs import compose_config
from evaluation.extrapolation import StudyError, position_variants
from evaluation.statistics import (
    add_holm,
    difference_over_seeds,
    equivalence,
    mean,
    power_statement,
    stdev,
    t_quantile,
    two_level_bootstrap,
)

ROOT = Path(__file__).resolve().parents[1]
# condition -> experiment config (configs/experiment/<name>.yaml)
CONDITIONS = {
    "all": "pe_study_multi30k",
    "joined": "pe_study_multi30k_joined",
    "short": "pe_study_multi30k_short",
}
# Row (E) of Table 3 first: these two variants get 5 seeds, every other variant 3; the joined
# condition 3 seeds (2 left every difference past k = 1 inside a 1-degree-of-freedom interval)
# and no NoPE (its bidirectional encoder has no word order to extrapolate).
# SHAPE enters the two extrapolation conditions in its paper's form, sinusoidal_shape (Kiyono
# et al. 2021); learned_shape, our learned-table variant of it, is in the `all` condition only.
ROW_E = ("sinusoidal", "learned")
DEFAULT_SEEDS = {
    "all": {"row_e": (1, 2, 3, 4, 5), "other": (1, 2, 3)},
    "joined": {"row_e": (1, 2, 3), "other": (1, 2, 3)},
    "short": {"row_e": (1, 2, 3), "other": (1, 2, 3)},
}
LEFT_OUT = {"joined": ("none", "learned_shape"), "short": ("learned_shape",)}
KS = (1, 2, 3, 4)
CONCAT_SPLITS = ("test", "validation")
TABLE3_EVAL = "test-last-beam4"
# The paper's search (§6.1): beam 4, alpha 0.6; EOS may come first (min_len 0), as tensor2tensor
SEARCH = {"beam": 4, "lenpen": 0.6, "min_len": 0}
BUCKET_WIDTH = 5
STUDY_FILE = "study.json"
# The committed store of scored runs (the report's default input) and what a record keeps of a run
RECORDS = ROOT / "results" / "pe_study" / "runs"
RECORD_FILES = (
    ".hydra/config.yaml",
    "metrics.json",
    "data.json",
    STUDY_FILE,
    "segments.json",
    f"eval/{TABLE3_EVAL}.json",
    f"eval/{TABLE3_EVAL}.hyp",
    "train.log",
)
RECORD_FOLDERS = ("tensorboard",)
POOLED = "+".join(CONCAT_SPLITS)  # test + validation scored together


@dataclass(frozen=True)
class Job:
    """One training run of the study."""

    condition: str
    variant: str
    seed: int
    run_dir: Path

    @property
    def label(self) -> str:
        return f"{self.condition}/{self.variant}/seed-{self.seed}"


def run_dir_of(root: Path, condition: str, variant: str, seed: int) -> Path:
    """<root>/<condition>/<variant>/seed-<seed>."""
    return Path(root) / condition / variant / f"seed-{seed}"


def planned_jobs(
    root: Path,
    conditions: Sequence[str],
    variants: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> list[Job]:
    """The runs to make, row (E) first, seeds interleaved so early results pair up by seed.

    Without variants/seeds: every variant of configs/position with the study's seeds
    (DEFAULT_SEEDS, LEFT_OUT).
    """
    known = position_variants()
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        raise StudyError(f"--condition {unknown[0]}: pass some of {', '.join(CONDITIONS)}")
    wrong = [v for v in variants or () if v not in known]
    if wrong:
        hint = " (Hydra overrides go after --)" if "=" in wrong[0] else ""
        raise StudyError(
            f"unknown position variant {wrong[0]}: pass some of {', '.join(known)}{hint}"
        )
    if seeds is not None and any(int(s) < 0 for s in seeds):
        raise StudyError(f"--seeds {' '.join(map(str, seeds))}: pass non-negative integers")
    jobs = []
    for condition in conditions:
        chosen = (
            list(variants)
            if variants
            else [v for v in known if v not in LEFT_OUT.get(condition, ())]
        )
        tiers = [[v for v in chosen if v in ROW_E], [v for v in chosen if v not in ROW_E]]
        for tier, names in zip(("row_e", "other"), tiers, strict=True):
            tier_seeds = list(seeds) if seeds else list(DEFAULT_SEEDS[condition][tier])
            for seed in tier_seeds:
                for variant in sorted(names, key=lambda v: (v not in ROW_E, v)):
                    run_dir = run_dir_of(root, condition, variant, int(seed))
                    jobs.append(Job(condition, variant, int(seed), run_dir))
    return jobs


def field(record: dict, key: str, path: Path):
    """record[key], or a StudyError naming the file and the missing field."""
    if key not in record:
        raise StudyError(
            f"{path} has no '{key}' field: it was not written by this project's train.py or "
            "evaluate.py; delete it and run the study again"
        )
    return record[key]


def finished_metrics(run_dir: Path) -> dict | None:
    """metrics.json of a run that completed, else None."""
    path = run_dir / "metrics.json"
    if not path.is_file():
        return None
    metrics = read_json(path)
    return metrics if metrics.get("complete", True) else None


def condition_max_words(condition: str, overrides: Sequence[str] = ()) -> int | None:
    """data.train_max_src_words of a condition's experiment (None: every length)."""
    cfg = compose_config([f"experiment={CONDITIONS[condition]}", *overrides])
    value = cfg.data.get("train_max_src_words")
    return None if value is None else int(value)


def train_overrides(job: Job, overrides: Sequence[str]) -> list[str]:
    """The train.py overrides of one run: `python train.py <these>` trains (and resumes) it."""
    return [
        f"experiment={CONDITIONS[job.condition]}",
        f"position={job.variant}",
        f"seed={job.seed}",
        f"run_dir={job.run_dir}",
        *overrides,
    ]


def train_job(job: Job, overrides: Sequence[str], say) -> dict:
    """Train one run to its step budget (resuming its checkpoints); its metrics.json.

    evaluation/extrapolation.py's train_run: the run folder keeps the resolved config
    (.hydra/config.yaml) and train.log; a finished run (metrics.json) is not trained again.
    """
    from evaluation.extrapolation import train_run

    metrics = finished_metrics(job.run_dir)
    if metrics is not None:
        say(f"  {job.label}: finished ({metrics['steps']} steps), not trained again")
        return metrics
    checkpoints = job.run_dir / "checkpoints"
    resuming = checkpoints.is_dir() and any(checkpoints.glob("*.pt"))
    say(f"  {job.label}: {'resuming' if resuming else 'training'} in {job.run_dir}")
    by_hand = [
        "hydra.run.dir=" + o.removeprefix("run_dir=") if o.startswith("run_dir=") else o
        for o in train_overrides(job, overrides)
    ]
    say(f"  the same run by hand: python train.py {' '.join(by_hand)}")
    start = time.monotonic()
    max_words = condition_max_words(job.condition, overrides)
    metrics = train_run(job.run_dir, train_overrides(job, overrides), max_words, echo=say)
    say(f"  {job.label}: step {metrics['steps']} in {(time.monotonic() - start) / 60:.1f} min")
    return metrics


def stored_config(run_dir: Path) -> DictConfig:
    """The resolved training config of a run (.hydra/config.yaml)."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        raise StudyError(f"{path} is missing: {run_dir} was not trained by this study")
    return OmegaConf.load(path)


def concat_sets(data_cfg: DictConfig, out: Path) -> list[dict]:
    """Write the joined test sets (split x k) of a run's corpus under out; describe each.

    Lines i*k .. i*k+k-1 of a split joined with one space, references the same way; the last
    n % k lines of a split are left out (and counted).
    """
    from data.corpus import load_split

    src_lang, tgt_lang = str(data_cfg.src_lang), str(data_cfg.tgt_lang)
    sets = []
    for split in CONCAT_SPLITS:
        dataset = load_split(data_cfg, split)
        srcs, refs = list(dataset["src"]), list(dataset["tgt"])
        for k in KS:
            src_path = out / f"{split}-k{k}.{src_lang}"
            ref_path = out / f"{split}-k{k}.{tgt_lang}"
            joined_src, joined_ref = (
                join_consecutive_lines(srcs, k),
                join_consecutive_lines(refs, k),
            )
            for path, lines in ((src_path, joined_src), (ref_path, joined_ref)):
                text = "".join(line + "\n" for line in lines)
                if not path.is_file() or path.read_text(encoding="utf-8") != text:
                    write_text(path, text)
            sets.append(
                {
                    "split": split,
                    "k": k,
                    "name": f"concat-{split}-k{k}",
                    "src_file": src_path,
                    "ref_file": ref_path,
                    "lines": len(joined_src),
                    "left_out": leftover_lines(len(srcs), k),
                    "sentences": len(srcs),
                }
            )
    return sets


def eval_is_current(path: Path, run_dir: Path, step: int) -> bool:
    """Whether an eval JSON scores the run's final step (its `step`, else newer than last.pt)
    with the study's search."""
    if not path.is_file():
        return False
    from evaluation.compare import search_settings

    record = read_json(path)
    if {key: search_settings(record)[key] for key in SEARCH} != SEARCH:
        return False
    if "step" in record:
        return int(record["step"]) == int(step)
    last = run_dir / "checkpoints" / "last.pt"
    return last.is_file() and path.stat().st_mtime >= last.stat().st_mtime


def evaluate_overrides(run_dir: Path, name: str, precision: str, source: dict | None) -> list[str]:
    """evaluate.py's overrides for one evaluation: the study's SEARCH, last checkpoint."""
    where = (
        ["split=test"]
        if source is None
        else [
            f"src_file={source['src_file']}",
            f"ref_file={source['ref_file']}",
        ]
    )
    return [
        f"run_dir={run_dir}",
        *where,
        f"name={name}",
        "checkpoint=last",
        *(f"{key}={value}" for key, value in SEARCH.items()),
        f"precision={precision}",
        "long_inputs=skip",
    ]


def length_scores(hyps: list[str], refs: list[str]) -> dict:
    """sacreBLEU, chrF, brevity penalty, hypothesis/reference length ratio, 1-gram precision."""
    bleu = sacrebleu.corpus_bleu(hyps, [refs])
    return {
        "bleu": round(bleu.score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
        "bp": round(bleu.bp, 4),
        "length_ratio": round(bleu.sys_len / max(bleu.ref_len, 1), 4),
        "hyp_len": bleu.sys_len,
        "ref_len": bleu.ref_len,
        "unigram_precision": round(bleu.precisions[0], 2),
    }


def scored_lines(path: Path, expected: int, label: str) -> list[str]:
    """The hypotheses of an evaluation, one per line; every line must have been translated."""
    hyps = path.read_text(encoding="utf-8").splitlines()
    if len(hyps) != expected:
        raise StudyError(
            f"{label}: {path} has {len(hyps)} translations for {expected} lines (some lines were "
            "too long for the position encoding); raise model.max_positions for this study"
        )
    return hyps


def bucket_scores(srcs: list[str], hyps: list[str], refs: list[str], max_words: int) -> list[dict]:
    """BLEU and sentence count per source-length bucket (words; one bucket ends at max_words)."""
    from evaluation.extrapolation import bleu_by_bucket

    rows = bleu_by_bucket(srcs, hyps, refs, max_words, BUCKET_WIDTH)
    return [{k: row[k] for k in ("bucket", "low", "high", "beyond", "n", "bleu")} for row in rows]


def trained_on(run_dir: Path, key: str) -> list[str]:
    """The machines ("hardware") or code ("code") of a run's segments; "unrecorded" if absent."""
    from data.run_record import read_segments

    return sorted({s.get(key) or "unrecorded" for s in read_segments(run_dir)})


def provenance_line(runs: list[dict], key: str, what: str) -> str:
    """The report's line on the machines (key "hardware") or code ("code") its runs trained on.

    A run resumed on another machine or code counts under each; the runs with a segment from
    before segments.json recorded it are named.
    """
    counts: dict[str, int] = {}
    for run in runs:
        for name in run.get(key, ["unrecorded"]):
            counts[name] = counts.get(name, 0) + 1
    parts = [f"{name} ({n})" for name, n in sorted(counts.items()) if name != "unrecorded"]
    unrecorded = [
        f"{r['condition']}/{r['variant']}/seed-{r['seed']}"
        for r in runs
        if "unrecorded" in r.get(key, ["unrecorded"])
    ]
    if unrecorded:
        parts.append(
            f"unrecorded ({len(unrecorded)}: {', '.join(unrecorded)}, with a segment trained "
            f"before segments.json recorded its {key})"
        )
    return (
        f"Trained {what} (runs; one resumed on other {key} counts under each): {'; '.join(parts)}."
    )


def score_job(job: Job, metrics: dict, sets_root: Path, max_words: int, say) -> dict:
    """Evaluate one finished run (what is not current yet) and write its study.json."""
    from data.corpus import data_identity
    from evaluate import evaluate

    step = int(field(metrics, "steps", job.run_dir / "metrics.json"))
    study_path = job.run_dir / STUDY_FILE
    if study_path.is_file():
        record = read_json(study_path)
        if record.get("step") == step and record.get("search") == SEARCH:
            say(f"  {job.label}: scored at step {step}, not scored again")
            return record
    config = stored_config(job.run_dir)
    precision = str(config.trainer.precision)
    sets = concat_sets(config.data, sets_root / data_identity(config.data)[:16])
    evaluations = [(TABLE3_EVAL, None)] + [(s["name"], s) for s in sets]
    eval_dir = job.run_dir / "eval"
    for number, (name, source) in enumerate(evaluations, start=1):
        if eval_is_current(eval_dir / f"{name}.json", job.run_dir, step):
            continue
        start = time.monotonic()
        evaluate(
            compose_config(evaluate_overrides(job.run_dir, name, precision, source), "evaluate")
        )
        seconds = time.monotonic() - start
        say(f"  {job.label}: evaluated {name} ({number}/{len(evaluations)}, {seconds:.0f} s)")
    table3_path = eval_dir / f"{TABLE3_EVAL}.json"
    table3 = read_json(table3_path)
    concat, pooled = [], {}
    for s in sets:
        record = read_json(eval_dir / f"{s['name']}.json")
        srcs = s["src_file"].read_text(encoding="utf-8").splitlines()
        refs = s["ref_file"].read_text(encoding="utf-8").splitlines()
        hyps = scored_lines(eval_dir / f"{s['name']}.hyp", len(srcs), job.label)
        concat.append(
            {"split": s["split"], "k": s["k"], "lines": s["lines"], "left_out": s["left_out"]}
            | length_scores(hyps, refs)
            | {"ppl": record.get("ppl")}
        )
        old = pooled.get(s["k"], ([], [], [], 0))
        pooled[s["k"]] = (old[0] + srcs, old[1] + hyps, old[2] + refs, old[3] + s["left_out"])
    for k, (srcs, hyps, refs, left_out) in sorted(pooled.items()):
        concat.append(
            {"split": POOLED, "k": k, "lines": len(srcs), "left_out": left_out}
            | length_scores(hyps, refs)
        )
    srcs, hyps, refs, _ = pooled[1]
    record = {
        "condition": job.condition,
        "variant": job.variant,
        "seed": job.seed,
        "run_dir": str(job.run_dir),
        "step": step,
        "search": SEARCH,
        "precision": precision,
        "train_cleaning": read_json(job.run_dir / "data.json").get("train_cleaning"),
        "dev_ppl": field(metrics, "dev_ppl", job.run_dir / "metrics.json"),
        "wall_seconds": metrics.get("wall_seconds"),
        "hardware": trained_on(job.run_dir, "hardware"),
        "code": trained_on(job.run_dir, "code"),
        "test": {
            "eval": TABLE3_EVAL,
            **{key: field(table3, key, table3_path) for key in ("bleu", "chrf", "n_sentences")},
            "tok_bleu": table3.get("tok_bleu"),
            "signature": table3.get("signature"),
        },
        "concat": concat,
        "max_words": max_words,
        "by_bucket": bucket_scores(srcs, hyps, refs, max_words),
    }
    write_json(study_path, record)
    test = record["test"]
    say(f"  {job.label}: test sacreBLEU {test['bleu']:.2f}, chrF {test['chrf']:.2f}")
    return record


def current_record(run_dir: Path) -> dict | None:
    """study.json of a finished run scored at its final step with the study's search, else None."""
    metrics = finished_metrics(run_dir)
    path = run_dir / STUDY_FILE
    if metrics is None or not path.is_file():
        return None
    record = read_json(path)
    if record.get("step") != metrics.get("steps") or record.get("search") != SEARCH:
        return None
    return record


def record_mismatch(job: Job, record_dir: Path, overrides: Sequence[str]) -> list[str]:
    """'key: recorded -> now' for each training setting of a record that the study would change."""
    from model.resume import setting_differences

    wanted = OmegaConf.to_container(compose_config(train_overrides(job, overrides)), resolve=True)
    stored = OmegaConf.to_container(stored_config(record_dir), resolve=True)
    refused, _ = setting_differences(stored, wanted)
    return refused


def recorded(job: Job, records: Path, overrides: Sequence[str]) -> dict | None:
    """The store's current record of a job (None: not recorded), refused if its config differs."""
    record_dir = run_dir_of(records, job.condition, job.variant, job.seed)
    record = current_record(record_dir)
    if record is None:
        return None
    changed = record_mismatch(job, record_dir, overrides)
    if changed:
        raise StudyError(
            f"{record_dir} was trained with other settings than the study's now "
            f"({'; '.join(changed)}): restore them, or delete that record to train the run again"
        )
    return record


def keep_record(run_dir: Path, record_dir: Path) -> None:
    """Copy what the report reads of a scored run (RECORD_FILES, RECORD_FOLDERS) to record_dir."""
    if run_dir.resolve() == record_dir.resolve():
        return
    staging = record_dir.with_name(record_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    for name in RECORD_FILES:
        if (run_dir / name).is_file():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(run_dir / name, staging / name)
    for name in RECORD_FOLDERS:
        if (run_dir / name).is_dir():
            shutil.copytree(run_dir / name, staging / name)
    shutil.rmtree(record_dir, ignore_errors=True)
    staging.rename(record_dir)  # a record appears whole or not at all


def last_step_line(log_path: Path) -> str | None:
    """The newest 'step N loss L' of a train.log (None before the first)."""
    if not log_path.is_file():
        return None
    with log_path.open("rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
        tail = f.read().decode("utf-8", "replace").splitlines()
    for line in reversed(tail):
        if " - step " in line and " loss " in line:
            return " ".join(line.split(" - ", 1)[1].split()[:4])
    return None


class Console:
    """Progress lines from several run threads, one whole line at a time."""

    def __init__(self, echo: Callable[[str], None] = print) -> None:
        self.echo, self.lock = echo, threading.Lock()

    def __call__(self, line: str) -> None:
        with self.lock:
            self.echo(line)


def job_command(
    job: Job, root: Path, overrides: Sequence[str], records: Path | None = None
) -> list[str]:
    """`python scripts/study.py run` for this one run (what --jobs N starts N of at a time)."""
    return [
        sys.executable,
        str(ROOT / "scripts" / "study.py"),
        "run",
        "--condition",
        job.condition,
        "--variants",
        job.variant,
        "--seeds",
        str(job.seed),
        "--root",
        str(root),
        "--records",
        "none" if records is None else str(records),
        "--",
        *overrides,
    ]


def run_in_process(
    job: Job, root: Path, overrides: Sequence[str], records: Path | None, say
) -> None:
    """Start one run's own study process (one thread); every minute, say its last step."""
    log_path = job.run_dir / "study.out"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            job_command(job, root, overrides, records),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        shown = None
        while True:
            try:
                process.wait(timeout=60)
                break
            except subprocess.TimeoutExpired:
                line = last_step_line(job.run_dir / "train.log")
                if line and line != shown:
                    say(f"  {job.label}: {line}")
                    shown = line
    if process.returncode != 0:
        raise StudyError(f"{job.label} failed (exit status {process.returncode}): see {log_path}")


def run_study(
    root: Path,
    conditions: Sequence[str] = ("all",),
    variants: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    jobs: int = 1,
    overrides: Sequence[str] = (),
    echo: Callable[[str], None] = print,
    records: Path | None = None,
) -> list[dict]:
    """Train (or resume, or skip) and score every planned run; return their study records.

    jobs 1: one run after the other in this process; jobs N: N runs at a time, each in its own
    `scripts/study.py run` process. A run that fails is reported and the others go on; a
    StudyError at the end names the failed ones. records: the record store (None: none); a run
    recorded there is skipped, a run scored here is recorded there.
    """
    if int(jobs) < 1:
        raise StudyError(f"--jobs {jobs}: pass 1 or more parallel runs")
    root = Path(root).absolute()
    records = None if records is None else Path(records).absolute()
    planned = planned_jobs(root, conditions, variants, seeds)
    for condition in conditions:  # a bad override fails here, once, not in every run
        compose_config([f"experiment={CONDITIONS[condition]}", *overrides])
    max_words = condition_max_words("short")
    say = Console(echo)
    kept = "" if records is None else f", records kept in {records}"
    say(f"study: {len(planned)} runs in {root}, {jobs} at a time{kept}")
    failures: list[str] = []
    done: dict[str, dict] = {}
    skipped: list[str] = []  # recorded in the store, or finished before this call: not trained

    def one(number: int, job: Job) -> None:
        say(f"[{number}/{len(planned)}] {job.label}")
        record_dir = (
            None if records is None else run_dir_of(records, job.condition, job.variant, job.seed)
        )
        try:
            if records is not None and (record := recorded(job, records, overrides)):
                say(f"  {job.label}: recorded in {record_dir}, not trained again")
                skipped.append(job.label)
                done[job.label] = record
                return
            if finished_metrics(job.run_dir) is not None:
                skipped.append(job.label)
            if int(jobs) > 1:
                run_in_process(job, root, overrides, records, say)
                record = read_json((record_dir or job.run_dir) / STUDY_FILE)
            else:
                metrics = train_job(job, overrides, say)
                record = score_job(job, metrics, root / "concat_sets", max_words, say)
                if record_dir is not None:
                    keep_record(job.run_dir, record_dir)
            done[job.label] = record
        except UserError as e:
            failures.append(job.label)
            say(f"  {job.label}: error: {e}")

    if int(jobs) == 1:
        for number, job in enumerate(planned, start=1):
            one(number, job)
    else:
        with ThreadPoolExecutor(max_workers=int(jobs)) as pool:
            for future in [pool.submit(one, n, job) for n, job in enumerate(planned, start=1)]:
                future.result()
    scored = [done[j.label] for j in planned if j.label in done]
    say(
        f"study: {len(scored)} of {len(planned)} runs scored: "
        f"{len(scored) - len(set(skipped) & set(done))} trained here, "
        f"{len(set(skipped) & set(done))} finished before (skipped), "
        f"{len(failures)} failed"
    )
    if failures:
        raise StudyError(f"{len(failures)} runs failed ({', '.join(failures)}); see their logs")
    return scored


# --- the report -----------------------------------------------------------------------------


def scored_runs(root: Path) -> tuple[list[dict], list[str]]:
    """study.json of every run under root (a study root or the record store) that is scored at
    its final step with the study's search, run_dir set to where it was read; the others' labels.
    """
    root = Path(root)
    records, unscored = [], []
    for condition in CONDITIONS:
        for run_dir in sorted((root / condition).glob("*/seed-*")):
            if not run_dir.is_dir() or run_dir.name.endswith(".partial"):
                continue
            label = f"{condition}/{run_dir.parent.name}/{run_dir.name}"
            record = current_record(run_dir)
            if record is None:  # unfinished, scored before its last step, or another search
                unscored.append(label)
                continue
            for key in ("condition", "variant", "seed", "step", "test", "concat", "by_bucket"):
                field(record, key, run_dir / STUDY_FILE)
            records.append(record | {"run_dir": str(run_dir)})
    return records, unscored


def interval(values: list[float]) -> dict:
    """Mean, sample std and the 95% t-interval of the mean (None where undefined)."""
    values = [float(v) for v in values if v is not None]
    result = {"n": len(values), "mean": mean(values), "std": stdev(values), "low": None}
    result["high"] = None
    if len(values) >= 2:
        half = t_quantile(0.95, len(values) - 1) * result["std"] / len(values) ** 0.5
        result |= {"low": result["mean"] - half, "high": result["mean"] + half}
    return result


def table3(records: list[dict], out: Path, resamples: int, baseline: str = "sinusoidal") -> dict:
    """compare.json / compare.md of the all-lengths runs, with the study's intervals added.

    Per variant: dev PPL, sacreBLEU and chrF mean ± std and 95% interval over seeds; every
    variant minus the baseline and every variant minus learned, paired by seed (BLEU and chrF,
    each column a family with Holm-adjusted p), with the effect 80% power detects; row (E) with
    its equivalence test and two-level bootstrap (``row_e``); the steps of every run.
    """
    runs = [r for r in records if r["condition"] == "all"]
    if not runs:
        return {}
    result = compare(
        [Path(r["run_dir"]) for r in runs],
        TABLE3_EVAL,
        out,
        resamples=resamples,
        baseline=baseline,
    )
    by_variant: dict[str, list[dict]] = {}
    for run in runs:
        by_variant.setdefault(run["variant"], []).append(run)
    for row in result["variants"]:
        mine = by_variant.get(row["variant"], [])
        row["intervals"] = {
            "dev_ppl": interval([r["dev_ppl"] for r in mine]),
            "bleu": interval([r["test"]["bleu"] for r in mine]),
            "chrf": interval([r["test"]["chrf"] for r in mine]),
            "tok_bleu": interval([r["test"]["tok_bleu"] for r in mine]),
        }
        row["steps_by_seed"] = {str(r["seed"]): r["step"] for r in mine}
    base = by_variant.get(baseline, [])
    for diff in result["differences"]:
        other = by_variant[diff["variant"]]
        diff["chrf_across_seeds"] = difference_over_seeds(
            scores_by_seed(base, "chrf"), scores_by_seed(other, "chrf")
        )
        diff["power"] = paired_power(scores_by_seed(base, "bleu"), scores_by_seed(other, "bleu"))
    add_holm([diff["chrf_across_seeds"] for diff in result["differences"]])
    result["differences_to_learned"] = differences_to(by_variant, ROW_E[1])
    result["row_e"] = row_e(by_variant, resamples)
    in_family = [d for d in result["differences"] if (d["baseline"], d["variant"]) == ROW_E]
    if result["row_e"] and in_family:  # its Holm p within "each variant minus sinusoidal"
        result["row_e"]["bleu"]["p_holm"] = in_family[0]["across_seeds"].get("p_holm")
    steps = sorted({r["step"] for r in runs})
    result["study"] = {"condition": "all", "steps": steps, "equal_steps": len(steps) == 1}
    write_json(out / "compare.json", result)
    write_text(out / "table3.md", table3_markdown(result))
    return result


def scores_by_seed(runs: list[dict], key: str) -> dict[int, float]:
    """seed -> the Table 3 evaluation's key (bleu, chrf, tok_bleu) of each run."""
    return {r["seed"]: r["test"][key] for r in runs}


def paired_power(base: dict[int, float], other: dict[int, float]) -> dict:
    """The effect a paired t-test over the shared seeds detects at 80% power (from their SD)."""
    diffs = [other[s] - base[s] for s in sorted(set(base) & set(other))]
    return asdict(power_statement(stdev(diffs), len(diffs)))


def differences_to(by_variant: dict[str, list[dict]], baseline: str) -> list[dict]:
    """Each variant minus baseline by seed (sacreBLEU, chrF), each column one Holm family."""
    base = by_variant.get(baseline, [])
    if not base:
        return []
    diffs = [
        {
            "variant": variant,
            "baseline": baseline,
            "across_seeds": difference_over_seeds(
                scores_by_seed(base, "bleu"), scores_by_seed(runs, "bleu")
            ),
            "chrf_across_seeds": difference_over_seeds(
                scores_by_seed(base, "chrf"), scores_by_seed(runs, "chrf")
            ),
            "power": paired_power(scores_by_seed(base, "bleu"), scores_by_seed(runs, "bleu")),
        }
        for variant, runs in sorted(by_variant.items())
        if variant != baseline
    ]
    for key in ("across_seeds", "chrf_across_seeds"):
        add_holm([diff[key] for diff in diffs])
    return diffs


def row_e(by_variant: dict[str, list[dict]], resamples: int) -> dict | None:
    """Learned minus sinusoidal by seed: t-interval, TOST at ±1 BLEU, power, two-level bootstrap.

    The bootstrap (resamples > 0) resamples the shared seeds, then each seed's test sentences,
    from the runs' Table 3 hypotheses; the paper's single-run numbers stand beside.
    """
    base_runs, other_runs = by_variant.get(ROW_E[0], []), by_variant.get(ROW_E[1], [])
    if not base_runs or not other_runs:
        return None
    base, other = scores_by_seed(base_runs, "bleu"), scores_by_seed(other_runs, "bleu")
    seeds = sorted(set(base) & set(other))
    diffs = [other[s] - base[s] for s in seeds]
    bootstrap = None
    if resamples > 0 and seeds:
        names = variant_names()
        read = {
            (r["variant"], r["seed"]): read_run(Path(r["run_dir"]), TABLE3_EVAL, names)
            for r in base_runs + other_runs
            if r["seed"] in seeds
        }
        refs = references(read[ROW_E[0], seeds[0]], None)
        bootstrap = two_level_bootstrap(
            {s: hypotheses(read[ROW_E[0], s]) for s in seeds},
            {s: hypotheses(read[ROW_E[1], s]) for s in seeds},
            refs,
            resamples,
        )
    paper_base, paper_other = PAPER[ROW_E[0]][1], PAPER[ROW_E[1]][1]
    return {
        "variant": ROW_E[1],
        "baseline": ROW_E[0],
        "seeds": seeds,
        "bleu": difference_over_seeds(base, other),
        "tok_bleu": difference_over_seeds(
            scores_by_seed(base_runs, "tok_bleu"), scores_by_seed(other_runs, "tok_bleu")
        ),
        "equivalence": asdict(equivalence(diffs)),
        "power": asdict(power_statement(stdev(diffs), len(diffs))),
        "two_level_bootstrap": None if bootstrap is None else asdict(bootstrap),
        "paper": {
            ROW_E[0]: paper_base,
            ROW_E[1]: paper_other,
            "difference": round(paper_other - paper_base, 2),
            "note": "tokenized BLEU on newstest2013, one run each, Vaswani et al. 2017 Table 3",
        },
    }


def cell(stats: dict, digits: int = 2) -> str:
    """mean ± std [low, high] (what is defined), or an em dash."""
    if stats.get("mean") is None:
        return "—"
    text = f"{stats['mean']:.{digits}f}"
    if stats.get("std") is not None:
        text += f" ± {stats['std']:.{digits}f}"
    if stats.get("low") is not None:
        text += f" [{stats['low']:.{digits}f}, {stats['high']:.{digits}f}]"
    return text


def signed_cell(diff: dict, digits: int = 2) -> str:
    """+d [low, high] of a difference over seeds, or an em dash."""
    if diff.get("difference") is None:
        return "—"
    text = f"{diff['difference']:+.{digits}f}"
    if diff.get("low") is not None:
        text += f" [{diff['low']:+.{digits}f}, {diff['high']:+.{digits}f}]"
    if diff.get("p_holm") is not None:
        text += f", Holm p {diff['p_holm']:.3f}"
    return text


def p_cell(test: dict, key: str = "p") -> str:
    """A test's p with its Holm-adjusted p in brackets (where it has one), or an em dash."""
    if test.get(key) is None:
        return "—"
    holm = test.get("p_holm")
    return f"{test[key]:.3f}" + ("" if holm is None else f" (Holm {holm:.3f})")


def power_cell(power: dict) -> str:
    """The effect 80% power detects over the seeds, or an em dash."""
    if power.get("detectable") is None:
        return "—"
    return f"{power['detectable']:.2f} (SD {power['sd']:.2f}, n {power['n']})"


def seeds_cell(diff: dict) -> str:
    """The seeds a difference was taken over; unpaired: each side's, "other vs base"."""
    if diff["method"].startswith("paired"):
        return ", ".join(map(str, diff["seeds"]))
    if "other_seeds" in diff:
        other, base = (", ".join(map(str, diff[k])) for k in ("other_seeds", "base_seeds"))
        return f"{other} vs {base} (unpaired)"
    return f"{', '.join(map(str, diff['seeds']))} (unpaired)"


def table3_markdown(result: dict) -> str:
    """Table 3 (E) extended: per variant mean ± std [95% interval] and the paired differences."""
    lines = [
        f"# Table 3 (E) extended: test_2016_flickr, beam {SEARCH['beam']}, alpha "
        f"{SEARCH['lenpen']}, last checkpoint",
        "",
        "| variant | seeds | steps | dev PPL | sacreBLEU | chrF | tok. BLEU | paper PPL "
        "| paper BLEU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["variants"]:
        iv = row["intervals"]
        steps = ", ".join(sorted(set(map(str, row["steps_by_seed"].values()))))
        paper_ppl = "—" if row["paper_ppl"] is None else f"{row['paper_ppl']:.2f}"
        paper_bleu = "—" if row["paper_bleu"] is None else f"{row['paper_bleu']:.1f}"
        lines.append(
            f"| {row['variant']} | {', '.join(map(str, row['seeds']))} | {steps} "
            f"| {cell(iv['dev_ppl'])} | {cell(iv['bleu'])} | {cell(iv['chrf'])} "
            f"| {cell(iv['tok_bleu'])} | {paper_ppl} | {paper_bleu} |"
        )
    lines += [
        "",
        "mean ± std over seeds [95% t-interval of the mean]; dev PPL per subword at the last "
        f"step. {result['paper_note']}",
    ]
    families = [(result["baseline"], result["differences"], True)]
    families.append((ROW_E[1], result.get("differences_to_learned", []), False))
    for baseline, diffs, bootstrap in families:
        lines += difference_section(baseline, diffs, bootstrap)
    if result.get("row_e"):
        lines += row_e_markdown(result["row_e"])
    study = result["study"]
    same = "every run" if study["equal_steps"] else "NOT every run (steps differ)"
    lines += ["", f"Steps: {', '.join(map(str, study['steps']))} ({same} at one budget)."]
    return "\n".join(lines) + "\n"


def difference_section(baseline: str, diffs: list[dict], bootstrap: bool) -> list[str]:
    """One family's table: each variant minus baseline by seed, p and Holm p by each interval."""
    if not diffs:
        return []
    lines = [
        "",
        f"## Each variant minus {baseline}, paired by seed",
        "",
        "p: two-sided t-test over seeds; Holm: adjusted within this family (one per column). "
        "80% power: the difference the seeds detect, from the SD of the paired differences.",
        "",
        "| variant | seeds | Δ sacreBLEU [95%] | p (Holm) | Δ chrF [95%] | p (Holm) "
        "| 80% power detects |" + (" bootstrap Δ BLEU [95%], p (Holm) |" if bootstrap else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if bootstrap else ""),
    ]
    for diff in diffs:
        bleu, chrf = diff["across_seeds"], diff["chrf_across_seeds"]
        line = (
            f"| {diff['variant']} | {seeds_cell(bleu)} | {interval_cell(bleu)} | {p_cell(bleu)} "
            f"| {interval_cell(chrf)} | {p_cell(chrf)} | {power_cell(diff.get('power') or {})} |"
        )
        if bootstrap:
            boot = diff.get("bootstrap")
            line += (
                " — |"
                if not boot
                else (
                    f" {boot['difference']:+.2f} [{boot['low']:+.2f}, {boot['high']:+.2f}], "
                    f"p {p_cell(boot, 'p_value')} (seed {boot['seeds'][0]} vs "
                    f"{boot['seeds'][1]}) |"
                )
            )
        lines.append(line)
    return lines


def interval_cell(diff: dict) -> str:
    """+d [low, high] without the Holm p (it has a column of its own)."""
    return signed_cell({k: v for k, v in diff.items() if k != "p_holm"})


def row_e_markdown(row: dict) -> list[str]:
    """Row (E): the t-interval, the two-level bootstrap, TOST at ±margin, power and the paper."""
    eq, power = row["equivalence"], row["power"]
    boot, paper = row["two_level_bootstrap"], row["paper"]
    title = f"{row['variant']} minus {row['baseline']}"
    lines = ["", f"## Row (E): {title}, paired by seed ({', '.join(map(str, row['seeds']))})", ""]
    lines += ["| measure | value |", "|---|---|"]
    bleu = f"{interval_cell(row['bleu'])}, p {p_cell(row['bleu'])}"
    lines.append(f"| Δ sacreBLEU, t-interval over seeds [95%], p | {bleu} |")
    if boot:
        lines.append(
            f"| Δ sacreBLEU, two-level bootstrap (seeds, then test sentences; "
            f"{boot['resamples']} resamples) [95%] | {boot['difference']:+.2f} "
            f"[{boot['low']:+.2f}, {boot['high']:+.2f}] |"
        )
    lines.append(f"| Δ tok. BLEU, t-interval over seeds [95%] | {interval_cell(row['tok_bleu'])} |")
    if eq["p"] is not None:
        verdict = "equivalent" if eq["equivalent"] else "equivalence not shown"
        lines += [
            f"| Equivalence at ±{eq['margin']:.1f} BLEU (two one-sided paired t-tests, α "
            f"{eq['alpha']}) | p {eq['p']:.3f}: {verdict} |",
            f"| Smallest margin shown equivalent (90% interval [{eq['ci_low']:+.2f}, "
            f"{eq['ci_high']:+.2f}]) | ±{eq['smallest_margin']:.2f} BLEU |",
        ]
    if power["detectable"] is not None:
        lines.append(
            f"| 80% power (α {power['alpha']}, SD of paired differences {power['sd']:.2f}) "
            f"| detects ±{power['detectable']:.2f} BLEU with {power['n']} seeds; ±1.0 needs "
            f"{power['seeds_for_one']} |"
        )
    lines.append(
        f"| Paper: {paper['note']} | {paper[row['variant']]} vs {paper[row['baseline']]} "
        f"({paper['difference']:+.1f}) |"
    )
    if boot:
        lines += [
            "",
            "The t-interval reads the spread over seeds on this one test set; the two-level "
            "bootstrap adds which test sentences were drawn, but a resample of "
            f"{len(boot['seeds'])} seeds keeps only (n - 1)/n of their variance and takes few "
            "distinct values, so with few seeds it understates the seed spread.",
        ]
    return lines


CONCAT_KEYS = ("bleu", "chrf", "bp", "length_ratio", "unigram_precision", "lines", "left_out")
CONCAT_DIFFERENCES = ("bleu", "length_ratio", "bleu_ratio_to_k1")


def concat_differences(base: list[dict], other: list[dict]) -> dict:
    """other - base for each of CONCAT_DIFFERENCES, by seed (evaluation.statistics)."""
    return {
        key: difference_over_seeds(
            {r["seed"]: r[key] for r in base if r[key] is not None},
            {r["seed"]: r[key] for r in other if r[key] is not None},
        )
        for key in CONCAT_DIFFERENCES
    }


def holm_by_family(diffs: list[dict], family: Callable[[dict], tuple], keys: Sequence[str]) -> None:
    """Holm-adjust each key's p within each family of diffs (those sharing family(diff))."""
    groups: dict[tuple, list[dict]] = {}
    for diff in diffs:
        groups.setdefault(family(diff), []).append(diff)
    for group in groups.values():
        for key in keys:
            add_holm([diff[key] for diff in group])


def concat_table(records: list[dict], baselines: Sequence[str] = ROW_E) -> dict:
    """concat.json: per condition, variant, k and seed the concatenation scores, and summaries.

    Scores are on test + validation pooled (per split in each run's study.json). BLEU(k)/BLEU(1)
    is taken per seed, then summarized; "differences" holds every variant minus each baseline
    (row E's two absolute encodings: a condition may leave one of them undertrained) within a
    condition, per k, paired by seed (BLEU, length ratio, BLEU(k)/BLEU(1)), a pair of baselines
    once; "joined_minus_all" the same for each variant trained on joined lines minus its control.
    """
    rows = []
    for record in records:
        for row in record["concat"]:
            if row["split"] == POOLED:
                rows.append(
                    {k: record[k] for k in ("condition", "variant", "seed", "step")}
                    | {"k": row["k"]}
                    | {key: row[key] for key in CONCAT_KEYS}
                )
    k1 = {(r["condition"], r["variant"], r["seed"]): r["bleu"] for r in rows if r["k"] == 1}
    for row in rows:
        base = k1.get((row["condition"], row["variant"], row["seed"]))
        row["bleu_ratio_to_k1"] = round(row["bleu"] / base, 4) if base else None
    summary = []
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["condition"], row["variant"], row["k"]), []).append(row)
    for (condition, variant, k), group in sorted(groups.items()):
        summary.append(
            {"condition": condition, "variant": variant, "k": k}
            | {"seeds": sorted(r["seed"] for r in group), "lines": group[0]["lines"]}
            | {"left_out": group[0]["left_out"]}
            | {
                key: interval([r[key] for r in group])
                for key in ("bleu", "chrf", "bp", "length_ratio", "bleu_ratio_to_k1")
            }
        )
    differences, remedy = [], []
    for number, baseline in enumerate(baselines):
        for (condition, variant, k), group in sorted(groups.items()):
            base = groups.get((condition, baseline, k))
            if variant not in baselines[: number + 1] and base:
                differences.append(
                    {"condition": condition, "variant": variant, "baseline": baseline, "k": k}
                    | concat_differences(base, group)
                )
    for (condition, variant, k), group in sorted(groups.items()):
        control = groups.get(("all", variant, k))
        if condition == "joined" and control:
            remedy.append({"variant": variant, "k": k} | concat_differences(control, group))
    holm_by_family(
        differences, lambda d: (d["baseline"], d["condition"], d["k"]), CONCAT_DIFFERENCES
    )
    holm_by_family(remedy, lambda d: (d["k"],), CONCAT_DIFFERENCES)
    return {
        "splits": list(CONCAT_SPLITS),
        "ks": list(KS),
        **SEARCH,
        "runs": sorted(rows, key=lambda r: (r["condition"], r["variant"], r["k"], r["seed"])),
        "summary": summary,
        "differences": differences,
        "joined_minus_all": remedy,
    }


def concat_markdown(table: dict) -> str:
    """concat.md: per condition and variant, the scores at each k (mean ± std over seeds)."""
    lines = [
        f"# Concatenation test: {' + '.join(table['splits'])} lines joined k at a time",
        "",
        "sacreBLEU, chrF, brevity penalty (BP), hypothesis/reference length ratio and "
        "BLEU(k)/BLEU(1), mean ± std over seeds [95% interval]; beam "
        f"{table['beam']}, alpha {table['lenpen']}, last checkpoint.",
        "",
        "| condition | variant | k | lines (left out) | seeds | BLEU | chrF | BP | length ratio "
        "| BLEU(k)/BLEU(1) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in table["summary"]:
        lines.append(
            f"| {row['condition']} | {row['variant']} | {row['k']} "
            f"| {row['lines']} ({row['left_out']}) "
            f"| {', '.join(map(str, row['seeds']))} | {cell(row['bleu'])} | {cell(row['chrf'])} "
            f"| {cell(row['bp'], 3)} | {cell(row['length_ratio'], 3)} "
            f"| {cell(row['bleu_ratio_to_k1'], 3)} |"
        )
    baseline = None
    for diff in table["differences"]:
        if diff["baseline"] != baseline:
            baseline = diff["baseline"]
            lines += [
                "",
                f"## Each variant minus {baseline}, per condition and k",
                "",
                "Paired by seed over the seeds both ran, with the 95% t-interval (Welch over all "
                "seeds where fewer than two are shared); Holm p: the t-test's p adjusted by Holm "
                "within the family of every variant at one condition and k, per column.",
                "",
                "| condition | variant | k | seeds | Δ BLEU | Δ length ratio | Δ BLEU(k)/BLEU(1) |",
                "|---|---|---|---|---|---|---|",
            ]
        lines.append(
            f"| {diff['condition']} | {diff['variant']} | {diff['k']} "
            f"| {seeds_cell(diff['bleu'])} | {signed_cell(diff['bleu'])} "
            f"| {signed_cell(diff['length_ratio'], 3)} "
            f"| {signed_cell(diff['bleu_ratio_to_k1'], 3)} |"
        )
    if table["joined_minus_all"]:
        lines += [
            "",
            "## Trained on joined lines minus trained on single sentences, per variant and k",
            "",
            "What the joined condition (Variš & Bojar's remedy) gives back, paired by seed as "
            "above (Holm within each k); what is left of the drop under it is what the position "
            "encoding owes.",
            "",
            "| variant | k | seeds | Δ BLEU | Δ length ratio | Δ BLEU(k)/BLEU(1) |",
            "|---|---|---|---|---|---|",
        ]
    for diff in table["joined_minus_all"]:
        lines.append(
            f"| {diff['variant']} | {diff['k']} | {seeds_cell(diff['bleu'])} "
            f"| {signed_cell(diff['bleu'])} | {signed_cell(diff['length_ratio'], 3)} "
            f"| {signed_cell(diff['bleu_ratio_to_k1'], 3)} |"
        )
    return "\n".join(lines) + "\n"


def bucket_table(records: list[dict], baseline: str = "sinusoidal") -> dict:
    """The short condition against its control (all lengths), bucket by bucket, with counts.

    Per variant and bucket: BLEU mean over seeds in each condition, their ratio (short /
    control), the ratio per seed both ran, and the number of sentences in the bucket; the
    ratio per seed over that seed's ratio in the last bucket within the training lengths
    ("in_range"), so what a variant already loses or gains at the lengths it was trained on
    is not read as extrapolation; "differences" holds every variant minus the baseline per
    bucket, by seed, in both.
    """
    cells: dict[tuple, dict[int, float]] = {}
    sizes: dict[str, dict] = {}
    for record in records:
        if record["condition"] not in ("short", "all"):
            continue
        for b in record["by_bucket"]:
            key = (record["variant"], b["bucket"], record["condition"])
            cells.setdefault(key, {})[record["seed"]] = b["bleu"]
            sizes[b["bucket"]] = {k: b[k] for k in ("bucket", "low", "high", "beyond", "n")}
    variants = sorted({key[0] for key in cells if key[2] == "short"})
    # every run is bucketed at the short condition's L, so the control's records know it too
    max_words = next((r["max_words"] for r in records if r["condition"] in ("short", "all")), None)
    rows = []
    for variant in variants:
        for name, size in sorted(sizes.items(), key=lambda item: item[1]["low"]):
            short = cells.get((variant, name, "short"), {})
            control = cells.get((variant, name, "all"), {})
            short_iv, control_iv = interval(list(short.values())), interval(list(control.values()))
            ratio = None
            if short_iv["mean"] is not None and control_iv["mean"]:
                ratio = round(short_iv["mean"] / control_iv["mean"], 4)
            paired = {
                str(s): round(short[s] / control[s], 4)
                for s in sorted(set(short) & set(control))
                if short[s] is not None and control[s]
            }
            rows.append(
                {"variant": variant}
                | size
                | {"short": short_iv, "control": control_iv, "ratio": ratio}
                | {"ratio_by_seed": paired, "ratio_paired": interval(list(paired.values()))}
                | {"short_seeds": sorted(short), "control_seeds": sorted(control)}
            )
    in_range = max(
        (s for s in sizes.values() if not s["beyond"]), key=lambda s: s["low"], default=None
    )
    reference = {
        r["variant"]: r["ratio_by_seed"]
        for r in rows
        if r["bucket"] == (in_range or {}).get("bucket")
    }
    for row in rows:
        ref = reference.get(row["variant"], {})
        row["over_in_range_by_seed"] = {
            s: round(v / ref[s], 4) for s, v in row["ratio_by_seed"].items() if ref.get(s)
        }
        row["over_in_range"] = interval(list(row["over_in_range_by_seed"].values()))
    base = {r["bucket"]: r for r in rows if r["variant"] == baseline}

    def by_seed(values: dict[str, float]) -> dict[int, float]:
        return {int(s): v for s, v in values.items()}

    differences = [
        {k: row[k] for k in ("variant", "bucket", "low", "high", "beyond", "n")}
        | {"baseline": baseline}
        | {
            key: difference_over_seeds(
                by_seed(base[row["bucket"]][f"{key}_by_seed"]), by_seed(row[f"{key}_by_seed"])
            )
            for key in ("ratio", "over_in_range")
        }
        for row in rows
        if row["variant"] != baseline and row["bucket"] in base
    ]
    holm_by_family(differences, lambda d: (d["bucket"],), ("ratio", "over_in_range"))
    return {
        "max_words": max_words,
        "bucket_width": BUCKET_WIDTH,
        "in_range": (in_range or {}).get("bucket"),
        "rows": rows,
        "differences": differences,
    }


def bucket_markdown(table: dict) -> str:
    """buckets.md: short-trained BLEU over the all-lengths control, per bucket, with counts."""
    lines = [
        f"# Trained on <= {table['max_words']} source words vs all lengths (the control)",
        "",
        f"test_2016_flickr + validation, BLEU per source-length bucket ({table['bucket_width']} "
        "words; * = beyond the short runs' training lengths), mean over seeds; ratio = short / "
        "control (and its mean over paired seeds [95% interval]); ÷ in-range = each seed's "
        f"ratio over its ratio at {table['in_range']} words, the last bucket within the "
        "training lengths, so what a variant loses or gains there already is not read as "
        "extrapolation.",
        "",
        "| variant | bucket | sentences | short BLEU | control BLEU | ratio | paired ratio "
        "| ÷ in-range |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if not table["rows"]:
        return "\n".join(lines[:4] + ["No run of the short condition is scored yet."]) + "\n"
    for row in table["rows"]:
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.3f}"
        mark = "*" if row["beyond"] else ""
        lines.append(
            f"| {row['variant']} | {row['bucket']}{mark} | {row['n']} | {cell(row['short'])} "
            f"| {cell(row['control'])} | {ratio} | {cell(row['ratio_paired'], 3)} "
            f"| {cell(row['over_in_range'], 3)} |"
        )
    if table["differences"]:
        lines += [
            "",
            f"## Each variant's ratio minus {table['differences'][0]['baseline']}'s, per bucket",
            "",
            "short / control per seed, the variant's minus the baseline's, paired by seed over the "
            "seeds both ran (Welch over all seeds where fewer than two are shared), with the 95% "
            "t-interval: below zero, the variant keeps less of its all-lengths BLEU there; the "
            "same for the ratio ÷ in-range (below zero beyond the training lengths: the variant "
            "loses more there than it does within them). Holm p: the t-test's p adjusted by Holm "
            "within the family of every variant at one bucket, per column.",
            "",
            "| variant | bucket | sentences | seeds | Δ ratio | Δ ratio ÷ in-range |",
            "|---|---|---|---|---|---|",
        ]
    for diff in table["differences"]:
        mark = "*" if diff["beyond"] else ""
        lines.append(
            f"| {diff['variant']} | {diff['bucket']}{mark} | {diff['n']} "
            f"| {seeds_cell(diff['ratio'])} | {signed_cell(diff['ratio'], 3)} "
            f"| {signed_cell(diff['over_in_range'], 3)} |"
        )
    return "\n".join(lines) + "\n"


def plot_bleu_vs_k(table: dict, path: Path) -> None:
    """BLEU against k per variant, the band spanning the seeds; one panel per condition."""
    from evaluation.plots import pyplot

    plt = pyplot()
    conditions = [c for c in ("all", "joined") if any(r["condition"] == c for r in table["runs"])]
    fig, axes = plt.subplots(1, max(len(conditions), 1), figsize=(5 * max(len(conditions), 1), 4))
    axes = [axes] if len(conditions) <= 1 else list(axes)
    variants = sorted({r["variant"] for r in table["runs"]})
    for ax, condition in zip(axes, conditions, strict=False):
        for i, variant in enumerate(variants):
            rows = [
                r for r in table["runs"] if r["condition"] == condition and r["variant"] == variant
            ]
            if not rows:
                continue
            ks = sorted({r["k"] for r in rows})
            bleus = [[r["bleu"] for r in rows if r["k"] == k] for k in ks]
            ax.plot(ks, [sum(b) / len(b) for b in bleus], marker="o", color=f"C{i}", label=variant)
            ax.fill_between(
                ks, [min(b) for b in bleus], [max(b) for b in bleus], color=f"C{i}", alpha=0.2
            )
        ax.set_xticks(list(KS))
        ax.set_xlabel("k (sentences joined per line)")
        ax.set_ylabel("sacreBLEU (band: seeds' range)")
        ax.set_title(f"Concatenation test, trained on: {condition}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_bucket_ratio(table: dict, path: Path) -> None:
    """Short-trained BLEU / control BLEU per source-length bucket (with its sentences)."""
    from evaluation.plots import pyplot

    plt = pyplot()
    buckets = sorted({(r["low"], r["bucket"], r["n"], r["beyond"]) for r in table["rows"]})
    position = {name: x for x, (_, name, _, _) in enumerate(buckets)}
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, variant in enumerate(sorted({r["variant"] for r in table["rows"]})):
        rows = [r for r in table["rows"] if r["variant"] == variant and r["ratio"] is not None]
        ax.plot(
            [position[r["bucket"]] for r in rows],
            [r["ratio"] for r in rows],
            marker="o",
            color=f"C{i}",
            label=variant,
        )
    ax.axhline(1.0, color="grey", linewidth=1)
    seen = [x for x, (_, _, _, beyond) in enumerate(buckets) if not beyond]
    if seen:
        ax.axvline(max(seen) + 0.5, color="black", linestyle="--", linewidth=1)
    labels = [f"{name}{'*' if beyond else ''}\n{n}" for _, name, n, beyond in buckets]
    ax.set_xticks(range(len(buckets)), labels, fontsize=7)
    ax.set_xlabel("source words (* beyond the short runs' lengths); sentences below")
    ax.set_ylabel("BLEU: trained on short / on all lengths")
    ax.set_title(f"Trained on <= {table['max_words']} words, relative to the control")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def missing_runs(records: list[dict], root: Path) -> list[str]:
    """Labels of the study's planned runs (planned_jobs defaults) with no scored record."""
    done = {(r["condition"], r["variant"], r["seed"]) for r in records}
    return [
        job.label
        for job in planned_jobs(root, list(CONDITIONS))
        if (job.condition, job.variant, job.seed) not in done
    ]


def write_report(
    root: Path, out: Path, resamples: int = 1000, echo: Callable[[str], None] = print
) -> dict:
    """Write results/<study>/: the tables (Markdown + JSON) and plots of every scored run."""
    records, unscored = scored_runs(root)
    if not records:
        raise StudyError(
            f"no scored runs under {root}: run `python scripts/study.py run` first (or pass --root)"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    missing = missing_runs(records, root)
    echo(f"report: {len(records)} scored runs; {len(missing)} planned runs missing")
    if unscored:
        echo(
            f"report: {len(unscored)} run folders left out, unfinished or not scored at their "
            f"last step with the study's search {SEARCH} (`python scripts/study.py run` trains "
            f"or scores them): {', '.join(unscored)}"
        )
    table = table3(records, out, resamples)
    concat = concat_table(records)
    write_json(out / "concat.json", concat)
    write_text(out / "concat.md", concat_markdown(concat))
    plot_bleu_vs_k(concat, out / "bleu_vs_k.png")
    buckets = bucket_table(records)
    write_json(out / "buckets.json", buckets)
    write_text(out / "buckets.md", bucket_markdown(buckets))
    if buckets["rows"]:
        plot_bucket_ratio(buckets, out / "bucket_ratio.png")
    runs = {
        "runs": [
            {k: r[k] for k in ("condition", "variant", "seed", "step", "dev_ppl", "wall_seconds")}
            | {"bleu": r["test"]["bleu"], "chrf": r["test"]["chrf"]}
            | {key: r.get(key, ["unrecorded"]) for key in ("hardware", "code")}
            for r in records
        ],
        "unscored": unscored,
        "missing": missing,
    }
    write_json(out / "runs.json", runs)
    lines = [
        f"# The position-encoding study: {len(records)} scored runs",
        "",
        "- [Table 3 (E) extended](table3.md) (compare.json, compare.md, bleu_by_variant.png)",
        "- [Concatenation test](concat.md) (concat.json, bleu_vs_k.png)",
        "- [Short vs all lengths per bucket](buckets.md) (buckets.json, bucket_ratio.png)",
        "",
        f"Missing runs of the plan ({len(missing)}): {', '.join(missing) or 'none'}.",
        f"Unfinished or unscored run folders: {', '.join(unscored) or 'none'}.",
        "",
        provenance_line(runs["runs"], "hardware", "on")
        + " One seed on two machines agrees only up to float32 rounding, then drifts apart.",
        provenance_line(runs["runs"], "code", "with"),
    ]
    write_text(out / "README.md", "\n".join(lines) + "\n")
    if table:
        echo(table3_markdown(table))
    echo(f"written: {out}/ (README.md, table3.md, compare.json, concat.json, buckets.json, plots)")
    return {"table3": table, "concat": concat, "buckets": buckets, **runs}
