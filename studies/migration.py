"""The German study's old record stores, copied into its declared study's store (schema 1).

The German study (configs/study/pe_multi30k.yaml) was trained by `scripts/study.py` into a
history of stores, ``results/<store>/runs/<condition>/<variant>/seed-<s>/`` (its plateau runs:
``runs/<variant>-lr<rate>-seed<s>/``), one per rate and budget. `migrate` reads each finished
run's point (condition, variant, rate, seed, budget, SHAPE's K) from its own .hydra/config.yaml,
metrics.json and study.json, checks what its folder's name says against it, gives it its stages
(the settings runs, the grid, the check at the final budget, the finals) and copies it to
`store.record_dir` with a record.json as `store.make_record` makes it. No copied file names an
absolute path: config paths blanked, the tokenizer's path blanked, the run's, the checkout's and
the data's folders replaced. Each copy replaces the last whole, so a second migration gives the
same tree. `scripts/migrate_records.py` is its command line.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import sacrebleu
from omegaconf import OmegaConf

from common.configs import CONFIG_DIR, compose_config
from common.files import read_json, write_json, write_text
from data.corpus import load_split, text_fingerprints
from runs.resume import flatten
from runs.run import Run
from studies.finals import (
    SCORES_FILE,
    FinalScores,
    SplitScore,
    evaluation_name,
    wanted_evaluations,
)
from studies.plan import ROOT, STUDY_FILE, StudyError
from studies.protocol import SCHEMA_VERSION, StudySpec, run_overrides, setting_key
from studies.rules import choose_value
from studies.store import (
    KEPT_FILES,
    KEPT_FOLDERS,
    RECORD_FILE,
    Point,
    Record,
    blank_paths,
    kept_data_summary,
    make_record,
    record_differences,
    record_dir,
    scrubbed,
)

HUB_PATH = "bentrevett/multi30k"  # configs/data/multi30k.yaml's default: no folder
Stores = tuple[tuple[str, dict], ...]  # (store, what its name says of its runs), oldest first
# what the old report reads beside a record (study.json, the Table 3 evaluation): kept in finals
REPORT_FILES = (STUDY_FILE,)
REPORT_FOLDERS = ("eval",)
PLATEAU_NAME = re.compile(r"(?P<variant>\w+)-lr(?P<lr_scale>[\d.]+)-seed(?P<seed>\d+)")
# an absolute path left in a copied text (after the placeholders): a slash opening a path of
# two or more parts, not inside a word, a URL or a relative path
ABSOLUTE = re.compile(r"(?<![\w.<>~:/-])/[\w.-]+/[\w.@+-]+(?:/[\w.@+-]*)*")


@dataclass(frozen=True)
class OldRun:
    """A finished run of an old store: where it is and what it trained (from its own files)."""

    store: str
    folder: Path
    condition: str | None  # None: trained under no condition of the study
    variant: str
    lr_scale: float
    seed: int
    steps: int
    settings: tuple[str, ...]  # the choose key's value, for a variant with a `choose`
    dev_ppl: float


@dataclass
class Summary:
    """What a migration did: each kept point and its source, and what it found on the way."""

    kept: dict[Point, OldRun] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # 'folder: why'
    disagreements: list[str] = field(default_factory=list)  # 'folder: what: name says / files'
    duplicates: list[str] = field(default_factory=list)  # copies of one point
    refused: list[str] = field(default_factory=list)  # settings the pipeline would refuse
    no_fingerprints: list[Point] = field(default_factory=list)
    unscored: list[Point] = field(default_factory=list)  # finals without their old evaluation
    absolute_paths: list[str] = field(default_factory=list)  # left in a copy (should be none)

    def counts(self) -> Counter:
        """Points kept per stage."""
        return Counter(p.stage for p in self.kept)


def old_run_folders(results: Path, stores: Stores) -> list[tuple[str, Path]]:
    """(store, folder) of every folder under an old store's runs/ that holds metrics.json."""
    found = []
    for store, _ in stores:
        runs = Path(results) / store / "runs"
        found += [(store, m.parent) for m in sorted(runs.rglob("metrics.json"))]
    return found


