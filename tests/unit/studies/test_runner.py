"""The launch check of studies/runner.py, on the real configs."""

import pytest

from studies.plan import StudyError
from studies.runner import check_launch

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
