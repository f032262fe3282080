"""Per-op profile of one decode step of the compiled sampler (``prs.models.sampler.sample_jit``).

Runs ``sample_jit`` (ragged prompts 4..P, every row generates exactly T tokens, no EOS) under
``jax.profiler.trace``, takes the duration of every XLA:CPU thunk, and joins it to the compiled
HLO: the instructions of each ``while`` body (the decode loop; one body per ``_segments``
segment) are labelled by the innermost prs function of their stack frame and its source line,
then grouped (matmuls by weight, cache writes, attention, RoPE, norms, sampling, bookkeeping).
Times are per decode step (a thunk's summed time / the steps run), summed over threads (op
time, not wall), minimum over ``--traces`` traced calls. The wall time per step and the op
count per step are printed next to it, so the gap (thunk dispatch, synchronisation, idle
second core) can be read off.

    PYTHONPATH=$PWD python benchmarks/profile_sampler.py --size 10m --rows 64 --prompt 16 --new 64 [--temperature 1]
"""
from __future__ import annotations

import argparse
import collections
import linecache
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import _common as C  # noqa: E402
import profile_update as PU  # noqa: E402
from prs.models import qwen3 as M  # noqa: E402
from prs.models import sampler as S  # noqa: E402

# (function in the stack, group); the first entry found anywhere in the chain wins
_GROUPS = [
    ("rope", "rope"), ("rms_norm", "norm"), ("row_keys", "keys"), ("fold_in", "keys"),
    ("_categorical", "sampling"), ("adjust_logits", "sampling"), ("choose_tokens", "sampling"),
    ("advance", "bookkeeping"), ("_block_attention", "attention"), ("mlp", "mlp"),
    ("project_qkv", "qkv"),
]


