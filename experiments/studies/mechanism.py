"""The deep-horizon sweep's reading (results/mechanism/README.md, section 7), computed from its records.

    python -m experiments.studies.mechanism                 # print the section
    python -m experiments.studies.mechanism --write         # rewrite it on the page, write summary.json and figures
    python -m experiments.studies.mechanism --check         # exit 1 if the committed section differs
    python -m experiments.studies.mechanism --write --recovery-coverage 400   # + section 11's coverage

Runs are ``results/mechanism/sweep/runs/deep_e<E>-<arm>-s<seed>`` (``experiments/mechanism_sweep.sh``);
only complete runs (a ``summary.json``) are read, and an arm is compared with a reference arm on the
seeds both completed (paired: same seed = same warm start and problem stream).

The mechanism metric is the hard step's teacher-forced accuracy ``eval/mech/tf_hard_acc`` (E[q] on
512 held-out problems, ``DeepTask.policy_metrics``), logged at every evaluation. For each comparison
(``COMPARISONS``: the prediction's PS arms against the no-prefix re-roll of the same groups, the oracle
positive control and the PS arms against the baseline) ``prs.analysis.gap.gap_compare`` gives:

  * **hard-step accuracy steps**: the speed-up in steps to 80% (and 50%) of the *reference* arm's gap
    (its start -> final level on its seed-mean curve, first / last 3 evaluations), the headline being
    the restricted crossing of the seed-mean curves with the level re-estimated inside every paired
    resample; horizon = the last evaluation every paired seed reached; censored seeds counted at the
    horizon (restricted mean, Royston & Parmar 2013);
  * **area under the curve** (the metric's mean over [0, horizon]) and the **equal-step difference**
    at the horizon (mean of the last 3 evaluations), paired, with expanded percentile intervals.

Beside them: generated tokens per step (the controls' cost, measured), held-out pass@1, P(reach) and
output length at the horizon. The prediction (section 3, stated before the runs): on E = 12 the fixed
cut's (and PS-ada's) steps ratio against the re-roll >= 1.5 with CI lower bound > 1.2; on E = 2 <= 1.15.
"""
from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np

from experiments.studies import command_line
from prs.analysis.bootstrap import bootstrap_band, bootstrap_mean
from prs.analysis.bootstrap import percentile_ci
from prs.analysis.gap import common_horizon, gap_compare, gap_levels, restricted_speedup
from prs.analysis.runs import read_records
from prs.analysis.tables import BOUND_NOTE, fmt, fmt_ci, fmt_ratio, to_jsonable

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNS = ROOT / "results" / "mechanism" / "sweep" / "runs"
OUT = ROOT / "results" / "mechanism" / "sweep"
PAGE = ROOT / "results" / "mechanism" / "README.md"
BEGIN = "<!-- mechanism-sweep:begin (experiments/studies/mechanism.py; edits here are overwritten) -->"
END = "<!-- mechanism-sweep:end -->"
METRIC = "eval/mech/tf_hard_acc"
ARMS = ("reroll_noprefix", "ps_cut", "ps_cut_hard", "ps_ada", "baseline", "oracle", "extra_tok", "baseline_2n",
        "reroll_app", "ps_cut_app")
LABEL = {"reroll_noprefix": "re-roll, no prefix", "ps_cut": "PS, cut before the hard step",
         "ps_cut_hard": "PS hard side only, cut before the hard step", "ps_ada": "PS-ada",
         "baseline": "baseline", "oracle": "oracle prefix (positive control)",
         "extra_tok": "extra rollouts, matched to `ps_cut` in tokens", "baseline_2n": "baseline, 2N = 16 rollouts",
         "reroll_app": "re-roll, no prefix, appended (section 12)",
         "ps_cut_app": "PS, cut before the hard step, appended (section 12)"}
# (method, reference, why)
COMPARISONS = (("ps_cut", "reroll_noprefix", "prediction 1/2"), ("ps_ada", "reroll_noprefix", "prediction 1/2"),
               ("oracle", "baseline", "positive control"), ("ps_cut", "baseline", "PS against GRPO"),
               ("ps_ada", "baseline", "PS against GRPO"), ("reroll_noprefix", "baseline", "the re-roll itself"),
               ("ps_cut_hard", "reroll_noprefix", "the hard side alone"), ("ps_cut_hard", "baseline", "the hard side alone"),
               ("ps_cut", "extra_tok", "control matched in tokens"), ("extra_tok", "baseline", "the extra rollouts"),
               ("ps_cut", "baseline_2n", "against 2N rollouts"), ("baseline_2n", "baseline", "2N rollouts"),
               ("ps_cut_app", "reroll_app", "section 12: A2"), ("ps_cut_app", "ps_cut", "section 12: append vs replace"),
               ("ps_cut_app", "baseline", "section 12: PS appended vs GRPO"),
               ("reroll_app", "baseline", "section 12: the appended re-roll itself"))
NAME = re.compile(r"^deep_e(?P<e>\d+)(?:_(?P<tag>[a-z]+?))?(?:w(?P<w>\d+))?-(?P<arm>[a-z0-9_]+)-s(?P<seed>\d+)$")
# a chain's key: its length E (int), or "E_tag" for another calibration of it analysed apart (section 9: "12_lo")
TAGS = {"lo": "lower reach, warm start C (section 9)", "bad": "wrong addition table, warm start D (section 9)",
        "flaky": "flaky-tool agent chain, crash rate 0.1 (section 10)"}
WARM_STRIDE = 100  # a run's paired unit: warm start w, seed s -> w * WARM_STRIDE + s


def chain_e(key) -> int:
    """The chain length E of a chain key (``12``, ``2``, ``"12_lo"``)."""
    return int(str(key).split("_")[0])


def chain_tag(key) -> str:
    """The calibration tag of a chain key (``"lo"`` for ``"12_lo"``; ``""`` for a chain's own, ``12``)."""
    return str(key).partition("_")[2]


def chain_order(keys) -> list:
    """Chain keys longest first, a length's own calibration before its tagged ones."""
    return sorted(keys, key=lambda k: (-chain_e(k), str(k)))


def chain_name(key) -> str:
    tag = chain_tag(key)
    return f"E = {chain_e(key)}" + (f", {TAGS[tag]}" if tag else "")


def _complete_runs(runs: pathlib.Path, pattern: str, name: re.Pattern):
    """``(name match, eval records, train records, run directory)`` of every run directory under ``runs``
    matching the glob ``pattern`` and ``name`` that is complete (has a ``summary.json``), in name order."""
    for d in sorted(runs.glob(pattern)):
        m = name.match(d.name)
        if not m or not d.is_dir() or not (d / "summary.json").exists():
            continue
        recs = read_records(d)
        yield m, [r for r in recs if r.get("kind") == "eval"], [r for r in recs if r.get("kind") == "train"], d


# The commit from which a task's training ``episode_metrics`` (mech/output_len, mech/p_reach,
# mech/hard_acc_on_reach, restart rates) count fresh rows only (``prs.rl.episodes.fresh_rows``, issue 45
# item 1). Before it, the arithmetic tasks' oracle arms merged their re-rolls into the training call
# (``prs.tasks.mechanism.OracleRollouts.rollout``) and these metrics mixed replayed rows with fresh ones.
FRESH_ROWS_FIX = "c9788b6"
MIXED_NOTE = ("n/a (mixed): logged before commit c9788b6 (`prs.rl.episodes.fresh_rows`), when this arm's training "
              "metrics mixed the oracle's replayed rows with fresh ones; not comparable with the other arms")
_HAS_FIX: dict[str, bool] = {}


def _has_fix(commit: str) -> bool:
    """Whether ``commit`` contains ``FRESH_ROWS_FIX`` (git ancestry in this checkout); False when git cannot
    tell (no git, a shallow clone, an unknown commit): a record counts as fixed only when shown to be."""
    if commit not in _HAS_FIX:
        try:
            r = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", FRESH_ROWS_FIX, commit],
                               capture_output=True, timeout=30)
            _HAS_FIX[commit] = r.returncode == 0
        except (OSError, subprocess.SubprocessError):
            _HAS_FIX[commit] = False
    return _HAS_FIX[commit]


