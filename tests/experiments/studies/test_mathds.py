"""The mathds study's reading (``experiments.studies.mathds``) on synthetic records with closed-form answers.

Curves linear in the step (so the interpolated crossings are exact): unit u's baseline is
``y0 + δ_u + a_u s / T`` at a constant c_b tokens and w_b seconds per step; an arm twice as fast in steps,
``y0 + δ_u + 2 a_u s / T``, at c_m tokens and w_m seconds per step. With the baseline's levels from its first /
last 3 of 11 evaluations (0, 10, ..., 100): start = y0 + δ̄ + 0.1 ā, final = y0 + δ̄ + 0.9 ā, the 80% level
y0 + δ̄ + 0.74 ā is crossed at step 74 by the baseline's seed-mean curve and 37 by the arm's, so

    tokens to 80%: 74 c_b / (37 c_m),   wall-clock: 74 w_b / (37 w_m),   steps: 2;
    AUC over tokens up to H = T min(c_b, c_m): ā (c_b / c_m - 1/2)  (c_m > c_b);
    equal compute at the baseline's final tokens c_b T: ā (2 c_b / c_m - 1).

An arm as fast as the baseline in steps but cheaper (c_m < c_b) never reaches the baseline's final tokens:
every unit censored (its final counts), difference 0, AUC over [0, c_m T]: ā/2 - ā c_m / (2 c_b).
"""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from experiments.studies import mathds as study

T, EVERY, Y0 = 100, 10, 0.1
UNITS = [(0, 0, 0.01, 0.28), (0, 1, -0.01, 0.32), (1, 0, 0.02, 0.25), (1, 1, -0.02, 0.35)]  # (W, S, δ, a)


def write_run(root, w, arm, seed, *, delta, a, speed=1.0, tokens=1000.0, wall=(1.0, 1.0), steps=T, complete=True,
              extra_train=None, contrast=6, rollouts=128, drift=0.0):
    """A run ``mathds-w<w>-<arm>-s<seed>``: interpolate pass@1 ``Y0 + delta + speed a s / T`` at every 10th step,
    extrapolate ``0.05 + 0.5 (interp - Y0 - delta) + drift s / T``, train records with ``tokens`` generated, time_sample and
    time_update ``wall`` seconds, ``contrast`` groups with contrast and ``rollouts`` sampled per step."""
    d = root / f"mathds-w{w}-{arm}-s{seed}"
    d.mkdir(parents=True)
    recs = []
    for t in range(steps + 1):
        if t % EVERY == 0:
            y = Y0 + delta + speed * a * t / T
            recs.append({"kind": "eval", "step": t, "eval/interpolate/pass_at_1": y, "eval/pass_at_1": y,
                         "eval/extrapolate/pass_at_1": 0.05 + 0.5 * (y - Y0 - delta) + drift * t / T})
        if t < steps:
            recs.append({"kind": "train", "step": t, "tokens_generated": tokens, "time_sample": wall[0],
                         "time_update": wall[1], "time_select": 0.0, "groups_contrast": contrast,
                         "rollouts_sampled": rollouts, **(extra_train or {})})
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (d / "provenance.jsonl").write_text(json.dumps({"commit": "abc1234567890"}) + "\n")
    if complete:
        (d / "summary.json").write_text(json.dumps({"steps": steps, "config": {"steps": steps}}))
    return d


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    for w, s, delta, a in UNITS:
        write_run(root, w, "baseline", s, delta=delta, a=a, tokens=1000.0, wall=(1.0, 1.0))
        write_run(root, w, "ps_ada", s, delta=delta, a=a, speed=2.0, tokens=1500.0, wall=(0.5, 0.5))
        # the oracle: ps_ada's curve, its estimation cost (50 s, 4096 rollouts a step) logged apart
        write_run(root, w, "oracle", s, delta=delta, a=a, speed=2.0, tokens=1500.0, wall=(0.5, 0.5),
                  extra_train={"time_oracle": 50.0, "oracle/rollouts": 4096, "oracle/tokens": 30000})
        write_run(root, w, "screen", s, delta=delta, a=a, tokens=800.0, contrast=12, rollouts=160)
    write_run(root, 0, "selective", 0, delta=0.0, a=0.3)                  # one run: not compared
    write_run(root, 0, "ps_ada", 7, delta=0.0, a=0.3, complete=False)    # unfinished: left out
    return root


def test_closed_form_tables(runs):
    data = study.load(runs)
    assert sorted(data) == ["baseline", "oracle", "ps_ada", "screen", "selective"]
    assert sorted(data["ps_ada"]) == [0, 1, 100, 101]
    abar = np.mean([u[3] for u in UNITS])
    g = study.compare(data, "ps_ada", n_boot=200)
    c = g[0.8]
    assert g["levels"]["final"] - g["levels"]["start"] == pytest.approx(0.8 * abar)
    assert c["speedup_steps"]["value"] == pytest.approx(2.0)
    assert c["speedup_tokens"]["value"] == pytest.approx(74 * 1000 / (37 * 1500))
    assert c["speedup_wall"]["value"] == pytest.approx(74 * 2.0 / (37 * 1.0))
    assert g["auc_tokens"]["horizon"] == pytest.approx(1000.0 * T)
    assert g["auc_tokens"]["improvement"]["value"] == pytest.approx(abar * (1000 / 1500 - 0.5))
    assert g["equal_tokens"]["improvement"]["value"] == pytest.approx(abar * (2 * 1000 / 1500 - 1))
    assert g["equal_tokens"]["censored"] == 0
    assert g["by_warm_start"] == {}  # 2 units per warm start < MIN_PAIRED: no per-warm-start column
    # the oracle's 50 s of estimation per step are not in its wall-clock: the same ratio as ps_ada's
    go = study.compare(data, "oracle", n_boot=200)
    assert go[0.8]["speedup_wall"]["value"] == pytest.approx(4.0)
    assert data["oracle"][0]["cum_wall"][-1] == pytest.approx(T * 1.0)
    # cheaper per step, as fast in steps: censored at equal compute, AUC over its own shorter horizon
    gs = study.compare(data, "screen", n_boot=200)
    assert gs[0.8]["speedup_tokens"]["value"] == pytest.approx(1000 / 800)
    assert gs["equal_tokens"]["censored"] == 4
    assert gs["equal_tokens"]["improvement"]["value"] == pytest.approx(0.0, abs=1e-12)
    assert gs["auc_tokens"]["horizon"] == pytest.approx(800.0 * T)
    assert gs["auc_tokens"]["improvement"]["value"] == pytest.approx(abar / 2 - abar * 800 / (2 * 1000))
    # extrapolate = half the interpolate gain, exactly correlated across runs
    ge = study.compare(data, "ps_ada", "extrap", n_boot=200)
    assert ge["equal_tokens"]["improvement"]["value"] == pytest.approx(0.5 * abar * (2 * 1000 / 1500 - 1))
    tr = {r["arm"]: r for r in study.transfer(data, n_boot=200) if r["w"] == "all"}
    assert tr["baseline"]["gain_interp"]["value"] == pytest.approx(abar)
    assert tr["baseline"]["gain_extrap"]["value"] == pytest.approx(0.5 * abar)
    assert tr["baseline"]["r"] == pytest.approx(1.0)
    assert np.isnan(tr["selective"]["r"])  # one run: no correlation


