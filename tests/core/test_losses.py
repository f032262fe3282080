"""Tests for prs.core.losses against a float64 numpy re-implementation, closed forms and the peer bugs."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prs.core.advantages import group_advantages, mixed_groups
from prs.core.losses import AGG_MODES, agg_denominator, policy_loss, token_entropy, token_logprobs


# ---------------------------------------------------------------- numpy reference (float64)
def np_log_softmax(z):
    z = np.asarray(z, np.float64)
    mx = z.max(-1, keepdims=True)
    return z - mx - np.log(np.exp(z - mx).sum(-1, keepdims=True))


def ref_per_token(logp, old, adv, mask, *, clip_low=0.2, clip_high=0.28, dual_clip=None, ref=None,
                  kl_coef=0.0, kl_type="k3", ent=None, ent_coef=0.0):
    m = np.asarray(mask) != 0
    adv = np.asarray(adv, np.float64)
    a = np.broadcast_to(adv[:, None] if adv.ndim == 1 else adv, m.shape)
    a = np.where(m, a, 0.0)
    lp = np.where(m, np.asarray(logp, np.float64), 0.0)
    ol = np.where(m, np.asarray(old, np.float64), 0.0)
    rho = np.exp(np.clip(lp - ol, -20, 20))
    loss = np.maximum(-a * rho, -a * np.clip(rho, 1 - clip_low, 1 + clip_high))
    if dual_clip is not None:
        loss = np.where(a < 0, np.minimum(loss, -a * dual_clip), loss)
    if ref is not None:
        x = np.where(m, np.asarray(ref, np.float64), 0.0) - lp
        kl = {"k1": -x, "k2": 0.5 * x**2,
              "k3": np.clip(np.exp(np.clip(x, -20, 20)) - np.clip(x, -20, 20) - 1, -10, 10)}[kl_type]
        loss = loss + kl_coef * kl
    if ent is not None:
        loss = loss - ent_coef * np.where(m, np.asarray(ent, np.float64), 0.0)
    return np.where(m, loss, 0.0)


def ref_agg(x, mask, agg, norm_len=None, denom=None):
    m = np.asarray(mask) != 0
    n_seq = max((m.sum(1) > 0).sum(), 1) if denom is None else max(denom, 1)
    if agg == "token-mean":
        return x.sum() / (max(m.sum(), 1) if denom is None else max(denom, 1))
    if agg == "seq-mean-token-sum":
        return x.sum() / n_seq
    if agg == "seq-mean-token-mean":
        return (x.sum(1) / np.maximum(m.sum(1), 1)).sum() / n_seq
    return x.sum() / (n_seq * (m.shape[1] if norm_len is None else norm_len))


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
    ent = rng.uniform(0, 3, (r, t)).astype(np.float32)
    return logp, old, adv, mask, ref, ent


# ---------------------------------------------------------------- token_logprobs / token_entropy
def test_token_logprobs_matches_numpy_and_is_stable():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (3, 4, 11)).astype(np.float32)
    tokens = rng.integers(0, 11, (3, 4))
    want = np.take_along_axis(np_log_softmax(logits), tokens[..., None], -1)[..., 0]
    np.testing.assert_allclose(token_logprobs(logits, tokens), want, rtol=1e-5, atol=1e-5)
    huge = logits * 1e4  # exp overflows without logsumexp
    got = np.asarray(token_logprobs(huge, tokens))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, np.take_along_axis(np_log_softmax(huge), tokens[..., None], -1)[..., 0],
                               rtol=1e-5, atol=1e-2)
    bf = jnp.asarray(logits, jnp.bfloat16)
    got_bf = token_logprobs(bf, tokens)
    assert got_bf.dtype == jnp.float32
    want_bf = np.take_along_axis(np_log_softmax(np.asarray(bf, np.float32)), tokens[..., None], -1)[..., 0]
    np.testing.assert_allclose(got_bf, want_bf, rtol=1e-5, atol=1e-5)  # same up-cast logits: f32-exact
    assert np.isnan(np.asarray(token_logprobs(logits, np.full((3, 4), 11)))).all()  # out of range -> NaN
    assert np.isnan(np.asarray(token_logprobs(logits, np.full((3, 4), -1)))).all()  # a -1 pad must not wrap


def test_token_entropy_matches_numpy_and_closed_forms():
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 2, (2, 3, 9)).astype(np.float32)
    p = np.exp(np_log_softmax(logits))
    want = -(p * np_log_softmax(logits)).sum(-1)
    np.testing.assert_allclose(token_entropy(logits), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(token_entropy(np.zeros((2, 3, 9), np.float32)), np.log(9), rtol=1e-6)  # uniform
    banned = np.zeros((1, 1, 4), np.float32)
    banned[..., 2:] = -np.inf
    got = np.asarray(token_entropy(banned))
    np.testing.assert_allclose(got, np.log(2), rtol=1e-6)  # two live tokens, -inf ones contribute 0


# ---------------------------------------------------------------- the loss vs the reference
@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("adv_rank", [1, 2])
@pytest.mark.parametrize("extras", ["plain", "dual", "kl_k1", "kl_k2", "kl_k3_ent"])
def test_policy_loss_matches_reference(agg, adv_rank, extras):
    logp, old, adv, mask, ref, ent = make_batch(3, adv_rank=adv_rank)
    kw = dict(clip_low=0.2, clip_high=0.28)
    if extras == "dual":
        kw["dual_clip"] = 3.0
    if extras.startswith("kl"):
        kw.update(ref=ref, kl_coef=0.05, kl_type=extras.split("_")[1])
    if extras.endswith("ent"):
        kw.update(ent=ent, ent_coef=0.01)
    want = ref_agg(ref_per_token(logp, old, adv, mask, **kw), mask, agg)
    jkw = {("ref_logp" if k == "ref" else "entropy" if k == "ent" else "entropy_coef" if k == "ent_coef" else k): v
           for k, v in kw.items()}
    loss, metrics = policy_loss(logp, old, adv, mask, agg=agg, **jkw)
    np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-6)
    assert metrics["token_count"] == mask.sum()


def test_clip_cases_closed_form():
    """One token per case: ρ = e^{logp − old}; the loss is picked from the PPO case table by hand."""
    rho = np.array([1.5, 0.5, 0.5, 1.5, 5.0, 1.0], np.float32)
    adv = np.array([1.0, -1.0, 1.0, -1.0, -1.0, 2.0], np.float32)
    logp = np.log(rho)[:, None]
    old = np.zeros_like(logp)
    mask = np.ones_like(logp, bool)
    want = [-1.28,  # A>0, ρ above 1+ε_high: clipped at 1.28
            0.8,  # A<0, ρ below 1−ε_low: clipped at 0.8
            -0.5,  # A>0, ρ low: unclipped
            1.5,  # A<0, ρ high: unclipped (pessimistic max)
            3.0,  # A<0, ρ=5 > c=3: dual clip caps at −A·c
            -2.0]  # ρ=1
    _, m = policy_loss(logp, old, adv, mask, dual_clip=3.0, agg="seq-mean-token-sum")
    per_tok = [float(policy_loss(logp[i:i + 1], old[i:i + 1], adv[i:i + 1], mask[i:i + 1], dual_clip=3.0)[0])
               for i in range(6)]
    np.testing.assert_allclose(per_tok, want, rtol=1e-5)
    np.testing.assert_allclose(m["clip_frac_high"], 1 / 6)
    np.testing.assert_allclose(m["clip_frac_low"], 1 / 6)
    np.testing.assert_allclose(m["dual_clip_frac"], 1 / 6)
    np.testing.assert_allclose(m["ratio_mean"], rho.mean(), rtol=1e-6)
    np.testing.assert_allclose(m["approx_kl"], np.mean(rho - 1 - np.log(rho)), rtol=1e-5)


def test_k3_clamps_like_verl():
    logp = np.zeros((1, 2), np.float32)
    ref = np.array([[30.0, -30.0]], np.float32)  # x = ±30 -> clamped to ±20; e^20 − 21 -> clamp 10
    _, m = policy_loss(logp, logp, np.zeros(1, np.float32), np.array([[1, 0]]), ref_logp=ref, kl_coef=1.0)
    np.testing.assert_allclose(m["kl"], 10.0)
    _, m = policy_loss(logp, logp, np.zeros(1, np.float32), np.array([[0, 1]]), ref_logp=ref, kl_coef=1.0)
    np.testing.assert_allclose(m["kl"], min(np.exp(-20.0) + 20 - 1, 10.0), rtol=1e-6)  # x = −20: 19 -> 10


def test_norm_len_override():
    logp, old, adv, mask, _, _ = make_batch(4)
    loss, _ = policy_loss(logp, old, adv, mask, agg="seq-mean-token-sum-norm", norm_len=64)
    np.testing.assert_allclose(loss, ref_agg(ref_per_token(logp, old, adv, mask), mask, "x", norm_len=64), rtol=1e-5)


# ---------------------------------------------------------------- gradients and masking
def _grad(fn, logp, *args, **kw):
    return jax.grad(lambda lp: fn(lp, *args, **kw)[0])(jnp.asarray(logp))


@pytest.mark.parametrize("agg", AGG_MODES)
def test_masked_tokens_get_exactly_zero_gradient_even_with_nan(agg):
    logp, old, adv, mask, ref, ent = make_batch(5)
    logp = logp.copy()
    old = old.copy()
    logp[~mask] = np.nan
    old[~mask] = -np.inf
    ref = ref.copy()
    ref[~mask] = np.inf
    ent = ent.copy()
    ent[~mask] = np.nan
    kw = dict(agg=agg, ref_logp=ref, kl_coef=0.1, entropy=ent, entropy_coef=0.01, dual_clip=3.0)
    loss, metrics = policy_loss(logp, old, adv, mask, **kw)
    assert np.isfinite(float(loss)) and all(np.isfinite(np.asarray(v)) for v in metrics.values())
    g = np.asarray(_grad(policy_loss, logp, old, adv, mask, **kw))
    assert np.all(np.isfinite(g))
    assert np.all(g[~mask] == 0.0)
    assert np.any(g[mask] != 0.0)
    ge = jax.grad(lambda e: policy_loss(logp, old, adv, mask, **{**kw, "entropy": e})[0])(jnp.asarray(ent))
    assert np.all(np.asarray(ge)[~mask] == 0.0) and np.all(np.isfinite(np.asarray(ge)))


def test_gradient_matches_analytic_token_mean():
    """d/dlogp of token-mean PPO: −A·ρ/Σm where the unclipped branch is active, else 0 (no KL)."""
    logp, old, adv, mask, _, _ = make_batch(6)
    g = np.asarray(_grad(policy_loss, logp, old, adv, mask))
    a = np.broadcast_to(adv[:, None], mask.shape).astype(np.float64)
    rho = np.exp(logp.astype(np.float64) - old)
    active = (-a * rho) >= (-a * np.clip(rho, 0.8, 1.28))
    want = np.where(mask & active, -a * rho / mask.sum(), 0.0)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)


def test_empty_mask_gives_zero_loss():
    logp, old, adv, mask, ref, _ = make_batch(7)
    empty = np.zeros_like(mask)
    for agg in AGG_MODES:
        loss, metrics = policy_loss(logp, old, adv, empty, agg=agg, ref_logp=ref, kl_coef=0.1)
        assert float(loss) == 0.0 and float(metrics["token_count"]) == 0.0
        assert np.all(np.asarray(_grad(policy_loss, logp, old, adv, empty, agg=agg)) == 0.0)


# ---------------------------------------------------------------- peer bugs
@pytest.mark.parametrize("agg", AGG_MODES)
def test_micro_batch_accumulation_equals_full_batch(agg):
    """verl #5625: token-mean with per-micro-batch denominators != full batch under grad accumulation.

    With global_norm = Σ over micro-batches of agg_denominator, summed micro losses/grads equal the
    full batch's for every agg mode."""
    logp, old, adv, mask, ref, _ = make_batch(8, r=8, t=9)
    kw = dict(agg=agg, kl_coef=0.02)
    full, _ = policy_loss(logp, old, adv, mask, ref_logp=ref, **kw)
    g_full = np.asarray(_grad(policy_loss, logp, old, adv, mask, ref_logp=ref, **kw))
    parts = [slice(0, 3), slice(3, 8)]  # unequal micro-batches
    gn = sum(float(agg_denominator(mask[s], agg=agg)) for s in parts)
    assert gn == float(agg_denominator(mask, agg=agg))
    micro = [policy_loss(logp[s], old[s], adv[s], mask[s], ref_logp=ref[s], global_norm=gn, **kw)[0] for s in parts]
    g_micro = np.concatenate([np.asarray(_grad(policy_loss, logp[s], old[s], adv[s], mask[s], ref_logp=ref[s],
                                               global_norm=gn, **kw)) for s in parts])
    np.testing.assert_allclose(sum(float(x) for x in micro), float(full), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(g_micro, g_full, rtol=1e-5, atol=1e-8)
    # without global_norm the naive average of micro-batch means is wrong (the bug): the test has teeth
    naive = sum(float(policy_loss(logp[s], old[s], adv[s], mask[s], ref_logp=ref[s], **kw)[0]) for s in parts) / 2
    assert not np.isclose(naive, float(full), rtol=1e-3)


def test_zero_std_groups_give_no_gradient_and_no_denominator():
    """TRL PR #5640: zero-std groups still produced KL gradient and inflated the token denominator.

    Masking rollouts of groups that mixed_groups drops removes them from the loss, the KL and the count:
    the loss equals that of the batch without those groups, and their tokens get exactly zero gradient."""
    rng = np.random.default_rng(9)
    b, n, t = 4, 4, 6
    rewards = np.array([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0, 1, 0, 0]], np.float32)
    adv = np.asarray(group_advantages(rewards)).reshape(b * n)  # [R]
    keep = np.repeat(np.asarray(mixed_groups(rewards)), n)  # [R]
    resp = np.arange(t)[None, :] < rng.integers(1, t + 1, b * n)[:, None]
    mask = resp & keep[:, None]
    logp = np.log(rng.uniform(0.1, 1, (b * n, t))).astype(np.float32)
    old = (logp + rng.normal(0, 0.2, logp.shape)).astype(np.float32)
    ref = (logp + rng.normal(0, 0.5, logp.shape)).astype(np.float32)
    for agg in AGG_MODES:
        kw = dict(agg=agg, ref_logp=ref, kl_coef=0.1)
        loss, m = policy_loss(logp, old, adv, mask, **kw)
        sub, _ = policy_loss(logp[keep], old[keep], adv[keep], resp[keep], **{**kw, "ref_logp": ref[keep]})
        np.testing.assert_allclose(loss, sub, rtol=1e-6)
        assert m["token_count"] == resp[keep].sum()
        g = np.asarray(_grad(policy_loss, logp, old, adv, mask, **kw))
        assert np.all(g[~keep] == 0.0)
        # the buggy version: KL still on zero-std rows (A=0 but KL gradient non-zero there)
        g_bug = np.asarray(_grad(policy_loss, logp, old, adv, resp, **kw))
        assert np.any(g_bug[~keep] != 0.0)


