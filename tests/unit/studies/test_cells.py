"""The shared report cells: which tests a summary says survive Holm's correction."""

from dataclasses import dataclass

from studies.cells import ALPHA, equivalence_cell, holm_survivors, signed_cell


@dataclass
class Row:
    """A table row with one difference and one equivalence test (statistics' dicts)."""

    name: str
    ratio: dict
    equivalence: dict


def difference(name: str, p: float | None, p_holm: float | None) -> Row:
    """A row with one difference (raw and Holm p) and an equivalence test that never survives."""
    test = {"difference": -0.1, "low": -0.2, "high": 0.0, "p": p, "p_holm": p_holm}
    equivalence = {"p": 0.4, "p_holm": 0.8, "smallest_margin": 0.05}
    return Row(name, test, equivalence)


def test_only_holm_adjusted_p_under_alpha_survive_and_untested_rows_are_not_counted():
    """A raw p under ALPHA whose Holm p is not counts as tested, not kept; a row without a p
    (one seed) is not tested; each survivor is shown with its interval and Holm p."""
    rows = [
        difference("kept", 0.004, 0.012),
        difference("raw only", 0.03, 0.06),
        difference("one seed", None, None),
    ]
    columns = (("ratio", "Δ ratio", 3), ("equivalence", "within ±0.03", 3))
    lines = holm_survivors(rows, lambda d: d.name, columns)
    assert ALPHA == 0.05
    assert lines == [
        "- Δ ratio: 1 of 2",
        f"  - kept: {signed_cell(rows[0].ratio, 3)}",
        "- within ±0.03: 0 of 3",
    ]
    assert signed_cell(rows[0].ratio, 3).endswith("Holm p 0.012")
    rows[1].equivalence |= {"p": 0.01, "p_holm": 0.03}
    lines = holm_survivors(rows, lambda d: d.name, columns)
    assert lines[-2:] == [
        "- within ±0.03: 1 of 3",
        f"  - raw only: TOST {equivalence_cell(rows[1].equivalence, 3)}",
    ]
