"""runs/directory.py's sweep check: a value given twice is one run twice (two jobs, one
folder, or one setting trained twice); end to end: tests/e2e/test_run_directory.py."""

import pytest

from common.errors import UserError
from runs.directory import check_sweep_values


@pytest.mark.parametrize(
    "override, twice",
    [("seed=1,2,1", "1"), ("optim.lr_scale=1,1.0", "1, 1.0"), ("position=rope,b,rope", "rope")],
)
def test_a_sweep_value_given_twice_is_refused_by_value(override, twice):
    """Probe j-3: `optim.lr_scale=1,1.0` trained one setting twice (spellings were compared)."""
    said = rf"^{override}: names one value more than once \({twice}\)"
    with pytest.raises(UserError, match=said):
        check_sweep_values([override])
    check_sweep_values(["seed=1,2", "optim.lr_scale=0.5,1", "position=glob(*)", "beam=4"])
