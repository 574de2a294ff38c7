"""A declared study's runs and their records: where each trains and what the store keeps.

A point of a study (stage, condition, variant, rate, seed, budget, chosen settings) trains in
``<work>/<study>/<condition>/<variant>[/<settings>]/lr<rate>/steps<N>/seed-<s>/`` (one folder per
training: the check's runs at the chosen rate are also its first finals), and its record is kept
in ``results/<study>/<stage>/runs/<condition>/<variant>[/<settings>]/lr<rate>/seed-<s>/``: the
run's config, metrics, data.json, segments, train.log and tensorboard events (no checkpoints), and
record.json (`Record`, with SCHEMA_VERSION). No kept file names a path outside the store: the
config's and data.json's paths are blanked. A record found again is used only where it was
trained as the study would train it now, compared by settings and data fingerprints, never by
path or commit (`record_differences`).
"""

from __future__ import annotations

import copy
import os
import shlex
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from omegaconf import OmegaConf

from common.files import read_json, write_json, write_text
from runs.resume import setting_differences
from runs.run import METRICS_FILE, RECORD_FILES, RECORD_FOLDERS, Run
from studies.plan import ROOT, StudyError
from studies.protocol import SCHEMA_VERSION, StudySpec, run_overrides

RECORD_FILE = "record.json"
STAGES = ("settings", "grid", "check", "final", "extend")  # in the order a study runs them
KEPT_FILES, KEPT_FOLDERS = RECORD_FILES, RECORD_FOLDERS  # what a run's record keeps
# config keys that say where files were, not what was trained: blanked in a kept record
PATH_KEYS = ("run_dir", "cache_dir", "data.path", "data.corpus.path")


@dataclass(frozen=True)
class Point:
    """One training of a study: what it trains and at which budget."""

    stage: str  # one of STAGES
    condition: str
    variant: str
    lr_scale: float
    seed: int
    steps: int
    settings: tuple[str, ...] = ()  # the chosen settings' overrides (SHAPE's K)

    @property
    def label(self) -> str:
        where = f"{self.condition}/{self.variant}{self.settings_tag}"
        return f"{self.stage} {where} ×{self.lr_scale:g} seed {self.seed} ({self.steps:,} steps)"

    @property
    def settings_tag(self) -> str:
        """'/max_shift10' for settings (position.max_shift=10), '' for none."""
        words = [f"{o.split('=')[0].split('.')[-1]}{o.split('=', 1)[1]}" for o in self.settings]
        return "".join(f"/{w}" for w in words)

    def train_overrides(self, study: StudySpec, extra: tuple[str, ...] = ()) -> list[str]:
        """`python train.py <these> run_dir=<dir>` trains (and resumes) this point."""
        return [
            *run_overrides(study, self.condition, self.variant),
            *self.settings,
            f"seed={self.seed}",
            f"optim.lr_scale={float(self.lr_scale)!r}",
            f"trainer.max_steps={self.steps}",
            *extra,
        ]


def rate_folder(rate: float) -> str:
    """lr0.25, lr1, lr2: a rate in a folder name."""
    return f"lr{float(rate):g}"


def work_dir(work: Path, study: StudySpec, point: Point) -> Path:
    """Where a point trains: one folder per (condition, variant, settings, rate, budget, seed)."""
    sub = f"{point.condition}/{point.variant}{point.settings_tag}"
    return (
        Path(work)
        / study.name
        / sub
        / rate_folder(point.lr_scale)
        / f"steps{point.steps}"
        / f"seed-{point.seed}"
    )


def record_dir(results: Path, study: StudySpec, point: Point) -> Path:
    """Where a point's record is kept: the final stage by seed, the others by rate and seed."""
    return Path(results) / record_place(study.name, point)


def record_place(study: str, point: Point) -> Path:
    """A point's record folder below the store: <study>/<stage>/runs/<condition>/<variant>..."""
    base = Path(study) / point.stage / "runs" / point.condition
    base = base / f"{point.variant}{point.settings_tag}"
    if point.stage not in ("final", "extend"):
        base = base / rate_folder(point.lr_scale)
    return base / f"seed-{point.seed}"


@dataclass(frozen=True)
class Record:
    """record.json: one trained point of a study, as its stage reads it."""

    schema: int
    study: str
    stage: str
    condition: str
    variant: str
    lr_scale: float
    seed: int
    steps: int
    settings: list[str]
    dev_ppl: float | None  # None: diverged
    cpu_seconds: float  # wall seconds × threads (one thread a run)
    command: str  # `python train.py ...` that trains it again (paths on the command line aside)
    code_version: str  # the commit(s) it trained at (provenance only: never compared)
    fingerprints: dict  # data.json's: raw split text, train ids, tokenizer

    @property
    def diverged(self) -> bool:
        return self.dev_ppl is None


