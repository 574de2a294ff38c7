"""Train a Transformer the paper's way (§5): `python train.py [experiment=...] [position=...]`.

One loop, top to bottom: data -> model -> Adam with the §5.3 schedule -> token-budget batches
accumulated to the effective batch -> label-smoothed loss -> periodic validation (dev PPL),
checkpoints and metrics. Runs on a CPU, one GPU, or many under `torchrun` (DDP); resumes from
the newest readable checkpoint in `<run_dir>/checkpoints/` when the run directory is given again.
"""

import logging
import os
import resource
import sys
import time
from functools import partial
from itertools import islice
from pathlib import Path

import hydra
import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from data.batching import TokenBatchSampler, collate
from data.bleu import sacrebleu_score
from data.corpus import PreparedData, prepare_data, sequence_lengths
from data.errors import report_user_errors
from data.files import write_json
from data.tokenizer import BOS_ID, PAD_ID
from evaluation.perplexity import perplexity
from evaluation.translate import translate
from model.checkpoint import (
    load_latest_checkpoint,
    prune_checkpoints,
    remove_temporary_files,
    save_checkpoint,
)
from model.device import resolve_device, use_bf16
from model.optim import noam_adam
from model.training import DivergenceError, StepResult, TrainingState, train_step
from model.transformer import build_model, count_parameters

log = logging.getLogger("train")


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


# Under torchrun only rank 0 writes Hydra's .hydra/ and train.log (configs/train.yaml).
OmegaConf.register_new_resolver("on_rank_zero", on_rank_zero, replace=True)


def start_process(trainer: DictConfig) -> tuple[int, int, torch.device]:
    """This process's rank, the world size and its device; joins the DDP group under torchrun."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = resolve_device(trainer.device, int(os.environ.get("LOCAL_RANK", 0)))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if trainer.num_threads:
        torch.set_num_threads(trainer.num_threads)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    return rank, world, device


def load_data(cfg: DictConfig, rank: int, world: int) -> PreparedData:
    """The tokenized, cleaned corpus (rank 0 prepares and caches it first); data.json on rank 0."""
    if world > 1 and rank != 0:
        dist.barrier()
    data = prepare_data(cfg.data, cfg.cache_dir, log=log.info)
    if world > 1 and rank == 0:
        dist.barrier()
    if rank == 0:
        sizes = {name: len(split) for name, split in data.splits.items()}
        tokenizer = {"path": str(data.tokenizer.path), "vocab_size": data.tokenizer.vocab_size}
        summary = {"train_cleaning": data.counts, "splits": sizes, "tokenizer": tokenizer}
        write_json(Path(cfg.run_dir) / "data.json", summary)
    return data


def build_state(cfg: DictConfig, data: PreparedData, device, rank: int, world: int):
    """A fresh TrainingState: the model (§3), Adam with the §5.3 schedule, the batch sampler."""
    model = build_model(cfg.model, cfg.position, data.tokenizer.vocab_size, PAD_ID).to(device)
    optim = cfg.optim
    optimizer, schedule = noam_adam(
        model.parameters(), cfg.model.d_model, optim.betas, optim.eps, optim.warmup, optim.lr_scale
    )
    train_set = data.splits["train"]
    src_lengths, tgt_lengths = (sequence_lengths(train_set, c) for c in ("src_ids", "tgt_ids"))
    sampler = TokenBatchSampler(
        src_lengths, tgt_lengths, cfg.data.max_tokens, seed=cfg.seed, num_replicas=world, rank=rank
    )
    for split in (train_set, data.splits["validation"]):  # fail now, not at a long batch
        model.check_lengths(
            int(sequence_lengths(split, "src_ids").max(initial=1)),
            int(sequence_lengths(split, "tgt_ids").max(initial=1)),
        )
    return TrainingState(model, optimizer, schedule, sampler, device)


def resume(state: TrainingState, cfg: DictConfig, data: PreparedData, main_rank: bool) -> None:
    """Load the newest readable checkpoint of cfg.run_dir into state, if there is one."""
    ckpt_dir = Path(cfg.run_dir) / "checkpoints"
    resumed = load_latest_checkpoint(
        ckpt_dir,
        warn=log.warning,
        tokenizer_sha256=data.tokenizer.sha256,
        config={k: OmegaConf.to_container(cfg[k], resolve=True) for k in ("model", "position")},
    )
    if main_rank:  # a killed save's temporary files; metrics.json returns when this work completes
        remove_temporary_files(ckpt_dir)
        (Path(cfg.run_dir) / "metrics.json").unlink(missing_ok=True)
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


def peak_memory_gib(device: torch.device) -> float:
    """Peak CUDA memory allocated, or the process's peak resident memory on a CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def log_progress(writer: SummaryWriter, step: int, values: dict[str, float], eta: float) -> None:
    """One log line (loss, nll, lr, tok/s, ETA in minutes) and every value as train/<name>."""
    log.info(
        f"step {step} loss {values['loss']:.3f} nll {values['nll']:.3f} lr {values['lr']:.2e} "
        f"tok/s {values['tokens_per_s']:.0f} ETA {eta:.1f} min"
    )
    for name, value in values.items():
        writer.add_scalar(f"train/{name}", value, step)


