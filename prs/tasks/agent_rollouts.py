"""Multi-turn agent rollouts with replay-through-execution, built by a task's ``make_rollouts``.

An episode interleaves policy turns (sampled until ``;`` or EOS, at most ``A`` tokens) and
observation turns (the environment's answer to the action, rendered as tokens, ``policy_mask`` 0,
so never in the loss)::

    prompt  a_1 o_1  a_2 o_2  …  a_n            (a_n = ``$`` or the last turn of the budget)

One rollout-engine call per turn (``prs.rollout.engine.RolloutEngine``, the run's
``rollout.engine``): ``generate`` for the first action, then ``append_and_resume`` with the
observations of the rows still running; the engine carries its own state between the turns of a
call (``keep_state``: the jax engine its KV cache, so a resume runs the model over the new
observation tokens only; vLLM none, its prefix cache holds the earlier turns). The host executes
every action (the environment's ``execute``) between calls. Budgets: ``A``
tokens per action (a longer turn is cut by the sampler and answered with an error observation),
``max_turns`` policy turns per episode, and the fixed episode width ``L`` (``RepairConfig.episode_width``).

Replay-through-execution (``reroll``, Zhu et al. 2026, §3 "replay"): a source episode is cut after
its first ``c`` policy turns (a turn boundary; ``Episodes.units`` counts turns). The environment
state at the cut is rebuilt by *executing* the prefix's ``c`` actions from the initial state, the
context ``prompt a_1 o_1 … a_c o_c`` is rebuilt from those executions, and the model generates only
the continuation from there. Two ways to build the model's cache for that context (the switch
``RepairConfig.replay``):

  * ``"replay"``: one parallel prefill of the context (no model token is generated for the prefix);
  * ``"regenerate"``: the expensive reference: the prompt is prefilled, then every prefix action is
    force-decoded through the model one token per step (the per-token decode work that generating
    it would cost, log-probabilities included), each action executed in the environment right
    after it, and its observation appended, turn by turn. It builds the jax engine's KV cache
    itself (with the policy's parameters), so it runs on the jax engine only.

Both give the same environment states and the same continuation input rows (tested); the cache
differs only by float rounding, so ``costs`` can compare the step time of the two in one run.

Cost accounting (``AgentRollouts.costs``, cumulative; ``reset_costs()`` clears it):
``tokens_generated`` (policy tokens sampled), ``tokens_replayed`` (prefix action tokens not
generated thanks to replay/forcing), ``tokens_forced`` (prefix tokens decoded one by one in
``regenerate`` mode), ``env_steps`` (executions, replayed ones included), ``env_steps_replayed``,
``time_env_s``, ``time_rebuild_s`` (rebuilding prefixes: executions + forced decoding),
``time_sample_s`` (engine calls). The trainer's step metrics carry the token/step totals too.

With another engine than jax (vLLM) the episodes' ``logprobs`` are the trainer's own forward pass
over the whole episode and the engine's are kept as ``sampling_logprobs`` (the rollout
correction's behaviour policy; ``prs.rl.episodes.EngineClient``), the gap in ``pop_metrics``.

The environment is host-side Python; the executor runs once per live row per turn (a loop over
rows on the host, like any Python environment), the model work is batched over all rows.
"""
from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from prs.models import qwen3 as model_lib
from prs.models.sampler import Rollout, SamplerConfig
from prs.rollout.engine import EngineState, RolloutEngine
from prs.tasks import repair
from prs.tasks.agent_env import AgentEnv
from prs.tasks.repair import EOS, EOT, MAX_ACTION_TOKENS, PAD, EnvState, Problems, RepairConfig
from prs.rl.episodes import EngineClient, Episodes, SamplingSettings, make_rollout_engine

_COSTS = ("tokens_generated", "tokens_replayed", "tokens_forced", "env_steps", "env_steps_replayed",
          "time_env_s", "time_rebuild_s", "time_sample_s", "calls")


