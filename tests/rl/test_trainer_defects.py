"""Issue #19: six silent defects in the training path, each with a test that failed before the fix.

1. partial-credit failures are failure prefixes (a success is r >= 1, a failure r < 1);
2. ``kl_coef > 0`` is refused until a reference policy exists;
3. ``groups_kept`` counts only groups with loss tokens (append mode's padding copies excluded);
4. a single-turn re-roll's prefix + continuation gets the rollouts' budget;
5. training refuses non-unit temperature / top-k / top-p (no importance correction);
6. ``math_jsonl`` without ``eval_path`` evaluates on held-out problems.
"""
from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.models import sampler as S
from prs.models.qwen3 import ModelConfig, init_params
from prs.rl.episodes import SingleTurnRollouts, take_rows
from prs.rl.trainer import RLConfig, Trainer
from prs.rl.config import LossConfig, RolloutConfig, ScheduleConfig
from prs.tasks.arith import ArithTask

from tests._arith_tiny import MODEL, TASK, RL, warm_params  # noqa: E402


@pytest.fixture(scope="module")
def warm():
    return warm_params()


# ------------------------------------------------------------------ 1. partial-credit sources


def test_easy_group_with_partial_credit_failures_replays_a_failure():
    """rewards [1 x 6, .5, .5]: k = 6 (easy) -> the source must be one of the two failures (the
    old rule accepted only r == 0, found none, and the trainer silently took rollout 0, a success)."""
    pc = ps.PrefixConfig(mode="ps_ada", n=8)
    rewards = jnp.array([[1, 1, 1, 1, 1, 1, .5, .5], [1, 0, 0, 0, 0, 0, 0, .25]], jnp.float32)  # [B, N]
    k = jnp.sum(rewards >= 1, axis=1)
    bucket = ps.assign_buckets(k, pc)
    assert (np.asarray(bucket) >= 0).all()
    for seed in range(20):
        src = np.asarray(ps.choose_sources(jax.random.key(seed), rewards, bucket, pc))
        assert src[0] in (6, 7)                       # a failure (partial credit) for the easy group
        assert src[1] == 0                            # the one full success for the hard group


def test_mixed_zero_and_partial_failures_are_all_candidates():
    """With failures scoring 0 and 0.5 the source is drawn from all of them, not only the zeros."""
    pc = ps.PrefixConfig(mode="ps_ada", n=8)
    rewards = jnp.array([[1, 1, 1, 1, 1, 1, 0, .5]], jnp.float32)
    bucket = ps.assign_buckets(jnp.sum(rewards >= 1, axis=1), pc)
    seen = {int(ps.choose_sources(jax.random.key(s), rewards, bucket, pc)[0]) for s in range(40)}
    assert seen == {6, 7}


class _HalfCreditTask(ArithTask):
    """arith where a failed rollout earns 0.5 (like a fraction-of-tests reward)."""

    def __init__(self):
        super().__init__(TASK.cfg)

    def rewards(self, problems, rollout, *, group_size):
        r = super().rewards(problems, rollout, group_size=group_size)
        return jnp.where(r >= 1.0, 1.0, 0.5)


def test_trainer_reroll_sources_have_the_right_outcome_under_partial_credit(warm, monkeypatch):
    """Every steered group's source row has reward >= 1 (hard) or < 1 (easy), read from the
    rows the trainer actually hands to ``reroll``."""
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)
    trainer = Trainer(_HalfCreditTask(), MODEL, RL, pc, seed=2)
    seen = []
    orig = trainer.rollouts.reroll

    def spy(params, problems, source, cut, key, *, group_size):
        seen.append(np.asarray(source.rewards))
        return orig(params, problems, source, cut, key, group_size=group_size)

    monkeypatch.setattr(trainer.rollouts, "reroll", spy)
    state = trainer.init_state(warm)
    checked = 0
    for _ in range(4):
        m = trainer.collect(state).metrics
        if m["groups_rerolled"]:
            g = m["groups_rerolled"]
            src_r = seen[-1][:g]
            hard = [m[f"bucket/{kb}/count"] for kb in ps.bucket_ks(pc)]
            assert len(src_r) == g and sum(hard) >= g
            assert set(np.unique(src_r)) <= {0.5, 1.0}
            checked += g
        state, _ = trainer.step(state)
    assert checked > 0


def test_a_steered_group_without_source_is_an_error_not_row_zero(warm, monkeypatch):
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)
    trainer = Trainer(TASK, MODEL, RL, pc, seed=2)
    monkeypatch.setattr(ps, "choose_sources", lambda *a, **k: jnp.full((RL.tasks_per_step,), -1, jnp.int32))
    state = trainer.init_state(warm)
    with pytest.raises(RuntimeError, match="no prefix source"):
        for _ in range(6):
            m = trainer.collect(state).metrics
            state, _ = trainer.step(state)


