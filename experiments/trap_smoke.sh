#!/usr/bin/env bash
# Smoke run of the four partial-pass trap arms (issue #18): a few steps, one seed, one target p_A,
# to show the strategy metrics flowing end to end (train lines and eval lines of metrics.jsonl).
# NOT a result. Usage: experiments/trap_smoke.sh [P_A] [STEPS] [OUT]
set -euo pipefail
P=${1:-0.1}; STEPS=${2:-4}; OUT=${3:-runs/trap_smoke}
PY=${PY:-python}
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$PWD/.jax_cache}
for arm in trap_fraction trap_binary trap_binary_ps trap_fraction_ps; do
  $PY -m experiments.train +experiment=$arm task.params.demo_root_cause_accuracy=$P seed=0 steps=$STEPS \
    eval.every=2 eval.count=32 ckpt_every=0 logging.progress=false sft.base_dir=$PWD/runs/base \
    hydra.run.dir=$OUT/$arm
done
$PY -m experiments.trap_summary $OUT --out $OUT/summary.json
