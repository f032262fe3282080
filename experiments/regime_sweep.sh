#!/bin/bash
# The decisive LM sweep (issue #16): for each task variant EXP (a conf/experiment/regime_* preset),
# every arm of ARMS x SEEDS paired seeds (same seed = same warm start and problem stream).
# Resumable: a run with a summary.json is skipped; an unfinished one resumes from its checkpoint.
# Runs a detached clean worktree of commit $SHA (OUT/code-<sha>), so every run's provenance records
# that commit with a clean tree and edits to the tree during the sweep cannot leak in.
#   SHA=<commit> EXPS="regime_late" experiments/regime_sweep.sh [OUT]
# An arm is label=override,override,... (commas become spaces).
. "$(dirname "$0")/sweep_lib.sh"   # REPO, SHA, sweep_setup, sweep_run
EXPS=${EXPS:-regime_late}
STEPS=${STEPS:-40}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7"}
ARMS=${ARMS:-"baseline=method=baseline
ps_ada=method=ps_ada
baseline_nv=method=baseline,schedule.kind=next_visit
ps_ada_nv=method=ps_ada,schedule.kind=next_visit,schedule.cut_spread=true,schedule.sources=all
reroll_noprefix=method=reroll_noprefix
extra_rollouts=method=extra_rollouts
baseline_lr2=method=baseline_lr2
ps_fix=method=ps_fix
ps_ada_hard=method=ps_ada_hard"}
EXTRA=${EXTRA:-}
sweep_setup ${1:-$REPO/runs/regime_sweep}
for exp in $EXPS; do for seed in $SEEDS; do while IFS= read -r arm; do
  [ -z "$arm" ] && continue
  label=${arm%%=*}; overrides=${arm#*=}; overrides=${overrides//,/ }
  name="$exp-$label-s$seed"
  sweep_run $name +experiment=$exp $overrides seed=$seed steps=$STEPS \
    ckpt_every=20 logging.progress=false logging.wandb_mode=disabled sft.base_dir=$OUT/base \
    name=$name $EXTRA
done <<< "$ARMS"; done; done
echo "all done $(date -u +%T)"
