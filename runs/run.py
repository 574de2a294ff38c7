"""A run directory's one owner: `Run` reads and writes a training run's files by their role.

What train.py and evaluate.py leave in a run directory, and the only module that names it:

    .hydra/config.yaml   the training config (Hydra's; train.py keeps run_dir unresolved)
    metrics.json         the finished run's figures (steps, dev_ppl, seed, position, ...)
    segments.json        one entry per launch (runs/record.py)
    data.json            the corpus summary and fingerprints
    train.log            the log of every launch
    checkpoints/         last.pt, best.pt, step_<n>.pt (runs/checkpoint.py)
    eval/<name>.json     an evaluation's scores; eval/<name>.hyp its translations, a line each
    tensorboard/         one events file per launch (runs/events.py)
    tokenizer/spm.model  the run's copy of its tokenizer

One rule says whether an evaluation is current (`Run.is_current`); the readers of older record
formats (`variant`, `search_settings`, `checkpoint_record`) are here too. Evaluation never
depends on today's YAML: a model is rebuilt from the resolved config stored in its checkpoint,
and the tokenizer is the run folder's copy (or the file the checkpoint names), checked by sha256.
"""

import functools
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from common.errors import UserError
from common.files import (
    file_sha256,
    left_by_dead_writers,
    read_json,
    write_failure,
    write_json,
    write_text,
    write_texts,
)
from data.tokenizer import PAD_ID, Tokenizer
from model.transformer import build_model
from runs.checkpoint import (
    RUN_TOKENIZER,
    STEP_FILE,
    CheckpointError,
    average_checkpoints,
    check_same_run,
    content_sha256,
    load_checkpoint,
    save_checkpoint,
    step_checkpoints,
    weights_sha256,
)
from runs.record import (
    SEGMENTS_FILE,
    current_launches,
    read_run_id,
    read_segments,
    record_checkpoint,
)
from runs.resume import KEEP_THE_MATH, flatten

CONFIG_FILE = ".hydra/config.yaml"
METRICS_FILE = "metrics.json"
DATA_FILE = "data.json"
LOG_FILE = "train.log"
CHECKPOINTS = "checkpoints"
EVALUATIONS = "eval"
TENSORBOARD = "tensorboard"
NAMED_CHECKPOINTS = ("last", "best")  # checkpoints/<name>.pt, kept by training
LATEST_ONLY = ("last.pt", "best.pt")  # rewritten by training: the run's is the last so named
# Where a run's files and corpus are: no part of what it trained (its identity).
LOCATION_KEYS = ("data.path", "data.corpus.path")
# What marks a folder as a training run's (finished or not).
MARKERS = (".hydra", CHECKPOINTS, LOG_FILE)
# The files and folders a finished run's record keeps (no weights, no translations).
RECORD_FILES = (CONFIG_FILE, METRICS_FILE, DATA_FILE, SEGMENTS_FILE, LOG_FILE)
RECORD_FOLDERS = (TENSORBOARD,)


class RunFileError(UserError):
    """A run's file that is missing or is not what its run wrote."""


