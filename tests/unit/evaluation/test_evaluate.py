"""evaluate.py: scores against independent references, beam vs greedy, checkpoints, errors."""

import json
import math
import os
import shlex
import shutil
import subprocess
import sys

import pytest
import sacrebleu
import torch
import torch.nn.functional as F

from common.errors import UserError
from data.tokenizer import BOS_ID, EOS_ID, Tokenizer
from evaluation.evaluate import evaluate
from evaluation.translate import translate
from model.position import PositionRangeError
from model.search import beam_search, greedy_search, length_penalty
from runs.checkpoint import CheckpointError, content_sha256
from runs.run import load_run, rebuild_model
from tests.conftest import ROOT, compose_config, tiny_run_overrides

LEARNED_ROWS = 80


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
        "precision",
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
    from training.launch import train

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
        ("step_240.pt", "step_240"),  # a bare name is looked for in <run_dir>/checkpoints
    ):
        out = evaluate(
            eval_config(trained_run, f"checkpoint={choice}", "split=validation", "beam=1")
        )
        assert out["checkpoint"] == tag and out["n_sentences"] == 500
    for choice, message in (("avg:0", "positive integer"), ("avg:99", "only 5 step checkpoints")):
        with pytest.raises(CheckpointError, match=message):
            evaluate(eval_config(trained_run, f"checkpoint={choice}"))


def test_another_search_is_named_and_never_written_over_the_papers(trained_run, tmp_path):
    """lenpen=1 wrote validation-last-beam4 over the paper-setting evaluation (was)."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    paper = evaluate(eval_config(run, "split=test", "beam=1"))
    before = (run / "eval" / f"{paper['name']}.json").read_bytes()
    other = evaluate(eval_config(run, "split=test", "beam=1", "lenpen=1.0", "min_len=1"))
    assert (paper["name"], other["name"]) == ("test-last-beam1", "test-last-beam1-lenpen1-minlen1")
    assert (run / "eval" / "test-last-beam1.json").read_bytes() == before
    with pytest.raises(UserError, match="name=test-last-beam1 is the default name of other"):
        evaluate(eval_config(run, "split=test", "beam=1", "lenpen=1.0", "name=test-last-beam1"))


def test_an_existing_evaluation_of_other_settings_is_never_replaced(trained_run, tmp_path):
    """Probe 18-5: a src_file named test-last-beam1.en replaced the split's evaluation of that
    name; 9-5: another checkpoint scored on the run's own file replaced its evaluation."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    evaluate(eval_config(run, "split=test", "beam=1"))
    before = (run / "eval" / "test-last-beam1.json").read_bytes()
    srcs, _ = toy_pairs(run, "test", 5)
    for name in ("test-last-beam1.en", "s5.en"):
        (tmp_path / name).write_text("".join(f"{line}\n" for line in srcs), encoding="utf-8")
    named_like = f"src_file={tmp_path / 'test-last-beam1.en'}"
    with pytest.raises(UserError, match=r"beam1.json holds an evaluation of other settings \("
                       r"split: test -> None; src_file: None -> "):  # fmt: skip
        evaluate(eval_config(run, named_like, "beam=1"))
    assert (run / "eval" / "test-last-beam1.json").read_bytes() == before
    evaluate(eval_config(run, f"src_file={tmp_path / 's5.en'}", "beam=1"))
    again = evaluate(eval_config(run, f"src_file={tmp_path / 's5.en'}", "beam=1"))  # refreshed
    with pytest.raises(UserError, match=r"s5.json holds .* \(checkpoint: last -> best\)"):
        evaluate(eval_config(run, f"src_file={tmp_path / 's5.en'}", "beam=1", "checkpoint=best"))
    assert json.loads((run / "eval" / "s5.json").read_text()) == json.loads(json.dumps(again))


def test_missing_run_directory_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="has no checkpoints"):
        evaluate(eval_config(tmp_path))


