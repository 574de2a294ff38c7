"""Translate and score a trained run: what `python evaluate.py` runs, as `evaluate(cfg)`.

Rebuilds the model from the config stored in the checkpoint (never today's YAML), translates
with the paper's beam search (§6.1: beam 4, GNMT length penalty 0.6, max length source + 50)
and writes `<run_dir>/eval/<name>.json` with BLEU scored two ways (RECIPE.md, "Inference and
scoring"): `bleu` is detokenized sacreBLEU with its signature (today's practice); `tok_bleu` is
the paper's: Moses-tokenized, hyphenated compounds split as `A ##AT##-##AT## B`, BLEU on tokens.
"""

import logging
import math
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import sacrebleu
import torch
from omegaconf import DictConfig, OmegaConf

from common.configs import CONFIG_DIR
from common.errors import DataError, UserError
from common.progress import progress_bar, shows_progress
from data.corpus import decode_lines, load_split, read_lines, text_fingerprint
from data.tokenizer import EOS_ID
from evaluation.bleu import bleu_by_length, tokenized_bleu
from evaluation.line_stream import waiting_lines
from evaluation.perplexity import perplexity
from evaluation.translate import fitting_lines, nbest_lines, translate, translate_nbest
from interop.ctranslate2_engine import ctranslate2_translator, translate_ctranslate2
from model.position import PositionRangeError
from runs.checkpoint import check_finite_weights
from runs.device import resolve_device, resolve_precision
from runs.run import Run, checkpoint_record, lines_sha256, load_run, rebuild_model
from runs.settings import check_finite

ENGINES = ("ours", "ctranslate2")


class EvaluationError(UserError):
    """An evaluation whose scores cannot be trusted or written: nothing is written."""


# Each sentence's n-best (translation, log P(Y) / lp(Y)), best first (nbest > 1 only)
NBest = list[list[tuple[str, float]]]


@contextmanager
def translator(
    cfg: DictConfig, model, tokenizer, device, precision: str, progress: bool = True
) -> Iterator[Callable[[list[str]], tuple[list[str], NBest | None]]]:
    """srcs -> their translations and (nbest > 1) n-best, by cfg.engine: our search (default)
    or CTranslate2 (the same model, converted once for every call); progress: a bar (ours)."""
    if cfg.engine == "ctranslate2":
        compute_type = cfg.ctranslate2_compute_type
        with ctranslate2_translator(model, tokenizer, device, compute_type) as engine:
            yield lambda srcs: (
                translate_ctranslate2(
                    engine, tokenizer, srcs, cfg.beam, cfg.lenpen, cfg.max_len_b, cfg.min_len
                ),
                None,
            )
        return
    settings = (cfg.beam, cfg.lenpen, cfg.max_len_b, cfg.max_tokens, precision, cfg.min_len)

    def search(srcs: list[str]) -> tuple[list[str], NBest | None]:
        if cfg.nbest == 1:
            return translate(model, tokenizer, srcs, device, *settings, progress=progress), None
        found = translate_nbest(
            model, tokenizer, srcs, device, *settings, nbest=cfg.nbest, progress=progress
        )
        return [hyps[0][0] if hyps else "" for hyps in found], found

    yield search


def translate_with(
    cfg: DictConfig, model, tokenizer, srcs: list[str], device, precision: str
) -> tuple[list[str], NBest | None]:
    """Translations of srcs by cfg.engine and, with nbest > 1, their n-best (see translator)."""
    with translator(cfg, model, tokenizer, device, precision) as search:
        return search(srcs)


def read_sources(cfg: DictConfig) -> tuple[list[str], list[str] | None, str]:
    """Sources, references (None without ref_file) and a description, from src_file/ref_file."""
    if not cfg.src_file:
        raise DataError("ref_file is set without src_file: pass both, or a split=<name>")
    srcs = read_lines(cfg.src_file, "src_file")
    if not any(line.strip() for line in srcs):
        raise DataError(
            f"src_file={cfg.src_file} has no non-blank line: pass a file of source sentences"
        )
    refs = read_lines(cfg.ref_file, "ref_file") if cfg.ref_file else None
    if refs is not None and not any(line.strip() for line in refs):
        raise DataError(
            f"ref_file={cfg.ref_file} has no non-blank line: pass the references, one a line "
            "(or leave ref_file out to only translate)"
        )
    if refs is not None and len(refs) != len(srcs):
        raise DataError(
            f"src_file={cfg.src_file} has {len(srcs)} lines but ref_file={cfg.ref_file} has "
            f"{len(refs)}: pass line-aligned files"
        )
    return srcs, refs, str(cfg.src_file)


