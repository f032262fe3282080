"""The Prefix Sampling trainer: prefix masking through a whole step, degenerate batches, resume,
config errors, and the Hydra entry point. Tiny shapes; one shared warm-started base model."""
from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.rl.runner import RunConfig, run
from prs.tasks.arith import ArithTask
from prs.tasks.registry import make_task
from prs.rl.trainer import RLConfig, Trainer
from prs.rl.config import LossConfig

from tests._arith_tiny import MODEL, TASK, RL, warm_params  # noqa: E402


@pytest.fixture(scope="session")
def base_params():
    return warm_params()


def _replayed_rows(batch):
    """Rows whose task prompt (ended by '=') is followed by tokens the policy did not generate
    before its first policy token: the replayed prefix. Rebuilt from the batch alone."""
    tokens, mask = np.asarray(batch.tokens), np.asarray(batch.loss_mask)
    prompt_end = np.argmax(tokens == TASK.cfg.vocab.id("="), axis=1) + 1   # [R]
    first_policy = np.where(mask.any(1), np.argmax(mask, axis=1), -1)      # [R]
    rows = np.nonzero(mask.any(1) & (first_policy > prompt_end))[0]
    return rows, prompt_end, first_policy


def _first_step_with_replay(trainer, state, max_steps=12):
    for _ in range(max_steps):
        c = trainer.collect(state)
        batch, m = c.batch, c.metrics
        if m["groups_rerolled"] and _replayed_rows(batch)[0].size:
            return batch, m, state
        state, _ = trainer.step(state)
    pytest.fail("no kept re-rolled group in the first steps (base policy too degenerate for the test)")


def test_replayed_prefix_is_verbatim_and_gets_exactly_zero_gradient(base_params):
    """Zhu et al. 2026 prefix masking: replayed tokens are inputs, not policy tokens (ms-swift #10106)."""
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)  # re-roll almost every mixed group
    trainer = Trainer(TASK, MODEL, RL, pc, seed=3)
    batch, m, state = _first_step_with_replay(trainer, trainer.init_state(base_params))
    mask = np.asarray(batch.loss_mask)
    valid = np.asarray(batch.valid)
    replayed_rows, prompt_end, first_policy = _replayed_rows(batch)
    offset = jnp.zeros(batch.tokens[:, 1:].shape, jnp.float32)
    g = np.asarray(jax.grad(lambda o: trainer.loss(state.params, batch, logp_offset=o))(offset))  # [R, L-1]
    for r in replayed_rows:
        pre = slice(prompt_end[r], first_policy[r])
        assert valid[r, pre].all() and not mask[r, pre].any()
        # logits at t - 1 score token t: the prefix tokens' log-probs sit at [t - 1] in g
        assert np.all(g[r, prompt_end[r] - 1 : first_policy[r] - 1] == 0.0)
    # and gradient does flow into the continuation (the test can fail)
    assert np.any(g[replayed_rows][:, :] != 0.0)
    # every token with non-zero gradient is a policy token
    assert np.all((g != 0) <= mask[:, 1:])


def test_replayed_prefix_is_a_prefix_of_a_source_rollout_with_the_right_outcome(base_params):
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)
    trainer = Trainer(TASK, MODEL, RL, pc, seed=5)
    batch, m, _ = _first_step_with_replay(trainer, trainer.init_state(base_params))
    assert m["tokens_replayed"] > 0
    # re-rolled groups' rows share their prompt+prefix (N copies of one input)
    tokens = np.asarray(batch.tokens).reshape(RL.tasks_per_step, RL.group_size, -1)
    mask = np.asarray(batch.loss_mask).reshape(RL.tasks_per_step, RL.group_size, -1)
    for gi in range(RL.tasks_per_step):
        first = np.argmax(mask[gi], axis=1)
        if not mask[gi].any(1).all():
            continue
        start = int(first.min())
        assert (tokens[gi, :, :start] == tokens[gi, :1, :start]).all()


class _ConstantTask(ArithTask):
    """arith with a verifier that returns a constant: every group is 0/N or N/N."""

    def __init__(self, value):
        super().__init__(TASK.cfg)
        object.__setattr__(self, "value", value)

    def rewards(self, problems, rollout, *, group_size):
        return jnp.full((rollout.tokens.shape[0] // group_size, group_size), self.value, jnp.float32)


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_degenerate_batches_train_without_nan_and_leave_params_unchanged(base_params, value):
    trainer = Trainer(_ConstantTask(value), MODEL, RL, ps.PrefixConfig(mode="ps_ada", n=8), seed=0)
    state = trainer.init_state(base_params)
    state, m = trainer.step(state)
    assert m["groups_rerolled"] == 0 and m["groups_kept"] == 0
    for key, val in m.items():
        if isinstance(val, float):
            assert np.isfinite(val), key
    # no group has contrast: the loss is 0 and AdamW (no weight decay) leaves params unchanged
    assert m["loss/loss"] == 0.0
    same = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), state.params, base_params)
    assert all(jax.tree.leaves(same))


