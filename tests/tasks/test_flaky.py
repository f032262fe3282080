"""The flaky-tool chain (``prs.tasks.flaky``, ``prs.tasks.flaky_task``) and replay in a stochastic
environment (``AgentEnv.restore``, ``prs.tasks.agent_rollouts``).

References: a string solver written here (the chain's values), the binomial law of the crashes and
their closed-form survival (1 - f)^E, a per-row reference forward with a numpy softmax for the
teacher-forced metrics, and the environment's own ``execute`` for every recorded observation.
"""
import dataclasses
import re
import types

import jax
import numpy as np
import pytest

from prs.models.qwen3 import ModelConfig, forward, init_params
from prs.rl.episodes import SamplingSettings
from prs.tasks import flaky as F
from prs.tasks.agent_env import pack_episodes
from prs.tasks.agent_rollouts import action_spans, recorded_observations, row_seeds
from prs.tasks.flaky_task import FlakyTask, hard_value_mask, solver_episodes, teacher_forced
from prs.tasks.registry import make_task

CFG = F.FlakyConfig(easy_steps=4, crash_rate=0.3)


def episode_values(tokens, mask):
    """Per row, the digit each policy turn wrote, read from its text (``d;`` with d in 0-6; else -1)."""
    out = []
    for r in range(tokens.shape[0]):
        texts = [F.decode(tokens[r, a:b]) for a, b in action_spans(mask[r])]
        out.append([int(t[0]) if re.fullmatch(r"[0-6];", t) else -1 for t in texts])
    return out


def _episodes(tokens, mask, replayed):
    """The fields of ``Episodes`` that ``episode_metrics`` reads, for hand-built episodes."""
    return types.SimpleNamespace(tokens=tokens, policy_mask=mask, valid=tokens != F.PAD, replayed=replayed)


def _string_solver(terms, m):
    """The chain's right turns, from the definition: running sums mod 7, then times m."""
    out, s = [], terms[0]
    for a in terms[1:]:
        s = (s + a) % 7
        out.append(s)
    return out + [(s * m) % 7]


def _model(task):
    return ModelConfig.preset("tiny", vocab_size=task.vocab_size)


def test_solution_values_and_the_grader_match_a_string_solver():
    p = F.make_problems(CFG, seed=3, count=32)
    want = np.array([_string_solver(list(t), int(m)) for t, m in zip(p.terms, p.mult)])
    assert np.array_equal(F.solution_values(p), want)
    env = F.ENVIRONMENT
    for i in range(8):
        acts = F.solution_actions(p, i)
        ids, mask, states = env.render(p, i, acts, CFG)
        assert env.decode(ids).startswith(f"^{p.terms[i, 0]}+{p.terms[i, 1]}#")
        assert env.verify(p, i, states[-1]) == 1.0 and states[-1].done and len(states) == CFG.easy_steps + 1
        wrong = list(acts)
        j = i % len(acts)
        wrong[j] = f"{(int(acts[j][0]) + 1) % 7};"
        assert env.verify(p, i, env.render(p, i, wrong, CFG)[2][-1]) == 0.0
        bad = acts[:2] + ["77;"] + acts[3:]                    # a turn that writes no value
        assert env.verify(p, i, env.render(p, i, bad, CFG)[2][-1]) == 0.0


def test_crashes_are_binomial_and_survival_is_the_closed_form():
    cfg = F.FlakyConfig(easy_steps=12, crash_rate=0.1)
    draws = np.array([F.draw_crashes(cfg, s) for s in range(20_000)])         # [S, E]
    se = np.sqrt(0.1 * 0.9 / draws.size)
    assert abs(draws.mean() - 0.1) < 4 * se
    surv = (~draws).all(axis=1).mean()
    assert cfg.survival == pytest.approx(0.9 ** 12)
    assert abs(surv - cfg.survival) < 4 * np.sqrt(cfg.survival * (1 - cfg.survival) / draws.shape[0])
    assert F.draw_crashes(cfg, 7) == F.draw_crashes(cfg, 7)                   # a seed fixes the outcomes


