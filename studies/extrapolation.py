"""The length-extrapolation study (§3.5): train each position variant on short sentences only,
translate the evaluation splits, and score sacreBLEU per source-length bucket.

The paper hypothesized that sinusoids "may allow the model to extrapolate to sequence lengths
longer than the ones encountered during training" and never tested it for translation. For every
variant (configs/position/*.yaml) and seed, ``study`` trains a model (experiment=
extrapolation_<corpus>) on the training pairs whose source has at most L words
(data.train_max_src_words=L), translates the evaluation splits with the last checkpoint (beam 4;
lines a learned table cannot hold are skipped and counted, never a crash) and scores sacreBLEU
per source-length bucket (aligned so that one bucket ends at L). Runs live in
<out>/<variant>-s<seed>/; a finished run and its evaluations are reused, so an interrupted study
resumes where it stopped. Which lines an evaluation skipped is read from its JSON
(``skipped_indices``), never by rebuilding the model.
"""

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import sacrebleu
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from common.configs import compose_config
from common.errors import first_line
from common.files import write_json, write_text
from data.corpus import load_split
from evaluation.evaluate import evaluate_run
from evaluation.plots import plot_extrapolation
from evaluation.statistics import mean, stdev
from model.position import PositionRangeError
from runs.directory import DeferredFileHandler
from runs.run import Run, RunFileError
from studies.plan import StudyError, position_variants
from studies.rows import from_json
from training.launch import train


@dataclass(frozen=True)
class Corpus:
    """A corpus of the study: its experiment config and the splits scored by length."""

    experiment: str
    splits: tuple[str, ...]


# toy: test holds 3-24 words, test_long 25-40; Multi30k: test_2016_flickr and val (up to ~40).
CORPORA = {
    "toy": Corpus("extrapolation_toy", ("test", "test_long")),
    "multi30k": Corpus("extrapolation_multi30k", ("test", "validation")),
}


@dataclass(frozen=True)
class Scored:
    """Some lines' count, how many were translated (scored), sacreBLEU, its brevity penalty and
    the hypothesis/reference length ratio (None where no line was translated)."""

    n: int
    scored: int
    bleu: float | None
    bp: float | None
    length_ratio: float | None


@dataclass(frozen=True)
class BucketScores:
    """A source-length bucket's words (beyond: past L) and its Scored numbers."""

    bucket: str
    low: int
    high: int
    beyond: bool
    n: int
    scored: int
    bleu: float | None
    bp: float | None
    length_ratio: float | None


@dataclass(frozen=True)
class Trained:
    """What the study reads of a trained run's metrics.json."""

    steps: int
    dev_ppl: float
    wall_seconds: float


@dataclass(frozen=True)
class SplitScores:
    """What the study reads of a split's evaluation JSON (the lines it skipped, by index)."""

    name: str
    bleu: float | None = None
    n_sentences: int | None = None
    skipped: dict[str, int] | None = None
    skipped_indices: list[int] | None = None


@dataclass(frozen=True)
class RunScores:
    """One variant x seed of the study: its training and BLEU by source length."""

    variant: str
    seed: int
    run_dir: str
    steps: int
    wall_seconds: float
    dev_ppl: float
    train_pairs: int
    train_cleaning: dict
    skipped: int
    by_bucket: list[BucketScores]
    by_range: dict[str, Scored]


@dataclass(frozen=True)
class BucketSummary:
    """One bucket of a variant over its seeds: mean and std of BLEU, each seed's."""

    bucket: str
    low: int
    high: int
    beyond: bool
    n: int
    scored: int  # the fewest lines any seed translated
    bleu_mean: float | None
    bleu_std: float | None
    bleu_by_seed: dict[str, float | None]


@dataclass(frozen=True)
class RangeSummary:
    """One length range of a variant over its seeds."""

    n: int
    scored: int
    bleu_mean: float | None
    bleu_std: float | None


@dataclass(frozen=True)
class VariantSummary:
    """A variant's BLEU per bucket and per length range over its seeds."""

    variant: str
    seeds: list[int]
    by_bucket: list[BucketSummary]
    by_range: dict[str, RangeSummary]
    train_pairs: int
    steps_mean: float


