"""The loss/advantage menu wired into RLConfig, the trainer and Hydra (issue #17): config errors, the
batch the trainer builds (shaped rewards, filtered mask, REINFORCE++ advantages, sampler log-probs)
against numpy, and one finite update with every option on. Tiny untrained model, no warm start."""
from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.core.advantages import ESTIMATORS
from prs.models.qwen3 import ModelConfig, init_params
from prs.rl.trainer import RLConfig, Trainer
from prs.rl.config import EvalConfig, LossConfig, RolloutConfig, ScheduleConfig
from prs.tasks.registry import make_task

TASK = make_task("arith", min_terms=2, max_terms=3)
MODEL = ModelConfig.preset("tiny", vocab_size=TASK.vocab_size, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1,
                           head_dim=8, d_ff=32)


@pytest.mark.parametrize("kw, match", [
    (lambda: dict(loss=LossConfig(loss_type="grpo")), "LossConfig.loss_type='grpo'"),
    (lambda: dict(loss=LossConfig(ratio_level="seq")), "LossConfig.ratio_level"),
    (lambda: dict(loss=LossConfig(loss_type="cispo", dual_clip=3.0)), "LossConfig.dual_clip=3.0 applies to loss_type='ppo'"),
    (lambda: dict(loss=LossConfig(dual_clip=0.5)), "LossConfig.dual_clip=0.5"),
    (lambda: dict(loss=LossConfig(clip_low=10.0)), r"LossConfig.clip_low must be a number \[0, 1\) for loss_type='ppo', got 10.0"),
    (lambda: dict(loss=LossConfig(loss_type="cispo", clip_low=float("inf"))), "LossConfig.clip_low must be a number >= 0"),
    (lambda: dict(loss=LossConfig(rollout_correction="token")), "LossConfig.rollout_correction='token'"),
    (lambda: dict(loss=LossConfig(rollout_is_max=0.0)), "LossConfig.rollout_is_max"),
    (lambda: dict(loss=LossConfig(rollout_is_min=3.0)), "LossConfig.rollout_is_min=3.0"),
    (lambda: dict(loss=LossConfig(top_entropy_quantile=1.5)), "LossConfig.top_entropy_quantile"),
    (lambda: dict(loss=LossConfig(estimator="reinforce_pp", whiten_advantages=True)), "already whitens"),
    (lambda: dict(loss=LossConfig(overlong_cache=-1)), "LossConfig.overlong_cache"),
    (lambda: dict(loss=LossConfig(overlong_factor=-1.0)), "LossConfig.overlong_factor"),
])
def test_bad_menu_config_fails_clearly(kw, match):
    with pytest.raises(ValueError, match=match):
        RLConfig(**kw())


def test_overlong_cache_longer_than_the_budget_fails_at_trainer_init():
    rl = RLConfig(tasks_per_step=2, group_size=2, eval=EvalConfig(count=1, samples=1), rollout=RolloutConfig(max_new_tokens=8), loss=LossConfig(overlong_cache=9))
    with pytest.raises(ValueError, match="overlong_cache=9 exceeds the generation budget max_new_tokens=8"):
        Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="baseline", n=2))


