"""Train a Transformer the paper's way (§5): what `python train.py` runs, as `train(cfg)`.

One loop, top to bottom: data -> model -> Adam with the §5.3 schedule -> token-budget batches
accumulated to the effective batch -> label-smoothed loss -> periodic validation (dev PPL),
checkpoints and metrics. Runs on a CPU, one GPU, or many under `torchrun` (DDP); resumes from
the newest readable checkpoint in `<run_dir>/checkpoints/` when the run directory is given again.
"""

import logging
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from itertools import islice
from pathlib import Path

import torch
import torch.distributed as dist
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from common.errors import UserError
from common.files import write_json
from data.batching import TokenBatchSampler, UpdatePlan, collate, plan_update
from data.corpus import PreparedData, absolute_local_paths, prepare_data
from data.tokenizer import BOS_ID, PAD_ID
from evaluation.bleu import sacrebleu_score
from evaluation.evaluate import evaluate_run
from evaluation.perplexity import perplexity
from evaluation.translate import translate
from model.transformer import build_model, count_parameters
from runs.checkpoint import (
    RUN_TOKENIZER,
    check_compatible,
    load_latest_checkpoint,
    prune_checkpoints,
    remove_temporary_files,
)
from runs.device import machine_description, resolve_device, resolve_precision, use_cuda_device
from runs.directory import (
    LOCK_FILE,
    EarlierRecordsError,
    RunDirectoryLock,
    discard_records,
    earlier_records,
    folder_name,
    log_file_paths,
    start_log_files,
)
from runs.events import launch_suffix, record_launch_file
from runs.preemption import StopSignals, TrainingInterrupted
from runs.record import code_version, end_segment, read_segments, start_segment
from runs.resume import ResumeError, changes_the_rounding, check_resume, stop_reason
from runs.run import Run, run_id
from runs.settings import check_launcher_keys, check_training_settings
from runs.state import TrainingState
from training.optim import noam_adam
from training.step import DivergenceError, StepResult, train_step

ROOT = Path(__file__).resolve().parents[1]  # the checkout: configs/ beside train.py

log = logging.getLogger("train")
# when this process started (about: when this module loaded); run folders made later are its own
PROCESS_START = time.time()

# What score_completed_run writes (evaluate.yaml's defaults: validation, last.pt, beam 4).
END_EVALUATION = "validation-last-beam4"


def launch_overrides() -> list[str] | None:
    """This launch's command-line overrides (None without Hydra's runtime: train() in-process)."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else None


def process_rank() -> int:
    """This process's rank: torchrun's RANK, SLURM's task id under the submitit launcher, or 0."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm":
        return int(os.environ.get("SLURM_PROCID", 0))
    return 0


def on_rank_zero(value, otherwise=None):
    """value in the main process, otherwise elsewhere: a config resolver."""
    return value if process_rank() == 0 else otherwise


def launch_id() -> str:
    """This launch's process id (torchrun's agent's under torchrun): a config resolver.

    In the default run and sweep directories (configs/train.yaml), so two launches in the same
    second get two folders. Cached, so every job of a sweep resolves the same sweep folder.
    """
    return str(os.getppid() if "TORCHELASTIC_RUN_ID" in os.environ else os.getpid())


# Under torchrun only rank 0 writes Hydra's .hydra/ and train.log (configs/train.yaml).
OmegaConf.register_new_resolver("on_rank_zero", on_rank_zero, replace=True)
OmegaConf.register_new_resolver("launch_id", launch_id, replace=True, use_cache=True)
OmegaConf.register_new_resolver("folder_name", folder_name, replace=True)


def position_choice(position: DictConfig) -> str:
    """The name the position variant was chosen by: Hydra's choice (position=rope_base500k).

    Without Hydra's runtime (a config composed in-process), the configs/position YAML whose
    content equals the node, else the class name. Runs are compared by this name, so two YAMLs
    of one class (rope vs rope_base500k) stay two variants.
    """
    if HydraConfig.initialized():
        choice = HydraConfig.get().runtime.choices.get("position")
        if choice:
            return str(choice)
    wanted = OmegaConf.to_container(position, resolve=True)
    for path in sorted((ROOT / "configs" / "position").glob("*.yaml")):
        if OmegaConf.to_container(OmegaConf.load(path), resolve=True) == wanted:
            return path.stem
    return str(position._target_).rsplit(".", 1)[-1]


