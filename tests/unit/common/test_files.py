"""common/files.py: atomic text and JSON writes."""

import errno
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from common.errors import UserError
from common.files import (
    replaced_folder,
    staged_folder,
    swap_folders,
    write_failure,
    write_json,
    write_text,
    write_texts,
)
from tests.conftest import ROOT


def test_write_json_round_trips_and_creates_folders(tmp_path):
    path = tmp_path / "eval" / "scores.json"
    write_json(path, {"bleu": 27.3, "name": "Prüfung"})
    assert json.loads(path.read_text(encoding="utf-8")) == {"bleu": 27.3, "name": "Prüfung"}
    assert "Prüfung" in path.read_text(encoding="utf-8")  # not \u-escaped


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "test.hyp"
    write_text(path, "old\n")
    with pytest.raises(TypeError):
        write_text(path, None)  # fails inside the write
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["test.hyp"]


def test_files_written_together_are_all_or_none(tmp_path, monkeypatch):
    import common.files

    old = tmp_path / "eval" / "a.hyp"
    write_text(old, "old\n")
    real = common.files.temporary_copy

    def interrupted(path, text):  # Ctrl-C once the first file's temporary copy is written
        if path.name == "a.json":
            raise KeyboardInterrupt
        return real(path, text)

    monkeypatch.setattr(common.files, "temporary_copy", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_texts({old: "new\n", old.with_suffix(".json"): "{}\n"})
    assert old.read_text() == "old\n" and [p.name for p in old.parent.iterdir()] == ["a.hyp"]
    fresh = tmp_path / "new" / "eval"
    with pytest.raises(KeyboardInterrupt):
        write_texts({fresh / "a.hyp": "new\n", fresh / "a.json": "{}\n"})
    assert not (tmp_path / "new").exists()  # the folders it made are gone again
    monkeypatch.undo()
    write_texts({fresh / "a.hyp": "new\n", fresh / "a.json": "{}\n"})
    assert sorted(p.name for p in fresh.iterdir()) == ["a.hyp", "a.json"]


def test_a_staged_folder_appears_whole_or_not_at_all(tmp_path):
    out = tmp_path / "exports" / "marian"
    with pytest.raises(OSError), staged_folder(out) as staging:
        (staging / "config.json").write_text("{}")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert not (tmp_path / "exports").exists()
    with staged_folder(out) as staging:
        (staging / "config.json").write_text("{}")
        assert not out.exists()
    assert [p.name for p in tmp_path.rglob("*")] == ["exports", "marian", "config.json"]


def test_a_killed_writers_staging_folder_is_cleared_by_the_next(tmp_path):
    """The outside probe's 14-08/14-09: a kill -9 mid-export left a hidden `.hf.*.partial`
    beside --out for good; the next write to that out removes it, and only it (a live writer's,
    or another machine's, stays)."""
    out = tmp_path / "exports" / "hf"
    killed = (
        "import os, signal, sys; from pathlib import Path; from common.files import staged_folder\n"
        f"with staged_folder(Path({str(out)!r})) as s:\n"
        "    (s / 'config.json').write_text('{}'); os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", killed], cwd=ROOT, check=False)
    assert done.returncode == -signal.SIGKILL
    left = list(out.parent.glob(".hf.*.partial"))
    assert len(left) == 1 and (left[0] / "config.json").is_file()
    live = out.parent / f".hf.{socket.gethostname()}@{os.getpid()}.x1.partial"  # this test's
    foreign = out.parent / ".hf.elsewhere@1.x2.partial"  # another machine's
    users = out.parent / ".hf.mine.partial"  # not named as a staging folder: a user's
    for folder in (live, foreign, users):
        folder.mkdir()
    with staged_folder(out) as staging:
        (staging / "config.json").write_text("{}")
    kept = sorted([live.name, foreign.name, users.name, "hf"])
    assert sorted(p.name for p in out.parent.iterdir()) == kept
    assert [p.name for p in out.iterdir()] == ["config.json"]  # nothing but what was written