def folder_claims(store: str, folder: Path, stores: Stores) -> dict:
    """What a run folder's path says it holds: condition, variant and seed, and its store's."""
    claims = dict(dict(stores)[store])
    match = PLATEAU_NAME.fullmatch(folder.name)
    if match:
        claims.update(variant=match["variant"], lr_scale=float(match["lr_scale"]))
        claims["seed"] = int(match["seed"])
    elif folder.name.startswith("seed-") and folder.name[5:].isdigit():
        claims.update(condition=folder.parent.parent.name, variant=folder.parent.name)
        claims["seed"] = int(folder.name[5:])
    return claims


def position_variants() -> dict[str, str]:
    """{position _target_: variant name} of configs/position/*.yaml."""
    targets = {}
    for path in sorted((CONFIG_DIR / "position").glob("*.yaml")):
        targets[str(OmegaConf.load(path).get("_target_"))] = path.stem
    return targets


def condition_values(study: StudySpec) -> dict[str, dict]:
    """{condition: {key: value}} of every key some condition's overrides set, as composed."""
    keys = sorted({setting_key(o) for c in study.conditions.values() for o in c.overrides})
    values = {}
    for condition in study.conditions:
        variant = study.condition_variants(condition)[0]
        words = [*run_overrides(study, condition, variant), "run_dir=."]
        composed = flatten(OmegaConf.to_container(compose_config(words), resolve=True))
        values[condition] = {key: composed.get(key) for key in keys}
    return values


def condition_of(config: dict, conditions: dict[str, dict]) -> str | None:
    """The condition whose data settings a trained config has (None: none of them)."""
    flat = flatten(config)
    for condition, values in conditions.items():
        if all(flat.get(key) == value for key, value in values.items()):
            return condition
    return None


def read_old_run(
    study: StudySpec, store: str, folder: Path, known: dict, stores: Stores
) -> tuple[OldRun, list[str]]:
    """A folder's run from its own config, and where its name, metrics or study.json disagree."""
    config = Run(folder).resolved_config()
    metrics = read_json(folder / "metrics.json")
    scores = read_json(folder / STUDY_FILE) if (folder / STUDY_FILE).is_file() else {}
    variant = known["targets"].get(str(config["position"].get("_target_")), "?")
    choose = study.variants[variant].choose if variant in study.variants else None
    settings = ()
    if choose is not None:
        settings = (f"{choose.key}={flatten(config).get(choose.key)}",)
    run = OldRun(
        store, folder, condition_of(config, known["conditions"]), variant,
        float(config["optim"]["lr_scale"]), int(config["seed"]),
        int(config["trainer"]["max_steps"]), settings, float(metrics["dev_ppl"]),
    )  # fmt: skip
    said = {
        "study.json": {k: scores.get(k) for k in ("condition", "variant", "seed") if k in scores},
        "metrics.json": {"variant": metrics.get("position_choice"), "seed": metrics.get("seed"),
                         "steps": metrics.get("steps")},
        "folder name": folder_claims(store, folder, stores),
    }  # fmt: skip
    if "step" in scores:
        said["study.json"]["steps"] = scores["step"]
    facts = asdict(run)
    problems = [
        f"{what}: {key} {value!r}, config {facts[key]!r}"
        for what, claims in said.items()
        for key, value in claims.items()
        if value is not None and value != facts[key] and not (key == "settings" and not choose)
    ]
    return run, problems


