"""A run's checkpoint as a Hugging Face Marian folder: weights, config and tokenizer files.

The folder loads with ``MarianMTModel.from_pretrained`` and ``MarianTokenizer.from_pretrained``
(no network), and translates raw text as ``evaluate.py beam=1`` does. Our joint SentencePiece
model (data/tokenizer.py: pad 0, unk 1, bos 2, eos 3) serves both sides: ``source.spm`` and
``target.spm`` are the same file, and ``vocab.json`` maps every piece to its SentencePiece id,
so MarianTokenizer yields our ids and appends EOS as we do. The weights are mapped by
interop/marian.py (sinusoidal runs only).

One difference cannot be written into the folder: Marian's LayerNorms use eps 1e-5, hard-coded
(``MarianConfig`` has no eps field), where ours default to 1e-6. ``export.json`` records both;
``tests/e2e/test_export.py`` measures the effect (docs/interop.md). Callers that
want the exact network set the modules' eps after loading: ``interop.marian.set_layer_norm_eps``.
"""

import argparse
import json
import shutil
from pathlib import Path

import torch

from common.errors import UserError, optional_module
from common.files import staged_folder, write_failure, write_json
from data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from interop.marian import check_mappable, layer_norm_eps, to_marian
from runs.checkpoint import check_finite_weights, load_checkpoint, weights_sha256
from runs.resume import setting_differences
from runs.run import Run, checkpoint_record, load_run, rebuild_model

MARIAN_LAYER_NORM_EPS = 1e-5  # nn.LayerNorm's default, which modeling_marian.py leaves in place


class ExportError(UserError):
    """A run that cannot be exported, or a folder that cannot be written."""


def write_tokenizer_files(tokenizer: Tokenizer, out: Path, src_lang: str, tgt_lang: str) -> None:
    """source.spm, target.spm (our joint model), vocab.json and MarianTokenizer's config."""
    # transformers deferred: optional (the export extra), needed only to export
    MarianTokenizer = optional_module("transformers", "export").MarianTokenizer

    shutil.copyfile(tokenizer.path, out / "source.spm")
    shutil.copyfile(tokenizer.path, out / "target.spm")
    pieces = tokenizer.pieces()
    if len(set(pieces)) != len(pieces):
        raise ExportError(
            f"tokenizer {tokenizer.path} has duplicate pieces: cannot write vocab.json"
        )
    (out / "vocab.json").write_text(
        json.dumps({piece: i for i, piece in enumerate(pieces)}, ensure_ascii=False, indent=0)
    )
    marian_tokenizer = MarianTokenizer(
        str(out / "source.spm"),
        str(out / "target.spm"),
        str(out / "vocab.json"),
        source_lang=src_lang,
        target_lang=tgt_lang,
        bos_token="<s>",
    )
    marian_tokenizer.save_pretrained(str(out))
    check_tokenizer(marian_tokenizer, tokenizer)


def check_tokenizer(marian_tokenizer, tokenizer: Tokenizer) -> None:
    """Raise ExportError unless every id round-trips and the special ids are ours."""
    specials = (
        marian_tokenizer.pad_token_id,
        marian_tokenizer.unk_token_id,
        marian_tokenizer.bos_token_id,
        marian_tokenizer.eos_token_id,
    )
    if specials != (PAD_ID, 1, BOS_ID, EOS_ID):
        raise ExportError(f"MarianTokenizer gives special ids pad/unk/bos/eos={specials}")
    ids = list(range(tokenizer.vocab_size))
    back = marian_tokenizer.convert_tokens_to_ids(marian_tokenizer.convert_ids_to_tokens(ids))
    if back != ids:
        wrong = next(i for i, j in zip(ids, back, strict=True) if i != j)
        raise ExportError(f"id {wrong} does not round-trip through vocab.json")


