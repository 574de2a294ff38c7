"""Greedy and beam search: beam 1 is greedy, the GNMT penalty, the length limits."""

import torch

from model.search import (
    beam_search,
    beam_search_nbest,
    greedy_search,
    length_penalty,
    max_output_lengths,
)
from tests.conftest import CONFIG_DIR, tiny_model

BOS, EOS = 2, 3


def sources(batch: int = 6, length: int = 8) -> torch.Tensor:
    torch.manual_seed(1)
    src = torch.randint(4, 40, (batch, length))
    src[:, -1] = EOS
    src[2, 4:] = 0
    src[2, 3] = EOS
    return src


def test_length_penalty_is_gnmts():
    assert length_penalty(1, 0.6) == 1.0
    assert abs(length_penalty(10, 0.6) - (15 / 6) ** 0.6) < 1e-12
    assert length_penalty(7, 0.0) == 1.0


@torch.no_grad()
def reference_greedy(
    model, src: torch.Tensor, max_len_b: int, min_len: int = 0, eos: int = EOS
) -> list[list[int]]:
    """Greedy decoding the slow, obvious way: one sentence at a time, no cache, the whole
    prefix re-decoded teacher-forced at every step, EOS forced at source length + max_len_b,
    and barred before min_len subwords unless at that limit."""
    out = []
    for row in src:
        one = row[row != 0][None]  # [1, S]: this sentence alone, no padding
        limit = one.size(1) - 1 + max_len_b  # source subwords + max_len_b, EOS included
        prefix = [BOS]
        while len(prefix) <= limit:
            logits = model(one, torch.tensor([prefix]))[0, -1]  # [V]
            if len(prefix) - 1 < min_len:
                logits[eos] = float("-inf")
            token = eos if len(prefix) == limit else int(logits.argmax())
            if token == eos:
                break
            prefix.append(token)
        out.append(prefix[1:])
    return out


def test_beam_one_is_greedy(position_yaml):
    model = tiny_model(position_yaml).eval()
    src = sources()
    for max_len_b in (6, 1):  # outputs up to source + 6, and cut at source + 1
        expected = reference_greedy(model, src, max_len_b)
        assert beam_search(model, src, BOS, EOS, 1, 0.6, max_len_b) == expected
        assert greedy_search(model, src, BOS, EOS, max_len_b) == expected


def test_min_len_bars_eos_until_that_many_subwords_but_never_past_the_limit(position_yaml):
    model = tiny_model(position_yaml, max_positions=64).eval()
    src = sources()
    # An untrained model rarely ends early; call its most frequent first output "EOS" instead,
    # so that unbarred search ends some outputs at once
    firsts = [(hyp or [EOS])[0] for hyp in greedy_search(model, src, BOS, EOS, 2)]
    eos = max(set(firsts), key=firsts.count)
    limits = max_output_lengths(src != 0, 2).tolist()  # 2 more than the source's subwords
    unbarred = reference_greedy(model, src, 2, eos=eos)
    assert min(len(h) for h in unbarred) == 0
    for min_len in (3, 20):  # below every limit, and above every limit (the limit wins)
        expected = reference_greedy(model, src, 2, min_len, eos)
        assert expected != unbarred
        assert greedy_search(model, src, BOS, eos, 2, min_len) == expected
        assert beam_search(model, src, BOS, eos, 1, 0.6, 2, min_len) == expected
        beam = beam_search(model, src, BOS, eos, 4, 0.6, 2, min_len)
        for hyp, limit in zip(beam, limits, strict=True):
            assert min(min_len, limit - 1) <= len(hyp) <= limit - 1


def test_output_length_is_bounded_by_source_plus_b(position_yaml):
    model = tiny_model(position_yaml, max_positions=64).eval()
    src = sources()
    limits = max_output_lengths(src != 0, 5).tolist()
    assert limits[2] == 3 + 5 and limits[0] == 7 + 5
    for hyps in (
        greedy_search(model, src, BOS, EOS, 5),
        beam_search(model, src, BOS, EOS, 4, 0.6, 5),
    ):
        for hyp, limit in zip(hyps, limits, strict=True):
            assert len(hyp) <= limit - 1  # the EOS that ends it counts towards the limit
            assert EOS not in hyp


def test_beam_search_is_independent_of_batch_neighbours(position_yaml):
    model = tiny_model(position_yaml).eval()
    src = sources()
    together = beam_search(model, src, BOS, EOS, beam_size=3)
    alone = [
        beam_search(model, src[i : i + 1, : int((src[i] != 0).sum())], BOS, EOS, 3)[0]
        for i in range(len(src))
    ]
    assert together == alone


