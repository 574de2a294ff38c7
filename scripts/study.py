"""The position-encoding study (docs/study.md): train and score every run, then report.

    python scripts/study.py run [--condition all joined short] [--variants V ...] [--seeds S ...]
        [--launcher basic|submitit_local|slurm] [--jobs N] [--root outputs/study]
        [--records results/archive/pe_study/runs]
        [--tuning results/archive/pe_tuning/tuning.json ...]
        [-- hydra overrides for every run]
    python scripts/study.py run --experiment E --tuning T [T ...] --seeds S [S ...] [--variants V]
        [--launcher ...] [--jobs N] [--root outputs/study] [-- hydra overrides for every run]
    python scripts/study.py report [--root results/archive/pe_study/runs]
        [--out results/archive/pe_study]
        [--tuning results/archive/pe_tuning/tuning.json ...]
    python scripts/study.py tune [--stores S ...] [--out results/archive/pe_tuning]
        [--plan | --launch [--launcher basic|submitit_local|slurm] [--jobs N]]
        [--condition all | --experiment E [--root outputs/tuning]] [--variants V ...]
        [--rates 0.25 0.5 1 2] [--seeds 1 2] [-- hydra overrides of every run]
    python scripts/study.py choose --setting KEY --rate R --tunings T T [...] [--out FOLDER]
    python scripts/study.py plateau --runs RUN [RUN ...] [--out results/archive/pe_plateau]
        [--threshold 0.02]
    python scripts/study.py pictures (--runs RUN [RUN ...] [--keep] | --keep)
        [--out results/archive/pe_pictures] [--split test] [--positions 64] [--data-path FOLDER]
    python scripts/study.py reproduce --record RECORD --run RUN

`run` trains each (condition, variant, seed) into <root>/<condition>/<variant>/seed-<s>/ through
`train.py --multirun` and Hydra's launcher (basic: one after the other; submitit_local: N at a
time; slurm: a cluster), resumes unfinished runs, skips finished ones and those the record store
holds, scores each run once here and keeps its record (no checkpoints) in the store (studies/);
with --tuning, each variant at the rate `tune` chose for it (refused where the choice is not final;
of several tuning.json, the one at the longest budget that tuned the variant: a check at the final
budget overrides the grid's choice); with --experiment, any experiment's variants at the rates its
`tune --experiment` chose, trained only (studies/grid.py).
`report` writes the tables, JSON and plots of every scored run.
`tune` chooses each variant's optim.lr_scale by mean dev PPL over a grid of rates and seeds
(`--plan`: print the commands of the grid points not run yet; `--launch`: train them through
Hydra's launcher, then choose), `choose` another setting's value
(SHAPE's K) from one tuning.json per value (studies/choice.py), and `plateau` the step budget
from runs' dev PPL curves (studies/tuning.py).
`reproduce` checks a run retrained from a record's command against that record, value by value
(studies/reproduce.py): exit status 0 where every shared value is equal to the last bit, else 1.
"""

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.errors import report_user_errors
from studies.choice import choose_setting
from studies.grid import ROUNDS, launch_grid, train_tuned
from studies.pictures import pictures
from studies.plan import CONDITIONS, LAUNCHERS, RECORDS
from studies.report import write_report
from studies.reproduce import reproduce
from studies.runner import run_study, training_overrides
from studies.tuning import DEFAULT_RATES, DEFAULT_SEEDS, Protocol, plateau, tune


def records_folder(value: str) -> Path | None:
    """--records: a folder, or none."""
    return None if value == "none" else Path(value)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line of every subcommand."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_run(commands)
    add_report(commands)
    add_tune(commands)
    add_choose(commands)
    add_plateau(commands)
    add_pictures(commands)
    add_reproduce(commands)
    args = parser.parse_args(argv)
    if args.command == "run" and args.experiment:
        if args.condition or args.records != RECORDS:
            parser.error(
                "run: --experiment trains any experiment's runs: drop --condition/--records"
            )
        if not (args.tuning and args.seeds):
            parser.error("run: --experiment needs --tuning (its tune's tuning.json) and --seeds")
    if args.command == "run" and not args.condition:
        args.condition = ["all"]
    if args.command == "tune" and not args.launch and (args.launcher or args.jobs != 1):
        parser.error("tune: --launcher and --jobs go with --launch (train the missing points)")
    if args.command == "pictures" and not (args.runs or args.keep):
        parser.error("pictures: pass --runs, or --keep to redraw --out's pictures.json")
    if args.command == "tune" and args.rounds < 1:
        parser.error(f"tune: --rounds {args.rounds}: pass 1 or more")
    return args