def test_a_crash_ends_the_episode_unrewarded_whatever_the_action():
    p = F.make_problems(CFG, seed=0, count=1)
    state = F.reset(p, 0)._replace(crashes=(False, True, False, False))
    acts = F.solution_actions(p, 0)
    state, obs = F.execute(state, F.encode(acts[0]), CFG)
    assert F.decode(obs) == f">+{p.terms[0, 2]}|"
    state, obs = F.execute(state, F.encode(acts[1]), CFG)
    assert obs == [] and state.done and state.crashed
    assert F.verify(p, 0, state) == 0.0
    with pytest.raises(ValueError, match="already done"):
        F.execute(state, F.encode(acts[2]), CFG)
    s2, obs = F.execute(F.reset(p, 0), F.encode("3$"), CFG)                  # EOS ends it too
    assert s2.done and not s2.crashed and obs == []


def test_restore_keeps_the_recorded_answers_and_draws_only_the_future():
    p = F.make_problems(CFG, seed=1, count=1)
    acts = [F.encode(a) for a in F.solution_actions(p, 0)]
    ids, mask, _ = F.ENVIRONMENT.render(p, 0, acts, CFG)
    obs = recorded_observations(np.array(ids), np.array(mask), np.ones(len(ids), bool))
    assert obs[-1] == [] and F.decode(obs[-2]) == f">*{p.mult[0]}|"
    seed = next(s for s in range(1000) if F.draw_crashes(CFG, s)[:2] == (True, True))  # would crash at once
    st = F.restore(p, 0, acts[:2], obs[:2], CFG, seed=seed)
    assert not st.done and st.turns == 2 and st.crashes[:2] == (False, False)
    assert st.crashes[2:] == F.draw_crashes(CFG, seed)[2:]
    with pytest.raises(ValueError, match="recorded observation"):
        F.restore(p, 0, acts[:2], [obs[0], F.encode(">+9|")], CFG, seed=0)
    # a recorded crash (no answer) is restored as a crash
    st = F.restore(p, 0, acts[:1], [[]], CFG, seed=0)
    assert st.done and st.crashed


def test_config_and_task_parameters_fail_with_one_clear_error():
    with pytest.raises(ValueError, match="crash_rate"):
        F.FlakyConfig(crash_rate=1.0)
    with pytest.raises(ValueError, match="easy_steps"):
        F.FlakyConfig(easy_steps=0)
    with pytest.raises(ValueError, match="replay"):
        F.FlakyConfig(replay="regenerate")
    with pytest.raises(ValueError, match="unknown parameter"):
        make_task("flaky_chain", crash=0.1)
    with pytest.raises(ValueError, match="oracle_max_k"):
        make_task("flaky_chain", oracle_max_k=-2)


def test_arms_and_crash_rates_share_one_warm_start_key():
    base = make_task("flaky_chain", easy_steps=4, crash_rate=0.1)
    for other in (make_task("flaky_chain", easy_steps=4, crash_rate=0.3, oracle_max_k=2),
                  make_task("flaky_chain", easy_steps=4, fixed_cut=True)):
        assert other.warm_start_key == base.warm_start_key
    assert make_task("flaky_chain", easy_steps=2).warm_start_key != base.warm_start_key
    toks, mask = base.demonstrations(base.train_problems(seed=0, step=0, count=4), seed=0)
    assert not np.any((toks == F.STAR).sum(axis=1) != 1)                      # demonstrations never crash


def _rollouts(task, **kw):
    return task.make_rollouts(model_cfg=_model(task), sampling=SamplingSettings(**kw))