@dataclass(frozen=True)
class Extrapolation:
    """extrapolation.json: the study's settings, every run and each variant's summary."""

    corpus: str
    experiment: str
    max_words: int
    bucket_width: int
    splits: list[str]
    beam: int
    seeds: list[int]
    overrides: list[str]
    runs: list[RunScores]
    variants: list[VariantSummary]


def bucket_of(words: int, max_words: int, width: int) -> tuple[int, int]:
    """The (low, high) words of a source length's bucket; one bucket ends at max_words."""
    k = math.ceil((max(words, 1) - max_words) / width)
    return max(1, max_words + (k - 1) * width + 1), max_words + k * width


def bleu_of(indices: list[int], hyps: list[str | None], refs: list[str]) -> Scored:
    """Line count, scored count, sacreBLEU, its brevity penalty and the hypothesis/reference
    length ratio of some lines (a None hypothesis was skipped)."""
    scored = [i for i in indices if hyps[i] is not None]
    if not scored:
        return Scored(len(indices), 0, None, None, None)
    bleu = sacrebleu.corpus_bleu([hyps[i] for i in scored], [[refs[i] for i in scored]])
    return Scored(
        n=len(indices),
        scored=len(scored),
        bleu=round(bleu.score, 2),
        bp=round(bleu.bp, 4),
        length_ratio=round(bleu.sys_len / max(bleu.ref_len, 1), 4),
    )


def bleu_by_bucket(
    srcs: list[str], hyps: list[str | None], refs: list[str], max_words: int, width: int
) -> list[BucketScores]:
    """sacreBLEU per source-length bucket (words), shortest first; `beyond`: past max_words."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, src in enumerate(srcs):
        groups.setdefault(bucket_of(len(src.split()), max_words, width), []).append(i)
    return [
        BucketScores(
            f"{low}-{high}", low, high, low > max_words, **asdict(bleu_of(indices, hyps, refs))
        )
        for (low, high), indices in sorted(groups.items())
    ]


def bleu_by_range(
    srcs: list[str], hyps: list[str | None], refs: list[str], max_words: int
) -> dict[str, Scored]:
    """sacreBLEU on sources of 1..L words (seen lengths), L+1..2L words and over 2L words."""
    ranges = {f"1-{max_words}": [], f"{max_words + 1}-{2 * max_words}": [], f">{2 * max_words}": []}
    labels = list(ranges)
    for i, src in enumerate(srcs):
        words = len(src.split())
        ranges[labels[0 if words <= max_words else 1 if words <= 2 * max_words else 2]].append(i)
    return {label: bleu_of(indices, hyps, refs) for label, indices in ranges.items()}


def stored_config(run_dir: Path) -> DictConfig:
    """The resolved training config the study stored in a run folder (.hydra/config.yaml)."""
    run = Run(run_dir)
    if not run.has_config():
        raise StudyError(
            f"{run.config_file} is missing: {run_dir} was not made by this study; pass another "
            "--out"
        )
    return run.config()


def train_run(run_dir: Path, overrides: list[str], max_words: int, echo=print) -> dict:
    """Train one run into run_dir (resuming its checkpoints), or reuse its metrics.json."""
    run = Run(run_dir)
    if run.has_config():
        trained_on = stored_config(run_dir).data.get("train_max_src_words")
        if trained_on != max_words:
            raise StudyError(
                f"{run_dir} was trained on sources of <= {trained_on} words, not {max_words}: "
                "pass another --out for another --max-words"
            )
    if run.is_finished():
        echo(f"  reusing the finished run in {run_dir}")
        return run.metrics()
    cfg = compose_config(overrides)
    run.write_config(cfg)
    handler = DeferredFileHandler(run.log_file, encoding="utf-8")  # written once accepted
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(handler)
    try:
        return train(cfg)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()


def scored_split(run_dir: Path, split: str, beam: int, echo=print) -> dict | None:
    """Translate and score one split with the last checkpoint (reused when newer than it).

    The search runs in the precision the run was trained in (trainer.precision).

    Lines the position encoding cannot hold are skipped and counted; None when no line fits.
    """
    name = f"{split}-last-beam{beam}"
    run = Run(run_dir)
    scores = run.evaluation(name)
    if scores is not None and run.is_current(scores):
        split_scores = from_json(SplitScores, scores)
        if not split_scores.skipped or split_scores.skipped_indices is not None:  # else: older
            return scores
    precision = stored_config(run_dir).trainer.precision  # search as the run was trained
    overrides = [f"split={split}", f"beam={beam}", f"name={name}", f"precision={precision}"]
    try:
        return evaluate_run(run_dir, *overrides, "checkpoint=last", "long_inputs=skip")
    except PositionRangeError as e:
        echo(f"  {split}: every line skipped ({e})")
        return None


class SplitCache:
    """Source and reference texts of corpus splits, loaded once per data config and split."""

    def __init__(self) -> None:
        self.loaded: dict[str, tuple[list[str], list[str]]] = {}

    def get(self, data_cfg: DictConfig, split: str) -> tuple[list[str], list[str]]:
        """(sources, references) of one split of the corpus a data config describes."""
        key = json.dumps([OmegaConf.to_container(data_cfg, resolve=True), split], sort_keys=True)
        if key not in self.loaded:
            dataset = load_split(data_cfg, split)
            self.loaded[key] = (list(dataset["src"]), list(dataset["tgt"]))
        return self.loaded[key]


def kept_lines(srcs: list[str], scores: dict) -> list[int]:
    """Indices of the lines an evaluation translated: all but its skipped_indices."""
    skipped = set(from_json(SplitScores, scores).skipped_indices or [])
    return [i for i in range(len(srcs)) if i not in skipped]


def run_lines(
    run_dir: Path, evaluations: dict[str, dict | None], splits: SplitCache
) -> tuple[list[str], list[str | None], list[str]]:
    """Sources, hypotheses (None where skipped) and references of a run's splits, pooled."""
    data_cfg = stored_config(run_dir).data
    all_srcs, all_hyps, all_refs = [], [], []
    for split, scores in evaluations.items():
        srcs, refs = splits.get(data_cfg, split)
        hyps: list[str | None] = [None] * len(srcs)
        if scores is not None:
            kept = kept_lines(srcs, scores)
            run = Run(run_dir)
            fix = f"delete {run.evaluations_dir} and rerun the study"
            try:
                lines = run.hypotheses(scores, fix)
            except RunFileError as e:
                raise StudyError(str(e)) from None
            if len(lines) != len(kept):
                raise StudyError(
                    f"{run.hypotheses_file(from_json(SplitScores, scores).name)} has "
                    f"{len(lines)} lines for "
                    f"{len(kept)} translated sources of split {split}: {fix}"
                )
            for i, line in zip(kept, lines, strict=True):
                hyps[i] = line
        all_srcs += srcs
        all_hyps += hyps
        all_refs += refs
    return all_srcs, all_hyps, all_refs


