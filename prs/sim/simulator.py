"""A many-seed simulator of GRPO-family training with Prefix Sampling on a synthetic learner.

The synthetic learner. A population of M tasks; task m is a chain of L steps; the policy
has one logit per task and step, theta [M, L], and step l of task m succeeds with probability
q_ml = sigmoid(theta_ml). A rollout executes the steps in order and stops at the first failed
decision; it succeeds (reward 1) iff every step succeeds:

    P_m(theta) = prod_l q_ml                                   (closed form, `success_prob`)

A step may be *replayed* (done already, no decision) or *handicapped* by a logit offset o_l <= 0
(o_l = 0 normally). With both, the success probability of a (re-)rollout is

    P = prod_{l not replayed} sigmoid(theta_l + o_l).

Prefix Sampling (see `prs.core.prefix`) re-rolls the skewed groups from a prefix of one of their own
rollouts, cut at c = round(rho_b * source_len) steps:

* success prefix (hard buckets): the first c steps of a successful rollout are replayed: they are
  done, are NOT policy decisions and get no gradient (prefix masking); the policy executes steps
  c..L-1, so P_hard(c) = prod_{l >= c} q_l  (> P).
* failure prefix (easy buckets): replaying the first c steps of a failed rollout leaves the agent in
  a recoverable bad state. Documented cost: its progress is lost (the chain restarts at step 0) and
  each of the c spoiled steps must be redone from the bad state, which is harder by a fixed logit
  handicap delta = `recovery_handicap`: step l < c succeeds with sigmoid(theta_l - delta), so
  P_easy(c) = prod_{l < c} sigmoid(theta_l - delta) prod_{l >= c} q_l  (< P). These are decisions of
  step l's own skill and get gradient (learning to recover trains the skill). A handicap in logits,
  rather than a number of extra decisions, keeps the cost felt when q_l is near 1 (a k = 7/8 group
  late in training): with kappa extra decisions the cost q_l ** kappa would vanish there and the
  easy buckets could never be steered to 0.5. The failed source's replayed steps carry no decision
  in this model, hence no gradient either.

Exact policy gradient. With o_l in {0, 1} the outcome of step l and m_l = (step l reached and not
replayed) the policy mask, q'_l = sigmoid(theta_l + o_l) the step's success probability, the
log-likelihood of a rollout is

    log pi = sum_l m_l (o_l log q'_l + (1 - o_l) log(1 - q'_l)),    d log pi / d theta_l = m_l (o_l - q'_l),

the "(outcome - sigmoid)" score of every executed decision; E[R grad log pi] = grad P exactly
(REINFORCE; tested). One training step per task is the group-relative policy gradient

    theta_m <- theta_m + lr * (1/N) sum_i A_i grad log pi_i,   A = prs.group_advantages(R, estimator)

(the seq-mean-token-sum aggregation of the GRPO++ recipe, with the 1/(B N) factor folded into lr;
one on-policy step, so the PPO ratio is 1 and clipping is inactive). A re-rolled group is trained
on next to its original group (`reroll="add"`) or replaces it (`"replace"`); group filtering is
implicit (all-0/all-1 groups get A = 0). `reroll_prefix=False` re-rolls the same groups from scratch,
the control that tells the prefix's effect from that of sampling more rollouts.

Shared parameters and the learning rate (`shared_dim`). With independent logits every task has its
own parameters and the objective mean_m P_m rises monotonically towards theta = +inf: a larger step
is never punished, so a larger lr simply wins. A language model is the opposite case: every task
moves the same weights. With shared_dim = D > 0 the logits are theta_ml = theta0_ml + u_ml . w with
D shared parameters w and fixed random features u_ml ~ N(0, I_D / D) (|u_ml|^2 ~ 1: the task's own
step moves its logit as much as with independent logits at the same lr). A step on task m then moves
every other task's logit by lr (u_m'l' . u_ml) g_ml, a random +-lr g / sqrt(D) each: interference.
With M L > 2 D the features cannot make every logit large at once, so the optimum of mean_m P_m is
finite, and SGD with the finite-sample gradient noise of N rollouts per group settles at a distance
from it that grows with lr (the stationary variance of constant-step SGD is proportional to lr).
That is the noise-limited regime: 2x lr moves faster at first and plateaus lower and noisier, and a
re-roll whose gradient is averaged with its group's (`reroll_combine="mean"`) buys less noise, not a
larger step. The features use their own key, so the task population and the sampling keys of a seed
are those of D = 0.

Where the hard step sits (``SimParams.crux``). With ``crux = "none"`` a task's
difficulty is spread evenly (or Dirichlet-shared) over its steps. ``"early"`` / ``"late"`` /
``"uniform"`` put a share ``crux_share`` of log P0_m on ONE step (index 0, index L-1, or a uniform
random index per task) and spread the rest evenly over the other L-1 steps, so prod_l q_ml = P0_m
still. That is the smallest model of "a success prefix can only teach what comes after the cut":
a success prefix cut at c >= 1 replays an early crux (no decision, no gradient on it) but always
leaves a late one (c <= L-1) in the continuation; a failure prefix handicaps the steps before its
cut, which the agent must redo, wherever the crux is (its source stops at its first failure, so a
failure at an early crux, length 1, has no proper prefix and is not steered: an honest limit).

Schedules (``SimConfig.schedule``). ``same_step`` (above): a skewed group is re-rolled in the step
that saw it. ``next_visit`` (as ``prs.rl.schedule``): the population is the finite pool, revisited
(B of M drawn per step); a task whose last *unprefixed* group fell in a PS bucket stores that
bucket and the length of one source of the right outcome (uniform among its successes / failures),
and its next visit samples all N rollouts from that source's prefix at the controller's current
cut: **no extra rollouts**, one group per task and step, as the baseline. A prefixed visit keeps the
plan unless it overshot (a success-prefixed group came back N/N or a failure-prefixed one 0/N), and
then the next visit is unprefixed and re-measures k. ``reroll_prefix=False`` with next_visit is
the baseline (the LM's ``reroll_noprefix`` on next_visit is the baseline on the same pool).

``SimParams.extra_share`` (same_step, traced): each group the mode would re-roll is re-rolled with
this probability (uniform, its own key, so the other draws of a seed are unchanged); with
``reroll_prefix=False`` and ``reroll="add"`` it is the LM's ``extra_rollouts`` control (an extra
from-scratch group for a share of the skewed groups), the share matched to PS's decisions.

Task selection (``SimConfig.select``, schedule="same_step"; the trainer's ``schedule.select`` names; the
theory of each is ``theory.controls``). Every selector fills B slots [B] with a ``valid`` mask; a padded slot
gets no gradient and counts nowhere. ``uniform``: B of M at random (the default, bit for bit the behaviour
before selectors existed). ``dynamic_sampling`` (DAPO, verl ``recipe/dapo``): the next C * G distinct tasks of
a permutation (the dataloader) are split into C gen batches of G; batches are generated until B groups with
0 < k < N are kept or the C-th batch; the first B kept are trained (all C batches are sampled under jit, only
the generated ones are counted). ``screen`` (SPEED-RL): G_s candidates get n_init screening rollouts (the first
n_init columns of N), a candidate is accepted iff 0 < k_init < n_init, the first B accepted are completed to N
(the screening rollouts count). ``selective`` (GRESO, Infini-AI-Lab/GRESO ``presampling_selector.py``): a task
whose last c visits were all-correct (all-wrong) is skipped with probability 1 - max(p_easy^c, floor)
(p_hard); the first B kept tasks of a permutation are rolled out; a skipped task keeps its streak.
``predicted``: the oracle that knows each task's pass rate P and takes the B tasks of highest P(1 - P) (the
upper bound of the trainer's posterior-based selector). Metrics ``informative`` (trained groups with contrast),
``rollouts`` (generated, screening, discarded batches and re-rolls included) and ``trained`` (valid slots)
are logged for every selector.

Training (`make_train`) is purejaxrl-shaped: `train(key, params)` is pure, `lax.scan` over steps,
and `simulate` `vmap`s it over seeds under one `jit`, compiled once per static `SimConfig`
(mode, N, sizes); the difficulty mixture and the controller target are traced `SimParams`, so a
sweep over them reuses the compiled program.

Difficulty: the initial success probability of each task is drawn from a Beta mixture
(`DIFFICULTIES`: uniform, easy-heavy, hard-heavy, bimodal), clipped to [p_lo, p_hi], and spread
evenly over the steps: theta_ml = logit(P0_m ** (1/L)).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from prs.core import prefix as px
from prs.core.advantages import group_advantages

__all__ = [
    "SimConfig",
    "Difficulty",
    "DIFFICULTIES",
    "SimParams",
    "Rollouts",
    "success_prob",
    "sample_rollouts",
    "log_likelihood",
    "policy_gradient",
    "initial_theta",
    "make_train",
    "simulate",
    "steps_to_reach",
]


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Static configuration of the simulator (one compiled program per distinct value).

    Attributes:
      mode: Prefix Sampling mode, one of prs.core.prefix.MODES.
      n: rollouts per group N.
      n_tasks: task population size M.
      chain_len: steps per task L.
      groups: groups (tasks) per training step B <= M, drawn without replacement.
      steps: training steps T.
      lr: step size of the per-task policy-gradient update.
      recovery_handicap: delta >= 0, logit handicap of each spoiled step after a failure prefix.
      estimator: advantage estimator passed to prs.group_advantages.
      p_lo, p_hi: clip of the initial per-task success probability.
      step_concentration: 0 = the task's difficulty is spread evenly over its steps; c > 0 = the
        shares of log P0 per step are Dirichlet(c, ..., c) (small c: one hard "crux" step).
      reroll: "replace" (a re-rolled group replaces its original group in the batch) or "add"
        (both are trained on; more compute per step).
      reroll_prefix: False re-rolls the same groups from scratch (no prefix): the control that
        separates the prefix's effect from that of sampling more rollouts for skewed groups.
      reroll_combine: with reroll="add", how a re-rolled group's gradient joins its original
        group's: "sum" (g_orig + g_re: twice the step for a steered task) or
        "mean" ((g_orig + g_re) / 2: the same step size, half the noise; the honest comparison with
        a baseline whose step size is not doubled for skewed tasks).
      shared_dim: 0 = every (task, step) has its own logit (independent tasks). D > 0 = the logits
        share D parameters: theta_ml = theta0_ml + u_ml . w, w [D] trained from 0, u_ml ~ N(0, I_D / D)
        fixed per seed (see "Shared parameters" in the module docstring).
      shared_common: c in [0, 1], with shared_dim > 0: the share of |u_ml|^2 along one common
        direction e_0 (a skill every step of every task uses: u_ml = sqrt(c) e_0 + sqrt(1 - c) xi_ml,
        xi_ml ~ N(0, I_D / D)); c = 0 = purely random features (tasks interfere but nothing transfers).
      schedule: "same_step" (re-roll in the step that saw the group) or "next_visit" (the prefix at the
        task's next visit, no extra rollouts; module docstring "Schedules").
      ema_decay, gain, rho_init, rho_min, rho_max: prefix controller constants (prs.core.prefix).
      select: which tasks get rollouts each step (module docstring "Task selection"; the trainer's
        ``schedule.select`` names): "uniform" (B of M at random, today's behaviour bit for bit),
        "dynamic_sampling", "selective", "screen", "predicted". With schedule="same_step" only.
      gen_groups, max_gen_batches: dynamic_sampling's gen batch G (0 = B) and cap C (verl
        ``data.gen_batch_size``, ``algorithm.filter_groups.max_num_gen_batches``); C * G <= M.
      screen_n, screen_candidates: screen's screening rollouts n_init (2 <= n_init <= N) and candidates
        screened per step (0 = min(2B, M)).
      greso_p_easy, greso_p_hard, greso_floor: selective's skip rule 1 - max(p^streak, floor).
    """

    mode: str = "ps_ada"
    n: int = 8
    n_tasks: int = 128
    chain_len: int = 8
    groups: int = 32
    steps: int = 200
    lr: float = 3.0
    recovery_handicap: float = 4.0
    estimator: str = "rloo"
    p_lo: float = 0.01
    p_hi: float = 0.99
    step_concentration: float = 0.0
    reroll: str = "add"
    reroll_prefix: bool = True
    reroll_combine: str = "sum"
    shared_dim: int = 0
    shared_common: float = 0.5
    schedule: str = "same_step"
    ema_decay: float = 0.8
    gain: float = 2.0
    rho_init: float = 0.5
    rho_min: float = 0.05
    rho_max: float = 0.95
    select: str = "uniform"
    gen_groups: int = 0
    max_gen_batches: int = 4
    screen_n: int = 4
    screen_candidates: int = 0
    greso_p_easy: float = 0.5
    greso_p_hard: float = 0.5
    greso_floor: float = 0.01

    def __post_init__(self):
        for name in ("n_tasks", "chain_len", "groups", "steps"):
            if int(getattr(self, name)) != getattr(self, name) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.chain_len < 2:
            raise ValueError(f"chain_len must be >= 2 (a prefix needs a proper cut), got {self.chain_len}")
        if self.groups > self.n_tasks:
            raise ValueError(f"groups (B={self.groups}) must be <= n_tasks (M={self.n_tasks})")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not self.recovery_handicap >= 0:
            raise ValueError(f"recovery_handicap must be >= 0, got {self.recovery_handicap!r}")
        if not 0.0 < self.p_lo <= self.p_hi < 1.0:
            raise ValueError(f"need 0 < p_lo <= p_hi < 1, got p_lo={self.p_lo}, p_hi={self.p_hi}")
        if not self.step_concentration >= 0:
            raise ValueError(f"step_concentration must be >= 0, got {self.step_concentration!r}")
        if self.reroll not in ("replace", "add"):
            raise ValueError(f"reroll must be 'replace' or 'add', got {self.reroll!r}")
        if self.reroll_combine not in ("sum", "mean"):
            raise ValueError(f"reroll_combine must be 'sum' or 'mean', got {self.reroll_combine!r}")
        if int(self.shared_dim) != self.shared_dim or self.shared_dim < 0:
            raise ValueError(f"shared_dim must be an integer >= 0, got {self.shared_dim!r}")
        if not 0.0 <= self.shared_common <= 1.0:
            raise ValueError(f"shared_common must lie in [0, 1], got {self.shared_common!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        self.prefix_config()  # validates mode, n and the controller constants
        if self.select not in SELECTS:
            raise ValueError(f"select must be one of {SELECTS}, got {self.select!r}")
        if self.select != "uniform" and self.schedule != "same_step":
            raise ValueError(f"select={self.select!r} needs schedule='same_step' in prs.sim, got {self.schedule!r}")
        for name in ("gen_groups", "screen_candidates"):
            if int(getattr(self, name)) != getattr(self, name) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be an integer >= 0 (0 = default), got {getattr(self, name)!r}")
        if int(self.max_gen_batches) != self.max_gen_batches or self.max_gen_batches < 1:
            raise ValueError(f"max_gen_batches must be an integer >= 1, got {self.max_gen_batches!r}")
        if self.select == "dynamic_sampling" and self.max_gen_batches * self.gen_batch() > self.n_tasks:
            raise ValueError(f"dynamic_sampling draws max_gen_batches * gen_groups = {self.max_gen_batches} * "
                             f"{self.gen_batch()} distinct tasks, more than n_tasks (M={self.n_tasks})")
        if not 2 <= self.screen_n <= self.n or int(self.screen_n) != self.screen_n:
            raise ValueError(f"screen_n must be an integer in [2, n={self.n}], got {self.screen_n!r}")
        if self.screen_candidates > self.n_tasks:
            raise ValueError(f"screen_candidates must be <= n_tasks (M={self.n_tasks}), got {self.screen_candidates}")
        for name in ("greso_p_easy", "greso_p_hard"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)!r}")
        if not 0.0 < self.greso_floor <= 1.0:
            raise ValueError(f"greso_floor must lie in (0, 1], got {self.greso_floor!r}")

    def gen_batch(self) -> int:
        return self.gen_groups or self.groups

    def candidates(self) -> int:
        return self.screen_candidates or min(2 * self.groups, self.n_tasks)

    def prefix_config(self, mode: str | None = None) -> px.PrefixConfig:
        return px.PrefixConfig(mode=self.mode if mode is None else mode, n=self.n, ema_decay=self.ema_decay,
                               gain=self.gain, rho_init=self.rho_init, rho_min=self.rho_min,
                               rho_max=self.rho_max)