def run_command(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run a command of this project as a user would, without HYDRA_FULL_ERROR."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )


def toy_pairs(run_dir, split: str, n: int) -> tuple[list[str], list[str]]:
    """The first n source and reference sentences of a split of the run's corpus."""
    from data.corpus import load_split

    state, _ = load_run(run_dir, "last")
    dataset = load_split(state["config"]["data"], split)
    return list(dataset["src"][:n]), list(dataset["tgt"][:n])


def eval_files(run_dir) -> set[str]:
    """The names of the files in <run_dir>/eval (none if it does not exist)."""
    return {p.name for p in (run_dir / "eval").iterdir()} if (run_dir / "eval").is_dir() else set()


def test_files_from_the_command_line(trained_run, tmp_path):
    srcs, refs = toy_pairs(trained_run, "test", 40)
    (tmp_path / "news.en").write_text("".join(s + "\n" for s in srcs), encoding="utf-8")
    (tmp_path / "news.de").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    files = [f"src_file={tmp_path / 'news.en'}", f"ref_file={tmp_path / 'news.de'}"]
    done = run_command("evaluate.py", f"run_dir={trained_run}", *files, "beam=1")
    assert done.returncode == 0, done.stderr
    written = json.loads((trained_run / "eval" / "news.json").read_text())
    hyps = (trained_run / "eval" / "news.hyp").read_text(encoding="utf-8").splitlines()
    assert written["hypotheses"] == str(trained_run / "eval" / "news.hyp")
    assert written["n_sentences"] == len(hyps) == 40 and written["beam"] == 1
    assert written["bleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    lines = done.stdout.strip().splitlines()
    assert lines[-2] == f"run directory: {trained_run}"
    assert lines[-1].startswith(f"sacreBLEU {written['bleu']:.2f} on news (40 sentences")

    mine = evaluate(eval_config(trained_run, *files, "beam=1", "name=mine"))
    assert mine["name"] == "mine" and (trained_run / "eval" / "mine.json").is_file()
    assert mine["bleu"] == written["bleu"]


def test_sources_without_references_give_translations_only(trained_run, tmp_path):
    srcs, _ = toy_pairs(trained_run, "test", 7)
    (tmp_path / "plain.en").write_text("\n".join(srcs) + "\n", encoding="utf-8")
    out = evaluate(eval_config(trained_run, f"src_file={tmp_path / 'plain.en'}", "beam=1"))
    written = json.loads((trained_run / "eval" / "plain.json").read_text())
    assert written == json.loads(json.dumps(out))
    assert not {"bleu", "chrf", "tok_bleu", "ppl", "by_length"} & set(written)
    hyps = open(written["hypotheses"], encoding="utf-8").read().splitlines()
    assert len(hyps) == written["n_sentences"] == 7 and all(hyps)


def test_bad_files_are_one_clear_error_and_write_nothing(trained_run, tmp_path):
    from data.corpus import DataError

    (tmp_path / "three.en").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "two.de").write_text("a\nb\n", encoding="utf-8")
    before = eval_files(trained_run)
    cases = [
        ([f"src_file={tmp_path / 'nope.en'}"], "src_file=.*nope.en: not found"),
        (
            [f"src_file={tmp_path / 'three.en'}", f"ref_file={tmp_path / 'nope.de'}"],
            "ref_file=.*nope.de: not found",
        ),
        (
            [f"src_file={tmp_path / 'three.en'}", f"ref_file={tmp_path / 'two.de'}"],
            "has 3 lines but ref_file=.*two.de has 2: pass line-aligned files",
        ),
        ([f"ref_file={tmp_path / 'two.de'}"], "ref_file is set without src_file"),
    ]
    for overrides, message in cases:
        with pytest.raises(DataError, match=message):
            evaluate(eval_config(trained_run, *overrides))
    assert eval_files(trained_run) == before


def test_translate_mode_reads_stdin(trained_run):
    lines = ["The dog sees the cat .", "", "The woman reads a book ."]
    done = run_command(
        "evaluate.py", f"run_dir={trained_run}", "translate=true", stdin="\n".join(lines) + "\n"
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.split("\n")
    assert len(out) == 4 and out[-1] == ""  # one line per input line, newline-terminated
    assert out[1] == "" and out[0] and out[2]
    state, _ = load_run(trained_run, "last")
    model, tokenizer = rebuild_model(state, torch.device("cpu"))
    assert out[:3] == translate(model, tokenizer, lines, torch.device("cpu"))


def test_translate_with_a_split_is_refused_before_reading_stdin(tmp_path):
    """translate=true reads stdin: a split beside it would be ignored, so it is refused."""
    done = run_command("evaluate.py", f"run_dir={tmp_path}", "translate=true", "split=test")
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: translate=true reads the sentences on stdin but split=test is set too: leave "
        "split out to translate stdin, or translate out to score the split"
    ]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["translate=true", "+beem=2"], r"^beem: evaluate.py reads no such option"),
        (["translate=true", "name=foo"], r"^name=foo names an evaluation's files, and translate"),
        (["ctranslate2_compute_type=int8"], r"^ctranslate2_compute_type=int8 is read by engine="),
        (["engine=ctranslate2", "precision=bf16"], r"^precision=bf16 sets engine=ours'"),
    ],
)
def test_an_option_the_evaluation_would_leave_unread_is_refused(tmp_path, overrides, says):
    """Each was accepted and ignored without a word (a misspelt key, a name no file takes, the
    other engine's precision, recorded as if it had been used)."""
    with pytest.raises(UserError, match=says):
        evaluate(eval_config(tmp_path, *overrides))
    assert list(tmp_path.iterdir()) == []


