"""The task selectors of ``schedule.select`` (``prs.rl.select``) against independent references:
verl's DAPO refill loop re-implemented in numpy, GRESO's skip rule as its code states it, SPEED's
acceptance rule, the Beta-binomial closed form; degenerate pools stop with one line; config
validation; composition with Prefix Sampling through Hydra; exact resume with the selector state."""
from __future__ import annotations

import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.rl import select as SEL
from prs.rl.config import EvalConfig, RLConfig, ScheduleConfig
from prs.rl.episodes import Episodes
from prs.rl.schedule import Sampled, StepKeys
from prs.rl.trainer import TrainState, Trainer, checkpoint_tree

from tests._arith_tiny import MODEL, TASK, warm_params

W = 4  # width of the fake episodes


def _episodes(ids, rewards, group_size):
    """Fake Episodes of groups ``ids [G]`` with ``rewards [G, n]``: row r's token 0 = its task id,
    token 1 = its index in its group, policy tokens = 1 + task id % 3 (a planted token cost)."""
    ids = np.asarray(ids)
    g, n = rewards.shape
    tok = np.zeros((g * n, W), np.int32)
    tok[:, 0] = np.repeat(ids, n)
    tok[:, 1] = np.tile(np.arange(n), g)
    pm = np.arange(W)[None, :] < (1 + np.repeat(ids, n) % 3)[:, None]
    z = np.zeros((g * n,), np.int32)
    f = np.zeros((g * n, W), np.float32)
    return Episodes(tokens=jnp.asarray(tok), positions=jnp.asarray(tok * 0), valid=jnp.asarray(pm),
                    policy_mask=jnp.asarray(pm), logprobs=jnp.asarray(f), rewards=jnp.asarray(rewards.reshape(-1)),
                    units=jnp.asarray(z), replayed=jnp.asarray(z), env_steps=jnp.asarray(z),
                    sampling_logprobs=jnp.asarray(f), truncated=jnp.asarray(z.astype(bool)))


class FakeSchedule:
    """A schedule strategy over planted groups: task t's group has k_t = ``ks[t]`` successes of N
    (first k_t rollouts succeed); with ``fresh`` (screen) it trains on the given rollouts."""

    def __init__(self, ks, n):
        self.ks, self.n, self.pool = np.asarray(ks), n, np.arange(len(ks))

    def sample(self, state, params, keys, rollouts, *, ids, fresh=None):
        b, n = len(ids), self.n
        if fresh is None:
            r = (np.arange(n)[None, :] < self.ks[ids][:, None]).astype(np.float32)  # [B, N]
            fresh = _episodes(ids, r, n)
        r = np.asarray(fresh.rewards).reshape(b, n)
        pm = np.asarray(fresh.policy_mask)
        k = (r >= 1).sum(1).astype(np.int32)
        return Sampled(train=fresh, train_rewards=r, k=k, k_bucket=np.full((b,), -1), steered=np.zeros((b,), bool),
                       steer_bucket=np.full((b,), -1), rate=np.full((b,), np.nan, np.float32), prefix=None, memory=None,
                       metrics={"tokens_generated": int(pm.sum()), "rollouts_sampled": b * n, "pass_rate": float(r.mean()),
                                "reward_mean": float(r.mean()), "time_sample": 0.0})


class FakeTask:
    def take(self, pool, index):
        return np.asarray(pool)[np.asarray(index)]


def _selector(ks, *, n=8, b=4, **sched):
    rl = RLConfig(tasks_per_step=b, group_size=n, eval=EvalConfig(count=4, samples=1),
                  schedule=ScheduleConfig(pool_size=len(ks), **sched))
    sel = SEL.Selector(FakeTask(), rl, FakeSchedule(ks, n), seed=5)
    state = TrainState(step=jnp.asarray(3, jnp.int32), params=None, opt_state=None, prefix=None, memory=None,
                       select=sel.init_state())
    keys = StepKeys(*jax.random.split(jax.random.PRNGKey(0), 3))
    return sel, state, keys


# ---------------------------------------------------------------------- dynamic sampling vs verl's loop


