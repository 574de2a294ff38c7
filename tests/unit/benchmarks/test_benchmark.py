"""evaluation/benchmark_*.py through scripts/benchmark.py: each benchmark's figures on a tiny
setting, the FLOP formula against torch's counter, and the table printer."""

import os
import random
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from benchmarks.data import (
    EVAL_PAIRS,
    KEPT_MARKER,
    PHASES,
    RARE_TYPES,
    ZIPF_A,
    benchmark_data,
    data_rows,
    rare_word,
    remove_own,
    synthetic_lines,
    write_hub_corpus,
)
from benchmarks.decode import benchmark_decode
from benchmarks.flops import transformer_flops
from benchmarks.models import build_models
from benchmarks.train import (
    OTHER_OPERATORS,
    OUTSIDE_OPERATORS,
    PROFILE_GROUPS,
    add_mfu,
    benchmark_train,
    lead_budget,
    profile_group,
    profile_step,
)
from common.errors import UserError
from data.corpus import load_hub
from evaluation.tables import format_table
from tests.conftest import script_main, shared_data

main = script_main("benchmark")

TINY_DIMS = {"d_model": 32, "n_heads": 4, "d_ff": 64, "max_positions": 64}


def test_format_table_aligns_columns():
    table = format_table(("name", "value"), [("a", "1"), ("longer", "12345")]).splitlines()
    assert table[0].split() == ["name", "value"]
    assert set(table[1]) == {"-", " "}
    assert len({len(line) for line in table}) == 1  # every line as wide as the rule
    assert table[2].startswith("a ") and table[2].endswith("    1")


def test_data_benchmark_times_cold_warm_and_two_ranks(tmp_path):
    corpus_dir = shared_data("multi30k")
    work = tmp_path / "bench"
    fig = benchmark_data(
        pairs=3000,
        workdir=work,
        vocab_size=500,
        tokenizer_sample=4000,
        corpus_dir=corpus_dir,
        echo=lambda message: None,
    )
    assert not work.exists()  # the generated corpus and caches are deleted
    cold, warm, ddp = fig["runs"]["cold"][0], fig["runs"]["warm"][0], fig["runs"]["ddp"]
    assert [run["rank"] for run in ddp] == [0, 1]
    assert any("training tokenizer" in line for line in cold["log"])
    assert sum("encoded (1 process)" in line for line in cold["log"]) == 3  # auto: 1 here
    for run in (warm, *ddp):  # every later launch maps what the cold one wrote
        assert not any("training tokenizer" in line for line in run["log"])
        assert sum("pairs loaded from cache" in line for line in run["log"]) == 3
    for run in (cold, warm, *ddp):
        assert run["kept"] == cold["kept"] and 0 < run["kept"] <= 3000
        assert run["fingerprint"] == cold["fingerprint"]  # the same pairs, in the same order
        assert all(seconds >= 0 for seconds in run["phases"].values())
        assert run["phases"]["data ready"] >= run["phases"]["imports"] > 0
        assert run["peak_rss_gib"] >= run["private_gib"] > 0
    rows = data_rows(fig)
    assert rows[0] == ("phase", "cold", "warm", "DDP rank 0", "DDP rank 1")
    assert [row[0] for row in rows[1 : 1 + len(PHASES)]] == list(PHASES)


