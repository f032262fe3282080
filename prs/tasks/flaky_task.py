"""The flaky-tool chain (``prs.tasks.flaky``) as the trainer sees it, registered as ``flaky_chain``, with
the mechanism study's prefix sources and metrics (``results/mechanism/README.md``, section 10).

Prefix sources (``FlakyRollouts``, an ``AgentRollouts``): ``oracle_max_k >= 0`` (the positive control)
re-rolls every training group with at most that many successes from the solver's right, crash-free
prefix cut just before the hard turn; ``fixed_cut`` makes every Prefix Sampling re-roll cut its
source just before the hard turn (``min(E, turns - 1)``). Both are task options outside the warm
start's key (every arm of a chain shares one warm start), as is ``crash_rate``.

Metrics:
* ``policy_metrics`` (every evaluation): ``mech/tf_hard_acc``, the hard step's teacher-forced
  accuracy E[q] = mean_i pi(y_i | the right, crash-free prefix of problem i) on ``TF_PROBLEMS``
  held-out problems, and ``mech/tf_reach_policy`` = mean_i prod_t pi(s_{t+1} | right prefix) (the
  policy's own chance to write every running value right at temperature 1, crashes aside); with
  ``max_retries >= 1`` also ``mech/tf_retry``, the recovery skill teacher-forced: mean_i pi(retry_i |
  the right prefix with a tool error injected at a seeded easy call), whatever the run's error rate;
* ``episode_metrics`` (fresh episodes, replayed == 0): ``mech/p_reach`` (alive at the hard turn
  with every running value right), ``mech/p_alive`` (no crash, all turns taken), ``mech/crash_rate``,
  ``mech/hard_acc_on_reach``, ``mech/output_len``, and the oracle's counts;
* ``batch_metrics``: ``mech/adv_mass_hard``, the share of the update's advantage mass on the hard
  turn's value token (``prs.tasks.mechanism.advantage_mass_share``).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from prs.rl.episodes import Episodes, fresh_rows
from prs.tasks import flaky as env_lib
from prs.tasks.agent_env import AgentEnv, pack_episodes
from prs.tasks.agent_rollouts import AgentRollouts, action_spans, recorded_observations
from prs.tasks.flaky import FlakyConfig, Problems
from prs.tasks.mechanism import TF_PROBLEMS, advantage_mass_share, jit_forward, output_length
from prs.tasks.registry import register_task
from prs.tasks.repair_task import AgentTask, task_factory


class _Source(NamedTuple):
    tokens: np.ndarray       # [G, L] the solver's episodes
    policy_mask: np.ndarray  # [G, L] their action tokens
    valid: np.ndarray        # [G, L]


def solver_episodes(problems: Problems, cfg: FlakyConfig, *, turns: int | None = None) -> _Source:
    """The right, crash-free episode of every problem (its first ``turns`` turns; all by default),
    as a re-roll source: tokens, policy mask, valid [B, L]."""
    env = env_lib.ENVIRONMENT
    b = np.asarray(problems.mult).shape[0]
    eps = [env.render(problems, i, env_lib.solution_actions(problems, i)[:turns], cfg)[:2] for i in range(b)]
    return _pack(eps, cfg)


def _pack(eps, cfg: FlakyConfig) -> _Source:
    tokens, mask = pack_episodes(eps, cfg.episode_width, pad=env_lib.PAD)
    lens = np.array([len(ids) for ids, _ in eps])
    return _Source(tokens, mask, np.arange(tokens.shape[1])[None, :] < lens[:, None])


def error_sources(problems: Problems, cfg: FlakyConfig, at: np.ndarray) -> _Source:
    """The injected-fault oracle's sources (``flaky.error_source``): problem ``i``'s right episode
    with the tool erring at easy call ``at[i]`` and the retry after it."""
    eps = []
    for i, a in enumerate(np.asarray(at)):
        state, acts = env_lib.error_source(problems, i, cfg, int(a))
        eps.append(env_lib.ENVIRONMENT.render(problems, i, acts, cfg, state=state)[:2])
    return _pack(eps, cfg)


def first_error_cut(source, max_cut) -> np.ndarray:
    """[G] turns up to and including each source's first tool error (its ``>!|`` answer), the
    easy-side cut that puts a re-roll at the error; 0 where the source met none or the cut would
    not leave a proper prefix (``>= max_cut[g]``)."""
    tokens, pm, valid = np.asarray(source.tokens), np.asarray(source.policy_mask), np.asarray(source.valid)
    err = [env_lib.OBS_OPEN, env_lib.ERROR, env_lib.OBS_CLOSE]
    out = np.zeros((tokens.shape[0],), np.int32)
    for g in range(tokens.shape[0]):
        obs = recorded_observations(tokens[g], pm[g], valid[g])
        hit = next((i for i, o in enumerate(obs) if o == err), None)
        if hit is not None and hit + 1 < int(np.asarray(max_cut)[g]):
            out[g] = hit + 1
    return out


def hard_value_mask(tokens: np.ndarray) -> np.ndarray:
    """[R, L] bool, True at each row's hard-turn value token: the token after the ``>*m|`` answer."""
    tokens = np.asarray(tokens)
    out = np.zeros(tokens.shape, bool)
    r, c = np.nonzero(tokens == env_lib.STAR)
    pos = c + 3
    keep = pos < tokens.shape[1]
    out[r[keep], pos[keep]] = True
    return out


