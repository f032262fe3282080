"""The train state holds everything a resume needs, the KL reference policy included.

``TrainState.ref_params`` (``kl_coef > 0``) is saved and restored with the rest of the state, so
a resumed run trains against the reference it started with even when the starting parameters it
is rebuilt from have changed (a rebuilt warm start); a ``kl_coef == 0`` checkpoint holds exactly
the five fields the state had before the reference was part of it, and such checkpoints restore.
"""
from __future__ import annotations

import json
import pathlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.models.qwen3 import ModelConfig, init_params
from prs.rl import runner
from prs.rl.runner import RunConfig, run
from prs.rl.config import EvalConfig, LossConfig, OptimConfig
from prs.rl.trainer import Batch, RLConfig, Trainer, TrainState, checkpoint_tree
from prs.tasks.registry import make_task

TASK = make_task("arith", min_terms=2, max_terms=4)
MODEL = ModelConfig.preset("tiny", vocab_size=TASK.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           head_dim=8, d_ff=64)
# every group trains (no contrast filter), so every step has loss tokens and a KL term
RL_KL = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=8, samples=1),
                 loss=LossConfig(kl_coef=0.1, drop_no_contrast=False), optim=OptimConfig(lr=1e-2))
PC = ps.PrefixConfig(mode="ps_ada", n=8)
COMMON = dict(seed=4, eval_every=2, ckpt_every=2, sft_steps=0, wandb_mode="disabled", progress=False)
QUIET = dict(log=lambda *a: None)
FIELDS = ("step", "params", "opt_state", "prefix", "memory")  # a kl_coef == 0 checkpoint's items


class FiveFieldState(NamedTuple):
    """The train state as checkpoints held it before the KL reference was one of its fields."""

    step: Any
    params: Any
    opt_state: Any
    prefix: Any
    memory: Any = None


def _train_records(d):
    recs = [json.loads(x) for x in (pathlib.Path(d) / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in m.items() if not k.startswith("time_")} for m in recs if m["kind"] == "train"]


def _saved_keys(d: pathlib.Path, step: int) -> set[str]:
    import orbax.checkpoint as ocp

    return set(ocp.StandardCheckpointHandler().metadata(d / "checkpoints" / str(step) / "default").keys())


def _batch(seed: int, *, width: int, r: int = 16):
    """A synthetic update batch [R, L]: random tokens, ragged rows, loss on the tokens after a short prompt."""
    rng = np.random.default_rng(seed)
    idx = np.arange(width)[None, :]
    valid = idx < rng.integers(4, width - 1, r)[:, None]
    valid[0] = True  # every batch as wide as the run's width: one compiled update
    return Batch(tokens=jnp.asarray(rng.integers(0, TASK.vocab_size, (r, width)), jnp.int32),
                 positions=jnp.asarray(np.maximum(np.cumsum(valid, 1) - 1, 0), jnp.int32),
                 valid=jnp.asarray(valid), loss_mask=jnp.asarray(valid & (idx >= 2)),
                 old_logp=jnp.asarray(-rng.random((r, width)) * 3 - 1, jnp.float32),
                 advantages=jnp.asarray(rng.normal(size=r), jnp.float32))


def test_a_restored_state_trains_against_its_own_reference_not_the_new_starting_parameters(tmp_path):
    import orbax.checkpoint as ocp

    tr = Trainer(TASK, MODEL, RL_KL, PC)
    p0 = init_params(MODEL, jax.random.PRNGKey(5), std=0.2)
    batches = [_batch(seed, width=tr.width) for seed in range(4)]

    def updates(state, bs):
        kls = []
        for b in bs:
            params, opt_state, lm = tr.update(state.params, state.opt_state, b, ref_params=state.ref_params)
            state = state._replace(step=state.step + 1, params=params, opt_state=opt_state)
            kls.append(float(lm["kl"]))
        return state, kls

    _, want = updates(tr.init_state(p0), batches)                     # four updates without a break
    half, first = updates(tr.init_state(p0), batches[:2])
    with ocp.CheckpointManager(tmp_path / "checkpoints", options=ocp.CheckpointManagerOptions(create=True)) as mngr:
        mngr.save(2, args=ocp.args.StandardSave(checkpoint_tree(half)))
    changed = jax.tree.map(lambda x: x + 0.3 * jax.random.normal(jax.random.PRNGKey(9), x.shape, x.dtype), p0)
    with ocp.CheckpointManager(tmp_path / "checkpoints") as mngr:  # resumed from other starting parameters
        resumed = runner._restore(mngr, 2, tr.init_state(changed), None)
    _, rest = updates(resumed, batches[2:])
    assert want[0] == 0.0 and min(want[1:]) > 0.0   # policy = reference at the first update only
    assert first + rest == want


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """A 4-step KL run without a break (checkpoints at 2 and 4)."""
    d = tmp_path_factory.mktemp("state") / "full"
    run(TASK, MODEL, RL_KL, PC, RunConfig(steps=4, **COMMON), d, **QUIET)
    return d