# GNMT length penalties are tuned in [0, 1] (Wu et al. 2016); far above, lp overflows no float
# but every hypothesis scores about 0: nonsense, refused.
MAX_LENPEN = 10.0
# Beam search keeps beam hypotheses per sentence and ranks beam x vocabulary scores each step:
# a beam wider than the vocabulary (checked once the model is loaded) or this cap is refused.
MAX_BEAM = 1000


def whole_number(cfg: DictConfig, key: str, low: int, hint: str) -> int:
    """cfg[key] as an int of at least low, else a UserError naming key=value and hint."""
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UserError(f"{key}={value}: pass a whole number {hint}")
    return value


def check_sources(cfg: DictConfig) -> None:
    """Raise UserError for sources given twice: a split and files, or files and translate."""
    if cfg.translate and (cfg.src_file or cfg.ref_file):
        raise UserError(
            "translate=true reads the sentences on stdin but src_file/ref_file is set too: pass "
            "the file on stdin, or leave translate out to translate src_file"
        )
    if cfg.translate and cfg.split is not None:
        raise UserError(
            f"translate=true reads the sentences on stdin but split={cfg.split} is set too: leave "
            "split out to translate stdin, or translate out to score the split"
        )
    if cfg.split is not None and (cfg.src_file or cfg.ref_file):
        raise UserError(
            f"split={cfg.split} and src_file/ref_file name two inputs: pass one of them"
        )


def check_read(cfg: DictConfig) -> None:
    """Raise UserError for an option this evaluation would leave unread: a key evaluate.py has
    not (an appended +key), name= with translate=true, the other engine's precision."""
    known = set(OmegaConf.load(CONFIG_DIR / "evaluate.yaml")) - {"defaults", "hydra"}
    unknown = sorted(str(key) for key in cfg if key not in known)
    if unknown:
        raise UserError(
            f"{unknown[0]}: evaluate.py reads no such option (its options: configs/evaluate.yaml); "
            "check the spelling"
        )
    if cfg.translate and cfg.name:
        raise UserError(
            f"name={cfg.name} names an evaluation's files, and translate=true writes none (it "
            "answers on stdout): leave name out, or score a file with src_file= and name="
        )
    if cfg.engine == "ours" and cfg.ctranslate2_compute_type != "default":
        raise UserError(
            f"ctranslate2_compute_type={cfg.ctranslate2_compute_type} is read by "
            "engine=ctranslate2 only: add engine=ctranslate2, or set precision= for ours"
        )
    if cfg.engine == "ctranslate2" and cfg.precision != "auto":
        raise UserError(
            f"precision={cfg.precision} sets engine=ours' arithmetic: with engine=ctranslate2 "
            "pass ctranslate2_compute_type= (e.g. int8, bfloat16) instead"
        )


