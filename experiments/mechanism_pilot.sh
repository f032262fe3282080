#!/usr/bin/env bash
# The pilot of section 5: the oracle positive control vs the baseline on the long deep chain
# (E = 12; E=2 for the short one), seed 0 (SEED=), 20 steps (STEPS=). Resumable: re-running resumes each run from its last checkpoint
# (a finished run says "already complete"). Then the teacher-forced hard-step accuracy (512 x 4)
# of each run's last checkpoint and of the shared warm start. Extra arguments are Hydra overrides for
# both runs (e.g. the calibrated warm start's +task.params.warm_start_ramp=60 sft.steps=1600: the
# warm start is then loaded from the sft.base_dir cache under the key the calibration built);
# TAG= (e.g. -ramp60) goes into the run names after the chain length, to keep runs on another warm start apart.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
STEPS=${STEPS:-20}
common=(+experiment=mechanism_deep task.params.easy_steps=${E:-12} method=baseline seed=${SEED:-0} steps=$STEPS
        task.params.demo_hard_error_rate=${H:-0.7}
        sft.base_dir=$PWD/results/mechanism/base "hydra.run.dir=results/mechanism/runs/\${name}"
        "tag=-e\${task.params.easy_steps}${TAG:-}-o\${task.params.oracle_max_k}-fc\${task.params.fixed_cut}" "$@")
run=results/mechanism/runs/arith_deep-baseline-e${E:-12}${TAG:-}
$PY -m experiments.train "${common[@]}" task.params.oracle_max_k=-1 &
$PY -m experiments.train "${common[@]}" task.params.oracle_max_k=2 &
wait
$PY -m experiments.mechanism tf $run-o-1-fcFalse-s${SEED:-0} $run-o2-fcFalse-s${SEED:-0} --problems 512 --samples 4 \
    --out results/mechanism/pilot_tf_e${E:-12}${TAG:-}_s${SEED:-0}.json