def test_response_length_counts_the_replayed_prefix_only_when_it_shares_the_budget():
    from types import SimpleNamespace

    from prs.rl.loss_menu import response_lengths
    ep = SimpleNamespace(policy_mask=jnp.asarray([[1, 1, 1, 0], [1, 0, 0, 0]], bool), replayed=jnp.asarray([0, 5]))
    shared, extra = RLConfig(schedule=ScheduleConfig(reroll_budget="shared")), RLConfig(schedule=ScheduleConfig(reroll_budget="extra"))
    np.testing.assert_array_equal(np.asarray(response_lengths(shared, ep)), [3, 6])
    np.testing.assert_array_equal(np.asarray(response_lengths(extra, ep)), [3, 1])


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_every_advantage_estimator_is_an_rl_option(estimator):
    """RLConfig accepts exactly ``prs.core.advantages.ESTIMATORS`` (the trainer kept its own list
    without ``rloo_std``, which the README offers), and the trainer's advantages are that estimator's."""
    from prs.rl.loss_menu import batch_advantages

    rl = RLConfig(loss=LossConfig(estimator=estimator))
    r = np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0]], np.float32)  # [G, N]
    mask = np.ones((8, 3), bool)  # every rollout trains, 3 tokens each (equal weights)
    mu, sd = r.mean(1, keepdims=True), r.std(1, ddof=1, keepdims=True)
    loo = r - (r.sum(1, keepdims=True) - r) / 3
    flat = r - mu
    tok_white = lambda x: (x - x.mean()) / np.sqrt(3 * np.sum((x - x.mean()) ** 2) / (24 - 1) + 1e-8)  # noqa: E731
    want = {"grpo": flat / (sd + 1e-6), "dr_grpo": flat, "rloo": loo, "rloo_std": loo / (sd + 1e-6),
            "reinforce_pp": tok_white(r),  # verl masked_whiten: per token, Bessel on the 24 tokens
            "reinforce_pp_baseline": tok_white(flat)}[estimator]
    got = np.asarray(batch_advantages(rl, jnp.asarray(r), jnp.asarray(mask)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"LossConfig.estimator='rloo_sd' \(loss.estimator\); choose from \('grpo'"):
        RLConfig(loss=LossConfig(estimator="rloo_sd"))


def test_cispo_accepts_verl_lower_bound():
    assert RLConfig(loss=LossConfig(loss_type="cispo", clip_low=10.0, clip_high=0.2)).loss.clip_low == 10.0


def test_menu_batch_matches_numpy_and_one_update_is_finite():
    budget, cache = 6, 3
    rl = RLConfig(tasks_per_step=2, group_size=4, eval=EvalConfig(count=1, samples=1), rollout=RolloutConfig(max_new_tokens=budget), loss=LossConfig(estimator="reinforce_pp", drop_no_contrast=False, overlong_cache=cache, overlong_filter=True, ratio_level="sequence", rollout_correction="token_mask", rollout_is_min=0.5, rollout_is_max=5.0, top_entropy_quantile=0.5))
    trainer = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="baseline", n=4), seed=0)
    state = trainer.init_state(init_params(MODEL, jax.random.PRNGKey(0)))
    seen = []
    rollout = trainer.rollouts.rollout
    trainer.rollouts.rollout = lambda *a, **k: seen.append(rollout(*a, **k)) or seen[-1]  # keep the Episodes
    c = trainer.collect(state)
    batch, m = c.batch, c.metrics
    trainer.rollouts.rollout = rollout
    assert m["reward_mean"] == 0.0  # an untrained model: the shaped reward is the length penalty alone
    (ep,) = seen
    np.testing.assert_array_equal(np.asarray(ep.tokens), np.asarray(batch.tokens))
    gen = np.asarray(ep.policy_mask).sum(1)
    trunc = np.asarray(ep.truncated)
    assert trunc.any() and not trunc.all() and np.all(gen[trunc] == budget)
    # overlong filtering: truncated rollouts have no loss tokens, the others keep their policy tokens
    np.testing.assert_array_equal(np.asarray(batch.loss_mask), np.asarray(ep.policy_mask) & ~trunc[:, None])
    # REINFORCE++ on the DAPO-shaped reward, whitened per token over the rollouts that train
    shaped = np.where(gen <= budget - cache, 0.0, np.where(gen <= budget, (budget - cache - gen) / cache, -1.0))
    lengths = np.asarray(batch.loss_mask).sum(1).astype(np.float64)
    live = lengths > 0
    mu = (lengths * shaped)[live].sum() / lengths[live].sum()
    var = (lengths * (shaped - mu) ** 2)[live].sum() / (lengths[live].sum() - 1)
    want = np.where(live, (shaped - mu) / np.sqrt(var + 1e-8), 0.0) if np.ptp(shaped[live]) > 0 else np.zeros(8)
    np.testing.assert_allclose(np.asarray(batch.advantages), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(batch.sampler_logp), np.asarray(ep.sampling_logprobs))
    # the update: finite, with the menu's metrics
    state2, metrics = trainer.step(state)
    for key in ("loss/loss", "loss/is_weight_mean", "loss/is_rejected_frac", "loss/entropy_selected_frac",
                "loss/grad_norm"):
        assert np.isfinite(metrics[key]), key
    assert 0.0 < metrics["loss/entropy_selected_frac"] <= 1.0
    # temperature 1, no truncation of the sampling distribution: the correction weights are ~1
    np.testing.assert_allclose(metrics["loss/is_weight_mean"], 1.0, atol=1e-4)


