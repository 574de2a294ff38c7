"""The study's plan: conditions, variants, seeds and where each run lives.

Three training conditions on Multi30k, one fixed step budget (configs/experiment/pe_study_*):
``all`` (every training length: Table 3 (E) extended, and the control), ``joined`` (about half
of the training lines join 2-4 consecutive pairs, Variš & Bojar 2021) and ``short`` (sources of
at most L = 10 words). Each (condition, variant, seed) trains into
``<root>/<condition>/<variant>/seed-<s>/`` (studies/runner.py), is scored (studies/scoring.py),
kept in the record store (studies/records.py) and reported (studies/report.py); docs/study.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import runs.run
from common.configs import CONFIG_DIR, compose_config
from common.errors import UserError


class StudyError(UserError):
    """A problem with a study's arguments or run folders, stated in one line."""


def position_variants() -> list[str]:
    """The position variants of configs/position/*.yaml, by name."""
    return sorted(p.stem for p in (CONFIG_DIR / "position").glob("*.yaml"))


ROOT = Path(__file__).resolve().parents[1]
# condition -> experiment config (configs/experiment/<name>.yaml)
CONDITIONS = {
    "all": "pe_study_multi30k",
    "joined": "pe_study_multi30k_joined",
    "short": "pe_study_multi30k_short",
}
# Row (E) of Table 3 first: these two variants get 5 seeds, every other variant 3; the joined
# condition 3 seeds (2 left every difference past k = 1 inside a 1-degree-of-freedom interval)
# and no NoPE (its bidirectional encoder has no word order to extrapolate).
# SHAPE enters the two extrapolation conditions in its paper's form, sinusoidal_shape (Kiyono
# et al. 2021); learned_shape, our learned-table variant of it, is in the `all` condition only.
ROW_E = ("sinusoidal", "learned")
DEFAULT_SEEDS = {
    "all": {"row_e": (1, 2, 3, 4, 5), "other": (1, 2, 3)},
    "joined": {"row_e": (1, 2, 3), "other": (1, 2, 3)},
    "short": {"row_e": (1, 2, 3), "other": (1, 2, 3)},
}
LEFT_OUT = {"joined": ("none", "learned_shape"), "short": ("learned_shape",)}
KS = (1, 2, 3, 4)
CONCAT_SPLITS = ("test", "validation")
TABLE3_EVAL = "test-last-beam4"
# The paper's search (§6.1): beam 4, alpha 0.6; EOS may come first (min_len 0), as tensor2tensor
SEARCH = {"beam": 4, "lenpen": 0.6, "min_len": 0}
BUCKET_WIDTH = 5
# a length bucket's scores in study.json; bp and length_ratio kept since 2026-12-03 (an older
# record lacks them: `run` scores it again from its kept translations where its run folder is)
BUCKET_KEYS = ("bucket", "low", "high", "beyond", "n", "bleu", "bp", "length_ratio")
STUDY_FILE = "study.json"
# The committed store of scored runs (the report's default input) and what a record keeps of a run
RECORDS = ROOT / "results" / "archive" / "pe_study" / "runs"
RECORD_FILES = (
    *runs.run.RECORD_FILES,
    STUDY_FILE,
    f"{runs.run.EVALUATIONS}/{TABLE3_EVAL}.json",
    f"{runs.run.EVALUATIONS}/{TABLE3_EVAL}.hyp",
)
RECORD_FOLDERS = runs.run.RECORD_FOLDERS
POOLED = "+".join(CONCAT_SPLITS)  # test + validation scored together


@dataclass(frozen=True)
class Job:
    """One training run of the study."""

    condition: str
    variant: str
    seed: int
    run_dir: Path

    @property
    def label(self) -> str:
        return f"{self.condition}/{self.variant}/seed-{self.seed}"


def run_dir_of(root: Path, condition: str, variant: str, seed: int) -> Path:
    """<root>/<condition>/<variant>/seed-<seed>."""
    return Path(root) / condition / variant / f"seed-{seed}"


LAUNCHERS = ("basic", "submitit_local", "slurm")  # configs/hydra/launcher and Hydra's own
# submitit_local's default limit is 60 minutes a job; a study run may take hours on a CPU
LOCAL_TIMEOUT_MIN = 7 * 24 * 60


def multirun_command(
    experiment: str,
    variants: Sequence[str],
    seeds: Sequence[int],
    sweep_dir: Path,
    launcher: str,
    jobs: int,
    overrides: Sequence[str],
) -> list[str]:
    """`python train.py --multirun ...` training every variant x seed of one experiment into
    <sweep_dir>/<variant>/seed-<s> through a Hydra launcher (jobs: SLURM's array parallelism)."""
    settings = {
        "basic": [],
        "submitit_local": [f"hydra.launcher.timeout_min={LOCAL_TIMEOUT_MIN}"],
        "slurm": [f"hydra.launcher.array_parallelism={jobs}"],
    }[launcher]
    return [
        sys.executable,
        str(ROOT / "train.py"),
        "--multirun",
        f"hydra/launcher={launcher}",
        *settings,
        f"experiment={experiment}",
        f"position={','.join(variants)}",
        f"seed={','.join(map(str, seeds))}",
        f"hydra.sweep.dir={sweep_dir}",
        "hydra.sweep.subdir=${hydra.runtime.choices.position}/seed-${seed}",
        *overrides,
    ]


def planned_jobs(
    root: Path,
    conditions: Sequence[str],
    variants: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
) -> list[Job]:
    """The runs to make, row (E) first, seeds interleaved so early results pair up by seed.

    Without variants/seeds: every variant of configs/position with the study's seeds
    (DEFAULT_SEEDS, LEFT_OUT).
    """
    known = position_variants()
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        raise StudyError(f"--condition {unknown[0]}: pass some of {', '.join(CONDITIONS)}")
    wrong = [v for v in variants or () if v not in known]
    if wrong:
        hint = " (Hydra overrides go after --)" if "=" in wrong[0] else ""
        raise StudyError(
            f"unknown position variant {wrong[0]}: pass some of {', '.join(known)}{hint}"
        )
    if seeds is not None and any(int(s) < 0 for s in seeds):
        raise StudyError(f"--seeds {' '.join(map(str, seeds))}: pass non-negative integers")
    jobs = []
    for condition in conditions:
        chosen = (
            list(variants)
            if variants
            else [v for v in known if v not in LEFT_OUT.get(condition, ())]
        )
        tiers = [[v for v in chosen if v in ROW_E], [v for v in chosen if v not in ROW_E]]
        for tier, names in zip(("row_e", "other"), tiers, strict=True):
            tier_seeds = list(seeds) if seeds else list(DEFAULT_SEEDS[condition][tier])
            for seed in tier_seeds:
                for variant in sorted(names, key=lambda v: (v not in ROW_E, v)):
                    run_dir = run_dir_of(root, condition, variant, int(seed))
                    jobs.append(Job(condition, variant, int(seed), run_dir))
    return jobs


def condition_max_words(condition: str, overrides: Sequence[str] = ()) -> int | None:
    """data.train_max_src_words of a condition's experiment (None: every length)."""
    cfg = compose_config([f"experiment={CONDITIONS[condition]}", *overrides])
    value = cfg.data.get("train_max_src_words")
    return None if value is None else int(value)


def train_overrides(job: Job, overrides: Sequence[str]) -> list[str]:
    """The train.py overrides of one run: `python train.py <these>` trains (and resumes) it."""
    return [
        f"experiment={CONDITIONS[job.condition]}",
        f"position={job.variant}",
        f"seed={job.seed}",
        f"run_dir={job.run_dir}",
        *overrides,
    ]