def check_options(cfg: DictConfig) -> None:
    """Raise UserError naming the first evaluation option out of range."""
    if OmegaConf.is_missing(cfg, "run_dir"):
        raise UserError("run_dir is not set: pass run_dir=<a training run directory>")
    if not isinstance(cfg.get("translate", False), bool):  # `maybe` would read stdin as true
        raise UserError(f"translate={cfg.translate}: pass true (read stdin) or false")
    check_sources(cfg)
    check_read(cfg)
    check_finite(cfg)
    whole_number(cfg, "beam", 1, f"from 1 (greedy) to {MAX_BEAM} (the paper: 4)")
    if cfg.beam > MAX_BEAM:
        raise UserError(f"beam={cfg.beam}: pass 1 (greedy) to {MAX_BEAM} (the paper: 4)")
    check_nbest(cfg)
    lenpen = cfg.lenpen
    if (
        isinstance(lenpen, bool)
        or not isinstance(lenpen, int | float)
        or not 0 <= lenpen <= MAX_LENPEN
    ):
        raise UserError(
            f"lenpen={cfg.lenpen}: pass a number from 0 to {MAX_LENPEN:g} (the paper: 0.6)"
        )
    max_input_len = whole_number(cfg, "max_input_len", 1, ">= 1 (subwords, default 1024)")
    whole_number(cfg, "max_len_b", 1, f"from 1 to max_input_len={max_input_len} (the paper: 50)")
    if cfg.max_len_b > max_input_len:
        raise UserError(
            f"max_len_b={cfg.max_len_b}: pass 1 to max_input_len={max_input_len} (the paper: "
            "50; raise max_input_len to allow more)"
        )
    whole_number(cfg, "min_len", 0, f"from 0 to max_len_b={cfg.max_len_b}")
    if cfg.min_len > cfg.max_len_b:
        raise UserError(
            f"min_len={cfg.min_len}: pass 0 to max_len_b={cfg.max_len_b} output subwords (0: EOS "
            "may come first, as the paper's search; 1: no empty translation, as fairseq's)"
        )
    whole_number(cfg, "max_tokens", 1, ">= 1")
    resolve_precision(cfg.precision, torch.device("cpu"))  # checks the name
    if cfg.engine not in ENGINES:
        raise UserError(f"engine={cfg.engine}: pass engine=ours or engine=ctranslate2")
    if cfg.long_inputs not in ("error", "skip"):
        raise UserError(f"long_inputs={cfg.long_inputs}: pass long_inputs=error or skip")
    name = str(cfg.name or "")
    if name and (Path(name).name != name or name in (".", "..")):
        raise UserError(f"name={cfg.name}: pass a plain file name (no directories)")


def check_nbest(cfg: DictConfig) -> None:
    """Raise UserError for an nbest the search cannot give: above the beam, or not ours."""
    whole_number(cfg, "nbest", 1, f"from 1 to beam={cfg.beam} (1: the best translation only)")
    if cfg.nbest > cfg.beam:
        raise UserError(
            f"nbest={cfg.nbest}: pass 1 to beam={cfg.beam} (the search keeps beam hypotheses), "
            f"or raise beam to at least {cfg.nbest}"
        )
    if cfg.nbest > 1 and cfg.engine != "ours":
        raise UserError(
            f"nbest={cfg.nbest} needs engine=ours: pass nbest=1 with engine={cfg.engine}"
        )


def check_beam(cfg: DictConfig, tokenizer) -> None:
    """Raise UserError for a beam wider than the vocabulary (more hypotheses than subwords)."""
    if cfg.beam > tokenizer.vocab_size:
        raise UserError(
            f"beam={cfg.beam} is wider than this run's vocabulary of {tokenizer.vocab_size} "
            f"subwords: pass beam=1 to {tokenizer.vocab_size} (the paper: 4)"
        )


def apply_position_override(model, cfg: DictConfig) -> dict:
    """Apply position_override's non-null inference-only settings; {} when none are given."""
    settings = OmegaConf.to_container(cfg.get("position_override") or {}, resolve=True)
    settings = {key: value for key, value in settings.items() if value is not None}
    return model.apply_position_settings(settings) if settings else {}


# The form of a default name, <split>-<last|best|avgN>-beam<k>[-<override, engine>]: compare and
# the studies read the split, checkpoint and beam from it, so only the settings it says may
# write it.
EVAL_NAME = re.compile(r"^(?P<split>.+)-(?P<tag>last|best|avg\d+)-beam(?P<beam>\d+)(?P<more>-.+)?$")


def override_tag(position_override: dict) -> str:
    """'-ntk-factor2' for an inference-only position override ('' for none): an evaluation of
    changed positions never takes the name of the run's own."""
    parts = [
        str(value) if key == "scaling" else f"{key}{value:g}"
        for key, value in sorted(position_override.items(), key=lambda kv: kv[0] != "scaling")
    ]
    return "".join(f"-{part}" for part in parts)