def _label(chain, op, ln):
    fnames = [f for f, _ in chain]
    g = next((g for f, g in _GROUPS if f in fnames), None)
    src = ""
    for f, line in chain:  # innermost frame in prs/models/sampler.py or qwen3.py
        for p in ("prs/models/sampler.py", "prs/models/qwen3.py"):
            txt = linecache.getline(str(pathlib.Path(__file__).resolve().parents[1] / p), line)
            if f in ("decode_token", "body", "_decode_loop") and p.endswith("sampler.py"):
                src = txt.strip()
                break
        if src:
            break
    if g is None:
        if "o_proj" in src:
            g = "o_proj matmul"
        elif "head" in src and "dense" in src:
            g = "lm head matmul"
        elif ".at[rows" in src or "ck = tuple" in src or "cv = tuple" in src or "c.at[" in src:
            g = "cache write"
        elif "gather_rows" in src:
            g = "embed"
        elif "h = h +" in src:
            g = "o_proj matmul" if "o_proj" in src else "mlp"
        elif ".at[ar, wi]" in src or "tokens=" in src or "policy_mask=" in src or "logprobs=" in src:
            g = "output buffers"
        elif "astype(cfg.dtype)" in src:
            g = "attention"
        else:
            g = f"other ({op})"
    return g, src


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.sampler_arguments(ap)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--traces", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--dump-hlo", default=None)
    ap.add_argument("--order", type=int, nargs=2, default=None, metavar=("FROM", "TO"),
                    help="also list the decode body's thunks FROM..TO in program order")
    ap.add_argument("--parts", type=int, default=None, help="SamplerConfig.row_parts (default: the sampler's)")
    a = ap.parse_args()
    cfg = M.ModelConfig.preset(a.size)
    params = M.init_params(cfg, jax.random.key(0))
    tokens, lengths = C.ragged_prompts(cfg.vocab_size, a.rows, a.prompt)
    scfg = S.SamplerConfig(max_new_tokens=a.new, temperature=a.temperature, row_parts=a.parts)
    padded = S.pad_to_bucket(tokens, lengths, buckets=scfg.buckets)
    args = (params, jnp.asarray(padded), jnp.asarray(lengths), jax.random.key(3),
            jnp.full((a.rows,), a.new, jnp.int32), np.int32(0))
    kw = dict(cfg=cfg, scfg=scfg, mesh=None, return_cache=False)
    compiled = S.sample_jit.lower(*args, **kw).compile()
    hlo = compiled.as_text()
    if a.dump_hlo:
        pathlib.Path(a.dump_hlo).write_text(hlo)
    run = lambda: compiled(*args)  # noqa: E731
    jax.block_until_ready(run())
    wall, cpu = C.best_of(lambda: jax.block_until_ready(run()), 3)
    n_tok = a.rows * a.new
    print(f"{a.size} R={a.rows} P=4..{a.prompt} T={a.new} temperature={a.temperature}: call wall {wall * 1e3:.1f} ms, "
          f"CPU {cpu * 1e3:.1f} ms -> {n_tok / wall:,.0f} tok/s, {n_tok / cpu:,.0f} tok/CPU-s; {C.load()}")
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, list) else ca
    if ca:
        print(f"cost_analysis (whole call; XLA counts a while body once): flops {ca.get('flops', 0) / 1e9:.3f} G, "
              f"bytes accessed {ca.get('bytes accessed', 0) / 1e6:.1f} MB")

    comps, entry = PU.computations(hlo)
    shapes = {}
    for lines in comps.values():
        for ln in lines:
            m = re.match(r"\s*(?:ROOT )?(%[\w.\-]+) = (\w+\[[\d,]*\])", ln)
            if m:
                shapes[m.group(1)] = PU._shape(m.group(2))
    bodies, scans = [], []  # decode loop bodies; fixed-trip loops (the prefill's layer scan)
    for lines in comps.values():
        for ln in lines:
            m = re.search(r" while\(.*body=%([\w.\-]+)", ln)
            if m:
                (scans if "known_trip_count" in ln else bodies).append(m.group(1))
    in_loop = set()
    for b in bodies + scans:
        in_loop |= {re.match(r"\s*(?:ROOT )?%([\w.\-]+) =", ln).group(1) for ln in comps[b]
                    if re.match(r"\s*(?:ROOT )?%([\w.\-]+) =", ln)}
    frames = PU._frames(hlo)
    dur = PU.trace_durations(run, a.traces)
    steps = a.new  # every row generates exactly T tokens
    rows = []
    for b in bodies:
        for ln in comps[b]:
            m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (\S+) (\w[\w\-]*)\(", ln)
            if not m:
                continue
            name, shape, op = m.groups()
            if op in ("parameter", "get-tuple-element", "tuple", "constant", "bitcast"):
                continue
            calls = re.search(r"calls=%([\w.\-]+)", ln)
            body = comps.get(calls.group(1), []) if calls else [ln]
            flops = PU._dot_flops(body, shapes)
            sf = re.search(r"stack_frame_id=(\d+)", ln)
            chain = frames.get(sf.group(1), []) if sf else []
            g, src = _label(chain, op, ln)
            if flops and g in ("qkv", "mlp", "attention"):
                g += " matmul"
            kind = "ynn" if "__ynn" in ln else op
            rows.append(dict(name=name, op=kind, shape=shape, group=g, src=src, flops=flops,
                             ms=dur.get(name, 0.0) / steps))
    tot = sum(r["ms"] for r in rows)
    n_ops = len(rows)
    scan_ms = sum(dur.get(re.match(r"\s*(?:ROOT )?%([\w.\-]+) =", ln).group(1), 0.0)
                  for b in scans for ln in comps[b] if re.match(r"\s*(?:ROOT )?%([\w.\-]+) =", ln))
    entry_ms = sum(dur.get(re.match(r"\s*(?:ROOT )?%([\w.\-]+) =", ln).group(1), 0.0)
                   for ln in comps[entry] if re.match(r"\s*(?:ROOT )?%([\w.\-]+) =", ln)
                   and not re.search(r" while\(", ln))
    top_entry = sorted(((dur.get(m.group(1), 0.0), m.group(1), m.group(2)) for ln in comps[entry]
                        if (m := re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (\S+) ", ln)) and " while(" not in ln),
                       reverse=True)[:6]
    print("largest thunks outside the loops (ms per call):",
          ", ".join(f"{n} {sh[:24]} {ms:.1f}" for ms, n, sh in top_entry))
    print(f"per call: prefill layer scan {scan_ms:.1f} ms, other thunks outside the loops {entry_ms:.1f} ms, "
          f"decode steps {tot * steps:.1f} ms (thunk time)")
    print(f"\ndecode loop: {len(bodies)} while bodies, {n_ops} thunks per step; op time per step {tot:.2f} ms "
          f"(summed over threads); wall per call / steps = {wall / steps * 1e3:.2f} ms")
    agg = collections.defaultdict(lambda: [0.0, 0, 0.0])
    for r in rows:
        x = agg[r["group"]]
        x[0] += r["ms"]; x[1] += 1; x[2] += r["flops"]
    print(f"\n| group | ms per step | share | thunks | MFLOP per step | GFLOP/s |\n|---|---|---|---|---|---|")
    for g, (ms, n, fl) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
        rate = f"{fl / ms / 1e6:.0f}" if fl and ms else ""
        print(f"| {g} | {ms:.3f} | {ms / tot:.1%} | {n} | {fl / 1e6:.1f} | {rate} |")
    print(f"\ntop {a.top} thunks (per step)")
    for r in sorted(rows, key=lambda r: -r["ms"])[:a.top]:
        rate = f"{r['flops'] / r['ms'] / 1e6:5.0f} GF/s" if r["flops"] and r["ms"] else ""
        print(f"{r['ms'] * 1e3:7.1f} us {r['group'][:16]:16s} {r['op'][:10]:10s} {r['name'][:26]:26s} "
              f"{r['shape'][:28]:28s} {rate} {r['src'][:60]}")
    if a.order:
        i0, i1 = a.order
        print(f"\nthunks {i0}..{i1} in program order (per step)")
        for r in rows[i0:i1]:
            print(f"{r['ms'] * 1e3:7.1f} us {r['group'][:16]:16s} {r['op'][:10]:10s} {r['name'][:26]:26s} {r['shape'][:28]:28s}")
    ops = collections.Counter(r["op"] for r in rows)
    print("\nthunk kinds per step:", dict(ops.most_common()))


if __name__ == "__main__":
    main()
