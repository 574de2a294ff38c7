"""What one call of a study trains: every stage up to --until, nothing in a dry run."""

from pathlib import Path

import pytest
import yaml

from common.errors import DataError
from studies.pipeline import Launch, StudyRun
from studies.plan import StudyError
from studies.protocol import load_study, study_path
from studies.store import STAGES
from tests.conftest import shared_data

STUDY = load_study("pe_multi30k_fr")


@pytest.mark.parametrize("until", STAGES)
def test_a_call_trains_the_stages_up_to_until_and_reads_the_later_ones(until):
    run = StudyRun(STUDY, Path("w"), Path("r"), until=until)
    assert [s for s in STAGES if run.trains(s)] == list(STAGES[: STAGES.index(until) + 1])


def test_a_dry_run_trains_nothing():
    run = StudyRun(STUDY, Path("w"), Path("r"), dry_run=True)
    assert not any(run.trains(s) for s in STAGES)


def test_a_folder_without_the_pairs_files_is_refused_before_anything_is_planned(tmp_path):
    """The probe's g-23, g-25: the French study on the Czech folder planned 32 runs."""
    czech = shared_data("multi30k_cs")
    run = StudyRun(STUDY, tmp_path, tmp_path, Launch(overrides=(f"data.path={czech}",)), True)
    with pytest.raises(DataError, match=r"is not a Multi30k en-fr folder"):
        run.check_data()
    assert run.planned == [] and list(tmp_path.iterdir()) == []


def test_a_test_split_the_corpus_lacks_is_refused(tmp_path):
    """The probe's S-f16c: `test: [nosuch]` was planned; the finals would fail when scored."""
    french = shared_data("multi30k_fr")
    declared = yaml.safe_load(study_path("pe_multi30k_fr").read_text(encoding="utf-8"))
    declared["test"] = ["nosuch"]
    path = tmp_path / "pe_multi30k_fr.yaml"
    path.write_text(yaml.safe_dump(declared), encoding="utf-8")
    run = StudyRun(load_study(str(path)), tmp_path, tmp_path,
                   Launch(overrides=(f"data.path={french}",)), True)  # fmt: skip
    with pytest.raises(StudyError, match=r"test: nosuch is not a split of all's corpus \(train, "):
        run.check_data()
