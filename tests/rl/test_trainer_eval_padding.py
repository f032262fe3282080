"""Evaluation rows that the mesh's batch shards do not divide (issue #29 item 3a: a v5p-64 preset's
``eval.count`` 30 × ``eval.samples`` 8 = 240 rows on 32 batch shards raised ``ValueError`` from
``shard_batch`` at the step-0 evaluation). The rows are padded up to a multiple of the shards and
the padding dropped: the result equals the unpadded single-device evaluation.

References: the same ``Trainer.evaluate`` / ``sample`` without a mesh (one device, no padding)."""
from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.models import qwen3 as M
from prs.models import sampler as S
from prs.parallel import sharding as shd
from prs.rollout.jax_engine import JaxEngine
from prs.parallel import multihost
from prs.rl import trainer as T
from prs.tasks.registry import make_task

TASK = make_task("arith", min_terms=2, max_terms=4)
MODEL = M.ModelConfig.preset("tiny", vocab_size=TASK.vocab_size)
PC = ps.PrefixConfig(mode="baseline", n=4)


def test_pad_rows():
    """``⌈R / m⌉ · m`` ids, the real rows first in order, copies of the first rows after; bad input
    is one error naming the argument."""
    np.testing.assert_array_equal(multihost.pad_rows(240, 32), np.r_[np.arange(240), np.arange(16)])
    np.testing.assert_array_equal(multihost.pad_rows(3, 8), [0, 1, 2, 0, 1, 2, 0, 1])
    np.testing.assert_array_equal(multihost.pad_rows(16, 8), np.arange(16))
    with pytest.raises(ValueError, match="multiple must be an int >= 1"):
        multihost.pad_rows(4, 0)


@pytest.mark.parametrize("mesh_kw", [dict(fsdp=8), dict(data=2, fsdp=2, tensor=2)], ids=["fsdp8", "dp2_fsdp2_tp2"])
def test_evaluate_rows_not_divisible_equal_one_device(eight_devices, mesh_kw):
    """5 problems × 3 samples = 15 rows on 8 (or 4) batch shards: pass@1, the reward mean and the
    task's metrics equal the 1-device evaluation (the old code raised ``ValueError``)."""
    rl = T.RLConfig(tasks_per_step=2, group_size=4, eval=T.EvalConfig(count=5, samples=3), rollout=T.RolloutConfig(eval_temperature=1.0))
    params = M.init_params(MODEL, jax.random.PRNGKey(0), std=0.2)
    one = T.Trainer(TASK, MODEL, rl, PC)
    want = one.evaluate(one.init_state(params).params, 0)
    mesh = shd.make_mesh(eight_devices, **{"data": 1, **mesh_kw})
    assert (rl.eval.count * rl.eval.samples) % shd.batch_size_multiple(mesh)
    tr = T.Trainer(TASK, MODEL, rl, PC, mesh=mesh)
    p8 = tr.init_state(params).params
    got = tr.evaluate(p8, 0)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)
    key = jax.random.PRNGKey(5)  # the episodes behind the metrics: the same 15 rows, token for token
    ep1 = one.rollouts.rollout(one.sampling_params(params), one._eval_problems, key, group_size=3, evaluation=True)
    ep8 = tr.rollouts.rollout(tr.sampling_params(p8), tr._eval_problems, key, group_size=3, evaluation=True)
    assert ep8.tokens.shape == ep1.tokens.shape == (15, tr.rollouts.width)
    np.testing.assert_array_equal(np.asarray(ep8.tokens), np.asarray(ep1.tokens))
    np.testing.assert_array_equal(np.asarray(ep8.rewards), np.asarray(ep1.rewards))


