"""Training settings out of range, refused before any data is read: one line naming the key.

A zero or negative count (`trainer.eval_every=0` divides by zero at step 1; `max_steps=-1`
or `update_freq=-1` would end a "complete" run of 0 steps) is a SettingError here, at the
boundary, rather than a traceback or a silent nonsense result later. LauncherGpuCheck refuses a
SLURM sweep whose jobs get no GPU while trainer.device wants one, before anything is submitted.
"""

import functools
import inspect
import logging
import math
import os
import shutil
import subprocess
import sys

import hydra.utils
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf

from common.configs import CONFIG_DIR
from common.errors import UserError


class SettingError(UserError):
    """A training setting out of its range."""


def _check(key: str, value, minimum: float, optional: bool, integer: bool, hint: str) -> None:
    """SettingError unless value (or None when optional) is a number >= minimum."""
    if value is None and optional:
        return
    try:  # a string is no number, even one that reads as one (`seed=01`: probe j-1)
        number = math.nan if isinstance(value, str | bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    whole = not integer or (math.isfinite(number) and number == int(number))
    if not (math.isfinite(number) and number >= minimum and whole):
        kind = "a whole number" if integer else "a number"
        also = " or null" if optional else ""
        raise SettingError(f"{key}={value}: pass {kind} >= {minimum:g}{also} ({hint})")


# key: (minimum, optional (null allowed), integer, what it means)
RANGES = {
    "trainer.max_steps": (1, False, True, "updates to train"),
    "trainer.max_epochs": (1, True, True, "passes over the training data"),
    "trainer.max_minutes": (1e-9, True, False, "minutes of training in all segments"),
    "trainer.effective_tokens": (1, True, True, "null: one batch per rank and update"),
    "trainer.update_freq": (1, True, True, "batches per update; null derives it"),
    "trainer.eval_every": (1, False, True, "updates between validations"),
    "trainer.eval_bleu_sentences": (0, False, True, "0 turns greedy BLEU off"),
    "trainer.save_every_steps": (1, True, True, "null: no step cadence"),
    "trainer.save_every_minutes": (1e-9, True, False, "null: no time cadence"),
    "trainer.keep_last": (1, False, True, "step checkpoints kept"),
    "trainer.log_every": (1, False, True, "updates between log lines"),
    "trainer.num_threads": (1, True, True, "null: torch's default"),
    "trainer.dist_timeout_minutes": (1e-9, False, False, "DDP collective timeout"),
    "optim.warmup": (1, False, True, "the paper: 4000"),
    "optim.lr_scale": (1e-12, False, False, "the paper: 1.0"),
    "optim.eps": (0, False, False, "the paper: 1e-9"),
    "data.max_tokens": (1, False, True, "tokens per batch and side"),
    "data.vocab_size": (5, False, True, "subwords, the 4 special ids included"),
    "data.max_len": (2, False, True, "subwords + EOS a training side may hold"),
    "data.tokenizer_sample": (1, False, True, "sentences the tokenizer learns from"),
    "data.tokenizer_seed": (0, True, True, "the seed of the tokenizer's sample; null: 0"),
    "model.d_model": (1, False, True, "the paper: 512"),
    "model.n_heads": (1, False, True, "the paper: 8"),
    "model.n_encoder_layers": (1, False, True, "the paper: 6"),
    "model.n_decoder_layers": (1, False, True, "the paper: 6"),
    "model.d_ff": (1, False, True, "the paper: 2048"),
    "model.max_positions": (1, False, True, "rows of a position table"),
    "model.layer_norm_eps": (1e-30, False, False, "the paper's code: 1e-6"),
}
# switches: true or false (a string such as `maybe` would count as true)
BOOLEANS = ("trainer.compile", "trainer.start_over", "trainer.evaluate_at_end")
# key: what it means; a probability from 0 to below 1
PROBABILITIES = {
    "optim.label_smoothing": "the paper: 0.1",
    "model.dropout": "the paper: 0.1",
}


def _check_probability(key: str, value, hint: str) -> None:
    """SettingError unless value is a number from 0 to below 1."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not 0 <= number < 1:  # also nan
        raise SettingError(f"{key}={value}: pass a number from 0 to below 1 ({hint})")


def _check_betas(betas) -> None:
    """SettingError unless optim.betas is two numbers from 0 to below 1 (Adam's beta1, beta2)."""
    ok = isinstance(betas, ListConfig | list | tuple) and len(betas) == 2
    for beta in betas if ok else []:
        try:
            ok = ok and 0 <= float(beta) < 1
        except (TypeError, ValueError):
            ok = False
    if not ok:
        raise SettingError(
            f"optim.betas={betas}: pass two numbers from 0 to below 1, e.g. "
            "'optim.betas=[0.9,0.98]' (the paper)"
        )


def non_finite(value, key: str = "") -> list[tuple[str, float]]:
    """(dotted key, value) of every inf or nan float in a nested dict/list, in order."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(key, value)]
    if isinstance(value, dict):
        return [bad for k, v in value.items() for bad in non_finite(v, f"{key}.{k}".strip("."))]
    if isinstance(value, list | tuple):
        return [bad for i, v in enumerate(value) for bad in non_finite(v, f"{key}[{i}]")]
    return []


def check_finite(cfg: DictConfig) -> None:
    """SettingError naming the first setting that is inf or nan (no setting means either).

    The values as written: an interpolation copies a value that is checked where it is set.
    """
    found = non_finite(OmegaConf.to_container(cfg, resolve=False))
    if found:
        key, value = found[0]
        raise SettingError(
            f"{key}={value}: pass a finite number (inf and nan are no setting's value; null "
            "turns an optional limit off)"
        )


@functools.cache
def declared_settings() -> dict:
    """configs/train.yaml as written (its defaults list and Hydra's section included)."""
    return OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "train.yaml"))


@functools.cache
def top_level_keys() -> tuple[str, ...]:
    """The top-level settings train.py reads: configs/train.yaml's own keys and config groups."""
    declared = dict(declared_settings())
    groups = [k for item in declared.pop("defaults") if isinstance(item, dict)
              for k, choice in item.items() if choice is not None]  # fmt: skip
    return tuple(dict.fromkeys(k for k in (*declared, *groups) if k != "hydra"))  # Hydra's own


def data_readers(key: str) -> list[str]:
    """The configs/data/*.yaml whose corpus reads data.<key> (an interpolation ${data.<key>})."""
    return [
        path.stem
        for path in sorted((CONFIG_DIR / "data").glob("*.yaml"))
        if f"${{data.{key}}}" in str(OmegaConf.to_container(OmegaConf.load(path)).get("corpus"))
    ]


def check_read(cfg: DictConfig) -> None:
    """SettingError for a setting train.py reads nowhere: a top-level key of no config group
    (`+foo=1`, probe 16-21), a data key neither configs/train.yaml declares nor the corpus
    reads (`+data.files.train.en=...` with the toy corpus, 16-23), an argument the model, the
    position class or the corpus function does not take (`position=learned +position.base=500`
    was Hydra's TypeError, and a run folder left behind: 16-22, 16-25, 16-3), or a trainer or
    optim key no option of its group declares (16-1, 16-2)."""
    unknown = [key for key in cfg if key not in top_level_keys()]
    if unknown:
        raise SettingError(
            f"{unknown[0]}: train.py reads no such setting (it reads "
            f"{', '.join(top_level_keys())}); remove +{unknown[0]}"
        )
    corpus = cfg.data.get("corpus")
    reads = str(OmegaConf.to_container(corpus, resolve=False) if corpus is not None else None)
    for key in cfg.data:
        if key not in {*declared_settings()["data"], "corpus"} and f"${{data.{key}}}" not in reads:
            readers = " or ".join(f"data={name}" for name in data_readers(key)) or "none"
            raise SettingError(
                f"data.{key}: this corpus ({(corpus or {}).get('_target_')}) reads no data.{key} "
                f"(the data configs that do: {readers}); remove it or pick one of those"
            )
    if corpus is not None:
        check_arguments("data.corpus", corpus)
    for group in ("model", "position", "optim", "trainer"):
        if cfg[group].get("_target_"):
            check_arguments(group, cfg[group])
            continue
        declared = group_keys(group)
        unknown = [key for key in cfg[group] if key not in declared]
        if unknown:  # `+trainer.foo=1`, `+optim.momentum=0.9` (probe 16-1, 16-2)
            raise SettingError(
                f"{group}.{unknown[0]}: train.py reads no such setting (configs/{group}/ "
                f"declares {', '.join(sorted(declared))}); remove +{group}.{unknown[0]}"
            )


@functools.cache
def group_keys(group: str) -> frozenset[str]:
    """The keys the options of a config group without a `_target_` declare (configs/<group>/)."""
    keys: set[str] = set()
    for path in (CONFIG_DIR / group).glob("*.yaml"):
        keys |= set(OmegaConf.to_container(OmegaConf.load(path)))
    return frozenset(keys)


def check_arguments(section: str, settings: DictConfig) -> None:
    """SettingError for a key of a `_target_` section its class or function takes no argument
    for (one that takes **kwargs takes any)."""
    target = settings.get("_target_")
    if not target:
        return
    called = hydra.utils.get_object(str(target))
    takes = inspect.signature(called.__init__ if inspect.isclass(called) else called).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in takes.values()):
        return
    for key in settings:
        if not (key.startswith("_") and key.endswith("_")) and key not in takes:  # _partial_
            known = [name for name in takes if name != "self"]
            raise SettingError(
                f"{section}.{key}: {str(target).rsplit('.', 1)[-1]} takes no {key} (it takes "
                f"{', '.join(known) or 'nothing'}); remove it"
            )


