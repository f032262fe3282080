"""The decisive comparison (experiments.studies.decisive, issue #16 items 3 and 5): the verdict rules on
synthetic arms whose mechanism is known by construction, arm/variant grouping from run configs, the
page section, the committed records, and the paper's numbers against the shared context file."""
from __future__ import annotations

import json
import math
import pathlib
import re

import numpy as np
import pytest

from prs import analysis as an
from experiments.studies import decisive as dc

REPO = pathlib.Path(__file__).resolve().parents[3]
S, STEPS = 8, np.arange(0, 101, 5)


def sat(s, tau, y0=0.2, y1=0.8):
    return y0 + (y1 - y0) * (1.0 - np.exp(-np.asarray(s, float) / tau))


def arm(tau, *, tok_per_step=100.0, density=0.15, seed=0, noise=0.01):
    """S paired seeds of a saturating curve with time constant tau (a seed-shared offset = warm start)."""
    rng = np.random.default_rng(seed)
    warm = np.random.default_rng(99).normal(0, 0.02, (S, 1))   # same for every arm: pairing
    y = sat(STEPS, tau) + warm + noise * rng.normal(size=(S, STEPS.size))
    T = int(STEPS[-1]) + 1
    cost = {"tokens": np.tile(np.arange(T, dtype=float) * tok_per_step, (S, 1))}
    return {"seeds": list(range(S)), "y": y, "cost": cost,
            "density": np.full(S, density) + 0.002 * rng.normal(size=S), "survival": None}


def run_rules(**arms):
    res = dc.arm_stats(STEPS, arms, k=3, n_boot=400)
    return res, dc.verdict(res, cost="tokens")


def test_no_effect_when_ps_equals_baseline():
    res, v = run_rules(baseline=arm(20), ps_ada=arm(20, seed=1))
    assert v["effect"] == "none" and v["mechanism"] == "none" and v["decided_by"] == "baseline"
    assert not v["goal_met"]


def test_extra_compute_when_extra_rollouts_match_at_equal_tokens():
    # PS 2x faster in steps but pays 2x tokens per step; extra_rollouts is as fast at the same tokens
    res, v = run_rules(baseline=arm(20), ps_ada=arm(10, tok_per_step=200, seed=1),
                       extra_rollouts=arm(10, tok_per_step=200, seed=2), reroll_noprefix=arm(20, seed=3))
    s80 = res["arms"]["ps_ada"][0.8]["speedup_steps"]
    assert s80["lo"] > 1.6 and v["effect"] == "faster"
    assert v["mechanism"] == "extra compute" and v["decided_by"] == "extra_rollouts"


def test_filter_survival_when_reroll_without_prefix_is_as_fast():
    res, v = run_rules(baseline=arm(20), ps_ada=arm(10, seed=1), extra_rollouts=arm(20, tok_per_step=150, seed=2),
                       reroll_noprefix=arm(10, seed=3))
    assert v["mechanism"] == "filter survival" and v["decided_by"] == "reroll_noprefix"


def test_recovery_when_failure_prefixes_matter():
    # tau 9 vs 20: ~2.2x (a 2x time compression reads ~1.96x: the chord under a concave curve)
    res, v = run_rules(baseline=arm(20), ps_ada=arm(9, seed=1), extra_rollouts=arm(20, seed=2),
                       reroll_noprefix=arm(20, seed=3), ps_ada_hard=arm(20, seed=4))
    assert v["mechanism"] == "recovery from failure prefixes" and v["decided_by"] == "ps_ada_hard"
    h = res["head_to_head"]["ps_ada_hard"]["steps"]
    assert h["lo"] > 1.5  # ps_ada_hard needs ~2x PS's steps
    assert v["goal_met"]  # 2x, CI inside (1.3, >1.9), beats both controls at matched tokens


def test_signal_density_and_unresolved():
    common = dict(baseline=arm(20, density=0.15), extra_rollouts=arm(20, seed=2), reroll_noprefix=arm(20, seed=3),
                  ps_ada_hard=arm(10, seed=1))   # the same curves as PS: failure prefixes add nothing
    _, v = run_rules(ps_ada=arm(10, seed=1, density=0.20), **common)
    assert v["mechanism"] == "signal density" and v["decided_by"] == "reroll_noprefix"
    _, v = run_rules(ps_ada=arm(10, seed=1, density=0.15), **common)
    assert v["mechanism"] == "prefix, mechanism unresolved"


