#!/usr/bin/env bash
# A short, PRELIMINARY fraction-vs-binary comparison on the partial-pass trap task (issue #18):
# GRPO (no PS), target p_A in P_LIST, SEEDS paired seeds, STEPS steps each; far below the issue's
# protocol (>= 8 seeds, 4 arms, 3 p_A, full length). Usage:
#   experiments/trap_short_compare.sh "0.1 0.5" "0 1 2" 40 runs/trap_short
set -euo pipefail
P_LIST=${1:-"0.1 0.5"}; SEEDS=${2:-"0 1 2"}; STEPS=${3:-40}; OUT=${4:-runs/trap_short}
PY=${PY:-python}
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$PWD/.jax_cache}
for p in $P_LIST; do for seed in $SEEDS; do for arm in trap_fraction trap_binary; do
  $PY -m experiments.train +experiment=$arm task.params.demo_root_cause_accuracy=$p seed=$seed steps=$STEPS \
    eval.every=10 eval.count=64 ckpt_every=0 logging.progress=false sft.base_dir=$PWD/runs/base \
    hydra.run.dir=$OUT/$arm-pa$p-s$seed
done; done; done
$PY -m experiments.trap_summary $OUT --out $OUT/summary.json