class MarkovModel:
    """A stand-in decoder whose next-token distribution depends only on the last token (EOS
    after a token the table does not list, so that no row is all -inf)."""

    def __init__(self, table: dict[int, dict[int, float]], vocab: int = 6):
        self.logp = torch.full((vocab, vocab), float("-inf"))
        self.logp[:, EOS] = 0.0
        for prev, nexts in table.items():
            self.logp[prev, EOS] = float("-inf")
            for token, p in nexts.items():
                self.logp[prev, token] = torch.tensor(p).log()

    def encode(self, src):
        return torch.zeros(*src.shape, 1), src != 0

    def new_cache(self, memory=None, repeat=1):
        return [{}]

    def decode(self, tgt_in, memory, src_keep, cache, offset):
        return self.logp[tgt_in[:, -1]][:, None, :]  # [N, 1, V]


def test_beam_search_escapes_the_greedy_trap():
    a, b = 4, 5
    # greedy takes A (0.6) then ends: P = 0.6 * 0.4 = 0.24; B then EOS has P = 0.4 * 0.95 = 0.38
    model = MarkovModel(
        {BOS: {a: 0.6, b: 0.4}, a: {EOS: 0.4, a: 0.3, b: 0.3}, b: {EOS: 0.95, a: 0.05}}
    )
    src = torch.tensor([[a, a, EOS]])
    assert greedy_search(model, src, BOS, EOS) == [[a]]
    assert beam_search(model, src, BOS, EOS, beam_size=2) == [[b]]


def test_empty_output_is_allowed_unless_min_len_bars_it():
    a, b = 4, 5
    # EOS first has P = 0.7: the paper's search (tensor2tensor's) returns an empty output
    model = MarkovModel({BOS: {EOS: 0.7, a: 0.3}, a: {EOS: 0.9, b: 0.1}, b: {EOS: 1.0}})
    src = torch.tensor([[a, a, EOS]])
    for beam in (1, 2):
        assert beam_search(model, src, BOS, EOS, beam) == [[]]
        assert beam_search(model, src, BOS, EOS, beam, min_len=1) == [[a]]
        assert beam_search(model, src, BOS, EOS, beam, min_len=2) == [[a, b]]


def test_length_penalty_can_prefer_a_longer_hypothesis():
    a, b, c = 4, 5, 6
    # "A EOS" has P = 0.55 (2 tokens); "B C EOS" has P = 0.45 (3 tokens)
    model = MarkovModel(
        {BOS: {a: 0.55, b: 0.45}, a: {EOS: 1.0}, b: {c: 1.0}, c: {EOS: 1.0}}, vocab=7
    )
    src = torch.tensor([[a, a, a, EOS]])
    assert beam_search(model, src, BOS, EOS, beam_size=2, alpha=0.0) == [[a]]
    for alpha in (0.6, 2.0, 5.0):
        short = torch.tensor(0.55).log() / length_penalty(2, alpha)
        long = torch.tensor(0.45).log() / length_penalty(3, alpha)
        expected = [[a]] if short > long else [[b, c]]
        assert beam_search(model, src, BOS, EOS, beam_size=2, alpha=alpha) == expected
    assert beam_search(model, src, BOS, EOS, beam_size=2, alpha=5.0) == [[b, c]]


def test_nbest_waits_until_no_live_beam_can_beat_the_nth_finished():
    a, b, c = 4, 5, 6
    # after 2 tokens "A EOS" (0.45) and "B EOS" (0.10) have finished while "B C" (0.40) lives:
    # the 1-best may stop, the second best is "B C EOS" (0.40), not "B EOS"
    model = MarkovModel(
        {BOS: {a: 0.5, b: 0.5}, a: {EOS: 0.9, c: 0.1}, b: {EOS: 0.2, c: 0.8}, c: {EOS: 1.0}},
        vocab=7,
    )
    src = torch.tensor([[a, a, EOS]])
    [found] = beam_search_nbest(model, src, BOS, EOS, beam_size=2, alpha=0.0, nbest=2)
    assert [ids for ids, _ in found] == [[a], [b, c]]
    assert [round(score, 6) for _, score in found] == [
        round(float(torch.tensor(p).log()), 6) for p in (0.45, 0.40)
    ]
    assert beam_search(model, src, BOS, EOS, beam_size=2, alpha=0.0) == [[a]]


def test_nbest_scores_are_length_penalised_and_best_first():
    model = tiny_model(CONFIG_DIR / "position" / "sinusoidal.yaml").eval()
    src = sources()
    found = beam_search_nbest(model, src, BOS, EOS, beam_size=4, alpha=0.6, nbest=3)
    assert [hyps[0][0] for hyps in found] == beam_search(model, src, BOS, EOS, 4, 0.6)
    for row, hyps in zip(src, found, strict=True):
        assert len(hyps) == 3 and len({tuple(ids) for ids, _ in hyps}) == 3
        scores = [score for _, score in hyps]
        assert scores == sorted(scores, reverse=True)
        one = row[row != 0][None]  # [1, S]
        for ids, score in hyps:  # teacher-forced log P(Y, EOS) / lp(|Y| + 1)
            with torch.no_grad():
                logp = model(one, torch.tensor([[BOS, *ids]])).log_softmax(-1)[0]  # [T, V]
            total = logp.gather(1, torch.tensor([[*ids, EOS]]).T).sum()
            assert abs(float(total / length_penalty(len(ids) + 1, 0.6)) - score) < 1e-4
