"""The figures of a comparison (BLEU per variant, per length, dev PPL curves) and of the study."""

from pathlib import Path


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
    # matplotlib deferred: optional (the plots extra), needed only when a figure is drawn
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred with matplotlib, after its backend is chosen

    return plt


def save(fig, path: Path) -> None:
    """Write a figure to path (PNG, 120 dpi) and free it."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


def plot_bleu_by_variant(result: dict, path: Path) -> None:
    """Mean sacreBLEU per variant (a line) with one labelled dot per seed."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for x, row in enumerate(result["variants"]):
        ax.hlines(row["bleu_mean"], x - 0.3, x + 0.3, color=f"C{x}", linewidth=3)
        runs = [r for r in result["runs"] if r["variant"] == row["variant"]]
        for i, run in enumerate(runs):
            offset = (i - (len(runs) - 1) / 2) * 0.5 / max(len(runs), 1)
            ax.scatter(x + offset, run["bleu"], color="black", zorder=3)
            ax.annotate(
                f"seed {run['seed']}",
                (x + offset, run["bleu"]),
                xytext=(4, 4),
                fontsize=7,
                textcoords="offset points",
            )
    names = [r["variant"] for r in result["variants"]]
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")  # long names do not overlap
    ax.set_xlim(-0.6, len(result["variants"]) - 0.4)
    ax.set_ylabel("sacreBLEU (line: mean over seeds)")
    ax.set_title(f"BLEU by position encoding ({result['eval']})")
    save(fig, path)


def plot_bleu_by_length(result: dict, path: Path) -> None:
    """Mean sacreBLEU per source-length bucket, one line per variant."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for row in result["variants"]:
        buckets = row["by_length"]
        if buckets:
            ax.errorbar(
                [b["bucket"] for b in buckets],
                [b["bleu_mean"] for b in buckets],
                yerr=[b["bleu_std"] or 0.0 for b in buckets],
                marker="o",
                capsize=3,
                label=row["variant"],
            )
    ax.set_xlabel("source length (words)")
    ax.set_ylabel("sacreBLEU")
    ax.set_title("BLEU by source length")
    ax.legend()
    save(fig, path)


def plot_dev_ppl_curves(result: dict, path: Path) -> None:
    """Dev perplexity against training step, one line per run, one colour per variant."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    colours = {row["variant"]: f"C{i}" for i, row in enumerate(result["variants"])}
    styles = ["-", "--", ":", "-."]
    for run in result["runs"]:
        curve = run["dev_ppl_curve"]
        if curve:
            steps, values = zip(*curve, strict=True)
            seeds = next(r["seeds"] for r in result["variants"] if r["variant"] == run["variant"])
            ax.plot(
                steps,
                values,
                color=colours[run["variant"]],
                linestyle=styles[seeds.index(run["seed"]) % len(styles)],
                marker=".",
                label=f"{run['variant']} seed {run['seed']}",
            )
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("dev perplexity")
    ax.set_title("Dev perplexity during training")
    ax.legend(fontsize=7)
    save(fig, path)


def plot_extrapolation(result: dict, path: Path) -> None:
    """The length study: mean sacreBLEU against source length per variant, lines at L and 2L."""
    plt = pyplot()

    max_words = result["max_words"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for row in result["variants"]:
        points = [b for b in row["by_bucket"] if b["bleu_mean"] is not None]
        ax.errorbar(
            [(b["low"] + b["high"]) / 2 for b in points],
            [b["bleu_mean"] for b in points],
            yerr=[b["bleu_std"] or 0.0 for b in points],
            marker="o",
            capsize=3,
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
