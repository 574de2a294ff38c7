"""Copy the German study's old records into its declared study's store (record.json schema 1).

    python scripts/migrate_records.py [--study pe_multi30k] [--results results] [--plan]
        [--data-path ../shared/data/multi30k]

Reads every finished run of the old stores (OLD_STORES below: results/archive/pe_study*, pe_shape_*,
pe_plateau), its point from its own .hydra/config.yaml and study.json, and copies it
to results/<study>/<stage>/runs/... with its record.json; no copied file names an absolute path.
Running it again gives the same tree. Prints the points per stage, the points without data
fingerprints, the skipped folders, disagreements, duplicates and settings the pipeline would
refuse. --plan prints the same and copies nothing. The old stores are left as they are.
The old records predate data fingerprints: with --data-path (the folder they trained on) each
record gets that data's text fingerprints, marked as derived at migration, where its split sizes
equal its data.json's and its kept test translations rescore to its recorded BLEU.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.errors import report_user_errors
from studies.migration import derived_fingerprints, migrate, plan_migration, summary_lines
from studies.protocol import load_study

# (store, what its name says of its runs), in the order they were trained: of two copies of one
# point, the later store's is kept. pe_study: rate x1 (and the superseded 2,000-step short and
# joined study); pe_plateau: the budget's two 8,000-step runs; pe_study_final: the 81 finals.
K10, K25 = ("position.max_shift=10",), ("position.max_shift=25",)  # SHAPE's shift
OLD_STORES: tuple[tuple[str, dict], ...] = (
    ("archive/pe_study", {"lr_scale": 1.0, "steps": 2000}),
    ("archive/pe_study_lr05", {"lr_scale": 0.5, "steps": 2000}),
    ("archive/pe_study_lr025", {"lr_scale": 0.25, "steps": 2000}),
    ("archive/pe_study_lr2", {"lr_scale": 2.0, "steps": 2000}),
    ("archive/pe_plateau", {"steps": 8000}),
    ("archive/pe_shape_k10", {"lr_scale": 0.5, "steps": 2000, "settings": K10}),
    ("archive/pe_shape_k25", {"lr_scale": 0.5, "steps": 2000, "settings": K25}),
    ("archive/pe_shape_k10_lr025",
     {"lr_scale": 0.25, "steps": 2000, "settings": K10}),
    ("archive/pe_shape_k10_lr1", {"lr_scale": 1.0, "steps": 2000, "settings": K10}),
    ("archive/pe_shape_k10_lr2", {"lr_scale": 2.0, "steps": 2000, "settings": K10}),
    ("archive/pe_study_final_lr025", {"lr_scale": 0.25, "steps": 8000}),
    ("archive/pe_study_final_lr05", {"lr_scale": 0.5, "steps": 8000}),
    ("archive/pe_study_final_lr1", {"lr_scale": 1.0, "steps": 8000}),
    ("archive/pe_study_final_lr2", {"lr_scale": 2.0, "steps": 8000}),
    ("archive/pe_shape_final_lr1", {"lr_scale": 1.0, "steps": 8000}),
    ("archive/pe_shape_final_lr2", {"lr_scale": 2.0, "steps": 8000}),
    ("archive/pe_study_final", {"steps": 8000}),
)  # fmt: skip
FINAL_STORE = "archive/pe_study_final"  # the finals: each variant's final rate is the rate it holds


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="pe_multi30k", help="configs/study/<name>.yaml")
    parser.add_argument("--results", type=Path, default=Path("results"), help="record stores")
    parser.add_argument("--plan", action="store_true", help="print what it would copy; copy none")
    parser.add_argument("--data-path", help="the data folder the old records trained on")
    return parser.parse_args(argv)


@report_user_errors
def main(argv: list[str] | None = None) -> int:
    """Command-line entry; a problem the user can fix is one `error:` line and exit status 1."""
    args = parse(argv)
    study = load_study(args.study)
    if args.plan:
        summary = plan_migration(args.results, study, OLD_STORES, FINAL_STORE)
    else:
        data = None
        if args.data_path:
            data = derived_fingerprints(study, [f"data.path={Path(args.data_path).resolve()}"])
        summary = migrate(args.results, study, OLD_STORES, FINAL_STORE, data)
    print("\n".join(summary_lines(summary, study)))
    return 1 if summary.absolute_paths else 0


if __name__ == "__main__":
    sys.exit(main())