class Progress:
    """The progress bar, the smoothed training loss and, on the main rank, the periodic log."""

    def __init__(self, trainer: DictConfig, step: int, writer: SummaryWriter | None, device):
        self.trainer, self.writer, self.device = trainer, writer, device
        show = writer is not None and sys.stderr.isatty()
        self.bar = tqdm(total=trainer.max_steps, initial=step, disable=not show)
        self.start = self.interval_start = time.monotonic()
        self.interval_tokens, self.loss_avg = 0, None

    def minutes(self) -> float:
        """Minutes since this process started training."""
        return (time.monotonic() - self.start) / 60

    def update(self, step: int, result: StepResult, lr: float) -> None:
        """Count one update; every trainer.log_every steps, a log line and TensorBoard scalars."""
        loss = result.loss_sum / result.tokens
        self.loss_avg = loss if self.loss_avg is None else 0.98 * self.loss_avg + 0.02 * loss
        self.interval_tokens += result.tokens
        tok_s = self.interval_tokens / (time.monotonic() - self.interval_start)
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{self.loss_avg:.3f}", tok_s=f"{tok_s:.0f}")
        if self.writer is None or step % self.trainer.log_every:
            return
        step_s = (time.monotonic() - self.interval_start) / self.trainer.log_every
        eta = (self.trainer.max_steps - step) * step_s / 60
        if self.trainer.max_minutes:
            eta = min(eta, self.trainer.max_minutes - self.minutes())
        values = {
            "loss": self.loss_avg,
            "nll": result.nll_sum / result.tokens,
            "lr": lr,
            "grad_norm": result.grad_norm,
            "tokens_per_s": tok_s,
            "step_s": step_s,
            "memory_gib": peak_memory_gib(self.device),
        }
        log_progress(self.writer, step, values, eta)
        self.interval_tokens, self.interval_start = 0, time.monotonic()


def skipped_update(bad_steps: int, step: int, ckpt_dir: Path) -> None:
    """Warn of a skipped non-finite update; the 10th in a row stops the run with DivergenceError."""
    log.warning(
        f"step {step + 1}: non-finite loss or gradient, update skipped ({bad_steps} in a row)"
    )
    if bad_steps >= 10:
        raise DivergenceError(
            f"{bad_steps} non-finite updates in a row at step {step + 1}: lower "
            f"optim.lr_scale or set optim.clip_norm; the last good checkpoint is in {ckpt_dir}"
        )


def save(state: TrainingState, run_info: dict, path: Path) -> None:
    """Write the training state and what evaluation needs (config, tokenizer) to path."""
    save_checkpoint(state.state_dict() | run_info, path)


def checkpoint_due(trainer: DictConfig, step: int, last_save: float) -> bool:
    """A step checkpoint is due: trainer.save_every_minutes passed or a save_every_steps step."""
    minutes = trainer.save_every_minutes
    by_time = bool(minutes) and time.monotonic() - last_save > 60 * minutes
    return by_time or bool(trainer.save_every_steps and step % trainer.save_every_steps == 0)


def check_dev(
    state: TrainingState, data, cfg, bf16, writer, run_info
) -> tuple[float, float | None]:
    """validate(); a new lowest dev perplexity is kept as best.pt."""
    ppl, bleu = validate(
        state.model, data.splits["validation"], data, cfg, bf16, writer, state.step
    )
    if ppl < state.best_ppl:
        state.best_ppl = ppl
        save(state, run_info, Path(cfg.run_dir) / "checkpoints" / "best.pt")
    return ppl, bleu


