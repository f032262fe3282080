"""The ``next_visit`` schedule, its task memory, cut spreading, and the controls (``prs.rl.schedule``).
Tiny shapes: the arith task of tests/rl/test_trainer.py and a short warm start."""
from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.models.qwen3 import ModelConfig, init_params
from prs.rl import schedule as S
from prs.rl.episodes import take_rows
from prs.rl.runner import RunConfig, run
from prs.rl.trainer import RLConfig, Trainer
from prs.rl.config import EvalConfig, LossConfig, OptimConfig, RolloutConfig, ScheduleConfig

from tests._arith_tiny import MODEL, TASK, warm_params  # noqa: E402
NV = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=16, samples=1),
              schedule=ScheduleConfig(kind="next_visit", pool_size=8),
              loss=LossConfig(drop_no_contrast=False))  # every group in the loss: the masks are what is tested
WIDE = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)  # steer almost every mixed group


@pytest.fixture(scope="module")
def base_params():
    return warm_params()


def _run_steps(trainer, state, steps):
    """-> list of (memory before, batch, metrics, sources) per step, and the final state; the
    params before each step in ``trainer.params_at``."""
    out = []
    for _ in range(steps):
        before = jax.tree.map(np.asarray, state.memory)
        trainer.params_at = getattr(trainer, "params_at", []) + [jax.tree.map(np.array, state.params)]
        c = trainer.collect(state)
        batch, m, src = c.batch, c.metrics, c.sources
        out.append((before, batch, m, src))
        state, _ = trainer.step(state)
    return out, state


# ---------------------------------------------------------------------- pure pieces


