"""The training attention alone (forward + backward of one layer's causal self-attention), interleaved:
``reference`` (the default), ``blockwise_r{rows}_q{q}_k{k}`` tile variants (``prs.models.blockwise``)
``causal_blocks=B`` (the reference impl in B query blocks) and torch's ``scaled_dot_product_attention`` (``torch_causal``: is_causal, its flash path;
``torch_mask``: the bool padding mask, as HF passes it for padded batches).

    PYTHONPATH=$PWD python benchmarks/ab_attention.py 10m 32 256 5 reference blockwise_r4_q4_k4 torch_causal

Prints best wall / CPU ms per call (``time.process_time``: all threads) and the max relative
difference of the output and gradients from ``reference``. Right padding: row r keeps
T - (r mod 4)·T/8 tokens."""
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax, jax.numpy as jnp, numpy as np
import _common as C
from prs.models import qwen3 as M, blockwise as BW

size, R, T, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = sys.argv[5:]
cfg = M.ModelConfig.preset(size)
K, Kv, H = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
ks = jax.random.split(jax.random.PRNGKey(0), 4)
q = jax.random.normal(ks[0], (R, T, K, H)); k = jax.random.normal(ks[1], (R, T, Kv, H))
v = jax.random.normal(ks[2], (R, T, Kv, H)); w = jax.random.normal(ks[3], (R, T, K * H))
lengths = T - (np.arange(R) % 4) * (T // 8)
valid = jnp.arange(T)[None] < jnp.asarray(lengths)[:, None]
mask = (jnp.arange(T)[:, None] >= jnp.arange(T)[None])[None] & valid[:, None, :]

fns, ref = {}, None
for n in names:
    if n.startswith("torch"):
        import torch
        tq, tk, tv = (torch.from_numpy(np.asarray(x)).transpose(1, 2).contiguous().requires_grad_() for x in (q, k, v))
        tw = torch.from_numpy(np.asarray(w))
        tm = torch.from_numpy(np.asarray(mask))[:, None]

        def step(tq=tq, tk=tk, tv=tv, causal=n == "torch_causal"):
            for t in (tq, tk, tv):
                t.grad = None
            o = torch.nn.functional.scaled_dot_product_attention(
                tq, tk, tv, attn_mask=None if causal else tm, is_causal=causal, enable_gqa=True)
            (o.transpose(1, 2).reshape(R, T, K * H) * tw).sum().backward()
            return o
        step()
        fns[n] = step
        continue
    if BW.parse_variant(n) and n not in M._ATTENTION_IMPLS:
        M.register_blockwise(n, **BW.parse_variant(n))
    c = (M.ModelConfig.preset(size, causal_blocks=int(n.split("=")[1])) if n.startswith("causal_blocks=")
         else M.ModelConfig.preset(size, attention_impl=n))
    f = jax.jit(jax.value_and_grad(lambda q, k, v, c=c: jnp.sum(M._attention_causal_blocks(q, k, v, mask, c) * w),
                                   argnums=(0, 1, 2)))
    t0 = time.perf_counter()
    out = jax.block_until_ready(f(q, k, v))
    if ref is None:
        ref = out
    err = max(float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-30))
              for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref)))
    print(f"{n}: compiled {time.perf_counter() - t0:.1f}s, max rel diff vs {names[0]} {err:.2e}", flush=True)
    fns[n] = lambda f=f: jax.block_until_ready(f(q, k, v))
res = {n: [] for n in fns}
for _ in range(reps):
    for n, f in fns.items():
        w0, c0 = time.perf_counter(), time.process_time()
        f()
        res[n].append((time.perf_counter() - w0, time.process_time() - c0))
print(f"{size} one layer's attention fwd+bwd, R={R} T={T} K={K} Kv={Kv} H={H}, best of {reps}; {C.load()}")
for n, r in res.items():
    print(f"  {n:24s} wall {1e3 * min(x[0] for x in r):8.1f} ms  cpu {1e3 * min(x[1] for x in r):8.1f} ms")