# The paper's search beyond its beam (§6.1: alpha 0.6, at most input + 50; EOS may come first),
# configs/evaluate.yaml's defaults: a default evaluation name says only what differs from it
PAPER_SEARCH = (("lenpen", 0.6), ("min_len", 0), ("max_len_b", 50))


def search_tag(lenpen: float, min_len: int = 0, max_len_b: int = 50) -> str:
    """-lenpen<a>, -minlen<n>, -maxlenb<n> for each setting other than the paper's ('' for its)."""
    given = {"lenpen": lenpen, "min_len": min_len, "max_len_b": max_len_b}
    other = [key for key, paper in PAPER_SEARCH if given[key] != paper]
    return "".join(f"-{key.replace('_', '')}{given[key]:g}" for key in other)


def evaluation_name(cfg: DictConfig, split: str, tag: str, position_override: dict) -> str:
    """eval/<name>: name=, else <split>-<tag>-beam<k> and any other search setting (or the
    src_file's stem), the override and -ctranslate2 appended; a name of the default form that
    other settings would write is refused (it would be read as theirs)."""
    search = f"beam{cfg.beam}{search_tag(cfg.lenpen, cfg.min_len, cfg.max_len_b)}"
    stem = Path(cfg.src_file).stem if cfg.src_file else f"{split}-{tag}-{search}"
    default = stem + override_tag(position_override)
    if cfg.engine == "ctranslate2":
        default += "-ctranslate2"  # beside our engine's file of the same evaluation
    if not cfg.name:
        return default
    name = str(cfg.name)
    if name != default and EVAL_NAME.match(name):
        raise UserError(
            f"name={name} is the default name of other settings (these write {default}): "
            "compare and the studies would read it as that split, checkpoint and beam; drop "
            "name=, or pass a name of another form"
        )
    return name


def evaluation_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...]) -> DictConfig:
    """configs/evaluate.yaml with run_dir and key=value overrides, as `evaluate.py` composes it
    (read directly, so it works inside a running Hydra app too); an unknown key is an error."""
    cfg = OmegaConf.load(CONFIG_DIR / "evaluate.yaml")
    for key in ("defaults", "hydra"):  # Hydra's own sections: logging, not evaluation
        cfg.pop(key, None)
    OmegaConf.set_struct(cfg, True)
    cfg.merge_with(OmegaConf.from_dotlist([f"run_dir={run_dir}", *overrides]))
    return cfg


def evaluate_run(run_dir: str | Path, *overrides: str) -> dict:
    """The one way library code evaluates a run, in this process: `evaluate.py run_dir=<run>
    key=value ...` (configs/evaluate.yaml) without the command line."""
    return evaluate(evaluation_config(run_dir, overrides))


