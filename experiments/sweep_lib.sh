# Shared by the resumable sweeps (experiments/trap_sweep.sh, experiments/regime_sweep.sh); source it, do not run it.
# sweep_setup OUT: makes OUT/runs and a detached clean worktree of commit $SHA (OUT/code-<sha>), so edits to
#   the tree during the sweep cannot leak in and every run's provenance records that commit with a clean
#   tree; sets CODE and PY, exports the shared compile cache, and cd's into the worktree.
# sweep_run NAME OVERRIDE...: one run OUT/runs/NAME of `experiments.train OVERRIDE...` (log: NAME.log);
#   skipped when its summary.json exists (an unfinished run resumes from its checkpoint).
REPO=${REPO:-$(git rev-parse --show-toplevel)}
SHA=${SHA:-$(git -C $REPO rev-parse HEAD)}

sweep_setup() {
  OUT=$1
  CODE=$OUT/code-${SHA:0:10}
  mkdir -p $OUT/runs
  [ -d $CODE ] || git -C $REPO worktree add --detach $CODE $SHA
  PY=${PY:-$REPO/.venv/bin/python}
  export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$OUT/.jax_cache}
  cd $CODE
}

sweep_run() {
  local name=$1; shift
  local run="$OUT/runs/$name"
  if [ -f "$run/summary.json" ]; then echo "skip $name"; return; fi
  echo "run $name $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  PYTHONPATH=$CODE $PY -m experiments.train "$@" hydra.run.dir=$run > "$run.log" 2>&1 || echo "FAILED $name (see $run.log)"
}
