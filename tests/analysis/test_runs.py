"""Analysis of runs (prs.analysis, experiments.analyze): convergence steps on synthetic curves,
bootstrap coverage on known distributions, partial/killed runs, settled bucket rates, the CLI.
Synthetic run directories are written in ``prs.rl.runner``'s metrics.jsonl format; no training."""
from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from prs import analysis as an

KS = (1, 2, 6, 7)


def curve(steps, tau, y0=0.3, y1=0.9):
    """Saturating learning curve y0 + (y1 - y0)(1 - exp(-s / tau))."""
    return y0 + (y1 - y0) * (1.0 - np.exp(-np.asarray(steps, float) / tau))


def write_run(root: pathlib.Path, name: str, *, method: str, seed: int, steps: int, tau: float, eval_every: int = 10,
              killed_at: int | None = None, summary: bool = True, step_time: float = 1.0, tokens: int = 100,
              reroll: dict | None = None, config: bool = True, truncated_tail: bool = False, noise: float = 0.0):
    """A run directory like prs.rl.runner's; killed_at < steps stops after that many train lines."""
    d = root / name
    d.mkdir(parents=True)
    done = steps if killed_at is None else killed_at
    rng = np.random.default_rng(seed + 1000)
    lines = []
    for s in range(done + 1):
        if s % eval_every == 0 or (s == steps and killed_at is None):
            y = float(curve(s, tau) + noise * rng.normal())
            lines.append({"kind": "eval", "step": s, "eval/pass_at_1": y})
        if s == done:
            break
        rec = {"kind": "train", "step": s, "pass_rate": 0.5, "pass_rate_train": 0.5, "groups_rerolled": 0,
               "tokens_generated": tokens, "tokens_replayed": 0, "env_steps": 0, "time_sample": 0.5 * step_time,
               "time_batch": 0.1 * step_time, "time_update": 0.4 * step_time, "k_hist": [0] * 9}
        for k in KS:
            rate = None if reroll is None else reroll[k](s)
            rec.update({f"bucket/{k}/count": 0 if rate is None else 1 + (s + k) % 3,
                        f"bucket/{k}/reroll_pass_rate": rate, f"bucket/{k}/rho": 0.5, f"bucket/{k}/ema": 0.5})
        lines.append(rec)
    text = "".join(json.dumps(m) + "\n" for m in lines)
    if truncated_tail:
        text += '{"kind": "train", "step": 99'  # a write cut off by the kill
    (d / "metrics.jsonl").write_text(text)
    if summary and killed_at is None:
        cfg = {"method": {"name": method}, "seed": seed, "task": {"name": "toy"}, "steps": steps} if config else {}
        (d / "summary.json").write_text(json.dumps({"steps": steps, "config": cfg}))
    return d


# --------------------------------------------------------------------------- smoothing / reach


def test_moving_average_matches_python_reference_with_gaps():
    rng = np.random.default_rng(0)
    y = rng.uniform(size=(3, 11))
    y[1, 4] = np.nan
    y[2, :3] = np.nan
    for w in (1, 2, 3, 5, 20):
        ref = np.full(y.shape, np.nan)
        for i in range(y.shape[0]):
            for e in range(y.shape[1]):
                vals = [v for v in y[i, max(0, e - w + 1): e + 1] if not math.isnan(v)]
                ref[i, e] = sum(vals) / len(vals) if vals else math.nan
        np.testing.assert_allclose(an.moving_average(y, window=w), ref, equal_nan=True)
    with pytest.raises(ValueError, match="window"):
        an.moving_average(y, window=0)


@pytest.mark.parametrize("tau,level", [(30.0, 0.7), (50.0, 0.8), (10.0, 0.85)])
def test_first_reach_on_saturating_curves_matches_closed_form(tau, level):
    steps = np.arange(0, 201, 10)
    # y(s) = level  <=>  s* = -tau ln(1 - (level - y0)/(y1 - y0)); first eval step >= s*
    s_star = -tau * math.log(1 - (level - 0.3) / 0.6)
    expected = 10 * math.ceil(s_star / 10 - 1e-12)
    got, cens = an.first_reach(steps, curve(steps, tau), level)
    assert not cens and got == expected