def start_process(trainer: DictConfig) -> tuple[int, int, torch.device]:
    """This process's rank, the world size and its device; joins the DDP group under torchrun."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = resolve_device(trainer.device, int(os.environ.get("LOCAL_RANK", 0)), "trainer.device")
    if str(trainer.device) == "auto" and device.type == "cpu" and rank == 0:
        log.warning(
            f"trainer.device=auto: no CUDA GPU found (torch {torch.__version__}, CUDA build "
            f"{torch.version.cuda}): training on the CPU"
        )
    if world > 1 and not dist.is_initialized():
        timeout = timedelta(minutes=float(trainer.dist_timeout_minutes))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timeout)
    if trainer.num_threads:
        torch.set_num_threads(trainer.num_threads)
    use_cuda_device(device)  # importable, so the SLURM launcher can pickle this function
    return rank, world, device


def load_data(cfg: DictConfig, rank: int, tokenizer_path=None) -> PreparedData:
    """The tokenized, cleaned corpus; data.json on rank 0.

    Every rank calls prepare_data; the first to take the cache's lock trains and encodes, the
    others wait on that file lock (no collective, so no trainer.dist_timeout_minutes to outlast)
    and then map the same Arrow files. tokenizer_path: a resumed run's own tokenizer.
    """
    data = prepare_data(
        cfg.data, cfg.cache_dir, log.info, tokenizer_path, required_splits=("train", "validation")
    )
    if rank == 0:  # the run's own copy: evaluation and resume need no cache (README)
        data.tokenizer = data.tokenizer.copy_to(Path(cfg.run_dir) / RUN_TOKENIZER)
    return data


def write_hydra_record(cfg: DictConfig) -> None:
    """Hydra's .hydra/ (config.yaml, hydra.yaml, overrides.yaml) in its output directory.

    Hydra's own writing is off (configs/train.yaml: hydra.output_subdir null): these files are
    written here, once the launch passed its checks, so a refused launch leaves them as they were.
    """
    if not HydraConfig.initialized():  # train(cfg) called from Python: no Hydra output
        return
    hydra_cfg = HydraConfig.instance().cfg  # {"hydra": ...}, as Hydra saves it
    folder = Run(HydraConfig.get().runtime.output_dir).hydra_dir
    folder.mkdir(parents=True, exist_ok=True)
    task_overrides = hydra_cfg.hydra.overrides.task
    for name, node in [("config", cfg), ("hydra", hydra_cfg), ("overrides", task_overrides)]:
        (folder / f"{name}.yaml").write_text(OmegaConf.to_yaml(node), encoding="utf-8")


def open_records(cfg: DictConfig, resumed: dict | None, data: PreparedData, main_rank) -> None:
    """The launch is accepted: start train.log, write .hydra/ and data.json (rank 0).

    With trainer.start_over=true, an earlier run's records (no checkpoint: open_run) go first.
    """
    run_dir = Path(cfg.run_dir)
    if main_rank and resumed is None and (records := earlier_records(run_dir)):
        discard_records(run_dir, log_file_paths())
        log.warning(f"trainer.start_over=true: deleted the earlier run's {', '.join(records)}")
    start_log_files()  # every rank: the lines that waited (other ranks': /dev/null)
    if not main_rank:
        return
    write_hydra_record(cfg)
    sizes = {name: len(split) for name, split in data.splits.items()}
    tokenizer = {"path": str(data.tokenizer.path), "vocab_size": data.tokenizer.vocab_size}
    # what the run read, by content: each split's raw text, the subword ids it trains on, the
    # tokenizer (a study compares records by these, never by paths)
    fingerprints = {
        "text": data.texts,
        "train_ids": data.fingerprint(),
        "tokenizer_sha256": data.tokenizer.sha256,
    }
    summary = {
        "train_cleaning": data.counts,
        "splits": sizes,
        "tokenizer": tokenizer,
        "fingerprints": fingerprints,
    }
    write_json(Run(run_dir).data_file, summary)


def check_data(
    resumed: dict | None, data: PreparedData, corpus: dict, own_tokenizer: Path | None = None
) -> None:
    """CheckpointError or ResumeError if the checkpoint was trained with another tokenizer or on
    other training pairs (corpus: their fingerprint); own_tokenizer: the run's tokenizer file
    this resume read, named where it is not the checkpoint's."""
    if resumed is None:
        return
    trained_with = str((resumed.get("tokenizer") or {}).get("sha256"))
    if own_tokenizer is not None and data.tokenizer.sha256 != trained_with:
        raise ResumeError(
            f"checkpoint {resumed['file']} was trained with the tokenizer of sha256 "
            f"{trained_with[:12]}, but the run's {own_tokenizer} has "
            f"{data.tokenizer.sha256[:12]} (replaced since): restore that file or set a new run_dir"
        )
    check_compatible(resumed, resumed["file"], tokenizer_sha256=data.tokenizer.sha256)
    trained_on = resumed.get("corpus")
    if trained_on is None:  # a checkpoint written before checkpoints kept one
        log.warning(
            f"checkpoint {resumed['file']} records no fingerprint of its training corpus: "
            "the data this launch reads cannot be checked against it"
        )
    elif trained_on != corpus:
        raise ResumeError(
            f"checkpoint {resumed['file']} was trained on another training corpus "
            f"({trained_on.get('pairs')} pairs, sha256 {str(trained_on.get('sha256'))[:12]} -> "
            f"{corpus['pairs']} pairs, sha256 {corpus['sha256'][:12]}): resume with the data it "
            "was trained on or set a new run_dir"
        )
    validated_on, dev = resumed.get("dev_corpus"), dev_fingerprint(data)
    if None not in (validated_on, dev) and validated_on != dev:  # None: kept before 2026-12-07
        raise ResumeError(
            f"checkpoint {resumed['file']} was validated on another dev set "
            f"({validated_on.get('pairs')} pairs, sha256 {str(validated_on.get('sha256'))[:12]} "
            f"-> {dev['pairs']} pairs, sha256 {dev['sha256'][:12]}): its dev PPL curve and "
            "best.pt would mix two dev sets; resume with the dev set it used or set a new run_dir"
        )


def dev_fingerprint(data: PreparedData) -> dict | None:
    """The validation split's text fingerprint (None where the data holds no text ones)."""
    return (data.texts or {}).get("validation")


def checkpoint_bytes(model: torch.nn.Module) -> int:
    """About what one checkpoint takes: the weights and Adam's two moments, plus 1 MiB."""
    return 3 * sum(p.numel() * p.element_size() for p in model.parameters()) + 2**20


def check_space(run_dir: Path, needed: int, free: int) -> None:
    """UserError unless free bytes on run_dir's disk hold a checkpoint of needed bytes."""
    if free < needed:
        raise UserError(
            f"the disk of {run_dir} has {free / 2**20:,.1f} MiB free but a checkpoint takes "
            f"about {needed / 2**20:,.1f} MiB: free space there or set run_dir to another disk"
        )


