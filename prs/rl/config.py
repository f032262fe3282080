"""The RL loop's configuration: ``RLConfig`` and its parts, each field declared once.

    RLConfig(tasks_per_step=16, group_size=8,                  # the step's shape (config node ``algo``)
             rollout=RolloutConfig(...),                       # sampling and engine  (``rollout``)
             optim=OptimConfig(...),                           # AdamW and its schedule (``optim``)
             loss=LossConfig(...),                             # advantages and policy loss (``loss``)
             schedule=ScheduleConfig(...),                     # when and how PS re-rolls (``schedule``)
             eval=EvalConfig(...))                             # held-out pass@1 (``eval``)

The parts mirror tunix's split of ``GRPOConfig`` (the learner) from ``RolloutConfig`` (the sampler)
and the config nodes of ``conf/config.yaml`` one to one (``experiments/config.py`` derives them from
these classes). Each part checks its own fields; ``RLConfig`` checks the pairs that span parts (a
non-raw sampler needs a rollout correction; a next-visit pool is a multiple of the batch). Flat
keywords (``RLConfig(lr=...)``) are refused with one line naming the part that holds the field.
"""
from __future__ import annotations

import dataclasses
import functools

from prs.core.advantages import ESTIMATORS
from prs.core.losses import LOSS_TYPES, RATIO_LEVELS
from prs.rl import loss_menu, schedule as sched, select as selector
from prs.rl.episodes import SAMPLING_DTYPES, RolloutConfig