def mixes_replayed(run: pathlib.Path) -> bool:
    """Whether run directory ``run``'s training episode metrics mix replayed rows with fresh ones: its
    training rollout call merges an oracle's re-rolls (``arith_deep`` with ``oracle_max_k >= 0``,
    ``arith_recovery`` with ``oracle_min_k >= 0``: ``OracleRollouts``) and a segment of it (a line of
    ``provenance.jsonl``; a resumed run has several) was logged by code without ``FRESH_ROWS_FIX``.
    Prefix Sampling's re-rolls never reached these metrics: ``same_step`` hands ``episode_metrics`` the
    first call's rollouts and ``next_visit`` its unsteered groups (``prs.rl.schedule``; the fixed-cut
    arm's ``OracleRollouts.reroll`` is a re-roll call); ``flaky_chain`` filtered its replayed rows before
    the fix. A run without ``config.json`` is not an oracle run."""
    cfg_path = run / "config.json"
    if not cfg_path.exists():
        return False
    task = json.loads(cfg_path.read_text()).get("task") or {}
    params = task.get("params") or {}
    oracle = ((task.get("name") == "arith_deep" and int(params.get("oracle_max_k", -1)) >= 0)
              or (task.get("name") == "arith_recovery" and int(params.get("oracle_min_k", -1)) >= 0))
    if not oracle:
        return False
    prov = run / "provenance.jsonl"
    commits = [json.loads(x).get("commit") for x in prov.read_text().splitlines() if x.strip()] if prov.exists() else []
    return not commits or not all(c and _has_fix(c) for c in commits)


def _column(recs: list[dict], key: str, missing: float = np.nan) -> np.ndarray:
    """[len(recs)] float: ``key`` of each record, ``missing`` where it is absent or None (not logged)."""
    return np.array([missing if r.get(key) is None else r[key] for r in recs], float)


def load(runs: pathlib.Path = RUNS) -> dict[int | str, dict[str, dict[int, dict]]]:
    """chain key (``E``, or ``"E_tag"`` for ``deep_e<E>_<tag>-*``) -> arm -> unit -> {"steps" [E'], "tf" [E'], "pass" [E'], "p_reach" [E'], "tokens" [T], "out_len" [T],
    "steered" [T]} of every complete run (a run without ``summary.json`` is left out). The paired unit is
    the warm start and the seed (``deep_e<E>w<w>-<arm>-s<seed>``: ``w * WARM_STRIDE + seed``; no ``w``: 0):
    the same unit in two arms shares the warm start and the problem stream."""
    out: dict[int | str, dict[str, dict[int, dict]]] = {}
    for m, ev, tr, d in _complete_runs(runs, "deep_e*-s*", NAME):
        unit = int(m["w"] or 0) * WARM_STRIDE + int(m["seed"])
        key = f"{m['e']}_{m['tag']}" if m["tag"] else int(m["e"])
        out.setdefault(key, {}).setdefault(m["arm"], {})[unit] = {
            "steps": np.array([r["step"] for r in ev]), "tf": np.array([r[METRIC] for r in ev], float),
            "pass": np.array([r["eval/pass_at_1"] for r in ev], float),
            "p_reach": _column(ev, "eval/mech/p_reach"), "tokens": np.array([r["tokens_generated"] for r in tr], float),
            "out_len": _column(tr, "mech/output_len"), "steered": _column(tr, "groups_steered", 0.0),
            "adv_mass": _column(tr, "mech/adv_mass_hard"), "p_alive": _column(ev, "eval/mech/p_alive"),
            "reach_tf": _column(ev, "eval/mech/tf_reach_policy"), "mixed": mixes_replayed(d)}
    return out


REC_NAME = re.compile(r"^recovery-(?P<arm>[a-z_]+)-s(?P<seed>\d+)$")
REC_KEYS = {"recovery": "eval/mech/recovery_rate", "clean": "eval/mech/clean_pass_rate", "pass": "eval/pass_at_1",
            "restart_faulty": "eval/mech/restart_rate_faulty", "restart_clean": "eval/mech/restart_rate_clean"}
REC_ARMS = ("baseline", "oracle", "ps_ada_easy", "extra_rollouts")
REC_LABEL = {"baseline": "baseline", "oracle": "injected-fault oracle (positive control)",
             "ps_ada_easy": "PS, easy side only", "extra_rollouts": "extra rollouts"}


def load_recovery(runs: pathlib.Path = RUNS) -> dict[str, dict[int, dict]]:
    """arm -> seed -> {"steps", REC_KEYS' names [E'], "tokens" [T], "oracle_groups" [T], "steered" [T]} of every
    complete recovery run (``recovery-<arm>-s<seed>``)."""
    out: dict[str, dict[int, dict]] = {}
    for m, ev, tr, _ in _complete_runs(runs, "recovery-*-s*", REC_NAME):
        row = {"steps": np.array([r["step"] for r in ev])}
        row.update({k: _column(ev, key) for k, key in REC_KEYS.items()})
        row["tokens"] = np.array([r["tokens_generated"] for r in tr], float)
        row["oracle_groups"] = _column(tr, "mech/oracle_groups", 0.0)
        row["steered"] = _column(tr, "groups_steered", 0.0)
        out.setdefault(m["arm"], {})[int(m["seed"])] = row
    return out


def recovery_lines(rec: dict[str, dict[int, dict]]) -> list[str]:
    """The recovery runs' table: per arm and seed, the held-out recovery rate (faulty drafts), clean-draft
    pass rate and restart rates at the first and the last evaluation, and the cost per step."""
    if not rec:
        return []
    lines = ["### Recovery task (fault rate 0.15 warm start, section 6)", "",
             "Held-out evaluation at fault rate 0.5 (256 problems x 2 samples: ~256 faulty-draft episodes, SE of a "
             "rate near 0.05 about 0.014). Per seed: first -> last evaluation.", "",
             "| arm | seed | steps | recovery rate | clean-draft pass | restarts after a faulty / clean draft (last) | "
             "held-out pass@1 | gen. tokens / step | groups replaced or steered / step |", "|---|---|---|---|---|---|---|---|---|"]
    for arm in REC_ARMS:
        for seed, r in sorted(rec.get(arm, {}).items()):
            f = lambda k: f"{fmt(r[k][0], 3)} -> {fmt(r[k][-1], 3)}"  # noqa: E731
            lines.append(f"| {REC_LABEL[arm]} | {seed} | {int(r['steps'][-1])} | {f('recovery')} | {f('clean')} | "
                         f"{fmt(r['restart_faulty'][-1], 3)} / {fmt(r['restart_clean'][-1], 3)} | {f('pass')} | "
                         f"{r['tokens'].mean():.0f} | {max(r['oracle_groups'].mean(), r['steered'].mean()):.1f} |")
    return lines + [""]


RF_NAME = re.compile(r"^recovery_flaky_g(?P<g>\d+)(?:w(?P<w>\d+))?-(?P<arm>[a-z0-9_]+)-s(?P<seed>\d+)$")
RF_METRIC = "eval/mech/tf_retry"
RF_ARMS = ("baseline", "oracle", "ps_easy_cut", "ps_easy", "reroll_easy", "extra_tok", "baseline_2n")
RF_LABEL = {"baseline": "baseline", "oracle": "injected-error oracle (positive control)",
            "ps_easy_cut": "PS easy side, cut at the source's first error", "ps_easy": "PS easy side, controller's cut",
            "reroll_easy": "re-roll of the same groups, no prefix",
            "extra_tok": "extra rollouts, matched to `ps_easy_cut` in tokens", "baseline_2n": "baseline, 2N = 16 rollouts"}
# (method, reference, why): section 11's gate and predictions first
RF_COMPARISONS = (("oracle", "baseline", "gate (positive control)"), ("ps_easy_cut", "extra_tok", "R1"),
                  ("ps_easy_cut", "reroll_easy", "R2"), ("ps_easy_cut", "baseline", "PS against GRPO"),
                  ("ps_easy", "extra_tok", "the controller's cut"), ("ps_easy", "reroll_easy", "the controller's cut"),
                  ("reroll_easy", "baseline", "the re-roll itself"), ("extra_tok", "baseline", "the extra rollouts"),
                  ("baseline_2n", "baseline", "2N rollouts"), ("ps_easy_cut", "baseline_2n", "against 2N rollouts"))