def chosen_settings(runs: list[OldRun], study: StudySpec) -> dict[tuple[str, str], tuple]:
    """The settings stage's rule on the runs: the value of lowest mean dev PPL, once all ran."""
    chosen = {}
    for condition, variant in study.tuned_pairs():
        spec = study.variants[variant].choose
        if spec is None:
            chosen[(condition, variant)] = ()
            continue
        means = {}
        for value in spec.values:
            point = (condition, variant, (f"{spec.key}={value}",), study.grid.steps, spec.rate)
            ppl = {
                r.seed: r.dev_ppl
                for r in runs
                if (r.condition, r.variant, r.settings, r.steps, r.lr_scale) == point
                and r.seed in study.grid.seeds
            }
            if set(study.grid.seeds) <= set(ppl):
                means[value] = sum(ppl.values()) / len(ppl)
        if (best := choose_value(spec.values, means)) is not None:
            chosen[(condition, variant)] = (f"{spec.key}={best}",)
    return chosen


def final_rates(runs: list[OldRun], final_store: str) -> dict[tuple[str, str], float]:
    """{(condition, variant): rate} of the final store's runs; a pair at two rates is refused."""
    rates: dict[tuple[str, str], set[float]] = {}
    for run in runs:
        if run.store == final_store and run.condition is not None:
            rates.setdefault((run.condition, run.variant), set()).add(run.lr_scale)
    two = [f"{c}/{v}: {sorted(r)}" for (c, v), r in rates.items() if len(r) > 1]
    if two:
        raise StudyError(f"{final_store} holds a variant at two rates ({'; '.join(two)})")
    return {key: rate.pop() for key, rate in rates.items()}


def points_of(run: OldRun, study: StudySpec, chosen: dict, rates: dict) -> tuple[list[Point], str]:
    """The study's points a run is (a check run may be a final too), or none and why."""
    # a chosen setting's run at the choose rate is a settings point and a grid point
    if run.condition is None or run.variant not in study.condition_variants(run.condition):
        where = f"the {run.condition} condition" if run.condition else "no condition of the study"
        return [], f"{where} does not train {run.variant}"
    spec, key = study.conditions[run.condition], (run.condition, run.variant)
    source = (spec.rates_from or run.condition, run.variant)
    at = dict(lr_scale=run.lr_scale, seed=run.seed, steps=run.steps, settings=run.settings)
    points = []
    if run.steps == study.grid.steps:
        if spec.rates_from:
            return [], f"a {run.steps}-step {run.condition} run: {run.condition} has no grid"
        choose = study.variants[run.variant].choose
        value = run.settings[0].split("=", 1)[1] if run.settings else None
        if choose and run.lr_scale == choose.rate and value in choose.values:
            points.append(Point("settings", *key, **at))
        if run.settings == chosen.get(key):
            points.append(Point("grid", *key, **at))
    elif run.steps == study.final.steps:
        if run.settings != chosen.get(source) or source not in rates:
            return [], f"settings {run.settings} or rate not chosen for {source[1]}"
        final = run.lr_scale == rates[source]
        if not spec.rates_from and (not final or run.seed in study.check.seeds):
            points.append(Point("check", *key, **at))
        if final and run.seed in study.final_seeds(*key):
            points.append(Point("final", *key, **at))
    reason = f"{run.steps} steps at x{run.lr_scale:g} {' '.join(run.settings)}: no stage of"
    return points, "" if points else f"{reason} the study holds it"


def migrated_record(run: OldRun, study: StudySpec, point: Point) -> Record:
    """The record.json of a run at a point, as store.make_record makes it (paths as <folder>)."""
    data_path = OmegaConf.load(run.folder / ".hydra" / "config.yaml").data.get("path")
    extra = () if data_path in (None, HUB_PATH) else (f"data.path={data_path}",)
    words = [*point.train_overrides(study, extra), "run_dir=<folder>"]
    record = make_record(run.folder, study, point, words, read_json(run.folder / "metrics.json"))
    return record