@dataclass(frozen=True)
class Run:
    """A training run's directory, read and written by role (the layout above)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    # -- where each file lies
    @property
    def hydra_dir(self) -> Path:
        """Hydra's record of the launch (config.yaml, hydra.yaml, overrides.yaml)."""
        return self.path / ".hydra"

    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def segments_file(self) -> Path:
        return self.path / SEGMENTS_FILE

    @property
    def data_file(self) -> Path:
        return self.path / DATA_FILE

    @property
    def log_file(self) -> Path:
        return self.path / LOG_FILE

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    @property
    def evaluations_dir(self) -> Path:
        return self.path / EVALUATIONS

    @property
    def tensorboard(self) -> Path:
        return self.path / TENSORBOARD

    def checkpoint_file(self, name: str = "last") -> Path:
        """checkpoints/<name>.pt (last, best, step_<n>)."""
        return self.checkpoints / f"{name}.pt"

    def evaluation_file(self, name: str) -> Path:
        return self.evaluations_dir / f"{name}.json"

    def hypotheses_file(self, name: str) -> Path:
        return self.evaluations_dir / f"{name}.hyp"

    # -- what the run holds
    def is_run(self) -> bool:
        """Whether the folder holds a training run (finished or not)."""
        return any((self.path / marker).exists() for marker in MARKERS)

    def is_finished(self) -> bool:
        """Whether training wrote metrics.json (its last act)."""
        return self.metrics_file.is_file()

    def has_config(self) -> bool:
        return self.config_file.is_file()

    def has_checkpoint(self, name: str = "last") -> bool:
        return self.checkpoint_file(name).is_file()

    def has_checkpoints(self) -> bool:
        """Whether any checkpoint (a finished or an interrupted one) is left to resume from."""
        return any(self.checkpoints.glob("*.pt"))

    def step_checkpoints(self) -> list[Path]:
        """The step_<n>.pt files, oldest first."""
        return step_checkpoints(self.checkpoints)

    def metrics(self) -> dict:
        """metrics.json, or a RunFileError saying the training has not finished."""
        if not self.metrics_file.is_file():
            raise RunFileError(
                f"{self.metrics_file} is missing: the run has not finished (see its {LOG_FILE}); "
                "wait for it or pass a finished run directory"
            )
        return read_json(self.metrics_file)

    def finished_metrics(self) -> dict | None:
        """metrics.json of a run that completed its budget, else None."""
        if not self.is_finished():
            return None
        metrics = read_json(self.metrics_file)
        return metrics if metrics.get("complete", True) else None

    def config(self) -> DictConfig:
        """The training config as stored (interpolations kept), its run_dir this folder."""
        if not self.has_config():
            raise RunFileError(
                f"{self.config_file} is missing: {self.path} holds no training run; pass a "
                "run directory train.py wrote"
            )
        config = OmegaConf.load(self.config_file)
        config.run_dir = str(self.path)
        return config

    def resolved_config(self) -> dict:
        """config() as plain containers, interpolations resolved."""
        return OmegaConf.to_container(self.config(), resolve=True)

    def setting(self, key: str):
        """One training setting (dotted key) of the stored config; None where it has none."""
        return OmegaConf.select(self.config(), key) if self.has_config() else None

    def data_summary(self) -> dict:
        """data.json ({} where the run kept none)."""
        return read_json(self.data_file) if self.data_file.is_file() else {}

    def segments(self) -> list[dict]:
        """segments.json's launches (none for a run not launched yet)."""
        return read_segments(self.path)

    def copy_into(self, folder: Path, files: tuple[str, ...], folders: tuple[str, ...]) -> None:
        """Copy the named files and folders the run holds (relative paths) into folder."""
        for name in files:
            if (self.path / name).is_file():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.path / name, folder / name)
        for name in folders:
            if (self.path / name).is_dir():
                shutil.copytree(self.path / name, folder / name)

    def write_metrics(self, metrics: dict) -> None:
        write_json(self.metrics_file, metrics)

    def write_config(self, cfg: DictConfig) -> None:
        """Store cfg resolved as the run's training config."""
        write_text(self.config_file, OmegaConf.to_yaml(cfg, resolve=True))

    def recorded_text(self, split: str) -> dict | None:
        """The text fingerprint ({pairs, sha256}) data.json recorded of a split at launch;
        None where it recorded none (runs kept before the fingerprints)."""
        return ((self.data_summary().get("fingerprints") or {}).get("text") or {}).get(split)

    # -- evaluations
    def evaluation(self, name: str) -> dict | None:
        """eval/<name>.json, or None where the run has no such evaluation."""
        path = self.evaluation_file(name)
        return read_json(path) if path.is_file() else None

    def evaluations(self) -> list[dict]:
        """Every eval/*.json, by name."""
        return [read_json(path) for path in sorted(self.evaluations_dir.glob("*.json"))]

    def newest_evaluation_file(self, prefix: str) -> Path | None:
        """The most recently written eval/<prefix>*.json (None: no such evaluation)."""
        found = sorted(
            self.evaluations_dir.glob(f"{prefix}*.json"), key=lambda p: p.stat().st_mtime
        )
        return found[-1] if found else None

    def evaluation_names(self, suffix: str = ".hyp") -> list[str]:
        """The names of the evaluations holding a file with suffix (.hyp: translations kept)."""
        return sorted(p.name[: -len(suffix)] for p in self.evaluations_dir.glob(f"*{suffix}"))

    def hypotheses(self, scores: dict, fix: str) -> list[str]:
        """The translations of an evaluation from this run's own eval/<name>.hyp (never a path
        its JSON names: a moved or copied run reads its own), a line each, checked against the
        JSON's sentence count and, where kept, its sha256; a RunFileError ends with fix."""
        path = self.hypotheses_file(scores["name"])
        if not path.is_file():
            raise RunFileError(f"{path} is missing (the hypotheses of its evaluation): {fix}")
        lines = path.read_text(encoding="utf-8").split("\n")[:-1]  # as written: a newline each
        expected, kept = scores.get("n_sentences"), scores.get("hypotheses_sha256")
        changed = (expected is not None and len(lines) != expected) or (
            kept is not None and lines_sha256(lines) != kept
        )
        if changed:
            raise RunFileError(
                f"{path} is not the file its evaluation wrote ({len(lines)} lines, {expected} "
                f"scored{'' if kept is None else ', another sha256'}): {fix}"
            )
        return lines

    def nbest_file(self, name: str) -> Path:
        """eval/<name>.nbest: the N best of each line (fairseq's H- lines), where asked for."""
        return self.evaluations_dir / f"{name}.nbest"

    def write_evaluation(
        self, name: str, hyps: list[str], scores: dict, nbest: str | None = None
    ) -> None:
        """eval/<name>.hyp (a line each), eval/<name>.nbest if given, and eval/<name>.json: all
        or none (disk full: one line). The JSON, which holds the .hyp's sha256, is renamed in
        last: a kill between the renames leaves the JSON before, which the new .hyp no longer
        matches (hypotheses() refuses the pair), never a new JSON beside an old .hyp."""
        if self.evaluations_dir.is_symlink():  # a user's folder behind it (probe 1-25)
            raise RunFileError(
                f"{self.evaluations_dir} is a link (to {self.evaluations_dir.readlink()}): a "
                "run keeps its evaluations in a folder of its own; remove the link (its target "
                "is left as it is)"
            )
        json_path = self.evaluation_file(name)
        texts = {self.hypotheses_file(name): "".join(f"{h}\n" for h in hyps)}
        if nbest is not None:
            texts[self.nbest_file(name)] = nbest
        texts[json_path] = json.dumps(scores, indent=2, ensure_ascii=False) + "\n"
        try:
            for path in {*texts, self.nbest_file(name)}:  # a killed write's temporary files
                for left in left_by_dead_writers(path, ".tmp", unnamed=True):  # not a live one's
                    left.unlink(missing_ok=True)
            if nbest is None:  # an earlier evaluation's n-best is not this one's
                self.nbest_file(name).unlink(missing_ok=True)
            write_texts(texts)
        except OSError as e:
            what = f"{json_path} and its .hyp (nothing was written)"
            error = write_failure(
                e, what, "evaluate again (or pass run_dir= a copy on another disk)"
            )
            if error is None:
                raise
            raise error from e

    def is_current(self, scores: dict, last_step: int | None = None) -> bool:
        """Whether an evaluation scored the weights the run holds now: the checkpoint file it
        scored is in checkpoints/ with the sha256 it recorded (so a `best` evaluation older
        than the last step is current; one of last.pt must also be of the last step: an older
        file copied over it keeps its sha256, probe b-2); where that file is gone (a record
        keeps no weights) or unnamed (an average), it scored the run's last step (last_step,
        else metrics.json's)."""
        name, recorded = scores.get("checkpoint_file"), scores.get("checkpoint_sha256")
        path = self.checkpoints / Path(str(name)).name
        if last_step is None and self.is_finished():
            last_step = read_json(self.metrics_file).get("steps")
        step = scores.get("step")
        at_last = step is not None and last_step is not None and int(step) >= int(last_step)
        if name and recorded and path.is_file():  # an evaluation of last.pt: of the last step too
            same = checkpoint_sha256(path) == recorded
            return same and (at_last or path.name != "last.pt" or last_step is None)
        return at_last

    # -- checkpoints written and read back
    def save_checkpoint(self, state: dict, name: str) -> None:
        """checkpoints/<name>.pt, naming the launch that writes it, its step, name and sha256
        recorded in segments.json before the file is written (a kill between the two leaves a
        record of a file never made, which is harmless; the reverse, a file the run does not
        know)."""
        launches = self.segments()
        if launches:  # a record edited away or replaced is then told from an older run (written)
            state = state | {"launch": launches[-1].get("launch")}
        checksum = content_sha256(state)
        weights = weights_sha256(state)
        record_checkpoint(self.path, int(state["step"]), checksum, weights, f"{name}.pt")
        save_checkpoint(state, self.checkpoint_file(name), checksum)

    def written(self, state: dict, name: str | None = None) -> bool | None:
        """Whether this run's launches recorded writing state (runs/record.py): its launch, step
        and content (an average: the weights of each input); with name (last.pt, best.pt,
        step_<n>.pt), under that name, and for last.pt and best.pt as the last one so named.
        None where the launches that trained its step recorded none (code before the record)."""
        launches = current_launches(self.segments())
        launch = state.get("launch")
        if launch is not None and launch not in {s.get("launch") for s in launches}:
            return False  # its writer is not in this record: edited, deleted or another run's
        step = state.get("step")
        trained = [
            s for s in launches
            if step is not None and s.get("start_step", 0) <= step
            and (s.get("end_step") is None or step <= s["end_step"])
        ]  # fmt: skip
        if launch is None and (not launches or any("checkpoints" not in s for s in trained)):
            return None
        entries = [entry for s in launches for entry in s.get("checkpoints", [])]
        if state.get("averaged_sha256"):
            return set(state["averaged_sha256"]) <= {entry["weights"] for entry in entries}
        if name is not None:  # (entries recorded before names were: any name)
            entries = [entry for entry in entries if entry.get("file", name) == name]
            entries = entries[-1:] if name in LATEST_ONLY else entries
        content = content_sha256({key: value for key, value in state.items() if key != "file"})
        return bool(trained) and any(entry["sha256"] == content for entry in entries)

    def check_written(self, state: dict, path: Path, by_name: bool = False) -> None:
        """CheckpointError where path, a checkpoint of this run's checkpoints/ or one it resumes,
        holds content its launches did not record writing (by_name: under path's name): another
        run's weights or a step rewritten under a fresh checksum (probe 9-21, 13-28), another
        run's file copied in, an older file copied over last.pt or best.pt."""
        if self.written(state, path.name if by_name else None) is False:
            raise self._not_written(state, path)

    def _not_written(self, state: dict, path: Path) -> CheckpointError:
        launch = state.get("launch")
        writer = {s.get("launch"): s for s in self.segments()}.get(launch, {})
        if launch is not None and not writer.get("checkpoints"):
            listed = "lists no checkpoint of it" if writer else "does not list it"
            return CheckpointError(
                f"{path} was written by launch {launch}, and {self.segments_file} {listed}: "
                "that record was edited, deleted or replaced; restore it"
            )
        return CheckpointError(
            f"{path} is not the {path.name} this run wrote: {self.segments_file} records no "
            f"step {state.get('step')} checkpoint with its content under that name (the last "
            "written, for last.pt and best.pt): restore the run's own file, or pass the file "
            "you mean by its own name"
        )

    def load(self, checkpoint: str) -> tuple[dict, str]:
        """The checkpoint named by last | best | avg:N | <file>, and a short tag for file names.

        A <file> that does not exist as given is also looked for in checkpoints/; one of
        another run (_identified), or named as training names files but outside the run's
        checkpoints/, is tagged <stem>-<its sha256's first 8 hex digits>. The state records
        own_checkpoint and file_sha256 (None for an average) for checkpoint_record.
        """
        self._check_loadable(checkpoint)
        if checkpoint.startswith("avg:"):
            return self._average(checkpoint), f"avg{checkpoint[4:]}"
        if checkpoint in NAMED_CHECKPOINTS:
            path = self.checkpoint_file(checkpoint)
            return self._identified(_checked(load_checkpoint(path), path), path), checkpoint
        path = Path(checkpoint)
        if not path.exists() and (self.checkpoints / checkpoint).is_file():
            path = self.checkpoints / checkpoint
        state = self._identified(_checked(load_checkpoint(path), path), path)
        inside = path.resolve().parent == self.checkpoints.resolve()
        if state["own_checkpoint"] and (inside or not training_file_name(path.name)):
            return state, path.stem
        # another folder's file never takes the name of this run's own evaluation (last, ...)
        return state, f"{path.stem}-{state['file_sha256'][:8]}"

    def _check_loadable(self, checkpoint: str) -> None:
        """CheckpointError where the folder or the checkpoints/ a name needs is missing."""
        if not self.path.is_dir():
            what = "is a file, not a folder" if self.path.exists() else "does not exist"
            raise CheckpointError(
                f"run directory {self.path} {what}: pass run_dir=<a training run directory>"
            )
        named = checkpoint in NAMED_CHECKPOINTS or checkpoint.startswith("avg:")
        if named and not self.checkpoints.is_dir():
            raise CheckpointError(
                f"{self.path} has no checkpoints/ directory: is it a training run directory?"
            )

    def _average(self, checkpoint: str) -> dict:
        """The average of the last N step checkpoints (checkpoint = avg:N)."""
        n = int(checkpoint[4:]) if checkpoint[4:].isdigit() else 0
        if n < 1:
            raise CheckpointError(f"checkpoint={checkpoint}: pass avg:N with N a positive integer")
        paths = self.step_checkpoints()[-n:]
        if len(paths) < n:
            raise CheckpointError(
                f"checkpoint={checkpoint}: only {len(paths)} step checkpoints in "
                f"{self.checkpoints}; pass a smaller N"
            )
        by_name = functools.partial(self.check_written, by_name=True)
        state = average_checkpoints(paths, check=by_name)
        state = _checked(state, f"{checkpoint} in {self.checkpoints}")
        return {**state, "own_checkpoint": True, "file_sha256": None}

    def _identified(self, state: dict, path: Path) -> dict:
        """state with its file's sha256 and whether it holds the run's own weights.

        Own: written by the run, as its segments.json records (written); a file of its
        checkpoints/ named as training names them that it did not write is refused. For runs
        trained before that record: trained with the tokenizer and every trajectory setting
        (seed, rate, ...) of the run's last.pt, wherever the file lies (an average written out,
        or another run's file copied into checkpoints/, which is not own); last.pt itself, or
        any file of a run without one, by its place in checkpoints/.
        """
        own = path.resolve().parent == self.checkpoints.resolve()
        named = own and training_file_name(path.name)
        written = self.written(state, path.name if named else None)
        if written is False and named:
            raise self._not_written(state, path)
        if written is not None:
            return {**state, "own_checkpoint": written, "file_sha256": file_sha256(path)}
        last = self.checkpoint_file("last")
        if last.is_file() and path.resolve() != last.resolve():
            try:
                check_same_run(load_checkpoint(last), self.checkpoints, state, path)
                own = True
            except CheckpointError:
                own = False
        return {**state, "own_checkpoint": own, "file_sha256": file_sha256(path)}

    # -- identity
    def identity(self) -> str | None:
        """The run's id: the one its first launch recorded (segments.json), else derived from
        its stored config and data.json the same way (records kept before ids were); None
        without a stored config."""
        stored = read_run_id(self.path)
        if stored is not None:
            return stored
        if not self.has_config():
            return None
        # metrics.json records the precision since fp16 came; the runs before it were fp32 ones
        precision = (self.finished_metrics() or {}).get("precision") or "fp32"
        return run_id(self.resolved_config(), self.data_summary(), precision)

    # -- older formats read as today's
    def variant(self, metrics: dict, scores: dict | None, names: dict[str, str]) -> str:
        """The position config the run trained: metrics' position_choice, else the evaluation's
        position, else (runs trained before the choice was recorded) by class name via names."""
        variant = metrics.get("position_choice") or (scores or {}).get("position")
        if variant:
            return str(variant)
        position = str(metrics["position"])
        return names.get(position, position.removesuffix("PositionEncoding").lower())