def teacher_forced(params, problems: Problems, cfg: FlakyConfig, *, model_cfg, forward=None) -> dict[str, float]:
    """One forward pass over each problem's right, crash-free prefix of its E easy turns (and the
    multiplier's answer) -> ``hard`` = mean_i q_i, q_i = pi(y_i | prefix_i), and ``reach_policy`` =
    mean_i prod_t pi(s_{t+1,i} | prefix_i before turn t) over the E easy values."""
    forward = jit_forward() if forward is None else forward
    src = solver_episodes(problems, cfg, turns=cfg.easy_steps)
    rows = src.tokens[:, : cfg.prompt_width + cfg.easy_steps * (2 + cfg.max_obs_tokens)]   # [B, W]
    b, w = rows.shape
    lens = src.valid.sum(axis=1)                                                           # [B] all W
    logits = forward(params, jnp.asarray(rows), cfg=model_cfg, valid=jnp.asarray(src.valid[:, :w]))
    lp = np.asarray(jax.nn.log_softmax(logits, axis=-1), np.float64)                      # [B, W, V]
    want = env_lib.solution_values(problems)                                               # [B, E+1]
    q_hard = np.exp(lp[np.arange(b), lens - 1, env_lib.DIGIT0 + want[:, -1]])
    starts = np.array([[a for a, _ in action_spans(src.policy_mask[i])] for i in range(b)])  # [B, E]
    lq = lp[np.arange(b)[:, None], starts - 1, env_lib.DIGIT0 + want[:, :-1]]               # [B, E]
    return {"hard": float(q_hard.mean()), "reach_policy": float(np.exp(lq.sum(axis=1)).mean()), "problems": int(b)}


def teacher_forced_retry(params, problems: Problems, cfg: FlakyConfig, *, model_cfg, forward=None,
                         seed: int = env_lib.EVAL_SEED + 1) -> dict[str, float]:
    """The recovery skill at an injected tool error, teacher-forced (issue #31, mechanism 4): problem
    ``i``'s right episode with the tool erring at easy call ``at_i`` (uniform on 0 … E-1 from ``seed``;
    ``error_sources``) -> ``retry`` = mean_i prod_{tokens of the retry turn} pi(token | everything
    before it), the chance that the policy writes the erred turn's value again (``d ;``) at
    temperature 1. One forward pass; needs ``max_retries >= 1`` (the retry is an extra turn)."""
    if cfg.max_retries < 1:
        raise ValueError(f"teacher_forced_retry: needs FlakyConfig.max_retries >= 1, got {cfg.max_retries}")
    forward = jit_forward() if forward is None else forward
    b = np.asarray(problems.mult).shape[0]
    at = np.random.default_rng(seed).integers(0, cfg.easy_steps, size=b)                  # [B]
    src = error_sources(problems, cfg, at)
    logits = forward(params, jnp.asarray(src.tokens), cfg=model_cfg, valid=jnp.asarray(src.valid))
    lp = np.asarray(jax.nn.log_softmax(logits, axis=-1), np.float64)                      # [B, L, V]
    q = np.empty((b,))
    for i in range(b):
        s, z = action_spans(src.policy_mask[i])[at[i] + 1]                                 # the retry turn
        pos = np.arange(s, z)
        q[i] = np.exp(lp[i, pos - 1, src.tokens[i, pos]].sum())
    return {"retry": float(q.mean()), "problems": int(b)}