def build_state(
    cfg: DictConfig, data: PreparedData, device, rank: int, world: int, precision: str = "fp32"
) -> tuple[TrainingState, UpdatePlan]:
    """A fresh TrainingState (the model (§3), Adam with the §5.3 schedule, the batch sampler,
    fp16's gradient scaler) and the update plan: the per-rank batch budget and accumulation."""
    model = build_model(cfg.model, cfg.position, data.tokenizer.vocab_size, PAD_ID).to(device)
    optim = cfg.optim
    optimizer, schedule = noam_adam(
        model.parameters(), cfg.model.d_model, optim.betas, optim.eps, optim.warmup, optim.lr_scale
    )
    src_lengths, tgt_lengths = data.split_lengths("train")  # read once, from Arrow
    trainer = cfg.trainer
    plan = plan_update(  # ~effective_tokens real target tokens per update on any world size
        src_lengths, tgt_lengths, trainer.effective_tokens, cfg.data.max_tokens, world,
        trainer.update_freq,
    )  # fmt: skip
    log.info(
        f"batch: {world} rank(s) x {plan.update_freq} batch(es) of <= {plan.max_tokens} tokens a "
        f"side = {plan.real_tokens:,.0f} real target tokens per update expected "
        + (
            f"(trainer.update_freq={trainer.update_freq}: trainer.effective_tokens not read)"
            if trainer.update_freq
            else f"(trainer.effective_tokens={trainer.effective_tokens})"
        )
    )
    sampler = TokenBatchSampler(
        src_lengths, tgt_lengths, plan.max_tokens, seed=cfg.seed, num_replicas=world, rank=rank
    )
    for split in ("train", "validation"):  # fail now, not at a long batch
        src, tgt = data.split_lengths(split)
        model.check_lengths(int(src.max(initial=1)), int(tgt.max(initial=1)))
    # not in the paper: fp16 gradients underflow without a loss scale (torch's defaults)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    state = TrainingState(model, optimizer, schedule, sampler, device, rank, world, scaler=scaler)
    return state, plan


def resume(state: TrainingState, resumed: dict | None, cfg, main_rank) -> None:
    """Load the checkpoint open_run found into state (if any), after a killed save's leftovers.

    check_data has checked the checkpoint against the data.
    """
    run = Run(cfg.run_dir)
    if main_rank:  # a killed save's temporary files; metrics.json returns when this work completes
        remove_temporary_files(run.checkpoints)
        run.metrics_file.unlink(missing_ok=True)
    if resumed is not None:
        state.load_state_dict(resumed)
        log.info(f"resumed from step {state.step}")


def batches(sampler: TokenBatchSampler, train_set, max_epochs: int | None, device):
    """Training batches, epoch after epoch, from where the sampler stands (None: no end)."""
    loader_rng = torch.Generator()  # its own: a new loader must not draw from dropout's RNG
    while max_epochs is None or sampler.state_dict()["epoch"] < max_epochs:
        loader = DataLoader(
            train_set,
            batch_sampler=sampler,
            collate_fn=partial(collate, pad_id=PAD_ID, bos_id=BOS_ID),
            generator=loader_rng,
            pin_memory=device.type == "cuda",
        )
        yield from loader
        sampler.set_epoch(sampler.state_dict()["epoch"] + 1)


