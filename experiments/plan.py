"""Command line of the memory planner over a training config (``prs.plan`` holds the arithmetic and a
command line over explicit sizes).

    python -m experiments.plan +experiment=grpo_ps_qwen3_4b_h200x8
    python -m experiments.plan +experiment=grpo_ps_qwen3_4b_v5p64 algo.micro_batches=16 --devices 32 --device-gib 95

Arguments are Hydra overrides exactly as for ``experiments.train``, plus ``--devices N`` (size of
the job; resolves a ``-1`` mesh axis; default: ``mesh.devices`` or 8), ``--device-gib G``
(default: ``mesh.device_gib`` or 80), ``--prompt-len P`` (prompt bucket width; default 512) and
``--mem-fraction F``; with ``rollout=vllm`` also ``--vllm-memory-utilization U``,
``--vllm-tensor-parallel N`` and ``--vllm-sleep-mode true|false`` (``prs.plan.plan_vllm``: the vLLM
engine's weights, KV pages, colocation with JAX's pool, the weight push per step). Prints the per-device bytes of each part and the verdict; exits 1 if the run
does not fit. The device memory is what JAX gets: ``--mem-fraction`` if given, else on
``mesh.platform`` gpu (default) ``XLA_PYTHON_CLIENT_MEM_FRACTION`` of it (0.75 when unset, as JAX;
set it as the launcher does, e.g. ``XLA_PYTHON_CLIENT_MEM_FRACTION=0.92 python -m experiments.plan ...``),
on tpu all of it (``prs.plan.mem_fraction``).
"""
from __future__ import annotations

import os
import pathlib
import sys

from hydra import compose, initialize_config_dir

from experiments import cli
from experiments.config import rl_config, validate

CONF = str(pathlib.Path(__file__).resolve().parent.parent / "conf")


FLAGS = ("devices", "device_gib", "prompt_len", "mem_fraction", "vllm_memory_utilization", "vllm_tensor_parallel",
         "vllm_sleep_mode")