def verl_dapo_loop(batches, rewards_of, *, train_batch_size, max_num_gen_batches):
    """recipe/dapo/dapo_ray_trainer.py's filter_groups loop in numpy: ``batches`` yields the prompt
    uids of each generation batch, ``rewards_of(uid) -> [n]``. Returns (kept uids trained,
    num_gen_batches, generated uids) or raises ValueError as verl does."""
    kept, num_gen_batches, generated = [], 0, []
    for uids in batches:
        num_gen_batches += 1
        generated += list(uids)
        kept += [u for u in uids if np.std(rewards_of(u)) > 0]
        if len(kept) < train_batch_size:
            if max_num_gen_batches <= 0 or num_gen_batches < max_num_gen_batches:
                continue
            raise ValueError(f"{num_gen_batches=} >= {max_num_gen_batches=}")
        return kept[:train_batch_size], num_gen_batches, generated
    raise AssertionError("stream ended")


# (6, 2) fills at exactly the cap; (4, 2) would fill one batch after it (verl raises); gbs 8 and 16 keep
# 5 groups of which the first 4 train
@pytest.mark.parametrize("gbs,cap,fills", [(4, 10, True), (8, 10, True), (16, 1, True), (6, 2, True), (4, 2, False), (3, 3, False)])
def test_dynamic_sampling_refills_and_stops_as_verls_loop(gbs, cap, fills):
    rng = np.random.default_rng(0)
    n, b, m = 8, 4, 24
    ks = rng.choice([0, 0, 8, 8, 8, 3, 5], size=m)                   # planted: ~2/7 of the tasks mixed
    sel, state, keys = _selector(ks, n=n, b=b, select="dynamic_sampling", ds_gen_batch_size=gbs,
                                 ds_max_gen_batches=cap)
    stream = (SEL.stream_ids(5, j * gbs, gbs, m) for j in range(10_000))
    rewards_of = lambda t: (np.arange(n) < ks[t]).astype(float)  # noqa: E731
    try:
        ref = verl_dapo_loop(stream, rewards_of, train_batch_size=b, max_num_gen_batches=cap)
    except ValueError:
        assert not fills                                              # the planted case is the one intended
        with pytest.raises(SEL.SelectionError, match=r"ds_max_gen_batches=%d" % cap):
            sel.sample(state, None, keys, None)
        return
    assert fills
    kept, num_gen, generated = ref
    s = sel.sample(state, None, keys, None)
    trained = np.asarray(s.train.tokens)[::n, 0]
    np.testing.assert_array_equal(trained, kept)                     # the same B groups, in verl's order
    assert s.metrics["gen_batches"] == num_gen
    assert s.metrics["rollouts_sampled"] == len(generated) * n        # discarded batches counted
    assert s.metrics["tokens_generated"] == sum(n * (1 + t % 3) for t in generated)
    assert int(s.select.pos) == num_gen * gbs                          # the cursor resumes after the last batch
    assert np.asarray(s.train_rewards).shape == (b, n)


@pytest.mark.parametrize("k", [0, 8])
@pytest.mark.parametrize("cap", [0, 3])
def test_dynamic_sampling_on_a_degenerate_pool_stops_with_one_line(k, cap):
    sel, state, keys = _selector(np.full(8, k), select="dynamic_sampling", ds_max_gen_batches=cap)
    with pytest.raises(SEL.SelectionError) as e:
        sel.sample(state, None, keys, None)
    msg = str(e.value)
    assert "\n" not in msg and "ds_max_gen_batches" in msg
    if cap == 0:  # no cap: stopped once a pool's worth of candidates (8 = 2 batches of 4) gave nothing
        assert "the last 8 candidates" in msg
    else:         # verl's cap: after exactly cap generation batches
        assert "after 3 generation batches" in msg


# ---------------------------------------------------------------------- GRESO


def greso_reference(trace, p_easy, p_hard):
    """GRESO's presampling_selector.py on a trace of per-visit mean rewards: P(skip) of the easy
    draw then the hard draw."""
    def easy():
        count = 0
        for r in reversed(trace):
            if r < 0.98:
                break
            count += 1
        return 1 - max(p_easy ** count, 0.01) if trace else 0.0

    def hard():
        if not trace or trace[-1] > 0.11:
            return 0.0
        count = 0
        for r in reversed(trace):
            if r > 0.11:
                break
            count += 1
        return 1 - max(p_hard ** count, 0.01)
    pe, ph = easy(), hard()
    return pe + (1 - pe) * ph


