"""Train a Transformer the paper's way (§5): `python train.py [experiment=...] [position=...]`.

One loop, top to bottom: data -> model -> Adam with the §5.3 schedule -> token-budget batches
accumulated to the effective batch -> label-smoothed loss -> periodic validation (dev PPL),
checkpoints and metrics. Runs on a CPU, one GPU, or many under `torchrun` (DDP); resumes from
the newest readable checkpoint in `<run_dir>/checkpoints/` when the run directory is given again.
"""

import logging
import math
import os
import resource
import sys
import time
from contextlib import nullcontext
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
from data.files import write_json
from data.tokenizer import PAD_ID
from model.checkpoint import (
    load_latest_checkpoint,
    prune_checkpoints,
    remove_temporary_files,
    save_checkpoint,
)
from model.device import resolve_device, use_bf16
from model.loss import forward_backward, perplexity
from model.optim import clip_gradients, noam_adam
from model.transformer import build_model, count_parameters
from model.translate import translate

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


def accumulate_gradients(model, micro: list[dict], smoothing: float, device, bf16: bool, world):
    """Gradients of the mean label-smoothed loss per target token over micro-batches (and ranks).

    Returns the summed loss and NLL (this rank's, times the world size) and the target-token
    count over every rank, read from the device once, after the last backward pass.
    """
    n_tokens = torch.tensor(
        float(sum(int((b["tgt_out"] != PAD_ID).sum()) for b in micro)), device=device
    )
    if world > 1:
        dist.all_reduce(n_tokens)
    model.train()
    sums = torch.zeros(2, device=device)  # [loss, nll]
    for i, batch in enumerate(micro):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        sync = nullcontext() if world == 1 or i == len(micro) - 1 else model.no_sync()
        with sync:
            loss, nll = forward_backward(model, batch, smoothing, world / n_tokens, bf16)
        sums += torch.stack((loss, nll))
    loss_sum, nll_sum, tokens = torch.cat((sums * world, n_tokens[None])).tolist()
    return loss_sum, nll_sum, int(tokens)


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


