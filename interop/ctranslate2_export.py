"""A run written as a CTranslate2 model folder a user can serve: `scripts/export_ctranslate2.py`.

The folder holds CTranslate2's model (ctranslate2_spec.py's conversion, float32 or quantized)
and the run's SentencePiece model as `spm.model`; ``ctranslate2.Translator(folder)`` loads it.
Tokenize with that model, append our EOS (`</s>`), and translate the pieces; the paper's GNMT
length penalty is not CTranslate2's (interop/ctranslate2_engine.py says how evaluate.py
re-ranks its n-best), so its own beam search ranks by |Y|^alpha: beam 1 is ours token for token.
"""

import shutil
from pathlib import Path

import torch

from common.errors import UserError, optional_module
from common.files import staged_folder, write_failure, write_json
from interop.ctranslate2_engine import convert_model
from interop.export import check_own_weights, weights_record
from runs.checkpoint import check_finite_weights
from runs.run import load_run, rebuild_model

QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16")


class CTranslate2ExportError(UserError):
    """A CTranslate2 export that cannot be written as asked, in one line."""


def export_ctranslate2(
    run_dir: str | Path, out: str | Path, checkpoint: str = "last", quantization: str | None = None
) -> Path:
    """Write the run's checkpoint as a CTranslate2 folder at out (new or empty); returns out."""
    optional_module("ctranslate2", "export")  # one line naming the extra, before any work
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise CTranslate2ExportError(
            f"--quantization {quantization}: pass one of {', '.join(QUANTIZATIONS)} (or none: "
            "float32)"
        )
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is not empty" if out.is_dir() else "is a file"
        raise CTranslate2ExportError(f"--out {out} exists and {what}: pass a new folder")
    state, tag = load_run(Path(run_dir), checkpoint)
    check_finite_weights(state, f"checkpoint {tag} of {run_dir}")  # first: what is wrong (13-4)
    check_own_weights(state, checkpoint, run_dir, CTranslate2ExportError)
    model, tokenizer = rebuild_model(state, torch.device("cpu"), run_dir)
    try:  # written beside out and renamed into place once complete: never a partial out
        with staged_folder(out) as staging:
            convert_model(model, tokenizer, staging, quantization)
            shutil.copy(tokenizer.path, staging / "spm.model")
            write_json(staging / "export.json", {
                "run_dir": str(Path(run_dir).resolve()), "checkpoint": tag,
                **weights_record(state), "quantization": quantization or "float32", "eos": "</s>",
            })  # fmt: skip
    except Exception as e:
        error = write_failure(e, f"the export to {out} (nothing was left there)", "export again")
        if error is None or isinstance(e, UserError):
            raise
        raise error from e
    return out
