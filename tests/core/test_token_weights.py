"""prs.core.token_weights: rollout correction (TIS / MIS / IcePop) and high-entropy token selection,
against numpy, the peers' own test numbers (verl test_rollout_corr.py, TRL test_grpo_trainer.py), and
degenerate inputs (all masked, NaN/Inf on masked tokens)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prs.core.losses import policy_loss
from prs.core.token_weights import IS_LEVELS, IS_MODES, high_entropy_mask, rollout_correction


def np_rollout_correction(old, samp, mask, level, mode, c_max, c_min):
    m = np.asarray(mask) != 0
    d = np.where(m, np.asarray(old, np.float64) - np.asarray(samp, np.float64), 0.0)
    if level == "sequence":
        d = np.broadcast_to(d.sum(1, keepdims=True), m.shape)
    rho = np.exp(np.clip(d, -20, 20))
    lo = 0.0 if c_min is None else c_min
    w = np.clip(rho, lo, c_max) if mode == "truncate" else np.where((rho >= lo) & (rho <= c_max), rho, 0.0)
    return np.where(m, w, 0.0)


@pytest.mark.parametrize("level", IS_LEVELS)
@pytest.mark.parametrize("mode", IS_MODES)
@pytest.mark.parametrize("bounds", [(2.0, None), (5.0, 0.5), (3.0, 0.0)])
def test_matches_numpy(level, mode, bounds):
    rng = np.random.default_rng(0)
    old = rng.normal(-2, 1, (5, 6)).astype(np.float32)
    samp = (old + rng.normal(0, 0.6, (5, 6))).astype(np.float32)
    mask = rng.random((5, 6)) < 0.7
    mask[0] = False
    c_max, c_min = bounds
    w, met = rollout_correction(old, samp, mask, level=level, mode=mode, c_max=c_max, c_min=c_min)
    want = np_rollout_correction(old, samp, mask, level, mode, c_max, c_min)
    np.testing.assert_allclose(np.asarray(w), want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(met["is_weight_mean"]), want[mask].mean(), rtol=1e-5)


def test_verl_test_mask_mode_numbers():
    """verl tests/trainer/ppo/test_rollout_corr.py::test_mask_mode: old −2, rollout −1 / −2.5, token IS
    threshold 2 -> weights e^−1, e^0.5; token_k1 rejection "0.5_2.0" -> row 0 rejected, 50 % masked."""
    old = np.full((2, 5), -2.0, np.float32)
    samp = np.stack([np.full(5, -1.0), np.full(5, -2.5)]).astype(np.float32)
    m = np.ones((2, 5), bool)
    w, _ = rollout_correction(old, samp, m, level="token", mode="truncate", c_max=2.0)
    np.testing.assert_allclose(np.asarray(w)[:, 0], [0.368, 1.649], atol=0.01)
    w, met = rollout_correction(old, samp, m, level="token", mode="mask", c_max=2.0, c_min=0.5)
    np.testing.assert_allclose(np.asarray(w), np.stack([np.zeros(5), np.full(5, np.exp(0.5))]), rtol=1e-6)
    assert float(met["is_rejected_frac"]) == 0.5


def test_trl_semantics_worked_numbers():
    """notes/loss_menu.md §3 (TRL grpo_trainer, C_min .5, C_max 2): log-ratios [−1, .5, .9, −.5]."""
    old = np.array([[-1.0, 0.5, 0.9, -0.5]], np.float32)
    samp = np.zeros_like(old)
    m = np.ones_like(old, bool)
    cases = {("token", "truncate", 0.5): [0.5, 1.6487213, 2.0, 0.6065307],
             ("token", "mask", 0.5): [0.0, 1.6487213, 0.0, 0.6065307],
             ("token", "truncate", None): [0.3678794, 1.6487213, 2.0, 0.6065307],  # verl TIS, upper only
             ("sequence", "truncate", 0.5): [0.9048374] * 4, ("sequence", "mask", 0.5): [0.9048374] * 4}
    for (level, mode, c_min), want in cases.items():
        w, _ = rollout_correction(old, samp, m, level=level, mode=mode, c_max=2.0, c_min=c_min)
        np.testing.assert_allclose(np.asarray(w)[0], want, rtol=1e-6, err_msg=str((level, mode)))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(IS_LEVELS), st.sampled_from(IS_MODES),
       st.sampled_from(["random", "empty", "extreme"]))
def test_degenerate_inputs_never_nan_and_no_gradient(seed, level, mode, kind):
    rng = np.random.default_rng(seed)
    old = rng.normal(-2, 3, (3, 5)).astype(np.float32)
    samp = rng.normal(-2, 3, (3, 5)).astype(np.float32)
    mask = rng.random((3, 5)) < 0.5
    if kind == "empty":
        mask[:] = False
    if kind == "extreme":
        old[mask] = rng.choice([-1e4, 0.0], size=mask.sum())
        samp[mask] = rng.choice([-1e4, 0.0], size=mask.sum())
    old[~mask], samp[~mask] = np.nan, -np.inf
    w, met = rollout_correction(old, samp, mask, level=level, mode=mode, c_max=2.0, c_min=0.5)
    w = np.asarray(w)
    assert np.all(np.isfinite(w)) and np.all(w[~mask] == 0.0) and np.all(w <= 2.0)
    assert all(np.isfinite(float(x)) for x in met.values())
    g = jax.grad(lambda o: jnp.sum(rollout_correction(o, samp, mask, level=level, mode=mode)[0]))(jnp.asarray(old))
    assert np.all(np.asarray(g) == 0.0)  # detached


def test_weights_flow_into_policy_loss_pg_term_with_zero_gradient_on_masked_tokens():
    rng = np.random.default_rng(3)
    logp = np.log(rng.uniform(0.05, 1, (4, 5))).astype(np.float32)
    samp = (logp + rng.normal(0, 1, (4, 5))).astype(np.float32)
    mask = rng.random((4, 5)) < 0.7
    adv = rng.normal(0, 1, 4).astype(np.float32)
    logp[~mask], samp[~mask] = np.nan, np.nan
    w, _ = rollout_correction(logp, samp, mask, mode="mask", c_min=0.5, c_max=5.0)  # IcePop
    g = np.asarray(jax.grad(lambda lp: policy_loss(lp, logp, adv, mask, pg_weights=w)[0])(jnp.asarray(logp)))
    a = np.broadcast_to(adv[:, None], mask.shape)
    want = np.where(mask, -a * np.asarray(w) / mask.sum(), 0.0)  # ratio 1: −A·w/Σm
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-8)
    assert np.all(g[~mask] == 0.0)


@pytest.mark.parametrize("kw, match", [
    (dict(level="seq"), "level must be one of"), (dict(mode="clip"), "mode must be one of"),
    (dict(c_max=0.0), "c_max must be a number > 0"), (dict(c_min=3.0), r"c_min must be None or a number in \[0, c_max"),
])
def test_rollout_correction_bad_arguments(kw, match):
    z = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=match):
        rollout_correction(z, z, z != 0, **kw)
    with pytest.raises(ValueError, match="sampler_logp must have the same shape"):
        rollout_correction(z, np.zeros((2, 4), np.float32), z != 0)


# ---------------------------------------------------------------- high-entropy selection
_E = np.array([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.7, 0.8, 0.9, 1.0, 1.1, 1.2]], np.float32)
_M = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], bool)


@pytest.mark.parametrize("threshold, want", [
    (0.8, [[0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0]]),
    (0.5, [[0, 0, 0, 0, 0, 1], [1, 1, 1, 1, 0, 0]]),
    (0.0, _M.astype(int).tolist()),
    (1.0, [[0] * 6, [0, 0, 0, 1, 0, 0]]),
])
def test_high_entropy_mask_trl_numbers(threshold, want):
    """TRL tests/test_grpo_trainer.py get_high_entropy_mask cases (threshold = 1 − top_entropy_quantile)."""
    got = high_entropy_mask(_E, _M, top_frac=1.0 - threshold)
    np.testing.assert_array_equal(np.asarray(got), np.array(want, bool))


def test_high_entropy_mask_trl_second_case_and_empty():
    e = np.array([[0.1, 0.2, 0.3, 1.4, 0.5, 0.14], [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]], np.float32)
    m = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0]], bool)
    np.testing.assert_array_equal(np.asarray(high_entropy_mask(e, m, top_frac=0.2 + 1e-7)),
                                  np.array([[0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 0, 0]], bool))
    assert not np.any(np.asarray(high_entropy_mask(e, np.zeros_like(m), top_frac=0.2)))
    # a NaN / +inf entropy on a scored token ranks lowest / highest; the threshold stays finite
    e = np.array([[np.nan, 1, 2, 3, np.inf, 0.5]], np.float32)
    np.testing.assert_array_equal(np.asarray(high_entropy_mask(e, np.ones((1, 6), bool), top_frac=0.5)),
                                  [[False, False, True, True, True, False]])


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.0, 1.0))
def test_high_entropy_mask_matches_numpy_quantile(seed, top_frac):
    rng = np.random.default_rng(seed)
    e = rng.uniform(0, 3, (3, 7)).astype(np.float32)
    m = rng.random((3, 7)) < 0.6
    e[~m] = np.nan
    got = np.asarray(jax.jit(lambda e, m: high_entropy_mask(e, m, top_frac=top_frac))(e, m))
    if m.any():
        tau = np.quantile(e[m], 1.0 - top_frac)  # numpy "linear" == torch.quantile's default
        want = m & (np.where(m, e, -np.inf) >= np.float32(tau))
        # float32 vs float64 interpolation may flip a token within 1 ulp of τ only
        assert np.sum(got != want) <= np.sum(np.isclose(e[m], tau, rtol=1e-6))
        assert got.sum() >= 1
    else:
        assert not got.any()
    assert not np.any(got & ~m)


def test_high_entropy_mask_bad_top_frac_and_the_old_keyword():
    with pytest.raises(ValueError, match=r"top_frac must be a number in \[0, 1\], got 1.5"):
        high_entropy_mask(_E, _M, top_frac=1.5)
    with pytest.raises(TypeError, match=r"argument 'rho'; it is now top_frac="):
        high_entropy_mask(_E, _M, rho=0.2)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'tau'$"):
        high_entropy_mask(_E, _M, tau=0.2)
