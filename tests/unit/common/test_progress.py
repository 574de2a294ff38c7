"""Progress bars: drawn on a terminal, nothing written to a log, a pipe or a file."""

import io
import os

from common.progress import progress_bar, shows_progress


class Terminal(io.StringIO):
    """A text stream that says it is a terminal, as a console's stderr does."""

    def isatty(self) -> bool:
        return True


def run_bar(stream, enabled: bool = True) -> str:
    with progress_bar(3, "translate", "sent", stream=stream, enabled=enabled) as bar:
        for _ in range(3):
            bar.update(1)
    return stream.getvalue()


def test_the_bar_is_drawn_on_a_terminal():
    drawn = run_bar(Terminal())
    assert "translate:" in drawn and "/3 " in drawn  # its description and the total


def test_nothing_is_written_off_a_terminal_or_when_disabled():
    assert run_bar(io.StringIO()) == ""
    assert run_bar(Terminal(), enabled=False) == ""


def test_a_closed_stream_or_none_is_no_terminal():
    closed = open(os.devnull, "w")  # closed at once: isatty() raises
    closed.close()
    assert not shows_progress(closed) and not shows_progress(None)
    assert shows_progress(Terminal())