RF_EVAL = {"tf": RF_METRIC, "pass": "eval/pass_at_1", "recovery": "eval/mech/recovery_rate",
           "clean": "eval/mech/clean_pass_rate", "reach_tf": "eval/mech/tf_reach_policy"}
RF_EROSION = 0.85  # R3: the PS arms' teacher-forced P(all easy values right) stays at or above this


def rf_key_name(key: str) -> str:
    """``"g005"`` -> ``"tool-error rate 0.05"`` (the digits of the rate without its dot)."""
    d = key[1:]
    return f"tool-error rate {d[0]}.{d[1:]}"


def load_flaky_recovery(runs: pathlib.Path = RUNS) -> dict[str, dict[str, dict[int, dict]]]:
    """``"g<rate digits>"`` -> arm -> unit -> {"steps", "tf" (= ``tf_retry``), ``RF_EVAL``'s other names [E'],
    "tokens", "out_len", "steered" [T]} of every complete ``recovery_flaky_g<digits>[w<w>]-<arm>-s<seed>`` run
    (section 11); the unit is ``w * WARM_STRIDE + seed`` as in ``load``; "steered" counts the groups an arm
    re-rolls or steers per step (the oracle's replaced groups, PS's steered ones)."""
    out: dict[str, dict[str, dict[int, dict]]] = {}
    for m, ev, tr, d in _complete_runs(runs, "recovery_flaky_g*-s*", RF_NAME):
        unit = int(m["w"] or 0) * WARM_STRIDE + int(m["seed"])
        row = {"steps": np.array([r["step"] for r in ev])}
        row.update({k: _column(ev, key) for k, key in RF_EVAL.items()})
        row["tokens"] = np.array([r["tokens_generated"] for r in tr], float)
        row["out_len"] = _column(tr, "mech/output_len")
        row["mixed"] = mixes_replayed(d)
        row["steered"] = np.maximum(_column(tr, "mech/oracle_groups", 0.0), _column(tr, "groups_steered", 0.0))
        out.setdefault(f"g{m['g']}", {}).setdefault(m["arm"], {})[unit] = row
    return out


def rf_verdicts(comps: dict, rows: list[dict]) -> dict[str, str]:
    """Section 11's gate and predictions R1-R3 read from the comparisons (``compare``) and the arms' rows
    (``flaky_recovery_lines``: ``reach_tf_low``, the lowest seed-mean teacher-forced reach)."""
    out = {"gate": gate(comps.get("oracle|baseline"))}
    g = comps.get("ps_easy_cut|extra_tok")
    if g is None:
        out["R1"] = "not enough paired seeds yet"
    else:
        a, r = g["auc"]["improvement"], g[0.8]["speedup_steps"]
        direction = bool(np.isfinite(a["lo"]) and a["lo"] > 0)   # the refutation rule stated before the runs
        size = read_level(r, 1.5)
        word = ("refuted" if not direction else "holds" if size == "above" else "direction holds, size not reached"
                if size == "below" else "direction holds, size undecided")
        out["R1"] = (f"{word}: AUC difference {fmt_ci(a, 3)}, steps {fmt_ratio(r)} (size read by its CI: "
                     f"{LEVEL_WORD[size]} 1.5x; holds: the AUC CI above 0 and the steps CI above 1.5x; refuted: the "
                     "AUC CI includes 0 or lies below it)")
    g = comps.get("ps_easy_cut|reroll_easy")
    if g is None:
        out["R2"] = "not enough paired seeds yet"
    else:
        r = g[0.8]["speedup_steps"]
        size = read_level(r, 1.5)
        word = {"above": "holds", "below": "refuted"}.get(size, "undecided")
        out["R2"] = f"{word}: {fmt_ratio(r)} (the CI {LEVEL_WORD[size]} 1.5x; holds: the CI above 1.5x)"
    lows = {r["arm"]: r["reach_tf_low"] for r in rows if r["arm"] in ("ps_easy_cut", "ps_easy")}
    if lows:
        ok = all(v >= RF_EROSION for v in lows.values())
        out["R3"] = (f"{'holds' if ok else 'refuted'}: lowest seed-mean teacher-forced P(all easy values right) "
                     + ", ".join(f"`{a}` {v:.3f}" for a, v in lows.items()) + f" (needs >= {RF_EROSION})")
    else:
        out["R3"] = "no PS run yet"
    return out