def test_a_baseline_that_does_not_improve_is_undetermined_and_says_so():
    """A falling baseline (no gap to reach): undetermined, with the start/final levels and the level-free
    AUC and equal-step differences (numpy reference: the paired mean difference, in pp) in the text."""
    def flat(seed, drop):
        a = arm(20, seed=seed)
        a["y"] = 0.14 - drop * STEPS / STEPS[-1] + 0.005 * np.random.default_rng(seed).normal(size=a["y"].shape)
        return a
    base, ps = flat(0, 0.05), flat(1, 0.03)
    res, v = run_rules(baseline=base, ps_ada=ps)
    assert v["effect"] == "undetermined" and v["mechanism"] == "undetermined" and not v["goal_met"]
    assert "the baseline did not improve" in v["text"] and "no gap level to reach" in v["text"]
    eq = res["arms"]["ps_ada"]["equal_step"]["improvement"]["value"]
    want = (ps["y"][:, -3:].mean() - base["y"][:, -3:].mean())
    assert eq == pytest.approx(want, abs=1e-9)
    assert f"at equal steps {100 * eq:.1f} [" in v["text"] and "Without a level: AUC ps_ada - baseline" in v["text"]


def test_a_gap_within_the_seed_offsets_is_timed_by_the_seed_mean_curves():
    """A 2.5-pp baseline gap with half the seeds starting above its 80% level and the other half never
    reaching it: per seed nothing is timed (steps at the first evaluation or the horizon, reported),
    but the seed-mean curves cross it inside, and an arm of the same law is no faster."""
    def tiny(seed):
        a = arm(20, seed=seed)
        off = np.where(np.arange(S) % 2 == 0, 0.06, 0.0)[:, None]
        a["y"] = 0.12 + 0.025 * STEPS / STEPS[-1] + off + 0.002 * np.random.default_rng(seed).normal(size=a["y"].shape)
        return a
    res, v = run_rules(baseline=tiny(0), ps_ada=tiny(1))
    r = res["arms"]["ps_ada"][0.8]
    assert sum(1 for x in r["base_steps"] if x == 0) == S // 2 and r["n_censored_baseline"] == S // 2
    assert STEPS[0] < r["mean_curve_steps"][0] < STEPS[-1]
    sp = r["speedup_steps"]
    assert v["effect"] == "none" and sp["lo"] <= 1.0 <= sp["hi"]


def test_no_timing_when_neither_seed_mean_curve_crosses_inside():
    """The baseline's seed-mean curve is above the level at the first evaluation (a first point far
    above the rest) and the method's never reaches it: restricted crossings at the first evaluation and
    the horizon say nothing about timing (their ratio, 0, is defined): undetermined, and why."""
    base, ps_ = arm(20, seed=0), arm(20, seed=1)
    base["y"] = np.full((S, STEPS.size), 0.1)
    base["y"][:, 0] = 0.9
    base["y"][:, -3:] = 0.5                        # start 0.367, final 0.5: the 80% level 0.473 < 0.9
    ps_["y"] = np.full((S, STEPS.size), 0.3)
    res, v = run_rules(baseline=base, ps_ada=ps_)
    r = res["arms"]["ps_ada"][0.8]
    assert r["mean_curve_steps"] == [STEPS[0], STEPS[-1]] and r["speedup_steps"]["value"] == 0.0
    assert v["effect"] == "undetermined"
    assert "seed-mean curve crosses the level" in v["text"] and "resamples are undefined" not in v["text"]


def test_missing_control_is_undetermined_not_a_pass():
    _, v = run_rules(baseline=arm(20), ps_ada=arm(10, seed=1), extra_rollouts=arm(20, seed=2))
    assert v["mechanism"] == "undetermined" and "reroll_noprefix" in v["decided_by"]
    _, v = run_rules(baseline=arm(20), ps_ada=arm(10, tok_per_step=300, seed=1), reroll_noprefix=arm(20, seed=3))
    assert v["mechanism"] == "extra compute"  # no extra_rollouts arm and PS not cheaper in tokens: not excluded


