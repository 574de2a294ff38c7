"""Scoring a finished run: the Table 3 test set, the concatenation sets and length buckets.

Each finished run is scored once with evaluate.py's search (beam 4, alpha 0.6, last checkpoint,
the precision the run trained in): ``test-last-beam4`` (test_2016_flickr), ``concat-<split>-k<k>``
(test and validation lines joined k = 1..4 at a time, data/concatenation.py) and BLEU per
source-length bucket on test + validation (k = 1); the numbers go to ``<run_dir>/study.json``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import sacrebleu
from omegaconf import DictConfig

from common.files import read_json, write_text
from data.concatenation import join_consecutive_lines, leftover_lines
from data.corpus import data_identity, load_split
from evaluation.evaluate import evaluate_run
from runs.run import Run, RunFileError, search_settings
from studies.extrapolation import bleu_by_bucket
from studies.plan import (
    BUCKET_KEYS,
    BUCKET_WIDTH,
    CONCAT_SPLITS,
    KS,
    POOLED,
    SEARCH,
    STUDY_FILE,
    TABLE3_EVAL,
    Job,
    StudyError,
)
from studies.records import (
    BucketRow,
    ConcatRow,
    StudyRecord,
    Table3Scores,
    field,
    missing_field,
    trained_on,
)
from studies.rows import MissingField, from_json


@dataclass(frozen=True)
class ConcatSet:
    """One joined test set (a split, k sentences a line) written for a run's corpus."""

    split: str
    k: int
    name: str  # its evaluation's name
    src_file: Path
    ref_file: Path
    lines: int
    left_out: int  # the split's last n % k lines
    sentences: int


@dataclass(frozen=True)
class LengthScores:
    """Corpus scores of some translations, with what tells a shorter output from a worse one."""

    bleu: float
    chrf: float
    bp: float
    length_ratio: float
    hyp_len: int
    ref_len: int
    unigram_precision: float


def concat_sets(data_cfg: DictConfig, out: Path) -> list[ConcatSet]:
    """Write the joined test sets (split x k) of a run's corpus under out; describe each.

    Lines i*k .. i*k+k-1 of a split joined with one space, references the same way; the last
    n % k lines of a split are left out (and counted).
    """
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
                ConcatSet(
                    split=split,
                    k=k,
                    name=f"concat-{split}-k{k}",
                    src_file=src_path,
                    ref_file=ref_path,
                    lines=len(joined_src),
                    left_out=leftover_lines(len(srcs), k),
                    sentences=len(srcs),
                )
            )
    return sets


def eval_is_current(run: Run, name: str, step: int) -> bool:
    """Whether the run's evaluation name is current (runs.Run.is_current, the run's last step
    being step) and searched as the study does."""
    record = run.evaluation(name)
    if record is None:
        return False
    if {key: search_settings(record)[key] for key in SEARCH} != SEARCH:
        return False
    return run.is_current(record, step)


def evaluate_overrides(name: str, precision: str, source: ConcatSet | None) -> list[str]:
    """evaluate.py's overrides for one evaluation: the study's SEARCH, last checkpoint."""
    where = (
        ["split=test"]
        if source is None
        else [f"src_file={source.src_file}", f"ref_file={source.ref_file}"]
    )
    return [
        *where,
        f"name={name}",
        "checkpoint=last",
        *(f"{key}={value}" for key, value in SEARCH.items()),
        f"precision={precision}",
        "long_inputs=skip",
    ]


def length_scores(hyps: list[str], refs: list[str]) -> LengthScores:
    """sacreBLEU, chrF, brevity penalty, hypothesis/reference length ratio, 1-gram precision."""
    bleu = sacrebleu.corpus_bleu(hyps, [refs])
    return LengthScores(
        bleu=round(bleu.score, 2),
        chrf=round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
        bp=round(bleu.bp, 4),
        length_ratio=round(bleu.sys_len / max(bleu.ref_len, 1), 4),
        hyp_len=bleu.sys_len,
        ref_len=bleu.ref_len,
        unigram_precision=round(bleu.precisions[0], 2),
    )


def scored_lines(run: Run, scores: dict, expected: int, label: str) -> list[str]:
    """The hypotheses of an evaluation, one per line; every line must have been translated."""
    try:
        hyps = run.hypotheses(scores, "delete it and run the study again")
    except RunFileError as e:
        raise StudyError(f"{label}: {e}") from None
    if len(hyps) != expected:
        raise StudyError(
            f"{label}: {run.hypotheses_file(scores['name'])} has {len(hyps)} translations for "
            f"{expected} lines (some lines were too long for the position encoding); raise "
            "model.max_positions for this study"
        )
    return hyps


