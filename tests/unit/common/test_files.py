"""common/files.py: atomic text and JSON writes."""

import json

import pytest

from common.files import write_json, write_text


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