def test_best_schedule_and_own_baseline():
    res, v = run_rules(**{"baseline": arm(20), "baseline-next_visit": arm(30, seed=5), "ps_ada": arm(18, seed=1),
                          "ps_ada-next_visit": arm(10, seed=6)})
    assert res["arms"]["ps_ada-next_visit"]["vs"] == "baseline-next_visit"
    assert res["arms"]["ps_ada"]["vs"] == "baseline"
    assert res["ps"] == "ps_ada-next_visit"
    table = dc.arms_table(res)
    assert "ps_ada-next_visit" in table and "110 / 1.92" in table


def test_bad_arm_shapes_raise():
    a = arm(20)
    with pytest.raises(ValueError, match="arm 'ps_ada'"):
        dc.arm_stats(STEPS, {"baseline": a, "ps_ada": dict(a, y=a["y"][:, :3])})
    with pytest.raises(ValueError, match="baseline arm"):
        dc.arm_stats(STEPS, {"ps_ada": a})


# ------------------------------------------------------------------------------------------- runs


def write_run(root, name, *, method, seed, schedule="same_step", params=None, tau=20.0, steps=40, extra=None,
              tokens=100, tag=""):
    d = root / name
    d.mkdir(parents=True)
    lines = []
    for s in range(steps + 1):
        if s % 5 == 0:
            lines.append({"kind": "eval", "step": s, "eval/pass_at_1": float(sat(s, tau) + 0.01 * (seed % 3))})
        if s < steps:
            lines.append({"kind": "train", "step": s, "tokens_generated": tokens, "time_sample": 1.0, "time_batch": 0.0,
                          "time_update": 1.0, "pq_trained": 0.15, "groups_kept": 6, "k_hist": [3, 2, 2, 1, 1, 1, 1, 3, 2]})
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    cfg = {"method": dict({"name": method, "schedule": schedule}, **(extra or {})), "seed": seed, "steps": steps,
           "tag": tag,
           "task": {"name": "arith", "params": params or {"max_terms": 5}}}
    (d / "summary.json").write_text(json.dumps({"steps": steps, "config": cfg}))
    return d


def test_variants_and_arms_come_from_the_configs(tmp_path):
    for s in range(3):
        write_run(tmp_path, f"a-baseline-s{s}", method="baseline", seed=s)
        write_run(tmp_path, f"a-ps_ada-nv-s{s}", method="ps_ada", seed=s, schedule="next_visit", tau=10)
        write_run(tmp_path, f"a-ps_ada-nvx-s{s}", method="ps_ada", seed=s, schedule="next_visit", tau=10,
                  extra={"cut_spread": True})
        write_run(tmp_path, f"late-baseline-s{s}", method="baseline", seed=s, params={"max_terms": 9, "hard": "late"})
        # the regime presets tag runs with their schedule (tag: -late-${schedule.kind}): one variant
        for m, sch in (("baseline", "same_step"), ("ps_ada", "next_visit")):
            write_run(tmp_path, f"arith-{m}-late-{sch}-s{s}", method=m, seed=s, schedule=sch, tag=f"-late-{sch}",
                      params={"max_terms": 9, "hard": "late"})
    runs = an.load_runs(tmp_path)
    variants = dc.task_variants(runs)
    assert sorted(variants) == ["arith-late", "arith[hard=None,max_terms=5]", "arith[hard=late,max_terms=9]"]
    assert sorted(dc.group_arms(variants["arith-late"])) == ["baseline", "ps_ada-next_visit"]
    arms = dc.group_arms(variants["arith[hard=None,max_terms=5]"])
    assert sorted(arms) == ["baseline", "ps_ada-next_visit[cut_spread=None]", "ps_ada-next_visit[cut_spread=True]"]
    res = dc.lm_variant(variants["arith[hard=None,max_terms=5]"], n_boot=200)
    assert res["arms"]["ps_ada-next_visit[cut_spread=True]"]["vs"] == "baseline"   # no baseline-next_visit here
    assert res["arms"]["ps_ada-next_visit[cut_spread=True]"][0.8]["speedup_steps"]["value"] > 1.5
    assert dc.k_histogram(variants["arith[hard=None,max_terms=5]"])[0] == pytest.approx(3 / 16)
    # a seed claimed twice by one arm is an error, not a silent average
    write_run(tmp_path, "dup-baseline-s0", method="baseline", seed=0)
    with pytest.raises(ValueError, match="two runs of one seed"):
        dc.lm_arms([r for r in an.load_runs(tmp_path) if r.task_params.get("max_terms") == 5 and r.method == "baseline"])


