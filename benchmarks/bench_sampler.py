"""Sampler throughput: KV-cached ``prs.sample`` against the same loop without a cache.

Generated tokens/s (rows × new tokens / wall time of a compiled call, best of ``--repeats``),
with compile time measured separately (``jit(...).lower(...).compile()``). Every row generates
exactly ``max_new_tokens`` tokens (no EOS), so the two paths do the same amount of sampling work.
The no-cache baseline re-runs ``forward`` over the whole [R, P + T] buffer at every step inside the
same ``lax.while_loop`` (cost O(T · (P+T)) token-forwards instead of O(P + T)).

  python benchmarks/bench_sampler.py                      # tiny (T=64) and 10m (T=256)
  python benchmarks/bench_sampler.py --configs tiny --rows 64 --new 64
  python benchmarks/bench_sampler.py --hf     # also HF transformers Qwen3 (needs torch+transformers,
                                              # not project dependencies): logits check + generate speed
  python benchmarks/bench_sampler.py --size 10m --new 64 --no-cache-new 0 --hf --before main --row-parts 2
                                              # + the sampler of git revision main, interleaved

A per-op profile of one decode step is ``profile_sampler.py``; interleaved A/B of sampler variants
``ab_sampler.py``; the 2026-12-01 decode profile and what was tried are in benchmarks/README.md.

Where a 10m decode step goes (#20 item 2; R=64, ragged P 4..16, T=64, greedy; jax.profiler
trace of the compiled ``sample_jit`` joined to its optimized HLO, op time summed per HLO
fusion, taken at load avg 8-18 on the 2 shared cores, so the shares are rough: a thunk's time
includes its preemption). Before (main c8d6b78): gate/up matmuls [64,256]x[256,1024] 22%; the
q·k scores 22% (a broadcast-multiply-reduce over the MINOR head axis of the [R, S, Kv, H] cache,
single-threaded YNN reduce fusion that also re-evaluated RoPE(q) for each of the S slots);
p·v 14%; q/o/down [64,256] matmuls 14%; k/v 2%; lm head [64, 2048] 2%; softmax max/sum 4%;
cache writes (in-place one-slot scatters) 0.8%; no whole-cache copies inside the loop; the
while-loop/thunk overhead does not show as ops. So attention over all S = P + T slots was ~40%
of op time though it is ~4% of the step's FLOPs. Isolated decode attention (one layer, R=64,
S=80, Kv=4, G=2, H=32, loop-carried cache, CPU ms per layer-step): reduce over minor H on
[R, S, Kv, H] 0.71; einsum (batched matmul) on [R, S, Kv, H] 0.86 (copies); einsum on
[R, Kv, S, H] 0.54; keys [R, Kv, H, S] + values [R, Kv, S, H], both reductions over a non-minor
axis (vectorised along the minor one) 0.40: that is what the decode cache now uses, with the
q/k/v and gate/up weights joined once per call (one [64,256]x[256,512] and one
[64,256]x[256,2048] matmul per layer-step instead of five). Disabling YNN reduce fusions
(``xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_DOT``) made the reduce forms 5x
slower. After: matmuls are ~45% of op time (gate_up + lm head 21%, o/down 13%, qkv 5%),
attention (scores, max, p·v) still ~35%, of which the softmax max over S alone ~14%.
A/B in one process, interleaved, best of 3 (10m, R=64, P 4..16, T=64; load avg 8-17, so CPU
seconds; two runs): greedy 1.84 -> 1.60-1.64 CPU-s (2,217 -> 2,566 tok per CPU-s, -11..-14%),
temperature 1 1.97-2.06 -> 1.83 CPU-s (-7..-11%); the tokens are identical to main's, the
log-probs within 1.4e-6. ``attend_buckets`` was not re-measured with the new layout.

Why prs used ~1.45 of 2 cores: the per-step matmuls are [64, 256] x [256, n], 8-33 MFLOP each
(~0.1 ms at this CPU's rate); XLA:CPU splits them (and loop fusions, ``outer_dimension_
partitions``) over its 2 threads, but the attention reductions and the sampling ops run on one
thread, and each of the ~150 thunks of a step is a synchronisation point. The 2.5x goal needs
~9,200 tok/s = 6.9 ms per step for 64 rows, i.e. ~190 GFLOP/s of [64, d] matmuls (57% of
the 322-375 GFLOP/s peak of a 1024^3 matmul) with everything else free: not reachable with
XLA:CPU's per-op execution at this shape; see the closing note of #20 for the measured ratio.
"""
from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from prs.models import qwen3 as M
from prs.models import sampler as S

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # _common; run with PYTHONPATH=<repo>
import _common as C  # noqa: E402


