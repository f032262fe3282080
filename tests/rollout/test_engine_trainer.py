"""``rollout.engine`` in training: the trainer samples through ``prs.rollout``; a non-jax engine's
rollouts get the trainer's own log-probs as ``old_logp`` (the engine's stay as the behaviour policy
of TIS, on by default) and the mismatch is logged. Checked here without vLLM, with a stand-in engine
whose log-probs are the jax engine's shifted by a known amount; tests/rollout/test_vllm_engine.py checks vLLM."""
import dataclasses

import jax
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.rl.trainer import RLConfig, Trainer
from prs.rl.config import LossConfig, RolloutConfig
from prs.rollout import JaxEngine
from tests._arith_tiny import MODEL, RL, TASK, warm_params

SHIFT = 0.25


class _ShiftedEngine(JaxEngine):
    """The jax engine with its log-probs moved by ``SHIFT`` (a behaviour policy the trainer must not
    take as ``old_logp``), counting its weight pushes."""

    name = "shifted"
    last_sync_s = 0.5

    def __init__(self, cfg):
        super().__init__(cfg)
        self.pushes = 0

    def update_params(self, params):
        self.pushes += 1
        super().update_params(params)

    def generate(self, *args, **kw):
        ro = super().generate(*args, **kw)
        return ro.replace(logprobs=ro.logprobs + SHIFT * ro.policy_mask,
                          sampling_logprobs=ro.sampling_logprobs + SHIFT * ro.policy_mask)


def test_rl_config_engine_field():
    assert RLConfig().rollout.engine == "jax" and RLConfig().loss.rollout_correction is None
    assert RLConfig(rollout=RolloutConfig(engine="vllm")).loss.rollout_correction == "token_truncate"  # TIS by default
    assert RLConfig(rollout=RolloutConfig(engine="vllm"), loss=LossConfig(rollout_correction="token_mask")).loss.rollout_correction == "token_mask"
    with pytest.raises(ValueError, match=r"RolloutConfig.engine='sglang' \(rollout.engine\); choose from \('jax', 'vllm'\)"):
        RLConfig(rollout=RolloutConfig(engine="sglang"))


def test_another_engine_gets_the_trainers_old_logp_and_logs_the_gap():
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)
    rl = dataclasses.replace(RL, loss=dataclasses.replace(RL.loss, rollout_correction="token_truncate"))
    tr = Trainer(TASK, MODEL, rl, pc, seed=3)
    state = tr.init_state(warm_params())
    ref = Trainer(TASK, MODEL, rl, pc, seed=3)  # the jax engine, same seed: same tokens
    tr.rollouts.engine = _ShiftedEngine(MODEL)
    problems = TASK.train_problems(seed=3, step=0, count=rl.tasks_per_step)
    key = jax.random.key(1)
    ep = tr.rollouts.rollout(state.params, problems, key, group_size=8)
    want = ref.rollouts.rollout(state.params, problems, key, group_size=8)
    m = np.asarray(ep.policy_mask)
    assert m.sum() > 0 and (m == np.asarray(want.policy_mask)).all()
    np.testing.assert_array_equal(np.asarray(ep.tokens), np.asarray(want.tokens))
    np.testing.assert_allclose(np.asarray(ep.logprobs)[m], np.asarray(want.logprobs)[m], atol=2e-5)  # the trainer's
    np.testing.assert_allclose(np.asarray(ep.sampling_logprobs)[m], np.asarray(want.logprobs)[m] + SHIFT, atol=2e-5)
    got = tr.rollouts.pop_metrics()
    assert got["rollout/logp_abs_diff"] == pytest.approx(SHIFT, abs=1e-4)
    assert got["rollout/kl_k1"] == pytest.approx(SHIFT, abs=1e-4)  # mean(log q - log p) on tokens from q
    assert got["rollout/kl_k3"] == pytest.approx(np.expm1(-SHIFT) + SHIFT, abs=1e-4)
    assert got["rollout/sync_s"] == 0.5 and tr.rollouts.pop_metrics() == {}
    # the same params again: no second push; a training step logs rollout/* and pushes the new weights
    tr.rollouts.rollout(state.params, problems, key, group_size=8)
    assert tr.rollouts.engine.pushes == 1
    state, metrics = tr.step(state)  # step 0 samples with the starting params: pushed already
    assert metrics["rollout/logp_abs_diff"] == pytest.approx(SHIFT, abs=1e-4) and np.isfinite(metrics["loss/loss"])
    assert tr.rollouts.engine.pushes == 1
    tr.step(state)  # the updated params: one push
    assert tr.rollouts.engine.pushes == 2


def test_vllm_engine_refuses_continuous_slots_and_a_mesh():
    pc = ps.PrefixConfig(mode="baseline", n=8)
    rl = dataclasses.replace(RL, rollout=dataclasses.replace(RL.rollout, engine="vllm", continuous_slots=4))
    with pytest.raises(ValueError, match=r"\(rollout.engine\).*mesh and continuous_slots must be None"):
        Trainer(TASK, MODEL, rl, pc, seed=0)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    with pytest.raises(ValueError, match=r"\(rollout.engine\).*use rollout.engine=jax on a mesh"):
        Trainer(TASK, MODEL, dataclasses.replace(RL, rollout=dataclasses.replace(RL.rollout, engine="vllm")), pc, seed=0, mesh=mesh)


