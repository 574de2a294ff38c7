"""Compare runs the way Table 3 does: `python scripts/compare.py <multirun dir | run dirs...>`.

Finds run directories (those holding metrics.json), groups them by position variant, and writes
into --out (default: <common parent>/compare) a Markdown table with the paper's numbers beside
ours (compare.md), every number (compare.json) and three plots (bleu_by_variant.png,
bleu_by_length.png, dev_ppl_curves.png). Each variant is compared with the baseline
(sinusoidal) two ways: across seeds (a t-interval over per-seed BLEU, paired by seed when both
variants ran the same seeds) and by sacreBLEU's paired bootstrap resampling on one seed pair.
"""

import argparse
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from data.errors import UserError, report_user_errors

ROOT = Path(__file__).resolve().parents[1]
POSITION_CONFIGS = ROOT / "configs" / "position"
# Vaswani et al. 2017, Table 3: (dev PPL, BLEU) of "base" (sinusoids) and row (E) (learned).
PAPER = {"sinusoidal": (4.92, 25.8), "learned": (4.92, 25.7)}
PAPER_NOTE = (
    "Paper: Vaswani et al. 2017, Table 3 (base = sinusoidal, row E = learned), single runs on "
    "newstest2013 without checkpoint averaging. Its BLEU is tokenized, compound-split BLEU: "
    "compare it with the tok. BLEU column, not with sacreBLEU."
)
RUN_MARKERS = (".hydra", "checkpoints", "train.log")
METRIC_KEYS = ("position", "seed", "dev_ppl", "parameters", "steps", "wall_seconds")
# sacreBLEU's default bootstrap seed: the interval of the difference is taken over the resamples
# its paired test draws (unless SACREBLEU_SEED is set to another seed).
BOOTSTRAP_SEED = 12345


class CompareError(UserError):
    """A problem with the runs given to compare, stated in one line."""


@dataclass
class Run:
    """One finished training run and the evaluation chosen for it."""

    path: Path
    variant: str
    seed: int
    metrics: dict
    scores: dict


def find_run_dirs(paths: list[Path]) -> list[Path]:
    """Run directories (with metrics.json) among paths and below them; unfinished runs fail."""
    found = []
    for path in paths:
        if not path.is_dir():
            raise CompareError(f"{path} is not a directory: pass a multirun folder or run folders")
        for folder, subdirs, files in os.walk(path):
            here = Path(folder)
            if "metrics.json" in files:
                found.append(here)
                subdirs.clear()
            elif any((here / marker).exists() for marker in RUN_MARKERS):
                raise CompareError(
                    f"{here} has no metrics.json: its training has not finished (see its "
                    "train.log); wait for it or pass only finished run directories"
                )
            else:
                subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
    if not found:
        raise CompareError(
            f"no run directories (folders with metrics.json) under {', '.join(map(str, paths))}"
        )
    return sorted(set(found))


def variant_names() -> dict[str, str]:
    """Position class name -> config name, read from configs/position/*.yaml."""
    from omegaconf import OmegaConf

    names = {}
    for path in sorted(POSITION_CONFIGS.glob("*.yaml")):
        target = OmegaConf.load(path).get("_target_")
        if target:
            names[str(target).rsplit(".", 1)[-1]] = path.stem
    return names


def eval_path(run_dir: Path, eval_name: str | None) -> Path:
    """The eval JSON named eval_name, or the newest eval/validation*.json."""
    if eval_name:
        path = run_dir / "eval" / f"{eval_name}.json"
        if not path.is_file():
            raise CompareError(
                f"{path} is missing: create it with `python evaluate.py run_dir={run_dir} "
                f"name={eval_name}` (with the split or files it should score)"
            )
        return path
    candidates = sorted(
        (run_dir / "eval").glob("validation*.json"), key=lambda p: p.stat().st_mtime
    )
    if not candidates:
        raise CompareError(
            f"{run_dir} has no eval/validation*.json: create it with `python evaluate.py "
            f"run_dir={run_dir}` (newstest2013, beam 4), or name another with --eval"
        )
    return candidates[-1]


