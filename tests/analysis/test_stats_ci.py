"""One CI path for every bootstrap statistic (``stats.percentile_ci``), the censoring bound of a
speed-up (``stats.censoring_bound``) and how tables print it (issue #31, analysis defects 1-3).
References: numpy quantiles of the defined replicates and the bound worked out from the definition
speed-up = mean(steps_base) / mean(steps_method), a censored step being a lower bound on the true one."""
from __future__ import annotations

import math

import numpy as np
import pytest

from prs import analysis as an
from experiments.studies import decisive as dc
from prs.analysis import tables


# ------------------------------------------------------------------ defect 1: one CI helper


def test_one_undefined_replicate_does_not_make_the_interval_undefined():
    x = np.r_[np.ones(1999), np.nan]
    ci = an.percentile_ci(x, level=0.95)
    assert (ci["lo"], ci["hi"]) == (1.0, 1.0)
    assert ci["undefined_share"] == pytest.approx(1 / 2000)


def test_interval_is_the_quantile_of_the_defined_replicates_and_inf_is_a_value():
    rng = np.random.default_rng(3)
    x = rng.normal(size=4000)
    x[:40] = np.nan                                   # 1% undefined
    x[40:60] = np.inf                                  # x/0: defined, ordered at the top
    ci = an.percentile_ci(x, level=0.9)
    ref = np.quantile(x[~np.isnan(x)], [0.05, 0.95])
    assert (ci["lo"], ci["hi"]) == (float(ref[0]), float(ref[1]))
    assert ci["undefined_share"] == pytest.approx(0.01)


def test_too_many_undefined_replicates_give_no_interval_and_say_how_many():
    x = np.r_[np.ones(94), np.full(6, np.nan)]          # 6% > (1 - 0.95) / 2
    ci = an.percentile_ci(x, level=0.95)
    assert math.isnan(ci["lo"]) and math.isnan(ci["hi"])
    assert ci["undefined_share"] == pytest.approx(0.06) and ci["max_undefined"] == pytest.approx(0.025)
    ok = an.percentile_ci(x, level=0.95, max_undefined=0.1)   # a stated, looser threshold
    assert (ok["lo"], ok["hi"]) == (1.0, 1.0)


def test_ratio_with_rare_zero_over_zero_resamples_keeps_its_ci():
    num, den = [0, 0, 0, 0, 10, 20, 30, 40], [0, 0, 0, 0, 5, 10, 15, 20]
    r = an.bootstrap_ratio_of_means(num, den, paired=True, n_boot=2000, seed=0)
    # every defined resample has ratio exactly 2 (num = 2 den seed by seed); 0/0 only when all 8
    # draws hit the four zero seeds: the same generator's share
    idx = np.random.default_rng(0).integers(0, 8, size=(2000, 8))
    share = float(np.mean((idx < 4).all(1)))
    assert share > 0
    assert r["value"] == 2.0 and r["lo"] == 2.0 and r["hi"] == 2.0
    assert r["undefined_share"] == pytest.approx(share)


def test_gap_module_has_no_ci_of_its_own():
    import inspect

    from prs.analysis import gap
    src = inspect.getsource(gap)
    assert "np.quantile" not in src and "_ci(" not in src.replace("percentile_ci(", "")


def test_verdict_says_too_many_undefined_resamples_only_when_true():
    # seeds 0-3 of both arms start above every level (steps 0 in both: 0/0 when a resample holds only
    # them, (4/6)^6 = 8.8% of resamples > 2.5%); seeds 4-5 rise, the method's twice as fast
    steps = np.arange(0, 101, 10.0)
    flat = np.full(steps.size, 0.9)
    rise = lambda speed: np.minimum(0.9, 0.1 + 0.8 * speed * steps / 100)  # noqa: E731
    yb = np.stack([flat] * 4 + [rise(1.0)] * 2)
    ym = np.stack([flat] * 4 + [rise(2.0)] * 2)
    arms = {"baseline": {"seeds": list(range(6)), "y": yb, "cost": {}},
            "ps_ada": {"seeds": list(range(6)), "y": ym, "cost": {}}}
    res = dc.arm_stats(steps, arms, n_boot=2000, seed=0)
    S = res["arms"]["ps_ada"][0.8]["speedup_steps"]
    assert math.isfinite(S["value"]) and math.isnan(S["lo"])
    idx = np.random.default_rng(0).integers(0, 6, size=(2000, 6))
    assert S["undefined_share"] == pytest.approx(np.mean((idx < 4).all(1)))
    v = dc.verdict(res)
    assert S["undefined_share"] > S["max_undefined"]
    assert f"{100 * S['undefined_share']:.1f}% of the bootstrap resamples are undefined" in v["text"]


