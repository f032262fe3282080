"""Episodes: rollouts as the trainer consumes them, and single-turn rollouts with prefix replay.

``Episodes`` is the one type every task's rollouts produce (single-turn here, multi-turn in
``prs.tasks.agent_rollouts``); ``SingleTurnRollouts`` samples a prompt's N rollouts and its
re-rollouts from prompt + a replayed prefix. Tasks depend on this module, never on the trainer.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from prs.models.lm_head import lm_head_logprobs
from prs.models.qwen3 import forward_hidden
from prs.models.sampler import Rollout, SamplerConfig
from prs.parallel import multihost
from prs.rollout.engine import ENGINES, RolloutEngine
from prs.rollout.registry import make_engine


def _pad_width(x: np.ndarray | jax.Array, width: int, fill) -> jax.Array:
    """Right-pads the last axis of ``x [R, L]`` to ``width``."""
    extra = width - x.shape[1]
    if extra < 0:
        raise ValueError(f"internal: rollout width {x.shape[1]} exceeds the training width {width}")
    return jnp.pad(jnp.asarray(x), ((0, 0), (0, extra)), constant_values=fill)


class Episodes(NamedTuple):
    """Rollouts as the trainer consumes them, whatever the task (single- or multi-turn).

    ``units`` are what a cut point counts: generated tokens for a single-turn task, policy turns
    for a multi-turn agent task (a prefix is cut at a turn boundary there).
    """

    tokens: jax.Array       # [R, L] int32 task prompt, (replayed prefix,) generated/observation tokens, pad
    positions: jax.Array    # [R, L] int32
    valid: jax.Array        # [R, L] bool
    policy_mask: jax.Array  # [R, L] bool, tokens the current policy generated in this call
    logprobs: jax.Array     # [R, L] f32, their sampling log-probs (raw policy, temperature 1)
    rewards: jax.Array      # [R] f32 binary outcome of the whole episode (prefix + continuation)
    units: jax.Array        # [R] int32 policy units of the episode (tokens or turns)
    replayed: jax.Array     # [R] int32 tokens replayed from a source instead of generated
    env_steps: jax.Array    # [R] int32 environment executions (replayed actions included)
    sampling_logprobs: jax.Array  # [R, L] f32 log q(y) under the temperature/top-k/top-p distribution sampled
    truncated: jax.Array    # [R] bool the last generation hit its token budget without a stop token


def episodes_from_rollout(ro: Rollout, rewards: jax.Array, width: int, pad_id: int, *, replayed=None) -> Episodes:
    """Single-turn ``Rollout`` -> ``Episodes`` padded to ``width``; units = generated tokens."""
    r = ro.tokens.shape[0]
    zeros = jnp.zeros((r,), jnp.int32)
    return Episodes(
        tokens=_pad_width(ro.tokens, width, pad_id),
        positions=_pad_width(ro.positions, width, 0),
        valid=_pad_width(ro.valid, width, False),
        policy_mask=_pad_width(ro.policy_mask, width, False),
        logprobs=_pad_width(ro.logprobs, width, 0.0),
        rewards=rewards.reshape(-1).astype(jnp.float32),
        units=jnp.sum(ro.policy_mask, axis=1).astype(jnp.int32),
        replayed=zeros if replayed is None else jnp.asarray(replayed, jnp.int32),
        env_steps=zeros,
        sampling_logprobs=_pad_width(ro.sampling_logprobs, width, 0.0),
        truncated=jnp.asarray(ro.truncated, bool),
    )


def take_rows(ep: Episodes, rows) -> Episodes:
    return Episodes(*(x[rows] for x in ep))


def fresh_rows(replayed, *, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows [F], problem [F])``: the fresh rows of ``R = groups·N`` episodes (``replayed [R] == 0``:
    nothing replayed from a source) and the problem each belongs to (row r: problem r // N).

    The one rule of every task's ``episode_metrics``: a re-roll (Prefix Sampling's, or an oracle's
    merged into a training call, ``prs.tasks.mechanism.OracleRollouts``) continues a prefix the policy
    did not write in that call, so its reach, length or strategy is partly the source's; the metrics
    of the policy's own rollouts count fresh rows only. ``F = 0`` when every row is a re-roll (the
    metrics are then undefined: None)."""
    rep = np.asarray(replayed).reshape(-1)
    if groups < 1 or rep.size % groups:
        raise ValueError(f"fresh_rows: {rep.size} episodes are not a multiple of {groups} problems")
    rows = np.flatnonzero(rep == 0)
    return rows, rows // (rep.size // groups)