@functools.partial(jax.jit, static_argnames=("cfg", "scfg"))
def sample_no_cache(params, tokens, lengths, key, *, cfg, scfg):
    """Same sampling loop as ``prs.models.sampler`` but each step re-runs the full forward (no KV cache)."""
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


_time = C.timed


def bench(name, *, rows, prompt, new, repeats, no_cache_new):
    cfg = M.ModelConfig.preset(name)
    params = M.init_params(cfg, jax.random.key(0))
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (rows, prompt), 0, cfg.vocab_size), np.int32)
    lengths = np.full((rows,), prompt, np.int32)
    key = jax.random.key(2)
    out = {"config": name, "params": M.param_count(params), "rows": rows, "prompt": prompt}
    for label, fn, t_new in (("cached", S.sample_jit, new), ("no_cache", sample_no_cache, no_cache_new)):
        if t_new <= 0:
            continue
        scfg = S.SamplerConfig(max_new_tokens=t_new, temperature=1.0, buckets=None)
        args = (params, jnp.asarray(tokens), jnp.asarray(lengths), key)
        if fn is S.sample_jit:  # the per-row budget (all rows get T)
            args = args + (jnp.full((rows,), t_new, jnp.int32),)
        kwargs = dict(cfg=cfg, scfg=scfg) | ({"mesh": None} if fn is S.sample_jit else {})
        t0 = time.perf_counter()
        compiled = fn.lower(*args, **kwargs).compile()
        compile_s = time.perf_counter() - t0
        run_s = _time(lambda: compiled(*args), repeats)
        out[label] = dict(new_tokens=t_new, compile_s=round(compile_s, 2), run_s=round(run_s, 3),
                          tokens_per_s=round(rows * t_new / run_s, 1))
        print(f"{name:>5} {label:>8}: R={rows} P={prompt} T={t_new} params={out['params']:,} "
              f"compile {compile_s:.2f}s run {run_s:.3f}s -> {rows * t_new / run_s:,.0f} tok/s", flush=True)
    return out


def hf_compare(name, *, rows, prompt, new, repeats):
    """Same random weights in HF ``Qwen3ForCausalLM``: max |logit diff| vs ``prs.forward``, greedy
    token agreement, and ``generate`` (KV cache, sampling, exactly ``new`` tokens) tokens/s."""
    import torch
    import transformers

    from prs.models import hf as hf_io

    cfg = M.ModelConfig.preset(name)
    torch.manual_seed(0)
    hf = C.hf_model(cfg)
    with torch.no_grad():  # HF init gives norms = 1; randomise them so the norms are checked too
        for n, p in hf.named_parameters():
            if n.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
            else:  # std 0.02 -> 0.1: logits of order 10, far from uniform, so the check has teeth
                p.mul_(5.0)
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    params = hf_io.load_hf_state_dict(sd, cfg)
    tokens = np.array(jax.random.randint(jax.random.key(1), (rows, prompt), 0, cfg.vocab_size), np.int32)
    with torch.no_grad():
        ref = hf(torch.from_numpy(tokens).long()).logits.numpy()
    ours = np.asarray(jax.jit(M.forward, static_argnames="cfg")(params, jnp.asarray(tokens), cfg=cfg))
    print(f"{name:>5} HF check: max |logits_prs - logits_hf| = {np.abs(ours - ref).max():.2e} "
          f"(logit scale {np.abs(ref).max():.2f})", flush=True)
    scfg = S.SamplerConfig(max_new_tokens=new, temperature=0.0, buckets=None)
    mine = np.asarray(S.sample(params, tokens, np.full(rows, prompt), jax.random.key(0), cfg=cfg, scfg=scfg).tokens)
    with torch.no_grad():
        theirs = hf.generate(torch.from_numpy(tokens).long(), attention_mask=torch.ones(rows, prompt, dtype=torch.long),
                             do_sample=False, max_new_tokens=new, min_new_tokens=new, pad_token_id=0).numpy()
    agree = np.mean(np.all(mine == theirs, axis=1))
    print(f"{name:>5} HF check: greedy {new}-token continuations identical in {agree:.0%} of {rows} rows", flush=True)

    def gen():
        with torch.no_grad():
            return hf.generate(torch.from_numpy(tokens).long(), attention_mask=torch.ones(rows, prompt, dtype=torch.long),
                               do_sample=True, top_k=0, temperature=1.0, max_new_tokens=new, min_new_tokens=new,
                               pad_token_id=0)
    gen()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        gen()
        best = min(best, time.perf_counter() - t0)
    print(f"{name:>5} HF generate: R={rows} P={prompt} T={new} torch {torch.__version__} threads "
          f"{torch.get_num_threads()}: {best:.3f}s -> {rows * new / best:,.0f} tok/s", flush=True)


