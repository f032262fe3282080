"""Per-op profile of the compiled GRPO update (``prs.rl.trainer.update_step``), grouped by source.

Runs the update of ``bench_update.py`` once under ``jax.profiler.trace`` (perfetto JSON), takes the
duration of every XLA:CPU thunk (one per top-level HLO instruction of the compiled module), and
labels each instruction by the innermost prs function of its stack frame (HLO metadata) plus
forward / backward (``transpose(`` in the op name). Dots get their FLOPs, so the table shows the
achieved GFLOP/s per group. Thunk times are summed over threads (op time, not wall).

    PYTHONPATH=$PWD python benchmarks/profile_update.py --size 10m --rows 8 --len 256 [--top 30]
    ... --torch     # also torch.profiler of the same update in eager (self CPU time per aten op)
"""
from __future__ import annotations

import argparse
import collections
import functools
import glob
import gzip
import json
import math
import pathlib
import re
import shutil
import sys
import tempfile

import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import bench_update as B  # noqa: E402
from prs.models import qwen3 as M  # noqa: E402
from prs.rl.trainer import Batch, RLConfig, update_step  # noqa: E402

_GROUPS = [  # (function name in the stack, group), first match from the innermost frame outwards
    ("_fwd_chunk", "attention"), ("_bwd_chunk", "attention"), ("blockwise_attention", "attention"),
    ("_attention_hm_bwd", "attention"), ("_attn_fwd_core", "attention"), ("_heads_major", "attention"),
    ("_from_heads_major", "attention"), ("_attention", "attention"), ("rope", "rope"),
    ("_block_stats", "lm_head"), ("lm_head_logprobs", "lm_head"), ("lm_head_weight", "lm_head"),
    ("_embed", "embed"), ("mlp", "mlp"), ("project_qkv", "qkv"), ("rms_norm", "norm"),
    ("policy_loss", "loss"), ("update_step", "optimizer"), ("forward_hidden", "layer"),
]


def _frames(hlo: str):
    """stack_frame_id -> list of (function, line), innermost first (HLO text's StackFrames tables)."""
    sec = lambda name: re.search(rf"^{name}\n(.*?)(?:\n\n|\Z)", hlo, re.S | re.M)  # noqa: E731
    fn = dict(re.findall(r'^(\d+) "(.*)"$', sec("FunctionNames").group(1), re.M))
    loc = {i: (fn[f], int(line)) for i, f, line in re.findall(
        r"^(\d+) \{file_name_id=\d+ function_name_id=(\d+) line=(\d+)", sec("FileLocations").group(1), re.M)}
    fr = {i: (l, p) for i, l, p in re.findall(r"^(\d+) \{file_location_id=(\d+) parent_frame_id=(\d+)",
                                              sec("StackFrames").group(1), re.M)}
    out = {}
    for i in fr:
        chain, j = [], i
        while j in fr and len(chain) < 64:
            l, p = fr[j]
            chain.append(loc[l])
            j = str(int(p) - 1)  # parent_frame_id is 1-based (0 = none)
        out[i] = chain
    return out


def _shape(s):
    m = re.match(r"\w+\[([\d,]*)\]", s)
    return [int(x) for x in m.group(1).split(",") if x] if m else []


def _dot_flops(comp_lines, shapes):
    """2 · prod(out) · prod(contracted) summed over the dots of a (fused) computation."""
    total = 0
    for ln in comp_lines:
        m = re.search(r"= (\w+\[[\d,]*\])\{?[\d,]*\}? dot\((%[\w.\-]+), ", ln)
        if not m:
            continue
        out = _shape(m.group(1))
        lhs = shapes.get(m.group(2), [])
        c = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ln)
        k = math.prod(lhs[int(d)] for d in c.group(1).split(",") if d) if c and lhs else 0
        total += 2 * math.prod(out) * k
    return total


