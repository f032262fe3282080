"""prs.sim's task selectors against theory.controls: informative groups per generated rollout at step 0."""
import numpy as np
import pytest

from prs.sim import simulator as S
from theory import controls as C

SIZES = dict(n_tasks=48, chain_len=3, groups=8, steps=1, lr=1.0, mode="baseline", n=8)


def _theory(select, cfg, pool):
    kw = dict(n=cfg.n, groups=cfg.groups)
    if select == "uniform":
        return C.uniform(pool, **kw)
    if select == "dynamic_sampling":
        return C.dynamic_sampling(pool, gen_groups=cfg.gen_batch(), max_batches=cfg.max_gen_batches, **kw)
    if select == "screen":
        return C.screen(pool, n_init=cfg.screen_n, candidates=cfg.candidates(), **kw)
    if select == "predicted":
        return C.predicted(pool, pool_size=cfg.n_tasks, **kw)
    return C.uniform(pool, **kw)  # selective at step 0: no streaks yet, every task is kept


@pytest.mark.parametrize("select", S.SELECTS)
def test_step0_informative_per_rollout_matches_theory(select):
    cfg = S.SimConfig(**SIZES, select=select, max_gen_batches=3)
    r = S.simulate(cfg, S.SimParams.make("uniform"), seeds=1500)
    inf, roll = r["informative"][:, 0], r["rollouts"][:, 0]
    ratio = inf.sum() / roll.sum()
    se = np.std(inf - ratio * roll) / roll.mean() / np.sqrt(inf.size)  # ratio estimator's standard error
    # the sim's initial pass rates: Beta(1, 1) clipped to [p_lo, p_hi]
    th = _theory(select, cfg, C.beta_pool(1.0, 1.0, size=4096, clip=(cfg.p_lo, cfg.p_hi)))
    want = th.informative / th.rollouts
    assert abs(ratio - want) < 4 * se + 2e-4, (select, ratio, want, se)
    assert abs(r["trained"][:, 0].mean() - th.groups) < 4 * r["trained"][:, 0].std() / np.sqrt(inf.size) + 1e-3


def test_degenerate_pool_never_nan_and_ds_hits_its_cap():
    hard = S.Difficulty((1.0,), (0.05,), (50.0,))  # every task at p_lo = 0.01: almost every group is 0/N
    cfg = S.SimConfig(**{**SIZES, "steps": 3, "p_lo": 0.01, "p_hi": 0.011}, select="dynamic_sampling",
                      max_gen_batches=3)
    r = S.simulate(cfg, S.SimParams.make(hard), seeds=8)
    for key in ("success", "energy", "batch_pass", "informative", "rollouts"):
        assert np.all(np.isfinite(r[key])), key
    assert np.all(r["rollouts"] <= 3 * cfg.groups * cfg.n)
    assert np.mean(r["rollouts"] == 3 * cfg.groups * cfg.n) > 0.9  # the refill hits its cap


@pytest.mark.parametrize("kwargs, match", [
    (dict(select="nope"), "select"), (dict(select="screen", screen_n=1), "screen_n"),
    (dict(select="dynamic_sampling", max_gen_batches=10), "distinct tasks"),
    (dict(select="selective", schedule="next_visit"), "same_step"), (dict(greso_floor=0.0), "greso_floor")])
def test_bad_select_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        S.SimConfig(**{**SIZES, **kwargs})
