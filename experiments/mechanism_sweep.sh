#!/bin/bash
# The mechanism sweeps (results/mechanism/README.md, section 7), resumable: every arm of ARMS x SEEDS
# paired seeds (same seed = same warm start and problem stream), STEPS steps, an evaluation every EVAL.
#   TASK=deep (default): the deep-horizon chain of length E (12 long, 2 short) on its calibrated warm
#     start; each evaluation logs held-out pass@1 on 256 x 2 and the hard step's teacher-forced accuracy
#     on 512 x 4 (`eval/mech/tf_hard_acc`). Runs deep_e<E>-<arm>-s<seed>; W=1 (2, ...): the second warm
#     start, the same overrides with sft.seed=W, runs deep_e<E>w<W>-<arm>-s<seed>. TAG=lo with WARM= and
#     BASE=: another calibration of the chain, runs deep_e<E>_<TAG>[w<W>]-<arm>-s<seed>, analysed apart
#     (section 9).
#   TASK=flaky: the flaky-tool chain (task=flaky_chain, section 10): the deep chain as an agent task whose
#     tool calls crash at random (crash_rate 0.1), E easy turns; runs deep_e<E>_flaky[w<W>]-<arm>-s<seed>,
#     analysed as the tagged chain "E_flaky" (its oracle gate first). Section 12's appended arms:
#     ARMS="ps_cut_app=method=ps_ada,task.params.fixed_cut=true,schedule.reroll=append
#     reroll_app=method=reroll_noprefix,schedule.reroll=append" (and W=1 with its WARM=).
#   TASK=flaky_recovery: recoverable tool errors on the flaky chain (E = 4, error rate G per call, default
#     0.05; section 11); runs recovery_flaky_g<G without the dot>-<arm>-s<seed> (the section-10 pilot at
#     0.1 ran under the older name recovery_flaky-<arm>-s<seed>); XS= extra_tok's extra_share; W=1: the second
#     warm start (sft.seed=1), runs recovery_flaky_g<G>w1-<arm>-s<seed>.
#   TASK=recovery: the recovery task on its calibrated warm start (fault rate 0.15, section 6); each
#     evaluation logs the recovery rate and the clean-draft pass rate (held-out, fault rate 0.5). Runs
#     recovery-<arm>-s<seed>.
# A run with a summary.json is skipped, an unfinished one resumes from its checkpoint; runs use a
# detached clean worktree of commit $SHA (experiments/sweep_lib.sh). Two workers share the seeds:
#   E=12 SEEDS="0 2 4 6" experiments/mechanism_sweep.sh & E=12 SEEDS="1 3 5 7" experiments/mechanism_sweep.sh
# WARM= the warm start's overrides (default: the calibrated one, sections 2 and 6); BASE= its cache folder.
# An arm is label=override,override,... (commas become spaces).
. "$(dirname "$0")/sweep_lib.sh"   # REPO, SHA, sweep_setup, sweep_run
TASK=${TASK:-deep}
E=${E:-12}
STEPS=${STEPS:-60}
EVAL=${EVAL:-5}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7"}
RAMP="+task.params.warm_start_ramp=50 sft.max_cycles=3 sft.until_loss=0.35 sft.attempts=1"
case $TASK in
  deep)
    [ -z "${TAG:-}" ] || [ -n "${WARM:-}" ] || {
      echo "error: TAG=$TAG names another calibration of E=$E; set its WARM= (a chain's default is its own)"; exit 2; }
    case $E in
      12) WARM=${WARM:-"task.params.demo_hard_error_rate=0.55 $RAMP"} ;;
      2)  WARM=${WARM:-"task.params.demo_hard_error_rate=0.7"} ;;
      *)  [ -n "${WARM:-}" ] || { echo "error: E=$E has no calibrated warm start; set WARM= (allowed E without it: 12, 2)"; exit 2; } ;;
    esac
    EXP="+experiment=mechanism_deep task.params.easy_steps=$E"; PREFIX=deep_e$E${TAG:+_$TAG}
    if [ "${W:-0}" != 0 ]; then WARM="$WARM sft.seed=$W"; PREFIX=${PREFIX}w$W; fi
    ARMS=${ARMS:-"reroll_noprefix=method=reroll_noprefix
ps_cut=method=ps_ada,task.params.fixed_cut=true
ps_cut_hard=method=ps_ada_hard,task.params.fixed_cut=true
ps_ada=method=ps_ada
baseline=method=baseline
oracle=method=baseline,task.params.oracle_max_k=2"} ;;
  flaky)
    WARM=${WARM:-"sft.max_cycles=3 sft.until_loss=0.35 sft.attempts=1"}
    EXP="+experiment=mechanism_flaky task.params.easy_steps=$E"; PREFIX=deep_e${E}_flaky
    if [ "${W:-0}" != 0 ]; then WARM="$WARM sft.seed=$W"; PREFIX=${PREFIX}w$W; fi
    ARMS=${ARMS:-"baseline=method=baseline
oracle=method=baseline,task.params.oracle_max_k=2
reroll_noprefix=method=reroll_noprefix
ps_cut=method=ps_ada,task.params.fixed_cut=true"} ;;
  flaky_recovery)
    WARM=${WARM:-"sft.max_cycles=3 sft.until_loss=0.35 sft.attempts=1"}
    G=${G:-0.05}
    EXP="+experiment=mechanism_flaky_recovery task.params.error_rate=$G"; PREFIX=recovery_flaky_g${G//./}
    XS=${XS:-0.5}   # extra_tok's schedule.extra_share: set it so its tokens per step match ps_easy_cut's (section 11)
    if [ "${W:-0}" != 0 ]; then WARM="$WARM sft.seed=$W"; PREFIX=${PREFIX}w$W; fi
    ARMS=${ARMS:-"baseline=method=baseline
oracle=method=baseline,task.params.oracle_min_k=6
ps_easy_cut=method=ps_ada_easy,task.params.error_cut=true
reroll_easy=method=reroll_noprefix,method.hard_max=0
ps_easy=method=ps_ada_easy
extra_tok=method=extra_rollouts,method.hard_max=0,schedule.extra_share=$XS
baseline_2n=method=baseline,algo.group_size=16"} ;;
  recovery)
    WARM=${WARM:-"task.params.fault_rate=0.15 +task.params.warm_start_min_terms=3 $RAMP"}
    EXP="+experiment=mechanism_recovery"; PREFIX=recovery
    ARMS=${ARMS:-"baseline=method=baseline
oracle=method=baseline,task.params.oracle_min_k=6
ps_ada_easy=method=ps_ada_easy
extra_rollouts=method=extra_rollouts"} ;;
  *) echo "error: TASK=$TASK; allowed: deep, flaky, flaky_recovery, recovery"; exit 2 ;;
esac
BASE=${BASE:-$REPO/results/mechanism/base}
sweep_setup ${1:-$REPO/results/mechanism/sweep}
for seed in $SEEDS; do while IFS= read -r arm; do
  [ -z "$arm" ] && continue
  label=${arm%%=*}; overrides=${arm#*=}; overrides=${overrides//,/ }
  name="$PREFIX-$label-s$seed"
  sweep_run $name $EXP $WARM $overrides seed=$seed steps=$STEPS \
    eval.every=$EVAL ckpt_every=20 logging.progress=false logging.wandb_mode=disabled sft.base_dir=$BASE name=$name
done <<< "$ARMS"; done
echo "all done $(date -u +%T)"