def train(cfg: DictConfig) -> dict:
    """Train per cfg in cfg.run_dir and return the final metrics (also in metrics.json)."""
    rank, world, device = start_process(cfg.trainer)
    trainer, optim, main_rank, run_dir = cfg.trainer, cfg.optim, rank == 0, Path(cfg.run_dir)
    bf16, ckpt_dir = use_bf16(trainer.precision, device), run_dir / "checkpoints"
    torch.manual_seed(cfg.seed)
    data = load_data(cfg, rank, world)
    state = build_state(cfg, data, device, rank, world)
    position = cfg.position._target_.rsplit(".", 1)[-1]
    log.info(f"model: {count_parameters(state.model):,} parameters, position={position}")
    update_freq = trainer.update_freq or max(
        1, round(trainer.effective_tokens / (world * cfg.data.max_tokens))
    )
    resume(state, cfg, data, main_rank)
    run_info = {
        "config": OmegaConf.to_container(cfg, resolve=True),
        "tokenizer": {"path": str(data.tokenizer.path), "sha256": data.tokenizer.sha256},
    }
    train_model = torch.compile(state.model) if trainer.compile else state.model
    if world > 1:
        train_model = torch.nn.parallel.DistributedDataParallel(train_model)
    writer = SummaryWriter(run_dir / "tensorboard") if main_rank else None
    train_set = data.splits["train"].select_columns(["src_ids", "tgt_ids"])
    stream = batches(state.sampler, train_set, trainer.max_epochs, device)
    progress, last_save = Progress(trainer, state.step, writer, device), time.monotonic()
    bad_steps, dev, dev_step = 0, (None, None), None  # dev: (perplexity, greedy BLEU)
    while state.step < trainer.max_steps:
        if trainer.max_minutes and progress.minutes() > trainer.max_minutes:
            log.info(
                f"stopping at step {state.step}: trainer.max_minutes={trainer.max_minutes} reached"
            )
            break
        micro = list(islice(stream, update_freq))
        if not micro:
            log.info(
                f"stopping at step {state.step}: trainer.max_epochs={trainer.max_epochs} reached"
            )
            break
        result = train_step(
            train_model, state.optimizer, state.schedule, micro,
            optim.label_smoothing, optim.clip_norm, bf16, world,
        )  # fmt: skip
        if result is None:
            bad_steps += 1
            skipped_update(bad_steps, state.step, ckpt_dir)
            continue
        bad_steps, state.step = 0, state.step + 1
        state.tokens_seen += result.tokens
        progress.update(state.step, result, state.schedule.get_last_lr()[0])
        if main_rank and state.step % trainer.eval_every == 0:
            dev, dev_step = check_dev(state, data, cfg, bf16, writer, run_info), state.step
        if checkpoint_due(trainer, state.step, last_save):
            if main_rank:
                save(state, run_info, ckpt_dir / f"step_{state.step}.pt")
                save(state, run_info, ckpt_dir / "last.pt")
                prune_checkpoints(ckpt_dir, trainer.keep_last)
            last_save = time.monotonic()
    progress.bar.close()
    if main_rank and dev_step != state.step:
        dev = check_dev(state, data, cfg, bf16, writer, run_info)
    if main_rank:
        save(state, run_info, ckpt_dir / "last.pt")
    metrics = final_metrics(state, progress, dev, cfg, update_freq, world)
    if main_rank:
        write_json(run_dir / "metrics.json", metrics)
        writer.close()
        log.info(f"run directory: {run_dir}")
    if world > 1:
        dist.destroy_process_group()
    return metrics


def final_metrics(state, progress, dev, cfg, update_freq, world) -> dict:
    """metrics.json: steps, epochs, time, tokens, last losses, dev scores and the setup."""
    wall, epoch = progress.minutes() * 60, state.sampler.state_dict()
    return {
        "complete": True,
        "steps": state.step,
        "epochs": round(epoch["epoch"] + epoch["position"] / max(len(state.sampler), 1), 3),
        "wall_seconds": round(wall, 1),
        "tokens_seen": state.tokens_seen,
        "train_loss": progress.loss_avg,
        "dev_ppl": dev[0],
        "dev_bleu_greedy": dev[1],
        "tokens_per_s": round(state.tokens_seen / max(wall, 1e-9), 1),
        "parameters": count_parameters(state.model),
        "position": cfg.position._target_.rsplit(".", 1)[-1],
        "seed": cfg.seed,
        "update_freq": update_freq,
        "world_size": world,
    }


def validate(model, dev_set, data, cfg, bf16, writer, step) -> tuple[float, float | None]:
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
            bf16=bf16,
        )
        bleu = sacrebleu_score(hyps, subset["tgt"])
        writer.add_scalar("dev/bleu_greedy", bleu, step)
        samples = zip(subset["src"][:3], hyps[:3], strict=True)
        writer.add_text("dev/samples", "\n\n".join(f"{s} → {h}" for s, h in samples), step)
        message += f" greedy BLEU {bleu:.2f} on {len(hyps)} sentences"
    log.info(message)
    return ppl, bleu


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
@report_user_errors
def main(cfg: DictConfig) -> None:
    """Command-line entry: train; a user error is one `error:` line and exit status 1."""
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm" and "RANK" not in os.environ:
        from submitit.helpers import TorchDistributedEnvironment

        # one SLURM task per GPU (configs/hydra/launcher/slurm.yaml): export torchrun's variables
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    train(cfg)


if __name__ == "__main__":
    main()
