"""Translate and score a trained run: `python evaluate.py run_dir=<dir> [split=test] [beam=4]`.

The work is evaluation/evaluate.py's (`evaluate(cfg)`, `translate_stdin(cfg)`); this entry point
parses the config, runs it and prints the scores. See that module for what is written where.
"""

import json
import sys

from common.errors import quiet_start, run_entry, started

quiet_start(__name__)  # Ctrl-C while the imports below load: one line, status 130

import hydra
from omegaconf import DictConfig

from common.errors import report_user_errors
from evaluation.evaluate import evaluate, translate_stdin


@hydra.main(version_base="1.3", config_path="configs", config_name="evaluate")
@report_user_errors
def main(cfg: DictConfig) -> None:
    """Command-line entry: score (or translate stdin) and print; a user error is one line."""
    started()
    try:
        if cfg.translate:
            translate_stdin(cfg)
            return
        scores = evaluate(cfg)
    except KeyboardInterrupt:  # Ctrl-C: one line; evaluate() writes its files last, all or none
        done = (
            "the lines printed are whole translations, the rest untranslated"  # flushed per group
            if cfg.translate
            else "nothing written (eval/ as it was)"
        )
        print(f"interrupted: {done}", file=sys.stderr)
        sys.exit(130)
    print(
        json.dumps(
            {k: v for k, v in scores.items() if k not in ("by_length", "data")},
            indent=2,
            ensure_ascii=False,
        )
    )
    print(f"run directory: {cfg.run_dir}")
    if "bleu" in scores:
        print(
            f"sacreBLEU {scores['bleu']:.2f} on {scores['name']} "
            f"({scores['n_sentences']} sentences, {scores['signature']})"
        )
    else:
        print(f"translations of {scores['n_sentences']} lines in {scores['hypotheses']}")


if __name__ == "__main__":
    run_entry(
        main,
        "configs/evaluate.yaml (python evaluate.py --help); "
        "a run's training settings are read from its folder",
    )
