"""The multi-turn repair agent task: executor, verifier, demonstrations, multi-turn rollouts through
the trainer, replay-through-execution and the regenerate switch (``prs.tasks.repair``,
``prs.tasks.agent_rollouts``)."""
from __future__ import annotations

import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.models.qwen3 import ModelConfig, init_params
from prs.tasks import repair as R
from prs.tasks.agent_rollouts import action_spans
from prs.tasks.registry import make_task
from prs.tasks.repair_task import RepairTask
from prs.rl.episodes import Episodes
from prs.rl.trainer import RLConfig, Trainer
from prs.rl.config import EvalConfig, LossConfig

CFG = R.RepairConfig(n_lines=4, min_bugs=1, max_bugs=2, max_turns=4, report_max=2)  # few turns: few compiles
CFG8 = R.RepairConfig(n_lines=4, min_bugs=1, max_bugs=2, max_turns=8, report_max=2)
MODEL = ModelConfig.preset("tiny", vocab_size=len(R.TOKENS))


def _run(prog: str, ref: str, actions: list[str], cfg=CFG):
    """Executes ``actions`` on one hand-written problem -> (observations as text, final state)."""
    probs = R.problems_from_strings(prog, ref)
    state, seen = R.reset(probs, 0), []
    for a in actions:
        state, obs = R.execute(state, R.encode(a), cfg)
        seen.append(R.decode(obs))
    return seen, state, probs


# ----------------------------------------------------------------------------- executor


def test_executor_hand_written_episode():
    obs, s, probs = _run("1234", "1734", ["t;", "s19;", "t;", "u;", "s17;", "t;", "$"], CFG8)
    assert obs == [">1=7|", ">+|", ">1=7|", ">+|", ">+|", ">+|", ""]
    assert s.program == (1, 7, 3, 4) and s.done and s.submitted and s.turns == 7
    assert R.verify(probs, 0, s) == 1.0


def test_executor_reports_at_most_report_max_failures_in_line_order():
    obs, _, _ = _run("0000", "1234", ["t;"])          # 4 failing lines, report_max = 2
    assert obs == [">0=1,1=2|"]


def test_undo_reverts_both_edit_kinds_in_stack_order_and_errors_when_empty():
    obs, s, _ = _run("1234", "1734", ["s05;", "e12;", "u;", "u;", "u;"], CFG8)
    assert obs == [">+|", ">+|", ">+|", ">+|", ">!|"]
    assert s.program == (1, 2, 3, 4) and s.tests == (1, 7, 3, 4) and s.history == ()


@pytest.mark.parametrize("action,expected", [
    ("s9", ">?|"),        # no ';' (a truncated turn)
    ("s1;", ">?|"),       # missing value
    ("x", None),          # out-of-grammar characters: ValueError from encode, tested below
    ("s17x;", None),
    ("s91;", ">!|"),      # line 9 >= K = 4
    (";", ">?|"),         # empty action
    ("t1;", ">?|"),
    ("tt;", ">?|"),
    ("u0;", ">?|"),
    (">+|;", ">?|"),      # the policy imitating an observation
])
def test_garbled_and_illegal_actions_give_an_error_observation_and_change_nothing(action, expected):
    if expected is None:
        with pytest.raises(ValueError, match="not in"):
            R.encode(action)
        return
    probs = R.problems_from_strings("1234", "1734")
    s0 = R.reset(probs, 0)
    s1, obs = R.execute(s0, R.encode(action), CFG)
    assert R.decode(obs) == expected
    assert s1 == s0._replace(turns=1)


def test_random_token_garbage_never_crashes():
    rng = np.random.default_rng(0)
    probs = R.make_problems(CFG, seed=1, count=1)
    for _ in range(300):
        s = R.reset(probs, 0)
        while not s.done:
            act = rng.integers(0, len(R.TOKENS), size=rng.integers(0, 5))
            s, obs = R.execute(s, act, CFG)
            assert (len(obs) == 0) == s.done
            assert not obs or (obs[0] == R.OBS_OPEN and obs[-1] == R.OBS_CLOSE)
        assert s.turns <= CFG.max_turns
    with pytest.raises(ValueError, match="already done"):
        R.execute(s, R.encode("t;"), CFG)


