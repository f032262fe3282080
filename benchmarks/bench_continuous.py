"""Continuous batching vs static batching on an RL-like length distribution (issue #20, item 3).

N requests (ragged prompts, lengths uniform in [4, --prompt]) with per-request budgets drawn
geometric with mean ``--mean`` (default T/4), clipped to [1, T]: most rows stop early, a few run
to the budget, as RL answers do. Both paths see the same requests, key and budgets, and return the
same tokens (checked here):
  * static: ``prs.models.sampler.sample`` with ``row_chunk = --slots`` (the same number of rows,
    and of live KV caches, as the continuous slots); each chunk decodes until its longest row stops;
  * continuous: ``prs.models.continuous.sample_continuous`` with ``slots = --slots``.
USEFUL tokens/s = generated tokens of real rows (sum of lengths - prompt lengths; no padding,
no finished rows riding along) / wall seconds of one call. Best of ``--repeats`` after a warm-up
(compile) call, same process, the two interleaved. CPU-s = process CPU seconds per call
(``time.process_time``, the steadier figure on a shared machine). Roofline fraction = model FLOPs
per generated token (``_common.forward_flops_per_token`` at context = mean prompt + mean
generated / 2) x useful tokens/s / this CPU's measured f32 matmul FLOP/s (``_common.matmul_flops``).

  PYTHONPATH=$PWD python benchmarks/bench_continuous.py --size tiny 10m
  PYTHONPATH=$PWD python benchmarks/bench_continuous.py --size tiny --requests 64 --slots 16 --new 64
"""
from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import jax
import numpy as np

from prs.models import continuous as CB
from prs.models import qwen3 as M
from prs.models import sampler as S

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # _common; run with PYTHONPATH=<repo>
import _common as C  # noqa: E402


def requests(cfg, *, n: int, prompt: int, new: int, mean: float, seed: int = 0):
    """Ragged prompts [n, prompt] (lengths uniform in [4, prompt]) and geometric budgets (mean ``mean``,
    clipped to [1, new])."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min(4, prompt), prompt + 1, n).astype(np.int32)
    tokens = rng.integers(1, cfg.vocab_size, (n, prompt)).astype(np.int32)
    tokens = np.where(np.arange(prompt)[None] < lengths[:, None], tokens, 0)
    budget = np.clip(rng.geometric(1.0 / mean, n), 1, new).astype(np.int32)
    return tokens, lengths, budget


def bench(name, *, n, slots, prompt, new, mean, temperature, repeats, peak):
    cfg = M.ModelConfig.preset(name)
    params = M.init_params(cfg, jax.random.key(0))
    tokens, lengths, budget = requests(cfg, n=n, prompt=prompt, new=new, mean=mean)
    scfg = S.SamplerConfig(max_new_tokens=new, temperature=temperature, buckets=None)
    key = jax.random.key(3)
    static_cfg = dataclasses.replace(scfg, row_chunk=slots)
    run_static = lambda: jax.block_until_ready(S.sample(params, tokens, lengths, key, cfg=cfg, scfg=static_cfg,
                                                        budget=budget))
    run_cont = lambda: jax.block_until_ready(CB.sample_continuous(params, tokens, lengths, key, cfg=cfg, scfg=scfg,
                                                                  slots=slots, budget=budget))
    a, b = run_static(), run_cont()  # warm-up (compiles), and the outputs agree
    print(f"  {name}: warm-up done ({C.load()})", flush=True)
    same = bool(np.array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
                and np.array_equal(np.asarray(a.lengths), np.asarray(b.lengths)))
    _, stats = CB.sample_continuous(params, tokens, lengths, key, cfg=cfg, scfg=scfg, slots=slots, budget=budget,
                                    return_stats=True)
    useful = int(np.sum(np.asarray(a.lengths) - np.asarray(a.prompt_lengths)))
    times = {"static": [float("inf")] * 2, "continuous": [float("inf")] * 2}
    for _ in range(repeats):  # interleaved A/B, best of repeats
        for label, fn in (("static", run_static), ("continuous", run_cont)):
            w, c = C.best_of(fn, 1)
            times[label] = [min(times[label][0], w), min(times[label][1], c)]
            print(f"  {name} {label}: {w:.3f}s wall, {c:.2f} CPU-s ({C.load()})", flush=True)
    flops_tok = C.forward_flops_per_token(cfg, float(lengths.mean()) + useful / n / 2)
    (w_s, c_s), (w_c, c_c) = times["static"], times["continuous"]
    static_steps = sum(int(np.max(budget_chunk)) for budget_chunk in
                       np.split(np.asarray(a.lengths - a.prompt_lengths), range(slots, n, slots)))
    row = dict(size=name, N=n, slots=slots, P=f"4..{prompt}", T=new, mean_gen=f"{useful / n:.1f}", temp=temperature,
               static_tok_s=f"{useful / w_s:,.0f}", cont_tok_s=f"{useful / w_c:,.0f}", ratio=f"{w_s / w_c:.2f}x",
               static_cpu_s=f"{c_s:.2f}", cont_cpu_s=f"{c_c:.2f}", ratio_cpu=f"{c_s / c_c:.2f}x",
               static_roofline=f"{flops_tok * useful / w_s / peak:.2%}",
               cont_roofline=f"{flops_tok * useful / w_c / peak:.2%}",
               static_steps=static_steps, cont_steps=stats["steps"], refills=stats["refills"], same_tokens=same)
    print(f"{name}: static {w_s:.3f}s ({c_s:.2f} CPU-s), continuous {w_c:.3f}s ({c_c:.2f} CPU-s); {C.load()}",
          flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", "--configs", nargs="+", default=["tiny", "10m"], choices=C.SIZES)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=256, help="T, the largest budget")
    ap.add_argument("--mean", type=float, default=None, help="mean budget (default T/4)")
    ap.add_argument("--temperature", type=float, nargs="+", default=[1.0])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    peak = C.matmul_flops()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; measured f32 matmul {peak / 1e9:.0f} GFLOP/s; "
          f"{C.load()}", flush=True)
    rows = [bench(name, n=a.requests, slots=a.slots, prompt=a.prompt, new=a.new, mean=a.mean or a.new / 4,
                  temperature=t, repeats=a.repeats, peak=peak) for name in a.size for t in a.temperature]
    print(f"\nUseful tokens/s, static (row_chunk = slots) vs continuous batching; best of {a.repeats}, "
          f"interleaved; {C.load()}")
    print(C.table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