def test_warm_only_reuses_a_kept_workdir_and_refuses_what_is_not_one(tmp_path, capsys):
    work = tmp_path / "bench"
    settings = dict(vocab_size=500, tokenizer_sample=4000, ddp=False, echo=lambda m: None)
    with pytest.raises(SystemExit):  # nothing kept there yet: one line, nothing written
        main(["data", "--workdir", str(work), "--warm-only", "--no-ddp"])
    assert "error: --warm-only: " in capsys.readouterr().err and not work.exists()
    kept = benchmark_data(
        pairs=2000, workdir=work, keep=True, corpus_dir=shared_data("multi30k"), **settings
    )
    assert (work / KEPT_MARKER).is_file()  # what --warm-only recognises the folder by
    corpus = sorted(p.stat().st_mtime_ns for p in (work / "corpus").rglob("*"))
    fig = benchmark_data(workdir=work, warm_only=True, **settings)
    assert set(fig["runs"]) == {"warm"} and fig["pairs"] == 2000 and fig["generate_s"] is None
    warm = fig["runs"]["warm"][0]
    assert sum("pairs loaded from cache" in line for line in warm["log"]) == 3
    assert warm["kept"] == kept["runs"]["cold"][0]["kept"]
    assert warm["fingerprint"] == kept["runs"]["cold"][0]["fingerprint"]
    assert sorted(p.stat().st_mtime_ns for p in (work / "corpus").rglob("*")) == corpus
    assert data_rows(fig)[0] == ("phase", "warm")
    for folder in (work / "cache" / "encoded").iterdir():  # a cache that is not complete
        shutil.rmtree(folder)
    with pytest.raises(UserError, match="the warm launch made them"):
        benchmark_data(workdir=work, warm_only=True, **settings)
    assert (work / "corpus").is_dir()  # a reused folder is kept


@pytest.mark.parametrize("marker", [None, "not json", '{"pairs": 2000}'])
def test_warm_only_refuses_a_users_folder_and_writes_nothing_there(tmp_path, capsys, marker):
    work = tmp_path / "mine"  # a corpus/README.md and cache/encoded of the user's own
    files = {"corpus/README.md": "# notes", "corpus/my_thesis.txt": "mine", "cache/encoded/x": "1"}
    files |= {KEPT_MARKER: marker} if marker else {}
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    tiny = ["--pairs", "300", "--vocab-size", "200", "--tokenizer-sample", "600", "--no-ddp"]
    with pytest.raises(SystemExit) as raised:  # before: 3 tracebacks and a new warm/stderr.log
        main(["data", *tiny, "--num-proc", "1", "--warm-only", "--workdir", str(work)])
    err = capsys.readouterr().err.strip().splitlines()
    assert raised.value.code == 1 and len(err) == 1, err
    assert err[0].startswith(f"error: --warm-only: --workdir {work} is not a folder that a ")
    assert f"lacks {work / KEPT_MARKER}" in err[0] and "--workdir NEW_FOLDER --keep" in err[0]
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file()) == sorted(
        files
    )


def test_a_workdir_holding_a_user_file_is_refused_and_the_file_kept(tmp_path, capsys):
    work = tmp_path / "precious"
    work.mkdir()
    (work / "thesis.tex").write_text("mine")
    tiny = ["--pairs", "300", "--vocab-size", "200", "--tokenizer-sample", "600", "--no-ddp"]
    corpus = ["--corpus-dir", str(shared_data("multi30k"))]
    with pytest.raises(SystemExit):  # before: it ran, then deleted work whole (exit 0)
        main(["data", *tiny, *corpus, "--workdir", str(work)])
    assert "is not empty: pass a new or empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in work.iterdir()) == ["thesis.tex"]
    (work / "corpus" / "de-en").mkdir(parents=True)  # an empty folder given: only its parts go
    remove_own(work, made=False)
    assert sorted(p.name for p in work.iterdir()) == ["thesis.tex"]


def test_generated_corpus_has_the_hub_layout_and_a_long_tail(tmp_path):
    corpus_dir = shared_data("multi30k")
    corpus = write_hub_corpus(tmp_path / "corpus", 30_000, corpus_dir)
    assert len(list((corpus / "de-en").glob("train-*-of-00003.parquet"))) == 3
    loaded = load_hub(str(corpus), "de-en", cache_dir=str(tmp_path / "hf"))
    assert {split: len(ds) for split, ds in loaded.items()} == {
        "train": 30_000,
        **EVAL_PAIRS,
    }
    words = np.array([len(pair["en"].split()) for pair in loaded["train"]["translation"]])
    assert 20 < words.mean() < 26  # WMT14's English: about 23 words a line
    assert 0.005 < np.mean(words >= 100) < 0.015 and words.max() < 400
    rng = random.Random(0)
    ranks = np.minimum(np.random.default_rng(0).zipf(ZIPF_A, 20_000), RARE_TYPES)
    en, _ = synthetic_lines(rng, ranks, ["a b"], ["c d"], 10_000)
    rare = [w for line in en for w in line.split() if w not in ("a", "b")]
    assert len(set(rare)) > 0.3 * len(rare)  # a long tail: many types seen once or twice
    assert len({rare_word(r) for r in range(100_000)}) == 100_000