def test_same_machine_counts_pairs_run_on_one_machine_type_only():
    """A pair counts when both records name the same single machine: not a resumed run that names two, not an
    unrecorded machine ("?"), not two different machines."""
    rec = lambda *m: {"machines": list(m)}  # noqa: E731
    data = {"baseline": {0: rec("X"), 1: rec("X", "Y"), 2: rec("?"), 3: rec("X"), 4: rec("Y")},
            "screen": {0: rec("X"), 1: rec("X", "Y"), 2: rec("?"), 3: rec("Y"), 4: rec("Y")}}
    assert study.same_machine(data, "screen", [0, 1, 2, 3, 4]) == 2
    assert study.same_machine(data, "screen", [1, 2, 3]) == 0


def test_transfer_separates_the_warm_starts_levels_from_the_run_to_run_relation(tmp_path):
    """Extrapolate gain 0.5 a + drift: within each warm start it follows the interpolate gain a exactly
    (correlation 1, also with the warm starts' means taken out), while W = 1's drift -0.5 at larger a makes the
    correlation over all six runs negative - the pooled r the page printed alone before."""
    a0, a1 = [0.2, 0.3, 0.4], [0.6, 0.7, 0.8]
    for s, a in enumerate(a0):
        write_run(tmp_path, 0, "baseline", s, delta=0.0, a=a)
    for s, a in enumerate(a1):
        write_run(tmp_path, 1, "baseline", s, delta=0.0, a=a, drift=-0.5)
    rows = study.transfer(study.load(tmp_path), n_boot=100)
    assert [(r["arm"], r["w"], r["runs"]) for r in rows] == [("baseline", "all", 6), ("baseline", 0, 3), ("baseline", 1, 3)]
    gi, ge = np.array(a0 + a1), np.array([0.5 * a for a in a0] + [0.5 * a - 0.5 for a in a1])
    allr = rows[0]
    assert allr["gain_interp"]["value"] == pytest.approx(gi.mean())
    assert allr["gain_extrap"]["value"] == pytest.approx(ge.mean())
    assert allr["r"] == pytest.approx(np.corrcoef(gi, ge)[0, 1]) and allr["r"] < -0.5
    assert allr["r_within"] == pytest.approx(1.0)
    assert rows[1]["r"] == pytest.approx(1.0) and rows[2]["r"] == pytest.approx(1.0)
    assert rows[2]["gain_extrap"]["value"] == pytest.approx(0.5 * 0.7 - 0.5)


def test_familywise_reads_the_real_controls_at_the_bonferroni_level(runs):
    """The family-wise table: the same estimates as the pooled table (closed forms), each interval at
    1 - 0.05 / 6 and so holding the 95% one; the oracle (the positive control) and arms with < 4 pairs left
    out; the 1.0 / 0 columns say on which side each interval lies."""
    data = study.load(runs)
    assert study.FAMILY == ("ps_ada", "dynamic_sampling", "selective", "screen", "predicted", "ps_ds")
    lines, fw = study.familywise_lines(data, n_boot=1000)
    assert sorted(fw) == ["ps_ada", "screen"]            # oracle: not in the family; selective: one run
    abar = np.mean([u[3] for u in UNITS])
    f = fw["ps_ada"]
    assert f["level"] == pytest.approx(1 - 0.05 / 6) and f["n"] == 4 and f["n_boot"] == 1000
    assert f["ratio"]["value"] == pytest.approx(74 * 1000 / (37 * 1500))
    assert f["auc"]["value"] == pytest.approx(abar * (1000 / 1500 - 0.5))
    g = study.compare(data, "ps_ada", n_boot=1000)
    a95 = g["auc_tokens"]["improvement"]
    assert f["auc"]["lo"] <= a95["lo"] < a95["hi"] <= f["auc"]["hi"]   # (4 units: both reach the extremes)
    assert fw["screen"]["ratio"]["value"] == pytest.approx(1000 / 800)
    rows = {x.split(" | ")[0]: x for x in lines if x.startswith("| `")}
    assert rows["| `ps_ada`"].startswith("| `ps_ada` | 4 | 1.33 [1.33, 1.33] | above 1 |")
    assert rows["| `ps_ada`"].endswith("| above 0 |")
    assert "99.17%" in "\n".join(lines) and "1,000 paired resamples" in "\n".join(lines)
    assert study.familywise_lines({"baseline": data["baseline"]}, n_boot=100) == ([], {})
    assert "measured for the 95% intervals only" in "\n".join(lines)
    cov = {"mathds|1.9|4|mix|l0.9917": {"level": 1 - 0.05 / 6}, "mathds|1.9|4|mix": {"level": 0.95}}
    text = "\n".join(study.familywise_lines(data, n_boot=100, cov=cov)[0])
    assert "coverage at 99.17% measured: coverage table, rows 'intervals at 99.17%'" in text


