"""Run a declared study end to end: settings -> grid -> check -> finals -> report.

    python scripts/run_study.py <name | path.yaml> [--dry-run | --report] [--jobs N] [--until S]
        [--launcher basic|submitit_local|slurm] [--work outputs/studies] [--results results]
        [-- overrides of every run (data.path=<folder>) and of the launcher (hydra.launcher.x=)]

<name> is configs/study/<name>.yaml (docs/declare-a-study.md). Each stage skips what the store
(<results>/<name>/<stage>/runs/) records, records finished run folders of <work>/<name>/, and
trains the rest, N at a time; the same command resumes after a kill. --dry-run lists every run
still to train and the CPU-hours it would take, and writes nothing; --report also writes the
study's summary (README, runs.json, figures: <results>/<name>/summary/, swapped in whole) from
the records as they are.
"""

import argparse
import logging
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.errors import report_user_errors
from studies.pipeline import Launch, StudyRun
from studies.plan import LAUNCHERS, ROOT
from studies.protocol import check_run_overrides, load_study, study_path
from studies.stages import planned_estimate, run_stages, write_study_report
from studies.store import STAGES


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", help="configs/study/<name>.yaml by name, or a .yaml path")
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would train; write nothing"
    )
    parser.add_argument(
        "--report", action="store_true", help="write the report from the records; train nothing"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1)")
    parser.add_argument(
        "--until", choices=STAGES, default=STAGES[-1],
        help="the last stage that trains; the later ones are reported from their records",
    )  # fmt: skip
    parser.add_argument("--launcher", choices=LAUNCHERS, default="basic", help="Hydra launcher")
    parser.add_argument("--work", type=Path, default=Path("outputs/studies"), help="run folders")
    parser.add_argument("--results", type=Path, default=Path("results"), help="record stores")
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.overrides = argv[cut + 1 :]  # overrides of every run, after --
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: pass 1 or more")
    return args


def committed_in(path: Path) -> str:
    """The commit that added a study's file ("not committed yet" before it)."""
    done = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%h", "--", str(path)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = done.stdout.split()
    return found[-1] if done.returncode == 0 and found else "not committed yet"


@report_user_errors
def main(argv: list[str] | None = None) -> int:
    """Command-line entry; a problem the user can fix is one `error:` line and exit status 1."""
    args = parse(argv)
    logging.basicConfig(level=logging.WARNING)
    study = load_study(args.study)
    hydra = tuple(o for o in args.overrides if o.startswith("hydra."))
    runs = tuple(o for o in args.overrides if not o.startswith("hydra."))
    check_run_overrides(study, runs)  # a typo is one line now, not N failed launches later
    launch = Launch(args.launcher, args.jobs, runs, hydra)
    run = StudyRun(
        study, args.work, args.results, launch, dry_run=args.dry_run or args.report,
        store_only=args.report,
        until=args.until,
    )  # fmt: skip
    run.check_data()  # the pair's files and the test splits, before N runs are planned
    decided = run_stages(run)
    if args.dry_run or args.report:
        print("\n".join(planned_estimate(run, decided["grid"], decided["check"])))
    if args.dry_run:
        return 0
    declared = study_path(args.study).resolve()
    shown = declared.relative_to(ROOT) if declared.is_relative_to(ROOT) else declared
    out = write_study_report(run, decided, committed_in(declared), str(shown))
    print(f"study {study.name}: written {out}/ (README.md, runs.json, figures)")
    if run.failed:
        print(f"study {study.name}: {len(run.failed)} runs failed; the same command trains them "
              f"again once fixed (logs: {', '.join(run.failed)})")  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
