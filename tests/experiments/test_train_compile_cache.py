"""``experiments.train``'s persistent compilation cache (issue #29 item 3e): on by default, its
directory from the ``compile_cache`` key (default ``$JAX_COMPILATION_CACHE_DIR`` or
``~/.cache/prs/jax``), ``compile_cache=null`` turns it off; the value reaches ``jax.config`` before
the run compiles anything. Reference: ``jax.config``'s own values."""
from __future__ import annotations

import pathlib

import jax
import pytest
from hydra import compose, initialize_config_dir

from experiments import train as TR
from experiments.config import validate

CONF = str(pathlib.Path(__file__).resolve().parents[2] / "conf")
_KEYS = ("jax_enable_compilation_cache", "jax_compilation_cache_dir")


@pytest.fixture
def restore_jax_cache_config():
    before = {k: getattr(jax.config, k) for k in _KEYS}
    yield
    for k, v in before.items():
        jax.config.update(k, v)


def _cfg(*overrides):
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose("config", overrides=["sft.base_dir=/tmp/x", *overrides])


def test_default_and_override_and_off(tmp_path, monkeypatch, restore_jax_cache_config):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert validate(_cfg()).compile_cache == "~/.cache/prs/jax"
    used = TR.compile_cache(validate(_cfg()).compile_cache)
    assert used == str(tmp_path / "home" / ".cache" / "prs" / "jax") and pathlib.Path(used).is_dir()
    assert jax.config.jax_enable_compilation_cache and jax.config.jax_compilation_cache_dir == used
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "env_cache"))  # JAX's own variable wins the default
    assert validate(_cfg()).compile_cache == str(tmp_path / "env_cache")
    TR.compile_cache(validate(_cfg(f"compile_cache={tmp_path}/mine")).compile_cache)
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "mine") and (tmp_path / "mine").is_dir()
    assert TR.compile_cache(validate(_cfg("compile_cache=null")).compile_cache) is None
    assert not jax.config.jax_enable_compilation_cache


def test_train_sets_the_cache_before_the_run(tmp_path, monkeypatch, restore_jax_cache_config):
    """``experiments.train.train``: when the run starts (``prs.rl.runner.run``, stubbed here), the
    configured directory is JAX's compilation cache."""
    import prs.rl.runner as runner

    seen = {}

    class Stop(Exception):
        pass

    def fake_run(*a, **k):
        seen.update({k: getattr(jax.config, k) for k in _KEYS})
        raise Stop

    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(TR, "record_config", lambda *a, **k: None)  # needs a Hydra job context
    with pytest.raises(Stop):
        TR.train(_cfg(f"compile_cache={tmp_path}/cc"), tmp_path / "run")
    assert seen == {"jax_enable_compilation_cache": True, "jax_compilation_cache_dir": str(tmp_path / "cc")}
    with pytest.raises(Stop):
        TR.train(_cfg("compile_cache=null"), tmp_path / "run")
    assert seen["jax_enable_compilation_cache"] is False