def test_the_generated_corpus_is_the_same_from_either_multi30k_layout(tmp_path):
    """--corpus-dir takes Multi30k as data.path does: the hub's layout joins the same lines."""
    made = {
        name: write_hub_corpus(tmp_path / name, 3_000, shared_data(name))
        for name in ("multi30k", "multi30k_hub_layout")
    }
    tables = {
        name: [pq.read_table(f) for f in sorted((folder / "de-en").glob("*.parquet"))]
        for name, folder in made.items()
    }
    assert len(tables["multi30k"]) == 5 and tables["multi30k"] == tables["multi30k_hub_layout"]


def test_decode_benchmark_reports_sane_figures():
    threads = torch.get_num_threads()
    fig = benchmark_decode(
        sentences=4,
        beam=2,
        repeats=3,
        length=4,
        batch_size=3,
        model_name="tiny",
        vocab_size=50,
        num_threads=1,
        echo=lambda message: None,
        **TINY_DIMS,
    )
    assert fig["tokens"] == 4 * (4 + 1)
    ours = fig["ours"]
    assert 0 < ours["tokens_per_s_min"] <= ours["tokens_per_s"] <= ours["tokens_per_s_max"]
    assert ours["sentences_per_s"] == pytest.approx(4 / ours["seconds"])
    assert fig["num_threads"] == 1
    assert torch.get_num_threads() == threads  # the caller's thread count is restored
    assert "hf" not in fig and "ratio" not in fig


def test_decode_command_prints_a_table(capsys):
    fig = main(
        ["decode", "--sentences", "2", "--repeats", "1", "--length", "3"]
        + ["--model", "tiny", "--vocab-size", "40", "--beam", "2", "--threads", "1"]
    )
    out = capsys.readouterr().out
    assert "ours: model.search.beam_search" in out and "tokens/s" in out
    assert fig["ours"]["tokens_per_s"] > 0


@pytest.mark.parametrize("option", [["--model", "big"], ["--vocab-size=100"], ["--profile"]])
def test_a_synthetic_model_option_beside_run_dir_is_refused(tmp_path, capsys, option):
    """The probe's i-25: `--run-dir RUN --model big` timed the run's own model without a word."""
    with pytest.raises(SystemExit) as exited:
        main(["decode", "--run-dir", str(tmp_path), *option])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{option[0].split('=')[0]}: --run-dir decodes that run's own model" in err


def test_decode_vs_hf_decodes_equal_tokens():
    pytest.importorskip("transformers")
    fig = benchmark_decode(
        sentences=3,
        beam=2,
        vs="hf",
        repeats=1,
        length=3,
        model_name="tiny",
        vocab_size=50,
        num_threads=1,
        echo=lambda message: None,
        **TINY_DIMS,
    )
    assert fig["hf"]["tokens_per_s"] > 0 and fig["ours"]["tokens_per_s"] > 0
    assert fig["ratio"] == pytest.approx(fig["ours"]["tokens_per_s"] / fig["hf"]["tokens_per_s"])


def test_flop_formula_matches_torch_flop_counter():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    dims = {"d_model": 32, "n_heads": 4, "n_encoder_layers": 2, "n_decoder_layers": 3, "d_ff": 48}
    model, _, _ = build_models("tiny", 50, False, **dims)
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 50, (3, 5))
    # the math backend runs attention as matmuls the counter sees (it skips fused kernels)
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        model(src, tgt).sum().backward()
    assert transformer_flops(dims, 50, batch=3, src_len=7, tgt_len=5) == counter.get_total_flops()