@functools.lru_cache(maxsize=256)
def _sha256_of(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path)


def checkpoint_sha256(path: Path) -> str:
    """file_sha256 of a checkpoint, hashed once while its size and mtime stay as they are (a
    comparison asks of each run's checkpoint more than once; a base model's is 700 MB)."""
    stat = path.stat()
    return _sha256_of(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def run_id(config: dict, data_summary: dict, precision: str = "fp32") -> str:
    """A run's identity from its content: every setting that changes its training (not where
    its files are, how often it logs or saves, nor its budget: runs.resume's KEEP_THE_MATH),
    the arithmetic trainer.precision resolved to (bf16, fp16; fp32 adds nothing, so the ids
    given before it counted stay), its seed, and the fingerprints of the text and tokenizer it
    trained on; 16 hex digits.

    The same run read from its folder, a link, a copy or its record has one id; two seeds, two
    rates or two corpora have two.
    """
    settings = {
        key: value
        for key, value in flatten(config).items()
        if not any(key == k or key.startswith(f"{k}.") for k in (*KEEP_THE_MATH, *LOCATION_KEYS))
    }
    prints = data_summary.get("fingerprints") or {}
    text = prints.get("text") or {}
    content = {
        "settings": settings,
        "text": {split: text.get(split) for split in ("train", "validation")},
        "train_ids": prints.get("train_ids"),
        "tokenizer": prints.get("tokenizer_sha256"),
        **({"precision": precision} if precision != "fp32" else {}),
    }
    encoded = json.dumps(content, sort_keys=True, default=str).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()[:16]


def training_file_name(name: str) -> bool:
    """Whether a file name is one training gives its checkpoints (last.pt, best.pt, step_<n>.pt)."""
    return name in (f"{n}.pt" for n in NAMED_CHECKPOINTS) or bool(STEP_FILE.search(name))


def lines_sha256(lines: list[str]) -> str:
    """The sha256 of lines written one a line (what an evaluation keeps of its texts)."""
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode("utf-8")).hexdigest()