def test_an_infinite_override_is_refused_naming_the_key(tmp_path):
    overrides = ["position_override.scaling=linear", "position_override.factor=inf"]
    with pytest.raises(UserError, match=r"^position_override.factor=inf: pass a finite number"):
        evaluate(eval_config(tmp_path, *overrides))


def test_command_line_errors_are_one_line_and_exit_one(tmp_path):
    missing = tmp_path / "no-such-run"
    done = run_command("evaluate.py", f"run_dir={missing}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: run directory {missing} does not exist: pass run_dir=<a training run directory>"
    ]
    assert not missing.exists()  # a mistyped run_dir is not created


def test_averaged_checkpoint_on_disk(trained_run, tmp_path):
    steps = sorted((trained_run / "checkpoints").glob("step_*.pt"), key=lambda p: int(p.stem[5:]))[
        -3:
    ]
    out = tmp_path / "avg3.pt"
    done = run_command(
        "scripts/average_checkpoints.py",
        "--run-dir",
        str(trained_run),
        "--last",
        "3",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    averaged = torch.load(out, weights_only=True)
    inputs = [torch.load(p, weights_only=True) for p in steps]
    for name, tensor in averaged["model"].items():
        expected = torch.stack([s["model"][name].double() for s in inputs]).mean(0)
        assert torch.allclose(tensor.double(), expected, atol=1e-6), name
    assert not torch.equal(
        averaged["model"]["embedding.weight"], inputs[-1]["model"]["embedding.weight"]
    )
    assert not [p for p in tmp_path.iterdir() if p.name != "avg3.pt"]  # no temporary file left

    srcs, refs = toy_pairs(trained_run, "test", 30)
    (tmp_path / "few.en").write_text("\n".join(srcs) + "\n", encoding="utf-8")
    (tmp_path / "few.de").write_text("\n".join(refs) + "\n", encoding="utf-8")
    files = [f"src_file={tmp_path / 'few.en'}", f"ref_file={tmp_path / 'few.de'}", "beam=1"]
    on_disk = evaluate(eval_config(trained_run, *files, f"checkpoint={out}", "name=avg-disk"))
    in_memory = evaluate(eval_config(trained_run, *files, "checkpoint=avg:3", "name=avg-mem"))
    assert on_disk["checkpoint"] == "avg3" and in_memory["checkpoint"] == "avg3"
    assert open(on_disk["hypotheses"]).read() == open(in_memory["hypotheses"]).read()
    assert on_disk["bleu"] == in_memory["bleu"]


def test_checkpoint_from_another_tokenizer_is_refused(trained_run, tmp_path):
    state = torch.load(trained_run / "checkpoints" / "last.pt", weights_only=True)
    state["tokenizer"]["sha256"] = "0" * 64
    state["checksum"] = content_sha256(state)  # consistent (an edited one would be corrupt)
    torch.save(state, tmp_path / "foreign.pt")
    before = eval_files(trained_run)
    with pytest.raises(CheckpointError, match=r"differs from .*\(sha256 \w{12} != 000000000000\)"):
        evaluate(eval_config(trained_run, f"checkpoint={tmp_path / 'foreign.pt'}"))
    with pytest.raises(CheckpointError, match="nope.pt does not exist"):
        evaluate(eval_config(trained_run, f"checkpoint={tmp_path / 'nope.pt'}"))
    assert eval_files(trained_run) == before


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    from tests.unit.runs.test_checkpoint import RunsCode, fake_state

    marker = tmp_path / "pwned"
    torch.save(
        {**fake_state(1), "extra": RunsCode(f"touch {shlex.quote(str(marker))}")},
        tmp_path / "evil.pt",
    )
    with pytest.raises(CheckpointError, match="unreadable or unsafe"):
        evaluate(eval_config(tmp_path, f"checkpoint={tmp_path / 'evil.pt'}"))
    assert not marker.exists()


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory, cache_dir):
    """A few steps of a learned-position run whose table (80 rows) test_long overflows."""
    from training.launch import train

    run_dir = tmp_path_factory.mktemp("learned")
    overrides = ["position=learned", f"model.max_positions={LEARNED_ROWS}"]
    overrides += [f"data.max_len={LEARNED_ROWS}", "trainer.max_steps=10", "trainer.eval_every=10"]
    train(compose_config(tiny_run_overrides(run_dir, cache_dir, *overrides)))
    return run_dir


