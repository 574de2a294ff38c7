"""A study config: every committed one loads; a bad key, value or name is one line naming it."""

import re
from pathlib import Path

import pytest
import yaml

from studies.protocol import (
    STUDY_DIR,
    StudyConfigError,
    check_run_overrides,
    load_study,
    schema_markdown,
)
from tests.conftest import ROOT

STUDIES = sorted(STUDY_DIR.glob("*.yaml"))
GOOD = {
    "name": "my_study",
    "experiment": "quickstart",
    "variants": {"sinusoidal": {}, "rope": {}},
    "conditions": {"all": {}},
    "statistics": {"baselines": ["sinusoidal"]},
}


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_every_committed_study_loads_and_names_its_file(path):
    study = load_study(path.stem)
    assert study.name == path.stem
    assert study.variants and study.conditions
    for condition in study.conditions:
        assert study.condition_variants(condition)


def write_study(folder: Path, changes: dict, name: str = "my_study") -> Path:
    """GOOD with changes merged at the top level, as <folder>/<name>.yaml."""
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**GOOD, **changes}), encoding="utf-8")
    return path


def test_a_good_study_loads_typed(tmp_path):
    study = load_study(str(write_study(tmp_path, {"grid": {"rates": [0.5, 1], "steps": 10}})))
    assert study.grid.rates == [0.5, 1.0] and study.grid.steps == 10
    assert study.final_seeds("all", "rope") == [1, 2, 3, 4, 5]
    assert study.position("rope") == "rope"


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"grid": {"rate": [1.0]}}, "grid.rate"),
        ({"check": {"within": "twice"}}, "check.within"),
        ({"final": {"seeds_by_variant": {"rope": "five"}}}, "final.seeds_by_variant.rope"),
        ({"variants": {"nope": {}}}, "variants.nope"),
        ({"overrides": ["seed=3"]}, "overrides: seed"),
        ({"conditions": {"all": {"rates_from": "short"}}}, "conditions.all.rates_from"),
        ({"conditions": {"all": {"analyses": ["bleu"]}}}, "conditions.all.analyses"),
        ({"statistics": {"baselines": ["learned"]}}, "statistics.baselines"),
        ({"grid": {"seeds": [1]}}, "grid.seeds"),
        ({"check": {"seeds": [2, 3]}}, "check.seeds"),
        ({"final": {"steps": 10, "extend": {"steps": 5}}}, "final.steps"),
        ({"name": "other"}, "name: other"),
        ({"experiment": "no_such_experiment"}, "does not compose"),
    ],
)
def test_a_bad_study_is_one_line_naming_the_key(tmp_path, changes, named):
    path = write_study(tmp_path, changes)
    with pytest.raises(StudyConfigError) as info:
        load_study(str(path))
    message = str(info.value)
    assert named in message and str(path) in message
    assert "\n" not in message


NAN, INF = float("nan"), float("inf")
CHOOSE = {"key": "position.max_shift", "values": ["10"], "rate": 0.5}


def write_fr_copy(folder: Path, key: str, value) -> Path:
    """configs/study/pe_multi30k_fr.yaml with the value at dotted key changed, in folder."""
    data = yaml.safe_load((STUDY_DIR / "pe_multi30k_fr.yaml").read_text(encoding="utf-8"))
    *parents, last = key.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    path = folder / "pe_multi30k_fr.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")  # inf and nan as .inf and .nan
    return path


@pytest.mark.parametrize(
    "key, value",
    [
        ("grid.rates", [1.0, INF]),
        ("grid.rates", [1.0, NAN]),
        ("grid.rates", [1.0, 1.0]),
        ("grid.seeds", [1, 1, 2]),
        ("cost.cpu_seconds_per_step", -INF),
        ("grid.seeds", [-1, 2]),
        ("check.within", INF),
        ("statistics.confidence", 1.5),
        ("statistics.confidence", 1.0),
        ("statistics.confidence", 0.0),
        ("statistics.confidence", NAN),
        ("statistics.equivalence_margin", INF),
        ("cost.cpu_seconds_per_step", NAN),
        ("cost.cpu_seconds_per_step", INF),
        ("cost.cpu_seconds_per_step", 0.0),
        ("cost.cpu_seconds_per_step", -0.3),
        ("search.beam", 0),
        ("search.beam", 1001),
        ("search.lenpen", NAN),
        ("search.lenpen", -0.1),
        ("search.lenpen", 10.5),
        ("search.lenpen", INF),
        ("final.average_last", -1),
        ("final.seeds_by_variant", {"rope": 1}),
        ("conditions.all.seeds", 0),
        ("final.extend.steps", 0),
        ("final.extend.seeds", [9]),
        ("final.extend.seeds", []),
        ("final.extend", {"steps": None, "seeds": [1, 2]}),
        ("variants.rope.choose", {**CHOOSE, "rate": NAN}),
        ("variants.rope.choose", {**CHOOSE, "values": []}),
    ],
    ids=str,
)
def test_a_number_out_of_range_is_one_line_naming_the_key(tmp_path, key, value):
    path = write_fr_copy(tmp_path, key, value)
    with pytest.raises(StudyConfigError) as info:
        load_study(str(path))
    message = str(info.value)
    assert message.startswith(f"{path}: {key}") and "; pass " in message
    assert "\n" not in message
    assert list(tmp_path.iterdir()) == [path]  # nothing written


