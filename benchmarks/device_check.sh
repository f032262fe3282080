#!/usr/bin/env bash
# The device check (benchmarks/device_check.py): one JSON file, <= 8 minutes on one H200.
#   benchmarks/device_check.sh [OUT_JSON] [device_check.py flags...]
#   benchmarks/device_check.sh "$OUT/device_check.json"          # on the accelerator
#   benchmarks/device_check.sh /tmp/dc.json --cpu                # CPU backend, tiny shapes
# OUT_JSON defaults to $OUT/device_check.json (or ./device_check.json). Runs from the repository root with
# the repository on PYTHONPATH (no install needed); PYTHON picks the interpreter (default python3).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# JAX's GPU pool: what the launchers export (scripts/slurm_multinode.sbatch); the planner reads the same.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# nothing is reachable from the device machine: never try the Hub
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
out="${1:-${OUT:-.}/device_check.json}"
[ $# -gt 0 ] && shift
# the script stops starting checks at its --budget-s (450 s); the hard limit is 8 minutes
exec timeout -k 10 480 "${PYTHON:-python3}" benchmarks/device_check.py --out "$out" "$@"
