"""Which tasks get rollouts: the pass-rate controls of the field beside Prefix Sampling
(``RLConfig.schedule.select``), a second axis orthogonal to ``schedule.kind`` (which decides *when*
Prefix Sampling re-rolls).

``uniform`` (default) is the trainer as it always was: the schedule draws its own B tasks and no
selector state exists. Every other selector draws its tasks from the finite pool of
``schedule.pool_size`` problems (``task.train_problems(seed=pool_seed, step=POOL_STEP)``, the pool of
``next_visit``) through one endless candidate stream (epoch e visits the pool in the order
``default_rng([seed, e, 0x9E57]).permutation(M)``, the order of ``schedule.pool_ids``; the cursor
``SelectState.pos`` is part of the train state), and hands the chosen ids to the schedule strategy
(``SameStep`` / ``NextVisit``), which samples them exactly as it samples its own tasks (Prefix
Sampling included): every selector composes with every ``schedule.kind`` and ``method``.

* ``dynamic_sampling`` (DAPO, arXiv 2503.14476; verl ``recipe/dapo/dapo_ray_trainer.py`` with
  ``algorithm.filter_groups.{enable, metric: acc, max_num_gen_batches}`` and ``data.gen_batch_size``):
  generation batch j = the next ``ds_gen_batch_size`` candidates, sampled (with PS when on); a group
  is kept iff its rewards' std > 0 (verl: ``np.std(metric) > 0``); batches are generated until the
  kept groups number at least B, then the first B kept groups, in generation order, train (verl's
  ``batch[:train_batch_size * n]``). Stop rule, verl's: after batch j with fewer than B kept groups,
  go on iff ``max_num_gen_batches <= 0`` or ``j < max_num_gen_batches``, else stop with an error
  (verl raises ``ValueError``; prs raises ``SelectionError``, one line). verl's ``<= 0`` ("no upper
  limit") would loop forever on a pool of only 0/N and N/N tasks; prs also stops when a whole pool's
  worth of consecutive candidates (M) brought no kept group.
* ``selective`` (GRESO, arXiv 2506.02177; github Infini-AI-Lab/GRESO,
  ``verl/trainer/ttis/presampling_selector.py`` ``easy_probabilistic_skip`` /
  ``hard_probabilistic_skip``): a candidate whose last z_e visits were all-correct (N/N) is skipped
  before rollout with probability ``1 − max(p_easy^{z_e}, floor)``; else one whose last z_h visits
  were all-wrong (0/N) with ``1 − max(p_hard^{z_h}, floor)`` (``floor`` = 0.01, the exploration
  probability that keeps every task alive); the batch is refilled with the next candidates until B
  tasks are kept. After each step past the first epoch, p_easy and p_hard move by ``greso_step``
  (0.01) toward the target zero-variance shares target/3 (easy) and 2·target/3 (hard) (``target`` =
  0.25), clipped to [0.05, 0.95] (GRESO's ``ray_trainer.py``: a share at or above its target lowers
  p, i.e. skips more). Defaults: p_easy = p_hard = 0.5 (GRESO's training scripts).
* ``screen`` (SPEED-RL, arXiv 2506.09016): candidates (``screen_batch`` per round) get ``n_init``
  rollouts each; a candidate is accepted iff 0 < k < n_init (strictly intermediate screening pass
  rate); the first B accepted are completed with N − n_init more rollouts, the screening rollouts
  count toward the N. Rounds go on until B are accepted or ``screen_max_rounds`` is reached
  (``SelectionError``). Surplus accepted candidates of the last round are dropped (SPEED keeps them
  in a buffer for the next step: prs does not, so a step's rollouts depend only on its state).
  ``schedule.kind=same_step`` only.
* ``predicted`` (new): task t keeps a discounted Beta posterior of its pass rate, α_t, β_t (prior
  Beta(1, 1)); every step all posteriors forget, x ← 1 + γ(x − 1), then a visited task adds its
  measured k and N − k. The step trains the B tasks of largest P(0 < k < N) = 1 − E[p^N] −
  E[(1−p)^N] under Beta(α, β), i.e. the expected share of informative groups (all groups cost N
  rollouts: per generated token alike, the token cost of a task is not modelled), ties broken by a
  seeded random order.
* ``oracle`` (the study's positive control, issue 48): a selector that knows each candidate's current
  pass rate. Each step takes the next C = ``oracle_candidates`` candidates of the stream (default 4B,
  the oracle pool of ``theory.controls.predicted``; C >= B), samples R = ``oracle_rollouts`` (default
  16) estimation rollouts of each under the step's params (keys: the step's sample key folded with
  ``ORACLE_KEY``, distinct from every key the step's training rollouts use), estimates p̂ = k/R and
  trains the B candidates of largest P(0 < k < N) = 1 − p̂^N − (1 − p̂)^N under Binomial(N, p̂)
  (``oracle_score``; seeded tie-break as ``predicted``). Its estimation cost is LEFT OUT of the
  ledger (``tokens_generated``, ``rollouts_sampled``, ``time_select`` are what the B trained groups
  cost, as for ``uniform``) and logged apart as ``oracle/rollouts`` (C·R), ``oracle/tokens`` and
  ``time_oracle``: it bounds what task selection can buy, it is not a control one would run. A task
  met twice in one window (the stream crosses an epoch boundary, or C > M) is scored twice and may
  train twice, as ``dynamic_sampling``'s generation batches may.

Every selector updates the same per-task statistics from each measured group (``observe``: visits,
the zero-variance streaks, the posterior), so their state is one fixed-shape ``SelectState`` in
``TrainState`` (checkpointed: a resumed run continues exactly). Selector randomness comes from
``numpy.random.default_rng([seed, step, 0x5E1EC7])``, the rollouts' keys from the step keys
(generation batch / round j > 0: each key folded with j).

The ledger (every selector, ``uniform`` included; summed in ``summary.json``): ``tokens_generated``
(all sampled policy tokens: screening rollouts, discarded generation batches, re-rolls),
``tokens_trained`` (tokens with loss weight), ``groups_contrast`` (trained groups with reward
contrast), ``rollouts_sampled``, ``rollouts_skipped`` (rollouts a selector chose not to generate:
GRESO's skipped tasks × N, SPEED's rejected candidates × (N − n_init)), ``gen_batches`` and
``time_select`` / ``time_sample`` / ``time_batch`` / ``time_update``.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from prs.rl.episodes import Episodes

SELECTORS = ("uniform", "dynamic_sampling", "selective", "screen", "predicted", "oracle")
# each selector's options (ScheduleConfig fields; None = the default below); given with another selector: refused
OPTIONS = {
    "dynamic_sampling": ("ds_gen_batch_size", "ds_max_gen_batches"),
    "selective": ("greso_p_easy", "greso_p_hard", "greso_floor", "greso_target", "greso_step"),
    "screen": ("screen_n_init", "screen_batch", "screen_max_rounds"),
    "predicted": ("pred_discount",),
    "oracle": ("oracle_candidates", "oracle_rollouts"),
}
# defaults (None: tasks_per_step); sources in the module docstring
DEFAULTS = {"ds_gen_batch_size": None, "ds_max_gen_batches": 10, "greso_p_easy": 0.5, "greso_p_hard": 0.5,
            "greso_floor": 0.01, "greso_target": 0.25, "greso_step": 0.01, "screen_n_init": 4, "screen_batch": None,
            "screen_max_rounds": 10, "pred_discount": 0.95, "oracle_candidates": None, "oracle_rollouts": 16}
GRESO_P_RANGE = (0.05, 0.95)  # GRESO's min_p / max_p
ORACLE_KEY = 0x0AC1E  # folded into the step's sample key: the oracle's estimation rollouts


class SelectionError(RuntimeError):
    """A selector could not fill the batch (a cap reached, a pool without reward contrast)."""


def option(sc, name: str):
    """The value of selector option ``name`` of ``ScheduleConfig`` ``sc`` (its default when None)."""
    v = getattr(sc, name)
    return DEFAULTS[name] if v is None else v


def check_config(sc) -> None:
    """``ScheduleConfig``'s selector fields: ``select`` in SELECTORS, no option of another selector
    given, values in range; one ``ValueError`` line naming the key and what is allowed."""
    if sc.select not in SELECTORS:
        raise ValueError(f"ScheduleConfig.select={sc.select!r} (schedule.select); choose from {SELECTORS}")
    mine = OPTIONS.get(sc.select, ())
    for sel, names in OPTIONS.items():
        for name in names:
            if getattr(sc, name) is not None and name not in mine:
                raise ValueError(f"ScheduleConfig.{name}={getattr(sc, name)!r} (schedule.{name}) is an option of "
                                 f"schedule.select={sel}, not of select={sc.select!r}: remove it")
    ints = {"ds_gen_batch_size": 1, "ds_max_gen_batches": 0, "screen_n_init": 2, "screen_batch": 1,
            "screen_max_rounds": 1, "oracle_candidates": 1, "oracle_rollouts": 1}
    for name, lo in ints.items():
        v = getattr(sc, name)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= lo):
            raise ValueError(f"ScheduleConfig.{name}={v!r} (schedule.{name}) must be an int >= {lo}")
    unit = {"greso_p_easy": (0.0, 1.0), "greso_p_hard": (0.0, 1.0), "greso_floor": (0.0, 1.0),
            "greso_target": (0.0, 1.0), "greso_step": (0.0, 1.0), "pred_discount": (0.0, 1.0)}
    for name, (lo, hi) in unit.items():
        v = getattr(sc, name)
        if v is not None and not (isinstance(v, (int, float)) and lo <= v <= hi
                                  and (name != "pred_discount" or v > 0)):
            what = "in (0, 1]" if name == "pred_discount" else "in [0, 1]"
            raise ValueError(f"ScheduleConfig.{name}={v!r} (schedule.{name}) must lie {what}")
    if sc.select == "screen" and sc.kind != "same_step":
        raise ValueError(f"ScheduleConfig.select='screen' with kind={sc.kind!r} (schedule.kind): the screening "
                         "rollouts become the group's first rollouts, which next_visit replaces by prefixes; "
                         "allowed: kind='same_step'")


def check_rl(rl) -> None:
    """The pairs that span ``RLConfig``: the pool holds at least one batch; SPEED's n_init <= N; the oracle's C >= B."""
    sc = rl.schedule
    if sc.select == "uniform":
        return
    if sc.pool_size < rl.tasks_per_step:
        raise ValueError(f"ScheduleConfig.pool_size={sc.pool_size} (schedule.pool_size) is smaller than the batch "
                         f"tasks_per_step={rl.tasks_per_step}: select={sc.select!r} draws the step's tasks from the "
                         "pool; allowed: pool_size >= tasks_per_step")
    if sc.select == "oracle" and sc.oracle_candidates is not None and sc.oracle_candidates < rl.tasks_per_step:
        raise ValueError(f"ScheduleConfig.oracle_candidates={sc.oracle_candidates} (schedule.oracle_candidates) is "
                         f"smaller than the batch tasks_per_step={rl.tasks_per_step}: the oracle trains the best B of "
                         f"its C candidates; allowed: oracle_candidates >= {rl.tasks_per_step} (null: 4 x B)")
    if sc.select == "screen" and option(sc, "screen_n_init") > rl.group_size:
        raise ValueError(f"ScheduleConfig.screen_n_init={option(sc, 'screen_n_init')} (schedule.screen_n_init) "
                         f"exceeds group_size={rl.group_size}: the screening rollouts count toward the N; allowed: "
                         f"2 <= screen_n_init <= {rl.group_size}")


# ---------------------------------------------------------------------- state and pure pieces


class SelectState(NamedTuple):
    """A selector's state over the M pool tasks (part of ``TrainState``; fixed shapes)."""

    pos: jax.Array          # [] int32 cursor of the candidate stream
    visits: jax.Array       # [M] int32 measured groups per task
    streak_easy: jax.Array  # [M] int32 consecutive most recent visits that were N/N
    streak_hard: jax.Array  # [M] int32 consecutive most recent visits that were 0/N
    alpha: jax.Array        # [M] f32 discounted Beta posterior of the pass rate (prior 1)
    beta: jax.Array         # [M] f32
    p_easy: jax.Array       # [] f32 GRESO's adaptive bases
    p_hard: jax.Array       # [] f32


