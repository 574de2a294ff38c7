"""Average checkpoints: `python scripts/average_checkpoints.py --run-dir DIR --last 5 --out F`.

Or name the inputs: `python scripts/average_checkpoints.py A.pt B.pt ... --out F`. The written
file is the oldest input with its model weights replaced by the element-wise mean over all inputs
(the paper's Table 2 averages the last 5 checkpoints; Table 3 averages none), saved atomically;
it loads with weights_only and evaluates with `python evaluate.py run_dir=DIR checkpoint=F`.
`checkpoint=avg:N` does the same in memory without writing anything. Inputs that hold the same
weights (best.pt and last.pt beside the step file they copy, a renamed copy) are refused, named in
one line: each set of weights counts once in the mean. An input that is itself an average is
refused too, naming the step checkpoints it averaged: pass those instead.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from the checkout (README)

from common.errors import report_user_errors
from runs.checkpoint import (
    CheckpointError,
    average_checkpoints,
    save_checkpoint,
)
from runs.run import CHECKPOINTS, Run, training_file_name


def checkpoints_to_average(
    run_dir: Path | None, last: int | None, inputs: list[Path]
) -> list[Path]:
    """The named inputs, or the last N step checkpoints of a run directory (oldest first; N: 5
    unless --last says)."""
    if bool(run_dir) == bool(inputs):
        raise CheckpointError("pass either checkpoint files or --run-dir DIR, not both or neither")
    if inputs:
        if last is not None:  # read by nothing beside named files (probe p-16)
            raise CheckpointError(f"--last {last} counts a --run-dir's step checkpoints: drop it")
        check_distinct(inputs)
        return inputs
    last = 5 if last is None else last
    if last < 1:
        raise CheckpointError(f"--last {last}: pass a positive number of checkpoints")
    run = Run(run_dir)
    ckpt_dir = run.checkpoints
    if not ckpt_dir.is_dir():
        raise CheckpointError(f"{run_dir} has no checkpoints/ directory: is it a training run?")
    paths = run.step_checkpoints()[-last:]
    if len(paths) < last:
        raise CheckpointError(
            f"--last {last}: only {len(paths)} step checkpoints in {ckpt_dir}; pass a smaller N"
        )
    return paths


def check_distinct(paths: list[Path]) -> None:
    """CheckpointError if one file is named twice (also by another path or a hard link)."""
    seen: dict[tuple[int, int], Path] = {}
    for path in paths:
        if not path.is_file():
            raise CheckpointError(f"checkpoint {path} does not exist: pass existing files")
        stat = path.stat()
        first = seen.setdefault((stat.st_dev, stat.st_ino), path)
        if first is not path:
            raise CheckpointError(
                f"{path} and {first} are the same file: it would count twice in the mean; "
                "name each checkpoint once"
            )


def check_own_file(state: dict, path: Path) -> None:
    """A file a run's checkpoints/ holds under a name training gives must be one that run wrote
    under that name (runs.Run.check_written: not another run's weights re-saved there, not its
    own step_20.pt copied over step_10.pt, which was refused as a duplicate of the genuine
    file: probe 3-21)."""
    if path.parent.name == CHECKPOINTS and training_file_name(path.name):
        Run(path.parent.parent).check_written(state, path, by_name=True)


def write_average(paths: list[Path], out: Path) -> dict:
    """Average the model weights of paths and write the result to out atomically; return it."""
    if training_file_name(out.name):
        raise CheckpointError(
            f"--out {out}: step_<n>.pt, last.pt and best.pt are training's own names; pick another"
        )
    if out.exists() or out.is_symlink():  # never written over (probe 1-3: a user's file was)
        raise CheckpointError(f"--out {out} exists: pass a new file name, or remove it first")
    try:
        state = average_checkpoints(paths, check=check_own_file)
    except (KeyError, RuntimeError) as e:
        raise CheckpointError(
            f"checkpoints {', '.join(map(str, paths))} hold different models ({e!r}): "
            "average checkpoints of one run"
        ) from e
    save_checkpoint(state, out)
    return state


@report_user_errors
def main(argv: list[str] | None = None) -> None:
    """Command-line entry: write the average; a user error is one line and exit status 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="*", type=Path, help="checkpoint files to average")
    parser.add_argument("--run-dir", type=Path, help="a training run directory")
    parser.add_argument(
        "--last", type=int, help="with --run-dir: the last N step checkpoints (default 5)"
    )
    parser.add_argument("--out", type=Path, required=True, help="the averaged checkpoint file")
    args = parser.parse_args(argv)
    paths = checkpoints_to_average(args.run_dir, args.last, args.inputs)
    write_average(paths, args.out)
    print(f"wrote {args.out}: the mean of {len(paths)} checkpoints ({paths[0]} ... {paths[-1]})")


if __name__ == "__main__":
    main()
