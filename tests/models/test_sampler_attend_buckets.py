"""``rollout.attend_buckets`` from the config to the decode loop: the Hydra key reaches
``RLConfig`` and the trainer's ``SamplerConfig``; the trainer's rollouts decoded in attended-length
segments equal those of the full-cache decode (same tokens and masks, log-probs to float rounding);
a bad value is one clear error naming the key."""
import dataclasses

import numpy as np
import pytest
from omegaconf import OmegaConf

from experiments import config as C
from experiments.train import build
from prs.core import prefix as ps
from prs.models import sampler as S
from prs.rl.trainer import RLConfig, Trainer
from prs.rl.config import RolloutConfig
from tests._arith_tiny import MODEL, RL, TASK, warm_params


def test_hydra_key_reaches_the_sampler():
    cfg = C.validate(OmegaConf.create({"rollout": {"attend_buckets": [32, 16]}}))
    _, _, rl, _, _ = build(cfg)
    assert rl.rollout.attend_buckets == (16, 32)
    _, _, rl0, _, _ = build(C.validate(OmegaConf.create({})))
    assert rl0.rollout.attend_buckets is None  # the default: every step attends the whole cache


def _collect(rl):
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)  # fresh rollouts and re-rolls
    tr = Trainer(TASK, MODEL, rl, pc, seed=3)
    batch = tr.collect(tr.init_state(warm_params())).batch
    return tr, batch


@pytest.mark.slow
def test_bucketed_decode_equals_the_full_cache_decode():
    tr0, b0 = _collect(RL)
    P = tr0.rollouts.scfg.buckets[0]
    T = tr0.rollouts.scfg.max_new_tokens
    buckets = (P + 2, P + T // 2)  # segments inside the fresh call (P + T) and the re-roll call (P + 2T)
    tr1, b1 = _collect(dataclasses.replace(RL, rollout=dataclasses.replace(RL.rollout, attend_buckets=buckets)))
    assert tr1.rollouts.scfg.attend_buckets == buckets and tr0.rollouts.scfg.attend_buckets is None
    assert len(S._segments(P, T, buckets)) == 3  # the decode really runs in segments
    for name in ("tokens", "valid", "loss_mask", "advantages"):
        np.testing.assert_array_equal(np.asarray(getattr(b0, name)), np.asarray(getattr(b1, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(b0.old_logp), np.asarray(b1.old_logp), rtol=0, atol=1e-5)


@pytest.mark.parametrize("bad", [[0, 16], [], "16", [True], [2.5]])
def test_bad_attend_buckets_is_one_clear_error(bad):
    with pytest.raises(ValueError, match=r"attend_buckets.*integers >= 1"):
        RLConfig(rollout=RolloutConfig(attend_buckets=bad))


def test_attend_buckets_with_continuous_slots_is_refused():
    with pytest.raises(ValueError, match=r"attend_buckets.*continuous_slots=None"):
        RLConfig(rollout=RolloutConfig(attend_buckets=(16,), continuous_slots=4))
