"""``SamplerConfig.prefill_group`` (and ``weights_layout``, last test): a group's prompt + replayed prefix prefilled once and its KV cache
and next-token logits broadcast to the group's G rows. Reference: the unshared call (G = 1) on the
same rows and key: the same tokens, the log-probs to float rounding; and the prefill work saved,
counted by XLA (``cost_analysis`` flops of the compiled call) against the compiled prefill of R
and of R / G rows alone."""
import dataclasses

import jax
import numpy as np
import pytest

from prs.models import qwen3 as M
from prs.models import sampler as S

CFG = M.ModelConfig.preset("tiny")
G = 4


def _rows(n_groups, width, lens, seed):
    base = np.asarray(jax.random.randint(jax.random.key(seed), (n_groups, width), 1, CFG.vocab_size), np.int32)
    return np.repeat(base, G, axis=0), np.repeat(np.asarray(lens), G)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_shared_prefill_equals_the_unshared_call(temperature):
    params = M.init_params(CFG, jax.random.key(0), std=0.3)
    toks, lengths = _rows(4, 6, [6, 1, 3, 5], 21)
    budget = np.array([5, 2, 5, 3] * G)  # rows of a group may have different budgets
    scfg = S.SamplerConfig(max_new_tokens=5, buckets=(8,), temperature=temperature)
    a = S.sample(params, toks, lengths, jax.random.key(2), cfg=CFG, scfg=scfg, budget=budget)
    b = S.sample(params, toks, lengths, jax.random.key(2), cfg=CFG, scfg=dataclasses.replace(scfg, prefill_group=G),
                 budget=budget)
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_array_equal(np.asarray(a.policy_mask), np.asarray(b.policy_mask))
    np.testing.assert_allclose(np.asarray(b.logprobs), np.asarray(a.logprobs), rtol=0, atol=1e-5)
    assert len({tuple(r) for r in np.asarray(b.tokens)[:G]}) > 1 or temperature == 0  # the rows decode on their own