def _flags(argv):
    """(``--flag value`` / ``--flag=value`` pairs, the Hydra overrides); an unknown or valueless flag is a
    ``UsageError``, and the overrides are checked as ``experiments.train`` checks them (``cli.check_overrides``)."""
    known = ["--" + f.replace("_", "-") for f in FLAGS]
    flags, rest, i = {}, [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            key, eq, val = a[2:].partition("=")
            if key.replace("-", "_") not in FLAGS:
                raise cli.UsageError(f"unknown flag --{key}; {cli.did_you_mean('--' + key, known)}known: "
                                     + ", ".join(known))
            if not eq:
                i += 1
                if i == len(argv):
                    raise cli.UsageError(f"--{key} needs a value")
                val = argv[i]
            flags[key.replace("-", "_")] = val
        elif a.startswith("-"):
            raise cli.UsageError(f"unknown flag {a}; flags: --help, " + ", ".join(known))
        else:
            rest.append(a)
        i += 1
    return flags, cli.check_overrides(rest)


def setup(overrides, *, devices=None, device_gib=None, prompt_len: int = 512, frac=None) -> dict:
    """What ``python -m experiments.plan`` plans for Hydra ``overrides``: ``{"cfg", "model_cfg", "rl", "sizes",
    "devices", "device_gib", "mem_fraction", "platform", "budget", "prompt_len", "rerolls"}``. ``devices`` /
    ``device_gib`` default to ``mesh.devices`` (or 8) / ``mesh.device_gib`` (or 80); ``frac`` (the
    allocator's share) to what JAX takes on ``mesh.platform`` (``prs.plan.mem_fraction``)."""
    import jax.numpy as jnp

    from prs.models.qwen3 import ModelConfig
    from prs.plan import mem_fraction

    with initialize_config_dir(config_dir=CONF, version_base=None):
        cfg = validate(compose("config", overrides=["sft.base_dir=/tmp/prs-plan", *overrides]))
    over = dict(cfg.model.overrides)
    for key in ("dtype", "param_dtype"):
        if key in over:
            over[key] = getattr(jnp, over[key])
    model_cfg = ModelConfig.preset(cfg.model.preset, **over)
    rl = rl_config(cfg)
    _check_agent_sampling(cfg.task.name, rl.rollout)
    budget = rl.rollout.max_new_tokens or int(cfg.task.params.get("max_new_tokens", 0)) or 512
    devices = int(devices or cfg.mesh.devices or 8)
    platform = cfg.mesh.platform or "gpu"
    sizes = {"data": cfg.mesh.data, "fsdp": cfg.mesh.fsdp, "tensor": cfg.mesh.tensor}
    if cfg.mesh.name == "single":
        sizes, devices = {"data": 1, "fsdp": 1, "tensor": 1}, 1
    known = 1
    for v in sizes.values():
        known *= v if v != -1 else 1
    sizes = {k: (devices // known if v == -1 else v) for k, v in sizes.items()}
    if sizes["data"] * sizes["fsdp"] * sizes["tensor"] != devices:
        raise cli.UsageError(f"mesh {sizes} does not cover --devices {devices}")
    return dict(cfg=cfg, model_cfg=model_cfg, rl=rl, sizes=sizes, devices=devices, platform=platform,
                device_gib=float(device_gib or cfg.mesh.device_gib or 80),
                mem_fraction=float(frac) if frac is not None else mem_fraction(platform=platform),
                budget=budget, prompt_len=int(prompt_len),
                rerolls=cfg.method.mode != "baseline")  # a prefix re-roll's KV cache is prompt + 2 x budget slots


def _check_agent_sampling(task: str, rollout) -> None:
    """A multi-turn agent task (``make_rollouts``) refuses the rollout keys it cannot honour
    (``prs.tasks.agent_rollouts.check_sampling``): the plan refuses them too, in the same line, rather
    than budget a sampler call the run would never make."""
    from prs.tasks.registry import TASKS

    cls = getattr(TASKS.get(task), "task_cls", None)
    if cls is None or not hasattr(cls, "make_rollouts"):
        return
    from prs.tasks.agent_rollouts import check_sampling

    try:
        check_sampling(rollout)
    except ValueError as e:
        raise SystemExit(f"experiments.plan: {e}") from None


def preset_setup(name: str, *, devices: int | None = None, prompt_len: int = 512) -> dict:
    """``setup`` of ``conf/experiment/<name>.yaml`` (``prs.plan_compiled``'s presets)."""
    return setup([f"+experiment={name}"], devices=devices, prompt_len=prompt_len)


@cli.command("experiments.plan")
def main(argv=None) -> int:
    from prs.plan import plan_run, sampler_cache_slots

    argv = sys.argv[1:] if argv is None else list(argv)
    if "--help" in argv or "-h" in argv:
        print(__doc__.replace("``", "").strip() + "\n")  # the examples and every flag
        print(cli.help_text().replace("python -m experiments.train [-m]", "python -m experiments.plan [--flag V ...]", 1)
              .replace("one GRPO / Prefix Sampling training run (-m: a sweep over comma-separated values)",
                       "the memory plan of that training run's configuration"))
        return 0
    flags, overrides = _flags(argv)
    s = setup(overrides, devices=flags.get("devices"), device_gib=flags.get("device_gib"),
              prompt_len=int(flags.get("prompt_len", 512)), frac=flags.get("mem_fraction"))
    rl, model_cfg, prompt, budget, gib, frac = s["rl"], s["model_cfg"], s["prompt_len"], s["budget"], s["device_gib"], s["mem_fraction"]
    try:
        p = plan_run(model_cfg, rl, prompt_len=prompt, max_new_tokens=budget, device_gib=gib,
                     prefix_rerolls=s["rerolls"], mem_fraction=frac, **s["sizes"])
    except ValueError as e:  # e.g. micro-batches that the batch shards do not divide
        raise cli.UsageError(f"prs.plan: {e}") from None
    rows = rl.tasks_per_step * rl.group_size
    print(f"{s['cfg'].model.preset}: {rows} rollouts x (prompt {prompt} + budget {budget}), update width "
          f"{prompt + 2 * budget}, sampler cache {sampler_cache_slots(prompt, budget, prefix_rerolls=s['rerolls'])} slots"
          f"{' (prefix re-rolls)' if s['rerolls'] else ''}, mesh {s['sizes']} on {s['devices']} {s['platform']} devices "
          f"of {gib:g} GiB (JAX gets {frac:g} of it: {gib * frac:.1f} GiB), remat={model_cfg.remat}, "
          f"attention={model_cfg.attention_impl}, micro_batches={rl.micro_batches}, logits_chunk={rl.logits_chunk}")
    print(p.report())
    if s["cfg"].rollout.engine != "vllm":
        return 0 if p.fits else 1
    v = vllm_plan(s, p, flags)
    print(f"vLLM engine (rollout.engine=vllm): tensor_parallel={v.tensor_parallel} x data_parallel={v.data_parallel}, "
          f"gpu_memory_utilization={v.memory_utilization:g}, sleep mode {'on' if v.sleep_mode else 'off'} "
          f"(planned from prs.plan.plan_vllm; not measured on a {s['platform'].upper()})")
    print(v.report())
    return 0 if v.colocated_fits else 1


def vllm_plan(s: dict, p, flags: dict):
    """``prs.plan.plan_vllm`` for ``setup``'s run next to its JAX plan ``p``; ``--vllm-memory-utilization``
    defaults to ``rollout.gpu_memory_utilization`` where set, else to what is left beside JAX's pool
    (0.95 − the JAX fraction; on TPU, where both share one allocator, 0.95 − the update peak's share),
    ``--vllm-tensor-parallel`` to ``rollout.tensor_parallel_size``, ``--vllm-sleep-mode`` to false."""
    from prs.plan import GIB, plan_vllm

    frac, gib, platform = s["mem_fraction"], s["device_gib"], s["platform"]
    rl = s["rl"]
    if "vllm_memory_utilization" in flags:
        util = float(flags["vllm_memory_utilization"])
    elif rl.rollout.gpu_memory_utilization is not None:  # rollout.gpu_memory_utilization
        util = float(rl.rollout.gpu_memory_utilization)
    elif platform == "tpu":
        util = round(0.95 - p.update_total / (gib * GIB), 2)
    else:
        util = round(0.95 - frac, 2)
    sleep = str(flags.get("vllm_sleep_mode", "false")).lower()
    if sleep not in ("true", "false", "1", "0"):
        raise cli.UsageError(f"--vllm-sleep-mode={sleep!r}; choose from true, false")
    try:
        return plan_vllm(s["model_cfg"], rows=rl.tasks_per_step * rl.group_size, prompt_len=s["prompt_len"],
                         max_new_tokens=s["budget"], devices=s["devices"], device_gib=gib, jax_plan=p,
                         jax_fraction=frac, memory_utilization=util, platform=platform,
                         tensor_parallel=int(flags.get("vllm_tensor_parallel", rl.rollout.tensor_parallel_size)),
                         sleep_mode=sleep in ("true", "1"), prefix_rerolls=s["rerolls"])
    except ValueError as e:
        raise cli.UsageError(f"prs.plan: {e}") from None

if __name__ == "__main__":
    sys.exit(main())