def outside_places(folder: Path, data_as: str = "<data.path>") -> dict[str, str]:
    """{absolute path: placeholder} of the run's own, data, cache and checkout folders."""
    raw = OmegaConf.to_container(OmegaConf.load(folder / ".hydra" / "config.yaml"))
    scores = read_json(folder / STUDY_FILE) if (folder / STUDY_FILE).is_file() else {}
    places = {str(Path(folder).absolute()): "<run_dir>"}
    for trained in (raw.get("run_dir"), scores.get("run_dir")):
        if isinstance(trained, str) and Path(trained).is_absolute():
            places[trained] = "<run_dir>"
    for key, placeholder in (("data", data_as), ("cache_dir", "<cache_dir>")):
        value = raw.get("cache_dir") if key == "cache_dir" else (raw.get("data") or {}).get("path")
        if isinstance(value, str) and value and value != HUB_PATH:
            places.setdefault(str((ROOT / Path(value).expanduser()).resolve()), placeholder)
    for segment in Run(folder).segments():
        if segment.get("cwd"):
            places.setdefault(str(segment["cwd"]), "<checkout>")
    return dict(sorted(places.items(), key=lambda item: -len(item[0])))


def report_data_path(folder: Path) -> str:
    """The data folder in the report's files: the config's relative data.path, else a mark."""
    # the old report loads a final's references through its evaluation's data config
    value = OmegaConf.load(folder / ".hydra" / "config.yaml").data.get("path")
    relative = isinstance(value, str) and value and not Path(value).is_absolute()
    return value if relative and value != HUB_PATH else "<data.path>"


def old_scores(folder: Path, study: StudySpec, steps: int) -> FinalScores | None:
    """A final's scores.json (studies/finals.py) from its old evaluations; None: one missing."""
    # only evaluations of the study's search at the final step; the old ones hashed the
    # checkpoint file, not the weights, and weights_sha256 says so
    rows = []
    for split, checkpoint in wanted_evaluations(study):
        name = evaluation_name(study, split, checkpoint)
        path, hyp = (folder / "eval" / f"{name}{ext}" for ext in (".json", ".hyp"))
        if not path.is_file() or not hyp.is_file():
            return None
        old = read_json(path)
        search = (old.get("beam"), old.get("lenpen"), old.get("split"), old.get("step"))
        if search != (study.search.beam, study.search.lenpen, split, steps):
            return None
        rows.append(SplitScore(
            split=split, checkpoint=checkpoint, step=int(old["step"]), bleu=float(old["bleu"]),
            chrf=float(old["chrf"]), tok_bleu=old.get("tok_bleu"),
            n_sentences=int(old["n_sentences"]), signature=str(old["signature"]),
            weights_sha256=f"unrecorded (checkpoint file sha256 {old.get('checkpoint_sha256')})",
            hypotheses_sha256=hashlib.sha256(hyp.read_bytes()).hexdigest(),
        ))  # fmt: skip
    return FinalScores(SCHEMA_VERSION, study.search.beam, study.search.lenpen, rows)


def copy_record(
    run: OldRun, folder: Path, record: Record, final: bool, scores: FinalScores | None = None
) -> list[str]:
    """Copy a run's kept files (a final's report files too) into folder; absolute paths left."""
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    files = (*KEPT_FILES, *(REPORT_FILES if final else ()))
    for name in files:
        if (run.folder / name).is_file():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(run.folder / name, staging / name)
    for name in (*KEPT_FOLDERS, *(REPORT_FOLDERS if final else ())):
        if (run.folder / name).is_dir():
            shutil.copytree(run.folder / name, staging / name)
    if (run.folder / "data.json").is_file():
        write_json(staging / "data.json", kept_data_summary(run.folder))
    logs = outside_places(run.folder)
    for_report = outside_places(run.folder, report_data_path(run.folder))
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        if path.suffix in (".log", ".json"):
            inside = path.relative_to(staging).parts
            places = for_report if inside[0] in (STUDY_FILE, *REPORT_FOLDERS) else logs
            text = path.read_text(encoding="utf-8", errors="replace")
            write_text(path, scrubbed(text, places))
    config = OmegaConf.to_container(OmegaConf.load(run.folder / ".hydra" / "config.yaml"))
    kept = OmegaConf.create(blank_paths(config))
    write_text(staging / ".hydra" / "config.yaml", OmegaConf.to_yaml(kept))
    write_json(staging / RECORD_FILE, asdict(record))
    if scores is not None:
        write_json(staging / SCORES_FILE, asdict(scores))
    left = absolute_paths_in(staging)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return [f"{folder}/{where}" for where in left]