def test_fewer_than_min_paired_units_are_not_compared(runs):
    """Three paired units (2 warm starts x seeds 0-1 less one) are below MIN_PAIRED = 4: no comparison, and the
    page says why; the fourth makes it a comparison."""
    assert study.MIN_PAIRED == 4
    for w, s, delta, a in UNITS[:3]:
        write_run(runs, w, "predicted", s, delta=delta, a=a, speed=2.0)
    data = study.load(runs)
    assert study.compare(data, "predicted", n_boot=50) is None
    lines, _ = study.comparison_lines(data, "interp", n_boot=50)
    assert any("`predicted` | 3 runs, 3 paired: not compared (< 4)" in x for x in lines)
    w, s, delta, a = UNITS[3]
    write_run(runs, w, "predicted", s, delta=delta, a=a, speed=2.0)
    assert study.compare(study.load(runs), "predicted", n_boot=50)[0.8]["speedup_steps"]["value"] == pytest.approx(2.0)


def test_per_warm_start_column(tmp_path):
    """Four seeds per warm start: each warm start read at its own level gives the same compression."""
    root = tmp_path / "runs"
    for w in (0, 1):
        for s in range(4):
            delta, a = 0.01 * (s - 1.5) + 0.02 * w, 0.25 + 0.03 * s
            write_run(root, w, "baseline", s, delta=delta, a=a, tokens=1000.0)
            write_run(root, w, "ps_ada", s, delta=delta, a=a, speed=2.0, tokens=1500.0)
    data = study.load(root)
    g = study.compare(data, "ps_ada", n_boot=200)
    for w in (0, 1):
        v = g["by_warm_start"][w]
        assert v["value"] == pytest.approx(74 * 1000 / (37 * 1500))
        assert v["n"] == 4 and v["steps"]["value"] == pytest.approx(74 / 37)
        # at the baseline's final tokens (T x 1000) the arm has taken 2T/3 steps at twice the speed: + a/3 per unit
        assert v["equal_tokens"]["improvement"]["value"] == pytest.approx(np.mean([(0.25 + 0.03 * s) / 3 for s in range(4)]))
        assert v["auc_tokens"]["improvement"]["value"] > 0
    lines, _ = study.comparison_lines(data, "interp", n_boot=200)
    rows = [x for x in lines if x.startswith("| `ps_ada` | 1 | 4 |")]
    assert len(rows) == 1 and "| 1.33 [1.33, 1.33] | 2.00 [2.00, 2.00] |" in rows[0]


def test_ledger(runs):
    """Per warm start: the fixture has W = 0 and W = 1 units of each arm, each ratio against its own W's baseline."""
    rows = study.ledger(study.load(runs))
    assert [r["w"] for r in rows] == sorted(r["w"] for r in rows) and {r["w"] for r in rows} == {0, 1}
    assert {r["runs"] for r in rows if r["arm"] == "baseline"} == {2}
    led = {r["arm"]: r for r in rows if r["w"] == 1}
    assert led["baseline"]["tokens"] == pytest.approx(1000.0)
    assert led["baseline"]["contrast_per_1000"] == pytest.approx(1000 * 6 / 128)
    assert led["screen"]["contrast_per_1000"] == pytest.approx(1000 * 12 / 160)
    assert led["screen"]["contrast"] == pytest.approx(12.0)
    assert led["oracle"]["oracle_rollouts"] == pytest.approx(4096)
    assert led["baseline"]["oracle_rollouts"] is None
    assert led["screen"]["ratio"] == pytest.approx((12 / 160) / (6 / 128))
    assert led["baseline"]["ratio"] == pytest.approx(1.0)


def test_ledger_ratio_is_against_the_same_warm_starts_baseline(tmp_path):
    """W = 0's baseline has 6 contrast groups a step, W = 1's 3; screen with 6 on W = 1 -> 2.0, not 1.0 (a pooled
    baseline would give 6 / 4.5); an arm on a warm start without a baseline run: NaN."""
    write_run(tmp_path, 0, "baseline", 0, delta=0.0, a=0.3, steps=2, contrast=6)
    write_run(tmp_path, 1, "baseline", 0, delta=0.0, a=0.3, steps=2, contrast=3)
    write_run(tmp_path, 1, "screen", 0, delta=0.0, a=0.3, steps=2, contrast=6)
    write_run(tmp_path, 2, "screen", 0, delta=0.0, a=0.3, steps=2, contrast=6)
    led = {(r["w"], r["arm"]): r for r in study.ledger(study.load(tmp_path))}
    assert led[(1, "screen")]["ratio"] == pytest.approx(2.0) and led[(0, "baseline")]["ratio"] == pytest.approx(1.0)
    assert np.isnan(led[(2, "screen")]["ratio"])


def test_ledger_ratio_is_nan_when_the_baseline_has_no_contrast(tmp_path):
    """A run of a few steps can have only all-same groups: the baseline's rate is 0 and the ratio is
    undefined (NaN, shown as '-'), not a ZeroDivisionError (CI's end-to-end test of stop 52 hit this)."""
    for arm in ("baseline", "screen"):
        d = write_run(tmp_path, 0, arm, 0, delta=0.0, a=0.3, steps=2)
        recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        for r in recs:
            if r["kind"] == "train" and arm == "baseline":
                r["groups_contrast"] = 0
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    data = study.load(tmp_path)
    led = {r["arm"]: r for r in study.ledger(data)}   # one warm start
    assert led["baseline"]["contrast_per_1000"] == 0.0
    assert np.isnan(led["screen"]["ratio"]) and np.isnan(led["baseline"]["ratio"])
    assert "| 0 | `screen` | 1 |" in study.section(data, n_boot=50)[0]


INTEL = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_id": "GenuineIntel family 6 model 207",
         "isa": ["avx", "avx2", "avx512f", "fma"]}