def peak_memory_gib(device: torch.device) -> float | None:
    """Peak CUDA memory allocated, or the process's peak resident memory on a CPU (None where
    the OS has no getrusage: Windows)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    try:
        # resource deferred: POSIX only, so that training imports on every OS
        import resource
    except ImportError:
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def log_progress(writer: SummaryWriter, step: int, values: dict[str, float], eta: float) -> None:
    """One log line (loss, nll, lr, tok/s, real target tok/update, ETA) and TensorBoard scalars."""
    log.info(
        f"step {step} loss {values['loss']:.3f} nll {values['nll']:.3f} lr {values['lr']:.2e} "
        f"tok/s {values['tokens_per_s']:.0f} tok/update {values['target_tokens_per_update']:.0f} "
        f"ETA {eta:.1f} min"
    )
    for name, value in values.items():
        writer.add_scalar(f"train/{name}", value, step)


class Progress:
    """The progress bar, the smoothed training loss and, on the main rank, the periodic log."""

    def __init__(
        self, trainer: DictConfig, step: int, writer: SummaryWriter | None, device, loss_avg=None
    ):
        """loss_avg: the smoothed loss the checkpoint resumed from kept (None: a new run)."""
        self.trainer, self.writer, self.device = trainer, writer, device
        show = writer is not None and sys.stderr.isatty()
        self.bar = tqdm(total=trainer.max_steps, initial=step, disable=not show)
        self.start = self.interval_start = time.monotonic()
        self.interval_tokens, self.interval_steps, self.loss_avg = 0, 0, loss_avg

    def minutes(self) -> float:
        """Minutes since this process started training."""
        return (time.monotonic() - self.start) / 60

    def update(self, step: int, result: StepResult, lr: float) -> None:
        """Count one update; every trainer.log_every steps, a log line and TensorBoard scalars."""
        loss = result.loss_sum / result.tokens
        self.loss_avg = loss if self.loss_avg is None else 0.98 * self.loss_avg + 0.02 * loss
        self.interval_tokens += result.tokens
        self.interval_steps += 1
        tok_s = self.interval_tokens / (time.monotonic() - self.interval_start)
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{self.loss_avg:.3f}", tok_s=f"{tok_s:.0f}")
        if self.writer is None or step % self.trainer.log_every:
            return
        step_s = (time.monotonic() - self.interval_start) / self.interval_steps
        eta = (self.trainer.max_steps - step) * step_s / 60
        if self.trainer.max_minutes:
            eta = min(eta, self.trainer.max_minutes - self.minutes())
        values = {
            "loss": self.loss_avg,
            "nll": result.nll_sum / result.tokens,
            "lr": lr,
            "grad_norm": result.grad_norm,
            "tokens_per_s": tok_s,
            "target_tokens_per_update": self.interval_tokens / self.interval_steps,
            "step_s": step_s,
        }
        memory = peak_memory_gib(self.device)
        if memory is not None:
            values["memory_gib"] = memory
        log_progress(self.writer, step, values, eta)
        self.interval_tokens, self.interval_steps = 0, 0
        self.interval_start = time.monotonic()


def skipped_update(bad_steps: int, step: int, ckpt_dir: Path, scaler=None) -> None:
    """Warn of a skipped non-finite update; the 10th in a row stops the run with DivergenceError.

    scaler: fp16's GradScaler, which halved its loss scale after the overflow (said in the line).
    """
    scale = f"; fp16 loss scale now {scaler.get_scale():g}" if scaler is not None else ""
    log.warning(
        f"step {step + 1}: non-finite loss or gradient, update skipped ({bad_steps} in a row)"
        f"{scale}"
    )
    if bad_steps >= 10:
        raise DivergenceError(
            f"{bad_steps} non-finite updates in a row at step {step + 1}: lower "
            f"optim.lr_scale or set optim.clip_norm; the last good checkpoint is in {ckpt_dir}"
        )


def save(state: TrainingState, run_info: dict, run: Run, name: str) -> None:
    """Rank 0 writes the training state and what evaluation needs (config, tokenizer) to
    checkpoints/<name>.pt, recorded in segments.json (runs.Run.save_checkpoint).

    Every rank calls it: the state holds every rank's RNG (runs/state.py gathers them).
    """
    snapshot = state.state_dict()
    if state.rank == 0:
        run.save_checkpoint(snapshot | run_info, name)


def save_step(state: TrainingState, run_info: dict, run: Run, keep_last: int) -> None:
    """step_<step>.pt (the files averaging reads) and last.pt; the oldest step files pruned."""
    save(state, run_info, run, f"step_{state.step}")
    save(state, run_info, run, "last")
    if state.rank == 0:
        prune_checkpoints(run.checkpoints, keep_last)


def checkpoint_due(trainer: DictConfig, step: int, last_save: float, world=1, device=None):
    """What to save after this step: "step" (step_<n>.pt and last.pt), "last" or None.

    Step files every trainer.save_every_steps, evenly spaced for Table 2 averaging; without it
    every save_every_minutes (the paper: 10 minutes). With both, the clock refreshes last.pt only.
    Under DDP the ranks' clocks differ: they take the decision of the most advanced one.
    """
    minutes, every = trainer.save_every_minutes, trainer.save_every_steps
    if every and step % every == 0:
        return "step"
    by_time = int(bool(minutes) and time.monotonic() - last_save > 60 * minutes)
    if world > 1 and minutes:  # a save gathers every rank's RNG: all ranks must save together
        flag = torch.tensor([by_time], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        by_time = int(flag.item())
    if by_time:
        return "last" if every else "step"
    return None


def resume_command(run_dir: Path) -> str:
    """The command line that resumes this run: its overrides and its run directory."""
    if not HydraConfig.initialized():  # train(cfg) called from Python
        return f"train(cfg) again with run_dir={run_dir}"
    overrides = list(HydraConfig.get().overrides.task)
    if not any(o.startswith(("run_dir=", "hydra.run.dir=")) for o in overrides):
        overrides.append(f"hydra.run.dir={run_dir}")
    return shlex.join(["python", "train.py", *overrides])


def stop_on_signal(
    stop: StopSignals, state: TrainingState, run_info: dict, run: Run, end_record: Callable
):
    """After a stop signal (any rank): last.pt, end_record (rank 0), the resume line, the raise."""
    if not (signum := stop.stop_signal(state.world, state.device)):
        return
    save(state, run_info, run, "last")
    if state.world > 1:
        dist.barrier()  # rank 0's checkpoint is on disk before any rank leaves
    resume = resume_command(run.path)
    interrupted = TrainingInterrupted(signum, state.step, run.checkpoint_file("last"), resume)
    if state.rank == 0:
        end_record(interrupted)  # before hand_over: submitit's handler exits the process
        log.warning(str(interrupted))  # the one line: where, and how to resume
    stop.hand_over(signum)  # under submitit: requeue the job (SIGUSR2)
    raise interrupted


def check_dev(
    state: TrainingState, data, cfg, precision: str, writer, run_info
) -> tuple[float, float | None]:
    """validate(); a new lowest dev perplexity is kept as best.pt."""
    ppl, bleu = validate(
        state.model, data.splits["validation"], data, cfg, precision, writer, state.step
    )
    if ppl < state.best_ppl:
        state.best_ppl = ppl  # rank 0 alone: best.pt keeps its RNG only (never resumed from)
        Run(cfg.run_dir).save_checkpoint(state.state_dict(all_ranks=False) | run_info, "best")
    return ppl, bleu


def stored_config(cfg: DictConfig) -> dict:
    """The resolved config a checkpoint keeps, its corpus paths absolute (found from anywhere)."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["data"] = absolute_local_paths(resolved["data"], os.getcwd())
    return resolved


