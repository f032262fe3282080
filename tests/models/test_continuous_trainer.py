"""``rollout.continuous_slots`` in training: two steps of the tiny arith trainer with continuous batching
(fresh rollouts and prefix re-rolls with their shared budgets) give the metrics and parameters of the
same run with static batches (same tokens: per-row key streams), and a bad value is one clear error."""
import dataclasses

import jax
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.rl.trainer import RLConfig, Trainer
from prs.rl.config import RolloutConfig
from tests._arith_tiny import MODEL, RL, TASK, warm_params


def _two_steps(rl):
    pc = ps.PrefixConfig(mode="ps_fix", n=8, hard_max=3, easy_min=5)  # re-rolls too (per-row budgets)
    tr = Trainer(TASK, MODEL, rl, pc, seed=3)
    state = tr.init_state(warm_params())
    metrics = []
    for _ in range(2):
        state, m = tr.step(state)
        metrics.append({k: v for k, v in m.items() if not k.startswith("time_")})
    return metrics, state.params


@pytest.mark.slow
def test_continuous_rollouts_train_like_static_batches():
    m0, p0 = _two_steps(RL)
    m1, p1 = _two_steps(dataclasses.replace(RL, rollout=dataclasses.replace(RL.rollout, continuous_slots=5)))  # 32 rows through 5 slots
    assert m0[0].keys() == m1[0].keys()
    for a, b in zip(m0, m1):
        for k in a:
            if isinstance(a[k], float) and k.startswith("loss/"):  # old_logp ~1e-6 apart (matmul row blocking)
                np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6, err_msg=k)
            else:
                assert a[k] == b[k], k
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=0, atol=1e-6), p0, p1)


@pytest.mark.parametrize("bad", [0, -2, 2.5, True])
def test_bad_continuous_slots_is_one_clear_error(bad):
    with pytest.raises(ValueError, match=r"continuous_slots"):
        RLConfig(rollout=RolloutConfig(continuous_slots=bad))