def subword_lengths(run_dir, texts: list[str]) -> list[int]:
    state, _ = load_run(run_dir, "last")
    return [len(ids) for ids in Tokenizer(state["tokenizer"]["path"]).encode(texts)]


def test_long_source_for_a_learned_table_is_one_clear_error(learned_run, tmp_path):
    srcs, refs = toy_pairs(learned_run, "test_long", 500)
    src_len, ref_len = subword_lengths(learned_run, srcs), subword_lengths(learned_run, refs)
    first = next(
        i for i in range(500) if max(src_len[i] + 1, src_len[i] + 50, ref_len[i] + 1) > LEARNED_ROWS
    )
    with pytest.raises(PositionRangeError) as error:
        evaluate(eval_config(learned_run, "split=test_long"))
    message = str(error.value)
    assert "\n" not in message
    assert src_len[first] + 1 <= LEARNED_ROWS  # so the decoder's limit is the one it hits
    assert message.startswith(
        f"line {first + 1} of split test_long: its output (source {src_len[first]} subwords "
        f"+ max_len_b=50) needs {src_len[first] + 50} positions"
    )
    assert f"model.max_positions={LEARNED_ROWS}" in message
    assert "lower max_len_b" in message and "long_inputs=skip" in message
    assert eval_files(learned_run) == set()

    longest = max(range(500), key=src_len.__getitem__)
    assert src_len[longest] + 1 > LEARNED_ROWS  # the encoder alone cannot hold this one
    (tmp_path / "long.en").write_text(srcs[longest] + "\n", encoding="utf-8")
    with pytest.raises(PositionRangeError) as error:
        evaluate(eval_config(learned_run, f"src_file={tmp_path / 'long.en'}", "max_len_b=1"))
    assert str(error.value).startswith(
        f"line 1 of {tmp_path / 'long.en'}: its source ({src_len[longest]} subwords + EOS) "
        f"needs {src_len[longest] + 1} positions"
    )
    assert eval_files(learned_run) == set()