def check_new_run(run_dir: Path, start_over: bool) -> None:
    """EarlierRecordsError if run_dir holds an earlier run's records and start_over is not set."""
    records = earlier_records(run_dir)
    if records and not start_over:
        raise EarlierRecordsError(
            f"run directory {run_dir} holds records of an earlier run ({', '.join(records)}) "
            "but no checkpoint to resume: pass trainer.start_over=true to delete them and "
            "train afresh there, or set a new run_dir"
        )


def open_run(cfg: DictConfig, precision: str, world: int, device) -> tuple[dict | None, list]:
    """The checkpoint to resume (None: a new run) and the harmless settings this launch changes.

    A change of any setting that alters the training is refused (runs.resume.check_resume);
    one that changes only the rounding (threads, device, compile) is allowed with a warning.
    """
    resumed = load_latest_checkpoint(Run(cfg.run_dir).checkpoints, warn=log.warning)
    if resumed is None:
        check_new_run(Path(cfg.run_dir), bool(cfg.trainer.get("start_over")))
        return None, []
    Run(cfg.run_dir).check_written(resumed, Path(resumed["file"]))  # not another run's file
    stored = {**resumed, "config": dict(resumed.get("config") or {})}
    stored["config"]["data"] = absolute_local_paths(stored["config"].get("data") or {}, os.getcwd())
    try:
        allowed = check_resume(  # (older checkpoints stored corpus paths as given)
            stored, resumed["file"], stored_config(cfg), precision, world, cfg.trainer.max_steps
        )
    except ResumeError as e:  # a launch with checkpoints resumes, start_over or not (1-7)
        if not cfg.trainer.get("start_over"):
            raise
        raise ResumeError(
            f"{e} (trainer.start_over=true clears only a run without checkpoints: move "
            "checkpoints/ away to train afresh there)"
        ) from e
    if cfg.trainer.get("start_over"):  # said, not refused: a requeue repeats the command line
        log.warning(
            f"trainer.start_over=true: this run has checkpoints (step {resumed.get('step')}), so "
            "it resumes; start_over clears only a run without checkpoints (probe 8-22)"
        )
    threads = resumed.get("num_threads")  # torch's CPU threads in use (set by start_process)
    if device.type == "cpu" and threads is not None and threads != torch.get_num_threads():
        allowed.append(f"CPU threads in use: {threads} -> {torch.get_num_threads()}")
    for change in allowed:
        if changes_the_rounding(change) or change.startswith("CPU threads"):
            log.warning(
                f"resume: {change}: allowed, but it changes the floating-point rounding: the "
                "weights will not be bitwise those of an uninterrupted run"
            )
        else:
            log.info(f"resume: {change} (a setting that leaves the training as it was)")
    return resumed, allowed


def end_evaluation_made(run: Run, metrics: dict) -> bool:
    """Whether score_completed_run's evaluation is on disk and current (runs.Run.is_current)."""
    try:
        scores = run.evaluation(END_EVALUATION)
    except (OSError, UserError):  # unreadable, or no JSON object: made again
        return False
    return scores is not None and run.is_current(scores, metrics.get("steps"))


def score_completed_run(cfg: DictConfig, precision: str) -> dict:
    """Table 3's evaluation of a finished run: validation, beam 4, last.pt (evaluate_at_end).

    Writes eval/validation-last-beam4.json as `python evaluate.py run_dir=<run>` would, searching
    in the precision the run trained in.
    """
    scores = evaluate_run(cfg.run_dir, f"device={cfg.trainer.device}", f"precision={precision}")
    log.info(
        f"evaluation {scores['name']} (step {scores['step']}): sacreBLEU {scores['bleu']:.2f}, "
        f"PPL {scores['ppl']:.3f} -> {Run(cfg.run_dir).evaluation_file(scores['name'])}"
    )
    return scores


def train(cfg: DictConfig) -> dict:
    """Train per cfg in cfg.run_dir and return the final metrics (also in metrics.json).

    Settings out of range are refused before anything is read. The main process holds the run
    directory's lock throughout: a second process refuses before it reads or changes anything.
    """
    run_dir = Path(cfg.run_dir)
    before = run_dir_before(run_dir)
    try:
        check_training_settings(cfg, launch_overrides())
        if HydraConfig.initialized():
            check_launcher_keys(HydraConfig.get())
        with RunDirectoryLock(cfg.run_dir) if process_rank() == 0 else nullcontext():
            return train_holding_lock(cfg)
    except UserError:
        if process_rank() == 0:
            forget_refused_launch(run_dir, *before)
        raise


def run_dir_before(run_dir: Path) -> tuple[bool, bool]:
    """(made here: missing, or empty and made since this process started (by Hydra); had a lock)."""
    if not run_dir.is_dir():
        return True, False
    made = not any(run_dir.iterdir()) and run_dir.stat().st_mtime >= PROCESS_START
    return made, (run_dir / LOCK_FILE).exists()


def forget_refused_launch(run_dir: Path, made_here: bool, had_lock: bool) -> None:
    """Undo what a refused launch left: the lock file it made (released, so empty) and the run
    directory it made, if nothing else is in it; a refusal then leaves the disk as it was."""
    lock = run_dir / LOCK_FILE
    if not had_lock and lock.is_file() and lock.stat().st_size == 0:
        lock.unlink()
    if made_here and run_dir.is_dir() and not any(run_dir.iterdir()):
        run_dir.rmdir()


