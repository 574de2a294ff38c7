"""The lines of a stream as they arrive, in groups of those already waiting (translate=true).

`waiting_lines` blocks only until one whole line has come, then takes every further line that
can be read without blocking (up to a limit), so a user typing gets each answer at once while a
piped file is still translated in large, length-sorted batches. Whether more input is waiting
is asked with select() on POSIX (pipes, terminals, files). Windows' select takes sockets only:
there each group is the whole lines one read returned (a console: one line; a pipe or a file:
what was written or up to 64 KiB), so answers still come as lines arrive. A stream without a
file descriptor (an in-memory one) is all there: it never waits.
"""

import io
import os
from collections.abc import Callable, Iterator
from typing import BinaryIO, TextIO

CHUNK = 1 << 16  # bytes per read; a read returns what is there, up to this


def _never() -> bool:
    return False


def _always() -> bool:
    return True


def readers(stream: TextIO | BinaryIO) -> tuple[Callable[[], bytes], Callable[[], bool]]:
    """read() -> the next bytes (b'' at the end, blocking until some come) and waiting() ->
    whether a read would return at once, for stream (a text stream is read through its buffer)."""
    binary = getattr(stream, "buffer", stream)
    try:
        fd = binary.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        fd = None
    if fd is None:  # in memory: everything is there already
        read = getattr(binary, "read1", binary.read)

        def read_memory() -> bytes:
            chunk = read(CHUNK)
            return chunk.encode("utf-8") if isinstance(chunk, str) else chunk

        return read_memory, _always
    if os.name != "posix":
        return (lambda: os.read(fd, CHUNK)), _never
    # select deferred: only POSIX's select polls pipes and terminals (Windows': sockets only)
    import select

    return (lambda: os.read(fd, CHUNK)), lambda: bool(select.select([fd], [], [], 0)[0])


def waiting_lines(stream: TextIO | BinaryIO, limit: int) -> Iterator[list[bytes]]:
    """Groups of at most limit whole lines (bytes, without their newline), each as soon as one
    line has come, with every further line already waiting; a last line without a newline ends
    the stream."""
    read, waiting = readers(stream)
    lines: list[bytes] = []
    pieces: list[bytes] = []  # the line being read, in the chunks that brought it
    ended = False

    def take(chunk: bytes) -> bool:
        """Add chunk's whole lines to lines; True at the end (an unterminated line is a line)."""
        if not chunk:
            if pieces:
                lines.append(b"".join(pieces))
            pieces.clear()
            return True
        if b"\n" not in chunk:
            pieces.append(chunk)
            return False
        first, *rest = chunk.split(b"\n")
        *whole, last = [b"".join([*pieces, first]), *rest]
        lines.extend(whole)
        pieces[:] = [last] if last else []
        return False

    while lines or not ended:
        while not lines and not ended:  # block until a whole line (or the end) comes
            ended = take(read())
        while not ended and len(lines) < limit and waiting():
            ended = take(read())
        if lines:
            group, lines[:] = lines[:limit], lines[limit:]
            yield group