def test_replayed_prefix_is_not_scored():
    """ms-swift #10106: a response prefix that was prompt at rollout time was scored in the loss.

    With the replayed prefix masked out, the loss equals the loss on the generated continuation alone,
    whatever the prefix tokens' log-probs are."""
    logp, old, adv, _, _, _ = make_batch(10, r=4, t=10)
    prefix_len = np.array([3, 0, 5, 2])
    gen_len = np.array([4, 6, 5, 8])
    pos = np.arange(10)[None, :]
    mask = (pos >= prefix_len[:, None]) & (pos < (prefix_len + gen_len)[:, None])
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"):
        loss, _ = policy_loss(logp, old, adv, mask, agg=agg)
        # shift each row's continuation to the left: the prefix is gone
        idx = (pos + prefix_len[:, None]) % 10
        cont = lambda x: np.take_along_axis(x, idx, 1)  # noqa: E731
        cmask = pos < gen_len[:, None]
        want, _ = policy_loss(cont(logp), cont(old), adv, cmask, agg=agg)
        np.testing.assert_allclose(loss, want, rtol=1e-6)
        bad = logp.copy()
        bad[~mask] = 50.0  # prefix log-probs would dominate if scored
        np.testing.assert_allclose(policy_loss(bad, old, adv, mask, agg=agg)[0], loss, rtol=1e-7)