def computations(hlo: str):
    """HLO text -> ({computation name: its instruction lines}, the ENTRY computation's name)."""
    comps, cur, entry = {}, None, None
    for ln in hlo.splitlines():
        m = re.match(r"^(?:ENTRY )?%([\w.\-]+) .*\{$", ln)
        if m:
            cur = m.group(1)
            comps[cur] = []
            if ln.startswith("ENTRY"):
                entry = cur
        elif ln.startswith("}"):
            cur = None
        elif cur:
            comps[cur].append(ln)
    return comps, entry


def analyse(hlo: str, durations: dict[str, float]):
    comps, entry = computations(hlo)
    shapes = {}
    for lines in comps.values():
        for ln in lines:
            m = re.match(r"\s*(?:ROOT )?(%[\w.\-]+) = (\w+\[[\d,]*\])", ln)
            if m:
                shapes[m.group(1)] = _shape(m.group(2))
    frames = _frames(hlo)
    rows = []
    for ln in comps[entry]:
        m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = (\S+) (\w[\w\-]*)\(", ln)
        if not m:
            continue
        name, shape, op = m.groups()
        calls = re.search(r"calls=%([\w.\-]+)", ln)
        body = comps.get(calls.group(1), []) if calls else [ln]
        flops = _dot_flops(body, shapes)
        sf = re.search(r"stack_frame_id=(\d+)", ln)
        chain = frames.get(sf.group(1), []) if sf else []
        fnames = [f for f, _ in chain]
        group = next((g for f, g in _GROUPS if f in fnames), "other" if chain else f"(no frame) {op}")
        opname = re.search(r'op_name="([^"]*)"', ln)
        bwd = bool(opname and "transpose(" in opname.group(1))
        where = f"{chain[0][0]}:{chain[0][1]}" if chain else ""
        rows.append(dict(name=name, op=op, shape=shape, group=group, bwd=bwd, where=where, flops=flops,
                         ms=durations.get(name, 0.0), dot=flops > 0))
    return rows


def trace_durations(fn, n=3):
    """Milliseconds per thunk name: the minimum over ``n`` traced calls of its summed duration in a
    call (the minimum filters out preemption by other processes on a shared machine)."""
    best = {}
    for _ in range(n):
        d = tempfile.mkdtemp()
        try:
            with jax.profiler.trace(d, create_perfetto_trace=True):
                jax.block_until_ready(fn())
            ev = json.load(gzip.open(glob.glob(d + "/**/perfetto_trace.json.gz", recursive=True)[0]))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        ev = ev["traceEvents"] if isinstance(ev, dict) else ev
        dur = collections.Counter()
        for e in ev:
            if e.get("ph") == "X":
                dur[e["name"]] += e.get("dur", 0) / 1e3
        best = {k: min(v, best.get(k, v)) for k, v in dur.items()}
    return best


def report(rows, top):
    tot = sum(r["ms"] for r in rows)
    print(f"total thunk time {tot:.0f} ms (summed over threads)")
    agg = collections.defaultdict(lambda: [0.0, 0, 0.0])
    for r in rows:
        key = (r["group"], "bwd" if r["bwd"] else "fwd", "dot" if r["dot"] else "non-dot")
        a = agg[key]
        a[0] += r["ms"]; a[1] += 1; a[2] += r["flops"]
    print(f"{'group':22s} {'pass':4s} {'kind':8s} {'ms':>8s} {'%':>6s} {'n':>5s} {'GFLOP':>8s} {'GFLOP/s':>8s}")
    for k, (ms, n, fl) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
        rate = f"{fl / ms / 1e6:8.1f}" if fl and ms else ""
        print(f"{k[0][:22]:22s} {k[1]:4s} {k[2]:8s} {ms:8.1f} {ms / tot:6.1%} {n:5d} {fl / 1e9:8.2f} {rate}")
    print(f"\ntop {top} instructions")
    for r in sorted(rows, key=lambda r: -r["ms"])[:top]:
        rate = f"{r['flops'] / r['ms'] / 1e6:6.1f} GF/s" if r["flops"] and r["ms"] else ""
        print(f"{r['ms']:7.1f} ms {r['group'][:14]:14s} {'bwd' if r['bwd'] else 'fwd'} {r['op'][:8]:8s} "
              f"{r['name'][:28]:28s} {r['shape'][:34]:34s} {r['where'][:28]:28s} {rate}")


def torch_profile(cfg, params, b, rl, top):
    import torch
    from torch.profiler import ProfilerActivity, profile

    model = C.hf_model(cfg, params).train()
    opt = torch.optim.AdamW(model.parameters(), lr=rl.optim.lr, betas=(rl.optim.b1, rl.optim.b2), eps=1e-8, weight_decay=rl.optim.weight_decay)
    t = {k: torch.from_numpy(__import__("numpy").asarray(v)) for k, v in b.items()}
    tokens = t["tokens"].long()

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1], position_ids=t["positions"][:, :-1].long()).logits.float()
        logp = torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:, None])[..., 0]
        loss = (logp * t["advantages"][:, None]).sum() / tokens.shape[0]  # cost of the loss is negligible
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), rl.optim.grad_clip)
        opt.step()

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


