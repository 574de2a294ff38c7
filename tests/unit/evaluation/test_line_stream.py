"""waiting_lines: each line as soon as it comes, every line already waiting in the same group."""

import io
import os

import pytest

from evaluation.line_stream import waiting_lines

posix_only = pytest.mark.skipif(os.name != "posix", reason="select() polls pipes on POSIX only")


def test_an_in_memory_stream_is_all_waiting_in_groups_of_at_most_limit():
    stream = io.TextIOWrapper(io.BytesIO(b"a\nb\n\nc\r\nd"), encoding="utf-8")
    assert list(waiting_lines(stream, 2)) == [[b"a", b"b"], [b"", b"c\r"], [b"d"]]
    assert list(waiting_lines(io.StringIO("x\ny\n"), 10)) == [[b"x", b"y"]]
    assert list(waiting_lines(io.BytesIO(b""), 10)) == []
    assert list(waiting_lines(io.BytesIO(b"\n\n"), 10)) == [[b"", b""]]


@posix_only
def test_a_pipe_gives_each_line_as_it_comes_and_what_waits_together():
    read_end, write_end = os.pipe()
    with open(read_end, "rb", buffering=0) as reader, open(write_end, "wb", buffering=0) as w:
        groups = waiting_lines(reader, 1000)
        w.write(b"one\n")
        assert next(groups) == [b"one"]  # the writer has not closed: no waiting for more
        w.write(b"two\nthree\nfo")
        assert next(groups) == [b"two", b"three"]  # the unfinished line waits for its end
        w.write(b"ur\n")
        assert next(groups) == [b"four"]
        w.close()
        assert list(groups) == []


@posix_only
def test_a_piped_file_comes_in_full_groups():
    read_end, write_end = os.pipe()
    with open(write_end, "wb") as w:  # 100 short lines fit a pipe's buffer
        w.write(b"".join(b"line %d\n" % i for i in range(100)))
    with open(read_end, "rb", buffering=0) as reader:
        groups = list(waiting_lines(reader, 30))
    assert [len(g) for g in groups] == [30, 30, 30, 10]
    assert [line for g in groups for line in g] == [b"line %d" % i for i in range(100)]


def test_a_long_line_in_many_chunks_is_one_line():
    long = b"x" * (3 * (1 << 16) + 5)
    assert list(waiting_lines(io.BytesIO(long + b"\nend\n"), 10)) == [[long, b"end"]]


@posix_only
def test_lines_waiting_past_one_read_join_the_group(tmp_path):
    lines = [b"%04d " % i + b"x" * 995 for i in range(300)]  # 300 KB: several reads of 64 KiB
    (tmp_path / "big.txt").write_bytes(b"".join(line + b"\n" for line in lines))
    with open(tmp_path / "big.txt", "rb", buffering=0) as reader:
        assert list(waiting_lines(reader, 1000)) == [lines]
    with open(tmp_path / "big.txt", "rb", buffering=0) as reader:
        assert [len(g) for g in waiting_lines(reader, 128)] == [128, 128, 44]