def test_fresh_rollouts_crash_where_each_rows_seed_says():
    task = FlakyTask(dataclasses.replace(CFG, crash_rate=0.5))
    ar = _rollouts(task)
    params = init_params(_model(task), jax.random.PRNGKey(0))
    probs = task.train_problems(seed=0, step=0, count=4)
    key = jax.random.PRNGKey(5)
    ep, states = ar.rollout(params, probs, key, group_size=4, return_states=True)
    seeds = row_seeds(key, 16)
    tokens, pm = np.asarray(ep.tokens), np.asarray(ep.policy_mask)
    for r, s in enumerate(states):
        crashes = F.draw_crashes(task.cfg, int(seeds[r]))
        assert s.crashes == crashes
        n = len(action_spans(pm[r]))
        if s.crashed:  # the episode stopped at the first crash among its turns
            assert n <= task.cfg.easy_steps and crashes[n - 1] and not any(crashes[: n - 1])
        # every recorded observation is what the environment gives from the same state
        st = F.seeded_reset(probs, r // 4, task.cfg, seed=int(seeds[r]))
        for (a, b), o in zip(action_spans(pm[r]), recorded_observations(tokens[r], pm[r], np.asarray(ep.valid)[r])):
            st, got = F.execute(st, tokens[r, a:b], task.cfg)
            assert got == o
        assert float(ep.rewards[r]) == F.verify(probs, r // 4, s)
    again = ar.rollout(params, probs, key, group_size=4)
    assert np.array_equal(np.asarray(again.tokens), tokens)                  # a key fixes the episodes


def test_rerolls_from_a_solver_prefix_never_crash_in_the_prefix():
    task = FlakyTask(dataclasses.replace(CFG, crash_rate=0.9))                 # almost every fresh call crashes
    ar = _rollouts(task)
    params = init_params(_model(task), jax.random.PRNGKey(1))
    probs = task.train_problems(seed=0, step=1, count=3)
    src = solver_episodes(probs, task.cfg)
    e = task.cfg.easy_steps
    ep, states = ar.reroll(params, probs, src, np.full((3,), e), jax.random.PRNGKey(2), group_size=4,
                           return_states=True)
    want = F.solution_values(probs)
    for r, s in enumerate(states):
        assert not s.crashed and s.turns == e + 1 and s.values[:e] == tuple(want[r // 4, :e])
        assert np.array_equal(np.asarray(ep.tokens)[r, : src.valid[r // 4].sum() - 0][: 5 + e * 6],
                              src.tokens[r // 4, : 5 + e * 6])
    assert np.all(np.asarray(ep.replayed) == 2 * e)
    # a cut at 2 turns: the turns after it crash as each row's seed draws (f = 0.9: nearly all)
    ep2, st2 = ar.reroll(params, probs, src, np.full((3,), 2), jax.random.PRNGKey(3), group_size=4,
                         return_states=True)
    seeds = row_seeds(jax.random.PRNGKey(3), 12)
    assert sum(s.crashed for s in st2) >= 6
    for r, s in enumerate(st2):
        drawn = F.draw_crashes(task.cfg, int(seeds[r]))
        assert s.crashes == (False, False) + drawn[2:]
        # a crashed row stopped at its first drawn crash after the cut; any other row ended (EOS) by then
        first = next((t for t in range(2, e) if drawn[t]), None)
        if s.crashed:
            assert first is not None and s.turns == first + 1
        else:
            assert first is None or s.turns <= first + 1


def test_regenerate_mode_is_refused_in_a_stochastic_environment():
    from prs.tasks.agent_rollouts import AgentRollouts
    task = FlakyTask(CFG)
    with pytest.raises(ValueError, match="stochastic"):
        AgentRollouts(env=CFG, model_cfg=_model(task), sampling=SamplingSettings(), mode="regenerate",
                      environment=F.ENVIRONMENT)


def test_oracle_replaces_low_k_groups_and_fixed_cut_cuts_before_the_hard_turn():
    task = FlakyTask(CFG, oracle_max_k=0)
    ar = _rollouts(task)
    params = init_params(_model(task), jax.random.PRNGKey(0))
    probs = task.train_problems(seed=0, step=0, count=3)
    ep = ar.rollout(params, probs, jax.random.PRNGKey(4), group_size=4)      # random policy: every k = 0
    assert np.all(np.asarray(ep.replayed) == 2 * CFG.easy_steps) and task.side["oracle_groups"] == 3
    ev = ar.rollout(params, probs, jax.random.PRNGKey(4), group_size=4, evaluation=True)
    assert np.all(np.asarray(ev.replayed) == 0)                               # never in an evaluation
    cut_task = FlakyTask(CFG, fixed_cut=True)
    ar2 = _rollouts(cut_task)
    src = solver_episodes(probs, CFG)
    src_ep = ar2.rollout(params, probs, jax.random.PRNGKey(0), group_size=1)._replace(
        tokens=src.tokens, policy_mask=src.policy_mask, valid=src.valid, units=np.full((3,), CFG.easy_steps + 1))
    ep2 = ar2.reroll(params, probs, src_ep, np.array([1, 2, 3]), jax.random.PRNGKey(6), group_size=2)
    assert np.all(np.asarray(ep2.replayed) == 2 * CFG.easy_steps)


def test_episode_metrics_count_reach_survival_and_the_hard_step():
    task = FlakyTask(CFG)
    probs = task.train_problems(seed=0, step=0, count=2)
    env = F.ENVIRONMENT
    acts = [F.solution_actions(probs, i) for i in range(2)]
    eps = [env.render(probs, 0, acts[0], CFG)[:2],                             # right: reach, hard right
           env.render(probs, 0, acts[0][:-1] + [f"{(int(acts[0][-1][0]) + 1) % 7};"], CFG)[:2],  # hard wrong
           env.render(probs, 1, acts[1], CFG, state=F.reset(probs, 1)._replace(crashes=(False, True, False, False)))[:2],
           # the tool crashed at call 2
           env.render(probs, 1, [f"{(int(acts[1][0][0]) + 1) % 7};"] + acts[1][1:], CFG)[:2]]  # wrong easy value
    tokens, mask = pack_episodes(eps, CFG.episode_width, pad=F.PAD)
    ep = _episodes(tokens, mask, np.zeros(4, np.int32))
    m = task.episode_metrics(probs, ep)
    assert m["mech/p_reach"] == 0.5 and m["mech/p_alive"] == 0.75 and m["mech/crash_rate"] == 0.25
    assert m["mech/hard_acc_on_reach"] == 0.5
    ep.replayed = np.full(4, 3, np.int32)                                      # no fresh row: rates undefined
    assert all(task.episode_metrics(probs, ep)[k] is None for k in ("mech/p_reach", "mech/p_alive", "mech/crash_rate"))
    assert episode_values(tokens, mask)[0] == F.solution_values(probs)[0].tolist()
    hm = hard_value_mask(tokens)
    assert hm.sum() == 3 and all(tokens[r, hm[r]][0] - F.DIGIT0 == int(eps_a[-1][0])
                                 for r, eps_a in ((0, acts[0]),))


def test_teacher_forced_metrics_against_a_per_row_reference_forward():
    task = FlakyTask(CFG)
    cfg_m = _model(task)
    params = init_params(cfg_m, jax.random.PRNGKey(3))
    probs = task.eval_problems(count=6)
    got = teacher_forced(params, probs, CFG, model_cfg=cfg_m)
    want = F.solution_values(probs)
    hard, reach = [], []
    for i in range(6):
        ids, mask, _ = F.ENVIRONMENT.render(probs, i, F.solution_actions(probs, i)[: CFG.easy_steps], CFG)
        x = np.asarray(forward(params, np.array([ids]), cfg=cfg_m), np.float64)[0]         # [T, V] unpadded
        p = np.exp(x - x.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        hard.append(p[len(ids) - 1, F.DIGIT0 + want[i, -1]])
        starts = [a for a, _ in action_spans(np.array(mask))]
        reach.append(np.prod([p[a - 1, F.DIGIT0 + want[i, t]] for t, a in enumerate(starts)]))
    assert got["hard"] == pytest.approx(np.mean(hard), rel=1e-4)
    assert got["reach_policy"] == pytest.approx(np.mean(reach), rel=1e-4)


# ------------------------------------------------------------------ recoverable tool errors (easy side)
RCFG = F.FlakyConfig(easy_steps=4, crash_rate=0.0, error_rate=0.3, max_retries=2, demo_hard_error_rate=0.0)


def _run(probs, i, state, acts, cfg=RCFG):
    return F.ENVIRONMENT.render(probs, i, acts, cfg, state=state)


def test_a_tool_error_records_nothing_and_a_retry_recovers():
    probs = F.make_problems(RCFG, seed=2, count=1)
    sol = F.solution_actions(probs, 0)
    st0 = F.reset(probs, 0)._replace(errors=(False, True, False, False, False, False, False), max_turns=RCFG.max_turns)
    ids, mask, states = _run(probs, 0, st0, sol[:2] + [sol[1]] + sol[2:])    # error at turn 2, then the retry
    assert "|" + sol[1] + ">!|" + sol[1] + ">+" in F.decode(ids)
    assert states[-1].values == tuple(F.solution_values(probs)[0]) and states[-1].errors_seen == 1
    assert F.verify(probs, 0, states[-1]) == 1.0
    guess = f"{(int(sol[1][0]) + 1) % 7};"                                     # writes another value instead
    _, _, st = _run(probs, 0, st0, sol[:2] + [guess] + sol[2:])
    assert F.verify(probs, 0, st[-1]) == 0.0
    many = F.reset(probs, 0)._replace(errors=(True,) * RCFG.max_turns, max_turns=RCFG.max_turns)
    _, _, st = _run(probs, 0, many, [sol[0]] * RCFG.max_turns)                  # the budget runs out
    assert st[-1].done and len(st[-1].values) == 0 and F.verify(probs, 0, st[-1]) == 0.0


def test_errors_are_drawn_per_turn_apart_from_the_crashes():
    draws = np.array([F.draw_errors(RCFG, s) for s in range(10_000)])
    assert draws.shape == (10_000, RCFG.max_turns)
    assert abs(draws.mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / draws.size)
    cfg = dataclasses.replace(RCFG, crash_rate=0.2)
    assert F.draw_crashes(cfg, 5) == F.draw_crashes(dataclasses.replace(cfg, error_rate=0.0), 5)
    assert F.draw_errors(dataclasses.replace(RCFG, error_rate=0.0), 5) == ()


def test_restore_reads_errors_back_from_the_record():
    probs = F.make_problems(RCFG, seed=4, count=1)
    sol = F.solution_actions(probs, 0)
    st0 = F.reset(probs, 0)._replace(errors=(True, False, False, False, False, False, False), max_turns=RCFG.max_turns)
    acts = [F.encode(a) for a in [sol[0]] + sol]
    ids, mask, states = _run(probs, 0, st0, acts)
    obs = recorded_observations(np.array(ids), np.array(mask), np.ones(len(ids), bool))
    seed = next(s for s in range(500) if not F.draw_errors(RCFG, s)[0])        # the seed itself would not err
    st = F.restore(probs, 0, acts[:2], obs[:2], RCFG, seed=seed)
    assert st.errors[:2] == (True, False) and st.errors[2:] == F.draw_errors(RCFG, seed)[2:]
    assert st.values == tuple(F.solution_values(probs)[0][:1]) and st.errors_seen == 1 and st.turns == 2
    with pytest.raises(ValueError, match="recorded observation"):
        F.restore(probs, 0, acts[:1], [obs[0]], dataclasses.replace(RCFG, error_rate=0.0), seed=0)  # no errors there


def test_demonstrations_meet_errors_and_retry_at_the_configured_rates():
    cfg = dataclasses.replace(RCFG, demo_fault_rate=0.25, demo_retry_rate=0.4, max_retries=4, demo_error_rate=0.0)
    task = FlakyTask(cfg)
    probs = task.train_problems(seed=0, step=0, count=400)
    toks, mask = task.demonstrations(probs, seed=3)
    vals = episode_values(toks, mask)
    errs = retried = 0
    for r in range(toks.shape[0]):
        obs = recorded_observations(toks[r], mask[r], toks[r] != F.PAD)
        for t, o in enumerate(obs[:-1]):
            if F.decode(o) == ">!|":
                errs += 1
                retried += vals[r][t + 1] == vals[r][t]
    n_calls = 400 * cfg.easy_steps
    assert abs(errs / n_calls - 0.25) < 4 * np.sqrt(0.25 * 0.75 / n_calls)
    # a guess equals the erred value 1/7 of the time: P(same value) = 0.4 + 0.6 / 7
    p = 0.4 + 0.6 / 7
    assert abs(retried / errs - p) < 4 * np.sqrt(p * (1 - p) / errs)
    assert np.array_equal(toks, task.demonstrations(probs, seed=3)[0])
    plain = FlakyTask(dataclasses.replace(cfg, demo_fault_rate=0.0))
    assert not any(">!|" in F.decode(t) for t in plain.demonstrations(probs, seed=3)[0])


def test_injected_error_oracle_and_error_cut_put_rerolls_at_the_error():
    task = FlakyTask(RCFG, oracle_min_k=0)                                    # every group (k >= 0)
    ar = _rollouts(task)
    params = init_params(_model(task), jax.random.PRNGKey(0))
    probs = task.train_problems(seed=0, step=0, count=3)
    key = jax.random.PRNGKey(7)
    ep = ar.rollout(params, probs, key, group_size=2)
    at = np.asarray(jax.random.randint(jax.random.fold_in(key, 0xE44), (3,), 0, RCFG.easy_steps))
    assert np.array_equal(np.asarray(ep.replayed), 2 * np.repeat(at + 1, 2))  # the prefix ends at the error
    for r in range(6):
        head = F.decode(np.asarray(ep.tokens)[r][: 5 + 6 * at[r // 2] + 5])         # prompt, at turns, the erring one
        assert head.endswith(">!|")
    src = solver_episodes(probs, RCFG)
    from prs.tasks.flaky_task import error_sources, first_error_cut
    es = error_sources(probs, RCFG, np.array([0, 2, 3]))
    assert np.array_equal(first_error_cut(es, np.full(3, 9)), [1, 3, 4])
    assert np.array_equal(first_error_cut(src, np.full(3, 9)), [0, 0, 0])      # no error: the schedule's cut
    with pytest.raises(ValueError, match="max_retries"):
        FlakyTask(dataclasses.replace(RCFG, max_retries=0), oracle_min_k=6)


def test_teacher_forced_retry_against_a_per_row_reference_forward():
    from prs.tasks.flaky_task import teacher_forced_retry
    task = FlakyTask(RCFG)
    cfg_m = _model(task)
    params = init_params(cfg_m, jax.random.PRNGKey(5))
    probs = task.eval_problems(count=5)
    got = teacher_forced_retry(params, probs, RCFG, model_cfg=cfg_m, seed=11)
    at = np.random.default_rng(11).integers(0, RCFG.easy_steps, size=5)
    want = []
    for i in range(5):  # the retry's text, built from the definition: the erred value, then ';'
        s = _string_solver([int(x) for x in probs.terms[i]], int(probs.mult[i]))[at[i]]
        errs = tuple(t == at[i] for t in range(RCFG.max_turns))
        state = F.reset(probs, i)._replace(errors=errs, max_turns=RCFG.max_turns)
        acts = F.solution_actions(probs, i)
        ids, mask, _ = _run(probs, i, state, acts[: at[i] + 1] + [f"{s};"])
        a, z = action_spans(np.array(mask))[-1]                                  # the retry turn
        assert F.decode(ids[:z]).endswith(f"{s};>!|{s};")                       # the error, then the retry
        x = np.asarray(forward(params, np.array([ids[:z]]), cfg=cfg_m), np.float64)[0]
        p = np.exp(x - x.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        want.append(p[a - 1, F.DIGIT0 + s] * p[a, F.EOT])
    assert got["retry"] == pytest.approx(np.mean(want), rel=1e-4)
    with pytest.raises(ValueError, match="max_retries"):
        teacher_forced_retry(params, probs, CFG, model_cfg=cfg_m)
    assert "mech/tf_retry" in task.policy_metrics(params, model_cfg=cfg_m)
    assert "mech/tf_retry" not in FlakyTask(CFG).policy_metrics(params, model_cfg=cfg_m)


def test_recovery_metrics_split_passes_by_whether_an_error_was_met():
    task = FlakyTask(RCFG)
    probs = task.train_problems(seed=0, step=0, count=3)
    sol = [F.solution_actions(probs, i) for i in range(3)]
    errs = (False, True) + (False,) * (RCFG.max_turns - 2)
    st = [F.reset(probs, i)._replace(errors=errs, max_turns=RCFG.max_turns) for i in range(3)]
    guess = f"{(int(sol[1][1][0]) + 3) % 7};"
    eps = [_run(probs, 0, st[0], sol[0][:2] + [sol[0][1]] + sol[0][2:])[:2],   # error, retry: pass
           _run(probs, 1, st[1], sol[1][:2] + [guess] + sol[1][2:])[:2],       # error, guess: fail
           F.ENVIRONMENT.render(probs, 2, sol[2], RCFG)[:2]]                   # clean: pass
    tokens, mask = pack_episodes(eps, RCFG.episode_width, pad=F.PAD)
    ep = _episodes(tokens, mask, np.zeros(3, np.int32))
    m = task.episode_metrics(probs, ep)
    assert m["mech/recovery_rate"] == 0.5 and m["mech/clean_pass_rate"] == 1.0
    assert m["mech/retry_rate"] == 0.5 and m["mech/faulty_share"] == pytest.approx(2 / 3)