import _common as C  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="10m", choices=C.SIZES)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--unroll", default="full")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--traces", type=int, default=3, help="traced calls; per-op minimum over them")
    ap.add_argument("--dump-hlo", default=None, help="write the compiled HLO text here")
    ap.add_argument("--set", nargs="*", default=[], help="ModelConfig / RLConfig overrides key=value (python literals); a part's field "
                    "as part.field, e.g. loss.clip_high=0.3")
    a = ap.parse_args()
    import ast
    over = {k: ast.literal_eval(v) for k, v in (s.split("=", 1) for s in a.set)}
    from prs.models import blockwise as BW
    impl = over.get("attention_impl", "")
    if BW.parse_variant(impl) and impl not in M._ATTENTION_IMPLS:  # blockwise_r{rows}_q{q}_k{k}
        M.register_blockwise(impl, **BW.parse_variant(impl))
    cfg = M.ModelConfig.preset(a.size)
    params = M.init_params(cfg, jax.random.key(0))
    mfields = {f.name for f in __import__("dataclasses").fields(M.ModelConfig)}
    cfg = M.ModelConfig.preset(a.size, scan_unroll=cfg.n_layers if a.unroll == "full" else int(a.unroll),
                               **{k: v for k, v in over.items() if k in mfields})
    from prs.rl.config import PARTS
    parts: dict = {}
    for k, v in over.items():
        if "." in k:
            parts.setdefault(k.split(".")[0], {})[k.split(".", 1)[1]] = v
    rl = RLConfig(**{k: v for k, v in over.items() if k not in mfields and "." not in k},
                  **{part: PARTS[part](**kw) for part, kw in parts.items()})
    b = B.make_batch(cfg, params, a.rows, a.len)
    tx = optax.chain(optax.clip_by_global_norm(rl.optim.grad_clip),
                     optax.adamw(rl.optim.lr, b1=rl.optim.b1, b2=rl.optim.b2, weight_decay=rl.optim.weight_decay))
    batch = Batch(**{k: jnp.asarray(v) for k, v in b.items()})
    opt = tx.init(params)
    compiled = jax.jit(functools.partial(update_step, cfg=cfg, rl=rl, tx=tx)).lower(params, opt, batch).compile()
    hlo = compiled.as_text()
    if a.dump_hlo:
        pathlib.Path(a.dump_hlo).write_text(hlo)
    run = lambda: compiled(params, opt, batch)  # noqa: E731
    jax.block_until_ready(run())
    wall, cpu = C.best_of(lambda: jax.block_until_ready(run()), 2)
    print(f"{a.size} R={a.rows} T={a.len}: update wall {wall:.3f} s, CPU {cpu:.3f} s; {C.load()}")
    report(analyse(hlo, trace_durations(run, a.traces)), a.top)
    if a.torch:
        torch_profile(cfg, params, b, rl, a.top)


if __name__ == "__main__":
    main()
