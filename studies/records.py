"""A scored run's record (study.json, typed) and the record store the report reads.

A scored run's record (what the report reads: its config, metrics, data.json, study.json,
segments.json, the Table 3 evaluation with its translations, train.log and tensorboard events;
no checkpoints) lies in ``<store>/<condition>/<variant>[/<settings>]/seed-<s>/``; the retired
``scripts/study.py run`` kept them (the German study's stores, migrated into its final store).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from omegaconf import OmegaConf

from common.configs import compose_config
from common.files import read_json, write_json
from data.corpus import loads_multi30k
from runs.resume import KEEP_THE_MATH, flatten, setting_differences
from runs.run import Run
from studies.plan import POOLED, SEARCH, STUDY_FILE, StudyError
from studies.rows import MissingField, from_json

# where a run's files went: not part of the command that trains it again
PATH_KEYS = ("run_dir", "cache_dir")
ABSENT = object()


@dataclass(frozen=True)
class Table3Scores:
    """The Table 3 evaluation of a run (eval/test-last-beam4.json's scores)."""

    eval: str
    bleu: float
    chrf: float
    n_sentences: int
    tok_bleu: float | None = None
    signature: str | None = None


@dataclass(frozen=True)
class ConcatRow:
    """One concatenation set's scores in study.json: a split (or POOLED, the splits together)
    with k sentences joined a line (scoring.length_scores)."""

    split: str
    k: int
    lines: int
    left_out: int
    bleu: float
    chrf: float
    bp: float
    length_ratio: float
    hyp_len: int
    ref_len: int
    unigram_precision: float
    ppl: float | None = None  # the split's evaluation's; a pooled row has none

    def to_json(self) -> dict:
        """The row as study.json keeps it (a pooled row without ppl)."""
        return {k: v for k, v in asdict(self).items() if k != "ppl" or self.split != POOLED}


@dataclass(frozen=True)
class BucketRow:
    """BLEU of one source-length bucket (k = 1, the splits pooled) in study.json."""

    bucket: str
    low: int
    high: int
    beyond: bool  # past the short condition's training lengths
    n: int
    bleu: float | None
    bp: float | None = None  # None: scored before the brevity penalty was kept
    length_ratio: float | None = None

    @property
    def has_lengths(self) -> bool:
        """Whether the bucket has its brevity penalty and length ratio (BUCKET_KEYS)."""
        return self.bp is not None and self.length_ratio is not None

    def to_json(self) -> dict:
        """The row as study.json keeps it (one scored before the lengths were kept without them)."""
        lengths = ("bp", "length_ratio")
        return {k: v for k, v in asdict(self).items() if v is not None or k not in lengths}


@dataclass(frozen=True)
class StudyRecord:
    """One scored run of the study: its study.json, field for field, in the file's order.

    concat and by_bucket are rows of a table (one a split and k, one a length bucket);
    hardware and code read ["unrecorded"] in a study.json written before they were kept.
    """

    condition: str
    variant: str
    seed: int
    run_dir: str
    step: int
    search: dict
    precision: str | None
    train_cleaning: dict | None
    dev_ppl: float | None
    wall_seconds: float | None
    hardware: list[str]
    code: list[str]
    test: Table3Scores
    concat: list[ConcatRow]
    max_words: int | None
    by_bucket: list[BucketRow]

    @property
    def label(self) -> str:
        return f"{self.condition}/{self.variant}/seed-{self.seed}"

    @property
    def has_bucket_lengths(self) -> bool:
        """Whether every length bucket has its brevity penalty and length ratio (BUCKET_KEYS)."""
        return all(bucket.has_lengths for bucket in self.by_bucket)

    @classmethod
    def from_json(cls, record: dict, path: Path) -> StudyRecord:
        """The record of a study.json's dict; a StudyError names a missing field and the file."""
        try:
            return from_json(cls, unrecorded(path) | record)
        except MissingField as e:
            raise missing_field(path, e.name) from None

    @classmethod
    def read(cls, path: Path) -> StudyRecord:
        """The record in a study.json file."""
        return cls.from_json(read_json(path), path)

    def to_json(self) -> dict:
        """study.json's object: the same keys, in the same order, as every earlier one."""
        rows = {"concat": [r.to_json() for r in self.concat]}
        return asdict(self) | rows | {"by_bucket": [r.to_json() for r in self.by_bucket]}

    def write(self, path: Path) -> None:
        """Write study.json (the same keys, in the same order, as every earlier one)."""
        write_json(path, self.to_json())


def unrecorded(path: Path) -> dict:
    """What a study.json (at path) written before a field was kept reads for it."""
    fields = dict.fromkeys(("precision", "train_cleaning", "dev_ppl", "wall_seconds", "max_words"))
    return (
        fields
        | {"run_dir": str(path.parent), "search": {}}
        | {
            "hardware": ["unrecorded"],
            "code": ["unrecorded"],
        }
    )


def missing_field(path: Path, key: str) -> StudyError:
    """The StudyError of a file without a field the study reads."""
    return StudyError(
        f"{path} has no '{key}' field: it was not written by this project's train.py or "
        "evaluate.py; delete it and run the study again"
    )


def current_record(run_dir: Path) -> StudyRecord | None:
    """study.json of a finished run scored at its final step with the study's search, else None."""
    metrics = Run(run_dir).finished_metrics()
    path = run_dir / STUDY_FILE
    if metrics is None or not path.is_file():
        return None
    record = read_json(path)
    if record.get("step") != metrics.get("steps") or record.get("search") != SEARCH:
        return None
    return StudyRecord.from_json(record, path)


def override_value(value) -> str:
    """A config value as a Hydra override writes it: bare where the grammar reads it back as
    the same value, else quoted (strings) or in JSON's list/number/null form."""
    if isinstance(value, str):
        bare = re.fullmatch(r"[A-Za-z_][\w./-]*", value) and value.lower() not in {
            "true",
            "false",
            "null",
            "nan",
            "inf",
        }
        return value if bare else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return json.dumps(value)


def kept_out(key: str, new, both_multi30k: bool) -> bool:
    """Whether a setting stays out of a retrain command: where files went; Multi30k's source
    where then and now both load it (the same pairs: runs.resume); a setting that keeps the
    math and did not exist then (today's default is what the run had in effect)."""

    def under(prefixes: Sequence[str]) -> bool:
        return any(key == k or key.startswith(f"{k}.") for k in prefixes)

    return (
        under(PATH_KEYS)
        or (both_multi30k and under(("data.path", "data.corpus")))
        or (new is ABSENT and under(KEEP_THE_MATH))
    )


def retrain_command(record: StudyRecord, experiment: Sequence[str]) -> str:
    """`python train.py ...` that trains a recorded run again: its condition's experiment (the
    words that compose it, e.g. experiment=<name>), its position and seed, then each setting of
    its .hydra/config.yaml these compose to otherwise (kept_out: paths, Multi30k's source, new
    settings that keep the math)."""
    words = [
        *experiment,
        f"position={record.variant}",
        f"seed={record.seed}",
    ]
    now = OmegaConf.to_container(compose_config([*words, "run_dir=."]), resolve=True)
    then = Run(Path(record.run_dir)).resolved_config()
    multi30k = loads_multi30k(now.get("data")) and loads_multi30k(then.get("data"))
    now, then = flatten(now), flatten(then)
    for key in sorted(set(now) | set(then)):
        old, new = now.get(key, ABSENT), then.get(key, ABSENT)
        if old == new or kept_out(key, new, multi30k):
            continue
        if new is ABSENT:
            words.append(f"~{key}")
        else:
            words.append(f"{'+' if old is ABSENT else ''}{key}={override_value(new)}")
    return shlex.join(["python", "train.py", *words])


def training_settings(record: StudyRecord) -> dict:
    """A record's resolved training config without its seed and rate (what one configuration's
    runs share; the rate is the report's own check, per variant)."""
    config = Run(Path(record.run_dir)).resolved_config()
    config.pop("seed", None)
    config.get("optim", {}).pop("lr_scale", None)
    return config


def check_one_configuration(records: Sequence[StudyRecord]) -> None:
    """Refuse runs of one condition trained with other settings (runs.resume's refused
    differences): within a variant anything but the seed and rate; between variants anything
    but position.* and the rate. A report compares seeds of one configuration, never a mix."""
    firsts: dict[tuple[str, str | None], tuple[str, dict]] = {}
    for record in records:
        settings = training_settings(record)
        shared = {k: v for k, v in settings.items() if k != "position"}
        for key, mine, whose in (
            ((record.condition, record.variant), settings, f"{record.variant}'s"),
            ((record.condition, None), shared, f"the {record.condition}"),
        ):
            label, first = firsts.setdefault(key, (record.label, mine))
            refused, _ = setting_differences(first, mine)
            if refused:
                raise StudyError(
                    f"{whose} runs were trained with other settings ({record.label} against "
                    f"{label}: {'; '.join(refused)}): a report compares runs of one "
                    "configuration; keep the others in another store"
                )


def position_settings(record: StudyRecord) -> list[str]:
    """'key=value' of each position.* setting a run trained with that its variant's yaml does
    not set so (SHAPE's K chosen on dev, e.g.)."""
    default = compose_config([f"position={record.variant}", "run_dir=."]).position
    trained = training_settings(record).get("position", {})
    now = flatten(OmegaConf.to_container(default, resolve=True))
    return [
        f"{key}={override_value(value)}"
        for key, value in sorted(flatten(trained).items())
        if now.get(key, ABSENT) != value
    ]


def scored_runs(root: Path, conditions: Sequence[str]) -> tuple[list[StudyRecord], list[str]]:
    """study.json of every run under root/<condition> (conditions in name order) that is scored
    at its final step with the study's search, run_dir set to where it was read; the others'
    labels."""
    root = Path(root)
    records, unscored = [], []
    for condition in sorted(conditions):
        # <variant>/seed-<s>, or <variant>/<settings>/seed-<s> (a declared study's final store)
        for run_dir in sorted((root / condition).glob("**/seed-*")):
            if not run_dir.is_dir() or run_dir.name.endswith(".partial"):
                continue
            label = f"{condition}/{run_dir.relative_to(root / condition)}"
            record = current_record(run_dir)
            if record is None:  # unfinished, scored before its last step, or another search
                unscored.append(label)
                continue
            check_record(record, run_dir, run_dir.relative_to(root).parts)
            records.append(replace(record, run_dir=str(run_dir)))
    return records, unscored


def check_record(record: StudyRecord, run_dir: Path, parts: tuple[str, ...]) -> None:
    """StudyError unless a study.json agrees with its folder (condition, variant, seed), with the
    seed its run trained and with the evaluation it quotes (BLEU, chrF, sentences): a copied or
    edited one is refused."""
    said = (record.condition, record.variant, f"seed-{record.seed}")
    if (parts[0], parts[1], parts[-1]) != said:
        raise StudyError(
            f"{run_dir / STUDY_FILE} records {'/'.join(said)} but lies in "
            f"{'/'.join(parts)}: a record copied into another run's folder; restore its own"
        )
    run = Run(run_dir)
    metrics = run.finished_metrics() or {}
    if metrics.get("seed") is not None and int(metrics["seed"]) != record.seed:
        raise StudyError(
            f"{run_dir / STUDY_FILE} records seed {record.seed} but the run trained seed "
            f"{metrics['seed']} ({run.metrics_file}): a record copied from another run; restore "
            "its own"
        )
    path = run.evaluation_file(record.test.eval)
    scored = run.evaluation(record.test.eval) or {}
    test = record.test
    quoted = {"bleu": test.bleu, "chrf": test.chrf, "n_sentences": test.n_sentences}
    differ = [f"{k} {v} vs {scored.get(k)}" for k, v in quoted.items() if scored.get(k) != v]
    if differ:
        raise StudyError(
            f"{run_dir / STUDY_FILE} quotes other scores than {path} ({'; '.join(differ)}): "
            "the record was edited or its evaluation replaced; score the run again"
        )