def read_record(folder: Path) -> Record | None:
    """The record kept in folder (None: none there); another schema is refused."""
    path = Path(folder) / RECORD_FILE
    if not path.is_file():
        return None
    data = read_json(path)
    if data.get("schema") != SCHEMA_VERSION:
        raise StudyError(
            f"{path}: schema {data.get('schema')}, this code reads {SCHEMA_VERSION}: run the "
            "migration script of that change (scripts/migrate_records.py)"
        )
    record = Record(**data)
    check_record(Path(folder), record)
    return record


def record_point(record: Record) -> Point:
    """The point a record says it trained."""
    return Point(
        record.stage,
        record.condition,
        record.variant,
        record.lr_scale,
        record.seed,
        record.steps,
        tuple(record.settings),
    )


def check_record(folder: Path, record: Record) -> None:
    """StudyError where a kept record disagrees with its folder or its own metrics.json."""
    path, fix = folder / RECORD_FILE, "restore the record from its run, or move it away"
    place = record_place(record.study, record_point(record))
    if folder.absolute().parts[-len(place.parts) :] != place.parts:
        raise StudyError(
            f"{path} records {place} but lies in {folder}: the record's folder and its "
            f"variant or seed disagree; {fix}"
        )
    check_plain(folder, len(place.parts), fix)
    run = Run(folder)
    differences = metrics_differences(run, record)
    rate = run.setting("optim.lr_scale")
    if rate is not None and float(rate) != record.lr_scale:  # probe 17-22
        differences.append(("lr_scale", record.lr_scale, f".hydra/config.yaml's {rate}"))
    if differences:
        what, kept, own = differences[0]
        raise StudyError(f"{path}: {what} {kept} differs from the run's own {own}: {fix}")


def check_plain(folder: Path, depth: int, fix: str) -> None:
    """StudyError where a record's folder, a folder above it in the store, or a file in it is a
    link (probe 4-21, 4-22): a store holds its own files, so it stays whole when committed."""
    inside = [folder, *list(folder.absolute().parents)[: depth - 1]]
    link = next((p for p in [*inside, *folder.rglob("*")] if p.is_symlink()), None)
    if link is not None:
        raise StudyError(
            f"{link} is a link (to {os.readlink(link)}): a record store keeps its own files; "
            f"copy them in ({fix})"
        )


def metrics_differences(run: Run, record: Record) -> list[tuple[str, object, object]]:
    """(what, record's, metrics.json's) of each number the record copies from metrics.json."""
    metrics = run.finished_metrics() if run.is_finished() else None
    if metrics is None:
        wanted = {"dev_ppl": None}  # an unfinished (diverged) run: no dev PPL
    else:
        ppl = float(metrics["dev_ppl"]) if metrics.get("dev_ppl") is not None else None
        finite = ppl is not None and ppl == ppl and ppl != float("inf")
        wanted = {"dev_ppl": ppl if finite else None}
        if finite:
            wanted["steps"] = int(metrics.get("steps", record.steps))
        if metrics.get("seed") is not None:
            wanted["seed"] = int(metrics["seed"])
    return [
        (key, getattr(record, key), f"{METRICS_FILE}'s {own}")
        for key, own in wanted.items()
        if getattr(record, key) != own
    ]


def blank_paths(config: dict) -> dict:
    """config with PATH_KEYS set to None (a kept record names no folder outside the store)."""
    for key in PATH_KEYS:
        *parents, leaf = key.split(".")
        node = config
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            node[leaf] = None
    return config


def command_line(words: list[str]) -> str:
    """`python train.py ...` with every path override's value left for the reader to fill."""
    shown = [
        f"{w.split('=', 1)[0]}=<folder>" if w.split("=", 1)[0].lstrip("+") in PATH_KEYS else w
        for w in words
    ]
    return shlex.join(["python", "train.py", *shown])


def kept_data_summary(run: Path) -> dict:
    """data.json with the tokenizer's path blanked (its sha256 identifies it)."""
    summary = Run(run).data_summary()
    if isinstance(summary.get("tokenizer"), dict):
        summary["tokenizer"]["path"] = None
    return summary