def test_submit_rules_and_turn_budget():
    _, s, _ = _run("1234", "1234", ["s1$"])            # junk then EOS: ends, NOT submitted
    assert s.done and not s.submitted
    obs, s, probs = _run("1234", "1734", ["t;"] * CFG.max_turns)  # budget exhausted
    assert obs[-1] == "" and s.done and not s.submitted and s.turns == CFG.max_turns
    assert R.verify(probs, 0, s) == 0.0


# ----------------------------------------------------------------------------- verifier


def test_verifier_f2p_and_p2p_semantics():
    # line 1 is the bug (F2P); breaking line 3 (P2P) fails although the bug is fixed
    _, s, probs = _run("1234", "1734", ["s17;", "s30;", "$"])
    d = R.verify_detail(probs, 0, s)
    assert d == {"f2p": True, "p2p": False, "submitted": True, "reward": False}
    _, s, probs = _run("1234", "1734", ["$"])
    assert R.verify_detail(probs, 0, s) == {"f2p": False, "p2p": True, "submitted": True, "reward": False}
    # fixed but never submitted
    _, s, probs = _run("1234", "1734", ["s17;"] + ["t;"] * (CFG.max_turns - 1))
    assert R.verify_detail(probs, 0, s)["f2p"] and R.verify(probs, 0, s) == 0.0


def test_editing_the_visible_tests_cannot_make_the_verifier_pass():
    # the policy edits the test of line 1 to expect the buggy value: its own tests pass ...
    obs, s, probs = _run("1234", "1734", ["e12;", "t;", "$"])
    assert obs[1] == ">+|" and s.submitted
    assert R.failing_tests(s) == []
    # ... but the hidden tests (the reference) are applied after the edits: reward 0
    assert R.verify(probs, 0, s) == 0.0
    # and editing every visible test never helps on random problems (reference = hidden truth)
    probs = R.make_problems(CFG, seed=3, count=50)
    for i in range(50):
        prog = probs.program[i]
        acts = [f"e{j}{prog[j]};" for j in range(2)] + ["$"]
        _, _, st = R.render(probs, i, acts, CFG)
        assert R.verify(probs, i, st[-1]) == float(np.array_equal(prog, probs.reference[i]))


