"""Tests for data/batching.py: token-budget batch sampler, collate and padding_fraction."""

from collections import Counter
from functools import partial

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from common.errors import UserError
from data.batching import TokenBatchSampler, collate, padding_fraction
from data.tokenizer import BOS_ID, PAD_ID

N = 20_000


def uniform_lengths(n: int = N, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Independent uniform source and target lengths in [1, 150] (hard for bucketing)."""
    rng = np.random.default_rng(seed)
    return rng.integers(1, 151, n), rng.integers(1, 151, n)


def realistic_lengths(n: int = N, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Lognormal source lengths in [5, 80] and correlated target lengths (about 1.1x source)."""
    rng = np.random.default_rng(seed)
    src = np.clip(np.round(rng.lognormal(np.log(20), 0.6, n)), 5, 80).astype(np.int64)
    tgt = np.clip(np.round(src * rng.lognormal(np.log(1.1), 0.2, n)), 5, 80).astype(np.int64)
    return src, tgt


def epoch_batches(sampler: TokenBatchSampler, epoch: int) -> list[list[int]]:
    """All batches of `epoch` from the start."""
    sampler.set_epoch(epoch)
    sampler.load_state_dict({"epoch": epoch, "position": 0})
    return list(sampler)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("max_tokens", [150, 1000, 4096])
def test_every_batch_within_budget_on_both_sides(shuffle, max_tokens):
    src, tgt = uniform_lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens, shuffle=shuffle, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler) > 0
    for batch in batches:
        assert len(batch) > 0
        assert len(batch) * src[batch].max() <= max_tokens
        assert len(batch) * tgt[batch].max() <= max_tokens


def test_batches_are_filled_greedily():
    src, tgt = realistic_lengths()
    max_tokens = 4096
    sampler = TokenBatchSampler(src, tgt, max_tokens, shuffle=False)
    batches = list(sampler)
    # In sorted order, each batch is full: adding the next batch's first example would overflow.
    for batch, following in zip(batches[:-1], batches[1:], strict=True):
        grown = batch + following[:1]
        cost = len(grown) * max(src[grown].max(), tgt[grown].max())
        assert cost > max_tokens


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_index_exactly_once_per_epoch(shuffle):
    src, tgt = uniform_lengths()
    sampler = TokenBatchSampler(src, tgt, 2000, shuffle=shuffle, seed=1)
    for epoch in (0, 1):
        flat = [i for batch in epoch_batches(sampler, epoch) for i in batch]
        assert len(flat) == N
        assert sorted(flat) == list(range(N))


def test_padding_fraction_is_small_on_realistic_lengths():
    src, tgt = realistic_lengths()
    sampler = TokenBatchSampler(src, tgt, 4096, seed=0)
    fraction = padding_fraction(list(sampler), src, tgt)
    assert 0.0 < fraction < 0.10
    # Random batches of the same sizes are far worse: the bucketing is what keeps padding low.
    rng = np.random.default_rng(0)
    perm = rng.permutation(N)
    sizes = [len(batch) for batch in epoch_batches(sampler, 0)]
    random_batches = np.split(perm, np.cumsum(sizes)[:-1])
    assert padding_fraction(random_batches, src, tgt) > 2 * fraction


def test_padding_fraction_hand_example():
    src = [2, 4, 3]
    tgt = [5, 5, 1]
    # Batch [0, 1]: src 2 x 4 = 8 slots (6 real), tgt 2 x 5 = 10 slots (10 real).
    # Batch [2]: src 3 slots (3 real), tgt 1 slot (1 real). Total 22 slots, 20 real.
    assert padding_fraction([[0, 1], [2]], src, tgt) == pytest.approx(2 / 22)
    assert padding_fraction([], src, tgt) == 0.0


def test_same_seed_and_epoch_reproduce_and_epochs_differ():
    src, tgt = realistic_lengths()
    first = TokenBatchSampler(src, tgt, 4096, seed=7)
    second = TokenBatchSampler(src, tgt, 4096, seed=7)
    assert epoch_batches(first, 2) == epoch_batches(second, 2)
    assert epoch_batches(first, 2) == epoch_batches(first, 2)

    epoch2, epoch3 = epoch_batches(first, 2), epoch_batches(first, 3)
    assert epoch2 != epoch3
    # Different batch order, and different batch contents (ties among equal lengths reshuffled).
    assert [len(b) for b in epoch2] != [len(b) for b in epoch3]
    assert {tuple(sorted(b)) for b in epoch2} != {tuple(sorted(b)) for b in epoch3}
    other_seed = TokenBatchSampler(src, tgt, 4096, seed=8)
    assert epoch_batches(other_seed, 2) != epoch2