REROLL_MODES = ("replace", "append")
REROLL_BUDGETS = ("shared", "extra")
ALGORITHMS = ("grpo", "rft")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warm-up (``optax.adamw`` after ``clip_by_global_norm``; the ``optim`` node).

    Attributes:
      lr, b1, b2, weight_decay: AdamW's; the learning rate used is ``lr * lr_scale``.
      grad_clip: global-norm clip of the gradient.   warmup_steps: linear warm-up from 0 (0: none).
      lr_scale: multiplies ``lr`` (the ``baseline_lr2`` control: 2).
    """

    lr: float = 3e-4
    b1: float = 0.9
    b2: float = 0.99
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    warmup_steps: int = 0
    lr_scale: float = 1.0

    def __post_init__(self):
        if not self.lr > 0:
            raise ValueError(f"OptimConfig.lr (optim.lr) must be > 0, got {self.lr}")
        if not self.lr_scale > 0:
            raise ValueError(f"OptimConfig.lr_scale (optim.lr_scale) must be > 0, got {self.lr_scale}")


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Advantages and the policy loss (the ``loss`` node; defaults: the GRPO++ recipe).

    Attributes:
      estimator: advantage estimator, one of ``prs.core.advantages.ESTIMATORS`` (``grpo``, ``dr_grpo``,
        ``rloo``, ``rloo_std``, ``reinforce_pp``, ``reinforce_pp_baseline``).
      std_ddof: ddof of the GRPO std.              drop_no_contrast: mask groups with zero reward std.
      clip_low, clip_high: PPO ratio clip (DAPO's 0.2 / 0.28).
      agg: loss aggregation (``prs.core.losses.AGG_MODES``); GRPO++ uses seq-mean-token-sum.
      kl_coef, entropy_coef: no KL and no entropy loss in GRPO++. With ``kl_coef > 0`` the state
        keeps a frozen reference copy of the parameters ``init_state`` was given (``TrainState.ref_params``,
        sharded like the policy) and the loss adds ``kl_coef · KL`` (k3, verl ``low_var_kl``); the reference
        log-probs are computed inside the update, chunked and micro-batched like the policy's.
      loss_type, ratio_level, dual_clip: ``prs.policy_loss`` options: ``"ppo"``/``"cispo"``,
        ``"token"``/``"sequence"`` (GSPO), dual-clip constant (verl's vanilla loss: 3.0) or None.
      rollout_correction, rollout_is_min, rollout_is_max: importance weights exp(logprobs −
        sampling_logprobs) on the PG term (``prs.core.token_weights.rollout_correction``; TRL's mode
        names ``token_truncate`` (TIS), ``token_mask`` (IcePop with min 0.5, max 5), ``sequence_truncate``,
        ``sequence_mask`` (MIS)), or None (``RLConfig`` sets ``token_truncate`` for an engine other than jax).
      top_entropy_quantile: train the PG term on the top-ρ entropy tokens only (1.0 = all; paper 0.2);
        the cut-off is the whole update batch's, also with ``micro_batches > 1``.
      whiten_advantages: whiten the advantages over the batch (token-weighted, verl ``masked_whiten``).
      overlong_cache, overlong_factor, overlong_filter: DAPO's soft overlong penalty over the last
        ``overlong_cache`` tokens of the budget ``RolloutConfig.max_new_tokens`` (0 = off; a response
        counts its replayed prefix under ``reroll_budget="shared"``) and overlong filtering of
        truncated rollouts.
      algorithm: ``grpo`` (the clipped policy gradient above) or ``rft``: SWE-Gym's rejection-
        sampling fine-tuning, i.e. token-mean cross-entropy on successful rollouts only, at most
        ``rft_cap`` per task chosen at random (``prs.rewards.verifiers.cap_successes_per_task``; Pan et
        al. 2025, arXiv:2412.21139). RFT runs without Prefix Sampling (``mode="baseline"``).
    """

    estimator: str = "rloo"
    std_ddof: int = 1
    drop_no_contrast: bool = True
    clip_low: float = 0.2
    clip_high: float = 0.28
    agg: str = "seq-mean-token-sum"
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    loss_type: str = "ppo"
    ratio_level: str = "token"
    dual_clip: float | None = None
    rollout_correction: str | None = None
    rollout_is_min: float | None = None
    rollout_is_max: float = 2.0
    top_entropy_quantile: float = 1.0
    whiten_advantages: bool = False
    overlong_cache: int = 0
    overlong_factor: float = 1.0
    overlong_filter: bool = False
    algorithm: str = "grpo"
    rft_cap: int = 2

    def __post_init__(self):
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"LossConfig.estimator={self.estimator!r} (loss.estimator); choose from {ESTIMATORS}")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"LossConfig.algorithm={self.algorithm!r} (loss.algorithm); choose from {ALGORITHMS}")
        if self.rft_cap < 1:
            raise ValueError(f"LossConfig.rft_cap (loss.rft_cap) must be >= 1, got {self.rft_cap}")
        if self.rft_cap != 2 and self.algorithm != "rft":
            raise ValueError(f"LossConfig.rft_cap={self.rft_cap} (loss.rft_cap) acts with algorithm='rft' only; with "
                             f"algorithm={self.algorithm!r} allowed rft_cap=2 (the default)")
        if not self.kl_coef >= 0.0:
            raise ValueError(f"LossConfig.kl_coef={self.kl_coef} (loss.kl_coef) must be >= 0 (the KL penalty to the "
                             "frozen reference policy, i.e. the parameters the run started from)")
        loss_menu.check_config(self, loss_types=LOSS_TYPES, ratio_levels=RATIO_LEVELS)


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    """When and how Prefix Sampling steers a group, and the controls (the ``schedule`` node; ``prs.rl.schedule``).

    Attributes:
      kind: ``same_step`` (re-roll skewed groups in the step that saw them) or ``next_visit`` (a
        finite pool of ``pool_size`` tasks drawn at ``pool_seed``, revisited over epochs; a skewed
        task's next visit starts all N rollouts from its stored sources' prefixes, no extra rollouts).
      reroll: ``replace`` or ``append`` re-rolled groups.
      reroll_fallback: with ``replace``, keep the original group when its re-rolled group has no
        reward contrast (all N continuations succeed or all fail). A prefix often decides the
        outcome for the whole group, and swapping a mixed group for a degenerate one would *remove*
        signal. The controller still sees the re-rolled group's pass rate either way.
      reroll_budget: ``shared``: a single-turn re-roll's whole response, replayed prefix +
        continuation, gets the rollouts' budget ``RolloutConfig.max_new_tokens``, as in the agent task
        where the prefix's turns count against the turn budget; ``extra``: the continuation gets the
        full budget on top of the prefix (re-rolls then have more room than the baseline's rollouts).
      cut_spread: the N continuations of a steered group use N cuts spread evenly over
        [ρ_b/2, min(1, 3ρ_b/2)] of the source (next_visit).
      sources: ``one`` (one success and one failure kept per task) or ``all`` (continuation i
        uses the i-th of all the group's successes / failures) (next_visit).
      control: ``none``, ``reroll_noprefix`` (steer the same groups with an empty prefix) or
        ``extra_rollouts`` (append N from-scratch rollouts for a share ``extra_share`` of the
        skewed groups).
      pool_size, pool_seed: the next-visit task pool (a multiple of ``RLConfig.tasks_per_step``), and
        the pool every ``select`` other than ``uniform`` draws its tasks from (at least one batch).
      select: which tasks get rollouts (``prs.rl.select``): ``uniform`` (the schedule's own tasks),
        ``dynamic_sampling`` (DAPO / verl filter_groups), ``selective`` (GRESO), ``screen`` (SPEED-RL),
        ``predicted`` (a discounted Beta posterior per task) or ``oracle`` (the positive control: R
        estimation rollouts per candidate, their cost left out of the ledger). Its options, None = the selector's
        default (``prs.rl.select.DEFAULTS``), are refused with another selector:
        ``ds_gen_batch_size`` (verl ``data.gen_batch_size``; default B), ``ds_max_gen_batches``
        (verl ``algorithm.filter_groups.max_num_gen_batches``, 0 = no cap; default 10),
        ``greso_p_easy``, ``greso_p_hard`` (0.5), ``greso_floor`` (0.01), ``greso_target`` (0.25),
        ``greso_step`` (0.01), ``screen_n_init`` (4), ``screen_batch`` (default B),
        ``screen_max_rounds`` (10), ``pred_discount`` (0.95), ``oracle_candidates`` (C >= B; default
        4B), ``oracle_rollouts`` (R >= 1; 16).
    """

    kind: str = "same_step"
    reroll: str = "replace"
    reroll_fallback: bool = True
    reroll_budget: str = "shared"
    cut_spread: bool = False
    sources: str = "one"
    control: str = "none"
    extra_share: float = 0.5
    pool_size: int = 256
    pool_seed: int = 0
    select: str = "uniform"
    ds_gen_batch_size: int | None = None
    ds_max_gen_batches: int | None = None
    greso_p_easy: float | None = None
    greso_p_hard: float | None = None
    greso_floor: float | None = None
    greso_target: float | None = None
    greso_step: float | None = None
    screen_n_init: int | None = None
    screen_batch: int | None = None
    screen_max_rounds: int | None = None
    pred_discount: float | None = None
    oracle_candidates: int | None = None
    oracle_rollouts: int | None = None

    def __post_init__(self):
        selector.check_config(self)
        for name, allowed in (("kind", sched.SCHEDULES), ("reroll", REROLL_MODES), ("reroll_budget", REROLL_BUDGETS),
                              ("sources", sched.SOURCES), ("control", sched.CONTROLS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"ScheduleConfig.{name}={getattr(self, name)!r} (schedule.{name}); choose from {allowed}")
        if not 0.0 <= self.extra_share <= 1.0:
            raise ValueError(f"ScheduleConfig.extra_share={self.extra_share} (schedule.extra_share) must lie in [0, 1]")
        if self.extra_share != 0.5 and self.control != "extra_rollouts":
            raise ValueError(f"ScheduleConfig.extra_share={self.extra_share} (schedule.extra_share) acts with "
                             f"control='extra_rollouts' only; with control={self.control!r} allowed extra_share=0.5 "
                             "(the default)")
        if self.control == "extra_rollouts" and self.reroll != "append":
            raise ValueError("ScheduleConfig.control='extra_rollouts' appends its extra groups: it needs "
                             "reroll='append' (schedule.reroll)")
        if self.kind == "same_step":  # next_visit's own keys act there only: a changed value is refused
            for name, off in (("cut_spread", False), ("sources", "one")):
                if getattr(self, name) != off:
                    raise ValueError(f"ScheduleConfig.{name}={getattr(self, name)!r} (schedule.{name}) acts with "
                                     f"kind='next_visit' only; with kind='same_step' allowed {name}={off!r}")
        if not self.reroll_fallback and (self.kind != "same_step" or self.reroll != "replace"):
            raise ValueError(f"ScheduleConfig.reroll_fallback=False (schedule.reroll_fallback) acts with kind='same_step' "
                             f"and reroll='replace' only; with kind={self.kind!r}, reroll={self.reroll!r} allowed "
                             "reroll_fallback=True")
        if self.kind == "next_visit" and self.reroll != "replace" and self.control != "extra_rollouts":
            raise ValueError("ScheduleConfig.reroll='append' with kind='next_visit': next_visit adds no rollouts "
                             "(allowed: reroll='replace'; 'append' only with control='extra_rollouts')")


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """Held-out pass@1 = mean reward over ``count`` fixed problems × ``samples`` samples each (the
    ``eval`` node; the samples' temperature is ``RolloutConfig.eval_temperature``)."""

    count: int = 256
    samples: int = 2

    def __post_init__(self):
        if self.count < 1 or self.samples < 1:
            raise ValueError(f"EvalConfig.count={self.count} and samples={self.samples} (eval.count, eval.samples) "
                             "must be >= 1")


PARTS = {"rollout": RolloutConfig, "optim": OptimConfig, "loss": LossConfig, "schedule": ScheduleConfig,
         "eval": EvalConfig}


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """Hyper-parameters of the RL loop (the defaults are the GRPO++ recipe at N = 8).

    Attributes:
      tasks_per_step: B, problems per step.        group_size: N, rollouts per problem.
      micro_batches: M; the update's rows are split into M micro-batches visited by a ``lax.scan``
        that sums their gradients. Each micro-batch loss divides by the *whole* batch's count
        (``global_norm``), so the summed gradient equals the full-batch one for every ``agg``.
        R must be a multiple of M (times the mesh's batch shards).
      logits_chunk: time steps per block of the chunked LM head (``prs.models.lm_head``): the
        update never holds more than [R/M, logits_chunk, V] logits. A width <= logits_chunk runs
        unchunked.
      rollout, optim, loss, schedule, eval: the parts (``RolloutConfig``, ``OptimConfig``,
        ``LossConfig``, ``ScheduleConfig``, ``EvalConfig``).
    """

    tasks_per_step: int = 16
    group_size: int = 8
    micro_batches: int = 1
    logits_chunk: int = 512
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)

    def __post_init__(self):
        for name, cls in PARTS.items():
            if not isinstance(getattr(self, name), cls):
                raise TypeError(f"RLConfig.{name} must be a {cls.__name__}, got {type(getattr(self, name)).__name__}")
        ro, loss = self.rollout, self.loss
        if ro.engine != "jax" and loss.rollout_correction is None:  # another engine's log-probs: TIS
            object.__setattr__(self, "loss", dataclasses.replace(loss, rollout_correction="token_truncate"))
        if not (isinstance(self.micro_batches, int) and self.micro_batches >= 1):
            raise ValueError(f"RLConfig.micro_batches (algo.micro_batches) must be an int >= 1, got {self.micro_batches!r}")
        if not (isinstance(self.logits_chunk, int) and self.logits_chunk >= 1):
            raise ValueError(f"RLConfig.logits_chunk (algo.logits_chunk) must be an int >= 1, got {self.logits_chunk!r}")
        if self.group_size < 2:
            raise ValueError(f"RLConfig.group_size (N; algo.group_size) must be >= 2, got {self.group_size}")
        if self.tasks_per_step < 1:
            raise ValueError(f"RLConfig.tasks_per_step (algo.tasks_per_step) must be >= 1, got {self.tasks_per_step}")
        if (ro.temperature, ro.top_k, ro.top_p) != (1.0, 0, 1.0) and self.loss.rollout_correction is None:
            raise ValueError(f"RolloutConfig temperature={ro.temperature}, top_k={ro.top_k}, top_p={ro.top_p}: "
                             "without a rollout_correction training samples from the raw policy only (allowed: "
                             "temperature=1.0, top_k=0, top_p=1.0); set loss.rollout_correction (e.g. "
                             "token_truncate) to train on an adjusted sampler with importance weights p/q")
        sc = self.schedule
        selector.check_rl(self)
        if sc.kind == "next_visit":
            if sc.pool_size < self.tasks_per_step or sc.pool_size % self.tasks_per_step:
                raise ValueError(f"ScheduleConfig.pool_size={sc.pool_size} (schedule.pool_size) must be a positive "
                                 f"multiple of tasks_per_step={self.tasks_per_step} for kind='next_visit' (an epoch "
                                 "is pool_size/tasks_per_step steps)")
            if loss.algorithm != "grpo":
                raise ValueError(f"LossConfig.algorithm={loss.algorithm!r} with schedule.kind='next_visit'; "
                                 "allowed: 'grpo'")