def _learned_table(cfg: DictConfig) -> bool:
    target = cfg.position.get("_target_")
    return bool(target) and getattr(hydra.utils.get_class(str(target)), "table_rows", False)


# Settings a run reads only under another: (key, whether this run reads it, what turns it on,
# refused or only warned of: one model.max_positions for a sweep over encodings is a design).
READ_ONLY_WITH = (
    ("data.train_join_max", lambda cfg: bool(cfg.data.get("train_join_share")),
     "data.train_join_share above 0", True),
    ("data.train_join_seed", lambda cfg: bool(cfg.data.get("train_join_share")),
     "data.train_join_share above 0", True),
    ("model.max_positions", _learned_table, "a learned position table (position=learned or "
     "learned_shape; other encodings are computed at any position)", False),
    ("trainer.dist_timeout_minutes", lambda cfg: int(os.environ.get("WORLD_SIZE", 1)) > 1,
     "several processes (torchrun, or a SLURM launcher's tasks); this one trains alone",
     False),  # warned (probe p-35): a launch command is written once for any world size
)  # fmt: skip


# Settings that, given, leave another unread: (given, unread, why). `trainer.update_freq=2`
# beside the config's effective_tokens trained 2 batches an update and logged the tokens' target
# as if it counted (probe p-3): warned of, and the log names what governs; not refused, as a
# config file may set both (the study's experiment does) and update_freq=1 is the tests' habit.
MAKES_UNREAD = (
    ("trainer.update_freq", "trainer.effective_tokens", "fixes the batches per update"),
)