def action_spans(policy_mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True in one row's ``policy_mask [L]`` -> [(start, end)]: the policy turns."""
    m = np.concatenate([[False], np.asarray(policy_mask, bool), [False]]).astype(np.int8)
    d = np.diff(m)
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def recorded_observations(tokens: np.ndarray, policy_mask: np.ndarray, valid: np.ndarray) -> list[list[int]]:
    """One row's observation after each policy turn: the tokens from the turn's end to the next turn's
    start (the last turn: to the row's last valid token) -> ``[o_1, …, o_n]`` id lists (``[]`` where
    the episode ended after the turn)."""
    spans = action_spans(policy_mask)
    end = int(np.flatnonzero(np.asarray(valid, bool))[-1]) + 1 if np.any(valid) else 0
    stops = [a for a, _ in spans[1:]] + [end]
    return [np.asarray(tokens)[b:nxt].tolist() for (_, b), nxt in zip(spans, stops)]


def row_seeds(key, rows: int) -> np.ndarray:
    """[rows] int64 seeds of a stochastic environment's episodes, drawn from ``key`` (the same on
    every process, so every process executes the same outcomes)."""
    return np.asarray(jax.random.randint(jax.random.fold_in(key, 0x5EED), (rows,), 0, 2**31 - 1), np.int64)


def _fit(x, width: int, fill) -> jax.Array:
    """[R, W] -> [R, width]: right-pad, or drop trailing columns (callers guarantee they are padding)."""
    x = jnp.asarray(x)
    if x.shape[1] >= width:
        return x[:, :width]
    return jnp.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=fill)


@functools.partial(jax.jit, static_argnames=("cfg", "max_len"))
def _prefill_cache(params, tokens, lengths, *, cfg, max_len):
    _, cache = model_lib.prefill(params, tokens, lengths, cfg=cfg, max_len=max_len)
    return cache


@functools.partial(jax.jit, static_argnames=("cfg",), donate_argnums=(1,))
def _force_decode(params, cache, tokens, start, n, *, cfg):
    """Feeds ``tokens [R, A]`` one token per step at slots ``start + a`` (rows with ``a >= n`` write
    nothing): the decode work of generating them, with the log-probability of each next forced
    token computed as sampling would. Returns (cache, Σ log p [R])."""
    R, A = tokens.shape

    def body(carry, a):
        cache, lp = carry
        act = a < n                                                              # [R]
        h, cache = model_lib.extend(params, cache, tokens[:, a][:, None], (start + a)[:, None],
                                    act[:, None], cfg=cfg)
        logp = jax.nn.log_softmax(model_lib.logits_from_hidden(params, h[:, 0], cfg=cfg), axis=-1)  # [R, V]
        nxt = tokens[:, jnp.minimum(a + 1, A - 1)]
        lp_a = jnp.take_along_axis(logp, nxt[:, None], axis=-1)[:, 0]
        return (cache, lp + jnp.where(act & (a + 1 < n), lp_a, 0.0)), None

    (cache, lp), _ = jax.lax.scan(body, (cache, jnp.zeros((R,), jnp.float32)), jnp.arange(A))
    return cache, lp


@functools.partial(jax.jit, static_argnames=("cfg",), donate_argnums=(1,))
def _extend_block(params, cache, tokens, start, n, *, cfg):
    """Writes a block ``tokens [R, O]`` (first ``n [R]`` of each row) at slots ``start + o``."""
    O = tokens.shape[1]
    pos = start[:, None] + jnp.arange(O, dtype=jnp.int32)[None, :]               # [R, O]
    write = jnp.arange(O)[None, :] < n[:, None]                                  # [R, O]
    _, cache = model_lib.extend(params, cache, tokens, pos, write, cfg=cfg)
    return cache


# rollout keys the multi-turn loop cannot honour: each turn is one engine call over all rows that
# carries every row's KV cache to the next turn (keep_state), so the cache of all R rows is live anyway
# and no call may split, group or regroup the rows; each action gets A tokens
_UNSUPPORTED = (("continuous_slots", None, "continuous batching does not keep a row's KV cache between turns"),
                ("row_chunk", None, "every turn's KV cache of all rows is kept for the next turn"),
                ("attend_buckets", None, "a resumed turn attends its whole carried cache"),
                ("prefill_group", False, "a group's rows diverge after the first turn"),
                ("max_new_tokens", None, "each action gets MAX_ACTION_TOKENS tokens, an episode max_turns turns"))


