"""Multi-host start-up: one call, before anything touches a device, on every process.

``initialize()`` wraps ``jax.distributed.initialize`` (JAX's own multi-host runtime; no home-made
orchestration) and decides how from the environment, first match wins:

1. explicit arguments, or ``PRS_COORDINATOR`` (``host:port``), ``PRS_NUM_PROCESSES``,
   ``PRS_PROCESS_ID`` (and optional ``PRS_LOCAL_DEVICE_IDS``, comma-separated): passed as given;
2. SLURM with more than one task (``SLURM_NTASKS > 1`` and ``SLURM_JOB_ID``): JAX's SLURM cluster
   detection (coordinator = first node of ``SLURM_STEP_NODELIST``, port ``61440 + JOB_ID % 4096``;
   one process per task: per host or per GPU, as ``srun`` launched them). JAX then gives a task
   the device ``local_device_ids=[SLURM_LOCALID]``, an ordinal among the devices the process
   sees: launch with every GPU of the node visible (``scripts/slurm_multinode.sbatch`` sets no
   ``CUDA_VISIBLE_DEVICES``). Where SLURM itself binds one GPU per task (``--gpu-bind``,
   ``--gpus-per-task``: ``CUDA_VISIBLE_DEVICES`` lists fewer devices than ``SLURM_LOCALID + 1``)
   the process's visible devices are passed instead (``[0]`` for one), never an invalid ordinal;
   ``PRS_LOCAL_DEVICE_IDS`` overrides both;
3. a Cloud TPU VM (JAX found libtpu and TPU chips at import: ``running_in_cloud_tpu_vm``), or a
   multi-host slice named by the environment (``TPU_WORKER_HOSTNAMES`` lists more than one host,
   or ``MEGASCALE_COORDINATOR_ADDRESS`` is set): ``jax.distributed.initialize()`` with no cluster
   arguments, JAX's own TPU detection (on a plain GCE TPU VM from the metadata server, where
   no variable names the hosts); every host runs the same command. A single-host VM gets a
   one-process runtime, as maxtext starts every TPU job; a TPU VM where JAX finds no cluster at
   all ("coordinator_address should be defined", e.g. no metadata server) runs as one process,
   with a warning;
4. otherwise one process: nothing is called (``jax.distributed.initialize()`` without a cluster
   raises "coordinator_address should be defined").

``PRS_DISTRIBUTED`` (or the ``mode=`` argument) overrides the detection: ``auto`` (default, the
rules above), ``on`` (always ``jax.distributed.initialize()``, JAX's detection of any cluster it
knows: SLURM, Open MPI, Kubernetes, TPU), ``off`` (never; one process per job, e.g. a debug run
on one host of a slice).

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
    method: str              # "single", "explicit", "slurm", "tpu", "jax" or "already" (how it started)


MODES = ("auto", "on", "off")


def on_cloud_tpu_vm() -> bool:
    """True when ``import jax`` found libtpu and TPU chips on this machine (JAX's own
    ``cloud_tpu_init``, which reads the PCI bus, not the devices: safe before ``initialize``)."""
    try:
        from jax._src import cloud_tpu_init
    except ImportError:  # pragma: no cover - a JAX without the module: no TPU detection by us
        return False
    return bool(getattr(cloud_tpu_init, "running_in_cloud_tpu_vm", False))


def _detect(env, *, tpu_vm: bool | None = None) -> str:
    """The start-up method (module docstring): "explicit", "slurm", "tpu", "jax" (``on``) or "single"."""
    mode = (env.get("PRS_DISTRIBUTED") or "auto").strip().lower()
    if mode not in MODES:
        raise ValueError(f"prs.distributed.initialize: PRS_DISTRIBUTED={env.get('PRS_DISTRIBUTED')!r}; "
                         f"choose from {MODES}")
    if mode == "off":
        return "single"
    if env.get("PRS_COORDINATOR"):
        return "explicit"
    if env.get("SLURM_JOB_ID") and int(env.get("SLURM_NTASKS", "1") or 1) > 1:
        return "slurm"
    hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    if len(hosts) > 1 or env.get("MEGASCALE_COORDINATOR_ADDRESS"):
        return "tpu"
    if on_cloud_tpu_vm() if tpu_vm is None else tpu_vm:
        return "tpu_vm"
    return "jax" if mode == "on" else "single"


def _slurm_local_device_ids(env) -> list[int] | None:
    """``local_device_ids`` for a SLURM task: ``PRS_LOCAL_DEVICE_IDS`` if set; else, when
    ``CUDA_VISIBLE_DEVICES`` shows fewer devices than JAX's ``[SLURM_LOCALID]`` needs (SLURM bound
    GPUs to tasks), every visible device ``[0, .., n − 1]``; else None (JAX's ``[SLURM_LOCALID]``)."""
    if env.get("PRS_LOCAL_DEVICE_IDS"):
        return [int(i) for i in env["PRS_LOCAL_DEVICE_IDS"].split(",")]
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None or env.get("SLURM_LOCALID") is None:
        return None
    n = len([d for d in visible.split(",") if d.strip()])
    if n and int(env["SLURM_LOCALID"]) >= n:
        return list(range(n))
    return None


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
               heartbeat_timeout_s: int | None = None, shutdown_timeout_s: int | None = None, env=None,
               mode: str | None = None) -> DistInfo:
    """Starts JAX's multi-host runtime if this is a multi-process job (module docstring); returns
    and logs the process index/count and the global device count. Idempotent. The three timeouts
    (seconds; module docstring) default to ``PRS_*_TIMEOUT_S`` or JAX's 300 / 100 / 300. ``mode``:
    one of ``MODES``, default ``PRS_DISTRIBUTED`` or ``"auto"``."""
    env = os.environ if env is None else env
    if mode is not None:
        if mode not in MODES:
            raise ValueError(f"prs.distributed.initialize: mode={mode!r}; choose from {MODES}")
        env = {**env, "PRS_DISTRIBUTED": mode}
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
        elif method == "slurm":
            ids = local_device_ids if local_device_ids is not None else _slurm_local_device_ids(env)
            jax.distributed.initialize(**({} if ids is None else {"local_device_ids": ids}), **timeouts)
        elif method in ("tpu", "jax"):  # JAX's cluster detection (TPU: metadata server or variables)
            jax.distributed.initialize(**timeouts)
        elif method == "tpu_vm":  # a TPU VM named by nothing but JAX's own detection
            try:
                jax.distributed.initialize(**timeouts)
                method = "tpu"
            except ValueError as e:  # no cluster JAX knows (e.g. a TPU VM without a metadata server)
                if "coordinator" not in str(e):
                    raise
                log.warning("prs.distributed: a TPU VM but JAX found no cluster (%s); one process", e)
                method = "single"
    info = DistInfo(jax.process_index(), jax.process_count(), jax.device_count(), jax.local_device_count(), method)
    log.info("prs.distributed: process %d/%d, %d devices (%d local), start-up %s", info.process_index,
             info.process_count, info.device_count, info.local_device_count, method)
    return info


def is_main_process() -> bool:
    """True on the process that writes metrics, figures, checkpoints' metadata and wandb (index 0)."""
    return jax.process_index() == 0