class FlakyRollouts(AgentRollouts):
    """``AgentRollouts`` with the task's prefix sources (module docstring). A training call samples
    as usual, then replaces the groups ``task.oracle_max_k`` selects by ``N`` re-rolls from the
    solver's prefix (every group is re-rolled, so the call has one shape; the unselected copies are
    dropped, the replaced groups' first samples too: ``mech/oracle_discarded_tokens``)."""

    def __init__(self, *, task, **kw):
        super().__init__(**kw)
        self.task = task

    def rollout(self, params, problems, key, *, group_size: int, evaluation: bool = False, return_states: bool = False):
        out = super().rollout(params, problems, key, group_size=group_size, evaluation=evaluation,
                              return_states=return_states)
        task = self.task
        if evaluation or return_states or (task.oracle_max_k < 0 and task.oracle_min_k < 0):
            return out
        ep = out
        k = np.asarray(ep.rewards).reshape(-1, group_size).sum(axis=1)
        b = k.shape[0]
        if task.oracle_max_k >= 0:  # hard side: the solver's crash-free prefix before the hard turn
            sel = k <= task.oracle_max_k
            src, cut = solver_episodes(problems, self.env), np.full((b,), self.env.easy_steps)
        else:  # easy side: an injected tool error at a seeded easy call, the re-roll starting at it
            sel = k >= task.oracle_min_k
            at = np.asarray(jax.random.randint(jax.random.fold_in(key, 0xE44), (b,), 0, self.env.easy_steps))
            src, cut = error_sources(problems, self.env, at), at + 1
        task.side.update(oracle_groups=int(sel.sum()), oracle_discarded_tokens=0)
        if not sel.any():
            return ep
        ep2 = super().reroll(params, problems, src, cut, jax.random.fold_in(key, 0x0AC1E), group_size=group_size)
        take2 = np.repeat(sel, group_size)
        task.side["oracle_discarded_tokens"] = int(np.asarray(ep.policy_mask)[take2].sum())
        t = jnp.asarray(take2)
        return Episodes(*(jnp.where(t.reshape((-1,) + (1,) * (a.ndim - 1)), a2, a) for a, a2 in zip(ep, ep2)))

    def reroll(self, params, problems, source, cut, key, *, group_size: int, **kw):
        if self.task.fixed_cut:  # just before the hard turn, within the source's proper prefixes
            cut = np.minimum(self.env.easy_steps, np.asarray(source.units) - 1).astype(np.int32)
        if self.task.error_cut:  # just after the source's first tool error, where it has one
            at = first_error_cut(source, np.asarray(source.units))
            cut = np.where(at > 0, at, np.asarray(cut)).astype(np.int32)
        return super().reroll(params, problems, source, cut, key, group_size=group_size, **kw)


