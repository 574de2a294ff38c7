"""Translation through CTranslate2: a run converted (interop/ctranslate2_spec.py) and decoded there.

``evaluate.py engine=ctranslate2`` and ``scripts/benchmark.py decode`` use it; our own search
(model/search.py) stays the default engine. Sentences are tokenized by our SentencePiece model
and passed as pieces, our EOS appended, so CTranslate2 sees exactly our ids.

Search, as ours (§6.1) where CTranslate2 allows it:

- Length cap: ours caps each output at source subwords + max_len_b tokens, EOS included, and
  forces EOS there. CTranslate2 caps a batch at ``max_decoding_length`` tokens (EOS not
  counted, never forced), so sentences are batched by source length and each batch gets
  ``L + max_len_b - 1``: the same outputs. ``min_decoding_length=min_len`` bars EOS before
  min_len subwords, as ours (0, the default: EOS may come first). CTranslate2 renormalizes the
  barred steps without EOS, ours does not: the same greedy outputs, beam scores a little apart.
- Greedy (beam 1) is then token for token ours.
- Length penalty: ours (the paper's) ranks finished hypotheses by log P(Y) / lp(Y), GNMT's
  lp = ((5 + |Y|) / 6)^alpha. CTranslate2's ``length_penalty=alpha`` divides by |Y|^alpha instead
  (as fairseq and HF), and no option makes it GNMT's: the two agree only at alpha = 0. So we ask
  CTranslate2 for its ``beam`` finished hypotheses with ``length_penalty=0`` (scores = log P(Y),
  EOS included) and pick the best of them by GNMT's lp: the paper's ranking over CTranslate2's
  beam. What differs from ours: when a beam stops (CTranslate2: once ``beam`` hypotheses have
  finished; ours: once no live beam can beat the best finished one), and a hypothesis cut at the
  length cap, whose CTranslate2 score lacks the log P of the EOS ours forces there.
"""

import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

from common.errors import UserError, optional_module
from data.tokenizer import EOS_ID, Tokenizer
from interop.ctranslate2_spec import ctranslate2_spec, save_ctranslate2
from model.search import length_penalty

COMPUTE_TYPES = ("default", "float32", "int8", "int8_float32", "int16", "bfloat16", "float16")


def convert_model(model, tokenizer: Tokenizer, out_dir, quantization: str | None = None) -> Path:
    """Write our model as a CTranslate2 model folder (float32, or quantized: int8, ...)."""
    save_ctranslate2(ctranslate2_spec(model, tokenizer.pieces()), out_dir, quantization)
    return Path(out_dir)


@contextmanager
def ctranslate2_translator(model, tokenizer: Tokenizer, device, compute_type: str = "default"):
    """A ``ctranslate2.Translator`` of our model, converted into a temporary folder."""
    # ctranslate2 deferred: optional (the export extra), needed only for engine=ctranslate2
    ctranslate2 = optional_module("ctranslate2", "export")

    if compute_type not in COMPUTE_TYPES:
        raise UserError(
            f"ctranslate2_compute_type={compute_type}: pass one of {', '.join(COMPUTE_TYPES)}"
        )
    where = "cuda" if torch.device(device).type == "cuda" else "cpu"
    supported = sorted(ctranslate2.get_supported_compute_types(where))
    if compute_type != "default" and compute_type not in supported:
        raise UserError(
            f"ctranslate2_compute_type={compute_type} is not supported on this {where}: pass "
            f"default or one of {', '.join(supported)}"
        )
    with tempfile.TemporaryDirectory(prefix="ctranslate2-") as folder:
        convert_model(model, tokenizer, folder)
        yield ctranslate2.Translator(
            folder,
            device=where,
            compute_type=compute_type,
            inter_threads=1,
            intra_threads=torch.get_num_threads(),
        )


def translate_pieces(
    translator,
    sources: list[list[int]],
    vocabulary: list[str],
    beam: int = 4,
    lenpen: float = 0.6,
    max_len_b: int = 50,
    max_batch_size: int = 64,
    min_len: int = 0,
) -> list[list[int]]:
    """Output ids (EOS stripped) for sources given as ids + EOS; module docstring for the search."""
    index = {piece: i for i, piece in enumerate(vocabulary)}
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(sources):
        by_length.setdefault(len(ids), []).append(i)
    out: list[list[int]] = [[] for _ in sources]
    for length, rows in sorted(by_length.items()):
        results = translator.translate_batch(
            [[vocabulary[t] for t in sources[i]] for i in rows],
            max_batch_size=max_batch_size,
            beam_size=beam,
            num_hypotheses=beam,
            length_penalty=0.0,
            return_scores=True,
            max_input_length=0,
            max_decoding_length=length - 1 + max_len_b - 1,
            min_decoding_length=min_len,
        )
        for i, result in zip(rows, results, strict=True):
            best = max(
                zip(result.hypotheses, result.scores, strict=True),
                key=lambda h: h[1] / length_penalty(len(h[0]) + 1, lenpen),  # +1: the EOS
            )
            out[i] = [index[piece] for piece in best[0]]
    return out


def translate_ctranslate2(
    translator,
    tokenizer: Tokenizer,
    sentences: list[str],
    beam: int = 4,
    lenpen: float = 0.6,
    max_len_b: int = 50,
    min_len: int = 0,
) -> list[str]:
    """Translations of sentences through CTranslate2; an empty line gives ''."""
    encoded = tokenizer.encode(list(sentences))
    nonempty = [i for i, ids in enumerate(encoded) if ids]
    hyps = translate_pieces(
        translator,
        [encoded[i] + [EOS_ID] for i in nonempty],
        tokenizer.pieces(),
        beam,
        lenpen,
        max_len_b,
        min_len=min_len,
    )
    out = [""] * len(encoded)
    for i, text in zip(nonempty, tokenizer.decode(hyps), strict=True):
        out[i] = text
    return out