def mean_and_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean (None for no values) and sample standard deviation (None for fewer than two), 2 dp."""
    return tuple(None if v is None else round(v, 2) for v in (mean(values), stdev(values)))


def summarize_variant(variant: str, runs: list[RunScores]) -> VariantSummary:
    """BLEU per bucket and per length range of one variant, mean and std over its seeds."""
    buckets = []
    for bucket in runs[0].by_bucket:
        cells = [next(b for b in r.by_bucket if b.bucket == bucket.bucket) for r in runs]
        bleu_mean, std = mean_and_std([c.bleu for c in cells if c.bleu is not None])
        buckets.append(
            BucketSummary(
                bucket.bucket, bucket.low, bucket.high, bucket.beyond, bucket.n,
                scored=min(c.scored for c in cells), bleu_mean=bleu_mean, bleu_std=std,
                bleu_by_seed={str(r.seed): c.bleu for r, c in zip(runs, cells, strict=True)},
            )
        )  # fmt: skip
    ranges = {}
    for label, first in runs[0].by_range.items():
        bleus = [r.by_range[label].bleu for r in runs]
        bleu_mean, std = mean_and_std([b for b in bleus if b is not None])
        scored = min(r.by_range[label].scored for r in runs)
        ranges[label] = RangeSummary(first.n, scored, bleu_mean, std)
    return VariantSummary(
        variant=variant,
        seeds=[r.seed for r in runs],
        by_bucket=buckets,
        by_range=ranges,
        train_pairs=runs[0].train_pairs,
        steps_mean=round(mean([r.steps for r in runs]), 1),
    )


def cell(bleu: float | None, std: float | None, scored: int, n: int) -> str:
    """A table cell: BLEU (± std over seeds), and (scored/n) when lines were skipped."""
    if bleu is None:
        return f"– (0/{n})"
    text = f"{bleu:.1f}" + (f" ± {std:.1f}" if std is not None else "")
    return text + (f" ({scored}/{n})" if scored < n else "")


def markdown(result: Extrapolation) -> str:
    """The study's tables: BLEU per variant and source-length bucket, then per length range."""
    max_words = result.max_words
    first = result.variants[0]

    def mark(bucket: BucketSummary) -> str:
        return "**" if bucket.low > 2 * max_words else "*" if bucket.beyond else ""

    lines = [
        f"# Length extrapolation: {result.corpus}, trained on sources of <= {max_words} words",
        "",
        f"Each variant trained on the training pairs whose source has at most L = {max_words} "
        f"words ({first.train_pairs} pairs), seeds "
        f"{', '.join(map(str, result.seeds))}; scored on {', '.join(result.splits)} "
        f"(beam {result.beam}, last checkpoint): sacreBLEU per source-length bucket (words), "
        "mean ± std over seeds. * = beyond L (lengths never seen in training), ** = beyond 2L; "
        "(k/n) = only k of the bucket's n lines fit the position encoding, the rest were skipped.",
        "",
        "| variant | " + " | ".join(f"{b.bucket}{mark(b)}" for b in first.by_bucket) + " |",
        "|---|" + "---:|" * len(first.by_bucket),
    ]
    for row in result.variants:
        cells = [cell(b.bleu_mean, b.bleu_std, b.scored, b.n) for b in row.by_bucket]
        lines.append(f"| {row.variant} | " + " | ".join(cells) + " |")
    lines.append("| sentences | " + " | ".join(str(b.n) for b in first.by_bucket) + " |")
    ranges = list(first.by_range)
    lines += [
        "",
        "| variant | " + " | ".join(f"{r} words" for r in ranges) + " | steps |",
        "|---|" + "---:|" * (len(ranges) + 1),
    ]
    for row in result.variants:
        cells = [cell(r.bleu_mean, r.bleu_std, r.scored, r.n) for r in row.by_range.values()]
        lines.append(f"| {row.variant} | " + " | ".join(cells) + f" | {row.steps_mean:g} |")
    counts = " | ".join(str(first.by_range[r].n) for r in ranges)
    lines.append(f"| sentences | {counts} | |")
    return "\n".join(lines) + "\n"


