"""Worker of tests/parallel/test_multihost_resume.py (not a test module): one of two localhost processes
(2 CPU devices each, ``fsdp = 4`` over both) running, in run directories both processes share
(orbax writes every process's shards into the same checkpoint directory, as on a shared disk):

1. ``full``: an uninterrupted ``runner.run`` of STEPS steps with checkpoints;
2. ``part``: the same run, stopped by an exception injected into step 2 on every process (after
   the step-2 checkpoint), then re-run in the same directory: it resumes from the checkpoint.

argv: tmp root (holding ``full/``, ``part/``), base_dir (the warm-start cache, built by the test).
Process 0 writes each run's final parameters to ``<root>/<run>.npz``; every process writes the
summaries ``run()`` returned to ``<root>/summary_p<i>.json`` (outside the run directories)."""
import json
import pathlib
import sys

from tests._localhost import capturing_trainer, start_worker

info = start_worker()

import jax  # noqa: E402

from prs.parallel import distributed  # noqa: E402

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils as mhu  # noqa: E402

from tests.parallel.test_multihost_resume import CRASH_AT, MODEL, TASK, prefix_cfg, rl_cfg, run_cfg  # noqa: E402

from prs.parallel import sharding as shd  # noqa: E402
from prs.rl import runner  # noqa: E402

root, base_dir = pathlib.Path(sys.argv[1]), sys.argv[2]
mesh = shd.make_mesh(fsdp=4)
_Capturing, captured = capturing_trainer()


class Injected(RuntimeError):
    pass


class CapturingTrainer(_Capturing):
    crash_at = None

    def step(self, state):
        if int(state.step) == self.crash_at:
            raise Injected(f"injected failure at step {self.crash_at}")
        return super().step(state)


runner.Trainer = CapturingTrainer


def save_params(name):
    params = captured[0].params
    assert not jax.tree.leaves(params)[0].is_fully_addressable  # the run's parameters span both processes
    host = jax.tree.map(np.asarray, mhu.process_allgather(params, tiled=True))
    if distributed.is_main_process():
        np.savez(root / f"{name}.npz", **{jax.tree_util.keystr(k): v for k, v in jax.tree_util.tree_leaves_with_path(host)})


def go(name):
    return runner.run(TASK, MODEL, rl_cfg(), prefix_cfg(), run_cfg(base_dir), root / name, mesh=mesh,
                      log=lambda *a: None)


summaries = {"full": go("full")}
save_params("full")

CapturingTrainer.crash_at = CRASH_AT
try:
    go("part")
    raise AssertionError("the injected failure did not stop the run")
except Injected:
    pass
if distributed.is_main_process():  # process 0 recorded the failure, at the step it happened
    assert json.loads((root / "part" / "error.json").read_text())["step"] == CRASH_AT
mhu.sync_global_devices("crashed")
CapturingTrainer.crash_at = None
summaries["part"] = go("part")  # resumes from the step-CRASH_AT checkpoint
save_params("part")
(root / f"summary_p{info.process_index}.json").write_text(json.dumps(summaries, default=str))
mhu.sync_global_devices("done")
print(f"[p{info.process_index}] done", flush=True)
