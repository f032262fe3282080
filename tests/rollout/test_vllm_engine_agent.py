"""The multi-turn repair agent (``prs.tasks.agent_rollouts``) on the vLLM engine: every turn is a vLLM
request (the conversation so far as the prompt, its earlier turns in the prefix cache), the host
executes the actions in between. Checked: the prompt and the observations of an episode have
policy mask 0 and are what the environment renders (independent re-execution); greedy fresh
episodes and greedy replay re-rolls equal the jax engine's on the same weights; a repair training
run whose next-visit schedule replays stored actions through execution completes on vLLM, with
vLLM's sampled log-probs equal to the trainer's within fp32 rounding. Runs only where vLLM is
importable (the ``.ci/vllm`` venv); one vLLM engine for the module (vLLM starts slowly)."""
import pytest

pytest.importorskip("vllm", reason="vLLM not installed (the prs[vllm] extra; .ci/vllm builds a venv with it)")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from prs.core import prefix as ps  # noqa: E402
from prs.models.qwen3 import ModelConfig, init_params  # noqa: E402
from prs.rl.config import EvalConfig, ScheduleConfig  # noqa: E402
from prs.rl.episodes import Episodes, RolloutConfig, SamplingSettings  # noqa: E402
from prs.rl.trainer import RLConfig, Trainer  # noqa: E402
from prs.tasks import repair as R  # noqa: E402
from prs.tasks.agent_rollouts import action_spans  # noqa: E402
from prs.tasks.repair_task import RepairTask  # noqa: E402

TASK = RepairTask(R.RepairConfig(n_lines=4, min_bugs=1, max_bugs=2, max_turns=4, report_max=2))  # few turns
MODEL = ModelConfig.preset("tiny", vocab_size=TASK.vocab_size, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2,
                           head_dim=32, d_ff=128)  # head_dim 32: vLLM's CPU attention
GREEDY = SamplingSettings(temperature=0.0, eval_temperature=0.0)


def _source(problems):
    """Demonstration episodes (several turns each) as re-roll sources, and their turn counts."""
    tok, mask = TASK.demonstrations(problems, seed=1)
    turns = np.array([len(action_spans(m)) for m in mask], np.int32)
    z = np.zeros((tok.shape[0],), np.int32)
    return Episodes(tokens=tok, positions=np.broadcast_to(np.arange(tok.shape[1]), tok.shape), valid=tok != R.PAD,
                    policy_mask=mask, logprobs=np.zeros(tok.shape, np.float32), rewards=z.astype(np.float32),
                    units=turns, replayed=z, env_steps=turns, sampling_logprobs=np.zeros(tok.shape, np.float32),
                    truncated=z.astype(bool)), turns


@pytest.fixture(scope="module")
def greedy():
    """Greedy fresh episodes (3 problems x 2) and re-rolls of 4 demonstration sources (x 2, cut
    half-way) from the vLLM engine and from the jax engine, same weights and keys."""
    params = init_params(MODEL, jax.random.key(0), std=0.15)
    probs = TASK.train_problems(seed=0, step=0, count=3)
    sp = TASK.train_problems(seed=0, step=1, count=4)
    src, turns = _source(sp)
    cut = np.maximum(turns // 2, 1)
    out = {"params": params, "probs": probs, "sp": sp, "src": src, "cut": cut}
    for name in ("vllm", "jax"):
        ar = TASK.make_rollouts(model_cfg=MODEL, sampling=SamplingSettings(engine=name, temperature=0.0,
                                                                          eval_temperature=0.0))
        out[name] = {"rollouts": ar,
                     "fresh": ar.rollout(params, probs, jax.random.key(1), group_size=2, return_states=True),
                     "reroll": ar.reroll(params, sp, src, cut, jax.random.key(2), group_size=2, return_states=True)}
    assert out["vllm"]["rollouts"].engine.name == "vllm"
    yield out
    out["vllm"]["rollouts"].engine.close()


def _rendered(ep: Episodes, problems, group_size: int, n_replayed):
    """Re-executes each episode from its action spans: the tokens outside the actions after the
    first ``n_replayed[r]`` turns are the prompt, the replayed actions and the observations the
    environment renders, all with policy mask 0. Returns the final states."""
    tok, pm, valid = (np.asarray(x) for x in (ep.tokens, ep.policy_mask, ep.valid))
    prompt, plen = R.prompts(problems)
    finals = []
    for r in range(tok.shape[0]):
        g = r // group_size
        n = int(valid[r].sum())
        state, pos, want_pm = R.reset(problems, g), int(plen[g]), np.zeros(tok.shape[1], bool)
        np.testing.assert_array_equal(tok[r, :pos], prompt[g, :plen[g]])
        turn = 0
        while pos < n:
            a = pos  # an action runs to ';' or '$', or A tokens
            while pos < n and pos - a < R.MAX_ACTION_TOKENS and tok[r, pos] not in (R.EOT, R.EOS):
                pos += 1
            pos = min(pos + 1, n) if pos < n and tok[r, pos] in (R.EOT, R.EOS) else pos
            want_pm[a:pos] = turn >= n_replayed[r]
            state, obs = R.execute(state, tok[r, a:pos], TASK.cfg)
            np.testing.assert_array_equal(tok[r, pos:pos + len(obs)], obs)
            pos += len(obs)
            turn += 1
        np.testing.assert_array_equal(pm[r], want_pm, err_msg=f"row {r}")
        assert state.done and float(ep.rewards[r]) == R.verify(problems, g, state) and int(ep.units[r]) == state.turns
        finals.append(state)
    return finals


def test_vllm_agent_prompt_replayed_prefix_and_observations_have_policy_mask_zero(greedy):
    ep, states = greedy["vllm"]["fresh"]
    assert _rendered(ep, greedy["probs"], 2, np.zeros(6, int)) == states
    assert int(np.asarray(ep.env_steps).sum()) > 6  # several turns
    ep, states = greedy["vllm"]["reroll"]
    assert _rendered(ep, greedy["sp"], 2, np.repeat(greedy["cut"], 2)) == states
    assert (np.asarray(ep.replayed) > 0).all()


@pytest.mark.parametrize("kind", ["fresh", "reroll"])
def test_vllm_greedy_agent_episodes_equal_the_jax_engines(greedy, kind):
    (got, gs), (want, ws) = greedy["vllm"][kind], greedy["jax"][kind]
    assert gs == ws
    for name in ("tokens", "policy_mask", "valid", "rewards", "units", "replayed", "env_steps", "truncated"):
        np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(want, name)), err_msg=name)
    # the vLLM episodes' log-probs are the trainer's forward pass; the jax sampler's its cached decode
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(want.logprobs), atol=1e-4)


