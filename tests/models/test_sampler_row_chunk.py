"""``rollout.row_chunk`` in training: the trainer's rollouts sampled in chunks of rows are the rollouts
of one call (same tokens, masks and rewards; the sampler's per-row key streams), and a bad value is
one clear error naming the key."""
import dataclasses

import numpy as np
import pytest

from prs.core import prefix as ps
from prs.rl.trainer import RLConfig, Trainer
from prs.rl.config import RolloutConfig
from tests._arith_tiny import MODEL, RL, TASK, warm_params


def _collect(rl):
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)  # fresh rollouts and re-rolls both chunked
    tr = Trainer(TASK, MODEL, rl, pc, seed=3)
    state = tr.init_state(warm_params())
    batch = tr.collect(state).batch
    return tr, batch


def test_chunked_rollouts_equal_one_call():
    tr0, b0 = _collect(RL)
    tr1, b1 = _collect(dataclasses.replace(RL, rollout=dataclasses.replace(RL.rollout, row_chunk=5)))  # 32 rows in calls of 5 (last one padded)
    assert tr1.rollouts.scfg.row_chunk == 5 and tr0.rollouts.scfg.row_chunk is None
    for name in ("tokens", "valid", "loss_mask", "advantages"):
        np.testing.assert_array_equal(np.asarray(getattr(b0, name)), np.asarray(getattr(b1, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(b0.old_logp), np.asarray(b1.old_logp), rtol=0, atol=1e-5)


@pytest.mark.parametrize("bad", [0, -2])
def test_bad_row_chunk_is_one_clear_error(bad):
    with pytest.raises(ValueError, match=r"row_chunk"):
        RLConfig(rollout=RolloutConfig(row_chunk=bad))
