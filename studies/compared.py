"""compare.json typed: evaluation.compare's result, then what the study's report adds to it.

``Compared`` is what ``evaluation.compare.compare`` returns (read once with ``from_json``);
``Table3`` is the report's compare.json, the same fields first and the study's after. Field names
are the file's keys, in its order, so ``dataclasses.asdict`` writes the file back unchanged.
Tests over seeds stay evaluation.statistics' dicts (add_holm adds their Holm p in place) and are
read through studies.cells.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from evaluation.statistics import Equivalence, Power, TwoLevelBootstrap
from studies.cells import Interval
from studies.rows import from_json


@dataclass(frozen=True)
class ComparedVariant:
    """One variant's summary over its seeds as evaluation.compare writes it."""

    variant: str
    n: int
    seeds: list[int]
    dev_ppl_mean: float | None
    dev_ppl_std: float | None
    bleu_mean: float | None
    bleu_std: float | None
    tok_bleu_mean: float | None
    chrf_mean: float | None
    parameters: int
    steps: int
    hours: float | None
    paper_ppl: float | None
    paper_bleu: float | None
    by_length: list[dict]


@dataclass(frozen=True)
class VariantIntervals:
    """A variant's scores over its seeds: mean, std and 95% interval of each."""

    dev_ppl: Interval
    bleu: Interval
    chrf: Interval
    tok_bleu: Interval


@dataclass(frozen=True)
class VariantRow(ComparedVariant):
    """A variant of the report's Table 3: compare's summary, then its intervals, steps, rate and
    the rate tuning.json chose for it (None without one)."""

    intervals: VariantIntervals
    steps_by_seed: dict[str, int]
    lr_scale: float | None
    position_settings: list[str]
    chosen_lr_scale: float | None
    chosen_at: int | None  # the budget of the grid that chose it
    chosen_final: bool


@dataclass(frozen=True)
class PairedBootstrap:
    """evaluation.compare's paired bootstrap of one seed pair, with its Holm p."""

    baseline_bleu: float
    other_bleu: float
    difference: float
    low: float
    high: float
    p_value: float | None
    resamples: int
    signature: str
    seeds: list[int]
    p_holm: float | None
    family_size: int


@dataclass(frozen=True)
class ComparedDifference:
    """A variant minus the baseline as evaluation.compare writes it: BLEU over seeds (a dict of
    evaluation.statistics, Holm p added) and the paired bootstrap (None: no resamples)."""

    variant: str
    baseline: str
    across_seeds: dict
    bootstrap: PairedBootstrap | None


@dataclass(frozen=True)
class BaselineDifference(ComparedDifference):
    """compare's difference, then the study's chrF by seed, power and TOST of Δ BLEU."""

    chrf_across_seeds: dict
    power: Power
    equivalence: dict


@dataclass(frozen=True)
class SeedDifference:
    """A variant minus another baseline (learned), by seed: sacreBLEU and chrF, power, TOST."""

    variant: str
    baseline: str
    across_seeds: dict
    chrf_across_seeds: dict
    power: Power
    equivalence: dict


@dataclass(frozen=True)
class PaperRowE:
    """The paper's row (E): each encoding's tokenized BLEU (fields: ROW_E's variants)."""

    sinusoidal: float
    learned: float
    difference: float
    note: str


@dataclass(frozen=True)
class RowE:
    """Row (E), learned minus sinusoidal by seed: t-interval, TOST, power, two-level bootstrap."""

    variant: str
    baseline: str
    seeds: list[int]
    bleu: dict
    tok_bleu: dict
    equivalence: Equivalence
    power: Power
    two_level_bootstrap: TwoLevelBootstrap | None
    paper: PaperRowE


@dataclass(frozen=True)
class StudyNote:
    """What the study's Table 3 compared: its condition, the runs' steps, the rates' check."""

    condition: str
    steps: list[int]
    equal_steps: bool
    rates_checked_against_tuning: bool


@dataclass(frozen=True)
class Compared:
    """evaluation.compare's result, typed (its compare.json)."""

    eval: str
    search: dict
    signature: str
    baseline: str
    paper_note: str
    runs: list[dict]
    variants: list[ComparedVariant]
    differences: list[ComparedDifference]
    out_dir: str

    @classmethod
    def from_json(cls, result: dict) -> Compared:
        """compare's dict (or a compare.json) read once into rows; a key no row has is refused
        (the report writes compare.json back whole)."""
        return from_json(cls, result, strict=True)


@dataclass(frozen=True)
class Table3(Compared):
    """The report's compare.json: compare's result with the study's rows and tests."""

    variants: list[VariantRow]
    differences: list[BaselineDifference]
    differences_to_learned: list[SeedDifference]
    row_e: RowE | None
    study: StudyNote

    @classmethod
    def from_json(cls, result: dict) -> Table3:
        """The report's compare.json read once into rows (strict, as Compared's)."""
        return from_json(cls, result, strict=True)


def shallow(row) -> dict:
    """A row's fields by name, their values as they are (not converted to dicts)."""
    return {f.name: getattr(row, f.name) for f in fields(row)}
