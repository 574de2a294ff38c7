"""The German position-encoding study's report and tools (docs/study.md).

    python scripts/study.py report --root STORE --out FOLDER [--study NAME]
        [--tuning TUNING_JSON ...] [--resamples 1000]
    python scripts/study.py plateau --runs RUN [RUN ...] --out FOLDER [--threshold 0.02]
    python scripts/study.py pictures (--runs RUN [RUN ...] [--keep] | --keep) --out FOLDER
        [--split test] [--positions 64] [--data-path FOLDER]
    python scripts/study.py reproduce --record RECORD --run RUN

`report` writes the tables, JSON and plots of every scored run (study.json) of a record store;
the conditions, baselines and plan are its study's (configs/study/<name>.yaml, named by the
records' record.json, or by --study for a store older than record.json).
`plateau` finds the step budget from runs' dev PPL curves (studies/tuning.py).
`pictures` draws what trained models do with positions (studies/pictures.py).
`reproduce` checks a run retrained from a record's command against that record, value by value
(studies/reproduce.py): exit status 0 where every shared value is equal to the last bit, else 1.
The runs themselves: `python scripts/run_study.py <study>` (grid, settings, check, finals,
report); this script's retired `run`, `tune` and `choose` trained the German study's records at
the commits the records name.
"""

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.errors import report_user_errors
from studies.pictures import pictures
from studies.report import write_report
from studies.reproduce import reproduce
from studies.tuning import plateau


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line of every subcommand."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add_report(commands)
    add_plateau(commands)
    add_pictures(commands)
    add_reproduce(commands)
    args = parser.parse_args(argv)
    if args.command == "pictures" and not (args.runs or args.keep):
        parser.error("pictures: pass --runs, or --keep to redraw --out's pictures.json")
    return args


def add_report(commands) -> None:
    """The command line of `report`."""
    report = commands.add_parser("report", help="tables, JSON and plots of the scored runs")
    report.add_argument(
        "--root", type=Path, required=True, help="the record store (<condition>/<variant>/...)"
    )
    report.add_argument("--out", type=Path, required=True, help="report folder")
    report.add_argument(
        "--study",
        help="configs/study/<name> of a store whose records have no record.json (older stores)",
    )
    report.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (0: off)")
    report.add_argument(
        "--tuning",
        type=Path,
        nargs="+",
        help="tuning.json files: check each variant's rate is the chosen one",
    )


def add_plateau(commands) -> None:
    """The command line of `plateau`."""
    plateau = commands.add_parser("plateau", help="the step budget at the dev PPL plateau")
    plateau.add_argument("--runs", type=Path, nargs="+", required=True, help="run folders")
    plateau.add_argument("--out", type=Path, required=True, help="folder of plateau.json")
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
    draw.add_argument("--out", type=Path, required=True, help="folder of pictures.json")
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


@report_user_errors
def main(argv: list[str] | None = None):
    """Command-line entry; a problem the user can fix is one `error:` line and exit status 1."""
    args = parse(argv)
    logging.basicConfig(  # train.py's and evaluate.py's progress lines, and each run's train.log
        level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
    )
    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # its event reader's file lines
    if args.command == "pictures":
        return pictures(
            args.runs, args.out, args.split, args.positions, args.data_path, keep=args.keep
        )
    if args.command == "reproduce":
        return None if reproduce(args.record, args.run) else sys.exit(1)
    if args.command == "plateau":
        return plateau(args.runs, args.out, args.threshold)
    return write_report(args.root, args.out, args.resamples, tuning=args.tuning, study=args.study)


if __name__ == "__main__":
    main()
