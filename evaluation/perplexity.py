"""Teacher-forced perplexity per target subword (Table 3's PPL column), in float32."""

import math

import torch
import torch.nn.functional as F

from common.progress import progress_bar
from data.batching import TokenBatchSampler, collate
from data.tokenizer import BOS_ID, PAD_ID


@torch.no_grad()
def perplexity(
    model,
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    max_tokens: int,
    device,
    setting: str = "data.max_tokens",
) -> float:
    """exp(mean NLL per target subword, EOS included), teacher-forced, no label smoothing;
    setting: the key max_tokens came from (named if a pair does not fit)."""
    model.eval()
    lengths = [len(s) for s in src_ids], [len(t) for t in tgt_ids]
    sampler = TokenBatchSampler(*lengths, max_tokens, shuffle=False, setting=setting)
    nll, count = 0.0, 0
    with progress_bar(len(src_ids), "perplexity", "sent") as bar:  # on a terminal only
        for indices in sampler:
            examples = [{"src_ids": src_ids[i], "tgt_ids": tgt_ids[i]} for i in indices]
            batch = collate(examples, pad_id=PAD_ID, bos_id=BOS_ID)
            batch = {k: v.to(device) for k, v in batch.items()}
            logits = model(batch["src"], batch["tgt_in"]).float()  # [B, T, V]
            tgt_out = batch["tgt_out"].flatten()  # [B * T]
            nll += F.cross_entropy(
                logits.flatten(0, 1), tgt_out, ignore_index=PAD_ID, reduction="sum"
            ).item()
            count += int((tgt_out != PAD_ID).sum())
            bar.update(len(indices))
    return math.exp(nll / max(count, 1))
