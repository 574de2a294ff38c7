"""scripts/export_hf.py: a quickstart-like run as a Marian folder that translates as evaluate.py.

The folder is loaded in a fresh Python process with no network (HF_HUB_OFFLINE=1) and
translates the toy test set exactly as ``evaluate.py beam=1`` does; MarianTokenizer gives our
ids, EOS appended; other position variants are refused with one line.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from data.corpus import load_split
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from evaluation.evaluate import evaluate
from interop.export import ExportError, export_hf
from runs.run import load_run, rebuild_model
from tests.conftest import ROOT, compose_config, script_main, tiny_run_overrides

MAX_POSITIONS = 100  # Marian's table, and generate's max_length
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}

FRESH_PROCESS = """
import json, sys
from transformers import MarianMTModel, MarianTokenizer
from interop.export import translate_with_transformers
folder, sources = sys.argv[1], json.load(open(sys.argv[2]))
tokenizer = MarianTokenizer.from_pretrained(folder)
MarianMTModel.from_pretrained(folder)
ids = tokenizer(sources).input_ids
every = list(range(tokenizer.vocab_size))
round_trip = tokenizer.convert_tokens_to_ids(tokenizer.convert_ids_to_tokens(every)) == every
print(json.dumps({"ids": ids, "round_trip": round_trip,
                  "hyps": translate_with_transformers(folder, sources)}))
