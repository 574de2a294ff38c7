"""The figures of a comparison (BLEU per variant, per length, dev PPL curves) and of the study,
drawn in one style: one journal column wide, fonts of at least 7 pt, one colour per variant."""

from dataclasses import dataclass
from pathlib import Path

from common.errors import optional_module
from evaluation.statistics import t_quantile

WIDTH_CM = 8.5  # one journal column: every figure is printed at this width
MIN_FONT_PT = 7  # the smallest text a printed figure keeps readable
DPI = 300
STYLE = {  # matplotlib's rcParams for every figure (sizes in points)
    "font.size": MIN_FONT_PT,
    "axes.titlesize": MIN_FONT_PT + 0.5,
    "axes.labelsize": MIN_FONT_PT,
    "xtick.labelsize": MIN_FONT_PT,
    "ytick.labelsize": MIN_FONT_PT,
    "legend.fontsize": MIN_FONT_PT,
    "figure.titlesize": MIN_FONT_PT + 1,
    "lines.linewidth": 1.0,
    "lines.markersize": 3.0,
    "axes.linewidth": 0.6,
    "legend.frameon": False,
}


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed), in STYLE."""
    # matplotlib deferred: optional (the plots extra), needed only when a figure is drawn
    optional_module("matplotlib", "plots").use("Agg")
    plt = optional_module("matplotlib.pyplot", "plots")  # after its backend is chosen
    plt.rcParams.update(STYLE)
    return plt


def figure(nrows: int = 1, ncols: int = 1, height_cm: float = 6.0, **kwargs):
    """A figure WIDTH_CM wide and height_cm high in STYLE, laid out by matplotlib's constrained
    layout (which keeps the size, unlike a tight bounding box): (fig, axes)."""
    plt = pyplot()
    size = (WIDTH_CM / 2.54, height_cm / 2.54)  # inches
    return plt.subplots(nrows, ncols, figsize=size, layout="constrained", **kwargs)


def log_axis(axis) -> None:
    """A log axis labelled in plain numbers at 1, 2 and 5 of each decade (no 10^x labels)."""
    ticker = optional_module("matplotlib.ticker", "plots")
    axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    axis.set_minor_formatter(ticker.NullFormatter())


# configs/position/'s variants in the order the pictures list them, each with its colour in
# every figure (matplotlib's ten-colour cycle)
VARIANTS = tuple(
    "sinusoidal learned rope relative t5 alibi none sinusoidal_shape learned_shape".split()
)
VARIANT_COLOURS = {name: f"C{i}" for i, name in enumerate(VARIANTS)}


def variant_rank(name: str) -> int:
    """Where a variant stands in the figures' order (VARIANTS), others after: a sort key."""
    return VARIANTS.index(name) if name in VARIANTS else len(VARIANTS)


def variant_colours(variants) -> dict[str, str]:
    """Each variant's colour: its own for the configs' variants; any other takes C9, then the
    colours of configs' variants not drawn here (C8 down), so the figure repeats none."""
    names = list(dict.fromkeys(variants))  # in order, once each
    taken = {VARIANT_COLOURS[name] for name in names if name in VARIANT_COLOURS}
    free = iter([f"C{i}" for i in range(9, -1, -1) if f"C{i}" not in taken] * len(names))
    return {name: VARIANT_COLOURS.get(name) or next(free) for name in names}


def save(fig, path: Path) -> None:
    """Write a figure to path (PNG at DPI, its size kept: WIDTH_CM wide) and free it; a text
    under MIN_FONT_PT or cut at the figure's edge is a bug of the figure's code (it would not
    print readably): a ValueError, nothing written."""
    try:
        small = sorted({t.get_text() for t in texts(fig) if t.get_fontsize() < MIN_FONT_PT})
        if small:
            raise ValueError(f"{path.name}: text under {MIN_FONT_PT} pt: {small[:3]}")
        cut = clipped(fig)
        if cut:
            raise ValueError(f"{path.name}: text beyond the figure's edge: {cut[:3]}")
        fig.savefig(path, dpi=DPI)
    finally:
        pyplot().close(fig)


def clipped(fig) -> list[str]:
    """What reaches past the figure's edges once laid out (it would print cut): the texts
    beyond them, or the edges the drawn artists cross."""
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()  # the constrained layout places everything
    drawn = fig.get_tightbbox(renderer)  # inches, only what is drawn (not ticks out of view)
    width, height = fig.get_size_inches()
    slack = 1 / 72  # one point: a descender on the edge is not a cut text
    beyond = {
        "left": drawn.x0 < -slack,
        "bottom": drawn.y0 < -slack,
        "right": drawn.x1 > width + slack,
        "top": drawn.y1 > height + slack,
    }
    crossed = [edge for edge, out in beyond.items() if out]
    if not crossed:
        return []
    edge_px = fig.bbox
    named = [
        t.get_text()
        for t in texts(fig)
        if not t.get_text().replace(".", "").replace("−", "").isdigit()
        and not edge_px.contains(*t.get_window_extent(renderer).p1)
    ]
    return named or [f"the {', '.join(crossed)} edge"]