def init_state(pool_size: int, sc) -> SelectState:
    m = int(pool_size)
    return SelectState(pos=jnp.zeros((), jnp.int32), visits=jnp.zeros((m,), jnp.int32),
                       streak_easy=jnp.zeros((m,), jnp.int32), streak_hard=jnp.zeros((m,), jnp.int32),
                       alpha=jnp.ones((m,), jnp.float32), beta=jnp.ones((m,), jnp.float32),
                       p_easy=jnp.asarray(option(sc, "greso_p_easy"), jnp.float32),
                       p_hard=jnp.asarray(option(sc, "greso_p_hard"), jnp.float32))


def stream_ids(seed: int, pos: int, count: int, pool_size: int) -> np.ndarray:
    """[count] pool ids at positions pos … pos + count − 1 of the endless candidate stream (epoch e:
    ``default_rng([seed, e, 0x9E57]).permutation(M)``, as ``schedule.pool_ids``), across epochs."""
    p = np.arange(pos, pos + count, dtype=np.int64)
    out = np.empty((count,), np.int64)
    for e in np.unique(p // pool_size):
        at = p // pool_size == e
        out[at] = np.random.default_rng([int(seed), int(e), 0x9E57]).permutation(pool_size)[p[at] % pool_size]
    return out


def mixed(rewards) -> np.ndarray:
    """[G, N] -> [G] bool: the accuracy (reward >= 1) has std > 0 (verl DAPO's ``metric: acc``,
    ``np.std(metric_vals) > 0``)."""
    acc = np.asarray(rewards, np.float64) >= 1.0
    return np.std(acc, axis=1) > 0


def greso_skip_probability(streak_easy, streak_hard, *, p_easy, p_hard, floor):
    """[C] probability that GRESO skips each candidate (``presampling_selector.py``):
    1 − max(p_easy^{z_e}, floor) if z_e > 0, else 1 − max(p_hard^{z_h}, floor) if z_h > 0, else 0.
    (GRESO draws the easy test first and the hard one only when the easy one keeps the task; a
    task has at most one non-zero streak, so this is the same law.)"""
    ze, zh = np.asarray(streak_easy), np.asarray(streak_hard)
    pe = 1.0 - np.maximum(np.power(float(p_easy), ze), floor)
    ph = 1.0 - np.maximum(np.power(float(p_hard), zh), floor)
    return np.where(ze > 0, pe, np.where(zh > 0, ph, 0.0))


def greso_adapt(p, share, *, target, step):
    """GRESO's update of a base p: lower by ``step`` (skip more) when the observed zero-variance
    ``share`` is at or above ``target``, else raise; clipped to [0.05, 0.95]."""
    lo, hi = GRESO_P_RANGE
    return float(np.clip(p - step if share >= target else p + step, lo, hi))


def informative_probability(alpha, beta, n: int) -> np.ndarray:
    """[M] P(0 < k < N) under p ~ Beta(α, β), k ~ Binomial(N, p): 1 − E[p^N] − E[(1−p)^N] with
    E[p^N] = Π_{i<N} (α + i)/(α + β + i)."""
    a, b = np.asarray(alpha, np.float64)[:, None], np.asarray(beta, np.float64)[:, None]
    i = np.arange(n, dtype=np.float64)[None, :]
    return 1.0 - np.prod((a + i) / (a + b + i), axis=1) - np.prod((b + i) / (a + b + i), axis=1)


def top_scores(score, count: int, rng: np.random.Generator) -> np.ndarray:
    """[count] sorted indices of the ``count`` largest of ``score [M]`` (rounded to 12 decimals), ties
    broken by a seeded random order (one ``rng.permutation(M)`` draw): ``predicted``'s and ``oracle``'s choice."""
    tie = rng.permutation(np.size(score))
    return np.sort(np.lexsort((tie, -np.round(score, 12)))[:count])


def oracle_score(k, r: int, n: int) -> np.ndarray:
    """[C] P(0 < k' < N) for k' ~ Binomial(N, p̂), p̂ = k / R (the oracle's estimate from R rollouts):
    1 − p̂^N − (1 − p̂)^N. Symmetric in p̂ ↔ 1 − p̂ and increasing toward p̂ = ½, so it ranks as p̂(1 − p̂)
    does (``theory.controls.predicted``'s oracle); 0 at p̂ ∈ {0, 1}, never NaN."""
    p = np.asarray(k, np.float64) / float(r)
    return 1.0 - p ** n - (1.0 - p) ** n


def observe(st: dict, ids, k, n: int, *, valid=None) -> None:
    """Updates the host copy ``st`` (SelectState fields as numpy) with the measured groups of pool
    tasks ``ids [G]`` (k successes of n each; ``valid [G]``: groups that measure the task's pass
    rate, e.g. not prefixed). Repeated ids: applied in order."""
    ids, k = np.asarray(ids), np.asarray(k)
    valid = np.ones(ids.shape, bool) if valid is None else np.asarray(valid, bool)
    for t, kk, ok in zip(ids, k, valid):  # host loop over the step's groups (numpy, no jit)
        if not ok:
            continue
        st["visits"][t] += 1
        st["streak_easy"][t] = st["streak_easy"][t] + 1 if kk == n else 0
        st["streak_hard"][t] = st["streak_hard"][t] + 1 if kk == 0 else 0
        st["alpha"][t] += kk
        st["beta"][t] += n - kk


def _host(state: SelectState) -> dict:
    return {k: np.array(v) for k, v in zip(SelectState._fields, jax.device_get(state))}


def _device(st: dict) -> SelectState:
    return SelectState(**{k: jnp.asarray(st[k], dtype=jnp.asarray(v).dtype) for k, v in st.items()})


def _fold_keys(keys, j: int):
    return keys if j == 0 else type(keys)(*(jax.random.fold_in(k, j) for k in keys))


def _cat(eps: list[Episodes]) -> Episodes:
    return eps[0] if len(eps) == 1 else Episodes(*(jnp.concatenate(v) for v in zip(*eps)))


def _rows(groups: np.ndarray, n: int) -> np.ndarray:
    return (np.asarray(groups)[:, None] * n + np.arange(n)[None, :]).reshape(-1)


ADDITIVE = ("rollouts_sampled", "rollouts_wasted", "tokens_sampled", "tokens_generated", "tokens_replayed", "env_steps",
            "time_sample", "time_replay", "groups_mixed", "groups_planned", "groups_steered", "groups_rerolled",
            "groups_replaced", "groups_extra")


# ---------------------------------------------------------------------- the selector strategy


class Selector:
    """Chooses the step's tasks from the pool and drives the schedule strategy over them
    (``sample`` returns the schedule's ``Sampled`` with ``select`` = the new ``SelectState``)."""

    def __init__(self, task, rl, schedule, *, seed: int):
        self.task, self.rl, self.schedule, self.seed = task, rl, schedule, int(seed)
        self.kind = rl.schedule.select

    @property
    def pool(self):
        return self.schedule.pool

    def init_state(self) -> SelectState:
        return init_state(self.rl.schedule.pool_size, self.rl.schedule)

    def sample(self, state, params, keys, rollouts):
        t0 = time.perf_counter()
        st = _host(state.select)
        step = int(state.step)
        rng = np.random.default_rng([self.seed, step, 0x5E1EC7])
        fn = {"dynamic_sampling": self._dynamic_sampling, "selective": self._selective, "screen": self._screen,
              "predicted": self._predicted, "oracle": self._oracle}[self.kind]
        s, extra = fn(st, state, params, keys, rollouts, rng)
        s.metrics.update(extra)
        s.metrics.setdefault("rollouts_skipped", 0)
        s.metrics.setdefault("gen_batches", 1)
        s.metrics["time_select"] = time.perf_counter() - t0 - s.metrics.get("time_sample", 0.0) \
            - s.metrics.get("time_replay", 0.0) - s.metrics.get("time_oracle", 0.0)  # the oracle's cost: apart
        s.metrics["select/pos"] = int(st["pos"])
        s.select = _device(st)
        return s

    # -------------------------------------------------------------- helpers
    def _forget(self, st: dict) -> None:
        """``predicted``'s discount of every posterior toward the prior (once per step)."""
        if self.kind == "predicted":
            g = float(option(self.rl.schedule, "pred_discount"))
            st["alpha"] = (1.0 + g * (st["alpha"] - 1.0)).astype(np.float32)
            st["beta"] = (1.0 + g * (st["beta"] - 1.0)).astype(np.float32)

    def _observe(self, st: dict, ids, s) -> None:
        valid = ~np.asarray(s.steered) if self.rl.schedule.kind == "next_visit" else None
        observe(st, ids, s.k, self.rl.group_size, valid=valid)

    def _take(self, st: dict, count: int) -> np.ndarray:
        ids = stream_ids(self.seed, int(st["pos"]), count, self.rl.schedule.pool_size)
        st["pos"] = np.asarray(int(st["pos"]) + count, np.int32)
        return ids

    def _run(self, state, params, keys, rollouts, ids, **kw):
        return self.schedule.sample(state, params, keys, rollouts, ids=np.asarray(ids, np.int64), **kw)

    # -------------------------------------------------------------- dynamic sampling (DAPO / verl)
    def _dynamic_sampling(self, st, state, params, keys, rollouts, rng):
        rl, sc = self.rl, self.rl.schedule
        b, n, m = rl.tasks_per_step, rl.group_size, sc.pool_size
        gbs = option(sc, "ds_gen_batch_size") or b
        cap = option(sc, "ds_max_gen_batches")
        parts, kept_eps, kept_r, kept_total, since_kept = [], [], [], 0, 0
        cur = state
        j = 0
        while True:
            ids = self._take(st, gbs)
            s = self._run(cur, params, _fold_keys(keys, j), rollouts, ids)
            j += 1
            cur = cur._replace(prefix=s.prefix, memory=s.memory)
            self._observe(st, ids, s)
            parts.append(s)
            tr = np.asarray(s.train_rewards)                                      # [G, N]
            keep = np.nonzero(mixed(tr))[0]                                       # verl: std > 0
            if keep.size:
                kept_eps.append(Episodes(*(v[_rows(keep, n)] for v in s.train)))
                kept_r.append(tr[keep])
            kept_total += keep.size
            since_kept = 0 if keep.size else since_kept + gbs
            if kept_total >= b:
                break
            if cap > 0 and j >= cap:  # verl: num_gen_batches >= max_num_gen_batches -> ValueError
                raise SelectionError(
                    f"step {int(state.step)}: dynamic_sampling kept {kept_total} of {b} groups with reward contrast "
                    f"after {j} generation batches of {gbs} (schedule.ds_max_gen_batches={cap}; verl raises here too): "
                    "the pool is mostly 0/N or N/N for this policy; raise the cap, or use another schedule.select")
            if cap <= 0 and since_kept >= m:
                raise SelectionError(
                    f"step {int(state.step)}: dynamic_sampling with schedule.ds_max_gen_batches={cap} (no cap): the "
                    f"last {since_kept} candidates (>= pool_size={m}) gave no group with reward contrast, so the pool "
                    "is all 0/N or N/N for this policy and refilling would never end; stopping")
        train = Episodes(*(v[: b * n] for v in _cat(kept_eps)))                    # verl: batch[:B * n]
        train_rewards = np.concatenate(kept_r)[:b]                                 # [B, N]
        s = _merge(parts, train, train_rewards, n)
        return s, {"gen_batches": j, "groups_generated": int(sum(np.asarray(p.train_rewards).shape[0] for p in parts)),
                   "pass_rate_train": float(np.mean(train_rewards >= 1.0))}

    # -------------------------------------------------------------- selective rollouts (GRESO)
    def _selective(self, st, state, params, keys, rollouts, rng):
        rl, sc = self.rl, self.rl.schedule
        b, n, m = rl.tasks_per_step, rl.group_size, sc.pool_size
        floor = option(sc, "greso_floor")
        chosen, skipped_easy, skipped_hard, seen = [], 0, 0, 0
        while len(chosen) < b:
            if seen >= 100 * m:  # with floor > 0 unreachable in practice; floor = 0 may skip every task
                raise SelectionError(
                    f"step {int(state.step)}: selective skipped {seen} candidates (100 x pool_size) without filling "
                    f"the batch of {b} (schedule.greso_floor={floor}): every task's zero-variance streak skips it; "
                    "set greso_floor > 0 (GRESO: 0.01)")
            cand = self._take(st, b - len(chosen))
            seen += cand.size
            ps_ = greso_skip_probability(st["streak_easy"][cand], st["streak_hard"][cand], p_easy=st["p_easy"],
                                         p_hard=st["p_hard"], floor=floor)
            skip = rng.random(cand.size) < ps_
            skipped_easy += int(np.sum(skip & (st["streak_easy"][cand] > 0)))
            skipped_hard += int(np.sum(skip & (st["streak_easy"][cand] == 0)))
            chosen.extend(cand[~skip].tolist())
        ids = np.asarray(chosen[:b], np.int64)
        s = self._run(state, params, keys, rollouts, ids)
        self._observe(st, ids, s)
        k = np.asarray(s.k)
        target, step = option(sc, "greso_target"), option(sc, "greso_step")
        if int(st["pos"]) > m and step > 0:  # GRESO adapts from the second epoch on
            st["p_easy"] = np.asarray(greso_adapt(float(st["p_easy"]), float(np.mean(k == n)), target=target / 3,
                                                  step=step), np.float32)
            st["p_hard"] = np.asarray(greso_adapt(float(st["p_hard"]), float(np.mean(k == 0)), target=2 * target / 3,
                                                  step=step), np.float32)
        return s, {"rollouts_skipped": (skipped_easy + skipped_hard) * n, "select/skipped_easy": skipped_easy,
                   "select/skipped_hard": skipped_hard, "select/p_easy": float(st["p_easy"]),
                   "select/p_hard": float(st["p_hard"])}

    # -------------------------------------------------------------- online screening (SPEED-RL)
    def _screen(self, st, state, params, keys, rollouts, rng):
        rl, sc, task = self.rl, self.rl.schedule, self.task
        b, n = rl.tasks_per_step, rl.group_size
        n0, cb, cap = option(sc, "screen_n_init"), option(sc, "screen_batch") or b, option(sc, "screen_max_rounds")
        t0 = time.perf_counter()
        eps, acc_rows, acc_ids, rejected, screened, tok_all = [], [], [], 0, 0, 0
        r = 0
        while len(acc_ids) < b:
            if r >= cap:
                raise SelectionError(
                    f"step {int(state.step)}: screen accepted {len(acc_ids)} of {b} tasks (0 < k < n_init={n0}) in "
                    f"{r} rounds of {cb} candidates (schedule.screen_max_rounds={cap}): the pool is mostly 0/N or N/N "
                    "for this policy; raise the cap, or use another schedule.select")
            cand = self._take(st, cb)
            kr = jax.random.fold_in(keys.sample, 0x5C0 + r)
            ep = rollouts.rollout(params, task.take(self.pool, cand), kr, group_size=n0)   # [C*n0]
            k0 = (np.asarray(ep.rewards).reshape(cb, n0) >= 1.0).sum(1)                    # [C]
            ok = (k0 > 0) & (k0 < n0)                                                      # SPEED's acceptance
            base = sum(int(e.tokens.shape[0]) for e in eps)
            eps.append(ep)
            tok_all += int(np.asarray(ep.policy_mask).sum())
            screened += cb
            for c in np.nonzero(ok)[0]:
                if len(acc_ids) < b:
                    acc_ids.append(int(cand[c]))
                    acc_rows.append(base + c * n0 + np.arange(n0))
            rejected += int((~ok).sum())
            r += 1
        scr = _cat(eps)
        acc_rows = np.stack(acc_rows)                                                      # [B, n0]
        used = Episodes(*(v[acc_rows.reshape(-1)] for v in scr))                           # [B*n0]
        ids = np.asarray(acc_ids, np.int64)
        if n > n0:  # completion: N − n0 more rollouts per accepted task
            comp = rollouts.rollout(params, task.take(self.pool, ids), jax.random.fold_in(keys.sample, 0xC0), group_size=n - n0)
            order = np.concatenate([np.arange(b)[:, None] * n0 + np.arange(n0)[None, :],
                                    b * n0 + np.arange(b)[:, None] * (n - n0) + np.arange(n - n0)[None, :]], 1)
            fresh = Episodes(*(jnp.concatenate([u, c])[order.reshape(-1)] for u, c in zip(used, comp)))  # [B*N]
        else:
            fresh = used
        t_screen = time.perf_counter() - t0
        s = self._run(state, params, keys, rollouts, ids, fresh=fresh)
        self._observe(st, ids, s)
        used_tok = int(np.asarray(used.policy_mask).sum())
        s.metrics["tokens_generated"] += tok_all - used_tok        # screening rollouts of the candidates not used
        s.metrics["rollouts_sampled"] += (screened - b) * n0
        s.metrics["time_sample"] += t_screen
        return s, {"rollouts_skipped": rejected * (n - n0), "gen_batches": r, "select/screened": screened,
                   "select/accepted_share": float((screened - rejected) / screened), "select/tokens_screening": tok_all}

    # -------------------------------------------------------------- predicted pass rate (new)
    def _predicted(self, st, state, params, keys, rollouts, rng):
        rl = self.rl
        b, n = rl.tasks_per_step, rl.group_size
        self._forget(st)
        score = informative_probability(st["alpha"], st["beta"], n)                     # [M]
        ids = top_scores(score, b, rng).astype(np.int64)
        s = self._run(state, params, keys, rollouts, ids)
        self._observe(st, ids, s)
        return s, {"select/expected_informative": float(score[ids].sum()),
                   "select/unvisited": int(np.sum(st["visits"] == 0))}

    # -------------------------------------------------------------- oracle (positive control)
    def _oracle(self, st, state, params, keys, rollouts, rng):
        rl, sc = self.rl, self.rl.schedule
        b, n = rl.tasks_per_step, rl.group_size
        c, r = option(sc, "oracle_candidates") or 4 * b, option(sc, "oracle_rollouts")
        t0 = time.perf_counter()
        cand = self._take(st, c)                                                           # [C]
        ep = rollouts.rollout(params, self.task.take(self.pool, cand), jax.random.fold_in(keys.sample, ORACLE_KEY),
                              group_size=r)                                                # [C*R]
        k = (np.asarray(ep.rewards).reshape(c, r) >= 1.0).sum(1)                           # [C]
        tokens = int(np.asarray(ep.policy_mask).sum())
        t_oracle = time.perf_counter() - t0
        score = oracle_score(k, r, n)                                                      # [C]
        pick = top_scores(score, b, rng)                                                   # [B] candidate slots
        ids = np.sort(cand[pick]).astype(np.int64)
        s = self._run(state, params, keys, rollouts, ids)
        self._observe(st, ids, s)
        return s, {"oracle/rollouts": c * r, "oracle/tokens": tokens, "time_oracle": t_oracle,
                   "select/oracle_mean_score": float(score[pick].mean()),
                   "select/oracle_p_hat_mixed": float(np.mean((k[pick] > 0) & (k[pick] < r)))}


def _merge(parts: list, train: Episodes, train_rewards: np.ndarray, n: int):
    """One ``Sampled`` from a dynamic-sampling step's generation batches: ``train`` [B*N] and its
    rewards, the batches' measured groups concatenated, their additive metrics summed."""
    first = parts[0]
    cat = lambda name: np.concatenate([np.asarray(getattr(p, name)) for p in parts])  # noqa: E731
    metrics = dict(first.metrics)
    for key in ADDITIVE:
        if key in metrics:
            metrics[key] = sum(p.metrics.get(key, 0) for p in parts)
    for key in ("pass_rate", "reward_mean"):
        metrics[key] = float(np.mean([p.metrics[key] for p in parts]))
    return dataclasses.replace(first, train=train, train_rewards=train_rewards, k=cat("k"), k_bucket=cat("k_bucket"),
                               steered=cat("steered"), steer_bucket=cat("steer_bucket"), rate=cat("rate"),
                               prefix=parts[-1].prefix, memory=parts[-1].memory, metrics=metrics)
