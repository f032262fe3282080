#!/bin/bash
# same_step vs next_visit first read (issue #15): arith, 60 steps, 3 seeds; resumable (skips finished runs,
# resumes from checkpoints). Runs the code of a frozen export of commit $SHA (runs/code-<sha>), so edits
# to the worktree during the sweep cannot leak into it.
WT=${WT:-/work/wt/schedules}
SHA=${SHA:-$(git -C $WT rev-parse HEAD)}
CODE=$WT/runs/code-${SHA:0:10}
[ -d $CODE ] || { mkdir -p $CODE && git -C $WT archive $SHA | tar -x -C $CODE; }
cd $CODE
PY=/work/main/.venv/bin/python
# priority order: the PS pairs of every seed first, then the baselines on the pool, then on the stream
[ -n "$WAIT_PID" ] && while kill -0 $WAIT_PID 2>/dev/null; do sleep 5; done
for item in "ps_ada next_visit x 0" "ps_ada next_visit x 1" "ps_ada next_visit x 2" \
            "ps_ada same_step x 0" "ps_ada same_step x 1" "ps_ada same_step x 2" \
            "baseline next_visit x 0" "ps_ada next_visit spread 0" "baseline next_visit x 1" "ps_ada next_visit spread 1" \
            "baseline next_visit x 2" "ps_ada next_visit spread 2" \
            "baseline same_step x 0" "baseline same_step x 1" "baseline same_step x 2"; do
  {
    set -- $item
    seed=$4
    name="arith-$1-$2-s$seed"
    extra=""
    if [ "$3" = spread ]; then name="arith-$1_spread_all-$2-s$seed"; extra="schedule.cut_spread=true schedule.sources=all"; fi
    out="$WT/runs/sched/$name"
    if [ -f "$out/summary.json" ]; then echo "skip $name"; continue; fi
    mkdir -p "$out"
    [ -f "$out/provenance.json" ] || echo "{\"commit\": \"$SHA\", \"dirty\": false, \"code\": \"git archive $SHA\", \"started\": \"$(date -u +%FT%TZ)\"}" > "$out/provenance.json"
    echo "run $name $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    PYTHONPATH=$CODE $PY -m experiments.train method=$1 schedule.kind=$2 seed=$seed steps=60 ckpt_every=20 \
      schedule.pool_size=128 logging.wandb_mode=disabled logging.progress=false sft.base_dir=$WT/runs/base \
      $extra name=$name hydra.run.dir=$out >> "$out/log.txt" 2>&1 || echo "FAILED $name"
  }
done
echo "all done $(date -u +%T)"
