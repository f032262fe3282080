"""The partial-pass trap analysis (experiments.studies.trap, experiments.analyze --trap): paired bootstrap
against a numpy reference, known answers on synthetic records, partial sweeps, the theory's closed
form (RLOO), and the results-page section from a fixture of real records (tests/data/trap_records:
4 arms x target p_A 0.1 x seeds 0-1 of the #18 sweep at commit 947315b, train lines stripped to the
keys the analysis reads)."""
from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from experiments.studies import trap
from prs.analysis import stats
from prs.analysis.tables import to_jsonable

FIXTURE = pathlib.Path(__file__).parents[2] / "data" / "trap_records"
STEPS = np.arange(0, 61, 10)  # evaluation steps of the sweep
T = 60


def write_trap_run(root: pathlib.Path, arm: str, p: float, seed: int, *, evals: dict[str, np.ndarray],
                   contrast: np.ndarray, tokens: np.ndarray, complete: bool = True, done: int = T,
                   commit: str = "c0ffee" * 6 + "abcd") -> pathlib.Path:
    """A run directory in prs.rl.runner's format: config.json always, summary.json if complete,
    ``done`` train lines and the evaluations up to them; evals {metric: [E]}."""
    reward = arm.split("_")[0]
    mode = "ps_ada" if arm.endswith("_ps") else "baseline"
    cfg = {"task": {"name": "trap", "params": {"reward": reward, "demo_root_cause_accuracy": p, "n_surface": 7,
                                               "n_semantic": 3}},
           "method": {"name": mode, "mode": mode, "schedule": "next_visit"}, "seed": seed, "steps": T,
           "algo": {"tasks_per_step": 8, "group_size": 8, "estimator": "rloo", "pool_size": 64},
           "eval": {"every": 10, "count": 64, "samples": 2}, "model": {"preset": "tiny", "overrides": {"d_model": 64, "n_layers": 2}},
           "tag": f"-{reward}-pa{p}"}
    d = root / f"trap_{arm}-pa{p}-s{seed}"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "provenance.jsonl").write_text(json.dumps({"start_step": 0, "commit": commit, "dirty": False}) + "\n")
    lines = []
    for s in range(done + 1):
        if s % 10 == 0:
            e = s // 10
            lines.append({"kind": "eval", "step": s, **{key: (None if not math.isfinite(evals[m][e]) else float(evals[m][e]))
                                                        for m, key in trap.EVAL_METRICS.items()}})
        if s == done:
            break
        lines.append({"kind": "train", "step": s, "groups_mixed": int(round(8 * contrast[s])),
                      "tokens_generated": float(tokens[s]), "tokens_sampled": float(tokens[s]), "k_hist": [0] * 9})
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    if complete:
        (d / "summary.json").write_text(json.dumps({"config": cfg, "steps": T}))
    return d


def synthetic_evals(rng, *, hack_end: float, tr_end: float, seed_effect: float) -> dict[str, np.ndarray]:
    """Linear curves from a shared start plus a per-seed offset (the same in every arm of one seed)."""
    f = STEPS / 60.0
    hack = 0.5 + (hack_end - 0.5) * f + seed_effect
    tr = 0.02 + (tr_end - 0.02) * f + seed_effect / 10
    att = 1.0 - hack
    return {"hack": hack, "true_resolution": tr, "root_attempt": att, "p_root": tr / att,
            "fraction_reward": 0.6 + 0.1 * f + 0 * rng.random()}


def _sweep(tmp_path, *, seeds=range(6), p=0.1, arms=trap.ARMS, tokens=None):
    rng = np.random.default_rng(0)
    effects = {s: 0.05 * rng.standard_normal() for s in seeds}
    ends = {"fraction": (0.9, 0.0), "binary": (0.1, 0.3), "binary_ps": (0.1, 0.4), "fraction_ps": (0.9, 0.01)}
    for arm in arms:
        for s in seeds:
            tok = np.full(T, 100.0 if not arm.endswith("_ps") else 80.0) if tokens is None else tokens
            write_trap_run(tmp_path, arm, p, s, evals=synthetic_evals(rng, hack_end=ends[arm][0], tr_end=ends[arm][1],
                                                                      seed_effect=effects[s]),
                           contrast=np.full(T, 0.25 if arm.startswith("binary") else 0.75), tokens=tok)
    return effects


# ------------------------------------------------------------------ the bootstrap against numpy