def train_holding_lock(cfg: DictConfig) -> dict:
    """train()'s work, in a run directory this process holds (on rank 0)."""
    if process_rank() == 0:
        log.info(launch_summary(cfg))  # the first line: what this launch trains, before any work
    rank, world, device = start_process(cfg.trainer)
    precision = resolve_precision(cfg.trainer.precision, device, "trainer.precision")
    resumed, changes = open_run(cfg, precision, world, device)  # before any data: refusals first
    if resumed is not None and stop_reason(resumed, cfg.trainer):
        metrics = completed_run(cfg, resumed, precision, rank == 0)
        if metrics is not None:
            return metrics
    torch.manual_seed(cfg.seed + rank)  # each rank its own dropout masks (runs/state.py)
    data, state, plan, corpus = prepare(cfg, resumed, device, rank, world, precision)
    launch = start_launch(cfg, resumed, changes, data, state, plan, corpus, precision)
    train_set = data.splits["train"].select_columns(["src_ids", "tgt_ids"])
    stream = batches(state.sampler, train_set, cfg.trainer.max_epochs, device)
    with StopSignals() as stop:  # SIGTERM/SIGINT/SIGUSR2: this step completes, last.pt
        outcome = train_loop(launch, stream, stop)
        finish_training(launch)
    return end_launch(launch, outcome, precision)


def completed_run(cfg: DictConfig, resumed: dict, precision: str, main_rank: bool) -> dict | None:
    """A complete run's metrics (its end-of-run evaluation made if missing), else None: train on.

    Called when the checkpoint to resume has met a stopping rule.
    """
    run_dir, trainer, run = Path(cfg.run_dir), cfg.trainer, Run(cfg.run_dir)
    metrics = run.metrics() if run.is_finished() else {}
    if not (metrics.get("complete") and metrics.get("steps") == resumed["step"]):
        return None
    if main_rank and trainer.evaluate_at_end and not end_evaluation_made(run, metrics):
        log.info(f"{run_dir} is complete but lacks its end-of-run evaluation: making it")
        score_completed_run(cfg, precision)
        return metrics
    log.info(
        f"{run_dir} is complete ({stop_reason(resumed, trainer)} at step "
        f"{resumed['step']}): nothing to do, nothing changed"
    )
    return metrics


def prepare(
    cfg: DictConfig, resumed: dict | None, device, rank: int, world: int, precision: str
) -> tuple[PreparedData, TrainingState, UpdatePlan, dict]:
    """The data, a fresh training state and the update plan, checked against the checkpoint to
    resume and the disk; and the training pairs' fingerprint.

    A refusal here removes the run's tokenizer/ copy if this launch made it (under the lock):
    a refused launch leaves the disk as it was.
    """
    run_dir = Path(cfg.run_dir)
    own_tokenizer = run_dir / RUN_TOKENIZER
    own = own_tokenizer if resumed is not None and own_tokenizer.is_file() else None
    had_copy = own_tokenizer.parent.exists()
    data = load_data(cfg, rank, own)
    try:
        state, plan = build_state(cfg, data, device, rank, world, precision)
        corpus = data.fingerprint()  # kept beside the encoded train split after the first launch
        check_data(resumed, data, corpus, own)
        if rank == 0:  # a full disk is refused now, not at the first save (maybe the last step)
            check_space(run_dir, checkpoint_bytes(state.model), shutil.disk_usage(run_dir).free)
    except UserError:
        if rank == 0 and not had_copy:
            shutil.rmtree(own_tokenizer.parent, ignore_errors=True)
        raise
    return data, state, plan, corpus


def hydra_choices() -> dict:
    """Hydra's config-group choices of this launch ({} without Hydra's runtime: train(cfg))."""
    return dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}


def corpus_summary(data: DictConfig, choice: str | None) -> str:
    """The corpus a launch trains on, in words: its config, where it comes from, the direction."""
    where = OmegaConf.select(data, "path", default=None) or OmegaConf.select(
        data, f"files.train.{data.src_lang}", default=None
    )
    if where is None and "train_size" in data.corpus:
        where = f"{data.corpus.train_size:,} generated pairs"
    name = f"data={choice}" if choice else str(data.corpus._target_).rsplit(".", 1)[-1]
    return f"{name} ({f'{where}, ' if where else ''}{data.src_lang}->{data.tgt_lang})"


def launch_summary(cfg: DictConfig) -> str:
    """What a launch is about to train: model and size, budget, corpus, and a missing experiment=.

    Logged first, before any work: without experiment= train.yaml trains the base model for
    100,000 steps, and this line says so before the data is read.
    """
    model, trainer, choices = cfg.model, cfg.trainer, hydra_choices()
    with torch.device("meta"):  # the size without the memory; the vocabulary as configured
        size = count_parameters(build_model(model, cfg.position, cfg.data.vocab_size, PAD_ID))
    name = f"model={choices['model']}" if choices.get("model") else "a model"
    budget = f"{trainer.max_steps:,} steps"
    if trainer.max_epochs is not None:
        budget += f" or {trainer.max_epochs} epochs"
    if trainer.max_minutes:
        budget += f" or {trainer.max_minutes:g} minutes"
    line = (
        f"training {name} (d_model {model.d_model}, {model.n_encoder_layers}+"
        f"{model.n_decoder_layers} layers, about {size / 1e6:.1f}M parameters at data.vocab_size="
        f"{cfg.data.vocab_size}) with position={position_choice(cfg.position)} for {budget} on "
        f"{corpus_summary(cfg.data, choices.get('data'))}"
    )
    if HydraConfig.initialized() and not choices.get("experiment"):
        line += "; no experiment= given: configs/train.yaml's defaults"
    return line