# ------------------------------------------------------------------ defects 2-3: censoring bounds


@pytest.mark.parametrize("cb,cm,want", [((0, 0), (0, 0), "exact"), ((0, 0), (1, 0), "upper"),
                                        ((1, 0), (0, 0), "lower"), ((1, 0), (0, 1), "both")])
def test_censoring_bound_from_the_definition(cb, cm, want):
    # true steps t >= observed o for a censored seed; speed-up = mean(base) / mean(method)
    base_true, meth_true = np.array([100.0, 80.0]), np.array([50.0, 40.0])
    base_obs = np.where(np.array(cb, bool), base_true - 30, base_true)
    meth_obs = np.where(np.array(cm, bool), meth_true - 30, meth_true)
    est, true = base_obs.mean() / meth_obs.mean(), base_true.mean() / meth_true.mean()
    got = an.censoring_bound(np.array(cb, bool), np.array(cm, bool))
    assert got == want
    if want == "upper":
        assert true <= est
    if want == "lower":
        assert true >= est


def _run(method, seed, ys, every=10):
    ys = np.asarray(ys, float)
    T = every * (ys.size - 1)
    z = np.zeros((T, 0))
    return an.Run(name=f"toy-{method}-s{seed}", path="", task="toy", method=method, seed=seed, planned_steps=T,
                  status="complete", problems=(), eval_step=np.arange(ys.size) * every, eval_pass=ys,
                  train_step=np.arange(T), step_time=np.ones(T), step_tokens=np.ones(T), ks=(), n=8,
                  reroll_rate=z, count=z, rho=z, ema=z)


LIN = np.linspace(0, 1, 11)
BASE_OK = [0, .1, .2, .3, .4, .5, .6, .75, .8, .8, .7]            # reaches L = 0.7 at 70, ends at L
BASE_CENS = ([.06 * i for i in range(11)], [.08 * i for i in range(11)])   # final mean 0.7: seed 0 (max 0.6) censored
FAST, SLOW = [min(1.0, .2 * i) for i in range(11)], [.05 * i for i in range(11)]   # SLOW max 0.5: censored


@pytest.mark.parametrize("base,meth,want", [
    ((BASE_OK, BASE_OK), (FAST, FAST), "exact"),
    ((BASE_OK, BASE_OK), (SLOW, FAST), "upper"),
    (BASE_CENS, (FAST, FAST), "lower"),
    (BASE_CENS, (SLOW, FAST), "both"),
])
def test_old_metric_bound_accounts_for_both_arms(base, meth, want):
    runs = {"baseline": [_run("baseline", s, y) for s, y in enumerate(base)],
            "ps_ada": [_run("ps_ada", s, y) for s, y in enumerate(meth)]}
    res = an.analyze_task(runs, window=1, paired=True, n_boot=200)
    rec = res["methods"]["ps_ada"]
    cb = np.array(res["methods"]["baseline"]["per_seed"]["censored"], bool)
    cm = np.array(rec["per_seed"]["censored"], bool)
    assert an.censoring_bound(cb, cm) == want                        # the construction is as intended
    for key in ("speedup_steps", "speedup_wall", "speedup_tokens"):
        assert rec[key]["bound"] == want
    assert res["methods"]["baseline"]["speedup_steps"]["bound"] == "exact"


def test_a_ratio_censored_in_both_arms_prints_as_undefined():
    d = {"value": 1.07, "lo": 0.9, "hi": 1.2, "bound": "both", "n_censored_baseline": 2, "n_censored_method": 1}
    cell = dc._cell(d)
    assert "≤" not in cell and "≥" not in cell and "1.07" not in cell and "censored both" in cell
    assert dc._cell({**d, "bound": "upper"}).endswith("≤")
    assert dc._cell({**d, "bound": "lower"}).endswith("≥")
    # a restricted mean (at a stated horizon) is defined whatever the censoring: it prints, marked
    r = dc._cell({**d, "estimator": "restricted (mean_curve)"})
    assert r.startswith("1.07 [0.90, 1.20]") and "censored both" in r and "≤" not in r
    t = tables.fmt_ci(d, bound=True)
    assert "<=" not in t and "1.07" not in t and "censored both" in t


# ------------------------------------------------------------------ defect 4: the paper's labels


