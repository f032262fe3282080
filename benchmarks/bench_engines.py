"""Rollout engines side by side (issue #30): the jax engine (``prs.rollout.JaxEngine``, the static
jit sampler) and the vLLM engine (``prs.rollout.vllm_engine.VLLMEngine``, vLLM's offline LLM with
prefix caching), on the same weights and requests.

Three workloads, B prompts x N rollouts each (R = B·N rows), sampling the raw policy (temperature 1),
no stop id, so every row generates exactly its budget and both engines generate the same number
of tokens:
  * ``fresh``: R rows of prompt only (lengths drawn in [P/2, P]), T new tokens each;
  * ``reroll``: Prefix Sampling's re-rolls: each group's N rows share its prompt plus a replayed
    prefix of C tokens (the source's first C tokens), budget T - C (the shared-budget rule);
  * ``agent``: a second agent turn: after a first turn of T/2 tokens (untimed), O = 8 observation
    tokens are appended to every row and ``append_and_resume`` generates T/2 more (timed; the jax
    engine resumes from the KV cache it kept from the first turn, as the agent rollouts do, vLLM
    finds its earlier turn in the prefix cache).
tokens/s = generated tokens / wall seconds of one ``generate`` call, the best of ``--repeats``
after one warm-up call (jax: compile; vLLM: its first-call warm-up). ``sync`` = seconds of
``update_params`` with new weights (the jax engine keeps a reference: ~0; vLLM converts the prs tree
to HF tensors and reloads them in place, then drops its prefix cache), best of ``--repeats``.
Start-up (vLLM: engine construction; jax: the first call, i.e. compile) is reported once.

Needs vLLM (run with the ``.ci/vllm`` venv's python); ``--engines jax`` runs the jax half alone.

  VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 \\
    /work/vllm-venv/bin/python benchmarks/bench_engines.py --size arith_tiny
"""
from __future__ import annotations

import argparse
import os
import time

for _k, _v in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1"}.items():
    os.environ.setdefault(_k, _v)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from prs.models import qwen3 as M  # noqa: E402
from prs.models import sampler as S  # noqa: E402
from prs.rollout import make_engine  # noqa: E402

SIZES = {  # vLLM's CPU attention needs head_dim >= 32 (so not the ``tiny`` preset's 8)
    "arith_tiny": dict(vocab_size=128, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=256,
                       rope_theta=10_000.0),
    "small": dict(M.ModelConfig.preset("small").__dict__),
    "10m": dict(M.ModelConfig.preset("10m").__dict__),
}
OBS = 8  # observation tokens appended before an agent's second turn