@dataclasses.dataclass(frozen=True)
class FlakyTask(AgentTask):
    """The flaky-tool chain behind the trainer's task protocol (module docstring)."""

    cfg: FlakyConfig = FlakyConfig()
    name: str = "flaky_chain"
    oracle_max_k: int = -1
    fixed_cut: bool = False
    oracle_min_k: int = -1
    error_cut: bool = False
    side: dict = dataclasses.field(default_factory=dict, compare=False, hash=False, repr=False)
    environment: ClassVar[AgentEnv] = env_lib.ENVIRONMENT

    def __post_init__(self):
        if not (isinstance(self.oracle_max_k, int) and -1 <= self.oracle_max_k):
            raise ValueError(f"task 'flaky_chain': oracle_max_k must be an int >= -1 (-1: off), got {self.oracle_max_k!r}")
        if not (isinstance(self.oracle_min_k, int) and -1 <= self.oracle_min_k):
            raise ValueError(f"task 'flaky_chain': oracle_min_k must be an int >= -1 (-1: off), got {self.oracle_min_k!r}")
        for name in ("fixed_cut", "error_cut"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"task 'flaky_chain': {name} must be true or false, got {getattr(self, name)!r}")
        if self.oracle_max_k >= 0 and self.oracle_min_k >= 0:
            raise ValueError("task 'flaky_chain': oracle_max_k (hard side) and oracle_min_k (easy side) exclude each other")
        if self.oracle_min_k >= 0 and self.cfg.max_retries < 1:
            raise ValueError("task 'flaky_chain': oracle_min_k injects a tool error, which needs max_retries >= 1")

    @property
    def warm_start_key(self):
        """The task without its RL-only options (crash and error rates, oracles, cuts): demonstrations
        never crash and meet errors only at ``demo_fault_rate``, so every arm and rate of one chain
        starts from one warm start."""
        return (self.name, dataclasses.replace(self.cfg, crash_rate=0.0, error_rate=0.0))

    def demonstrations(self, problems: Problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The scripted solver's episodes (``AgentEnv.demonstrations``); with ``demo_fault_rate > 0``
        episodes that meet tool errors and retry them at ``demo_retry_rate`` (``flaky.demo_episode``)."""
        if self.cfg.demo_fault_rate == 0.0:
            return super().demonstrations(problems, seed=seed)
        rng = np.random.default_rng(seed)
        eps = []
        for i in range(np.asarray(problems.mult).shape[0]):
            state, acts = env_lib.demo_episode(problems, i, self.cfg, rng)
            eps.append(self.environment.render(problems, i, acts, self.cfg, state=state)[:2])
        return pack_episodes(eps, self.cfg.episode_width, pad=env_lib.PAD)

    def make_rollouts(self, *, model_cfg, sampling, mesh=None):
        return FlakyRollouts(task=self, env=self.cfg, model_cfg=model_cfg, sampling=sampling, mesh=mesh,
                             mode=self.cfg.replay, environment=self.environment)

    def policy_metrics(self, params, *, model_cfg) -> dict[str, float]:
        probs = self.eval_problems(count=TF_PROBLEMS)
        rep = teacher_forced(params, probs, self.cfg, model_cfg=model_cfg)
        out = {"mech/tf_hard_acc": rep["hard"], "mech/tf_reach_policy": rep["reach_policy"]}
        if self.cfg.max_retries >= 1:
            out["mech/tf_retry"] = teacher_forced_retry(params, probs, self.cfg, model_cfg=model_cfg)["retry"]
        return out

    def batch_metrics(self, problems: Problems, batch) -> dict[str, float]:
        return {"mech/adv_mass_hard": advantage_mass_share(batch.advantages, batch.loss_mask,
                                                           hard_value_mask(batch.tokens))}

    def episode_metrics(self, problems: Problems, ep) -> dict[str, float]:
        """Reach, survival, the hard step and recovery from tool errors over the fresh rows of ``ep``
        (row r on problem r // N; replayed rows are left out, ``prs.rl.episodes.fresh_rows``). Each row's outcome is read back by
        restoring its recorded turns (``flaky.restore``, which checks every recorded answer)."""
        b = np.asarray(problems.mult).shape[0]
        tokens, pm = np.asarray(ep.tokens), np.asarray(ep.policy_mask)
        valid = np.asarray(ep.valid)
        n = tokens.shape[0] // b
        want = env_lib.solution_values(problems)
        e = self.cfg.easy_steps
        rows = fresh_rows(ep.replayed, groups=b)[0].tolist()  # the one rule of every task's episode_metrics
        c = {k: 0 for k in ("reach", "alive", "crash", "hard", "faulty", "faulty_pass", "clean", "clean_pass",
                            "errors", "retried")}
        err = [env_lib.OBS_OPEN, env_lib.ERROR, env_lib.OBS_CLOSE]
        for i in rows:
            spans = action_spans(pm[i])
            acts = [tokens[i, a:z].tolist() for a, z in spans]
            obs = recorded_observations(tokens[i], pm[i], valid[i])
            st = env_lib.restore(problems, i // n, acts, obs, self.cfg, seed=0)
            v, w = st.values, want[i // n].tolist()
            alive = len(v) == e + 1 and not st.crashed
            reach = alive and list(v[:e]) == w[:e]
            c["alive"] += alive
            c["reach"] += reach
            c["hard"] += reach and v[e] == w[e]
            c["crash"] += st.crashed
            ok = env_lib.verify(problems, i // n, st) == 1.0
            key = "faulty" if st.errors_seen else "clean"
            c[key] += 1
            c[key + "_pass"] += ok
            for t, o in enumerate(obs[:-1]):  # a retry writes the erred turn's value again
                if o == err:
                    c["errors"] += 1
                    c["retried"] += env_lib.turn_value(acts[t + 1]) == env_lib.turn_value(acts[t]) != -1
        c["rows"] = len(rows)

        def rate(num: str, den: str):  # None when there is nothing to count (all re-rolled; no error met)
            return float(c[num] / c[den]) if c[den] else None

        out = {"mech/p_reach": rate("reach", "rows"), "mech/p_alive": rate("alive", "rows"),
               "mech/crash_rate": rate("crash", "rows"), "mech/hard_acc_on_reach": rate("hard", "reach"),
               "mech/output_len": output_length(pm[rows]) if rows else None}
        if self.cfg.error_rate > 0:
            out.update({"mech/recovery_rate": rate("faulty_pass", "faulty"), "mech/clean_pass_rate": rate("clean_pass", "clean"),
                        "mech/faulty_share": rate("faulty", "rows"), "mech/retry_rate": rate("retried", "errors")})
        out.update({f"mech/{k}": v for k, v in self.side.items()})
        self.side.clear()
        return out


register_task("flaky_chain", task_factory("flaky_chain", FlakyTask, FlakyConfig,
                                          options=("oracle_max_k", "fixed_cut", "oracle_min_k", "error_cut")))