def export_arguments(description: str) -> argparse.ArgumentParser:
    """The command line every export takes: --run-dir, --out (new or empty), --checkpoint."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--run-dir", type=Path, required=True, help="a training run directory")
    parser.add_argument(
        "--out", type=Path, required=True, help="the folder to write (new or empty)"
    )
    parser.add_argument(
        "--checkpoint", default="last", help="last | best | avg:N | <file> (as evaluate.py)"
    )
    return parser


def export_hf(
    run_dir: str | Path, out: str | Path, checkpoint: str = "last", max_positions: int = 1024
) -> Path:
    """Write the run's checkpoint as a Marian folder at out; returns out.

    max_positions: rows of Marian's sinusoid table (its longest sequence; ours has no cap).
    """
    if isinstance(max_positions, bool) or not isinstance(max_positions, int) or max_positions < 2:
        raise ExportError(
            f"--max-positions {max_positions}: pass the longest sequence Marian may hold, at "
            "least 2 (default 1024)"
        )
    state, tag = load_run(Path(run_dir), checkpoint)
    check_finite_weights(state, f"checkpoint {tag} of {run_dir}")  # first: what is wrong (13-3)
    check_own_weights(state, checkpoint, run_dir, ExportError)
    model, tokenizer = rebuild_model(state, torch.device("cpu"), run_dir)
    try:
        check_mappable(model)
    except UserError as e:
        raise ExportError(f"run {run_dir}: {e}") from None
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is not empty" if out.is_dir() else "is a file"
        raise ExportError(f"--out {out} exists and {what}: pass a new folder")
    try:  # written beside out and renamed into place once complete: never a partial out
        with staged_folder(out) as staging:
            write_folder(staging, model, tokenizer, state, tag, run_dir, max_positions)
    except Exception as e:  # safetensors words a full disk as a SafetensorError
        error = write_failure(e, f"the export to {out} (nothing was left there)", "export again")
        if error is None or isinstance(e, UserError):
            raise
        raise error from e
    return out


def check_own_weights(state: dict, checkpoint: str, run_dir, error: type[UserError]) -> None:
    """error, in one line, where --checkpoint holds another run's weights (own_checkpoint false)."""
    if state.get("own_checkpoint", True):
        return
    run = Run(run_dir)
    path = Path(checkpoint)
    if not path.exists() and (run.checkpoints / checkpoint).is_file():
        path = run.checkpoints / checkpoint
    folder = path.resolve().parent  # a file copied into this run's checkpoints/ is not its own
    elsewhere = folder.name == "checkpoints" and folder != run.checkpoints.resolve()
    home = folder.parent if elsewhere else "<the folder of the run it is from>"
    raise error(
        f"--checkpoint {checkpoint} holds another run's weights ({foreign_because(state, run)}): "
        f"export that run instead (--run-dir {home})"
    )


def foreign_because(state: dict, run: Run) -> str:
    """How a checkpoint's training differs from the run's last.pt, in a few words."""
    last = run.checkpoint_file("last")
    if not last.is_file():
        return f"not in {run.checkpoints}, and the run has no last.pt to compare it with"
    ours = load_checkpoint(last)
    tokenizers = [str(s.get("tokenizer", {}).get("sha256"))[:12] for s in (ours, state)]
    if tokenizers[0] != tokenizers[1]:
        return f"tokenizer sha256 {tokenizers[1]}, {last} has {tokenizers[0]}"
    refused, _ = setting_differences(ours.get("config") or {}, state.get("config") or {})
    shown = "; ".join(refused[:4]) + (f" and {len(refused) - 4} more" if len(refused) > 4 else "")
    if not refused:  # its settings are the run's: its content is what the run never wrote
        return f"content the run's {run.segments_file.name} does not record writing"
    return f"trained unlike {last}: {shown}"


def weights_record(state: dict) -> dict:
    """Which weights an export holds: step (an average's newest), sha256s, an average's inputs."""
    record = {"step": checkpoint_record(state)["step"], "weights_sha256": weights_sha256(state)}
    if state.get("file_sha256"):
        record["checkpoint_sha256"] = state["file_sha256"]
    if state.get("averaged_steps") is not None or state.get("averaged"):
        record["averaged_steps"] = state.get("averaged_steps") or []
        record["averaged"] = [Path(str(file)).name for file in state.get("averaged") or []]
    return record


def weights_line(tag: str, record: dict) -> str:
    """The model card's weights row: checkpoint, (the mean of steps ...), step and sha256s."""
    parts = [f"checkpoint {tag}"]
    if "averaged_steps" in record:
        steps = [str(s) if s is not None else "unrecorded" for s in record["averaged_steps"]]
        listed = ", ".join(steps[:-1]) + " and " + steps[-1] if len(steps) > 1 else "".join(steps)
        files = f" ({', '.join(record['averaged'])})" if record["averaged"] else ""
        parts.append(f"the mean of steps {listed or 'unrecorded'}{files}")
    step = record["step"]
    parts.append(f"step {step if step is not None else 'unrecorded'}")
    if "checkpoint_sha256" in record:
        parts.append(f"file sha256 {record['checkpoint_sha256'][:12]}")
    parts.append(f"weights sha256 {record['weights_sha256'][:12]}")
    return ", ".join(parts)


def write_folder(out: Path, model, tokenizer, state: dict, tag: str, run_dir, max_positions: int):
    """The Marian folder's files in out: weights, configs, tokenizer files, export.json and the
    model card (README.md)."""
    marian = to_marian(model, max_positions)
    marian.generation_config = generation_config(max_positions)
    # transformers 4.x's translation pipeline applies a folder's generation settings only where
    # they differ from the library's global defaults, so its own num_beams=4 would beat the
    # greedy num_beams=1 above; its task_specific_params entry is applied after, and wins.
    marian.config.task_specific_params = {"translation": {"num_beams": 1}}
    marian.save_pretrained(str(out))
    data = state["config"]["data"]
    write_tokenizer_files(tokenizer, out, data["src_lang"], data["tgt_lang"])
    write_json(
        out / "export.json",
        {
            "run_dir": str(Path(run_dir).resolve()),
            "checkpoint": tag,
            **weights_record(state),
            "tokenizer_sha256": tokenizer.sha256,
            "layer_norm_eps": {"trained": layer_norm_eps(model), "marian": MARIAN_LAYER_NORM_EPS},
            "search": "greedy (num_beams 1); Marian's beam search divides by |Y|^alpha, not GNMT",
        },
    )
    (out / "README.md").write_text(model_card(model, state, tag, run_dir), encoding="utf-8")


