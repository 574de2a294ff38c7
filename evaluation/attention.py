"""What a trained model does with positions: how alike its position vectors are, and how far
each self-attention head looks.

Vaswani et al. 2017 (§3.5) chose sinusoids hoping the model "would easily learn to attend by
relative positions"; these two measures let one see it. The position similarity is the cosine
similarity of the vectors an absolute encoding adds at positions i and j (sinusoids, a learned
table, SHAPE's); the relative schemes add none. The mean attention distance of a head is
sum_j w_ij |i - j| (subwords) averaged over every real query position i of a set of sentences,
with the model's own softmax weights w, teacher-forced (the reference as the decoder's input),
dropout off: encoder self-attention and decoder (causal) self-attention; cross-attention has no
shared position axis and is left out. Beside each stack, the distance a head would have that
attends evenly to every key it may see (``uniform_distance``): the scale of "near" and "far".
"""

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from data.batching import TokenBatchSampler, collate
from data.tokenizer import BOS_ID, PAD_ID
from model.position import PositionEncoding


@torch.no_grad()
def position_vectors(position: PositionEncoding, n: int) -> torch.Tensor | None:
    """The vectors [n, d_model] an encoding adds at positions 0..n-1; None if it adds none."""
    was_training = position.training
    position.eval()  # SHAPE shifts positions only while training
    zeros = torch.zeros(1, n, position.d_model)  # [1, n, d_model]
    vectors = position.embed(zeros, torch.arange(n))[0].float()  # [n, d_model]
    position.train(was_training)
    return vectors if vectors.abs().sum() > 0 else None


def cosine_similarity_matrix(vectors: torch.Tensor) -> torch.Tensor:
    """cos(p_i, p_j) [n, n] of row vectors [n, d]."""
    unit = torch.nn.functional.normalize(vectors.float(), dim=-1)  # [n, d]
    return unit @ unit.T  # [n, n]


def uniform_distance(lengths: list[int], causal: bool) -> float:
    """Mean |i - j| over real queries of an even spread over the keys each may see.

    A length-n sequence: i/2 for query i under a causal mask, else (1/n) sum_j |i - j|.
    """
    total, queries = 0.0, 0
    for n in lengths:
        i = torch.arange(n, dtype=torch.float64)
        if causal:
            total += float((i / 2).sum())
        else:
            total += float((i[:, None] - i[None, :]).abs().mean(1).sum())
        queries += n
    return total / max(queries, 1)


@dataclass
class DistanceSums:
    """Running sums of one stack's attention distances: per layer and head, and query count."""

    weighted: torch.Tensor  # [L, H]: sum over queries of sum_j w_ij |i - j|
    queries: int = 0

    def mean(self) -> torch.Tensor:
        """The mean attention distance [L, H] (subwords)."""
        return self.weighted / max(self.queries, 1)


def distance_reader(sums: DistanceSums, layer: int, keep: list[torch.Tensor]):
    """A weights_hook adding up a layer's sum_j w_ij |i - j| over the real queries (keep[0])."""

    def read(weights: torch.Tensor) -> None:  # [B, H, Tq, Tk]
        tq, tk = weights.shape[-2:]
        i = torch.arange(tq, device=weights.device)[:, None]
        j = torch.arange(tk, device=weights.device)[None, :]
        per_query = (weights * (i - j).abs()).sum(-1)  # [B, H, Tq]
        real = keep[0][:, None, :].to(per_query.dtype)  # [B, 1, Tq]
        sums.weighted[layer] += (per_query * real).sum((0, 2)).cpu()

    return read


@contextmanager
def reading_distances(model, encoder: DistanceSums, decoder: DistanceSums, keep: dict):
    """Hooks on every self-attention layer for the duration; removed after, whatever happens."""
    stacks = (("src", model.encoder_layers, encoder), ("tgt", model.decoder_layers, decoder))
    try:
        for side, layers, sums in stacks:
            for index, layer in enumerate(layers):
                layer.self_attn.weights_hook = distance_reader(sums, index, keep[side])
        yield
    finally:
        for _, layers, _ in stacks:
            for layer in layers:
                layer.self_attn.weights_hook = None


@torch.no_grad()
def attention_distances(
    model, src_ids: list[list[int]], tgt_ids: list[list[int]], max_tokens: int, device
) -> dict[str, torch.Tensor]:
    """Mean attention distance [L, H] of the encoder's and the decoder's self-attention.

    Teacher-forced on sources src_ids and targets tgt_ids (each ending in EOS; the decoder reads
    BOS + target minus its last token).
    """
    model.eval()
    heads = model.encoder_layers[0].self_attn.n_heads
    encoder = DistanceSums(torch.zeros(len(model.encoder_layers), heads, dtype=torch.float64))
    decoder = DistanceSums(torch.zeros(len(model.decoder_layers), heads, dtype=torch.float64))
    keep: dict[str, list[torch.Tensor]] = {"src": [], "tgt": []}
    sampler = TokenBatchSampler(
        [len(s) for s in src_ids], [len(t) for t in tgt_ids], max_tokens, shuffle=False
    )
    with reading_distances(model, encoder, decoder, keep):
        for indices in sampler:
            examples = [{"src_ids": src_ids[i], "tgt_ids": tgt_ids[i]} for i in indices]
            batch = {
                k: v.to(device) for k, v in collate(examples, pad_id=PAD_ID, bos_id=BOS_ID).items()
            }
            keep["src"][:] = [batch["src"] != PAD_ID]  # [B, S] real source positions
            keep["tgt"][:] = [batch["tgt_out"] != PAD_ID]  # [B, T] real target positions
            model(batch["src"], batch["tgt_in"])
            encoder.queries += int(keep["src"][0].sum())
            decoder.queries += int(keep["tgt"][0].sum())
    return {"encoder": encoder.mean(), "decoder": decoder.mean()}
