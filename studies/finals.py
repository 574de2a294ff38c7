"""Scoring a declared study's finals: each test set, last checkpoint and the average of the last N.

A final run is scored once, in its run folder while its checkpoints are there, with the study's
search (§6.1: beam 4, α 0.6 by default): ``<split>-last-beam<b>`` and, where the study declares
``final.average_last: N``, ``<split>-avg<N>-beam<b>`` (Table 2's averaging of the last N step
checkpoints; distinct weights only, runs/checkpoint.py refuses a repeat). The evaluations (JSON
with the weights' hash, and the translations) are kept beside the record with `FinalScores`
(scores.json); claims rest on the last checkpoint, the average is the second score.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import sacrebleu

from common.files import read_json, write_json
from evaluation.evaluate import evaluate_run, search_tag
from runs.checkpoint import weights_sha256
from runs.run import Run, lines_sha256
from studies.plan import StudyError
from studies.protocol import SCHEMA_VERSION, StudySpec
from studies.store import outside_paths, scrubbed

SCORES_FILE = "scores.json"
FIX = "restore the record's files from its run, or move the record folder away to score it again"
# what scores.json quotes of each evaluation's JSON
QUOTED = ("bleu", "chrf", "tok_bleu", "n_sentences", "step", "signature", "hypotheses_sha256")
References = Callable[[str], "list[str] | None"]  # a test split's reference lines (None: unknown)


@dataclass(frozen=True)
class SplitScore:
    """One evaluation of a final run: a split, a checkpoint, its scores."""

    split: str
    checkpoint: str  # last | avg:N
    step: int
    bleu: float  # sacreBLEU, detokenized
    chrf: float
    tok_bleu: float | None  # the paper's tokenized BLEU (German: compound split)
    n_sentences: int
    signature: str
    weights_sha256: str  # the evaluated weights' hash (runs/checkpoint.py; an average's too)
    hypotheses_sha256: str


@dataclass(frozen=True)
class FinalScores:
    """scores.json: every evaluation of one final run, with the search that made them."""

    schema: int
    beam: int
    lenpen: float
    scores: list[SplitScore]

    def score(self, split: str, checkpoint: str) -> SplitScore | None:
        """The evaluation of a split and checkpoint (None: not scored)."""
        found = [s for s in self.scores if (s.split, s.checkpoint) == (split, checkpoint)]
        return found[0] if found else None


def wanted_evaluations(study: StudySpec) -> list[tuple[str, str]]:
    """(split, checkpoint) of every evaluation a final gets."""
    checkpoints = ["last"] + (
        [f"avg:{study.final.average_last}"] if study.final.average_last else []
    )
    return [(split, checkpoint) for split in study.test for checkpoint in checkpoints]


def evaluation_name(study: StudySpec, split: str, checkpoint: str) -> str:
    """test-last-beam4, test-avg5-beam4 (-lenpen<a> after it for another length penalty)."""
    return search_name(split, checkpoint, study.search.beam, study.search.lenpen)


def search_name(split: str, checkpoint: str, beam: int, lenpen: float) -> str:
    """The evaluation name evaluate.py gives a split scored with this checkpoint and search."""
    return f"{split}-{checkpoint.replace(':', '')}-beam{beam}{search_tag(lenpen)}"


def read_scores(folder: Path) -> FinalScores | None:
    """scores.json of a final's record folder (None: not scored)."""
    path = Path(folder) / SCORES_FILE
    if not path.is_file():
        return None
    data = read_json(path)
    return FinalScores(
        data["schema"], data["beam"], data["lenpen"], [SplitScore(**s) for s in data["scores"]]
    )


def is_scored(study: StudySpec, folder: Path) -> bool:
    """Whether a final's record holds every evaluation the study asks, with its search."""
    scores = read_scores(folder)
    return (
        scores is not None
        and (scores.beam, scores.lenpen) == (study.search.beam, study.search.lenpen)
        and all(scores.score(*wanted) for wanted in wanted_evaluations(study))
    )


def evaluate_one(study: StudySpec, run: Path, split: str, checkpoint: str) -> dict:
    """evaluate.py on one split with one checkpoint of a run, in the precision it trained in."""
    precision = Run(run).resolved_config()["trainer"]["precision"]
    overrides = [
        f"split={split}",
        f"checkpoint={checkpoint}",
        f"name={evaluation_name(study, split, checkpoint)}",
        f"beam={study.search.beam}",
        f"lenpen={study.search.lenpen}",
        f"precision={precision}",
    ]
    return evaluate_run(run, *overrides)


