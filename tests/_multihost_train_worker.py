"""Worker of tests/parallel/test_multihost_train.py (not a test module): one of two localhost processes
running a whole training run (``prs.rl.runner.run``: warm start loaded from the shared cache,
evaluation, sampling, rewards, Prefix Sampling, advantages, sharded updates) on an ``fsdp = 4``
mesh over both processes' 2 CPU devices each.

argv: out_dir (this process's own run directory: process 1's must stay empty), base_dir (the
warm-start cache, built by the test), result path (process 0 writes the final parameters there),
schedule. The final train state is captured by a Trainer subclass (test-only)."""
import sys

from tests._localhost import start_worker

info = start_worker()

import jax  # noqa: E402

from prs.parallel import distributed  # noqa: E402

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils as mhu  # noqa: E402

from tests.parallel.test_multihost_train import MODEL, TASK, prefix_cfg, rl_cfg, run_cfg  # noqa: E402

from prs.parallel import sharding as shd  # noqa: E402
from prs.rl import runner  # noqa: E402

out_dir, base_dir, result, sched = sys.argv[1:5]
from tests._localhost import capturing_trainer

CapturingTrainer, captured = capturing_trainer()
runner.Trainer = CapturingTrainer
summary = runner.run(TASK, MODEL, rl_cfg(sched), prefix_cfg(), run_cfg(base_dir), out_dir,
                     mesh=shd.make_mesh(fsdp=4), log=lambda *a: None)
params = captured[0].params
assert not jax.tree.leaves(params)[0].is_fully_addressable  # the run's parameters span both processes
host = jax.tree.map(np.asarray, mhu.process_allgather(params, tiled=True))
if distributed.is_main_process():
    np.savez(result, **{jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(host)})
mhu.sync_global_devices("done")
print(f"[p{info.process_index}] done", flush=True)