def absolute_paths_in(folder: Path) -> list[str]:
    """'file: path' of every absolute path a text file under folder names."""
    found = []
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        if path.suffix in (".log", ".json", ".yaml", ".hyp", ".md"):
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.relative_to(folder)}: {m}" for m in ABSOLUTE.findall(text)]
    return found


def read_old_runs(
    results: Path, study: StudySpec, summary: Summary, stores: Stores
) -> list[OldRun]:
    """Every finished run of the old stores, their disagreements noted in summary."""
    known = {"targets": position_variants(), "conditions": condition_values(study)}
    runs = []
    for store, folder in old_run_folders(results, stores):
        run, problems = read_old_run(study, store, folder, known, stores)
        summary.disagreements += [f"{folder}: {p}" for p in problems]
        runs.append(run)
    return runs


def settings_refused(run: OldRun, study: StudySpec, point: Point, cache: dict) -> list[str]:
    """The settings differences `record_differences` would refuse in a run at a point."""
    words = tuple(point.train_overrides(study))
    if words not in cache:
        cache[words] = OmegaConf.to_container(compose_config([*words, "run_dir=."]), resolve=True)
    return record_differences(run.folder, cache[words], {})


def plan_migration(results: Path, study: StudySpec, stores: Stores, final_store: str) -> Summary:
    """Each point's old run (the later store's of two copies) and what was found; copies none."""
    summary = Summary()
    runs = read_old_runs(results, study, summary, stores)
    chosen, rates = chosen_settings(runs, study), final_rates(runs, final_store)
    order = {store: i for i, (store, _) in enumerate(stores)}
    copies: dict[Point, list[OldRun]] = {}
    for run in sorted(runs, key=lambda r: (order[r.store], str(r.folder))):
        points, why = points_of(run, study, chosen, rates)
        if not points:
            summary.skipped.append(f"{run.folder}: {why}")
        for point in points:
            copies.setdefault(point, []).append(run)
    cache: dict = {}
    pairs: dict[tuple[Path, Path], list[str]] = {}
    for point, found in copies.items():
        kept = summary.kept[point] = found[-1]
        for other in found[:-1]:
            pairs.setdefault((other.folder, kept.folder), []).append(point.stage)
        refused = settings_refused(kept, study, point, cache)
        summary.refused += [f"{kept.folder} as {point.label}: {r}" for r in refused]
    for (other, kept), stages in pairs.items():
        summary.duplicates.append(
            f"{'+'.join(stages)}: {other} and {kept} (kept): {metrics_difference(other, kept)}"
        )
    return summary


def metrics_difference(one: Path, other: Path) -> str:
    """'metrics.json identical' (byte for byte), or which of its keys differ."""
    first, second = (Path(f) / "metrics.json" for f in (one, other))
    if first.read_bytes() == second.read_bytes():
        return "metrics.json identical"
    a, b = read_json(first), read_json(second)
    keys = sorted(k for k in {*a, *b} if a.get(k) != b.get(k))
    return f"metrics.json DIFFERS in {', '.join(keys) or 'formatting only'}"


