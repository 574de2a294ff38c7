"""Length extrapolation (§3.5): train each position variant on short sentences, score long ones.

    python scripts/extrapolation.py --corpus toy|multi30k [--max-words L] [--seeds 1 2 3]
        [--out DIR] [--minutes M] [--variants sinusoidal learned ...] [hydra overrides ...]

For every variant (configs/position/*.yaml) and seed this trains a model
(experiment=extrapolation_<corpus>) on the training pairs whose source has at most L words,
translates the evaluation splits with the last checkpoint (beam 4; lines a learned table cannot
hold are skipped and counted) and scores sacreBLEU per source-length bucket (--bucket-width
words, aligned so that one bucket ends at L). It writes <out>/extrapolation.md (also printed),
extrapolation.json and bleu_by_length.png; an interrupted study resumes where it stopped.
Arguments after the options are Hydra overrides applied to every run (e.g. cache_dir=...).
The study itself is studies/extrapolation.py.
"""

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.errors import report_user_errors
from runs.preemption import TrainingInterrupted
from studies.extrapolation import CORPORA, markdown, study


def progress(message: str) -> None:
    """Print one progress line at once (the study runs for minutes to hours)."""
    print(message, flush=True)


@report_user_errors
def main(argv: list[str] | None = None) -> dict:
    """Command-line entry: run the study and print its table; a user error is one line, exit 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="toy")
    parser.add_argument(
        "--max-words",
        type=int,
        help="L: train on sources of <= L words (default: the experiment's)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1], help="seeds (default: 1)")
    parser.add_argument(
        "--variants", nargs="+", help="position variants (default: all of configs/position)"
    )
    parser.add_argument(
        "--out", type=Path, help="study folder (default: outputs/extrapolation/<corpus>)"
    )
    parser.add_argument(
        "--minutes", type=float, help="training minutes per run (trainer.max_minutes)"
    )
    parser.add_argument(
        "--bucket-width", type=int, help="bucket width in words (default: ceil(L/2))"
    )
    parser.add_argument("--beam", type=int, default=4, help="beam size (default: 4, the paper's)")
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides for every run, e.g. cache_dir=..."
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
    )
    out = args.out or Path("outputs") / "extrapolation" / args.corpus
    try:
        result = study(
            args.corpus,
            out,
            args.max_words,
            args.seeds,
            args.variants,
            args.minutes,
            args.bucket_width,
            args.beam,
            args.overrides,
            echo=progress,
        )
    except TrainingInterrupted as e:  # SIGTERM or SIGINT mid-run: a checkpoint was written
        print(f"{e}; rerun the same command to continue the study", file=sys.stderr)
        sys.exit(e.exit_code)
    print(markdown(result))
    print(f"written: {out}/extrapolation.md, extrapolation.json, bleu_by_length.png")
    return result


if __name__ == "__main__":
    main()