def test_pool_order_visits_every_task_once_per_epoch_and_is_seeded():
    m, b = 12, 4
    for seed in (0, 1):
        seen = np.concatenate([S.pool_ids(seed, s, b, m) for s in range(3 * m // b)]).reshape(3, m)
        for e in range(3):  # an independent reference: the permutation of epoch e
            np.testing.assert_array_equal(seen[e], np.random.default_rng([seed, e, 0x9E57]).permutation(m))
            assert sorted(seen[e]) == list(range(m))
        assert not np.array_equal(seen[0], seen[1])  # epochs differ in order
    assert not np.array_equal(S.pool_ids(0, 0, b, m), S.pool_ids(1, 0, b, m))


@pytest.mark.parametrize("rho", [0.2, 0.5, 0.8])
def test_cut_spread_gives_n_distinct_cuts_when_the_source_is_long_enough(rho):
    n, L = 8, 40
    cut = ps.cuts_from_fractions(S.cut_fractions(np.array([rho]), n, spread=True), np.full((1, n), L))[0]
    lo, hi = rho / 2, min(1.0, 1.5 * rho)
    want = np.clip(np.round(np.array([lo + (hi - lo) * i / (n - 1) for i in range(n)]) * L), 1, L - 1)
    np.testing.assert_array_equal(cut, want)
    assert len(set(cut.tolist())) == n and cut.min() >= 1 and cut.max() <= L - 1
    same = ps.cuts_from_fractions(S.cut_fractions(np.array([rho]), n, spread=False), np.full((1, n), L))[0]
    assert set(same.tolist()) == {int(np.clip(np.round(np.float32(rho) * L), 1, L - 1))}
    # a source too short to cut gives 0 (the task is not steered)
    assert ps.cuts_from_fractions(np.full((1, 2), rho), np.array([[1, 0]])).tolist() == [[0, 0]]


def test_next_visit_and_same_step_cut_at_the_same_points():
    """One cut rule: an unspread next visit (``steer_cuts``) cuts where ``prefix.cut_points`` cuts
    on the same ρ table, buckets and source lengths, and both equal the rule written out in numpy."""
    rng = np.random.default_rng(0)
    b, n, K = 64, 4, 3
    rho = rng.uniform(0.05, 0.95, K).astype(np.float32)
    rho[0] = 0.5                                                           # round-half-to-even cases
    state = ps.PrefixState(rho=jnp.asarray(rho), ema=jnp.zeros((K,), jnp.float32), count=jnp.zeros((K,), jnp.int32))
    bucket = rng.integers(-1, K, b).astype(np.int32)                       # -1: not steered
    lens = rng.integers(0, 40, b).astype(np.int32)
    bucket[:6], lens[:6] = 0, [0, 1, 2, 3, 5, 7]                           # too short; rho 0.5 * odd L: x.5
    same = np.asarray(ps.cut_points(state, jnp.asarray(bucket), jnp.asarray(lens), ps.PrefixConfig(mode="ps_ada", n=n)))
    nxt = S.steer_cuts(rho, bucket, np.repeat(lens[:, None], n, axis=1), spread=False)  # [B, N]
    assert (nxt == nxt[:, :1]).all()                                       # unspread: one cut per task
    steered = bucket >= 0
    np.testing.assert_array_equal(nxt[steered, 0], same[steered])
    assert (same[~steered] == 0).all()
    f = rho[np.where(steered, bucket, 0)]                                  # independent reference
    ref = np.where(lens >= 2, np.clip(np.round(f * lens.astype(np.float32)), 1, np.maximum(lens - 1, 1)), 0)
    np.testing.assert_array_equal(nxt[:, 0], ref)
    assert same[:6].tolist() == [0, 0, 1, 2, 2, 4]                         # half to even: 1.5 -> 2, 2.5 -> 2, 3.5 -> 4


@pytest.mark.parametrize("kw, match", [
    (lambda: dict(schedule=ScheduleConfig(kind="later")), "schedule"), (lambda: dict(schedule=ScheduleConfig(sources="two")), "sources"), (lambda: dict(schedule=ScheduleConfig(control="x")), "control"),
    (lambda: dict(schedule=ScheduleConfig(kind="next_visit", pool_size=10)), "pool_size"), (lambda: dict(schedule=ScheduleConfig(extra_share=1.5)), "extra_share"),
    (lambda: dict(optim=OptimConfig(lr_scale=0.0)), "lr_scale"), (lambda: dict(schedule=ScheduleConfig(control="extra_rollouts")), "append"),
    (lambda: dict(schedule=ScheduleConfig(kind="next_visit", reroll="append")), "append")])
def test_bad_schedule_values_fail_clearly(kw, match):
    with pytest.raises(ValueError, match=match):
        RLConfig(tasks_per_step=4, **kw())


def test_schedule_keys_that_would_not_act_are_refused_and_their_defaults_pass():
    """Issue 45, item 4: ``cut_spread`` and ``sources`` act with ``kind='next_visit'`` only, and
    ``reroll_fallback=False`` with ``same_step`` + ``replace`` only; a changed value elsewhere was read by
    nothing. Now it is one line naming the key and the allowed value; the defaults (what every preset
    leaves there) still validate."""
    for kw, key in ((dict(cut_spread=True), "cut_spread"), (dict(sources="all"), "sources")):
        with pytest.raises(ValueError, match=rf"^ScheduleConfig.{key}=.* \(schedule.{key}\) acts with kind='next_visit' "
                                             rf"only; with kind='same_step' allowed {key}="):
            ScheduleConfig(**kw)
        ScheduleConfig(kind="next_visit", **kw)
    for kw in (dict(reroll="append"), dict(kind="next_visit")):
        with pytest.raises(ValueError, match=r"^ScheduleConfig.reroll_fallback=False \(schedule.reroll_fallback\) acts "
                                             r"with kind='same_step' and reroll='replace' only.*allowed reroll_fallback=True$"):
            ScheduleConfig(reroll_fallback=False, **kw)
        ScheduleConfig(**kw)
    ScheduleConfig(reroll_fallback=False)
    for kw in (dict(), dict(reroll="append"), dict(control="extra_rollouts", reroll="append"), dict(kind="next_visit")):
        RLConfig(tasks_per_step=4, schedule=ScheduleConfig(**kw))


# ---------------------------------------------------------------------- next_visit through the trainer


@pytest.fixture(scope="module")
def nv_run(base_params):
    """6 next_visit steps (3 epochs of an 8-task pool, B = 4) with almost every mixed group steered."""
    tr = Trainer(TASK, MODEL, NV, WIDE, seed=3)
    recs, _ = _run_steps(tr, tr.init_state(base_params), 6)
    return tr, recs


def test_a_tasks_stored_source_is_the_one_used_at_its_next_visit(nv_run):
    tr, recs = nv_run
    R, L = 32, tr.width
    generated = {}  # global rollout id -> tokens, from every step's batch
    n_checked = 0
    for s, (mem, batch, m, src) in enumerate(recs):
        assert (src["ids"] == S.pool_ids(3, s, 4, 8)).all()
        tokens = np.asarray(batch.tokens)
        plen = np.asarray(TASK.take(tr.schedule.pool, src["ids"]).prompt_len)
        for g in np.nonzero(src["steered"])[0]:
            t = src["ids"][g]
            for i in range(8):
                sid = src["source_ids"][g, i]
                slot = int(np.nonzero(mem.src_id[t] == sid)[0][0])         # it is in the task's memory
                assert mem.src_success[t, slot] == (mem.plan[t] < WIDE.hard_max_k)  # success for hard
                assert sid // R < s and sid in generated                   # a rollout of an earlier visit
                c = plen[g] + src["cut"][g, i]
                np.testing.assert_array_equal(tokens[g * 8 + i, :c], generated[sid][:c])  # verbatim prefix
                np.testing.assert_array_equal(mem.src_tokens[t, slot], generated[sid])
                n_checked += 1
        for r in range(R):
            generated[s * R + r] = tokens[r]
    assert n_checked > 0
    assert all(m["rollouts_sampled"] == 32 for _, _, m, _ in recs)


def test_next_visit_never_samples_more_than_the_baseline(base_params, nv_run):
    tr, recs = nv_run
    base = Trainer(TASK, MODEL, NV, dataclasses.replace(WIDE, mode="baseline"), seed=3)
    brecs, _ = _run_steps(base, base.init_state(base_params), 6)
    t_new = tr.rollouts.scfg.max_new_tokens
    for (_, batch, m, src), (_, _, bm, _) in zip(recs, brecs):
        assert m["rollouts_sampled"] == bm["rollouts_sampled"] == 32         # no extra rollouts
        # every row generated at most its budget T - cut (a replayed prefix shares the budget)
        assert (src["generated"] <= t_new - src["cut"].reshape(-1)).all()
        assert m["tokens_replayed"] == int(src["cut"].sum())
    assert sum(m["groups_steered"] for _, _, m, _ in recs) > 0
    ps_tokens = sum(m["tokens_generated"] for _, _, m, _ in recs)
    bl_tokens = sum(m["tokens_generated"] for _, _, m, _ in brecs)
    assert ps_tokens <= bl_tokens, (ps_tokens, bl_tokens)
    assert max(m["tokens_generated"] for _, _, m, _ in recs) <= 32 * t_new


def test_next_visit_replayed_prefix_is_verbatim_with_zero_loss_mask_and_zero_gradient(nv_run, base_params):
    """Prefix masking at the next visit: the per-token gradient (advantages forced to 1) is non-zero
    exactly on the loss tokens, which are the generated ones, never the replayed prefix."""
    tr, recs = nv_run
    s = next(i for i, r in enumerate(recs) if r[3]["steered"].any())
    mem, batch, m, src = recs[s]
    params = jax.tree.map(jnp.asarray, tr.params_at[s])  # the sampling params: ratio 1, nothing clipped
    batch = batch._replace(advantages=jnp.ones_like(batch.advantages))
    mask, valid = np.asarray(batch.loss_mask), np.asarray(batch.valid)
    plen = np.asarray(TASK.take(tr.schedule.pool, src["ids"]).prompt_len)
    offset = jnp.zeros(batch.tokens[:, 1:].shape, jnp.float32)
    g = np.asarray(jax.grad(lambda o: tr.loss(params, batch, logp_offset=o))(offset))  # [R, L-1]
    np.testing.assert_array_equal(g != 0, mask[:, 1:])
    np.testing.assert_array_equal(mask.sum(1), src["generated"])            # loss tokens = generated ones
    rows = [gi * 8 + i for gi in np.nonzero(src["steered"])[0] for i in range(8)]
    for r in rows:
        c = int(src["cut"].reshape(-1)[r])
        pre = slice(plen[r // 8], plen[r // 8] + c)
        assert c >= 1 and not mask[r, pre].any() and valid[r, pre].all()
        assert np.all(g[r, plen[r // 8] - 1: plen[r // 8] + c - 1] == 0.0)
        assert mask[r, plen[r // 8] + c]                                    # the continuation starts right after


@pytest.mark.slow
def test_resume_after_a_kill_equals_the_uninterrupted_run_with_the_task_memory(tmp_path, base_params):
    common = dict(seed=3, eval_every=3, ckpt_every=2, sft_steps=60, sft_batch=32, sft_lr=3e-3,
                  base_dir=str(tmp_path / "base"), wandb_mode="disabled", progress=False)
    rl = dataclasses.replace(NV, schedule=dataclasses.replace(NV.schedule, pool_size=4))  # an epoch per step: every step after the first revisits
    full, part = tmp_path / "full", tmp_path / "part"
    run(TASK, MODEL, rl, WIDE, RunConfig(steps=5, **common), full, log=lambda *a: None)
    run(TASK, MODEL, rl, WIDE, RunConfig(steps=2, **common), part, log=lambda *a: None)  # "killed" at 2
    s = run(TASK, MODEL, rl, WIDE, RunConfig(steps=5, **common), part, log=lambda *a: None)
    assert s["resumed_from_step"] == 2
    strip = lambda d: [{k: v for k, v in json.loads(x).items() if not k.startswith("time_")}
                       for x in (d / "metrics.jsonl").read_text().splitlines()]
    a, b = strip(full), strip(part)
    assert a == b
    # the resumed steps did depend on the restored memory (a fresh memory would steer nothing)
    assert sum(m.get("groups_planned", 0) for m in a if m["kind"] == "train" and m["step"] >= 2) > 0


# ---------------------------------------------------------------------- the agent task


def test_next_visit_on_the_agent_task_replays_the_stored_actions_through_execution():
    from prs.tasks import repair as R
    from prs.tasks.agent_rollouts import action_spans
    from prs.tasks.repair_task import RepairTask

    task = RepairTask(R.RepairConfig(n_lines=4, min_bugs=1, max_bugs=2, max_turns=4, report_max=2))
    model = ModelConfig.preset("tiny", vocab_size=len(R.TOKENS))
    rl = RLConfig(tasks_per_step=3, group_size=4, eval=EvalConfig(count=4, samples=1), schedule=ScheduleConfig(kind="next_visit", pool_size=6, cut_spread=True))
    tr = Trainer(task, model, rl, ps.PrefixConfig(mode="ps_fix", n=4, hard_max=1, easy_min=3), seed=0)
    state = tr.init_state(init_params(model, jax.random.PRNGKey(0)))
    tok, mask = task.demonstrations(tr.schedule.pool, seed=1)  # stored "successes" with several turns
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
    c = tr.collect(state._replace(memory=mem))
    batch, m = c.batch, c.metrics
    src = c.sources
    assert src["steered"].all() and m["rollouts_sampled"] == 12 and m["tokens_replayed"] > 0
    # fixed shapes: the agent's fresh call also ran the 3 steered tasks; their rows are discarded
    assert m["rollouts_wasted"] == 12 and m["tokens_sampled"] > m["tokens_generated"]
    bm = np.asarray(batch.tokens)
    for r in range(12):
        g, t = r // 4, src["ids"][r // 4]
        assert src["source_ids"][g, r % 4] == 2 * t                          # slot 0 of task t
        c = int(src["cut"][g, r % 4])
        spans = action_spans(mask[t])
        # the rebuilt context = prompt a_1 o_1 … a_c o_c of the source (deterministic environment)
        end = spans[c][0]                                                   # where the source's turn c+1 began
        np.testing.assert_array_equal(bm[r, :end], tok[t, :end])
        assert not np.asarray(batch.loss_mask)[r, :end].any()               # replayed: no loss
    assert (src["cut"] >= 1).all()


# ---------------------------------------------------------------------- controls through Hydra


@pytest.mark.parametrize("method", ["reroll_noprefix", "extra_rollouts", "baseline_lr2"])
@pytest.mark.parametrize("schedule", ["same_step", "next_visit"])
def test_each_control_composes_through_hydra_and_runs_two_steps(method, schedule, base_params, tmp_path):
    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build

    conf = str(pathlib.Path(__file__).resolve().parents[2] / "conf")
    with initialize_config_dir(config_dir=conf, version_base=None):
        cfg = validate(compose("config", overrides=[
            f"method={method}", f"schedule.kind={schedule}", "task.params.min_terms=2", "task.params.max_terms=4",
            "algo.tasks_per_step=4", "schedule.pool_size=4", "eval.count=16", f"sft.base_dir={tmp_path}"]))
    _, _, rl, prefix, _ = build(cfg)
    assert rl.schedule.kind == schedule and prefix.mode == {"baseline_lr2": "baseline"}.get(method, "ps_ada")
    assert rl.schedule.control == {"reroll_noprefix": "reroll_noprefix", "extra_rollouts": "extra_rollouts"}.get(method, "none")
    tr = Trainer(TASK, MODEL, rl, prefix, seed=3)  # the test's task and model: shapes compiled already
    state = tr.init_state(base_params)
    ms = []
    for _ in range(2):
        state, m = tr.step(state)
        ms.append(m)
        assert np.isfinite(m["loss/loss"]) and m["tokens_replayed"] == 0  # no control replays a prefix
    if method == "extra_rollouts":
        extra = "groups_extra" if schedule == "next_visit" else "groups_rerolled"
        assert all(m["rollouts_sampled"] == 32 + 8 * m[extra] for m in ms)
    if method == "baseline_lr2":  # the same batch: Adam's first step moves a coordinate by about lr_eff
        half = Trainer(TASK, MODEL, dataclasses.replace(rl, optim=dataclasses.replace(rl.optim, lr_scale=1.0)), prefix, seed=3)
        st = half.init_state(base_params)
        for _ in range(4):
            c = half.collect(st)
            batch, m = c.batch, c.metrics
            if m["groups_kept"]:
                break
            st, _ = half.step(st)
        assert m["groups_kept"]
        moved = []
        for t in (half, tr):
            s0 = t.init_state(base_params)
            p, _, _ = t._update(s0.params, s0.opt_state, batch)
            moved.append(max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(base_params))))
        assert moved[1] == pytest.approx(2 * moved[0], rel=1e-3) and moved[0] == pytest.approx(rl.optim.lr, rel=1e-2)


def test_next_visit_logs_the_steered_groups_per_bucket_beside_their_rate(nv_run):
    """bucket/<k>/steered = groups steered with bucket k's prefix (plan == k), the ones its
    reroll_pass_rate averages; bucket/<k>/count is this step's k and may differ."""
    tr, recs = nv_run
    n_diff = 0
    for mem, batch, m, src in recs:
        plan = mem.plan[src["ids"]]
        for j, kb in enumerate(ps.bucket_ks(WIDE)):
            in_b = src["steered"] & (plan == j)
            assert m[f"bucket/{kb}/steered"] == int(in_b.sum())
            assert (m[f"bucket/{kb}/reroll_pass_rate"] is None) == (not in_b.any())
            n_diff += m[f"bucket/{kb}/steered"] != m[f"bucket/{kb}/count"]
    assert n_diff > 0  # the two counts differ on this run: count was the wrong weight


# ---------------------------------------------------------------------- re-roll calls bucketed by steered groups


def test_reroll_groups_pads_to_b_or_to_a_power_of_two_bucket():
    b = 8
    for g in range(1, b + 1):
        sel = np.arange(b)[::-1][:g].copy()                                   # any g distinct groups
        full = S.reroll_groups(sel, b, bucketed=False)
        bucket = S.reroll_groups(sel, b, bucketed=True)
        want = min(b, 2 ** int(np.ceil(np.log2(g))))                         # 1, 2, 4, 4, 8, 8, 8, 8
        assert full.size == b and bucket.size == want
        np.testing.assert_array_equal(bucket[:g], sel)
        assert (bucket[g:] == sel[0]).all() and (full[g:] == sel[0]).all()
    assert S.reroll_groups(np.arange(3), 6, bucketed=True).size == 4
    assert S.reroll_groups(np.arange(5), 6, bucketed=True).size == 6        # capped at B


def test_bucketed_reroll_calls_compile_once_per_bucket_and_sample_the_unbucketed_tokens(base_params):
    """A re-roll call padded to the power-of-two bucket of g steered groups samples, for those g
    groups, exactly the tokens and rewards of the call padded to all B groups (per-row key streams),
    and g = 1..B compiles the sampler once per bucket (4 shapes for B = 8), nothing on a second pass."""
    from tests.rl.test_trainer_compiles import count_compiles

    b, n = 8, 4
    rl = RLConfig(tasks_per_step=b, group_size=n, eval=EvalConfig(count=8, samples=1))
    tr = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="ps_fix", n=n, hard_max=1, easy_min=3), seed=0)
    keys = tr.step_keys(0)
    problems = TASK.train_problems(seed=0, step=0, count=b)
    ep = tr.rollouts.rollout(base_params, problems, keys.sample, group_size=n)         # sources
    src_row = np.arange(b) * n
    cut = np.maximum(np.asarray(ep.units)[src_row] // 2, 1)                             # [B]

    def call(pick):
        return tr.rollouts.reroll(base_params, TASK.take(problems, pick), take_rows(ep, src_row[pick]), cut[pick],
                                  keys.reroll, group_size=n)

    P, PT = tr.rollouts.scfg.buckets                                                     # prompt-width buckets
    plen = np.asarray(TASK.prompts(problems)[1])
    picks = [S.reroll_groups(np.arange(b)[:g], b, bucketed=True) for g in range(1, b + 1)]
    shapes = [(p.size, P if int((plen[p] + cut[p]).max()) <= P else PT) for p in picks]  # (groups, width bucket)
    jax.clear_caches()                                                                    # earlier tests' programs
    with count_compiles() as names:
        got = [call(p) for p in picks]
    assert {p.size for p in picks} == {1, 2, 4, 8}
    assert names["jit(sample_jit)"] == len(set(shapes))                                  # one compile per shape
    with count_compiles() as again:
        for p in picks:
            call(p)
    assert not again["jit(sample_jit)"]
    for g in range(1, b + 1):
        ref = call(S.reroll_groups(np.arange(b)[:g], b, bucketed=False))                # padded to B groups
        rows = slice(0, g * n)
        for f in ("tokens", "policy_mask", "rewards", "replayed"):
            np.testing.assert_array_equal(np.asarray(getattr(got[g - 1], f))[rows], np.asarray(getattr(ref, f))[rows],
                                          err_msg=f"{f}, g={g}")
        np.testing.assert_allclose(np.asarray(got[g - 1].logprobs)[rows], np.asarray(ref.logprobs)[rows], atol=1e-5)


@pytest.mark.parametrize("kw", [
    pytest.param(dict(), id="replace"),
    pytest.param(dict(schedule=ScheduleConfig(reroll="append")), id="append", marks=pytest.mark.slow),
    pytest.param(dict(schedule=ScheduleConfig(kind="next_visit", pool_size=8, control="extra_rollouts", reroll="append",
                                              extra_share=1.0)), id="next_visit_extra", marks=pytest.mark.slow)])
def test_bucketed_reroll_steps_equal_the_unbucketed_steps(base_params, kw):
    """Trainer steps with ``reroll_group_buckets`` log the same records as without (same_step replace
    and append, next_visit's extra_rollouts control); with replace the parameters agree up to the
    rounding of the sampler's log-probs in a call of another row count. The fast tier runs replace;
    append and next_visit's control run in the slow tier (the fast tier keeps their re-roll call's
    bucketing: test_bucketed_reroll_calls_compile_once_per_bucket_and_sample_the_unbucketed_tokens)."""
    out = []
    for bucketed in (False, True):
        rl = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=8, samples=1),
                      rollout=RolloutConfig(reroll_group_buckets=bucketed), **kw)
        tr = Trainer(TASK, MODEL, rl, WIDE, seed=3)
        st = tr.init_state(base_params)
        ms = []
        for _ in range(3):
            st, m = tr.step(st)
            ms.append({k: v for k, v in m.items() if not k.startswith("time_") and not k.startswith("loss/")})
        out.append((ms, st.params))
    (m0, p0), (m1, p1) = out
    assert m0 == m1, kw
    assert sum(m["groups_steered"] + m.get("groups_extra", 0) for m in m0) > 0, kw  # a re-roll call ran
    if not kw:  # replace: the batch holds the same rows (append: its padding rows differ, masked either way);
        for a, c in zip(jax.tree.leaves(p0), jax.tree.leaves(p1)):  # their old log-probs move by rounding
            np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=0, atol=1e-6)  # (measured 7e-9)
