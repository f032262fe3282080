"""prs.distributed: detection of the start-up method, and a real two-process run on localhost
(``jax.distributed`` over the CPU backend, gloo collectives, 2 devices per process)."""

import jax
import numpy as np
import pytest

from prs.parallel.distributed import _detect
from test_scale import one_device_reference
from _localhost import run_processes


def test_detect_start_up_method():
    assert _detect({}) == "single"
    assert _detect({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}) == "single"
    assert _detect({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "16"}) == "slurm"
    assert _detect({"TPU_WORKER_HOSTNAMES": "t0"}) == "single"
    assert _detect({"TPU_WORKER_HOSTNAMES": "t0,t1,t2,t3"}) == "tpu"
    assert _detect({"PRS_COORDINATOR": "h:1", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "16"}) == "explicit"


def test_two_processes_sharded_update_equals_single_process(tmp_path):
    out = tmp_path / "result.npz"
    run_processes("_distributed_worker.py", lambda i: [out], cwd=tmp_path, timeout=240, tail=4000)
    res = np.load(out)
    assert int(res["process_count"]) == 2 and int(res["device_count"]) == 4
    _, _, (p1, _, m1) = one_device_reference()
    assert float(res["loss"]) == pytest.approx(float(m1["loss"]), rel=1e-5, abs=1e-6)
    assert float(res["grad_norm"]) == pytest.approx(float(m1["grad_norm"]), rel=1e-5)
    for key, want in jax.tree_util.tree_leaves_with_path(p1):
        np.testing.assert_allclose(res[jax.tree_util.keystr(key)], np.asarray(want), rtol=1e-5, atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.npz"]  # process 1 wrote nothing


def test_timeouts_reach_jax_distributed_initialize(monkeypatch):
    """The start-up, heartbeat and shut-down timeouts go to ``jax.distributed.initialize`` from the
    arguments, else ``PRS_*_TIMEOUT_S``, else JAX's defaults (300 / 100 / 300 s); bad values are
    one ValueError naming where they came from. (``jax.distributed.initialize`` itself is stubbed.)"""
    from prs.parallel import distributed as D

    calls = []
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    base = {"PRS_COORDINATOR": "h:1", "PRS_NUM_PROCESSES": "2", "PRS_PROCESS_ID": "1"}
    D.initialize(env=base)
    assert calls[-1] == dict(coordinator_address="h:1", num_processes=2, process_id=1, local_device_ids=None,
                             initialization_timeout=300, heartbeat_timeout_seconds=100, shutdown_timeout_seconds=300)
    D.initialize(env={**base, "PRS_HEARTBEAT_TIMEOUT_S": "15", "PRS_SHUTDOWN_TIMEOUT_S": "20"}, timeout_s=60,
                 shutdown_timeout_s=30)
    assert (calls[-1]["initialization_timeout"], calls[-1]["heartbeat_timeout_seconds"],
            calls[-1]["shutdown_timeout_seconds"]) == (60, 15, 30)  # an argument wins over the variable
    D.initialize(env={"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "PRS_HEARTBEAT_TIMEOUT_S": "9"})
    assert calls[-1] == dict(initialization_timeout=300, heartbeat_timeout_seconds=9, shutdown_timeout_seconds=300)
    n = len(calls)
    with pytest.raises(ValueError, match=r"PRS_HEARTBEAT_TIMEOUT_S='soon' must be a positive integer"):
        D.initialize(env={**base, "PRS_HEARTBEAT_TIMEOUT_S": "soon"})
    with pytest.raises(ValueError, match=r"heartbeat_timeout_s=0 must be a positive integer"):
        D.initialize(env=base, heartbeat_timeout_s=0)
    D.initialize(env={})  # one process: nothing is started
    assert len(calls) == n