def test_the_ablation_is_not_labelled_as_the_14b_swe_bench_result():
    """The source's ablation (211 -> 110 steps) names no model or task; its Qwen3-14B SWE-bench result is
    300 -> 170. No markdown table in results/ or docs/ whose header names Qwen3-14B may carry 211."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    assert an.PAPER_HEADLINE_14B["base_step"] == 300 and an.PAPER_HEADLINE_14B["ps_step"] == 170
    pages = [*root.glob("results/**/*.md"), *root.glob("docs/**/*.md"), root / "README.md"]
    pages = [p for p in pages if "runs" not in p.parts]
    assert any(p.name == "README.md" and p.parent.name == "results" for p in pages)
    for page in pages:
        table: list[str] = []
        for line in page.read_text().splitlines() + [""]:
            if line.startswith("|"):
                table.append(line)
                continue
            if table and "14B" in table[0]:
                rows = "\n".join(table[1:])
                assert "211" not in rows and "110 steps" not in rows, f"{page}: {table[0]}"
            table = []


# ------------------------------------------------------------------ defect 7: step time


def test_step_time_includes_the_replay_of_next_visit_agent_steps(tmp_path):
    import json

    rng = np.random.default_rng(0)
    parts = rng.uniform(0.1, 2.0, size=(6, 4))                       # sample, replay, batch, update [T, 4]
    lines = [{"kind": "eval", "step": 0, "eval/pass_at_1": 0.1}]
    for t, (a, r, b, u) in enumerate(parts):
        lines.append({"kind": "train", "step": t, "time_sample": a, "time_replay": r, "time_batch": b,
                      "time_update": u, "tokens_generated": 10})
    lines.append({"kind": "eval", "step": 6, "eval/pass_at_1": 0.2})
    d = tmp_path / "toy-ps_ada-next_visit-s0"
    d.mkdir()
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = an.load_run(d)
    np.testing.assert_allclose(run.step_time, parts.sum(1))
    wall, _ = run.cumulative_cost()
    assert wall[-1] == pytest.approx(parts.sum())


# ------------------------------------------------------------------ defect 5: settled re-roll weights


def test_settled_reroll_rates_weight_by_the_steered_groups():
    T, K = 8, 2
    rng = np.random.default_rng(2)
    rate = rng.uniform(size=(T, K))
    rate[1, 0] = np.nan                                                 # no re-roll that step
    count = np.zeros((T, K))                                            # next_visit: this step's k, often 0
    steered = rng.integers(1, 5, size=(T, K)).astype(float)
    base = _run("ps_ada", 0, np.zeros(2), every=T)
    run = base.__class__(**{**base.__dict__, "ks": (1, 7), "reroll_rate": rate, "count": count, "steered": steered,
                            "rho": np.zeros((T, K)), "ema": np.zeros((T, K)), "schedule": "next_visit"})
    got = an.settled_reroll_rates(run, settle_frac=1.0)
    ref = [np.nansum(rate[:, j] * steered[:, j]) / steered[np.isfinite(rate[:, j]), j].sum() for j in range(K)]
    np.testing.assert_allclose(got, ref)
    half = an.settled_reroll_rates(run, settle_frac=0.5)
    np.testing.assert_allclose(half, [(rate[4:, j] * steered[4:, j]).sum() / steered[4:, j].sum() for j in range(K)])
    # a next_visit run that did not log steered: each step with a rate counts once (count is not its weight)
    old = run.__class__(**{**run.__dict__, "steered": np.full((T, K), np.nan)})
    np.testing.assert_allclose(an.settled_reroll_rates(old, settle_frac=1.0), np.nanmean(rate, 0))


def test_expanded_percentile_of_a_mean_matches_the_t_interval():
    """Hesterberg's expanded percentile: the bootstrap mean's interval at tails Φ(-sqrt(n/(n-1)) t) has
    the t interval's half-width t_{0.975, n-1} · sd / sqrt(n) (independent closed form)."""
    from scipy import stats as sps

    x = np.random.default_rng(5).normal(size=8)
    r = an.bootstrap_mean(x, n_boot=40000, seed=1, expand=True)
    half = sps.t.ppf(0.975, 7) * x.std(ddof=1) / math.sqrt(8)
    assert (r["hi"] - r["lo"]) / 2 == pytest.approx(half, rel=0.06)
    plain = an.bootstrap_mean(x, n_boot=40000, seed=1)
    assert plain["hi"] - plain["lo"] < 0.85 * (r["hi"] - r["lo"])        # the plain one is too narrow
    assert an.expanded_tail(8) == pytest.approx(sps.norm.cdf(-math.sqrt(8 / 7) * sps.t.ppf(0.975, 7)))
