"""Launching a tuning grid (`study.py tune --launch`): the missing points trained through Hydra's
launcher (here one after the other, N at a time, or on SLURM), then the choice, in one command;
and the final runs of any experiment at the rates it chose (`study.py run --experiment`).

Each round reads the stores as `tune` does, trains the points its plan lists (the grid, the
chosen rate's neighbours, the rate beyond an edge), one `train.py --multirun` per rate and set of
seeds, into <root>/lr<rate>/<experiment>/<variant>/seed-<s> (the folders `tune --plan` names),
until no point is missing; then `tune` writes tuning.json. The study's own conditions train
through `study.py run`, which also scores and records (the commands `tune --plan` prints).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from omegaconf import OmegaConf

from common.configs import compose_config
from runs.resume import setting_differences
from runs.run import Run
from studies.plan import ROOT, Job, StudyError, multirun_command
from studies.runner import (
    Sweep,
    check_launch,
    rate_override,
    sweeps,
    training_overrides,
    with_tuning,
)
from studies.tuning import (
    MissingRun,
    Protocol,
    default_stores,
    in_checkout,
    math_differences,
    rate_tag,
    rate_text,
    read_tuned_rates,
    tune,
)

ROUNDS = 4  # the grid, then up to three steps beyond an edge (×0.5 or ×2 each)


def point_sweeps(missing: Sequence[MissingRun], protocol: Protocol, at_once: int | None):
    """The launches that train the missing points: per rate, the variants needing the same
    seeds together (at most at_once runs a launch: submitit_local starts them all at once)."""
    result = []
    for rate in sorted({m.lr_scale for m in missing}):
        jobs = [
            Job(protocol.folder, m.variant, m.seed, Path(m.variant) / f"seed-{m.seed}")
            for m in missing
            if m.lr_scale == rate
        ]
        result += [
            replace(s, lr_scale=rate) for s in sweeps(jobs, at_once, None, protocol.overrides)
        ]
    return result


def launch_points(
    sweep: Sweep, protocol: Protocol, launch: tuple[str, int, tuple[str, ...]], echo
) -> Path:
    """Train one sweep's points (`train.py --multirun`) into <root>/lr<rate>/<experiment>/; that
    run root (read next round, with its diverged runs)."""
    launcher, jobs, hydra = launch
    root = Path(protocol.root).absolute() / f"lr{rate_tag(sweep.lr_scale)}"
    overrides = [*protocol.overrides, f"optim.lr_scale={rate_text(sweep.lr_scale)}", *hydra]
    command = multirun_command(
        protocol.experiment, sweep.variants, sweep.seeds, root / protocol.experiment,
        launcher, jobs, overrides,
    )  # fmt: skip
    echo("tune: " + shlex.join(["python", *command[1:]]))
    status = subprocess.run(command, cwd=ROOT).returncode
    if status != 0:
        echo(f"tune: that sweep ended with exit status {status} (its output is above)")
    return root


def launch_grid(
    stores: Sequence[Path] | None,
    protocol: Protocol,
    out: Path,
    launcher: str = "basic",
    jobs: int = 1,
    hydra: Sequence[str] = (),
    echo: Callable[[str], None] = print,
    rounds: int = ROUNDS,
) -> dict:
    """Train the grid's missing points round by round, then choose (tune's tuning.json); hydra:
    overrides of the launcher only (hydra.launcher.partition=...), never of the runs."""
    if protocol.experiment is None:
        raise StudyError(
            "tune --launch trains an --experiment's grid; the study's conditions train through "
            "the `study.py run` commands `tune --plan` prints (they also score and record)"
        )
    check_launch(launcher, jobs, (), ())
    roots: list[Path] = []
    previous = None
    for _ in range(rounds):
        these = stores_now(stores, protocol, roots)
        plan = tune(these, protocol, None, echo=lambda _: None)
        missing = plan.missing
        if not missing or missing == previous:
            break  # complete, or the last launches finished none of these: their logs say why
        echo(f"tune: training {len(missing)} grid points")
        at_once = int(jobs) if launcher == "submitit_local" else None
        for sweep in point_sweeps(missing, protocol, at_once):
            root = launch_points(sweep, protocol, (launcher, jobs, tuple(hydra)), echo)
            roots += [] if root in roots else [root]
        previous = missing
    return tune(stores_now(stores, protocol, roots), protocol, out, echo)


def stores_now(stores, protocol: Protocol, roots: Sequence[Path]) -> list[Path]:
    """The stores named (or the defaults, as they are now), then the run roots launched into."""
    named = default_stores(protocol) if stores is None else [Path(s) for s in stores]
    seen = {n.absolute() for n in named}
    return [*named, *(r for r in roots if r.is_dir() and r not in seen)]


# --- the final runs of any experiment at its tuned rates --------------------------------------


def check_run_folder(run_dir: Path, words: Sequence[str]) -> None:
    """Refuse a finished run folder trained with other settings than these train.py overrides
    (another rate, budget or setting): it is never counted as a run at the tuned rate."""
    wanted = OmegaConf.to_container(compose_config([*words, f"run_dir={run_dir}"]), resolve=True)
    refused, _ = setting_differences(Run(run_dir).resolved_config(), wanted)
    if refused:
        raise StudyError(
            f"{run_dir} finished with other settings than these runs' ({'; '.join(refused)}): "
            "pass another --root, or delete it to train the run again"
        )


def train_tuned(
    tuning: Sequence[Path],
    experiment: str,
    root: Path,
    seeds: Sequence[int],
    variants: Sequence[str] | None = None,
    launch: tuple[str, int] = ("basic", 1),
    overrides: Sequence[str] = (),
    echo: Callable[[str], None] = print,
) -> list[Path]:
    """`study.py run --experiment`: each variant of any experiment's tuning.json trained at its
    chosen (final) rate, with the grid's overrides, into <root>/<experiment>/<variant>/seed-<s>
    through Hydra's launcher; finished runs are skipped. Trained only: scripts/compare.py
    --score scores them. The finished run folders, in order."""
    launcher, jobs = launch
    check_launch(launcher, jobs, (), ())
    tuned = read_tuned_rates(tuning)
    if tuned.experiment != experiment:
        raise StudyError(
            f"--experiment {experiment}: {tuned.name} tuned experiment={tuned.experiment}; pass "
            "that experiment, or the tuning.json of a grid of this one"
        )
    variants = list(variants or tuned.choices)
    rates = {v: tuned.final_rate(v) for v in variants}  # refused where a choice is not final
    overrides = with_tuning(tuned, overrides)
    training = training_overrides(overrides)
    refused = math_differences(tuned.experiment, tuned.overrides, training, variants)
    if refused:
        raise StudyError(
            f"the overrides after -- change what {tuned.name} tuned ({'; '.join(refused)}): "
            "drop them, or tune with them"
        )
    sweep_dir = Path(root).absolute() / tuned.experiment
    planned = [
        Job(tuned.experiment, v, s, sweep_dir / v / f"seed-{s}") for v in variants for s in seeds
    ]
    done = [j for j in planned if Run(j.run_dir).finished_metrics() is not None]
    for job in done:  # counted only if trained at these settings
        words = [f"experiment={job.condition}", f"position={job.variant}", f"seed={job.seed}"]
        check_run_folder(job.run_dir, [*words, *training, *rate_override(rates[job.variant])])
    todo = [j for j in planned if j not in done]
    chosen = ", ".join(f"{v} ×{r:g}" for v, r in rates.items())
    echo(f"study: {len(todo)} of {len(planned)} runs to train in {sweep_dir}, at {chosen}")
    at_once = int(jobs) if launcher == "submitit_local" else None
    for sweep in sweeps(todo, at_once, rates, training):
        command = multirun_command(
            tuned.experiment, sweep.variants, sweep.seeds, sweep_dir, launcher, jobs,
            [*overrides, *rate_override(sweep.lr_scale)],
        )  # fmt: skip
        echo("study: " + shlex.join(["python", *command[1:]]))
        if (status := subprocess.run(command, cwd=ROOT).returncode) != 0:
            echo(f"study: that sweep ended with exit status {status} (its output is above)")
    finished = [j.run_dir for j in planned if Run(j.run_dir).finished_metrics() is not None]
    echo(
        f"study: {len(finished)} of {len(planned)} runs finished; score them: python "
        f"scripts/compare.py {in_checkout(sweep_dir)} --score"
    )
    return finished
