#!/bin/bash
# The deep-horizon mechanism sweep (results/mechanism/README.md, section 7): on one chain length E
# (12 long, 2 short) and its calibrated warm start, every arm of ARMS x SEEDS paired seeds (same seed
# = same warm start and problem stream), STEPS steps, an evaluation every EVAL steps (held-out pass@1
# on 256 x 2 and the hard step's teacher-forced accuracy on 512 x 4, `eval/mech/tf_hard_acc`).
# Resumable: a run with a summary.json is skipped, an unfinished one resumes from its checkpoint; runs
# a detached clean worktree of commit $SHA (experiments/sweep_lib.sh). Two workers share the seeds:
#   E=12 SEEDS="0 2 4 6" experiments/mechanism_sweep.sh & E=12 SEEDS="1 3 5 7" experiments/mechanism_sweep.sh
# WARM= the warm start's overrides (default: the calibrated one of E, section 2); BASE= its cache folder.
# An arm is label=override,override,... (commas become spaces).
. "$(dirname "$0")/sweep_lib.sh"   # REPO, SHA, sweep_setup, sweep_run
E=${E:-12}
STEPS=${STEPS:-60}
EVAL=${EVAL:-5}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7"}
case $E in
  12) WARM=${WARM:-"task.params.demo_hard_error_rate=0.55 +task.params.warm_start_ramp=50 sft.max_cycles=3 sft.until_loss=0.35 sft.attempts=1"} ;;
  2)  WARM=${WARM:-"task.params.demo_hard_error_rate=0.7"} ;;
  *)  [ -n "${WARM:-}" ] || { echo "error: E=$E has no calibrated warm start; set WARM= (allowed E without it: 12, 2)"; exit 2; } ;;
esac
ARMS=${ARMS:-"reroll_noprefix=method=reroll_noprefix
ps_cut=method=ps_ada,task.params.fixed_cut=true
ps_ada=method=ps_ada
baseline=method=baseline
oracle=method=baseline,task.params.oracle_max_k=2"}
BASE=${BASE:-$REPO/results/mechanism/base}
sweep_setup ${1:-$REPO/results/mechanism/sweep}
for seed in $SEEDS; do while IFS= read -r arm; do
  [ -z "$arm" ] && continue
  label=${arm%%=*}; overrides=${arm#*=}; overrides=${overrides//,/ }
  name="deep_e$E-$label-s$seed"
  sweep_run $name +experiment=mechanism_deep task.params.easy_steps=$E $WARM $overrides seed=$seed steps=$STEPS \
    eval.every=$EVAL ckpt_every=20 logging.progress=false logging.wandb_mode=disabled sft.base_dir=$BASE name=$name
done <<< "$ARMS"; done
echo "all done $(date -u +%T)"