def test_greso_skip_probability_is_the_papers_rule_on_random_traces():
    rng = np.random.default_rng(1)
    n, m = 8, 300
    st = {k: np.array(v) for k, v in SEL.init_state(m, ScheduleConfig())._asdict().items()}
    traces = [[] for _ in range(m)]
    for _ in range(12):
        ids = rng.choice(m, size=100, replace=False)
        k = rng.choice([0, 0, 0, 8, 8, 8, 4], size=100)
        SEL.observe(st, ids, k, n)
        for t, kk in zip(ids, k):
            traces[t].append(kk / n)
    for pe, ph in [(0.5, 0.5), (0.3, 0.8), (0.95, 0.05)]:
        got = SEL.greso_skip_probability(st["streak_easy"], st["streak_hard"], p_easy=pe, p_hard=ph, floor=0.01)
        ref = np.array([greso_reference(tr, pe, ph) for tr in traces])
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
    assert (got > 0).any() and (got == 0).any() and got.max() <= 0.99  # the exploration floor keeps 1%


def test_greso_adapts_its_bases_as_its_trainer_does():
    # ray_trainer.py: share >= target -> p - 0.01 (skip more), else p + 0.01, clipped to [0.05, 0.95]
    assert SEL.greso_adapt(0.5, 0.3, target=0.25 / 3, step=0.01) == pytest.approx(0.49)
    assert SEL.greso_adapt(0.5, 0.0, target=0.25 / 3, step=0.01) == pytest.approx(0.51)
    assert SEL.greso_adapt(0.05, 1.0, target=0.1, step=0.01) == pytest.approx(0.05)
    assert SEL.greso_adapt(0.95, 0.0, target=0.1, step=0.01) == pytest.approx(0.95)


def test_selective_skips_at_the_planted_rate_and_refills_the_batch():
    """A pool whose every task was N/N twice: each candidate is skipped with 1 − 0.5² = 0.75, so
    filling B = 4 takes about 16 candidates and skips about 12 (negative binomial)."""
    m, n, b = 64, 8, 4
    sel, state, keys = _selector(np.full(m, 3), n=n, b=b, select="selective")
    st = {k: np.array(v) for k, v in state.select._asdict().items()}
    st["streak_easy"][:] = 2
    seen, skipped = [], []
    for step in range(200):
        sl = SEL._device(st)
        s = sel.sample(state._replace(step=jnp.asarray(step, jnp.int32), select=sl), None, keys, None)
        seen.append(int(s.select.pos) - int(sl.pos))
        skipped.append(s.metrics["select/skipped_easy"])
        assert np.asarray(s.train_rewards).shape == (b, n)
        assert s.metrics["rollouts_skipped"] == n * skipped[-1]
        st["pos"] = np.asarray(s.select.pos)
    # mean candidates per step: B / (1 - 0.75) = 16; over 200 steps the s.e. is ~0.5
    assert abs(np.mean(seen) - 16) < 2.5 and np.sum(seen) - np.sum(skipped) == 200 * b


# ---------------------------------------------------------------------- SPEED screening


class FakeRollouts:
    """Planted rewards: task t's screening rollouts (group_size = n0) succeed ``scr[t]`` times,
    its completion rollouts (group_size = N − n0) all succeed iff t is even."""

    def __init__(self, scr, n0, n):
        self.scr, self.n0, self.n, self.calls = np.asarray(scr), n0, n, []

    def rollout(self, params, problems, key, *, group_size):
        ids = np.asarray(problems)
        self.calls.append((ids.copy(), group_size))
        if group_size == self.n0:
            r = (np.arange(group_size)[None, :] < self.scr[ids][:, None]).astype(np.float32)
        else:
            r = np.repeat((ids % 2 == 0)[:, None], group_size, 1).astype(np.float32)
        return _episodes(ids, r, group_size)