@dataclasses.dataclass(frozen=True)
class Difficulty:
    """Beta mixture of the initial per-task success probability: sum_c weight_c Beta(alpha_c, beta_c)."""

    weight: tuple[float, ...]
    alpha: tuple[float, ...]
    beta: tuple[float, ...]

    def __post_init__(self):
        if not len(self.weight) == len(self.alpha) == len(self.beta) >= 1:
            raise ValueError(f"weight, alpha, beta must have one equal length >= 1, got "
                             f"{len(self.weight)}, {len(self.alpha)}, {len(self.beta)}")
        if min(self.weight) < 0 or sum(self.weight) <= 0 or min(self.alpha) <= 0 or min(self.beta) <= 0:
            raise ValueError(f"need weight >= 0 (sum > 0), alpha > 0, beta > 0, got {self}")

    def mean(self) -> float:
        w = np.asarray(self.weight) / np.sum(self.weight)
        return float(np.sum(w * np.asarray(self.alpha) / (np.asarray(self.alpha) + np.asarray(self.beta))))


DIFFICULTIES = {
    "uniform": Difficulty((1.0,), (1.0,), (1.0,)),
    "easy_heavy": Difficulty((1.0,), (4.0,), (1.5,)),
    "hard_heavy": Difficulty((1.0,), (1.5,), (4.0,)),
    "bimodal": Difficulty((0.5, 0.5), (1.0, 6.0), (6.0, 1.0)),
}

