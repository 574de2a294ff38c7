"""Running the study: train its runs through `train.py --multirun`, then score and record them.

Each (condition, variant, seed) trains into ``<root>/<condition>/<variant>/seed-<s>/``: the runs
still to train go to Hydra's launcher in sweeps (``hydra.sweep.dir=<root>/<condition>``,
``hydra.sweep.subdir=<variant>/seed-<s>``), one sweep per condition and set of seeds, so
``hydra/launcher=slurm`` trains the study on a cluster and ``submitit_local`` N runs at a time
here. A run the record store holds, or one already finished, is not launched again; an
unfinished one is launched again and resumes from its checkpoints. Every finished run is then
scored here, once (studies/scoring.py), and its record kept in the store (studies/records.py).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from common.configs import compose_config
from common.errors import UserError, first_line
from runs.run import Run
from studies.plan import (
    CONDITIONS,
    LAUNCHERS,
    ROOT,
    Job,
    StudyError,
    condition_max_words,
    multirun_command,
    planned_jobs,
    run_dir_of,
)
from studies.records import StudyRecord, keep_record, record_mismatch, recorded
from studies.scoring import score_job
from studies.tuning import (
    TunedRates,
    math_differences,
    position_settings,
    rate_text,
    read_tuned_rates,
    setting,
)


@dataclass(frozen=True)
class Sweep:
    """One `train.py --multirun`: every variant x seed of one condition (at one rate)."""

    condition: str
    variants: tuple[str, ...]
    seeds: tuple[int, ...]
    lr_scale: float | None = None  # None: the configs' (or the overrides') rate

    @property
    def size(self) -> int:
        return len(self.variants) * len(self.seeds)


def training_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides of the runs' configs: those not addressed to Hydra itself (hydra.*)."""
    return [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))]


def rate_override(lr_scale: float | None) -> list[str]:
    """The override of a tuned rate (none without one)."""
    return [] if lr_scale is None else [f"optim.lr_scale={rate_text(lr_scale)}"]


def with_tuning(tuned: TunedRates, overrides: Sequence[str]) -> list[str]:
    """The grid's overrides, then the user's (which replace a grid's override of one key); the
    rate is tuning.json's, not an override's."""
    for override in overrides:
        if setting(override) == "optim.lr_scale":
            raise StudyError(
                f"{override} with --tuning: each variant trains at the rate {tuned.name} chose "
                "for it; drop the override"
            )
    mine = {setting(o) for o in overrides}
    return [*(o for o in tuned.overrides if setting(o) not in mine), *overrides]


def check_tuned_configuration(tuned: TunedRates, cells, training: Sequence[str]) -> None:
    """Refuse overrides that change what the grid tuned: only settings that keep the math (the
    step budget, evaluations, files, device: runs.resume's KEEP_THE_MATH) may differ.

    cells: the (condition, variant) pairs to train, each compared at its own position config."""
    for condition in sorted({c for c, _ in cells}):
        variants = sorted({v for c, v in cells if c == condition})
        refused = math_differences(CONDITIONS[condition], tuned.overrides, training, variants)
        if refused:
            raise StudyError(
                f"the overrides after -- change what {tuned.name} tuned ({'; '.join(refused)}): "
                "drop them, or tune with them"
            )


def tuned_rates(tuned: TunedRates | None, planned: Sequence[Job]) -> dict[str, float]:
    """Each planned variant's rate chosen in a tuning.json (none without one), refused where it
    tuned another experiment than the study's or its choice is not final."""
    if tuned is None:
        return {}
    if tuned.experiment not in CONDITIONS.values():
        raise StudyError(
            f"{tuned.name} tuned experiment={tuned.experiment}, not one of the study's "
            "conditions: pass a tuning.json of `study.py tune --condition ...`"
        )
    return {v: tuned.final_rate(v) for v in dict.fromkeys(j.variant for j in planned)}


def chunks(values: Sequence, size: int) -> list[tuple]:
    """values in consecutive tuples of at most size."""
    return [tuple(values[i : i + size]) for i in range(0, len(values), size)]


