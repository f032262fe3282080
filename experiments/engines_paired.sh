#!/bin/bash
# Paired seeds of ps_ada on arith with the jax and the vLLM rollout engine (issue #30, item 4): for each
# seed, one run per engine; paired = same warm start (sft.seed=0, one cache under OUT/base), same seed
# (problem stream, eval set), same config; only rollout.engine differs. The record's config: 20 steps,
# eval every 5 steps on 128 held-out problems x 2 samples, 800 SFT steps (one cycle, one attempt: the
# warm start of results/engines/{jax,vllm}). Pairs run in order (jax s0, vllm s0, jax s1, ...), one run
# at a time, so a stopped sweep leaves whole pairs.
# Resumable: a run with a summary.json is skipped; after each run its record files (metrics.jsonl,
# config.json, provenance.jsonl, summary.json; no checkpoints) are copied to results/engines/paired/<engine>-s<seed>/.
#   SHA=<commit> SEEDS="0 1 2 3" nice -n 10 experiments/engines_paired.sh [OUT]
# then: python -m experiments.engines_paired   (table, CI, figure)
. "$(dirname "$0")/sweep_lib.sh"   # REPO, SHA, sweep_setup, sweep_run
SEEDS=${SEEDS:-"0 1 2 3"}
JAX_PY=${JAX_PY:-$REPO/.venv/bin/python}
[ -x "$JAX_PY" ] || JAX_PY=/work/main/.venv/bin/python
VLLM_PY=${VLLM_PY:-/work/vllm-venv/bin/python}
DEST=$REPO/results/engines/paired
sweep_setup ${1:-/work/paired-runs}
for seed in $SEEDS; do for engine in jax vllm; do
  name=$engine-s$seed
  if [ $engine = vllm ]; then
    export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    PY=$VLLM_PY
  else
    PY=$JAX_PY
  fi
  sweep_run $name rollout=$engine seed=$seed steps=20 eval.every=5 eval.count=128 ckpt_every=50 \
    sft.seed=0 sft.steps=800 sft.until_loss=null sft.attempts=1 sft.base_dir=$OUT/base \
    logging.progress=false logging.wandb_mode=disabled name=$name
  if [ -f $OUT/runs/$name/summary.json ] && [ ! -f $DEST/$name/summary.json ]; then
    mkdir -p $DEST/$name
    cp $OUT/runs/$name/{metrics.jsonl,config.json,provenance.jsonl,summary.json} $DEST/$name/
    echo "recorded $name $(date -u +%T)"
  fi
done; done
echo "all done $(date -u +%T)"
