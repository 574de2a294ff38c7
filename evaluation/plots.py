"""The figures of a comparison (BLEU per variant, per length, dev PPL curves) and of the study."""

from pathlib import Path

from common.errors import optional_module


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
    # matplotlib deferred: optional (the plots extra), needed only when a figure is drawn
    optional_module("matplotlib", "plots").use("Agg")
    return optional_module("matplotlib.pyplot", "plots")  # after its backend is chosen


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
    """Write a figure to path (PNG, 120 dpi) and free it."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


SEED_LABELS_UP_TO = 3  # seeds per variant named beside their dots; more would overprint


def plot_bleu_by_variant(result: dict, path: Path) -> None:
    """Mean sacreBLEU per variant (a line) with one dot per seed, named where few."""
    save(bleu_by_variant_figure(result), path)


def bleu_by_variant_figure(result: dict):
    """The figure of plot_bleu_by_variant: a dot a seed, labelled up to SEED_LABELS_UP_TO."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    colours = variant_colours(row["variant"] for row in result["variants"])
    for x, row in enumerate(result["variants"]):
        ax.hlines(row["bleu_mean"], x - 0.3, x + 0.3, color=colours[row["variant"]], linewidth=3)
        runs = [r for r in result["runs"] if r["variant"] == row["variant"]]
        for i, run in enumerate(runs):
            offset = (i - (len(runs) - 1) / 2) * 0.5 / max(len(runs), 1)
            ax.scatter(x + offset, run["bleu"], color="black", s=12, zorder=3)
            if len(runs) <= SEED_LABELS_UP_TO:
                ax.annotate(
                    f"seed {run['seed']}",
                    (x + offset, run["bleu"]),
                    xytext=(4, 4),
                    fontsize=7,
                    textcoords="offset points",
                )
    names = [f"{r['variant']} ({len(r['seeds'])})" for r in result["variants"]]
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")  # long names do not overlap
    ax.set_xlim(-0.6, len(result["variants"]) - 0.4)
    ax.set_ylabel("sacreBLEU (line: mean over seeds)")
    ax.set_xlabel("position encoding (seeds)")
    ax.set_title(f"BLEU by position encoding ({result['eval']})")
    return fig


def plot_bleu_by_length(result: dict, path: Path) -> None:
    """Mean sacreBLEU per source-length bucket, one line per variant."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
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
    ax.set_ylabel("sacreBLEU")
    ax.set_title("BLEU by source length")
    ax.legend()
    save(fig, path)


def plot_dev_ppl_curves(result: dict, path: Path) -> None:
    """Dev perplexity against training step, one line per run, one colour per variant."""
    save(dev_ppl_figure(result), path)


def dev_ppl_figure(result: dict):
    """The figure of plot_dev_ppl_curves: one legend entry per variant, beside the axes."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.5, 4))
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
    ax.set_xlabel("step")
    ax.set_ylabel("dev perplexity")
    ax.set_title("Dev perplexity during training (line style: seed)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def plot_extrapolation(result: dict, path: Path) -> None:
    """The length study: mean sacreBLEU against source length per variant, lines at L and 2L."""
    plt = pyplot()

    max_words = result["max_words"]
    fig, ax = plt.subplots(figsize=(6, 4))
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
        fontsize=8,
    )
    ax.annotate(
        "2L",
        (2 * max_words + 0.5, 1),
        xycoords=("data", "axes fraction"),
        xytext=(3, -12),
        textcoords="offset points",
        fontsize=8,
    )
    ax.set_xlabel(f"source length (words; buckets of {result['bucket_width']})")
    ax.set_ylabel("sacreBLEU")
    ax.set_title(f"Trained on <= {max_words} words ({result['corpus']})")
    ax.legend(fontsize=8)
    save(fig, path)
