"""The paper's update on any number of ranks: ~25k real target tokens, measured on real batches."""

import json

import numpy as np
import pytest

from data.batching import TokenBatchSampler, plan_update
from data.corpus import prepare_data, sequence_lengths
from tests.conftest import compose_config, shared_data, tiny_run_overrides
from training.launch import train

TARGET = 25_000  # trainer.effective_tokens, the paper's §5.1


def corpus_lengths(cache_dir, *overrides: str) -> tuple[np.ndarray, np.ndarray]:
    """Token lengths of a real training split, tokenized as train.py does."""
    cfg = compose_config([*overrides, f"cache_dir={cache_dir}", "run_dir=unused"])
    split = prepare_data(cfg.data, cfg.cache_dir).splits["train"]
    return sequence_lengths(split, "src_ids"), sequence_lengths(split, "tgt_ids")


def measured_tokens_per_update(src, tgt, plan, world: int) -> float:
    """Mean real target tokens per update, summed over the ranks' real sampler batches."""
    per_rank = []
    for rank in range(world):
        sampler = TokenBatchSampler(
            src, tgt, plan.max_tokens, seed=1, num_replicas=world, rank=rank
        )
        real = [int(tgt[batch].sum()) for batch in sampler]
        updates = len(real) // plan.update_freq  # a last partial update is not an update
        per_rank.append(np.reshape(real[: updates * plan.update_freq], (updates, -1)).sum(1))
    return float(np.sum(per_rank, axis=0).mean())


CORPORA = {
    "toy": ["data=toy", "data.corpus.train_size=20000"],
    "multi30k": ["data=multi30k"],
}


@pytest.mark.parametrize("corpus", list(CORPORA))
@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_update_holds_the_target_real_tokens_on_1_2_4_8_ranks(corpus, world, cache_dir):
    overrides = CORPORA[corpus]
    if corpus == "multi30k":
        overrides = [*overrides, f"data.path={shared_data('multi30k')}"]
    src, tgt = corpus_lengths(cache_dir, *overrides)
    plan = plan_update(src, tgt, TARGET, 4096, world)
    measured = measured_tokens_per_update(src, tgt, plan, world)
    assert abs(measured / TARGET - 1) < 0.05, (plan, measured)
    assert abs(plan.real_tokens / TARGET - 1) < 0.05
    assert plan.max_tokens <= 4096
    old_freq = max(1, round(TARGET / (world * 4096)))  # the former derivation, padded tokens
    old = measured_tokens_per_update(src, tgt, type(plan)(4096, old_freq, 0), world)
    if world in (4, 8):
        assert old / TARGET - 1 > 0.05  # 0.76 rounded up to 1 batch a rank: too large


def test_explicit_update_freq_keeps_the_budget():
    rng = np.random.default_rng(0)
    src = tgt = rng.integers(5, 60, 5000)
    plan = plan_update(src, tgt, TARGET, 4096, world=2, update_freq=3)
    assert (plan.max_tokens, plan.update_freq) == (4096, 3)


def test_train_log_and_metrics_report_real_tokens_per_update(tmp_path, cache_dir, caplog):
    overrides = ["trainer.max_steps=4", "trainer.log_every=2", "data.corpus.train_size=600"]
    with caplog.at_level("INFO", logger="train"):
        metrics = train(compose_config(tiny_run_overrides(tmp_path, cache_dir, *overrides)))
    per_update = metrics["real_target_tokens_per_update"]
    assert per_update == round(metrics["tokens_seen"] / metrics["steps"])
    assert abs(per_update / 1024 - 1) < 0.05  # trainer.effective_tokens=1024 in these runs
    assert json.loads((tmp_path / "metrics.json").read_text())["max_tokens"] <= 1024
    assert "real target tokens per update expected" in caplog.text  # the plan, at the start
    assert "tok/update" in caplog.text  # the measured mean, in every progress line