def test_first_reach_censored_and_batched():
    steps = np.arange(0, 101, 10)
    y = np.stack([curve(steps, 20.0), curve(steps, 1e6)])   # the second never moves
    got, cens = an.first_reach(steps, y, 0.8)
    assert got[0] == 10 * math.ceil(-20 * math.log(1 - 0.5 / 0.6) / 10) and not cens[0]
    assert math.isinf(got[1]) and cens[1]
    with pytest.raises(ValueError, match="steps"):
        an.first_reach(steps[:-1], y, 0.8)


def test_reference_level_final_and_peak():
    y = np.array([[0.1, 0.5, 0.9, 0.7], [0.3, 0.5, 0.7, 0.5]])
    mean = y.mean(0)  # [0.2, 0.5, 0.8, 0.6]
    assert an.reference_level(y, window=1, ref="final") == pytest.approx(mean[-1])
    assert an.reference_level(y, window=1, ref="peak") == pytest.approx(mean.max())
    assert an.reference_level(y, window=2, ref="final") == pytest.approx((mean[-1] + mean[-2]) / 2)
    with pytest.raises(ValueError, match="ref"):
        an.reference_level(y, window=1, ref="best")


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_mean_ci_coverage_on_normal_samples():
    """95% percentile-bootstrap CI of a normal mean (S = 20) covers the true mean ~95% of the time."""
    rng = np.random.default_rng(1)
    reps, hits = 300, 0
    for i in range(reps):
        x = rng.normal(2.0, 1.5, size=20)
        ci = an.bootstrap_mean(x, n_boot=800, seed=i)
        hits += ci["lo"] <= 2.0 <= ci["hi"]
        assert ci["value"] == pytest.approx(x.mean())
    cover = hits / reps  # percentile bootstrap under-covers slightly at S = 20 (~0.93)
    assert 0.88 <= cover <= 0.99, cover


def test_bootstrap_ratio_of_means_coverage_on_exponentials():
    """mean(a)/mean(b) for a ~ Exp(mean 200), b ~ Exp(mean 100): the CI covers 2.0 ~95% of the time."""
    rng = np.random.default_rng(2)
    reps, hits = 300, 0
    for i in range(reps):
        a, b = rng.exponential(200.0, size=25), rng.exponential(100.0, size=25)
        ci = an.bootstrap_ratio_of_means(a, b, n_boot=800, seed=i)
        hits += ci["lo"] <= 2.0 <= ci["hi"]
        assert ci["value"] == pytest.approx(a.mean() / b.mean())
    assert 0.87 <= hits / reps <= 0.99, hits / reps


def test_bootstrap_paired_vs_unpaired_and_degenerate():
    rng = np.random.default_rng(3)
    common = rng.normal(0, 1, size=15)
    a, b = 5 + common, 4 + common + 0.05 * rng.normal(size=15)   # strongly correlated pairs
    pa = an.bootstrap_diff_of_means(a, b, paired=True, n_boot=1000)
    un = an.bootstrap_diff_of_means(a, b, paired=False, n_boot=1000)
    assert pa["value"] == un["value"] == pytest.approx(a.mean() - b.mean())
    assert pa["hi"] - pa["lo"] < 0.2 * (un["hi"] - un["lo"])
    # same seed -> same interval
    assert an.bootstrap_diff_of_means(a, b, paired=True, n_boot=1000) == pa
    # zero denominators: inf, not NaN, not a warning
    z = an.bootstrap_ratio_of_means([10.0, 20.0], [0.0, 0.0], n_boot=50)
    assert math.isinf(z["value"])
    with np.errstate(all="raise"):   # 0/0: undefined (NaN), and no floating-point warning
        assert math.isnan(an.bootstrap_ratio_of_means([0.0, 0.0], [0.0, 0.0], n_boot=50)["value"])
    one = an.bootstrap_mean([0.5])
    assert one["value"] == 0.5 and math.isnan(one["lo"])
    with pytest.raises(ValueError, match="paired"):
        an.bootstrap_ratio_of_means([1.0, 2.0], [1.0, 2.0, 3.0], paired=True)
    with pytest.raises(ValueError, match="level"):
        an.bootstrap_mean([1.0, 2.0], level=1.5)