# ------------------------------------------------------------------ 2 and 5. refused settings


@pytest.mark.parametrize("kw, match", [
    (lambda: {"loss": LossConfig(kl_coef=-0.5)}, "kl_coef"),  # kl_coef > 0 works since the reference policy (#14)
    (lambda: {"rollout": RolloutConfig(temperature=0.7)}, "temperature"),
    (lambda: {"rollout": RolloutConfig(top_p=0.9)}, "top_p"),
    (lambda: {"rollout": RolloutConfig(top_k=20)}, "top_k"),
    (lambda: {"schedule": ScheduleConfig(reroll_budget="more")}, "reroll_budget"),
])
def test_settings_the_update_cannot_honour_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        RLConfig(**kw())
    RLConfig(rollout=RolloutConfig(eval_temperature=0.7))  # evaluation sampling is free


# ------------------------------------------------------------------ 3. groups_kept in append mode


def test_groups_kept_counts_only_groups_with_loss_tokens_in_append_mode(warm):
    rl = dataclasses.replace(RL, schedule=dataclasses.replace(RL.schedule, reroll="append"))
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)
    trainer = Trainer(TASK, MODEL, rl, pc, seed=1)
    state = trainer.init_state(warm)
    for _ in range(3):
        c = trainer.collect(state)
        batch, m = c.batch, c.metrics
        per_group = np.asarray(batch.loss_mask).reshape(-1, rl.group_size * batch.loss_mask.shape[1]).any(1)
        assert m["groups_kept"] == int(per_group.sum())
        assert m["groups_kept"] <= rl.tasks_per_step + m["groups_rerolled"]
        state, _ = trainer.step(state)


# ------------------------------------------------------------------ 4. re-roll budget


def test_sampler_budget_stops_rows_and_equals_truncated_sampling():
    cfg = ModelConfig.preset("tiny", vocab_size=32)
    params = init_params(cfg, jax.random.key(0))
    scfg = S.SamplerConfig(max_new_tokens=10, temperature=1.0, eos_id=None, pad_id=0, buckets=None)
    tokens = np.full((4, 3), 5, np.int32)
    lengths = np.array([3, 2, 3, 1], np.int32)
    budget = np.array([1, 4, 10, 7], np.int32)
    full = S.sample(params, tokens, lengths, jax.random.key(1), cfg=cfg, scfg=scfg)
    cut = S.sample(params, tokens, lengths, jax.random.key(1), cfg=cfg, scfg=scfg, budget=budget)
    gen = np.asarray(cut.policy_mask).sum(1)
    np.testing.assert_array_equal(gen, budget)  # no EOS: each row runs to its budget
    for r in range(4):
        end = lengths[r] + budget[r]
        np.testing.assert_array_equal(np.asarray(cut.tokens)[r, :end], np.asarray(full.tokens)[r, :end])
        np.testing.assert_allclose(np.asarray(cut.logprobs)[r, :end], np.asarray(full.logprobs)[r, :end], atol=1e-6)
    with pytest.raises(ValueError, match="budget"):
        S.sample(params, tokens, lengths, jax.random.key(1), cfg=cfg, scfg=scfg, budget=np.array([0, 1, 1, 1]))
    with pytest.raises(ValueError, match="budget"):
        S.sample(params, tokens, lengths, jax.random.key(1), cfg=cfg, scfg=scfg, budget=np.array([11, 1, 1, 1]))