@pytest.mark.parametrize("n0", [3, 8])
def test_screen_accepts_strictly_intermediate_candidates_and_completes_them_to_n(n0):
    rng = np.random.default_rng(2)
    m, n, b = 32, 8, 4
    scr = rng.integers(0, n0 + 1, size=m)                             # screening successes of n0
    sel, state, keys = _selector(np.zeros(m), n=n, b=b, select="screen", screen_n_init=n0, screen_batch=5)
    fr = FakeRollouts(scr, n0, n)
    s = sel.sample(state, None, keys, fr)
    # reference: SPEED's rule over the candidate stream, rounds of 5, first B accepted
    acc, rounds, pos = [], 0, 0
    while len(acc) < b:
        cand = SEL.stream_ids(5, pos, 5, m)
        pos += 5
        rounds += 1
        acc += [int(t) for t in cand if 0 < scr[t] < n0][: b - len(acc)]
    screened = rounds * 5
    trained = np.asarray(s.train.tokens).reshape(b, n, W)
    np.testing.assert_array_equal(trained[:, 0, 0], acc)
    r = np.asarray(s.train_rewards)
    for g, t in enumerate(acc):                                       # screening rollouts count toward N
        np.testing.assert_array_equal(r[g, :n0], np.arange(n0) < scr[t])
        np.testing.assert_array_equal(r[g, n0:], np.full(n - n0, t % 2 == 0))
        assert (trained[g, :, 0] == t).all()
    rejected = sum(1 for j in range(rounds) for t in SEL.stream_ids(5, 5 * j, 5, m) if not 0 < scr[t] < n0)
    assert s.metrics["gen_batches"] == rounds and s.metrics["select/screened"] == screened
    assert s.metrics["rollouts_skipped"] == rejected * (n - n0)
    assert s.metrics["rollouts_sampled"] == b * n + (screened - b) * n0
    gen = sum(int(np.sum(1 + ids % 3)) * g for ids, g in fr.calls)    # every call's tokens, screening included
    assert s.metrics["tokens_generated"] == gen
    assert [g for _, g in fr.calls] == [n0] * rounds + ([n - n0] if n > n0 else [])


@pytest.mark.parametrize("k", [0, 3])
def test_screen_on_a_degenerate_pool_stops_with_one_line(k):
    sel, state, keys = _selector(np.zeros(8), select="screen", screen_n_init=3, screen_max_rounds=4)
    with pytest.raises(SEL.SelectionError, match="screen_max_rounds=4") as e:
        sel.sample(state, None, keys, FakeRollouts(np.full(8, k), 3, 8))
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------------- predicted


def test_informative_probability_is_the_beta_binomial_mass_of_mixed_groups():
    def beta_binomial(k, n, a, b):  # an independent closed form through log-Gamma
        lb = lambda x, y: math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)  # noqa: E731
        return math.comb(n, k) * math.exp(lb(k + a, n - k + b) - lb(a, b))
    a = np.array([1.0, 0.3, 7.5, 2.0, 40.0])
    b = np.array([1.0, 4.0, 0.6, 2.0, 1.0])
    for n in (2, 8, 16):
        ref = [sum(beta_binomial(k, n, x, y) for k in range(1, n)) for x, y in zip(a, b)]
        np.testing.assert_allclose(SEL.informative_probability(a, b, n), ref, rtol=1e-10)


def test_predicted_takes_the_b_most_informative_tasks_with_a_seeded_tie_break():
    m, n, b = 12, 8, 4
    sel, state, keys = _selector(np.full(m, 4), n=n, b=b, select="predicted", pred_discount=1.0)
    st = {k: np.array(v) for k, v in state.select._asdict().items()}
    st["alpha"][:] = 20.0                                              # visited, easy: P(mixed) small
    st["beta"][:] = 1.0
    st["alpha"][[2, 7]], st["beta"][[2, 7]] = 5.0, 5.0                 # two middling tasks
    s = sel.sample(state._replace(select=SEL._device(st)), None, keys, None)
    ids = np.asarray(s.train.tokens)[::n, 0]
    assert {2, 7} <= set(ids.tolist()) and len(set(ids.tolist())) == b
    again = sel.sample(state._replace(select=SEL._device(st)), None, keys, None)
    np.testing.assert_array_equal(np.asarray(again.train.tokens)[::n, 0], ids)  # deterministic
    # the posterior took the visits (discount 1: plain counts) and k = 4 of 8 each
    np.testing.assert_allclose(np.asarray(s.select.alpha)[ids], st["alpha"][ids] + 4)