AMD = {"cpu_model": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 1", "isa": ["avx", "avx2", "fma"]}


def test_runs_line_counts_the_machines_each_run_recorded(tmp_path):
    """Machines from each run's provenance lines: a run resumed on another machine counts on each; a line
    without a machine is '?'."""
    for seed, machines in enumerate([[INTEL], [INTEL], [AMD], [INTEL, AMD], [None]]):
        d = write_run(tmp_path, 0, "baseline", seed, delta=0.0, a=0.3, steps=2)
        (d / "provenance.jsonl").write_text("".join(json.dumps({"commit": "abc", "machine": m}) + "\n" for m in machines))
    data = study.load(tmp_path)
    assert data["baseline"][3]["machines"] == ["AMD EPYC (AuthenticAMD family 25 model 1, avx2)",
                                               "Intel(R) Xeon(R) Processor (GenuineIntel family 6 model 207, avx512)"]
    line = [x for x in study.runs_line(data) if x.startswith("- machines")][0]
    assert line.endswith("?: 1 run; AMD EPYC (AuthenticAMD family 25 model 1, avx2): 2 runs; "
                         "Intel(R) Xeon(R) Processor (GenuineIntel family 6 model 207, avx512): 3 runs")


def test_replay_compare_matches_records_by_kind_and_step(tmp_path):
    """A 2-step replay of a 4-step run: its records are matched by (kind, step); one float perturbed by 1e-6
    relative and wall-clock changed -> that field alone differs, with its max abs / rel difference."""
    rec = write_run(tmp_path / "runs", 0, "baseline", 0, delta=0.0, a=0.3, steps=4,
                    extra_train={"loss/pg_loss": 2.0, "k_hist": [1, 2]})
    rep = write_run(tmp_path / "replay", 0, "baseline", 0, delta=0.0, a=0.3, steps=2, wall=(9.0, 9.0),
                    extra_train={"loss/pg_loss": 2.0 * (1 + 1e-6), "k_hist": [1, 2]})
    for d, m in ((rec, INTEL), (rep, AMD)):
        (d / "provenance.jsonl").write_text(json.dumps({"commit": "abc", "machine": m}) + "\n")
    c = study.replay_compare(rec, rep)
    assert c["records"] == 3 and c["missing"] == []            # eval 0, train 0 and 1
    assert c["identical_records"] == 1                          # the eval; both train records differ in pg_loss
    assert list(c["differ"]) == ["loss/pg_loss"]
    assert c["differ"]["loss/pg_loss"][0] == pytest.approx(2e-6) and c["differ"]["loss/pg_loss"][1] == pytest.approx(1e-6, rel=1e-3)
    assert "time_sample" not in c["fields"] and "k_hist" in c["fields"]
    assert c["machines"] == (study.machine_name(INTEL), study.machine_name(AMD))
    line = [x for x in study.replay_lines(tmp_path / "replay", tmp_path / "runs") if x.startswith("| `mathds-w0")][0]
    assert "| 3 | 1 |" in line and "`loss/pg_loss` 2.0e-06 (1.0e-06)" in line
    assert study.replay_lines(tmp_path / "absent", tmp_path / "runs") == []


def test_h3_band_and_censoring():
    """Within a factor 2 of the theory: holds inside [theory / 2, 2 theory]; a ceiling decides only below the band,
    a floor only above it; no theory row or a ratio censored in both arms: '-'."""
    assert study.h3(1.0, "exact", 1.9) == "holds" and study.h3(0.95, "exact", 1.9) == "holds"
    assert study.h3(0.94, "exact", 1.9) == "fails" and study.h3(3.9, "exact", 1.9) == "fails"
    assert study.h3(0.6, "upper", 2.0) == "fails (ceiling below theory / 2)"
    assert study.h3(1.5, "upper", 2.0) == "undecided (a ceiling)"
    assert study.h3(4.1, "lower", 2.0) == "fails (floor above 2 x theory)"
    assert study.h3(1.5, "lower", 2.0) == "undecided (a floor)"
    assert study.h3(1.0, "exact", None) == "-" and study.h3(1.0, "both", 1.0) == "-"


def test_hypotheses_lines_read_the_token_ratio_against_both_theory_rows(runs):
    """ps_ada: twice as fast in steps at 1.5x the tokens -> tokens-to-80% 2 x 1000 / 1500 = 1.33; against a
    pre-registered 0.6 (band [0.3, 1.2]) H3 fails, against 1.0 it holds; the as-run column is shown beside."""
    comps = {"ps_ada": study.compare(study.load(runs), "ps_ada", "interp", n_boot=200)}
    assert comps["ps_ada"][0.8]["speedup_tokens"]["value"] == pytest.approx(4 / 3, rel=0.02)
    row = lambda pre: [x for x in study.hypotheses_lines(comps, {"ps_ada": pre}, {"ps_ada": 0.81})  # noqa: E731
                       if x.startswith("| `ps_ada`")][0]
    assert row(0.6).endswith("| 0.60 | 0.81 | fails |") and row(1.0).endswith("| 1.00 | 0.81 | holds |")
    lines = study.hypotheses_lines({}, {}, {})
    assert "| - | no arm has enough pairs yet | | | | |" in lines


def test_hypotheses_lines_read_h2s_falsifiable_clauses():
    """DS below 1.0 holds, selective around 1.0 fails; built from compare-shaped dicts (closed intervals)."""
    g = lambda v, lo, hi: {"units": [0, 1, 2, 3], 0.8: {"speedup_tokens": {"value": v, "lo": lo, "hi": hi}}}  # noqa: E731
    lines = study.hypotheses_lines({"dynamic_sampling": g(0.6, 0.3, 0.8), "selective": g(1.0, 0.8, 1.3)}, {}, {})
    assert ("- `selective`'s interval 1.00 [0.80, 1.30] is around 1.0: H2's clause as first written (above 1.0) fails "
            "(the interval holds 1.0); the amendment's (the interval holds 1.0) holds") in lines
    assert "- `dynamic_sampling`'s interval 0.60 [0.30, 0.80] is below 1.0: H2's clause as first written (below 1.0) holds" in lines


def test_hypotheses_per_warm_start_read_each_against_its_own_theory():
    """Per warm start: each W's ratio against that W's theory row (H3 band [t/2, 2t]) and H2's clause on each W's
    interval; built from compare-shaped dicts (closed intervals). DS: W=0 below 1.0 holds, W=1 around 1.0 fails;
    ps_ada 0.8 holds against W=0's 0.5 (band [0.25, 1.0]) and fails against W=1's 2.0 (band [1.0, 4.0])."""
    ci = lambda v, lo, hi, n=4: {"value": v, "lo": lo, "hi": hi, "n": n}  # noqa: E731
    comps = {"dynamic_sampling": {"units": list(range(8)), 0.8: {"speedup_tokens": ci(0.7, 0.4, 0.9)},
                                  "by_warm_start": {0: ci(0.6, 0.3, 0.8), 1: ci(0.8, 0.4, 1.2)}},
             "ps_ada": {"units": list(range(8)), 0.8: {"speedup_tokens": ci(0.8, 0.6, 0.9)},
                        "by_warm_start": {0: ci(0.8, 0.6, 1.1), 1: ci(0.8, 0.5, 1.2)}}}
    pre_w = {0: {"ps_ada": 0.5, "dynamic_sampling": 0.85}, 1: {"ps_ada": 2.0, "dynamic_sampling": 0.86}}
    run_w = {0: {"ps_ada": 0.3}, 1: {"ps_ada": 0.4}}
    lines = study.hypotheses_lines(comps, pre_w[0], run_w[0], pre_w=pre_w, run_w=run_w)
    head = lines.index("#### The hypotheses per warm start (each at its own baseline's level, against its own theory)")
    rows = [x for x in lines[head:] if x.startswith("| `")]
    assert rows == ["| `dynamic_sampling` | 0 | 4 | 0.60 [0.30, 0.80] | 0.85 | - | holds |",
                    "| `dynamic_sampling` | 1 | 4 | 0.80 [0.40, 1.20] | 0.86 | - | holds |",
                    "| `ps_ada` | 0 | 4 | 0.80 [0.60, 1.10] | 0.50 | 0.30 | holds |",
                    "| `ps_ada` | 1 | 4 | 0.80 [0.50, 1.20] | 2.00 | 0.40 | fails |"]
    assert ("- W = 0: `dynamic_sampling`'s interval 0.60 [0.30, 0.80] is below 1.0: H2's clause as first written "
            "(below 1.0) holds") in lines
    assert ("- W = 1: `dynamic_sampling`'s interval 0.80 [0.40, 1.20] is around 1.0: H2's clause as first written "
            "(below 1.0) fails (the interval holds 1.0)") in lines
    # without per-warm-start theory rows (or without per-warm-start comparisons) the table is left out
    assert not any(x.startswith("#### The hypotheses per warm start") for x in study.hypotheses_lines(comps, {}, {}))


def test_component_lines_put_the_component_in_the_baselines_place(tmp_path):
    """ps_ds on dynamic sampling's curve at twice its tokens a step: steps to 80% of DS's gain 1.0, tokens
    1000 / 2000 = 0.5, AUC and equal compute against DS; vs ps_ada (absent): not compared."""
    for s_ in range(4):
        delta, a = 0.01 * (s_ - 1.5), 0.25 + 0.03 * s_
        write_run(tmp_path, 0, "dynamic_sampling", s_, delta=delta, a=a, tokens=1000.0)
        write_run(tmp_path, 0, "ps_ds", s_, delta=delta, a=a, tokens=2000.0)
    lines, out = study.component_lines(study.load(tmp_path), n_boot=200)
    c = out["ps_ds|dynamic_sampling"]["0.8"]          # the summary's JSON form
    assert c["speedup_steps"]["value"] == pytest.approx(1.0) and c["speedup_tokens"]["value"] == pytest.approx(0.5)
    row = [x for x in lines if x.startswith("| `ps_ds` vs `dynamic_sampling`")][0]
    assert "| 4 |" in row and "| 0.50 [0.50, 0.50] | 1.00 [1.00, 1.00] |" in row
    assert any(x.startswith("| `ps_ds` vs `ps_ada` | 0: not compared (< 4) |") for x in lines)


def test_selector_counters(runs):
    """Each counter is the mean over runs of the per-step mean; predicted's distinct tasks = pool - final unvisited."""
    for seed, (unvisited, skipped) in enumerate([((90, 70), (1, 3)), ((80, 50), (3, 5))]):
        d = write_run(runs, 0, "predicted", seed, delta=0.0, a=0.3, steps=2,
                      extra_train={"pass_rate_train": 0.25 * (seed + 1), "groups_rerolled": 2 + 2 * seed,
                                   "groups_replaced": 1})
        recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        train = [r for r in recs if r["kind"] == "train"]
        for r, u, k in zip(train, unvisited, skipped):
            r.update({"select/unvisited": u, "select/skipped_easy": k, "select/skipped_hard": 1})
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
        (d / "config.json").write_text(json.dumps({"schedule": {"pool_size": 100}}))
    write_run(runs, 1, "predicted", 0, delta=0.0, a=0.3, steps=2, extra_train={"pass_rate_train": 0.9})
    rows = study.selector_counters(study.load(runs))
    assert [(r["w"], r["arm"]) for r in rows if r["arm"] == "predicted"] == [(0, "predicted"), (1, "predicted")]
    w1 = [r for r in rows if (r["w"], r["arm"]) == (1, "predicted")][0]
    assert w1["runs"] == 1 and w1["pass_train"] == pytest.approx(0.9)   # W = 1 apart, not pooled
    sel = {r["arm"]: r for r in rows if r["w"] == 0}
    assert sel["predicted"]["visited"] == pytest.approx(np.mean([100 - 70, 100 - 50]))
    assert sel["predicted"]["pass_train"] == pytest.approx(np.mean([0.25, 0.5]))
    assert sel["predicted"]["skipped"] == pytest.approx(np.mean([(1 + 3) / 2 + 1, (3 + 5) / 2 + 1]))
    assert sel["predicted"]["rerolled"] == pytest.approx(np.mean([2, 4]))
    assert sel["predicted"]["reroll_kept"] == pytest.approx(np.mean([2 / 4, 2 / 8]))   # per run: Σ replaced / Σ re-rolled
    assert np.isnan(sel["baseline"]["visited"]) and np.isnan(sel["baseline"]["gen_batches"])  # not logged: NaN
    assert np.isnan(sel["baseline"]["reroll_kept"])
    assert np.isnan(sel["baseline"]["pass_train"])


def test_theory_ratios_read_the_calibration_histogram(tmp_path):
    """The ledger's theory column: each arm's row of compare_controls on the calibration's pool histogram
    (PS as reroll="replace"), relative to uniform; the committed W = 0 calibration gives the CLI's 0.85 / 0.81."""
    from theory import controls as tc

    hist = [2786, 529, 301, 260, 172, 200, 144, 153, 255]
    path = tmp_path / "calib.json"
    path.write_text(json.dumps({"pool_hist": hist}))
    got = study.theory_ratios(path)
    pool, _ = tc.hist_pool(np.asarray(hist, float) / sum(hist))
    uni = tc.uniform(pool, n=8, groups=16).per_1000_rollouts()
    assert got["baseline"] == pytest.approx(1.0)
    assert got["ps_ada"] == pytest.approx(
        tc.ps_reroll(pool, n=8, groups=16, reroll="replace").per_1000_rollouts() / uni)
    assert got["oracle"] == pytest.approx(tc.predicted(pool, n=8, groups=16, pool_size=64).per_1000_rollouts() / uni)
    assert "predicted" not in got and "ps_ds" not in got
    assert study.theory_ratios(tmp_path / "absent.json") == {}
    if study.CALIBRATION.exists():
        committed = study.theory_ratios()
        assert round(committed["dynamic_sampling"], 2) == 0.85 and round(committed["ps_ada"], 2) == 0.81


def test_step_wall_leaves_the_oracle_out():
    assert study.step_wall({"time_sample": 1.0, "time_update": 2.0, "time_select": 0.5, "time_batch": 0.25,
                            "time_replay": 0.25, "time_oracle": 100.0}) == pytest.approx(4.0)


def test_page_partial_data_and_check(runs, tmp_path, capsys):
    page = tmp_path / "README.md"
    prose = "# mathds\n\nThe coordinator's prose.\n"
    page.write_text(prose)
    args = ["--runs", str(runs), "--page", str(page), "--figures", str(tmp_path), "--boot", "200"]
    assert study.main(args) == 0
    s = page.read_text()
    assert s.startswith(prose) and s.rstrip().endswith(study.END)
    assert "Runs: 17 complete of the planned 128 (8 arms x 8 seeds x 2 warm starts)" in s
    assert "| `selective` | 1 run, 1 paired: not compared (< 4) |" in s
    assert "Not yet measured (needs >= 4 baseline runs, 4 exist)" not in s  # 4 exist: it says how to run it
    assert "run `python -m experiments.studies.mathds --coverage STUDIES`" in s
    assert "records made by commit `abc1234567`" in s
    assert (tmp_path / "pass_at_1_vs_tokens.png").stat().st_size > 0
    assert (tmp_path / "pass_at_1_vs_wall.png").stat().st_size > 0
    assert study.main(args[:-2] + ["--boot", "200", "--check"]) == 0
    assert study.main(args + ["--check"]) == 0
    # rewriting is idempotent and keeps the prose
    assert study.main(args) == 0 and page.read_text() == s
    # a new run lands: the committed section is stale
    write_run(runs, 1, "selective", 1, delta=0.0, a=0.3)
    capsys.readouterr()
    assert study.main(args + ["--check"]) == 1
    assert "differs from its records" in capsys.readouterr().out


def test_collect_copies_complete_runs_and_refuses_a_different_record(tmp_path, capsys):
    sweep, committed = tmp_path / "sweep", tmp_path / "committed"
    write_run(sweep, 0, "baseline", 0, delta=0.0, a=0.3)
    write_run(sweep, 0, "baseline", 1, delta=0.0, a=0.3, complete=False)
    args = ["--runs", str(committed), "--page", str(tmp_path / "p.md"), "--figures", str(tmp_path), "--print",
            "--boot", "200"]
    (tmp_path / "p.md").write_text("x\n")
    assert study.main(["--collect", str(sweep)] + args) == 0
    got = sorted(p.name for p in (committed / "mathds-w0-baseline-s0").iterdir())
    assert got == ["metrics.jsonl.gz", "provenance.jsonl", "summary.json"]
    assert not (committed / "mathds-w0-baseline-s1").exists()
    raw = (sweep / "mathds-w0-baseline-s0" / "metrics.jsonl").read_bytes()
    assert gzip.decompress((committed / "mathds-w0-baseline-s0" / "metrics.jsonl.gz").read_bytes()) == raw
    assert study.main(["--collect", str(sweep)] + args) == 0      # the same records again: a no-op
    (sweep / "mathds-w0-baseline-s0" / "metrics.jsonl").write_bytes(raw.replace(b"1000.0", b"999.0"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        study.main(["--collect", str(sweep)] + args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds different metrics.jsonl.gz" in err[0]


def test_bad_arguments_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        study.main(["--check", "--print"])
    assert e.value.code == 2 and "--check writes nothing" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        study.main(["--runs", str(tmp_path), "--page", str(tmp_path / "p.md"), "--figures", str(tmp_path),
                    "--coverage", "10"])
    assert e.value.code == 2 and "needs >= 4 complete baseline runs, found 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        study.main(["--coverage-sizes", "4"])
    assert e.value.code == 2 and "--coverage-sizes, --coverage-warm, --coverage-mixture and --coverage-level act only with --coverage" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        study.main(["--coverage", "2", "--coverage-warm", "1", "--coverage-mixture"])
    assert e.value.code == 2 and "--coverage-mixture pools every warm start's design; --coverage-warm fits one" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        study.main(["--coverage", "2", "--coverage-warm", "-1"])
    assert e.value.code == 2 and "--coverage-warm -1: a warm start is a non-negative integer" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:   # measure_coverage's check, one line through the command's error path
        study.main(["--runs", str(tmp_path / "none"), "--figures", str(tmp_path), "--coverage", "2", "--coverage-level", "1.0"])
    assert e.value.code == 2 and "--coverage-level 1.0: a nominal interval level; allowed: 0.5 <= level < 1" in capsys.readouterr().err


def test_coverage_sizes_below_two_are_refused(runs):
    with pytest.raises(ValueError, match=r"--coverage-sizes: \[1\] are not study sizes; allowed: integers >= 2"):
        study.measure_coverage(study.load(runs), studies=2, n_boot=10, sizes=(4, 1))


def test_coverage_is_measured_on_a_design_fitted_to_the_baseline(runs, tmp_path):
    page = tmp_path / "README.md"
    page.write_text("# mathds\n")
    args = ["--runs", str(runs), "--page", str(page), "--figures", str(tmp_path), "--boot", "200"]
    assert study.main(args + ["--coverage", "4", "--coverage-boot", "50"]) == 0
    cov = json.loads((tmp_path / "coverage.json").read_text())
    assert sorted(cov) == ["mathds|1.0|4", "mathds|1.9|4"]   # default size: the baseline's run count
    assert cov["mathds|1.9|4"]["scenario"]["seeds"] == 4 and cov["mathds|1.9|4"]["scenario"]["y0"] == pytest.approx(Y0)
    s = page.read_text()
    assert "| 1.9x | 4 runs per arm (fitted on 4), y0 0.100 -> y1" in s and "4 studies x 50 resamples" in s
    assert study.main(args + ["--check"]) == 0   # the page reads the kept coverage.json
    # the same fitted design simulated at other study sizes: one row per (planted, size), the fit shared
    assert study.main(args + ["--coverage", "3", "--coverage-boot", "50", "--coverage-sizes", "2", "6"]) == 0
    cov = json.loads((tmp_path / "coverage.json").read_text())
    assert sorted(cov) == ["mathds|1.0|2", "mathds|1.0|6", "mathds|1.9|2", "mathds|1.9|6"]
    assert [cov[f"mathds|1.9|{n}"]["scenario"]["seeds"] for n in (2, 6)] == [2, 6]
    assert cov["mathds|1.9|2"]["fit"] == cov["mathds|1.9|6"]["fit"]
    assert cov["mathds|1.9|2"]["scenario"]["tau"] == cov["mathds|1.9|6"]["scenario"]["tau"]
    s = page.read_text()
    assert s.index("| 1.9x | 2 runs per arm") < s.index("| 1.9x | 6 runs per arm") < s.index("| 1.0x | 2 runs per arm")


def test_coverage_fitted_to_one_warm_start_is_its_own_file_and_rows(runs, tmp_path):
    page = tmp_path / "README.md"
    page.write_text("# mathds\n")
    args = ["--runs", str(runs), "--page", str(page), "--figures", str(tmp_path), "--boot", "200"]
    # W=1 has 2 baseline runs in the fixture: too few to fit a design of its own (one line, names the warm start)
    with pytest.raises(ValueError, match=r"needs >= 4 complete baseline runs of warm start W=1, found 2"):
        study.measure_coverage(study.load(runs), studies=2, n_boot=10, warm=1)
    for s, (delta, a) in zip((2, 3), ((0.03, 0.2), (-0.03, 0.4))):   # W=1 offset by 0.05: its own start level
        write_run(runs, 1, "baseline", s, delta=delta + 0.05, a=a)
    for s in (0, 1):   # move W=1's fixture runs to the same offset
        d = runs / f"mathds-w1-baseline-s{s}"
        recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
        for r in recs:
            if r["kind"] == "eval":
                r["eval/interpolate/pass_at_1"] += 0.05
        (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    assert study.main(args + ["--coverage", "3", "--coverage-boot", "50", "--coverage-sizes", "4"]) == 0
    pooled = json.loads((tmp_path / "coverage.json").read_text())
    assert study.main(args + ["--coverage", "3", "--coverage-boot", "50", "--coverage-sizes", "4",
                              "--coverage-warm", "1"]) == 0
    assert json.loads((tmp_path / "coverage.json").read_text()) == pooled   # the pooled design's file untouched
    cov = json.loads((tmp_path / "coverage_w1.json").read_text())
    assert sorted(cov) == ["mathds|1.0|4|w1", "mathds|1.9|4|w1"]
    w1 = cov["mathds|1.9|4|w1"]
    assert w1["warm"] == 1 and w1["fit"]["seeds"] == [100, 101, 102, 103]
    # W=1's design starts at its own level: the mean of its runs' first evaluations
    assert w1["scenario"]["y0"] == pytest.approx(Y0 + 0.05 + np.mean([0.02, -0.02, 0.03, -0.03]))
    assert pooled["mathds|1.9|4"]["scenario"]["y0"] < w1["scenario"]["y0"]
    s = page.read_text()
    rows = [x for x in s.splitlines() if x.startswith("| 1.9x | 4 runs per arm")]
    assert len(rows) == 2 and "(fitted on 6)," in rows[0] and "(fitted on 4 of W = 1)," in rows[1]
    # a pooled design whose runs are all of one warm start says so (the fixture's W=0 runs alone: 2, too few
    # for main's gate, so measure_coverage's result is shown directly)
    only_w0 = {"baseline": {u: r for u, r in study.load(runs)["baseline"].items() if u < 100}}
    only_w0["baseline"].update({u + 10: r for u, r in only_w0["baseline"].items()})   # 4 runs of W=0
    cov0 = study.measure_coverage(only_w0, studies=2, n_boot=20, sizes=(2,))
    rows0 = [x for x in study.coverage_lines(cov0, 4) if x.startswith("| 1.")]
    assert len(rows0) == 2 and all("2 runs per arm (fitted on 4 of W = 0)," in x for x in rows0)
    assert study.main(args + ["--check"]) == 0   # the page reads both files


def test_coverage_pooled_over_warm_starts_is_a_mixture_of_their_own_designs(runs, tmp_path):
    """--coverage-mixture: one design fitted per warm start (the same fit --coverage-warm W makes), N units of
    each simulated and analysed together; its own file and rows, after the single-design rows."""
    page = tmp_path / "README.md"
    page.write_text("# mathds\n")
    args = ["--runs", str(runs), "--page", str(page), "--figures", str(tmp_path), "--boot", "20"]   # tables not read here
    with pytest.raises(ValueError, match=r"needs >= 4 complete baseline runs of warm start W=0, found 2"):
        study.measure_coverage(study.load(runs), studies=2, n_boot=10, mixture=True)
    for w, off in ((0, 0.0), (1, 0.05)):   # 4 baseline runs per warm start, W=1 offset by 0.05
        for s, (delta, a) in zip((2, 3), ((0.03, 0.2), (-0.03, 0.4))):
            write_run(runs, w, "baseline", s, delta=delta + off, a=a)
    with pytest.raises(ValueError, match=r"give warm .* or mixture .*, not both"):
        study.measure_coverage(study.load(runs), studies=2, n_boot=10, mixture=True, warm=1)
    only_w0 = {"baseline": {u: r for u, r in study.load(runs)["baseline"].items() if u < 100}}
    with pytest.raises(ValueError, match=r"needs baseline runs of >= 2 warm starts, found W = \[0\]"):
        study.measure_coverage(only_w0, studies=2, n_boot=10, mixture=True)
    assert study.main(args + ["--coverage", "3", "--coverage-boot", "50", "--coverage-sizes", "2",
                              "--coverage-warm", "1"]) == 0
    assert study.main(args + ["--coverage", "3", "--coverage-boot", "50", "--coverage-sizes", "2",
                              "--coverage-mixture"]) == 0
    w1 = json.loads((tmp_path / "coverage_w1.json").read_text())
    mix = json.loads((tmp_path / "coverage_mix.json").read_text())
    assert sorted(mix) == ["mathds|1.0|4|mix", "mathds|1.9|4|mix"]   # 2 runs of each of 2 warm starts
    m = mix["mathds|1.9|4|mix"]
    parts = m["scenario"]["parts"]
    assert m["warm"] == "mix" and [p["seeds"] for p in parts] == [2, 2] and list(m["fit"]) == ["0", "1"]
    # each part is its warm start's own fit: W=1's part is the --coverage-warm 1 design
    assert {k: v for k, v in parts[1].items() if k not in ("seeds", "name")} == \
        {k: v for k, v in w1["mathds|1.9|2|w1"]["scenario"].items() if k not in ("seeds", "name")}
    assert m["fit"]["1"] == w1["mathds|1.9|2|w1"]["fit"] and m["fit"]["0"]["seeds"] == [0, 1, 2, 3]
    assert parts[0]["y0"] < parts[1]["y0"]
    # the pooled truth: the level of the parts' averaged curve lies between the two parts' own levels
    assert m["truths"]["level"] < w1["mathds|1.9|2|w1"]["truths"]["level"]
    rows = [x for x in page.read_text().splitlines() if x.startswith("| 1.")]
    assert len(rows) == 4 and all("runs per arm pooled" not in x for x in rows[:2])
    assert rows[2].startswith("| 1.9x | 4 runs per arm pooled: 2 of W = 0 (fitted on 4; y0 ")
    assert "+ 2 of W = 1 (fitted on 4; y0 " in rows[2] and rows[3].startswith("| 1.0x | 4 runs per arm pooled")
    assert study.main(args + ["--check"]) == 0
    # the family-wise table's level: its own file and keys, its rows after the 95% ones, the level named
    assert study.main(args + ["--coverage", "2", "--coverage-boot", "50", "--coverage-sizes", "2",
                              "--coverage-mixture", "--coverage-level", "0.991667"]) == 0
    assert json.loads((tmp_path / "coverage_mix.json").read_text()) == mix          # the 95% file untouched
    lv = json.loads((tmp_path / "coverage_mix_l0.9917.json").read_text())
    assert sorted(lv) == ["mathds|1.0|4|mix|l0.9917", "mathds|1.9|4|mix|l0.9917"]
    assert lv["mathds|1.9|4|mix|l0.9917"]["level"] == pytest.approx(0.991667)
    rows = [x for x in page.read_text().splitlines() if x.startswith("| 1.")]
    assert len(rows) == 6 and all("intervals at 99.17%" in x for x in rows[4:])
    assert all("intervals at" not in x for x in rows[:4])
    with pytest.raises(ValueError, match=r"--coverage-level 1.0: a nominal interval level; allowed: 0.5 <= level < 1"):
        study.measure_coverage(study.load(runs), studies=2, n_boot=10, mixture=True, level=1.0)


def test_aa_split_pairs_seed_s_with_s_plus_half_and_reads_closed_forms(tmp_path):
    """The A/A control: seeds 0-3 against 4-7 within each warm start. Seed s + 4 twice as fast in steps at the
    same tokens per step gives tokens-to-80% A / B = 74 / 37 = 2 (B needs half) and an interval excluding
    1.0; identical curves give exactly 1.0 and an interval holding it. Unpaired seeds are left out."""
    fast, same = tmp_path / "fast", tmp_path / "same"
    for w, s, delta, a in UNITS:
        for root, speed in ((fast, 2.0), (same, 1.0)):
            write_run(root, w, "baseline", s, delta=delta, a=a)
            write_run(root, w, "baseline", s + 4, delta=delta, a=a, speed=speed)
    write_run(fast, 0, "baseline", 2, delta=0.0, a=0.3)            # seed 6 missing: not paired
    sub = study.aa_split(study.load(fast))
    assert sorted(sub["baseline"]) == sorted(sub["baseline_b"]) == [0, 1, 100, 101]
    assert np.array_equal(sub["baseline_b"][101]["interp"], study.load(fast)["baseline"][105]["interp"])
    lines, summ = study.aa_lines(study.load(fast), n_boot=200)
    t = summ["compare"]["0.8"]["speedup_tokens"]
    assert t["value"] == pytest.approx(2.0)
    assert summ["holds_one"] is False and "| NO |" in "\n".join(lines)
    lines, summ = study.aa_lines(study.load(same), n_boot=200)
    t = summ["compare"]["0.8"]["speedup_tokens"]
    assert t["value"] == pytest.approx(1.0) and summ["holds_one"] is True


def test_aa_is_not_computed_with_fewer_than_two_index_pairs(runs):
    lines, summ = study.aa_lines(study.load(runs), n_boot=100)   # seeds 0-1 only: no seed s + 4
    assert summ is None and any("Not computed yet: 0 index pairs" in x for x in lines)


def test_gain_text_flags_a_gain_below_the_gap_rule():
    """The amendment's gap rule: 3 x the largest measured evaluation SD (0.0048), written as 0.015; below it, flagged."""
    assert study.GAP_RULE == pytest.approx(0.015) and 3 * 0.0048 <= study.GAP_RULE
    assert study.gain_text({"degenerate": False, "start": 0.122, "final": 0.138}) == "0.122 -> 0.138"
    assert study.gain_text({"degenerate": False, "start": 0.095, "final": 0.103}) == "0.095 -> 0.103 (< gap rule 0.015)"
    assert study.gain_text({"degenerate": True, "start": 0.1, "final": 0.1}) == "no gain"


def test_plot_has_a_row_per_warm_start(runs):
    """Each warm start in its own row (interpolate, extrapolate); an arm's label counts that warm start's runs."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = study.load(runs)
    fig = study.plot(data, axis="tokens", grid=11)
    axes = fig.axes
    assert len(axes) == 4 and "W = 0" in axes[0].get_title() and "W = 1" in axes[2].get_title()
    n0 = sum(1 for u in data["baseline"] if u // study.WARM_STRIDE == 0)
    assert [t.get_text() for t in axes[0].get_legend().get_texts()][0] == f"{study.LABEL['baseline']} ({n0} runs)"
    plt.close(fig)
