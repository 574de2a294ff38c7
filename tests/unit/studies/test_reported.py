"""What `scripts/study.py report` reads of its study's config (studies/reported.py)."""

import json

import pytest

from studies.plan import StudyError
from studies.protocol import load_study
from studies.reported import reported_study, store_study
from tests.conftest import ROOT

FINAL = ROOT / "results" / "pe_multi30k" / "final" / "runs"


def test_the_german_report_reads_its_roles_and_plan_from_its_config():
    study = reported_study(load_study("pe_multi30k"))
    assert (study.control, study.buckets, study.concat) == (
        "all",
        ("short", "all"),
        ("joined", "all"),
    )
    assert (study.baseline, study.row_e) == ("sinusoidal", ("sinusoidal", "learned"))
    assert len(study.plan) == 81 == len(list(FINAL.glob("**/study.json")))
    assert ("all", "learned", 8) in study.plan and ("short", "none", 1) not in study.plan
    assert study.experiments == {  # each condition's own experiment file, where it has one
        "all": ("experiment=pe_study_multi30k",),
        "short": ("experiment=pe_study_multi30k_short",),
        "joined": ("experiment=pe_study_multi30k_joined",),
    }


def record(store, study: str, label: str) -> None:
    """A record.json naming its study at store/<label>."""
    folder = store / label
    folder.mkdir(parents=True)
    (folder / "record.json").write_text(json.dumps({"study": study}))


def test_the_records_name_their_study_and_an_older_store_needs_study(tmp_path):
    assert store_study(FINAL, None) == "pe_multi30k" == store_study(FINAL, "pe_multi30k")
    with pytest.raises(StudyError, match=r"records are of pe_multi30k; leave --study out"):
        store_study(FINAL, "pe_multi30k_fr")
    older = tmp_path / "older"
    (older / "all" / "learned" / "seed-1").mkdir(parents=True)
    with pytest.raises(StudyError, match=r"older than record.json\): pass --study <name>") as e:
        store_study(older, None)
    assert "\n" not in str(e.value)
    assert store_study(older, "pe_multi30k") == "pe_multi30k"
    mixed = tmp_path / "mixed"
    record(mixed, "pe_multi30k", "all/learned/seed-1")
    record(mixed, "pe_multi30k_fr", "all/learned/seed-2")
    with pytest.raises(StudyError, match=r"holds records of 2 studies \(pe_multi30k \("):
        store_study(mixed, None)


def test_a_store_run_study_wrote_is_pointed_at_its_own_report(tmp_path):
    """Records without study.json (was: "run python scripts/study.py run first", a retired
    command, for the store run_study.py writes)."""
    from studies.report import write_report

    record = tmp_path / "runs" / "all" / "learned" / "lr1" / "seed-1" / "record.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"study": "pe_multi30k_fr"}))
    with pytest.raises(StudyError, match=r"no study.json.*run_study.py <study> --report"):
        write_report(tmp_path / "runs", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