def evaluate(cfg: DictConfig) -> dict:
    """Translate a split (or files) with a run's checkpoint; write and return the scores.

    Nothing is written unless the whole evaluation succeeds; the hypotheses and the JSON are
    each written atomically.
    """
    check_options(cfg)
    if cfg.src_file or cfg.ref_file:
        srcs, refs, where = read_sources(cfg)
    device = resolve_device(cfg.device)
    run_dir = Path(cfg.run_dir)
    state, tag = load_run(run_dir, str(cfg.checkpoint))
    check_finite_weights(state, f"checkpoint {tag} of {run_dir}")
    model, tokenizer = rebuild_model(state, device, run_dir)
    check_beam(cfg, tokenizer)
    position_override = apply_position_override(model, cfg)
    split = str(cfg.split or "validation")
    name = evaluation_name(cfg, split, tag, position_override)
    if not cfg.src_file:
        dataset = load_split(OmegaConf.create(state["config"]["data"]), split)
        if state["own_checkpoint"]:
            check_split_text(Run(run_dir), split, text_fingerprint(dataset))
        srcs, refs, where = list(dataset["src"]), list(dataset["tgt"]), f"split {split}"
    if not srcs:
        raise UserError(f"{where} has no lines: nothing to evaluate; pick another split or file")
    ref_where = str(cfg.ref_file) if cfg.ref_file else None
    kept, skipped = fitting_lines(
        model, tokenizer, srcs, refs, cfg.max_len_b, cfg.long_inputs, where, cfg.max_input_len,
        ref_where,
    )  # fmt: skip
    if not kept:
        raise PositionRangeError(
            f"no line of {where} fits the model's position table: nothing to evaluate"
        )
    skipped_indices = sorted(set(range(len(srcs))) - set(kept))  # lines left out, from 0
    srcs = [srcs[i] for i in kept]
    refs = [refs[i] for i in kept] if refs is not None else None
    precision = resolve_precision(cfg.precision, device)
    run = Run(run_dir)
    settings = {
        "checkpoint": tag,
        "split": None if cfg.src_file else split,
        **search_record(cfg, precision, position_override),
    }
    check_same_settings(run, name, settings)
    hyps, found = translate_with(cfg, model, tokenizer, srcs, device, precision)
    nbest = nbest_lines(found, cfg.nbest, kept) if found is not None else None  # ids: line - 1
    hyp_path = run.hypotheses_file(name)
    scores = {
        "name": name,
        **checkpoint_record(state),
        **settings,
        "n_sentences": len(hyps),
        "hypotheses": str(hyp_path),
        "hypotheses_sha256": lines_sha256(hyps),  # compare reads the .hyp back, checked
        **({"nbest_hypotheses": str(run.nbest_file(name))} if nbest else {}),
        "skipped": skipped,
        "skipped_indices": skipped_indices,
    }
    if refs is not None:
        tgt_lang = state["config"]["data"]["tgt_lang"]
        scores.update(reference_scores(model, tokenizer, srcs, hyps, refs, tgt_lang, cfg, device))
    check_scores(scores, run_dir, tag, where)
    run.write_evaluation(name, hyps, scores, nbest)
    return scores


def check_same_settings(run: Run, name: str, settings: dict) -> None:
    """UserError where eval/<name>.json holds an evaluation of other settings (checkpoint, split
    or files, search): it would be replaced by another under its name (probe 18-5: a src_file
    whose stem is a default name; 9-5: another run's checkpoint on the run's own file). The
    same settings again refresh it (the weights may have trained on)."""
    before = run.evaluation(name)
    changed = [
        f"{key}: {before[key]} -> {value}"
        for key, value in settings.items()
        if before is not None and key in before and before[key] != value
    ]
    if changed:
        raise UserError(
            f"{run.evaluation_file(name)} holds an evaluation of other settings "
            f"({'; '.join(changed)}): pass name=<a name of its own> for this one"
        )


def check_split_text(run: Run, split: str, now: dict) -> None:
    """UserError where a split's text is not what the run recorded of it at launch (data.json):
    a replaced dev or test set is never scored under the split's name."""
    recorded = run.recorded_text(split)
    if recorded is None or recorded == now:
        return
    raise UserError(
        f"split={split}: the corpus's {split} text is not the one {run.data_file} recorded at "
        f"launch ({recorded.get('pairs')} pairs, sha256 {str(recorded.get('sha256'))[:12]}; now "
        f"{now['pairs']} pairs, sha256 {now['sha256'][:12]}): restore its files, or score the "
        "new text as files (src_file=... ref_file=... name=...)"
    )


def check_scores(scores: dict, run_dir: Path, tag: str, where: str) -> None:
    """EvaluationError naming every non-finite score (a NaN perplexity is no result to keep)."""
    bad = [
        f"{key}={value}"
        for key, value in scores.items()
        if isinstance(value, float) and not math.isfinite(value)
    ]
    if bad:
        raise EvaluationError(
            f"checkpoint {tag} of {run_dir} scores {', '.join(bad)} on {where}: its weights "
            "give no finite score (damaged or diverged), nothing written; evaluate another "
            "checkpoint (checkpoint=best, step_<n>.pt, ...)"
        )


