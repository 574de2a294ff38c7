"""Preparation at scale: lengths and cleaning from the cached Arrow columns, an ids-only cache
that an interrupted encoding leaves clean, num_proc=auto, and one preparation for many ranks."""

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import datasets
import numpy as np
import pytest
from omegaconf import OmegaConf

from common.errors import DataError
from data.batching import TokenBatchSampler
from data.corpus import (
    MAX_AUTO_PROCS,
    ROWS_PER_PROC,
    clean_train,
    load_split,
    prepare_data,
    resolve_num_proc,
    select_rows,
    sequence_lengths,
    train_fingerprint,
)
from data.tokenizer import EOS_ID, default_num_threads, train_tokenizer
from tests.conftest import ROOT, default_sigint, tiny_run_overrides
from tests.e2e.test_distributed import free_port
from tests.unit.data.test_corpus import toy_parallel

# whitespace-only texts of several kinds (Arrow's trim and str.split must agree with the cache)
ODD = ["   ", "\t", "\u3000", "\u00a0 \u2003", "", "x\u200by", "ok", " ".join(["long"] * 90)]


def write_corpus(root: Path, pairs: int) -> dict:
    """Line-aligned train/validation files with odd texts mixed in; a data config for them."""
    root.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, n, seed in (("train", pairs, 0), ("validation", 40, 1)):
        en, de = toy_parallel(n, seed)
        for i, odd in enumerate(ODD):
            en[(7 * i + 3) % n] = odd
            de[(11 * i + 5) % n] = ODD[-1 - i]
        files[split] = {}
        for lang, lines in (("en", en), ("de", de)):
            (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
            files[split][lang] = str(root / f"{split}.{lang}")
    return {
        "corpus": {"_target_": "data.corpus.load_text_pairs", "files": files},
        "src_lang": "en",
        "tgt_lang": "de",
        "vocab_size": 300,
        "tokenizer_sample": 100_000,
        "max_len": 40,
        "max_ratio": 2.5,
        "train_max_src_words": 6,
        "num_proc": 1,
    }


@pytest.fixture
def data_cfg(tmp_path):
    return OmegaConf.create(write_corpus(tmp_path / "corpus", 600))


def python_cleaning(rows: dict, max_len: int, max_ratio: float, max_words: int) -> tuple:
    """clean_train's rules pair by pair in plain Python: (kept row numbers, counts)."""
    kept, counts = [], {"input": 0, "empty": 0, "too_long": 0, "ratio": 0, "over_max_words": 0}
    for i, (src, tgt, src_ids, tgt_ids) in enumerate(
        zip(rows["src"], rows["tgt"], rows["src_ids"], rows["tgt_ids"], strict=True)
    ):
        counts["input"] += 1
        s, t = len(src_ids) - 1, len(tgt_ids) - 1  # subwords, EOS excluded
        if not src.strip() or not tgt.strip() or s == 0 or t == 0:
            counts["empty"] += 1
        elif s + 1 > max_len or t + 1 > max_len:
            counts["too_long"] += 1
        elif max(s, t) > max_ratio * min(s, t):
            counts["ratio"] += 1
        elif len(src.split()) > max_words:
            counts["over_max_words"] += 1
        else:
            kept.append(i)
    return kept, {**counts, "kept": len(kept)}


def test_cleaning_and_lengths_equal_the_slow_reference(data_cfg, tmp_path):
    prepared = prepare_data(data_cfg, tmp_path / "cache", log=lambda _: None)
    # the reference: every pair of the raw split, encoded and cleaned in plain Python
    raw = load_split(data_cfg, "train")
    tok = prepared.tokenizer
    rows = {"src": list(raw["src"]), "tgt": list(raw["tgt"])}
    for side in ("src", "tgt"):
        rows[f"{side}_ids"] = [ids + [EOS_ID] for ids in tok.encode(rows[side])]
    kept, counts = python_cleaning(rows, 40, 2.5, 6)
    assert prepared.counts == counts and counts["empty"] >= 8 and 0 < counts["kept"] < 600
    assert min(counts.values()) > 0  # every rule drops something here
    assert prepared.splits["train"][:] == {k: [v[i] for i in kept] for k, v in rows.items()}
    full = datasets.Dataset.from_dict(rows)
    assert clean_train(full, 40, 2.5, 6)[1] == counts  # from the text, as before the cache
    for split in ("train", "validation"):
        src, tgt = prepared.split_lengths(split)
        rows = prepared.splits[split]
        assert src.tolist() == [len(ids) for ids in rows["src_ids"]]  # row by row, in Python
        assert tgt.tolist() == [len(ids) for ids in rows["tgt_ids"]]
        assert np.array_equal(sequence_lengths(rows, "tgt_ids"), tgt)  # through the index map


def fingerprint_reference(rows: dict[str, list], batch_size: int) -> str:
    """The fingerprint from Python lists: per batch and side, int32 lengths then int32 ids."""
    digest = hashlib.sha256()
    for start in range(0, len(rows["src_ids"]), batch_size):
        for column in ("src_ids", "tgt_ids"):
            batch = rows[column][start : start + batch_size]
            digest.update(np.array([len(ids) for ids in batch], np.int32).tobytes())
            digest.update(np.array([i for ids in batch for i in ids], np.int32).tobytes())
    return digest.hexdigest()


def test_the_fingerprint_hashes_the_rows_trained_on_through_any_index_map():
    rng = np.random.default_rng(0)
    parts = [
        datasets.Dataset.from_dict(
            {
                side: [rng.integers(4, 900, rng.integers(1, 9)).tolist() for _ in range(n)]
                for side in ("src_ids", "tgt_ids")
            },
            features=datasets.Features(
                {c: datasets.Sequence(datasets.Value("int32")) for c in ("src_ids", "tgt_ids")}
            ),
        )
        for n in (23, 31)
    ]
    whole = datasets.concatenate_datasets(parts)  # two Arrow chunks
    kept = select_rows(whole, rng.random(len(whole)) < 0.7)
    shuffled = kept.select(rng.permutation(len(kept)))
    for ds in (whole, kept, shuffled):
        for batch_size in (7, 100):
            fingerprint = train_fingerprint(ds, batch_size)
            assert fingerprint == {
                "pairs": len(ds),
                "sha256": fingerprint_reference(ds.to_dict(), batch_size),
            }
    assert train_fingerprint(kept)["sha256"] != train_fingerprint(shuffled)["sha256"]


def test_the_fingerprint_is_kept_beside_the_encoding_per_cleaning(data_cfg, tmp_path):
    cache = tmp_path / "cache"
    first = prepare_data(data_cfg, cache, log=lambda _: None)
    computed = first.fingerprint()
    assert computed == train_fingerprint(first.splits["train"])
    kept = first.fingerprint_file
    assert kept.parent.parent == cache / "encoded" and json.loads(kept.read_text()) == computed
    kept.write_text(json.dumps({**computed, "sha256": "f" * 64}))
    again = prepare_data(data_cfg, cache, log=lambda _: None)
    assert again.fingerprint_file == kept and again.fingerprint()["sha256"] == "f" * 64  # read
    kept.write_text("{not json")  # unreadable: computed again and kept again
    assert again.fingerprint() == computed == json.loads(kept.read_text())
    other = prepare_data({**data_cfg, "max_len": 20}, cache, log=lambda _: None)
    assert other.fingerprint_file != kept  # another cleaning: other pairs, its own file
    assert other.fingerprint() == train_fingerprint(other.splits["train"]) != computed
    assert sorted(p.name for p in kept.parent.iterdir() if "fingerprint" in p.name) == sorted(
        [kept.name, other.fingerprint_file.name]
    )  # no temporary files left


def test_the_encoded_cache_holds_ids_not_text(data_cfg, tmp_path):
    prepare_data(data_cfg, tmp_path / "cache", log=lambda _: None)
    folders = sorted((tmp_path / "cache" / "encoded").iterdir())
    assert sorted(p.name.rsplit("-", 1)[1] for p in folders) == ["train", "validation"]
    for folder in folders:
        for arrow in folder.glob("data*.arrow"):
            columns = datasets.Dataset.from_file(str(arrow)).column_names
            assert columns == ["src_ids", "tgt_ids", "blank", "src_words"]


KILLABLE = """
import sys, time
from pathlib import Path
from omegaconf import OmegaConf
import data.corpus as corpus
from data.corpus import prepare_data

marker = Path(sys.argv[2])
real = corpus._Encoder.__call__

def then_wait(self, batch):  # one batch encoded, then hold still until killed
    out = real(self, batch)
    marker.write_text("encoding")
    time.sleep(600)
    return out

corpus._Encoder.__call__ = then_wait
prepare_data(OmegaConf.load(sys.argv[1]), sys.argv[3], log=print)
"""


def interrupt_encoding(tmp_path: Path, cfg, how: signal.Signals) -> None:
    """Run prepare_data in a child process and send it `how` while it encodes the train split."""
    OmegaConf.save(cfg, tmp_path / "data.yaml")
    marker = tmp_path / "marker"
    marker.unlink(missing_ok=True)
    script = tmp_path / "killable.py"
    script.write_text(textwrap.dedent(KILLABLE))
    args = [sys.executable, str(script), str(tmp_path / "data.yaml"), str(marker)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen(
        [*args, str(tmp_path / "cache")], cwd=ROOT, env=env, preexec_fn=default_sigint
    )
    try:
        while not marker.exists():
            assert child.poll() is None, "the child ended before it encoded a batch"
            time.sleep(0.1)
        child.send_signal(how)
        assert child.wait(timeout=120) != 0
    finally:
        child.kill()


def leftovers(cache: Path) -> list[str]:
    """Files and folders under encoded/ that are not a complete split folder's."""
    encoded = cache / "encoded"
    return [p.name for p in encoded.iterdir() if not (p / "meta.json").is_file()]


def test_an_interrupted_encoding_leaves_no_stray_files(tmp_path):
    cfg = OmegaConf.create(write_corpus(tmp_path / "corpus", 3000))
    interrupt_encoding(tmp_path, cfg, signal.SIGINT)  # Ctrl-C, SIGTERM -> KeyboardInterrupt
    assert leftovers(tmp_path / "cache") == []
    interrupt_encoding(tmp_path, cfg, signal.SIGKILL)  # nothing runs: the next run tidies up
    assert [name.startswith(".staging-") for name in leftovers(tmp_path / "cache")] == [True]
    prepared = prepare_data(cfg, tmp_path / "cache", log=lambda _: None)
    assert leftovers(tmp_path / "cache") == []
    fresh = prepare_data(cfg, tmp_path / "fresh", log=lambda _: None)
    assert list(prepared.splits["train"]["src_ids"]) == list(fresh.splits["train"]["src_ids"])


def test_num_proc_auto_follows_the_machine_and_bad_values_are_refused(data_cfg, tmp_path):
    cpus = default_num_threads()
    assert resolve_num_proc("auto", 3000) == 1  # a small split: no worker processes
    assert resolve_num_proc("auto", 10**9) == min(cpus, MAX_AUTO_PROCS)
    assert resolve_num_proc("auto", 2 * ROWS_PER_PROC) == min(cpus, 2)
    assert resolve_num_proc(3, 10) == 3 and resolve_num_proc(None, 10) == 1
    data_cfg.num_proc = "many"
    with pytest.raises(DataError, match="data.num_proc=many"):
        prepare_data(data_cfg, tmp_path / "cache", log=lambda _: None)
    assert not (tmp_path / "cache").exists()  # refused before anything was written
    data_cfg.num_proc = "auto"
    assert prepare_data(data_cfg, tmp_path / "cache", log=lambda _: None).counts["kept"] > 0


SLOW_TOKENIZER = """
import runpy, sys, time
sys.path.insert(0, {root!r})
import data.corpus as corpus

real = corpus.train_tokenizer

def slow(*args, **kwargs):  # a preparation far longer than trainer.dist_timeout_minutes
    time.sleep({seconds})
    return real(*args, **kwargs)

corpus.train_tokenizer = slow
runpy.run_path({train!r}, run_name="__main__")
"""


def test_a_cold_ddp_launch_outlasts_a_short_collective_timeout(tmp_path):
    run_dir, seconds, timeout_minutes = tmp_path / "run", 30, 0.25  # 30 s against 15 s
    script = tmp_path / "slow_train.py"
    script.write_text(
        textwrap.dedent(
            SLOW_TOKENIZER.format(root=str(ROOT), seconds=seconds, train=str(ROOT / "train.py"))
        )
    )
    overrides = tiny_run_overrides(run_dir, tmp_path / "cold_cache", "trainer.max_steps=1")
    overrides = [o for o in overrides if not o.startswith("run_dir=")]
    overrides += [f"hydra.run.dir={run_dir}", f"trainer.dist_timeout_minutes={timeout_minutes}"]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    command += [f"--master_port={free_port()}", str(script), *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert output.count("data: training tokenizer") == 1  # one rank prepared
    assert output.count("data: tokenizer loaded from cache") == 1  # the other mapped its files
    assert (run_dir / "checkpoints" / "last.pt").is_file()


def reference_bounds(src: np.ndarray, tgt: np.ndarray, max_tokens: int) -> list[int]:
    """Greedy batch offsets over lexsorted examples, both sides' running maxima in Python."""
    bounds, count, src_max, tgt_max = [0], 0, 0, 0
    for i, (s, t) in enumerate(zip(src.tolist(), tgt.tolist(), strict=True)):
        if count and (count + 1) * max(src_max, s, tgt_max, t) > max_tokens:
            bounds.append(i)
            count, src_max, tgt_max = 0, 0, 0
        count, src_max, tgt_max = count + 1, max(src_max, s), max(tgt_max, t)
    return bounds + [len(src)]


# 300: over 65,536 (src, tgt) pairs, lexsort's path; 4 and 7: long runs of equal lengths,
# batches that end inside them and at their ends; 39: one example a batch from length 20 on
@pytest.mark.parametrize("high, max_tokens", [(40, 600), (300, 600), (4, 7), (40, 39)])
def test_sampler_order_and_batches_equal_lexsort_and_the_greedy_rule(high, max_tokens):
    rng = np.random.default_rng(high)
    src, tgt = rng.integers(1, high, 200_000), rng.integers(1, high, 200_000)
    sampler = TokenBatchSampler(src, tgt, max_tokens, shuffle=False)
    order = np.lexsort((tgt, src, np.maximum(src, tgt)))
    assert np.array_equal(sampler._sorted, order)
    assert sampler._bounds.tolist() == reference_bounds(src[order], tgt[order], max_tokens)


def reference_reservoir(texts: list[str], size: int, seed: int) -> list[str]:
    """A reservoir sample of the strings themselves (what the spooled one must equal)."""
    rng, sample, seen = random.Random(seed), [], 0
    for text in texts:
        if not text.strip():
            continue
        if seen < size:
            sample.append(text)
        elif (j := rng.randrange(seen + 1)) < size:
            sample[j] = text
        seen += 1
    return sample


def test_the_spooled_tokenizer_sample_is_the_reservoir_of_the_strings(tmp_path):
    en, de = toy_parallel(3000, 5)
    texts = [t for pair in zip(en, de, strict=True) for t in pair] + ["  ", ""] * 50
    ours = train_tokenizer(iter(texts), 150, tmp_path / "ours", sample_size=2500, seed=3)
    sample = reference_reservoir(texts, 2500, 3)  # 2,500 of 6,000: replacements happen
    assert len(sample) == 2500
    again = train_tokenizer(sample, 150, tmp_path / "ref", sample_size=2500, seed=3)
    assert ours.sha256 == again.sha256  # the same sentences in the same order
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no spool left