def read_json(path: Path) -> dict:
    """A JSON object from path, or a one-line error naming the file."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CompareError(f"{path} is not valid JSON ({e.msg}, line {e.lineno})") from e
    if not isinstance(obj, dict):
        raise CompareError(f"{path} does not hold a JSON object")
    return obj


def load_run(run_dir: Path, eval_name: str | None, names: dict[str, str]) -> Run:
    """A run's metrics.json and chosen eval JSON, checked for the fields the table needs."""
    metrics = read_json(run_dir / "metrics.json")
    missing = [key for key in METRIC_KEYS if key not in metrics]
    if missing:
        raise CompareError(
            f"{run_dir}/metrics.json lacks {', '.join(missing)}: was it written by train.py?"
        )
    path = eval_path(run_dir, eval_name)
    scores = read_json(path)
    if "bleu" not in scores:
        raise CompareError(
            f"{path} has no BLEU (it was made without references): evaluate a split, or pass "
            "ref_file=, and name that evaluation with --eval"
        )
    position = str(metrics["position"])
    variant = names.get(position, position.removesuffix("PositionEncoding").lower())
    return Run(run_dir, variant, int(metrics["seed"]), metrics, scores)


def mean(values: list[float]) -> float | None:
    """Arithmetic mean, None for no values."""
    return statistics.fmean(values) if values else None


def stdev(values: list[float]) -> float | None:
    """Sample standard deviation, None for fewer than two values."""
    return statistics.stdev(values) if len(values) >= 2 else None


