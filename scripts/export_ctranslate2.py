"""Export a run as a CTranslate2 model folder: `export_ctranslate2.py --run-dir RUN --out F`.

The folder (CTranslate2's model.bin, config and vocabulary, the run's spm.model and
export.json) loads with ``ctranslate2.Translator(F)``; docs/interop.md shows a translation.
Written beside F and renamed into place once complete; see interop/ctranslate2_export.py.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.errors import report_user_errors
from interop.ctranslate2_export import QUANTIZATIONS, export_ctranslate2
from interop.export import export_arguments


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    """Command-line entry: write the folder; a user error is one line and exit status 1."""
    parser = export_arguments(__doc__.splitlines()[0])
    parser.add_argument(
        "--quantization", default=None, help=f"none (float32) or {', '.join(QUANTIZATIONS)}"
    )
    args = parser.parse_args(argv)
    out = export_ctranslate2(args.run_dir, args.out, args.checkpoint, args.quantization)
    print(f"wrote {out}: load it with ctranslate2.Translator({str(out)!r})")


if __name__ == "__main__":
    main()