SCHEDULES = ("same_step", "next_visit")
SELECTS = ("uniform", "dynamic_sampling", "selective", "screen", "predicted")  # task selection (SimConfig.select)
CRUX = ("none", "early", "late", "uniform")  # where the hard step sits (SimParams.crux)

_MAX_COMPONENTS = 4  # mixtures are padded to this many components so that they share one compile


class SimParams(NamedTuple):
    """Traced parameters of one simulated configuration (vmappable, no recompile when they change)."""

    target: jax.Array      # [] controller target pass rate
    log_weight: jax.Array  # [C] log mixture weights (-inf = unused component)
    alpha: jax.Array       # [C]
    beta: jax.Array        # [C]
    crux: jax.Array = jnp.int32(0)            # [] index into CRUX: none / early / late / uniform
    crux_share: jax.Array = jnp.float32(0.0)  # [] share of log P0 on the crux step
    extra_share: jax.Array = jnp.float32(1.0)  # [] probability that a would-be re-rolled group is re-rolled

    @staticmethod
    def make(difficulty: Difficulty | str, target: float = 0.5, *, crux: str = "none", crux_share: float = 0.7,
             extra_share: float = 1.0) -> "SimParams":
        d = DIFFICULTIES[difficulty] if isinstance(difficulty, str) else difficulty
        C = len(d.weight)
        if C > _MAX_COMPONENTS:
            raise ValueError(f"difficulty has {C} components, at most {_MAX_COMPONENTS} supported")
        if not 0.0 < target < 1.0:
            raise ValueError(f"target must lie in (0, 1), got {target!r}")
        if crux not in CRUX:
            raise ValueError(f"crux must be one of {CRUX}, got {crux!r}")
        if not 0.0 <= crux_share < 1.0:
            raise ValueError(f"crux_share must lie in [0, 1), got {crux_share!r}")
        if not 0.0 <= extra_share <= 1.0:
            raise ValueError(f"extra_share must lie in [0, 1], got {extra_share!r}")
        pad = _MAX_COMPONENTS - C
        w = np.asarray(d.weight, np.float64) / np.sum(d.weight)
        with np.errstate(divide="ignore"):
            lw = np.log(np.concatenate([w, np.zeros(pad)]))
        return SimParams(target=jnp.float32(target), log_weight=jnp.asarray(lw, jnp.float32),
                         alpha=jnp.asarray(list(d.alpha) + [1.0] * pad, jnp.float32),
                         beta=jnp.asarray(list(d.beta) + [1.0] * pad, jnp.float32),
                         crux=jnp.int32(CRUX.index(crux)), crux_share=jnp.float32(crux_share if crux != "none" else 0.0),
                         extra_share=jnp.float32(extra_share))


