"""Shared test set-up.

Eight fake CPU devices so that sharding tests run anywhere (must be set before jax is imported),
a persistent compilation cache so that pytest-xdist workers and reruns share compiled kernels,
and rank promotion turned into an error so that silent broadcasting is caught.
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("MPLBACKEND", "Agg")

import pathlib

_CACHE = pathlib.Path(__file__).resolve().parent.parent / ".jax_cache"
# the same cache for the subprocesses tests start (CLI runs, kill -9, notebook kernels)
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_CACHE))
# every program, however small: the second xdist worker, a re-built Trainer's fresh jit and a
# subprocess load the same executable instead of compiling it again. Measured on
# the 2-core dev machine (user CPU, -n 0, cold cache): tests/rl/test_schedule.py 165 s at 0.5 s vs 142 s
# at 0, and 33 s on a second run with the cache warm; tests/core/test_losses_menu.py warm 29 s vs 14 s.
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(scope="session")
def eight_devices():
    devices = jax.devices()
    if len(devices) < 8:
        pytest.skip(f"needs 8 devices, have {len(devices)} (XLA_FLAGS set after jax import?)")
    return devices[:8]


@pytest.fixture(scope="session", autouse=True)
def _shared_run_dir(tmp_path_factory):
    """Under pytest-xdist, the folder this run's workers share (the parent of their basetemps, which
    pytest deletes with old runs): tests/_arith_tiny.py keeps its warm start there for the other workers."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["PRS_TESTS_SHARED_DIR"] = str(tmp_path_factory.getbasetemp().parent)
    yield
