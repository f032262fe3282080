"""Which library XLA:CPU hands the update's matmuls to, and what each costs, against torch (MKL):
the MLP dots of the 10m update (R=32, T=256: [8160,256]@[256,1024], [8160,1024]@[1024,256]), the
SwiGLU pair with its elementwise tail, and the batched q·kᵀ score dot [32,8,255,32]·[32,8,255,32]ᵀ,
each compiled under several XLA:CPU option sets and timed interleaved (best of ``reps``, wall and
process CPU ms). Prints the library fusions (``__ynn_fusion`` ...) each option set leaves in the
compiled x@w, so an option that changes nothing shows as such.

    PYTHONPATH=$PWD python benchmarks/ab_dots.py 9

In jaxlib 0.10.2 the dots go to YNNPACK fusions (``xla_cpu_experimental_ynn_fusion_type``, default
dot + eltwise + reduce) whatever ``xla_cpu_use_onednn`` / ``xla_cpu_use_xnnpack`` say; with the YNN
fusion list emptied (``LIBRARY_FUSION_TYPE_INVALID``, which logs "Unsupported fusion type: 0" once
per compile) they are plain ``dot`` thunks (Eigen). Numbers: benchmarks/README.md."""
import os
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

OFF = "LIBRARY_FUSION_TYPE_INVALID"
VARIANTS = {
    "default": {},
    "ynn_indiv_dot": {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"},
    "eigen": {"xla_cpu_experimental_ynn_fusion_type": OFF},
    "onednn": {"xla_cpu_experimental_ynn_fusion_type": OFF, "xla_cpu_use_onednn": True},
    "xnn_dot": {"xla_cpu_experimental_ynn_fusion_type": OFF, "xla_cpu_experimental_xnn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"},
    "xnn_greedy": {"xla_cpu_experimental_ynn_fusion_type": OFF,
                   "xla_cpu_experimental_xnn_graph_fusion_mode": "XNN_GRAPH_FUSION_MODE_GREEDY"},
}


def main(reps: int):
    N = 8160
    ks = jax.random.split(jax.random.key(0), 6)
    x = jax.random.normal(ks[0], (N, 256)); w = jax.random.normal(ks[1], (256, 1024)) / 16  # noqa: E702
    h = jax.random.normal(ks[2], (N, 1024)); w2 = jax.random.normal(ks[3], (1024, 256)) / 32  # noqa: E702
    q = jax.random.normal(ks[4], (32, 8, 255, 32)); k = jax.random.normal(ks[5], (32, 8, 255, 32))  # noqa: E702
    fns = {"x@w": (lambda x, w: x @ w, (x, w)), "h@w2": (lambda h, w2: h @ w2, (h, w2)),
           "swiglu": (lambda x, w: jax.nn.silu(x @ w) * (x @ w * 0.5), (x, w)),
           "qk": (lambda q, k: jnp.einsum("bhtd,bhsd->bhts", q, k), (q, k))}
    comp = {}
    for vn, o in VARIANTS.items():
        for fn, (f, args) in fns.items():
            c = jax.jit(f).lower(*args).compile(o or None)
            comp[(vn, fn)] = (c, args)
            if fn == "x@w":
                kinds = sorted(set(re.findall(r'"kind":"(__\w+)"', c.as_text())))
                print(f"{vn:14s} library fusions in x@w: {kinds or 'none (plain dot thunk)'}")
    tx, tw, th, tw2, tq, tk = (torch.from_numpy(np.array(a)) for a in (x, w, h, w2, q, k))
    tfn = {"x@w": lambda: tx @ tw, "h@w2": lambda: th @ tw2,
           "swiglu": lambda: torch.nn.functional.silu(tx @ tw) * (tx @ tw * 0.5), "qk": lambda: tq @ tk.transpose(-1, -2)}
    res = {}
    for _ in range(reps):
        for fn in fns:
            for vn in VARIANTS:
                c, args = comp[(vn, fn)]
                w0, c0 = time.perf_counter(), time.process_time()
                jax.block_until_ready(c(*args))
                res.setdefault((vn, fn), []).append((time.perf_counter() - w0, time.process_time() - c0))
            w0, c0 = time.perf_counter(), time.process_time()
            tfn[fn]()
            res.setdefault(("torch", fn), []).append((time.perf_counter() - w0, time.process_time() - c0))
    print("load avg " + " ".join(f"{v:.2f}" for v in os.getloadavg()) + f" on {os.cpu_count()} CPUs; best of {reps}")
    print(f"{'variant':14s} " + " ".join(f"{fn:>18s}" for fn in fns) + "   (ms: best wall / best CPU)")
    for vn in list(VARIANTS) + ["torch"]:
        print(f"{vn:14s} " + " ".join(
            f"{1e3 * min(a for a, _ in res[(vn, fn)]):8.1f}/{1e3 * min(b for _, b in res[(vn, fn)]):8.1f}" for fn in fns))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
