"""CTranslate2: our weights as a TransformerSpec score and translate as our model does.

Teacher-forced log-probabilities equal ours for every position variant CTranslate2 can hold;
``evaluate.py engine=ctranslate2`` on toy test sentences of a trained run gives our greedy output
exactly and a beam-4 BLEU within 2 of ours; the hypothesis scores that the GNMT re-ranking relies
on are log P(Y).
"""

import pytest
import torch

from common.errors import UserError
from data.tokenizer import BOS_ID, EOS_ID
from evaluation.evaluate import evaluate
from interop.ctranslate2_engine import ctranslate2_translator, translate_pieces
from interop.ctranslate2_spec import ctranslate2_spec
from runs.run import load_run
from tests.conftest import compose_config, tiny_model

VOCAB = ["<pad>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(4, 40)]
LOGP_ATOL = 1e-4
SAMPLE = 40
# variants whose attention terms CTranslate2's encoder-decoder spec is not given here: refused
REFUSED = {"alibi", "relative", "t5"}


def eval_config(run_dir, *overrides):
    return compose_config([f"run_dir={run_dir}", *overrides], config_name="evaluate")


class Pieces:
    """A stand-in for our Tokenizer over VOCAB (ids as pieces), for random-weight models."""

    vocab_size = len(VOCAB)

    def pieces(self) -> list[str]:
        return VOCAB


def sources(batch: int = 5, length: int = 8) -> list[list[int]]:
    torch.manual_seed(2)
    rows = torch.randint(4, len(VOCAB), (batch, length)).tolist()
    return [row[: length - i] + [EOS_ID] for i, row in enumerate(rows)]


def our_log_probs(model, src: list[int], tgt: list[int]) -> torch.Tensor:
    """log P of each target token (EOS included) given the source, teacher-forced. [T + 1]"""
    with torch.no_grad():
        logits = model(torch.tensor([src]), torch.tensor([[BOS_ID] + tgt]))[0]  # [T + 1, V]
    return logits.log_softmax(-1).gather(1, torch.tensor(tgt + [EOS_ID])[:, None])[:, 0]


def test_scores_equal_our_log_probs(position_yaml):
    model = tiny_model(position_yaml, vocab_size=len(VOCAB)).eval()
    if position_yaml.stem in REFUSED:
        with pytest.raises(UserError, match="no CTranslate2 equivalent"):
            with ctranslate2_translator(model, Pieces(), "cpu"):
                pass
        return
    targets = [row[:-1][::-1][:6] for row in sources()]
    with ctranslate2_translator(model, Pieces(), "cpu") as translator:
        results = translator.score_batch(
            [[VOCAB[t] for t in s] for s in sources()], [[VOCAB[t] for t in t_] for t_ in targets]
        )
    for src, tgt, result in zip(sources(), targets, results, strict=True):
        ours = our_log_probs(model, src, tgt)
        theirs = torch.tensor(result.log_probs)
        assert theirs.shape == ours.shape
        assert (ours - theirs).abs().max() < LOGP_ATOL, position_yaml.stem


def test_inference_settings_reach_the_converted_model_or_are_refused():
    """SHAPE's eval_shift moves CTranslate2's tables as ours; RoPE scaling is refused, not lost."""
    from tests.conftest import CONFIG_DIR

    targets = [row[:-1][::-1][:6] for row in sources()]
    for name in ("sinusoidal_shape", "learned_shape"):
        model = tiny_model(CONFIG_DIR / "position" / f"{name}.yaml", vocab_size=len(VOCAB))
        model.eval().apply_position_settings({"eval_shift": 30})
        with ctranslate2_translator(model, Pieces(), "cpu") as translator:
            results = translator.score_batch(
                [[VOCAB[t] for t in s] for s in sources()],
                [[VOCAB[t] for t in t_] for t_ in targets],
            )
        for src, tgt, result in zip(sources(), targets, results, strict=True):
            ours = our_log_probs(model, src, tgt)
            assert (ours - torch.tensor(result.log_probs)).abs().max() < LOGP_ATOL, name
    rope = tiny_model(CONFIG_DIR / "position" / "rope.yaml", vocab_size=len(VOCAB)).eval()
    rope.apply_position_settings({"scaling": "ntk", "factor": 2.0})
    with pytest.raises(UserError, match="position_override.scaling=ntk .* engine=ours"):
        with ctranslate2_translator(rope, Pieces(), "cpu"):
            pass


def test_greedy_equals_ours_and_scores_are_log_p(position_yaml):
    from model.search import greedy_search

    model = tiny_model(position_yaml, vocab_size=len(VOCAB)).eval()
    if position_yaml.stem in REFUSED:  # refused, as in the test above
        with pytest.raises(UserError, match="no CTranslate2 equivalent"):
            ctranslate2_spec(model, VOCAB)
        return
    srcs = sources()
    with ctranslate2_translator(model, Pieces(), "cpu") as translator:
        theirs = translate_pieces(translator, srcs, VOCAB, beam=1, max_len_b=6)
        result = translator.translate_batch(
            [[VOCAB[t] for t in srcs[0]]],
            beam_size=2,
            num_hypotheses=2,
            length_penalty=0.0,
            return_scores=True,
            max_decoding_length=10,
            min_decoding_length=0,  # CTranslate2's default 1 renormalizes step 1 without EOS
        )[0]
    for src, hyp in zip(srcs, theirs, strict=True):
        padded = torch.tensor([src])
        assert greedy_search(model, padded, BOS_ID, EOS_ID, 6) == [hyp]
    ours = []
    for pieces in result.hypotheses:
        hyp = [VOCAB.index(p) for p in pieces]
        log_p = our_log_probs(model, srcs[0], hyp)  # [len + 1]
        ended = len(hyp) < 10  # at max_decoding_length CTranslate2 stops without an EOS
        ours.append((log_p if ended else log_p[:-1]).sum().item())
    # log P(Y), unnormalized: what the GNMT re-ranking divides by lp(Y)
    assert all(abs(a - b) < LOGP_ATOL for a, b in zip(result.scores, ours, strict=True))


@pytest.fixture(scope="module")
def toy_files(trained_run, tmp_path_factory):
    """The first SAMPLE pairs of the run's toy test split as src/ref files."""
    from omegaconf import OmegaConf

    from data.corpus import load_split

    state, _ = load_run(trained_run, "last")
    dataset = load_split(OmegaConf.create(state["config"]["data"]), "test")
    folder = tmp_path_factory.mktemp("toy")
    (folder / "test.en").write_text("".join(s + "\n" for s in dataset["src"][:SAMPLE]))
    (folder / "test.de").write_text("".join(s + "\n" for s in dataset["tgt"][:SAMPLE]))
    return folder / "test.en", folder / "test.de"


def test_evaluate_engine_ctranslate2_greedy_identical_and_beam_four_scored(trained_run, toy_files):
    src, ref = toy_files
    runs = {}
    for engine in ("ours", "ctranslate2"):
        for beam, min_len in ((1, 0), (4, 0), (1, 12)):
            name = f"toy-{engine}-beam{beam}-min{min_len}"
            overrides = [f"src_file={src}", f"ref_file={ref}", f"name={name}"]
            overrides += [f"beam={beam}", f"min_len={min_len}"]
            scores = evaluate(eval_config(trained_run, f"engine={engine}", *overrides))
            assert (scores["engine"], scores["min_len"]) == (engine, min_len)
            hyps = (trained_run / "eval" / f"{name}.hyp").read_text().splitlines()
            runs[engine, beam, min_len] = scores, hyps
    for min_len in (0, 12):  # greedy, and greedy with EOS barred before 12 subwords
        assert runs["ctranslate2", 1, min_len][1] == runs["ours", 1, min_len][1]
        assert runs["ctranslate2", 1, min_len][0]["bleu"] == runs["ours", 1, min_len][0]["bleu"]
    assert runs["ours", 1, 12][1] != runs["ours", 1, 0][1]
    ours, theirs = runs["ours", 4, 0], runs["ctranslate2", 4, 0]
    same = sum(a == b for a, b in zip(ours[1], theirs[1], strict=True))
    print(f"beam 4 BLEU: ours {ours[0]['bleu']}, CTranslate2 {theirs[0]['bleu']}; {same} identical")
    assert abs(ours[0]["bleu"] - theirs[0]["bleu"]) < 2.0
    assert same >= 0.75 * SAMPLE


def test_decode_benchmark_times_and_scores_every_engine(trained_run):
    from benchmarks.decode import benchmark_engines, engine_rows

    fig = benchmark_engines(trained_run, sentences=12, beam=2, repeats=1, echo=lambda _: None)
    rows = engine_rows(fig)
    assert [row[0] for row in rows] == [
        "ours fp32",
        "ctranslate2 fp32",
        "ctranslate2 int8",
        "hf generate fp32",
    ]
    for name, *_ in rows:
        assert fig[name]["tokens"] >= 12 and fig[name]["tokens_per_s"] > 0
        assert 0 <= fig[name]["bleu"] <= 100
    assert fig["ours fp32"]["same_as_ours"] == 12


def test_an_exported_folder_loads_and_translates_as_our_greedy_search(
    trained_run, toy_files, tmp_path, capsys
):
    """scripts/export_ctranslate2.py writes a folder ctranslate2.Translator loads; with its
    spm.model, greedy output equals ours; an existing non-empty --out is refused."""
    import ctranslate2

    from data.tokenizer import Tokenizer
    from interop.ctranslate2_engine import translate_ctranslate2
    from tests.conftest import script_main

    export = script_main("export_ctranslate2")
    out = tmp_path / "ct2"
    export(["--run-dir", str(trained_run), "--out", str(out)])
    assert {"model.bin", "spm.model", "export.json"} <= {p.name for p in out.iterdir()}
    src, ref = toy_files
    ours = evaluate(eval_config(trained_run, f"src_file={src}", "name=toy-export", "beam=1"))
    lines = src.read_text().splitlines()
    theirs = translate_ctranslate2(
        ctranslate2.Translator(str(out)), Tokenizer(out / "spm.model"), lines, beam=1
    )
    assert theirs == (trained_run / "eval" / "toy-export.hyp").read_text().splitlines()
    assert ours["n_sentences"] == len(lines)
    with pytest.raises(SystemExit):
        export(["--run-dir", str(trained_run), "--out", str(out)])
    assert "exists and is not empty: pass a new folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        export(
            ["--run-dir", str(trained_run), "--out", str(tmp_path / "q"), "--quantization", "int3"]
        )
    assert "--quantization int3: pass one of int8" in capsys.readouterr().err
    assert not (tmp_path / "q").exists()
