"""A scored final's evaluation checked against its hypotheses and the test references."""

from types import SimpleNamespace

import pytest
import sacrebleu

from common.errors import DataError
from runs.run import lines_sha256
from studies import stages
from studies.finals import check_recomputed
from studies.plan import StudyError
from studies.store import Point

HYPS = ["a small house .", "the dog runs ."]
REFS = ["a small house .", "the cat runs ."]


def scored(**changed) -> dict:
    """An evaluation JSON of HYPS against REFS, with changed keys."""
    result = {
        "references_sha256": lines_sha256(REFS),
        "skipped_indices": [],
        "bleu": round(sacrebleu.corpus_bleu(HYPS, [REFS]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(HYPS, [REFS]).score, 2),
    }
    return {**result, **changed}


def test_the_scores_its_hypotheses_give_pass(tmp_path):
    check_recomputed(tmp_path / "test-last-beam4.json", scored(), HYPS, REFS)


def test_a_bleu_its_hypotheses_do_not_give_is_named(tmp_path):
    with pytest.raises(StudyError, match=r"test-last-beam4.json: bleu 35.0 is not the"):
        check_recomputed(tmp_path / "test-last-beam4.json", scored(bleu=35.0), HYPS, REFS)


def test_other_references_than_those_scored_are_named(tmp_path):
    with pytest.raises(StudyError, match="are not the ones it was scored against"):
        check_recomputed(tmp_path / "e.json", scored(), HYPS, ["x", "y"])


def test_skipped_lines_are_left_out_of_the_references(tmp_path):
    result = scored(skipped_indices=[1], references_sha256=lines_sha256(REFS[:1]), bleu=100.0,
                    chrf=100.0)  # fmt: skip
    check_recomputed(tmp_path / "e.json", result, HYPS[:1], [*REFS[:1], "left out"])


def test_references_that_cannot_be_loaded_are_said_in_one_line(monkeypatch):
    said = []
    run = SimpleNamespace(wanted=lambda point: {"data": {"corpus": "gone"}}, say=said.append)

    def unloadable(data, split):
        raise DataError("no corpus here")

    monkeypatch.setattr(stages, "load_split", unloadable)
    references = stages.reference_loader(run)
    point = Point("final", "all", "rope", 1.0, 1, 50)
    assert references(point, "test") is None and references(point, "test") is None
    assert len(said) == 1 and "cannot be loaded (no corpus here)" in said[0]