def migrate(
    results: Path,
    study: StudySpec,
    stores: Stores,
    final_store: str,
    data: tuple[dict, dict] | None = None,
) -> Summary:
    """Copy every old run into the study's store at each of its points; what was done. data:
    derived_fingerprints of the data the runs trained on (recorded where `verified` shows it)."""
    summary = plan_migration(results, study, stores, final_store)
    for point, run in sorted(summary.kept.items(), key=lambda item: item[0].label):
        record = migrated_record(run, study, point)
        final = point.stage == "final"
        scores = old_scores(run.folder, study, point.steps) if final else None
        if final and scores is None:
            summary.unscored.append(point)
        if data is not None and not record.fingerprints:
            record = with_fingerprints(record, data[0], verified(study, run.folder, data, scores))
        if not record.fingerprints:
            summary.no_fingerprints.append(point)
        folder = record_dir(results, study, point)
        folder.parent.mkdir(parents=True, exist_ok=True)
        summary.absolute_paths += copy_record(run, folder, record, final, scores)
    return summary


def summary_lines(summary: Summary, study: StudySpec) -> list[str]:
    """The migration's summary: points per stage, then each list that is not empty."""
    counts = summary.counts()
    stages = ", ".join(f"{s} {counts[s]}" for s in ("settings", "grid", "check", "final", "extend")
                       if counts[s])  # fmt: skip
    sources = len({r.folder for r in summary.kept.values()})
    lines = [f"migrated into results/{study.name}: {stages} ({len(summary.kept)} records from "
             f"{sources} old run folders)"]  # fmt: skip
    missing = summary.no_fingerprints
    if missing and len(missing) == len(summary.kept):
        lines.append(f"points with no data fingerprints: all {len(missing)} (their data.json "
                     "predates them; record.json fingerprints {})")  # fmt: skip
    else:
        lines.append(f"points with no data fingerprints: {len(missing)}")
        lines += [f"  {p.label}" for p in missing]
    for title, items in (
        ("finals without an old evaluation to write scores.json from", summary.unscored),
        ("skipped old run folders", summary.skipped),
        ("folder names or files that disagree with the config", summary.disagreements),
        ("duplicates (one point in two stores)", summary.duplicates),
        ("settings the pipeline would refuse", summary.refused),
        ("absolute paths left in a copy", summary.absolute_paths),
    ):
        lines.append(f"{title}: {len(items)}")
        lines += [f"  {item}" for item in items]
    return lines


def derived_fingerprints(study: StudySpec, overrides: list[str]) -> tuple[dict, dict]:
    """(text fingerprints, test references) of the data the study reads with overrides (e.g.
    data.path=<the folder the records trained on>): what a migrated record is checked against."""
    words = run_overrides(study, next(iter(study.conditions)), next(iter(study.variants)))
    cfg = compose_config([*words, *overrides, "run_dir=."])
    texts = text_fingerprints(cfg.data)
    refs = {split: list(load_split(cfg.data, split)["tgt"]) for split in study.test}
    return texts, refs


def verified(
    study: StudySpec, folder: Path, data: tuple[dict, dict], scores: FinalScores | None
) -> str | None:
    """Why a migrated run's data is the data now (None: it cannot be shown): every split's size
    equals its data.json's (train: before cleaning), and each kept test translation rescores
    to its recorded BLEU against today's references."""
    texts, refs = data
    summary = read_json(folder / "data.json")
    sizes = {**summary.get("splits", {}), "train": summary.get("train_cleaning", {}).get("input")}
    if any(sizes.get(split) != fp["pairs"] for split, fp in texts.items() if split in sizes):
        return None
    if scores is None:
        return "split sizes equal data.json's (no test translations kept)"
    for row in scores.scores:
        name = evaluation_name(study, row.split, row.checkpoint)
        hyps = (folder / "eval" / f"{name}.hyp").read_text(encoding="utf-8").splitlines()
        if round(sacrebleu.corpus_bleu(hyps, [refs[row.split]]).score, 2) != round(row.bleu, 2):
            return None
    return "split sizes equal data.json's; its test translations rescore to the recorded BLEU"


def with_fingerprints(record: Record, texts: dict, how: str | None) -> Record:
    """A migrated record with the data's text fingerprints, derived at migration, and how they
    were checked; unchanged where they could not be."""
    if how is None:
        return record
    return replace(record, fingerprints={"text": texts, "derived_at_migration": how})
