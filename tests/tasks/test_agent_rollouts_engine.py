"""Multi-turn agent rollouts (``prs.tasks.agent_rollouts``) through the rollout-engine interface.

  * The jax engine carries its KV cache between turns (``keep_state``), so the episodes are bit for
    bit those of the sampler's own turn loop (``sampler.sample(return_cache=True)`` then
    ``append_and_resume(cache=...)``, re-implemented here over the environment functions): fresh
    rollouts, an evaluation and a replay re-roll, on the repair and the trap task.
  * Another engine (a stand-in whose log-probs are the jax engine's shifted by a known amount, so
    no vLLM is needed; tests/rollout/test_vllm_engine_agent.py runs vLLM itself) gets the trainer's log-probs as
    ``logprobs`` and keeps its own as ``sampling_logprobs``, the gap logged, and trains.
  * The refusals: another engine on a mesh, ``regenerate`` on another engine, continuous slots, the
    keyword ``lib=`` (the environment is ``environment=``, default ``repair.ENVIRONMENT``).
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.models import sampler as S
from prs.models.qwen3 import ModelConfig, init_params
from prs.rl import episodes as episodes_mod
from prs.rl.episodes import Episodes, SamplingSettings
from prs.rl.config import EvalConfig, LossConfig
from prs.rl.trainer import RLConfig, Trainer
from prs.rollout import JaxEngine
from prs.tasks import repair as R
from prs.tasks.agent_rollouts import AgentRollouts, action_spans
from prs.tasks.registry import make_task
from prs.tasks.repair_task import RepairTask

REPAIR = RepairTask(R.RepairConfig(n_lines=4, min_bugs=1, max_bugs=2, max_turns=4, report_max=2))  # few turns
TRAP = make_task("trap", max_turns=2)
SHIFT = 0.25


def _model(task):
    return ModelConfig.preset("tiny", vocab_size=task.vocab_size)


def _scfg(task):
    """The sampler configuration of one agent turn, written from the environment's constants."""
    env = task.cfg
    return S.SamplerConfig(max_new_tokens=task.environment.MAX_ACTION_TOKENS, eos_id=task.environment.EOS,
                           stop_ids=(task.environment.EOT,), pad_id=task.environment.PAD,
                           buckets=(env.prompt_width, env.episode_width))


def _turn_loop(task, params, ro, cache, states, start, key, scfg):
    """The sampler's multi-turn loop with the KV cache carried: execute each live row's last turn,
    append the observations, resume the rows still running."""
    lib, env, cfg = task.environment, task.cfg, _model(task)
    R_ = len(states)
    live = np.array([not s.done for s in states])
    t = 0
    while True:
        toks, lens = np.asarray(ro.tokens), np.asarray(ro.lengths)
        obs = np.full((R_, env.max_obs_tokens), lib.PAD, np.int32)
        olen = np.zeros((R_,), np.int32)
        for r in np.flatnonzero(live):
            states[r], o = lib.execute(states[r], toks[r, start[r]:lens[r]], env)
            obs[r, :len(o)], olen[r] = o, len(o)
        if not olen.any():
            return ro, states
        start, live = lens + olen, olen > 0
        ro, cache = S.append_and_resume(params, ro, obs, olen, jax.random.fold_in(key, t), cfg=cfg, scfg=scfg,
                                        cache=cache, return_cache=True)
        t += 1