def texts(fig) -> list:
    """Every visible text of a figure (titles, labels, tick labels, legends, annotations)."""
    text_type = optional_module("matplotlib.text", "plots").Text
    found = fig.findobj(lambda a: isinstance(a, text_type) and a.get_visible() and a.get_text())
    return list(found)


@dataclass(frozen=True)
class DifferenceBar:
    """One variant minus the baseline over n paired seeds: the mean and its 95% interval."""

    variant: str
    difference: float
    low: float | None
    high: float | None
    n: int


def plot_differences(rows, baseline: str, title: str, path: Path) -> None:
    """The headline: each variant's difference from the baseline with its 95% interval,
    sorted, with a zero line (rows: DifferenceBar, or anything with its fields)."""
    save(differences_figure(rows, baseline, title), path)


def differences_figure(rows, baseline: str, title: str):
    """The figure of plot_differences: one row a variant, the largest difference at the top."""
    ordered = sorted(rows, key=lambda r: r.difference)  # bottom to top
    fig, ax = figure(height_cm=3.0 + 0.55 * len(ordered))
    colours = variant_colours(r.variant for r in ordered)
    for y, row in enumerate(ordered):
        has = row.low is not None and row.high is not None
        span = [[row.difference - row.low], [row.high - row.difference]] if has else None
        ax.errorbar(row.difference, y, xerr=span, fmt="o", color=colours[row.variant], capsize=2)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(ordered)), [f"{r.variant} ({r.n})" for r in ordered])
    ax.set_xlabel(f"BLEU minus {baseline}\n(dot: mean of paired seeds; bar: 95% CI)")
    ax.set_ylabel("encoding (seeds)")
    ax.set_title(title)
    return fig


@dataclass(frozen=True)
class RateCurve:
    """One variant's rate grid: each rate's mean dev PPL (None: a seed missing), the choice."""

    label: str
    variant: str  # its colour
    rates: tuple[float, ...]
    means: tuple[float | None, ...]
    chosen: float | None


def plot_rate_curves(curves, steps: int, path: Path) -> None:
    """Mean dev PPL against the rate on log-log axes, one line a variant, the choice ringed."""
    save(rate_curves_figure(curves, steps), path)


