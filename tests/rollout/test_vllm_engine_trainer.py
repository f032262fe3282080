"""Two training steps of the tiny arith trainer with ``rollout.engine=vllm`` (prefix re-rolls
included): vLLM's log-probs agree with the trainer's forward pass to float rounding (fp32), TIS is
on by default, the weights are pushed once per new policy, and the loss is finite. Runs only where
vLLM is importable (the ``.ci/vllm`` venv); one engine (the trainer's) for the module."""
import dataclasses

import pytest

pytest.importorskip("vllm", reason="vLLM not installed (the prs[vllm] extra; .ci/vllm builds a venv with it)")

import numpy as np  # noqa: E402

from prs.core import prefix as ps  # noqa: E402
from prs.models.qwen3 import ModelConfig  # noqa: E402
from prs.rl.trainer import RLConfig, Trainer, supervised_warm_start  # noqa: E402
from prs.rl.config import EvalConfig, RolloutConfig
from prs.tasks.registry import make_task  # noqa: E402

TASK = make_task("arith", min_terms=2, max_terms=4)
MODEL = ModelConfig.preset("tiny", vocab_size=TASK.vocab_size, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                           head_dim=32, d_ff=128)  # head_dim 32: vLLM's CPU attention


def test_two_vllm_steps():
    rl = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=16, samples=1), rollout=RolloutConfig(engine="vllm"))
    assert rl.loss.rollout_correction == "token_truncate"
    tr = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5), seed=3)
    state = tr.init_state(supervised_warm_start(TASK, MODEL, steps=60, batch=32, lr=3e-3, seed=0, log=None))
    try:
        out = []
        for _ in range(2):
            state, m = tr.step(state)
            out.append(m)
        assert tr.rollouts.engine.name == "vllm"
        for m in out:
            assert np.isfinite(m["loss/loss"]) and m["tokens_generated"] > 0
            assert 0 <= m["rollout/logp_abs_diff"] < 1e-4 and abs(m["rollout/kl_k1"]) < 1e-4
        assert out[1]["rollout/sync_s"] > 0  # step 1 sampled the updated policy: pushed
        ev = tr.evaluate(state.params, 2)
        assert 0 <= ev["eval/pass_at_1"] <= 1
    finally:
        tr.rollouts.engine.close()
