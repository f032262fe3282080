"""A run's checkpoint as a Hugging Face model directory (``transformers``, vLLM, lm-eval read it).

    python -m experiments.export runs/math_jsonl-baseline-s0 --out exported/           # latest checkpoint
    python -m experiments.export RUN_DIR --step 200 --out DIR --max-shard-size 2GB --dtype bfloat16

Reads the run's ``config.json`` (the configuration it was started with) and the parameters of one
orbax checkpoint in ``RUN_DIR/checkpoints/<step>`` (only the ``params`` subtree is restored, not the
optimiser state), and writes into ``--out`` (created; a non-empty directory is refused):

    config.json                        the model's family (Qwen3 / Qwen2 / Llama, ``prs.models.hf.config_to_hf``)
                                       over the base checkpoint's config.json (token ids, max positions kept)
    model.safetensors                  or, past ``--max-shard-size`` (default 5GB, transformers' units:
    model-0000i-of-0000n.safetensors   GB = 10⁹ bytes, GiB = 2³⁰), shards and
    model.safetensors.index.json       their index, as ``save_pretrained`` writes them
    tokenizer files, generation_config.json, chat_template.jinja
                                       from the run's tokenizer checkpoint (``task.params.tokenizer``, else
                                       ``model.checkpoint``); with ``task.params.chat_template`` set, the
                                       template the run's prompts were rendered with

``--dtype`` (float32, bfloat16, float16) casts the stored weights; default: the base checkpoint's
stored dtype (its config.json ``torch_dtype``), else the run's parameter dtype. A run of a preset
model without a Hugging Face checkpoint (the arith tasks) exports weights and config.json only: its
task vocabulary has no Hugging Face tokenizer. Mistakes end in one ``error: ...`` line, exit status 2.
The directory is written under a temporary name next to ``--out`` and renamed when complete.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
from typing import Any

_DTYPES = ("float32", "bfloat16", "float16")


def checkpoint_steps(run_dir: pathlib.Path) -> list[int]:
    """The steps with a committed orbax checkpoint under ``run_dir/checkpoints`` (ascending)."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and (p / "default").is_dir())


def restore_params(step_dir: pathlib.Path) -> dict[str, Any]:
    """The ``params`` subtree of the train state checkpointed in ``step_dir`` (``<run>/checkpoints/<step>``),
    as host numpy arrays in their stored shapes and dtypes (orbax partial restore: the optimiser state is
    not read). A relative ``step_dir`` is made absolute first: orbax reads no metadata from a relative
    path (``tree`` None)."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    step_dir = pathlib.Path(step_dir).absolute()
    ckptr = ocp.PyTreeCheckpointer()
    meta = ckptr.metadata(step_dir / "default")
    tree = getattr(meta, "item_metadata", meta)
    tree = getattr(tree, "tree", tree)
    if "params" not in tree:
        raise ValueError(f"{step_dir}: the checkpoint holds no 'params' (keys: {sorted(tree)})")
    abstract = jax.tree.map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype), tree["params"])
    restore = jax.tree.map(lambda a: ocp.RestoreArgs(restore_type=np.ndarray), abstract)
    out = ckptr.restore(step_dir / "default", args=ocp.args.PyTreeRestore(
        item={"params": abstract}, restore_args={"params": restore}, partial_restore=True))
    return out["params"]


def model_config(config: dict, params) -> tuple[Any, dict | None]:
    """``(ModelConfig, base config.json or None)`` of a recorded run configuration: the base
    checkpoint's config.json with the run's ``model.overrides`` (as ``experiments.train.build``), or
    the preset with ``vocab_size`` from the restored embedding."""
    import jax.numpy as jnp

    from prs.models import hf
    from prs.models.qwen3 import ModelConfig

    model = config.get("model") or {}
    overrides = dict(model.get("overrides") or {})
    for key in ("dtype", "param_dtype"):
        if key in overrides:
            overrides[key] = getattr(jnp, overrides[key])
    if model.get("checkpoint"):
        base = hf.resolve_checkpoint(model["checkpoint"])
        return hf.load_config(base, **overrides), json.loads((base / "config.json").read_text())
    overrides.setdefault("vocab_size", int(params["embed_tokens"].shape[0]))
    return ModelConfig.preset(model.get("preset", "tiny"), **overrides), None


def export_run(run_dir, out, *, step: int | None = None, max_shard_size: int | str = "5GB",
               dtype: str | None = None, log=print) -> dict:
    """Writes checkpoint ``step`` (default: the latest) of ``run_dir`` as a Hugging Face model
    directory ``out`` (module docstring); returns ``{"step", "out", "files", "dtype"}``. ValueError
    (one line) on a missing run, step or checkpoint, a non-empty ``out``, a bad size or dtype."""
    import jax.numpy as jnp

    from prs.models import hf
    from prs.rl.rundir import recorded_config

    run_dir, out = pathlib.Path(run_dir), pathlib.Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out} exists and is not empty: give a new or empty directory")
    hf.parse_size(max_shard_size)
    if dtype is not None and dtype not in _DTYPES:
        raise ValueError(f"--dtype {dtype!r}: choose one of {', '.join(_DTYPES)}")
    config = recorded_config(run_dir)
    if config is None:
        raise ValueError(f"{run_dir} holds no run (no config.json or summary.json): give a directory "
                         f"experiments.train wrote")
    steps = checkpoint_steps(run_dir)
    if not steps:
        raise ValueError(f"{run_dir / 'checkpoints'} holds no checkpoint (the run had ckpt_every=0?)")
    step = steps[-1] if step is None else int(step)
    if step not in steps:
        raise ValueError(f"--step {step}: {run_dir / 'checkpoints'} holds steps {steps}")
    params = restore_params(run_dir / "checkpoints" / str(step))
    cfg, base_config = model_config(config, params)
    if dtype is None:
        stored = (base_config or {}).get("torch_dtype") or (base_config or {}).get("dtype")
        dtype = stored if stored in _DTYPES else jnp.dtype(cfg.param_dtype).name
    extra = {}
    task = (config.get("task") or {}).get("params") or {}
    tokenizer = task.get("tokenizer") or (config.get("model") or {}).get("checkpoint")
    if tokenizer:
        extra = hf.hf_extra_files(tokenizer, chat_template=task.get("chat_template"))
    else:
        log(f"[export] {run_dir.name}: a preset model without a Hugging Face checkpoint: no tokenizer files "
            f"(the task's vocabulary has none)")
    tmp = out.parent / f".{out.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        files = hf.save_checkpoint(tmp, params, cfg, extra_files=extra, max_shard_size=max_shard_size,
                                   dtype=getattr(jnp, dtype), base_config=base_config)
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"[export] step {step} of {run_dir} -> {out} ({len(files)} weight file(s), {dtype}, "
        f"{', '.join(sorted(extra)) or 'no tokenizer'})")
    return {"step": step, "out": str(out), "files": files, "dtype": dtype}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="a run directory experiments.train wrote (with checkpoints/)")
    ap.add_argument("--out", required=True, help="the Hugging Face model directory to write (new or empty)")
    ap.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    ap.add_argument("--max-shard-size", default="5GB", help="shard size, e.g. 2GB, 500MB, 1GiB (default 5GB)")
    ap.add_argument("--dtype", default=None, choices=_DTYPES, help="stored dtype (default: the base checkpoint's)")
    args = ap.parse_args(argv)
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)  # orbax: "Metadata file does not exist" per restore
    try:
        export_run(args.run_dir, args.out, step=args.step, max_shard_size=args.max_shard_size, dtype=args.dtype)
    except ValueError as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
