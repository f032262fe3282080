#!/bin/bash
# The partial-pass trap sweep (issue #18): 4 arms x 3 target p_A x 8 paired seeds, STEPS steps each.
# Resumable: a run with a summary.json is skipped; an unfinished one resumes from its checkpoint
# (the runner resumes only the same configuration). Runs a detached clean worktree of commit $SHA
# (OUT/code-<sha>), so edits to the tree during the sweep cannot leak in and every run's
# provenance records that commit with a clean tree.
#   SHA=<commit> results/trap/sweep.sh [OUT]
# then: python -m experiments.analyze OUT/runs --trap --out results/trap --copy-records results/trap/runs \
#           --page results/README.md --notebook
REPO=${REPO:-$(git rev-parse --show-toplevel)}
SHA=${SHA:-$(git -C $REPO rev-parse HEAD)}
OUT=${1:-$REPO/runs/trap_sweep}
STEPS=${STEPS:-60}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7"}
P_LIST=${P_LIST:-"0.1 0.5 0.3"}          # the trap case first, then above and near the break-even
ARMS=${ARMS:-"trap_fraction trap_binary trap_binary_ps trap_fraction_ps"}
CODE=$OUT/code-${SHA:0:10}
mkdir -p $OUT/runs
[ -d $CODE ] || git -C $REPO worktree add --detach $CODE $SHA
PY=${PY:-$REPO/.venv/bin/python}
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$OUT/.jax_cache}
cd $CODE
for p in $P_LIST; do for seed in $SEEDS; do for arm in $ARMS; do
  name="$arm-pa$p-s$seed"; run="$OUT/runs/$name"
  if [ -f "$run/summary.json" ]; then echo "skip $name"; continue; fi
  echo "run $name $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  PYTHONPATH=$CODE $PY -m experiments.train +experiment=$arm task.params.demo_root_cause_accuracy=$p \
    seed=$seed steps=$STEPS eval.every=10 eval.count=64 ckpt_every=20 logging.progress=false \
    sft.base_dir=$OUT/base hydra.run.dir=$run > "$run.log" 2>&1 || echo "FAILED $name (see $run.log)"
done; done; done
echo "all done $(date -u +%T)"
