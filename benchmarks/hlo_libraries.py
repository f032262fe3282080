"""Counts the library fusions (YNNPACK / XNNPACK / oneDNN) and top-level plain dots in the compiled GRPO
update (tiny, R=8, T=64) under several XLA:CPU option sets (benchmarks/README.md, #20 options section).

    PYTHONPATH=$PWD python benchmarks/hlo_libraries.py
"""
import functools, re, sys, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax, jax.numpy as jnp, optax
import bench_update as B
from prs.models import qwen3 as M
from prs.rl.trainer import Batch, RLConfig, update_step
cfg = M.ModelConfig.preset("tiny"); params = M.init_params(cfg, jax.random.key(0)); rl = RLConfig()
b = B.make_batch(cfg, params, 8, 64)
tx = optax.chain(optax.clip_by_global_norm(rl.optim.grad_clip), optax.adamw(rl.optim.lr, b1=rl.optim.b1, b2=rl.optim.b2, weight_decay=rl.optim.weight_decay))
batch = Batch(**{k: jnp.asarray(v) for k, v in b.items()}); opt = tx.init(params)
OFF = 'LIBRARY_FUSION_TYPE_INVALID'
for name, o in [("default", {}), ("use_onednn", {'xla_cpu_use_onednn': True}), ("use_xnnpack=0", {'xla_cpu_use_xnnpack': False}),
                ("ynn off", {'xla_cpu_experimental_ynn_fusion_type': OFF}), ("ynn off+onednn", {'xla_cpu_experimental_ynn_fusion_type': OFF, 'xla_cpu_use_onednn': True})]:
    c = jax.jit(functools.partial(update_step, cfg=cfg, rl=rl, tx=tx)).lower(params, opt, batch).compile(o or None)
    t = c.as_text()
    entry = t[t.index("ENTRY"):]
    nd = len(re.findall(r' dot\(', entry)); lo = float(c(params, opt, batch)[2]['loss'])
    print(f"{name:16s} ynn_fusions {len(re.findall(r'__ynn_fusion', t)):3d}  xnn {len(re.findall(r'__xnn_fusion', t)):3d} onednn {len(re.findall(r'onednn', t, re.I)):3d}  top-level dots {nd:3d}  loss {lo:.8f}")
