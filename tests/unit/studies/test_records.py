"""A scored run's record (study.json) as a typed dataclass, and the committed record stores."""

import json
import shlex
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from common.configs import compose_config
from runs.resume import flatten
from runs.run import Run
from studies.plan import STUDY_FILE
from studies.protocol import load_study
from studies.records import StudyRecord, retrain_command, scored_runs
from studies.reported import reported_study
from tests.conftest import ROOT

STORES = sorted((ROOT / "results" / "archive").glob("pe_study*/runs"))
RECORDS = ROOT / "results" / "archive" / "pe_study" / "runs"  # the study's first store
GERMAN = reported_study(load_study("pe_multi30k"))  # its conditions, each one's experiment


def retrain(record: StudyRecord) -> str:
    """A German record's retrain command, its condition's experiment from the study's config."""
    return retrain_command(record, GERMAN.experiments[record.condition])


def test_every_committed_record_reads_and_writes_back_unchanged(tmp_path):
    """Each study.json of the committed stores is a StudyRecord; written again, the same bytes
    (records from before `code` was kept read it as unrecorded and gain only that key)."""
    paths = sorted(p for store in STORES for p in store.glob("*/*/seed-*/" + STUDY_FILE))
    assert len(paths) >= 100
    without_code = 0
    for path in paths:
        record = StudyRecord.read(path)
        out = tmp_path / "study.json"
        record.write(out)
        stored = json.loads(path.read_text(encoding="utf-8"))
        if "code" not in stored:
            without_code += 1
            assert record.code == ["unrecorded"]
            assert json.loads(out.read_text()) == stored | {"code": ["unrecorded"]}
        else:
            assert out.read_bytes() == path.read_bytes(), path
        assert record.label == f"{stored['condition']}/{stored['variant']}/seed-{stored['seed']}"
    assert 0 < without_code < len(paths)


def test_the_store_s_records_are_its_scored_runs():
    records, unscored = scored_runs(RECORDS, GERMAN.conditions)
    assert len(records) == 76 and unscored == []
    first = records[0]
    assert (first.condition, first.variant, first.seed) == ("all", "alibi", 1)
    assert first.run_dir.endswith("results/archive/pe_study/runs/all/alibi/seed-1")
    assert first.test.eval == "test-last-beam4" and first.test.n_sentences == 1000


def test_a_record_copied_or_edited_is_refused_not_reported(tmp_path):
    """study.json must agree with its folder and with the evaluation it quotes (was: a copy
    became a second seed with ± 0.00, an edited BLEU entered the table)."""
    import shutil

    from studies.plan import StudyError

    store = tmp_path / "runs"
    source = ROOT / "results" / "pe_multi30k" / "final" / "runs" / "all" / "learned" / "seed-1"
    shutil.copytree(source, store / "all" / "learned" / "seed-1")
    assert len(scored_runs(store, GERMAN.conditions)[0]) == 1
    shutil.copytree(source, store / "all" / "learned" / "seed-2")  # seed 1's record, twice
    with pytest.raises(
        StudyError, match="records all/learned/seed-1 but lies in all/learned/seed-2"
    ):
        scored_runs(store, GERMAN.conditions)
    copied = store / "all" / "learned" / "seed-2" / STUDY_FILE  # ... its seed edited to fit
    copied.write_text(json.dumps(json.loads(copied.read_text()) | {"seed": 2}))
    with pytest.raises(StudyError, match="records seed 2 but the run trained seed 1"):
        scored_runs(store, GERMAN.conditions)
    shutil.rmtree(store / "all" / "learned" / "seed-2")
    path = store / "all" / "learned" / "seed-1" / STUDY_FILE
    record = json.loads(path.read_text())
    record["test"]["bleu"] = 35.0
    path.write_text(json.dumps(record))
    with pytest.raises(
        StudyError, match=r"quotes other scores than .*test-last-beam4.json \(bleu 35.0 vs"
    ):
        scored_runs(store, GERMAN.conditions)


def test_a_record_missing_a_field_is_one_line_naming_it(tmp_path):
    source = next(STORES[0].glob("all/*/seed-1"))
    broken = tmp_path / "all" / "sinusoidal" / "seed-1"
    broken.mkdir(parents=True)
    (broken / "metrics.json").write_text((source / "metrics.json").read_text())
    record = json.loads((source / STUDY_FILE).read_text())
    del record["concat"]
    (broken / STUDY_FILE).write_text(json.dumps(record))
    with pytest.raises(Exception, match="has no 'concat' field") as error:
        scored_runs(tmp_path, GERMAN.conditions)
    assert type(error.value).__name__ == "StudyError" and "\n" not in str(error.value)


def flat_config(config) -> dict:
    """A config's settings, flattened and resolved."""
    return flatten(OmegaConf.to_container(config, resolve=True))


def composes_to_its_config(record: StudyRecord, multi30k: bool) -> None:
    """The record's retrain command composes to the config it trained with, setting by setting:
    every one but where files went, Multi30k's source (multi30k) and settings added since."""
    words = shlex.split(retrain(record))
    assert words[:2] == ["python", "train.py"]
    again = flat_config(compose_config([*words[2:], "run_dir=."]))
    then = flat_config(Run(record.run_dir).config())
    paths = ("run_dir", "cache_dir", *(("data.path", "data.corpus") if multi30k else ()))
    for key in set(again) | set(then):
        if key.startswith(paths) or key not in then:
            continue
        assert again.get(key, "<absent>") == then[key], (record.label, key)


def test_each_committed_record_s_retrain_command_composes_to_its_config():
    """Old records (the data files of an earlier config, settings since added) and new ones
    (a tuned rate and the final budget): the command names what differs from today's configs."""
    final = scored_runs(
        ROOT / "results" / "archive" / "pe_study_final" / "runs", GERMAN.conditions
    )[0]
    study = scored_runs(RECORDS, GERMAN.conditions)[0]
    assert final and {r.condition for r in study} == {"all", "short", "joined"}
    for record in [*final, *study[::7]]:
        composes_to_its_config(record, multi30k=True)
    for record in final:  # the rate where not the configs' (x1), SHAPE's K, the budget
        words = retrain(record).split()
        config = OmegaConf.load(Path(record.run_dir) / ".hydra" / "config.yaml")
        rate = config.optim.lr_scale
        named = [] if rate == 1.0 else [f"optim.lr_scale={rate}"]
        if record.variant.endswith("_shape"):  # the K chosen on dev, not the configs' K = 100
            named.append(f"position.max_shift={config.position.max_shift}")
        after_seed = words[words.index(f"seed={record.seed}") + 1 :]
        assert after_seed == [*named, "trainer.max_steps=8000"], words
    assert retrain(study[0]) == (
        "python train.py experiment=pe_study_multi30k position=alibi seed=1"
    )
