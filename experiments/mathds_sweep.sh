#!/bin/bash
# The mathds study's sweep (issue 48, results/mathds/README.md), resumable: every arm of ARMS x SEEDS on warm
# start W, seed-major (all arms of seed 0, then seed 1, ...) so that a partial sweep stays paired. Run
# OUT/runs/mathds-w<W>-<arm>-s<S> is `experiments.train +experiment=mathds sft.seed=<W> seed=<S>
# sft.base_dir=<OUT>/base <arm's overrides> [steps=$STEPS] $EXTRA` (same W and S = same warm start and problem
# stream in every arm). A run with a summary.json is skipped, an unfinished one resumes from its checkpoint;
# runs use a detached clean worktree of commit $SHA (experiments/sweep_lib.sh).
#   experiments/mathds_sweep.sh [OUT]              # W=0; then W=1 experiments/mathds_sweep.sh
#   W=1 SEEDS="0 2 4 6" experiments/mathds_sweep.sh & W=1 SEEDS="1 3 5 7" experiments/mathds_sweep.sh   # 2 workers
#   DRY=1 experiments/mathds_sweep.sh [OUT]        # print the experiments.train command lines, run nothing
#   experiments/mathds_sweep.sh --collect [OUT]    # copy the complete runs' records into results/mathds/runs
# Env: W (warm start, sft.seed; default 0), SEEDS (default "0 1 2 3 4 5 6 7"), ARMS (newline-separated
# label=override,override,...: commas become spaces), ONLY (space-separated labels of ARMS: run only those;
# experiments/mathds_queue.sh runs one arm per call this way), STEPS (optional steps= override), EXTRA (more overrides,
# space-separated), OUT (default $REPO/runs/mathds; a positional argument wins), SHA, PY.
# --collect: `python -m experiments.studies.mathds --collect OUT/runs` (prs.analysis.runs.collect_records:
# metrics.jsonl gzipped, summary.json, config.json (the resolved configuration), provenance.jsonl; a committed
# record directory with different content is refused with one line). Then `python -m experiments.studies.mathds
# --write` rewrites the page's tables and figures.
. "$(dirname "$0")/sweep_lib.sh"   # REPO, SHA, sweep_setup, sweep_run
die() { echo "error: $*" >&2; exit 2; }
COLLECT=
if [ "${1:-}" = "--collect" ]; then COLLECT=1; shift; fi
for a in "$@"; do case $a in -*) die "unknown option $a; allowed: --collect (first), then OUT" ;; esac; done
[ $# -le 1 ] || die "mathds_sweep.sh takes at most one argument, OUT (and --collect first); got: $*"
OUT_DIR=${1:-${OUT:-$REPO/runs/mathds}}
case $OUT_DIR in /*) ;; *) OUT_DIR=$PWD/$OUT_DIR ;; esac   # sweep_setup cd's into the worktree
if [ -n "$COLLECT" ]; then
  PYTHONPATH=$REPO ${PY:-$REPO/.venv/bin/python} -m experiments.studies.mathds --collect "$OUT_DIR/runs"
  exit $?
fi
W=${W:-0}
SEEDS=${SEEDS:-"0 1 2 3 4 5 6 7"}
[[ $W =~ ^[0-9]+$ ]] || die "W=$W: the warm start (sft.seed) must be a non-negative integer (the study's: 0, 1)"
for s in $SEEDS; do [[ $s =~ ^[0-9]+$ ]] || die "SEEDS: '$s' is not a non-negative integer (e.g. SEEDS=\"0 1 2\")"; done
[ -n "${SEEDS// /}" ] || die "SEEDS is empty; give seeds, e.g. SEEDS=\"0 1 2 3 4 5 6 7\""
[ -z "${STEPS:-}" ] || [[ $STEPS =~ ^[1-9][0-9]*$ ]] || die "STEPS=$STEPS must be a positive integer (or unset: the preset's)"
ARMS=${ARMS:-"baseline=method=baseline
ps_ada=method=ps_ada
dynamic_sampling=method=baseline,schedule.select=dynamic_sampling
selective=method=baseline,schedule.select=selective
screen=method=baseline,schedule.select=screen
predicted=method=baseline,schedule.select=predicted
ps_ds=method=ps_ada,schedule.select=dynamic_sampling
oracle=method=baseline,schedule.select=oracle"}
while IFS= read -r arm; do
  [ -z "$arm" ] && continue
  [[ ${arm%%=*} =~ ^[a-z0-9_]+$ ]] && [[ $arm == *=*=* ]] \
    || die "ARMS: '$arm' is not label=override,override,... (label: a-z, 0-9, _; e.g. baseline=method=baseline)"
done <<< "$ARMS"
if [ -n "${ONLY:-}" ]; then   # keep only the named arms, in ARMS's order
  labels=$(while IFS= read -r arm; do [ -n "$arm" ] && echo "${arm%%=*}"; done <<< "$ARMS")
  for l in $ONLY; do grep -qx -- "$l" <<< "$labels" || die "ONLY: '$l' is not an arm; allowed: $(echo $labels)"; done
  ARMS=$(while IFS= read -r arm; do [ -n "$arm" ] && [[ " $ONLY " == *" ${arm%%=*} "* ]] && echo "$arm"; done <<< "$ARMS")
fi
if [ -n "${DRY:-}" ]; then  # what sweep_run would run, without a worktree; a complete run says skip on stderr
  OUT=$OUT_DIR; CODE=$OUT/code-${SHA:0:10}; PY=${PY:-$REPO/.venv/bin/python}
else
  sweep_setup "$OUT_DIR"
fi
for seed in $SEEDS; do while IFS= read -r arm; do
  [ -z "$arm" ] && continue
  label=${arm%%=*}; overrides=${arm#*=}; overrides=${overrides//,/ }
  name="mathds-w$W-$label-s$seed"
  args="+experiment=mathds sft.seed=$W seed=$seed sft.base_dir=$OUT/base $overrides${STEPS:+ steps=$STEPS}${EXTRA:+ $EXTRA}"
  args="$args logging.progress=false logging.wandb_mode=disabled name=$name"
  if [ -n "${DRY:-}" ]; then
    if [ -f "$OUT/runs/$name/summary.json" ]; then echo "skip $name" >&2; continue; fi
    echo "PYTHONPATH=$CODE $PY -m experiments.train $args hydra.run.dir=$OUT/runs/$name"
  else
    sweep_run $name $args
  fi
done <<< "$ARMS"; done
[ -n "${DRY:-}" ] || echo "all done $(date -u +%T)"
