"""Rollout collection across several processes (``jax.distributed``): sample and score each
process's own rows, then give every process the same host view of the whole step.

One process: nothing here changes anything (both functions are the plain calls).

Several processes (the trainer's mesh spans every process's devices), one step:

1. every process builds the same B problems and the same ``[R, P]`` input rows (problems are a
   function of (seed, step), re-roll sources come from step 3's host view);
2. sampling (``prs.rollout.jax_engine.JaxEngine.generate`` with a mesh: rows the batch shards do
   not divide are padded, ``pad_rows``, and the padding dropped): each process hands the sampler only its own rows ``x[process_rows]`` (the rows
   its devices hold, ``prs.parallel.sharding.process_rows``); the sampler assembles them into one
   global ``[R, ...]`` batch (``jax.make_array_from_process_local_data``) and decodes it as one
   SPMD program, so the tokens are those of a single-process run with the same key (threefry
   draws do not depend on the sharding). All processes pad the rows to the *same* width: the
   prompt bucket of the longest row of the whole batch, not of their own rows;
3. the rollout (tokens, masks, log-probs: ``[R, L]``, small next to the model) is gathered to
   every host (``prs.models.sampler.all_rows_on_host``: ``process_allgather``);
4. ``score_rows``: each process scores only its own rows (its slice of the problems; a
   code-executing verifier runs once per row, not once per process), and the ``[R]`` rewards are
   gathered so every process holds all of them.

After this every process holds the same rollouts and rewards, so the host glue that follows
(buckets, sources, cut points, the controller, the task memory, advantages and every logged
metric) is computed identically on every process from global numbers; the update's batch is then
placed with each process feeding its own rows (``prs.parallel.sharding.shard_rows``).

Checkpoints (``prs.rl.runner.run``): orbax saves collectively, so the process-local leaves of the
train state (step, controller, task memory) are saved as replicated global arrays
(``checkpointable``, after checking the processes agree) and restored back into local copies
(``host_local``); run-level decisions read from files are process 0's on every process
(``broadcast_json``). Multi-turn agent rollouts sample through
``prs.models.sampler.sample_all_rows`` / ``append_and_resume`` in the same way (each process
feeds its own rows of every turn).
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from prs.parallel.sharding import batch_size_multiple, pad_rows, process_rows  # noqa: F401  (pad_rows: API)


def multi_process(mesh) -> bool:
    """True when the rollouts must be collected across processes (``mesh`` spans them)."""
    if jax.process_count() == 1:
        return False
    if mesh is None:
        raise ValueError(f"{jax.process_count()} processes but no mesh: the trainer needs a mesh over every "
                         "process's devices (experiments.train: mesh=fsdp or dp_fsdp, not mesh=single)")
    return True


def score_rows(rewards_fn, task, problems, ro, *, group_size: int, mesh):
    """``rewards_fn(problems, ro, group_size=)`` -> [R], each process scoring only its own rows of
    the host rollout ``ro`` (its problems: whole groups when its rows are group-aligned, else one
    problem per row with ``group_size=1``); the rewards of all rows are gathered to every process."""
    from jax.experimental import multihost_utils as mhu

    r_all = ro.tokens.shape[0]
    held_rows = process_rows(mesh, pad_rows(r_all, batch_size_multiple(mesh)).size)  # of the padded sampler call
    mine = slice(min(held_rows.start, r_all), min(held_rows.stop, r_all))  # its real rows (maybe none)
    local = jax.tree.map(lambda x: x[mine], ro)
    if mine.start == mine.stop:
        r_mine = np.zeros((0,), np.float32)
    elif mine.start % group_size == 0 and mine.stop % group_size == 0:
        probs, gs = task.take(problems, np.arange(mine.start // group_size, mine.stop // group_size)), group_size
        r_mine = np.asarray(rewards_fn(probs, local, group_size=gs), np.float32).reshape(-1)
    else:
        probs, gs = task.take(problems, np.arange(mine.start, mine.stop) // group_size), 1
        r_mine = np.asarray(rewards_fn(probs, local, group_size=gs), np.float32).reshape(-1)
    full, has = np.zeros((r_all,), np.float32), np.zeros((r_all,), bool)
    full[mine], has[mine] = r_mine, True
    vals, held = mhu.process_allgather((full, has))                           # [P, R] each
    if not held.any(0).all():
        raise RuntimeError(f"score_rows: rows {np.flatnonzero(~held.any(0))[:8].tolist()} held by no process")
    return jnp.asarray(vals[np.argmax(held, axis=0), np.arange(r_all)])       # the first holder's reward


def sharded_params(init, shardings):
    """``init()`` (a parameter initialiser) built directly in ``shardings`` (each device computes
    only its slices; no whole copy on one device), or plainly when ``shardings`` is None."""
    if shardings is None:
        return init()
    return jax.jit(init, out_shardings=shardings)()


# ---------------------------------------------------------------------- checkpoints and run-level decisions


def checkpointable(state, mesh):
    """The train state as orbax saves it collectively: ``state`` itself with one process; with
    several, every process-local leaf (step, controller ρ/EMA, task memory: values each process
    computed identically from the gathered rollouts) becomes one array replicated over ``mesh``,
    after checking that the processes really agree (``multihost_utils.assert_equal``: a divergence
    would otherwise be hidden by saving process 0's copy). Global leaves (parameters, optimiser
    state) are left as they are (each process writes its own shards)."""
    if jax.process_count() == 1:
        return state
    from jax.experimental import multihost_utils as mhu

    from prs.parallel.sharding import place, replicated

    local = [x for x in jax.tree.leaves(state) if isinstance(x, jax.Array) and x.is_fully_addressable]
    mhu.assert_equal([np.asarray(x) for x in local], "checkpointable: the processes' step / controller / task "
                     "memory differ (they must be computed identically on every process)")
    return jax.tree.map(lambda x: place(x, replicated(mesh))
                        if isinstance(x, jax.Array) and x.is_fully_addressable else x, state)


def host_local(restored, like):
    """Inverse of ``checkpointable`` after a restore: the leaves that are process-local in ``like``
    (a fresh ``Trainer.init_state``) come back as process-local arrays (each process's full copy);
    the rest (sharded parameters, optimiser state) as restored. Identity with one process."""
    if jax.process_count() == 1:
        return restored
    return jax.tree.map(lambda r, x: jnp.asarray(np.asarray(r.addressable_data(0)))
                        if isinstance(x, jax.Array) and x.is_fully_addressable else r, restored, like)


def broadcast_json(obj):
    """Process 0's ``obj`` (anything ``json.dumps`` writes, with ``default=str``) on every process,
    so that run-level decisions read from files (is the run complete? the summary) are process 0's
    everywhere. ``obj`` itself with one process."""
    if jax.process_count() == 1:
        return obj
    import json

    from jax.experimental import multihost_utils as mhu

    data = np.frombuffer(json.dumps(obj, default=str).encode(), np.uint8)
    n = int(mhu.broadcast_one_to_all(np.int32(data.size)))
    buf = np.zeros((n,), np.uint8)
    if jax.process_index() == 0:
        buf[:] = data
    return json.loads(bytes(np.asarray(mhu.broadcast_one_to_all(buf))).decode())
