"""Pictures of trained runs, one per variant: position similarity and mean attention distance.

`python scripts/study.py pictures --runs RUN [RUN ...]` reads each run's last checkpoint, the
test split its stored data config names (``--data-path`` moves the corpus folder) and writes
``pictures.json``, ``pictures.md``, ``position_similarity.png`` (the absolute encodings) and
``attention_distance.png`` (every run: layers x heads, encoder and decoder self-attention).
``--keep`` adds to what ``pictures.json`` holds: the other variants' runs, measured in earlier
calls (a run folder with its weights need not outlive the call that measured it).
The measures are evaluation/attention.py's.
"""

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf

from common.errors import UserError
from common.files import read_json, write_json, write_text
from data.corpus import load_split
from data.tokenizer import EOS_ID
from evaluation.attention import (
    attention_distances,
    cosine_similarity_matrix,
    position_vectors,
    uniform_distance,
)
from evaluation.plots import figure, save, variant_rank
from evaluation.translate import fitting_lines
from model.position import PositionRangeError
from runs.run import Run, load_run, rebuild_model

MAX_TOKENS = 4096


class PicturesError(UserError):
    """A run or setting the pictures cannot use."""


@dataclass(frozen=True)
class RunPicture:
    """One run's measures: the similarity of its position vectors and its heads' distances."""

    run: str
    variant: str
    step: int
    split: str
    sentences: int  # the pairs measured (those the position encoding holds)
    skipped: int
    positions: int  # the similarity matrix covers positions 0 .. positions - 1
    similarity: list[list[float]] | None  # [positions, positions]; None: no absolute vectors
    encoder_distance: list[list[float]]  # [layers, heads], subwords
    decoder_distance: list[list[float]]
    encoder_uniform: float  # the distance of an even spread over the keys (the scale)
    decoder_uniform: float


def rounded(matrix: torch.Tensor, places: int) -> list[list[float]]:
    """A 2-d tensor as nested lists of floats rounded to places."""
    return [[round(float(x), places) for x in row] for row in matrix.tolist()]


def test_pairs(state: dict, split: str, data_path: str | None) -> tuple[list[str], list[str]]:
    """Sources and references of a split of the corpus the run was trained on."""
    data = OmegaConf.create(state["config"]["data"])
    if data_path is not None:
        data.path = str(data_path)
    dataset = load_split(data, split)
    return list(dataset["src"]), list(dataset["tgt"])


def picture_run(run_dir: Path, split: str, positions: int, data_path: str | None) -> RunPicture:
    """The measures of run_dir's last checkpoint on a split (float32, CPU)."""
    if not Run(run_dir).has_checkpoint("last"):
        raise PicturesError(
            f"--runs {run_dir}: no checkpoints/last.pt; pass a training run folder (a record "
            "store keeps no weights)"
        )
    state, _ = load_run(run_dir, "last")
    model, tokenizer = rebuild_model(state, torch.device("cpu"), run_dir)
    try:
        model.check_lengths(src_len=positions)
    except PositionRangeError as e:
        raise PicturesError(f"--positions {positions} for {run_dir}: {e}") from e
    srcs, refs = test_pairs(state, split, data_path)
    kept, skipped = fitting_lines(model, tokenizer, srcs, refs, 0, "skip", f"split {split}")
    src_ids = [ids + [EOS_ID] for ids in tokenizer.encode([srcs[i] for i in kept])]
    tgt_ids = [ids + [EOS_ID] for ids in tokenizer.encode([refs[i] for i in kept])]
    distances = attention_distances(model, src_ids, tgt_ids, MAX_TOKENS, torch.device("cpu"))
    vectors = position_vectors(model.encoder_position, positions)
    metrics = Run(run_dir).finished_metrics() or {}
    return RunPicture(
        run=str(run_dir),
        variant=str(metrics.get("position_choice") or run_dir.parent.name),
        step=int(state["step"]),
        split=split,
        sentences=len(kept),
        skipped=sum(skipped.values()),
        positions=positions,
        similarity=None if vectors is None else rounded(cosine_similarity_matrix(vectors), 4),
        encoder_distance=rounded(distances["encoder"], 3),
        decoder_distance=rounded(distances["decoder"], 3),
        encoder_uniform=round(uniform_distance([len(s) for s in src_ids], causal=False), 3),
        decoder_uniform=round(uniform_distance([len(t) for t in tgt_ids], causal=True), 3),
    )