def test_train_benchmark_reports_sane_figures():
    pytest.importorskip("transformers")
    fig = benchmark_train(
        ["tiny"],
        vs="hf",
        batch_size=4,
        length=6,
        vocab_size=50,
        repeats=2,
        num_threads=1,
        echo=lambda message: None,
        precisions=["fp32", "bf16"],
        gemm_size=256,
        **TINY_DIMS,
    )
    entry = fig["models"]["tiny"]
    assert set(entry["systems"]) == {"ours fp32", "ours bf16", "hf fp32", "hf bf16"}
    for name, row in entry["systems"].items():
        assert row["seconds_min"] <= row["seconds"] <= row["seconds_max"], name
        assert row["target_tokens_per_s"] == pytest.approx(24 / row["seconds"])
        assert row["gflops"] == pytest.approx(entry["flops_per_step"] / row["seconds"] / 1e9)
        assert 0 < row["mfu"] and row["saved_for_backward_mib"] > 0 and row["cuda_peak_mib"] is None
    ours, theirs = entry["systems"]["ours bf16"], entry["systems"]["hf fp32"]
    assert entry["ratios"]["ours bf16 / hf fp32"] == pytest.approx(
        theirs["seconds"] / ours["seconds"]
    )
    assert entry["ratios"]["ours fp32 / hf fp32"] == pytest.approx(
        theirs["seconds"] / entry["systems"]["ours fp32"]["seconds"]
    )
    bound = theirs["seconds"] / (entry["flops_per_step"] / fig["gemm_peak_gflops"]["fp32"] / 1e9)
    assert entry["ratio_bound"]["fp32"] == pytest.approx(bound)
    assert ours["parameters"] == theirs["parameters"]  # identical dims, same trainable weights
    assert fig["gemm_peak_gflops"]["fp32"] > 0 and fig["gemm_peak_gflops"]["bf16"] > 0


def test_numpy_s_blas_peak_is_a_second_mfu_where_torch_uses_every_cpu(capsys):
    pytest.importorskip("transformers")
    settings = dict(vs="hf", batch_size=2, length=3, vocab_size=40, repeats=1, gemm_size=128)
    threads, cpus = torch.get_num_threads(), len(os.sched_getaffinity(0))
    try:
        fig = benchmark_train(["tiny"], num_threads=cpus, echo=print, **settings, **TINY_DIMS)
        blas, entry = fig["numpy_blas_peak"], fig["models"]["tiny"]
        assert blas["fp32"] > 0 and blas["name"]
        for row in entry["systems"].values():  # fp32 rows only: numpy's BLAS has no bf16
            assert ("mfu_numpy_blas" in row) == (row["precision"] == "fp32")
        assert "ratio_bound_numpy_blas" in entry
        assert f"numpy's BLAS ({blas['name']}) fp32" in capsys.readouterr().out
        main(
            ["train", "--model", "tiny", "--vs", "hf", "--batch-size", "2", "--length", "3"]
            + ["--vocab-size", "40", "--repeats", "1", "--threads", str(cpus)]
        )
        assert "fp32 MFU against numpy's BLAS (" in capsys.readouterr().out
        if cpus > 1:  # one torch thread against numpy's many: not compared
            one = benchmark_train(["tiny"], num_threads=1, echo=print, **settings, **TINY_DIMS)
            assert one["numpy_blas_peak"] is None
            assert "mfu_numpy_blas" not in one["models"]["tiny"]["systems"]["ours fp32"]
            assert "numpy's BLAS" not in capsys.readouterr().out
    finally:
        torch.set_num_threads(threads)