def test_predicted_forgets_toward_the_prior():
    sel, state, keys = _selector(np.full(8, 0), select="predicted", pred_discount=0.5)
    st = {k: np.array(v) for k, v in state.select._asdict().items()}
    st["alpha"][:] = 9.0
    s = sel.sample(state._replace(select=SEL._device(st)), None, keys, None)
    a = np.asarray(s.select.alpha)
    visited = np.asarray(s.select.visits) > 0
    np.testing.assert_allclose(a[~visited], 1 + 0.5 * 8)                 # x <- 1 + γ (x − 1)
    np.testing.assert_allclose(a[visited], 1 + 0.5 * 8)                  # k = 0: no success added


# ---------------------------------------------------------------------- oracle (positive control)


def oracle_reference(k, *, r, n, b, tie):
    """The oracle's choice in plain numpy: p̂ = k/R, score = Σ_{0<j<N} Binomial(N, p̂) pmf (summed term by
    term, not the closed form), the B slots of largest score, ties in the seeded order ``tie``."""
    p = np.asarray(k, np.float64) / r
    score = np.array([sum(math.comb(n, j) * q ** j * (1 - q) ** (n - j) for j in range(1, n)) for q in p])
    order = sorted(range(len(k)), key=lambda i: (-round(score[i], 9), tie[i]))
    return np.sort(order[:b]), score


class OracleRollouts:
    """Planted estimation rewards: task t's first ``est[t]`` of R rollouts succeed; records each call."""

    def __init__(self, est):
        self.est, self.calls = np.asarray(est), []

    def rollout(self, params, problems, key, *, group_size):
        ids = np.asarray(problems)
        self.calls.append((ids.copy(), group_size, key))
        r = (np.arange(group_size)[None, :] < self.est[ids][:, None]).astype(np.float32)
        return _episodes(ids, r, group_size)


@pytest.mark.parametrize("c,r", [(16, 8), (4, 4), (24, 16)])
def test_oracle_trains_the_b_candidates_a_numpy_reference_picks_and_leaves_its_cost_out(c, r):
    rng = np.random.default_rng(7)
    m, n, b = 32, 8, 4
    est = rng.integers(0, r + 1, size=m)                              # planted: ties and 0/R, R/R included
    ks = rng.integers(0, n + 1, size=m)                               # the trained groups' k (FakeSchedule)
    sel, state, keys = _selector(ks, n=n, b=b, select="oracle", oracle_candidates=c, oracle_rollouts=r)
    fr = OracleRollouts(est)
    s = sel.sample(state, None, keys, fr)
    cand = SEL.stream_ids(5, 0, c, m)
    tie = np.random.default_rng([5, 3, 0x5E1EC7]).permutation(c)      # the selector's seeded stream, step 3
    pick, score = oracle_reference(est[cand], r=r, n=n, b=b, tie=tie)
    ids = np.sort(cand[pick])
    np.testing.assert_array_equal(np.asarray(s.train.tokens)[::n, 0], ids)
    assert len(fr.calls) == 1 and fr.calls[0][1] == r
    np.testing.assert_array_equal(fr.calls[0][0], cand)
    for used in keys:                                                 # its own key, none of the step's
        assert not np.array_equal(np.asarray(fr.calls[0][2]), np.asarray(used))
    # the ledger is the B trained groups' (as uniform's / the schedule's accounting); the oracle's cost apart
    assert s.metrics["rollouts_sampled"] == b * n
    assert s.metrics["tokens_generated"] == sum(n * (1 + t % 3) for t in ids)
    assert s.metrics["oracle/rollouts"] == c * r
    assert s.metrics["oracle/tokens"] == sum(r * (1 + t % 3) for t in cand)
    assert s.metrics["select/oracle_mean_score"] == pytest.approx(score[pick].mean(), abs=1e-12)
    assert s.metrics["select/oracle_p_hat_mixed"] == np.mean((est[cand][pick] > 0) & (est[cand][pick] < r))
    assert int(s.select.pos) == c and np.asarray(s.select.visits)[ids].sum() == b