def check_sampling(sampling) -> None:
    """One ValueError naming the first ``RolloutConfig`` key that multi-turn agent rollouts would
    accept and not honour (``_UNSUPPORTED``) and its only allowed value; the trainer's construction
    and ``python -m experiments.plan`` call it for an agent task."""
    for name, off, why in _UNSUPPORTED:
        if getattr(sampling, name) != off:
            raise ValueError(f"RolloutConfig.{name}={getattr(sampling, name)!r} (rollout.{name}) with a multi-turn agent "
                             f"task: {why}; allowed {name}={'null' if off is None else str(off).lower()}")


class AgentRollouts(EngineClient):
    """Sampling, replay and regeneration for a multi-turn task (``prs.tasks.repair``).

    Args:
      env: the task's ``RepairConfig`` (or the config of ``environment``).  mode: ``"replay"`` or
        ``"regenerate"`` (see module docstring).
      model_cfg: the policy's ``ModelConfig``.  sampling: the run's ``prs.rl.episodes.SamplingSettings``
        (temperature, top-k/p, evaluation temperature, ``row_parts``, the engine, its dtype and
        options; ``check_sampling`` refuses the keys it cannot honour: ``row_chunk``, ``attend_buckets``,
        ``prefill_group``, ``continuous_slots``, ``max_new_tokens``).
        mesh: the jax engine's mesh (None: one device; another engine refuses a mesh).
      environment: the ``prs.tasks.agent_env.AgentEnv`` the rollouts call: ``prompts``, ``reset``,
        ``execute(state, action, env)``, ``verify(problems, index, state, reward=)`` and repair's PAD /
        EOS / ``;`` ids (``prs.tasks.repair.ENVIRONMENT``, the default, or ``prs.tasks.trap.ENVIRONMENT``);
        ``env`` needs ``prompt_width``, ``max_obs_tokens``, ``episode_width`` and ``reward``. ``lib=``
        is a TypeError naming ``environment``.
      logits_chunk: the LM head's time chunk of the trainer's log-probs (another engine than jax).

    Every engine call generates at most ``A = MAX_ACTION_TOKENS`` tokens (one action), so
    ``RLConfig.rollout.max_new_tokens`` does not apply; the episode budget is ``max_turns`` turns in ``L``
    (another engine's requests are at most ``L`` tokens long).
    Compiles (jax engine): one sampler shape per turn count (the buffers grow by ``O + A`` per turn)
    and per row count (training, re-roll, evaluation) and rebuilt-context bucket; all reused across
    steps. The ``regenerate`` path runs unsharded (``mesh`` is used by the engine calls only).
    Several processes (jax engine, ``replay`` only): every process holds all R rows on the host,
    executes every row's actions (the environment is deterministic, so the observations, states and
    rewards are the same everywhere) and the engine feeds the sampler each process's own rows; each
    call is one SPMD program over the global batch whose rollout every process gets on the host
    (``prs.rollout.jax_engine``), so the episodes equal a single-process run's.
    """

    multi_turn = True  # a re-roll starts after >= 1 replayed turn; fresh rows come from ``rollout``
    token_budget = None  # no per-call token budget: each turn gets A tokens, an episode max_turns turns

    def __init__(self, *, env: RepairConfig, model_cfg, sampling: SamplingSettings, mesh=None,
                 mode: str = "replay", environment: AgentEnv = repair.ENVIRONMENT, logits_chunk: int = 512,
                 **renamed):
        if renamed:
            key = next(iter(renamed))
            hint = "; pass the environment as environment= (an AgentEnv: repair.ENVIRONMENT, trap.ENVIRONMENT)" if key == "lib" else ""
            raise TypeError(f"AgentRollouts() got an unexpected keyword argument {key!r}{hint}")
        if mode not in ("replay", "regenerate"):
            raise ValueError(f"AgentRollouts: mode={mode!r}; choose 'replay' or 'regenerate'")
        if (environment.PAD, environment.EOS, environment.EOT, environment.MAX_ACTION_TOKENS) != (
                PAD, EOS, EOT, MAX_ACTION_TOKENS):
            raise ValueError(f"AgentRollouts: environment {environment.name} must share repair's PAD/EOS/';' ids and "
                             f"action width")
        if mode == "regenerate" and jax.process_count() > 1:
            raise ValueError(f"AgentRollouts: mode='regenerate' runs unsharded, on one process only; "
                             f"{jax.process_count()} processes: use mode='replay'")
        if mode == "regenerate" and sampling.engine != "jax":
            raise ValueError(f"AgentRollouts: mode='regenerate' (task replay) builds the jax engine's KV cache; "
                             f"rollout.engine={sampling.engine!r} has none: use replay='replay' or rollout.engine=jax")
        if mode == "regenerate" and environment.stochastic:
            raise ValueError(f"AgentRollouts: mode='regenerate' re-executes the prefix, which in the stochastic "
                             f"environment {environment.name} draws new outcomes; use mode='replay' (restores the "
                             f"recorded ones)")
        check_sampling(sampling)
        self.mesh, self.env, self.mode, self.environment = mesh, env, mode, environment
        self.A, self.O, self.P = MAX_ACTION_TOKENS, env.max_obs_tokens, env.prompt_width
        self.width = env.episode_width                                          # L
        self.scfg = SamplerConfig(max_new_tokens=self.A, temperature=sampling.temperature,
                                  top_k=sampling.top_k, top_p=sampling.top_p, eos_id=EOS, stop_ids=(EOT,), pad_id=PAD,
                                  buckets=(self.P, self.width), row_parts=sampling.row_parts)
        self.eval_scfg = dataclasses.replace(self.scfg, temperature=sampling.eval_temperature, top_k=0, top_p=1.0)
        # widths of a rebuilt context (both modes): quarters of L rounded up to 8, so a short prefix
        # is not prefilled (replay) or attended (regenerate) over the whole episode width
        self.head_buckets = tuple(sorted({min(-(-(self.width * q // 4) // 8) * 8, self.width) for q in (1, 2, 3, 4)}))
        self._init_engine(make_rollout_engine(sampling, model_cfg=model_cfg, mesh=mesh, max_model_len=self.width),
                          model_cfg=model_cfg, logits_chunk=logits_chunk)
        self.reset_costs()

    def reset_costs(self) -> None:
        self.costs = {k: 0 for k in _COSTS}
        for k in ("time_env_s", "time_rebuild_s", "time_sample_s"):
            self.costs[k] = 0.0

    # ------------------------------------------------------------------ the turn loop
    def _turns(self, engine: RolloutEngine, ro: Rollout, state: EngineState, states: list[EnvState],
               start: np.ndarray, key, scfg):
        """Executes the last generated turn of every live row, appends the observations and resumes
        the rows still running (``engine`` carrying its ``state``), until every episode is done.
        ``start [R]``: where each row's last turn began. Returns (rollout, states)."""
        R = len(states)
        live = np.array([not s.done for s in states])
        t = 0
        while True:
            toks, lens = np.asarray(ro.tokens), np.asarray(ro.lengths)  # all rows (on every process)
            obs = np.full((R, self.O), PAD, np.int32)
            olen = np.zeros((R,), np.int32)
            t0 = time.perf_counter()
            for r in np.flatnonzero(live):
                self.costs["tokens_generated"] += int(lens[r] - start[r])
                states[r], o = self.environment.execute(states[r], toks[r, start[r]:lens[r]], self.env)
                obs[r, : len(o)] = o
                olen[r] = len(o)
            self.costs["env_steps"] += int(live.sum())
            self.costs["time_env_s"] += time.perf_counter() - t0
            if not olen.any():
                return ro, states
            start, live = lens + olen, olen > 0
            t1 = time.perf_counter()
            ro, state = engine.append_and_resume(ro, obs, olen, key=jax.random.fold_in(key, t), scfg=scfg,
                                                 state=state, keep_state=True)
            self.costs["time_sample_s"] += time.perf_counter() - t1
            self.costs["calls"] += 1
            t += 1

    def _episodes(self, params, ro: Rollout, states: list[EnvState], problems: Problems, group_size: int,
                  replayed: np.ndarray, scfg: SamplerConfig) -> Episodes:
        """The final rollout [R, L'] -> ``Episodes`` [R, L] with the environment's rewards and turn
        counts; another engine's episodes get the trainer's log-probs (module docstring)."""
        L = self.width
        if int(np.max(np.asarray(ro.lengths))) > L:
            raise ValueError(f"internal: an episode is longer than the width {L}")
        rewards = np.array([self.environment.verify(problems, r // group_size, s, reward=self.env.reward)
                            for r, s in enumerate(states)], np.float32)
        turns = np.array([s.turns for s in states], np.int32)
        ep = Episodes(tokens=_fit(ro.tokens, L, PAD), positions=_fit(ro.positions, L, 0),
                      valid=_fit(ro.valid, L, False), policy_mask=_fit(ro.policy_mask, L, False),
                      logprobs=_fit(ro.logprobs, L, 0.0), rewards=jnp.asarray(rewards),
                      units=jnp.asarray(turns), replayed=jnp.asarray(replayed, jnp.int32),
                      env_steps=jnp.asarray(turns), sampling_logprobs=_fit(ro.sampling_logprobs, L, 0.0),
                      truncated=jnp.asarray(ro.truncated, bool))
        if self.engine.name == "jax":  # its log-probs are the policy's own
            return ep
        own = self.trainer_logprobs(params, ep.tokens, ep.positions, ep.valid, ep.policy_mask, ep.sampling_logprobs,
                                    greedy=scfg.temperature == 0)
        return ep._replace(logprobs=own)

    # ------------------------------------------------------------------ fresh episodes
    def rollout(self, params, problems: Problems, key, *, group_size: int, evaluation: bool = False,
                return_states: bool = False):
        """``group_size`` episodes per problem (rows problem-major) -> ``Episodes`` [R, L]."""
        scfg = self.eval_scfg if evaluation else self.scfg
        prompt, plen = self.environment.prompts(problems)
        rows, rlen = np.repeat(prompt, group_size, axis=0), np.repeat(plen, group_size)
        R = rows.shape[0]
        states = self._initial_states(problems, R, group_size, key)
        k0, k1 = jax.random.split(key)
        with self.engine_for(params) as engine:
            t1 = time.perf_counter()
            ro, st = engine.generate(rows, rlen, key=k0, scfg=scfg, keep_state=True)
            self.costs["time_sample_s"] += time.perf_counter() - t1
            self.costs["calls"] += 1
            ro, states = self._turns(engine, ro, st, states, rlen.astype(np.int64), k1, scfg)
        ep = self._episodes(params, ro, states, problems, group_size, np.zeros((R,), np.int32), scfg)
        return (ep, states) if return_states else ep

    def _initial_states(self, problems: Problems, rows: int, group_size: int, key) -> list:
        """The ``rows`` initial states (row ``r`` on problem ``r // group_size``): ``reset``, or in a
        stochastic environment ``seeded_reset`` with each row's seed (``row_seeds``)."""
        if not self.environment.stochastic:
            return [self.environment.reset(problems, r // group_size) for r in range(rows)]
        seeds = row_seeds(key, rows)
        return [self.environment.seeded_reset(problems, r // group_size, self.env, seed=int(seeds[r]))
                for r in range(rows)]

    # ------------------------------------------------------------------ replay-through-execution
    def rebuild(self, problems: Problems, source: Episodes, cut: np.ndarray, *, group_size: int, seeds=None):
        """The prefix of each source row [G] cut after ``cut[g]`` policy turns, rebuilt for its
        ``group_size`` re-rollouts by executing its actions -> dict with ``actions`` (per row, the
        replayed action id lists), ``states`` [R] (environment at the cut), ``context`` [R] (id
        lists: prompt a_1 o_1 … a_c o_c). No model work. A stochastic environment (``AgentEnv.restore``)
        keeps the source's recorded observations and draws each row's future from ``seeds [R]``."""
        src = np.asarray(source.tokens)
        pm = np.asarray(source.policy_mask)
        cut = np.asarray(cut).astype(np.int64)
        G = cut.shape[0]
        if src.shape[0] != G or cut.ndim != 1:
            raise ValueError(f"reroll: source has {src.shape[0]} rows, cut has shape {cut.shape}; need [G] and G rows")
        prompt, plen = self.environment.prompts(problems)
        actions = []
        for g in range(G):
            spans = action_spans(pm[g])
            if not 1 <= cut[g] < len(spans) + 1:
                raise ValueError(f"reroll: cut[{g}]={cut[g]} must be in [1, {len(spans)}] (the source's policy turns)")
            actions.append([src[g, a:b].tolist() for a, b in spans[: cut[g]]])
        stochastic = self.environment.stochastic
        if stochastic:
            recorded = [recorded_observations(src[g], pm[g], np.asarray(source.valid)[g])[: cut[g]] for g in range(G)]
            if seeds is None or len(seeds) != G * group_size:
                raise ValueError(f"rebuild: a stochastic environment needs seeds [{G * group_size}] (row_seeds)")
        rows = {"actions": [], "states": [], "context": [], "obs": []}
        t0 = time.perf_counter()
        for r in range(G * group_size):
            g = r // group_size
            if stochastic:  # the recorded outcomes, not new draws (AgentEnv.restore)
                state = self.environment.restore(problems, g, actions[g], recorded[g], self.env, seed=int(seeds[r]))
                obs_all = list(recorded[g])
            else:
                state, obs_all = self.environment.reset(problems, g), []
                for a in actions[g]:
                    state, o = self.environment.execute(state, a, self.env)
                    obs_all.append(o)
            ctx = prompt[g, : plen[g]].tolist()
            for a, o in zip(actions[g], obs_all):
                ctx += a + o
            if state.done:
                raise ValueError(f"reroll: the source of group {g} ended within its first {cut[g]} turns")
            rows["actions"].append(actions[g])
            rows["states"].append(state)
            rows["context"].append(ctx)
            rows["obs"].append(obs_all)
        self.costs["env_steps_replayed"] += int(sum(len(a) for a in rows["actions"]))
        self.costs["time_env_s"] += time.perf_counter() - t0
        return rows

    def reroll(self, params, problems: Problems, source: Episodes, cut: np.ndarray, key, *, group_size: int,
               return_states: bool = False, return_prefix: bool = False):
        """``group_size`` continuations of each source row [G] after its first ``cut[g]`` turns."""
        t0 = time.perf_counter()
        seeds = row_seeds(key, len(np.asarray(cut)) * group_size) if self.environment.stochastic else None
        rb = self.rebuild(problems, source, cut, group_size=group_size, seeds=seeds)
        R = len(rb["states"])
        ctx_len = np.array([len(c) for c in rb["context"]], np.int32)            # [R] prompt + prefix
        last = [o[-1] for o in rb["obs"]]
        olen = np.array([len(o) for o in last], np.int32)                        # [R] held-back last obs
        head_len = ctx_len - olen                                                # context minus last obs
        W = next(b for b in self.head_buckets if b >= head_len.max())            # few shapes, little padding
        head = np.full((R, W), PAD, np.int32)
        obs = np.full((R, self.O), PAD, np.int32)
        for r in range(R):
            head[r, : head_len[r]] = rb["context"][r][: head_len[r]]
            obs[r, : olen[r]] = last[r]
        replayed = np.array([sum(len(a) for a in acts) for acts in rb["actions"]], np.int32)
        self.costs["tokens_replayed"] += int(replayed.sum())
        self.costs["env_steps"] += int(sum(len(a) for a in rb["actions"]))
        with self.engine_for(params) as engine:
            st = None  # replay: the engine reads the rebuilt context (one parallel prefill)
            if self.mode == "regenerate":  # the jax engine's cache, built by forced decoding
                st = self._regenerate(params, problems, rb, W, group_size)
            self.costs["time_rebuild_s"] += time.perf_counter() - t0
            ro0 = _context_rollout(head, head_len)
            states = list(rb["states"])
            t1 = time.perf_counter()
            ro, st = engine.append_and_resume(ro0, obs, olen, key=key, scfg=self.scfg, state=st, keep_state=True)
            self.costs["time_sample_s"] += time.perf_counter() - t1
            self.costs["calls"] += 1
            ro, states = self._turns(engine, ro, st, states, (ctx_len).astype(np.int64),
                                     jax.random.fold_in(key, 1_000), self.scfg)
        ep = self._episodes(params, ro, states, problems, group_size, replayed, self.scfg)
        out = (ep,)
        if return_states:
            out += (states,)
        if return_prefix:
            out += ({"head": head, "head_len": head_len, "obs": obs, "obs_len": olen,
                     "states": list(rb["states"])},)
        return out[0] if len(out) == 1 else out

    def _regenerate(self, params, problems: Problems, rb: dict, W: int, group_size: int):
        """The ``regenerate`` path: prompt prefill, then turn by turn: force-decode the action one
        token per step, execute it, append its observation (all but the last, which the caller
        appends when it resumes). Returns the cache [*, R, W, *] of the context minus the last obs:
        the jax engine's state for its ``append_and_resume``."""
        cfg = self.model_cfg
        R = len(rb["states"])
        prompt, plen = self.environment.prompts(problems)
        rows, rlen = np.repeat(prompt, group_size, axis=0), np.repeat(plen, group_size)
        cache = _prefill_cache(params, jnp.asarray(rows), jnp.asarray(rlen), cfg=cfg, max_len=W)
        pos = rlen.astype(np.int32).copy()                                       # [R] next slot
        n_turns = max(len(a) for a in rb["actions"])
        states = [self.environment.reset(problems, r // group_size) for r in range(R)]
        for j in range(n_turns):
            act = np.full((R, self.A), PAD, np.int32)
            alen = np.zeros((R,), np.int32)
            obs = np.full((R, self.O), PAD, np.int32)
            ol = np.zeros((R,), np.int32)
            for r in range(R):
                if j < len(rb["actions"][r]):
                    a = rb["actions"][r][j]
                    act[r, : len(a)] = a
                    alen[r] = len(a)
            cache, _ = _force_decode(params, cache, jnp.asarray(act), jnp.asarray(pos), jnp.asarray(alen), cfg=cfg)
            jax.block_until_ready(cache)
            t0 = time.perf_counter()
            for r in np.flatnonzero(alen):  # the environment steps, interleaved with the model
                states[r], o = self.environment.execute(states[r], act[r, : alen[r]], self.env)
                if j < len(rb["actions"][r]) - 1:
                    obs[r, : len(o)] = o
                    ol[r] = len(o)
            self.costs["time_env_s"] += time.perf_counter() - t0
            self.costs["tokens_forced"] += int(alen.sum())
            pos = pos + alen
            cache = _extend_block(params, cache, jnp.asarray(obs), jnp.asarray(pos), jnp.asarray(ol), cfg=cfg)
            pos = pos + ol
        if states != rb["states"]:
            raise ValueError("internal: regenerated states differ from the replayed ones")
        return jax.block_until_ready(cache)


def _context_rollout(head: np.ndarray, head_len: np.ndarray) -> Rollout:
    """A ``Rollout`` holding rebuilt contexts ``head [R, W]`` (nothing generated: policy mask 0)."""
    R, W = head.shape
    valid = np.arange(W)[None, :] < head_len[:, None]
    zeros = jnp.zeros((R, W), jnp.float32)
    return Rollout(tokens=jnp.asarray(head), policy_mask=jnp.zeros((R, W), bool), logprobs=zeros,
                   sampling_logprobs=zeros, valid=jnp.asarray(valid),
                   positions=jnp.asarray(np.maximum(np.cumsum(valid, axis=1) - 1, 0).astype(np.int32)),
                   prompt_lengths=jnp.asarray(head_len), lengths=jnp.asarray(head_len),
                   finished=jnp.ones((R,), bool), truncated=jnp.zeros((R,), bool),
                   stop_token=jnp.full((R,), EOT, jnp.int32))
