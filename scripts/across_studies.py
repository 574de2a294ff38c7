"""Compare declared studies (language pairs): each difference in each, and pooled across them.

    python scripts/across_studies.py <study> <study> [...] [--data <study>=<folder> ...]
        [--results results] [--out <results>/<study>+<study>]

Each study's answer is read from its records as `run_study.py <study> --report` reads it (nothing
trains); the differences every study has are set side by side with their sign agreement and a
fixed-effect inverse-variance pool (studies/across.py), written to <out>/README.md and
across.json. --data gives a study's data.path (its records are checked against that data).
"""

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.errors import report_user_errors
from common.files import replaced_folder, write_json, write_text
from runs.run import Run
from studies.across import across, across_markdown
from studies.answer import Final, answer
from studies.pipeline import Launch, StudyRun
from studies.plan import StudyError
from studies.protocol import StudySpec, check_run_overrides, load_study
from studies.stages import run_stages
from studies.store import record_dir


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("studies", nargs="+", help="configs/study/<name>.yaml by name, or a path")
    parser.add_argument("--data", action="append", default=[], help="<study>=<data folder>")
    parser.add_argument("--results", type=Path, default=Path("results"), help="record stores")
    parser.add_argument("--out", type=Path, help="report folder (default <results>/<a>+<b>)")
    args = parser.parse_args(argv)
    if len(set(args.studies)) < 2:
        parser.error("pass two or more different studies")
    return args


def study_finals(study: StudySpec, data: dict[str, str], results: Path) -> list[Final]:
    """A study's scored finals, read from its records (nothing trains)."""
    name = study.name
    overrides = (f"data.path={Path(data[name]).resolve()}",) if name in data else ()
    check_run_overrides(study, overrides)
    run = StudyRun(study, Path("outputs/studies"), results, Launch(overrides=overrides), True)
    return run_stages(run)["finals"]


def check_independent(finals: dict[str, list[Final]], studies: list[StudySpec], results: Path):
    """StudyError where two studies hold one training (a run id in both stores, probe l-21):
    pooled, one run would count twice and the interval would be falsely narrow."""
    owner: dict[str, str] = {}
    for study in studies:
        name = study.name
        for final in finals[name]:
            run = Run(record_dir(results, study, final.point))
            identity = run.identity()
            other = owner.setdefault(identity or str(run.path), name)
            if other != name:
                raise StudyError(
                    f"{run.path} (run id {identity}) is a training of both {other} and "
                    f"{name}: studies pooled across must train their own runs"
                )


@report_user_errors
def main(argv: list[str] | None = None) -> int:
    """Command-line entry; a problem the user can fix is one `error:` line and exit status 1."""
    args = parse(argv)
    studies = [load_study(name) for name in args.studies]
    names = [study.name for study in studies]
    if len(set(names)) < len(names):
        raise StudyError(f"{' '.join(args.studies)} declare the study names {' '.join(names)}: "
                         "pass studies of different names")  # fmt: skip
    data = dict(item.split("=", 1) for item in args.data if "=" in item)
    unknown = set(data) - set(names)
    if unknown or len(data) != len(args.data):
        raise StudyError(f"--data {' '.join(args.data)}: pass <study name>=<folder> for these "
                         f"studies ({', '.join(names)})")  # fmt: skip
    finals = {study.name: study_finals(study, data, args.results) for study in studies}
    check_independent(finals, studies, args.results)
    pooled = across({study.name: answer(study, finals[study.name], ["last"])["differences"]
                     for study in studies})  # fmt: skip
    margins = {study.statistics.equivalence_margin for study in studies}
    if len(margins) > 1:
        raise StudyError(f"the studies test equivalence at different margins ({sorted(margins)}): "
                         "declare one statistics.equivalence_margin in each")  # fmt: skip
    out = args.out or args.results / "+".join(names)
    title = f"# Across studies: {', '.join(names)}"
    table = across_markdown(pooled, names, margins.pop())
    with replaced_folder(out) as folder:  # swapped in whole: never half a report
        write_text(folder / "README.md", "\n".join([title, "", *table]) + "\n")
        write_json(folder / "across.json", [asdict(p) for p in pooled])
    print(f"written: {out}/README.md, across.json ({len(pooled)} differences in every study)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