def bucket_scores(
    srcs: list[str], hyps: list[str], refs: list[str], max_words: int
) -> list[BucketRow]:
    """BLEU, brevity penalty, length ratio and sentence count per source-length bucket (words;
    one bucket ends at max_words)."""
    rows = bleu_by_bucket(srcs, hyps, refs, max_words, BUCKET_WIDTH)
    return [BucketRow(**{k: getattr(row, k) for k in BUCKET_KEYS}) for row in rows]


def run_evaluations(job: Job, step: int, precision: str, sets: list[ConcatSet], say) -> None:
    """evaluate.py's search on the Table 3 test set and every concatenation set not current yet."""
    evaluations = [(TABLE3_EVAL, None)] + [(s.name, s) for s in sets]
    run = Run(job.run_dir)
    for number, (name, source) in enumerate(evaluations, start=1):
        if eval_is_current(run, name, step):
            continue
        start = time.monotonic()
        evaluate_run(job.run_dir, *evaluate_overrides(name, precision, source))
        seconds = time.monotonic() - start
        say(f"  {job.label}: evaluated {name} ({number}/{len(evaluations)}, {seconds:.0f} s)")


def concat_scores(job: Job, sets: list[ConcatSet]) -> tuple[list[ConcatRow], tuple[list[str], ...]]:
    """Per split and k, then pooled over the splits per k, the length scores of the concatenation
    sets; and (sources, hypotheses, references) of k = 1 pooled (for the length buckets)."""
    run = Run(job.run_dir)
    concat, pooled = [], {}
    for s in sets:
        record = read_json(run.evaluation_file(s.name))
        srcs = s.src_file.read_text(encoding="utf-8").splitlines()
        refs = s.ref_file.read_text(encoding="utf-8").splitlines()
        hyps = scored_lines(run, record, len(srcs), job.label)
        scores = asdict(length_scores(hyps, refs))
        concat.append(ConcatRow(s.split, s.k, s.lines, s.left_out, **scores, ppl=record.get("ppl")))
        old = pooled.get(s.k, ([], [], [], 0))
        pooled[s.k] = (old[0] + srcs, old[1] + hyps, old[2] + refs, old[3] + s.left_out)
    for k, (srcs, hyps, refs, left_out) in sorted(pooled.items()):
        scores = asdict(length_scores(hyps, refs))
        concat.append(ConcatRow(POOLED, k, len(srcs), left_out, **scores))
    return concat, pooled[1][:3]


def test_scores(job: Job) -> Table3Scores:
    """The Table 3 evaluation's scores of a run (eval/test-last-beam4.json)."""
    path = Run(job.run_dir).evaluation_file(TABLE3_EVAL)
    try:
        return from_json(Table3Scores, read_json(path) | {"eval": TABLE3_EVAL})
    except MissingField as e:
        raise missing_field(path, e.name) from None


def score_job(job: Job, metrics: dict, sets_root: Path, max_words: int, say) -> StudyRecord:
    """Evaluate one finished run (what is not current yet) and write its study.json."""
    run = Run(job.run_dir)
    step = int(field(metrics, "steps", run.metrics_file))
    study_path = job.run_dir / STUDY_FILE
    if study_path.is_file():
        record = read_json(study_path)
        if record.get("step") == step and record.get("search") == SEARCH:
            scored = StudyRecord.from_json(record, study_path)
            if scored.has_bucket_lengths:
                say(f"  {job.label}: scored at step {step}, not scored again")
                return scored
    config = Run(job.run_dir).config()
    precision = str(config.trainer.precision)
    sets = concat_sets(config.data, sets_root / data_identity(config.data)[:16])
    run_evaluations(job, step, precision, sets, say)
    concat, (srcs, hyps, refs) = concat_scores(job, sets)
    record = StudyRecord(
        condition=job.condition,
        variant=job.variant,
        seed=job.seed,
        run_dir=str(job.run_dir),
        step=step,
        search=SEARCH,
        precision=precision,
        train_cleaning=run.data_summary().get("train_cleaning"),
        dev_ppl=field(metrics, "dev_ppl", run.metrics_file),
        wall_seconds=metrics.get("wall_seconds"),
        hardware=trained_on(job.run_dir, "hardware"),
        code=trained_on(job.run_dir, "code"),
        test=test_scores(job),
        concat=concat,
        max_words=max_words,
        by_bucket=bucket_scores(srcs, hyps, refs, max_words),
    )
    record.write(study_path)
    say(f"  {job.label}: test sacreBLEU {record.test.bleu:.2f}, chrF {record.test.chrf:.2f}")
    return record