class Rollouts(NamedTuple):
    reward: jax.Array   # [B, N] float32 0/1
    outcome: jax.Array  # [B, N, L] float32 1 = step cleared (a replayed step counts as cleared), 0 = failed
    policy: jax.Array   # [B, N, L] bool: step l was a policy decision (reached and not replayed)
    offset: jax.Array   # [B, L] float32 logit handicap the rollouts were sampled with
    length: jax.Array   # [B, N] int32 steps reached (executed or replayed), the source length of a prefix


def success_prob(theta: jax.Array, offset: jax.Array | None = None, replay: jax.Array | None = None) -> jax.Array:
    """P = prod_{l not replayed} sigmoid(theta_l + offset_l) over the last axis: [..., L] -> [...]."""
    theta = jnp.asarray(theta, jnp.float32)
    off = jnp.zeros(theta.shape, jnp.float32) if offset is None else jnp.asarray(offset, jnp.float32)
    if off.shape != theta.shape:
        raise ValueError(f"offset must have the shape of theta {theta.shape}, got {off.shape}")
    lq = jax.nn.log_sigmoid(theta + off)
    if replay is not None:
        if jnp.shape(replay) != theta.shape:
            raise ValueError(f"replay must have the shape of theta {theta.shape}, got {jnp.shape(replay)}")
        lq = jnp.where(replay, 0.0, lq)
    return jnp.exp(jnp.sum(lq, axis=-1))


def sample_rollouts(key: jax.Array, theta: jax.Array, offset: jax.Array, replay: jax.Array, *, n: int) -> Rollouts:
    """N rollouts of each of B chains: theta [B, L], offset [B, L] (logit handicap), replay [B, L] bool.

    Step l is cleared iff it is replayed or u_l < sigmoid(theta_l + offset_l); the rollout stops at
    the first step that is not cleared (later steps are not reached: no decision, no gradient).
    """
    theta = jnp.asarray(theta, jnp.float32)
    if theta.ndim != 2 or jnp.shape(offset) != theta.shape or jnp.shape(replay) != theta.shape:
        raise ValueError(f"theta, offset, replay must all have shape [B, L], got {theta.shape}, "
                         f"{jnp.shape(offset)}, {jnp.shape(replay)}")
    B, L = theta.shape
    off = jnp.asarray(offset, jnp.float32)
    rp = jnp.asarray(replay, bool)[:, None, :]  # [B, 1, L]
    q = jax.nn.sigmoid(theta + off)[:, None, :]  # [B, 1, L]
    u = jax.random.uniform(key, (B, n, L))  # [B, N, L]
    cleared = rp | (u < q)  # [B, N, L]
    reached = jnp.cumprod(jnp.concatenate([jnp.ones((B, n, 1), jnp.int32), cleared[..., :-1].astype(jnp.int32)],
                                          axis=-1), axis=-1).astype(bool)  # [B, N, L] step l was reached
    return Rollouts(reward=jnp.all(cleared, axis=-1).astype(jnp.float32),
                    outcome=cleared.astype(jnp.float32),
                    policy=reached & ~rp,
                    offset=off,
                    length=jnp.sum(reached, axis=-1, dtype=jnp.int32))