def check_arguments(
    corpus: str, max_words: int | None, bucket_width: int | None, beam: int, variants
) -> tuple[list[str], int, int]:
    """The variants, L and bucket width of a study, or a StudyError naming the bad argument."""
    if corpus not in CORPORA:
        raise StudyError(f"--corpus {corpus}: pass one of {', '.join(CORPORA)}")
    known = position_variants()
    variants = list(variants or known)
    unknown = [v for v in variants if v not in known]
    if unknown:
        hint = " (Hydra overrides go before the options, or after --)" if "=" in unknown[0] else ""
        raise StudyError(
            f"unknown position variant(s) {', '.join(unknown)}: pass some of {', '.join(known)}"
            + hint
        )
    if max_words is None:
        experiment = CORPORA[corpus].experiment
        max_words = compose_config([f"experiment={experiment}"]).data.train_max_src_words
    if int(max_words) < 1:
        raise StudyError(f"--max-words {max_words}: pass a positive number of words")
    # 0 is refused below, not taken for "the default"
    width = int(math.ceil(int(max_words) / 2) if bucket_width is None else bucket_width)
    if width < 1:
        raise StudyError(f"--bucket-width {bucket_width}: pass a positive number of words")
    if beam < 1:
        raise StudyError(f"--beam {beam}: pass 1 (greedy) or more")
    return variants, int(max_words), width


def check_overrides(corpus: str, overrides: Sequence[str]) -> None:
    """StudyError naming an override Hydra cannot apply (a typo), before any run starts."""
    try:
        compose_config([f"experiment={CORPORA[corpus].experiment}", *overrides])
    except (HydraException, OmegaConfBaseException) as e:
        raise StudyError(f"overrides {' '.join(overrides)}: {first_line(e)}") from e


@dataclass(frozen=True)
class Settings:
    """What every run of one extrapolation study shares."""

    corpus: str
    max_words: int
    width: int
    beam: int
    minutes: float | None
    overrides: tuple[str, ...]


