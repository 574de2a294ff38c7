"""evaluate.py on a tiny trained run: translate=true answers each line as it comes yet batches a
piped file, nbest=N writes fairseq's H- lines, and progress shows on a terminal only (issue 59)."""

import io
import json
import math
import os
import queue
import subprocess
import sys
import threading

import pytest
import torch

from common.errors import UserError
from evaluation.evaluate import evaluate
from evaluation.translate import translate
from runs.run import load_run, rebuild_model
from tests.conftest import ROOT, compose_config

# Generous: a line's answer comes in well under a second; the wait only bounds a broken reader
ANSWER_TIMEOUT = 120


def eval_config(run_dir, *overrides):
    return compose_config([f"run_dir={run_dir}", *overrides], config_name="evaluate")


def evaluate_command(run_dir, *overrides: str) -> tuple[list[str], dict[str, str]]:
    """evaluate.py's command line and environment, as a user runs it (no HYDRA_FULL_ERROR)."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return [sys.executable, "evaluate.py", f"run_dir={run_dir}", *overrides], env


def run_evaluate(run_dir, *overrides: str, stdin: str = "") -> subprocess.CompletedProcess:
    command, env = evaluate_command(run_dir, *overrides)
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600
    )


def split_sources(trained_run, n: int = 200) -> list[str]:
    """The first n sources of the run's test split."""
    from data.corpus import load_split

    state, _ = load_run(trained_run, "last")
    return list(load_split(state["config"]["data"], "test")["src"][:n])


def test_each_line_is_answered_before_the_next_is_written(trained_run):
    command, env = evaluate_command(trained_run, "translate=true")
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    answers: queue.Queue[str] = queue.Queue()

    def read_answers() -> None:
        for answer in proc.stdout:
            answers.put(answer)

    threading.Thread(target=read_answers, daemon=True).start()
    lines = ["The dog sees the cat .", "The woman reads a book ."]
    try:
        out = []
        for line in lines:  # the pipe stays open: the old reader waited for its end
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
            out.append(answers.get(timeout=ANSWER_TIMEOUT).rstrip("\n"))
        proc.stdin.close()
        assert proc.wait(timeout=ANSWER_TIMEOUT) == 0
    finally:
        proc.kill()
    assert answers.empty()
    state, _ = load_run(trained_run, "last")
    model, tokenizer = rebuild_model(state, torch.device("cpu"))
    assert out == translate(model, tokenizer, lines, torch.device("cpu"))  # what src_file= runs


def test_a_piped_file_is_batched_as_src_file_and_quiet_off_a_terminal(trained_run, tmp_path):
    srcs = split_sources(trained_run, 60)
    srcs[7] = ""  # an empty line: '' in its place
    text = "".join(s + "\n" for s in srcs)
    (tmp_path / "piped.en").write_text(text, encoding="utf-8")
    search = ["beam=1", "max_tokens=256"]  # greedy, in batches of about 25 lines
    debug = "hydra.verbose=evaluation.translate"  # a log line per search batch
    done = run_evaluate(trained_run, "translate=true", *search, debug, stdin=text)
    assert done.returncode == 0, done.stderr[-3000:]
    scored = run_evaluate(trained_run, f"src_file={tmp_path / 'piped.en'}", "name=piped", *search)
    assert scored.returncode == 0 and scored.stderr == "", scored.stderr[-3000:]  # no bar
    hyps = (trained_run / "eval" / "piped.hyp").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == len(srcs) and hyps[7] == ""
    assert done.stdout.splitlines() == hyps
    # stderr (not a terminal) holds the debug lines asked for, one per search batch, no bar
    batches = [line.split() for line in done.stderr.splitlines()]
    assert all(words[:3] == ["search", "batch", "of"] for words in batches), done.stderr[-2000:]
    assert sum(int(words[3]) for words in batches) == len(srcs) - 1  # every non-empty line
    assert 1 < len(batches) and len(batches) * 4 <= len(srcs)  # 4 or more lines per search


def test_nbest_writes_fairseqs_lines_best_first_the_first_the_one_best(trained_run):
    lines = ["The dog sees the cat .", "", "The woman reads a book ."]
    done = run_evaluate(trained_run, "translate=true", "nbest=2", stdin="\n".join(lines) + "\n")
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
    rows = [row.split("\t") for row in done.stdout.splitlines()]
    assert [row[0] for row in rows] == ["H-0", "H-0", "H-1", "H-1", "H-2", "H-2"]
    state, _ = load_run(trained_run, "last")
    model, tokenizer = rebuild_model(state, torch.device("cpu"))
    best = translate(model, tokenizer, lines, torch.device("cpu"))
    for i in (0, 2):
        first, second = rows[2 * i], rows[2 * i + 1]
        assert first[2] == best[i] and first[2] != second[2]
        assert 0 > float(first[1]) >= float(second[1]) > -math.inf
    assert rows[2][1:] == rows[3][1:] == ["-inf", ""]  # the empty line: nothing searched


def test_nbest_scores_the_one_best_and_writes_the_nbest_beside_it(trained_run, tmp_path):
    srcs = split_sources(trained_run, 12)
    (tmp_path / "few.en").write_text("".join(s + "\n" for s in srcs), encoding="utf-8")
    files = [f"src_file={tmp_path / 'few.en'}"]
    one = evaluate(eval_config(trained_run, *files, "name=few1"))
    two = evaluate(eval_config(trained_run, *files, "name=few2", "nbest=2"))
    eval_dir = trained_run / "eval"
    assert two["hypotheses_sha256"] == one["hypotheses_sha256"] and two["nbest"] == 2
    assert "nbest" not in one and not (eval_dir / "few1.nbest").exists()
    assert json.loads((eval_dir / "few2.json").read_text())["nbest_hypotheses"] == str(
        eval_dir / "few2.nbest"
    )
    rows = [r.split("\t") for r in (eval_dir / "few2.nbest").read_text().splitlines()]
    assert [r[0] for r in rows] == [f"H-{i}" for i in range(len(srcs)) for _ in (1, 2)]
    assert [r[2] for r in rows[::2]] == (eval_dir / "few1.hyp").read_text().splitlines()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["nbest=5"], "nbest=5: pass 1 to beam=4"),
        (["nbest=2", "beam=1"], "nbest=2: pass 1 to beam=1"),
        (["nbest=0"], "nbest=0: pass a whole number from 1 to beam=4"),
        (["nbest=2", "engine=ctranslate2"], "nbest=2 needs engine=ours"),
    ],
)
def test_an_nbest_the_search_cannot_give_is_one_line_and_writes_nothing(
    trained_run, tmp_path, overrides, message
):
    before = sorted((trained_run / "eval").glob("*"))
    with pytest.raises(UserError, match=f"^{message}") as raised:
        evaluate(eval_config(trained_run, "split=test", *overrides))
    assert "\n" not in str(raised.value)
    assert sorted((trained_run / "eval").glob("*")) == before


class Terminal(io.StringIO):
    """A text stream that says it is a terminal, as a console's stderr does."""

    def isatty(self) -> bool:
        return True


def test_translation_and_perplexity_show_progress_on_a_terminal(trained_run, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    evaluate(eval_config(trained_run, "split=validation", "beam=1", "name=progress"))
    drawn = sys.stderr.getvalue()
    assert "translate:" in drawn and "perplexity:" in drawn and "/500 " in drawn