def test_a_repair_run_replaying_stored_actions_through_execution_completes_on_vllm(greedy):
    """Next-visit schedule with demonstrations stored as the pool's successes: every task steered,
    its N continuations start after replayed actions (executed again), sampled by vLLM."""
    rl = RLConfig(tasks_per_step=3, group_size=4, eval=EvalConfig(count=4, samples=1),
                  schedule=ScheduleConfig(kind="next_visit", pool_size=6, cut_spread=True),
                  rollout=RolloutConfig(engine="vllm"))
    assert rl.loss.rollout_correction == "token_truncate"
    tr = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="ps_fix", n=4, hard_max=1, easy_min=3), seed=0)
    tr.rollouts.engine = greedy["vllm"]["rollouts"].engine  # the module's engine (one vLLM per module)
    state = tr.init_state(greedy["params"])
    tok, mask = TASK.demonstrations(tr.schedule.pool, seed=1)
    L, M = tr.width, 6
    T = np.zeros((M, 2, L), np.int32)
    T[:, 0, : tok.shape[1]] = tok
    PM = np.zeros((M, 2, L), bool)
    PM[:, 0, : tok.shape[1]] = mask
    units = np.array([len(action_spans(x)) for x in mask], np.int32)
    mem = state.memory._replace(
        plan=jnp.zeros((M,), jnp.int32), k=jnp.ones((M,), jnp.int32), src_tokens=jnp.asarray(T),
        src_mask=jnp.asarray(PM), src_units=jnp.asarray(np.stack([units, np.zeros_like(units)], 1)),
        src_success=jnp.asarray(np.tile([True, False], (M, 1))), src_valid=jnp.asarray(np.tile([True, False], (M, 1))),
        src_id=jnp.asarray(np.arange(2 * M, dtype=np.int32).reshape(M, 2)))
    state = state._replace(memory=mem)
    c = tr.collect(state)
    assert c.sources["steered"].all() and c.metrics["tokens_replayed"] > 0
    bm, lm = np.asarray(c.batch.tokens), np.asarray(c.batch.loss_mask)
    for r in range(12):
        t, cut = c.sources["ids"][r // 4], int(c.sources["cut"][r // 4, r % 4])
        end = action_spans(mask[t])[cut][0]                     # where the source's turn cut + 1 began
        np.testing.assert_array_equal(bm[r, :end], tok[t, :end])  # replayed through execution, verbatim
        assert not lm[r, :end].any()
    metrics = []
    for _ in range(2):
        state, m = tr.step(state)
        metrics.append(m)
    for m in metrics:
        assert np.isfinite(m["loss/loss"]) and m["tokens_generated"] > 0
        assert 0 <= m["rollout/logp_abs_diff"] < 1e-4 and abs(m["rollout/kl_k1"]) < 1e-4
    assert metrics[1]["rollout/sync_s"] > 0  # step 1 sampled the updated policy: pushed in place
    ev = tr.evaluate(state.params, 2)
    assert 0 <= ev["eval/pass_at_1"] <= 1