def log_likelihood(theta: jax.Array, ro: Rollouts) -> jax.Array:
    """log pi of each rollout, [B, N]: sum_l m_l (o_l log q'_l + (1 - o_l) log(1 - q'_l)), m = ro.policy.

    Prefix masking happens here: replayed steps have o_l = 1 (their decision was a success) but
    m_l = 0, so they contribute nothing to log pi and get no gradient.
    """
    z = (theta + ro.offset)[:, None, :]  # [B, 1, L]
    per_step = ro.outcome * jax.nn.log_sigmoid(z) + (1.0 - ro.outcome) * jax.nn.log_sigmoid(-z)  # [B, N, L]
    return jnp.sum(jnp.where(ro.policy, per_step, 0.0), axis=-1)


def policy_gradient(theta: jax.Array, ro: Rollouts, adv: jax.Array) -> jax.Array:
    """grad_theta (1/N) sum_i A_i log pi_i, [B, L] (ascent direction; A is not differentiated)."""
    n = ro.reward.shape[1]
    adv = jax.lax.stop_gradient(adv)
    return jax.grad(lambda th: jnp.sum(adv * log_likelihood(th, ro)) / n)(theta)


def initial_theta(key: jax.Array, params: SimParams, cfg: SimConfig) -> jax.Array:
    """[M, L] logits: P0_m ~ the Beta mixture, clipped to [p_lo, p_hi]; log q_ml = w_ml log P0_m with
    w_ml = 1/L (step_concentration = 0) or w_m ~ Dirichlet(c 1_L), or with a crux (params.crux > 0)
    w_ml = crux_share at the crux step and (1 - crux_share) / (L - 1) elsewhere; theta_ml = logit(q_ml).
    So prod_l q_ml = P0_m exactly."""
    kc, kb, kd = jax.random.split(key, 3)
    M, L = cfg.n_tasks, cfg.chain_len
    comp = jax.random.categorical(kc, params.log_weight, shape=(M,))  # [M]
    p0 = jax.random.beta(kb, params.alpha[comp], params.beta[comp])  # [M]
    p0 = jnp.clip(p0, cfg.p_lo, cfg.p_hi)
    if cfg.step_concentration > 0:
        w = jax.random.dirichlet(kd, jnp.full((L,), cfg.step_concentration), shape=(M,))  # [M, L]
    else:
        w = jnp.full((M, L), 1.0 / L)
    # the crux (SimParams.crux): share c of log P0 on one step, (1 - c) / (L - 1) on each other step
    pos = jnp.select([params.crux == 1, params.crux == 2], [jnp.zeros((M,), jnp.int32), jnp.full((M,), L - 1, jnp.int32)],
                     jax.random.randint(jax.random.fold_in(kd, 3), (M,), 0, L))  # [M]
    c = params.crux_share
    w_crux = jnp.where(jnp.arange(L)[None, :] == pos[:, None], c, (1.0 - c) / (L - 1))  # [M, L]
    w = jnp.where(params.crux > 0, w_crux, w)
    log_q = jnp.minimum(jnp.log(p0)[:, None] * w, -1e-7)  # [M, L] (< 0: q < 1, finite logit)
    theta = log_q - jnp.log(-jnp.expm1(log_q))  # logit(q) = log q - log(1 - q)
    return theta.astype(jnp.float32)


def _gather(table: np.ndarray, bucket: jax.Array, fill) -> jax.Array:
    t = jnp.concatenate([jnp.asarray(table), jnp.full((1,), fill, jnp.asarray(table).dtype)])
    return t[jnp.where(bucket < 0, t.shape[0] - 1, bucket)]


