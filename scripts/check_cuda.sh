#!/usr/bin/env bash
# The CUDA paths in one short run (about 6 minutes on one H100/H200, compilation included):
#   1. training-step throughput, MFU and memory of the base model at 25k tokens a step, bf16,
#      torch.compile off and on, at the benchmark's vocabulary (8000) and the recipe's (37000);
#   2. a real training run on the GPU (toy corpus, tiny model, compiled, 2 minutes) and a
#      beam-search evaluation of it, which prints BLEU;
#   3. that run again, uncompiled, in fp16 with its gradient scaler (what precision=auto picks on
#      a GPU without bf16), 1 minute, into <run directory>-fp16, and its evaluation in fp16.
# Usage: bash scripts/check_cuda.sh [run directory]   (PYTHON=python3 to pick the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # works from a plain checkout, installed or not
PYTHON=${PYTHON:-python}
run=${1:-outputs/check_cuda}

"$PYTHON" - <<'PY'
import sys

import torch

if not torch.cuda.is_available():
    sys.exit(f"error: torch {torch.__version__} sees no CUDA device; run this on a GPU machine")
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
PY
"$PYTHON" scripts/benchmark.py train --device cuda --model base
"$PYTHON" scripts/benchmark.py train --device cuda --model base --vocab-size 37000
"$PYTHON" train.py experiment=quickstart trainer.device=cuda trainer.compile=true \
    trainer.max_minutes=2 hydra.run.dir="$run"
"$PYTHON" evaluate.py run_dir="$run" split=test device=cuda
"$PYTHON" train.py experiment=quickstart trainer.device=cuda trainer.precision=fp16 \
    trainer.max_minutes=1 hydra.run.dir="$run-fp16"
"$PYTHON" evaluate.py run_dir="$run-fp16" split=test device=cuda precision=fp16
