"""The new-user replay (docs/replay.md): each mistake tried by hand on a fresh checkout, replayed.

Every case runs in-process through the real entry (training.launch.train, evaluate, a script's
main) on tests/e2e/test_reliability.py's tiny corpus and 2-step run: it must be refused with one
`error:` line naming the key or file (or give the correct result), and write nothing. The cases
fixed by the replay (a 0-layer decoder trained, `trainer.compile=maybe` compiled, RoPE's
`position.base=-1` diverged and blamed the learning rate, `optim.betas`, `model.dropout=abc`,
`optim.label_smoothing=abc` and `data.max_ratio=abc` were tracebacks) fail on the code before it.
"""

import pytest
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from common.errors import UserError
from tests.conftest import compose_config
from tests.e2e import test_reliability as reliability
from tests.e2e.test_reliability import text_overrides
from training.launch import train

bad = reliability.bad  # the fixture: corpora (good and broken) and a 2-step run, one folder

# override(s) -> texts the one line must contain; refused before any data is read
SETTINGS = {
    "optim.betas=[0.9]": ["optim.betas=[0.9]", "two numbers"],
    "optim.betas=[0.9,1.5]": ["optim.betas=[0.9, 1.5]", "below 1"],
    "optim.betas=abc": ["optim.betas=abc", "[0.9,0.98]"],
    "optim.label_smoothing=abc": ["optim.label_smoothing=abc", "from 0 to below 1"],
    "optim.clip_norm=abc": ["optim.clip_norm=abc", "or null"],
    "optim.clip_norm=-1": ["optim.clip_norm=-1", "or null"],
    "optim.lr_scale=0": ["optim.lr_scale=0"],
    "optim.lr_scale=abc": ["optim.lr_scale=abc"],
    "optim.eps=-1": ["optim.eps=-1"],
    "model.dropout=1.5": ["model.dropout=1.5", "from 0 to below 1"],
    "model.dropout=-0.1": ["model.dropout=-0.1", "from 0 to below 1"],
    "model.dropout=abc": ["model.dropout=abc"],
    "model.n_heads=0": ["model.n_heads=0", "whole number >= 1"],
    "model.n_encoder_layers=0": ["model.n_encoder_layers=0", "whole number >= 1"],
    "model.n_decoder_layers=-1": ["model.n_decoder_layers=-1", "whole number >= 1"],
    "model.d_model=0": ["model.d_model=0"],
    "model.d_model=abc": ["model.d_model=abc"],
    "model.d_ff=0": ["model.d_ff=0"],
    "model.max_positions=0": ["model.max_positions=0"],
    "model.layer_norm_eps=-1": ["model.layer_norm_eps=-1"],
    "data.max_len=0": ["data.max_len=0", ">= 2"],
    "data.max_len=abc": ["data.max_len=abc"],
    "data.tokenizer_sample=0": ["data.tokenizer_sample=0"],
    "data.vocab_size=4": ["data.vocab_size=4", ">= 5"],
    "data.max_tokens=0": ["data.max_tokens=0"],
    "trainer.compile=maybe": ["trainer.compile=maybe", "true or false"],
    "trainer.start_over=maybe": ["trainer.start_over=maybe", "true or false"],
    "trainer.evaluate_at_end=yes": ["trainer.evaluate_at_end=yes", "true or false"],
    "trainer.max_steps=abc": ["trainer.max_steps=abc"],
    "trainer.max_steps=0": ["trainer.max_steps=0"],
    "trainer.max_steps=2.5": ["trainer.max_steps=2.5", "whole number"],
    "trainer.keep_last=0": ["trainer.keep_last=0"],
    "trainer.num_threads=0": ["trainer.num_threads=0"],
    "trainer.max_epochs=0": ["trainer.max_epochs=0"],
    "trainer.effective_tokens=0": ["trainer.effective_tokens=0"],
    "trainer.save_every_steps=0": ["trainer.save_every_steps=0"],
    "trainer.save_every_minutes=-1": ["trainer.save_every_minutes=-1"],
    "trainer.eval_bleu_sentences=-1": ["trainer.eval_bleu_sentences=-1"],
    "trainer.dist_timeout_minutes=0": ["trainer.dist_timeout_minutes=0"],
    "trainer.precision=fp8": ["trainer.precision=fp8", "auto, bf16 or fp32"],
    "seed=abc": ["seed=abc"],
}
# override(s) -> texts of the one line; refused once the corpus or the model is built
LATER = {
    "data.num_proc=0": (["data.num_proc=0"], ["data.num_proc=0", "auto"]),
    "data.num_proc=abc": (["data.num_proc=abc"], ["data.num_proc=abc", "auto"]),
    "data.max_ratio=0": (["data.max_ratio=0"], ["data.max_ratio", ">= 1 or null"]),
    "data.max_ratio=abc": (["data.max_ratio=abc"], ["data.max_ratio", "got abc"]),
    "data.max_len=1": (["data.max_len=1"], ["data.max_len", "subwords + EOS"]),
    "data.train_max_src_words=0": (["data.train_max_src_words=0"], ["train_max_src_words"]),
    "data.train_max_src_words=x": (["data.train_max_src_words=x"], ["train_max_src_words", "x"]),
    "data.tgt_lang=en": (["data.tgt_lang=en"], ["data.src_lang and data.tgt_lang", "'en'"]),
    "data.train_join_share=1.5": (["data.train_join_share=1.5"], ["data.train_join_share=1.5"]),
    "data.train_join_max=1": (
        ["data.train_join_share=0.5", "data.train_join_max=1"],
        ["data.train_join_max=1", "at least 2"],
    ),
    "rope position.base=-1": (["position=rope", "position.base=-1"], ["position.base=-1"]),
    "sinusoidal position.base=abc": (["position.base=abc"], ["position.base=abc", "above 1"]),
    "sinusoidal position.base=1": (["position.base=1"], ["position.base=1", "above 1"]),
    "rope position.scaling=bogus": (
        ["position=rope", "position.scaling=bogus"],
        ["scaling=bogus", "linear, ntk or null"],
    ),
    "rope position.factor=abc": (["position=rope", "position.factor=abc"], ["factor=abc"]),
    "rope position.factor=0.5": (["position=rope", "position.factor=0.5"], ["factor=0.5"]),
    "t5 position.num_buckets=0": (
        ["position=t5", "position.num_buckets=0"],
        ["position.num_buckets=0", "at least 4 buckets"],
    ),
    "t5 position.max_distance=0": (
        ["position=t5", "position.max_distance=0"],
        ["max_distance=0", "at least 4 buckets"],
    ),
    "rope with an odd head size": (
        ["position=rope", "model.d_model=36", "model.n_heads=4"],
        ["position=rope", "even head size"],
    ),
}
# a typo on the command line: Hydra refuses it while composing, naming what it could not find
TYPOS = {
    "trainer.max_step=5": "max_step",
    "positon=learned": "positon",
    "experiment=quickstrat": "quickstrat",
    "model=huge": "model/huge",
    "data=wmt16": "data/wmt16",
    "optim=adam": "optim/adam",
    "trainer=fast": "trainer/fast",
    "+trainer.max_steps=5": "max_steps",
    "model.dropout": "model.dropout",
}