FLAT = {f.name: part for part, cls in PARTS.items() for f in dataclasses.fields(cls)}  # field -> its part
RENAMED = {"rollout_engine": ("rollout", "engine"), "rollout_memory_utilization": ("rollout", "gpu_memory_utilization"),
           "rollout_tensor_parallel": ("rollout", "tensor_parallel_size"), "eval_count": ("eval", "count"),
           "eval_samples": ("eval", "samples"), "eval_temperature": ("rollout", "eval_temperature"),
           "schedule": ("schedule", "kind")}


def nested_key(flat: str) -> str | None:
    """The nested key of a flat ``RLConfig`` keyword (``"lr"`` -> ``"optim.lr"``), else None."""
    if flat in RENAMED:
        return ".".join(RENAMED[flat])
    return f"{FLAT[flat]}.{flat}" if flat in FLAT else None


_dataclass_init = RLConfig.__init__


@functools.wraps(_dataclass_init)
def _init(self, *args, **kwargs):
    for key, value in kwargs.items():
        where = nested_key(key)
        if where is not None and not (key in PARTS and isinstance(value, PARTS[key])):
            part, name = where.split(".")
            raise TypeError(f"RLConfig({key}=...): the field is {where}; write RLConfig({part}="
                            f"{PARTS[part].__name__}({name}=...))")
    _dataclass_init(self, *args, **kwargs)


RLConfig.__init__ = _init