def _ref_percentile_ci(x: np.ndarray, n_boot: int, seed: int, level: float = 0.95):
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_boot, x.size))
    return np.quantile(x[idx].mean(1), [(1 - level) / 2, (1 + level) / 2])


def test_paired_diff_is_the_bootstrap_of_the_seedwise_differences():
    rng = np.random.default_rng(3)
    u = rng.normal(0, 1.0, 8)                      # a large per-seed effect shared by both arms
    a, b = u + 0.1 + 0.01 * rng.standard_normal(8), u
    d = trap.paired_diff(a, b, seeds=range(8), n_boot=4000, seed=5)
    lo, hi = _ref_percentile_ci(a - b, 4000, 5)
    assert d["value"] == pytest.approx(np.mean(a - b), abs=1e-12)
    assert (d["lo"], d["hi"]) == pytest.approx((lo, hi), abs=1e-12)
    unpaired = stats.bootstrap_diff_of_means(a, b, paired=False, n_boot=4000, seed=5)
    assert d["hi"] - d["lo"] < 0.1 * (unpaired["hi"] - unpaired["lo"])  # pairing cancels the seed effect
    # a NaN in either arm drops that seed from both, and says so
    a2 = a.copy()
    a2[2] = np.nan
    d2 = trap.paired_diff(a2, b, seeds=range(8), n_boot=500)
    assert d2["dropped"] == [2] and d2["seeds"] == [0, 1, 3, 4, 5, 6, 7]
    assert d2["value"] == pytest.approx(np.mean(np.delete(a - b, 2)), abs=1e-12)
    with pytest.raises(ValueError, match="paired samples"):
        trap.paired_diff(a, b[:7])


def test_paired_curves_resample_every_arm_with_the_same_seeds():
    rng = np.random.default_rng(1)
    y = rng.random((3, 5, 4))                      # [A, S, E]
    y[1, 2, 3] = np.nan
    pc = trap.paired_curves(y, n_boot=300, seed=7)
    idx = np.random.default_rng(7).integers(0, 5, size=(300, 5))
    for a in range(3):
        means = np.array([np.nanmean(y[a][i], axis=0) for i in idx])       # [n_boot, E]
        assert pc["mean"][a] == pytest.approx(np.nanmean(y[a], axis=0), abs=1e-12)
        assert pc["lo"][a] == pytest.approx(np.nanquantile(means, 0.025, axis=0), abs=1e-12)
        assert pc["hi"][a] == pytest.approx(np.nanquantile(means, 0.975, axis=0), abs=1e-12)
    assert pc["n"][1].tolist() == [5, 5, 5, 4]
    # one arm = the 2-D band (the extension of stats.bootstrap_band keeps its old behaviour)
    m, lo, hi = stats.bootstrap_band(y[0], n_boot=300, seed=7)
    assert np.allclose(lo, pc["lo"][0]) and np.allclose(hi, pc["hi"][0]) and np.allclose(m, pc["mean"][0])
    with pytest.raises(ValueError, match=r"\[A, S, E\]"):
        trap.paired_curves(y[0])


def test_ols_slope_and_drift_on_known_lines():
    s = np.array([0, 10, 20, 30.0])
    y = np.stack([0.1 + 0.002 * s, 0.5 - 0.01 * s, np.array([0.3, np.nan, 0.5, np.nan])])
    assert trap.ols_slope(s, y) == pytest.approx([0.002, -0.01, 0.01])
    assert trap.drift(s, y[:2]).tolist() == pytest.approx([0.06, -0.3])
    assert trap.drift(s, y[:2], early=True).tolist() == pytest.approx([0.02, -0.1])
    assert np.isnan(trap.ols_slope(s, np.array([[1.0, np.nan, np.nan, np.nan]])))[0]


# ------------------------------------------------------------------ known answers on synthetic sweeps