def sweeps(
    jobs: Sequence[Job],
    at_once: int | None,
    rates: Mapping[str, float] | None = None,
    overrides: Sequence[str] = (),
) -> list[Sweep]:
    """The sweeps that train jobs: per condition (and tuned rate), the variants needing the same
    seeds together; at_once: at most that many runs a sweep (submitit_local starts a sweep's
    runs all at once); rates: each variant's tuned rate (a sweep trains at one); overrides: the
    runs', where one that sets a position.* key puts each variant in a sweep of its own (Hydra
    composes a sweep's first config at the default position, which lacks e.g. SHAPE's K)."""
    rates = rates or {}
    apart = bool(position_settings(overrides))
    seeds: dict[tuple[str, str], list[int]] = {}
    for job in jobs:
        seeds.setdefault((job.condition, job.variant), []).append(job.seed)
    groups: dict[tuple[str, tuple[int, ...], float | None, str], list[str]] = {}
    for (condition, variant), its_seeds in seeds.items():
        key = (condition, tuple(its_seeds), rates.get(variant), variant if apart else "")
        groups.setdefault(key, []).append(variant)
    result = []
    for (condition, its_seeds, rate, _), variants in groups.items():
        whole = Sweep(condition, tuple(variants), its_seeds, rate)
        if at_once is None or whole.size <= at_once:
            result.append(whole)
        elif len(its_seeds) <= at_once:
            size = at_once // len(its_seeds)
            result += [Sweep(condition, part, its_seeds, rate) for part in chunks(variants, size)]
        else:
            result += [
                Sweep(condition, (variant,), part, rate)
                for variant in variants
                for part in chunks(its_seeds, at_once)
            ]
    return result


def sweep_command(
    sweep: Sweep, root: Path, launcher: str, jobs: int, overrides: Sequence[str]
) -> list[str]:
    """`python train.py --multirun ...` training one sweep into <root>/<condition>/<v>/seed-<s>."""
    experiment, sweep_dir = CONDITIONS[sweep.condition], root / sweep.condition
    overrides = [*overrides, *rate_override(sweep.lr_scale)]
    return multirun_command(
        experiment, sweep.variants, sweep.seeds, sweep_dir, launcher, jobs, overrides
    )


def launch(sweep: Sweep, root: Path, launcher: str, jobs: int, overrides, say) -> int:
    """Run one sweep to its end (its output to this console); the multirun's exit status."""
    command = sweep_command(sweep, root, launcher, jobs, overrides)
    say(f"study: {sweep.size} runs of {sweep.condition} through hydra/launcher={launcher}:")
    say("  " + shlex.join(["python", *command[1:]]))
    return subprocess.run(command, cwd=ROOT).returncode


def check_finished_run(job: Job, settings: Sequence[str]) -> None:
    """Refuse a run folder that finished with other training settings than the study's now: it
    is never scored and recorded as if it had trained with these."""
    changed = record_mismatch(job, job.run_dir, settings)
    if changed:
        raise StudyError(
            f"{job.run_dir} finished with other settings than the study's now "
            f"({'; '.join(changed)}): pass another --root, or delete it to train the run again"
        )


def triage(
    planned: list[Job],
    records: Path | None,
    overrides: Sequence[str],
    say,
    rates: Mapping[str, float] | None = None,
) -> tuple[dict[str, StudyRecord], list[Job], list[Job]]:
    """The store's records of planned jobs; the jobs finished here before; the jobs to train
    (rates: each variant's tuned rate, part of the settings a record must have been trained at).

    A record older than the buckets' length ratios whose run finished here is scored again (from
    the run's kept translations: no search runs); without its run folder it stays as it is.
    """
    stored, finished, to_train = {}, [], []
    for job in planned:
        settings = [*overrides, *rate_override((rates or {}).get(job.variant))]
        record = recorded(job, records, settings) if records is not None else None
        finished_here = Run(job.run_dir).finished_metrics() is not None
        if record is not None and (record.has_bucket_lengths or not finished_here):
            say(f"  {job.label}: recorded in {records}, not trained again")
            stored[job.label] = record
        elif record is not None:
            check_finished_run(job, settings)
            say(f"  {job.label}: recorded before the buckets' length ratios; scored again")
            finished.append(job)
        elif finished_here:
            check_finished_run(job, settings)
            say(f"  {job.label}: finished in {job.run_dir}, not trained again")
            finished.append(job)
        else:
            if Run(job.run_dir).has_checkpoints():
                say(f"  {job.label}: unfinished, resuming from {Run(job.run_dir).checkpoints}")
            to_train.append(job)
    return stored, finished, to_train


