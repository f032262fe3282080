"""Hydra entry point of a training run (and of sweeps with ``-m``).

    python -m experiments.train                                  # default: ps_ada on arith
    python -m experiments.train method=baseline seed=1 steps=300
    python -m experiments.train -m method=baseline,ps_fix,ps_ada_hard,ps_ada seed=0,1,2
    python -m experiments.train -m hydra/launcher=joblib hydra.launcher.n_jobs=2 method=baseline,ps_ada seed=0,1,2

Each run writes into ``runs/<task>-<method><tag>-s<seed>/`` (sweeps: ``runs/sweep/...``):
``metrics.jsonl``, ``curves.png``, ``summary.json``, ``checkpoints/``, ``wandb/``. Re-running the
same command resumes from the latest checkpoint in that directory (a finished run says "already
complete"). The configuration is validated before anything is written there, and a directory
holding a run of another configuration is refused (naming the differing keys; ``tag=`` picks a new
directory). Mistakes end in one ``error: ...`` line and exit status 2 (``experiments.cli``); a
sweep runs every job and then names the failed ones. Ctrl-C stops the run at the end of the current
step, checkpoints it, prints one ``interrupted: ...`` line and exits 130; re-running resumes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import pathlib
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from experiments import cli
from experiments.config import TrainCfg, rl_config, upgrade, validate
from experiments.schema import to_kwargs

log = logging.getLogger(__name__)


def build(cfg: TrainCfg):
    """Config -> (task, model_cfg, rl, prefix, run_cfg). Raises ValueError on bad values."""
    import jax.numpy as jnp

    from prs.core import prefix as ps
    from prs.models.qwen3 import ModelConfig
    from prs.rl.runner import RunConfig
    from prs.tasks.registry import make_task

    task = make_task(cfg.task.name, **dict(cfg.task.params), **reward_params(cfg))
    overrides = dict(cfg.model.overrides)
    for key in ("dtype", "param_dtype"):
        if key in overrides:
            overrides[key] = getattr(jnp, overrides[key])
    if cfg.model.checkpoint:  # shapes from the checkpoint's config.json; overrides: dtypes etc.
        from prs.models.hf import load_config

        model_cfg = load_config(cfg.model.checkpoint, **overrides)
    else:
        overrides.setdefault("vocab_size", task.vocab_size)
        model_cfg = ModelConfig.preset(cfg.model.preset, **overrides)
    # Every node field maps back to the library field it was derived from (experiments.schema).
    rl = rl_config(cfg)
    prefix = ps.PrefixConfig(n=cfg.algo.group_size, **to_kwargs(cfg.method, ps.PrefixConfig))
    run_cfg = RunConfig(**to_kwargs(cfg, RunConfig), **to_kwargs(cfg.eval, RunConfig), **to_kwargs(cfg.sft, RunConfig),
                        **to_kwargs(cfg.logging, RunConfig), init_checkpoint=cfg.model.checkpoint)
    return task, model_cfg, rl, prefix, run_cfg


def reward_params(cfg: TrainCfg) -> dict:
    """``{"reward": RewardConfig}`` for the task when the ``reward`` node names a function, else {}."""
    from prs.rewards.custom import RewardConfig

    reward = RewardConfig(**to_kwargs(cfg.reward, RewardConfig))
    if not reward.enabled:
        if reward != RewardConfig():
            raise ValueError(f"reward: {reward} sets options but no function; give reward.path=FILE.py or "
                             f"reward.module=pkg.mod with reward.name=FN")
        return {}
    if cfg.task.name != "math_jsonl":
        raise ValueError(f"reward.path / reward.module: a custom reward scores decoded text and dataset columns, "
                         f"which task=math_jsonl has; task={cfg.task.name} scores its own rollouts")
    return {"reward": reward}


def build_mesh(cfg: TrainCfg):
    """The ``mesh`` node -> a ``prs.parallel.sharding`` mesh over every process's devices (None: single)."""
    if cfg.mesh.name == "single":
        return None
    from prs.parallel.sharding import make_mesh

    return make_mesh(data=cfg.mesh.data, fsdp=cfg.mesh.fsdp, tensor=cfg.mesh.tensor, axis_types=cfg.mesh.axis_types)


