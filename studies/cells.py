"""Intervals, table cells and Holm families shared by the study's report tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from evaluation.statistics import Power, add_holm, mean, stdev, t_quantile
from studies.rows import from_json


@dataclass(frozen=True)
class Interval:
    """Mean, sample std and the 95% t-interval of the mean over seeds (None where undefined)."""

    n: int
    mean: float | None
    std: float | None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class DifferenceTest:
    """A difference over seeds as evaluation.statistics gives it (a dict in the tables' JSON,
    with add_holm's p_holm), read by name: what the dict lacks is None."""

    method: str | None = None
    seeds: list[int] | None = None
    base_seeds: list[int] | None = None  # unpaired (Welch): each side's seeds
    other_seeds: list[int] | None = None
    difference: float | None = None
    low: float | None = None
    high: float | None = None
    p: float | None = None
    p_holm: float | None = None


@dataclass(frozen=True)
class Tost:
    """An equivalence test (evaluation.statistics.Equivalence as a dict, with add_holm's p_holm),
    read by name: what the dict lacks is None."""

    p: float | None = None
    p_holm: float | None = None
    smallest_margin: float | None = None


def interval(values: list[float]) -> Interval:
    """Mean, sample std and the 95% t-interval of the mean (None where undefined)."""
    values = [float(v) for v in values if v is not None]
    centre, std = mean(values), stdev(values)
    if len(values) < 2:
        return Interval(len(values), centre, std)
    half = t_quantile(0.95, len(values) - 1) * std / len(values) ** 0.5
    return Interval(len(values), centre, std, centre - half, centre + half)


def cell(stats: Interval, digits: int = 2) -> str:
    """mean ± std [low, high] (what is defined), or an em dash."""
    if stats.mean is None:
        return "—"
    text = f"{stats.mean:.{digits}f}"
    if stats.std is not None:
        text += f" ± {stats.std:.{digits}f}"
    if stats.low is not None:
        text += f" [{stats.low:.{digits}f}, {stats.high:.{digits}f}]"
    return text


def signed_text(diff: DifferenceTest, digits: int = 2) -> str:
    """+d [low, high] of a difference over seeds (with its Holm p, where it has one), or a dash."""
    if diff.difference is None:
        return "—"
    text = f"{diff.difference:+.{digits}f}"
    if diff.low is not None:
        text += f" [{diff.low:+.{digits}f}, {diff.high:+.{digits}f}]"
    if diff.p_holm is not None:
        text += f", Holm p {diff.p_holm:.3f}"
    return text


def signed_cell(diff: dict, digits: int = 2) -> str:
    """+d [low, high] of a difference over seeds, or an em dash."""
    return signed_text(from_json(DifferenceTest, diff), digits)


def p_cell(p: float | None, holm: float | None, missing: str = "—") -> str:
    """A test's p with its Holm-adjusted p in brackets (where it has one), or what stands for
    none (an em dash; n/a: a bootstrap without spread)."""
    if p is None:
        return missing
    return f"{p:.3f}" + ("" if holm is None else f" (Holm {holm:.3f})")


def difference_p_cell(diff: dict) -> str:
    """A difference's t-test p with its Holm p (p_cell), or an em dash."""
    test = from_json(DifferenceTest, diff)
    return p_cell(test.p, test.p_holm)


POWER_NOTE = (
    "80% power detects: the difference a paired t-test over these seeds finds 80% of the time "
    "at α 0.05 before Holm's correction, from the SD of the paired differences (— under two "
    'shared seeds): a difference smaller than that may be there unseen, so "not shown" is '
    'not "no difference".'
)


def power_cell(power: Power, digits: int = 2) -> str:
    """The effect 80% power detects over the seeds, or an em dash."""
    if power.detectable is None:
        return "—"
    return f"{power.detectable:.{digits}f} (SD {power.sd:.{digits}f}, n {power.n})"


def equivalence_cell(test: dict, digits: int = 2) -> str:
    """TOST's p (Holm) and the smallest margin shown, or an em dash (under 2 paired seeds)."""
    tost = from_json(Tost, test)
    if tost.p is None:
        return "—"
    return f"{p_cell(tost.p, tost.p_holm)}, ±{tost.smallest_margin:.{digits}f}"


def seeds_cell(diff: dict) -> str:
    """The seeds a difference was taken over; unpaired: each side's, "other vs base"."""
    test = from_json(DifferenceTest, diff)
    if test.method.startswith("paired"):
        return ", ".join(map(str, test.seeds))
    if test.other_seeds is not None:
        other, base = (", ".join(map(str, s)) for s in (test.other_seeds, test.base_seeds))
        return f"{other} vs {base} (unpaired)"
    return f"{', '.join(map(str, test.seeds))} (unpaired)"


def interval_cell(diff: dict) -> str:
    """+d [low, high] without the Holm p (it has a column of its own)."""
    return signed_text(replace(from_json(DifferenceTest, diff), p_holm=None))


def holm_by_family(diffs: Sequence, family: Callable[[object], tuple], keys: Sequence[str]) -> None:
    """Holm-adjust each named test's p within each family of rows (those sharing family(row))."""
    groups: dict[tuple, list] = {}
    for diff in diffs:
        groups.setdefault(family(diff), []).append(diff)
    for group in groups.values():
        for key in keys:
            add_holm([getattr(diff, key) for diff in group])


ALPHA = 0.05  # the family-wise error rate every Holm family is held to


def survivor_cell(test: dict, equivalence: bool, digits: int) -> str:
    """A surviving test in the words of its table: a difference with its interval and Holm p,
    or an equivalence with its TOST p (Holm) and the smallest margin shown."""
    if equivalence:
        return f"TOST {equivalence_cell(test, digits)}"
    return signed_cell(test, digits)


def holm_survivors(
    diffs: Sequence, label: Callable[[object], str], columns: Sequence[tuple[str, str, int]]
) -> list[str]:
    """One Markdown bullet per column (a row's test named key, what it tests, digits): how many
    of its tests keep a Holm-adjusted p under ALPHA, and under it one bullet each (label names
    the row)."""
    lines = []
    for key, name, digits in columns:
        holm = [(d, from_json(DifferenceTest, getattr(d, key)).p_holm) for d in diffs]
        tested = [(d, p) for d, p in holm if p is not None]
        kept = [d for d, p in tested if p < ALPHA]
        lines.append(f"- {name}: {len(kept)} of {len(tested)}")
        lines += [
            f"  - {label(d)}: {survivor_cell(getattr(d, key), key == 'equivalence', digits)}"
            for d in kept
        ]
    return lines


SURVIVORS_NOTE = (
    f"Each test whose Holm-adjusted p is under {ALPHA:g} in its family, out of those with a p; "
    'every other difference is "not shown" (and not "no difference" unless its equivalence '
    "test is listed)."
)