def refused(overrides: list[str], run_dir) -> str:
    """train()'s one-line UserError for overrides; the run directory is left without records."""
    with pytest.raises(UserError) as raised:
        train(compose_config([*overrides, f"run_dir={run_dir}"]))
    message = str(raised.value)
    assert "\n" not in message, message
    assert not (run_dir / "metrics.json").exists() and not (run_dir / "checkpoints").exists()
    assert not (run_dir / ".hydra").exists()
    return message


@pytest.mark.parametrize("override", SETTINGS)
def test_a_setting_out_of_range_is_one_line_naming_the_key(override, bad, tmp_path):
    message = refused([*text_overrides(bad), override], tmp_path / "run")
    for text in SETTINGS[override]:
        assert text in message, message


@pytest.mark.parametrize("case", LATER)
def test_a_data_or_position_setting_out_of_range_is_one_line(case, bad, tmp_path):
    overrides, expected = LATER[case]
    message = refused([*text_overrides(bad), *overrides], tmp_path / "run")
    for text in expected:
        assert text in message, message


@pytest.mark.parametrize("override", TYPOS)
def test_a_typo_on_the_command_line_names_what_was_not_found(override, bad):
    with pytest.raises((HydraException, OmegaConfBaseException)) as raised:
        compose_config([*text_overrides(bad), override])
    assert TYPOS[override] in str(raised.value), str(raised.value)
