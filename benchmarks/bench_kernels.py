"""Kernel benchmark: policy-loss + grad throughput and token_logprobs time/memory (a script, not a test).

    .venv/bin/python benchmarks/bench_kernels.py [--quick]

Prints a table. Memory is XLA's compile-time estimate (``compiled.memory_analysis()``: arguments +
outputs + temporaries), not a measured peak. Times are the median of ``--reps`` calls after one
warm-up (compile excluded). V = 152k uses fewer tokens than V = 32k so that the f32 up-cast of the
logits fits comfortably in a 24 GiB device; the rows say how many tokens each used.
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from prs.core.losses import policy_loss, token_logprobs


def _time(fn, *args, reps):
    out = fn(*args)
    jax.block_until_ready(out)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _mem_gib(jitted, *args):
    try:
        ma = jitted.lower(*args).compile().memory_analysis()
        total = ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes
        return total / 2**30
    except Exception:  # noqa: BLE001 - some backends do not report it
        return float("nan")


def bench_loss(r, t, agg, reps):
    key = jax.random.key(0)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    logp = -jax.random.uniform(k1, (r, t), minval=0.01, maxval=3.0)  # [R, T]
    old = logp + 0.1 * jax.random.normal(k2, (r, t))
    ref = logp + 0.2 * jax.random.normal(k3, (r, t))
    adv = jax.random.normal(k4, (r,))  # [R]
    mask = jnp.arange(t)[None, :] < jax.random.randint(k4, (r, 1), 1, t + 1)  # [R, T]

    def f(lp, old, adv, mask, ref):
        return policy_loss(lp, old, adv, mask, agg=agg, ref_logp=ref, kl_coef=0.01, dual_clip=3.0)[0]

    step = jax.jit(jax.value_and_grad(f))
    args = (logp, old, adv, mask, ref)
    sec = _time(step, *args, reps=reps)
    return sec, r * t / sec, _mem_gib(step, *args), step._cache_size()


def bench_logprobs(n_tok, v, dtype, reps, grad):
    r, t = 8, n_tok // 8
    key = jax.random.key(1)
    logits = (4.0 * jax.random.normal(key, (r, t, v), jnp.float32)).astype(dtype)  # [R, T, V]
    tokens = jax.random.randint(key, (r, t), 0, v)  # [R, T]
    if grad:
        fn = jax.jit(jax.grad(lambda z, y: jnp.sum(token_logprobs(z, y))))
    else:
        fn = jax.jit(token_logprobs)
    sec = _time(fn, logits, tokens, reps=reps)
    return sec, n_tok / sec, _mem_gib(fn, logits, tokens)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    dev = jax.devices()[0]
    print(f"backend={jax.default_backend()} device={dev.device_kind} n_devices={jax.device_count()} jax={jax.__version__}")
    r, t = (32, 64) if a.quick else (512, 1024)
    print(f"\npolicy_loss + grad (value_and_grad wrt logp; KL k3 + dual clip), R={r} x T={t}")
    print(f"{'agg':<26}{'ms/step':>10}{'Mtok/s':>10}{'est GiB':>10}{'compiles':>10}")
    for agg in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        sec, tps, mem, nc = bench_loss(r, t, agg, a.reps)
        print(f"{agg:<26}{sec * 1e3:>10.2f}{tps / 1e6:>10.1f}{mem:>10.3f}{nc:>10d}")

    print("\ntoken_logprobs (f32 compute), logits [8, tokens/8, V]")
    print(f"{'V':>8}{'tokens':>8}{'dtype':>10}{'pass':>9}{'ms':>10}{'ktok/s':>10}{'est GiB':>10}")
    sizes = [(32_000, 256 if a.quick else 4096), (152_064, 128 if a.quick else 2048)]
    for v, n_tok in sizes:
        for dtype in (jnp.bfloat16, jnp.float32):
            for grad in (False, True):
                sec, tps, mem = bench_logprobs(n_tok, v, dtype, a.reps, grad)
                name = jnp.dtype(dtype).name
                print(f"{v:>8}{n_tok:>8}{name:>10}{'fwd+bwd' if grad else 'fwd':>9}{sec * 1e3:>10.2f}"
                      f"{tps / 1e3:>10.1f}{mem:>10.3f}")


if __name__ == "__main__":
    main()