def test_vllm_refuses_what_it_would_ignore_or_fail_on_at_config_check():
    """Issue 45, items 3 and 5: with ``engine="vllm"`` the jax sampler's ``row_chunk`` / ``row_parts`` /
    ``attend_buckets`` (which vLLM ignored) and a sampler other than the raw policy or greedy (which passed
    ``RLConfig`` and failed at the first ``generate``) are one line naming the key and what is allowed,
    when the config is built; what the engine does sample passes."""
    for kw, key, allowed in [(dict(row_chunk=8), "row_chunk", "row_chunk=null"),
                             (dict(row_parts=None), "row_parts", "row_parts=1"),
                             (dict(row_parts=2), "row_parts", "row_parts=1"),
                             (dict(attend_buckets=(64,)), "attend_buckets", "attend_buckets=null")]:
        with pytest.raises(ValueError, match=rf"^RolloutConfig.{key}=.*\(rollout.{key}\) is the jax sampler's.*"
                                             rf"allowed {allowed}$"):
            RolloutConfig(engine="vllm", **kw)
        RolloutConfig(**kw)  # the jax engine honours them
    for kw in (dict(temperature=0.7), dict(top_k=20), dict(top_p=0.9)):
        with pytest.raises(ValueError, match=r"rollout.temperature, rollout.top_k, rollout.top_p\) with "
                                             r"rollout.engine=vllm.*allowed: temperature=1.0, top_k=0, top_p=1.0"):
            RLConfig(rollout=RolloutConfig(engine="vllm", **kw))
        assert RLConfig(rollout=RolloutConfig(**kw), loss=LossConfig(rollout_correction="token_truncate"))
    with pytest.raises(ValueError, match=r"eval_temperature=0.5 \(rollout.eval_temperature\).*allowed 1.0"):
        RolloutConfig(engine="vllm", eval_temperature=0.5)
    for kw in (dict(), dict(temperature=0.0), dict(temperature=0.0, top_k=5), dict(eval_temperature=0.0)):
        RLConfig(rollout=RolloutConfig(engine="vllm", **kw))


def test_vllm_options_are_config_keys_checked_and_reach_the_engine(monkeypatch):
    """``rollout.gpu_memory_utilization`` / ``rollout.tensor_parallel_size`` reach ``vllm.LLM``'s keywords
    through the engine factory (a stand-in ``make_engine`` records them; no vLLM needed); out of range,
    or set with the jax engine (which would ignore them), they are one-line errors."""
    rl = RLConfig(rollout=RolloutConfig(engine="vllm", gpu_memory_utilization=0.4, tensor_parallel_size=2))
    assert dict(rl.rollout.engine_options) == {"gpu_memory_utilization": 0.4, "tensor_parallel_size": 2}
    assert RLConfig(rollout=RolloutConfig(engine="vllm")).rollout.engine_options == ()  # vLLM's own defaults
    for kw, word in [(lambda: dict(rollout=RolloutConfig(engine="vllm", gpu_memory_utilization=1.5)), r"rollout.gpu_memory_utilization"),
                     (lambda: dict(rollout=RolloutConfig(engine="vllm", gpu_memory_utilization=0)), r"\(0, 1\]"),
                     (lambda: dict(rollout=RolloutConfig(engine="vllm", tensor_parallel_size=0)), r"rollout.tensor_parallel_size"),
                     (lambda: dict(rollout=RolloutConfig(engine="vllm", tensor_parallel_size=True)), r"int >= 1"),
                     (lambda: dict(rollout=RolloutConfig(gpu_memory_utilization=0.5)), r"need rollout.engine=vllm"),
                     (lambda: dict(rollout=RolloutConfig(tensor_parallel_size=2)), r"need rollout.engine=vllm")]:
        with pytest.raises(ValueError, match=word):
            RLConfig(**kw())
    from prs.rl import episodes

    seen = {}

    def fake_make_engine(name, **kw):
        seen.update(name=name, **kw)
        return JaxEngine(kw["cfg"])

    monkeypatch.setattr(episodes, "make_engine", fake_make_engine)
    pc = ps.PrefixConfig(mode="baseline", n=8)
    rl = dataclasses.replace(RL, rollout=dataclasses.replace(RL.rollout, engine="vllm", gpu_memory_utilization=0.4,
                                                          tensor_parallel_size=2))
    tr = Trainer(TASK, MODEL, rl, pc, seed=0)
    state = tr.init_state(warm_params())
    problems = TASK.train_problems(seed=0, step=0, count=2)
    tr.rollouts.rollout(state.params, problems, jax.random.key(0), group_size=8)
    assert seen["name"] == "vllm" and seen["gpu_memory_utilization"] == 0.4 and seen["tensor_parallel_size"] == 2
    assert seen["dtype"] == "float32" and seen["max_model_len"] == tr.rollouts.width