def score_and_keep(job: Job, root: Path, records: Path | None, max_words, say) -> StudyRecord:
    """Score a finished run (once) and copy its record to the store."""
    metrics = Run(job.run_dir).finished_metrics()
    if metrics is None:
        raise StudyError(f"{job.label} did not finish: see {Run(job.run_dir).log_file}")
    record = score_job(job, metrics, root / "concat_sets", max_words, say)
    if records is not None:
        keep_record(job.run_dir, run_dir_of(records, job.condition, job.variant, job.seed))
    return record


def check_launch(launcher: str, jobs: int, cells, overrides: Sequence[str]) -> None:
    """Refuse a bad launcher, --jobs or override before anything is launched.

    cells: the (condition, variant) pairs to train; the overrides must compose with each, so a
    setting of some variants only (SHAPE's position.max_shift) is checked where it applies."""
    if launcher not in LAUNCHERS:
        raise StudyError(f"--launcher {launcher}: pass one of {', '.join(LAUNCHERS)}")
    if int(jobs) < 1:
        raise StudyError(f"--jobs {jobs}: pass 1 or more parallel runs")
    if launcher == "basic" and int(jobs) > 1:
        raise StudyError(
            f"--jobs {jobs} with --launcher basic, which trains one run after the other: "
            "pass --launcher submitit_local (or slurm) for runs at a time"
        )
    for condition, variant in cells:  # a bad override fails here, once, not in every run
        experiment = CONDITIONS[condition]
        try:
            compose_config([f"experiment={experiment}", f"position={variant}", *overrides])
        except (HydraException, OmegaConfBaseException) as e:
            message = first_line(e)
            raise StudyError(
                f"the overrides after -- do not compose with experiment={experiment} "
                f"position={variant} ({message}): fix them"
            ) from e


def run_study(
    root: Path,
    conditions: Sequence[str] = ("all",),
    variants: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    jobs: int = 1,
    overrides: Sequence[str] = (),
    echo: Callable[[str], None] = print,
    records: Path | None = None,
    launcher: str = "basic",
    tuning: Path | Sequence[Path] | None = None,
) -> list[StudyRecord]:
    """Train (through Hydra's launcher), resume or skip, then score every planned run.

    records: the record store (None: none); a run recorded there is skipped, a run scored here
    is recorded there. tuning: tuning.json files of `study.py tune` (read_tuned_rates): each
    variant trains at its chosen rate, with the grid's overrides. A run that fails is named at
    the end (StudyError) after the others.
    """
    root = Path(root).absolute()
    records = None if records is None else Path(records).absolute()
    planned = planned_jobs(root, conditions, variants, seeds)
    tuned = None if tuning is None else read_tuned_rates(tuning)
    rates = tuned_rates(tuned, planned)
    overrides = list(overrides) if tuned is None else with_tuning(tuned, overrides)
    training = training_overrides(overrides)
    cells = sorted({(j.condition, j.variant) for j in planned})
    check_launch(launcher, jobs, cells, training)
    if tuned is not None:
        check_tuned_configuration(tuned, cells, training)
    kept = "" if records is None else f", records kept in {records}"
    echo(f"study: {len(planned)} runs in {root}{kept}")
    if tuned is not None:
        chosen = ", ".join(f"{v} ×{r:g}" for v, r in rates.items())
        echo(f"study: each variant at its rate chosen on dev in {tuned.name}: {chosen}")
    done, finished, to_train = triage(planned, records, training, echo, rates)
    at_once = int(jobs) if launcher == "submitit_local" else None
    for sweep in sweeps(to_train, at_once, rates, training):
        if (status := launch(sweep, root, launcher, int(jobs), overrides, echo)) != 0:
            echo(f"study: that sweep ended with exit status {status} (its output is above)")
    max_words, failures = condition_max_words("short"), []
    for job in [j for j in planned if j.label not in done]:
        try:
            done[job.label] = score_and_keep(job, root, records, max_words, echo)
        except UserError as e:
            failures.append(job.label)
            echo(f"  {job.label}: error: {e}")
    trained = len([j for j in to_train if j.label not in failures])
    echo(
        f"study: {len(done)} of {len(planned)} runs scored: {trained} "
        f"trained here, {len(planned) - len(to_train)} finished before (skipped), "
        f"{len(failures)} failed"
    )
    if failures:
        raise StudyError(f"{len(failures)} runs failed ({', '.join(failures)}); see their logs")
    return [done[j.label] for j in planned if j.label in done]
