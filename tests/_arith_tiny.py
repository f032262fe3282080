"""The tiny arith set-up the trainer tests share, and its warm start, built once per test run
(test_trainer, test_training_defects, test_schedule and others used to build the same 60-step warm start
each, in every xdist worker)."""
import fcntl
import functools
import os
import pathlib
import pickle

import jax
import jax.numpy as jnp
import numpy as np

from prs.models.qwen3 import ModelConfig
from prs.rl.trainer import RLConfig, supervised_warm_start
from prs.rl.config import EvalConfig
from prs.tasks.registry import make_task

TASK = make_task("arith", min_terms=2, max_terms=4)
MODEL = ModelConfig.preset("tiny", vocab_size=TASK.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           head_dim=8, d_ff=64)
RL = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=16, samples=1))


@functools.lru_cache(maxsize=None)
def warm_params():
    """A short warm start: enough for mixed groups (pass rates strictly between 0 and 1). Never donated:
    ``Trainer.init_state`` copies the parameters it is given.

    Under pytest-xdist the first worker to need it builds it and the others load its bytes (the same
    arrays, bit for bit) from the folder this run's workers share (``PRS_TESTS_SHARED_DIR``, set by
    tests/conftest.py), so no two runs share one; without xdist it is built in the process."""
    build = lambda: supervised_warm_start(TASK, MODEL, steps=60, batch=32, lr=3e-3, seed=0, log=None)  # noqa: E731
    shared = os.environ.get("PRS_TESTS_SHARED_DIR")
    if not shared:
        return build()
    path = pathlib.Path(shared) / "arith_tiny_warm_params.pkl"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait for the one building it
        if path.exists():
            return jax.tree.map(jnp.asarray, pickle.loads(path.read_bytes()))
        params = build()
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(jax.tree.map(np.asarray, params)))
        os.replace(tmp, path)
        return params
