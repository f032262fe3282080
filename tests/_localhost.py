"""Two ``jax.distributed`` processes on localhost, for the multi-process tests (not a test module).

``run_processes`` (test side): picks a free port, starts ``worker`` once per process with
``PRS_COORDINATOR`` / ``PRS_NUM_PROCESSES`` / ``PRS_PROCESS_ID`` set (CPU backend, no fake-device
``XLA_FLAGS``), waits, and fails with the end of both logs unless every process exits 0.
``start_worker`` (worker side, before anything else touches JAX): ``devices`` CPU devices per
process, the shared persistent compile cache, ``prs.distributed.initialize()``, and a check of the
process and global device counts."""
import os
import pathlib
import socket
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_processes(worker: str, args, *, cwd, timeout: int, n: int = 2, tail: int = 6000) -> list[str]:
    """Runs ``python -m tests.<worker stem> *args(i)`` as process i of ``n`` (``worker`` names a file
    beside this one); ``args`` is a function of i. Run as a module, not a script, so that ``tests/``
    (whose sub-packages share names with ``experiments``, ``theory`` and ``benchmarks``) never lands
    on the worker's ``sys.path``.
    Returns the processes' logs (stdout + stderr)."""
    codes, logs = start_processes(worker, args, cwd=cwd, timeout=timeout, n=n)
    assert codes == [0] * n, "\n".join(logs)[-tail:]
    return logs


def start_processes(worker: str, args, *, cwd, timeout: int, n: int = 2, env=None) -> tuple[list[int], list[str]]:
    """``run_processes`` without the exit-code check (extra ``env`` entries allowed): waits at most
    ``timeout`` s for each and returns (exit codes, logs); a process still running then is killed
    and the call raises ``subprocess.TimeoutExpired``."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    base.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), PRS_COORDINATOR=f"localhost:{port}",
                PRS_NUM_PROCESSES=str(n), **(env or {}))
    path = pathlib.Path(__file__).with_name(worker)
    assert path.is_file(), path
    module = f"tests.{path.stem}"
    procs = [subprocess.Popen([sys.executable, "-m", module, *map(str, args(i))], env={**base, "PRS_PROCESS_ID": str(i)},
                              cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(n)]
    try:
        logs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [p.returncode for p in procs], logs


def start_worker(*, devices: int = 2, processes: int = 2):
    """Worker start-up: returns ``prs.distributed.initialize()``'s info."""
    import jax

    jax.config.update("jax_num_cpu_devices", devices)
    jax.config.update("jax_compilation_cache_dir", str(ROOT / ".jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    from prs.parallel import distributed

    info = distributed.initialize()
    assert info.process_count == processes and info.device_count == devices * processes, info
    return info


def capturing_trainer():
    """A ``prs.rl.runner.Trainer`` subclass that keeps the latest train state, and that list:
    ``runner.Trainer = cls`` (or ``monkeypatch.setattr``), run, then ``captured[0].params``."""
    from prs.rl import runner

    captured = []

    class CapturingTrainer(runner.Trainer):
        def step(self, state):
            new_state, m = super().step(state)
            captured[:] = [new_state]
            return new_state, m

    return CapturingTrainer, captured
