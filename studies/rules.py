"""The two rules that pick a variant's learning rate, the same for every variant and study.

The grid (docs/declare-a-study.md): at the grid's short budget, each rate's mean dev PPL over
the grid seeds (a diverged seed counts as infinite); the lowest mean wins among the rates every
seed ran; a winner at the edge of the rates tried adds the rate one step beyond it (×0.5 or ×2),
at most grid.edge_steps times. The check: at the final budget, the grid's choice and each
neighbour whose grid mean is within ×`within` of the choice's are trained with the check seeds;
the lowest mean dev PPL there wins, and a neighbour that wins has its own next neighbour (same
direction) checked by the same test. Both rules read rows; studies/stages.py trains them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

EDGE_STEPS = 3  # the default of grid.edge_steps: rates added beyond an edge (×0.5 or ×2 each)


@dataclass(frozen=True)
class DevResult:
    """One trained run's dev PPL at its last step (math.inf: it diverged)."""

    lr_scale: float
    seed: int
    dev_ppl: float


@dataclass(frozen=True)
class RateMean:
    """A rate's runs: their seeds and mean dev PPL (None until every seed ran)."""

    lr_scale: float
    seeds: tuple[int, ...]
    mean: float | None


@dataclass(frozen=True)
class Choice:
    """What a rule chose, or which points it still needs."""

    rate: float | None  # None: not decided yet
    means: tuple[RateMean, ...]
    required: tuple[float, ...]  # every rate the rule needs trained, with every seed
    complete: bool  # every required rate ran: `rate` is final


def rate_means(results: Sequence[DevResult], seeds: Sequence[int]) -> dict[float, RateMean]:
    """{rate: its mean over seeds} for every rate some seed ran (mean None while one is missing)."""
    out = {}
    for rate in sorted({r.lr_scale for r in results}):
        mine = {r.seed: r.dev_ppl for r in results if r.lr_scale == rate and r.seed in seeds}
        full = set(seeds) <= set(mine)
        mean = sum(mine[s] for s in seeds) / len(seeds) if full else None
        out[rate] = RateMean(rate, tuple(sorted(mine)), mean)
    return out


def lowest(means: dict[float, RateMean], rates: Sequence[float]) -> float | None:
    """The rate of lowest finite mean among rates (ties: the lower rate); None: none finite."""
    finite = [means[r] for r in rates if r in means and _finite(means[r].mean)]
    return min(finite, key=lambda m: (m.mean, m.lr_scale)).lr_scale if finite else None


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def choose_on_grid(
    results: Sequence[DevResult],
    rates: Sequence[float],
    seeds: Sequence[int],
    edge_steps: int = EDGE_STEPS,
) -> Choice:
    """The grid rule: lowest mean dev PPL, one step beyond an edge while the winner sits there."""
    means = rate_means(results, seeds)
    required = sorted(float(r) for r in rates)
    for _ in range(edge_steps):
        if any(means.get(r) is None or means[r].mean is None for r in required):
            return Choice(None, _listed(means, required), tuple(required), False)
        best = lowest(means, required)
        if best is None or best not in (required[0], required[-1]):
            return Choice(best, _listed(means, required), tuple(required), True)
        beyond = best / 2 if best == required[0] else best * 2
        required = sorted({*required, beyond})
    done = all(means.get(r) is not None and means[r].mean is not None for r in required)
    best = lowest(means, required) if done else None
    return Choice(best, _listed(means, required), tuple(required), done)


def _listed(means: dict[float, RateMean], required: Sequence[float]) -> tuple[RateMean, ...]:
    """Every required rate's mean (a placeholder for those not run yet), ascending."""
    return tuple(means.get(r, RateMean(r, (), None)) for r in sorted({*required, *means}))


def check_candidates(grid: Choice, chosen: float, within: float) -> list[float]:
    """The grid's neighbours of `chosen` whose grid mean is within ×within of chosen's."""
    tried = [m.lr_scale for m in grid.means if m.mean is not None]
    by_rate = {m.lr_scale: m.mean for m in grid.means}
    at = tried.index(chosen)
    neighbours = [tried[i] for i in (at - 1, at + 1) if 0 <= i < len(tried)]
    return [n for n in neighbours if by_rate[n] <= within * by_rate[chosen]]


def check_rule(
    grid: Choice, results: Sequence[DevResult], within: float, seeds: Sequence[int]
) -> Choice:
    """The check at the final budget (results: its runs): the candidates, then the winner."""
    assert grid.complete and grid.rate is not None, "the check follows a complete grid"
    means = rate_means(results, seeds)
    candidates = {grid.rate, *check_candidates(grid, grid.rate, within)}
    while True:
        required = tuple(sorted(candidates))
        if any(means.get(r) is None or means[r].mean is None for r in required):
            return Choice(None, _listed(means, required), required, False)
        best = lowest(means, required)
        if best is None or best == grid.rate:
            return Choice(best, _listed(means, required), required, True)
        # a neighbour won: its next neighbour in the same direction, by the same test
        beyond = [
            n
            for n in check_candidates(grid, best, within)
            if (n - best) * (best - grid.rate) > 0 and n not in candidates
        ]
        if not beyond:
            return Choice(best, _listed(means, required), required, True)
        candidates.update(beyond)


def choose_value(values: Sequence[str], means: dict[str, float]) -> str | None:
    """The settings rule: the value of lowest mean dev PPL (ties: the first declared), once
    every value has its mean; None before."""
    if any(v not in means for v in values):
        return None
    return min(values, key=lambda v: means[v])