def compile_cache(path: str | None) -> str | None:
    """Turns JAX's persistent compilation cache on at ``path`` (``~`` expanded; created if missing;
    JAX stores compilations longer than ``jax_persistent_cache_min_compile_time_secs``, 1 s by
    default) or, for ``None`` / ``""``, off. Returns the directory used (None when off). Called
    before anything compiles."""
    import jax

    if not path:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    cache = pathlib.Path(path).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(cache))
    return str(cache)


def record_config(dcfg: DictConfig, out_dir: pathlib.Path) -> None:
    """``.hydra/config.yaml`` and ``overrides.yaml`` of the run (Hydra's own copy is off:
    ``hydra.output_subdir: null``), written only once the configuration has been accepted."""
    from omegaconf import OmegaConf

    hydra_dir = out_dir / ".hydra"
    hydra_dir.mkdir(parents=True, exist_ok=True)
    plain = OmegaConf.to_container(dcfg, resolve=False)
    plain.pop("hydra", None)
    OmegaConf.save(OmegaConf.create(plain), hydra_dir / "config.yaml")
    OmegaConf.save(OmegaConf.create(list(HydraConfig.get().overrides.task)), hydra_dir / "overrides.yaml")


def _detach_file_logs() -> list[logging.FileHandler]:
    """Removes the root logger's file handlers (Hydra's job log in the run directory) and returns them."""
    root = logging.getLogger()
    files = [h for h in root.handlers if isinstance(h, logging.FileHandler)]
    for h in files:
        root.removeHandler(h)
    return files


def _attach_file_logs(files: list[logging.FileHandler]) -> None:
    for h in files:
        logging.getLogger().addHandler(h)


def train(dcfg: DictConfig, out_dir: pathlib.Path) -> float:
    """One run: validate, check the run directory, then train (``prs.rl.runner.run``).

    Everything that can reject the configuration runs first and touches no device (so a rejected
    run writes nothing, not even a log line); then the multi-host start-up, which must precede any
    device use. Several processes: every one checks the recorded configuration (read only), and
    only process 0 writes into the run directory (``config.json``, ``.hydra/``, the Hydra job log;
    the others log to the console only); ``prs.rl.runner.run`` keeps to the same rule."""
    from prs.parallel import distributed

    cfg = validate(dcfg)
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every checkpoint op at INFO
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "Unable to initialize backend 'tpu'"
    import jax

    from prs.rl import rundir
    from prs.rl.runner import run

    task, model_cfg, rl, prefix, run_cfg = build(cfg)
    config_dict = dataclasses.asdict(cfg)
    defaults = dataclasses.asdict(TrainCfg())  # a key a recorded run lacks (a field added since) counts as its default
    rundir.check_config(out_dir, config_dict, defaults=defaults, write=False, upgrade=upgrade)  # every process: a different configuration is refused
    files = _detach_file_logs()  # until the process index is known: only process 0 writes the job log
    distributed.initialize()  # multi-host start-up: before anything touches a device (no-op for one process)
    cache = compile_cache(cfg.compile_cache)  # before the first compile (conf/config.yaml: compile_cache)
    with contextlib.ExitStack() as stack:
        lock = None
        if jax.process_index() == 0:  # one writer in a multi-host run
            rundir.preflight(out_dir, need_bytes=0)  # run() checks the disk space again, with the model's size
            # the run lock before the job log: a second process on a training run's directory is refused
            # before it writes a line into that run's train.log
            lock = stack.enter_context(rundir.run_lock(out_dir))
            _attach_file_logs(files)
            rundir.check_config(out_dir, config_dict, defaults=defaults, upgrade=upgrade)
            record_config(dcfg, out_dir)
        log.info("run %s -> %s (compilation cache: %s)", cfg.name, out_dir, cache or "off")
        mesh = build_mesh(cfg)
        summary = run(task, model_cfg, rl, prefix, run_cfg, out_dir, config_dict=config_dict,
                      config_defaults=defaults, config_upgrade=upgrade, mesh=mesh, log=log.info, lock=lock)
    return summary["eval_final"]


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(dcfg: DictConfig) -> float:
    return cli.guarded(train, dcfg)


if __name__ == "__main__":
    if "--help" in sys.argv[1:] or "-h" in sys.argv[1:]:
        print(cli.help_text())  # then Hydra prints the composed config (conf/config.yaml: hydra.help)
    try:
        sys.argv[1:] = cli.check_overrides(sys.argv[1:])  # schema keys as ++key=value
    except cli.UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C before or after the job (inside it: experiments.cli.guarded)
        print("interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        sys.exit(130)