def test_shuffle_false_is_fixed_and_length_sorted():
    src, tgt = realistic_lengths()
    sampler = TokenBatchSampler(src, tgt, 4096, shuffle=False, seed=5)
    epoch0, epoch1 = epoch_batches(sampler, 0), epoch_batches(sampler, 1)
    assert epoch0 == epoch1
    longest = [max(src[b].max(), tgt[b].max()) for b in epoch0]
    assert longest == sorted(longest)


@pytest.mark.parametrize("shuffle", [True, False])
def test_two_and_three_replicas_shard_disjointly_with_equal_counts(shuffle):
    src, tgt = uniform_lengths()
    # Pick a budget whose global batch count is not a multiple of 3, so padding is exercised.
    for max_tokens in range(2000, 2100):
        reference = TokenBatchSampler(src, tgt, max_tokens, shuffle=shuffle, seed=11)
        if len(reference) % 3:
            break
    else:
        pytest.fail("no budget with a batch count that is not a multiple of 3")
    global_batches = epoch_batches(reference, 4)
    num_global = len(global_batches)

    for replicas in (2, 3):
        shards = []
        for rank in range(replicas):
            sampler = TokenBatchSampler(
                src, tgt, max_tokens, shuffle=shuffle, seed=11, num_replicas=replicas, rank=rank
            )
            shards.append(epoch_batches(sampler, 4))
            assert len(shards[-1]) == len(sampler) == -(-num_global // replicas)
        assert len({len(shard) for shard in shards}) == 1

        repeats = len(shards[0]) * replicas - num_global
        assert 0 <= repeats < replicas
        # Rank r holds global batches r, r + R, ...; the padded tail repeats the first batches.
        padded = global_batches + global_batches[:repeats]
        for rank, shard in enumerate(shards):
            assert shard == padded[rank::replicas]

        counts = Counter(i for shard in shards for batch in shard for i in batch)
        assert set(counts) == set(range(N))
        repeated = {i for batch in global_batches[:repeats] for i in batch}
        assert {i for i, c in counts.items() if c > 1} == repeated
        assert all(c <= 2 for c in counts.values())
    assert repeats > 0  # the 3-replica case really exercised the padding


def test_more_replicas_than_batches_still_gives_each_rank_a_batch():
    src, tgt = [3, 3, 3], [4, 4, 4]
    shards = [
        list(TokenBatchSampler(src, tgt, 100, num_replicas=4, rank=rank)) for rank in range(4)
    ]
    # One global batch, repeated to every rank (order inside it is shuffled among equal lengths).
    assert [[sorted(batch) for batch in shard] for shard in shards] == [[[0, 1, 2]]] * 4


def test_resume_mid_epoch_yields_exactly_the_remaining_batches():
    src, tgt = realistic_lengths()
    kwargs = {"shuffle": True, "seed": 13, "num_replicas": 2, "rank": 1}
    full = epoch_batches(TokenBatchSampler(src, tgt, 2048, **kwargs), 3)

    sampler = TokenBatchSampler(src, tgt, 2048, **kwargs)
    sampler.set_epoch(3)
    iterator = iter(sampler)
    k = 17
    consumed = [next(iterator) for _ in range(k)]
    state = sampler.state_dict()
    assert state == {"epoch": 3, "position": k}
    assert consumed == full[:k]

    resumed = TokenBatchSampler(src, tgt, 2048, **kwargs)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert rest == full[k:]
    assert resumed.state_dict() == {"epoch": 3, "position": len(full)}


def test_position_survives_same_epoch_and_resets_on_new_epoch():
    src, tgt = realistic_lengths()
    sampler = TokenBatchSampler(src, tgt, 4096, seed=2)
    sampler.set_epoch(1)
    iterator = iter(sampler)
    next(iterator)
    next(iterator)
    sampler.set_epoch(1)
    assert sampler.state_dict() == {"epoch": 1, "position": 2}
    rest = list(sampler)
    assert len(rest) == len(sampler) - 2
    assert list(sampler) == []  # the epoch is used up until set_epoch() moves on
    sampler.set_epoch(2)
    assert sampler.state_dict() == {"epoch": 2, "position": 0}
    assert len(list(sampler)) == len(sampler)


def test_load_state_dict_rejects_bad_position():
    sampler = TokenBatchSampler([3, 4], [4, 5], 100)
    with pytest.raises(ValueError, match="position"):
        sampler.load_state_dict({"epoch": 0, "position": len(sampler) + 1})


def test_too_long_example_raises_in_init_with_clear_message():
    src = np.full(2000, 10)
    tgt = np.full(2000, 12)
    tgt[1234] = 612
    with pytest.raises(UserError) as info:
        TokenBatchSampler(src, tgt, 500)
    message = str(info.value)
    assert "\n" not in message
    assert "max_tokens=500" in message
    assert "612 target tokens" in message
    assert "example 1234" in message

    src[7] = 700
    with pytest.raises(UserError, match=r"700 source tokens, example 7"):
        TokenBatchSampler(src, tgt, 500)
    TokenBatchSampler(src, tgt, 700)  # exactly at the budget is fine


@pytest.mark.parametrize(
    ("src", "tgt", "kwargs"),
    [
        ([1, 2], [1], {}),
        ([1, 0], [1, 2], {}),
        ([1, 2], [1, 2], {"num_replicas": 2, "rank": 2}),
        ([1, 2], [1, 2], {"max_tokens": 0}),
    ],
)
def test_invalid_arguments_raise(src, tgt, kwargs):
    kwargs = {"max_tokens": 10, **kwargs}
    with pytest.raises((ValueError, UserError)):
        TokenBatchSampler(src, tgt, **kwargs)


def test_empty_dataset_has_no_batches():
    sampler = TokenBatchSampler([], [], 100, num_replicas=2, rank=1)
    assert len(sampler) == 0
    assert list(sampler) == []


def test_collate_hand_example():
    examples = [
        {"src_ids": [5, 6, 3], "tgt_ids": [7, 3]},
        {"src_ids": [8, 3], "tgt_ids": [9, 10, 11, 3]},
    ]
    batch = collate(examples, pad_id=PAD_ID, bos_id=BOS_ID)
    assert set(batch) == {"src", "tgt_in", "tgt_out"}
    for tensor in batch.values():
        assert tensor.dtype == torch.long
    assert batch["src"].tolist() == [[5, 6, 3], [8, 3, 0]]
    assert batch["tgt_out"].tolist() == [[7, 3, 0, 0], [9, 10, 11, 3]]
    assert batch["tgt_in"].tolist() == [[2, 7, 0, 0], [2, 9, 10, 11]]
    assert (batch["tgt_in"][:, 0] == 2).all()

    custom = collate(examples, pad_id=-1, bos_id=99)
    assert custom["src"].tolist() == [[5, 6, 3], [8, 3, -1]]
    assert custom["tgt_in"].tolist() == [[99, 7, -1, -1], [99, 9, 10, 11]]


def test_collate_rejects_empty_input():
    with pytest.raises(ValueError):
        collate([], pad_id=PAD_ID, bos_id=BOS_ID)
    with pytest.raises(ValueError):
        collate([{"src_ids": [4, 3], "tgt_ids": []}], pad_id=PAD_ID, bos_id=BOS_ID)


def test_sampler_as_dataloader_batch_sampler():
    rng = np.random.default_rng(0)
    src_lengths, tgt_lengths = realistic_lengths(2000, seed=4)
    dataset = [
        {
            "src_ids": rng.integers(4, 100, s - 1).tolist() + [3],
            "tgt_ids": rng.integers(4, 100, t - 1).tolist() + [3],
        }
        for s, t in zip(src_lengths, tgt_lengths, strict=True)
    ]
    max_tokens = 1024
    sampler = TokenBatchSampler(src_lengths, tgt_lengths, max_tokens, seed=0)
    loader = DataLoader(
        dataset, batch_sampler=sampler, collate_fn=partial(collate, pad_id=PAD_ID, bos_id=BOS_ID)
    )
    assert len(loader) == len(sampler)
    seen = 0
    for batch in loader:
        b, s = batch["src"].shape
        assert batch["tgt_in"].shape == batch["tgt_out"].shape
        t = batch["tgt_out"].shape[1]
        assert b * s <= max_tokens and b * t <= max_tokens
        assert (batch["tgt_in"][:, 0] == 2).all()
        assert ((batch["src"] == 3).sum(dim=1) == 1).all()  # one EOS per row, rest pad
        seen += b
    assert seen == len(dataset)
    assert sampler.state_dict() == {"epoch": 0, "position": len(sampler)}
