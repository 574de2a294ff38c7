"""Write docs/study-schema.md, the reference of a study config, from its schema.

python scripts/study_schema.py [--out docs/study-schema.md]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.files import write_text
from studies.protocol import schema_markdown

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "study-schema.md")
    args = parser.parse_args(argv)
    write_text(args.out, schema_markdown())
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
