"""Greedy and beam search over a Transformer with an incremental key/value cache (§6.1).

The paper: beam size 4, length penalty alpha = 0.6 (Wu et al. 2016, GNMT), maximum output
length = input length + 50, early termination. Lengths here count subwords: a source's length
excludes its EOS, and an output's length includes the EOS that ends it (as tensor2tensor).
As tensor2tensor's (the paper's), EOS may come first and give an empty output; min_len > 0
forbids EOS until that many subwords are out (fairseq's --min-len, 1 by default there).
"""

import torch

from model.transformer import LayerCache, Transformer


def length_penalty(length: int | torch.Tensor, alpha: float) -> float | torch.Tensor:
    """GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^alpha; hypotheses score log P(Y) / lp(Y)."""
    return ((5 + length) / 6) ** alpha


def max_output_lengths(src_keep: torch.Tensor, max_len_b: int) -> torch.Tensor:
    """Per sentence: source subwords (EOS excluded) + max_len_b, EOS included. [B]"""
    return src_keep.sum(dim=1) - 1 + max_len_b


def _reorder(cache: list[LayerCache], rows: torch.Tensor, names: tuple[str, ...]) -> None:
    for layer in cache:
        for name in names:
            if name in layer:
                layer[name] = layer[name].index_select(0, rows)


def _force_eos(scores: torch.Tensor, at_limit: torch.Tensor, eos_id: int) -> torch.Tensor:
    """Scores [N, V] with every token but EOS at -inf in the rows at their length limit [N]."""
    if not bool(at_limit.any()):
        return scores
    not_eos = torch.ones(scores.size(-1), dtype=torch.bool, device=scores.device)
    not_eos[eos_id] = False
    return scores.masked_fill(at_limit[:, None] & not_eos[None, :], float("-inf"))


def _ban_early_eos(
    scores: torch.Tensor, step: int, min_len: int, at_limit: torch.Tensor, eos_id: int
) -> torch.Tensor:
    """Scores [N, V] with EOS at -inf, while under min_len subwords, in rows not at the limit."""
    if step >= min_len:
        return scores
    ban = torch.zeros_like(scores, dtype=torch.bool)  # [N, V]
    ban[:, eos_id] = ~at_limit
    return scores.masked_fill(ban, float("-inf"))


@torch.inference_mode()
def greedy_search(
    model: Transformer,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    max_len_b: int = 50,
    min_len: int = 0,
) -> list[list[int]]:
    """The most probable next token at every step, for sources src [B, S]; EOS stripped."""
    memory, src_keep = model.encode(src)
    max_lens = max_output_lengths(src_keep, max_len_b)  # [B]
    batch = src.size(0)
    cache = model.new_cache(memory)
    tokens = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)  # [B, 1]
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)
    for step in range(int(max_lens.max())):
        logits = model.decode(tokens[:, -1:], None, src_keep, cache, offset=step)[:, -1]
        at_limit = step + 1 >= max_lens  # [B]
        logits = _ban_early_eos(logits, step, min_len, at_limit, eos_id)
        logits = _force_eos(logits, at_limit, eos_id)  # [B, V]
        next_token = logits.argmax(-1).masked_fill(done, eos_id)  # [B], argmax of log P
        tokens = torch.cat((tokens, next_token[:, None]), dim=1)  # [B, step + 2]
        done |= next_token == eos_id
        if bool(done.all()):
            break
    return [_strip(row[1:].tolist(), eos_id) for row in tokens]


def _strip(tokens: list[int], eos_id: int) -> list[int]:
    return tokens[: tokens.index(eos_id)] if eos_id in tokens else tokens