def add_run(commands) -> None:
    """The command line of `run`."""
    run = commands.add_parser("run", help="train, resume and score the study's runs")
    run.add_argument(
        "--condition",
        nargs="+",
        choices=sorted(CONDITIONS),
        help="training conditions (default: all)",
    )
    run.add_argument(
        "--experiment",
        help="instead: the configs/experiment/<name> a --tuning file tuned (any experiment); "
        "its runs are trained only, into <root>/<name>/<variant>/seed-<s>",
    )
    run.add_argument("--variants", nargs="+", help="position variants (default: the study's)")
    run.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the study's plan)")
    run.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        help="Hydra launcher of the training runs (default: basic, or submitit_local with --jobs)",
    )
    run.add_argument("--jobs", type=int, default=1, help="runs at a time (submitit_local, slurm)")
    run.add_argument("--root", type=Path, default=Path("outputs/study"), help="runs folder")
    run.add_argument(
        "--records",
        type=records_folder,
        default=RECORDS,
        help="record store: runs recorded there are skipped (default: "
        "results/archive/pe_study/runs; none)",
    )
    run.add_argument(
        "--tuning",
        type=Path,
        nargs="+",
        help="tuning.json files of `tune`: each variant at its chosen rate (from the file at the "
        "longest budget that tuned it), with the grid's overrides",
    )
    run.add_argument("overrides", nargs="*", help="Hydra overrides for every run, after --")


def add_report(commands) -> None:
    """The command line of `report`."""
    report = commands.add_parser("report", help="tables, JSON and plots of the scored runs")
    report.add_argument(
        "--root", type=Path, default=RECORDS, help="runs folder (default: the record store)"
    )
    report.add_argument(
        "--out", type=Path, default=Path("results/archive/pe_study"), help="report folder"
    )
    report.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (0: off)")
    report.add_argument(
        "--tuning",
        type=Path,
        nargs="+",
        help="tuning.json files: check each variant's rate is the chosen one",
    )


def add_tune(commands) -> None:
    """The command line of `tune`."""
    tune = commands.add_parser("tune", help="each variant's learning rate from a grid, by dev PPL")
    tune.add_argument(
        "--stores",
        type=Path,
        nargs="+",
        help="record stores or run roots holding <folder>/<variant>/seed-<s> (default: "
        "results/archive/pe_study/runs and results/archive/pe_study_lr*/runs; with --experiment "
        "<root>/lr*)",
    )
    tune.add_argument(
        "--out", type=Path, default=Path("results/archive/pe_tuning"), help="report folder"
    )
    mode = tune.add_mutually_exclusive_group()
    mode.add_argument("--plan", action="store_true", help="print the missing runs; write nothing")
    mode.add_argument(
        "--launch",
        action="store_true",
        help="train the missing runs through --launcher, then choose (studies/grid.py)",
    )
    tune.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        help="with --launch: Hydra launcher (default: basic, or submitit_local with --jobs)",
    )
    tune.add_argument("--jobs", type=int, default=1, help="with --launch: runs at a time")
    tune.add_argument(
        "--rounds", type=int, default=ROUNDS, help="with --launch: at most N launch rounds"
    )
    tune.add_argument(
        "--condition", default="all", choices=sorted(CONDITIONS), help="study condition"
    )
    tune.add_argument(
        "--experiment", help="any configs/experiment/<name> instead (runs: train.py, in --root)"
    )
    tune.add_argument(
        "--root", type=Path, default=Path("outputs/tuning"), help="--experiment's runs folder"
    )
    tune.add_argument("--variants", nargs="+", help="position variants (default: those found)")
    tune.add_argument("--rates", type=float, nargs="+", default=list(DEFAULT_RATES))
    tune.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    tune.add_argument("overrides", nargs="*", help="Hydra overrides of every run, after --")