@pytest.mark.parametrize(
    "key, value",
    [("search.beam", True), ("statistics.confidence", True), ("grid.steps", INF)],
    ids=str,
)
def test_a_bool_or_a_non_finite_whole_number_is_refused_by_its_type(tmp_path, key, value):
    path = write_fr_copy(tmp_path, key, value)
    with pytest.raises(StudyConfigError, match=re.escape(f"{path}: {key}:")) as info:
        load_study(str(path))
    assert "\n" not in str(info.value)


def test_a_final_seed_count_of_an_unknown_variant_names_its_key(tmp_path):
    """S-f15n: it was refused as "all: variant t5 is not in variants", naming a condition."""
    path = write_fr_copy(tmp_path, "final.seeds_by_variant", {"t5": 5})
    with pytest.raises(StudyConfigError) as info:
        load_study(str(path))
    assert str(info.value).startswith(f"{path}: final.seeds_by_variant.t5: not in variants (")


def test_a_study_file_that_is_no_yaml_mapping_is_one_line_naming_the_line(tmp_path):
    """Fourth outside probe f-3: a variant given twice was a yaml ConstructorError traceback."""
    path = tmp_path / "twice.yaml"
    text = (ROOT / "configs" / "study" / "pe_multi30k_fr.yaml").read_text(encoding="utf-8")
    path.write_text(text.replace("variants:\n", "variants:\n  rope: {}\n", 1), encoding="utf-8")
    with pytest.raises(StudyConfigError) as info:
        load_study(str(path))
    assert str(info.value).startswith(f"{path}: line ") and "duplicate key rope" in str(info.value)


def test_a_baseline_given_twice_is_refused(tmp_path):
    """Probe f-5, f-14: `baselines: [sinusoidal, sinusoidal]` put each comparison in the answer
    (and its Holm family) twice."""
    path = write_fr_copy(tmp_path, "statistics.baselines", ["sinusoidal", "sinusoidal"])
    with pytest.raises(StudyConfigError, match=r"statistics.baselines: sinusoidal is given twice"):
        load_study(str(path))


def test_a_variant_setting_the_model_refuses_is_refused_before_anything_trains(tmp_path):
    """Probe f-28: `rope: {overrides: [position.factor=2]}` (a factor without a scaling) was
    planned; the sinusoidal grid trained, then every rope run failed at its launch."""
    path = write_fr_copy(tmp_path, "variants.rope", {"overrides": ["position.factor=2"]})
    with pytest.raises(StudyConfigError, match=r"all/rope does not compose \(position factor=2 "):
        load_study(str(path))


def test_one_seed_given_twice_is_told_to_differ(tmp_path):
    """Probe f-25: `grid.seeds: [1, 1]` was told "pass two or more seeds"; two were passed."""
    path = write_fr_copy(tmp_path, "grid.seeds", [1, 1])
    with pytest.raises(StudyConfigError, match=r"grid.seeds: \[1, 1\]; pass two or more different"):
        load_study(str(path))


def test_an_unknown_study_name_lists_the_known_ones():
    with pytest.raises(StudyConfigError, match=r"no file .*; pass one of .*pe_multi30k_fr"):
        load_study("no_such_study")


def test_the_schema_reference_is_generated_from_the_schema():
    written = (ROOT / "docs" / "study-schema.md").read_text(encoding="utf-8")
    assert written == schema_markdown(), "run: python scripts/study_schema.py"
    for key in ("within", "rates_from", "edge_steps", "equivalence_margin"):
        assert f"`{key}`" in written


@pytest.mark.parametrize(
    "overrides, named",
    [
        (["data.pth=x"], "data.pth=x: does not compose"),
        (["seed=3"], "seed is set by the study"),
        (["data.tgt_lang=de"], "study pe_multi30k_fr declares data.tgt_lang=fr itself"),  # g-24
        (["+optim.momentum=0.9"], r"optim.momentum: train.py reads no such setting"),  # f-9
        (["optim.label_smoothing=1.0"], r"label_smoothing=1.0: pass a number from 0 to below"),
    ],
)
def test_overrides_of_every_run_are_checked_before_anything_trains(overrides, named):
    study = load_study("pe_multi30k_fr")
    with pytest.raises(StudyConfigError, match=named):
        check_run_overrides(study, overrides)
    check_run_overrides(study, ["data.path=/some/folder", "trainer.num_threads=1"])
