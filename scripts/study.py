"""The position-encoding study (docs/study.md): train and score every run, then report.

    python scripts/study.py run [--condition all joined short] [--variants V ...] [--seeds S ...]
        [--jobs N] [--root outputs/study] [--records results/pe_study/runs]
        [-- hydra overrides for every run]
    python scripts/study.py report [--root results/pe_study/runs] [--out results/pe_study]

`run` trains each (condition, variant, seed) into <root>/<condition>/<variant>/seed-<s>/ (one
thread a run, N runs at a time), resumes unfinished runs, skips finished ones and those the
record store holds, scores each run once and keeps its record (no checkpoints) in the store
(evaluation/study.py). `report` writes the tables, JSON and plots of every scored run.
"""

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from data.errors import report_user_errors
from evaluation.study import CONDITIONS, RECORDS, run_study, write_report


def records_folder(value: str) -> Path | None:
    """--records: a folder, or none."""
    return None if value == "none" else Path(value)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line of `run` and `report`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="train, resume and score the study's runs")
    run.add_argument(
        "--condition",
        nargs="+",
        default=["all"],
        choices=sorted(CONDITIONS),
        help="training conditions (default: all)",
    )
    run.add_argument("--variants", nargs="+", help="position variants (default: the study's)")
    run.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the study's plan)")
    run.add_argument("--jobs", type=int, default=1, help="runs at a time, one thread each")
    run.add_argument("--root", type=Path, default=Path("outputs/study"), help="runs folder")
    run.add_argument(
        "--records",
        type=records_folder,
        default=RECORDS,
        help="record store: runs recorded there are skipped (default: results/pe_study/runs; none)",
    )
    run.add_argument("overrides", nargs="*", help="Hydra overrides for every run, after --")
    report = commands.add_parser("report", help="tables, JSON and plots of the scored runs")
    report.add_argument(
        "--root", type=Path, default=RECORDS, help="runs folder (default: the record store)"
    )
    report.add_argument("--out", type=Path, default=Path("results/pe_study"), help="report folder")
    report.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (0: off)")
    return parser.parse_args(argv)


@report_user_errors
def main(argv: list[str] | None = None):
    """Command-line entry; a problem the user can fix is one `error:` line and exit status 1."""
    args = parse(argv)
    logging.basicConfig(  # train.py's and evaluate.py's progress lines, and each run's train.log
        level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
    )
    if args.command == "run":
        return run_study(
            args.root,
            args.condition,
            args.variants,
            args.seeds,
            args.jobs,
            args.overrides,
            records=args.records,
        )
    return write_report(args.root, args.out, args.resamples)


if __name__ == "__main__":
    main()