def test_add_mfu_divides_by_each_peak_from_given_figures():
    systems = {
        name: {"gflops": gflops, "seconds": seconds, "precision": name.split()[1]}
        for name, gflops, seconds in (
            ("ours fp32", 30.0, 2.0),
            ("ours bf16", 40.0, 1.5),
            ("hf fp32", 20.0, 3.0),
            ("hf bf16", 25.0, 2.5),
        )
    }
    entry = {"flops_per_step": 60e9, "systems": systems}
    # numpy's BLAS slower than torch's peak, as on a busy machine: still a figure for fp32 rows
    add_mfu(entry, {"fp32": 100.0, "bf16": 80.0}, {"name": "openblas", "fp32": 50.0})
    assert systems["ours fp32"]["mfu"] == pytest.approx(0.3)
    assert systems["ours bf16"]["mfu"] == pytest.approx(0.5)
    assert systems["ours fp32"]["mfu_numpy_blas"] == pytest.approx(0.6)
    assert systems["hf fp32"]["mfu_numpy_blas"] == pytest.approx(0.4)
    assert "mfu_numpy_blas" not in systems["ours bf16"]  # numpy's BLAS has no bf16 peak
    assert entry["ratio_bound"] == pytest.approx({"fp32": 3.0 / 0.6, "bf16": 2.5 / 0.75})
    assert entry["ratio_bound_numpy_blas"] == pytest.approx(3.0 / 1.2)
    row = {"gflops": 30.0, "seconds": 2.0, "precision": "fp32"}
    alone = {"flops_per_step": 60e9, "systems": {"ours fp32": row}}
    add_mfu(alone, {"fp32": 100.0, "bf16": 0.0}, None)  # torch on fewer threads than CPUs
    assert "mfu_numpy_blas" not in alone["systems"]["ours fp32"]
    assert alone["ratio_bound"] == {} and "ratio_bound_numpy_blas" not in alone


def test_train_command_prints_a_table(capsys):
    main(
        ["train", "--model", "tiny", "--batch-size", "2", "--length", "3"]
        + ["--vocab-size", "40", "--repeats", "1", "--threads", "1", "--precision", "fp32", "bf16"]
    )
    out = capsys.readouterr().out
    assert "ours bf16" in out and "MFU" in out and "GFLOP per step" in out


def test_profile_groups_are_disjoint_and_add_up_to_the_step():
    named = [op for operators in PROFILE_GROUPS.values() for op in operators]
    assert len(named) == len(set(named))  # no operator counted in two groups
    assert profile_group("aten::addmm") == "GEMMs (mm, addmm, bmm)"
    assert profile_group("aten::no_such_operator") == OTHER_OPERATORS
    layer = torch.nn.Linear(64, 64)
    batch = torch.randn(256, 64)

    def step(x):  # one GEMM forward and two backward, and an elementwise op
        layer(x).relu().sum().backward()

    profiled = profile_step(step, batch, steps=3)
    assert profiled["steps"] == 3
    groups = profiled["groups"]
    assert sum(groups.values()) == pytest.approx(profiled["wall_s"], rel=1e-6)
    assert groups["GEMMs (mm, addmm, bmm)"] > 0 and groups[OUTSIDE_OPERATORS] >= 0
    assert profiled["operators"]["aten::addmm"]["calls"] == 1  # per step, not over 3 steps
    gemms = [profiled["operators"][op] for op in ("aten::addmm", "aten::mm")]
    assert groups["GEMMs (mm, addmm, bmm)"] == pytest.approx(sum(r["seconds"] for r in gemms))
    # forward x @ W^T and the weight gradient, each 2 * 256 * 64 * 64 FLOPs (x needs no grad)
    assert [r["flops"] for r in gemms] == [2 * 256 * 64 * 64] * 2
    seconds = sum(r["seconds"] for r in gemms)
    assert profiled["gemm_gflops"] == pytest.approx(4 * 256 * 64 * 64 / seconds / 1e9)