def log_model(cfg: DictConfig, model: torch.nn.Module) -> dict:
    """Log the model's size and position variant; the choices a checkpoint records."""
    position = cfg.position._target_.rsplit(".", 1)[-1]
    choices = {"position": position_choice(cfg.position)}
    log.info(
        f"model: {count_parameters(model):,} parameters, position={choices['position']} "
        f"({position})"
    )
    return choices


def run_info(cfg, data, corpus: dict, precision: str, world: int, choices, resumed) -> dict:
    """What each checkpoint keeps beside the training state: config, tokenizer, setup, clocks."""
    return {
        "config": stored_config(cfg),
        "choices": choices,
        "tokenizer": {
            "path": str(data.tokenizer.path),
            "sha256": data.tokenizer.sha256,
            "run_file": RUN_TOKENIZER,
        },
        "precision": precision,
        "world_size": world,
        "num_threads": torch.get_num_threads(),
        "corpus": corpus,  # the training pairs' fingerprint: a resume on other data is refused
        "dev_corpus": dev_fingerprint(data),  # and the dev set's: one curve, one best.pt
        # training time of the whole run, at each save (earlier segments' so far)
        "wall_seconds": resumed.get("wall_seconds", 0.0) if resumed else 0.0,
        "train_loss_avg": resumed.get("train_loss_avg") if resumed else None,
    }


@dataclass
class Launch:
    """One launch of a run: its state, data and plan, its records, its clocks and dev scores."""

    cfg: DictConfig
    state: TrainingState
    train_model: torch.nn.Module  # state.model, compiled and/or wrapped in DDP as configured
    data: PreparedData
    plan: UpdatePlan
    info: dict  # what each checkpoint keeps beside the state (run_info)
    precision: str  # the resolved trainer.precision: fp32, bf16 or fp16
    segment: int | None  # this launch's entry in segments.json (rank 0), else None
    writer: SummaryWriter | None  # TensorBoard, rank 0 only
    progress: Progress
    prior_seconds: float  # the earlier segments' training time
    dev: tuple = (None, None)  # the last (dev perplexity, greedy BLEU)
    dev_step: int | None = None  # the step dev was measured at

    @property
    def run(self) -> Run:
        """The run's directory."""
        return Run(self.cfg.run_dir)

    def run_seconds(self) -> float:
        """Training time of the whole run: earlier segments' and this one's."""
        return self.prior_seconds + self.progress.minutes() * 60

    def end_interrupted(self, interrupted: TrainingInterrupted) -> None:
        """segments.json: this segment ended on a signal, at its step, with its checkpoint."""
        seconds = self.progress.minutes() * 60
        self.writer.flush()  # its events file as it ends: end_segment records its sha256
        end_segment(self.cfg.run_dir, self.segment, interrupted.step, seconds, interrupted.outcome)


def start_launch(cfg, resumed, changes, data, state, plan, corpus, precision) -> Launch:
    """Every check passed: open the run's records, load the checkpoint, start this segment."""
    main_rank, run_dir = state.rank == 0, Path(cfg.run_dir)
    choices = log_model(cfg, state.model)
    open_records(cfg, resumed, data, main_rank)  # every check passed: the run's records change
    resume(state, resumed, cfg, main_rank)
    info = run_info(cfg, data, corpus, precision, state.world, choices, resumed)
    machine, prior_seconds = machine_description(state.device), info["wall_seconds"]
    segment = (
        start_segment(
            run_dir,
            state.step,
            launch_overrides(),
            changes,
            machine,
            code_version(),
            run_id(stored_config(cfg), Run(run_dir).data_summary(), precision),
        )  # fmt: skip
        if main_rank
        else None
    )
    train_model = torch.compile(state.model) if cfg.trainer.compile else state.model
    if state.world > 1:
        train_model = torch.nn.parallel.DistributedDataParallel(train_model)
    writer = None
    if main_rank:  # one events file a launch, named by its segment (runs/events.py reads it)
        suffix = launch_suffix(read_segments(run_dir)[segment])
        writer = SummaryWriter(Run(run_dir).tensorboard, filename_suffix=suffix)
        record_launch_file(run_dir, segment, suffix)
    progress = Progress(cfg.trainer, state.step, writer, state.device, info["train_loss_avg"])
    return Launch(
        cfg, state, train_model, data, plan, info, precision, segment, writer, progress,
        prior_seconds,
    )  # fmt: skip


def train_loop(launch: Launch, stream, stop: StopSignals) -> str:
    """Updates until a stopping rule (or a signal: raises); the outcome segments.json records."""
    cfg, state, trainer = launch.cfg, launch.state, launch.cfg.trainer
    bad_steps, last_save = 0, time.monotonic()
    while state.step < trainer.max_steps:
        stop_on_signal(stop, state, launch.info, launch.run, launch.end_interrupted)
        if trainer.max_minutes and launch.run_seconds() > 60 * trainer.max_minutes:
            outcome = f"trainer.max_minutes={trainer.max_minutes} reached"
            log.info(f"stopping at step {state.step}: {outcome} (in all segments)")
            return outcome
        micro = list(islice(stream, launch.plan.update_freq))
        if not micro:
            outcome = f"trainer.max_epochs={trainer.max_epochs} reached"
            log.info(f"stopping at step {state.step}: {outcome}")
            return outcome
        result = train_step(
            launch.train_model, state.optimizer, state.schedule, micro,
            cfg.optim.label_smoothing, cfg.optim.clip_norm, launch.precision, state.world,
            state.scaler,
        )  # fmt: skip
        if result is None:
            bad_steps += 1
            skipped_update(bad_steps, state.step, launch.run.checkpoints, state.scaler)
            continue
        bad_steps = 0
        count_update(launch, result)
        last_save = save_if_due(launch, last_save)
    return f"trainer.max_steps={trainer.max_steps} reached"


