"""Export a run as a Hugging Face Marian folder: `scripts/export_hf.py --run-dir RUN --out F`.

The folder (weights, config, generation config, source.spm/target.spm/vocab.json) loads with
``MarianMTModel.from_pretrained(F)`` and ``MarianTokenizer.from_pretrained(F)`` without network
and translates greedily as ``evaluate.py beam=1``; see interop/export.py. Sinusoidal runs only.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.errors import report_user_errors
from interop.export import export_arguments, export_hf


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    """Command-line entry: write the folder; a user error is one line and exit status 1."""
    parser = export_arguments(__doc__.splitlines()[0])
    parser.add_argument(
        "--max-positions", type=int, default=1024, help="rows of Marian's sinusoid table"
    )
    args = parser.parse_args(argv)
    out = export_hf(args.run_dir, args.out, args.checkpoint, args.max_positions)
    print(f"wrote {out}: load it with MarianMTModel.from_pretrained({str(out)!r})")


if __name__ == "__main__":
    main()