def test_oracle_on_the_trainer_picks_by_its_estimates_and_its_ledger_is_the_schedules_for_those_tasks():
    """Real rollouts of the tiny arith model: the estimation rollouts re-drawn here with the oracle's key, the
    choice re-made in numpy, and the schedule sampled on those ids gives the logged ledger and k histogram."""
    m, n, b, c, r = 16, 8, 4, 8, 4
    rl = RLConfig(tasks_per_step=b, group_size=n, eval=EvalConfig(count=4, samples=1),
                  schedule=ScheduleConfig(select="oracle", pool_size=m, oracle_candidates=c, oracle_rollouts=r))
    tr = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="baseline", n=n), seed=2)
    state = tr.init_state(warm_params())
    got = tr.collect(state).metrics
    keys, policy = tr.step_keys(0), tr.sampling_params(state.params)
    cand = SEL.stream_ids(2, 0, c, m)
    ep = tr.rollouts.rollout(policy, TASK.take(tr.schedule.pool, cand), jax.random.fold_in(keys.sample, SEL.ORACLE_KEY),
                             group_size=r)
    k = (np.asarray(ep.rewards).reshape(c, r) >= 1).sum(1)
    assert 0 < k.sum() < c * r                                       # the estimates are not all alike
    pick, _ = oracle_reference(k, r=r, n=n, b=b, tie=np.random.default_rng([2, 0, 0x5E1EC7]).permutation(c))
    ref = tr.schedule.sample(state, policy, keys, tr.rollouts, ids=np.sort(cand[pick]))
    assert got["tokens_generated"] == ref.metrics["tokens_generated"] > 0
    assert got["rollouts_sampled"] == ref.metrics["rollouts_sampled"] == b * n
    assert got["k_hist"] == np.bincount(np.asarray(ref.k), minlength=n + 1).tolist()
    assert got["oracle/rollouts"] == c * r and got["oracle/tokens"] == int(np.asarray(ep.policy_mask).sum())


@pytest.mark.parametrize("kind", ["same_step", "next_visit"])
def test_oracle_composes_with_prefix_sampling_under_both_schedule_kinds(kind):
    rl = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=4, samples=1),
                  schedule=ScheduleConfig(kind=kind, select="oracle", pool_size=8, oracle_candidates=8,
                                          oracle_rollouts=4))
    tr = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="ps_ada", n=8), seed=1)
    state = tr.init_state(warm_params())
    for step in range(2):
        state, m = tr.step(state)
        assert np.isfinite(m["loss/loss"]) and m["oracle/rollouts"] == 32 and m["oracle/tokens"] > 0
        assert m["rollouts_sampled"] == 32 + 8 * m["groups_rerolled"]       # the trained groups and PS's re-rolls
        assert 0 <= m["select/oracle_p_hat_mixed"] <= 1 and 0 <= m["select/oracle_mean_score"] <= 1
    assert int(state.select.pos) == 16


# ---------------------------------------------------------------------- configuration


@pytest.mark.parametrize("kw,match", [
    (dict(select="greso"), r"schedule\.select.*choose from"),
    (dict(select="screen", greso_p_easy=0.3), r"schedule\.greso_p_easy.*select=selective"),
    (dict(ds_max_gen_batches=3), r"schedule\.ds_max_gen_batches.*select=dynamic_sampling, not of select='uniform'"),
    (dict(select="dynamic_sampling", ds_max_gen_batches=-1), r"schedule\.ds_max_gen_batches.*int >= 0"),
    (dict(select="dynamic_sampling", ds_gen_batch_size=0), r"schedule\.ds_gen_batch_size.*int >= 1"),
    (dict(select="selective", greso_floor=1.5), r"schedule\.greso_floor.*\[0, 1\]"),
    (dict(select="predicted", pred_discount=0.0), r"schedule\.pred_discount.*\(0, 1\]"),
    (dict(select="screen", screen_n_init=1), r"schedule\.screen_n_init.*int >= 2"),
    (dict(select="screen", kind="next_visit"), r"select='screen'.*kind='same_step'"),
    (dict(oracle_rollouts=8), r"schedule\.oracle_rollouts.*select=oracle, not of select='uniform'"),
    (dict(select="predicted", oracle_candidates=8), r"schedule\.oracle_candidates.*select=oracle"),
    (dict(select="oracle", oracle_rollouts=0), r"schedule\.oracle_rollouts.*int >= 1"),
    (dict(select="oracle", oracle_candidates=2.5), r"schedule\.oracle_candidates.*int >= 1"),
])
def test_bad_selector_settings_fail_with_one_line(kw, match):
    with pytest.raises(ValueError, match=match) as e:
        ScheduleConfig(**kw)
    assert "\n" not in str(e.value)


