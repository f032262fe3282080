"""prs.distributed: detection of the start-up method, and a real two-process run on localhost
(``jax.distributed`` over the CPU backend, gloo collectives, 2 devices per process)."""

import jax
import numpy as np
import pytest

from prs.parallel.distributed import _detect
from tests.rl.test_trainer_scale import one_device_reference
from tests._localhost import run_processes


def test_detect_start_up_method():
    assert _detect({}) == "single"
    assert _detect({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}) == "single"
    assert _detect({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "16"}) == "slurm"
    assert _detect({"TPU_WORKER_HOSTNAMES": "t0"}) == "single"
    assert _detect({"TPU_WORKER_HOSTNAMES": "t0,t1,t2,t3"}) == "tpu"
    assert _detect({"PRS_COORDINATOR": "h:1", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "16"}) == "explicit"


@pytest.mark.slow
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


def _jax_slurm_detection(monkeypatch, env):
    """What JAX's own SLURM detection fills in for unset arguments (the real
    ``ClusterEnv.auto_detect_unset_distributed_params``, under the mocked environment)."""
    from jax._src import clusters

    for k in list(__import__("os").environ):
        if k.startswith("SLURM_") or k == "CUDA_VISIBLE_DEVICES":
            monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return clusters.ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, None, 300)


_SLURM_RANK3 = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "16", "SLURM_PROCID": "11", "SLURM_LOCALID": "3",
                "SLURM_STEP_NODELIST": "gpu[007-008]", "SLURM_STEP_NUM_NODES": "2"}


def test_slurm_rank_devices_are_valid_ordinals(monkeypatch):
    """Rank 3 of a node in a mocked 2 x 8 SLURM job (issue #29 item 3b): the device JAX will use,
    ``local_device_ids`` (our argument, else JAX's SLURM detection ``[SLURM_LOCALID]``), is an
    ordinal among the GPUs the process sees. With every GPU visible (the sbatch script now) JAX's
    ``[3]``; with SLURM binding one GPU per task (``CUDA_VISIBLE_DEVICES=3``) ``[0]``, where the old
    start-up left JAX's ``[3]`` ("invalid device ordinal")."""
    from prs.parallel import distributed as D

    calls = []
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))

    def used_ids(env):
        D.initialize(env=env)
        ids = calls[-1].get("local_device_ids")
        addr, n, pid, auto_ids = _jax_slurm_detection(monkeypatch, env)
        assert (addr, n, pid) == ("gpu007:" + str(4242 % 4096 + 61440), 16, 11)
        return auto_ids if ids is None else ids

    def visible(env):  # how many GPUs the process sees on an 8-GPU node
        v = env.get("CUDA_VISIBLE_DEVICES")
        return 8 if v is None else len(v.split(","))

    for env, want in [(_SLURM_RANK3, [3]),                                       # the sbatch script now
                      ({**_SLURM_RANK3, "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, [3]),
                      ({**_SLURM_RANK3, "CUDA_VISIBLE_DEVICES": "3"}, [0]),      # SLURM binds a GPU per task
                      ({**_SLURM_RANK3, "CUDA_VISIBLE_DEVICES": "2,3"}, [0, 1]),
                      ({**_SLURM_RANK3, "PRS_LOCAL_DEVICE_IDS": "5"}, [5])]:
        ids = used_ids(env)
        assert ids == want, (env, ids)
        assert all(0 <= i < visible(env) for i in ids), (env, ids)


def test_sbatch_script_does_not_narrow_devices_per_rank():
    """``scripts/slurm_multinode.sbatch`` sets no ``CUDA_VISIBLE_DEVICES`` (the per-rank
    ``CUDA_VISIBLE_DEVICES=$SLURM_LOCALID`` made JAX's ``[SLURM_LOCALID]`` invalid on ranks 1-7), keeps
    the memory fraction the planner reads, and launches ``experiments.train`` under ``srun``."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[2] / "scripts" / "slurm_multinode.sbatch").read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert not re.search(r"CUDA_VISIBLE_DEVICES\s*=", code), code
    assert re.search(r"export XLA_PYTHON_CLIENT_MEM_FRACTION=", code)
    assert re.search(r"srun .*-m experiments\.train", code)


def test_tpu_vm_and_mode_knob(monkeypatch):
    """A plain Cloud TPU VM (no ``TPU_WORKER_HOSTNAMES``, JAX's ``running_in_cloud_tpu_vm``) starts
    JAX's runtime with no cluster arguments (JAX reads the metadata server), where the old detection
    ran single-process and the first checkpoint's barrier failed (issue #29 item 3c);
    ``PRS_DISTRIBUTED=off|on|auto`` overrides; a bad value is one error naming the choices."""
    from jax._src import cloud_tpu_init

    from prs.parallel import distributed as D

    calls = []
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    assert _detect({}, tpu_vm=True) == "tpu_vm"
    assert _detect({"PRS_DISTRIBUTED": "off"}, tpu_vm=True) == "single"
    assert _detect({"PRS_DISTRIBUTED": "off", "SLURM_JOB_ID": "7", "SLURM_NTASKS": "16"}) == "single"
    assert _detect({"PRS_DISTRIBUTED": "on"}, tpu_vm=False) == "jax"
    assert _detect({"PRS_DISTRIBUTED": "auto"}, tpu_vm=False) == "single"
    monkeypatch.setattr(cloud_tpu_init, "running_in_cloud_tpu_vm", True)  # what `import jax` sets on a TPU VM
    assert D.on_cloud_tpu_vm()
    assert D.initialize(env={}).method == "tpu"
    assert calls[-1] == dict(initialization_timeout=300, heartbeat_timeout_seconds=100, shutdown_timeout_seconds=300)
    n = len(calls)
    assert D.initialize(env={}, mode="off").method == "single" and len(calls) == n
    monkeypatch.setattr(cloud_tpu_init, "running_in_cloud_tpu_vm", False)
    assert D.initialize(env={}).method == "single" and len(calls) == n
    assert D.initialize(env={"PRS_DISTRIBUTED": "on"}).method == "jax" and len(calls) == n + 1
    # a TPU VM where JAX finds no cluster (no metadata server): one process, not a crash
    monkeypatch.setattr(cloud_tpu_init, "running_in_cloud_tpu_vm", True)

    def no_cluster(**kw):
        raise ValueError("coordinator_address should be defined.")

    monkeypatch.setattr(jax.distributed, "initialize", no_cluster)
    assert D.initialize(env={}).method == "single"
    with pytest.raises(ValueError, match="coordinator_address"):  # named by the environment: a real error
        D.initialize(env={"TPU_WORKER_HOSTNAMES": "t0,t1"})
    with pytest.raises(ValueError, match=r"PRS_DISTRIBUTED='maybe'; choose from \('auto', 'on', 'off'\)"):
        D.initialize(env={"PRS_DISTRIBUTED": "maybe"})
    with pytest.raises(ValueError, match=r"mode='yes'; choose from"):
        D.initialize(env={}, mode="yes")