def t_quantile(level: float, df: int) -> float:
    """t such that P(|T| <= t) = level for Student's T with integer df (A&S 26.7.3-4)."""
    if df < 1:
        raise CompareError(f"a t-interval needs at least 1 degree of freedom, got {df}")

    def central(t: float) -> float:
        theta = math.atan(t / math.sqrt(df))
        sin, cos = math.sin(theta), math.cos(theta)
        if df % 2:
            term, series = cos, 0.0
            for k in range(1, (df - 1) // 2 + 1):
                series += term
                term *= cos * cos * (2 * k) / (2 * k + 1)
            return 2 / math.pi * (theta + sin * series)
        term, series = 1.0, 0.0
        for k in range(1, df // 2 + 1):
            series += term
            term *= cos * cos * (2 * k - 1) / (2 * k)
        return sin * series

    low, high = 0.0, 1.0
    while central(high) < level:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if central(middle) < level else (low, middle)
    return (low + high) / 2


def seed_difference(baseline: list[Run], other: list[Run]) -> dict:
    """Mean BLEU difference other - baseline with a 95% t-interval over seeds."""
    base_bleu = {r.seed: r.scores["bleu"] for r in baseline}
    other_bleu = {r.seed: r.scores["bleu"] for r in other}
    unique = len(base_bleu) == len(baseline) and len(other_bleu) == len(other)
    if unique and set(base_bleu) == set(other_bleu):
        seeds = sorted(base_bleu)
        diffs = [other_bleu[s] - base_bleu[s] for s in seeds]
        result = {"method": "paired t over seeds", "seeds": seeds, "difference": mean(diffs)}
        if len(diffs) < 2:
            return {**result, "low": None, "high": None, "df": None}
        df = len(diffs) - 1
        half = t_quantile(0.95, df) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    else:
        a, b = [r.scores["bleu"] for r in baseline], [r.scores["bleu"] for r in other]
        result = {
            "method": "Welch t (unpaired seeds)",
            "seeds": sorted({r.seed for r in baseline} | {r.seed for r in other}),
            "difference": mean(b) - mean(a),
        }
        if len(a) < 2 or len(b) < 2:
            return {**result, "low": None, "high": None, "df": None}
        va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
        # Welch-Satterthwaite degrees of freedom, rounded down (a slightly wider interval)
        welch = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb else 0
        df = max(1, math.floor(welch)) if va + vb else len(a) + len(b) - 2
        half = t_quantile(0.95, df) * math.sqrt(va + vb)
    diff = result["difference"]
    return {**result, "low": diff - half, "high": diff + half, "df": df}


def hypotheses(run: Run) -> list[str]:
    """The hypotheses file of a run's evaluation, one line per sentence."""
    stored = Path(run.scores.get("hypotheses", ""))
    for path in (stored, run.path / "eval" / f"{run.scores['name']}.hyp"):
        if path.is_file():
            return path.read_text(encoding="utf-8").splitlines()
    raise CompareError(
        f"{run.path}: the hypotheses of {run.scores['name']} are missing ({stored}); "
        f"rerun `python evaluate.py run_dir={run.path}` or pass --resamples 0"
    )


def references(run: Run, refs_file: Path | None) -> list[str]:
    """References for a run's evaluation: --refs, or its split from the run's stored config."""
    if refs_file is not None:
        if not refs_file.is_file():
            raise CompareError(f"--refs {refs_file} is not a file: give the references, one a line")
        return refs_file.read_text(encoding="utf-8").splitlines()
    config_path = run.path / ".hydra" / "config.yaml"
    split = str(run.scores["name"]).split("-", 1)[0]
    if not config_path.is_file():
        raise CompareError(
            f"{run.path} has no .hydra/config.yaml to find the references of "
            f"{run.scores['name']}: pass --refs FILE (one reference a line) or --resamples 0"
        )
    from omegaconf import OmegaConf

    from data.corpus import load_split

    data_cfg = OmegaConf.to_container(OmegaConf.load(config_path).data, resolve=True)
    try:
        return list(load_split(data_cfg, split)["tgt"])
    except UserError as e:
        raise CompareError(
            f"cannot load the references of {run.scores['name']} (split {split!r}) for "
            f"{run.path}: {e}; pass --refs FILE or --resamples 0"
        ) from e


def paired_bootstrap(
    base_hyps: list[str], other_hyps: list[str], refs: list[str], resamples: int
) -> dict:
    """sacreBLEU's paired bootstrap test of other vs base, with a 95% interval of the difference."""
    import numpy as np
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if not len(base_hyps) == len(other_hyps) == len(refs):
        raise CompareError(
            f"hypotheses and references do not line up ({len(base_hyps)}, {len(other_hyps)} "
            f"hypotheses, {len(refs)} references): were sources skipped (long_inputs=skip)?"
        )
    corpus = BLEU()
    test = PairedTest(
        [("baseline", base_hyps), ("other", other_hyps)],
        {"BLEU": corpus},
        [refs],
        test_type="bs",
        n_samples=resamples,
    )
    signatures, results = test()
    base_result, other_result = results["BLEU"]
    # the difference on the same resamples: per-sentence sufficient statistics, summed
    sentence = BLEU(effective_order=True)

    def sufficient_statistics(hyps: list[str]) -> np.ndarray:
        rows = []
        for hyp, ref in zip(hyps, refs, strict=True):
            score = sentence.sentence_score(hyp, [ref])
            rows.append([score.sys_len, score.ref_len, *score.counts, *score.totals])
        return np.array(rows, dtype=np.int64)  # [N, 2 + 2 * max_ngram_order]

    order = corpus.max_ngram_order
    indices = np.random.default_rng(BOOTSTRAP_SEED).choice(
        len(refs), size=(resamples, len(refs)), replace=True
    )  # [resamples, N]
    weights = np.stack([np.bincount(row, minlength=len(refs)) for row in indices])  # [resamples, N]

    def resampled_bleu(stats: np.ndarray) -> np.ndarray:
        sums = weights @ stats  # [resamples, 2 + 2 * order]
        return np.array(
            [
                BLEU.compute_bleu(
                    row[2 : 2 + order].tolist(),
                    row[2 + order :].tolist(),
                    int(row[0]),
                    int(row[1]),
                    smooth_method=corpus.smooth_method,
                    smooth_value=corpus.smooth_value,
                    max_ngram_order=order,
                ).score
                for row in sums
            ]
        )

    diffs = resampled_bleu(sufficient_statistics(other_hyps)) - resampled_bleu(
        sufficient_statistics(base_hyps)
    )
    low, high = np.percentile(diffs, [2.5, 97.5])
    return {
        "baseline_bleu": base_result.score,
        "other_bleu": other_result.score,
        "difference": other_result.score - base_result.score,
        "low": float(low),
        "high": float(high),
        "p_value": other_result.p_value,
        "resamples": resamples,
        "signature": str(signatures["BLEU"]),
    }


def seed_pair(baseline: list[Run], other: list[Run]) -> tuple[Run, Run]:
    """The runs of the lowest seed both variants share, else each variant's lowest seed."""
    shared = sorted({r.seed for r in baseline} & {r.seed for r in other})
    if shared:
        return (
            next(r for r in baseline if r.seed == shared[0]),
            next(r for r in other if r.seed == shared[0]),
        )
    return min(baseline, key=lambda r: r.seed), min(other, key=lambda r: r.seed)


def summarize(variant: str, runs: list[Run]) -> dict:
    """Table 3's columns for one variant: means and spreads over its seeds."""
    bleu = [r.scores["bleu"] for r in runs]
    ppl = [r.metrics["dev_ppl"] for r in runs if r.metrics["dev_ppl"] is not None]
    tok = [r.scores["tok_bleu"] for r in runs if r.scores.get("tok_bleu") is not None]
    chrf = [r.scores["chrf"] for r in runs if r.scores.get("chrf") is not None]
    buckets: dict[str, list[float]] = {}
    for run in runs:
        for row in run.scores.get("by_length", []):
            buckets.setdefault(row["bucket"], []).append(row["bleu"])
    paper_ppl, paper_bleu = PAPER.get(variant, (None, None))
    return {
        "variant": variant,
        "n": len(runs),
        "seeds": sorted(r.seed for r in runs),
        "dev_ppl_mean": mean(ppl),
        "dev_ppl_std": stdev(ppl),
        "bleu_mean": mean(bleu),
        "bleu_std": stdev(bleu),
        "tok_bleu_mean": mean(tok),
        "chrf_mean": mean(chrf),
        "parameters": round(mean([r.metrics["parameters"] for r in runs])),
        "steps": round(mean([r.metrics["steps"] for r in runs])),
        "hours": mean([r.metrics["wall_seconds"] / 3600 for r in runs]),
        "paper_ppl": paper_ppl,
        "paper_bleu": paper_bleu,
        "by_length": [
            {"bucket": b, "bleu_mean": mean(v), "bleu_std": stdev(v), "n_runs": len(v)}
            for b, v in sorted(buckets.items(), key=lambda item: int(item[0].split("-")[0]))
        ],
    }


def number(value: float | None, digits: int = 2, spread: float | None = None) -> str:
    """value (± spread) with fixed digits, or an em dash for none."""
    if value is None:
        return "—"
    return f"{value:.{digits}f}" + (f" ± {spread:.{digits}f}" if spread is not None else "")


def signed(value: float | None) -> str:
    """A difference with its sign, or an em dash."""
    return "—" if value is None else f"{value:+.2f}"


def markdown(result: dict) -> str:
    """compare.md: the Table 3 style table, its notes, and the differences to the baseline."""
    lines = [
        f"# Position encodings compared ({result['eval']})",
        "",
        "| variant | seeds (n) | dev PPL | BLEU (sacreBLEU) | tok. BLEU | params | steps | hours "
        "| paper PPL | paper BLEU |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["variants"]:
        seeds = ", ".join(map(str, row["seeds"]))
        lines.append(
            f"| {row['variant']} | {seeds} ({row['n']}) "
            f"| {number(row['dev_ppl_mean'], 2, row['dev_ppl_std'])} "
            f"| {number(row['bleu_mean'], 2, row['bleu_std'])} "
            f"| {number(row['tok_bleu_mean'])} | {row['parameters'] / 1e6:.1f}M "
            f"| {row['steps']} | {row['hours']:.2f} "
            f"| {number(row['paper_ppl'])} | {number(row['paper_bleu'], 1)} |"
        )
    lines += [
        "",
        f"Ours: eval/{result['eval']}.json of each run ({result['signature']}); dev PPL from "
        "metrics.json (per subword, teacher-forced, last step); ± is the standard deviation "
        "over seeds.",
        PAPER_NOTE,
    ]
    if not result["differences"] and len(result["variants"]) > 1:
        lines += ["", f"No {result['baseline']} runs: no differences to a baseline (--baseline)."]
    if result["differences"]:
        lines += [
            "",
            f"## BLEU differences to {result['baseline']}",
            "",
            "| comparison | method | Δ BLEU | 95% interval | p | seeds |",
            "|---|---|---|---|---|---|",
        ]
    for diff in result["differences"]:
        name = f"{diff['variant']} − {diff['baseline']}"
        seeds = diff["across_seeds"]
        df = f", df {seeds['df']}" if seeds["df"] is not None else ""
        lines.append(
            f"| {name} | {seeds['method']}{df} | {signed(seeds['difference'])} "
            f"| [{signed(seeds['low'])}, {signed(seeds['high'])}] | — "
            f"| {', '.join(map(str, seeds['seeds']))} |"
        )
        boot = diff["bootstrap"]
        if boot is not None:
            lines.append(
                f"| {name} | paired bootstrap, {boot['resamples']} resamples "
                f"| {signed(boot['difference'])} | [{signed(boot['low'])}, {signed(boot['high'])}] "
                f"| {boot['p_value']:.3f} | {boot['seeds'][0]} vs {boot['seeds'][1]} |"
            )
    return "\n".join(lines) + "\n"


def plot_bleu_by_variant(result: dict, path: Path) -> None:
    """Mean sacreBLEU per variant (a line) with one labelled dot per seed."""
    import matplotlib.pyplot as plt

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
    ax.set_xticks(range(len(result["variants"])), [r["variant"] for r in result["variants"]])
    ax.set_xlim(-0.6, len(result["variants"]) - 0.4)
    ax.set_ylabel("sacreBLEU (line: mean over seeds)")
    ax.set_title(f"BLEU by position encoding ({result['eval']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_bleu_by_length(result: dict, path: Path) -> None:
    """Mean sacreBLEU per source-length bucket, one line per variant."""
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def dev_ppl_curve(run_dir: Path) -> list[tuple[int, float]]:
    """(step, dev PPL) from a run's tensorboard events; a resumed step keeps its last value."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    events = run_dir / "tensorboard"
    if not events.is_dir():
        return []
    accumulator = EventAccumulator(str(events), size_guidance={SCALARS: 0})
    accumulator.Reload()
    if "dev/ppl" not in accumulator.Tags()["scalars"]:
        return []
    by_step = {
        e.step: e.value for e in sorted(accumulator.Scalars("dev/ppl"), key=lambda e: e.wall_time)
    }
    return sorted(by_step.items())


def plot_dev_ppl_curves(result: dict, path: Path) -> None:
    """Dev perplexity against training step, one line per run, one colour per variant."""
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare(
    paths: list[Path],
    eval_name: str | None = None,
    out_dir: Path | None = None,
    refs_file: Path | None = None,
    resamples: int = 1000,
    baseline: str = "sinusoidal",
) -> dict:
    """Compare the runs under paths; write the table, compare.json and plots; return the numbers."""
    import matplotlib

    matplotlib.use("Agg")
    names = variant_names()
    runs = [load_run(d, eval_name, names) for d in find_run_dirs(paths)]
    used = sorted({str(r.scores["name"]) for r in runs})
    if len(used) > 1:
        raise CompareError(
            f"the runs were scored by different evaluations ({', '.join(used)}): "
            "name one for all with --eval NAME"
        )
    groups: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.variant, r.seed)):
        groups.setdefault(run.variant, []).append(run)
    order = sorted(groups, key=lambda v: (v != baseline, v))
    for variant in order:
        sizes = sorted({r.metrics["parameters"] for r in groups[variant]})
        if len(sizes) > 1:
            print(
                f"warning: the {variant} runs differ in parameter count ({sizes}): "
                "they may not share one setup",
                file=sys.stderr,
            )
    curves = {r.path: dev_ppl_curve(r.path) for r in runs}
    result = {
        "eval": used[0],
        "signature": runs[0].scores.get("signature", ""),
        "baseline": baseline,
        "paper_note": PAPER_NOTE,
        "runs": [
            {
                "run_dir": str(r.path),
                "variant": r.variant,
                "seed": r.seed,
                **{k: r.metrics[k] for k in ("dev_ppl", "parameters", "steps", "wall_seconds")},
                **{k: r.scores.get(k) for k in ("bleu", "tok_bleu", "chrf", "ppl", "n_sentences")},
                "dev_ppl_curve": [[step, value] for step, value in curves[r.path]],
            }
            for r in runs
        ],
        "variants": [summarize(v, groups[v]) for v in order],
        "differences": [],
    }
    if baseline in groups:
        for variant in order[1:]:
            bootstrap = None
            if resamples > 0:
                base_run, other_run = seed_pair(groups[baseline], groups[variant])
                refs = references(base_run, refs_file)
                bootstrap = paired_bootstrap(
                    hypotheses(base_run), hypotheses(other_run), refs, resamples
                )
                bootstrap["seeds"] = [base_run.seed, other_run.seed]
            result["differences"].append(
                {
                    "variant": variant,
                    "baseline": baseline,
                    "across_seeds": seed_difference(groups[baseline], groups[variant]),
                    "bootstrap": bootstrap,
                }
            )
    if out_dir is None:
        out_dir = Path(os.path.commonpath([str(r.path.resolve().parent) for r in runs])) / "compare"
    out_dir.mkdir(parents=True, exist_ok=True)
    table = markdown(result)
    from data.files import write_json, write_text

    write_text(out_dir / "compare.md", table)
    write_json(out_dir / "compare.json", result)
    plot_bleu_by_variant(result, out_dir / "bleu_by_variant.png")
    plot_bleu_by_length(result, out_dir / "bleu_by_length.png")
    plot_dev_ppl_curves(result, out_dir / "dev_ppl_curves.png")
    print(table)
    print(
        f"written: {out_dir}/compare.md, compare.json, bleu_by_variant.png, "
        "bleu_by_length.png, dev_ppl_curves.png"
    )
    return result


@report_user_errors
def main(argv: list[str] | None = None) -> dict:
    """Command-line entry: compare runs; a user error is one line and exit status 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="a multirun folder or run folders")
    parser.add_argument(
        "--eval", dest="eval_name", metavar="NAME", help="eval/<NAME>.json to read in every run"
    )
    parser.add_argument("--out", type=Path, help="output folder (default: <common parent>/compare)")
    parser.add_argument("--refs", type=Path, help="references for the bootstrap, one a line")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (0: off)")
    parser.add_argument(
        "--baseline", default="sinusoidal", help="the variant others are compared to"
    )
    args = parser.parse_args(argv)
    return compare(args.paths, args.eval_name, args.out, args.refs, args.resamples, args.baseline)


if __name__ == "__main__":
    main()
