"""benchmarks/device_window.sh / .py (issue #49): the shapes come from the presets (and the committed
copy the device machine reads is current); a killed, crashed or hung part leaves the finished parts
in the JSON; the ``--cpu`` dry run fills every field (slow); the planner constants calibrated from
the last H100 window's peaks, checked by recomputing the planner with them."""
import importlib.util
import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SH = ROOT / "benchmarks" / "device_window.sh"
H100 = sorted((ROOT / "benchmarks" / "device").glob("device_check_h100_*.json"))


def _module():
    spec = importlib.util.spec_from_file_location("device_window", ROOT / "benchmarks" / "device_window.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


DW = _module()


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", DW.INJECT_VAR)}  # one CPU device
    env.update(PYTHON=sys.executable, **extra)
    return env


def _run(tmp_path, *args, timeout=900, **env):
    out = tmp_path / "w.json"
    p = subprocess.run(["bash", str(SH), str(out), "--cpu", *args], cwd=tmp_path, env=_env(**env),
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads(out.read_text()), p.stdout


def test_committed_shapes_are_the_presets_and_the_per_device_share_reproduces_the_preset_plan():
    from prs import plan as PL

    derived = DW.derive_shapes()
    assert json.loads(json.dumps(derived)) == json.loads(DW.SHAPES_FILE.read_text()), \
        "benchmarks/device/window_shapes.json is stale: regenerate it with derive_shapes()"
    parts = derived["parts"]
    assert set(parts) == set(DW.PARTS) - {"env"}
    re4, fr4, up4, d8 = parts["reroll_4b"], parts["fresh_4b"], parts["update_4b_xla"], parts["decode_8b"]
    # the shapes: 16 rows per device, the 4,608 bucket, 8,704 slots, all 36 layers, bf16 copy
    assert (re4["rows"], re4["prompt_bucket"], re4["cache_slots"], re4["model"]["n_layers"]) == (16, 4608, 8704, 36)
    assert (fr4["prompt_bucket"], fr4["cache_slots"]) == (512, 4608) and re4["sampling_dtype"] == "bfloat16"
    assert (d8["rows"], d8["cache_slots"], d8["model"]["d_model"]) == (8, 8704, 4096)
    assert (up4["width"], up4["rows_per_micro_batch"]) == (8704, 1)
    # one device with the per-device rows plans the same sampler program as the preset on 8 devices
    for sp in (re4, fr4, d8):
        cfg = DW.model_from(sp["model"])
        P, T = sp["prompt_len"], sp["budget"]
        one = PL.plan(cfg, rows=sp["rows"], width=P + 2 * T, prompt_len=P, max_new_tokens=T,
                      cache_slots=sp["cache_slots"], sampling_bytes=2)
        assert one.sampling_total == sp["preset_plan_sampling_bytes"]


@pytest.mark.slow  # a hung part waits out its 10 s timeout; the fast tier keeps the stopped-mid-part test below
def test_a_killed_crashed_or_hung_part_leaves_the_finished_parts(tmp_path):
    doc, stdout = _run(tmp_path, "--parts", "env,update_4b_cudnn,reroll_4b,fresh_4b,decode_8b", "--part-timeout-s", "10",
                       timeout=400, **{DW.INJECT_VAR: "reroll_4b:kill,fresh_4b:raise,decode_8b:hang"})
    p = doc["parts"]
    assert list(p) == ["env", "update_4b_cudnn", "reroll_4b", "fresh_4b", "decode_8b"], stdout
    env = p["env"]
    assert env["status"] == "ok" and env["backend"] == "cpu" and doc["device_kind"] == env["device_kind"]
    assert env["jax"] and env["jaxlib"] and math.isfinite(env["measured_copy_bytes_per_s"])
    assert p["update_4b_cudnn"]["status"] == "skipped" and "GPU" in p["update_4b_cudnn"]["reason"]
    assert p["reroll_4b"]["status"] == "failed" and "signal 9" in p["reroll_4b"]["error"]
    assert p["fresh_4b"]["status"] == "failed" and "injected" in p["fresh_4b"]["error"]
    assert p["decode_8b"]["status"] == "failed" and "timed out" in p["decode_8b"]["error"]
    assert doc["status"] == "failed" and doc["shapes"]["parts"]["reroll_4b"]["rows"] == 2  # tiny shapes


def test_the_whole_run_stopped_mid_part_keeps_the_finished_parts_and_ends_the_child(tmp_path):
    out = tmp_path / "w.json"
    p = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "device_window.py"), "--out", str(out), "--cpu",
                          "--parts", "update_4b_cudnn,ps_step", "--workdir", str(tmp_path / "wd")],
                         env=_env(PYTHONPATH=str(ROOT), **{DW.INJECT_VAR: "ps_step:hang"}), cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not (out.exists() and "update_4b_cudnn" in json.loads(out.read_text())["parts"]):
        time.sleep(0.5)
    time.sleep(2)  # ps_step's child is hanging now
    p.send_signal(signal.SIGTERM)  # what the wrapper's `timeout` sends
    p.wait(timeout=60)
    doc = json.loads(out.read_text())
    assert doc["parts"]["update_4b_cudnn"]["status"] == "skipped"
    assert doc["parts"]["ps_step"]["status"] == "failed" and "stopped" in doc["parts"]["ps_step"]["error"]
    assert doc["stopped"].startswith("SIGTERM") and p.returncode == 1
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device_window.py"), "--out", str(out), "--cpu",
                          "--parts", "env,nope"], capture_output=True, text=True, timeout=120, env=_env())
    assert bad.returncode == 2 and "nope" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def _calibrated_ratio(pt, consts):
    from prs import plan as PL

    prog, cfg, kw, peak = pt
    p = PL.plan(cfg, **kw, constants=consts)
    return (p.update_total if prog == "update" else p.sampling_total) / peak