def outside_paths(run: Path, work: Path | None = None) -> dict[str, str]:
    """{absolute path: placeholder} of the folders a run names outside the store: itself, the
    study's work folder (an extension's earlier folder), its cache and data (PATH_KEYS), its
    checkout; longest first."""
    config = Run(run).resolved_config()
    places = {str(Path(run).absolute()): "<run_dir>"}
    if work is not None:
        places[str(Path(work).absolute())] = "<work>"
    for key in PATH_KEYS[1:]:
        value = config
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, str) and value and Path(value).expanduser().exists():
            places.setdefault(str((ROOT / Path(value).expanduser()).resolve()), f"<{key}>")
    for segment in Run(run).segments():  # the checkout each segment trained from
        places.setdefault(str(segment.get("cwd")), "<checkout>")
    return dict(sorted(places.items(), key=lambda item: -len(item[0])))


def scrubbed(text: str, places: dict[str, str]) -> str:
    """text with each of those paths replaced by its placeholder."""
    for path, placeholder in places.items():
        text = text.replace(path, placeholder)
    return text


def keep(run: Path, folder: Path, record: Record, work: Path | None = None) -> None:
    """Copy a finished run's kept files into folder with its record.json; whole or not at all."""
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    trained, kept = Run(run), Run(staging)
    trained.copy_into(staging, KEPT_FILES, KEPT_FOLDERS)
    if trained.data_file.is_file():
        write_json(kept.data_file, kept_data_summary(run))
    places = outside_paths(run, work)
    for path in (kept.log_file, kept.segments_file, kept.data_file):
        if path.is_file():
            write_text(path, scrubbed(path.read_text(encoding="utf-8", errors="replace"), places))
    config = blank_paths(OmegaConf.to_container(OmegaConf.load(trained.config_file)))
    write_text(kept.config_file, OmegaConf.to_yaml(OmegaConf.create(config)))
    write_json(staging / RECORD_FILE, asdict(record))
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)


def trained_code(run: Path) -> str:
    """The commit(s) a run trained at, from its segments ("a, then b" where a resume changed it)."""
    codes = list(dict.fromkeys(str(s.get("code") or "unrecorded") for s in Run(run).segments()))
    return ", then ".join(codes) if codes else "unrecorded"


def make_record(
    run: Path, study: StudySpec, point: Point, words: list[str], metrics: dict | None
) -> Record:
    """The record of a finished (metrics) or diverged (None) run of a point."""
    threads = int(Run(run).resolved_config()["trainer"].get("num_threads") or 1)
    summary = Run(run).data_summary()
    ppl = None if metrics is None else float(metrics["dev_ppl"])
    return Record(
        schema=SCHEMA_VERSION,
        study=study.name,
        stage=point.stage,
        condition=point.condition,
        variant=point.variant,
        lr_scale=float(point.lr_scale),
        seed=point.seed,
        steps=point.steps,
        settings=list(point.settings),
        dev_ppl=ppl if ppl is not None and ppl == ppl and ppl != float("inf") else None,
        cpu_seconds=round(float((metrics or {}).get("wall_seconds") or 0.0) * threads, 1),
        command=command_line(words),
        code_version=trained_code(run),
        fingerprints=summary.get("fingerprints", {}),
    )


def recorded_texts(folder: Path) -> dict | None:
    """The text fingerprints a record keeps (record.json's; a run folder's data.json's)."""
    for path in (Path(folder) / RECORD_FILE, Run(folder).data_file):
        if path.is_file():
            found = read_json(path).get("fingerprints", {}).get("text")
            if found:
                return found
    return None


def record_differences(folder: Path, wanted: dict, text_fingerprints: dict[str, dict]) -> list[str]:
    """What a kept record (or a finished run folder) trained differently from `wanted` (a
    resolved config) or on other data than `text_fingerprints`: 'key: old -> new' each."""
    stored = blank_paths(Run(folder).resolved_config())
    refused, _ = setting_differences(stored, blank_paths(copy.deepcopy(wanted)))
    asked = (wanted.get("trainer") or {}).get("precision")
    if asked not in (None, "auto"):  # resume allows a precision change; a study's record not
        had = (Run(folder).finished_metrics() or {}).get("precision") or "fp32"  # d-23
        if had != asked:
            refused.append(f"precision: {had} -> {asked}")
    kept = recorded_texts(folder)
    for split, now in text_fingerprints.items():
        old = (kept or {}).get(split)
        if old != now:
            refused.append(
                f"{split} text: {(old or {}).get('sha256', 'not recorded')[:12]} -> "
                f"{now['sha256'][:12]}"
            )
    return refused