def count_update(launch: Launch, result: StepResult) -> None:
    """After an update: the counters, the progress log, the clocks; dev every eval_every steps."""
    state, info = launch.state, launch.info
    state.step += 1
    state.tokens_seen += result.tokens
    launch.progress.update(state.step, result, state.schedule.get_last_lr()[0])
    info["wall_seconds"] = launch.run_seconds()
    info["train_loss_avg"] = launch.progress.loss_avg  # resumed with the weights
    if state.rank == 0 and state.step % launch.cfg.trainer.eval_every == 0:
        dev = check_dev(state, launch.data, launch.cfg, launch.precision, launch.writer, info)
        launch.dev, launch.dev_step = dev, state.step


def save_if_due(launch: Launch, last_save: float) -> float:
    """Save what checkpoint_due asks for after this step; the time of the last save."""
    state, trainer = launch.state, launch.cfg.trainer
    due = checkpoint_due(trainer, state.step, last_save, state.world, state.device)
    if due == "step":
        save_step(state, launch.info, launch.run, trainer.keep_last)
    elif due == "last":
        save(state, launch.info, launch.run, "last")
    return time.monotonic() if due else last_save


def finish_training(launch: Launch) -> None:
    """The last step's validation (unless made) and its save, always a step file (Table 2).

    Runs inside StopSignals: a signal now lets them finish (the run completes).
    """
    state, info = launch.state, launch.info
    launch.progress.bar.close()
    if state.rank == 0 and launch.dev_step != state.step:
        launch.dev = check_dev(
            state, launch.data, launch.cfg, launch.precision, launch.writer, info
        )
    info["wall_seconds"] = launch.run_seconds()
    if state.step > 0:  # the final weights are always a step file (Table 2 averaging)
        save_step(state, info, launch.run, launch.cfg.trainer.keep_last)
    else:
        save(state, info, launch.run, "last")


def end_launch(launch: Launch, outcome: str, precision: str) -> dict:
    """metrics.json and the segment's end (rank 0), the DDP group left, the end evaluation."""
    cfg, state, progress = launch.cfg, launch.state, launch.progress
    metrics = final_metrics(state, progress, launch.dev, cfg, launch.plan, state.world, launch.info)
    run_dir = Path(cfg.run_dir)
    if state.rank == 0:
        Run(run_dir).write_metrics(metrics)
        launch.writer.close()  # its events file complete: end_segment records its sha256
        end_segment(run_dir, launch.segment, state.step, progress.minutes() * 60, outcome)
        log.info(f"run directory: {run_dir}")
    if state.world > 1:
        dist.destroy_process_group()
    if state.rank == 0 and cfg.trainer.evaluate_at_end:
        score_completed_run(cfg, precision)
    return metrics


def final_metrics(state, progress, dev, cfg, plan: UpdatePlan, world, run_info) -> dict:
    """metrics.json: steps, epochs, time, tokens, last losses, dev scores and the setup.

    Time and tokens/s are the whole run's, every segment counted (a kill's undone steps not).
    """
    wall, epoch = run_info["wall_seconds"], state.sampler.state_dict()
    return {
        "complete": True,
        "steps": state.step,
        "epochs": round(epoch["epoch"] + epoch["position"] / max(len(state.sampler), 1), 3),
        "wall_seconds": round(wall, 1),
        "segments": len(read_segments(cfg.run_dir)),
        "tokens_seen": state.tokens_seen,
        "train_loss": progress.loss_avg,
        "dev_ppl": dev[0],
        "dev_bleu_greedy": dev[1],
        "tokens_per_s": round(state.tokens_seen / max(wall, 1e-9), 1),
        "parameters": count_parameters(state.model),
        "position": cfg.position._target_.rsplit(".", 1)[-1],
        "position_choice": run_info["choices"]["position"],
        "precision": run_info["precision"],  # what trainer.precision resolved to
        "seed": cfg.seed,
        "update_freq": plan.update_freq,
        "max_tokens": plan.max_tokens,
        # measured: real (non-pad) target tokens per update over all ranks (§5.1: ~25k)
        "real_target_tokens_per_update": round(state.tokens_seen / max(state.step, 1)),
        "world_size": world,
    }


def validate(model, dev_set, data, cfg, precision, writer, step) -> tuple[float, float | None]:
    """Dev perplexity per target subword (Table 3's PPL), and greedy BLEU on the first N."""
    device = next(model.parameters()).device
    ppl = perplexity(model, dev_set["src_ids"], dev_set["tgt_ids"], cfg.data.max_tokens, device)
    writer.add_scalar("dev/ppl", ppl, step)
    message = f"step {step} dev ppl {ppl:.3f}"
    n, bleu = cfg.trainer.eval_bleu_sentences, None
    if n:
        subset = dev_set.select(range(min(n, len(dev_set))))
        hyps = translate(
            model,
            data.tokenizer,
            subset["src"],
            device,
            beam=1,
            max_tokens=cfg.data.max_tokens,
            precision=precision,
        )
        bleu = sacrebleu_score(hyps, subset["tgt"])
        writer.add_scalar("dev/bleu_greedy", bleu, step)
        samples = zip(subset["src"][:3], hyps[:3], strict=True)
        writer.add_text("dev/samples", "\n\n".join(f"{s} → {h}" for s, h in samples), step)
        message += f" greedy BLEU {bleu:.2f} on {len(hyps)} sentences"
    log.info(message)
    return ppl, bleu