def test_sample_rows_padding_dropped(eight_devices):
    """The jax engine's mesh call (``JaxEngine.generate``) of 13 rows on 8 shards: exactly 13 rows back, tokens and log-probs
    equal the 1-device ``sample`` (per-row keys: the padding does not move the real rows' draws)."""
    cfg = M.ModelConfig.preset("tiny")
    params = M.init_params(cfg, jax.random.key(0), std=0.3)
    rng = np.random.default_rng(0)
    toks = rng.integers(1, cfg.vocab_size, (13, 6)).astype(np.int32)
    lengths = rng.integers(1, 7, (13,)).astype(np.int32)
    budget = rng.integers(1, 6, (13,)).astype(np.int32)
    scfg = S.SamplerConfig(max_new_tokens=5, temperature=1.0, buckets=(8,))
    want = S.sample(params, toks, lengths, jax.random.key(3), cfg=cfg, scfg=scfg, budget=budget)
    mesh = shd.make_mesh(eight_devices, fsdp=8)
    engine = JaxEngine(cfg, mesh=mesh)
    engine.update_params(params)
    got = engine.generate(toks, lengths, key=jax.random.key(3), scfg=scfg, budget=budget)
    assert got.tokens.shape == want.tokens.shape
    np.testing.assert_array_equal(got.tokens, np.asarray(want.tokens))
    np.testing.assert_array_equal(got.lengths, np.asarray(want.lengths))
    np.testing.assert_allclose(got.logprobs, np.asarray(want.logprobs), rtol=1e-5, atol=1e-6)


class Rows(NamedTuple):
    tokens: np.ndarray  # [R, L]


def test_score_rows_two_processes_real_rows_only(monkeypatch, eight_devices):
    """``multihost.score_rows`` as each of 2 processes (mocked: ``process_count``, ``process_rows``
    and the all-gather) of 15 rows = 5 problems × 3 on 8 shards: the sampler ran 16 padded rows,
    process 0 holds rows 0-7 and process 1 rows 8-15, i.e. the real rows 8-14; each scores only its
    real rows and the gathered rewards equal scoring all 15 rows in one call."""
    from types import SimpleNamespace

    from jax.experimental import multihost_utils as mhu

    mesh = shd.make_mesh(eight_devices, fsdp=8)
    problems = np.arange(10, 15)  # 5 "problems"
    task = SimpleNamespace(take=lambda p, idx: p[np.asarray(idx)])
    ro = Rows(tokens=np.arange(15 * 4).reshape(15, 4) % 7)
    calls = []

    def rewards_fn(probs, local, *, group_size):
        calls.append((np.asarray(probs).tolist(), local.tokens.shape[0], group_size))
        rows = np.arange(local.tokens.shape[0])
        return ((np.asarray(probs)[rows // group_size] + local.tokens.sum(1)) % 2).reshape(-1, group_size)

    want = np.asarray(rewards_fn(problems, ro, group_size=3), np.float32).reshape(-1)
    calls.clear()
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    sent = {}

    class Gathered(Exception):
        pass

    def record(x, *a, **k):
        sent[pid] = x
        raise Gathered

    for pid in (0, 1):
        monkeypatch.setattr(multihost, "process_rows", lambda m, n, pid=pid: (n == 16 or pytest.fail(f"process_rows of {n} rows, not the padded 16")) and
                            slice(8 * pid, 8 * pid + 8))
        monkeypatch.setattr(mhu, "process_allgather", record)
        with pytest.raises(Gathered):
            multihost.score_rows(rewards_fn, task, problems, ro, group_size=3, mesh=mesh)
    # process 0: rows 0-7 (not group-aligned: one problem per row); process 1: the real rows 8-14
    assert calls == [([10, 10, 10, 11, 11, 11, 12, 12], 8, 1), ([12, 13, 13, 13, 14, 14, 14], 7, 1)]
    monkeypatch.setattr(mhu, "process_allgather", lambda x, *a, **k: tuple(np.stack([sent[0][i], sent[1][i]])
                                                                             for i in range(2)))
    got = multihost.score_rows(rewards_fn, task, problems, ro, group_size=3, mesh=mesh)
    np.testing.assert_array_equal(np.asarray(got), want)
