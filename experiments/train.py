"""Hydra entry point of a training run (and of sweeps with ``-m``).

    python -m experiments.train                                  # default: ps_ada on arith
    python -m experiments.train method=baseline seed=1 steps=300
    python -m experiments.train -m method=baseline,ps_fix,ps_ada_hard,ps_ada seed=0,1,2
    python -m experiments.train -m hydra/launcher=joblib hydra.launcher.n_jobs=2 method=baseline,ps_ada seed=0,1,2

Each run writes into ``runs/<task>-<method><tag>-s<seed>/`` (sweeps: ``runs/sweep/...``):
``metrics.jsonl``, ``curves.png``, ``summary.json``, ``checkpoints/``, ``wandb/``. Re-running the
same command resumes from the latest checkpoint in that directory.
"""
from __future__ import annotations

import dataclasses
import logging

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from experiments.config import TrainCfg, validate

log = logging.getLogger(__name__)


def build(cfg: TrainCfg):
    """Config -> (task, model_cfg, rl, prefix, run_cfg). Raises ValueError on bad values."""
    import jax.numpy as jnp

    from prs import prefix as ps
    from prs.model import ModelConfig
    from prs.runner import RunConfig
    from prs.tasks.registry import make_task
    from prs.trainer import RLConfig

    task = make_task(cfg.task.name, **dict(cfg.task.params))
    overrides = dict(cfg.model.overrides)
    for key in ("dtype", "param_dtype"):
        if key in overrides:
            overrides[key] = getattr(jnp, overrides[key])
    if cfg.model.checkpoint:  # shapes from the checkpoint's config.json; overrides: dtypes etc.
        from prs.hf import load_config

        model_cfg = load_config(cfg.model.checkpoint, **overrides)
    else:
        overrides.setdefault("vocab_size", task.vocab_size)
        model_cfg = ModelConfig.preset(cfg.model.preset, **overrides)
    # The algo / optim / sampler nodes and the method's loop fields use RLConfig's own names.
    m, e = cfg.method, cfg.eval
    fields = lambda node, keep=None: {k: v for k, v in dataclasses.asdict(node).items() if keep is None or k in keep}
    rl = RLConfig(**fields(cfg.algo), **fields(cfg.optim), **fields(cfg.sampler),
                  **fields(m, {"reroll", "reroll_fallback", "algorithm", "rft_cap"}),
                  eval_count=e.count, eval_samples=e.samples, eval_temperature=e.temperature)
    prefix = ps.PrefixConfig(n=cfg.algo.group_size, **fields(m, {f.name for f in dataclasses.fields(ps.PrefixConfig)}))
    run_cfg = RunConfig(steps=cfg.steps, seed=cfg.seed, eval_every=e.every, ckpt_every=cfg.ckpt_every,
                        sft_steps=cfg.sft.steps, sft_batch=cfg.sft.batch, sft_lr=cfg.sft.lr, sft_seed=cfg.sft.seed,
                        base_dir=cfg.sft.base_dir, wandb_mode=cfg.logging.wandb_mode,
                        wandb_project=cfg.logging.wandb_project, progress=cfg.logging.progress,
                        init_checkpoint=cfg.model.checkpoint)
    return task, model_cfg, rl, prefix, run_cfg


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(dcfg: DictConfig) -> float:
    cfg = validate(dcfg)
    logging.getLogger("absl").setLevel(logging.WARNING)  # orbax logs every checkpoint op at INFO
    from prs.runner import run

    task, model_cfg, rl, prefix, run_cfg = build(cfg)
    out_dir = HydraConfig.get().runtime.output_dir
    log.info("run %s -> %s", cfg.name, out_dir)
    summary = run(task, model_cfg, rl, prefix, run_cfg, out_dir, config_dict=dataclasses.asdict(cfg), log=log.info)
    return summary["eval_final"]


if __name__ == "__main__":
    main()
