#!/bin/bash
# The decisive LM sweep (issue #16): for each task variant EXP (a conf/experiment/regime_* preset),
# every arm of ARMS x SEEDS paired seeds (same seed = same warm start and problem stream).
# Resumable: a run with a summary.json is skipped; an unfinished one resumes from its checkpoint.
# Runs a detached clean worktree of commit $SHA (OUT/code-<sha>), so every run's provenance records
# that commit with a clean tree and edits to the tree during the sweep cannot leak in.
#   SHA=<commit> EXPS="regime_late" results/regime/sweep.sh [OUT]
# An arm is label=override,override,... (commas become spaces).
REPO=${REPO:-$(git rev-parse --show-toplevel)}
SHA=${SHA:-$(git -C $REPO rev-parse HEAD)}
OUT=${1:-$REPO/runs/regime_sweep}
EXPS=${EXPS:-regime_late}
STEPS=${STEPS:-40}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7"}
ARMS=${ARMS:-"baseline=method=baseline
ps_ada=method=ps_ada
baseline_nv=method=baseline,method.schedule=next_visit
ps_ada_nv=method=ps_ada,method.schedule=next_visit,method.cut_spread=true,method.sources=all
reroll_noprefix=method=reroll_noprefix
extra_rollouts=method=extra_rollouts
baseline_lr2=method=baseline_lr2
ps_fix=method=ps_fix
ps_ada_hard=method=ps_ada_hard"}
EXTRA=${EXTRA:-}
CODE=$OUT/code-${SHA:0:10}
mkdir -p $OUT/runs
[ -d $CODE ] || git -C $REPO worktree add --detach $CODE $SHA
PY=${PY:-$REPO/.venv/bin/python}
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$OUT/.jax_cache}
cd $CODE
for exp in $EXPS; do for seed in $SEEDS; do while IFS= read -r arm; do
  [ -z "$arm" ] && continue
  label=${arm%%=*}; overrides=${arm#*=}; overrides=${overrides//,/ }
  name="$exp-$label-s$seed"; run="$OUT/runs/$name"
  if [ -f "$run/summary.json" ]; then echo "skip $name"; continue; fi
  echo "run $name $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  PYTHONPATH=$CODE $PY -m experiments.train +experiment=$exp $overrides seed=$seed steps=$STEPS \
    ckpt_every=20 logging.progress=false logging.wandb_mode=disabled sft.base_dir=$OUT/base \
    name=$name hydra.run.dir=$run $EXTRA > "$run.log" 2>&1 || echo "FAILED $name (see $run.log)"
done <<< "$ARMS"; done; done
echo "all done $(date -u +%T)"