def test_shared_chunked_flash_prefill_equals_the_unshared_call():
    cfg = dataclasses.replace(CFG, prefill_flash_from=16, prefill_block=8)
    params = M.init_params(cfg, jax.random.key(0), std=0.3)
    toks, lengths = _rows(2, 16, [16, 11], 5)
    scfg = S.SamplerConfig(max_new_tokens=4, buckets=(16,))
    a = S.sample(params, toks, lengths, jax.random.key(1), cfg=cfg, scfg=scfg)
    b = S.sample(params, toks, lengths, jax.random.key(1), cfg=cfg, scfg=dataclasses.replace(scfg, prefill_group=G))
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_allclose(np.asarray(b.logprobs), np.asarray(a.logprobs), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_prefill_flops_saved_are_those_of_the_rows_not_prefilled():
    """The compiled call's flops drop by the prefill of R − R / G rows (the decode is unchanged)."""
    params = M.init_params(CFG, jax.random.key(0))
    R, P, T = 16, 32, 4
    scfg = S.SamplerConfig(max_new_tokens=T, buckets=(P,))
    toks, lens = np.ones((R, P), np.int32), np.full(R, P, np.int32)

    def flops(fn, *args, **kw):
        return fn.lower(*args, **kw).compile().cost_analysis()["flops"]

    def call(g):
        return flops(S.sample_jit, params, toks, lens, jax.random.key(0), np.full(R, T, np.int32), np.int32(0),
                     cfg=CFG, scfg=dataclasses.replace(scfg, prefill_group=g), mesh=None, return_cache=False)

    prefill = jax.jit(M.prefill, static_argnames=("cfg", "max_len"))
    pre = lambda r: flops(prefill, params, toks[:r], lens[:r], cfg=CFG, max_len=P + T)  # noqa: E731
    saved, want = call(1) - call(G), pre(R) - pre(R // G)
    assert want > 0.5 * pre(R)  # (G − 1) / G of the prefill
    assert abs(saved - want) <= 0.05 * want, (saved, want)


def test_bad_groups_are_one_clear_error():
    params = M.init_params(CFG, jax.random.key(0))
    toks, lengths = _rows(2, 6, [6, 4], 3)
    scfg = S.SamplerConfig(max_new_tokens=2, buckets=(8,), prefill_group=G)
    bad = toks.copy()
    bad[1, 0] = (bad[1, 0] + 1) % CFG.vocab_size  # row 1 differs from its group's row 0
    with pytest.raises(ValueError, match="prefill_group=4: the rows of each group"):
        S.sample(params, bad, lengths, jax.random.key(0), cfg=CFG, scfg=scfg)
    with pytest.raises(ValueError, match="prefill_group=4 must divide"):
        S.sample(params, toks[:6], lengths[:6], jax.random.key(0), cfg=CFG, scfg=scfg)
    with pytest.raises(ValueError, match="prefill_group must be an integer >= 1"):
        S.SamplerConfig(max_new_tokens=2, prefill_group=0)


@pytest.mark.slow
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_decoding_from_the_training_layout_equals_the_joined_weights(tie):
    """``weights_layout="training"`` (the shared layer on the stacked parameters) against the joined
    decode weights: the same tokens, the log-probs to float rounding (fresh call and chunked flash
    prefill)."""
    cfg = dataclasses.replace(CFG, tie_embeddings=tie, prefill_flash_from=16, prefill_block=8)
    params = M.init_params(cfg, jax.random.key(0), std=0.3)
    for toks, lengths, scfg in [(*_rows(2, 6, [6, 2], 21), S.SamplerConfig(max_new_tokens=5, buckets=(8,))),
                                (*_rows(1, 16, [13], 5), S.SamplerConfig(max_new_tokens=3, buckets=(16,)))]:
        a = S.sample(params, toks, lengths, jax.random.key(2), cfg=cfg, scfg=scfg)
        b = S.sample(params, toks, lengths, jax.random.key(2), cfg=cfg,
                     scfg=dataclasses.replace(scfg, weights_layout="training"))
        np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
        np.testing.assert_allclose(np.asarray(b.logprobs), np.asarray(a.logprobs), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="weights_layout='copy'; choose from"):
        S.SamplerConfig(max_new_tokens=2, weights_layout="copy")


def test_the_trainer_shares_a_groups_prefill_when_asked_and_trains_on_the_same_rollouts():
    """``rollout.prefill_group`` from Hydra to the sampler: the trainer's fresh rollouts and
    prefix re-rolls (each group's N rows repeat one input row) and its evaluation equal the
    unshared calls (tokens, masks, advantages; log-probs to float rounding); a bad combination is
    one error line naming the key."""

    from omegaconf import OmegaConf

    from experiments import config as C
    from experiments.train import build
    from prs.core import prefix as ps
    from prs.rl.trainer import RLConfig, Trainer
    from prs.rl.config import RolloutConfig
    from tests._arith_tiny import MODEL, RL, TASK, warm_params

    _, _, rl, _, _ = build(C.validate(OmegaConf.create({"rollout": {"prefill_group": True}})))
    assert rl.rollout.prefill_group is True and rl.rollout.prefill_group is True
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)  # fresh rollouts and re-rolls
    params = warm_params()
    out = []
    for shared in (False, True):
        tr = Trainer(TASK, MODEL, dataclasses.replace(RL, rollout=dataclasses.replace(RL.rollout, prefill_group=shared)), pc, seed=3)
        c = tr.collect(tr.init_state(params))
        out.append((c.batch, c.metrics, tr.evaluate(params, 0)))
    (b0, m0, e0), (b1, m1, e1) = out
    assert m0["groups_rerolled"] > 0          # the re-roll calls are exercised too
    for name in ("tokens", "valid", "loss_mask", "advantages"):
        np.testing.assert_array_equal(np.asarray(getattr(b0, name)), np.asarray(getattr(b1, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(b0.old_logp), np.asarray(b1.old_logp), rtol=0, atol=1e-5)
    assert e0["eval/pass_at_1"] == e1["eval/pass_at_1"]
    with pytest.raises(ValueError, match=r"prefill_group \(rollout.prefill_group\) needs rollout.engine=jax"):
        RLConfig(rollout=RolloutConfig(prefill_group=True, continuous_slots=4))
    with pytest.raises(ValueError, match=r"rollout.prefill_group\) must be true or false"):
        RLConfig(rollout=RolloutConfig(prefill_group=1))