def workload(kind: str, cfg, *, b: int, n: int, prompt: int, new: int, prefix: int, seed: int = 0):
    """-> (prompts [R, P], prompt_lengths [R], prefixes [R, C] or None, prefix_lengths, budget [R])."""
    rng = np.random.default_rng(seed)
    plen = np.repeat(rng.integers(prompt // 2, prompt + 1, b), n).astype(np.int32)
    prompts = np.repeat(rng.integers(1, cfg.vocab_size, (b, prompt)), n, axis=0).astype(np.int32)
    if kind == "fresh":
        return prompts, plen, None, None, np.full(b * n, new, np.int32)
    pre = np.repeat(rng.integers(1, cfg.vocab_size, (b, prefix)), n, axis=0).astype(np.int32)
    return prompts, plen, pre, np.full(b * n, prefix, np.int32), np.full(b * n, new - prefix, np.int32)


def timed(fn, repeats: int):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        jax.block_until_ready(out)
        best = min(best, time.perf_counter() - t0)
    return best, out


def agent_turn(eng, cfg, a) -> float:
    """tokens/s of ``append_and_resume``: a second turn of T/2 after OBS observation tokens."""
    half = S.SamplerConfig(max_new_tokens=a.new // 2, temperature=1.0, pad_id=0, buckets=(a.prompt, a.prompt + a.new))
    prompts, plen, _, _, _ = workload("fresh", cfg, b=a.groups, n=a.group_size, prompt=a.prompt, new=a.new,
                                      prefix=a.prefix)
    first, state = eng.generate(prompts, plen, key=jax.random.key(1), scfg=half, keep_state=True)
    obs = np.random.default_rng(5).integers(1, cfg.vocab_size, (len(plen), OBS)).astype(np.int32)
    olen = np.full(len(plen), OBS, np.int32)
    turn = lambda: eng.append_and_resume(first, obs, olen, key=jax.random.key(2), scfg=half,  # noqa: E731
                                         state=state)
    jax.block_until_ready(turn())
    s, ro = timed(turn, a.repeats)
    gen = int(np.asarray(ro.policy_mask).sum()) - int(np.asarray(first.policy_mask).sum())
    assert gen == len(plen) * (a.new // 2), (gen, len(plen) * (a.new // 2))
    return gen / s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", nargs="+", default=["arith_tiny"], choices=sorted(SIZES))
    ap.add_argument("--engines", nargs="+", default=["jax", "vllm"], choices=["jax", "vllm"])
    ap.add_argument("--groups", type=int, default=16, help="B")
    ap.add_argument("--group-size", type=int, default=8, help="N")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=64, help="T")
    ap.add_argument("--prefix", type=int, default=32, help="C, replayed prefix of a re-roll")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    print(f"# jax {jax.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; B={a.groups} N={a.group_size} "
          f"P<={a.prompt} T={a.new} C={a.prefix}")
    print("| size | engine | start-up s | fresh tok/s | re-roll tok/s | agent turn tok/s | sync s |")
    print("|---|---|---|---|---|---|---|")
    for size in a.size:
        cfg = M.ModelConfig(**{**SIZES[size], "tie_embeddings": True})
        p0, p1 = (M.init_params(cfg, jax.random.key(s), std=0.05) for s in (0, 1))
        scfg = S.SamplerConfig(max_new_tokens=a.new, temperature=1.0, pad_id=0, buckets=(a.prompt, a.prompt + a.new))
        for name in a.engines:
            t0 = time.perf_counter()
            opts = dict(max_model_len=a.prompt + 2 * a.new + OBS) if name == "vllm" else {}
            eng = make_engine(name, cfg=cfg, params=p0, **opts)
            start = time.perf_counter() - t0
            row = {}
            for kind in ("fresh", "reroll"):
                prompts, plen, pre, clen, budget = workload(kind, cfg, b=a.groups, n=a.group_size, prompt=a.prompt,
                                                            new=a.new, prefix=a.prefix)
                call = lambda k=jax.random.key(0): eng.generate(prompts, plen, prefixes=pre, prefix_lengths=clen,  # noqa: E731
                                                                key=k, scfg=scfg, budget=budget)
                t0 = time.perf_counter()
                jax.block_until_ready(call())
                if kind == "fresh":
                    start += time.perf_counter() - t0 if name == "jax" else 0.0
                    warm = time.perf_counter() - t0
                s, ro = timed(call, a.repeats)
                gen = int(np.asarray(ro.policy_mask).sum())
                assert gen == int(budget.sum()), (gen, int(budget.sum()))
                row[kind] = gen / s
            try:  # a failure here costs this cell, not the run (vLLM's start-up is a minute)
                row["agent"] = f"{agent_turn(eng, cfg, a):.0f}"
            except Exception as e:  # noqa: BLE001
                row["agent"] = f"error: {type(e).__name__}: {str(e)[:120]}"
            syncs = []
            for i in range(a.repeats):
                t0 = time.perf_counter()
                eng.update_params(p1 if i % 2 == 0 else p0)
                syncs.append(time.perf_counter() - t0)
            print(f"| {size} | {name} | {start:.1f} (first call {warm:.1f}) | {row['fresh']:.0f} | {row['reroll']:.0f} | "
                  f"{row['agent']} | {min(syncs):.4f} |", flush=True)
            eng.close()


if __name__ == "__main__":
    main()