def test_long_inputs_skip_counts_per_length_bucket(learned_run, tmp_path):
    srcs, refs = toy_pairs(learned_run, "test_long", 500)
    src_len, ref_len = subword_lengths(learned_run, srcs), subword_lengths(learned_run, refs)
    max_len_b = 5
    over = [
        i
        for i in range(500)
        if max(src_len[i] + 1, src_len[i] + max_len_b, ref_len[i] + 1) > LEARNED_ROWS
    ]
    only_decoder = [i for i in over if src_len[i] + 1 <= LEARNED_ROWS < src_len[i] + max_len_b]
    assert 0 < len(over) < 500 and only_decoder  # the test covers both limits
    expected: dict[str, int] = {}
    for i in over:
        words = len(srcs[i].split())
        label = "21-30" if words <= 30 else "31-40" if words <= 40 else "41-60"
        expected[label] = expected.get(label, 0) + 1
    out = evaluate(
        eval_config(
            learned_run, "split=test_long", "long_inputs=skip", f"max_len_b={max_len_b}", "beam=1"
        )
    )
    assert out["skipped"] == expected and out["skipped_indices"] == over
    assert out["n_sentences"] == 500 - len(over) == sum(row["n"] for row in out["by_length"])
    hyps = open(out["hypotheses"], encoding="utf-8").read().splitlines()
    kept_refs = [refs[i] for i in range(500) if i not in set(over)]
    assert out["bleu"] == round(sacrebleu.corpus_bleu(hyps, [kept_refs]).score, 2)

    (tmp_path / "long.en").write_text("\n".join(srcs) + "\n", encoding="utf-8")
    sources_only = evaluate(
        eval_config(
            learned_run,
            f"src_file={tmp_path / 'long.en'}",
            "long_inputs=skip",
            f"max_len_b={max_len_b}",
            "beam=1",
        )
    )
    over_decoder = sum(n + max_len_b > LEARNED_ROWS for n in src_len)
    assert sum(sources_only["skipped"].values()) == over_decoder
    assert over_decoder > sum(n + 1 > LEARNED_ROWS for n in src_len)  # more than the encoder's


def test_bf16_search_agrees_with_fp32_on_a_trained_model(trained_run):
    from data.corpus import load_split

    state, _ = load_run(trained_run, "last")
    model, tokenizer = rebuild_model(state, torch.device("cpu"))
    sentences = load_split(state["config"]["data"], "validation")["src"][:100]
    fp32 = translate(model, tokenizer, sentences, torch.device("cpu"))
    bf16 = translate(model, tokenizer, sentences, torch.device("cpu"), precision="bf16")
    same = sum(a == b for a, b in zip(fp32, bf16, strict=True))
    # a 240-step tiny model has many near-ties between its top subwords, where bf16 rounding
    # picks the other one: 75-85 of 100 agree across recent versions of the training code
    assert same >= 70, f"only {same} of 100 translations agree"
    scores = evaluate(eval_config(trained_run, "split=test", "precision=fp32", "name=fp32"))
    assert scores["precision"] == "fp32"


def test_the_library_evaluates_through_one_function_composed_as_the_command_line():
    """evaluate_run's config is what `evaluate.py key=value ...` composes; no other library
    module calls evaluate() or starts evaluate.py as a process."""
    from omegaconf import OmegaConf

    from common.errors import UserError as Refused
    from evaluation.evaluate import evaluation_config
    from tests.conftest import ROOT

    overrides = ["split=test", "checkpoint=avg:5", "beam=1", "name=x", "position_override.factor=2"]
    ours = OmegaConf.to_container(evaluation_config("/r", overrides), resolve=True)
    hydra = OmegaConf.to_container(eval_config("/r", *overrides), resolve=True)
    hydra.pop("hydra", None)
    assert ours == hydra
    with pytest.raises(Exception) as refused:  # an unknown key, as Hydra refuses it
        evaluation_config("/r", ["bean=4"])
    assert "bean" in str(refused.value) and not isinstance(refused.value, Refused)
    callers = []
    for top in ("common", "data", "model", "runs", "training", "evaluation", "interop", "studies"):
        for path in (ROOT / top).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            called = "evaluate(" in text.replace("_evaluate(", "")  # not evaluate_run(
            started = '/ "evaluate.py"' in text  # a process of the entry point
            if path.name != "evaluate.py" and (called or started):
                callers.append(str(path.relative_to(ROOT)))
    assert not callers, callers
