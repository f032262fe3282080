"""Worker of tests/parallel/test_multihost_resume.py's kill test (not a test module): one of two localhost
processes running the resume test's configuration in ``<root>/killed``.

argv: tmp root, base_dir (the warm-start cache), mode:

* ``kill``: process 1 sends itself SIGKILL at the start of step CRASH_AT (after the step-CRASH_AT
  checkpoint is on disk), as a preempted or OOM-killed host would; process 0 is left waiting in its
  next collective until ``jax.distributed``'s heartbeat timeout (``PRS_HEARTBEAT_TIMEOUT_S``) ends it;
* ``resume``: the same command again in the same directory: it resumes from the checkpoint;
  process 0 writes the final parameters to ``<root>/killed.npz`` and the summary to
  ``<root>/killed_summary.json``."""
import json
import os
import pathlib
import signal
import time
import sys

from tests._localhost import capturing_trainer, start_worker

info = start_worker()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils as mhu  # noqa: E402

from prs.parallel import distributed  # noqa: E402
from prs.parallel import sharding as shd  # noqa: E402
from prs.rl import runner  # noqa: E402
from tests.parallel.test_multihost_resume import CRASH_AT, MODEL, TASK, prefix_cfg, rl_cfg, run_cfg  # noqa: E402

root, base_dir, mode = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
_Capturing, captured = capturing_trainer()


class KilledTrainer(_Capturing):
    def step(self, state):
        if mode == "kill" and info.process_index == 1 and int(state.step) == CRASH_AT:
            # checkpoints are written asynchronously: the premise is a kill after the step-CRASH_AT checkpoint
            # is committed (orbax renames its directory into place when the write is done), so wait for it
            deadline = time.monotonic() + 120
            while not (root / "killed" / "checkpoints" / str(CRASH_AT)).is_dir() and time.monotonic() < deadline:
                time.sleep(0.2)
            print(f"[p1] SIGKILL at step {CRASH_AT}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(state)


runner.Trainer = KilledTrainer
summary = runner.run(TASK, MODEL, rl_cfg(), prefix_cfg(), run_cfg(base_dir), root / "killed",
                     mesh=shd.make_mesh(fsdp=4), log=lambda *a: None)
if mode == "kill":
    raise AssertionError(f"[p{info.process_index}] the run finished although process 1 was killed")
host = jax.tree.map(np.asarray, mhu.process_allgather(captured[0].params, tiled=True))
if distributed.is_main_process():
    np.savez(root / "killed.npz", **{jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(host)})
    (root / "killed_summary.json").write_text(json.dumps(summary, default=str))
mhu.sync_global_devices("done")
print(f"[p{info.process_index}] done", flush=True)
