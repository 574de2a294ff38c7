"""Trained on short sources vs all lengths, BLEU per source-length bucket (the short condition)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from evaluation.plots import figure, save, variant_colours, variant_rank
from evaluation.statistics import (
    RATIO_EQUIVALENCE_MARGIN,
    Power,
    difference_over_seeds,
    paired_equivalence,
    paired_power,
)
from studies.cells import (
    POWER_NOTE,
    SURVIVORS_NOTE,
    Interval,
    cell,
    equivalence_cell,
    holm_by_family,
    holm_survivors,
    interval,
    power_cell,
    seeds_cell,
    signed_cell,
)
from studies.plan import BUCKET_WIDTH
from studies.records import StudyRecord
from studies.reported import Pair

# per bucket beside BLEU: what tells a shorter output (the end-of-sentence prior) from a worse one
LENGTH_KEYS = ("length_ratio", "bp")
# each variant minus the baseline per bucket: kept BLEU, kept BLEU over in-range, kept BLEU with
# the brevity penalty divided out, short length ratio
DIFFERENCE_KEYS = ("ratio", "over_in_range", "ratio_without_bp", "short_length_ratio")
# a row's fields of the short condition's runs and of its control's (short_bp, control_bp, ...)
FIELD_PREFIXES = ("short_", "control_")
EQUIVALENCE_NOTE = (
    f"TOST: two one-sided paired t-tests of -{RATIO_EQUIVALENCE_MARGIN:g} < Δ ratio < "
    f"+{RATIO_EQUIVALENCE_MARGIN:g} (±1 BLEU where the control scores 33), "
    "Holm within the bucket; the smallest margin its 90% interval shows equivalent: where the "
    "Holm p is under 0.05, the two keep the same share there within the margin."
)


@dataclass(frozen=True)
class BucketSize:
    """A source-length bucket: its words (beyond: past the short runs' L) and sentences."""

    bucket: str
    low: int
    high: int
    beyond: bool
    n: int


@dataclass(frozen=True)
class BucketRatio:
    """One variant at one bucket (buckets.json "rows"): short and control BLEU over seeds, their
    ratio, per seed and over the in-range bucket's; the output lengths of both conditions and
    the ratio with the brevity penalties divided out (each filled in by bucket_table)."""

    variant: str
    bucket: str
    low: int
    high: int
    beyond: bool
    n: int
    short: Interval
    control: Interval
    ratio: float | None  # short mean / control mean
    ratio_by_seed: dict[str, float]
    ratio_paired: Interval
    short_seeds: list[int]
    control_seeds: list[int]
    over_in_range_by_seed: dict[str, float] = field(default_factory=dict)
    over_in_range: Interval | None = None
    short_length_ratio: Interval | None = None
    short_length_ratio_by_seed: dict[str, float] = field(default_factory=dict)
    control_length_ratio: Interval | None = None
    control_length_ratio_by_seed: dict[str, float] = field(default_factory=dict)
    short_bp: Interval | None = None
    short_bp_by_seed: dict[str, float] = field(default_factory=dict)
    control_bp: Interval | None = None
    control_bp_by_seed: dict[str, float] = field(default_factory=dict)
    ratio_without_bp_by_seed: dict[str, float] = field(default_factory=dict)
    ratio_without_bp: Interval | None = None


@dataclass(frozen=True)
class BucketDifference:
    """One variant minus the baseline at one bucket, by seed: each of DIFFERENCE_KEYS
    (evaluation.statistics' dicts, Holm p added), power and TOST of the Δ ratio."""

    variant: str
    bucket: str
    low: int
    high: int
    beyond: bool
    n: int
    baseline: str
    ratio: dict
    over_in_range: dict
    ratio_without_bp: dict
    short_length_ratio: dict
    power: Power
    equivalence: dict


@dataclass(frozen=True)
class BucketTable:
    """buckets.json: the short condition against its control, bucket by bucket."""

    max_words: int | None
    bucket_width: int
    in_range: str | None  # the last bucket within the training lengths
    rows: list[BucketRatio]
    differences: list[BucketDifference]


def bucket_cells(
    records: list[StudyRecord], conditions: Pair, score: str = "bleu"
) -> tuple[dict[tuple, dict[int, float | None]], dict[str, BucketSize]]:
    """A score by (variant, bucket, condition) and seed of the runs of conditions (the short
    condition and its control; None where a record lacks it); bucket sizes."""
    cells: dict[tuple, dict[int, float | None]] = {}
    sizes: dict[str, BucketSize] = {}
    for record in records:
        if record.condition not in conditions:
            continue
        for b in record.by_bucket:
            key = (record.variant, b.bucket, record.condition)
            cells.setdefault(key, {})[record.seed] = getattr(b, score)
            sizes[b.bucket] = BucketSize(b.bucket, b.low, b.high, b.beyond, b.n)
    return cells, sizes


def add_lengths(
    rows: list[BucketRatio], records: list[StudyRecord], conditions: Pair
) -> list[BucketRatio]:
    """Each row with the short and control runs' length ratio and brevity penalty over seeds
    (LENGTH_KEYS), and the ratio without the brevity penalty."""
    for score in LENGTH_KEYS:
        cells, _ = bucket_cells(records, conditions, score)
        rows = [replace(row, **length_fields(row, cells, score, conditions)) for row in rows]
    return [with_ratio_without_bp(row) for row in rows]


def length_fields(row: BucketRatio, cells: dict[tuple, dict], score: str, conditions: Pair) -> dict:
    """A row's short_<score>, control_<score> (over seeds) and each one's _by_seed values."""
    fields = {}
    for condition, side in zip(conditions, FIELD_PREFIXES, strict=True):
        values = cells.get((row.variant, row.bucket, condition), {})
        kept = {str(seed): v for seed, v in values.items() if v is not None}
        fields[f"{side}{score}"] = interval(list(kept.values()))
        fields[f"{side}{score}_by_seed"] = kept
    return fields


def with_ratio_without_bp(row: BucketRatio) -> BucketRatio:
    """The kept share with each side's brevity penalty divided out, per seed that has both BPs:
    BLEU / BP is the geometric mean of the n-gram precisions (Papineni et al. 2002), so
    what is left of a drop here is not the outputs' length (the end-of-sentence prior)."""
    short, control = row.short_bp_by_seed, row.control_bp_by_seed
    by_seed = {
        seed: round(ratio * control[seed] / short[seed], 4)
        for seed, ratio in row.ratio_by_seed.items()
        if short.get(seed) and control.get(seed)
    }
    return replace(
        row, ratio_without_bp_by_seed=by_seed, ratio_without_bp=interval(list(by_seed.values()))
    )


def bucket_row(variant: str, size: BucketSize, short: dict, control: dict) -> BucketRatio:
    """One variant at one bucket: short and control BLEU over seeds, their ratio, paired too."""
    short_iv, control_iv = interval(list(short.values())), interval(list(control.values()))
    ratio = None
    if short_iv.mean is not None and control_iv.mean:
        ratio = round(short_iv.mean / control_iv.mean, 4)
    paired = {
        str(s): round(short[s] / control[s], 4)
        for s in sorted(set(short) & set(control))
        if short[s] is not None and control[s]
    }
    return BucketRatio(
        variant,
        **asdict(size),
        short=short_iv,
        control=control_iv,
        ratio=ratio,
        ratio_by_seed=paired,
        ratio_paired=interval(list(paired.values())),
        short_seeds=sorted(short),
        control_seeds=sorted(control),
    )


def add_over_in_range(rows: list[BucketRatio], in_range: BucketSize | None) -> list[BucketRatio]:
    """Each row's ratio per seed over that seed's ratio at the in-range bucket, and its interval."""
    name = None if in_range is None else in_range.bucket
    reference = {r.variant: r.ratio_by_seed for r in rows if r.bucket == name}
    added = []
    for row in rows:
        ref = reference.get(row.variant, {})
        by_seed = {s: round(v / ref[s], 4) for s, v in row.ratio_by_seed.items() if ref.get(s)}
        added.append(
            replace(
                row, over_in_range_by_seed=by_seed, over_in_range=interval(list(by_seed.values()))
            )
        )
    return added


def by_seed(values: dict[str, float]) -> dict[int, float]:
    """A JSON table by seed (string keys) keyed by int seeds again."""
    return {int(s): v for s, v in values.items()}


def bucket_difference(row: BucketRatio, base: BucketRatio) -> BucketDifference:
    """One variant minus the baseline at one bucket, by seed (DIFFERENCE_KEYS); the Δ ratio 80%
    power detects ("power") and its TOST at ±RATIO_EQUIVALENCE_MARGIN ("equivalence")."""
    ratios = by_seed(base.ratio_by_seed), by_seed(row.ratio_by_seed)
    tests = {
        key: difference_over_seeds(
            by_seed(getattr(base, f"{key}_by_seed")), by_seed(getattr(row, f"{key}_by_seed"))
        )
        for key in DIFFERENCE_KEYS
    }
    return BucketDifference(
        row.variant, row.bucket, row.low, row.high, row.beyond, row.n, base.variant, **tests,
        power=paired_power(*ratios),
        equivalence=asdict(paired_equivalence(*ratios, RATIO_EQUIVALENCE_MARGIN)),
    )  # fmt: skip


def bucket_differences(rows: list[BucketRatio], baseline: str) -> list[BucketDifference]:
    """Every variant minus the baseline per bucket (bucket_difference), each column's p and the
    equivalence p Holm-adjusted within the family of one bucket."""
    base = {r.bucket: r for r in rows if r.variant == baseline}
    differences = [
        bucket_difference(row, base[row.bucket])
        for row in rows
        if row.variant != baseline and row.bucket in base
    ]
    holm_by_family(differences, lambda d: (d.bucket,), (*DIFFERENCE_KEYS, "equivalence"))
    return differences


def bucket_table(records: list[StudyRecord], conditions: Pair, baseline: str) -> BucketTable:
    """The short condition against its control (all lengths), bucket by bucket, with counts;
    conditions: (the short condition, its control), from the study's config.

    Per variant and bucket: BLEU mean over seeds in each condition, their ratio (short /
    control), the ratio per seed both ran, and the number of sentences in the bucket; the
    ratio per seed over that seed's ratio in the last bucket within the training lengths
    ("in_range"), so what a variant already loses or gains at the lengths it was trained on
    is not read as extrapolation; "differences" holds every variant minus the baseline per
    bucket, by seed, in both.
    """
    short, control = conditions
    cells, sizes = bucket_cells(records, conditions)
    variants = sorted({key[0] for key in cells if key[2] == short})
    # every run is bucketed at the short condition's L, so the control's records know it too
    max_words = next((r.max_words for r in records if r.condition in conditions), None)
    rows = [
        bucket_row(
            variant,
            size,
            cells.get((variant, name, short), {}),
            cells.get((variant, name, control), {}),
        )
        for variant in variants
        for name, size in sorted(sizes.items(), key=lambda item: item[1].low)
    ]
    in_range = max((s for s in sizes.values() if not s.beyond), key=lambda s: s.low, default=None)
    rows = add_lengths(add_over_in_range(rows, in_range), records, conditions)
    return BucketTable(
        max_words=max_words,
        bucket_width=BUCKET_WIDTH,
        in_range=None if in_range is None else in_range.bucket,
        rows=rows,
        differences=bucket_differences(rows, baseline),
    )


def row_start(row: BucketRatio | BucketDifference) -> str:
    """A Markdown row's first cells: variant, bucket (* beyond the training lengths), sentences."""
    return f"| {row.variant} | {row.bucket}{'*' if row.beyond else ''} | {row.n}"


def bucket_markdown(table: BucketTable) -> str:
    """buckets.md: short-trained BLEU over the all-lengths control, per bucket, with counts."""
    lines = [
        f"# Trained on <= {table.max_words} source words vs all lengths (the control)",
        "",
        f"test_2016_flickr + validation, BLEU per source-length bucket ({table.bucket_width} "
        "words; * = beyond the short runs' training lengths), mean over seeds; ratio = short / "
        "control (and its mean over paired seeds [95% interval]); ÷ in-range = each seed's "
        f"ratio over its ratio at {table.in_range} words, the last bucket within the "
        "training lengths, so what a variant loses or gains there already is not read as "
        "extrapolation.",
        "",
        "| variant | bucket | sentences | short BLEU | control BLEU | ratio | paired ratio "
        "| ÷ in-range |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if not table.rows:
        return "\n".join(lines[:4] + ["No run of the short condition is scored yet."]) + "\n"
    lines[4:4] = survivor_lines(table.differences)
    for row in table.rows:
        ratio = "—" if row.ratio is None else f"{row.ratio:.3f}"
        lines.append(
            f"{row_start(row)} | {cell(row.short)} "
            f"| {cell(row.control)} | {ratio} | {cell(row.ratio_paired, 3)} "
            f"| {cell(row.over_in_range, 3)} |"
        )
    lines += length_lines(table)
    if table.differences:
        lines += [
            "",
            f"## Each variant's ratio minus {table.differences[0].baseline}'s, per bucket",
            "",
            "short / control per seed, the variant's minus the baseline's, paired by seed over the "
            "seeds both ran (Welch over all seeds where fewer than two are shared), with the 95% "
            "t-interval: below zero, the variant keeps less of its all-lengths BLEU there; the "
            "same for the ratio ÷ in-range (below zero beyond the training lengths: the variant "
            "loses more there than it does within them); the same for the ratio without BP "
            "(below zero: the variant's n-gram precisions keep less, whatever the outputs' "
            "length); and the short runs' length ratio "
            "(below zero: the variant's short-trained outputs stop earlier there, so a BLEU loss "
            "beside it is the end-of-sentence prior's as much as the encoding's). Holm p: the "
            "t-test's p adjusted by Holm within the family of every variant at one bucket, per "
            "column. " + POWER_NOTE + " " + EQUIVALENCE_NOTE,
            "",
            "| variant | bucket | sentences | seeds | Δ ratio | Δ ratio ÷ in-range "
            "| Δ ratio without BP | Δ length ratio (short) | 80% power detects (Δ ratio) "
            f"| Δ ratio within ±{RATIO_EQUIVALENCE_MARGIN:g}: TOST p (Holm), smallest margin |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
    for diff in table.differences:
        lines.append(
            f"{row_start(diff)} | {seeds_cell(diff.ratio)} | {signed_cell(diff.ratio, 3)} "
            f"| {signed_cell(diff.over_in_range, 3)} "
            f"| {signed_cell(diff.ratio_without_bp, 3)} "
            f"| {signed_cell(diff.short_length_ratio, 3)} | {power_cell(diff.power, 3)} "
            f"| {equivalence_cell(diff.equivalence, 3)} |"
        )
    return "\n".join(lines) + "\n"


def survivor_label(diff: BucketDifference) -> str:
    """A bucket difference named in words: variant, bucket (* beyond L), sentences."""
    return f"{diff.variant} at {diff.bucket}{'*' if diff.beyond else ''} ({diff.n})"


def survivor_lines(differences: list[BucketDifference]) -> list[str]:
    """buckets.md's summary: which bucket differences and equivalences survive Holm."""
    if not differences:
        return []
    baseline = differences[0].baseline
    columns = (
        ("ratio", f"Δ ratio (short / control) minus {baseline}'s", 3),
        ("over_in_range", "Δ ratio ÷ in-range", 3),
        ("ratio_without_bp", "Δ ratio without BP", 3),
        ("short_length_ratio", "Δ length ratio (short)", 3),
        ("equivalence", f"Δ ratio within ±{RATIO_EQUIVALENCE_MARGIN:g}", 3),
    )
    return [
        "**What survives Holm's correction**, each variant minus "
        f"{baseline} per bucket (the tables below). " + SURVIVORS_NOTE,
        "",
        *holm_survivors(differences, survivor_label, columns),
        "",
    ]


def length_lines(table: BucketTable) -> list[str]:
    """buckets.md's table of length ratios and brevity penalties, short vs control."""
    lines = [
        "",
        "## Output length per bucket: short vs control",
        "",
        "Hypothesis/reference length ratio and sacreBLEU's brevity penalty per bucket, mean over "
        "seeds [95% interval]: a short-trained model whose ratio drops beyond its training "
        "lengths while the control's holds stops early (the end-of-sentence prior), which BLEU "
        "alone would charge to the position encoding. Ratio without BP: each seed's short / "
        "control with each side's BLEU divided by its BP (the n-gram precisions alone), mean "
        "over paired seeds: what is lost there is not length. — : records scored before these "
        "were kept.",
        "",
        "| variant | bucket | sentences | length ratio short | control | BP short | control "
        "| ratio without BP |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table.rows:
        lines.append(
            f"{row_start(row)} | {cell(row.short_length_ratio, 3)} "
            f"| {cell(row.control_length_ratio, 3)} "
            f"| {cell(row.short_bp, 3)} | {cell(row.control_bp, 3)} "
            f"| {cell(row.ratio_without_bp, 3)} |"
        )
    return lines


# the figure's panels: each row's mean over the paired seeds (the line) and per seed (the band)
RATIO_PANELS = (
    ("ratio_paired", "ratio_by_seed", "BLEU short / BLEU control"),
    ("over_in_range", "over_in_range_by_seed", "that ratio ÷ its in-range ratio"),
    ("ratio_without_bp", "ratio_without_bp_by_seed", "BLEU / BP short / BLEU / BP control"),
)


def bucket_ratio_figure(table: BucketTable):
    """Per source-length bucket (with its sentences), short-trained BLEU over the control's,
    that ratio over each seed's in-range ratio, and it with the brevity penalties divided out;
    the band spans the seeds."""
    buckets = sorted({(r.low, r.bucket, r.n, r.beyond) for r in table.rows})
    position = {name: x for x, (_, name, _, _) in enumerate(buckets)}
    fig, axes = figure(len(RATIO_PANELS), 1, height_cm=5.5 * len(RATIO_PANELS) + 1.5)
    variants = sorted({r.variant for r in table.rows}, key=variant_rank)
    colours = variant_colours(variants)
    for ax, (key, per_seed, title) in zip(axes, RATIO_PANELS, strict=True):
        for variant in variants:
            rows = [r for r in table.rows if r.variant == variant and getattr(r, per_seed)]
            if not rows:  # e.g. records scored before the brevity penalty was kept
                continue
            xs = [position[r.bucket] for r in rows]
            ys = [getattr(r, key).mean for r in rows]
            seeds = [list(getattr(r, per_seed).values()) for r in rows]
            n = max((len(s) for s in seeds), default=0)
            colour = colours[variant]
            label = f"{variant} ({n} seed{'s' * (n != 1)})"
            ax.plot(xs, ys, marker="o", color=colour, label=label)
            ax.fill_between(
                xs, [min(s) for s in seeds], [max(s) for s in seeds], color=colour, alpha=0.15
            )
        ax.axhline(1.0, color="grey", linewidth=1)
        seen = [x for x, (_, _, _, beyond) in enumerate(buckets) if not beyond]
        if seen:
            ax.axvline(max(seen) + 0.5, color="black", linestyle="--", linewidth=1)
        ticks = [f"{name}{'*' if beyond else ''}\n{n}" for _, name, n, beyond in buckets]
        ax.set_xticks(range(len(buckets)), ticks)
        ax.set_ylabel(f"{title}\n(band: seeds' range)")
    axes[-1].set_xlabel("source words (*: beyond training); sentences below")
    axes[0].set_title(f"Trained on <= {table.max_words} words, relative to the control")
    axes[1].set_title(f"... and relative to what it keeps at {table.in_range} words")
    axes[2].set_title("... with the brevity penalties divided out")
    drawn = [ax for ax in axes if ax.get_legend_handles_labels()[0]]  # a variant's line
    if drawn:  # one legend, on the first panel that draws a variant
        drawn[0].legend(ncols=2)
    return fig


def plot_bucket_ratio(table: BucketTable, path: Path) -> None:
    """bucket_ratio.png: bucket_ratio_figure, saved."""
    save(bucket_ratio_figure(table), path)