def test_bootstrap_band_matches_loop_reference():
    rng = np.random.default_rng(4)
    y = rng.uniform(size=(6, 5))
    mean, lo, hi = an.bootstrap_band(y, n_boot=400, seed=7)
    idx = np.random.default_rng(7).integers(0, 6, size=(400, 6))
    boots = np.array([[y[i, e].mean() for e in range(5)] for i in idx])
    np.testing.assert_allclose(mean, y.mean(0))
    np.testing.assert_allclose(lo, np.quantile(boots, 0.025, axis=0))
    np.testing.assert_allclose(hi, np.quantile(boots, 0.975, axis=0))


# --------------------------------------------------------------------------- whole analysis


@pytest.fixture
def sweep(tmp_path):
    """baseline tau=40, method tau=20 (twice as fast), 3 seeds each, 200 steps; method 0.5 s/step."""
    for s in range(3):
        write_run(tmp_path, f"toy-baseline-s{s}", method="baseline", seed=s, steps=200, tau=40.0 * (1 + 0.05 * s))
        write_run(tmp_path, f"toy-ps_ada-s{s}", method="ps_ada", seed=s, steps=200, tau=20.0 * (1 + 0.05 * s),
                  step_time=0.5, tokens=80, reroll={k: (lambda t, k=k: 0.2 + 0.1 * k * (t >= 100)) for k in KS})
    return tmp_path


def _steps_reference(taus, level, every=10, last=200):
    """Pure-Python per-seed first eval step with curve >= level (window 1), else None."""
    out = []
    for tau in taus:
        hit = [s for s in range(0, last + 1, every) if 0.3 + 0.6 * (1 - math.exp(-s / tau)) >= level]
        out.append(hit[0] if hit else None)
    return out


def test_speedup_of_a_twice_as_fast_method(sweep):
    runs = an.load_runs(sweep)
    assert [r.status for r in runs] == ["complete"] * 6
    res = an.analyze(runs, window=1, n_boot=500)["toy"]
    base_taus = [40.0 * (1 + 0.05 * s) for s in range(3)]
    level = float(np.mean([curve(200, t) for t in base_taus]))
    assert res["reference_level"] == pytest.approx(level)
    b = _steps_reference(base_taus, level)
    m = _steps_reference([t / 2 for t in base_taus], level)
    b = [200 if v is None else v for v in b]   # censored baseline seeds enter with their last step
    bm = res["methods"]["baseline"]["per_seed"]
    assert bm["steps_bound"] == b
    assert res["methods"]["ps_ada"]["per_seed"]["steps"] == m
    sp = res["methods"]["ps_ada"]["speedup_steps"]
    assert sp["value"] == pytest.approx(np.mean(b) / np.mean(m))
    assert 1.6 < sp["value"] < 2.4 and sp["lo"] <= sp["value"] <= sp["hi"]
    # wall-clock: method steps cost 0.5 s vs 1 s -> twice the step speed-up; tokens: 100/80
    assert res["methods"]["ps_ada"]["speedup_wall"]["value"] == pytest.approx(2 * np.mean(b) / np.mean(m))
    assert res["methods"]["ps_ada"]["speedup_tokens"]["value"] == pytest.approx(100 / 80 * np.mean(b) / np.mean(m))
    # mean-curve step (the headline number): first eval step of the seed-mean curve >= level
    mean_curve = np.mean([curve(np.arange(0, 201, 10), t / 2) for t in base_taus], axis=0)
    assert res["methods"]["ps_ada"]["mean_curve_steps"] == 10 * int(np.argmax(mean_curve >= level))
    # equal-step improvement at step 200, vs a numpy reference
    imp = res["methods"]["ps_ada"]["equal_step_improvement"]
    ref = np.mean([curve(200, t / 2) for t in base_taus]) - level
    assert imp["value"] == pytest.approx(ref) and imp["value"] > 0
    # settled re-roll rates over the last half (steps 100..199): 0.2 + 0.1 k exactly
    for k in KS:
        assert res["methods"]["ps_ada"]["settled_reroll"][str(k)]["value"] == pytest.approx(0.2 + 0.1 * k)
    assert math.isnan(res["methods"]["baseline"]["settled_reroll"]["1"]["value"])