def make_train(cfg: SimConfig) -> Callable[[jax.Array, SimParams], dict]:
    """Returns a pure `train(key, params) -> metrics` (purejaxrl style; scan over cfg.steps).

    metrics (leading axis T = cfg.steps unless noted):
      success0 []        population success rate mean_m P_m before training
      success [T]        population success rate after each step (closed form, no sampling noise)
      batch_pass [T]     mean reward of the step's original rollouts
      skewed [T]         share of the step's groups in a PS bucket (ps_ada buckets, whatever the mode)
      rerolled [T]       share of groups re-rolled from a prefix
      reroll_pass [T]    mean pass rate of the re-rolled groups (NaN-free: 0 where none)
      energy [T]         mean p(1 - p) of the groups trained on (advantage energy, p = k/N)
      decisions [T]      policy decisions sampled this step (original + re-rollouts): compute proxy
      rho, ema [T, K]    controller state after the step
      informative [T]    trained original groups with 0 < k < N
      rollouts [T]       rollouts generated (screening, discarded gen batches and re-rolls included)
      trained [T]        original groups trained (B unless a selector came up short)
      theta [M, L]       the logits after the last step
    """
    pcfg = cfg.prefix_config()
    full = cfg.prefix_config("ps_ada")
    M, L, B, N = cfg.n_tasks, cfg.chain_len, cfg.groups, cfg.n
    delta = float(cfg.recovery_handicap)
    direction = px.bucket_direction(pcfg)  # [K]
    do_reroll = pcfg.mode != "baseline"
    steps_l = jnp.arange(L, dtype=jnp.int32)  # [L]

    def pop_success(theta):
        return jnp.mean(success_prob(theta))

    D = int(cfg.shared_dim)

    def logits(theta0, w, feats):
        if D == 0:
            return w  # w [M, L]: the independent logits themselves (started at theta0)
        return theta0 + jnp.einsum("mld,d->ml", feats, w)  # [M, L]

    def prefixed(cut, hard):
        """cut [B], hard [B] -> (replay [B, L], offset [B, L]) of the re-rollouts (module docstring)."""
        before = steps_l[None, :] < cut[:, None]  # [B, L] the prefix's steps
        if not cfg.reroll_prefix:
            before = jnp.zeros_like(before)  # control: same groups, fresh rollouts
        return before & hard[:, None], jnp.where(before & ~hard[:, None], -delta, 0.0)

    def visit_step(carry, key):
        """next_visit: the stored plan of each visited task decides its prefix; one group per task."""
        theta0, w, feats, ctrl, target, plan, src_len_m, sel_state = carry
        theta = logits(theta0, w, feats)  # [M, L]
        k_task, k_roll, k_src, _ = jax.random.split(key, 4)
        tasks = jax.random.choice(k_task, M, (B,), replace=False)  # [B]
        th = theta[tasks]  # [B, L]
        pl, sl = plan[tasks], src_len_m[tasks]  # [B]
        cut = px.cut_points(ctrl, pl, jnp.where(pl >= 0, sl, 0), pcfg)  # [B]
        steer = cut > 0  # [B]
        hard = _gather(direction, pl, 0) > 0  # [B]
        replay, offset = prefixed(cut, hard)
        ro = sample_rollouts(k_roll, th, offset, replay, n=N)
        k = jnp.sum(ro.reward, axis=1).astype(jnp.int32)  # [B]
        rate = jnp.mean(ro.reward, axis=1)  # [B]
        ctrl = px.update(ctrl, jnp.where(steer, pl, -1), rate, pcfg, target=target)
        # memory: an unprefixed group re-plans from its k and stores a source; a prefixed one keeps its
        # plan and source unless it overshot (hard -> N/N, easy -> 0/N): then the next visit re-measures
        new_b = px.assign_buckets(k, pcfg)  # [B]
        src = px.choose_sources(k_src, ro.reward, new_b, pcfg)  # [B]
        new_len = jnp.take_along_axis(ro.length, jnp.maximum(src, 0)[:, None], axis=1)[:, 0]  # [B]
        overshot = jnp.where(hard, k == N, k == 0)
        pl_next = jnp.where(steer, jnp.where(overshot, -1, pl), jnp.where(src >= 0, new_b, -1))
        sl_next = jnp.where(steer, sl, new_len)
        plan, src_len_m = plan.at[tasks].set(pl_next), src_len_m.at[tasks].set(sl_next)
        adv = group_advantages(ro.reward, estimator=cfg.estimator)  # [B, N]
        g = policy_gradient(th, ro, adv)  # [B, L]
        if D == 0:
            w = w.at[tasks].add(cfg.lr * g)
        else:
            w = w + (cfg.lr / B) * jnp.einsum("bld,bl->d", feats[tasks], g)
        theta = logits(theta0, w, feats)
        n_st = jnp.sum(steer)
        out = dict(success=pop_success(theta), batch_pass=jnp.mean(ro.reward),
                   skewed=jnp.mean((px.assign_buckets(k, full) >= 0).astype(jnp.float32)),
                   rerolled=n_st / B, reroll_pass=jnp.sum(jnp.where(steer, rate, 0.0)) / jnp.maximum(n_st, 1),
                   energy=jnp.mean(rate * (1.0 - rate)), decisions=jnp.sum(ro.policy), rho=ctrl.rho, ema=ctrl.ema)
        n_rollouts = jnp.float32(B * N)
        informative = jnp.sum((k > 0) & (k < N)).astype(jnp.float32)
        out.update(informative=informative, rollouts=n_rollouts, trained=jnp.float32(B))
        return (theta0, w, feats, ctrl, target, plan, src_len_m, sel_state), out

    def select_batch(theta, key, k_task, k_roll, sel_state):
        """Task selection (SimConfig.select != "uniform"): -> tasks [B], valid [B], ro (B groups), decisions,
        rollouts generated, new selection state. Padded slots (valid False) point at a real task and carry no
        gradient."""
        zeros = lambda r: (jnp.zeros((r, L)), jnp.zeros((r, L), bool))  # noqa: E731
        slots = jnp.arange(B)
        take = lambda ro, idx: jax.tree.map(lambda a: a[idx], ro)  # noqa: E731
        if cfg.select == "predicted":  # oracle: the B tasks of highest P(1 - P)
            P = success_prob(theta)  # [M]
            _, tasks = jax.lax.top_k(P * (1.0 - P), B)
            ro = sample_rollouts(k_roll, theta[tasks], *zeros(B), n=N)
            return tasks, jnp.ones((B,), bool), ro, jnp.sum(ro.policy), jnp.float32(B * N), sel_state
        if cfg.select == "dynamic_sampling":  # verl recipe/dapo: refill gen batches of G until B kept or cap C
            G, C = cfg.gen_batch(), cfg.max_gen_batches
            cand = jax.random.permutation(k_task, M)[:C * G]  # [CG] distinct, in dataloader order
            ro_all = sample_rollouts(k_roll, theta[cand], *zeros(C * G), n=N)
            kk = jnp.sum(ro_all.reward, axis=1)
            inf = (kk > 0) & (kk < N)  # [CG]
            cum = jnp.cumsum(jnp.sum(inf.reshape(C, G), axis=1))  # [C] kept after each batch
            n_batches = jnp.where(jnp.any(cum >= B), jnp.argmax(cum >= B) + 1, C)
            generated = jnp.arange(C * G) // G < n_batches  # [CG]
            kept = inf & (jnp.cumsum(inf) <= B) & generated
            idx = jnp.nonzero(kept, size=B, fill_value=0)[0]
            dec = jnp.sum(ro_all.policy & generated[:, None, None])
            return (cand[idx], slots < jnp.sum(kept), take(ro_all, idx), dec,
                    (n_batches * G * N).astype(jnp.float32), sel_state)
        if cfg.select == "screen":  # SPEED: n0 screening rollouts, accept 0 < k0 < n0, complete to N
            Gs, n0 = cfg.candidates(), cfg.screen_n
            cand = jax.random.permutation(k_task, M)[:Gs]
            ro_all = sample_rollouts(k_roll, theta[cand], *zeros(Gs), n=N)  # columns < n0: the screening
            k0 = jnp.sum(ro_all.reward[:, :n0], axis=1)
            acc = (k0 > 0) & (k0 < n0)
            kept = acc & (jnp.cumsum(acc) <= B)
            idx = jnp.nonzero(kept, size=B, fill_value=0)[0]
            dec = jnp.sum(ro_all.policy[:, :n0]) + jnp.sum(ro_all.policy[:, n0:] & kept[:, None, None])
            return (cand[idx], slots < jnp.sum(kept), take(ro_all, idx), dec,
                    (Gs * n0 + jnp.sum(kept) * (N - n0)).astype(jnp.float32), sel_state)
        # selective (GRESO): skip a task with probability 1 - max(p^streak, floor), refill from the pool
        streak, easy = sel_state
        keep_p = jnp.where(streak == 0, 1.0, jnp.maximum(
            jnp.where(easy, cfg.greso_p_easy, cfg.greso_p_hard) ** streak.astype(jnp.float32), cfg.greso_floor))
        perm = jax.random.permutation(k_task, M)
        sel = (jax.random.uniform(jax.random.fold_in(key, 22), (M,)) < keep_p)[perm]  # in pool order
        chosen = sel & (jnp.cumsum(sel) <= B)
        idx = jnp.nonzero(chosen, size=B, fill_value=0)[0]
        tasks, valid = perm[idx], slots < jnp.sum(chosen)
        ro = sample_rollouts(k_roll, theta[tasks], *zeros(B), n=N)
        kk = jnp.sum(ro.reward, axis=1)
        all1, all0 = kk == N, kk == 0
        st, ea = streak[tasks], easy[tasks]
        new_st = jnp.where(all1, jnp.where(ea & (st > 0), st + 1, 1),
                           jnp.where(all0, jnp.where(~ea & (st > 0), st + 1, 1), 0))
        new_ea = jnp.where(all1, True, jnp.where(all0, False, ea))
        at = jnp.where(valid, tasks, M)  # padded slots write nowhere
        sel_state = (streak.at[at].set(new_st, mode="drop"), easy.at[at].set(new_ea, mode="drop"))
        return (tasks, valid, ro, jnp.sum(ro.policy & valid[:, None, None]),
                jnp.sum(valid).astype(jnp.float32) * N, sel_state)

    def step(carry, key, *, extra_share):
        theta0, w, feats, ctrl, target, plan, src_len_m, sel_state = carry
        theta = logits(theta0, w, feats)  # [M, L]
        k_task, k_roll, k_src, k_re = jax.random.split(key, 4)
        if cfg.select == "uniform":
            tasks = jax.random.choice(k_task, M, (B,), replace=False)  # [B]
            th = theta[tasks]  # [B, L]
            ro = sample_rollouts(k_roll, th, jnp.zeros((B, L)), jnp.zeros((B, L), bool), n=N)
            valid = jnp.ones((B,), bool)
            n_rollouts = jnp.float32(B * N)
        else:
            tasks, valid, ro, gen_decisions, n_rollouts, sel_state = select_batch(theta, key, k_task, k_roll,
                                                                                 sel_state)
            th = theta[tasks]  # [B, L]
        k = jnp.sum(ro.reward, axis=1).astype(jnp.int32)  # [B]
        skewed = jnp.mean((px.assign_buckets(k, full) >= 0).astype(jnp.float32))
        decisions = jnp.sum(ro.policy)
        n_valid = jnp.sum(valid)
        if cfg.select != "uniform":  # padded slots count nowhere
            skewed = jnp.sum(valid & (px.assign_buckets(k, full) >= 0)) / jnp.maximum(n_valid, 1)
            decisions = gen_decisions
        informative = jnp.sum(valid & (k > 0) & (k < N)).astype(jnp.float32)
        if do_reroll:
            bucket = px.assign_buckets(k, pcfg)  # [B]
            src = px.choose_sources(k_src, ro.reward, bucket, pcfg)  # [B]
            src_len = jnp.take_along_axis(ro.length, jnp.maximum(src, 0)[:, None], axis=1)[:, 0]  # [B]
            cut = px.cut_points(ctrl, bucket, jnp.where(src >= 0, src_len, 0), pcfg)  # [B]
            # SimParams.extra_share: each would-be re-roll happens with this probability (own key)
            keep = jax.random.uniform(jax.random.fold_in(key, 11), (B,)) < extra_share
            reroll = (cut > 0) & keep & valid  # [B]
            hard = _gather(direction, bucket, 0) > 0  # [B]
            # success prefix: steps done, not policy decisions; failure prefix: handicapped redo
            replay, offset = prefixed(cut, hard)
            re = sample_rollouts(k_re, th, offset, replay, n=N)
            if cfg.reroll == "replace":
                pick = lambda a, b: jnp.where(reroll.reshape((B,) + (1,) * (a.ndim - 1)), a, b)  # noqa: E731
                train_ro = jax.tree.map(pick, re, ro)
            re_rate = jnp.mean(re.reward, axis=1)  # [B]
            ctrl = px.update(ctrl, jnp.where(reroll, bucket, -1), re_rate, pcfg, target=target)
            n_re = jnp.sum(reroll)
            rerolled = n_re / B
            reroll_pass = jnp.sum(jnp.where(reroll, re_rate, 0.0)) / jnp.maximum(n_re, 1)
            decisions = decisions + jnp.sum(reroll[:, None, None] & re.policy)
            n_rollouts = n_rollouts + N * n_re
        else:
            train_ro = ro
            rerolled = jnp.float32(0.0)
            reroll_pass = jnp.float32(0.0)
        if do_reroll and cfg.reroll == "add":
            adv = group_advantages(ro.reward, estimator=cfg.estimator)  # [B, N]
            adv_re = jnp.where(reroll[:, None], group_advantages(re.reward, estimator=cfg.estimator), 0.0)
            g_ro, g_re = policy_gradient(th, ro, adv), policy_gradient(th, re, adv_re)  # [B, L]
            if cfg.reroll_combine == "sum":
                g = g_ro + g_re
            else:  # average the two groups of a re-rolled task; others keep their one group's gradient
                g = jnp.where(reroll[:, None], 0.5 * (g_ro + g_re), g_ro)
            p = jnp.concatenate([jnp.mean(ro.reward, axis=1), jnp.mean(re.reward, axis=1)])  # [2B]
            p = jnp.where(jnp.concatenate([jnp.ones((B,), bool), reroll]), p, jnp.nan)
        else:
            adv = group_advantages(train_ro.reward, estimator=cfg.estimator)  # [B, N]
            g = policy_gradient(th, train_ro, adv)  # [B, L]
            p = jnp.mean(train_ro.reward, axis=1)  # [B]
        if cfg.select != "uniform":
            g = jnp.where(valid[:, None], g, 0.0)  # padded slots: no gradient
            p = jnp.where(jnp.concatenate([valid, jnp.ones((p.shape[0] - B,), bool)]), p, jnp.nan)  # [B] or [2B]
        if D == 0:
            w = w.at[tasks].add(cfg.lr * g)
        else:  # chain rule: d theta_ml / d w = u_ml
            w = w + (cfg.lr / B) * jnp.einsum("bld,bl->d", feats[tasks], g)  # batch mean, as an LM's loss
        theta = logits(theta0, w, feats)
        out = dict(success=pop_success(theta), batch_pass=jnp.mean(ro.reward), skewed=skewed,
                   rerolled=jnp.asarray(rerolled, jnp.float32), reroll_pass=jnp.asarray(reroll_pass, jnp.float32),
                   energy=jnp.nanmean(p * (1.0 - p)), decisions=decisions, rho=ctrl.rho, ema=ctrl.ema)
        if cfg.select != "uniform":  # NaN-free with an empty batch (a degenerate pool)
            e = jnp.where(jnp.isnan(p), 0.0, p * (1.0 - p))
            out.update(batch_pass=jnp.sum(jnp.where(valid[:, None], ro.reward, 0.0)) / jnp.maximum(n_valid * N, 1),
                       energy=jnp.sum(e) / jnp.maximum(jnp.sum(~jnp.isnan(p)), 1))
        out.update(informative=informative, rollouts=n_rollouts, trained=n_valid.astype(jnp.float32))
        return (theta0, w, feats, ctrl, target, plan, src_len_m, sel_state), out

    def train(key: jax.Array, params: SimParams) -> dict:
        k_init, k_steps = jax.random.split(key)
        theta0 = initial_theta(k_init, params, cfg)
        if D == 0:
            w0, feats = theta0, jnp.zeros((), jnp.float32)
        else:  # a fresh key: the task population (theta0) and the sampling keys stay those of D = 0
            w0 = jnp.zeros((D,), jnp.float32)
            xi = jax.random.normal(jax.random.fold_in(k_init, 7), (M, L, D), jnp.float32) / np.sqrt(D)
            common = jnp.zeros((1, 1, D), jnp.float32).at[..., 0].set(1.0)  # e_0, [1, 1, D]
            feats = np.sqrt(cfg.shared_common) * common + np.sqrt(1.0 - cfg.shared_common) * xi  # [M, L, D]
        carry = (theta0, w0, feats, px.init(pcfg), params.target,
                 jnp.full((M,), -1, jnp.int32), jnp.zeros((M,), jnp.int32),  # next_visit: plan, source length
                 (jnp.zeros((M,), jnp.int32), jnp.zeros((M,), bool)))  # select="selective": streak, all-correct
        body = visit_step if (cfg.schedule == "next_visit" and do_reroll) else functools.partial(
            step, extra_share=params.extra_share)
        (_, w, feats, *_), metrics = jax.lax.scan(body, carry, jax.random.split(k_steps, cfg.steps))
        metrics["success0"] = pop_success(theta0)
        metrics["theta"] = logits(theta0, w, feats)
        return metrics

    return train


