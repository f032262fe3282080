"""Sampler throughput: KV-cached ``prs.sample`` against the same loop without a cache.

Generated tokens/s (rows × new tokens / wall time of a compiled call, best of ``--repeats``),
with compile time measured separately (``jit(...).lower(...).compile()``). Every row generates
exactly ``max_new_tokens`` tokens (no EOS), so the two paths do the same amount of sampling work.
The no-cache baseline re-runs ``forward`` over the whole [R, P + T] buffer at every step inside the
same ``lax.while_loop`` (cost O(T · (P+T)) token-forwards instead of O(P + T)).

  python benchmarks/bench_sampler.py                      # tiny (T=64) and 10m (T=256)
  python benchmarks/bench_sampler.py --configs tiny --rows 64 --new 64
"""
from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from prs import model as M
from prs import sampler as S


@functools.partial(jax.jit, static_argnames=("cfg", "scfg"))
def sample_no_cache(params, tokens, lengths, key, *, cfg, scfg):
    """Same sampling loop as ``prs.sampler`` but each step re-runs the full forward (no KV cache)."""
    R, P = tokens.shape
    L = P + scfg.max_new_tokens
    buf = jnp.pad(tokens.astype(jnp.int32), ((0, 0), (0, L - P)))
    idx = jnp.arange(L)[None, :]

    def body(carry):
        t, buf, cur = carry
        logits = M.forward(params, buf, cfg=cfg, valid=idx < cur[:, None])  # [R, L, V]
        last = jnp.take_along_axis(logits, (cur - 1)[:, None, None], axis=1)[:, 0]
        tok, _, _ = S.choose_tokens(last, jax.random.fold_in(key, t), scfg)
        buf = jnp.where(idx == cur[:, None], tok[:, None], buf)
        return t + 1, buf, cur + 1

    _, buf, cur = jax.lax.while_loop(lambda c: c[0] < scfg.max_new_tokens, body,
                                     (jnp.zeros((), jnp.int32), buf, lengths.astype(jnp.int32)))
    return buf, cur


def _time(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def bench(name, *, rows, prompt, new, repeats, no_cache_new):
    cfg = M.ModelConfig.preset(name)
    params = M.init_params(cfg, jax.random.key(0))
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (rows, prompt), 0, cfg.vocab_size), np.int32)
    lengths = np.full((rows,), prompt, np.int32)
    key = jax.random.key(2)
    out = {"config": name, "params": M.param_count(params), "rows": rows, "prompt": prompt}
    for label, fn, t_new in (("cached", S._sample_jit, new), ("no_cache", sample_no_cache, no_cache_new)):
        if t_new <= 0:
            continue
        scfg = S.SamplerConfig(max_new_tokens=t_new, temperature=1.0, buckets=None)
        args = (params, jnp.asarray(tokens), jnp.asarray(lengths), key)
        kwargs = dict(cfg=cfg, scfg=scfg) | ({"mesh": None} if fn is S._sample_jit else {})
        t0 = time.perf_counter()
        compiled = fn.lower(*args, **kwargs).compile()
        compile_s = time.perf_counter() - t0
        run_s = _time(lambda: compiled(*args), repeats)
        out[label] = dict(new_tokens=t_new, compile_s=round(compile_s, 2), run_s=round(run_s, 3),
                          tokens_per_s=round(rows * t_new / run_s, 1))
        print(f"{name:>5} {label:>8}: R={rows} P={prompt} T={t_new} params={out['params']:,} "
              f"compile {compile_s:.2f}s run {run_s:.3f}s -> {rows * t_new / run_s:,.0f} tok/s", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=["tiny", "10m"])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, nargs="+", default=None,
                    help="new tokens per config (default: 64 for tiny, 256 otherwise)")
    ap.add_argument("--no-cache-new", type=int, nargs="+", default=None,
                    help="new tokens for the no-cache baseline per config (default: same as --new "
                         "for tiny, 64 otherwise: the full re-forward is quadratic; 0 skips)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({len(jax.devices())} devices)")
    for i, name in enumerate(a.configs):
        new = a.new[i] if a.new else (64 if name == "tiny" else 256)
        ncn = a.no_cache_new[i] if a.no_cache_new else (new if name == "tiny" else 64)
        bench(name, rows=a.rows, prompt=a.prompt, new=new, repeats=a.repeats, no_cache_new=ncn)


if __name__ == "__main__":
    main()