def test_analysis_recovers_the_synthetic_drifts_and_pairs_by_seed(tmp_path):
    effects = _sweep(tmp_path)
    runs = trap.load_trap_runs(tmp_path)
    assert len(runs) == 24 and all(r.complete for r in runs)
    res = trap.analyze_trap(runs, n_boot=500, theory=False)
    c = res["cells"]["0.1"]
    assert c["arms"] == list(trap.ARMS) and c["balanced_seeds"] == list(range(6))
    fa, bi = c["arm"]["fraction"], c["arm"]["binary"]
    # hack: 0.5 + seed effect -> 0.9 (fraction) / 0.1 (binary): every seed drifts by exactly +0.4 / -0.4
    assert fa["hack"]["delta"]["value"] == pytest.approx(0.4, abs=1e-9)
    assert fa["hack"]["delta"]["lo"] == pytest.approx(0.4, abs=1e-9) and fa["hack"]["drift"] == "up"
    assert bi["hack"]["drift"] == "down" and fa["hack"]["delta_early"]["value"] == pytest.approx(0.4 / 6, abs=1e-9)
    # the per-seed effect cancels in the paired difference only
    d = c["pairs"]["binary_ps-binary"]
    assert d["seeds"] == list(range(6))
    assert d["true_resolution_final"]["value"] == pytest.approx(0.1, abs=1e-9)
    assert d["true_resolution_final"]["hi"] - d["true_resolution_final"]["lo"] < 1e-9
    final_ps = np.array([0.4 + effects[s] / 10 for s in range(6)])
    lo, hi = _ref_percentile_ci(final_ps, 500, 0)
    assert (c["arm"]["binary_ps"]["true_resolution"]["final"]["lo"],
            c["arm"]["binary_ps"]["true_resolution"]["final"]["hi"]) == pytest.approx((lo, hi), abs=1e-12)
    # AUC of a linear curve = its midpoint; slope per 10 steps
    assert c["arm"]["binary"]["true_resolution"]["auc"]["value"] == pytest.approx(
        np.mean([0.16 + effects[s] / 10 for s in range(6)]), abs=1e-9)
    assert c["arm"]["binary"]["true_resolution"]["slope_per_10"]["value"] == pytest.approx(0.28 / 6, abs=1e-9)
    assert c["arm"]["binary"]["contrast"]["all"]["value"] == pytest.approx(0.25)
    assert c["pairs"]["binary-fraction"]["contrast_all"]["value"] == pytest.approx(-0.5)
    assert d["tokens_generated_ratio"]["value"] == pytest.approx(0.8)
    # warm start pooled over seeds: p_A = sum(tr) / sum(attempts) at step 0
    tr0 = np.array([0.02 + effects[s] / 10 for s in range(6)])
    att0 = np.array([0.5 - effects[s] for s in range(6)])
    assert c["warm_start"]["p_A"]["value"] == pytest.approx(tr0.sum() / att0.sum(), abs=1e-12)
    assert c["warm_start"]["max_step0_mismatch"] == 0.0
    # binary_ps is faster to binary's gap: linear 0.02 -> 0.4 vs 0.02 -> 0.3 (seed offsets cancel in the level only
    # on average, so compare with the curves' own crossing of the mean level)
    g = d["gap"]["0.5"]
    assert g["speedup_steps"]["value"] > 1.0
    json.dumps(to_jsonable(res), allow_nan=False)  # strict JSON
    # the full design of this synthetic sweep has no gap; the design (3 p_A x 8 seeds) has
    assert trap.design_gaps(res, {"p": (0.1,), "arms": trap.ARMS, "seeds": 6}) == []
    assert "Incomplete sweep" not in trap.trap_section(res, design={"p": (0.1,), "arms": trap.ARMS, "seeds": 6})
    assert "fraction at p_A 0.3: 0/8" in trap.trap_section(res)


