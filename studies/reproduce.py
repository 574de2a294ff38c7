"""A run retrained from its record's command, checked against that record, value by value.

`python scripts/study.py reproduce --record RECORD --run RUN` reads both folders' TensorBoard
scalars (loss, nll, learning rate and gradient norm every log step, dev perplexity and greedy
BLEU at each dev evaluation), their metrics.json where both finished the same steps, and the
translations of every evaluation both hold (eval/<name>.hyp), and says how many values agree
to the last bit. Timings and memory are the machine's, not the training's, and stay out. A
retrain stopped early is compared on the steps it reached. On the CPU kind and thread count
that trained the record, a run that reproduces agrees everywhere (docs/study.md, "Retrain a
record"); elsewhere it starts from float32 rounding and drifts within the seed spread.
"""

import math
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError
from common.files import read_json
from runs.events import read_scalars
from runs.run import Run

# the machine's speed and memory (training/launch.py's log), not the training's arithmetic
MACHINE_TAGS = ("train/tokens_per_s", "train/step_s", "train/memory_gib")
# metrics.json: what the training computed (wall time, speed and segments are the machine's)
METRICS = (
    "steps",
    "epochs",
    "tokens_seen",
    "parameters",
    "train_loss",
    "dev_ppl",
    "dev_bleu_greedy",
)


class ReproduceError(UserError):
    """A record or run folder the check cannot read."""


@dataclass(frozen=True)
class Agreement:
    """One quantity of the retrained run against its record, over the points both hold."""

    name: str  # a TensorBoard tag, metrics.json:<key> or eval/<name>.hyp
    shared: int  # steps (metrics: 1; translations: lines) both hold
    equal: int  # of those, equal to the last bit (translations: the same text)
    first_difference: int | None  # the first step (line) where they differ
    largest_difference: float | None  # max |run - record| over the shared steps (numbers)
    record_only: int  # points only the record holds (a retrain stopped early)
    run_only: int


def same(a: float, b: float) -> bool:
    """Equal to the last bit (NaN agreeing with NaN)."""
    return a == b or (math.isnan(a) and math.isnan(b))


def series_agreement(name: str, record: dict[int, float], run: dict[int, float]) -> Agreement:
    """A quantity logged by step in both folders, compared at the steps both logged."""
    steps = sorted(set(record) & set(run))
    differing = [s for s in steps if not same(record[s], run[s])]
    gaps = [abs(run[s] - record[s]) for s in differing]
    return Agreement(
        name=name,
        shared=len(steps),
        equal=len(steps) - len(differing),
        first_difference=differing[0] if differing else None,
        largest_difference=max(gaps) if gaps else (0.0 if steps else None),
        record_only=len(set(record) - set(run)),
        run_only=len(set(run) - set(record)),
    )


def metrics_agreements(record_dir: Path, run_dir: Path) -> list[Agreement]:
    """metrics.json's training figures, where both runs finished the same number of steps."""
    paths = (Run(record_dir).metrics_file, Run(run_dir).metrics_file)
    if not all(p.is_file() for p in paths):
        return []
    record, run = (read_json(p) for p in paths)
    if record.get("steps") != run.get("steps"):
        return []  # a retrain stopped early: its TensorBoard steps are compared instead
    keys = [k for k in METRICS if isinstance(record.get(k), int | float) and k in run]
    return [
        series_agreement(f"metrics.json:{k}", {0: float(record[k])}, {0: float(run[k])})
        for k in keys
    ]


def translation_agreements(record_dir: Path, run_dir: Path) -> list[Agreement]:
    """Every evaluation's translations both folders hold (eval/<name>.hyp), line by line."""
    rows = []
    for name in Run(record_dir).evaluation_names(".hyp"):
        path, other = Run(record_dir).hypotheses_file(name), Run(run_dir).hypotheses_file(name)
        if not other.is_file():
            continue
        lines = [
            dict(enumerate(p.read_text(encoding="utf-8").splitlines(), start=1))
            for p in (path, other)
        ]
        shared = sorted(set(lines[0]) & set(lines[1]))
        differing = [n for n in shared if lines[0][n] != lines[1][n]]
        rows.append(
            Agreement(
                name=f"eval/{path.name}",
                shared=len(shared),
                equal=len(shared) - len(differing),
                first_difference=differing[0] if differing else None,
                largest_difference=None,
                record_only=len(set(lines[0]) - set(lines[1])),
                run_only=len(set(lines[1]) - set(lines[0])),
            )
        )
    return rows


def agreements(record_dir: Path, run_dir: Path) -> list[Agreement]:
    """Every compared quantity of run_dir against record_dir (a record or a run folder)."""
    scalars = []
    for flag, folder in (("--record", record_dir), ("--run", run_dir)):
        values = read_scalars(folder)
        if not values:
            raise ReproduceError(
                f"{flag} {folder}: no TensorBoard scalars in {Run(folder).tensorboard}; pass a "
                "run folder of train.py or a record of the study's store"
            )
        scalars.append(values)
    record, run = scalars
    tags = sorted((set(record) | set(run)) - set(MACHINE_TAGS))
    rows = [series_agreement(t, record.get(t, {}), run.get(t, {})) for t in tags]
    if not any(r.shared for r in rows):
        raise ReproduceError(
            f"--run {run_dir}: no logged step in common with --record {record_dir}; let the "
            "retrain pass its first log step (trainer.log_every) and check again"
        )
    return (
        rows + metrics_agreements(record_dir, run_dir) + translation_agreements(record_dir, run_dir)
    )


def short_code(code: str) -> str:
    """A commit as git abbreviates it, keeping what follows (" + uncommitted changes ...")."""
    commit, _, rest = code.partition(" ")
    return commit[:7] + (f" {rest}" if rest else "") if len(commit) == 40 else code


def machines(folder: Path) -> str:
    """Where and from which code a folder's run trained (its segments.json), for the report."""
    segments = Run(folder).segments()
    kinds = sorted({f"{s.get('hardware')} @ {short_code(str(s.get('code')))}" for s in segments})
    return "; ".join(kinds) or "not recorded (no segments.json)"


def markdown(record_dir: Path, run_dir: Path, rows: list[Agreement]) -> str:
    """The check as a table and a verdict line."""
    lines = [
        f"record: {record_dir} ({machines(record_dir)})",
        f"run:    {run_dir} ({machines(run_dir)})",
        "",
        "| quantity | shared | equal to the last bit | first difference at | largest difference "
        "| only in record | only in run |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        largest = "" if r.largest_difference is None else f"{r.largest_difference:.3g}"
        first = "" if r.first_difference is None else str(r.first_difference)
        lines.append(
            f"| {r.name} | {r.shared} | {r.equal} | {first} | {largest} | {r.record_only} "
            f"| {r.run_only} |"
        )
    shared = sum(r.shared for r in rows)
    differing = [r.name for r in rows if r.equal < r.shared]
    verdict = (
        f"reproduced: all {shared} shared values equal to the last bit"
        if not differing
        else f"differs: {', '.join(differing)} ({shared - sum(r.equal for r in rows)} of "
        f"{shared} shared values)"
    )
    return "\n".join([*lines, "", verdict]) + "\n"


def reproduce(record_dir: Path, run_dir: Path) -> bool:
    """Print the check of run_dir against record_dir; True where every shared value agrees."""
    rows = agreements(record_dir, run_dir)
    print(markdown(record_dir, run_dir, rows), end="")
    return all(r.equal == r.shared for r in rows)
