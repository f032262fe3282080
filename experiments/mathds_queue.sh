#!/bin/bash
# The mathds sweep's scheduler (issue 48, results/mathds/README.md): launches the study's missing runs, LANES at
# a time on this machine, each as `W=<w> SEEDS=<s> ONLY=<arm> experiments/mathds_sweep.sh` (its own detached
# worktree of HEAD, a resumed checkpoint for an unfinished run), and launches none after the launch window.
# Resumable: a run with a summary.json under OUT/runs or committed under results/mathds/runs is skipped; a run
# another process is training is refused by its run lock (one line in the lane's log) and the queue goes on.
#   experiments/mathds_queue.sh [--window MINUTES] [--lanes N] [W:ARM:SEED ...]
#   DRY=1 experiments/mathds_queue.sh ...     # print the runs it would launch, in order; launch nothing
# Without items: every missing run of the plan, seed-major (seed 0 of every arm on W = 0 then W = 1, seed 1, ...),
# so that a partial sweep stays paired. --window (default 120): minutes from now after which no run is
# launched (those running finish; size it to end before the session does). --lanes (default 2): training
# processes of the study at once on this machine (any `experiments.train +experiment=mathds` counts, so two
# queues never oversubscribe it). Lane logs: OUT/lanes/<run>.log. Env: OUT (default $REPO/runs/mathds), RESULTS
# (the committed records, default $REPO/results/mathds/runs).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "error: $*" >&2; exit 2; }
ARMS=(baseline ps_ada dynamic_sampling selective screen predicted ps_ds oracle)   # mathds_sweep.sh's default ARMS
WINDOW=120; LANES=2; ITEMS=()
while [ $# -gt 0 ]; do
  case $1 in
    --window) [[ ${2:-} =~ ^[0-9]+$ ]] || die "--window ${2:-}: minutes, a non-negative integer"; WINDOW=$2; shift 2 ;;
    --lanes) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--lanes ${2:-}: a positive integer"; LANES=$2; shift 2 ;;
    -*) die "unknown option $1; allowed: --window MINUTES, --lanes N, then items W:ARM:SEED" ;;
    *) ITEMS+=("$1"); shift ;;
  esac
done
for it in "${ITEMS[@]}"; do
  IFS=: read -r w arm seed rest <<< "$it"
  [[ $w =~ ^[0-9]+$ && $seed =~ ^[0-9]+$ && -z $rest ]] && [[ " ${ARMS[*]} " == *" $arm "* ]] \
    || die "item '$it' is not W:ARM:SEED (W, SEED non-negative integers; ARM one of: ${ARMS[*]})"
done
if [ ${#ITEMS[@]} -eq 0 ]; then
  for seed in 0 1 2 3 4 5 6 7; do for arm in "${ARMS[@]}"; do for w in 0 1; do ITEMS+=("$w:$arm:$seed"); done; done; done
fi
OUT=${OUT:-$REPO/runs/mathds}
RESULTS=${RESULTS:-$REPO/results/mathds/runs}
done_run() { [ -f "$OUT/runs/$1/summary.json" ] || [ -f "$RESULTS/$1/summary.json" ]; }
training() { pgrep -fc "m experiments.train \+experiment=mathds" || true; }
training_it() {   # the run's lock file names a live training process of this machine (read, never locked here)
  local f="$OUT/runs/$1/.run.lock"
  holder=$( [ -f "$f" ] && awk '{print $2}' "$f" )
  [ -n "$holder" ] && grep -q "experiments.train" "/proc/$holder/cmdline" 2>/dev/null
}
stop=$(( $(date +%s) + 60 * WINDOW ))
[ -n "${DRY:-}" ] || mkdir -p "$OUT/lanes"   # DRY writes nothing
for it in "${ITEMS[@]}"; do
  IFS=: read -r w arm seed <<< "$it"
  name=mathds-w$w-$arm-s$seed
  if done_run "$name"; then echo "skip $name (complete)"; continue; fi
  if training_it "$name"; then echo "skip $name (process $holder is training it)"; continue; fi
  if [ -n "${DRY:-}" ]; then echo "launch $name"; continue; fi
  # a free lane, seen twice a minute apart (a lane's sweep script takes a while to start its training process)
  while true; do
    if [ "$(training)" -lt "$LANES" ]; then sleep 60; [ "$(training)" -lt "$LANES" ] && break; fi
    sleep 30
  done
  if [ "$(date +%s)" -gt "$stop" ]; then echo "launch window over at $(date -u +%T): $name and after not launched"; break; fi
  echo "$(date -u +%T) launch $name (log $OUT/lanes/$name.log)"
  (W=$w SEEDS=$seed ONLY=$arm OUT=$OUT "$REPO/experiments/mathds_sweep.sh" > "$OUT/lanes/$name.log" 2>&1) &
  sleep 90
done
[ -n "${DRY:-}" ] || { wait; echo "queue done $(date -u +%T)"; }