@pytest.mark.parametrize("mode, expect_within", [("shared", True), ("extra", False)])
def test_reroll_response_gets_the_rollout_budget(mode, expect_within):
    """At random init most rows never emit EOS: with ``shared`` every re-rolled row's prefix +
    continuation fits in T; with ``extra`` (the old behaviour, kept as an option) many exceed it."""
    params = init_params(MODEL, jax.random.key(3))
    rl = dataclasses.replace(RL, schedule=dataclasses.replace(RL.schedule, reroll_budget=mode), rollout=dataclasses.replace(RL.rollout, max_new_tokens=14))
    trainer = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="ps_fix", n=8), seed=0)
    ro: SingleTurnRollouts = trainer.rollouts
    problems = TASK.train_problems(seed=0, step=0, count=8)
    ep = ro.rollout(params, problems, jax.random.key(4), group_size=8)
    rows = np.arange(8) * 8
    units = np.asarray(ep.units)[rows]
    cut = np.maximum(units // 2, 1)
    ep2 = ro.reroll(params, problems, take_rows(ep, rows), cut, jax.random.key(5), group_size=8)
    response = np.asarray(ep2.policy_mask).sum(1) + np.asarray(ep2.replayed)  # [G*N]
    assert (response <= 14).all() == expect_within
    if expect_within:
        assert response.max() == 14  # budgets are used, not cut short


# ------------------------------------------------------------------ 6. held-out evaluation


def test_math_jsonl_split_is_held_out_and_deterministic(tmp_path):
    from prs.tasks import math_jsonl as mj

    rows = mj.load_rows(str(mj.SHIPPED))
    train, held = mj.split_rows(rows, eval_fraction=0.25)
    assert train and held and len(train) + len(held) == len(rows)
    assert not {r["problem"] for r in train} & {r["problem"] for r in held}
    # deterministic and order-independent: the same problems are held out of a shuffled file
    t2, h2 = mj.split_rows(list(reversed(rows)), eval_fraction=0.25)
    assert {r["problem"] for r in h2} == {r["problem"] for r in held}
    with pytest.raises(ValueError, match="eval_fraction"):
        mj.split_rows(rows, eval_fraction=1.0)
    with pytest.raises(ValueError, match="eval_path"):
        mj.split_rows(rows[:1], eval_fraction=0.5)


def test_math_jsonl_task_evaluates_on_no_training_problem(tmp_path):
    pytest.importorskip("tokenizers")
    from prs.models import hf
    from prs.tasks import math_jsonl as mj

    hf.make_tiny_checkpoint(tmp_path / "ckpt", seed=0, texts=mj.tokenizer_texts())
    task = mj.make_math_jsonl(tokenizer=str(tmp_path / "ckpt"), max_new_tokens=8, backend="fallback")
    train_problems = {r["problem"] for r in task.rows}
    eval_problems = {r["problem"] for r in task.eval_rows}
    assert eval_problems and not train_problems & eval_problems
    shipped = [json.loads(x)["problem"] for x in mj.SHIPPED.read_text().splitlines() if x.strip()]
    assert train_problems | eval_problems == set(shipped)


def test_next_visit_logs_the_hard_step_advantage_mass_in_steps_that_steer():
    """Issue 45, item 7: with ``kind=next_visit`` the batch metric ``mech/adv_mass_hard`` was skipped in
    every step that steered a group (the trainer matched the batch against the unsteered groups only).
    A step whose two pool tasks both start from a stored correct source (planned in the hard bucket)
    logs it, equal to ``advantage_mass_share`` over the whole batch with the hard step's mask of the
    step's problems (read from the pool order, ``schedule.pool_ids``)."""
    from prs.rl import schedule as sched
    from prs.rl.config import EvalConfig
    from prs.tasks.mechanism import advantage_mass_share, hard_step_mask, solution_tokens
    from prs.tasks.registry import make_task

    task = make_task("arith_deep", easy_steps=2)
    model = ModelConfig.preset("tiny", vocab_size=task.vocab_size, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                               head_dim=8, d_ff=32)
    b, n, m = 2, 4, 4
    rl = RLConfig(tasks_per_step=b, group_size=n, eval=EvalConfig(count=4, samples=1),
                  loss=LossConfig(drop_no_contrast=False), schedule=ScheduleConfig(kind="next_visit", pool_size=m))
    pc = ps.PrefixConfig(mode="ps_ada", n=n)
    tr = Trainer(task, model, rl, pc, seed=0)
    state = tr.init_state(init_params(model, jax.random.PRNGKey(0)))
    mem = sched.TaskMemory(*(np.array(x) for x in state.memory))
    ids = sched.pool_ids(0, 0, b, m)
    probs = task.take(tr.schedule.pool, ids)
    sol, length = solution_tokens(probs, task.cfg)
    for i, t in enumerate(ids):  # slot 0: a stored success, the whole correct trace
        p = int(probs.prompt_len[i])
        mem.src_tokens[t, 0, :p] = probs.prompt[i, :p]
        mem.src_tokens[t, 0, p: p + length[i]] = sol[i, : length[i]]
        mem.src_mask[t, 0, p: p + length[i]] = True
        mem.src_units[t, 0], mem.src_success[t, 0], mem.src_valid[t, 0], mem.src_id[t, 0] = length[i], True, True, i
    mem.plan[ids] = int(np.flatnonzero(ps.bucket_direction(pc) > 0)[0])       # the hard bucket: success prefixes
    state = state._replace(memory=sched.TaskMemory(*(jnp.asarray(x) for x in mem)))
    # a random policy fails every trace: alternate the rewards so that the advantages carry mass
    tr.rollouts._rewards = lambda problems, ro, *, group_size: jnp.tile(
        jnp.array([1.0, 0.0]), ro.tokens.shape[0] // 2).reshape(-1, group_size)
    c = tr.collect(state)
    assert c.metrics["groups_steered"] == b
    want = advantage_mass_share(c.batch.advantages, c.batch.loss_mask,
                                hard_step_mask(probs, c.batch.tokens.shape[1], group_size=n))
    assert want > 0 and c.metrics["mech/adv_mass_hard"] == pytest.approx(want)


def test_same_step_append_logs_the_hard_step_advantage_mass_over_the_appended_groups_too():
    """The appended re-roll groups (``reroll=append``: 2B groups in the update) were skipped the same way;
    with both groups steered the batch is [problems 0, 1, re-rolls of 0, 1] and the metric is the share
    over all of it (``advantage_mass_share`` with the hard step's mask of those problems)."""
    from prs.rl.config import EvalConfig
    from prs.tasks.mechanism import advantage_mass_share, hard_step_mask
    from prs.tasks.registry import make_task

    task = make_task("arith_deep", easy_steps=2)
    model = ModelConfig.preset("tiny", vocab_size=task.vocab_size, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                               head_dim=8, d_ff=32)
    rl = RLConfig(tasks_per_step=2, group_size=4, eval=EvalConfig(count=4, samples=1),
                  loss=LossConfig(drop_no_contrast=False), schedule=ScheduleConfig(reroll="append"))
    tr = Trainer(task, model, rl, ps.PrefixConfig(mode="ps_ada", n=4), seed=0)
    # k = 1 of 4 in every group (a hard bucket: a success prefix exists), so both groups are re-rolled
    tr.rollouts._rewards = lambda problems, ro, *, group_size: jnp.tile(
        jnp.array([1.0, 0.0, 0.0, 0.0]), ro.tokens.shape[0] // 4).reshape(-1, group_size)
    c = tr.collect(tr.init_state(init_params(model, jax.random.PRNGKey(0))))
    assert c.metrics["groups_steered"] == 2 and c.batch.tokens.shape[0] == 16
    probs = task.take(task.train_problems(seed=0, step=0, count=2), np.array([0, 1, 0, 1]))
    want = advantage_mass_share(c.batch.advantages, c.batch.loss_mask,
                                hard_step_mask(probs, c.batch.tokens.shape[1], group_size=4))
    assert want > 0 and c.metrics["mech/adv_mass_hard"] == pytest.approx(want)


def test_options_read_by_nothing_in_a_configuration_are_refused_in_one_line():
    """Options of the same kind as issue 45's items 3-4, found beside them: ``loss.rft_cap`` without RFT,
    ``schedule.extra_share`` without the extra-rollouts control and ``schedule.reroll_budget='extra'`` with
    an agent task were accepted and read by nothing; each is one line naming the key and the allowed
    value, and the defaults pass."""
    from prs.rl.config import EvalConfig
    from prs.tasks.registry import make_task

    with pytest.raises(ValueError, match=r"^LossConfig.rft_cap=4 \(loss.rft_cap\) acts with algorithm='rft' only.*"
                                         r"allowed rft_cap=2"):
        LossConfig(rft_cap=4)
    LossConfig(algorithm="rft", rft_cap=4)
    with pytest.raises(ValueError, match=r"^ScheduleConfig.extra_share=0.2 \(schedule.extra_share\) acts with "
                                         r"control='extra_rollouts' only.*allowed extra_share=0.5"):
        ScheduleConfig(extra_share=0.2)
    ScheduleConfig(control="extra_rollouts", reroll="append", extra_share=0.2)
    task = make_task("repair", n_lines=4, max_turns=2)
    model = ModelConfig.preset("tiny", vocab_size=task.vocab_size, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                               head_dim=8, d_ff=32)
    rl = RLConfig(tasks_per_step=2, group_size=2, eval=EvalConfig(count=2, samples=1),
                  schedule=ScheduleConfig(reroll_budget="extra"))
    with pytest.raises(ValueError, match=r"^ScheduleConfig.reroll_budget='extra' \(schedule.reroll_budget\) with a "
                                         r"multi-turn agent task.*allowed reroll_budget='shared'$"):
        Trainer(task, model, rl, ps.PrefixConfig(mode="ps_ada", n=2), seed=0)
    Trainer(task, model, dataclasses.replace(rl, schedule=ScheduleConfig()), ps.PrefixConfig(mode="ps_ada", n=2), seed=0)