def search_settings(scores: dict) -> dict:
    """How an eval JSON's search ran: engine, beam, length penalty, length limits, any
    inference-only position override and its precision (a bf16 search of one seed beside fp32
    ones is another search: probe d-2).

    One written before min_len existed searched with min_len 0 (EOS could come first), and
    before engine existed with ours.
    """
    keys = {"engine": "ours", "beam": None, "lenpen": None, "max_len_b": None, "min_len": 0}
    keys["position_override"] = {}  # inference-only position settings (none before it existed)
    settings = {key: scores.get(key, default) for key, default in keys.items()}
    if scores.get("precision") not in (None, "fp32"):  # fp32 said by silence, as before it was
        settings["precision"] = scores["precision"]  # kept (CTranslate2's: its compute type)
    return settings


def _checked(state, source) -> dict:
    """state if it holds weights, config and tokenizer (what evaluation needs), else an error."""
    missing = [
        key
        for key in ("model", "config", "tokenizer")
        if not isinstance(state, dict) or key not in state
    ]
    if missing:
        raise CheckpointError(
            f"checkpoint {source} lacks {', '.join(missing)}: pass a checkpoint written by "
            "train.py or scripts/average_checkpoints.py"
        )
    return state


def run_tokenizer(state: dict, run_dir: str | Path | None = None) -> Tokenizer:
    """The tokenizer a checkpoint was trained with: the run folder's copy, else its stored path.

    The copy in <run_dir>/tokenizer/ makes a run folder self-contained (the shared cache can be
    deleted, the folder moved); a file whose sha256 differs from the checkpoint's is refused.
    """
    wanted = str(state["tokenizer"]["sha256"])
    places = [Path(state["tokenizer"]["path"])]
    if run_dir is not None:
        places.insert(0, Path(run_dir) / state["tokenizer"].get("run_file", RUN_TOKENIZER))
    for path in places:
        if path.is_file():
            tokenizer = Tokenizer(path)
            if tokenizer.sha256 != wanted:
                raise CheckpointError(
                    f"tokenizer {tokenizer.path} differs from the one this checkpoint was trained "
                    f"with (sha256 {tokenizer.sha256[:12]} != {wanted[:12]}): restore that "
                    "tokenizer file or retrain"
                )
            return tokenizer
    raise CheckpointError(
        f"the tokenizer this checkpoint was trained with (sha256 {wanted[:12]}) is in none of "
        f"{', '.join(map(str, places))}: restore {places[0]} or retrain"
    )