@pytest.mark.skipif(not H100, reason="no benchmarks/device/device_check_h100_*.json")
def test_calibrated_constants_from_the_h100_window_sit_within_1_2x_above_its_peaks_and_switch_nothing():
    from prs import plan as PL

    before = PL.constants()
    res = DW.calibrate_files(H100, margin=1.05)
    assert PL.constants() == before == res["defaults"]  # nothing switched
    pts = [p for f in H100 for p in DW.calibration_points(json.loads(f.read_text()))]
    progs = [p[0] for p in pts]
    assert progs.count("update") == 3 and progs.count("sampling") == 2  # xla twice, cudnn; fresh, re-roll
    ratios = [_calibrated_ratio(p, res["constants"]) for p in pts]
    assert min(ratios) == pytest.approx(1.05, abs=1e-6) and all(1.05 - 1e-6 <= r <= 1.2 for r in ratios), ratios
    for prog in ("update", "sampling"):  # the tightest point of each program sits at the margin
        mine = [r for r, p in zip(ratios, pts) if p[0] == prog]
        assert min(mine) == pytest.approx(1.05, abs=1e-6) and res[prog]["within"]
        assert 0 < res[prog]["factor"] < 1  # the CPU-fitted planner was above the GPU's peaks
    old = [_calibrated_ratio(p, None) for p in pts]  # the defaults: 1.4-1.8x above (benchmarks/README.md)
    assert all(1.4 < r < 1.8 for r in old), old
    with pytest.raises(ValueError, match="margin"):
        PL.calibrate(pts, margin=0.9)
    with pytest.raises(ValueError, match="unknown constants"):
        PL.plan(pts[0][1], **pts[0][2], constants={"C_X": 1.0})


