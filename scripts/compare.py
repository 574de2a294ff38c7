"""Compare runs the way Table 3 does: `python scripts/compare.py <multirun dir | run dirs...>`.

Finds run directories (those holding metrics.json), groups them by position variant, and writes
into --out (default: <common parent>/compare) a Markdown table with the paper's numbers beside
ours (compare.md, also printed), every number (compare.json) and three plots
(bleu_by_variant.png, bleu_by_length.png, dev_ppl_curves.png). Each variant is compared with the
baseline (sinusoidal) two ways: across seeds (a t-interval over per-seed BLEU, paired by seed
when both variants ran the same seeds) and by sacreBLEU's paired bootstrap resampling on one
seed pair; each of the two is a family whose p-values are Holm-adjusted (p_holm), and each run
records its steps and lr_scale. What it computes lives in evaluation/compare.py,
evaluation/statistics.py and evaluation/plots.py.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.errors import report_user_errors
from evaluation.compare import TABLE3_EVAL, compare, markdown


@report_user_errors
def main(argv: list[str] | None = None) -> dict:
    """Command-line entry: compare runs and print the table; a user error is one line, exit 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="a multirun folder or run folders")
    parser.add_argument(
        "--eval", dest="eval_name", metavar="NAME", help="eval/<NAME>.json to read in every run"
    )
    parser.add_argument("--out", type=Path, help="output folder (default: <common parent>/compare)")
    parser.add_argument("--refs", type=Path, help="references for the bootstrap, one a line")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (0: off)")
    parser.add_argument(
        "--baseline", default="sinusoidal", help="the variant others are compared to"
    )
    parser.add_argument(
        "--allow-stale",
        action="store_true",
        help="compare evaluations older than their run's last step, flagged, instead of refusing",
    )
    parser.add_argument(
        "--score",
        action="store_true",
        help=f"first score runs that lack a fresh --eval evaluation (default {TABLE3_EVAL})",
    )
    args = parser.parse_args(argv)
    result = compare(
        args.paths,
        args.eval_name,
        args.out,
        args.refs,
        args.resamples,
        args.baseline,
        args.allow_stale,
        args.score,
    )
    print(markdown(result))
    print(
        f"written: {result['out_dir']}/compare.md, compare.json, bleu_by_variant.png, "
        "bleu_by_length.png, dev_ppl_curves.png"
    )
    return result


if __name__ == "__main__":
    main()
