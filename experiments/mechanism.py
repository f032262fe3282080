"""The mechanism study's measurements (results/mechanism/README.md).

    python -m experiments.mechanism guesser --out results/mechanism/guesser.json
    python -m experiments.mechanism tf RUN_DIR [RUN_DIR ...] --problems 512 --samples 4
    python -m experiments.mechanism tf --base +experiment=mechanism_deep task.params.easy_steps=12
    python -m experiments.mechanism table RUN_DIR [RUN_DIR ...] --tf results/mechanism/pilot_tf_*.json

``guesser``: the best lookup-table predictor from surface features of the question (length, first
term, last two terms: the multiplier and the last addend), fitted on 20,000 training problems and
scored on 4,000 held-out ones, for the answer alone and for what the grader checks (deep: the whole
trace; recovery: the answer).
``tf``: teacher-forced accuracy of the hard step (``prs.tasks.mechanism.teacher_forced_hard_accuracy``)
on ``--problems`` held-out problems x ``--samples`` draws, and how the policy reaches it (``reach``:
``teacher_forced_reach``, sampled against greedy), for each checkpoint a run directory keeps and its
warm start (``--base``: a warm start alone, from Hydra overrides, as ``experiments.train``
would build it).
"""
from __future__ import annotations

import json
import pathlib

import numpy as np

from experiments import cli


def _surface(p):
    """Rich surface features: length, first term, last term (the multiplier), last addend."""
    t, n = np.asarray(p.terms), np.asarray(p.n_terms)
    rows = np.arange(t.shape[0])
    return np.stack([n, t[:, 0], t[rows, n - 1], t[rows, n - 2]], axis=1)


def _mult(p):
    """The old late task's shortcut features: length and the last term (the multiplier)."""
    t, n = np.asarray(p.terms), np.asarray(p.n_terms)
    return np.stack([n, t[np.arange(t.shape[0]), n - 1]], axis=1)


def guesser_report() -> dict:
    from prs.tasks import make_problems
    from prs.tasks.mechanism import guesser_rate, make_recovery_problems, solution_tokens
    from prs.tasks.registry import make_task

    out = {}
    for e in (12, 2):
        task = make_task("arith_deep", easy_steps=e)
        fit = make_problems(task.cfg, seed=1, count=20000, split="all")
        test = make_problems(task.cfg, seed=2, count=4000, split="all")
        out[f"deep_e{e}"] = {
            f"{target}|{fname}": guesser_rate(fit, test, feats, tf)
            for fname, feats in (("multiplier", _mult), ("rich", _surface))
            for target, tf in (("answer_only", lambda p: np.asarray(p.answer)[:, None]),
                               ("graded_whole_trace", lambda p, c=task.cfg: solution_tokens(p, c)[0]))
        }
    task = make_task("arith_recovery")
    kw = dict(draft_steps=task.draft_steps, fault_rate=task.fault_rate)
    fit = make_recovery_problems(task.cfg, seed=1, count=20000, split="all", **kw)
    test = make_recovery_problems(task.cfg, seed=2, count=4000, split="all", **kw)
    rate = max(guesser_rate(fit, test, f, lambda p: np.asarray(p.answer)[:, None]) for f in (_mult, _surface))
    # the policy that trusts the draft and never recovers (continues from its last value, no error of its own)
    v = task.cfg.vocab
    last = np.asarray(test.draft)[:, -2] - v.digit0_id
    rest = np.where(np.arange(test.terms.shape[1])[None, :] > task.draft_steps, np.maximum(test.terms, 0), 0).sum(1)
    trust = float(np.mean((last + rest) % task.cfg.modulus == np.asarray(test.answer)))
    out["recovery"] = {"answer_only": rate, "graded_whole_trace": rate, "trust_the_draft": trust,
                       "fault_rate": task.fault_rate}
    out["features"] = ("multiplier: n_terms and the last term; rich: + the first term and the last addend "
                       "(recovery: the better of the two); fitted on 20,000 and scored on 4,000 problems of split='all'")
    out.update(flaky_guesser_report())
    return out


