"""Gap statistics (prs.analysis.gap, issue #16 item 3): hand-computed numpy cases, a synthetic curve
set with a known 2x speed-up, censoring, pairing, degenerate and bad inputs, and the Run wrapper."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from prs import analysis as an


def sat(s, tau, y0=0.2, y1=0.8):
    return y0 + (y1 - y0) * (1.0 - np.exp(-np.asarray(s, float) / tau))


def test_gap_levels_hand_computed():
    steps = np.arange(6) * 10
    y = np.array([[0.1, 0.2, 0.3, 0.5, 0.6, 0.7],
                  [0.3, 0.2, 0.5, 0.5, 0.8, np.nan]])
    # seed mean: 0.2, 0.2, 0.4, 0.5, 0.7, 0.7 (last point from seed 0 only)
    lv = an.gap_levels(steps, y, k=2, fractions=(0.5, 0.8))
    assert lv["start"] == pytest.approx(0.2) and lv["final"] == pytest.approx(0.7)
    assert lv["levels"][0.5] == pytest.approx(0.45) and lv["levels"][0.8] == pytest.approx(0.6)
    assert not lv["degenerate"]


def test_crossing_steps_interpolates_and_censors():
    steps = np.array([0, 10, 20, 30])
    y = np.array([[0.1, 0.3, 0.5, 0.7],        # crosses 0.4 between 10 and 20 -> 15
                  [0.5, 0.6, 0.7, 0.8],        # already there at step 0
                  [0.1, 0.2, 0.3, 0.35],       # never: censored
                  [0.1, np.nan, 0.45, 0.5]])   # point before missing -> the crossing point itself
    x, c = an.crossing_steps(steps, y, 0.4)
    np.testing.assert_allclose(x, [15.0, 0.0, np.inf, 20.0])
    np.testing.assert_array_equal(c, [False, False, True, False])
    x2, _ = an.crossing_steps(steps, y[:1], 0.65)   # 20 + (0.15 / 0.2) * 10
    assert x2[0] == pytest.approx(27.5)


def test_cost_auc_window_hand_computed():
    cum = np.array([[0.0, 1.0, 3.0, 6.0], [0.0, 2.0, np.nan, np.nan]])
    np.testing.assert_allclose(an.cost_at_steps(cum, np.array([1.5, np.inf])), [2.0, np.inf])
    assert np.isnan(an.cost_at_steps(cum, np.array([0.0, 5.0]))[1])
    steps = np.array([0, 10, 30])
    y = np.array([[0.0, 1.0, 1.0], [0.5, 0.5, np.nan]])
    a = an.auc(steps, y, horizon=30)
    assert a[0] == pytest.approx((0.5 * 10 + 1.0 * 20) / 30) and np.isnan(a[1])
    assert an.auc(steps, y, horizon=10)[1] == pytest.approx(0.5)
    np.testing.assert_allclose(an.window_mean_at(steps, y, at_step=10, k=2), [0.5, 0.5])


def synthetic(S=8, speed=2.0, noise=0.01, seed_sd=0.05, E=81, every=5, tau=60.0, rng=0):
    """400 steps, evaluation every 5 (the sweep's plan). Baseline y = sat(s) per seed with a seed offset; the method is the same curve time-compressed."""
    r = np.random.default_rng(rng)
    steps = np.arange(E) * every
    off = seed_sd * r.normal(size=(S, 1))                      # shared by both methods of a seed (warm start)
    yb = sat(steps, tau)[None] + off + noise * r.normal(size=(S, E))
    ym = sat(speed * steps, tau)[None] + off + noise * r.normal(size=(S, E))
    return steps, yb, ym


def test_time_compressed_curve_gives_speedup_two_with_ci_covering_two():
    steps, yb, ym = synthetic()
    T = steps[-1] + 1
    tok = np.broadcast_to(np.arange(T + 1) * 100.0, (yb.shape[0], T + 1))   # 100 tokens per step for both
    wall = np.broadcast_to(np.arange(T + 1) * 1.0, (yb.shape[0], T + 1))
    tok_m = tok * 1.5                                                       # method steps cost 1.5x tokens
    res = an.gap_compare(steps, yb, ym, cost_base={"tokens": tok, "wall": wall},
                         cost_meth={"tokens": tok_m, "wall": wall}, n_boot=1000)
    for f in (0.5, 0.8):
        sp = res[f]["speedup_steps"]
        assert sp["lo"] <= 2.0 <= sp["hi"] and 1.8 < sp["value"] < 2.2 and sp["lo"] > 1.6, (f, sp)
        assert res[f]["bound"] == "exact" and res[f]["n_censored_method"] == 0
        assert res[f]["speedup_tokens"]["value"] == pytest.approx(sp["value"] / 1.5, rel=1e-6)
        assert res[f]["speedup_wall"]["value"] == pytest.approx(sp["value"], rel=1e-6)
        mc = res[f]["mean_curve"]
        assert mc["lo"] <= 2.0 <= mc["hi"] and 1.8 < mc["value"] < 2.2, mc
    # start / final = means of the first / last 3 points of the (noiseless) baseline law
    gap = sat([390, 395, 400], 60.0).mean() - sat([0, 5, 10], 60.0).mean()
    assert res["levels"]["gap"] == pytest.approx(gap, abs=0.01)
    assert res["auc"]["improvement"]["lo"] > 0 and res["equal_step"]["improvement"]["value"] == pytest.approx(0, abs=0.02)


def test_no_speedup_when_method_equals_baseline_in_law():
    steps, yb, ym = synthetic(speed=1.0, rng=3)
    sp = an.gap_compare(steps, yb, ym, n_boot=1000)[0.8]["speedup_steps"]
    assert sp["lo"] <= 1.0 <= sp["hi"]


def test_pairing_narrows_the_ci_when_seeds_share_a_warm_start():
    steps, yb, ym = synthetic(seed_sd=0.08, noise=0.005, rng=1)
    res = an.gap_compare(steps, yb, ym, n_boot=1000)[0.5]
    b, m = np.array(res["base_steps"]), np.array(res["method_steps"])
    unp = an.bootstrap_ratio_of_means(b, m, paired=False, n_boot=1000)
    assert res["speedup_steps"]["paired"] is True
    assert res["speedup_steps"]["hi"] - res["speedup_steps"]["lo"] < 0.7 * (unp["hi"] - unp["lo"])


def test_censored_method_seed_is_reported_and_bounds_the_speedup():
    steps, yb, ym = synthetic(rng=2, seed_sd=0.0)
    ym[0] = yb[0, 0]                      # seed 0 of the method never learns
    r = an.gap_compare(steps, yb, ym, n_boot=200)[0.8]
    assert r["n_censored_method"] == 1 and r["bound"] == "upper" and math.isinf(r["method_steps"][0])
    assert r["speedup_steps_per_seed"]["bound"] == "upper"
    # per seed: restricted means, the censored seed counted at the horizon (here the last evaluation)
    b = np.array(r["base_steps"]); m = np.array(r["method_steps"]); m[0] = steps[-1]
    assert r["horizon"] == steps[-1]
    assert r["speedup_steps_per_seed"]["value"] == pytest.approx(b.mean() / m.mean())
    # the headline crosses the seed-mean curves: the method's mean curve does reach the level
    assert r["mean_curve_censored"] == [False, False] and r["speedup_steps"]["bound"] == "exact"
    xb, _ = an.crossing_steps(steps, yb.mean(0)[None], r["level"])
    xm, _ = an.crossing_steps(steps, ym.mean(0)[None], r["level"])
    assert r["speedup_steps"]["value"] == pytest.approx(xb[0] / xm[0])


def test_degenerate_and_bad_inputs():
    steps = np.arange(8)
    flat = np.full((3, 8), 0.5)
    res = an.gap_compare(steps, flat, flat, n_boot=50)
    assert res["levels"]["degenerate"] and math.isnan(res[0.8]["speedup_steps"]["value"])
    with pytest.raises(ValueError, match="k must"):
        an.gap_levels(steps, flat, k=0)
    with pytest.raises(ValueError, match="fractions"):
        an.gap_levels(steps, flat, fractions=(1.5,))
    with pytest.raises(ValueError, match="2k"):
        an.gap_levels(steps[:3], flat[:, :3], k=2)
    with pytest.raises(ValueError, match="equal shapes"):
        an.gap_compare(steps, flat, flat[:2])
    with pytest.raises(ValueError, match="strictly increasing"):
        an.crossing_steps(steps[::-1], flat, 0.5)
    with pytest.raises(ValueError, match="at_step"):
        an.window_mean_at(steps, flat, at_step=3.5)


def write_run(root, name, method, seed, speed, steps=100, every=5):
    d = root / name
    d.mkdir(parents=True)
    off = 0.03 * np.random.default_rng(seed).normal()
    lines = []
    for s in range(steps + 1):
        if s % every == 0:
            lines.append({"kind": "eval", "step": s, "eval/pass_at_1": float(sat(speed * s, 20.0) + off)})
        if s < steps:
            lines.append({"kind": "train", "step": s, "tokens_generated": 100, "time_sample": 0.5,
                          "time_batch": 0.1, "time_update": 0.4, "k_hist": [0] * 9})
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (d / "summary.json").write_text(json.dumps({"steps": steps, "config": {"method": {"name": method}, "seed": seed,
                                                                            "task": {"name": "toy"}, "steps": steps}}))


def test_gap_task_on_run_directories(tmp_path):
    for s in range(4):
        write_run(tmp_path, f"toy-baseline-s{s}", "baseline", s, 1.0)
        write_run(tmp_path, f"toy-fast-s{s}", "fast", s, 2.0)
    write_run(tmp_path, "toy-fast-s9", "fast", 9, 2.0)        # no baseline partner: listed, not used
    runs = an.group_runs(an.load_runs(tmp_path))["toy"]
    res = an.gap_task(runs, n_boot=300)["methods"]["fast"]
    assert res["paired_seeds"] == [0, 1, 2, 3] and res["unpaired_seeds"] == [9]
    assert res[0.8]["speedup_steps"]["value"] == pytest.approx(2.0, rel=0.08)
    assert res[0.8]["speedup_tokens"]["value"] == pytest.approx(res[0.8]["speedup_steps"]["value"], rel=1e-6)


def test_k_start_separate_from_k():
    steps = np.arange(6) * 10
    y = np.array([[0.1, 0.3, 0.5, 0.6, 0.7, 0.8]])
    lv = an.gap_levels(steps, y, k=2, k_start=1)
    assert lv["start"] == pytest.approx(0.1) and lv["final"] == pytest.approx(0.75) and lv["k_start"] == 1
    with pytest.raises(ValueError, match="k must"):
        an.gap_levels(steps, y, k=2, k_start=0)