@pytest.mark.slow
def test_a_resume_against_a_changed_base_policy_keeps_the_reference_it_started_with(tmp_path, uninterrupted,
                                                                                     monkeypatch):
    d = tmp_path / "resumed"
    run(TASK, MODEL, RL_KL, PC, RunConfig(steps=2, **COMMON), d, **QUIET)
    assert _saved_keys(d, 2) == {*FIELDS, "ref_params"}
    # the starting parameters are rebuilt differently (another warm start) before the resume
    original = runner.base_params
    monkeypatch.setattr(runner, "base_params", lambda *a, **k: jax.tree.map(
        lambda x: x + 0.3 * jax.random.normal(jax.random.PRNGKey(9), x.shape, x.dtype), original(*a, **k)))
    run(TASK, MODEL, RL_KL, PC, RunConfig(steps=4, **COMMON), d, **QUIET)
    got, want = _train_records(d), _train_records(uninterrupted)
    assert [m["step"] for m in got] == [0, 1, 2, 3]
    assert all(m["loss/kl"] > 0.0 for m in want[1:])  # the policy has left the reference: the KL term is live
    # the KL loss after the resume (steps 2 and 3), and every other record, equal the uninterrupted run's
    assert [m["loss/kl"] for m in got] == [m["loss/kl"] for m in want]
    assert got == want


def test_init_state_copies_the_reference_and_the_update_refuses_to_run_without_it():
    tr = Trainer(TASK, MODEL, RL_KL, PC, seed=1)
    p0 = init_params(MODEL, jax.random.PRNGKey(5), std=0.2)
    state = tr.init_state(p0)
    for r, p, q in zip(jax.tree.leaves(state.ref_params), jax.tree.leaves(state.params), jax.tree.leaves(p0)):
        np.testing.assert_array_equal(np.asarray(r), np.asarray(q))
        assert r is not p and r is not q  # its own buffers: the update donates the policy's
    assert Trainer(TASK, MODEL, RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=8)), PC).init_state(p0).ref_params \
        is None
    batch = _batch(0, width=tr.width)
    with pytest.raises(ValueError, match=r"kl_coef=0.1 needs the reference policy: pass ref_params=state.ref_params"):
        tr.update(state.params, state.opt_state, batch)
    with pytest.raises(ValueError, match=r"ref_params=state.ref_params"):
        tr.loss(state.params, batch)


def test_checkpoint_tree_leaves_out_a_missing_reference():
    tr = Trainer(TASK, MODEL, RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=8)), PC)
    state = jax.eval_shape(lambda k: tr.init_state(init_params(MODEL, k)), jax.random.PRNGKey(0))
    assert tuple(checkpoint_tree(state)) == FIELDS
    assert TrainState(**checkpoint_tree(state)) == state
    kl = jax.eval_shape(lambda k: Trainer(TASK, MODEL, RL_KL, PC).init_state(init_params(MODEL, k)),
                        jax.random.PRNGKey(0))
    assert tuple(checkpoint_tree(kl)) == (*FIELDS, "ref_params")


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_a_five_field_checkpoint_restores_and_a_default_checkpoint_keeps_five_fields(tmp_path, kl_coef):
    import orbax.checkpoint as ocp

    rl = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=8), loss=LossConfig(kl_coef=kl_coef))
    tr = Trainer(TASK, MODEL, rl, PC)
    start = init_params(MODEL, jax.random.PRNGKey(0))
    saved = tr.init_state(jax.tree.map(lambda x: x + 1.0, start))._replace(step=jnp.asarray(3, jnp.int32))
    d = tmp_path / "old"
    with ocp.CheckpointManager(d / "checkpoints", options=ocp.CheckpointManagerOptions(create=True)) as mngr:
        mngr.save(3, args=ocp.args.StandardSave(FiveFieldState(*saved[:5])))
    assert _saved_keys(d, 3) == set(FIELDS)
    logs = []
    with ocp.CheckpointManager(d / "checkpoints") as mngr:
        got = runner._restore(mngr, 3, tr.init_state(start), None, log=logs.append)
    assert int(got.step) == 3
    same = jax.tree.map(lambda x, y: bool(np.array_equal(np.asarray(x), np.asarray(y))), got[:5], saved[:5])
    assert all(jax.tree.leaves(same))
    if kl_coef:  # no reference in the checkpoint: the run's starting parameters, said in one line
        assert all(np.array_equal(np.asarray(r), np.asarray(p))
                   for r, p in zip(jax.tree.leaves(got.ref_params), jax.tree.leaves(start)))
        assert len(logs) == 1 and "holds no KL reference" in logs[0]
    else:
        assert got.ref_params is None and logs == []
    # what the runner writes for a kl_coef == 0 state: the same five fields
    with ocp.CheckpointManager(tmp_path / "new" / "checkpoints", options=ocp.CheckpointManagerOptions(create=True)) \
            as mngr:
        mngr.save(3, args=ocp.args.StandardSave(checkpoint_tree(saved)))
    assert _saved_keys(tmp_path / "new", 3) == set(FIELDS) | ({"ref_params"} if kl_coef else set())
