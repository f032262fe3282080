"""Worker of tests/parallel/test_multihost_agent.py (not a test module): one of two localhost processes
(2 CPU devices each, ``fsdp = 4`` over both) running the repair agent's rollouts on the trainer's
mesh: fresh multi-turn episodes (``AgentRollouts.rollout``), re-rolls through replay-through-
execution of demonstration sources (``reroll``), and a short ``runner.run``.

argv: out_dir (this process's own run directory: process 1's must stay empty), result path
(process 0 writes the episodes there)."""
import sys

from tests._localhost import start_worker

info = start_worker()

from prs.parallel import distributed  # noqa: E402

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils as mhu  # noqa: E402

from tests.parallel.test_multihost_agent import episodes, run_cfg  # noqa: E402

from prs.parallel import sharding as shd  # noqa: E402

out_dir, result = sys.argv[1:3]
got, summary = episodes(shd.make_mesh(fsdp=4), out_dir, run_cfg())
if distributed.is_main_process():
    np.savez(result, **got)
mhu.sync_global_devices("done")
print(f"[p{info.process_index}] done: {summary['eval_final']}", flush=True)
