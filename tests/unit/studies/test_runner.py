"""The launch check of studies/runner.py, on the real configs."""

from pathlib import Path

import pytest

from studies.plan import StudyError
from studies.runner import check_launch, check_tuned_configuration
from studies.tuning import TunedRates

SHAPE = [("all", "sinusoidal_shape"), ("all", "learned_shape")]


def test_a_setting_of_some_variants_composes_with_each_of_them():
    # SHAPE's shift K exists in the SHAPE variants' configs only: checking it against the
    # experiment's default position (sinusoidal) refused the K grid's documented command
    check_launch("basic", 1, SHAPE, ["optim.lr_scale=0.5", "position.max_shift=10"])


def test_a_variant_the_setting_does_not_apply_to_is_named():
    cells = [*SHAPE, ("all", "sinusoidal")]
    with pytest.raises(StudyError, match=r"position=sinusoidal \(.*max_shift"):
        check_launch("basic", 1, cells, ["position.max_shift=10"])


def test_an_unknown_key_is_refused_for_any_variant():
    with pytest.raises(StudyError, match=r"experiment=pe_study_multi30k position=rope"):
        check_launch("basic", 1, [("all", "rope")], ["trainer.nope=1"])


def shape_grid(*overrides: str) -> TunedRates:
    """A SHAPE grid's tuning as `run --tuning` reads it (its choices play no part here)."""
    path = (Path("results/archive/pe_shape_tuning/tuning.json"),)
    return TunedRates(path, "pe_study_multi30k", overrides, (2000,), {})


def test_a_tuned_setting_of_some_variants_is_compared_at_each_of_them():
    # the final SHAPE runs' command (`run --tuning` of the grid at position.max_shift=10)
    # was refused: the grid's overrides were composed at the default position, which has no K
    check_tuned_configuration(
        shape_grid("position.max_shift=10"),
        SHAPE,
        ["position.max_shift=10", "trainer.max_steps=8000"],
    )


def test_a_changed_setting_of_some_variants_is_refused():
    with pytest.raises(StudyError, match=r"position.max_shift: 10 -> 25"):
        check_tuned_configuration(
            shape_grid("position.max_shift=10"), SHAPE, ["position.max_shift=25"]
        )
