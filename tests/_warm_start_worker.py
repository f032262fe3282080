"""Builds the default run's warm start (``python -m experiments.train``'s config, with the given
Hydra overrides) in a fresh cache and prints one JSON line: the held-out demonstration loss and the
step-0 held-out pass@1 the run's first evaluation would log. Run as a subprocess so that the caller
chooses ``XLA_FLAGS`` (e.g. ``--xla_cpu_max_isa=AVX2``, the instruction set of an AVX2-only machine)."""
import json
import pathlib
import sys

import jax.numpy as jnp
from hydra import compose, initialize_config_dir

from experiments.config import validate
from experiments.train import build
from prs.core import prefix as ps
from prs.rl.runner import base_params
from prs.rl.trainer import Trainer, sft_loss

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main(base_dir: str, *overrides: str) -> None:
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = validate(compose("config", overrides=[f"sft.base_dir={base_dir}", *overrides]))
    task, model_cfg, rl, _, run_cfg = build(cfg)
    params = base_params(task, model_cfg, run_cfg, pathlib.Path(base_dir), log=lambda *a: None)
    # demonstrations of problems the warm start never drew (a step index far past its stream)
    probs = task.warm_start_problems(seed=10_000_000 + run_cfg.sft_seed, step=10**7, count=512) \
        if hasattr(task, "warm_start_problems") else task.train_problems(seed=99, step=10**7, count=512)
    tokens, mask = task.demonstrations(probs, seed=424_242)
    loss = float(sft_loss(params, jnp.asarray(tokens), jnp.asarray(mask), cfg=model_cfg))
    tr = Trainer(task, model_cfg, rl, ps.PrefixConfig(mode="baseline", n=rl.group_size), seed=run_cfg.seed)
    print(json.dumps({"heldout_demo_loss": loss, "pass_at_1": tr.evaluate(params, 0)["eval/pass_at_1"],
                      "sft_steps": run_cfg.sft_steps, "sft_seed": run_cfg.sft_seed}))


if __name__ == "__main__":
    main(*sys.argv[1:])