def test_problems_bug_counts_and_determinism():
    cfg = R.RepairConfig(n_lines=6, min_bugs=2, max_bugs=4)
    p = R.make_problems(cfg, seed=7, count=2000)
    nb = (p.program != p.reference).sum(axis=1)
    assert nb.min() == 2 and nb.max() == 4 and set(np.unique(nb)) == {2, 3, 4}
    np.testing.assert_array_equal(R.make_problems(cfg, seed=7, count=2000).program, p.program)
    for bad in (dict(n_lines=11), dict(min_bugs=0), dict(max_bugs=7), dict(max_turns=1), dict(replay="x"),
                dict(demo_error_rate=1.5)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            R.RepairConfig(**bad)
    with pytest.raises(ValueError, match="unknown parameter"):
        make_task("repair", bogus=1)


# ----------------------------------------------------------------------------- demonstrations


def _split(row: np.ndarray, problems, g: int, cfg=CFG):
    """Reference parser of one episode, independent of any mask: after the prompt an action runs
    to the first ';' or '$' inclusive, or A tokens; the executor's answer follows. Returns
    (action spans, observation positions [L] bool, final state, episode length)."""
    s, pos, spans = R.reset(problems, g), cfg.prompt_width, []
    obs_pos = np.zeros(row.shape, bool)
    while not s.done:
        end = pos
        while end - pos < R.MAX_ACTION_TOKENS and (end == pos or row[end - 1] not in (R.EOT, R.EOS)):
            end += 1
        s, obs = R.execute(s, row[pos:end], cfg)
        np.testing.assert_array_equal(row[end: end + len(obs)], obs)
        spans.append((pos, end))
        obs_pos[end: end + len(obs)] = True
        pos = end + len(obs)
    assert np.all(row[pos:] == R.PAD)
    return spans, obs_pos, s, pos


def _obs_positions(tokens: np.ndarray, problems, group_size: int) -> np.ndarray:
    return np.stack([_split(row, problems, r // group_size)[1] for r, row in enumerate(tokens)])


def test_demonstrations_mask_only_actions_and_replay_consistently():
    task = make_task("repair", **{f: getattr(CFG, f) for f in ("n_lines", "max_bugs", "max_turns", "report_max")})
    probs = task.train_problems(seed=0, step=0, count=64)
    tok, mask = task.demonstrations(probs, seed=5)
    assert tok.shape == mask.shape == (64, CFG.episode_width)
    assert not np.any(mask & _obs_positions(tok, probs, 1))
    assert not np.any(mask[:, : CFG.prompt_width])
    # every masked span is one action; re-executing the actions reproduces the observations
    for i in range(64):
        spans = action_spans(mask[i])
        ref_spans, _, s, length = _split(tok[i], probs, i)
        assert spans == ref_spans and s.done and tok[i, length - 1] == R.EOS
    np.testing.assert_array_equal(task.demonstrations(probs, seed=5)[0], tok)


def test_demonstrations_are_imperfect_and_harder_with_more_bugs():
    cfg = R.RepairConfig(max_bugs=3, report_max=3, max_turns=8)
    probs = R.make_problems(cfg, seed=11, count=3000)
    rng = np.random.default_rng(0)
    r = np.array([R.verify(probs, i, R.render(probs, i, R.demo_actions(probs, i, cfg, rng), cfg)[2][-1])
                  for i in range(3000)])
    nb = (probs.program != probs.reference).sum(axis=1)
    rates = [r[nb == b].mean() for b in (1, 2, 3)]
    assert 0.2 < r.mean() < 0.9 and rates[0] > rates[1] > rates[2]
    clean = dataclasses.replace(cfg, demo_error_rate=0.0)
    assert all(R.verify(probs, i, R.render(probs, i, R.demo_actions(probs, i, clean, rng), clean)[2][-1])
               for i in range(200))


# ----------------------------------------------------------------------------- rollouts and replay


def _trainer(mode="replay", *, drop=True, params_seed=0, n=4, b=3):
    task = RepairTask(R.RepairConfig(**{**CFG.__dict__, "replay": mode}))
    rl = RLConfig(tasks_per_step=b, group_size=n, eval=EvalConfig(count=4, samples=2), loss=LossConfig(drop_no_contrast=drop))
    tr = Trainer(task, MODEL, rl, ps.PrefixConfig(mode="ps_ada", n=n), seed=0)
    return task, tr, init_params(MODEL, jax.random.PRNGKey(params_seed))


def _reference_check(ep: Episodes, problems, group_size: int, states=None, n_replayed=None):
    """Independent re-execution of each episode (``_split``): the policy mask must be exactly the
    action tokens after the first ``n_replayed[r]`` turns, and rewards, turn counts and final
    states must match. Returns the final states."""
    tok, pm, valid = (np.asarray(x) for x in (ep.tokens, ep.policy_mask, ep.valid))
    finals = []
    for r in range(tok.shape[0]):
        g = r // group_size
        spans, _, s, length = _split(tok[r], problems, g)
        want = np.zeros(tok.shape[1], bool)
        for a, b in spans[(0 if n_replayed is None else n_replayed[r]):]:
            want[a:b] = True
        np.testing.assert_array_equal(pm[r], want)
        np.testing.assert_array_equal(valid[r], np.arange(tok.shape[1]) < length)
        assert float(ep.rewards[r]) == R.verify(problems, g, s) and int(ep.units[r]) == s.turns
        finals.append(s)
    if states is not None:
        assert finals == states
    return finals


def test_multi_turn_rollout_matches_reference_execution_and_masks_observations():
    task, tr, params = _trainer()
    probs = task.train_problems(seed=0, step=0, count=3)
    ep, states = tr.rollouts.rollout(params, probs, jax.random.PRNGKey(0), group_size=4, return_states=True)
    assert ep.tokens.shape == (12, CFG.episode_width)
    _reference_check(ep, probs, 4, states)
    # an untrained model writes garbage: error observations, no crash, every budget respected
    text = [task.decode(np.asarray(ep.tokens[r])) for r in range(12)]
    assert any(">?|" in t for t in text)
    assert int(jnp.max(ep.units)) <= CFG.max_turns
    spans = [b - a for r in range(12) for a, b in action_spans(np.asarray(ep.policy_mask[r]))]
    assert max(spans) <= R.MAX_ACTION_TOKENS


def test_observation_tokens_get_no_loss_and_no_gradient_through_the_trainer():
    task, tr, params = _trainer(drop=False)
    state = tr.init_state(params)
    c = tr.collect(state)
    batch, metrics = c.batch, c.metrics
    probs = task.train_problems(seed=0, step=0, count=3)
    obs = _obs_positions(np.asarray(batch.tokens), probs, 4) & np.asarray(batch.valid)
    assert obs.any() and not np.any(np.asarray(batch.loss_mask) & obs)
    np.testing.assert_array_equal(np.asarray(batch.loss_mask), np.asarray(batch.loss_mask) & ~obs)
    # per-token gradient of the loss (advantages forced to 1) is non-zero exactly on loss tokens
    batch = batch._replace(advantages=jnp.ones_like(batch.advantages))
    off = jnp.zeros(batch.tokens[:, 1:].shape, jnp.float32)
    g = np.asarray(jax.grad(lambda o: tr.loss(state.params, batch, o))(off))
    np.testing.assert_array_equal(g != 0, np.asarray(batch.loss_mask)[:, 1:])
    assert metrics["env_steps"] == int(np.sum([len(action_spans(m)) for m in np.asarray(batch.loss_mask)]))


def _demo_source(task, probs, seed=1):
    """Source episodes built from demonstrations (so that they have several turns)."""
    tok, mask = task.demonstrations(probs, seed=seed)
    valid = tok != R.PAD
    L = tok.shape[1]
    turns = np.array([len(action_spans(m)) for m in mask], np.int32)
    z = jnp.zeros((tok.shape[0],), jnp.int32)
    return Episodes(tokens=jnp.asarray(tok), positions=jnp.asarray(np.broadcast_to(np.arange(L), tok.shape)),
                    valid=jnp.asarray(valid), policy_mask=jnp.asarray(mask),
                    logprobs=jnp.zeros(tok.shape, jnp.float32), rewards=z.astype(jnp.float32),
                    units=jnp.asarray(turns), replayed=z, env_steps=jnp.asarray(turns),
                    sampling_logprobs=jnp.zeros(tok.shape, jnp.float32), truncated=z.astype(bool)), mask


@pytest.fixture(scope="module")
def rerolled():
    """Re-rollouts of 6 demonstration sources (2 each), cut half-way, in both modes, same key."""
    task, tr_rep, params = _trainer("replay")
    _, tr_gen, _ = _trainer("regenerate")
    probs = task.train_problems(seed=0, step=1, count=6)
    src, mask = _demo_source(task, probs)
    cut = np.maximum(np.asarray(src.units) // 2, 1)
    key = jax.random.PRNGKey(2)
    out = {"probs": probs, "src": src, "mask": mask, "cut": cut, "params": params, "tr": {}}
    for mode, tr in (("replay", tr_rep), ("regenerate", tr_gen)):
        out[mode] = tr.rollouts.reroll(params, probs, src, cut, key, group_size=2, return_states=True,
                                       return_prefix=True)
        out["tr"][mode] = tr
    return out


def test_replay_rebuilds_the_state_the_source_had_at_the_cut(rerolled):
    probs, src, mask, cut, params = (rerolled[k] for k in ("probs", "src", "mask", "cut", "params"))
    tr = rerolled["tr"]["replay"]
    ep, states, _ = rerolled["replay"]
    assert np.any(cut > 1)
    # the states the source episodes went through, turn by turn (the demonstrator's own run)
    rb = tr.rollouts.rebuild(probs, src, cut, group_size=2)
    for r in range(12):
        g = r // 2
        acts = [np.asarray(src.tokens[g, a:b]) for a, b in action_spans(mask[g])]
        _, _, seen = R.render(probs, g, acts, CFG)
        assert rb["states"][r] == seen[cut[g] - 1]
        ctx = rb["context"][r]
        np.testing.assert_array_equal(ctx, np.asarray(src.tokens[g, : len(ctx)]))  # same tokens as the source
    # no model token for the prefix: the policy mask starts right after the rebuilt context
    assert np.all(np.asarray(ep.replayed) == np.repeat([sum(b - a for a, b in action_spans(mask[g])[: cut[g]])
                                                       for g in range(6)], 2))
    pm = np.asarray(ep.policy_mask)
    for r in range(12):
        assert action_spans(pm[r])[0][0] == len(rb["context"][r])
    # reference: re-execute whole episodes; the policy mask is the actions after the cut
    _reference_check(ep, probs, 2, states, n_replayed=np.repeat(cut, 2))
    with pytest.raises(ValueError, match="cut"):
        tr.rollouts.reroll(params, probs, src, np.asarray(src.units) + 1, jax.random.PRNGKey(2), group_size=2)


def test_replay_and_regenerate_give_identical_states_inputs_and_continuations(rerolled):
    (ep1, st1, pre1), (ep2, st2, pre2) = rerolled["replay"], rerolled["regenerate"]
    assert pre1["states"] == pre2["states"]
    for k in ("head", "head_len", "obs", "obs_len"):
        np.testing.assert_array_equal(pre1[k], pre2[k])
    assert st1 == st2
    for a, b in zip(ep1, ep2):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
    c1, c2 = rerolled["tr"]["replay"].rollouts.costs, rerolled["tr"]["regenerate"].rollouts.costs
    assert c1["tokens_forced"] == 0 and c2["tokens_forced"] == c1["tokens_replayed"] == int(np.sum(ep1.replayed)) > 0
    # the regenerated cache equals a one-shot prefill of the same context (valid slots)
    from prs.tasks.agent_rollouts import _prefill_cache
    tr_gen, probs, params = rerolled["tr"]["regenerate"], rerolled["probs"], rerolled["params"]
    rb = tr_gen.rollouts.rebuild(probs, rerolled["src"], rerolled["cut"], group_size=2)
    cache = tr_gen.rollouts._regenerate(params, probs, rb, CFG.episode_width, 2)
    ref = _prefill_cache(params, jnp.asarray(pre1["head"]), jnp.asarray(pre1["head_len"]), cfg=MODEL,
                         max_len=CFG.episode_width)
    slot_ok = np.arange(CFG.episode_width)[None, :] < pre1["head_len"][:, None]      # [R, W]
    for name in ("k", "v"):
        a, b = np.asarray(cache[name]), np.asarray(ref[name])                        # [L, R, W, Kv, H]
        np.testing.assert_allclose(a[:, slot_ok], b[:, slot_ok], atol=2e-5)


def test_hydra_selects_the_task_and_every_method_builds(tmp_path):
    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build

    conf = str(pathlib.Path(__file__).resolve().parents[2] / "conf")
    methods = sorted(p.stem for p in (pathlib.Path(conf) / "method").glob("*.yaml"))
    with initialize_config_dir(config_dir=conf, version_base=None):
        for method in methods:
            cfg = validate(compose("config", overrides=[f"method={method}", "task=repair", "model=repair_tiny",
                                                        "task.params.replay=regenerate", f"sft.base_dir={tmp_path}"]))
            task, model_cfg, rl, prefix, run_cfg = build(cfg)
            assert task.name == "repair" and task.cfg.replay == "regenerate"
            assert model_cfg.vocab_size == task.vocab_size == len(R.TOKENS)
            tr = Trainer(task, model_cfg, rl, prefix, seed=0)
            assert tr.width == task.cfg.episode_width


def test_module_docstring_episode_is_what_the_executor_renders():
    doc_line = next(line.strip() for line in R.__doc__.splitlines() if line.strip().startswith("^315862#"))
    probs = R.problems_from_strings("315862", "375802")
    ids, _, states = R.render(probs, 0, ["t;", "s17;", "s40;", "t;", "$"], R.RepairConfig())
    assert R.decode(ids) == doc_line and R.verify(probs, 0, states[-1]) == 1.0


def test_fraction_reward_gives_partial_credit_where_binary_gives_none():
    """The partial-pass trap's reward (code_agent_rewards.md): fraction of hidden tests vs all-or-nothing."""
    from prs.tasks import repair as env_lib

    probs = env_lib.problems_from_strings("123456", "120406")      # lines 2 and 4 are bugs (F2P)
    s0 = env_lib.reset(probs, 0)
    half_fixed = s0._replace(program=(1, 2, 0, 4, 5, 6), submitted=True)   # one of two bugs fixed
    fixed = s0._replace(program=(1, 2, 0, 4, 0, 6), submitted=True)
    broke_p2p = s0._replace(program=(9, 2, 0, 4, 0, 6), submitted=True)    # fixed both, broke line 0
    cases = [(half_fixed, 0.0, 5 / 6), (fixed, 1.0, 1.0), (broke_p2p, 0.0, 5 / 6),
             (fixed._replace(submitted=False), 0.0, 0.0)]
    for state, binary, fraction in cases:
        assert env_lib.verify(probs, 0, state) == binary
        assert env_lib.verify(probs, 0, state, reward="fraction") == pytest.approx(fraction)
    with pytest.raises(ValueError, match="reward"):
        env_lib.RepairConfig(reward="similarity")