def split_score(result: dict, split: str, checkpoint: str, hyp: Path, weights: str) -> SplitScore:
    """The typed row of one evaluation's JSON."""
    return SplitScore(
        split=split,
        checkpoint=checkpoint,
        step=int(result["step"]),
        bleu=float(result["bleu"]),
        chrf=float(result["chrf"]),
        tok_bleu=result.get("tok_bleu"),
        n_sentences=int(result["n_sentences"]),
        signature=str(result["signature"]),
        weights_sha256=weights,
        hypotheses_sha256=hashlib.sha256(hyp.read_bytes()).hexdigest(),
    )


def check_scores(folder: Path, scores: FinalScores, references: References | None = None) -> None:
    """StudyError where a scored final's .hyp, scores.json or BLEU/chrF is not what was scored."""
    record = Run(folder)
    for row in scores.scores:
        name = search_name(row.split, row.checkpoint, scores.beam, scores.lenpen)
        result = record.evaluation(name)
        if result is None:
            raise StudyError(f"{record.evaluation_file(name)} is missing ({SCORES_FILE} quotes "
                             f"it): {FIX}")  # fmt: skip
        hyps = record.hypotheses(result, FIX)
        # an evaluation older than a key quotes nothing of it; its .hyp has a sha256 all the same
        result = {"hypotheses_sha256": lines_sha256(hyps), **result}
        for key in (key for key in QUOTED if key in result):
            if asdict(row)[key] != result.get(key):
                raise StudyError(
                    f"{folder / SCORES_FILE}: {row.split} {row.checkpoint} {key} "
                    f"{asdict(row)[key]} differs from {record.evaluation_file(name)}'s "
                    f"{result.get(key)}: {FIX}"
                )
        refs = None if references is None else references(row.split)
        if refs is not None:
            check_recomputed(record.evaluation_file(name), result, hyps, refs)


def check_recomputed(path: Path, result: dict, hyps: list[str], refs: list[str]) -> None:
    """StudyError where an evaluation's BLEU or chrF is not what its hypotheses score."""
    skipped = set(result.get("skipped_indices") or [])
    refs = [line for i, line in enumerate(refs) if i not in skipped]
    kept = result.get("references_sha256")
    if kept is None:
        return  # scored before the references were recorded: which ones is unknown
    if lines_sha256(refs) != kept:
        raise StudyError(
            f"{path}: the test references loaded now (sha256 {lines_sha256(refs)[:12]}) are not "
            f"the ones it was scored against ({kept[:12]}): pass the data the finals were "
            "scored on (-- data.path=<folder>)"
        )
    now = {
        "bleu": round(sacrebleu.BLEU().corpus_score(hyps, [refs]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
    }
    for key, value in now.items():
        if result.get(key) != value:
            raise StudyError(
                f"{path}: {key} {result.get(key)} is not the {value} its hypotheses score "
                f"against the test references: {FIX}"
            )


def score_final(
    study: StudySpec, run: Path, folder: Path, work: Path, say, references: References | None = None
) -> FinalScores:
    """Score a final run (its folder `run`, under `work`) and keep the evaluations in its record
    `folder`."""
    if is_scored(study, folder):
        scores = read_scores(folder)
        check_scores(folder, scores, references)
        return scores
    trained, record = Run(run), Run(folder)
    if not trained.has_checkpoint("last"):
        raise StudyError(
            f"{folder} is not scored and {run} holds no checkpoints: move the record away to "
            "train the run again"
        )
    places, rows = outside_paths(run, work), []
    record.evaluations_dir.mkdir(parents=True, exist_ok=True)
    for split, checkpoint in wanted_evaluations(study):
        name = evaluation_name(study, split, checkpoint)
        result = evaluate_one(study, run, split, checkpoint)
        hyp = trained.hypotheses_file(name)
        shutil.copy2(hyp, record.hypotheses_file(name))
        text = trained.evaluation_file(name).read_text(encoding="utf-8")
        record.evaluation_file(name).write_text(scrubbed(text, places), encoding="utf-8")
        weights = weights_sha256(trained.load(checkpoint)[0])  # an average's too
        rows.append(split_score(result, split, checkpoint, hyp, weights))
        say(f"study: scored {folder} {name}: sacreBLEU {rows[-1].bleu:.2f}")
    scores = FinalScores(SCHEMA_VERSION, study.search.beam, study.search.lenpen, rows)
    write_json(folder / SCORES_FILE, asdict(scores))
    return scores