def flaky_recovery_lines(rf: dict[str, dict[str, dict[int, dict]]], *, n_boot: int = 2000) -> tuple[list[str], dict]:
    """Section 11's tables: per arm the retry skill (``tf_retry``) at the start and the horizon, the held-out
    recovery / clean / pass@1 rates there, the easy steps' teacher-forced reach (erosion), the cost; then the
    comparisons (``RF_COMPARISONS``, the same estimators as the deep chains) and the gate and predictions."""
    lines, summary = [], {}
    for key in sorted(rf):
        data = rf[key]
        lines += [f"### Recovery on the flaky environment, {rf_key_name(key)} (section 11)", "",
                  "Metric: the retry skill teacher-forced at an injected tool error (`eval/mech/tf_retry`, 512 held-out "
                  "problems, the same states in every arm). Held-out recovery rate: passes among the ~19% of 128 x 2 "
                  "evaluation episodes that met an error (SE ~0.07: secondary). Seed means with 95% CIs.", "",
                  "| arm | seeds | retry skill at 0 | at the last evaluation (step) | held-out recovery rate there | "
                  "clean pass there | held-out pass@1 there | easy steps' reach, teacher-forced: lowest seed mean | "
                  "gen. tokens / step | groups re-rolled or steered / step | output length (last 10 steps) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        rows = []
        for arm, seeds, steps, tf in _arm_curves(data, RF_ARMS):
            cols = {k: _matrix(data[arm], seeds, k)[1] for k in ("recovery", "clean", "pass", "reach_tf")}
            row = {"arm": arm, "seeds": seeds, "horizon": int(steps[-1]), "tf_start": bootstrap_mean(tf[:, 0]),
                   "tf_end": bootstrap_mean(tf[:, -1]),
                   **{f"{k}_end": bootstrap_mean(v[:, -1][np.isfinite(v[:, -1])]) for k, v in cols.items() if k != "reach_tf"},
                   "reach_tf_low": float(np.nanmin(np.nanmean(cols["reach_tf"], axis=0))),
                   "tokens_per_step": float(np.mean([data[arm][s]["tokens"].mean() for s in seeds])),
                   "steered_per_step": float(np.mean([data[arm][s]["steered"].mean() for s in seeds])),
                   "out_len_last10": _out_len_last10(data[arm], seeds)}
            rows.append(row)
            lines.append(f"| {RF_LABEL[arm]} (`{arm}`) | {len(seeds)} | {fmt(row['tf_start']['value'], 3)} | "
                         f"{fmt_ci(row['tf_end'], 3)} ({row['horizon']}) | {fmt_ci(row['recovery_end'], 3)} | "
                         f"{fmt_ci(row['clean_end'], 3)} | {fmt_ci(row['pass_end'], 3)} | {row['reach_tf_low']:.3f} | "
                         f"{row['tokens_per_step']:.0f} | {row['steered_per_step']:.1f} | {_fmt_out_len(row['out_len_last10'])} |")
        lines += _mixed_note(rows)
        comp_lines, comps = _comparison_table(data, RF_COMPARISONS, n_boot=n_boot)
        lines += comp_lines
        held_out = {}
        for k, what in (("pass", "held-out pass@1 (256 episodes)"), ("recovery", "held-out recovery rate (~48 episodes "
                                                                           "with an error an evaluation: noisy)")):
            t_lines, held_out[k] = _comparison_table(data, RF_COMPARISONS[:4], n_boot=n_boot, key=k)
            lines += ["", f"The same comparisons on the {what}, secondary:"] + t_lines
        v = rf_verdicts(comps, rows)
        lines += ["", f"**Gate ({rf_key_name(key)}):** {v['gate']}.", "",
                  f"**R1 (PS easy side, error cut, vs extra rollouts matched in tokens):** {v['R1']}.", "",
                  f"**R2 (vs the no-prefix re-roll):** {v['R2']}.", "", f"**R3 (erosion):** {v['R3']}.", ""]
        summary[key] = {"arms": rows, "comparisons": {k: to_jsonable(g) for k, g in comps.items()}, "verdicts": v,
                        "held_out": {m: {k: to_jsonable(g) for k, g in c.items()} for m, c in held_out.items()}}
    return lines, summary


def _arm_curves(data: dict[str, dict[int, dict]], order):
    """``(arm, units, steps [E], metric [S, E])`` of every arm of ``order`` that ``data`` holds, in that order."""
    for arm in order:
        if arm in data:
            seeds = sorted(data[arm])
            steps, tf = _matrix(data[arm], seeds, "tf")
            yield arm, seeds, steps, tf


def _out_len_last10(runs: dict[int, dict], seeds: list[int]) -> float | None:
    """The output length over each unit's last 10 training steps, mean over units (``mech/output_len``);
    None when a unit's training metrics mix replayed rows (``mixes_replayed``: not comparable)."""
    if any(runs[s].get("mixed") for s in seeds):
        return None
    return _finite_mean([runs[s]["out_len"][-10:].mean() for s in seeds])


def _fmt_out_len(v: float | None) -> str:
    """An output length for a table: ``n/a (mixed)`` for None (``MIXED_NOTE``)."""
    return "n/a (mixed)" if v is None else fmt(v, 1)


def _mixed_note(rows: list[dict]) -> list[str]:
    """The footnote of a table some of whose ``rows`` print ``n/a (mixed)``; none otherwise."""
    arms = [f"`{r['arm']}`" for r in rows if r["out_len_last10"] is None]
    return ["", f"Output length {MIXED_NOTE} ({', '.join(arms)})."] if arms else []


def _finite_mean(x) -> float:
    """The mean of the finite entries of ``x``; NaN (no warning) when there are none."""
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else float("nan")


def _matrix(runs: dict[int, dict], seeds: list[int], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps [E], y [S, E]) of ``key`` on ``seeds`` (the steps every one of them evaluated)."""
    steps = sorted(set.intersection(*(set(runs[s]["steps"].tolist()) for s in seeds)))
    y = np.array([[runs[s][key][list(runs[s]["steps"]).index(t)] for t in steps] for s in seeds], float)
    return np.asarray(steps), y


def _cum_tokens(runs: dict[int, dict], seeds: list[int]) -> np.ndarray:
    t = min(runs[s]["tokens"].size for s in seeds)
    return np.array([np.r_[0.0, np.cumsum(runs[s]["tokens"][:t])] for s in seeds])


def _paired(data: dict[str, dict[int, dict]], method: str, ref: str, key: str):
    """``(units, steps [E'], ref [U, E'], method [U, E'])`` of ``key`` on the units both arms ran, or None
    (an arm missing, or < 2 common units)."""
    if method not in data or ref not in data:
        return None
    units = sorted(set(data[method]) & set(data[ref]))
    if len(units) < 2:
        return None
    steps, yr = _matrix(data[ref], units, key)
    _, ym = _matrix(data[method], units, key)
    return units, steps, yr, ym


def compare(data: dict[str, dict[int, dict]], method: str, ref: str, *, n_boot: int = 2000, key: str = "tf") -> dict | None:
    """``gap_compare`` of ``method`` against ``ref`` on the metric (``key`` of the runs: ``"tf"``, the
    study's), on their common seeds (None: < 2)."""
    paired = _paired(data, method, ref, key)
    if paired is None:
        return None
    seeds, steps, yr, ym = paired
    g = gap_compare(steps, yr, ym, cost_base={"tokens": _cum_tokens(data[ref], seeds)},
                    cost_meth={"tokens": _cum_tokens(data[method], seeds)}, n_boot=n_boot)
    g["seeds"] = seeds
    return g


def _comparison_table(data: dict[str, dict[int, dict]], comparisons, *, n_boot: int, key: str = "tf") -> tuple[list[str], dict]:
    """The comparison table on the runs' ``key`` (a blank line, header, a row per ``(method, reference, why)``
    both arms ran on >= 2 paired units) and ``{"method|reference": compare(...)}``."""
    lines = ["", "| method vs reference | why | paired seeds | reference's gap (start -> final) | "
             "steps to 80%: speed-up | its censoring bound | tokens to 80%: speed-up | censored seeds (ref / method) | "
             "other estimators: steps to 50%; per seed, to 80% | "
             "AUC difference | equal-step difference | steps to 80% per warm start (its own level; 50%; per seed) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    comps = {}
    for meth, ref, why in comparisons:
        g = compare(data, meth, ref, n_boot=n_boot, key=key)
        if g is not None:
            g["by_warm_start"] = per_warm_start(data, meth, ref, n_boot=n_boot, key=key)
            comps[f"{meth}|{ref}"] = g
            lines.append(_comparison_row(meth, ref, why, g))
    return lines, comps


def per_warm_start(data: dict[str, dict[int, dict]], method: str, ref: str, *, n_boot: int, key: str = "tf") -> dict:
    """``compare`` within each warm start (unit // ``WARM_STRIDE``) when the paired units span more than one:
    {warm start: its steps-to-80% speed-up ci}, each read at its own reference's level. The pooled row reads
    one level from all units' mean curve, so a warm start that learns more slowly can sit below it in both
    arms (censored at the horizon in both) and pull the pooled ratio towards 1; these show it. {} otherwise."""
    units = set(data.get(method, {})) & set(data.get(ref, {}))
    split = by_warm_start({a: {u: data[a][u] for u in units} for a in (method, ref)})
    if len(split) < 2:
        return {}
    out = {}
    for w, sub in split.items():
        g = compare(sub, method, ref, n_boot=n_boot, key=key)
        if g is not None:
            out[w] = {**g[0.8]["speedup_steps"], "at_50": g[0.5]["speedup_steps"],
                      "per_seed": g[0.8].get("speedup_steps_per_seed", {"value": np.nan, "lo": np.nan, "hi": np.nan})}
    return out


def by_warm_start(data: dict[str, dict[int, dict]]) -> dict[int, dict[str, dict[int, dict]]]:
    """``data`` (arm -> unit -> run) split by warm start (unit // ``WARM_STRIDE``), in warm-start order; an
    arm without units of a warm start is left out of its part."""
    out: dict[int, dict[str, dict[int, dict]]] = {}
    for arm, runs in data.items():
        for u, r in runs.items():
            out.setdefault(u // WARM_STRIDE, {}).setdefault(arm, {})[u] = r
    return dict(sorted(out.items()))


def _comparison_row(meth: str, ref: str, why: str, g: dict) -> str:
    """One row of a comparison table (``compare``'s result ``g``)."""
    lv, c = g["levels"], g[0.8]
    gap = "no gap" if lv["degenerate"] else f"{lv['start']:.3f} -> {lv['final']:.3f}"
    auc = fmt_ci(g["auc"]["improvement"], 3) if "auc" in g else "-"
    eq = fmt_ci(g["equal_step"]["improvement"], 3) if "equal_step" in g else "-"
    by_w = g.get("by_warm_start") or {}
    per_w = "; ".join(f"{'AB'[w] if w < 2 else w}: {fmt_ratio(ci)} ({BOUND_NOTE[ci.get('bound', 'exact')]}; "
                      f"{_robust(ci.get('at_50'), ci.get('per_seed'))})" for w, ci in sorted(by_w.items())) or "-"
    nan = {"value": np.nan, "lo": np.nan, "hi": np.nan}
    return (f"| `{meth}` vs `{ref}` | {why} | {len(g['seeds'])} | {gap} | {fmt_ratio(c['speedup_steps'])} | "
            f"{BOUND_NOTE[c['speedup_steps'].get('bound', 'exact')]} | {fmt_ratio(c.get('speedup_tokens', nan))} | "
            f"{c['n_censored_baseline']} / {c['n_censored_method']} | "
            f"{_robust(g.get(0.5, {}).get('speedup_steps'), c.get('speedup_steps_per_seed'))} | {auc} | {eq} | {per_w} |")


def _robust(at_50: dict | None, per_seed: dict | None) -> str:
    """The headline's estimator robustness: the same crossing at 50% of the gap (with its censoring bound), and
    the per-seed restricted mean at 80% (defined at the horizon whatever the censoring; its seeds' censoring named)."""
    a = fmt_ratio(at_50) if at_50 else "-"
    if not per_seed or not np.isfinite(per_seed.get("value", np.nan)):
        return f"50%: {a}; per seed: -"
    return f"50%: {a}; per seed: {fmt_ci(per_seed)} ({BOUND_NOTE[per_seed.get('bound', 'exact')]})"


def _adv_mass(runs: dict[int, dict], seeds: list[int]) -> dict:
    """The share of advantage mass on the hard step's token, mean over the first and the last 20 steps
    of the runs that logged it (``mech/adv_mass_hard``), and their count."""
    logged = [s for s in seeds if np.isfinite(runs[s]["adv_mass"]).any()]
    if not logged:
        return {"runs": 0, "first": float("nan"), "last": float("nan")}
    return {"runs": len(logged), "first": float(np.mean([np.nanmean(runs[s]["adv_mass"][:20]) for s in logged])),
            "last": float(np.mean([np.nanmean(runs[s]["adv_mass"][-20:]) for s in logged]))}


def arm_rows(data: dict[str, dict[int, dict]]) -> list[dict]:
    """Per arm: seeds, the metric at step 0 and at the last common evaluation, pass@1, P(reach), tokens."""
    rows = []
    for arm, seeds, steps, tf in _arm_curves(data, ARMS):
        _, p1 = _matrix(data[arm], seeds, "pass")
        _, pr = _matrix(data[arm], seeds, "p_reach")
        rows.append({"arm": arm, "seeds": seeds, "warm_starts": sorted({u // WARM_STRIDE for u in seeds}),
                     "horizon": int(steps[-1]),
                     "tf_start": bootstrap_mean(tf[:, 0]), "tf_end": bootstrap_mean(tf[:, -1]),
                     "pass_end": bootstrap_mean(p1[:, -1]), "p_reach_end": bootstrap_mean(pr[:, -1]),
                     "p_reach_path": [(int(t), float(np.nanmean(pr[:, j]))) for j, t in enumerate(steps)
                                      if t in (0, 10, 20)],
                     "tokens_per_step": float(np.mean([data[arm][s]["tokens"].mean() for s in seeds])),
                     "out_len_last10": _out_len_last10(data[arm], seeds),
                     "steered_per_step": float(np.mean([data[arm][s]["steered"].mean() for s in seeds])),
                     "adv_mass": _adv_mass(data[arm], seeds), "reach_tf": _reach_tf(data[arm], seeds)})
    return rows


def _reach_tf(runs: dict[int, dict], seeds: list[int], *, after: int = 10) -> dict[int, dict]:
    """Per warm start: the policy's own teacher-forced P(all easy values right) (``eval/mech/tf_reach_policy``)
    as a seed mean at step 0 and its lowest / highest seed mean over the evaluations from step ``after`` on
    (the erosion monitor); {} where it was not logged."""
    out = {}
    for w in sorted({u // WARM_STRIDE for u in seeds}):
        us = [u for u in seeds if u // WARM_STRIDE == w]
        if "reach_tf" not in runs[us[0]]:
            continue
        steps, y = _matrix(runs, us, "reach_tf")
        if not np.isfinite(y).all():
            continue
        m = y.mean(0)                                                     # [E]
        late = m[steps >= after]
        out[w] = {"start": float(m[0]), "low": float(late.min()), "high": float(late.max()), "after": after}
    return out


def fit_scenario(runs: dict[int, dict], *, e: int, speedup: float = 1.9, name: str | None = None):
    """A ``prs.analysis.coverage.Scenario`` with this sweep's design and noise, fitted to one arm's
    metric curves (the reference arm): every seed's curve ``y0 + (y1_s - y0)(1 - exp(-t / τ_s))`` with
    ``y0`` the common warm-start value, ``τ_s`` by grid search and ``y1_s`` by least squares given ``τ_s``
    (kept in [y0, 1]: an accuracy);
    ``τ`` = the geometric mean, ``seed_sd`` = the sd of ``log τ_s``, ``y1`` = the mean ``y1_s`` (clipped
    below 1); the evaluation noise as binomial with the episodes that give the residuals' variance at
    the curves' mean level (``episodes = p̄ (1 - p̄) / σ²``). Returns (scenario, fit details)."""
    from prs.analysis.coverage import Scenario

    seeds = sorted(runs)
    steps, y = _matrix(runs, seeds, "tf")
    y0 = float(np.mean(y[:, 0]))
    taus, y1s, res = [], [], []
    grid = np.exp(np.linspace(np.log(2.0), np.log(2000.0), 400))
    for row in y:
        best = None
        for tau in grid:
            g = 1.0 - np.exp(-steps / tau)                                  # [E]
            a = float(np.dot(g, row - y0) / max(np.dot(g, g), 1e-12))      # y1 - y0 by least squares,
            a = min(max(a, 0.0), 1.0 - y0)                                  # an accuracy: y1 in [y0, 1]
            r = row - (y0 + a * g)
            sse = float(np.dot(r, r))
            if best is None or sse < best[0]:
                best = (sse, tau, y0 + a, r)
        _, tau, y1, r = best
        taus.append(tau)
        y1s.append(y1)
        res.append(r[1:])                                                   # the first point is y0 itself
    sigma = float(np.std(np.concatenate(res), ddof=1))
    pbar = float(np.clip(np.mean(y), 0.05, 0.95))
    episodes = int(max(4, round(pbar * (1 - pbar) / max(sigma, 1e-6) ** 2)))
    sc = Scenario(name=name or f"deep E={e}, fitted to the re-roll", speedup=speedup, seeds=len(seeds), episodes=episodes,
                  every=int(steps[1] - steps[0]), horizon=int(steps[-1]), y0=y0,
                  y1=float(min(np.mean(y1s), 0.99)), tau=float(np.exp(np.mean(np.log(taus)))),
                  seed_sd=float(np.std(np.log(taus), ddof=1)) if len(taus) > 1 else 0.0)
    return sc, {"tau_s": taus, "y1_s": y1s, "residual_sd": sigma, "seeds": seeds}


def coverage(data_all: dict[int, dict], *, studies: int, n_boot: int, ref: str = "reroll_noprefix",
             speedups: tuple[float, ...] = (1.9, 1.0)) -> dict:
    """Coverage of the sweep's intervals on a planted speed-up (1.9x, the paper's size, and 1.0x, none)
    (``prs.analysis.coverage.coverage_study``) in a design fitted to each chain's reference arm
    (``fit_scenario``). Keys ``"<E>|<speed-up>"``."""
    from prs.analysis.coverage import coverage_study

    out = {}
    for e, data in data_all.items():
        if ref not in data or len(data[ref]) < 2:
            continue
        for sp in speedups:
            sc, fit = fit_scenario(data[ref], e=e, speedup=sp,
                                   name=None if ref == "reroll_noprefix" else f"{e}, fitted to {ref}")
            out[f"{e}|{sp}"] = {"fit": fit, **coverage_study(sc, studies=studies, n_boot=n_boot)}
    return out


def coverage_lines(cov: dict, *, name=None, ref: str = "re-roll", title: str = "Coverage of these intervals (simulation)",
                   flag: str = "--coverage") -> list[str]:
    """The coverage table of ``coverage``'s result; ``name`` names a key's chain (default ``chain_name``),
    ``ref`` the arm the design was fitted to."""
    if not cov:
        return []
    name = chain_name if name is None else name
    lines = [f"### {title}", "",
             f"A planted speed-up (1.9x, the paper's; 1.0x, none) in a design fitted to each chain's {ref} arm (`fit_scenario`: its seeds' "
             "exponential fits, their spread, and binomial noise with the residuals' variance), analysed as above "
             f"(`python -m experiments.studies.mechanism {flag} STUDIES`; `prs.analysis.coverage`). Coverage = "
             "share of simulated studies whose nominal-95% interval holds the truth (± Monte Carlo SE).", "",
             "| chain | planted | fitted design | headline speed-up: median, coverage | AUC difference: coverage | "
             "equal-step difference: coverage |", "|---|---|---|---|---|---|"]
    for key, res in sorted(cov.items(), key=lambda kv: (name(kv[0].split("|")[0]), -float(kv[0].split("|")[1]))):
        e = key.split("|")[0]
        sc, est = res["scenario"], res["estimators"]
        h = est["restricted_mean_curve:speedup"]
        c = lambda k: f"{100 * est[k]['coverage']:.1f}% ± {100 * est[k]['coverage_se']:.1f}"  # noqa: E731
        lines.append(f"| {name(e)} | {sc['speedup']:.1f}x | {sc['seeds']} seeds, y0 {sc['y0']:.3f} -> y1 {sc['y1']:.3f}, τ {sc['tau']:.1f} "
                     f"(log sd {sc['seed_sd']:.2f}), noise as {sc['episodes']} episodes, every {sc['every']} to "
                     f"{sc['horizon']}; {res['studies']} studies x {res['n_boot']} resamples | "
                     f"{h['median']:.2f}, {c('restricted_mean_curve:speedup')} | {c('auc:auc')} | "
                     f"{c('equal_step:equal_step')} |")
    return lines + [""]


def alive_check(data: dict[str, dict[int, dict]]) -> dict[str, dict[str, float]]:
    """arm -> mean / min / max over every evaluation of every unit of ``p_alive`` (held-out fresh
    episodes alive at the hard turn): on the flaky chain it must stay at (1 - f)^E in every arm."""
    out = {}
    for arm in sorted(data):
        x = np.concatenate([r["p_alive"] for r in data[arm].values()])
        x = x[np.isfinite(x)]
        if x.size:
            out[arm] = {"mean": float(x.mean()), "min": float(x.min()), "max": float(x.max())}
    return out


def verdict(e: int, g: dict | None) -> str:
    """The prediction's test for PS (fixed cut) against the re-roll on chain length ``e``."""
    if g is None:
        return "not enough paired seeds yet"
    r = g[0.8]["speedup_steps"]
    if not np.isfinite(r["value"]):
        return "undefined (the re-roll's gap or the crossing is not defined; see the table)"
    if chain_e(e) >= 12:
        ok = r["value"] >= 1.5 and np.isfinite(r["lo"]) and r["lo"] > 1.2
        return (f"prediction 1 {'holds' if ok else 'refuted'}: {fmt_ci(r)} (needs >= 1.5 with CI lower bound > 1.2)")
    ok = r["value"] <= 1.15
    return f"prediction 2 {'holds' if ok else 'refuted'}: {fmt_ci(r)} (needs <= 1.15)"


LEVEL_WORD = {"above": "above", "below": "below", "contains": "contains", "undefined": "undefined, not read against"}
GATE_RULE = ("the oracle's steps-to-80% speed-up over the baseline, read by its 95% CI: passes when the CI lies above "
             "1.5x, fails when it lies below, not passed when it contains 1.5x")


def read_level(r: dict, level: float) -> str:
    """Where a speed-up ``{"value", "lo", "hi", "bound"}`` lies against ``level``, read by its CI, the same rule
    for the gate and every size prediction: ``"above"`` (lo >= level), ``"below"`` (hi < level),
    ``"contains"``, or ``"undefined"`` (no value or no interval). A ceiling (``bound="upper"``: the method
    censored) is never read as above, a floor (``"lower"``) never as below: each bounds in one direction only."""
    if not (np.isfinite(r["value"]) and np.isfinite(r["lo"]) and np.isfinite(r["hi"])) or r.get("bound") == "both":
        return "undefined"
    b = r.get("bound", "exact")
    if r["lo"] >= level and b != "upper":
        return "above"
    if r["hi"] < level and b != "lower":
        return "below"
    return "contains"


def gate(g: dict | None) -> str:
    """The positive control's gate (``GATE_RULE``, one rule for every chain and warm start): the oracle beats
    the baseline with its steps-to-80% CI above 1.5x."""
    if g is None:
        return "oracle vs baseline not run yet"
    r = g[0.8]["speedup_steps"]
    word = {"above": "passes", "below": "fails"}.get(read_level(r, 1.5), "not passed")
    return f"oracle vs baseline {fmt_ratio(r)}: {word} (the CI {LEVEL_WORD[read_level(r, 1.5)]} 1.5x)"


def gate_lines(name: str, g: dict | None, *, note: str = "") -> list[str]:
    """The gate's line for one chain: the pooled reading and each warm start's (``g["by_warm_start"]``)."""
    if g is None:
        return []
    per_w = "".join(f"; warm start {'AB'[w] if w < 2 else w}: " + gate({0.8: {"speedup_steps": r}}).removeprefix(
        "oracle vs baseline ") for w, r in sorted((g.get("by_warm_start") or {}).items()))
    return ["", f"**Gate ({name}):** {gate(g)}{per_w}{note}."]


def depth_contrast(long: dict[str, dict[int, dict]], short: dict[str, dict[int, dict]], method: str, ref: str, *,
                   n_boot: int = 2000, key: str = "tf") -> dict | None:
    """Does ``method``'s speed-up over ``ref`` grow with depth? The ratio of the two chains' headline speed-ups
    (steps to 80% of the reference's gap, ``gap.restricted_speedup`` by the seed-mean curve) R_long / R_short,
    with a percentile interval from resampling each chain's paired units apart (unpaired: the chains have their
    own warm starts; seed 0 and 1 for the two resamples, so R_long's replicates are its headline's own),
    replicates with an undefined or non-positive ratio left out (``percentile_ci``). None: an arm missing."""
    parts = []
    for i, data in enumerate((long, short)):
        paired = _paired(data, method, ref, key)
        if paired is None:
            return None
        _, steps, yr, ym = paired
        lv = gap_levels(steps, yr, k=3)
        r = restricted_speedup(steps, yr, ym, fraction=0.8, horizon=common_horizon(steps, yr, ym), k=3,
                               k_start=lv["k_start"], n_boot=n_boot, seed=i, by="mean_curve", return_boot=True)
        parts.append(r)
    (a, b) = parts
    with np.errstate(divide="ignore", invalid="ignore"):
        rep = np.where((a["boot"]["steps"] > 0) & (b["boot"]["steps"] > 0), a["boot"]["steps"] / b["boot"]["steps"], np.nan)
    return {"value": a["steps"]["value"] / b["steps"]["value"], **percentile_ci(rep), "long": a["steps"],
            "short": b["steps"], "n_long": a["steps"]["n"], "n_short": b["steps"]["n"]}


def section(data_all: dict[int, dict] | None = None, *, n_boot: int = 2000, cov: dict | None = None,
            rec: dict | None = None, rf: dict | None = None, rf_cov: dict | None = None) -> tuple[str, dict]:
    """The page's section 7 (markdown between ``BEGIN`` and ``END``) and its summary; ``cov``: the
    coverage results (``coverage``) to print, if any; ``rec``: the recovery runs (default: ``load_recovery()``);
    ``rf``: the flaky environment's recovery runs (default: ``load_flaky_recovery()``), ``rf_cov`` their coverage."""
    data_all = load() if data_all is None else data_all
    lines = [BEGIN, "", "## 7. The sweep: PS against the no-prefix re-roll on the hard step", "",
             "Generated by `python -m experiments.studies.mechanism --write` from the complete runs in "
             "`sweep/runs/` (`experiments/mechanism_sweep.sh`); the metric is the hard step's teacher-forced "
             "accuracy E[q] on 512 held-out problems at every evaluation (`eval/mech/tf_hard_acc`). Speed-ups: "
             "steps (and generated tokens) to 80% of the *reference* arm's gap, the restricted crossing of the "
             "seed-mean curves with the level re-estimated in every paired resample (95% CI, 2,000 resamples); "
             "AUC and equal-step differences paired, expanded percentile intervals. The pooled row reads one level "
             "from all paired units; where they span two warm starts the last column reads each warm start at its "
             "own reference's level (a warm start that learns more slowly can sit below the pooled level in both "
             "arms, count at the horizon in both, and pull the pooled ratio towards 1).", ""]
    summary: dict = {}
    for e in chain_order(data_all):
        data = data_all[e]
        rows = arm_rows(data)
        title = chain_name(e) if chain_tag(e) else f"E = {e} ({'long' if e >= 12 else 'short'} chain)"
        lines += [f"### {title}", "",
                  "| arm | seeds (warm starts) | hard step E[q] at 0 | at the last evaluation (step) | held-out pass@1 there | "
                  "P(reach) there | P(reach) at steps 0, 10, 20 (seed mean) | gen. tokens / step | groups steered / step | "
                  "output length (last 10 steps) | advantage mass on the hard step, steps 0-19 / 40-59 (runs) | "
                  "policy's reach, teacher-forced: step 0 -> seed-mean range from step 10, per warm start |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {LABEL[r['arm']]} (`{r['arm']}`) | {len(r['seeds'])} ({len(r['warm_starts'])}) | "
                         f"{fmt(r['tf_start']['value'], 3)} | "
                         f"{fmt_ci(r['tf_end'], 3)} ({r['horizon']}) | {fmt_ci(r['pass_end'], 3)} | "
                         f"{fmt_ci(r['p_reach_end'], 3)} | {', '.join(f'{v:.2f}' for _, v in r['p_reach_path'])} | "
                         f"{r['tokens_per_step']:.0f} | {r['steered_per_step']:.1f} | "
                         f"{_fmt_out_len(r['out_len_last10'])} | {fmt(r['adv_mass']['first'], 3)} / {fmt(r['adv_mass']['last'], 3)} "
                         f"({r['adv_mass']['runs']}) | "
                         + ("; ".join(f"{'AB'[w] if w < 2 else w}: {v['start']:.2f} -> {v['low']:.2f}-{v['high']:.2f}"
                                      for w, v in r["reach_tf"].items()) or "-") + " |")
        lines += _mixed_note(rows)
        comp_lines, comps = _comparison_table(data, COMPARISONS, n_boot=n_boot)
        lines += comp_lines
        if chain_tag(e) == "flaky":  # survival at the hard turn, held out: the arms share the crash draws
            alive = alive_check(data)
            lines += ["", "**Held-out survival (section 10):** episodes alive at the hard turn (no crash), "
                      "mean over every evaluation of every seed [lowest, highest evaluation]: "
                      + "; ".join(f"`{a}` {v['mean']:.3f} [{v['min']:.3f}, {v['max']:.3f}]" for a, v in alive.items())
                      + ". Equal in every arm by construction (each evaluation's crashes are drawn from its episode "
                      "keys, the same in every arm, whatever the policy writes), so this reading cannot fail: it "
                      "shows the crash draws are shared, not that the design holds in training."]
        v = verdict(e, comps.get("ps_cut|reroll_noprefix"))
        short = chain_e(e) < 12
        lines += gate_lines(chain_name(e), comps.get("oracle|baseline"),
                            note=" (on a short chain the oracle is the depth contrast; the gate licenses the long "
                                 "chain's prediction)" if short else "")
        if short and str(e).replace("2", "12", 1) in {str(k) for k in data_all}:
            lk = next(k for k in data_all if str(k) == str(e).replace("2", "12", 1))
            dc = depth_contrast(data_all[lk], data, "oracle", "baseline", n_boot=n_boot)
            if dc is not None:
                summary.setdefault("depth_contrast", {})[f"{lk}/{e}"] = to_jsonable(dc)
                lines += ["", f"**Depth contrast ({chain_name(e).replace('E = 2', 'E = 12 over E = 2', 1)}; oracle vs baseline):** "
                          f"the ratio of the two speed-ups {fmt(dc['value'])} [{fmt(dc['lo'])}, {fmt(dc['hi'])}] "
                          f"({fmt_ratio(dc['long'])} over {fmt_ratio(dc['short'])}; each chain's {dc['n_long']} / "
                          f"{dc['n_short']} paired units resampled apart, {n_boot:,} resamples): "
                          + ("the oracle's effect is larger on the long chain" if dc["lo"] > 1 else
                             "the interval contains 1: a growth with depth is not shown" if dc["lo"] <= 1 <= dc["hi"]
                             else "the oracle's effect is smaller on the long chain") + "."]
        if chain_tag(e) and not short and "ps_cut|reroll_noprefix" not in comps:  # section 9's rule
            if not gate(comps.get("oracle|baseline")).split(": ")[-1].startswith("passes"):
                v = "PS not run: the positive control did not pass the gate (section 9's rule)"
        lines += ["", f"**Verdict ({chain_name(e)}, fixed cut vs re-roll):** {v}.", ""]
        summary[e] = {"arms": rows, "comparisons": {k: to_jsonable(g) for k, g in comps.items()}, "verdict": v}
    lines += coverage_lines(cov or {})
    lines += recovery_lines(load_recovery() if rec is None else rec)
    rf_lines, summary["flaky_recovery"] = flaky_recovery_lines(load_flaky_recovery() if rf is None else rf, n_boot=n_boot)
    lines += rf_lines
    lines += coverage_lines(rf_cov or {}, name=rf_key_name, ref="extra-rollouts (`extra_tok`)",
                            title="Coverage of the recovery intervals (simulation)", flag="--recovery-coverage")
    lines += [END]
    return "\n".join(lines), summary


HEADLINE_REF = {"ps_cut": "reroll_noprefix", "ps_ada": "reroll_noprefix", "ps_cut_hard": "reroll_noprefix",
                "ps_cut_app": "reroll_app", "oracle": "baseline", "extra_tok": "baseline", "baseline_2n": "baseline",
                "reroll_noprefix": "baseline", "reroll_app": "baseline"}  # each arm's headline reference


def figure(data_all: dict[int, dict], path: pathlib.Path) -> list[list[str]]:
    """Seed-mean curves with pointwise 95% bootstrap bands: the metric and held-out pass@1 per arm, one
    row per chain length and warm start (arms run on one warm start only are not pooled with the others).
    On the metric's panel a dashed line marks 80% of each reference arm's gap (the baseline's: the gate's; the
    re-roll's: the prediction's; this warm start's own level), and an arm whose seed-mean curve stays below
    its headline reference's level (``HEADLINE_REF``) ends in an x and says so in the legend: its speed-up is
    censored, a ceiling."""
    import textwrap

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for e in chain_order(data_all):
        split = by_warm_start(data_all[e])
        panels += [(e, w, len(split), sub) for w, sub in split.items()]
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.6 * len(panels)), squeeze=False)
    for row, (e, w, n_ws, data) in zip(axes, panels):
        levels = _levels80(data, ("baseline", "reroll_noprefix", "reroll_app"))
        for arm in ARMS:
            if arm not in data:
                continue
            seeds = sorted(data[arm])
            for ax, key, ylabel in ((row[0], "tf", "hard step, teacher-forced E[q]"), (row[1], "pass", "held-out pass@1")):
                steps, y = _matrix(data[arm], seeds, key)
                m, lo, hi = bootstrap_band(y)
                c = f"C{ARMS.index(arm)}"  # one colour per arm in every panel
                label = f"{LABEL[arm]} ({len(seeds)} seeds)"
                lv = levels.get(HEADLINE_REF.get(arm))
                cens = key == "tf" and lv is not None and not (m >= lv).any()
                if cens:
                    label += f"; below 80% of {HEADLINE_REF[arm]}'s gap: censored"
                ax.plot(steps, m, color=c, label=label)
                if cens:
                    ax.plot(steps[-1:], m[-1:], "x", color=c, ms=9, mew=2)
                ax.fill_between(steps, lo, hi, color=c, alpha=0.15)
                ax.set_xlabel("RL step")
                ax.set_ylabel(ylabel)
                ws_name = "" if chain_tag(e) and n_ws == 1 else f", warm start {'AB'[w] if w < 2 else f'sft.seed={w}'}"
                ax.set_title("\n".join(textwrap.wrap(f"{chain_name(e)}{ws_name}: {ylabel}", 60)), fontsize=8)
        for ref, lv in levels.items():
            row[0].axhline(lv, color=f"C{ARMS.index(ref)}", ls="--", lw=1,
                           label=f"80% of {ref}'s gap ({lv:.3f})")
        row[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    labels = [[t.get_text() for t in row[0].get_legend().get_texts()] for row in axes]
    plt.close(fig)
    return labels  # each row's legend on the metric's panel


def _levels80(data: dict[str, dict[int, dict]], refs) -> dict[str, float]:
    """{reference arm: 80% of its gap on the metric ("tf"), from its seed-mean curve (``gap_levels``)} for the
    arms of ``refs`` that ``data`` holds and that have a gap."""
    out = {}
    for ref in refs:
        if ref in data:
            steps, y = _matrix(data[ref], sorted(data[ref]), "tf")
            lv = gap_levels(steps, y, k=3)
            if not lv["degenerate"]:
                out[ref] = lv["levels"][0.8]
    return out


RF_HEADLINE_REF = {"oracle": "baseline", "ps_easy_cut": "extra_tok", "ps_easy": "extra_tok", "reroll_easy": "baseline",
                   "extra_tok": "baseline", "baseline_2n": "baseline"}


def recovery_figure(rf: dict[str, dict[str, dict[int, dict]]], path: pathlib.Path) -> None:
    """Section 11's curves: seed means with pointwise 95% bootstrap bands of the retry skill, the easy steps'
    teacher-forced reach and held-out pass@1 per arm, a row per tool-error rate and warm start. The retry
    skill's panel marks 80% of each reference arm's gap (dashed; this warm start's level) and an arm that stays
    below its headline reference's level (``RF_HEADLINE_REF``: censored) with an x and a legend note."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows_ = []  # (key, warm start, arm -> unit -> run): arms are not pooled across warm starts
    for key in sorted(rf):
        rows_ += [(key, w, sub) for w, sub in by_warm_start(rf[key]).items()]
    panels = (("tf", "retry skill at an injected error, teacher-forced"),
              ("reach_tf", "easy steps' reach, teacher-forced"), ("pass", "held-out pass@1"))
    fig, axes = plt.subplots(len(rows_), 3, figsize=(15, 3.8 * len(rows_)), squeeze=False)
    for row, (key, w, data) in zip(axes, rows_):
        levels = _levels80(data, ("baseline", "extra_tok", "reroll_easy"))
        for arm in RF_ARMS:
            if arm not in data:
                continue
            seeds = sorted(data[arm])
            for ax, (col, ylabel) in zip(row, panels):
                steps, y = _matrix(data[arm], seeds, col)
                m, lo, hi = bootstrap_band(y)
                c = f"C{RF_ARMS.index(arm)}"
                lv = levels.get(RF_HEADLINE_REF.get(arm))
                cens = col == "tf" and lv is not None and not (m >= lv).any()
                ax.plot(steps, m, color=c, label=f"{RF_LABEL[arm]} ({len(seeds)} seeds)"
                        + (f"; below 80% of {RF_HEADLINE_REF[arm]}'s gap: censored" if cens else ""))
                if cens:
                    ax.plot(steps[-1:], m[-1:], "x", color=c, ms=9, mew=2)
                ax.fill_between(steps, lo, hi, color=c, alpha=0.15)
                ax.set_xlabel("RL step")
                ax.set_ylabel(ylabel, fontsize=8)
                ax.set_title(f"E = 4, {rf_key_name(key)}, warm start {'AB'[w] if w < 2 else w}: {ylabel}", fontsize=8)
        for ref, lv in levels.items():
            row[0].axhline(lv, color=f"C{RF_ARMS.index(ref)}", ls="--", lw=1, label=f"80% of {ref}'s gap ({lv:.3f})")
        row[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pack(runs: pathlib.Path) -> list[pathlib.Path]:
    """Every complete run's records for committing, in place (``prs.analysis.runs.copy_run_records``:
    ``metrics.jsonl.gz`` beside the raw ``metrics.jsonl``, which is gitignored with the checkpoints, logs
    and per-run figures); a run already packed is left as it is."""
    from prs.analysis.runs import copy_run_records

    return [copy_run_records(d, d) for d in sorted(runs.glob("*-s*")) if d.is_dir() and (d / "summary.json").exists()]


def write_section(page: pathlib.Path, text: str) -> None:
    s = page.read_text()
    if BEGIN in s:
        a, b = s.index(BEGIN), s.index(END) + len(END)
        s = s[:a] + text + s[b:]
    else:
        anchor = "## Left open"
        s = s.replace(anchor, text + "\n\n" + anchor, 1) if anchor in s else s + "\n" + text + "\n"
    page.write_text(s)


@command_line.command("experiments.studies.mechanism")
def main(argv=None) -> int:
    ap = command_line.ArgumentParser(prog="python -m experiments.studies.mechanism", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--coverage", type=int, default=0, metavar="STUDIES",
                    help="simulate STUDIES studies per chain for the coverage table (sweep/coverage.json)")
    ap.add_argument("--recovery-coverage", type=int, default=0, metavar="STUDIES",
                    help="the same for section 11's recovery runs, in a design fitted to extra_tok (sweep/coverage_recovery.json)")
    ap.add_argument("--coverage-chains", default=None, metavar="KEYS",
                    help="with --coverage: only these comma-separated chain keys (e.g. 12_flaky), merged into "
                         "sweep/coverage.json beside the other chains' kept entries")
    ap.add_argument("--coverage-boot", type=int, default=1000)
    a = ap.parse_args(argv)
    data = load()
    cov_file = OUT / "coverage.json"
    if a.coverage_chains is not None and not a.coverage:
        ap.error("--coverage-chains needs --coverage STUDIES")
    if a.coverage:
        merged, subset = {}, data
        if a.coverage_chains is not None:
            keys = [k.strip() for k in a.coverage_chains.split(",") if k.strip()]
            unknown = sorted(set(keys) - {str(k) for k in data})
            if unknown:
                ap.error(f"--coverage-chains: unknown chain key(s) {unknown}; allowed: {sorted(str(k) for k in data)}")
            subset = {k: v for k, v in data.items() if str(k) in keys}
            merged = json.loads(cov_file.read_text()) if cov_file.exists() else {}
            merged = {k: v for k, v in merged.items() if k.split("|")[0] not in keys}
        merged.update(to_jsonable(coverage(subset, studies=a.coverage, n_boot=a.coverage_boot)))
        cov_file.write_text(json.dumps(merged, indent=1) + "\n")
    cov = json.loads(cov_file.read_text()) if cov_file.exists() else None
    rf = load_flaky_recovery()
    rf_cov_file = OUT / "coverage_recovery.json"
    if a.recovery_coverage:
        rf_cov_file.write_text(json.dumps(to_jsonable(coverage(rf, studies=a.recovery_coverage, n_boot=a.coverage_boot,
                                                               ref="extra_tok")), indent=1) + "\n")
    rf_cov = json.loads(rf_cov_file.read_text()) if rf_cov_file.exists() else None
    text, summary = section(data, cov=cov, rf=rf, rf_cov=rf_cov)
    if a.check:
        s = PAGE.read_text()
        got = s[s.index(BEGIN): s.index(END) + len(END)] if BEGIN in s else ""
        if got != text:
            print("results/mechanism/README.md: the sweep section differs from its records "
                  "(run python -m experiments.studies.mechanism --write)")
            return 1
        return 0
    print(text)
    if a.write:
        pack(RUNS)
        write_section(PAGE, text)
        (OUT / "summary.json").write_text(json.dumps(to_jsonable(summary), indent=1) + "\n")
        figure(data, OUT / "curves.png")
        if rf:
            recovery_figure(rf, OUT / "recovery_curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