def search_record(cfg: DictConfig, precision: str, position_override: dict) -> dict:
    """The evaluation's inputs and search settings, as its JSON records them."""
    return {
        "src_file": str(Path(cfg.src_file).resolve()) if cfg.src_file else None,
        "ref_file": str(Path(cfg.ref_file).resolve()) if cfg.ref_file else None,
        "beam": cfg.beam,
        "lenpen": cfg.lenpen,
        "max_len_b": cfg.max_len_b,
        "min_len": cfg.min_len,
        "max_input_len": cfg.max_input_len,
        # resolved: fp32, bf16 or fp16 (our search's; CTranslate2's is its compute type)
        "precision": precision if cfg.engine == "ours" else None,
        "position_override": position_override,
        "engine": cfg.engine,
        **({"nbest": cfg.nbest} if cfg.nbest > 1 else {}),  # the 1-best is scored either way
        **(
            {"ctranslate2_compute_type": cfg.ctranslate2_compute_type}
            if cfg.engine == "ctranslate2"
            else {}
        ),
    }


def reference_scores(model, tokenizer, srcs, hyps, refs, tgt_lang: str, cfg, device) -> dict:
    """BLEU (sacreBLEU, its signature; the paper's tokenized), chrF, PPL and BLEU by length."""
    metric = sacrebleu.BLEU()
    bleu = metric.corpus_score(hyps, [refs])
    src_ids = [ids + [EOS_ID] for ids in tokenizer.encode(srcs)]
    tgt_ids = [ids + [EOS_ID] for ids in tokenizer.encode(refs)]
    return {
        "references_sha256": lines_sha256(refs),  # what was scored against, by content
        "sources_sha256": lines_sha256(srcs),
        "bleu": round(bleu.score, 2),
        "signature": str(metric.get_signature()),
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
        "tok_bleu": round(tokenized_bleu(hyps, refs, tgt_lang), 2),
        "ppl": round(perplexity(model, src_ids, tgt_ids, cfg.max_tokens, device, "max_tokens"), 3),
        "by_length": bleu_by_length(srcs, hyps, refs),
    }


# translate=true translates at most this many waiting lines at once: enough for the length-sorted
# batches of a piped file (a test set's thousands of lines come in a few groups), few enough
# that the first answers of a long file come in seconds
STDIN_GROUP = 1024


def answer_lines(cfg: DictConfig, search, model, tokenizer, lines: list[str], first: int) -> str:
    """The output for lines of stdin numbered from first (from 0): a translation each ('' for an
    empty or skipped line), or with nbest > 1 fairseq's nbest H- lines each."""
    kept, _ = fitting_lines(
        model, tokenizer, lines, None, cfg.max_len_b, cfg.long_inputs, "stdin", cfg.max_input_len,
        first=first,
    )  # fmt: skip
    hyps, found = search([lines[i] for i in kept])
    if found is not None:
        every: NBest = [[] for _ in lines]
        for i, hyps_i in zip(kept, found, strict=True):
            every[i] = hyps_i
        return nbest_lines(every, cfg.nbest, range(first, first + len(lines)))
    out = [""] * len(lines)
    for i, text in zip(kept, hyps, strict=True):
        out[i] = text
    return "".join(text + "\n" for text in out)


def translate_stdin(cfg: DictConfig) -> None:
    """Translate stdin to stdout as its lines come (configs/evaluate.yaml, translate): the lines
    already waiting are searched together, their answers written and flushed in order."""
    for handler in logging.getLogger().handlers:  # stdout carries the translations only
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)
    check_options(cfg)
    device = resolve_device(cfg.device)
    run_dir = Path(cfg.run_dir)
    state, tag = load_run(run_dir, str(cfg.checkpoint))
    check_finite_weights(state, f"checkpoint {tag} of {run_dir}")  # probe 13-26: an empty line
    model, tokenizer = rebuild_model(state, device, run_dir)
    check_beam(cfg, tokenizer)
    apply_position_override(model, cfg)
    precision = resolve_precision(cfg.precision, device)
    done = 0
    # a count of lines on a terminal's stderr, unless stdout is that terminal (the answers show)
    counter = progress_bar(None, "translate", "line", enabled=not shows_progress(sys.stdout))
    with translator(cfg, model, tokenizer, device, precision, progress=False) as search, counter:
        for raw in waiting_lines(sys.stdin, STDIN_GROUP):
            lines = decode_lines(raw, "stdin", start=done + 1)
            sys.stdout.write(answer_lines(cfg, search, model, tokenizer, lines, done))
            sys.stdout.flush()
            done += len(lines)
            counter.update(len(lines))
