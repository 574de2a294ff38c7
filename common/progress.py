"""Progress of long work: a bar on a terminal, silent in logs, pipes and files."""

import sys
from typing import TextIO

from tqdm import tqdm


def shows_progress(stream: TextIO | None) -> bool:
    """Whether stream is a terminal (a log file, a pipe or a closed stream is not)."""
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def progress_bar(
    total: int | None, desc: str, unit: str, stream: TextIO | None = None, enabled: bool = True
) -> tqdm:
    """A tqdm bar of total units on stream (stderr), drawn only when stream is a terminal."""
    stream = sys.stderr if stream is None else stream
    show = enabled and shows_progress(stream)
    return tqdm(total=total, desc=desc, unit=unit, file=stream, disable=not show, leave=False)
