"""evaluate.py: scores against independent references, beam vs greedy, checkpoints, errors."""

import json
import math

import pytest
import sacrebleu
import torch
import torch.nn.functional as F

from data.tokenizer import BOS_ID, EOS_ID
from evaluate import evaluate, load_run, rebuild_model, split_compounds, tokenized_bleu
from model.search import beam_search, greedy_search, length_penalty
from tests.conftest import compose_config


def eval_config(run_dir, *overrides):
    return compose_config([f"run_dir={run_dir}", *overrides], config_name="evaluate")


@pytest.fixture(scope="module")
def scores(trained_run):
    return evaluate(eval_config(trained_run, "split=test"))


def test_scores_file_has_every_field(trained_run, scores):
    written = json.loads((trained_run / "eval" / f"{scores['name']}.json").read_text())
    assert written == json.loads(json.dumps(scores))
    for key in (
        "bleu",
        "signature",
        "chrf",
        "tok_bleu",
        "ppl",
        "n_sentences",
        "checkpoint",
        "beam",
        "lenpen",
        "by_length",
        "hypotheses",
    ):
        assert key in written
    assert written["beam"] == 4 and written["lenpen"] == 0.6 and written["n_sentences"] == 500
    assert sum(row["n"] for row in written["by_length"]) == 500


def test_bleu_is_sacrebleu_on_the_written_hypotheses(trained_run, scores):
    from data.corpus import load_split

    state, _ = load_run(trained_run, "last")
    refs = load_split(state["config"]["data"], "test")["tgt"]
    hyps = open(scores["hypotheses"], encoding="utf-8").read().splitlines()
    assert len(hyps) == len(refs)
    assert scores["bleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    assert scores["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")


def test_ppl_is_exp_of_the_mean_token_nll(trained_run, scores):
    from data.corpus import load_split

    state, _ = load_run(trained_run, "last")
    model, tokenizer = rebuild_model(state, torch.device("cpu"))
    split = load_split(state["config"]["data"], "test")
    total, count = 0.0, 0
    with torch.no_grad():
        for src, tgt in zip(
            tokenizer.encode(split["src"]), tokenizer.encode(split["tgt"]), strict=True
        ):
            target = torch.tensor([tgt + [EOS_ID]])
            logits = model(torch.tensor([src + [EOS_ID]]), torch.tensor([[BOS_ID] + tgt]))
            total += F.cross_entropy(logits[0], target[0], reduction="sum").item()
            count += target.numel()
    assert abs(scores["ppl"] - math.exp(total / count)) < 2e-3


def test_tokenized_bleu_splits_compounds_the_papers_way():
    assert (
        split_compounds("Das Rot-Kreuz-Haus, 3-4 mal")
        == "Das Rot ##AT##-##AT## Kreuz ##AT##-##AT## Haus, 3 ##AT##-##AT## 4 mal"
    )
    assert split_compounds("A-B-C") == "A ##AT##-##AT## B-C"  # as perl's s///g: no overlaps
    hyp, ref = "Das ist ein Rot-Kreuz-Test.", "Das ist ein Rot-Kreuz-Fall."
    expected = sacrebleu.corpus_bleu(
        ["Das ist ein Rot ##AT##-##AT## Kreuz ##AT##-##AT## Test ."],
        [["Das ist ein Rot ##AT##-##AT## Kreuz ##AT##-##AT## Fall ."]],
        tokenize="none",
    ).score
    assert tokenized_bleu([hyp], [ref]) == pytest.approx(expected)
    assert tokenized_bleu([hyp], [hyp]) == pytest.approx(100.0)


def normalized_score(model, src, hyp, alpha=0.6):
    """log P(hyp + EOS | src) / lp(|hyp| + 1), teacher-forced."""
    target = torch.tensor([hyp + [EOS_ID]])
    logits = model(src[None], torch.tensor([[BOS_ID] + hyp]))
    logp = logits.float().log_softmax(-1).gather(-1, target[..., None]).sum().item()
    return logp / length_penalty(len(hyp) + 1, alpha)


@pytest.mark.slow
def test_beam_four_never_scores_below_greedy(tmp_path, cache_dir):
    """On a well-trained tiny model (the quickstart's recipe, ~3 minutes of training)."""
    from data.corpus import load_split
    from train import train

    overrides = [f"run_dir={tmp_path}", f"cache_dir={cache_dir}", "trainer.max_steps=600"]
    train(compose_config(["experiment=quickstart", "trainer.max_minutes=null", *overrides]))
    state, _ = load_run(tmp_path, "last")
    model, tokenizer = rebuild_model(state, torch.device("cpu"))
    sentences = load_split(state["config"]["data"], "validation")["src"][:200]
    with torch.no_grad():
        for ids in tokenizer.encode(sentences):
            src = torch.tensor(ids + [EOS_ID])
            greedy = greedy_search(model, src[None], BOS_ID, EOS_ID)[0]
            beam = beam_search(model, src[None], BOS_ID, EOS_ID, beam_size=4)[0]
            assert normalized_score(model, src, beam) >= normalized_score(model, src, greedy) - 1e-5


def test_checkpoint_choices(trained_run):
    for choice, tag in (
        ("best", "best"),
        ("avg:3", "avg3"),
        (str(trained_run / "checkpoints" / "step_200.pt"), "step_200"),
    ):
        out = evaluate(
            eval_config(trained_run, f"checkpoint={choice}", "split=validation", "beam=1")
        )
        assert out["checkpoint"] == tag and out["n_sentences"] == 500


def test_missing_run_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="has no checkpoints"):
        evaluate(eval_config(tmp_path))