def test_partial_sweep_reports_n_and_pairs_only_common_seeds(tmp_path):
    _sweep(tmp_path, seeds=range(4), arms=("fraction", "binary"))
    rng = np.random.default_rng(9)
    for s in (0, 1, 3):  # binary_ps lacks seed 2 ...
        write_trap_run(tmp_path, "binary_ps", 0.1, s, evals=synthetic_evals(rng, hack_end=0.1, tr_end=0.4, seed_effect=0.0),
                       contrast=np.full(T, 0.3), tokens=np.full(T, 90.0))
    # ... whose run is still going (no summary, 25 of 60 steps)
    write_trap_run(tmp_path, "binary_ps", 0.1, 2, evals=synthetic_evals(rng, hack_end=0.1, tr_end=0.9, seed_effect=0.0),
                   contrast=np.full(T, 0.3), tokens=np.full(T, 90.0), complete=False, done=25)
    # and p_A 0.5 has only one fraction seed
    write_trap_run(tmp_path, "fraction", 0.5, 0, evals=synthetic_evals(rng, hack_end=0.2, tr_end=0.8, seed_effect=0.0),
                   contrast=np.full(T, 0.5), tokens=np.full(T, 100.0))
    runs = trap.load_trap_runs(tmp_path)
    partial = [r for r in runs if not r.complete]
    assert [r.name for r in partial] == ["trap_binary_ps-pa0.1-s2"]
    assert partial[0].describe == "partial (in progress or killed): 25/60 steps"
    res = trap.analyze_trap(runs, n_boot=200, theory=False)
    c = res["cells"]["0.1"]
    assert c["seeds"] == {"fraction": [0, 1, 2, 3], "binary": [0, 1, 2, 3], "binary_ps": [0, 1, 3]}
    assert c["balanced_seeds"] == [0, 1, 3] and c["arm"]["binary_ps"]["n"] == 3 and c["arm"]["binary"]["n"] == 4
    assert c["pairs"]["binary-fraction"]["seeds"] == [0, 1, 2, 3]
    d = c["pairs"]["binary_ps-binary"]
    assert d["seeds"] == [0, 1, 3] and d["only_b"] == [2]
    # the partial run's 0.9 never leaks in: the final true resolution of binary_ps is the complete seeds' 0.4
    assert c["arm"]["binary_ps"]["true_resolution"]["final"]["value"] == pytest.approx(0.4)
    c5 = res["cells"]["0.5"]
    assert c5["arms"] == ["fraction"] and c5["pairs"] == {}
    assert math.isnan(c5["arm"]["fraction"]["hack"]["delta"]["lo"])  # one seed: no CI, never a fake one
    text = trap.trap_section(res, command="cmd", commit="abc", dirty=False, cuts=trap.budget_cuts(res))
    assert "trap_binary_ps-pa0.1-s2 (partial (in progress or killed): 25/60 steps)" in text
    assert "no complete binary run yet" in text and "| 0.5 | fraction | 1 |" in text
    assert "60 RL steps" in text and "64 problems x 2 samples" in text
    assert "binary_ps at p_A 0.1: 3/8" in text and "Incomplete sweep: a partial result" in text
    json.dumps(to_jsonable(res), allow_nan=False)


def test_two_complete_runs_of_one_cell_and_seed_are_refused(tmp_path):
    _sweep(tmp_path / "a", seeds=(0,), arms=("binary",))
    _sweep(tmp_path / "b", seeds=(0,), arms=("binary",))
    with pytest.raises(ValueError, match="two complete runs for arm binary"):
        trap.trap_cells(trap.load_trap_runs(tmp_path))


def test_arm_of_refuses_an_unknown_reward():
    assert trap.arm_of({"task": {"params": {"reward": "binary"}}, "method": {"mode": "ps_ada"}}) == "binary_ps"
    with pytest.raises(ValueError, match="task.params.reward"):
        trap.arm_of({"task": {"params": {"reward": "dense"}}})


# ------------------------------------------------------------------ theory


def test_theory_predictions_match_the_rloo_closed_form():
    """RLOO: E[A | surface] = r_B - E[mean of the others] = (1 - q)(r_B - E[R|A]); break-even 0.4."""
    for p, q in ((0.1, 0.5), (0.3, 0.8), (0.6, 0.4)):
        t = trap.theory_predictions(p, q, group_size=8, estimator="rloo")
        era = p + (1 - p) * 0.5
        assert t["break_even"] == pytest.approx(0.4)
        assert t["adv_surface"] == pytest.approx((1 - q) * (0.7 - era), abs=1e-9)
        pi = (1 - q) * p
        assert t["contrast_binary"] == pytest.approx(1 - pi**8 - (1 - pi) ** 8, abs=1e-9)
    assert math.isnan(trap.theory_predictions(math.nan, 0.5)["adv_surface"])


# ------------------------------------------------------------------ the section from real records, the CLI