def test_menu_loss_zero_gradient_on_masked_tokens():
    """Through the trainer's loss: per-token gradient (via logp_offset) is 0 off the loss mask."""
    rl = RLConfig(tasks_per_step=2, group_size=4, eval=EvalConfig(count=1, samples=1), rollout=RolloutConfig(max_new_tokens=6), loss=LossConfig(drop_no_contrast=False, loss_type="cispo", clip_low=10.0, rollout_correction="sequence_truncate", top_entropy_quantile=0.8, overlong_cache=2, overlong_filter=True, estimator="reinforce_pp_baseline"))
    trainer = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="baseline", n=4), seed=1)
    state = trainer.init_state(init_params(MODEL, jax.random.PRNGKey(1)))
    batch = trainer.collect(state).batch
    rng = np.random.default_rng(0)
    batch = batch._replace(advantages=jnp.asarray(rng.normal(0, 1, batch.advantages.shape), jnp.float32))
    off = jnp.zeros(batch.tokens[:, 1:].shape, jnp.float32)
    g = np.asarray(jax.grad(lambda o: trainer.loss(state.params, batch, logp_offset=o))(off))
    m = np.asarray(batch.loss_mask[:, 1:])
    assert (~m.any(1)).any()  # overlong filtering left some rollouts without loss tokens
    assert np.all(np.isfinite(g)) and np.all(g[~m] == 0.0) and np.any(g[m] != 0.0)


def test_hydra_exposes_the_menu_as_algo_keys():
    from hydra import compose, initialize_config_dir
    from experiments.config import validate
    from experiments.train import build

    conf = str(pathlib.Path(__file__).resolve().parents[2] / "conf")
    with initialize_config_dir(config_dir=conf, version_base=None):
        cfg = validate(compose("config", overrides=[
            "sft.base_dir=/tmp/x", "loss.loss_type=cispo", "loss.clip_low=10.0", "loss.ratio_level=sequence",
            "loss.rollout_correction=token_mask", "loss.rollout_is_min=0.5", "loss.rollout_is_max=5.0",
            "loss.top_entropy_quantile=0.2", "loss.estimator=reinforce_pp_baseline", "loss.overlong_cache=4",
            "loss.overlong_filter=true"]))
        _, _, rl, _, _ = build(cfg)
        assert (rl.loss.loss_type, rl.loss.ratio_level, rl.loss.rollout_correction, rl.loss.top_entropy_quantile) == \
            ("cispo", "sequence", "token_mask", 0.2)
        assert rl.loss.estimator == "reinforce_pp_baseline" and rl.loss.overlong_cache == 4 and rl.loss.overlong_filter
        with pytest.raises(Exception, match="loss_type"):
            build(validate(compose("config", overrides=["sft.base_dir=/tmp/x", "loss.loss_type=nope"])))


def test_adjusted_sampler_trains_only_with_a_rollout_correction_that_reweights_by_p_over_q():
    """Issue #19 item 5 lifted through the menu: temperature 0.7 is refused without a correction;
    with ``token_truncate`` the batch carries log q and the step's mean weight equals the numpy
    mean of min(p / q, 2) over the loss tokens."""
    with pytest.raises(ValueError, match="rollout_correction"):
        RLConfig(rollout=RolloutConfig(temperature=0.7))
    rl = RLConfig(tasks_per_step=2, group_size=4, eval=EvalConfig(count=1, samples=1), rollout=RolloutConfig(max_new_tokens=6, temperature=0.7), loss=LossConfig(drop_no_contrast=False, rollout_correction="token_truncate", rollout_is_max=2.0))
    trainer = Trainer(TASK, MODEL, rl, ps.PrefixConfig(mode="baseline", n=4), seed=0)
    state = trainer.init_state(init_params(MODEL, jax.random.PRNGKey(1)))
    batch = trainer.collect(state).batch
    p, q = np.asarray(batch.old_logp), np.asarray(batch.sampler_logp)
    m = np.asarray(batch.loss_mask)[:, 1:]
    ratio = np.exp(p - q)[:, 1:]
    assert m.any() and np.ptp(ratio[m]) > 0.05  # temperature 0.7 really moves p/q away from 1
    _, metrics = trainer.step(state)
    np.testing.assert_allclose(metrics["loss/is_weight_mean"], np.minimum(ratio, 2.0)[m].mean(), rtol=1e-4)
