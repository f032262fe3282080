"""The planner (``prs.plan``) against the compiler for the four accelerator presets (issue #29).

    python benchmarks/plan_compiled.py                      # all four presets, layers (2, 4)
    python benchmarks/plan_compiled.py grpo_ps_qwen3_4b_h200x8 --layers 2 4

For each preset (in its own subprocess with as many fake CPU devices as the preset's mesh) the
sampler's fresh and Prefix Sampling re-roll calls (of ``rollout.row_chunk`` rows when set) and the update are compiled at the real widths on
abstract inputs with the layer count cut to L₁ and L₂, extended linearly to the real depth
(``prs.plan_compiled``), and printed beside the planner's lines (per device, GiB):

    program | planner | compiled (L₁, L₂ -> L) | planned / compiled | compile s

"compiled" is arguments + temporaries + outputs − aliased of XLA:CPU's program (the resident
training state is counted as the update's arguments; the sampler's arguments are its bf16 copy);
the planner's line is its matching total (``prs.plan.Plan.sampling_total`` / ``update_total``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

PRESETS = ("grpo_ps_qwen3_4b_h200x8", "grpo_ps_qwen3_4b_v5p64", "grpo_ps_qwen3_8b_h200x8", "grpo_ps_qwen3_8b_v5p64")
DEVICES = {"h200x8": 8, "v5p64": 32}


def one(preset: str, layers=(2, 4), programs=("fresh", "reroll", "update")) -> dict:
    """In this process (its device count set by the caller): the compiled and planned GiB."""
    import jax

    from prs import plan as PL
    from experiments.plan import preset_setup
    from prs import plan_compiled as PC
    from prs.parallel.sharding import make_mesh

    s = preset_setup(preset)
    cfg, rl, sz, T, P = s["model_cfg"], s["rl"], s["sizes"], s["budget"], s["prompt_len"]
    mesh = make_mesh(jax.devices()[:s["devices"]], **sz)
    rows = rl.tasks_per_step * rl.group_size
    p = PL.plan_run(cfg, rl, prompt_len=P, max_new_tokens=T, device_gib=s["device_gib"],
                    prefix_rerolls=s["rerolls"], mem_fraction=s["mem_fraction"], **sz)
    out = {"preset": preset, "device_gib": s["device_gib"], "planner_peak": p.peak / PL.GIB, "programs": {}}
    for prog in programs:
        if prog == "update":
            fn = lambda c: PC.update_memory(c, rl, rows=rows, width=P + 2 * T, mesh=mesh)  # noqa: E731
            planned = p.update_total
        else:
            fn = lambda c, prog=prog: PC.sampler_memory(c, rows=rl.rollout.row_chunk or rows, prompt_len=P, max_new_tokens=T,  # noqa: E731
                                                        mesh=mesh, reroll=prog == "reroll")
            planned = PL.plan_run(cfg, rl, prompt_len=P, max_new_tokens=T, device_gib=s["device_gib"],
                                  prefix_rerolls=prog == "reroll", **sz).sampling_total
        t0 = time.perf_counter()
        e = PC.extrapolated(fn, cfg, tuple(layers))
        out["programs"][prog] = {"planner": planned / PL.GIB, "L1": e["L1"].gib(), "L2": e["L2"].gib(),
                                 "full": e["full"].gib(), "compile_s": round(time.perf_counter() - t0, 1)}
    return out


def main(argv):
    layers = (2, 4)
    if "--layers" in argv:
        i = argv.index("--layers")
        layers = (int(argv[i + 1]), int(argv[i + 2]))
        argv = argv[:i] + argv[i + 3:]
    if argv and argv[0] == "--child":
        print("RESULT " + json.dumps(one(argv[1], layers)))
        return 0
    presets = argv or PRESETS
    print("| preset | program | planner GiB | compiled L1 / L2 -> L GiB | planned / compiled | compile s |")
    print("|---|---|---|---|---|---|")
    for name in presets:
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES[name.rsplit('_', 1)[1]]}",
                   JAX_PLATFORMS="cpu")
        res = subprocess.run([sys.executable, __file__, "--child", name, "--layers", *map(str, layers)], env=env,
                             capture_output=True, text=True)
        line = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
        if not line:
            print(f"| {name} | failed: {res.stderr[-400:]!r} |")
            continue
        r = json.loads(line[0][7:])
        if os.environ.get("PLAN_COMPILED_JSON"):  # the raw numbers, one JSON line per preset
            with open(os.environ["PLAN_COMPILED_JSON"], "a") as f:
                f.write(line[0][7:] + "\n")
        for prog, m in r["programs"].items():
            print(f"| {name} | {prog} | {m['planner']:.1f} | {m['L1']['total']:.1f} / {m['L2']['total']:.1f} -> "
                  f"{m['full']['total']:.1f} | {m['planner'] / m['full']['total']:.2f} | {m['compile_s']:.0f} |")
        print(f"| {name} | planner peak | {r['planner_peak']:.1f} of {r['device_gib']:g} | | | |", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main(sys.argv[1:]))
