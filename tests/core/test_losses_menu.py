"""The policy_loss menu (issue #17): GSPO(-token), CISPO, pg_weights, KL abs/k1+/k3+/kl_clamp, packing
with segment_ids and the global_norm fix; against a float64 numpy reference (value AND gradient), the
peers' numbers (verl / TRL / tunix, see notes/loss_menu.md), degenerate inputs and masked gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prs.core.losses import AGG_MODES, KL_TYPES, agg_denominator, policy_loss


def make_batch(seed, r=6, t=7, adv_rank=1):
    rng = np.random.default_rng(seed)
    logp = np.log(rng.uniform(0.05, 1.0, (r, t))).astype(np.float32)
    old = (logp + rng.normal(0, 0.4, (r, t))).astype(np.float32)
    adv = rng.normal(0, 1, (r,) if adv_rank == 1 else (r, t)).astype(np.float32)
    lengths = rng.integers(0, t + 1, r)
    mask = np.arange(t)[None, :] < lengths[:, None]
    mask[0] = False  # a fully masked row
    mask[1] = True
    ref = (logp + rng.normal(0, 0.5, (r, t))).astype(np.float32)
    w = rng.uniform(0, 2, (r, t)).astype(np.float32)
    return logp, old, adv, mask, ref, w


# ---------------------------------------------------------------- numpy reference (float64)
def np_agg_weights(mask, agg, norm_len=None):
    """c [R, T] with loss = Σ c·ℓ (every prs aggregation is linear in the per-token losses)."""
    m = np.asarray(mask) != 0
    b = max((m.sum(1) > 0).sum(), 1)
    n_i = np.maximum(m.sum(1, keepdims=True), 1)
    c = {"token-mean": np.ones(m.shape) / max(m.sum(), 1),
         "seq-mean-token-sum": np.ones(m.shape) / b,
         "seq-mean-token-mean": np.ones(m.shape) / n_i / b,
         "seq-mean-token-sum-norm": np.ones(m.shape) / (b * (m.shape[1] if norm_len is None else norm_len))}[agg]
    return np.where(m, c, 0.0)


def np_pg(logp, old, adv, mask, *, loss_type="ppo", ratio_level="token", clip_low=0.2, clip_high=0.28,
          dual_clip=None, w=None):
    """Per-token PG loss value and its derivative d ℓ_t / d logp_t (float64)."""
    m = np.asarray(mask) != 0
    adv = np.asarray(adv, np.float64)
    a = np.where(m, np.broadcast_to(adv[:, None] if adv.ndim == 1 else adv, m.shape), 0.0)
    lp = np.where(m, np.asarray(logp, np.float64), 0.0)
    ol = np.where(m, np.asarray(old, np.float64), 0.0)
    lr = np.clip(lp - ol, -20, 20)
    if ratio_level == "sequence":
        seq = lr.sum(1, keepdims=True) / np.maximum(m.sum(1, keepdims=True), 1)
        lr = np.broadcast_to(np.minimum(seq, 10.0), m.shape)
    rho = np.exp(lr)
    clipped = np.clip(rho, 1 - clip_low, 1 + clip_high)
    if loss_type == "cispo":
        val, grad = -clipped * a * lp, -clipped * a
    else:
        pg1, pg2 = -a * rho, -a * clipped
        val = np.maximum(pg1, pg2)
        grad = np.where(pg1 >= pg2, -a * rho, 0.0)  # d(ρ)/d logp_t = ρ (token and GSPO-token alike)
        if dual_clip is not None:
            dual = (a < 0) & (val > -a * dual_clip)
            val = np.where(dual, -a * dual_clip, val)
            grad = np.where(dual, 0.0, grad)
    if w is not None:
        val, grad = val * w, grad * w
    return np.where(m, val, 0.0), np.where(m, grad, 0.0)


def _grad(logp, *args, **kw):
    return np.asarray(jax.grad(lambda lp: policy_loss(lp, *args, **kw)[0])(jnp.asarray(logp)))


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("opts", [
    dict(loss_type="ppo", ratio_level="sequence"),
    dict(loss_type="ppo", ratio_level="sequence", clip_low=3e-4, clip_high=4e-4, dual_clip=3.0),
    dict(loss_type="cispo"),
    dict(loss_type="cispo", clip_low=10.0, clip_high=0.2),
    dict(loss_type="cispo", ratio_level="sequence", clip_high=4.0),
    dict(loss_type="ppo", dual_clip=3.0, weights=True),
    dict(loss_type="cispo", weights=True),
])
def test_policy_loss_options_match_numpy_value_and_gradient(agg, opts):
    opts = dict(opts)
    logp, old, adv, mask, _, w = make_batch(3)
    use_w = opts.pop("weights", False)
    want_val, want_grad = np_pg(logp, old, adv, mask, w=w if use_w else None, **opts)
    c = np_agg_weights(mask, agg)
    kw = dict(agg=agg, pg_weights=w if use_w else None, **opts)
    loss, metrics = policy_loss(logp, old, adv, mask, **kw)
    np.testing.assert_allclose(float(loss), (c * want_val).sum(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_grad(logp, old, adv, mask, **kw), c * want_grad, rtol=1e-4, atol=1e-6)
    assert all(np.isfinite(np.asarray(x)) for x in metrics.values())


@pytest.mark.parametrize("agg", AGG_MODES)
def test_gspo_token_equals_trl_sequence_gspo_for_per_sequence_advantages(agg):
    """TRL ``importance_sampling_level="sequence"`` (gradient through the mean log-ratio) and the
    GSPO-token form give the same loss and gradient (notes/loss_menu.md §1); [R, T] advantages differ."""
    logp, old, adv, mask, _, _ = make_batch(11)
    eps = dict(clip_low=3e-4, clip_high=0.05)

    def trl(lp):
        m = jnp.asarray(mask)
        mf = m.astype(jnp.float32)
        lr = jnp.where(m, lp - old, 0.0)
        s = jnp.exp(jnp.sum(lr, 1, keepdims=True) / jnp.maximum(jnp.sum(mf, 1, keepdims=True), 1.0))  # [R, 1]
        a = adv[:, None]
        per = -jnp.minimum(s * a, jnp.clip(s, 1 - eps["clip_low"], 1 + eps["clip_high"]) * a)  # [R, 1]
        per = jnp.where(m, jnp.broadcast_to(per, m.shape), 0.0)
        return jnp.sum(per * np_agg_weights(mask, agg).astype(np.float32))

    ours = lambda lp: policy_loss(lp, old, adv, mask, ratio_level="sequence", agg=agg, **eps)[0]  # noqa: E731
    lp = jnp.asarray(logp)
    np.testing.assert_allclose(float(ours(lp)), float(trl(lp)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(jax.grad(ours)(lp)), np.asarray(jax.grad(trl)(lp)), rtol=1e-4, atol=1e-7)
    assert np.any(np.asarray(jax.grad(ours)(lp)) != 0)


def test_gspo_worked_numbers():
    """notes/loss_menu.md §1 (derived from verl's compute_policy_loss_gspo): log-ratios [0.1, −0.1, 0.3]."""
    old = np.zeros((1, 3), np.float32)
    lp = np.array([[0.1, -0.1, 0.3]], np.float32)
    m = np.ones((1, 3), bool)
    kw = dict(ratio_level="sequence", clip_low=3e-4, clip_high=4e-4, agg="seq-mean-token-mean")
    loss, met = policy_loss(lp, old, np.array([1.0], np.float32), m, **kw)
    np.testing.assert_allclose(float(loss), -1.0004, rtol=1e-6)
    np.testing.assert_allclose(float(met["ratio_mean"]), np.exp(0.1), rtol=1e-6)
    assert float(met["clip_frac_high"]) == 1.0
    assert np.all(_grad(lp, old, np.array([1.0], np.float32), m, **kw) == 0.0)
    loss, _ = policy_loss(lp, old, np.array([-1.0], np.float32), m, **kw)
    np.testing.assert_allclose(float(loss), 1.1051709, rtol=1e-6)
    np.testing.assert_allclose(_grad(lp, old, np.array([-1.0], np.float32), m, **kw), [[1.1051709 / 3] * 3], rtol=1e-6)


def test_cispo_worked_numbers_trl_and_verl_conventions():
    """lp = −1, old = −1.5 (ρ = e^0.5), A = 1: TRL ``epsilon_high=5`` (cap 5 = clip_high 4) keeps ρ;
    verl's example (clip_ratio_low=10, high=0.2) caps it at 1.2 (notes/loss_menu.md §2)."""
    lp, old, a, m = np.array([[-1.0]], np.float32), np.array([[-1.5]], np.float32), np.ones(1, np.float32), np.ones((1, 1))
    for kw, w, frac in ((dict(clip_low=10.0, clip_high=4.0), 1.6487213, 0.0), (dict(clip_low=10.0, clip_high=0.2), 1.2, 1.0)):
        loss, met = policy_loss(lp, old, a, m, loss_type="cispo", **kw)
        np.testing.assert_allclose(float(loss), w, rtol=1e-6)
        np.testing.assert_allclose(_grad(lp, old, a, m, loss_type="cispo", **kw), [[-w]], rtol=1e-6)
        assert float(met["clip_frac_high"]) == frac
    # the gradient direction is that of PPO's unclipped surrogate at ρ ≤ cap: −A·ρ
    np.testing.assert_allclose(_grad(lp, old, a, m, loss_type="cispo", clip_low=10.0, clip_high=4.0),
                               _grad(lp, old, a, m, clip_high=4.0), rtol=1e-6)


def test_pg_weights_scale_only_the_policy_gradient_term():
    logp, old, adv, mask, ref, w = make_batch(4)
    kw = dict(ref_logp=ref, kl_coef=0.3)
    base, mb = policy_loss(logp, old, adv, mask, **kw)
    zero, mz = policy_loss(logp, old, adv, mask, pg_weights=np.zeros_like(w), **kw)
    np.testing.assert_allclose(float(zero), 0.3 * float(mb["kl"]), rtol=1e-5)  # KL untouched
    assert float(mz["token_count"]) == float(mb["token_count"])  # denominator unchanged (TRL)
    ones, _ = policy_loss(logp, old, adv, mask, pg_weights=np.ones_like(w), **kw)
    assert float(ones) == float(base)
    g = _grad(logp, old, adv, mask, pg_weights=w)  # the weights are constants
    gw = jax.grad(lambda ww: policy_loss(logp, old, adv, mask, pg_weights=ww)[0])(jnp.asarray(w))
    assert np.all(np.asarray(gw) == 0.0) and np.any(g != 0)


# ---------------------------------------------------------------- KL
def test_kl_worked_numbers_and_straight_through():
    """lp = −1, ref = −2 (notes/loss_menu.md §6): values k1 1, abs 1, k2 .5, k3 e^−1; d/dlp k1 1, k2 1,
    k3 1 − e^−1; k3+ value e^−1 with the k2 gradient 1 (verl's documented intent)."""
    want = {"k1": (1.0, 1.0), "abs": (1.0, 1.0), "k2": (0.5, 1.0), "k3": (np.exp(-1), 1 - np.exp(-1)),
            "k1+": (1.0, 1.0), "k3+": (np.exp(-1), 1.0)}
    assert set(want) == set(KL_TYPES)
    lp, ref, z, m = np.array([[-1.0]], np.float32), np.array([[-2.0]], np.float32), np.zeros(1, np.float32), np.ones((1, 1))
    for kl_type, (val, grad) in want.items():
        loss = lambda x: policy_loss(x, x, z, m, ref_logp=ref, kl_coef=1.0, kl_type=kl_type)[0]  # noqa: E731
        np.testing.assert_allclose(float(loss(jnp.asarray(lp))), val, rtol=1e-6, err_msg=kl_type)
        np.testing.assert_allclose(float(jax.grad(loss)(jnp.asarray(lp))[0, 0]), grad, rtol=1e-6, err_msg=kl_type)
    # the straight-through gradient is the k2 gradient everywhere, also where k3 is clamped
    far = np.array([[-30.0]], np.float32)
    g = jax.grad(lambda x: policy_loss(x, x, z, m, ref_logp=ref, kl_coef=1.0, kl_type="k3+")[0])(jnp.asarray(far))
    np.testing.assert_allclose(float(g[0, 0]), -28.0, rtol=1e-6)


def test_kl_clamp_tunix_numbers():
    """tunix tests/rl/common_test.py: "kl" lp 100 / ref −100, clamp 5 -> 5, swapped -> −5;
    lp [−50, 0, 50], ref [50, 0, −50], clamp 10 -> kl [−10, 0, 10], mse [10, 0, 10], low_var_kl [10, 0, 10]."""
    z, m = np.zeros(1, np.float32), np.ones((1, 1))

    def kl(lp, ref, kl_type, clamp):
        lp, ref = np.array([[lp]], np.float32), np.array([[ref]], np.float32)
        return float(policy_loss(lp, lp, z, m, ref_logp=ref, kl_coef=1.0, kl_type=kl_type, kl_clamp=clamp)[1]["kl"])

    assert kl(100.0, -100.0, "k1", 5.0) == 5.0 and kl(-100.0, 100.0, "k1", 5.0) == -5.0
    np.testing.assert_allclose([kl(a, b, "k1", 1e4) for a, b in ((0.1, 0.4), (0.2, 0.5))], [-0.3, -0.3], rtol=1e-5)
    for kl_type, want in (("k1", [-10, 0, 10]), ("k2", [10, 0, 10]), ("k3", [10, 0, 10])):
        got = [kl(a, b, kl_type, 10.0) for a, b in ((-50.0, 50.0), (0.0, 0.0), (50.0, -50.0))]
        np.testing.assert_allclose(got, want, err_msg=kl_type)
    # default: k3 keeps verl's ±10, k1 stays unclamped; kl_clamp=inf lifts k3's clamp
    assert kl(-50.0, 50.0, "k3", None) == 10.0 and kl(50.0, -50.0, "k1", None) == 100.0
    np.testing.assert_allclose(kl(-2.0, 3.0, "k3", float("inf")), np.exp(5.0) - 6.0, rtol=1e-6)


# ---------------------------------------------------------------- packing
@pytest.mark.parametrize("ratio_level", ["token", "sequence"])
def test_packed_equals_unpacked_tunix(ratio_level):
    """tunix algo_core_test.test_grpo_loss_fn_packed_equals_unpacked: packed [[3,4,5,6]] with segments
    [[1,1,1,2]] vs unpacked [[3,4,5],[6,0,0]], ratio 1, seq-mean-token-mean -> −2.25 (per row: −1.875)."""
    lp = np.log(np.array([[0.3, 0.4, 0.5, 0.6]], np.float32))
    packed = policy_loss(lp, lp, np.array([[1.5, 1.5, 1.5, 3.0]], np.float32), np.ones((1, 4), bool),
                         agg="seq-mean-token-mean", ratio_level=ratio_level, clip_high=0.2,
                         segment_ids=np.array([[1, 1, 1, 2]]), num_segments=3)[0]
    np.testing.assert_allclose(float(packed), -2.25, rtol=1e-6)
    row = policy_loss(lp, lp, np.array([[1.5, 1.5, 1.5, 3.0]], np.float32), np.ones((1, 4), bool),
                      agg="seq-mean-token-mean")[0]
    np.testing.assert_allclose(float(row), -1.875, rtol=1e-6)


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("ratio_level", ["token", "sequence"])
def test_packed_equals_unpacked_random(agg, ratio_level):
    """Random rows packed two per row: loss and per-token gradient equal the unpacked batch's."""
    logp, old, adv, mask, _, _ = make_batch(9, r=4, t=5, adv_rank=2)
    mask[0, :2] = True  # every row scored
    t = 5
    lp_p, old_p, adv_p = (np.concatenate([x[0::2], x[1::2]], axis=1) for x in (logp, old, adv))  # [2, 10]
    m_p = np.concatenate([mask[0::2], mask[1::2]], axis=1)
    seg = np.where(m_p, np.concatenate([np.ones((2, t), int), 2 * np.ones((2, t), int)], axis=1), 0)
    kw = dict(agg=agg, ratio_level=ratio_level, norm_len=t)
    un = policy_loss(logp, old, adv, mask, **kw)[0]
    pk = policy_loss(lp_p, old_p, adv_p, m_p, segment_ids=seg, num_segments=3, **kw)[0]
    np.testing.assert_allclose(float(pk), float(un), rtol=1e-5, atol=1e-7)
    g_un = _grad(logp, old, adv, mask, **kw)
    g_pk = _grad(lp_p, old_p, adv_p, m_p, segment_ids=seg, num_segments=3, **kw)
    np.testing.assert_allclose(np.concatenate([g_pk[:, :t], g_pk[:, t:]])[[0, 2, 1, 3]], g_un, rtol=1e-4, atol=1e-7)
    assert float(agg_denominator(m_p, agg=agg, segment_ids=seg, num_segments=3)) == float(agg_denominator(mask, agg=agg))


# ---------------------------------------------------------------- global_norm (bug-class fix)
@pytest.mark.parametrize("agg", AGG_MODES)
def test_fractional_global_norm_is_honoured_eager_and_jitted(agg):
    logp, old, adv, mask, _, _ = make_batch(2)
    num = float(policy_loss(logp, old, adv, mask, agg=agg, global_norm=1.0)[0])
    for g in (0.25, 2.5):
        np.testing.assert_allclose(float(policy_loss(logp, old, adv, mask, agg=agg, global_norm=g)[0]), num / g, rtol=1e-6)
        jitted = jax.jit(lambda gn: policy_loss(logp, old, adv, mask, agg=agg, global_norm=gn)[0])
        np.testing.assert_allclose(float(jitted(jnp.float32(g))), num / g, rtol=1e-6)
    assert num != 0.0


@pytest.mark.parametrize("bad", [0.0, -3.0, float("nan"), float("inf"), np.array([1.0, 2.0])])
def test_invalid_global_norm_raises_naming_it(bad):
    logp, old, adv, mask, _, _ = make_batch(2)
    with pytest.raises(ValueError, match="global_norm"):
        policy_loss(logp, old, adv, mask, global_norm=bad)


def test_traced_invalid_global_norm_is_loud_not_clamped():
    logp, old, adv, mask, _, _ = make_batch(2)
    f = jax.jit(lambda m, gn: policy_loss(logp, old, adv, m, global_norm=gn)[0])
    assert np.isnan(float(f(mask, jnp.float32(-3.0))))
    assert float(f(np.zeros_like(mask), jnp.float32(0.0))) == 0.0  # an empty global batch
    assert np.isnan(float(f(mask, jnp.float32(0.0))))  # tokens but a zero denominator


# ---------------------------------------------------------------- bad input
_LP = np.zeros((2, 3), np.float32)
_A = np.zeros(2, np.float32)
_M = np.ones((2, 3), bool)


@pytest.mark.parametrize("kw, match", [
    (dict(loss_type="grpo"), "loss_type must be one of"),
    (dict(ratio_level="seq"), "ratio_level must be one of"),
    (dict(loss_type="cispo", dual_clip=3.0), "dual_clip=3.0 applies to loss_type='ppo'"),
    (dict(clip_low=10.0), r"clip_low must be a number \[0, 1\)"),
    (dict(loss_type="cispo", clip_low=-1.0), "clip_low must be a number >= 0"),
    (dict(kl_clamp=0.0), "kl_clamp must be None or a number > 0"),
    (dict(pg_weights=np.ones((2, 4), np.float32)), r"pg_weights must have the same shape"),
    (dict(segment_ids=np.ones((2, 3), int)), "num_segments must be a static int"),
    (dict(num_segments=3), "num_segments=3 needs segment_ids"),
    (dict(segment_ids=np.full((2, 3), 3), num_segments=3), r"segment_ids must lie in \[0, num_segments=3\)"),
    (dict(segment_ids=np.zeros((2, 3), int), num_segments=3), "segment_ids == 0"),
    (dict(segment_ids=np.ones((2, 3), np.float32), num_segments=3), "segment_ids must have a"),
])
def test_bad_menu_arguments_raise(kw, match):
    with pytest.raises(ValueError, match=match):
        policy_loss(_LP, _LP, _A, _M, **kw)
    with pytest.raises(ValueError, match=match):  # a float mask is checked the same way
        policy_loss(_LP, _LP, _A, _M.astype(np.float32), **kw)


# ---------------------------------------------------------------- degenerate inputs, masked gradients
_OPTION_SETS = [
    dict(ratio_level="sequence"),
    dict(loss_type="cispo", clip_low=10.0),
    dict(loss_type="cispo", ratio_level="sequence"),
    dict(dual_clip=3.0, weights=True),
    dict(kl_type="abs"), dict(kl_type="k1+"), dict(kl_type="k3+", kl_clamp=5.0),
    dict(packed=True, ratio_level="sequence"),
]


def _fill_masked(logp, old, ref, w, mask):
    """NaN/Inf wherever the mask is 0: none of it may reach the loss or the gradient."""
    for x, fill in ((logp, np.nan), (old, -np.inf), (ref, np.inf), (w, np.nan)):
        x[~mask] = fill


def _nan_masked_batch(seed, r=4, t=6):
    logp, old, adv, mask, ref, w = make_batch(seed, r=r, t=t)
    _fill_masked(logp, old, ref, w, mask)
    return logp, old, adv, mask, ref, w


def _opts(o, mask, w, ref):
    o = dict(o)
    kw = dict(ref_logp=ref, kl_coef=0.1)
    if o.pop("weights", False):
        kw["pg_weights"] = w
    if o.pop("packed", False):
        kw.update(segment_ids=np.where(mask, 1 + (np.arange(mask.shape[1]) >= mask.shape[1] // 2), 0), num_segments=3)
    return {**kw, **o}


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("o", _OPTION_SETS)
def test_masked_tokens_get_exactly_zero_gradient_with_every_option(agg, o):
    logp, old, adv, mask, ref, w = _nan_masked_batch(5)
    kw = dict(agg=agg, **_opts(o, mask, w, ref))
    loss, metrics = policy_loss(logp, old, adv, mask, **kw)
    assert np.isfinite(float(loss)) and all(np.isfinite(np.asarray(x)) for x in metrics.values())
    g = _grad(logp, old, adv, mask, **kw)
    assert np.all(np.isfinite(g)) and np.all(g[~mask] == 0.0) and np.any(g[mask] != 0.0)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(AGG_MODES), st.sampled_from(range(len(_OPTION_SETS))),
       st.sampled_from(["random", "empty", "one", "extreme"]))
def test_degenerate_inputs_never_give_nan(seed, agg, which, kind):
    rng = np.random.default_rng(seed)
    logp, old, adv, mask, ref, w = make_batch(seed % 1000, r=3, t=4)
    if kind == "empty":
        mask[:] = False
    elif kind == "one":
        mask[:] = False
        mask[rng.integers(3), rng.integers(4)] = True
    elif kind == "extreme":
        logp[mask] = rng.choice([-1e4, -80.0, 0.0], size=mask.sum())
        old[mask] = rng.choice([-1e4, -1e-3, 0.0], size=mask.sum())
        adv[:] = rng.choice([0.0, 1e6, -1e6], size=adv.shape)
    _fill_masked(logp, old, ref, w, mask)
    kw = dict(agg=agg, **_opts(_OPTION_SETS[which], mask, w, ref))
    loss, metrics = policy_loss(logp, old, adv, mask, **kw)
    g = _grad(logp, old, adv, mask, **kw)
    assert np.isfinite(float(loss)) and np.all(np.isfinite(g)) and np.all(g[~mask] == 0.0)
    assert all(np.isfinite(np.asarray(x)) for x in metrics.values())
    if kind == "empty":
        assert float(loss) == 0.0