def never_retry_rate(cfg, *, episodes: int, seed: int = 3) -> float:
    """Pass rate of a policy that writes every running value right but never retries a tool error (after
    ``>!|`` it writes the next value), run through the flaky environment itself (``AgentEnv.render`` from
    ``seeded_reset`` states): the floor a policy without the recovery skill sits on; (1 - g)^E in closed form."""
    from prs.tasks import flaky as F

    probs = F.make_problems(cfg, seed=seed, count=episodes)
    hits = 0
    for i in range(episodes):
        start = F.seeded_reset(probs, i, cfg, seed=seed * 1_000_003 + i)
        states = F.ENVIRONMENT.render(probs, i, F.solution_actions(probs, i), cfg, state=start)[2]
        hits += F.verify(probs, i, states[-1]) == 1.0
    return hits / episodes


def flaky_guesser_report() -> dict:
    """The flaky-tool chains (sections 10-11): the best lookup table from the prompt (``a_1``, ``a_2``: all a
    guesser sees before the tool answers) for the answer alone and for the graded whole trace, and, for
    the recovery variant, the never-retry floor (``never_retry_rate``)."""
    from prs.tasks import flaky as F
    from prs.tasks.mechanism import guesser_rate

    out = {}
    for e, g in ((12, 0.0), (2, 0.0), (4, 0.05)):
        cfg = F.FlakyConfig(easy_steps=e, error_rate=g, max_retries=3 if g else 0, crash_rate=0.0 if g else 0.1)
        fit, test = F.make_problems(cfg, seed=1, count=20000), F.make_problems(cfg, seed=2, count=4000)
        prompt = lambda p: np.asarray(p.terms)[:, :2]  # noqa: E731
        key = f"flaky_e{e}" + (f"_g{g}" if g else "")
        out[key] = {"answer_only|prompt": guesser_rate(fit, test, prompt, lambda p: F.solution_values(p)[:, -1:]),
                    "graded_whole_trace|prompt": guesser_rate(fit, test, prompt, F.solution_values)}
        if g:
            out[key].update({"never_retry": never_retry_rate(cfg, episodes=4000),
                             "never_retry_closed_form": (1.0 - g) ** e})
    return out


def _checkpoint_params(run_dir: pathlib.Path):
    """``[(step, params)]`` of every checkpoint the run directory keeps."""
    import orbax.checkpoint as ocp

    ck = run_dir / "checkpoints"
    steps = sorted(int(p.name) for p in ck.iterdir() if p.name.isdigit()) if ck.exists() else []
    if not steps:
        raise SystemExit(f"error: no checkpoint in {ck}")
    out = []
    for s in steps:
        tree = ocp.StandardCheckpointer().restore((ck / str(s) / "default").resolve())
        # a TrainState saved without a restore target comes back as a dict or a list (orbax)
        out.append((s, tree["params"] if isinstance(tree, dict) else tree[1]))  # TrainState field 1: params
    return out