def test_advantages_in_batch_equal_leave_one_out_on_the_rewards(base_params):
    trainer = Trainer(TASK, MODEL, RL, ps.PrefixConfig(mode="baseline", n=8), seed=1)
    state = trainer.init_state(base_params)
    c = trainer.collect(state)
    batch, m = c.batch, c.metrics
    assert m["groups_rerolled"] == 0
    # recompute rewards independently from the tokens with the task verifier
    probs = TASK.train_problems(seed=1, step=0, count=RL.tasks_per_step)
    r = np.zeros((RL.tasks_per_step * RL.group_size,))
    dec = [TASK.decode(row) for row in np.asarray(batch.tokens)]
    for i, text in enumerate(dec):
        gen = text.split("=", 1)[1]
        ans = int(probs.answer[i // RL.group_size])
        body = gen.split("$", 1)[0] if "$" in gen else None
        r[i] = float(body is not None and body.count("#") == 1 and body.endswith(f"#{ans}")
                     and set(body[:-2]) <= set("0123456789,!"))
    r = r.reshape(RL.tasks_per_step, RL.group_size)
    n = RL.group_size
    loo = r - (r.sum(1, keepdims=True) - r) / (n - 1)  # numpy RLOO
    np.testing.assert_allclose(np.asarray(batch.advantages).reshape(r.shape), loo, atol=1e-6)
    np.testing.assert_allclose(m["pass_rate"], r.mean(), atol=1e-6)


def _strip(records):
    return [{k: v for k, v in m.items() if not k.startswith("time_")} for m in records]


@pytest.mark.slow
def test_resume_continues_exactly(tmp_path, base_params):
    """A run killed after its step-2 checkpoint and resumed writes the uninterrupted run's metrics.
    Slow tier (exact replay, three runs); the fast tier keeps the same run resumed from its step-2
    checkpoint against the same uninterrupted run, with the same summary and provenance checks
    (tests/rl/test_runner_faults.py::test_a_truncated_last_metrics_line_is_repaired_on_resume)."""
    common = dict(seed=4, eval_every=2, ckpt_every=2, sft_steps=0, wandb_mode="disabled", progress=False)
    pc = ps.PrefixConfig(mode="ps_ada", n=8)
    full = tmp_path / "full"
    run(TASK, MODEL, RL, pc, RunConfig(steps=4, **common), full, log=lambda *a: None)
    part = tmp_path / "part"
    run(TASK, MODEL, RL, pc, RunConfig(steps=2, **common), part, log=lambda *a: None)  # "killed" at 2
    s = run(TASK, MODEL, RL, pc, RunConfig(steps=4, **common), part, log=lambda *a: None)
    assert s["resumed_from_step"] == 2
    read = lambda d: [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert _strip(read(full)) == _strip(read(part))
    for f in ("summary.json", "curves.png"):
        assert (part / f).exists()
    # the run records the code it ran on, once per segment (start and resume)
    summ = json.loads((part / "summary.json").read_text())
    assert [sg["start_step"] for sg in summ["provenance_segments"]] == [0, 2]
    assert summ["provenance"]["commit"] is None or len(summ["provenance"]["commit"]) == 40


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: RLConfig(group_size=1), "group_size"),
        (lambda: ps.PrefixConfig(mode="ps_fix", rho_init=1.5), "rho"),
        (lambda: ps.PrefixConfig(mode="nope"), "mode"),
        (lambda: RLConfig(loss=LossConfig(estimator="ppo")), "estimator"),
        (lambda: Trainer(TASK, MODEL, RL, ps.PrefixConfig(n=4)), "prefix.n"),
        (lambda: make_task("arith", nonsense=1), "nonsense"),
        (lambda: make_task("chess"), "unknown task"),
    ],
)
def test_bad_config_values_fail_clearly(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_hydra_entry_point_runs_and_rejects_unknown_keys(tmp_path):
    from hydra import compose, initialize_config_dir
    from experiments.config import validate
    from experiments.train import build

    conf = str(pathlib.Path(__file__).resolve().parents[2] / "conf")
    with initialize_config_dir(config_dir=conf, version_base=None):
        for method in ("baseline", "ps_fix", "ps_ada_hard", "ps_ada", "rft"):
            cfg = validate(compose("config", overrides=[f"method={method}", "sft.base_dir=/tmp/x"]))
            task, model_cfg, rl, prefix, run_cfg = build(cfg)
            assert prefix.mode == (method if method != "rft" else "baseline") and rl.loss.estimator == "rloo"
            assert rl.loss.clip_high == 0.28 and rl.loss.algorithm == ("rft" if method == "rft" else "grpo")
        with pytest.raises(Exception, match="bogus"):
            validate(compose("config", overrides=["+algo.bogus=1", "sft.base_dir=/tmp/x"]))
        with pytest.raises(Exception):
            compose("config", overrides=["method=nope"])
        cfg = validate(compose("config", overrides=[
            "steps=2", "eval.every=1", "eval.count=8", "ckpt_every=1", "sft.steps=0", "algo.tasks_per_step=2",
            "logging.wandb_mode=disabled", "logging.progress=false", "task.params.max_terms=3",
            "model.overrides.d_model=32", "model.overrides.head_dim=8", "model.overrides.d_ff=64",
            f"sft.base_dir={tmp_path / 'base'}"]))
    task, model_cfg, rl, prefix, run_cfg = build(cfg)
    s = run(task, model_cfg, rl, prefix, run_cfg, tmp_path / "run", config_dict=dataclasses.asdict(cfg),
            log=lambda *a: None)
    assert s["steps"] == 2
    for f in ("metrics.jsonl", "summary.json", "curves.png", "checkpoints"):
        assert (tmp_path / "run" / f).exists(), f


def test_reroll_reward_grades_replayed_prefix_plus_continuation():
    """A re-rollout is graded on prefix + continuation: a prefix holding '#' followed by the right
    digit and EOS is a success, although the sampler's own prompt length ends after the '#'."""
    from types import SimpleNamespace

    v = TASK.cfg.vocab
    probs = TASK.take(TASK.train_problems(seed=0, step=0, count=1), np.array([0]))
    p = int(probs.prompt_len[0])
    terms = [int(t) for t in probs.terms[0, : int(probs.n_terms[0])]]
    sums = np.cumsum(terms) % TASK.cfg.modulus
    good = v.encode(",".join(str(s) for s in sums[1:]) + f"#{sums[-1]}") + [v.eos_id]
    bad = v.encode(",".join(str(s) for s in sums[1:]) + f"#{(sums[-1] + 1) % 10}") + [v.eos_id]
    rows = []
    for sol in (good, bad):
        rows.append(list(probs.prompt[0, :p]) + sol + [v.pad_id] * 4)
    tokens = jnp.asarray(rows, jnp.int32)
    cut = len(good) - 2  # the replayed prefix ends right after '#'
    ro = SimpleNamespace(tokens=tokens, prompt_lengths=jnp.full((2,), p + cut),
                         lengths=jnp.full((2,), p + len(good)))
    r = np.asarray(TASK.rewards(TASK.take(probs, np.array([0, 0])), ro, group_size=1))
    np.testing.assert_array_equal(r[:, 0], [1.0, 0.0])


def test_warm_start_is_built_once_and_reused(tmp_path):
    from prs.rl.runner import base_params as get_base

    rc = RunConfig(steps=1, sft_steps=3, sft_batch=8, wandb_mode="disabled")
    logs = []
    p1 = get_base(TASK, MODEL, rc, tmp_path, log=logs.append)
    p2 = get_base(TASK, MODEL, rc, tmp_path, log=logs.append)
    assert any("reusing" in line for line in logs) and len(list(tmp_path.iterdir())) == 1
    same = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), p1, p2)
    assert all(jax.tree.leaves(same))
    # and it is a trained model, not the random init
    from prs.models.qwen3 import init_params
    init = init_params(MODEL, jax.random.PRNGKey(rc.sft_seed))
    assert not all(jax.tree.leaves(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), p1, init)))


