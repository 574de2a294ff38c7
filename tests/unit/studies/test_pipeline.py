"""What one call of a study trains: every stage up to --until, nothing in a dry run."""

from pathlib import Path

import pytest

from studies.pipeline import StudyRun
from studies.protocol import load_study
from studies.store import STAGES

STUDY = load_study("pe_multi30k_fr")


@pytest.mark.parametrize("until", STAGES)
def test_a_call_trains_the_stages_up_to_until_and_reads_the_later_ones(until):
    run = StudyRun(STUDY, Path("w"), Path("r"), until=until)
    assert [s for s in STAGES if run.trains(s)] == list(STAGES[: STAGES.index(until) + 1])


def test_a_dry_run_trains_nothing():
    run = StudyRun(STUDY, Path("w"), Path("r"), dry_run=True)
    assert not any(run.trains(s) for s in STAGES)
