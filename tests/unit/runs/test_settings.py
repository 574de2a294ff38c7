"""runs/settings.py and runs/resume.py: settings refused before any data is read (or submitted)."""

import contextlib
import copy
import io

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

import runs.settings
from runs.resume import KEEP_THE_MATH, setting_differences
from runs.settings import SettingError, check_training_settings
from tests.conftest import CONFIG_DIR, ROOT, compose_config


@pytest.mark.parametrize(
    "override, expected",
    [
        ("optim.warmup=0", "optim.warmup=0: pass a whole number >= 1"),
        ("optim.warmup=-5", "optim.warmup=-5: pass a whole number >= 1"),
        ("trainer.eval_every=0", "trainer.eval_every=0: pass a whole number >= 1"),
        ("trainer.log_every=0", "trainer.log_every=0: pass a whole number >= 1"),
        ("trainer.update_freq=-1", "trainer.update_freq=-1: pass a whole number >= 1 or null"),
        ("trainer.max_steps=-1", "trainer.max_steps=-1: pass a whole number >= 1"),
        ("trainer.max_minutes=0", "trainer.max_minutes=0: pass a number >= 1e-09 or null"),
        ("optim.label_smoothing=1.0", "optim.label_smoothing=1.0: pass a number from 0"),
        ("trainer.keep_last=1.5", "trainer.keep_last=1.5: pass a whole number >= 1"),
    ],
)
def test_out_of_range_settings_are_one_line_naming_the_key(override, expected):
    with pytest.raises(SettingError) as raised:
        check_training_settings(compose_config([override]))
    assert str(raised.value).startswith(expected) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "override, key",
    [
        ("position.base=inf", "position.base=inf"),
        ("position.base=-inf", "position.base=-inf"),
        ("optim.betas=[0.9,nan]", "optim.betas[1]=nan"),
        ("trainer.max_minutes=inf", "trainer.max_minutes=inf"),
        ("+model.new_scale=inf", "model.new_scale=inf"),  # any key, not only those listed
    ],
)
def test_a_non_finite_setting_is_one_line_naming_the_key(override, key):
    with pytest.raises(SettingError) as raised:
        check_training_settings(compose_config(["experiment=quickstart", override]))
    assert str(raised.value).startswith(f"{key}: pass a finite number"), raised.value
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["+foo=1"], "foo: train.py reads no such setting"),  # probe 16-21
        (["position=learned", "+position.base=500"],
         "position.base: LearnedPositionEncoding takes no base"),  # 16-22
        (["+position.scaling=linear"], "position.scaling: SinusoidalPositionEncoding takes no"),
        (["+data.files.train.en=/a/train.en"],  # 16-23: trained on the toy corpus
         "data.files: this corpus (data.toy.toy_corpus) reads no data.files (the data configs "
         "that do: data=text)"),
        (["data=multi30k", "+data.files.train.en=/a"], "data.files: this corpus (data.corpus.l"),
        (["+data.path=/a"], "data.path: this corpus (data.toy.toy_corpus) reads no data.path "
         "(the data configs that do: data=multi30k or data=wmt14_en_de)"),
        (["+data.corpus.size=5"], "data.corpus.size: toy_corpus takes no size (it takes seed,"),
        (["+trainer.foo=1"], "trainer.foo: train.py reads no such setting (configs/trainer/ "),
        (["+optim.momentum=0.9"], "optim.momentum: train.py reads no such setting (configs/op"),
        (["+model.foo=1"], "model.foo: Transformer takes no foo (it takes vocab_size"),  # 16-3
    ],
)  # fmt: skip
def test_a_setting_read_nowhere_is_one_line_naming_it(overrides, expected):
    with pytest.raises(SettingError) as raised:
        check_training_settings(compose_config(overrides))
    assert str(raised.value).startswith(expected) and "\n" not in str(raised.value)
    for name in (p.stem for p in (CONFIG_DIR / "position").glob("*.yaml")):
        check_training_settings(compose_config([f"position={name}"]))  # each group is read
    for name in ("toy", "multi30k", "wmt14_en_de"):  # (text's files are ??? until given)
        check_training_settings(compose_config([f"data={name}"]))  # and each corpus's keys


