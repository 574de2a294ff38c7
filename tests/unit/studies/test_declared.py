"""Declared, not coded: the declared-study modules name no variant and no condition.

What differs between studies lives in configs/study/*.yaml; the modules that run a declared
study (the schema, the rules, the store, the stages, the scores, the answer) hold no string
equal to a position variant's name or a condition's name. The older modules of studies/ that
still know the German study by name are being retired into these (docs/declare-a-study.md).
"""

import ast
import functools

import pytest

from studies.protocol import STUDY_DIR, load_study
from tests.conftest import POSITION_CONFIGS, ROOT

DECLARED = ["protocol", "rules", "store", "pipeline", "stages", "finals", "answer", "across"]


@functools.cache
def names() -> frozenset[str]:
    """Every variant of configs/position and every condition of configs/study."""
    found = {p.stem for p in POSITION_CONFIGS}
    for path in STUDY_DIR.glob("*.yaml"):
        study = load_study(path.stem)
        found |= set(study.conditions) | set(study.variants)
    return frozenset(found)


@pytest.mark.parametrize("module", DECLARED)
def test_no_declared_study_module_names_a_variant_or_condition(module):
    tree = ast.parse((ROOT / "studies" / f"{module}.py").read_text(encoding="utf-8"))
    literals = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert not literals & names(), f"studies/{module}.py names {sorted(literals & names())}"