def test_a_writer_killed_at_the_swap_leaves_a_folder_the_next_write_clears(tmp_path):
    """Third outside probe 14-2: killed at the swap, a replaced report's staging folder (its
    owner file already gone) stayed for good; its name now says whose it is."""
    out = tmp_path / "ck"
    out.mkdir()
    (out / "table.md").write_text("old\n")
    killed = (
        "import os, signal; from pathlib import Path; import common.files as f\n"
        "f.swap_folders = lambda a, b: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"with f.staged_folder(Path({str(out)!r}), replace=True) as s:\n"
        "    (s / 'table.md').write_text('new')\n"
    )
    done = subprocess.run([sys.executable, "-c", killed], cwd=ROOT, check=False)
    assert done.returncode == -signal.SIGKILL and len(list(tmp_path.glob(".ck.*.partial"))) == 1
    with staged_folder(out, replace=True) as staging:
        (staging / "table.md").write_text("newer\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert (out / "table.md").read_text() == "newer\n"


def test_a_file_given_as_the_folder_to_write_is_one_line_and_kept(tmp_path):
    """Probe 1-1: compare --out <a user's file> failed with a raw rename error."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(UserError, match=r"notes.txt is a file: pass a folder"):
        with staged_folder(notes, replace=True):
            pass
    assert notes.read_text() == "my notes\n" and sorted(tmp_path.iterdir()) == [notes]


def test_a_link_given_as_the_folder_to_write_is_one_line_and_kept(tmp_path):
    """Probe 1-11: a summary folder replaced by a link to a user's folder was swapped out,
    then rmtree on the link: a traceback, the link left under a staging name."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes\n")
    link = tmp_path / "summary"
    link.symlink_to(mine)
    with pytest.raises(UserError, match=r"summary is a symbolic link: this command writes"):
        with replaced_folder(link):
            pass
    assert link.is_symlink() and (mine / "notes.txt").read_text() == "my notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "summary"]


def test_a_full_disk_is_one_line_saying_what_to_do():
    rust = RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")
    error = write_failure(rust, "the export to out", "export again")
    assert str(error) == (
        "No space left on device while writing the export to out: free space on that disk and "
        "export again"
    )
    assert write_failure(ValueError("a bug"), "x", "y") is None  # keeps its traceback


def test_a_replaced_folder_is_swapped_in_whole_or_not_at_all(tmp_path):
    """A report rewritten in place was half old, half new after a kill; now it is one or the
    other, and what the rewrite leaves alone (a note by hand) stays."""
    out = tmp_path / "report"
    out.mkdir()
    (out / "table.md").write_text("old table\n")
    (out / "README.md").write_text("old readme\n")
    (out / "NOTE.md").write_text("by hand\n")
    with pytest.raises(KeyboardInterrupt), replaced_folder(out) as folder:
        (folder / "table.md").write_text("new table\n")
        raise KeyboardInterrupt  # between the two files
    assert (out / "table.md").read_text() == "old table\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # nothing left beside it
    with replaced_folder(out) as folder:
        (folder / "table.md").write_text("new table\n")
        (folder / "README.md").write_text("new readme\n")
    assert [(out / n).read_text() for n in ("table.md", "README.md", "NOTE.md")] == [
        "new table\n",
        "new readme\n",
        "by hand\n",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]
    with replaced_folder(tmp_path / "fresh") as folder:
        (folder / "a.md").write_text("a\n")
    assert (tmp_path / "fresh" / "a.md").read_text() == "a\n"


def test_a_replaced_folder_is_exchanged_in_one_step_and_leaves_nothing_beside_it(tmp_path):
    """The probe's 14-28..14-31: killed between two renames, --out was gone (its old contents
    in a hidden .old folder, the new in .new, neither cleaned up), and a user's `.<out>.new`
    was deleted unasked. Now the folders are exchanged in one step (renameat2 on Linux)."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, name in ((a, "x"), (b, "y")):
        folder.mkdir()
        (folder / name).write_text(name)
    swap_folders(a, b)
    assert [p.name for p in a.iterdir()] == ["y"] and [p.name for p in b.iterdir()] == ["x"]
    out, mine = tmp_path / "summary", tmp_path / ".summary.new"
    mine.mkdir()
    (mine / "mine.txt").write_text("mine")
    for text in ("old", "new"):
        with replaced_folder(out) as folder:
            (folder / "README.md").write_text(text)
    assert (out / "README.md").read_text() == "new" and (mine / "mine.txt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".summary.new", "a", "b", "summary"]


def test_a_replaced_folder_drops_only_the_figures_it_owns(tmp_path):
    """The probe's l-22: rewritten from an empty folder, a summary or --out lost a user's file;
    now only the files matching the owned patterns (a figure no longer drawn) are dropped."""
    out = tmp_path / "summary"
    out.mkdir()
    for name in ("bleu_minus_old.png", "mine.txt", "my_plot.png"):
        (out / name).write_text(name)
    with replaced_folder(out, owned=("bleu_minus_*.png",)) as folder:
        (folder / "README.md").write_text("new\n")
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "mine.txt", "my_plot.png"]