def test_settled_rates_are_count_weighted_over_the_last_fraction(tmp_path):
    rates = {k: (lambda t, k=k: None if t % 4 == 0 else 0.01 * ((t * k) % 50)) for k in KS}
    d = write_run(tmp_path, "toy-ps_fix-s0", method="ps_fix", seed=0, steps=40, tau=10.0, reroll=rates)
    run = an.load_run(d)
    got = an.settled_reroll_rates(run, settle_frac=0.25)
    for j, k in enumerate(KS):
        num = den = 0.0
        for t in range(30, 40):
            r = rates[k](t)
            if r is not None:
                c = 1 + (t + k) % 3
                num, den = num + r * c, den + c
        assert got[j] == pytest.approx(num / den)
    with pytest.raises(ValueError, match="settle_frac"):
        an.settled_reroll_rates(run, settle_frac=0.0)


def test_killed_and_empty_runs_are_reported_not_dropped(sweep):
    # seed 3 of ps_ada killed at step 25 before reaching the level, with a truncated last line;
    # seed 4 killed at 150 after reaching it; an empty run with no train line at all
    write_run(sweep, "toy-ps_ada-s3", method="ps_ada", seed=3, steps=200, tau=20.0, killed_at=25, truncated_tail=True)
    write_run(sweep, "toy-ps_ada-s4", method="ps_ada", seed=4, steps=200, tau=20.0, killed_at=150)
    (sweep / "toy-ps_fix-s0").mkdir()
    (sweep / "toy-ps_fix-s0" / "metrics.jsonl").write_text("")
    runs = an.load_runs(sweep)
    by = {r.name: r for r in runs}
    assert by["toy-ps_ada-s3"].status == "partial" and by["toy-ps_ada-s3"].steps_done == 25
    assert any("truncated" in p for p in by["toy-ps_ada-s3"].problems)
    assert by["toy-ps_ada-s4"].status == "partial"
    assert by["toy-ps_fix-s0"].status == "empty"
    table = an.runs_table(runs)
    assert "killed after 25/?" in table and "killed after 150/?" in table and "empty" in table
    res = an.analyze(runs, window=1, n_boot=300)["toy"]
    ps = res["methods"]["ps_ada"]
    assert ps["seeds"] == [0, 1, 2, 3, 4] and ps["n_runs"] == 5 and ps["n_complete"] == 3
    i3, i4 = ps["seeds"].index(3), ps["seeds"].index(4)
    assert ps["per_seed"]["censored"][i3] and math.isinf(ps["per_seed"]["steps"][i3])
    assert ps["per_seed"]["steps_bound"][i3] == 20           # last evaluation before the kill
    assert not ps["per_seed"]["censored"][i4]
    # the baseline has censored seeds too (ref="final"): censored seeds in both arms bound nothing
    assert ps["speedup_steps"]["bound"] == "both" and ps["n_censored"] == 1
    assert ps["speedup_steps"]["n_censored_baseline"] > 0
    assert ps["speedup_steps"]["n_censored_baseline"] == sum(res["methods"]["baseline"]["per_seed"]["censored"])
    assert ps["equal_step_missing_seeds"] == [3, 4]
    assert "killed after 25" in " ".join(ps["status"])
    assert "undefined (censored both: 1 baseline, 1 method seeds)" in an.convergence_table(res)
    row = next(r for r in an.convergence_table(res).splitlines() if r.startswith("| ps_ada |"))
    assert row.split(" | ")[7] == "no bound (both censored)"               # the bound's own column
    assert all(r.count(" | ") == 9 for r in an.convergence_table(res).splitlines() if r.startswith("| "))
    fix = res["methods"]["ps_fix"]
    assert fix["n_runs"] == 0 and fix["excluded_empty"] == ["toy-ps_fix-s0"]   # listed, not in statistics
    assert "0 (empty: toy-ps_fix-s0)" in an.convergence_table(res)
    assert all(np.isfinite(v) for v in (ps["speedup_steps"]["value"], ps["speedup_steps"]["lo"]))
    json.dumps(an.to_jsonable(res), allow_nan=False)