def _build(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build

    conf = str(pathlib.Path(__file__).resolve().parent.parent / "conf")
    with initialize_config_dir(config_dir=conf, version_base=None):
        cfg = validate(compose("config", overrides=overrides))
    return build(cfg)


def _hydra_value(v) -> str:
    return "null" if v is None else json.dumps(v) if isinstance(v, (bool, list)) else str(v)


def run_overrides(cfg: dict) -> list[str]:
    """Hydra overrides that rebuild a deep-task run's task and warm start from its ``config.json``:
    every task parameter and every ``sft`` field (the warm start's cache key depends on all of
    them; with only some, ``base_params`` would build a different warm start instead of loading
    the run's)."""
    ov = ["+experiment=mechanism_deep"]
    ov += [f"++task.params.{k}={_hydra_value(v)}" for k, v in cfg["task"]["params"].items()]
    return ov + [f"sft.{k}={_hydra_value(v)}" for k, v in cfg["sft"].items()]


def tf_report(runs: list[str], *, base: list[str] | None, problems: int, samples: int) -> list[dict]:
    import jax

    from prs.rl.runner import base_params
    from prs.tasks.mechanism import teacher_forced_hard_accuracy, teacher_forced_reach

    out = []
    jobs = []
    for r in runs:
        d = pathlib.Path(r)
        jobs.append((str(d), d, run_overrides(json.loads((d / "config.json").read_text()))))
    if base is not None:
        jobs.append(("warm start", None, base))
    for name, d, ov in jobs:
        task, model_cfg, _, _, run_cfg = _build(ov)
        probs = task.eval_problems(count=problems)
        rows = []
        rows.append((f"warm start of {name}", base_params(task, model_cfg, run_cfg, pathlib.Path(run_cfg.base_dir),
                                                          log=lambda *_: None)))
        if d is not None:
            rows += [(f"{name} @ step {step}", params) for step, params in _checkpoint_params(d)]
        for label, params in rows:
            rep = teacher_forced_hard_accuracy(params, probs, task.cfg, model_cfg=model_cfg, samples=samples,
                                               key=jax.random.PRNGKey(0))
            rep["reach"] = teacher_forced_reach(params, probs, task.cfg, model_cfg=model_cfg)
            rep["what"] = label
            out.append(rep)
            print(json.dumps(rep))
    return out


def pilot_table(runs: list[str], tf_files: list[str]) -> str:
    """Markdown: per run, the held-out pass@1 and the hard step's accuracy on the policy's own correct
    prefixes at each evaluation, generated tokens and oracle groups per step, and the teacher-forced
    hard-step accuracy (E[q], 512 x 4) of each kept checkpoint from the ``tf`` reports."""
    tf = {}
    for f in tf_files:
        for r in json.loads(pathlib.Path(f).read_text()):
            tf[r["what"]] = r
    lines = ["| run | eval steps | held-out pass@1 | hard acc. on own correct prefix (eval) | gen. tokens / step | "
             "oracle groups / step | teacher-forced hard acc. E[q] (step) |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        d = pathlib.Path(r)
        recs = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
        ev = [m for m in recs if "eval/pass_at_1" in m]
        tr = [m for m in recs if "tokens_generated" in m]
        og = [m.get("mech/oracle_groups", 0) for m in tr]
        tfs = sorted((int(k.rsplit(" ", 1)[1]), v["expected"]) for k, v in tf.items() if k.startswith(f"{r} @ step"))
        base = tf.get(f"warm start of {r}")
        tft = ([f"{base['expected']:.3f} (0)"] if base else []) + [f"{q:.3f} ({st})" for st, q in tfs]
        steps = ", ".join(str(m["step"]) for m in ev)
        p1 = ", ".join(f"{m['eval/pass_at_1']:.3f}" for m in ev)
        hr = ", ".join(f"{m.get('eval/mech/hard_acc_on_reach') or 0:.3f}" for m in ev)
        lines.append(f"| `{d.name}` | {steps} | {p1} | {hr} | {np.mean([m['tokens_generated'] for m in tr]):.0f} | "
                     f"{np.mean(og):.1f} | {', '.join(tft)} |")
    return "\n".join(lines)


@cli.command("experiments.mechanism")
def main(argv=None):
    ap = cli.ArgumentParser(prog="python -m experiments.mechanism", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("guesser")
    g.add_argument("--out", default=None)
    t = sub.add_parser("tf")
    t.add_argument("runs", nargs="*")
    t.add_argument("--base", nargs="*", default=None, help="Hydra overrides of a warm start to measure")
    t.add_argument("--problems", type=int, default=512)
    t.add_argument("--samples", type=int, default=4)
    t.add_argument("--out", default=None)
    pt = sub.add_parser("table")
    pt.add_argument("runs", nargs="+")
    pt.add_argument("--tf", nargs="*", default=[])
    a = ap.parse_args(argv)
    if a.cmd == "table":
        print(pilot_table(a.runs, a.tf))
        return
    if a.cmd == "guesser":
        rep = guesser_report()
    else:
        rep = tf_report(a.runs, base=a.base, problems=a.problems, samples=a.samples)
    print(json.dumps(rep, indent=2))
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(rep, indent=2) + "\n")


if __name__ == "__main__":
    main()