def check_read_under(cfg: DictConfig, overrides: list[str] | None) -> None:
    """SettingError (or a warning) for a setting the command line gives that this run reads
    nowhere under its other settings (probe 16-7, 16-8, 16-10: trained without it, recorded as
    if it counted); a warning for one that leaves a set one unread (MAKES_UNREAD)."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides or [] if "=" in o}
    for key, unread, why in MAKES_UNREAD:
        value, other = OmegaConf.select(cfg, key), OmegaConf.select(cfg, unread)
        if key in given and value is not None and other is not None:
            logging.getLogger("train").warning(
                f"warning: {key}={value} {why}: {unread}={other} is not read (pass "
                f"{unread}=null with it to say so)"
            )
    for key, reads, turned_on_by, refused in READ_ONLY_WITH:
        if key in given and not reads(cfg):
            if refused:
                raise SettingError(f"{key}: read only with {turned_on_by}; remove it or set that")
            logging.getLogger("train").warning(
                f"warning: {key} is read only with {turned_on_by}: this run does not read it"
            )


def check_training_settings(cfg: DictConfig, overrides: list[str] | None = None) -> None:
    """Raise SettingError naming the first setting that is inf or nan or out of range (RANGES),
    or one read nowhere (check_read; overrides: the command line's, check_read_under)."""
    check_finite(cfg)
    check_read(cfg)
    check_read_under(cfg, overrides)
    _check("seed", cfg.seed, 0, False, True, "the run's random seed")
    for key, (minimum, optional, integer, hint) in RANGES.items():
        section, name = key.split(".")
        if name in cfg[section]:
            _check(key, cfg[section][name], minimum, optional, integer, hint)
    for key, hint in PROBABILITIES.items():
        section, name = key.split(".")
        if name in cfg[section]:
            _check_probability(key, cfg[section][name], hint)
    _check_betas(cfg.optim.get("betas", [0.9, 0.98]))
    for key in BOOLEANS:
        section, name = key.split(".")
        value = cfg[section].get(name, False)
        if not isinstance(value, bool):
            raise SettingError(f"{key}={value}: pass true or false")
    if cfg.optim.clip_norm is not None:
        _check("optim.clip_norm", cfg.optim.clip_norm, 1e-12, True, False, "null: no clipping")


def check_launcher_keys(hydra_cfg: DictConfig) -> None:
    """SettingError for a `hydra.launcher.<key>` the command line gives to a run without -m: no
    launcher runs to read it (probe p-40: `+hydra.launcher.timeout_min=5` accepted without a
    word). In a sweep the launcher itself refuses a key it does not take."""
    given = [o.split("=", 1)[0].lstrip("+~") for o in hydra_cfg.overrides.hydra if "=" in o]
    keys = [key for key in given if key.startswith("hydra.launcher.")]
    if keys and str(hydra_cfg.mode) != "RunMode.MULTIRUN":
        raise SettingError(
            f"{keys[0]}: read only by a sweep's launcher (train.py -m ...); this run launches "
            "nothing: remove it"
        )


def slurm_gpus_requested(launcher: DictConfig) -> bool:
    """Whether a submitit SLURM launcher config asks for GPUs (a count, a gpu gres, an extra)."""
    extra = launcher.get("additional_parameters") or {}
    counts = [launcher.get(key) for key in ("gpus_per_node", "gpus_per_task")]
    counts += [extra.get(key) for key in ("gpus", "gpus_per_node", "gpus_per_task")]
    gres = f"{launcher.get('gres') or ''} {extra.get('gres') or ''}"
    return any(counts) or "gpu" in gres


def check_launcher_gpus(launcher: DictConfig, device, name: str | None = None) -> None:
    """SettingError for a SLURM launcher that asks for no GPU while trainer.device is not cpu.

    trainer.device=auto would train each job on its node's CPUs without a word (the plugin's own
    hydra/launcher=submitit_slurm asks for none), cuda would fail in every job. name: the
    launcher's config choice, for the message.
    """
    target = str(launcher.get("_target_") or "")
    if not target.endswith("SlurmLauncher") or str(device).split(":")[0] == "cpu":
        return
    if slurm_gpus_requested(launcher):
        return
    outcome = "train on its node's CPUs" if str(device) == "auto" else "fail without a GPU"
    gpus = launcher.get("gpus_per_node")
    raise SettingError(
        f"hydra/launcher={name or target} asks SLURM for no GPU (hydra.launcher.gpus_per_node="
        f"{'null' if gpus is None else gpus}) but trainer.device={device}: every job would "
        f"{outcome}; pass hydra.launcher.gpus_per_node=<n> hydra.launcher.tasks_per_node=<n> (one "
        "task per GPU, as hydra/launcher=slurm does), or trainer.device=cpu to train on CPUs"
    )


def sinfo_gres(partition: str | None) -> list[str] | None:
    """The generic resources (gres) of the SLURM cluster's nodes, one entry a node group, as
    `sinfo -o %G` gives them; None where sinfo is missing or answers nothing (no controller)."""
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        return None
    command = [sinfo, "-h", "-o", "%G", *(["-p", partition] if partition else [])]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.split() if done.returncode == 0 and done.stdout.strip() else None


def check_cluster_gpus(launcher: DictConfig, name: str | None, gres=None) -> None:
    """SettingError for a SLURM launcher asking for GPUs that no node of the cluster (or of its
    partition) has: sbatch would refuse the sweep with a traceback after making its folder.
    gres: what answers for the cluster (sinfo_gres, looked up when called)."""
    target = str(launcher.get("_target_") or "")
    if not target.endswith("SlurmLauncher") or not slurm_gpus_requested(launcher):
        return
    partition = launcher.get("partition")
    found = (gres or sinfo_gres)(str(partition) if partition else None)
    if found is None or any("gpu" in entry for entry in found):
        return
    where = f"partition {partition}" if partition else "node of this SLURM cluster"
    raise SettingError(
        f"hydra/launcher={name or target} asks for GPUs (hydra.launcher.gpus_per_node="
        f"{launcher.get('gpus_per_node')}) but no {where} has any (sinfo gres: "
        f"{', '.join(found)}): pass hydra.launcher.partition=<one with GPUs>, or train on its "
        "CPUs with hydra.launcher.gpus_per_node=0 hydra.launcher.tasks_per_node=1 "
        "trainer.device=cpu"
    )


class LauncherGpuCheck(Callback):
    """A Hydra callback: check_launcher_gpus before a sweep submits anything, one `error:` line.

    It exits with status 1; configs/train.yaml installs it before RunDirectoryCheck, which makes
    the sweep folder, so a refused sweep leaves the disk as it was.
    """

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        choice = OmegaConf.select(config, "hydra.runtime.choices", default=None) or {}
        try:
            check_launcher_gpus(
                config.hydra.launcher, config.trainer.device, choice.get("hydra/launcher")
            )
            check_cluster_gpus(config.hydra.launcher, choice.get("hydra/launcher"))
        except SettingError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)