def rate_curves_figure(curves, steps: int):
    """The figure of plot_rate_curves."""
    fig, ax = figure(height_cm=7.0)
    colours = variant_colours(c.variant for c in curves)
    for curve in curves:
        drawn = [(r, m) for r, m in zip(curve.rates, curve.means, strict=True) if m is not None]
        if not drawn:
            continue
        ax.plot(*zip(*drawn, strict=True), marker="o", color=colours[curve.variant],
                label=curve.label)  # fmt: skip
        chosen = [m for r, m in drawn if r == curve.chosen]
        if chosen:
            ax.scatter(curve.chosen, chosen[0], s=60, facecolors="none",
                       edgecolors=colours[curve.variant], zorder=4)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")  # the largest rate's runs end several times worse: linear hides the rest
    log_axis(ax.yaxis)
    rates = sorted({r for c in curves for r in c.rates})
    ax.set_xticks(rates, [f"{r:g}" for r in rates])
    ax.set_xlabel("optim.lr_scale (× the schedule's rate)")
    ax.set_ylabel("dev PPL, mean of the seeds")
    ax.set_title(f"Rate grid at {steps:,} steps (ring: chosen)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(ncols=2)
    return fig


def plot_bleu_by_variant(result: dict, path: Path) -> None:
    """Mean sacreBLEU per variant with its 95% interval, one dot a seed, sorted."""
    save(bleu_by_variant_figure(result), path)


def mean_interval(values: list[float]) -> tuple[float, float]:
    """The 95% t-interval's half-width below and above the mean (0 for one value)."""
    n = len(values)
    if n < 2:
        return 0.0, 0.0
    mean = sum(values) / n
    sd = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    half = t_quantile(0.95, n - 1) * sd / n**0.5
    return half, half


def bleu_by_variant_figure(result: dict):
    """The figure of plot_bleu_by_variant: sorted by mean; the first variant's mean dashed as
    the line every other is read against."""
    rows = sorted(result["variants"], key=lambda r: r["bleu_mean"])
    fig, ax = figure(height_cm=3.0 + 0.55 * len(rows))
    colours = variant_colours(row["variant"] for row in result["variants"])
    for y, row in enumerate(rows):
        bleus = [r["bleu"] for r in result["runs"] if r["variant"] == row["variant"]]
        ax.scatter(bleus, [y] * len(bleus), color="black", alpha=0.4, s=4, zorder=2)
        low, high = mean_interval(bleus)
        ax.errorbar(row["bleu_mean"], y, xerr=[[low], [high]], fmt="o", capsize=2,
                    color=colours[row["variant"]], zorder=3)  # fmt: skip
    name = result.get("baseline") or result["variants"][0]["variant"]
    baseline = next((r for r in rows if r["variant"] == name), result["variants"][0])
    ax.axvline(baseline["bleu_mean"], color="black", linestyle="--", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [f"{r['variant']} ({len(r['seeds'])})" for r in rows])
    dashed = baseline["variant"]
    ax.set_xlabel(f"sacreBLEU (bar: 95% CI of the mean;\ndots: seeds; dashed: {dashed})")
    ax.set_ylabel("encoding (seeds)")
    ax.set_title(f"BLEU by position encoding\n({result['eval']})")
    return fig


def plot_bleu_by_length(result: dict, path: Path) -> None:
    """Mean sacreBLEU per source-length bucket, one line per variant."""
    fig, ax = figure()
    colours = variant_colours(row["variant"] for row in result["variants"])
    for row in result["variants"]:
        buckets = row["by_length"]
        if buckets:
            ax.errorbar(
                [b["bucket"] for b in buckets],
                [b["bleu_mean"] for b in buckets],
                yerr=[b["bleu_std"] or 0.0 for b in buckets],
                marker="o",
                capsize=3,
                color=colours[row["variant"]],
                label=row["variant"],
            )
    ax.set_xlabel("source length (words)")
    ax.set_ylabel("sacreBLEU (bar: SD over seeds)")
    ax.set_title("BLEU by source length")
    ax.legend()
    save(fig, path)


def plot_dev_ppl_curves(result: dict, path: Path) -> None:
    """Dev perplexity against training step, one line per run, one colour per variant."""
    save(dev_ppl_figure(result), path)


def dev_ppl_figure(result: dict):
    """The figure of plot_dev_ppl_curves: one legend entry per variant, beside the axes."""
    fig, ax = figure(height_cm=9.0)
    colours = variant_colours(row["variant"] for row in result["variants"])
    seeds = {row["variant"]: row["seeds"] for row in result["variants"]}
    styles = ["-", "--", ":", "-."]
    labelled = set()
    for run in result["runs"]:
        curve = run["dev_ppl_curve"]
        if curve:
            steps, values = zip(*curve, strict=True)
            variant = run["variant"]
            n = len(seeds[variant])
            ax.plot(
                steps,
                values,
                color=colours[variant],
                linestyle=styles[seeds[variant].index(run["seed"]) % len(styles)],
                linewidth=1,
                marker=".",
                markersize=3,
                label="_" if variant in labelled else f"{variant} ({n} seed{'s' * (n > 1)})",
            )
            labelled.add(variant)
    ax.set_yscale("log")
    log_axis(ax.yaxis)
    ax.set_xlabel("step")
    ax.set_ylabel("dev perplexity")
    ax.set_title("Dev perplexity during training (line style: seed)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2)
    return fig


def plot_extrapolation(result: dict, path: Path) -> None:
    """The length study: mean sacreBLEU against source length per variant, lines at L and 2L."""
    max_words = result["max_words"]
    fig, ax = figure()
    colours = variant_colours(row["variant"] for row in result["variants"])
    for row in result["variants"]:
        points = [b for b in row["by_bucket"] if b["bleu_mean"] is not None]
        ax.errorbar(
            [(b["low"] + b["high"]) / 2 for b in points],
            [b["bleu_mean"] for b in points],
            yerr=[b["bleu_std"] or 0.0 for b in points],
            marker="o",
            capsize=3,
            color=colours[row["variant"]],
            label=row["variant"],
        )
    ax.axvline(max_words + 0.5, color="black", linestyle="--", linewidth=1)
    ax.axvline(2 * max_words + 0.5, color="grey", linestyle=":", linewidth=1)
    ax.annotate(
        f"L = {max_words}",
        (max_words + 0.5, 1),
        xycoords=("data", "axes fraction"),
        xytext=(3, -12),
        textcoords="offset points",
    )
    ax.annotate(
        "2L",
        (2 * max_words + 0.5, 1),
        xycoords=("data", "axes fraction"),
        xytext=(3, -12),
        textcoords="offset points",
    )
    ax.set_xlabel(f"source length (words; buckets of {result['bucket_width']})")
    ax.set_ylabel("sacreBLEU (bar: SD over seeds)")
    ax.set_title(f"Trained on <= {max_words} words ({result['corpus']})")
    ax.legend()
    save(fig, path)
