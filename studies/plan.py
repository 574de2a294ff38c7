"""What the German study's report reads of a scored run: its evaluations, search and files.

The study (configs/study/pe_multi30k.yaml) trained each (condition, variant, seed) with the
retired ``scripts/study.py run`` (the records name the commits that ran it), scored it once
(Table 3's test set, the concatenation sets, BLEU per source-length bucket) into its
``study.json`` (studies/records.py) and kept its record; ``scripts/study.py report``
(studies/report.py) still reads those records. Which conditions, variants and seeds there are
comes from the study's config (studies/protocol.py), never from here.
"""

from __future__ import annotations

from pathlib import Path

from common.configs import CONFIG_DIR
from common.errors import UserError


class StudyError(UserError):
    """A problem with a study's arguments or run folders, stated in one line."""


def position_variants() -> list[str]:
    """The position variants of configs/position/*.yaml, by name."""
    return sorted(p.stem for p in (CONFIG_DIR / "position").glob("*.yaml"))


ROOT = Path(__file__).resolve().parents[1]
KS = (1, 2, 3, 4)
CONCAT_SPLITS = ("test", "validation")
TABLE3_EVAL = "test-last-beam4"
# The paper's search (§6.1): beam 4, alpha 0.6; EOS may come first (min_len 0), as tensor2tensor
SEARCH = {"beam": 4, "lenpen": 0.6, "min_len": 0}
BUCKET_WIDTH = 5
# a length bucket's scores in study.json; bp and length_ratio kept since 2026-12-03 (an older
# record lacks them)
BUCKET_KEYS = ("bucket", "low", "high", "beyond", "n", "bleu", "bp", "length_ratio")
STUDY_FILE = "study.json"
POOLED = "+".join(CONCAT_SPLITS)  # test + validation scored together

LAUNCHERS = ("basic", "submitit_local", "slurm")  # configs/hydra/launcher and Hydra's own
# submitit_local's default limit is 60 minutes a job; a study run may take hours on a CPU
LOCAL_TIMEOUT_MIN = 7 * 24 * 60
