#!/bin/bash
# The partial-pass trap sweep (issue #18): 4 arms x 3 target p_A x 8 paired seeds, STEPS steps each.
# Resumable: a run with a summary.json is skipped; an unfinished one resumes from its checkpoint
# (the runner resumes only the same configuration). Runs a detached clean worktree of commit $SHA
# (OUT/code-<sha>), so edits to the tree during the sweep cannot leak in and every run's
# provenance records that commit with a clean tree.
#   SHA=<commit> experiments/trap_sweep.sh [OUT]
# then: python -m experiments.analyze OUT/runs --trap --out results/trap --copy-records results/trap/runs \
#           --page results/trap/README.md --notebook
. "$(dirname "$0")/sweep_lib.sh"   # REPO, SHA, sweep_setup, sweep_run
STEPS=${STEPS:-60}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7"}
P_LIST=${P_LIST:-"0.1 0.5 0.3"}          # the trap case first, then above and near the break-even
ARMS=${ARMS:-"trap_fraction trap_binary trap_binary_ps trap_fraction_ps"}
sweep_setup ${1:-$REPO/runs/trap_sweep}
for p in $P_LIST; do for seed in $SEEDS; do for arm in $ARMS; do
  sweep_run "$arm-pa$p-s$seed" +experiment=$arm task.params.demo_root_cause_accuracy=$p \
    seed=$seed steps=$STEPS eval.every=10 eval.count=64 ckpt_every=20 logging.progress=false \
    sft.base_dir=$OUT/base
done; done; done
echo "all done $(date -u +%T)"