def test_a_pool_smaller_than_the_batch_n_init_above_n_and_oracle_candidates_below_b_are_refused():
    with pytest.raises(ValueError, match=r"schedule\.pool_size.*smaller than the batch tasks_per_step=8"):
        RLConfig(tasks_per_step=8, group_size=4, schedule=ScheduleConfig(select="predicted", pool_size=6))
    with pytest.raises(ValueError, match=r"screen_n_init=6.*group_size=4"):
        RLConfig(tasks_per_step=2, group_size=4, schedule=ScheduleConfig(select="screen", screen_n_init=6))
    with pytest.raises(ValueError, match=r"schedule\.oracle_candidates.*tasks_per_step=4.*oracle_candidates >= 4") as e:
        RLConfig(tasks_per_step=4, group_size=4, schedule=ScheduleConfig(select="oracle", oracle_candidates=3))
    assert "\n" not in str(e.value)


def test_the_default_selector_keeps_the_train_state_and_checkpoint_as_they_were():
    tr = Trainer(TASK, MODEL, RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=4, samples=1)),
                 ps.PrefixConfig(mode="ps_ada", n=8), seed=0)
    state = tr.init_state(warm_params())
    assert tr.selector is None and state.select is None
    assert sorted(checkpoint_tree(state)) == ["memory", "opt_state", "params", "prefix", "step"]


# ---------------------------------------------------------------------- through the trainer


def test_dynamic_sampling_with_prefix_sampling_composes_through_hydra_and_runs_two_steps(tmp_path):
    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build

    conf = str(pathlib.Path(__file__).resolve().parents[2] / "conf")
    with initialize_config_dir(config_dir=conf, version_base=None):
        cfg = validate(compose("config", overrides=[
            "method=ps_ada", "schedule.select=dynamic_sampling", "schedule.ds_max_gen_batches=6",
            "task.params.min_terms=2", "task.params.max_terms=4", "algo.tasks_per_step=4", "schedule.pool_size=8",
            "eval.count=16", f"sft.base_dir={tmp_path}"]))
    _, _, rl, prefix, _ = build(cfg)
    assert rl.schedule.select == "dynamic_sampling" and rl.schedule.ds_max_gen_batches == 6 and prefix.mode == "ps_ada"
    tr = Trainer(TASK, MODEL, rl, prefix, seed=3)
    state = tr.init_state(warm_params())
    for _ in range(2):
        state, m = tr.step(state)
        assert np.isfinite(m["loss/loss"])
        assert m["groups_contrast"] == m["groups_kept"] == 4            # DS trains B groups with contrast
        assert m["tokens_generated"] >= m["tokens_trained"] > 0 and m["gen_batches"] >= 1
    assert int(state.select.pos) > 0


@pytest.mark.slow
@pytest.mark.parametrize("select", ["dynamic_sampling", "predicted", "selective", "screen", "oracle"])
def test_a_killed_selector_run_resumes_exactly(tmp_path, select):
    from prs.rl.runner import RunConfig, run

    common = dict(seed=3, eval_every=2, ckpt_every=2, sft_steps=60, sft_batch=32, sft_lr=3e-3,
                  base_dir=str(tmp_path / "base"), wandb_mode="disabled", progress=False)
    rl = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=16, samples=1),
                  schedule=ScheduleConfig(select=select, pool_size=8,
                                          **({"screen_max_rounds": 100} if select == "screen" else {}),
                                          **({"oracle_candidates": 6, "oracle_rollouts": 4}
                                             if select == "oracle" else {})))
    prefix = ps.PrefixConfig(mode="ps_ada", n=8)  # screen: this policy's pass rate is low, 10 rounds may not fill
    full, part = tmp_path / "full", tmp_path / "part"
    run(TASK, MODEL, rl, prefix, RunConfig(steps=4, **common), full, log=lambda *a: None)
    run(TASK, MODEL, rl, prefix, RunConfig(steps=2, **common), part, log=lambda *a: None)  # "killed" at 2
    s = run(TASK, MODEL, rl, prefix, RunConfig(steps=4, **common), part, log=lambda *a: None)
    assert s["resumed_from_step"] == 2
    strip = lambda d: [{k: v for k, v in json.loads(x).items() if not k.startswith("time_")}  # noqa: E731
                       for x in (d / "metrics.jsonl").read_text().splitlines()]
    a, b = strip(full), strip(part)
    assert a == b
    train = [m for m in a if m["kind"] == "train"]
    if select != "predicted":  # the resumed steps used the restored cursor (a fresh one restarts at 0)
        assert train[2]["select/pos"] > train[1]["select/pos"]
    else:                             # ... the restored posteriors (a fresh state has all 8 tasks unvisited)
        assert train[2]["select/unvisited"] < 8 - 4
    summary = json.loads((full / "summary.json").read_text())
    assert summary["tokens_trained_total"] == sum(m["tokens_trained"] for m in train) > 0
    assert summary["groups_contrast_total"] == sum(m["groups_contrast"] for m in train)
    if select == "oracle":  # the estimation rollouts stay out of the summed ledger: B·N plus PS's re-rolls
        assert all(m["oracle/rollouts"] == 6 * 4 for m in train)
        assert summary["rollouts_sampled_total"] == sum(4 * 8 + 8 * m["groups_rerolled"] for m in train)