@pytest.mark.parametrize("key", ["data.train_join_max=9", "data.train_join_seed=7"])
def test_a_setting_read_only_under_another_is_refused_without_it(key, caplog):
    """Probe 16-7, 16-8: the joined-lines settings without data.train_join_share trained
    without them and were recorded; 16-10: model.max_positions beside sinusoids is warned of
    (a sweep over encodings shares it)."""
    cfg = compose_config(["experiment=quickstart", key])
    with pytest.raises(SettingError, match=f"^{key.split('=')[0]}: read only with data.train_j"):
        check_training_settings(cfg, [key])
    check_training_settings(compose_config(["data.train_join_share=0.2", key]), [key])
    with pytest.raises(SettingError, match="read only with data.train_join_share above 0"):
        check_training_settings(compose_config(["data.train_join_share=0", key]), [key])  # p-1
    check_training_settings(cfg)  # set by a config file (a study's condition), not refused
    check_training_settings(compose_config(["model.max_positions=8"]), ["model.max_positions=8"])
    assert "model.max_positions is read only with a learned position table" in caplog.text
    caplog.clear()
    learned = compose_config(["position=learned", "model.max_positions=8"])
    check_training_settings(learned, ["model.max_positions=8"])
    assert "read only" not in caplog.text


def test_a_collective_timeout_on_a_single_process_is_warned_of(caplog, monkeypatch):
    """Probe p-35: `trainer.dist_timeout_minutes=5` on one process, read by nothing, unsaid."""
    given = ["trainer.dist_timeout_minutes=5"]
    cfg = compose_config(["experiment=quickstart", *given])
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    check_training_settings(cfg, given)
    assert "trainer.dist_timeout_minutes is read only with several processes" in caplog.text
    caplog.clear()
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it
    check_training_settings(cfg, given)
    assert "read only" not in caplog.text


def test_a_setting_that_leaves_a_set_one_unread_is_warned_of(caplog):
    """Probe p-3: `trainer.update_freq=2` beside the config's effective_tokens trained 2 batches
    an update and logged the tokens' target as if it counted."""
    given = ["trainer.update_freq=2"]
    cfg = compose_config(["experiment=quickstart", *given])
    check_training_settings(cfg, given)
    warned = "trainer.update_freq=2 fixes the batches per update: trainer.effective_tokens=4096"
    assert f"{warned} is not read" in caplog.text
    caplog.clear()
    check_training_settings(cfg)  # both set by config files (the study's experiment): no word
    cfg = compose_config(["experiment=quickstart", *given, "trainer.effective_tokens=null"])
    check_training_settings(cfg, [*given, "trainer.effective_tokens=null"])
    assert "not read" not in caplog.text


def test_a_number_given_as_a_string_is_refused():
    """Probe j-1: `seed=01` (a string to Hydra) passed, then failed in torch.manual_seed."""
    with pytest.raises(SettingError, match=r"^seed=01: pass a whole number"):
        check_training_settings(compose_config(["experiment=quickstart", "seed=01"]))


def test_every_experiment_passes_with_a_step_budget_and_no_minute_budget():
    """Experiments compare like with like: load may change a run's wall time, never its steps."""
    experiments = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))
    assert "quickstart" in experiments and "pe_study_multi30k" in experiments
    for experiment in experiments:
        cfg = compose_config([f"experiment={experiment}"])
        check_training_settings(cfg)
        assert cfg.trainer.max_minutes is None and cfg.trainer.max_steps, experiment


def test_resume_differences_tell_trajectory_from_bookkeeping():
    stored = {"seed": 1, "optim": {"warmup": 4000}, "trainer": {"max_steps": 100, "log_every": 10}}
    wanted = {"seed": 2, "optim": {"warmup": 10}, "trainer": {"max_steps": 200, "log_every": 5}}
    refused, allowed = setting_differences(stored, wanted)
    assert refused == ["optim.warmup: 4000 -> 10", "seed: 1 -> 2"]
    assert allowed == ["trainer.log_every: 10 -> 5", "trainer.max_steps: 100 -> 200"]
    added, _ = setting_differences(stored, {**stored, "data": {"max_len": 64}})
    assert added == ["data.max_len: <absent> -> 64"]  # a key the checkpoint lacks is refused


def test_the_allowed_keys_exist_in_the_configs():
    cfg = compose_config(["experiment=quickstart"])
    for key in KEEP_THE_MATH:
        section, _, name = key.partition(".")
        assert section in cfg and (not name or name in cfg[section]), key


