"""One command runs a declared study: settings -> grid -> check -> finals -> report.

`python scripts/run_study.py <name>` (docs/declare-a-study.md). Each stage lists the points it
needs (studies/store.py's `Point`), uses those whose records the store keeps, records those a
finished run folder holds, and trains the rest through Hydra's launcher, `jobs` at a time: one
`train.py --multirun` a point, so the same command trains here (basic, submitit_local) or on a
cluster (slurm). An unfinished run is launched again and resumes from its checkpoints; a record
or run folder trained differently (settings or data fingerprints) is refused, never mixed in.
A stage that needs what an earlier one has not decided yet waits: the next call goes on.
"""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from common.configs import compose_config
from data.corpus import text_fingerprints
from runs.run import Run
from studies.plan import LAUNCHERS, LOCAL_TIMEOUT_MIN, ROOT, StudyError
from studies.protocol import StudySpec
from studies.rules import Choice, DevResult
from studies.store import (
    STAGES,
    Point,
    Record,
    keep,
    make_record,
    rate_folder,
    read_record,
    record_differences,
    record_dir,
    work_dir,
)
from studies.tuning import diverged_in_log


@dataclass(frozen=True)
class Launch:
    """How points train: Hydra's launcher, how many at a time, and overrides of every run
    (where the data is: data.path=<folder>) and of the launcher (hydra.launcher.partition=)."""

    launcher: str = "basic"
    jobs: int = 1
    overrides: tuple[str, ...] = ()
    hydra: tuple[str, ...] = ()


@dataclass
class StudyRun:
    """One call of the study's command: the study, where it trains and keeps, and how."""

    study: StudySpec
    work: Path
    results: Path
    launch: Launch = field(default_factory=Launch)
    dry_run: bool = False
    store_only: bool = False  # --report: the store's records alone (not the work folder's runs)
    until: str = STAGES[-1]  # the last stage that trains (the later ones only read records)
    echo: Callable[[str], None] = print
    planned: list[Point] = field(default_factory=list)  # what the dry run would train
    failed: list[str] = field(default_factory=list)  # the logs of trainings that failed
    _texts: dict = field(default_factory=dict)
    _records: list[Record] | None = None  # read once, read again after a record is kept
    _saying: threading.Lock = field(default_factory=threading.Lock)

    def say(self, line: str) -> None:
        """echo one line whole (the runs' threads report at once)."""
        with self._saying:
            self.echo(line)

    def records(self) -> list[Record]:
        """Every record the study's store keeps, of every stage (each read and checked once)."""
        if self._records is None:
            folder = Path(self.results) / self.study.name
            found = sorted(folder.glob("*/runs/**/record.json"))
            self._records = [read_record(p.parent) for p in found]
        return list(self._records)

    @property
    def cost(self) -> float:
        """CPU-seconds a step: the median of the study's records, else its declared cost."""
        measured = [r.cpu_seconds / r.steps for r in self.records() if r.cpu_seconds > 0]
        return statistics.median(measured) if measured else self.study.cost.cpu_seconds_per_step

    def trains(self, stage: str) -> bool:
        """Whether this call trains (and scores) a stage's points."""
        return not self.dry_run and STAGES.index(stage) <= STAGES.index(self.until)

    def words(self, point: Point) -> list[str]:
        """The train.py overrides of a point (without its run_dir)."""
        return point.train_overrides(self.study, self.launch.overrides)

    def wanted(self, point: Point) -> dict:
        """The resolved config a point trains with."""
        cfg = compose_config([*self.words(point), "run_dir=."])
        return OmegaConf.to_container(cfg, resolve=True)

    def texts(self, wanted: dict) -> dict[str, dict]:
        """The raw text fingerprints of the data a config reads (computed once per corpus)."""
        key = json.dumps(
            {k: wanted["data"].get(k) for k in ("corpus", "src_lang", "tgt_lang")}, sort_keys=True
        )
        if key not in self._texts:
            self._texts[key] = text_fingerprints(OmegaConf.create(wanted["data"]))
        return self._texts[key]

    def check_data(self) -> None:
        """Load each condition's corpus once and check the study's test splits are in it, before
        anything is planned (probe g-23, g-25, S-f16c: a folder without the pair's files, or an
        unknown split, was planned as N runs that would each fail)."""
        for condition in self.study.conditions:
            variant = self.study.condition_variants(condition)[0]
            point = Point("grid", condition, variant, self.study.grid.rates[0], 1, 1)
            splits = self.texts(self.wanted(point))
            for split in self.study.test:
                if split not in splits:
                    raise StudyError(
                        f"test: {split} is not a split of {condition}'s corpus "
                        f"({', '.join(splits)}): declare one of those"
                    )

    def refuse_if_different(self, folder: Path, point: Point) -> None:
        """Refuse a record or run folder trained otherwise than the study trains the point."""
        wanted = self.wanted(point)
        refused = record_differences(folder, wanted, self.texts(wanted))
        if refused:
            raise StudyError(
                f"{folder} was trained differently from {point.label} ({'; '.join(refused)}): "
                "move it away, or change the study back"
            )

    def recorded(self, point: Point) -> Record | None:
        """The point's record: kept before (checked), or kept now from a finished run folder."""
        folder = record_dir(self.results, self.study, point)
        record = read_record(folder)
        if record is not None:
            if record.steps != point.steps:  # a budget edited after its records (probe 17-5)
                raise StudyError(
                    f"{folder} holds a {record.steps:,}-step training, but the study declares "
                    f"{point.steps:,} steps for {point.label}: move the {point.stage} records "
                    f"away to train them again, or declare {record.steps:,} steps again"
                )
            self.refuse_if_different(folder, point)
            return record
        run = work_dir(self.work, self.study, point)
        metrics = Run(run).finished_metrics()
        if metrics is not None and int(metrics.get("steps", -1)) != point.steps:
            metrics = None  # finished at another budget: an extension not trained yet
        if metrics is None and not diverged_in_log(Run(run).log_file):
            return None
        if self.store_only:  # a report of the store reads nothing outside it (probe 17-22)
            self.say(f"study: {point.label} trained in {run}, not kept: left out of this report")
            return None
        self.refuse_if_different(run, point)
        words = [*self.words(point), f"run_dir={run}"]
        record = make_record(run, self.study, point, words, metrics)
        if self.dry_run:  # a dry run (--dry-run, --report) writes nothing: read as if kept
            self.say(f"study: {point.label} trained in {run}; a run without --dry-run keeps it")
            return record
        keep(run, folder, record, self.work / self.study.name)
        self._records = None  # the store changed
        self.say(f"study: recorded {point.label} in {folder}")
        return record

    def ensure(self, points: Sequence[Point]) -> dict[Point, Record]:
        """The records of points: kept ones, then the missing ones trained (not in a dry run)."""
        have = {p: r for p in points if (r := self.recorded(p)) is not None}
        missing = [p for p in points if p not in have]
        if not missing:
            return have
        if not self.trains(missing[0].stage):
            self.planned += [p for p in missing if p not in self.planned]
            return have
        train_points(self, missing)
        return {p: r for p in points if (r := self.recorded(p)) is not None}