def _start_beams(
    n_src: int, k: int, bos_id: int, eos_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each sentence's K live beams (BOS; one live, so they start distinct) and K empty slots."""
    alive = torch.full((n_src, k, 1), bos_id, dtype=torch.long, device=device)  # [N, K, 1]
    alive_logp = torch.full((n_src, k), float("-inf"), device=device)  # [N, K]
    alive_logp[:, 0] = 0.0  # one live beam at first, so the K beams start distinct
    finished = torch.full((n_src, k, 1), eos_id, dtype=torch.long, device=device)  # [N, K, 1]
    finished_score = torch.full((n_src, k), float("-inf"), device=device)  # [N, K]
    return alive, alive_logp, finished, finished_score


def _next_log_probs(
    model: Transformer,
    alive: torch.Tensor,
    src_keep: torch.Tensor,
    cache: list[LayerCache],
    step: int,
    max_lens: torch.Tensor,
    min_len: int,
    eos_id: int,
) -> torch.Tensor:
    """log P(next token) [N * K, V] of each live beam; EOS barred under min_len, forced at limit."""
    k = alive.size(1)  # [N, K, step + 1]
    logits = model.decode(alive[:, :, -1].reshape(-1, 1), None, src_keep, cache, offset=step)
    logp = logits[:, -1].log_softmax(-1, dtype=torch.float32)  # [N * K, V]
    at_limit = (step + 1 >= max_lens).repeat_interleave(k)  # [N * K]
    logp = _ban_early_eos(logp, step, min_len, at_limit, eos_id)
    return _force_eos(logp, at_limit, eos_id)


def _extend(
    alive: torch.Tensor, alive_logp: torch.Tensor, logp: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 2K best one-token extensions of the K live beams, best first: log P, beam, token, ids."""
    n, k = alive_logp.shape  # [N, K]
    vocab = logp.size(-1)  # [N * K, V]
    candidates = (alive_logp[:, :, None] + logp.view(n, k, vocab)).view(n, k * vocab)
    top_logp, top_index = candidates.topk(2 * k, dim=1)  # [N, 2K], best first
    top_beam, top_token = top_index // vocab, top_index % vocab
    extended = torch.cat(
        (
            alive.gather(1, top_beam[:, :, None].expand(-1, -1, alive.size(2))),
            top_token[:, :, None],
        ),
        dim=2,
    )  # [N, 2K, step + 2]
    return top_logp, top_beam, top_token, extended


def _add_finished(
    finished: torch.Tensor,
    finished_score: torch.Tensor,
    extended: torch.Tensor,
    top_logp: torch.Tensor,
    is_eos: torch.Tensor,
    length: int,
    alpha: float,
    eos_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The K best finished hypotheses [N, K, length + 1] and scores [N, K], this step's included."""
    k = finished_score.size(1)  # [N, K]
    eos_score = (top_logp / length_penalty(length, alpha)).masked_fill(~is_eos, float("-inf"))
    finished = torch.cat((finished, torch.full_like(finished[:, :, :1], eos_id)), dim=2)
    pool_score = torch.cat((finished_score, eos_score), dim=1)  # [N, 3K]
    finished_score, pick = pool_score.topk(k, dim=1)  # [N, K]
    pool = torch.cat((finished, extended), dim=1)  # [N, 3K, step + 2]
    finished = pool.gather(1, pick[:, :, None].expand(-1, -1, pool.size(2)))
    return finished, finished_score


def _keep_alive(
    extended: torch.Tensor,
    top_logp: torch.Tensor,
    top_beam: torch.Tensor,
    is_eos: torch.Tensor,
    k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The K best extensions not ending in EOS: ids, log P [N, K], their parents' cache rows."""
    n = top_logp.size(0)  # [N, 2K]
    alive_logp, keep = top_logp.masked_fill(is_eos, float("-inf")).topk(k, dim=1)  # [N, K]
    alive = extended.gather(1, keep[:, :, None].expand(-1, -1, extended.size(2)))
    beam_rows = (
        torch.arange(n, device=extended.device)[:, None] * k + top_beam.gather(1, keep)
    ).view(-1)  # [N * K]
    return alive, alive_logp, beam_rows


def _drop_rows(
    cache: list[LayerCache],
    kept: torch.Tensor,
    beam_rows: torch.Tensor,
    src_keep: torch.Tensor,
    k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Only the kept sentences' [N'] rows: of the cache's cross keys/values, beam_rows, src_keep."""
    kept_rows = (kept[:, None] * k + torch.arange(k, device=kept.device)).view(-1)  # [N' * K]
    beam_rows = beam_rows.view(-1, k)[kept].view(-1)  # [N' * K]
    _reorder(cache, kept_rows, ("cross_k", "cross_v"))
    return beam_rows, src_keep[kept_rows]


def beam_search(
    model: Transformer,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_b: int = 50,
    min_len: int = 0,
) -> list[list[int]]:
    """The best hypothesis by log P(Y) / lp(Y) for each source in src [B, S]; EOS stripped.

    A beam of one is greedy search; wider beams are beam_search_nbest's best (§6.1).
    """
    if beam_size == 1:
        return greedy_search(model, src, bos_id, eos_id, max_len_b, min_len)
    found = beam_search_nbest(model, src, bos_id, eos_id, beam_size, alpha, max_len_b, min_len)
    return [hyps[0][0] for hyps in found]


def _best_finished(
    finished: torch.Tensor, finished_score: torch.Tensor, nbest: int, eos_id: int
) -> list[tuple[list[int], float]]:
    """One sentence's nbest finished hypotheses [K, T] (EOS stripped) and scores [K], best
    first; the first always, the others only where one finished (finite score)."""
    scores = finished_score[:nbest].tolist()
    return [
        (_strip(finished[j, 1:].tolist(), eos_id), scores[j])
        for j in range(nbest)
        if j == 0 or scores[j] > float("-inf")
    ]


@torch.inference_mode()
def beam_search_nbest(
    model: Transformer,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_b: int = 50,
    min_len: int = 0,
    nbest: int = 1,
) -> list[list[tuple[list[int], float]]]:
    """The nbest (<= beam_size) hypotheses and their log P(Y) / lp(Y) per source, best first.

    Batched over sentences and beams, as tensor2tensor's beam search (the paper's): each step
    takes the 2K best extensions of the K live beams; those ending in EOS join a sentence's K
    best finished hypotheses (by normalized score), the K best others live on. A sentence stops
    when no live beam can beat its nbest-th finished one (log-probabilities only fall, so a live
    beam can at best reach its log P / lp(max length)) and then leaves the batch; with nbest=1
    that is the paper's early stop. min_len: see the module docstring.
    """
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest={nbest} must be from 1 to beam_size={beam_size}")
    k = beam_size
    memory, src_keep = model.encode(src)
    max_lens = max_output_lengths(src_keep, max_len_b)  # [N]
    n_src, device = src.size(0), src.device
    cache = model.new_cache(memory, repeat=k)  # encoder keys/values projected once per sentence
    src_keep = src_keep.repeat_interleave(k, dim=0)  # [N * K, S]
    best: list[list[tuple[list[int], float]]] = [[([], float("-inf"))] for _ in range(n_src)]

    sentence = torch.arange(n_src, device=device)  # active row -> its index in src
    # alive [N, K, 1], alive_logp [N, K], finished [N, K, 1], finished_score [N, K]
    alive, alive_logp, finished, finished_score = _start_beams(n_src, k, bos_id, eos_id, device)

    for step in range(int(max_lens.max())):
        logp = _next_log_probs(model, alive, src_keep, cache, step, max_lens, min_len, eos_id)
        # the 2K best extensions [N, 2K]: enough that K of them do not end in EOS
        top_logp, top_beam, top_token, extended = _extend(alive, alive_logp, logp)
        is_eos = top_token == eos_id
        finished, finished_score = _add_finished(
            finished, finished_score, extended, top_logp, is_eos, step + 1, alpha, eos_id
        )  # [N, K, step + 2], [N, K]
        alive, alive_logp, beam_rows = _keep_alive(extended, top_logp, top_beam, is_eos, k)

        best_possible = alive_logp.max(dim=1).values / length_penalty(max_lens, alpha)  # [N]
        done = finished_score[:, nbest - 1] >= best_possible  # [N]
        for i in done.nonzero()[:, 0].tolist():
            best[int(sentence[i])] = _best_finished(finished[i], finished_score[i], nbest, eos_id)
        if bool(done.all()):
            break
        if bool(done.any()):  # finished sentences leave the batch
            kept = (~done).nonzero()[:, 0]  # [N']
            beam_rows, src_keep = _drop_rows(cache, kept, beam_rows, src_keep, k)
            alive, alive_logp = alive[kept], alive_logp[kept]
            finished, finished_score = finished[kept], finished_score[kept]
            sentence, max_lens = sentence[kept], max_lens[kept]
        _reorder(cache, beam_rows, ("self_k", "self_v"))  # each beam's parent's keys/values
    return best