def evaluate_splits(run_dir: Path, settings: Settings, echo) -> dict[str, dict | None]:
    """Each evaluation split of the corpus translated and scored with the last checkpoint."""
    evaluations = {}
    for split in CORPORA[settings.corpus].splits:
        scores = scored_split(run_dir, split, settings.beam, echo)
        evaluations[split] = scores
        if scores is not None:
            read = from_json(SplitScores, scores)
            echo(
                f"  {split}: sacreBLEU {read.bleu:.2f} on {read.n_sentences} "
                f"lines, {sum((read.skipped or {}).values())} skipped"
            )
    return evaluations


def one_run(
    variant: str, seed: int, run_dir: Path, settings: Settings, splits: SplitCache, echo
) -> RunScores:
    """Train (or reuse) one variant x seed, evaluate it and score it by source length."""
    run_overrides = [
        f"experiment={CORPORA[settings.corpus].experiment}",
        f"position={variant}",
        f"seed={seed}",
        f"run_dir={run_dir}",
        f"data.train_max_src_words={settings.max_words}",
        *([f"trainer.max_minutes={settings.minutes}"] if settings.minutes is not None else []),
        *settings.overrides,
    ]
    start = time.monotonic()
    metrics = from_json(Trained, train_run(run_dir, run_overrides, settings.max_words, echo))
    echo(
        f"  trained: {metrics.steps} steps, dev ppl {metrics.dev_ppl:.2f} "
        f"({metrics.wall_seconds / 60:.1f} min)"
    )
    evaluations = evaluate_splits(run_dir, settings, echo)
    srcs, hyps, refs = run_lines(run_dir, evaluations, splits)
    cleaning = Run(run_dir).data_summary()["train_cleaning"]
    echo(f"  scored in {(time.monotonic() - start) / 60:.1f} min")
    return RunScores(
        variant=variant,
        seed=seed,
        run_dir=str(run_dir),
        steps=metrics.steps,
        wall_seconds=metrics.wall_seconds,
        dev_ppl=metrics.dev_ppl,
        train_pairs=cleaning["kept"],
        train_cleaning=cleaning,
        skipped=sum(h is None for h in hyps),
        by_bucket=bleu_by_bucket(srcs, hyps, refs, settings.max_words, settings.width),
        by_range=bleu_by_range(srcs, hyps, refs, settings.max_words),
    )


def study(
    corpus: str,
    out: Path,
    max_words: int | None = None,
    seeds: Sequence[int] = (1,),
    variants: Sequence[str] | None = None,
    minutes: float | None = None,
    bucket_width: int | None = None,
    beam: int = 4,
    overrides: Sequence[str] = (),
    echo: Callable[[str], None] = print,
) -> Extrapolation:
    """Train, evaluate and score every variant x seed; write the table, JSON and plot.

    Progress (one line per run and per evaluated split) goes to echo.
    """
    variants, max_words, width = check_arguments(corpus, max_words, bucket_width, beam, variants)
    if minutes is not None and not minutes > 0:
        raise StudyError(f"--minutes {minutes}: pass a positive number of minutes")
    if any(seed < 0 for seed in seeds):
        raise StudyError(f"--seeds {' '.join(map(str, seeds))}: pass seeds >= 0")
    check_overrides(corpus, overrides)
    settings = Settings(corpus, max_words, width, beam, minutes, tuple(overrides))
    out.mkdir(parents=True, exist_ok=True)
    splits, runs = SplitCache(), []
    jobs = [(variant, seed) for variant in variants for seed in seeds]
    for number, (variant, seed) in enumerate(jobs, start=1):
        run_dir = (out / f"{variant}-s{seed}").resolve()
        echo(f"[{number}/{len(jobs)}] {variant} seed {seed}: {run_dir}")
        runs.append(one_run(variant, seed, run_dir, settings, splits, echo))
    result = Extrapolation(
        corpus=corpus,
        experiment=CORPORA[corpus].experiment,
        max_words=max_words,
        bucket_width=width,
        splits=list(CORPORA[corpus].splits),
        beam=beam,
        seeds=list(seeds),
        overrides=list(overrides),
        runs=runs,
        variants=[summarize_variant(v, [r for r in runs if r.variant == v]) for v in variants],
    )
    write_text(out / "extrapolation.md", markdown(result))
    write_json(out / "extrapolation.json", asdict(result))
    plot_extrapolation(asdict(result), out / "bleu_by_length.png")
    return result