# ---------------------------------------------------------------- compile count, hypothesis, bad input
def test_loss_and_grad_compile_once():
    f = jax.jit(jax.value_and_grad(lambda lp, old, adv, m: policy_loss(lp, old, adv, m, agg="token-mean")[0]))
    b1 = make_batch(11)
    b2 = make_batch(12)
    f(*b1[:4])[0].block_until_ready()
    assert f._cache_size() == 1
    f(*b2[:4])[0].block_until_ready()
    assert f._cache_size() == 1


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(AGG_MODES))
def test_random_masks_finite_and_match(seed, agg):
    rng = np.random.default_rng(seed)
    logp, old, adv, _, ref, _ = make_batch(seed % 1000, r=4, t=5)
    mask = rng.random((4, 5)) < rng.random()
    loss, _ = _jit_loss(logp, old, adv, mask, ref, agg)
    want = ref_agg(ref_per_token(logp, old, adv, mask, ref=ref, kl_coef=0.1), mask, agg)
    assert np.isfinite(float(loss))
    np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-6)


_jit_loss = jax.jit(lambda lp, o, a, m, r, agg: policy_loss(lp, o, a, m, agg=agg, ref_logp=r, kl_coef=0.1),
                    static_argnums=5)

_LP = np.zeros((2, 3), np.float32)
_A = np.zeros(2, np.float32)
_M = np.ones((2, 3), bool)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: policy_loss(_LP[0], _LP[0], _A, _M[0]), r"logp must have rank 2.*\(3,\)"),
        (lambda: policy_loss(_LP, np.zeros((2, 4), np.float32), _A, _M), r"old_logp.*\(2, 3\).*\(2, 4\)"),
        (lambda: policy_loss(_LP, _LP, np.zeros(3, np.float32), _M), r"advantages must have shape \(2\).*\(3,\)"),
        (lambda: policy_loss(_LP, _LP, np.zeros((2, 4), np.float32), _M), r"advantages must have shape \(2, 3\)"),
        (lambda: policy_loss(_LP, _LP, _A, np.ones((3, 3), bool)), r"loss_mask.*\(3, 3\)"),
        (lambda: policy_loss(_LP.astype(np.int32), _LP, _A, _M), r"logp must have a floating dtype"),
        (lambda: policy_loss(_LP, _LP, _A, _M, agg="sum"), r"agg must be one of"),
        (lambda: policy_loss(_LP, _LP, _A, _M, kl_type="k4", ref_logp=_LP), r"kl_type must be one of"),
        (lambda: policy_loss(_LP, _LP, _A, _M, kl_coef=0.1), r"kl_coef=0.1 needs ref_logp"),
        (lambda: policy_loss(_LP, _LP, _A, _M, entropy_coef=0.1), r"entropy_coef=0.1 needs entropy"),
        (lambda: policy_loss(_LP, _LP, _A, _M, dual_clip=0.5), r"dual_clip must be"),
        (lambda: policy_loss(_LP, _LP, _A, _M, clip_low=1.5), r"clip_low must be"),
        (lambda: policy_loss(_LP, _LP, _A, _M, norm_len=0), r"norm_len must be"),
        (lambda: token_logprobs(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int32)), r"logits must have rank 3"),
        (lambda: token_logprobs(np.zeros((2, 3, 4), np.float32), np.zeros((2, 4), np.int32)), r"tokens must have shape \(2, 3\)"),
        (lambda: token_logprobs(np.zeros((2, 3, 4), np.float32), np.zeros((2, 3), np.float32)), r"tokens must have a"),
        (lambda: agg_denominator(_M, agg="mean"), r"agg must be one of"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_pad_ids_on_masked_positions_do_not_leak_into_logit_gradients():
    """-1/out-of-range pads give NaN log-probs; masked, they must leave logits' gradients finite and 0 there."""
    rng = np.random.default_rng(13)
    logits = rng.normal(size=(3, 5, 7)).astype(np.float32)
    mask = np.arange(5)[None, :] < np.array([[5], [2], [0]])
    tokens = np.where(mask, rng.integers(0, 7, (3, 5)), -1)
    adv = np.array([1.0, -1.0, 0.5], np.float32)

    def f(z):
        lp = token_logprobs(z, tokens)
        return policy_loss(lp, jax.lax.stop_gradient(lp), adv, mask)[0]

    g = np.asarray(jax.grad(f)(jnp.asarray(logits)))
    assert np.all(np.isfinite(g))
    assert np.all(g[~mask] == 0.0) and np.any(g[mask] != 0.0)
