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
import numpy as np
import pyarrow.compute as pc
import torch
import torch.distributed as dist
import torch.nn.functional as F
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from data.batching import TokenBatchSampler, collate
from data.corpus import prepare_data
from data.tokenizer import PAD_ID
from evaluate import (
    perplexity,
    resolve_device,
    sacrebleu_score,
    translate,
    use_bf16,
    write_json,
)
from model.checkpoint import (
    load_latest_checkpoint,
    prune_checkpoints,
    remove_temporary_files,
    save_checkpoint,
)
from model.transformer import count_parameters

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


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (§5.3), step from 1."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


class LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Per-token label-smoothed cross-entropy [N] and NLL [N] of logits [N, V], pads zero.

    One log-softmax forward in float32 (or wider); backward writes the gradient in one pass,
    softmax - (1 - eps) * onehot - eps / V, instead of autograd's chain of [N, V] tensors.
    """

    @staticmethod
    def forward(ctx, logits, target, smoothing: float, ignore_index: int):
        wide = torch.promote_types(logits.dtype, torch.float32)
        log_probs = F.log_softmax(logits.to(wide), dim=-1)  # [N, V]
        keep = (target != ignore_index).float()  # [N]
        nll = -log_probs.gather(1, target[:, None]).squeeze(1) * keep  # [N]
        loss = (1 - smoothing) * nll - smoothing * log_probs.mean(dim=-1) * keep
        ctx.save_for_backward(log_probs, target, keep)
        ctx.smoothing, ctx.logits_dtype = smoothing, logits.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        log_probs, target, keep = ctx.saved_tensors
        smoothing = ctx.smoothing
        grad = log_probs.exp().sub_(smoothing / log_probs.size(1))  # [N, V]
        grad.scatter_add_(1, target[:, None], grad.new_full((grad.size(0), 1), smoothing - 1))
        grad.mul_((grad_loss * keep)[:, None])
        return grad.to(ctx.logits_dtype), None, None, None


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float):
    """Summed label-smoothed cross-entropy and summed NLL over non-pad targets (§5.4).

    Equal to ``F.cross_entropy(..., label_smoothing=smoothing, ignore_index=PAD_ID)`` summed.
    """
    loss, nll = LabelSmoothedCrossEntropy.apply(
        logits.flatten(0, 1), target.flatten(), smoothing, PAD_ID
    )
    return loss.sum(), nll.sum()


def forward_backward(
    model: torch.nn.Module, batch: dict, smoothing: float, scale, bf16: bool
) -> tuple[float, float]:
    """Backpropagate scale x the batch's label-smoothed loss; return its summed loss and NLL.

    bf16: the forward pass under bf16 autocast (weights and gradients stay float32).
    """
    device_type = batch["src"].device.type
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(batch["src"], batch["tgt_in"])  # [B, T, V]
        loss, nll = label_smoothed_loss(logits, batch["tgt_out"], smoothing)
    (loss * scale).backward()
    return loss.item(), nll.item()


def sequence_lengths(dataset, column: str) -> np.ndarray:
    """Lengths of a list column, read from Arrow without building Python lists."""
    return pc.list_value_length(dataset.with_format("arrow")[column]).to_numpy()


def train(cfg: DictConfig) -> dict:
    """Train per cfg in cfg.run_dir and return the final metrics (also in metrics.json)."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = resolve_device(cfg.trainer.device, int(os.environ.get("LOCAL_RANK", 0)))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if cfg.trainer.num_threads:
        torch.set_num_threads(cfg.trainer.num_threads)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    bf16 = use_bf16(cfg.trainer.precision, device)
    run_dir, main_rank = Path(cfg.run_dir), rank == 0
    ckpt_dir = run_dir / "checkpoints"
    torch.manual_seed(cfg.seed)

    if world > 1 and rank != 0:
        dist.barrier()  # rank 0 prepares (and caches) the data first
    data = prepare_data(cfg.data, cfg.cache_dir, log=log.info)
    if world > 1 and rank == 0:
        dist.barrier()
    if main_rank:
        sizes = {name: len(split) for name, split in data.splits.items()}
        tokenizer = {"path": str(data.tokenizer.path), "vocab_size": data.tokenizer.vocab_size}
        write_json(
            run_dir / "data.json",
            {"train_cleaning": data.counts, "splits": sizes, "tokenizer": tokenizer},
        )
    train_set = data.splits["train"].select_columns(["src_ids", "tgt_ids"])
    dev_set = data.splits["validation"]
    try:
        model = instantiate(
            cfg.model, position=cfg.position, vocab_size=data.tokenizer.vocab_size, pad_id=PAD_ID
        )
    except InstantiationException as e:  # a bad model/position setting: its own one-line error
        if not isinstance(e.__cause__, ValueError):
            raise
        raise e.__cause__ from None
    model.to(device)
    n_params = count_parameters(model)
    log.info(f"model: {n_params:,} parameters, position={cfg.position._target_.rsplit('.', 1)[-1]}")
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=1.0,
        betas=tuple(cfg.optim.betas),
        eps=cfg.optim.eps,
        fused=True,
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: noam_lr(s + 1, cfg.model.d_model, cfg.optim.warmup, cfg.optim.lr_scale)
    )
    sampler = TokenBatchSampler(
        sequence_lengths(train_set, "src_ids"),
        sequence_lengths(train_set, "tgt_ids"),
        cfg.data.max_tokens,
        seed=cfg.seed,
        num_replicas=world,
        rank=rank,
    )
    for split in (train_set, dev_set):  # fail before the first step, not at a long batch
        model.encoder_position.check_length(int(sequence_lengths(split, "src_ids").max(initial=1)))
        model.decoder_position.check_length(int(sequence_lengths(split, "tgt_ids").max(initial=1)))
    update_freq = cfg.trainer.update_freq or max(
        1, round(cfg.trainer.effective_tokens / (world * cfg.data.max_tokens))
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
        model.load_state_dict(resumed["model"])
        optimizer.load_state_dict(resumed["optimizer"])
        schedule.load_state_dict(resumed["schedule"])
        sampler.load_state_dict(resumed["sampler"])
        torch.set_rng_state(resumed["rng"]["torch"])
        step, best_ppl, tokens_seen = resumed["step"], resumed["best_ppl"], resumed["tokens_seen"]
        log.info(f"resumed from step {step}")
    train_model = torch.compile(model) if cfg.trainer.compile else model
    if world > 1:
        train_model = torch.nn.parallel.DistributedDataParallel(train_model)
    writer = SummaryWriter(run_dir / "tensorboard") if main_rank else None
    resolved = OmegaConf.to_container(cfg, resolve=True)

    def state() -> dict:
        return {
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

    def save(name: str) -> None:
        if main_rank:
            save_checkpoint(state(), ckpt_dir / name)

    loader_rng = torch.Generator()

    def batches():
        while (
            cfg.trainer.max_epochs is None or sampler.state_dict()["epoch"] < cfg.trainer.max_epochs
        ):
            # its own generator: creating a loader must not draw from the global (dropout) RNG
            loader = DataLoader(
                train_set, batch_sampler=sampler, collate_fn=collate, generator=loader_rng
            )
            yield from loader
            sampler.set_epoch(sampler.state_dict()["epoch"] + 1)

    stream, start, last_save = batches(), time.monotonic(), time.monotonic()
    bar = tqdm(
        total=cfg.trainer.max_steps, initial=step, disable=not (main_rank and sys.stderr.isatty())
    )
    interval_tokens, interval_start, loss_avg = 0, time.monotonic(), None
    dev_ppl = dev_bleu = dev_step = None

    def check_dev() -> None:
        nonlocal dev_ppl, dev_bleu, dev_step, best_ppl
        if main_rank:
            dev_ppl, dev_bleu = validate(
                model, dev_set, data.tokenizer, cfg, device, bf16, writer, step
            )
            dev_step = step
            if dev_ppl < best_ppl:
                best_ppl = dev_ppl
                save("best.pt")

    while step < cfg.trainer.max_steps:
        if cfg.trainer.max_minutes and time.monotonic() - start > 60 * cfg.trainer.max_minutes:
            log.info(
                f"stopping at step {step}: trainer.max_minutes={cfg.trainer.max_minutes} reached"
            )
            break
        micro = [b for _, b in zip(range(update_freq), stream, strict=False)]
        if not micro:
            log.info(
                f"stopping at step {step}: trainer.max_epochs={cfg.trainer.max_epochs} reached"
            )
            break
        n_tokens = torch.tensor(
            float(sum(int((b["tgt_out"] != PAD_ID).sum()) for b in micro)), device=device
        )
        if world > 1:
            dist.all_reduce(n_tokens)
        train_model.train()
        loss_sum = nll_sum = 0.0
        for i, batch in enumerate(micro):
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            sync = nullcontext() if world == 1 or i == len(micro) - 1 else train_model.no_sync()
            with sync:
                loss, nll = forward_backward(
                    train_model, batch, cfg.optim.label_smoothing, world / n_tokens, bf16
                )
            loss_sum, nll_sum = loss_sum + loss, nll_sum + nll
        grad_norm = torch.nn.utils.clip_grad_norm_(
            model.parameters(), cfg.optim.clip_norm or math.inf
        )
        if not math.isfinite(loss_sum) or not torch.isfinite(grad_norm):
            bad_steps += 1
            optimizer.zero_grad(set_to_none=True)
            log.warning(
                f"step {step + 1}: non-finite loss or gradient, update skipped "
                f"({bad_steps} in a row)"
            )
            if bad_steps >= 10:
                raise FloatingPointError(
                    f"{bad_steps} non-finite updates in a row at step {step + 1}: "
                    "lower optim.lr_scale or "
                    f"set optim.clip_norm; the last good checkpoint is in {ckpt_dir}"
                )
            continue
        bad_steps = 0
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        step += 1
        tokens = int(n_tokens.item())
        tokens_seen, interval_tokens = tokens_seen + tokens, interval_tokens + tokens
        loss_tok = loss_sum * world / tokens
        loss_avg = loss_tok if loss_avg is None else 0.98 * loss_avg + 0.02 * loss_tok
        bar.update(1)
        bar.set_postfix(
            loss=f"{loss_avg:.3f}",
            tok_s=f"{interval_tokens / (time.monotonic() - interval_start):.0f}",
        )

        if main_rank and step % cfg.trainer.log_every == 0:
            elapsed = time.monotonic() - interval_start
            tok_s = interval_tokens / elapsed
            eta = (cfg.trainer.max_steps - step) * elapsed / cfg.trainer.log_every / 60
            if cfg.trainer.max_minutes:
                eta = min(eta, cfg.trainer.max_minutes - (time.monotonic() - start) / 60)
            lr = schedule.get_last_lr()[0]
            log.info(
                f"step {step} loss {loss_avg:.3f} nll {nll_sum / tokens * world:.3f} "
                f"lr {lr:.2e} tok/s {tok_s:.0f} ETA {eta:.1f} min"
            )
            for name, value in [
                ("loss", loss_avg),
                ("nll", nll_sum * world / tokens),
                ("lr", lr),
                ("grad_norm", float(grad_norm)),
                ("tokens_per_s", tok_s),
                ("step_s", elapsed / cfg.trainer.log_every),
            ]:
                writer.add_scalar(f"train/{name}", value, step)
            if device.type == "cuda":
                memory = torch.cuda.max_memory_allocated(device) / 2**30
            else:  # peak resident memory of the process (Linux reports KiB)
                memory = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
            writer.add_scalar("train/memory_gib", memory, step)
            interval_tokens, interval_start = 0, time.monotonic()

        if step % cfg.trainer.eval_every == 0:
            check_dev()
        due_minutes = (
            cfg.trainer.save_every_minutes
            and time.monotonic() - last_save > 60 * cfg.trainer.save_every_minutes
        )
        due_steps = cfg.trainer.save_every_steps and step % cfg.trainer.save_every_steps == 0
        if due_minutes or due_steps:
            save(f"step_{step}.pt")
            save("last.pt")
            if main_rank:
                prune_checkpoints(ckpt_dir, cfg.trainer.keep_last)
            last_save = time.monotonic()
    bar.close()

    if dev_step != step:
        check_dev()
    save("last.pt")
    metrics = {
        "complete": True,
        "steps": step,
        "epochs": round(
            sampler.state_dict()["epoch"] + sampler.state_dict()["position"] / max(len(sampler), 1),
            3,
        ),
        "wall_seconds": round(time.monotonic() - start, 1),
        "tokens_seen": tokens_seen,
        "train_loss": loss_avg,
        "dev_ppl": dev_ppl,
        "dev_bleu_greedy": dev_bleu,
        "tokens_per_s": round(tokens_seen / max(time.monotonic() - start, 1e-9), 1),
        "parameters": n_params,
        "position": cfg.position._target_.rsplit(".", 1)[-1],
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


def validate(
    model, dev_set, tokenizer, cfg, device, bf16, writer, step
) -> tuple[float, float | None]:
    """Dev perplexity per target subword (Table 3's PPL), and greedy BLEU on the first N."""
    ppl = perplexity(model, dev_set["src_ids"], dev_set["tgt_ids"], cfg.data.max_tokens, device)
    writer.add_scalar("dev/ppl", ppl, step)
    message = f"step {step} dev ppl {ppl:.3f}"
    n, bleu = cfg.trainer.eval_bleu_sentences, None
    if n:
        subset = dev_set.select(range(min(n, len(dev_set))))
        hyps = translate(
            model,
            tokenizer,
            subset["src"],
            device,
            beam=1,
            max_tokens=cfg.data.max_tokens,
            bf16=bf16,
        )
        bleu = sacrebleu_score(hyps, subset["tgt"])
        writer.add_scalar("dev/bleu_greedy", bleu, step)
        writer.add_text(
            "dev/samples",
            "\n\n".join(f"{s} → {h}" for s, h in zip(subset["src"][:3], hyps[:3], strict=True)),
            step,
        )
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