def test_train_command_profiles_each_system(capsys):
    main(
        ["train", "--model", "tiny", "--batch-size", "2", "--length", "3", "--vocab-size", "40"]
        + ["--repeats", "1", "--threads", "1", "--precision", "fp32", "--vs", "hf", "--profile"]
    )
    out = capsys.readouterr().out
    assert "tiny: torch.profiler, 2 steps of each system after the timing" in out
    table = out.split("after the timing")[1]
    header = table.splitlines()[1]
    assert "ours fp32" in header and "hf fp32" in header
    assert "GEMMs (mm, addmm, bmm)" in table and "aten::addmm" in table
    assert "the GEMMs' rate, GFLOP/s" in table
    assert "tiny fp32: ours' GEMMs take " in table and "hf's median step over 1.5 is " in table


def test_the_lead_budget_is_hf_s_step_over_the_goal_less_our_gemms():
    gemms = {"groups": {"GEMMs (mm, addmm, bmm)": 4.0}, "gemm_gflops": 250.0}
    entry = {
        "profile": {"ours fp32": gemms},
        "systems": {"ours fp32": {"seconds": 5.0}, "hf fp32": {"seconds": 6.9}},
    }
    budget = lead_budget(entry, "fp32")
    assert budget["target_seconds"] == pytest.approx(4.6)
    assert budget["budget_seconds"] == pytest.approx(0.6)  # what all that is not a GEMM may take
    assert budget["ours_rest_seconds"] == pytest.approx(1.0)
    assert lead_budget(entry, "bf16") is None  # nothing timed or profiled at that precision
    assert lead_budget({"systems": entry["systems"]}, "fp32") is None  # no profile


def test_profile_on_cuda_is_refused(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--device", "cuda", "--profile"])
    assert info.value.code == 2
    assert (
        "--profile reads CPU operator times: drop --device or --profile" in capsys.readouterr().err
    )


def test_the_no_bf16_line_is_printed_only_where_the_cpu_lacks_it(capsys):
    from benchmarks.flops import native_bf16

    main(
        ["train", "--model", "tiny", "--batch-size", "2", "--length", "3", "--vocab-size", "40"]
        + ["--repeats", "1", "--threads", "1", "--precision", "fp32"]
    )
    printed = "bf16 not timed: this CPU has no AVX512-BF16/AMX" in capsys.readouterr().out
    assert printed == (not native_bf16(torch.device("cpu")))


def test_train_default_precisions_follow_the_cpu():
    from benchmarks.flops import default_precisions, native_bf16

    cpu = torch.device("cpu")
    assert default_precisions(cpu) == (["fp32", "bf16"] if native_bf16(cpu) else ["fp32"])
    assert default_precisions(torch.device("cuda")) == ["bf16"]


def test_a_failing_compiled_step_is_reported_and_left_out(monkeypatch):
    class BrokenCompiled(torch.nn.Module):  # what torch.compile returns, failing on its call
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *args, **kwargs):
            raise RuntimeError("no C compiler here\nmore detail")

    def broken_compile(model, **kwargs):
        return BrokenCompiled(model)

    monkeypatch.setattr(torch, "compile", broken_compile)
    lines = []
    fig = benchmark_train(
        ["tiny"],
        None,
        2,
        3,
        40,
        1,
        "cpu",
        1,
        echo=lines.append,
        compile_modes=[False, True],
        precisions=["fp32", "bf16"],
        gemm_size=256,
    )
    entry = fig["models"]["tiny"]
    assert set(entry["systems"]) == {"ours fp32", "ours bf16"}
    assert entry["failed"] == {
        "ours fp32 compiled": "RuntimeError: no C compiler here",
        "ours bf16 compiled": "RuntimeError: no C compiler here",
    }
    assert any("ours bf16 compiled: failed" in line for line in lines)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where torch has no CUDA")
def test_train_on_cuda_without_a_gpu_is_one_clear_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--device", "cuda"])
    assert info.value.code == 2
    assert "--device cuda: torch sees no CUDA device here" in capsys.readouterr().err