def test_multi30k_at_another_location_keeps_the_math_another_corpus_does_not():
    """A record trained on the text folder (../shared/data/multi30k, load_text_pairs) against
    today's hub default: the location is allowed; other data, and settings, are still refused."""
    record = ROOT / "results" / "archive" / "pe_study" / "runs" / "all" / "sinusoidal" / "seed-1"
    stored = OmegaConf.to_container(OmegaConf.load(record / ".hydra" / "config.yaml"))
    assert stored["data"]["corpus"]["_target_"] == "data.corpus.load_text_pairs"
    for data_path in ("bentrevett/multi30k", "../shared/data/multi30k_hub_layout"):
        overrides = [f"data.path={data_path}", "seed=2", "run_dir=x"]
        wanted = compose_config(["experiment=pe_study_multi30k", *overrides])
        wanted = OmegaConf.to_container(wanted, resolve=True)
        refused, allowed = setting_differences(stored, wanted)
        assert refused == ["seed: 1 -> 2"]
        assert f"data.path: ../shared/data/multi30k -> {data_path}" in allowed
    other = copy.deepcopy(stored)
    other["data"]["corpus"]["files"]["train"]["en"] = "../shared/data/multi30k/train.fr"
    refused, _ = setting_differences(stored, other)
    assert refused == [
        "data.corpus.files.train.en: ../shared/data/multi30k/train.en -> "
        "../shared/data/multi30k/train.fr"
    ]


def launcher_config(*overrides: str):
    """train.yaml with its hydra node, as a sweep's callbacks see it."""
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        return compose("train", overrides=list(overrides), return_hydra_config=True)


def gpu_check_refuses(cfg) -> str | None:
    """The error line train.yaml's launcher_gpu_check prints (and exits 1 with), else None."""
    check, err = instantiate(cfg.hydra.callbacks.launcher_gpu_check), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
        check.on_multirun_start(config=cfg)
        return None
    return err.getvalue()


@pytest.mark.parametrize("device", ["auto", "cuda"])
def test_a_slurm_sweep_without_gpus_on_a_gpu_device_is_one_line(device):
    """The plugin's own hydra/launcher=submitit_slurm asks for no GPU and one task."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cfg = launcher_config("hydra/launcher=submitit_slurm", f"trainer.device={device}")
    line = gpu_check_refuses(cfg)
    assert line is not None and line.count("\n") == 1 and line.startswith("error: "), line
    asked = "asks SLURM for no GPU (hydra.launcher.gpus_per_node=null)"
    assert f"hydra/launcher=submitit_slurm {asked} but trainer.device={device}: " in line
    assert "hydra.launcher.gpus_per_node=<n>" in line and "trainer.device=cpu" in line
    assert list(cfg.hydra.callbacks)[0] == "launcher_gpu_check"  # before a folder is made


@pytest.mark.parametrize(
    "overrides",
    [
        ["hydra/launcher=slurm", "experiment=table3_base"],  # 8 GPUs, one task each
        ["hydra/launcher=submitit_slurm", "trainer.device=cpu"],  # CPUs, asked for
        ["hydra/launcher=submitit_slurm", "hydra.launcher.gpus_per_node=2"],
        ["hydra/launcher=submitit_slurm", "hydra.launcher.gres=gpu:a100:1"],
        ["hydra/launcher=submitit_slurm", "+hydra.launcher.additional_parameters.gpus=1"],
        ["hydra/launcher=submitit_local"],  # not SLURM: this machine's own devices
    ],
)
def test_a_sweep_that_asks_for_gpus_or_cpus_passes(overrides, monkeypatch):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    monkeypatch.setattr(runs.settings, "sinfo_gres", lambda partition: ["gpu:a100:8"])
    assert gpu_check_refuses(launcher_config(*overrides)) is None


@pytest.mark.parametrize("partition", [None, "cpus"])
def test_a_sweep_asking_for_gpus_no_node_has_is_one_line(partition):
    """sbatch would refuse it with a traceback, after the sweep folder was made (was)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    cfg = launcher_config("hydra/launcher=slurm", "experiment=table3_base")
    asked = []

    def gres(part):
        asked.append(part)
        return ["(null)", "mps:2"]

    if partition:
        cfg.hydra.launcher.partition = partition
    with pytest.raises(runs.settings.SettingError) as refused:
        runs.settings.check_cluster_gpus(cfg.hydra.launcher, "slurm", gres)
    where = f"no partition {partition}" if partition else "no node of this SLURM cluster"
    message = str(refused.value)
    assert f"asks for GPUs (hydra.launcher.gpus_per_node=8) but {where} has any" in message
    assert "(sinfo gres: (null), mps:2)" in message and asked == [partition]
    for found in (None, ["gpu:1", "(null)"]):  # no answer (no controller), or a GPU node
        runs.settings.check_cluster_gpus(cfg.hydra.launcher, "slurm", lambda part, f=found: f)
