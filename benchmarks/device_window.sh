#!/usr/bin/env bash
# The next GPU window (benchmarks/device_window.py, issue #49): one JSON file, <= 8 minutes on one H100/H200.
#   bash benchmarks/device_window.sh OUT.json [--cpu] [device_window.py flags...]
#   bash benchmarks/device_window.sh benchmarks/device/window_$(date +%F).json   # on the accelerator
#   bash benchmarks/device_window.sh /tmp/w.json --cpu                          # CPU backend, tiny shapes
# Runs from the repository root with the repository on PYTHONPATH (no install needed); PYTHON picks the
# interpreter (default python3). WINDOW_TIMEOUT_S (default 480) is the hard limit of the whole run; the
# script itself stops starting parts at its --total-s (450 s on an accelerator).
set -u
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: bash benchmarks/device_window.sh OUT.json [--cpu] [flags...]" >&2
  exit 2
fi
out="$1"
shift
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# JAX's GPU pool: what the launchers export (scripts/slurm_multinode.sbatch); the planner reads the same.
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# nothing is reachable from the device machine: never try the Hub
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec timeout -k 10 "${WINDOW_TIMEOUT_S:-480}" "${PYTHON:-python3}" benchmarks/device_window.py --out "$out" "$@"