def test_run_name_schedule_suffix_without_config(tmp_path):
    d = write_run(tmp_path, "arith-ps_ada-next_visit-s3", method="x", seed=3)
    (d / "summary.json").unlink()
    r = an.load_run(d)
    assert (r.method, r.schedule, r.seed) == ("ps_ada", "next_visit", 3)


def test_cli_writes_the_page_section_with_commit_and_figures(tmp_path):
    from experiments import analyze
    root = tmp_path / "sweep"
    for s in range(3):
        write_run(root, f"t-baseline-s{s}", method="baseline", seed=s)
        write_run(root, f"t-ps_ada-s{s}", method="ps_ada", seed=s, tau=10, tokens=120)
        write_run(root, f"t-reroll_noprefix-s{s}", method="reroll_noprefix", seed=s, tau=10, tokens=120)
    page = tmp_path / "README.md"
    page.write_text("# Results\n\nhand-written text\n")
    analyze.main([str(root), "--out", str(tmp_path / "out"), "--readme", str(page), "--n-boot", "200",
                  "--decisive-only"])
    text = page.read_text()
    assert text.startswith("# Results\n\nhand-written text") and dc.BEGIN in text and dc.END in text
    assert re.search(r"Produced at (commit `[0-9a-f]{10}`|unknown commit)", text)
    assert "**filter survival**" in text   # reroll_noprefix as fast as PS; no extra_rollouts arm
    assert (tmp_path / "out" / "decisive.json").exists()
    pngs = sorted(p.name for p in (tmp_path / "out").glob("decisive_*.png"))
    assert len(pngs) == 2 and all((tmp_path / "out" / p).stat().st_size > 5000 for p in pngs)
    # regenerating replaces the section, never duplicates it
    analyze.main([str(root), "--out", str(tmp_path / "out"), "--readme", str(page), "--n-boot", "200", "--no-figures"])
    assert page.read_text().count(dc.BEGIN) == 1


def test_cli_copy_records_then_analyses_the_copy(tmp_path, capsys):
    """--copy-records: the complete runs (prefix-selected) are copied gzipped, the copy is what is analysed,
    the page's command names the copy; copying again is a no-op, a different run of that name an error."""
    import gzip

    from experiments import analyze
    root = tmp_path / "sweep"
    for s in range(3):
        write_run(root, f"regime_t-baseline-s{s}", method="baseline", seed=s)
        write_run(root, f"regime_t-ps_ada-s{s}", method="ps_ada", seed=s, tau=10)
    write_run(root, "other-baseline-s0", method="baseline", seed=0)
    (write_run(root, "regime_t-ps_fix-s0", method="ps_fix", seed=0) / "summary.json").unlink()   # unfinished
    dst, page = tmp_path / "records", tmp_path / "README.md"
    argv = [str(root), "--decisive-only", "--copy-records", str(dst), "--copy-prefix", "regime_", "--out",
            str(tmp_path / "out"), "--readme", str(page), "--n-boot", "200", "--no-figures"]
    analyze.main(argv)
    names = sorted(d.name for d in dst.iterdir())
    assert names == sorted(f"regime_t-{m}-s{s}" for m in ("baseline", "ps_ada") for s in range(3))
    d = dst / "regime_t-ps_ada-s1"
    assert sorted(p.name for p in d.iterdir()) == ["metrics.jsonl.gz", "summary.json"]
    assert gzip.decompress((d / "metrics.jsonl.gz").read_bytes()) == (root / d.name / "metrics.jsonl").read_bytes()
    a, b = an.load_run(root / d.name), an.load_run(d)
    assert b.complete and np.array_equal(a.eval_pass, b.eval_pass) and np.array_equal(a.step_tokens, b.step_tokens)
    text = page.read_text()
    assert f"experiments.analyze {dst} --decisive-only --out" in text and "--copy" not in text
    before = (d / "metrics.jsonl.gz").read_bytes()
    analyze.main(argv)                                   # again: same records, nothing changes
    assert (d / "metrics.jsonl.gz").read_bytes() == before
    (d / "metrics.jsonl.gz").write_bytes(gzip.compress(gzip.decompress(before), mtime=12345))  # another header
    analyze.main(argv)                                   # same content: still a no-op, the file is kept
    assert gzip.decompress((d / "metrics.jsonl.gz").read_bytes()) == gzip.decompress(before)
    with open(root / d.name / "metrics.jsonl", "a") as f:   # a different run under the same name
        f.write(json.dumps({"kind": "eval", "step": 99, "eval/pass_at_1": 0.5}) + "\n")
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # one error line (experiments.cli.command), exit status 2
        analyze.main(argv)
    assert e.value.code == 2 and "already holds different metrics.jsonl.gz" in capsys.readouterr().err