def plot_similarity(pictures: Sequence[RunPicture], path: Path) -> None:
    """cos(p_i, p_j) of each absolute encoding's encoder position vectors, side by side."""
    shown = [p for p in pictures if p.similarity is not None]
    rows = (len(shown) + 1) // 2  # two panels a row, one column wide in all
    fig, axes = figure(rows, 2, height_cm=3.8 * rows + 1.2, squeeze=False)
    for ax in axes.flat[len(shown) :]:
        ax.set_axis_off()
    for ax, picture in zip(axes.flat, shown, strict=False):
        image = ax.imshow(picture.similarity, vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_title(f"{picture.variant}\n({Path(picture.run).name})")
        ax.set_xlabel("position j")
        ax.set_ylabel("position i")
    fig.colorbar(image, ax=axes, shrink=0.8, label="cos(p_i, p_j)")
    save(fig, path)


def plot_distances(pictures: Sequence[RunPicture], path: Path) -> None:
    """Mean attention distance per layer (rows) and head (columns): encoder | decoder per run."""
    top = max(max(max(r) for r in p.encoder_distance + p.decoder_distance) for p in pictures)
    fig, axes = figure(len(pictures), 2, height_cm=2.8 * len(pictures) + 1.0, squeeze=False)
    for row, picture in zip(axes, pictures, strict=True):
        tables = (picture.encoder_distance, picture.decoder_distance)
        for ax, side, table in zip(row, ("encoder", "decoder"), tables, strict=True):
            image = ax.imshow(table, vmin=0, vmax=top, cmap="viridis", aspect="auto")
            for (layer, head), value in _cells(table):
                colour = "white" if value < top / 2 else "black"
                ax.text(head, layer, f"{value:.1f}", ha="center", va="center", color=colour)
            even = picture.encoder_uniform if side == "encoder" else picture.decoder_uniform
            ax.set_title(f"{side} (even: {even:.1f})")
            ax.set_xticks(range(len(table[0])))
            ax.set_yticks(range(len(table)))
            ax.set_xlabel("head")
            ax.set_ylabel(f"{picture.variant}\nlayer" if side == "encoder" else "layer")
    fig.colorbar(image, ax=axes, location="bottom", shrink=0.8, aspect=30,
                 label="mean self-attention distance (subwords)")  # fmt: skip
    save(fig, path)


def _cells(table: list[list[float]]):
    """((layer, head), value) of a [layers, heads] table."""
    return [((i, j), v) for i, row in enumerate(table) for j, v in enumerate(row)]


def pictures_markdown(pictures: Sequence[RunPicture]) -> str:
    """pictures.md: per run and layer, the mean distance over heads, the nearest and farthest."""
    lines = [
        "# What the trained models do with positions",
        "",
        "Mean attention distance (sum_j w_ij |i - j| in subwords, averaged over the real query "
        "positions of the split, teacher-forced, dropout off) per layer: the mean over heads "
        "and the nearest-looking and farthest-looking head; `even`: the distance of a head "
        "spreading its weight evenly over the keys it may see (the scale of near and far). "
        "The pictures: "
        "`attention_distance.png` (every head), `position_similarity.png` (cosine similarity of "
        "the absolute encodings' position vectors). Made by `python scripts/study.py pictures`.",
        "",
        "| variant | run | step | sentences | stack | layer | mean | nearest head | farthest head "
        "| even |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for p in pictures:
        stacks = (
            ("encoder", p.encoder_distance, p.encoder_uniform),
            ("decoder", p.decoder_distance, p.decoder_uniform),
        )
        for side, table, even in stacks:
            for layer, heads in enumerate(table):
                lines.append(
                    f"| {p.variant} | {Path(p.run).name} | {p.step} | {p.sentences} | {side} "
                    f"| {layer} | {sum(heads) / len(heads):.2f} | {min(heads):.2f} "
                    f"| {max(heads):.2f} | {even:.2f} |"
                )
    return "\n".join(lines) + "\n"


def kept_pictures(out: Path, split: str, positions: int) -> list[RunPicture]:
    """--keep: the runs out/pictures.json already holds, measured as these will be."""
    path = out / "pictures.json"
    if not path.is_file():
        return []
    try:
        kept = [RunPicture(**run) for run in read_json(path)["runs"]]
    except (KeyError, TypeError) as e:
        raise PicturesError(
            f"--keep: {path} was written by another version ({e}); make it again without --keep"
        ) from e
    for p in kept:
        if (p.split, p.positions) != (split, positions):
            raise PicturesError(
                f"--keep: {path} measured {p.variant} on split {p.split} over {p.positions} "
                f"positions; pass --split {p.split} --positions {p.positions}, or drop --keep"
            )
    return kept


def in_variant_order(pictures: Sequence[RunPicture]) -> list[RunPicture]:
    """The configs' variants in their figures' order (sinusoidal, learned, ...), others after."""
    return sorted(pictures, key=lambda p: variant_rank(p.variant))


def pictures(
    run_dirs: Sequence[Path],
    out: Path,
    split: str = "test",
    positions: int = 64,
    data_path: str | None = None,
    echo: Callable[[str], None] = print,
    keep: bool = False,
) -> list[RunPicture]:
    """Measure every run, then write pictures.json, pictures.md and the two figures to out;
    keep: with out/pictures.json's runs of the other variants (each variant's newest run)."""
    if positions < 2:
        raise PicturesError(f"--positions {positions}: pass 2 or more positions")
    kept = kept_pictures(out, split, positions) if keep else []
    measured = []
    for run_dir in map(Path, run_dirs):
        measured.append(picture_run(run_dir, split, positions, data_path))
        p = measured[-1]
        echo(f"pictures: {run_dir}: {p.variant}, step {p.step}, {p.sentences} sentences")
    new = {p.variant for p in measured}
    others = [p for p in kept if p.variant not in new]
    if others:
        echo(f"pictures: kept from {out / 'pictures.json'}: {', '.join(p.run for p in others)}")
    measured = in_variant_order(others + measured)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "pictures.json", {"runs": [asdict(p) for p in measured]})
    write_text(out / "pictures.md", pictures_markdown(measured))
    written = ["pictures.json", "pictures.md", "attention_distance.png"]
    plot_distances(measured, out / "attention_distance.png")
    if any(p.similarity is not None for p in measured):
        plot_similarity(measured, out / "position_similarity.png")
        written.append("position_similarity.png")
    echo(f"written: {out}/ ({', '.join(written)})")
    return measured