def train(cfg: DictConfig) -> dict:
    """Train per cfg in cfg.run_dir and return the final metrics (also in metrics.json)."""
    rank, world, device = start_process(cfg.trainer)
    bf16 = use_bf16(cfg.trainer.precision, device)
    run_dir, main_rank, trainer = Path(cfg.run_dir), rank == 0, cfg.trainer
    ckpt_dir = run_dir / "checkpoints"
    torch.manual_seed(cfg.seed)
    data = load_data(cfg, rank, world)
    train_set = data.splits["train"].select_columns(["src_ids", "tgt_ids"])
    dev_set = data.splits["validation"]
    model = build_model(cfg.model, cfg.position, data.tokenizer.vocab_size, PAD_ID).to(device)
    position = cfg.position._target_.rsplit(".", 1)[-1]
    log.info(f"model: {count_parameters(model):,} parameters, position={position}")
    optim = cfg.optim
    optimizer, schedule = noam_adam(
        model.parameters(), cfg.model.d_model, optim.betas, optim.eps, optim.warmup, optim.lr_scale
    )
    src_lengths, tgt_lengths = (sequence_lengths(train_set, c) for c in ("src_ids", "tgt_ids"))
    sampler = TokenBatchSampler(
        src_lengths, tgt_lengths, cfg.data.max_tokens, seed=cfg.seed, num_replicas=world, rank=rank
    )
    for split in (train_set, dev_set):  # fail before the first step, not at a long batch
        model.encoder_position.check_length(int(sequence_lengths(split, "src_ids").max(initial=1)))
        model.decoder_position.check_length(int(sequence_lengths(split, "tgt_ids").max(initial=1)))
    update_freq = trainer.update_freq or max(
        1, round(trainer.effective_tokens / (world * cfg.data.max_tokens))
    )

    step, best_ppl, tokens_seen, bad_steps = 0, math.inf, 0, 0
    resumed = load_latest_checkpoint(
        ckpt_dir,
        warn=log.warning,
        tokenizer_sha256=data.tokenizer.sha256,
        config={k: OmegaConf.to_container(cfg[k], resolve=True) for k in ("model", "position")},
    )
    if main_rank:  # a killed save's temporary files; metrics.json returns when this work completes
        remove_temporary_files(ckpt_dir)
        (run_dir / "metrics.json").unlink(missing_ok=True)
    if resumed is not None:
        for name, part in [("model", model), ("optimizer", optimizer), ("schedule", schedule)]:
            part.load_state_dict(resumed[name])
        sampler.load_state_dict(resumed["sampler"])
        torch.set_rng_state(resumed["rng"]["torch"])
        step, best_ppl, tokens_seen = resumed["step"], resumed["best_ppl"], resumed["tokens_seen"]
        log.info(f"resumed from step {step}")
    train_model = torch.compile(model) if trainer.compile else model
    if world > 1:
        train_model = torch.nn.parallel.DistributedDataParallel(train_model)
    writer = SummaryWriter(run_dir / "tensorboard") if main_rank else None
    resolved = OmegaConf.to_container(cfg, resolve=True)

    def save(name: str) -> None:
        if main_rank:
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict(),
                "sampler": sampler.state_dict(),
                "rng": {"torch": torch.get_rng_state()},
                "step": step,
                "best_ppl": best_ppl,
                "tokens_seen": tokens_seen,
                "config": resolved,
                "tokenizer": {"path": str(data.tokenizer.path), "sha256": data.tokenizer.sha256},
            }
            save_checkpoint(state, ckpt_dir / name)

    def batches():
        loader_rng = torch.Generator()  # its own: a new loader must not draw from dropout's RNG
        while trainer.max_epochs is None or sampler.state_dict()["epoch"] < trainer.max_epochs:
            loader = DataLoader(
                train_set,
                batch_sampler=sampler,
                collate_fn=collate,
                generator=loader_rng,
                pin_memory=device.type == "cuda",
            )
            yield from loader
            sampler.set_epoch(sampler.state_dict()["epoch"] + 1)

    def check_dev() -> None:
        nonlocal dev_ppl, dev_bleu, dev_step, best_ppl
        if main_rank:
            dev_ppl, dev_bleu = validate(model, dev_set, data, cfg, device, bf16, writer, step)
            dev_step = step
            if dev_ppl < best_ppl:
                best_ppl = dev_ppl
                save("best.pt")

    stream, start, last_save = batches(), time.monotonic(), time.monotonic()
    bar = tqdm(
        total=trainer.max_steps, initial=step, disable=not (main_rank and sys.stderr.isatty())
    )
    interval_tokens, interval_start, loss_avg = 0, time.monotonic(), None
    dev_ppl = dev_bleu = dev_step = None
    while step < trainer.max_steps:
        if trainer.max_minutes and time.monotonic() - start > 60 * trainer.max_minutes:
            log.info(f"stopping at step {step}: trainer.max_minutes={trainer.max_minutes} reached")
            break
        micro = [b for _, b in zip(range(update_freq), stream, strict=False)]
        if not micro:
            log.info(f"stopping at step {step}: trainer.max_epochs={trainer.max_epochs} reached")
            break
        loss_sum, nll_sum, tokens = accumulate_gradients(
            train_model, micro, optim.label_smoothing, device, bf16, world
        )
        grad_norm = clip_gradients(model.parameters(), optim.clip_norm)
        if not math.isfinite(loss_sum) or not torch.isfinite(grad_norm):
            bad_steps += 1
            optimizer.zero_grad(set_to_none=True)
            log.warning(
                f"step {step + 1}: non-finite loss or gradient, update skipped "
                f"({bad_steps} in a row)"
            )
            if bad_steps >= 10:
                raise FloatingPointError(
                    f"{bad_steps} non-finite updates in a row at step {step + 1}: lower "
                    "optim.lr_scale or set optim.clip_norm; the last good checkpoint is in "
                    f"{ckpt_dir}"
                )
            continue
        bad_steps = 0
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        step += 1
        tokens_seen, interval_tokens = tokens_seen + tokens, interval_tokens + tokens
        loss_avg = (
            loss_sum / tokens if loss_avg is None else 0.98 * loss_avg + 0.02 * loss_sum / tokens
        )
        tok_s = interval_tokens / (time.monotonic() - interval_start)
        bar.update(1)
        bar.set_postfix(loss=f"{loss_avg:.3f}", tok_s=f"{tok_s:.0f}")

        if main_rank and step % trainer.log_every == 0:
            step_s = (time.monotonic() - interval_start) / trainer.log_every
            eta = (trainer.max_steps - step) * step_s / 60
            if trainer.max_minutes:
                eta = min(eta, trainer.max_minutes - (time.monotonic() - start) / 60)
            values = {
                "loss": loss_avg,
                "nll": nll_sum / tokens,
                "lr": schedule.get_last_lr()[0],
                "grad_norm": float(grad_norm),
                "tokens_per_s": tok_s,
                "step_s": step_s,
                "memory_gib": peak_memory_gib(device),
            }
            log_progress(writer, step, values, eta)
            interval_tokens, interval_start = 0, time.monotonic()

        if step % trainer.eval_every == 0:
            check_dev()
        due_minutes = (
            trainer.save_every_minutes
            and time.monotonic() - last_save > 60 * trainer.save_every_minutes
        )
        if due_minutes or (trainer.save_every_steps and step % trainer.save_every_steps == 0):
            save(f"step_{step}.pt")
            save("last.pt")
            if main_rank:
                prune_checkpoints(ckpt_dir, trainer.keep_last)
            last_save = time.monotonic()
    bar.close()

    if dev_step != step:
        check_dev()
    save("last.pt")
    wall = time.monotonic() - start
    epoch = sampler.state_dict()
    metrics = {
        "complete": True,
        "steps": step,
        "epochs": round(epoch["epoch"] + epoch["position"] / max(len(sampler), 1), 3),
        "wall_seconds": round(wall, 1),
        "tokens_seen": tokens_seen,
        "train_loss": loss_avg,
        "dev_ppl": dev_ppl,
        "dev_bleu_greedy": dev_bleu,
        "tokens_per_s": round(tokens_seen / max(wall, 1e-9), 1),
        "parameters": count_parameters(model),
        "position": position,
        "seed": cfg.seed,
        "update_freq": update_freq,
        "world_size": world,
    }
    if main_rank:
        write_json(run_dir / "metrics.json", metrics)
        writer.close()
        log.info(f"run directory: {run_dir}")
    if world > 1:
        dist.destroy_process_group()
    return metrics


def validate(model, dev_set, data, cfg, device, bf16, writer, step) -> tuple[float, float | None]:
    """Dev perplexity per target subword (Table 3's PPL), and greedy BLEU on the first N."""
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
def main(cfg: DictConfig) -> None:
    """Command-line entry: train, and turn known errors into one line and exit status 1."""
    if os.environ.get("SUBMITIT_EXECUTOR") == "slurm" and "RANK" not in os.environ:
        from submitit.helpers import TorchDistributedEnvironment

        # one SLURM task per GPU (configs/hydra/launcher/slurm.yaml): export torchrun's variables
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    try:
        train(cfg)
    except (ValueError, OSError, FloatingPointError) as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