class Rollouts(Protocol):
    """What the trainer and the schedules ask of a task's rollouts (``SingleTurnRollouts``,
    ``prs.tasks.agent_rollouts.AgentRollouts``); none of them holds the trainer."""

    width: int                 # L, the fixed episode width
    multi_turn: bool           # True: a re-roll replays >= 1 unit (no fresh rows in a re-roll call)
    token_budget: int | None   # tokens a response may hold (DAPO's overlong options), None: no such budget

    def rollout(self, params, problems, key, *, group_size: int, evaluation: bool = False) -> Episodes:
        """``group_size`` fresh episodes per problem (rows problem-major) -> ``Episodes`` [R, L]."""

    def reroll(self, params, problems, source: Episodes, cut: np.ndarray, key, *, group_size: int) -> Episodes:
        """``group_size`` continuations of each source row [G] after its first ``cut[g]`` units."""

    def pop_metrics(self) -> dict[str, float]:
        """Per-step rollout metrics since the last call (``rollout/*``)."""


SAMPLING_DTYPES = ("param", "bfloat16", "float16", "float32")


def _count(x) -> bool:
    """An int >= 1 (not a bool)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 1


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    """How rollouts are sampled and by which engine (``RLConfig.rollout``; the ``rollout`` config node).

    Every rollout object (``SingleTurnRollouts``, ``prs.tasks.agent_rollouts.AgentRollouts``) reads
    this; tunix keeps the same split (``RolloutConfig`` beside the learner's ``GRPOConfig``).

    Attributes:
      temperature, top_k, top_p: sampling of training rollouts. The update's ``old_logp`` is the raw
        policy's log-probability p (temperature 1), so samples from an adjusted distribution q need
        the importance weight p/q: values other than 1 / 0 / 1 are accepted only together with a
        ``LossConfig.rollout_correction`` (``RLConfig`` checks the pair). The jax engine samples any
        of them; ``engine="vllm"`` only the raw policy (1 / 0 / 1) or greedily (``temperature=0``).
      eval_temperature: temperature of the held-out evaluation's samples (no top-k / top-p); with
        ``engine="vllm"`` 1.0 or 0.
      max_new_tokens: tokens per single-turn response (and per re-rollout response, see
        ``ScheduleConfig.reroll_budget``); None: the task's own budget.
      row_chunk: sample the R rows in calls of ``row_chunk`` rows (``SamplerConfig.row_chunk``: only
        that many rows' KV cache is live; tokens identical to one call, per-row key streams); None: one call.
      row_parts: ``SamplerConfig.row_parts`` (the decode step's cache writes and attention in this many
        concurrent row parts; 1: one, the program committed runs replay; None: 2 on a single device
        for an even R >= 8). Same tokens; log-probs move by float rounding.
      attend_buckets: ``SamplerConfig.attend_buckets`` (the decode loop in segments, each attending only
        the cache slots it can have filled, the smallest of these lengths that holds them); None: every
        step attends the whole cache. Same tokens; log-probs move by float rounding. Not with
        ``continuous_slots``.
      prefill_group: each group's N rows (one prompt, or one prompt + replayed prefix) prefilled once and
        the cache copied to its rows (``SamplerConfig.prefill_group = N``; fresh and re-roll calls and
        evaluation); same tokens, log-probs move by float rounding. The jax engine, without
        ``continuous_slots``.
      continuous_slots: continuous batching over this many decode slots
        (``prs.models.continuous.sample_continuous``: a slot whose row stops takes the next pending
        row; same tokens as static sampling, per-row key streams); None: static batches.
      reroll_group_buckets: a re-roll call (and a control's extra groups, an agent's next-visit
        continuations) samples the g steered groups padded to the smallest power of two >= g (at most
        B) instead of to all B groups: about g/B of the call's work, one compile per bucket
        (``prs.rl.schedule.reroll_groups``); the first g groups' tokens are the unbucketed call's.
      sampling_dtype: ``param`` (the sampler runs on the training parameters) or a dtype name
        (``bfloat16``, ``float16``, ``float32``) for a sampling copy cast from them at every step.
        A bf16 copy halves the sampler's weights next to fp32 masters; its log-probabilities (the
        update's ``old_logp``) are then those of the bf16 policy, so the PPO ratio starts near, not
        exactly at, 1 (the usual trainer/rollout-engine mismatch).
      engine: ``jax`` (the jit-compiled sampler, whose log-probs are the trainer's own) or ``vllm``
        (``prs.rollout.vllm_engine``; single-turn and agent tasks, one process, no mesh): its rollouts'
        ``old_logp`` are recomputed by the trainer's forward pass and vLLM's log-probs become the behaviour policy
        of the rollout correction, which then defaults to ``token_truncate`` (TIS); the mismatch is
        logged (``rollout/*``). With ``vllm`` the jax sampler's ``row_chunk``, ``row_parts`` (1),
        ``attend_buckets``, ``prefill_group`` and ``continuous_slots`` are refused (vLLM batches,
        pages and shares prefixes itself), and so is any sampling but the raw policy or greedy.
      gpu_memory_utilization, tensor_parallel_size: vLLM's ``LLM`` keywords (the share of each GPU its
        weights and KV pages may take, None: vLLM's default; its tensor parallelism); ``python -m
        experiments.plan ... rollout=vllm`` plans with them. Only with ``engine="vllm"``.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    eval_temperature: float = 1.0
    max_new_tokens: int | None = None
    row_chunk: int | None = None
    row_parts: int | None = 1
    attend_buckets: tuple[int, ...] | None = None
    prefill_group: bool = False
    continuous_slots: int | None = None
    reroll_group_buckets: bool = False
    sampling_dtype: str = "param"
    engine: str = "jax"
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int = 1

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ValueError(f"RolloutConfig.engine={self.engine!r} (rollout.engine); choose from {ENGINES}")
        mu, tp = self.gpu_memory_utilization, self.tensor_parallel_size
        if mu is not None and (isinstance(mu, bool) or not isinstance(mu, (int, float)) or not 0 < mu <= 1):
            raise ValueError(f"RolloutConfig.gpu_memory_utilization (rollout.gpu_memory_utilization) must be None or "
                             f"a number in (0, 1], got {mu!r}")
        if not _count(tp):
            raise ValueError(f"RolloutConfig.tensor_parallel_size (rollout.tensor_parallel_size) must be an int >= 1, "
                             f"got {tp!r}")
        if self.engine == "jax" and (mu is not None or tp != 1):
            raise ValueError("RolloutConfig.gpu_memory_utilization / tensor_parallel_size (rollout.gpu_memory_"
                             "utilization, rollout.tensor_parallel_size) are vLLM's: they need rollout.engine=vllm "
                             "(the jax engine shards by the run's mesh)")
        if self.sampling_dtype not in SAMPLING_DTYPES:
            raise ValueError(f"RolloutConfig.sampling_dtype={self.sampling_dtype!r} (rollout.sampling_dtype); "
                             f"choose from {SAMPLING_DTYPES}")
        if self.row_chunk is not None and (isinstance(self.row_chunk, bool) or int(self.row_chunk) < 1):
            raise ValueError(f"RolloutConfig.row_chunk (rollout.row_chunk) must be None or an integer >= 1, "
                             f"got {self.row_chunk}")
        if self.row_parts is not None and not (_count(self.row_parts)):
            raise ValueError(f"RolloutConfig.row_parts (rollout.row_parts) must be None or an integer >= 1, "
                             f"got {self.row_parts!r}")
        if self.attend_buckets is not None:
            ab = self.attend_buckets
            if (isinstance(ab, (str, bytes)) or not hasattr(ab, "__iter__") or not len(ab)
                    or any(not _count(b) for b in ab)):
                raise ValueError(f"RolloutConfig.attend_buckets (rollout.attend_buckets) must be None or a non-empty "
                                 f"list of integers >= 1, got {ab!r}")
            object.__setattr__(self, "attend_buckets", tuple(sorted({int(b) for b in ab})))
            if self.continuous_slots is not None:
                raise ValueError("RolloutConfig.attend_buckets (rollout.attend_buckets) needs continuous_slots=None "
                                 "(continuous batching's rows start at different steps)")
        if self.continuous_slots is not None and not _count(self.continuous_slots):
            raise ValueError(f"RolloutConfig.continuous_slots (rollout.continuous_slots) must be None or an integer "
                             f">= 1, got {self.continuous_slots}")
        if not isinstance(self.prefill_group, bool):
            raise ValueError(f"RolloutConfig.prefill_group (rollout.prefill_group) must be true or false, "
                             f"got {self.prefill_group!r}")
        if self.prefill_group and (self.continuous_slots is not None or self.engine != "jax"):
            raise ValueError("RolloutConfig.prefill_group (rollout.prefill_group) needs rollout.engine=jax and "
                             "continuous_slots=None (vLLM's prefix cache shares a group's prefill by itself)")
        if not isinstance(self.reroll_group_buckets, bool):
            raise ValueError(f"RolloutConfig.reroll_group_buckets (rollout.reroll_group_buckets) must be true or "
                             f"false, got {self.reroll_group_buckets!r}")
        if self.engine == "vllm":
            self._check_vllm()

    def _check_vllm(self) -> None:
        """What ``engine="vllm"`` does not do, refused here rather than at the first sampling call or
        silently: the jax sampler's batching knobs, and any sampler but the raw policy or greedy."""
        for name, off in (("row_chunk", None), ("row_parts", 1), ("attend_buckets", None)):
            if getattr(self, name) != off:
                raise ValueError(f"RolloutConfig.{name}={getattr(self, name)!r} (rollout.{name}) is the jax sampler's; "
                                 f"rollout.engine=vllm batches and pages its KV cache itself: allowed {name}="
                                 f"{'null' if off is None else off}")
        if not (self.temperature == 0 or (self.temperature, self.top_k, self.top_p) == (1.0, 0, 1.0)):
            raise ValueError(f"RolloutConfig temperature={self.temperature}, top_k={self.top_k}, top_p={self.top_p} "
                             "(rollout.temperature, rollout.top_k, rollout.top_p) with rollout.engine=vllm: vLLM returns "
                             "the raw policy's log-probs only; allowed: temperature=1.0, top_k=0, top_p=1.0 (the raw "
                             "policy) or temperature=0 (greedy)")
        if self.eval_temperature not in (0.0, 1.0):
            raise ValueError(f"RolloutConfig.eval_temperature={self.eval_temperature} (rollout.eval_temperature) with "
                             "rollout.engine=vllm: allowed 1.0 (the raw policy) or 0 (greedy)")

    @property
    def engine_options(self) -> tuple[tuple[str, Any], ...]:
        """(name, value) pairs for another engine's constructor (vLLM's ``LLM`` keywords) set here."""
        out = []
        if self.gpu_memory_utilization is not None:
            out.append(("gpu_memory_utilization", float(self.gpu_memory_utilization)))
        if self.tensor_parallel_size != 1:
            out.append(("tensor_parallel_size", int(self.tensor_parallel_size)))
        return tuple(out)

    @property
    def engine_dtype(self) -> str:
        """The dtype name another engine than jax runs in: ``bfloat16`` for a bf16 sampling copy, else ``float32``."""
        return "bfloat16" if self.sampling_dtype == "bfloat16" else "float32"


SamplingSettings = RolloutConfig  # the name of the rollout objects' ``sampling=`` argument


class EngineClient:
    """A rollout object's link to its ``prs.rollout.engine.RolloutEngine`` (``SingleTurnRollouts``,
    ``prs.tasks.agent_rollouts.AgentRollouts``): which weights the engine samples with, and the
    log-probs the trainer takes from another engine's rollouts.

      * the jax engine takes a reference to the parameters for the calls of one ``engine_for``
        block only (a sampling-dtype copy of the weights is freed after the step);
      * another engine (vLLM) is built from the first parameters it samples with (``engine`` is a
        factory ``params -> engine``) and gets each new policy pushed once (``update_params``, in
        place; the seconds logged as ``rollout/sync_s``);
      * another engine's rollouts get the trainer's own log-probs as ``logprobs`` (the update's
        ``old_logp``, ``trainer_logprobs``) and keep the engine's as ``sampling_logprobs`` (the
        rollout correction's behaviour policy), the gap logged (``pop_metrics``).
    """

    def _init_engine(self, engine, *, model_cfg, logits_chunk: int) -> None:
        """``engine``: a ``RolloutEngine`` or a callable ``params -> engine`` called at the first
        ``engine_for`` (an engine built from the policy's weights, e.g. vLLM)."""
        factory = not hasattr(engine, "generate")
        self.engine = None if factory else engine
        self._make_engine = engine if factory else None
        self.model_cfg, self.logits_chunk = model_cfg, logits_chunk
        self._pushed = None  # the parameters another engine holds (pushed once per new policy)
        self.mismatch: dict[str, list[float]] = {}  # per call since the last pop_metrics (engine != jax)

    @contextlib.contextmanager
    def engine_for(self, params):
        """The engine, sampling with ``params`` for the calls inside the block (class docstring)."""
        if self.engine is None:
            self.engine = self._make_engine(params)
        if self.engine.name == "jax":  # a reference, no copy: held for this block only
            self.engine.update_params(params)
            try:
                yield self.engine
            finally:
                self.engine.update_params(None)
            return
        if params is not self._pushed:  # a new policy: push it (vLLM: in place, timed)
            self.engine.update_params(params)
            self._pushed = params
            self.mismatch.setdefault("sync_s", []).append(float(self.engine.last_sync_s))
        yield self.engine

    def trainer_logprobs(self, params, tokens, positions, valid, policy_mask, sampling_logprobs, *,
                         greedy: bool) -> jax.Array:
        """The trainer's log π(y) of each policy token of another engine's rollout ``[R, L]`` (0
        elsewhere), the gap to the engine's ``sampling_logprobs`` recorded (not for greedy calls,
        where q is a point mass)."""
        own = _policy_logprobs(params, jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(valid),
                               cfg=self.model_cfg, chunk=self.logits_chunk)
        own = jnp.where(jnp.asarray(policy_mask), own, 0.0)
        if not greedy:
            m = np.asarray(policy_mask)
            d = (np.asarray(own) - np.asarray(sampling_logprobs))[m]  # log p_trainer - log q_engine
            for name, v in (("logp_abs_diff", np.abs(d)), ("kl_k1", -d), ("kl_k3", np.expm1(d) - d)):
                self.mismatch.setdefault(name, []).append(float(v.mean()) if v.size else 0.0)
        return own

    def pop_metrics(self) -> dict[str, float]:
        """``rollout/*`` means over the calls since the last pop (another engine than jax): the mean
        |log p_trainer − log q_engine| per policy token, the engine-vs-trainer KL(q‖p) estimates k1
        and k3 (on tokens drawn from q), and the weight-sync seconds."""
        out = {f"rollout/{k}": float(np.mean(v)) for k, v in self.mismatch.items() if v}
        self.mismatch = {}
        return out


def make_rollout_engine(sampling: SamplingSettings, *, model_cfg, mesh=None, max_model_len: int,
                        continuous_slots: int | None = None):
    """The engine ``sampling.engine`` names: the jax engine itself (on ``mesh``, with
    ``continuous_slots``), or for another engine a factory ``params -> engine`` (built from the
    first weights it samples with; requests of at most ``max_model_len`` tokens, ``sampling``'s
    dtype and options). Another engine runs on one process: a mesh or continuous slots are a
    ValueError naming ``rollout.engine``."""
    if sampling.engine == "jax":
        return make_engine("jax", cfg=model_cfg, mesh=mesh, continuous_slots=continuous_slots)
    if mesh is not None or continuous_slots is not None:
        raise ValueError(f"RolloutConfig.engine={sampling.engine!r} (rollout.engine) runs on one process without a "
                         "mesh and batches continuously by itself: mesh and continuous_slots must be None "
                         "(use rollout.engine=jax on a mesh)")
    return functools.partial(_engine_from_params, sampling.engine, cfg=model_cfg, max_model_len=int(max_model_len),
                             dtype=sampling.engine_dtype, **dict(sampling.engine_options))


class SingleTurnRollouts(EngineClient):
    """Sampling and prefix replay for a single-turn task (prompt -> one generated answer).

    A re-rollout's input is the task prompt followed by the source's first ``cut`` generated
    tokens; the sampler generates the continuation. With ``reroll_budget="shared"`` (default) the
    whole response, replayed prefix + continuation, gets the rollouts' budget T (the continuation
    at most T - cut tokens), so a re-roll never has more room than a rollout; ``"extra"`` gives the
    continuation the full T on top of the prefix.
    Two sampler shapes per run: ``[R, P]`` and ``[R, P + T]`` (prompt-width buckets).

    Args:
      task: a single-turn task (``prompts``, ``rewards``, ``eval_problems``, ``eos_id``, ``pad_id``).
      engine: a ``prs.rollout.engine.RolloutEngine``, or a callable ``params -> engine`` called at
        the first sampling call (an engine built from the policy's weights, e.g. vLLM).
      model_cfg: the policy's ``ModelConfig`` (the trainer's log-probs of another engine's rollouts).
      scfg, eval_scfg: the ``SamplerConfig`` of training and evaluation calls.
      width: L, the fixed training width the episodes are padded to.
      mesh: the mesh several processes score their own rows over (None: one process).
      reroll_budget: ``shared`` or ``extra`` (above).  logits_chunk: the LM head's time chunk.

    ``from_settings`` builds one from a task and a ``RolloutConfig``.
    """

    multi_turn = False  # a re-roll row may have cut 0 (a fresh row in the same call)

    def __init__(self, task: Any, *, engine, model_cfg, scfg: SamplerConfig, eval_scfg: SamplerConfig,
                 width: int, mesh=None, reroll_budget: str = "shared", logits_chunk: int = 512,
                 prefill_group: bool = False):
        if prefill_group and multihost.multi_process(mesh):
            raise ValueError("RLConfig.rollout.prefill_group (rollout.prefill_group) runs on one process: a process's share "
                             "of a call's rows can cut a group")
        self.prefill_group = bool(prefill_group)
        self.task, self.mesh = task, mesh
        self.scfg, self.eval_scfg, self.width = scfg, eval_scfg, int(width)
        self.reroll_budget = reroll_budget
        self._init_engine(engine, model_cfg=model_cfg, logits_chunk=logits_chunk)
        if getattr(task, "rewards_jittable", True):
            self._rewards = jax.jit(task.rewards, static_argnames=("group_size",))
        else:
            self._rewards = task.rewards

    @classmethod
    def from_settings(cls, task: Any, sampling: RolloutConfig, *, model_cfg, mesh=None,
                      reroll_budget: str = "shared", logits_chunk: int = 512) -> "SingleTurnRollouts":
        """The task's sampler configurations (prompt-width buckets, stop and pad ids, budget T =
        ``sampling.max_new_tokens`` or the task's), width ``L = P + 2T``, and the named engine."""
        t_new = sampling.max_new_tokens or task.max_new_tokens
        prompt_w = int(task.prompts(task.eval_problems(count=1))[0].shape[1])
        scfg = SamplerConfig(max_new_tokens=t_new, temperature=sampling.temperature, top_k=sampling.top_k,
                             top_p=sampling.top_p, eos_id=task.eos_id, pad_id=task.pad_id,
                             buckets=(prompt_w, prompt_w + t_new), row_chunk=sampling.row_chunk,
                             row_parts=sampling.row_parts, attend_buckets=sampling.attend_buckets)
        eval_scfg = dataclasses.replace(scfg, temperature=sampling.eval_temperature, top_k=0, top_p=1.0)
        if sampling.continuous_slots is not None and mesh is not None:
            raise ValueError("RLConfig.rollout.continuous_slots (rollout.continuous_slots) needs mesh=None (single device)")
        width = prompt_w + 2 * t_new  # L: fixed training width
        engine = make_rollout_engine(sampling, model_cfg=model_cfg, mesh=mesh, max_model_len=width,
                                     continuous_slots=sampling.continuous_slots)
        return cls(task, engine=engine, model_cfg=model_cfg, scfg=scfg, eval_scfg=eval_scfg, width=width,
                   mesh=mesh, reroll_budget=reroll_budget, logits_chunk=logits_chunk,
                   prefill_group=sampling.prefill_group)

    @property
    def token_budget(self) -> int:
        """T, the tokens a response may hold (what DAPO's overlong options measure against)."""
        return int(self.scfg.max_new_tokens)

    def _sample(self, params, rows, rows_len, key, scfg, budget=None):
        """The engine's rollout of input rows (prompt + replayed prefix). The jax engine (a mesh:
        each process feeds its own rows and all get the whole rollout on the host; continuous
        slots: same tokens) needs nothing more; another engine's rollout gets the trainer's own
        log-probs (``EngineClient``)."""
        with self.engine_for(params) as engine:
            ro = engine.generate(rows, rows_len, key=key, scfg=scfg, budget=budget)
        if engine.name == "jax":
            return ro
        own = self.trainer_logprobs(params, ro.tokens, ro.positions, ro.valid, ro.policy_mask, ro.sampling_logprobs,
                                    greedy=scfg.temperature == 0)
        return ro.replace(logprobs=own)

    def _score(self, problems, ro, group_size: int):
        if multihost.multi_process(self.mesh):  # each process scores its own rows
            return multihost.score_rows(self._rewards, self.task, problems, ro, group_size=group_size,
                                        mesh=self.mesh)
        return self._rewards(problems, ro, group_size=group_size)

    def _grouped(self, scfg: SamplerConfig, group_size: int) -> SamplerConfig:
        """``scfg`` with ``prefill_group = group_size`` when the run shares a group's prefill (every
        call here repeats each input row ``group_size`` times)."""
        return dataclasses.replace(scfg, prefill_group=group_size) if self.prefill_group else scfg

    def rollout(self, params, problems, key, *, group_size: int, evaluation: bool = False) -> Episodes:
        prompt, plen = self.task.prompts(problems)
        ro = self._sample(params, np.repeat(prompt, group_size, axis=0), np.repeat(plen, group_size), key,
                          self._grouped(self.eval_scfg if evaluation else self.scfg, group_size))
        r = self._score(problems, ro, group_size)
        return episodes_from_rollout(ro, r, self.width, self.task.pad_id)

    def reroll(self, params, problems, source: Episodes, cut: np.ndarray, key, *, group_size: int) -> Episodes:
        """``group_size`` re-rollouts of each source row [G] continuing its first ``cut[g]`` units."""
        _, plen = self.task.prompts(problems)                                    # [G] task prompt lengths
        new_len = plen + cut                                                     # prompt + replayed prefix
        width = int(new_len.max())
        idx = np.arange(width)[None, :]
        rows = np.where(idx < new_len[:, None], np.asarray(source.tokens)[:, :width], self.task.pad_id)
        budget = None
        if self.reroll_budget == "shared":
            budget = np.repeat(self.scfg.max_new_tokens - np.asarray(cut), group_size).astype(np.int32)  # [G*N]
            if budget.size and budget.min() < 1:
                raise ValueError(f"internal: re-roll cut {int(np.max(cut))} leaves no response budget "
                                 f"(max_new_tokens={self.scfg.max_new_tokens})")
        ro = self._sample(params, np.repeat(rows, group_size, axis=0), np.repeat(new_len, group_size), key,
                          self._grouped(self.scfg, group_size), budget=budget)
        r = self._score(problems, ro, group_size)
        return episodes_from_rollout(ro, r, self.width, self.task.pad_id, replayed=np.repeat(cut, group_size))


def _engine_from_params(name: str, params, *, cfg, max_model_len: int, dtype: str, **options) -> RolloutEngine:
    """Another engine than jax, built holding ``params`` (vLLM writes them as its first checkpoint);
    ``options``: the engine's further constructor keywords (``RolloutConfig.engine_options``)."""
    return make_engine(name, cfg=cfg, params=params, max_model_len=max_model_len, dtype=dtype, **options)


@functools.partial(jax.jit, static_argnames=("cfg", "chunk"))
def _policy_logprobs(params, tokens, positions, valid, *, cfg, chunk: int) -> jax.Array:
    """log π(tokens[:, t] | tokens[:, :t]) under ``params`` -> [R, L] (0 at t = 0): what the
    update's forward pass computes, for rollouts of another engine."""
    hidden = forward_hidden(params, tokens[:, :-1], cfg=cfg, positions=positions[:, :-1], valid=valid[:, :-1])
    lp, _ = lm_head_logprobs(params, hidden, tokens[:, 1:], cfg=cfg, chunk=chunk)
    return jnp.pad(lp, ((0, 0), (1, 0)))