@pytest.mark.slow
def test_dynamic_sampling_ledger_matches_the_theorys_refill_prediction():
    """Issue 46 item 3: ``theory.controls.dynamic_sampling`` (E[T] = Σ_{j<C} P(Bin(jG, s̄) < B), rollouts
    N·G·E[T]) against the training run's logged ledger. The pool is the run's own fresh-group k histogram
    (``k_hist``, every generated group, pooled over S seeds, fitted as ``python -m theory controls --hist`` does: by Wald's identity its informative share is a
    consistent estimate of s̄ despite the stopping rule); the tolerance is 3 standard errors of the mean of T
    from the theory's own law of T (P(T > j) = P(K_j < B)) plus the s̄ estimate's binomial error propagated
    through E[T]. The run's stream draws the pool without replacement; the theory draws iid."""
    from theory import controls as TC

    b, n, seeds = 4, 8, 8
    rl = RLConfig(tasks_per_step=b, group_size=n, eval=EvalConfig(count=4, samples=1),
                  schedule=ScheduleConfig(select="dynamic_sampling", pool_size=256, ds_max_gen_batches=0))
    cap = 256 // b  # no cap in the run (a cap would raise); the theory's C = one pool of candidates, past
    #                 which the run would stop too
    batches, rollouts, hist = [], [], np.zeros(n + 1)
    for seed in range(seeds):
        tr = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="baseline", n=n), seed=seed)
        _, m = tr.step(tr.init_state(warm_params()))
        batches.append(m["gen_batches"])
        rollouts.append(m["rollouts_sampled"])
        hist += np.asarray(m["k_hist"])
        assert m["rollouts_sampled"] == m["gen_batches"] * b * n == m["groups_generated"] * n
    assert hist.sum() == b * sum(batches)

    def theory(h):
        return TC.dynamic_sampling(TC.hist_pool(h / h.sum())[0], n=n, groups=b, gen_groups=b, max_batches=cap)
    th = theory(hist)
    e_t = th.extra["expected_batches"]
    s = th.extra["informative_prob"]
    se_s = math.sqrt(s * (1 - s) / hist.sum())
    assert abs(s - hist[1:n].sum() / hist.sum()) < 3 * se_s            # the CLI's --hist Beta fit keeps the share
    gt = np.array([TC.stats.binom.cdf(b - 1, j * b, s) for j in range(cap)])  # P(T > j), j < C
    var_t = float(np.sum((2 * np.arange(cap) + 1) * gt) - e_t ** 2)
    h_hi = hist.copy(); h_hi[1] += se_s * hist.sum(); h_hi[0] -= se_s * hist.sum()  # noqa: E702
    slope = abs(theory(h_hi).extra["expected_batches"] - e_t) / se_s
    tol = 3 * math.sqrt(var_t / seeds) + 3 * slope * se_s
    assert 0 < s < 1 and var_t > 0
    assert abs(np.mean(batches) - e_t) < tol, (batches, e_t, tol)
    np.testing.assert_allclose(th.rollouts, n * b * e_t)
    assert abs(np.mean(rollouts) - th.rollouts) < n * b * tol