def add_choose(commands) -> None:
    """The command line of `choose`."""
    choose = commands.add_parser("choose", help="a setting's value (SHAPE's K) by dev PPL")
    choose.add_argument("--setting", required=True, help="the key, e.g. position.max_shift")
    choose.add_argument("--rate", type=float, required=True, help="the grids' optim.lr_scale")
    choose.add_argument(
        "--tunings", type=Path, nargs="+", required=True, help="one tuning.json per value"
    )
    choose.add_argument("--out", type=Path, help="report folder (choice.json, choice.md)")


def add_plateau(commands) -> None:
    """The command line of `plateau`."""
    plateau = commands.add_parser("plateau", help="the step budget at the dev PPL plateau")
    plateau.add_argument("--runs", type=Path, nargs="+", required=True, help="run folders")
    plateau.add_argument("--out", type=Path, default=Path("results/archive/pe_plateau"))
    plateau.add_argument(
        "--threshold", type=float, default=0.02, help="relative improvement (default 0.02)"
    )


def add_pictures(commands) -> None:
    """The command line of `pictures`."""
    draw = commands.add_parser("pictures", help="position similarity and attention distances")
    draw.add_argument(
        "--runs", type=Path, nargs="+", default=[],
        help="training run folders (none, with --keep: redraw --out's pictures.json)",
    )  # fmt: skip
    draw.add_argument("--out", type=Path, default=Path("results/archive/pe_pictures"))
    draw.add_argument("--split", default="test", help="the split measured (default: test)")
    draw.add_argument("--positions", type=int, default=64, help="positions in the similarity")
    draw.add_argument("--data-path", help="the corpus folder, if it moved since training")
    draw.add_argument(
        "--keep",
        action="store_true",
        help="keep --out's pictures of other variants (runs measured in earlier calls)",
    )


def add_reproduce(commands) -> None:
    """The command line of `reproduce`."""
    check = commands.add_parser("reproduce", help="a retrained run against its record")
    check.add_argument("--record", type=Path, required=True, help="a record (or run) folder")
    check.add_argument("--run", type=Path, required=True, help="the retrained run folder")


def launcher_of(args: argparse.Namespace) -> str:
    """--launcher, or its default: basic, or submitit_local with --jobs N > 1."""
    return args.launcher or ("basic" if args.jobs == 1 else "submitit_local")


@report_user_errors
def main(argv: list[str] | None = None):
    """Command-line entry; a problem the user can fix is one `error:` line and exit status 1."""
    args = parse(argv)
    logging.basicConfig(  # train.py's and evaluate.py's progress lines, and each run's train.log
        level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
    )
    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # its event reader's file lines
    if args.command == "run" and args.experiment:
        return train_tuned(
            args.tuning, args.experiment, args.root, args.seeds, args.variants,
            (launcher_of(args), args.jobs), args.overrides,
        )  # fmt: skip
    if args.command == "run":
        return run_study(
            args.root,
            args.condition,
            args.variants,
            args.seeds,
            args.jobs,
            args.overrides,
            records=args.records,
            launcher=launcher_of(args),
            tuning=args.tuning,
        )
    if args.command == "tune":
        training = training_overrides(args.overrides) if args.launch else args.overrides
        protocol = Protocol(
            condition=args.condition,
            experiment=args.experiment,
            overrides=tuple(training),
            variants=tuple(args.variants) if args.variants else None,
            rates=tuple(args.rates),
            seeds=tuple(args.seeds),
            root=args.root,
        )
        if not args.launch:
            return tune(args.stores, protocol, None if args.plan else args.out)
        hydra = [o for o in args.overrides if o not in training]  # the launcher's, not the runs'
        return launch_grid(
            args.stores, protocol, args.out, launcher_of(args), args.jobs, hydra, rounds=args.rounds
        )
    if args.command == "choose":
        return choose_setting(args.setting, args.rate, args.tunings, args.out)
    if args.command == "pictures":
        return pictures(
            args.runs, args.out, args.split, args.positions, args.data_path, keep=args.keep
        )
    if args.command == "reproduce":
        return None if reproduce(args.record, args.run) else sys.exit(1)
    if args.command == "plateau":
        return plateau(args.runs, args.out, args.threshold)
    return write_report(args.root, args.out, args.resamples, tuning=args.tuning)


if __name__ == "__main__":
    main()