MODEL_CARD = """---
license: mit
language: [{src}, {tgt}]
library_name: transformers
tags: [translation, marian, pe-nmt]
---

# {name}: {src}→{tgt}, {position} positions

A Transformer (Vaswani et al. 2017, "Attention Is All You Need") trained with pe-nmt and
exported to Hugging Face Marian by `scripts/export_hf.py` (greedy search, as `evaluate.py
beam=1`; Marian's beam search ranks by |Y|^alpha, not the paper's GNMT penalty).

| | |
|---|---|
| position encoding | {position} |
| corpus | {corpus} |
| model | {parameters:,} parameters, d_model {d_model} |
| weights | {weights} |

Scores of these weights (the run's evaluations of them):

{scores}

Trained by: `python train.py {command}`

```python
from transformers import MarianMTModel, MarianTokenizer
model = MarianMTModel.from_pretrained("<folder>")
tokenizer = MarianTokenizer.from_pretrained("<folder>")
batch = tokenizer(["..."], return_tensors="pt")
print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))
```
"""


def score_lines(run_dir, record: dict) -> str:
    """The Markdown table of the run's evaluations of these weights (record: weights_record)."""
    # by their file's sha256; an average (no file) by the averaged weights' sha256, which
    # runs.run.checkpoint_record does not record yet: an average's card quotes none
    sha = record.get("checkpoint_sha256")
    key, value = ("checkpoint_sha256", sha) if sha else ("weights_sha256", record["weights_sha256"])
    rows = [e for e in Run(run_dir).evaluations() if value and e.get(key) == value]
    rows = [e for e in rows if e.get("bleu") is not None]
    if not rows and not sha:
        return (
            "none quoted: an evaluation of an average records no sha256 of the averaged "
            "weights, so none can be matched to these"
        )
    if not rows:
        return f"none yet: `python evaluate.py run_dir={Path(run_dir).resolve()} split=test`"
    lines = ["| evaluation | split | beam | sacreBLEU | chrF | signature |", "|---" * 6 + "|"]
    lines += [
        f"| {e['name']} | {e.get('split') or 'files'} | {e.get('beam')} | {e['bleu']:.2f} | "
        f"{e.get('chrf')} | {e.get('signature')} |"
        for e in rows
    ]
    return "\n".join(lines)


def model_card(model, state: dict, tag: str, run_dir) -> str:
    """README.md of an exported folder: what was trained, on what, and how it scores."""
    data, segments = state["config"]["data"], Run(run_dir).segments()
    record = weights_record(state)
    return MODEL_CARD.format(
        name=Path(run_dir).resolve().name,
        src=data["src_lang"],
        tgt=data["tgt_lang"],
        position=(state.get("choices") or {}).get("position", "?"),
        corpus=json.dumps(data.get("corpus"), default=str),
        parameters=sum(p.numel() for p in model.parameters()),
        d_model=state["config"]["model"].get("d_model"),
        weights=weights_line(tag, record),
        scores=score_lines(run_dir, record),
        command=" ".join((segments[0].get("overrides") or []) if segments else []),
    )


def generation_config(max_positions: int):
    """Greedy search (our evaluate.py beam=1), EOS forced at the last position."""
    # transformers deferred: optional (the export extra), needed only to export
    GenerationConfig = optional_module("transformers", "export").GenerationConfig

    return GenerationConfig(
        num_beams=1,
        do_sample=False,
        max_length=max_positions,
        decoder_start_token_id=BOS_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        forced_eos_token_id=EOS_ID,
    )


def translate_with_transformers(folder: str | Path, sentences: list[str], batch_size: int = 32):
    """Greedy translations by the folder alone: the ``translation`` pipeline where it exists.

    transformers 4.x has that pipeline (greedy through the folder's task_specific_params, see
    export_hf); transformers 5 removed it, and there the same steps are run by hand (tokenize
    with padding, ``generate`` with the folder's generation config, decode without special
    tokens).
    """
    # transformers deferred: optional (the export extra), needed only to export
    transformers = optional_module("transformers", "export")
    MarianMTModel, MarianTokenizer = transformers.MarianMTModel, transformers.MarianTokenizer

    folder = str(folder)
    try:
        translator = transformers.pipeline("translation", model=folder, device="cpu")
    except (KeyError, ValueError):  # a release without the translation task
        translator = None
    if translator is not None:
        outputs = translator(list(sentences), batch_size=batch_size)
        return [o["translation_text"] for o in outputs]
    tokenizer = MarianTokenizer.from_pretrained(folder)
    model = MarianMTModel.from_pretrained(folder).eval()
    out = []
    for start in range(0, len(sentences), batch_size):
        inputs = tokenizer(
            list(sentences[start : start + batch_size]), return_tensors="pt", padding=True
        )
        with torch.no_grad():
            generated = model.generate(**inputs)
        out += tokenizer.batch_decode(generated, skip_special_tokens=True)
    return out
