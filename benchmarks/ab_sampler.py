"""A/B of the KV-cached sampler: this tree's ``prs.models.sampler`` against the one of a git
revision (``--before``, loaded from ``git show REV:prs/models/sampler.py`` as a separate module)
and ``SamplerConfig`` variants, interleaved in one process, best of ``--rounds``.

Every variant samples the same ragged batch (lengths uniform in [4, P], exactly T new tokens, no
EOS) with the same key; the tokens of every variant are compared with the first one's (and the
log-probs' max difference is printed). Wall and process-CPU seconds per call (all threads).

    PYTHONPATH=$PWD python benchmarks/ab_sampler.py --size 10m --before main --temperature 0 1
    ... --variants 'attend_buckets=(32,48,64,80)'     # SamplerConfig overrides of this tree
    ... --variants 'row_parts=1' '_NAME=value'        # a module global: set on a fresh copy of the module
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import pathlib
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import _common as C  # noqa: E402
from prs.models import qwen3 as M  # noqa: E402
from prs.models import sampler as S  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_sampler(rev: str | None, name: str = "tree"):
    """A fresh copy of ``prs/models/sampler.py`` at git revision ``rev`` (None: this tree's file)."""
    src = ((ROOT / "prs/models/sampler.py").read_text() if rev is None else
           subprocess.run(["git", "show", f"{rev}:prs/models/sampler.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout)
    rev = rev or name
    path = pathlib.Path(tempfile.mkdtemp()) / f"sampler_{rev.replace('/', '_')}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"sampler_{rev.replace('/', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    C.sampler_arguments(ap)
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--before", default=None, help="git revision whose sampler.py is the 'before' variant")
    ap.add_argument("--variants", nargs="*", default=[], help="SamplerConfig overrides k=v[,k=v] of this tree")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=2, help="calls per timed round (best round / calls)")
    a = ap.parse_args()
    cfg = M.ModelConfig.preset(a.size)
    params = M.init_params(cfg, jax.random.key(0))
    tokens, lengths = C.ragged_prompts(cfg.vocab_size, a.rows, a.prompt)
    mods = ([("before " + a.before, load_sampler(a.before), {})] if a.before else []) + [("this tree", S, {})]
    for v in a.variants:
        over = {k: ast.literal_eval(x) for k, x in (kv.split("=", 1) for kv in v.split(";"))}
        glob = {k: over.pop(k) for k in list(over) if k.startswith("_")}  # module globals: a fresh copy
        mod = S
        if glob:
            mod = load_sampler(None, f"v{len(mods)}")
            for k, x in glob.items():
                setattr(mod, k, x)
        mods.append((f"this tree {v}", mod, over))
    print(f"{a.size} R={a.rows} P=4..{a.prompt} T={a.new}; {C.load()}", flush=True)
    n_tok = a.rows * a.new
    for temp in a.temperature:
        runs = []
        for label, mod, over in mods:
            scfg = mod.SamplerConfig(max_new_tokens=a.new, temperature=temp, **over)
            fn = lambda mod=mod, scfg=scfg: mod.sample(params, tokens, lengths, jax.random.key(3), cfg=cfg, scfg=scfg)
            t0 = time.perf_counter()
            out = jax.block_until_ready(fn())
            runs.append(dict(label=label, fn=fn, out=out, first_s=time.perf_counter() - t0, wall=[], cpu=[]))
        for _ in range(a.rounds):
            for r in runs:
                w, c = C.best_of(lambda r=r: [jax.block_until_ready(r["fn"]().tokens) for _ in range(a.calls)], 1)
                r["wall"].append(w / a.calls)
                r["cpu"].append(c / a.calls)
        ref = runs[0]["out"]
        rows = []
        for r in runs:
            same = bool(np.array_equal(np.asarray(r["out"].tokens), np.asarray(ref.tokens)))
            dlp = float(np.max(np.abs(np.asarray(r["out"].logprobs) - np.asarray(ref.logprobs))))
            w, c = min(r["wall"]), min(r["cpu"])
            rows.append(dict(variant=r["label"], temperature=temp, wall_ms=f"{w * 1e3:.0f}", cpu_ms=f"{c * 1e3:.0f}",
                             tok_s=f"{n_tok / w:,.0f}", tok_cpu_s=f"{n_tok / c:,.0f}",
                             rounds_wall_ms=" ".join(f"{x * 1e3:.0f}" for x in r["wall"]),
                             same_tokens=same, max_dlogp=f"{dlp:.1e}", first_call_s=f"{r['first_s']:.1f}"))
        print(f"\ntemperature {temp}: best of {a.rounds} rounds x {a.calls} calls, interleaved; {C.load()}")
        print(C.table(rows, list(rows[0])), flush=True)


if __name__ == "__main__":
    main()
