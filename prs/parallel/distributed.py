"""Multi-host start-up: one call, before anything touches a device, on every process.

``initialize()`` wraps ``jax.distributed.initialize`` (JAX's own multi-host runtime; no home-made
orchestration) and decides how from the environment, first match wins:

1. explicit arguments, or ``PRS_COORDINATOR`` (``host:port``), ``PRS_NUM_PROCESSES``,
   ``PRS_PROCESS_ID`` (and optional ``PRS_LOCAL_DEVICE_IDS``, comma-separated): passed as given;
2. SLURM with more than one task (``SLURM_NTASKS > 1`` and ``SLURM_JOB_ID``): JAX's SLURM cluster
   detection (coordinator = first node of ``SLURM_STEP_NODELIST``, port ``61440 + JOB_ID % 4096``;
   one process per task: per host or per GPU, as ``srun`` launched them);
3. a multi-host Cloud TPU slice (``TPU_WORKER_HOSTNAMES`` lists more than one host, or
   ``MEGASCALE_COORDINATOR_ADDRESS`` is set): JAX's TPU detection; every host runs the same command;
4. otherwise one process: nothing is called (``jax.distributed.initialize()`` without a cluster
   raises "coordinator_address should be defined").

Failure detection (JAX's coordination service): ``timeout_s`` bounds the start-up (every process
must have connected by then), ``heartbeat_timeout_s`` is how long a process may go without a
heartbeat before the others are told it died and stop with an error (instead of waiting forever
in a collective), and ``shutdown_timeout_s`` how long an exiting process waits for the others at
shut-down. JAX's defaults are 300, 100 and 300 s; each can also be set for a launcher's every
process by ``PRS_INIT_TIMEOUT_S``, ``PRS_HEARTBEAT_TIMEOUT_S``, ``PRS_SHUTDOWN_TIMEOUT_S``
(an argument wins over the variable).

It must run before the first ``jax.devices()`` or computation (JAX refuses afterwards); setting
``jax_num_cpu_devices`` before it is fine. After it, ``jax.devices()`` lists every process's
devices and a mesh over them spans the hosts; only ``is_main_process()`` should write files.
"""
from __future__ import annotations

import logging
import os
from typing import NamedTuple

import jax

log = logging.getLogger(__name__)


class DistInfo(NamedTuple):
    process_index: int
    process_count: int
    device_count: int        # global, all processes
    local_device_count: int
    method: str              # "single", "explicit", "slurm", "tpu" or "already"


def _detect(env) -> str:
    if env.get("PRS_COORDINATOR"):
        return "explicit"
    if env.get("SLURM_JOB_ID") and int(env.get("SLURM_NTASKS", "1") or 1) > 1:
        return "slurm"
    hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if len(hosts) > 1 or env.get("MEGASCALE_COORDINATOR_ADDRESS"):
        return "tpu"
    return "single"


_TIMEOUTS = (("timeout_s", "PRS_INIT_TIMEOUT_S", "initialization_timeout", 300),
             ("heartbeat_timeout_s", "PRS_HEARTBEAT_TIMEOUT_S", "heartbeat_timeout_seconds", 100),
             ("shutdown_timeout_s", "PRS_SHUTDOWN_TIMEOUT_S", "shutdown_timeout_seconds", 300))


def _timeouts(given: dict, env) -> dict:
    """``jax.distributed.initialize``'s timeout keywords from the arguments, else the environment,
    else JAX's defaults; a value that is not a positive integer number of seconds is a ValueError."""
    out = {}
    for arg, var, kw, default in _TIMEOUTS:
        val, where = given[arg], arg
        if val is None and env.get(var):
            val, where = env[var], var
        if val is None:
            val = default
        try:
            sec = int(val)
        except (TypeError, ValueError):
            sec = None
        if sec is None or isinstance(val, bool) or sec < 1 or (isinstance(val, float) and val != sec):
            raise ValueError(f"prs.distributed.initialize: {where}={val!r} must be a positive integer (seconds)")
        out[kw] = sec
    return out


def initialize(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None,
               *, local_device_ids: list[int] | None = None, timeout_s: int | None = None,
               heartbeat_timeout_s: int | None = None, shutdown_timeout_s: int | None = None, env=None) -> DistInfo:
    """Starts JAX's multi-host runtime if this is a multi-process job (module docstring); returns
    and logs the process index/count and the global device count. Idempotent. The three timeouts
    (seconds; module docstring) default to ``PRS_*_TIMEOUT_S`` or JAX's 300 / 100 / 300."""
    env = os.environ if env is None else env
    timeouts = _timeouts(dict(timeout_s=timeout_s, heartbeat_timeout_s=heartbeat_timeout_s,
                              shutdown_timeout_s=shutdown_timeout_s), env)
    if jax.distributed.is_initialized():
        method = "already"
    else:
        method = "explicit" if coordinator is not None else _detect(env)
        if method == "explicit":
            coordinator = coordinator or env["PRS_COORDINATOR"]
            try:
                n = int(num_processes if num_processes is not None else env["PRS_NUM_PROCESSES"])
                pid = int(process_id if process_id is not None else env["PRS_PROCESS_ID"])
            except KeyError as e:
                raise ValueError(f"prs.distributed.initialize: coordinator {coordinator!r} given but {e.args[0]} "
                                 f"is not set (need PRS_NUM_PROCESSES and PRS_PROCESS_ID)") from None
            if not (n >= 1 and 0 <= pid < n):
                raise ValueError(f"prs.distributed.initialize: process_id={pid} must be in [0, num_processes={n})")
            ids = local_device_ids
            if ids is None and env.get("PRS_LOCAL_DEVICE_IDS"):
                ids = [int(i) for i in env["PRS_LOCAL_DEVICE_IDS"].split(",")]
            jax.distributed.initialize(coordinator_address=coordinator, num_processes=n, process_id=pid,
                                       local_device_ids=ids, **timeouts)
        elif method in ("slurm", "tpu"):
            jax.distributed.initialize(**timeouts)
    info = DistInfo(jax.process_index(), jax.process_count(), jax.device_count(), jax.local_device_count(), method)
    log.info("prs.distributed: process %d/%d, %d devices (%d local), start-up %s", info.process_index,
             info.process_count, info.device_count, info.local_device_count, method)
    return info


def is_main_process() -> bool:
    """True on the process that writes metrics, figures, checkpoints' metadata and wandb (index 0)."""
    return jax.process_index() == 0