def _reference_fresh(task, params, problems, key, n, scfg):
    prompt, plen = task.environment.prompts(problems)
    rows, rlen = np.repeat(prompt, n, axis=0), np.repeat(plen, n)
    states = [task.environment.reset(problems, r // n) for r in range(rows.shape[0])]
    k0, k1 = jax.random.split(key)
    ro, cache = S.sample(params, rows, rlen, k0, cfg=_model(task), scfg=scfg, return_cache=True)
    return _turn_loop(task, params, ro, cache, states, rlen.astype(np.int64), k1, scfg)


def _same(ep: Episodes, ro, states, task, problems, n, replayed=None):
    """``ep`` holds the reference rollout ``ro`` bit for bit (first L columns) and its rewards."""
    L = task.cfg.episode_width
    for name in ("tokens", "policy_mask", "valid", "positions", "logprobs", "sampling_logprobs"):
        want = np.asarray(getattr(ro, name))[:, :L]
        np.testing.assert_array_equal(np.asarray(getattr(ep, name))[:, :want.shape[1]], want, err_msg=name)
    want_r = [task.environment.verify(problems, r // n, s, reward=task.cfg.reward) for r, s in enumerate(states)]
    np.testing.assert_array_equal(np.asarray(ep.rewards), np.asarray(want_r, np.float32))
    np.testing.assert_array_equal(np.asarray(ep.units), [s.turns for s in states])
    if replayed is not None:
        np.testing.assert_array_equal(np.asarray(ep.replayed), replayed)


def _source(task, problems):
    """Demonstration episodes (several turns each) as re-roll sources, and their turn counts."""
    tok, mask = task.demonstrations(problems, seed=1)
    turns = np.array([len(action_spans(m)) for m in mask], np.int32)
    z = np.zeros((tok.shape[0],), np.int32)
    return Episodes(tokens=tok, positions=np.broadcast_to(np.arange(tok.shape[1]), tok.shape),
                    valid=tok != task.environment.PAD, policy_mask=mask, logprobs=np.zeros(tok.shape, np.float32),
                    rewards=z.astype(np.float32), units=turns, replayed=z, env_steps=turns,
                    sampling_logprobs=np.zeros(tok.shape, np.float32), truncated=z.astype(bool)), turns


# the repair case's shapes are tests/tasks/test_repair.py's (12 rows, 4 turns: its compiled programs are
# reused from the compilation cache); the trap case compiles its own (slow tier)
@pytest.mark.parametrize("task,b,n,G", [(REPAIR, 3, 4, 6), pytest.param(TRAP, 2, 4, 4, marks=pytest.mark.slow)],
                         ids=["repair", "trap"])
def test_jax_engine_agent_episodes_equal_the_samplers_turn_loop_bit_for_bit(task, b, n, G):
    model = _model(task)
    params = init_params(model, jax.random.PRNGKey(0))
    ar = task.make_rollouts(model_cfg=model, sampling=SamplingSettings())
    assert isinstance(ar.engine, JaxEngine)
    probs = task.train_problems(seed=0, step=0, count=b)
    for evaluation, key in ((False, 1), (True, 3)):  # evaluation: eval_temperature (1.0), no top-k/top-p
        ep, states = ar.rollout(params, probs, jax.random.PRNGKey(key), group_size=n, evaluation=evaluation,
                                return_states=True)
        ro, want_states = _reference_fresh(task, params, probs, jax.random.PRNGKey(key), n, _scfg(task))
        assert states == want_states and int(np.asarray(ep.env_steps).sum()) > 0
        _same(ep, ro, want_states, task, probs, n)
    assert ar.engine.params is None  # the jax engine held the weights for the calls only

    # a replay re-roll: the rebuilt context (checked against the source's own tokens) read once,
    # then the cache carried through the continuation's turns
    sp = task.train_problems(seed=0, step=1, count=G)
    src, turns = _source(task, sp)
    cut = np.maximum(turns // 2, 1)
    key = jax.random.PRNGKey(2)
    ep, states, pre = ar.reroll(params, sp, src, cut, key, group_size=2, return_states=True, return_prefix=True)
    rb = ar.rebuild(sp, src, cut, group_size=2)
    scfg = _scfg(task)
    R_ = 2 * G
    for r in range(R_):
        ctx = np.concatenate([pre["head"][r, :pre["head_len"][r]], pre["obs"][r, :pre["obs_len"][r]]])
        np.testing.assert_array_equal(ctx, np.asarray(src.tokens)[r // 2, :len(ctx)])
        assert ctx.tolist() == rb["context"][r]
    W = pre["head"].shape[1]
    valid = np.arange(W)[None, :] < pre["head_len"][:, None]
    zeros = jnp.zeros((R_, W), jnp.float32)
    ctx_ro = S.Rollout(tokens=jnp.asarray(pre["head"]), policy_mask=jnp.zeros((R_, W), bool), logprobs=zeros,
                       sampling_logprobs=zeros, valid=jnp.asarray(valid),
                       positions=jnp.asarray(np.maximum(np.cumsum(valid, axis=1) - 1, 0).astype(np.int32)),
                       prompt_lengths=jnp.asarray(pre["head_len"]), lengths=jnp.asarray(pre["head_len"]),
                       finished=jnp.ones((R_,), bool), truncated=jnp.zeros((R_,), bool),
                       stop_token=jnp.full((R_,), task.environment.EOT, jnp.int32))
    ro, cache = S.append_and_resume(params, ctx_ro, pre["obs"], pre["obs_len"], key, cfg=model, scfg=scfg,
                                    return_cache=True)
    ro, want_states = _turn_loop(task, params, ro, cache, list(rb["states"]),
                                 np.array([len(c) for c in rb["context"]], np.int64), jax.random.fold_in(key, 1_000),
                                 scfg)
    assert states == want_states
    replayed = [sum(b - a for a, b in action_spans(np.asarray(src.policy_mask)[r // 2])[:cut[r // 2]])
                for r in range(R_)]
    _same(ep, ro, want_states, task, sp, 2, replayed=replayed)


class _ShiftedAgentEngine(JaxEngine):
    """The jax engine (its cache carried) with the log-probs of the tokens each call generates moved
    by ``SHIFT``: a behaviour policy the trainer must not take as ``old_logp``."""

    name = "shifted"
    last_sync_s = 0.5

    def __init__(self, cfg):
        super().__init__(cfg)
        self.pushes = 0

    def update_params(self, params):
        self.pushes += 1
        super().update_params(params)

    def generate(self, *args, keep_state=False, **kw):
        ro, st = super().generate(*args, keep_state=True, **kw)
        ro = ro.replace(logprobs=ro.logprobs + SHIFT * ro.policy_mask,
                        sampling_logprobs=ro.sampling_logprobs + SHIFT * ro.policy_mask)
        return (ro, st) if keep_state else ro

    def append_and_resume(self, rollout, *args, keep_state=False, **kw):
        ro, st = super().append_and_resume(rollout, *args, keep_state=True, **kw)
        old = jnp.pad(jnp.asarray(rollout.policy_mask), ((0, 0), (0, ro.tokens.shape[1] - rollout.tokens.shape[1])))
        new = ro.policy_mask & ~old
        ro = ro.replace(logprobs=ro.logprobs + SHIFT * new, sampling_logprobs=ro.sampling_logprobs + SHIFT * new)
        return (ro, st) if keep_state else ro


def test_another_engine_gives_agent_episodes_the_trainers_logprobs_and_trains(monkeypatch):
    built, real = {}, episodes_mod.make_engine

    def fake_make_engine(name, **kw):
        if name == "jax":
            return real(name, **kw)
        built.update(name=name, **kw)
        eng = _ShiftedAgentEngine(kw["cfg"])
        eng.update_params(kw["params"])
        return eng

    monkeypatch.setattr(episodes_mod, "make_engine", fake_make_engine)
    task, model = REPAIR, _model(REPAIR)
    params = init_params(model, jax.random.PRNGKey(0))
    other = task.make_rollouts(model_cfg=model, sampling=SamplingSettings(engine="vllm"))
    ref = task.make_rollouts(model_cfg=model, sampling=SamplingSettings())
    probs = task.train_problems(seed=0, step=0, count=3)
    ep = other.rollout(params, probs, jax.random.PRNGKey(1), group_size=4)
    want = ref.rollout(params, probs, jax.random.PRNGKey(1), group_size=4)
    assert built["name"] == "vllm" and built["max_model_len"] == task.cfg.episode_width
    m = np.asarray(ep.policy_mask)
    assert m.sum() > 0 and (m == np.asarray(want.policy_mask)).all()
    for name in ("tokens", "valid", "rewards", "units", "env_steps"):
        np.testing.assert_array_equal(np.asarray(getattr(ep, name)), np.asarray(getattr(want, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(ep.logprobs)[m], np.asarray(want.logprobs)[m], atol=2e-5)  # the trainer's
    assert (np.asarray(ep.logprobs)[~m] == 0).all()
    np.testing.assert_allclose(np.asarray(ep.sampling_logprobs)[m], np.asarray(want.logprobs)[m] + SHIFT, atol=2e-5)
    got = other.pop_metrics()
    assert got["rollout/logp_abs_diff"] == pytest.approx(SHIFT, abs=1e-4)
    assert got["rollout/kl_k1"] == pytest.approx(SHIFT, abs=1e-4)
    assert got["rollout/sync_s"] == 0.5 and other.pop_metrics() == {} and ref.pop_metrics() == {}

    # the trainer no longer refuses another engine for a task with its own rollouts: TIS on, a step runs
    rl = RLConfig(tasks_per_step=3, group_size=4, eval=EvalConfig(count=4, samples=2),
                  rollout=SamplingSettings(engine="vllm"), loss=LossConfig(drop_no_contrast=False))
    assert rl.loss.rollout_correction == "token_truncate"
    tr = Trainer(task, model, rl, ps.PrefixConfig(mode="ps_ada", n=4), seed=0)
    state, metrics = tr.step(tr.init_state(params))
    assert tr.rollouts.engine.name == "shifted" and np.isfinite(metrics["loss/loss"])
    assert metrics["rollout/logp_abs_diff"] == pytest.approx(SHIFT, abs=1e-4)


def test_agent_refusals_name_the_setting():
    model = _model(REPAIR)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))
    with pytest.raises(ValueError, match=r"RolloutConfig.engine='vllm' \(rollout.engine\) runs on one process without a "
                                         r"mesh.*use rollout.engine=jax on a mesh"):
        REPAIR.make_rollouts(model_cfg=model, sampling=SamplingSettings(engine="vllm"), mesh=mesh)
    regen = RepairTask(dataclasses.replace(REPAIR.cfg, replay="regenerate"))
    with pytest.raises(ValueError, match=r"mode='regenerate'.*rollout.engine='vllm'"):
        regen.make_rollouts(model_cfg=model, sampling=SamplingSettings(engine="vllm"))
    # every rollout key the turn loop would not honour is one line naming it and its allowed value
    # (issue 45, item 3: row_chunk, attend_buckets, prefill_group were accepted and dropped)
    for kw, allowed in ((dict(continuous_slots=4), "continuous_slots=null"), (dict(row_chunk=4), "row_chunk=null"),
                        (dict(attend_buckets=(32,)), "attend_buckets=null"), (dict(prefill_group=True), "prefill_group=false"),
                        (dict(max_new_tokens=8), "max_new_tokens=null")):
        key = next(iter(kw))
        with pytest.raises(ValueError, match=rf"RolloutConfig.{key}=.*\(rollout.{key}\) with a multi-turn agent task.*"
                                             rf"allowed {allowed}$"):
            AgentRollouts(env=REPAIR.cfg, model_cfg=model, sampling=SamplingSettings(**kw))
        with pytest.raises(ValueError, match=rf"\(rollout.{key}\)"):
            TRAP.make_rollouts(model_cfg=_model(TRAP), sampling=SamplingSettings(**kw))
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'lib'; pass the environment as environment="):
        AgentRollouts(env=REPAIR.cfg, model_cfg=model, sampling=SamplingSettings(), lib=R.ENVIRONMENT)
    assert AgentRollouts(env=REPAIR.cfg, model_cfg=model, sampling=SamplingSettings()).environment is R.ENVIRONMENT
    assert TRAP.make_rollouts(model_cfg=_model(TRAP), sampling=SamplingSettings()).environment is TRAP.environment
    eng = JaxEngine(model, continuous_slots=2)
    eng.update_params(init_params(model, jax.random.PRNGKey(0)))
    prompt, plen = REPAIR.prompts(REPAIR.train_problems(seed=0, step=0, count=2))
    with pytest.raises(ValueError, match="keep_state needs continuous_slots=None"):
        eng.generate(prompt, plen, key=jax.random.PRNGKey(0), scfg=_scfg(REPAIR), keep_state=True)