def rebuild_model(state: dict, device, run_dir=None) -> tuple[torch.nn.Module, Tokenizer]:
    """The model and tokenizer described by a checkpoint's stored config (see run_tokenizer)."""
    config = OmegaConf.create(state["config"])
    tokenizer = run_tokenizer(state, run_dir)
    model = build_model(config.model, config.position, tokenizer.vocab_size, PAD_ID)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise CheckpointError(
            "checkpoint weights do not fit the model its config describes "
            f"({str(e).strip().splitlines()[0]}): pass a checkpoint written by train.py"
        ) from e
    return model.to(device).eval(), tokenizer


def checkpoint_record(state: dict) -> dict:
    """What an evaluation records of the checkpoint it scored: its step, file(s) and origin.

    step is the training step the weights reached (for an average, its newest input's), so an
    evaluation older than its run's last step can be told apart.
    """
    steps = [s for s in state.get("averaged_steps") or [state.get("step")] if s is not None]
    config = state.get("config") or {}
    position = (state.get("choices") or {}).get("position")
    if position is None:  # checkpoints written before the choice was recorded: the class name
        position = str((config.get("position") or {}).get("_target_", "")).rsplit(".", 1)[-1]
    return {
        "step": max(steps) if steps else None,
        "checkpoint_file": state.get("averaged") or state.get("file"),
        # which weights: their file's sha256, whether they are the run's own, the seed they had
        "checkpoint_sha256": state.get("file_sha256"),
        "own_checkpoint": state.get("own_checkpoint"),
        "checkpoint_seed": config.get("seed"),
        "position": position,
        "tokenizer_sha256": state["tokenizer"]["sha256"],
        "data": config.get("data"),
    }


def load_run(run_dir: str | Path, checkpoint: str) -> tuple[dict, str]:
    """Run(run_dir).load(checkpoint): the checkpoint a name picks, and its file-name tag."""
    return Run(run_dir).load(checkpoint)
