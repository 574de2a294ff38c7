"""Intervals, table cells and Holm families shared by the study's report tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evaluation.statistics import add_holm, mean, stdev, t_quantile


def interval(values: list[float]) -> dict:
    """Mean, sample std and the 95% t-interval of the mean (None where undefined)."""
    values = [float(v) for v in values if v is not None]
    result = {"n": len(values), "mean": mean(values), "std": stdev(values), "low": None}
    result["high"] = None
    if len(values) >= 2:
        half = t_quantile(0.95, len(values) - 1) * result["std"] / len(values) ** 0.5
        result |= {"low": result["mean"] - half, "high": result["mean"] + half}
    return result


def cell(stats: dict, digits: int = 2) -> str:
    """mean ± std [low, high] (what is defined), or an em dash."""
    if stats.get("mean") is None:
        return "—"
    text = f"{stats['mean']:.{digits}f}"
    if stats.get("std") is not None:
        text += f" ± {stats['std']:.{digits}f}"
    if stats.get("low") is not None:
        text += f" [{stats['low']:.{digits}f}, {stats['high']:.{digits}f}]"
    return text


def signed_cell(diff: dict, digits: int = 2) -> str:
    """+d [low, high] of a difference over seeds, or an em dash."""
    if diff.get("difference") is None:
        return "—"
    text = f"{diff['difference']:+.{digits}f}"
    if diff.get("low") is not None:
        text += f" [{diff['low']:+.{digits}f}, {diff['high']:+.{digits}f}]"
    if diff.get("p_holm") is not None:
        text += f", Holm p {diff['p_holm']:.3f}"
    return text


def p_cell(test: dict, key: str = "p", missing: str = "—") -> str:
    """A test's p with its Holm-adjusted p in brackets (where it has one), or what stands for
    none (an em dash; n/a: a bootstrap without spread)."""
    if test.get(key) is None:
        return missing
    holm = test.get("p_holm")
    return f"{test[key]:.3f}" + ("" if holm is None else f" (Holm {holm:.3f})")


POWER_NOTE = (
    "80% power detects: the difference a paired t-test over these seeds finds 80% of the time "
    "at α 0.05 before Holm's correction, from the SD of the paired differences (— under two "
    'shared seeds): a difference smaller than that may be there unseen, so "not shown" is '
    'not "no difference".'
)


def power_cell(power: dict, digits: int = 2) -> str:
    """The effect 80% power detects over the seeds, or an em dash."""
    if power.get("detectable") is None:
        return "—"
    return f"{power['detectable']:.{digits}f} (SD {power['sd']:.{digits}f}, n {power['n']})"


def equivalence_cell(test: dict, digits: int = 2) -> str:
    """TOST's p (Holm) and the smallest margin shown, or an em dash (under 2 paired seeds)."""
    if test.get("p") is None:
        return "—"
    return f"{p_cell(test)}, ±{test['smallest_margin']:.{digits}f}"


def seeds_cell(diff: dict) -> str:
    """The seeds a difference was taken over; unpaired: each side's, "other vs base"."""
    if diff["method"].startswith("paired"):
        return ", ".join(map(str, diff["seeds"]))
    if "other_seeds" in diff:
        other, base = (", ".join(map(str, diff[k])) for k in ("other_seeds", "base_seeds"))
        return f"{other} vs {base} (unpaired)"
    return f"{', '.join(map(str, diff['seeds']))} (unpaired)"


def interval_cell(diff: dict) -> str:
    """+d [low, high] without the Holm p (it has a column of its own)."""
    return signed_cell({k: v for k, v in diff.items() if k != "p_holm"})


def holm_by_family(diffs: list[dict], family: Callable[[dict], tuple], keys: Sequence[str]) -> None:
    """Holm-adjust each key's p within each family of diffs (those sharing family(diff))."""
    groups: dict[tuple, list[dict]] = {}
    for diff in diffs:
        groups.setdefault(family(diff), []).append(diff)
    for group in groups.values():
        for key in keys:
            add_holm([diff[key] for diff in group])


ALPHA = 0.05  # the family-wise error rate every Holm family is held to


def survivor_cell(test: dict, equivalence: bool, digits: int) -> str:
    """A surviving test in the words of its table: a difference with its interval and Holm p,
    or an equivalence with its TOST p (Holm) and the smallest margin shown."""
    if equivalence:
        return f"TOST {equivalence_cell(test, digits)}"
    return signed_cell(test, digits)


def holm_survivors(
    diffs: list[dict], label: Callable[[dict], str], columns: Sequence[tuple[str, str, int]]
) -> list[str]:
    """One Markdown bullet per column (key, what it tests, digits): how many of its tests keep a
    Holm-adjusted p under ALPHA, and under it one bullet each (label names the row)."""
    lines = []
    for key, name, digits in columns:
        tested = [d for d in diffs if d[key].get("p_holm") is not None]
        kept = [d for d in tested if d[key]["p_holm"] < ALPHA]
        lines.append(f"- {name}: {len(kept)} of {len(tested)}")
        lines += [
            f"  - {label(d)}: {survivor_cell(d[key], key == 'equivalence', digits)}" for d in kept
        ]
    return lines


SURVIVORS_NOTE = (
    f"Each test whose Holm-adjusted p is under {ALPHA:g} in its family, out of those with a p; "
    'every other difference is "not shown" (and not "no difference" unless its equivalence '
    "test is listed)."
)