def sweep_command(run: StudyRun, point: Point) -> list[str]:
    """`python train.py --multirun ...` training one point into its work folder."""
    folder = work_dir(run.work, run.study, point).absolute()
    launcher = run.launch.launcher
    settings = {
        "basic": [],
        "submitit_local": [f"hydra.launcher.timeout_min={LOCAL_TIMEOUT_MIN}"],
        "slurm": ["hydra.launcher.array_parallelism=1"],
    }[launcher]
    return [
        sys.executable,
        str(ROOT / "train.py"),
        "--multirun",
        f"hydra/launcher={launcher}",
        *settings,
        *run.launch.hydra,
        *run.words(point),
        f"hydra.sweep.dir={folder.parent}",
        f"hydra.sweep.subdir={folder.name}",
    ]


def train_one(run: StudyRun, point: Point, number: str) -> None:
    """Train one point, its output in <work>/<study>/logs/; a progress line at start and end."""
    logs = Path(run.work) / run.study.name / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    name = f"{point.stage}_{point.condition}_{point.variant}{point.settings_tag}"
    tail = f"{rate_folder(point.lr_scale)}_steps{point.steps}_seed-{point.seed}"
    log = logs / f"{name.replace('/', '_')}_{tail}.log"
    command = sweep_command(run, point)
    run.say(f"study: [{number}] training {point.label} (log: {log})")
    started = time.monotonic()
    with open(log, "a", encoding="utf-8") as out:
        out.write(shlex.join(["python", *command[1:]]) + "\n")
        out.flush()
        status = subprocess.run(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    minutes = (time.monotonic() - started) / 60
    what = "done" if status == 0 else f"failed (exit status {status}; see its log)"
    if status != 0 and not diverged_in_log(Run(work_dir(run.work, run.study, point)).log_file):
        run.failed.append(str(log))  # a diverged run is a result (infinite dev PPL), not this
    run.say(f"study: [{number}] {point.label}: {what} in {minutes:.1f} min")
    run.recorded(point)  # kept at once: a kill later loses none of it


def train_points(run: StudyRun, points: Sequence[Point]) -> None:
    """Train points, `jobs` at a time (each its own `train.py --multirun`)."""
    if run.launch.launcher not in LAUNCHERS:
        raise StudyError(f"--launcher {run.launch.launcher}: pass one of {', '.join(LAUNCHERS)}")
    total = len(points)
    with ThreadPoolExecutor(max_workers=max(1, run.launch.jobs)) as pool:
        done = [
            pool.submit(train_one, run, p, f"{i}/{total}") for i, p in enumerate(points, start=1)
        ]
        for future in done:
            future.result()


def dev_results(records: dict[Point, Record]) -> list[DevResult]:
    """The rule's rows of some records (a diverged run: infinite dev PPL)."""
    return [
        DevResult(p.lr_scale, p.seed, float("inf") if r.dev_ppl is None else r.dev_ppl)
        for p, r in records.items()
    ]


def choice_line(point_of: str, choice: Choice) -> str:
    """'all/rope: ×0.5 (0.25: 12.31, 0.5: 11.20, ...)' or what the choice still waits for."""
    means = ", ".join(
        f"{m.lr_scale:g}: {'…' if m.mean is None else f'{m.mean:.2f}'}" for m in choice.means
    )
    chosen = f"×{choice.rate:g}" if choice.complete and choice.rate else "not decided"
    return f"{point_of}: {chosen} (mean dev PPL by rate: {means})"