def test_run_names_and_missing_config(tmp_path):
    assert an.parse_run_name("arith-ps_ada_hard-s12") == {"task": "arith", "method": "ps_ada_hard", "seed": 12}
    assert an.parse_run_name("ps_ada_s0") == {"task": "unknown", "method": "ps_ada", "seed": 0}
    with pytest.raises(ValueError, match="run directory name"):
        an.parse_run_name("whatever")
    d = write_run(tmp_path, "toy-ps_fix-s7", method="ignored", seed=7, steps=20, tau=5.0, config=False)
    r = an.load_run(d)
    assert (r.task, r.method, r.seed, r.status, r.planned_steps) == ("toy", "ps_fix", 7, "complete", 20)
    d2 = write_run(tmp_path, "toy-ps_fix_big-s1", method="ps_fix", seed=1, steps=20, tau=5.0)
    cfg = json.loads((d2 / "summary.json").read_text())
    cfg["config"]["tag"] = "_big"
    (d2 / "summary.json").write_text(json.dumps(cfg))
    assert (an.load_run(d2).task, an.load_run(d2).method) == ("toy_big", "ps_fix")
    with pytest.raises(ValueError, match="baseline method"):
        an.analyze_task({"ps_fix": [r]})
    out = an.analyze([r])["toy"]
    assert "error" in out and out["methods"]["ps_fix"]["seeds"] == [7]


def test_cost_to_converge_is_cumulative_before_the_step(tmp_path):
    d = write_run(tmp_path, "toy-baseline-s0", method="baseline", seed=0, steps=30, tau=5.0, step_time=2.0, tokens=7)
    r = an.load_run(d)
    assert r.cost_at(10) == (pytest.approx(20.0), 70.0)   # train steps 0..9
    assert r.cost_at(0) == (0.0, 0.0)
    assert r.cost_at(math.inf) == (math.inf, math.inf)


# --------------------------------------------------------------------------- paper constants


def test_paper_speedups_follow_from_the_reported_steps():
    base = an.PAPER_ABLATION_STEPS["baseline"]
    for m, steps in an.PAPER_ABLATION_STEPS.items():
        assert round(base / steps, 2) == an.PAPER_ABLATION_SPEEDUP[m]
    h = an.PAPER_HEADLINE_14B
    step_sp = h["base_step"] / h["ps_step"]
    time_sp = h["base_step_s"] / h["ps_step_s"]
    assert math.floor(step_sp * 100) / 100 == h["step_speedup"]        # 1.7647 -> printed 1.76
    assert round(time_sp, 2) == h["time_speedup"]
    assert round(step_sp * time_sp, 2) == h["end_to_end"]
    assert abs(np.mean(list(an.PAPER_SETTLED_REROLL.values())) - 0.5) < 0.01


# --------------------------------------------------------------------------- CLI and figures


