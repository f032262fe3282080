"""Worker of tests/parallel/test_distributed.py (not a test module): one of two localhost processes.

Starts ``prs.distributed`` from PRS_* env, builds a (fsdp = 4) mesh over both processes' 2 CPU
devices each, feeds only this process's 8 of the 16 batch rows and runs the trainer's sharded
update. Process 0 writes the result (``argv[1]``: metrics and the gathered new parameters), which
the test compares with the single-process update; process 1 must not write."""
import sys

from tests._localhost import start_worker

info = start_worker()

import jax  # noqa: E402

from prs.parallel import distributed  # noqa: E402

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils as mhu  # noqa: E402

from tests.rl.test_trainer_scale import MODEL, _PC, _RL_SHARDED, _batch  # noqa: E402

from prs.models import qwen3 as M  # noqa: E402
from prs.parallel import sharding as shd  # noqa: E402
from prs.rl import trainer as T  # noqa: E402
from prs.tasks.registry import make_task  # noqa: E402

task = make_task("arith", min_terms=2, max_terms=4)
params = M.init_params(MODEL, jax.random.PRNGKey(0), std=0.2)
batch = _batch(np.random.default_rng(2), r=16, width=12)
host = jax.tree.map(np.asarray, batch)

mesh = shd.make_mesh(fsdp=4)
tr = T.Trainer(task, MODEL, _RL_SHARDED, _PC, mesh=mesh)
s = tr.init_state(params)
rows = slice(8 * info.process_index, 8 * (info.process_index + 1))
mine = shd.shard_batch(T.Batch(*(None if x is None else x[rows] for x in host)), mesh)  # this process's rows only
assert mine.tokens.shape == (16, 12) and not mine.tokens.is_fully_addressable
p2, _, m2 = tr.update(s.params, s.opt_state, mine)
p2 = jax.tree.map(np.asarray, mhu.process_allgather(p2, tiled=True))
if distributed.is_main_process():
    leaves = {jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(p2)}
    np.savez(sys.argv[1], loss=float(m2["loss"]), grad_norm=float(m2["grad_norm"]),
             process_count=info.process_count, device_count=info.device_count, **leaves)
mhu.sync_global_devices("done")
print(f"[p{info.process_index}] loss {float(m2['loss'])}", flush=True)