def test_reroll_fallback_never_loses_a_mixed_group(base_params):
    """Every skewed group (1 <= k <= N-1) has contrast; with the fallback, a re-rolled group that
    came back degenerate is not swapped in, so the kept groups equal the mixed original groups."""
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)
    trainer = Trainer(TASK, MODEL, RL, pc, seed=2)
    state = trainer.init_state(base_params)
    for _ in range(3):
        c = trainer.collect(state)
        batch, m = c.batch, c.metrics
        assert m["groups_kept"] == m["groups_mixed"]
        assert m["groups_replaced"] <= m["groups_rerolled"]
        state, _ = trainer.step(state)


def test_rft_trains_on_at_most_cap_successes_per_task_with_nll(base_params):
    """SWE-Gym rejection-sampling fine-tuning: loss = token-mean NLL on <= cap successful rollouts per task."""
    from prs.models.qwen3 import forward
    from prs.tasks.arith import verify

    rl = dataclasses.replace(RL, loss=dataclasses.replace(RL.loss, algorithm="rft", rft_cap=2))
    trainer = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="baseline", n=8), seed=6)
    state = trainer.init_state(base_params)
    c = trainer.collect(state)
    batch, m = c.batch, c.metrics
    probs = TASK.train_problems(seed=6, step=0, count=rl.tasks_per_step)
    n = rl.group_size
    lengths = jnp.sum(batch.valid, axis=1)
    r = np.asarray(verify(jnp.repeat(jnp.asarray(probs.answer), n), batch.tokens,
                          jnp.repeat(jnp.asarray(probs.prompt_len), n), lengths)).reshape(-1, n)
    used = np.asarray(batch.loss_mask).any(1).reshape(-1, n)
    assert np.all(r[used] == 1.0)                                   # successes only
    np.testing.assert_array_equal(used.sum(1), np.minimum(r.sum(1), 2))  # min(cap, #successes) per task
    # loss = token-mean NLL on the chosen rows, recomputed with numpy from the model's logits
    logits = np.asarray(forward(state.params, batch.tokens[:, :-1], cfg=MODEL, positions=batch.positions[:, :-1],
                                valid=batch.valid[:, :-1]), np.float64)
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    tok = np.asarray(batch.tokens[:, 1:])
    lp = np.take_along_axis(logits, tok[..., None], -1)[..., 0] - logz
    mk = np.asarray(batch.loss_mask[:, 1:])
    np.testing.assert_allclose(float(trainer.loss(state.params, batch)), -(lp * mk).sum() / mk.sum(), rtol=1e-4)
    with pytest.raises(ValueError, match="rft"):
        Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="ps_ada", n=8))