def test_cli_writes_tables_json_and_figures(sweep, tmp_path, capsys):
    write_run(sweep, "toy-ps_ada-s3", method="ps_ada", seed=3, steps=200, tau=20.0, killed_at=25)
    out = tmp_path / "out"
    from experiments import analyze

    analyze.main([str(sweep), "--out", str(out), "--n-boot", "200", "--window", "1"])
    printed = capsys.readouterr().out
    assert "| toy-ps_ada-s3 |" in printed and "killed after 25" in printed and "paper (reported)" in printed
    data = json.loads((out / "results.json").read_text())
    assert data["tasks"]["toy"]["methods"]["ps_ada"]["n_runs"] == 4
    assert data["tasks"]["toy"]["methods"]["ps_ada"]["per_seed"]["steps"][3] is None   # inf -> null
    for name in ("fig1_toy.png", "fig2_metrics.png", "fig4_toy.png", "fig4_toy_wall.png", "controller_toy.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert (out / "tables.md").read_text().strip() == printed.strip()


def test_cli_refuses_to_overwrite_outputs_it_did_not_write_unless_forced(sweep, tmp_path, capsys):
    """``--out results`` used to replace the committed decisive.json and figures with a different
    command's: an --out holding such files that analyze did not write is refused (nothing written);
    its own outputs (a second run into the same --out) are overwritten; ``--force`` overwrites."""
    from experiments import analyze

    out = tmp_path / "committed"
    out.mkdir()
    (out / "decisive.json").write_text('{"from": "three roots"}')
    (out / "fig1_toy.png").write_bytes(b"committed")
    (out / "notes.md").write_text("not an output")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    argv = [str(sweep), "--out", str(out), "--n-boot", "50", "--window", "1", "--no-decisive"]
    with pytest.raises(SystemExit, match=r"holds fig1_toy\.png, which this analysis would overwrite.*--force"):
        analyze.main(argv)  # --no-decisive: decisive.json is not this command's, so only the figure conflicts
    with pytest.raises(SystemExit, match=r"holds decisive\.json, fig1_toy\.png"):
        analyze.main(argv[:-1])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    fresh = tmp_path / "fresh"
    analyze.main(argv[:-1] + ["--out", str(fresh)])
    analyze.main(argv[:-1] + ["--out", str(fresh)])  # its own outputs: overwritten without --force
    assert (fresh / "results.json").exists() and "fig1_toy.png" in json.loads((fresh / analyze.OWNED).read_text())
    analyze.main(argv + ["--force"])
    assert (out / "fig1_toy.png").read_bytes()[:4] == b"\x89PNG" and (out / "notes.md").read_text() == "not an output"
    assert "fig1_toy.png" not in json.loads((out / analyze.OWNED).read_text())  # still not analyze's to overwrite
    assert "results.json" in json.loads((out / analyze.OWNED).read_text())  # new here: analyze's own
    capsys.readouterr()


def test_flat_baseline_is_flagged_degenerate_without_nan_warnings(tmp_path):
    for s in range(2):
        write_run(tmp_path, f"toy-baseline-s{s}", method="baseline", seed=s, steps=20, tau=math.inf)   # never learns
        write_run(tmp_path, f"toy-ps_fix-s{s}", method="ps_fix", seed=s, steps=20, tau=math.inf)
    with np.errstate(all="raise"):
        res = an.analyze(an.load_runs(tmp_path), n_boot=100)["toy"]
    assert res["degenerate"] and "DEGENERATE" in an.convergence_table(res)
    assert res["methods"]["ps_fix"]["per_seed"]["steps"] == [0.0, 0.0]
    assert math.isnan(res["methods"]["ps_fix"]["speedup_steps"]["value"])   # 0/0: undefined, not inf


def test_paired_analysis_uses_common_seeds(sweep):
    write_run(sweep, "toy-ps_ada-s7", method="ps_ada", seed=7, steps=200, tau=20.0)   # no baseline partner
    runs = an.load_runs(sweep)
    res = an.analyze(runs, window=1, paired=True, n_boot=300)["toy"]
    ps, base = res["methods"]["ps_ada"], res["methods"]["baseline"]
    assert ps["paired_seeds"] == [0, 1, 2] and ps["speedup_steps"]["paired"]
    expected = np.mean(base["per_seed"]["steps_bound"]) / np.mean(ps["per_seed"]["steps_bound"][:3])
    assert ps["speedup_steps"]["value"] == pytest.approx(expected)
    assert {k: base["speedup_steps"][k] for k in ("value", "lo", "hi", "bound")} == {
        "value": 1.0, "lo": 1.0, "hi": 1.0, "bound": "exact"}   # the reference itself


def test_sweep_in_progress_gives_tables_and_figures(tmp_path):
    """Only a partial baseline, a run directory just created, a method with no baseline partner."""
    import matplotlib

    matplotlib.use("Agg")
    write_run(tmp_path, "toy-baseline-s0", method="baseline", seed=0, steps=200, tau=40.0, killed_at=35)
    (tmp_path / "toy-baseline-s1").mkdir()
    (tmp_path / "toy-baseline-s1" / "metrics.jsonl").write_text("")
    write_run(tmp_path, "other-ps_ada-s0", method="ps_ada", seed=0, steps=50, tau=20.0, config=False)
    runs = an.load_runs(tmp_path)
    res = an.analyze(runs, n_boot=50)
    assert res["toy"]["methods"]["baseline"]["n_runs"] == 1 and "error" in res["other"]
    for task, by_method in an.group_runs(runs).items():
        an.plot_learning_curves(by_method, level=res[task].get("reference_level"))
        an.plot_controller(by_method)
        if "error" not in res[task]:
            an.plot_ablation(res[task])
        for table in (an.convergence_table, an.equal_step_table, an.bucket_table):
            assert table(res[task])
    json.dumps(an.to_jsonable(res), allow_nan=False)


def test_compile_spikes_are_clipped_from_wall_clock(tmp_path):
    import dataclasses

    d = write_run(tmp_path, "toy-baseline-s0", method="baseline", seed=0, steps=30, tau=5.0, step_time=2.0)
    r = an.load_run(d)
    t = r.step_time.copy()
    t[0], t[17], t[18] = 60.0, 12.0, 9.0         # compile spikes at steps 0 and 17; 9 s (< 5 x 2 s) is kept
    r = dataclasses.replace(r, step_time=t)
    ref = [2.0 if x > 5 * np.median(t) else x for x in t]
    np.testing.assert_allclose(an.clipped_step_time(t, clip=5.0), ref)
    assert r.cost_at(20, clip=5.0)[0] == pytest.approx(sum(ref[:20])) == pytest.approx(2.0 * 19 + 9.0)
    assert r.cost_at(20)[0] == pytest.approx(sum(t[:20]))   # raw
    with pytest.raises(ValueError, match="clip"):
        an.clipped_step_time(t, clip=0.5)


def test_gzipped_metrics_load_like_plain(tmp_path):
    """Committed result sets keep ``metrics.jsonl.gz``; the loader reads it like the plain file."""
    import gzip

    from prs.analysis import load_run, load_runs

    recs = [{"kind": "eval", "step": 0, "eval/pass_at_1": 0.25}, {"kind": "eval", "step": 5, "eval/pass_at_1": 0.5}]
    text = "".join(json.dumps(r) + "\n" for r in recs)
    plain, packed = tmp_path / "root" / "arith-baseline-s0", tmp_path / "root" / "arith-baseline-s1"
    plain.mkdir(parents=True)
    packed.mkdir()
    (plain / "metrics.jsonl").write_text(text)
    (packed / "metrics.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    a, b = load_run(plain), load_run(packed)
    np.testing.assert_array_equal(a.eval_pass, b.eval_pass)
    np.testing.assert_array_equal(b.eval_step, [0, 5])
    assert [r.seed for r in load_runs(tmp_path / "root")] == [0, 1]
