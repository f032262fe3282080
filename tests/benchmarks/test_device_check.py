"""benchmarks/device_check.sh / .py: the device check's ``--cpu`` mode writes the JSON every field of
which a GPU run will fill (so the script cannot rot where no accelerator is at hand); its FLOP and
byte counts against an independent count from the parameter shapes."""
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SH = ROOT / "benchmarks" / "device_check.sh"


def _module():
    spec = importlib.util.spec_from_file_location("device_check", ROOT / "benchmarks" / "device_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


DC = _module()


def _run(tmp_path, *args, timeout=900):
    out = tmp_path / "dc.json"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device, as a user's run
    env["PYTHON"] = sys.executable
    p = subprocess.run(["bash", str(SH), str(out), "--cpu", *args], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads(out.read_text()), p.stdout


def _matmul_weights(cfg):
    """Independent count: every 2-D+ kernel of the layers (q, k, v, o, gate, up, down) and the LM head
    (the tied embedding, or ``lm_head``), read off the initialised parameter shapes."""
    shapes = cfg.param_shapes()
    layer = sum(math.prod(s.shape) for s in shapes["layers"].values() if len(s.shape) == 3)
    head = math.prod((shapes["lm_head"] if "lm_head" in shapes else shapes["embed_tokens"]).shape)
    return layer, head


@pytest.mark.parametrize("preset", sorted(DC.PRESETS))
def test_flop_and_byte_counts_equal_a_count_from_the_parameter_shapes(preset):
    ps = DC.PRESETS[preset]
    cfg = DC.model_cfg(ps.model)
    layer, head = _matmul_weights(cfg)
    ctx = 100.0
    attn = 4 * ctx * cfg.n_heads * cfg.head_dim * cfg.n_layers  # q.k and p.v over ctx keys
    assert DC.flops_per_token(cfg, ctx) == pytest.approx(2 * (layer + head) + attn)
    rows, slots = 8, 96
    kv = 2 * cfg.n_layers * rows * slots * cfg.n_kv_heads * cfg.head_dim * 2  # K and V, bf16
    assert DC.decode_step_bytes(cfg, rows=rows, slots=slots) == pytest.approx(2 * (layer + head) + kv)


def test_isolated_checks_skip_with_reasons_and_bad_names_are_one_line(tmp_path):
    doc, _ = _run(tmp_path, "--checks", "env,torch,update_cudnn", "--isolate", timeout=300)
    assert doc["schema"] == DC.SCHEMA and doc["mode"] == "cpu" and doc["status"] == "ok"
    env = doc["checks"]["env"]  # ran in a child process
    assert env["status"] == "ok" and env["backend"] == "cpu" and env["device_count"] == 1
    assert env["measured_matmul_flops"] > 0 and env["measured_copy_bytes_per_s"] > 0
    for name in ("torch", "update_cudnn"):  # their checkpoint was not written: skipped, saying why
        assert doc["checks"][name]["status"] == "skipped" and "weights" in doc["checks"][name]["reason"]
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device_check.py"), "--cpu", "--checks", "env,nope",
                        "--out", str(tmp_path / "x.json")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "nope" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_cpu_mode_fills_every_field(tmp_path):
    from prs import plan as PL

    doc, stdout = _run(tmp_path)
    assert set(doc["checks"]) == set(DC.ORDER) and doc["status"] == "ok", stdout
    c = doc["checks"]
    assert all(v["status"] in DC.STATUSES for v in c.values())
    ps = DC.Preset(**doc["preset"])
    cfg = DC.model_cfg(ps.model)
    bw, flops = c["env"]["measured_copy_bytes_per_s"], c["env"]["measured_matmul_flops"]
    assert c["env"]["peak_flops"] is None  # no vendor peak for a CPU: the measured rates are used

    # attention: cudnn skipped with the reason; the xla path compared, within the stated tolerance
    att = c["attention"]
    assert att["impls"]["cudnn"]["status"] == "skipped" and "GPU" in att["impls"]["cudnn"]["reason"]
    ref, xla = att["reference_bf16_errors"], att["impls"]["xla"]
    assert xla["status"] == "ok" and set(xla["errors"]) == set(ref) == {
        "train_logp_max_abs", "train_grad_rel", "prefill_logits_max_abs", "prefill_cache_rel"}
    for k, v in xla["errors"].items():
        assert 0 < ref[k] < 0.1 and 0 <= v <= 2 * ref[k] + 1e-3, (k, v, ref[k])  # bf16 is not exact, nor wild
    assert att["lengths"][-1] == 1 and len(set(att["lengths"])) == len(att["lengths"])  # ragged rows

    # update: the planner's line for these shapes, the compiled program, MFU from the recorded numbers
    up = c["update"]
    P, T, R = ps.prompt, ps.budget, ps.rows
    plan = PL.plan(DC.model_cfg(ps.model, attention_impl="xla"), rows=R, width=P + 2 * T, prompt_len=P,
                   max_new_tokens=T, micro_batches=ps.micro_batches, logits_chunk=ps.logits_chunk, sampling_bytes=2,
                   cache_slots=P + 2 * T, device_gib=80)
    assert up["planner_bytes"] == int(plan.update_total) and up["compiled_bytes"] > 0
    assert up["peak_gib"] is None and "cpu" in up["peak_reason"]
    layer, head = _matmul_weights(cfg)
    W = P + 2 * T
    tokens = R * (W - 1)
    want = 3 * tokens * (2 * (layer + head) + 4 * (W - 1) / 2 * cfg.n_heads * cfg.head_dim * cfg.n_layers)
    assert up["model_flops"] == pytest.approx(want)
    assert up["mfu"] == pytest.approx(want / up["step_s"] / flops) and 0 < up["mfu"] < 1
    assert np.isfinite(up["loss"]) and up["grad_norm"] > 0 and up["forward"]["seconds"] > 0

    # sampling: every row generated its budget; the roofline from an independent byte count
    for call, width in (("fresh", P), ("reroll", P + T)):
        s = c["sampling"]["calls"][call]
        assert s["generated_tokens"] == s["expected_tokens"] == R * T
        slots = width + T
        step = 2 * (layer + head) + 2 * cfg.n_layers * R * slots * cfg.n_kv_heads * cfg.head_dim * 2
        assert s["cache_slots"] == slots and s["step_bytes"] == pytest.approx(step)
        assert s["roofline_tokens_per_s"] == pytest.approx(R * bw / step)
        assert s["roofline_fraction"] == pytest.approx(s["tokens_per_s"] / s["roofline_tokens_per_s"])
        assert s["planner_bytes"] > 0 and s["compiled_bytes"] > 0 and s["peak_gib"] is None

    # torch beside it, on the same weights (installed here; the check skips with a reason where not)
    t = c["torch"]
    if t["status"] == "skipped":
        assert "torch" in t["reason"]
    else:
        assert t["forward"]["logp_abs_diff_vs_prs"]["max"] < 0.1  # bf16 on both sides, same weights
        assert t["generate"]["new_tokens"] == T and t["generate"]["tokens_per_s"] > 0
        assert 0 <= t["generate"]["first_token_agreement_vs_prs"] <= 1
    assert c["update_cudnn"]["status"] == "skipped" and "GPU" in c["update_cudnn"]["reason"]