class _HalfCreditTask(ArithTask):
    """arith with partial credit: a failed rollout earns 0.5 (like a fraction-of-tests reward)."""

    def __init__(self):
        super().__init__(TASK.cfg)

    def rewards(self, problems, rollout, *, group_size):
        r = super().rewards(problems, rollout, group_size=group_size)
        return jnp.where(r >= 1.0, 1.0, 0.5)


def test_partial_credit_reward_trains_on_credit_but_buckets_and_pass_rates_count_successes(base_params):
    pc = ps.PrefixConfig(mode="baseline", n=8)
    binary = Trainer(TASK, MODEL, RL, pc, seed=8)
    half = Trainer(_HalfCreditTask(), MODEL, RL, pc, seed=8)
    c = binary.collect(binary.init_state(base_params))
    b1, m1 = c.batch, c.metrics
    c = half.collect(half.init_state(base_params))
    b2, m2 = c.batch, c.metrics
    np.testing.assert_array_equal(np.asarray(b1.tokens), np.asarray(b2.tokens))  # same rollouts
    assert m1["k_hist"] == m2["k_hist"] and m1["pass_rate"] == m2["pass_rate"]
    assert m2["reward_mean"] == pytest.approx(0.5 + 0.5 * m1["pass_rate"])
    # RLOO on the credit: a success in a group with k successes gets 1 - (k-1 + 0.5 (N-k)) / (N-1)
    r = np.where(np.asarray(b1.advantages).reshape(-1, 8) > 0, 1.0, 0.0)  # successes have positive RLOO
    credit = np.where(r > 0, 1.0, 0.5)
    loo = credit - (credit.sum(1, keepdims=True) - credit) / 7
    np.testing.assert_allclose(np.asarray(b2.advantages).reshape(-1, 8), loo, atol=1e-6)


@pytest.mark.parametrize("preset", ["ablation_arith_cpu", "ablation_arith_accel", "ablation_repair_cpu"])
def test_ablation_presets_compose_and_sweep_every_method(preset):
    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build

    conf = str(pathlib.Path(__file__).resolve().parents[2] / "conf")
    with initialize_config_dir(config_dir=conf, version_base=None):
        raw = compose("config", overrides=[f"+experiment={preset}", "sft.base_dir=/tmp/x"], return_hydra_config=True)
        params = raw.hydra.sweeper.params
        assert set(str(params.method).split(",")) == {"baseline", "ps_fix", "ps_ada_hard", "ps_ada"}
        assert len(str(params.seed).split(",")) >= 5
        cfg = validate(compose("config", overrides=[f"+experiment={preset}", "sft.base_dir=/tmp/x"]))
        task, model_cfg, rl, prefix, run_cfg = build(cfg)
        assert task.name == preset.split("_")[1] and model_cfg.vocab_size == task.vocab_size