"""


@pytest.fixture(scope="module")
def folder(trained_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "marian"
    result = subprocess.run(
        [sys.executable, "scripts/export_hf.py", "--run-dir", str(trained_run), "--out", str(out)]
        + ["--max-positions", str(MAX_POSITIONS)],
        cwd=ROOT,
        env=os.environ | OFFLINE,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def test_split(trained_run):
    state, _ = load_run(trained_run, "last")
    from omegaconf import OmegaConf

    dataset = load_split(OmegaConf.create(state["config"]["data"]), "test")
    return list(dataset["src"]), list(dataset["tgt"])


@pytest.fixture(scope="module")
def fresh_process(folder, test_split, tmp_path_factory):
    sources = tmp_path_factory.mktemp("sources") / "test.json"
    sources.write_text(json.dumps(test_split[0]))
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(folder), str(sources)],
        cwd=ROOT,
        env=os.environ | OFFLINE,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_folder_holds_what_from_pretrained_needs(folder):
    names = {p.name for p in folder.iterdir()}
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        assert name in names
    for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json"):
        assert name in names
    info = json.loads((folder / "export.json").read_text())
    assert info["layer_norm_eps"] == {"trained": 1e-6, "marian": 1e-5}
    config = json.loads((folder / "config.json").read_text())  # greedy for 4.x's pipeline
    assert config["task_specific_params"] == {"translation": {"num_beams": 1}}


def test_the_folder_carries_a_model_card(trained_run, tmp_path):
    """README.md: the variant, corpus, steps, the scores of these weights with their signature,
    and the training command."""
    import shutil

    from evaluation.evaluate import evaluate_run

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    scored = evaluate_run(run, "split=test", "beam=1")
    out = tmp_path / "marian"
    script_main("export_hf")(["--run-dir", str(run), "--out", str(out)])
    card = (out / "README.md").read_text()
    state, _ = load_run(run, "last")
    assert card.startswith("---\nlicense: mit\n") and "sinusoidal positions" in card
    assert f"step {state['step']}" in card and "Trained by: `python train.py " in card
    assert scored["checkpoint_sha256"] == state["file_sha256"]  # these weights: in the card
    assert f"| test-last-beam1 | test | 1 | {scored['bleu']:.2f} |" in card
    assert scored["signature"] in card


def test_tokenizer_gives_our_ids_with_eos(trained_run, test_split, fresh_process):
    _, tokenizer = rebuild_model(load_run(trained_run, "last")[0], torch.device("cpu"))
    ours = [ids + [EOS_ID] for ids in tokenizer.encode(test_split[0])]
    assert fresh_process["ids"] == ours
    assert fresh_process["round_trip"]


def test_translations_match_evaluate_greedy_on_the_toy_test_set(trained_run, fresh_process):
    """Identical, except where our search hit its cap (source + 50) and forced EOS there.

    generate caps a batch at one length (MAX_POSITIONS), not each sentence at its own, so a
    sentence that runs to our cap goes on there; a trained model (README) reaches no cap.
    """
    from model.search import greedy_search

    scores = evaluate(
        compose_config([f"run_dir={trained_run}", "split=test", "beam=1"], "evaluate")
    )
    ours = (trained_run / "eval" / f"{scores['name']}.hyp").read_text().splitlines()
    theirs = fresh_process["hyps"]
    assert len(ours) == len(theirs) == 500
    differ = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    model, tokenizer = rebuild_model(load_run(trained_run, "last")[0], torch.device("cpu"))
    capped = 0
    for i in differ:
        src = fresh_process["ids"][i]
        hyp = greedy_search(model, torch.tensor([src]), BOS_ID, EOS_ID, 50)[0]
        capped += len(hyp) == len(src) - 1 + 50 - 1
    print(f"{500 - len(differ)} of 500 identical; the {len(differ)} others hit our cap: {capped}")
    assert capped == len(differ)
    assert len(differ) < 250


def test_marians_layer_norm_eps_changes_logits_by_little(folder, trained_run, test_split):
    from transformers import MarianMTModel

    from data.batching import collate

    model, tokenizer = rebuild_model(load_run(trained_run, "last")[0], torch.device("cpu"))
    src = [ids + [EOS_ID] for ids in tokenizer.encode(test_split[0][:64])]
    tgt = [ids + [EOS_ID] for ids in tokenizer.encode(test_split[1][:64])]
    examples = [{"src_ids": s, "tgt_ids": t} for s, t in zip(src, tgt, strict=True)]
    batch = collate(examples, pad_id=PAD_ID, bos_id=BOS_ID)
    marian = MarianMTModel.from_pretrained(str(folder)).eval()
    assert {m.eps for m in marian.modules() if isinstance(m, torch.nn.LayerNorm)} == {1e-5}
    with torch.no_grad():
        ours = model(batch["src"], batch["tgt_in"])
        theirs = marian(
            input_ids=batch["src"],
            attention_mask=batch["src"].ne(PAD_ID),
            decoder_input_ids=batch["tgt_in"],
        ).logits
    diff = (ours - theirs)[batch["tgt_out"] != PAD_ID].abs().max().item()
    print(f"eps 1e-5 vs 1e-6: max |logit difference| {diff:.2e}")
    assert diff < 1e-3


def test_other_position_variants_are_refused_with_one_line(tmp_path, cache_dir):
    from training.launch import train

    run_dir = tmp_path / "learned"
    overrides = ["position=learned", "trainer.max_steps=2", "trainer.eval_every=2"]
    train(compose_config(tiny_run_overrides(run_dir, cache_dir, *overrides)))
    with pytest.raises(ExportError, match="only fixed sinusoidal absolute positions"):
        export_hf(run_dir, tmp_path / "out")
    result = subprocess.run(
        [sys.executable, "scripts/export_hf.py", "--run-dir", str(run_dir), "--out", "x"],
        cwd=ROOT,
        env=os.environ | OFFLINE,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert not (ROOT / "x").exists()


# transformers 4.57.1 is the last release with pipeline("translation") (5.0 removed the task);
# it needs huggingface_hub < 1, which this environment's datasets cannot share, so it is
# installed on its own into a folder that only a child process puts first on its path.
TRANSFORMERS_4 = [
    "transformers==4.57.1",
    "huggingface_hub==0.36.0",
    "tokenizers==0.22.1",
    "requests",
    "certifi",
    "charset_normalizer",
    "idna",
    "urllib3",
]
PIPELINE_PROCESS = """
import json, sys
import transformers
from transformers import pipeline
folder, sources = sys.argv[1], json.load(open(sys.argv[2]))
translator = pipeline("translation", model=folder, device="cpu")
greedy = [o["translation_text"] for o in translator(sources, batch_size=32)]
print(json.dumps({"version": transformers.__version__, "greedy": greedy}))
"""


@pytest.fixture(scope="module")
def transformers_4(cache_dir):
    target = cache_dir / "transformers-4.57.1"
    if not (target / "transformers").is_dir():
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
            + ["--target", str(target), *TRANSFORMERS_4],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
            pytest.skip(f"transformers 4.57.1 could not be installed from the registry: {last}")
    return target


@pytest.mark.slow
def test_translation_pipeline_of_transformers_4_matches_evaluate_greedy(
    trained_run, folder, test_split, fresh_process, transformers_4, tmp_path
):
    """pipeline("translation", model=folder), as it comes, gives evaluate.py beam=1's lines.

    Its class default is beam 4, and num_beams 1 in the folder's generation config does not
    override it (it is transformers' global default); the folder's task_specific_params does.
    """
    sources = tmp_path / "test.json"
    sources.write_text(json.dumps(test_split[0]))
    result = subprocess.run(
        [sys.executable, "-c", PIPELINE_PROCESS, str(folder), str(sources)],
        cwd=tmp_path,
        env=os.environ | OFFLINE | {"PYTHONPATH": str(transformers_4)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["version"] == "4.57.1"
    scores = evaluate(
        compose_config([f"run_dir={trained_run}", "split=test", "beam=1"], "evaluate")
    )
    ours = (trained_run / "eval" / f"{scores['name']}.hyp").read_text().splitlines()
    # line for line what transformers 5's generate gave, which equals ours but where our search
    # hit its cap (test above)
    assert out["greedy"] == fresh_process["hyps"]
    same = sum(a == b for a, b in zip(ours, out["greedy"], strict=True))
    assert same >= 0.95 * len(ours), f"{same} of {len(ours)} identical"