@functools.lru_cache(maxsize=64)
def _runner(cfg: SimConfig):
    return jax.jit(jax.vmap(make_train(cfg), in_axes=(0, None)))


def simulate(cfg: SimConfig, params: SimParams, *, seeds: int, seed0: int = 0) -> dict[str, np.ndarray]:
    """Runs `seeds` independent trainings (seed s uses jax.random.key(seed0 + s)), vmapped in one jit.

    The same seed gives the same task population and the same sampling keys in every mode, so
    methods compared at equal seeds are paired. Returns numpy metrics with a leading [S] axis.
    """
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    keys = jax.vmap(jax.random.key)(jnp.arange(seed0, seed0 + seeds))
    out = _runner(cfg)(keys, params)
    return {k: np.asarray(v) for k, v in out.items()}


def steps_to_reach(success: np.ndarray, success0: np.ndarray, *, reach: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Training steps until the population success closes `reach` of its gap to 1.

    threshold_s = success0_s + reach * (1 - success0_s); steps_s = 1 + first t with success[s, t] >=
    threshold_s. Seeds that never reach it get T + 1 (censored) and are flagged in the second output.
    success [S, T], success0 [S] -> (steps [S] int, censored [S] bool).
    """
    success = np.asarray(success)
    success0 = np.asarray(success0)
    if success.ndim != 2 or success0.shape != success.shape[:1]:
        raise ValueError(f"success must be [S, T] and success0 [S], got {success.shape} and {success0.shape}")
    if not 0.0 < reach <= 1.0:
        raise ValueError(f"reach must lie in (0, 1], got {reach!r}")
    thr = success0 + reach * (1.0 - success0)  # [S]
    hit = success >= thr[:, None]  # [S, T]
    ever = hit.any(axis=1)
    steps = np.where(ever, hit.argmax(axis=1) + 1, success.shape[1] + 1)
    return steps, ~ever