def test_section_renders_from_the_fixture_records(tmp_path):
    from experiments import analyze

    runs = trap.load_trap_runs(FIXTURE)
    assert len(runs) == 8 and all(r.complete for r in runs) and {r.arm for r in runs} == set(trap.ARMS)
    page = tmp_path / "README.md"
    page.write_text("# Results\n\nhand-written text\n")
    out = tmp_path / "trap"
    analyze.main([str(FIXTURE), "--trap", "--out", str(out), "--page", str(page), "--n-boot", "200"])
    text = (out / "trap.md").read_text()
    assert {p.name for p in out.glob("*.png")} == {"trap_p0.1.png", "trap_theory.png"}
    for needle in ("at commit", "947315bb6f", "(a) Does the fraction reward drift", "(b) Does the binary reward stall",
                   "(c) Does binary + PS", "What was cut", "| 0.1 | binary_ps-binary | 2 |", "E[adv \\| surface]"):
        assert needle in text, needle
    res = json.loads((out / "trap.json").read_text())["result"]
    # the fixture's fraction runs drift to surface patches at p_A 0.1: hack 0.52/0.59 -> ~1.0 in both seeds
    assert res["cells"]["0.1"]["arm"]["fraction"]["hack"]["drift"] == "up"
    assert res["cells"]["0.1"]["theory"]["at_measured"]["adv_surface"] > 0
    first = page.read_text()
    assert first.startswith("# Results\n\nhand-written text\n") and first.count(analyze.TRAP_BEGIN) == 1
    assert "](trap/trap_theory.png)" in first  # image links relative to the page
    analyze.main([str(FIXTURE), "--trap", "--out", str(out), "--page", str(page), "--n-boot", "200", "--no-figures"])
    assert page.read_text().count(analyze.TRAP_BEGIN) == 1 and "hand-written text" in page.read_text()


def test_replace_section_and_collect_records(tmp_path):
    from experiments.analyze import TRAP_BEGIN, TRAP_END, replace_section

    once = replace_section("head\n", "S1")
    assert once == f"head\n\n{TRAP_BEGIN}\nS1\n{TRAP_END}\n"
    assert replace_section(once + "tail\n", "S2") == f"head\n\n{TRAP_BEGIN}\nS2\n{TRAP_END}\ntail\n"
    with pytest.raises(ValueError, match="begin marker"):
        replace_section(f"x {TRAP_END}", "S")
    # records copied for committing (metrics gzipped) read back to the same arrays; partial runs stay behind
    _sweep(tmp_path / "src", seeds=(0,), arms=("binary",))
    rng = np.random.default_rng(0)
    write_trap_run(tmp_path / "src", "fraction", 0.1, 0, evals=synthetic_evals(rng, hack_end=0.9, tr_end=0.0, seed_effect=0),
                   contrast=np.full(T, 0.5), tokens=np.full(T, 1.0), complete=False, done=5)
    dirs = trap.collect_trap_records(tmp_path / "src", tmp_path / "dst")
    assert [d.name for d in dirs] == ["trap_binary-pa0.1-s0"]
    assert sorted(p.name for p in dirs[0].iterdir()) == ["config.json", "metrics.jsonl.gz", "provenance.jsonl",
                                                         "summary.json"]
    a, b = trap.load_trap_run(tmp_path / "src" / "trap_binary-pa0.1-s0"), trap.load_trap_run(dirs[0])
    assert b.complete and b.commits == a.commits
    for m in trap.EVAL_METRICS:
        assert np.array_equal(a.evals[m], b.evals[m], equal_nan=True)
    assert np.array_equal(a.contrast, b.contrast)


def test_the_sign_flip_is_read_across_the_break_even(tmp_path):
    """Fraction arm drifting up at a warm start below 0.4 and down above: the section says the flip holds;
    drifting up on both sides: it says there is no clean flip."""
    f = STEPS / 60.0
    def evals(p0, hack_end, s):
        hack = 0.5 + (hack_end - 0.5) * f + 0.01 * s
        att = 1.0 - hack
        return {"hack": hack, "root_attempt": att, "true_resolution": p0 * att, "p_root": np.full(f.size, p0),
                "fraction_reward": 0.6 + 0 * f}
    for s in range(3):
        for p, p0, end in ((0.1, 0.1, 0.9), (0.5, 0.6, 0.1)):
            write_trap_run(tmp_path / "flip", "fraction", p, s, evals=evals(p0, end, s), contrast=np.full(T, 0.5),
                           tokens=np.full(T, 1.0))
            write_trap_run(tmp_path / "noflip", "fraction", p, s, evals=evals(p0, 0.9, s), contrast=np.full(T, 0.5),
                           tokens=np.full(T, 1.0))
    flip = trap.analyze_trap(trap.load_trap_runs(tmp_path / "flip"), n_boot=200, theory=False)
    assert flip["cells"]["0.5"]["warm_start"]["p_A"]["value"] == pytest.approx(0.6)
    text = trap.trap_section(flip)
    assert "up at measured p_A 0.10 (target 0.1), down at measured p_A 0.60 (target 0.5)" in text
    assert "**yes**: it drifts up below and down above the break-even" in text
    noflip = trap.trap_section(trap.analyze_trap(trap.load_trap_runs(tmp_path / "noflip"), n_boot=200, theory=False))
    assert "**no clean flip at the break-even**" in noflip