@pytest.mark.slow
def test_cpu_dry_run_fills_every_field(tmp_path):
    from prs import plan as PL

    doc, stdout = _run(tmp_path)
    p = doc["parts"]
    assert list(p) == list(DW.PARTS) and doc["status"] == "ok", stdout
    assert p["update_4b_cudnn"]["status"] == "skipped"
    bw = p["env"]["measured_copy_bytes_per_s"]
    for name in ("reroll_4b", "fresh_4b", "decode_8b"):
        s, sp = p[name], doc["shapes"]["parts"][name]
        assert s["status"] == "ok" and s["rows"] == sp["rows"] and s["cache_slots"] == sp["cache_slots"]
        t1, t2 = s["decode_budgets"]
        assert s["generated_tokens"] == {str(t1): s["rows"] * t1, str(t2): s["rows"] * t2}
        for k in ("roofline_tokens_per_s", "compile_s", "planner_bytes", "compiled_bytes"):
            assert math.isfinite(s[k]) and s[k] > 0, (name, k, s[k])
        # the two budgets' difference: at tiny CPU shapes a loaded machine's timer noise can exceed it;
        # then the driver says so (decode_resolved False, tokens/s NaN), never a negative rate
        assert math.isfinite(s["decode_s"]) and s["decode_resolved"] == (s["decode_s"] > 0)
        if s["decode_resolved"]:
            assert s["decode_tokens_per_s"] > 0 and math.isfinite(s["roofline_fraction"])
        else:
            assert math.isnan(s["decode_tokens_per_s"])
        assert s["peak_bytes"] is None and s["hbm_bytes_per_s"] == bw  # CPU: no allocator stats, measured bandwidth
        cfg = DW.model_from(s["plan_model"])
        # independent byte count of one decode step: bf16 weights once + K, V of every slot
        shapes = cfg.param_shapes()
        layer = sum(math.prod(x.shape) for x in shapes["layers"].values() if len(x.shape) == 3)
        head = math.prod(shapes["lm_head" if "lm_head" in shapes else "embed_tokens"].shape)
        kv = 2 * cfg.n_layers * s["rows"] * s["cache_slots"] * cfg.n_kv_heads * cfg.head_dim * 2
        assert s["step_bytes"] == pytest.approx(2 * (layer + head) + kv)
        assert s["roofline_tokens_per_s"] == pytest.approx(s["rows"] * bw / s["step_bytes"])
        if s["decode_resolved"]:
            assert s["decode_tokens_per_s"] == pytest.approx(s["rows"] * (t2 - t1) / s["decode_s"])
        assert s["planner_bytes"] == PL.plan(cfg, **s["plan_kwargs"]).sampling_total
    u = p["update_4b_xla"]
    assert u["status"] == "ok" and 1 <= u["layers"] <= u["layers_of"] and u["micro_batches"] == 2
    cfg = DW.model_from(u["plan_model"])
    layer = sum(math.prod(x.shape) for x in cfg.param_shapes()["layers"].values() if len(x.shape) == 3)
    head = math.prod(cfg.param_shapes()["embed_tokens"].shape)
    attn = lambda n: 4 * (n / 2) * cfg.n_heads * cfg.head_dim * cfg.n_layers  # noqa: E731
    want = 3 * sum((2 * (layer + head) + attn(n - 1)) * (n - 1) for n in u["row_lengths"])
    assert u["model_flops_real"] == pytest.approx(want) and u["real_tokens"] == sum(n - 1 for n in u["row_lengths"])
    assert u["mfu_real"] == pytest.approx(want / u["step_s"] / p["env"]["measured_matmul_flops"])
    assert u["planner_bytes"] == PL.plan(cfg, **u["plan_kwargs"]).update_total and u["compiled_bytes"] > 0
    assert math.isfinite(u["loss"]) and u["grad_norm"] > 0
    ps = p["ps_step"]
    assert ps["status"] == "ok" and len(ps["steps"]) == 2
    for st in ps["steps"]:
        ph = st["phases_s"]
        assert set(ph) == {"rollout", "reroll", "scoring", "update", "checkpoint", "other"}
        assert all(v > 0 for k, v in ph.items() if k != "other") and ph["other"] >= 0
        assert st["groups_rerolled"] >= 1 and st["tokens_replayed"] > 0 and st["tokens_generated"] > 0
    assert ps["checkpoint_bytes"] > 0
