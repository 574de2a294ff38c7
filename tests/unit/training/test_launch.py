"""training/launch.py: the first line of a launch says what it is about to train."""

import pytest
import torch

from data.tokenizer import PAD_ID
from model.transformer import build_model, count_parameters
from studies.tuning import DIVERGED_LINE
from tests.conftest import compose_config
from training.launch import launch_summary, skipped_update


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (  # no experiment=: train.yaml's defaults, the base model for 100,000 steps
            ["position=learned"],
            "d_model 512, 6+6 layers, about {size}M parameters at data.vocab_size=1000) with "
            "position=learned for 100,000 steps on toy_corpus (100,000 generated pairs, en->de)",
        ),
        (
            ["experiment=quickstart", "trainer.max_minutes=2", "data=multi30k"],
            "d_model 128, 2+2 layers, about {size}M parameters at data.vocab_size=8000) with "
            "position=sinusoidal for 800 steps or 2 minutes on load_multi30k "
            "(bentrevett/multi30k, en->de)",
        ),
    ],
)
def test_the_summary_names_model_size_budget_and_corpus(overrides, expected):
    cfg = compose_config(overrides)
    built = build_model(cfg.model, cfg.position, cfg.data.vocab_size, PAD_ID)
    size = f"{count_parameters(built) / 1e6:.1f}"  # what a real model of these settings holds
    line = launch_summary(cfg)
    assert line == f"training a model ({expected.format(size=size)}", line
    assert torch.get_default_device() == torch.device("cpu")  # the meta device stayed inside


def test_a_skipped_fp16_update_names_the_lowered_loss_scale(caplog, tmp_path):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**15)
    with caplog.at_level("WARNING", logger="train"):
        skipped_update(1, 41, tmp_path, scaler)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.endswith("update skipped (1 in a row); fp16 loss scale now 32768"), line
    assert DIVERGED_LINE.search(line).group(1) == "1"  # the studies still count it