def test_committed_records():
    runs = an.load_runs(REPO / "results" / "schedules" / "runs")
    (variant, vr), = dc.task_variants(runs).items()
    res = dc.lm_variant(vr, n_boot=200)
    nv = [a for a in res["arms"] if a.startswith("ps_ada-next_visit")]
    assert len(nv) == 2 and all(res["arms"][a]["vs"] == "baseline-next_visit" for a in nv)
    assert res["arms"]["ps_ada"]["vs"] == "baseline" and len(res["arms"]["ps_ada"]["paired_seeds"]) == 3
    assert res["verdict"]["mechanism"] in dc.MECHANISMS
    old = dc.lm_variant([r for r in an.load_runs(REPO / "results" / "ablation" / "runs") if r.task == "arith"], n_boot=200)
    # the old metric beside: the same numbers as stats.analyze_task (paired) gives
    ref = an.analyze_task(an.group_runs([r for r in an.load_runs(REPO / "results" / "ablation" / "runs") if r.task == "arith"])["arith"],
                          paired=True, n_boot=200)
    assert old["old_metric"]["ps_ada"]["value"] == pytest.approx(ref["methods"]["ps_ada"]["speedup_steps"]["value"])


def test_replace_section():
    assert dc.replace_section("a\n", "S\n") == "a\n\nS\n"
    t = f"a\n{dc.BEGIN}\nold\n{dc.END}\nz\n"
    assert dc.replace_section(t, f"{dc.BEGIN}\nnew\n{dc.END}\n") == f"a\n{dc.BEGIN}\nnew\n{dc.END}\nz\n"
    with pytest.raises(ValueError, match="only one of the markers"):
        dc.replace_section(f"a {dc.BEGIN}", "S")


CONTEXT = pathlib.Path("/work/shared/context/prefix_sampling.md")


@pytest.mark.skipif(not CONTEXT.exists(), reason="the shared context file is not on this machine")
def test_paper_numbers_match_the_context_file():
    text = CONTEXT.read_text()
    rows = {"Baseline": "baseline", "PS-fix": "ps_fix", "PS-ada hard-only": "ps_ada_hard", "PS-ada full": "ps_ada"}
    for label, m in rows.items():
        hit = re.search(rf"^\| {re.escape(label)}[^|]*\| (\d+) \| ([\d.]+)×", text, re.M)
        assert hit, label
        assert int(hit.group(1)) == an.PAPER_ABLATION_STEPS[m] and float(hit.group(2)) == an.PAPER_ABLATION_SPEEDUP[m]
    for model, pp in an.PAPER_EQUAL_STEP_PP.items():
        assert re.search(rf"\| {model} \|[^\n]*\+{pp} pp", text), model
    from experiments import simulate
    assert simulate.PAPER_ABLATION is an.PAPER_ABLATION_SPEEDUP  # one source of truth


def test_a_running_run_is_read_from_its_config_json(tmp_path):
    d = write_run(tmp_path, "arith-ps_ada-late-next_visit-s2", method="ps_ada", seed=2, schedule="next_visit",
                  tag="-late-next_visit", params={"hard_op": "late"})
    cfg = json.loads((d / "summary.json").read_text())["config"]
    (d / "summary.json").unlink()
    (d / "config.json").write_text(json.dumps(dict(cfg, steps=80)))   # still running: 40 of 80 steps
    r = an.load_run(d)
    assert (r.task, r.method, r.schedule, r.task_params) == ("arith-late-next_visit", "ps_ada", "next_visit",
                                                             {"hard_op": "late"})
    assert r.status == "partial" and r.planned_steps == 80
    assert list(dc.task_variants([r])) == ["arith-late"]
