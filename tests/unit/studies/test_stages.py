"""studies/stages.py: what the summary says of a rate the check moved and of the finals the
answer leaves out (the German check rule applied after its finals were trained)."""

from studies.protocol import load_study
from studies.rules import Choice, RateMean
from studies.stages import left_out_lines, moved
from studies.store import Record

STUDY = load_study("pe_multi30k")  # short and joined reuse all's rates


def choice(rate: float | None, complete: bool = True) -> Choice:
    """A rule's choice of rate (its means beside the point here)."""
    return Choice(rate, (RateMean(0.5, (1, 2), 6.0),), (0.5,), complete)


def final(condition: str, variant: str, rate: float, seed: int = 1) -> Record:
    """A final's record at a rate."""
    return Record(1, STUDY.name, "final", condition, variant, rate, seed, 8000, [], 6.0, 1.0,
                  "python train.py", "abc", {})  # fmt: skip


def test_a_rate_the_check_moved_is_named_with_the_grids():
    grid = {("all", "rope"): choice(0.5), ("all", "t5"): choice(1.0)}
    check = {("all", "rope"): choice(1.0), ("all", "t5"): choice(1.0)}
    assert moved(grid, check) == {("all", "rope"): 0.5}
    assert moved(grid, {("all", "rope"): choice(None, complete=False)}) == {}


def test_finals_the_check_left_behind_are_named_and_the_next_step_said():
    decided = {
        "check": {("all", "learned"): choice(0.5), ("all", "rope"): choice(None, False)},
        "finals": [],
    }
    records = [
        final("all", "learned", 1.0),
        final("joined", "learned", 1.0),  # joined takes all's rate
        final("all", "learned", 0.5, seed=3),  # at the chosen rate: not left out
        final("all", "rope", 1.0),
    ]
    lines = left_out_lines(STUDY, records, decided)
    assert lines[0] == (
        "Finals recorded but not in this answer until the check decides their rate: all/rope."
    )
    assert lines[2] == (
        "Finals recorded at a rate the check did not choose, not in this answer (the finals at "
        "the chosen rate are the next step): all/learned at ×1 (the check chose ×0.5); "
        "joined/learned at ×1 (the check chose ×0.5)."
    )
    assert left_out_lines(STUDY, [final("all", "learned", 0.5)], decided) == []