def side_by_side(name, *, rows, prompt, new, repeats, peak, before_rev=None, row_parts=1):
    """prs ``sample`` vs HF ``generate`` on ragged prompts (lengths uniform in [4, prompt]; prs
    right-pads, HF left-pads with an attention mask), exactly ``new`` tokens per row (no EOS),
    greedy and temperature 1. Best of ``repeats`` after a warm-up, wall and process CPU time.
    Roofline fraction = forward FLOPs per generated token (context = prompt + new / 2) × tokens/s
    / the measured f32 matmul FLOP/s."""
    import torch

    before = None
    if before_rev:
        import ab_sampler
        before = ab_sampler.load_sampler(before_rev)
    cfg = M.ModelConfig.preset(name)
    params = M.init_params(cfg, jax.random.key(0))
    hf = C.hf_model(cfg, params)
    tokens, lengths = C.ragged_prompts(cfg.vocab_size, rows, prompt)
    left = np.zeros_like(tokens)
    att = np.zeros_like(tokens)
    for r in range(rows):  # host-side setup of the HF input only
        left[r, prompt - lengths[r]:] = tokens[r, :lengths[r]]
        att[r, prompt - lengths[r]:] = 1
    flops_tok = C.forward_flops_per_token(cfg, prompt + new // 2)
    out = []
    for temp in (0.0, 1.0):
        scfg = S.SamplerConfig(max_new_tokens=new, temperature=temp, buckets=None, row_parts=row_parts)
        run = lambda: jax.block_until_ready(S.sample(params, tokens, lengths, jax.random.key(3), cfg=cfg, scfg=scfg).tokens)
        run()
        if before is not None:  # the sampler of a git revision, interleaved with this tree's
            bcfg = before.SamplerConfig(max_new_tokens=new, temperature=temp, buckets=None)
            run_b = lambda: jax.block_until_ready(before.sample(params, tokens, lengths, jax.random.key(3), cfg=cfg,
                                                                 scfg=bcfg).tokens)
            run_b()
            w_b = c_b = float("inf")
            w_p = c_p = float("inf")
            for _ in range(repeats):
                w, c = C.best_of(run_b, 1)
                w_b, c_b = min(w_b, w), min(c_b, c)
                w, c = C.best_of(run, 1)
                w_p, c_p = min(w_p, w), min(c_p, c)
        else:
            w_p, c_p = C.best_of(run, repeats)

        def gen():
            with torch.no_grad():
                kw = dict(do_sample=True, top_k=0, temperature=1.0) if temp else dict(do_sample=False)
                return hf.generate(torch.from_numpy(left).long(), attention_mask=torch.from_numpy(att).long(),
                                   max_new_tokens=new, min_new_tokens=new, pad_token_id=0, **kw)
        gen()
        w_t, c_t = C.best_of(gen, repeats)
        n = rows * new
        if before is not None:
            out.append(dict(size=name, R=rows, P=f"4..{prompt}", T=new, temperature=temp, code=before_rev,
                            prs_tok_s=f"{n / w_b:,.0f}", hf_tok_s=f"{n / w_t:,.0f}", speedup=f"{w_t / w_b:.2f}x",
                            prs_tok_cpu_s=f"{n / c_b:,.0f}", hf_tok_cpu_s=f"{n / c_t:,.0f}",
                            speedup_cpu=f"{c_t / c_b:.2f}x", prs_roofline=f"{flops_tok * n / w_b / peak:.1%}",
                            hf_roofline=f"{flops_tok * n / w_t / peak:.1%}"))
        out.append(dict(size=name, R=rows, P=f"4..{prompt}", T=new, temperature=temp, code=f"this tree, row_parts={row_parts}",
                        prs_tok_s=f"{n / w_p:,.0f}", hf_tok_s=f"{n / w_t:,.0f}", speedup=f"{w_t / w_p:.2f}x",
                        prs_tok_cpu_s=f"{n / c_p:,.0f}", hf_tok_cpu_s=f"{n / c_t:,.0f}", speedup_cpu=f"{c_t / c_p:.2f}x",
                        prs_roofline=f"{flops_tok * n / w_p / peak:.1%}", hf_roofline=f"{flops_tok * n / w_t / peak:.1%}"))
        print(f"{name} T={temp}: done ({C.load()})", flush=True)
    print(f"\nSampling, prs vs transformers generate (torch {torch.__version__}, {torch.get_num_threads()} threads); "
          f"best of {repeats}; {C.load()}")
    print(C.table(out, list(out[0])))
    return out


def multi_turn(name, *, rows, prompt, new, obs, repeats):
    """One resumed turn (O observation tokens, then ``new`` tokens): reusing the KV cache vs
    re-prefilling the conversation (``cache=None``). Compiles are excluded (warm-up call)."""
    cfg = M.ModelConfig.preset(name)
    params = M.init_params(cfg, jax.random.key(0))
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (rows, prompt), 0, cfg.vocab_size), np.int32)
    scfg = S.SamplerConfig(max_new_tokens=new, temperature=1.0, buckets=None)
    first, cache = S.sample(params, tokens, np.full(rows, prompt), jax.random.key(2), cfg=cfg, scfg=scfg,
                            return_cache=True)
    o = np.ones((rows, obs), np.int32)
    ol = np.full((rows,), obs, np.int32)
    times = {}
    for label in ("cache", "re-prefill"):
        def run():
            c = jax.tree.map(jnp.copy, cache) if label == "cache" else None
            return S.append_and_resume(params, first, o, ol, jax.random.key(3), cfg=cfg, scfg=scfg, cache=c).tokens
        jax.block_until_ready(run())
        times[label] = _time(run, repeats)
    print(f"{name:>5} multi-turn: R={rows} S={first.tokens.shape[1]} O={obs} T={new}: resume with cache "
          f"{times['cache']:.3f}s, re-prefill {times['re-prefill']:.3f}s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", "--size", nargs="+", default=["tiny", "10m"], choices=C.SIZES)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, nargs="+", default=None,
                    help="new tokens per config (default: 64 for tiny, 256 otherwise)")
    ap.add_argument("--no-cache-new", type=int, nargs="+", default=None,
                    help="new tokens for the no-cache baseline per config (default: same as --new "
                         "for tiny, 64 otherwise: the full re-forward is quadratic; 0 skips)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hf", action="store_true", help="also compare with HF transformers Qwen3")
    ap.add_argument("--row-parts", type=int, default=1, help="SamplerConfig.row_parts of this tree's sampler (--hf)")
    ap.add_argument("--before", default=None, metavar="REV",
                    help="with --hf: also the sampler of git revision REV, interleaved with this tree's")
    ap.add_argument("--multi-turn", type=int, default=0, metavar="O",
                    help="also time one resumed turn with O observation tokens (cache vs re-prefill)")
    a = ap.parse_args()
    peak = C.matmul_flops()
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} ({len(jax.devices())} devices); measured f32 "
          f"matmul {peak / 1e9:.0f} GFLOP/s; {C.load()}")
    for i, name in enumerate(a.configs):
        new = a.new[i] if a.new else (64 if name == "tiny" else 256)
        ncn = a.no_cache_new[i] if a.no_cache_new else (new if name == "tiny" else 64)
        bench(name, rows=a.rows, prompt=a.prompt, new=new, repeats=a.repeats, no_cache_new=ncn)
        if a.hf:
            hf_compare(name, rows=a.rows, prompt=a.prompt, new=new, repeats=a.repeats)
            side_by_side(name, rows=a.rows, prompt=a.prompt, new=new, repeats=a.repeats, peak=peak,
                         before_rev=a.before, row_parts=a.row_parts)
        if a.multi_turn:
            multi_turn(name, rows=a.rows, prompt=a.prompt, new=new, obs=a.multi_turn, repeats=a.repeats)


if __name__ == "__main__":
    main()
