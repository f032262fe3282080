"""Hugging Face checkpoints <-> prs parameters: ``config.json`` + ``*.safetensors`` directories.

    cfg, params = load_checkpoint("/models/Qwen3-4B", dtype=jnp.float32)          # bf16 weights, fp32 compute
    cfg, params = load_checkpoint(path, mesh=mesh)                                # sharded over the mesh
    with jax.set_mesh(mesh): logits = jax.jit(partial(forward, cfg=cfg))(params, tokens)  # Explicit axes
    save_checkpoint("/tmp/tiny", params, cfg, max_shard_size="2GB")               # back to the HF layout
    load_checkpoint("Qwen/Qwen2.5-Math-1.5B")        # a model id: its snapshot in the local HF cache

Supported architectures (``config.json`` ``model_type``, else ``architectures[0]``), all mapped onto
``prs.models.qwen3``'s decoder (pre-norm, grouped-query attention, RoPE rotate-half, SwiGLU, RMSNorm):

    qwen3   Qwen3ForCausalLM   per-head q/k RMSNorm (``qk_norm=True``), no biases, ``head_dim`` explicit
    qwen2   Qwen2ForCausalLM   q/k/v biases (``qkv_bias=True``), no q/k norm (Qwen2, Qwen2.5, Qwen2.5-Math,
                               DeepSeek-R1-Distill-Qwen)
    llama   LlamaForCausalLM   no q/k norm, no biases, ``head_dim`` defaults to D / K; RoPE plain or
                               ``rope_type: llama3`` (Llama 3.1+; ``ModelConfig.rope_scaling``)
    mistral MistralForCausalLM as llama, without a sliding window

Everything else raises ``ValueError`` naming the field: another ``model_type`` (one line listing the
supported ones), ``attention_bias``/``mlp_bias`` true on llama/mistral (o_proj / MLP biases), a RoPE
type other than default and llama3 (linear, dynamic, yarn), a sliding window, an activation other
than SiLU.

A checkpoint is a directory or a Hugging Face model id (``org/name``) already in the local cache
(``resolve_checkpoint``: ``huggingface_hub.snapshot_download(local_files_only=True)`` under
``$HF_HUB_CACHE`` or ``$HF_HOME/hub``); nothing is downloaded.

Names and transposes (HF ``nn.Linear.weight`` is ``[out, in]``; prs kernels are ``[in, out]`` with
layers stacked on ``[L]``) are those of ``prs.models.qwen3``'s docstring; with ``tie_word_embeddings`` the
LM head is ``embed_tokensᵀ`` and a stored ``lm_head.weight`` is ignored. RoPE: θ from
``rope_theta`` (transformers 4) or ``rope_parameters.rope_theta`` (transformers 5).

dtypes: ``param_dtype`` (storage) defaults to the checkpoint's ``torch_dtype``/``dtype``
(bfloat16 for released Qwen3), ``dtype`` (matmul compute) defaults to ``param_dtype``; norms,
softmax and logits are float32 in ``prs.models.qwen3`` regardless.

The safetensors format (a little-endian u64 header length, a JSON header of
``{name: {dtype, shape, data_offsets}}``, then raw bytes) is read here with ``numpy.memmap``, so
loading needs neither torch nor the ``safetensors`` package, and a sharded load reads from disk only
the slices each device holds (``jax.make_array_from_callback``): a model larger than one device's
memory never exists whole on one device (host RAM holds at most one layer's slice at a time).
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import struct
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from prs.models.hub import hf_hub_cache, resolve_checkpoint  # noqa: F401  (re-exported)
from prs.models.qwen3 import HF_LAYER_NAMES, ModelConfig, Params, init_params
from prs.parallel.explicit import has_explicit_axes
from prs.parallel.sharding import param_shardings

SUPPORTED = ("qwen3", "qwen2", "llama", "mistral")
_ARCHITECTURES = {"Qwen3ForCausalLM": "qwen3", "Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama",
                  "MistralForCausalLM": "mistral"}
# transformers' config-class defaults for keys a config.json may omit (Qwen3Config, Qwen2Config,
# MistralConfig; LlamaConfig: num_key_value_heads = num_attention_heads, head_dim = D / K)
_CLASS_DEFAULTS = {"qwen3": {"num_key_value_heads": 32, "head_dim": 128}, "qwen2": {"num_key_value_heads": 32},
                   "mistral": {"num_key_value_heads": 8, "sliding_window": 4096}, "llama": {}}
_HF_SIZE_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
                  "GIB": 2**30, "TIB": 2**40}
DEFAULT_MAX_SHARD_SIZE = "5GB"

_ST_DTYPES = {  # safetensors dtype tag <-> numpy dtype
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype(np.int64), "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16), "I8": np.dtype(np.int8), "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
}
_ST_TAGS = {v: k for k, v in _ST_DTYPES.items()}
_NAMED_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16,
                 "float64": jnp.float64}


# ----------------------------------------------------------------------------- safetensors


def read_safetensors(path) -> dict[str, np.ndarray]:
    """Tensors of one ``.safetensors`` file as read-only ``numpy.memmap`` views (nothing is read
    until sliced). Raises ValueError on a malformed header or an unknown dtype."""
    path = pathlib.Path(path)
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"read_safetensors: {path} is too short to be a safetensors file")
        (n,) = struct.unpack("<Q", head)
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"read_safetensors: {path} has a malformed JSON header ({e})") from None
    header.pop("__metadata__", None)
    out = {}
    size = path.stat().st_size
    for name, info in header.items():
        tag = info.get("dtype")
        if tag not in _ST_DTYPES:
            raise ValueError(f"read_safetensors: {path}: tensor {name!r} has unsupported dtype {tag!r}")
        dt, shape = _ST_DTYPES[tag], tuple(int(s) for s in info["shape"])
        begin, end = (int(o) for o in info["data_offsets"])
        if end - begin != int(np.prod(shape)) * dt.itemsize or 8 + n + end > size:
            raise ValueError(f"read_safetensors: {path}: tensor {name!r} offsets {begin}..{end} do not "
                             f"match shape {shape} x {dt} or the file size {size}")
        if 0 in shape:
            out[name] = np.zeros(shape, dt)
        else:
            out[name] = np.memmap(path, dtype=dt, mode="r", offset=8 + n + begin, shape=shape)
    return out


def write_safetensors(path, tensors: Mapping[str, Any], *, metadata: Mapping[str, str] | None = None) -> None:
    """Writes ``tensors`` (name -> array-like) as one safetensors file (the format ``read_safetensors``
    and HF ``safetensors`` read; 8-byte aligned data as the reference writer does)."""
    arrays = {k: np.ascontiguousarray(np.asarray(v)) for k, v in tensors.items()}
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name in sorted(arrays):
        a = arrays[name]
        if a.dtype not in _ST_TAGS:
            raise ValueError(f"write_safetensors: tensor {name!r} has unsupported dtype {a.dtype}")
        header[name] = {"dtype": _ST_TAGS[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with pathlib.Path(path).open("wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in sorted(arrays):
            f.write(arrays[name].tobytes())


def checkpoint_tensors(path) -> dict[str, np.ndarray]:
    """All tensors of a checkpoint directory (``model.safetensors`` or the shards named by
    ``model.safetensors.index.json``) as lazy memmaps (``path``: a directory or a cached model id).
    ValueError when there are none."""
    path = resolve_checkpoint(path)
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise ValueError(f"checkpoint_tensors: no *.safetensors files in {path} (a torch .bin checkpoint "
                         f"must be converted first: transformers' save_pretrained(safe_serialization=True))")
    tensors: dict[str, np.ndarray] = {}
    for name in files:
        tensors.update(read_safetensors(path / name))
    return tensors


# ----------------------------------------------------------------------------- config.json


def _rope(hf: Mapping[str, Any]) -> tuple[float, tuple]:
    """(θ, ``ModelConfig.rope_scaling``) from ``rope_theta`` + ``rope_scaling`` (transformers 4) or
    ``rope_parameters`` (transformers 5). llama3's ``original_max_position_embeddings`` defaults to
    ``max_position_embeddings``, as transformers' ``standardize_rope_params`` does."""
    rp = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    src = {**scaling, **rp}
    kind = src.get("rope_type") or src.get("type") or "default"
    theta = float(rp.get("rope_theta", hf.get("rope_theta", 10_000.0)))
    if kind == "default":
        return theta, ()
    if kind != "llama3":
        raise ValueError(f"config.json: rope type {kind!r} ({src}) is not supported; supported: default, llama3")
    src.setdefault("original_max_position_embeddings",
                   hf.get("original_max_position_embeddings", hf.get("max_position_embeddings")))
    missing = [k for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
               if src.get(k) is None]
    if missing:
        raise ValueError(f"config.json: rope type 'llama3' lacks {missing} ({src})")
    return theta, (("factor", float(src["factor"])), ("high_freq_factor", float(src["high_freq_factor"])),
                   ("low_freq_factor", float(src["low_freq_factor"])),
                   ("original_max_position_embeddings", int(src["original_max_position_embeddings"])),
                   ("rope_type", "llama3"))


def model_type(hf: Mapping[str, Any]) -> str:
    """The family of a parsed ``config.json``: ``model_type``, else the family of ``architectures[0]``;
    ValueError (one line listing the supported ones) for any other."""
    mt = hf.get("model_type")
    if mt is None and hf.get("architectures"):
        mt = _ARCHITECTURES.get(hf["architectures"][0], hf["architectures"][0])
    if mt not in SUPPORTED:
        raise ValueError(f"config.json: model_type {mt!r} is not supported; supported: {', '.join(SUPPORTED)}")
    return mt


def config_from_hf(hf: Mapping[str, Any], **overrides) -> ModelConfig:
    """``ModelConfig`` from a parsed HF ``config.json``; keyword ``overrides`` replace fields
    (``dtype``, ``param_dtype``, ...). ValueError names the unsupported field."""
    mt = model_type(hf)
    hf = {**_CLASS_DEFAULTS[mt], **hf}
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            raise ValueError(f"config.json: {flag}=true is not supported (prs.models.qwen3 has q/k/v biases for "
                             f"model_type qwen2 only, no o_proj or MLP biases)")
    act = hf.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(f"config.json: hidden_act {act!r} is not supported (SwiGLU with SiLU only)")
    if hf.get("use_sliding_window") or (mt == "mistral" and hf.get("sliding_window")):
        raise ValueError(f"config.json: sliding-window attention (sliding_window={hf.get('sliding_window')}) "
                         f"is not supported")
    d, k = int(hf["hidden_size"]), int(hf["num_attention_heads"])
    head_dim = hf.get("head_dim") or d // k
    theta, scaling = _rope(hf)
    stored = hf.get("torch_dtype") or hf.get("dtype") or "float32"
    if stored not in _NAMED_DTYPES:
        raise ValueError(f"config.json: dtype {stored!r} is not supported; one of {sorted(_NAMED_DTYPES)}")
    param_dtype = overrides.pop("param_dtype", None) or _NAMED_DTYPES[stored]
    fields = dict(
        vocab_size=int(hf["vocab_size"]), d_model=d, n_layers=int(hf["num_hidden_layers"]), n_heads=k,
        n_kv_heads=int(hf.get("num_key_value_heads") or k), head_dim=int(head_dim),
        d_ff=int(hf["intermediate_size"]), rope_theta=theta, rope_scaling=scaling,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)), qk_norm=mt == "qwen3", qkv_bias=mt == "qwen2",
        param_dtype=param_dtype,
    )
    fields["dtype"] = overrides.pop("dtype", None) or param_dtype
    return ModelConfig(**{**fields, **overrides})


def load_config(path, **overrides) -> ModelConfig:
    """``config_from_hf`` of ``<path>/config.json`` (``path``: a directory or a cached model id)."""
    f = resolve_checkpoint(path) / "config.json"
    if not f.exists():
        raise ValueError(f"load_config: {f} does not exist (expected a Hugging Face checkpoint directory)")
    return config_from_hf(json.loads(f.read_text()), **overrides)


def config_to_hf(cfg: ModelConfig, *, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ``config.json`` dict describing ``cfg`` (inverse of ``config_from_hf`` on the fields prs
    uses): Qwen3 (``qk_norm``), Qwen2 (``qkv_bias``) or Llama (neither; llama3 RoPE scaling kept).
    ``base`` (the config.json the model was loaded from) keeps its other keys (token ids,
    ``max_position_embeddings``, ...); its RoPE and shape keys are replaced by ``cfg``'s."""
    if cfg.qk_norm and cfg.qkv_bias:
        raise ValueError("config_to_hf: qk_norm and qkv_bias together match no Hugging Face family")
    dt = {np.dtype(v): k for k, v in _NAMED_DTYPES.items()}[np.dtype(cfg.param_dtype)]
    arch = (("Qwen3ForCausalLM", "qwen3") if cfg.qk_norm else ("Qwen2ForCausalLM", "qwen2") if cfg.qkv_bias
            else ("LlamaForCausalLM", "llama"))
    out = {key: val for key, val in (base or {}).items()
           if key not in ("rope_parameters", "rope_scaling", "rope_theta", "dtype", "torch_dtype")}
    out.setdefault("max_position_embeddings", 40_960)
    out.update({
        "architectures": [arch[0]], "model_type": arch[1], "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "intermediate_size": cfg.d_ff,
        "hidden_act": "silu", "rope_theta": cfg.rope_theta,
        "rope_scaling": dict(cfg.rope_scaling) if cfg.rope_scaling else None,
        "rms_norm_eps": cfg.rms_norm_eps, "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": False, "use_sliding_window": False, "torch_dtype": dt,
    })
    return out


# ----------------------------------------------------------------------------- loading


def _sources(tensors: Mapping[str, np.ndarray], cfg: ModelConfig) -> dict[str, Any]:
    """Our param tree with each leaf a function ``index -> np.ndarray`` reading that slice of the
    HF tensors (kernels transposed, layers stacked). Raises ValueError on a missing tensor or a
    shape that disagrees with ``cfg``."""
    want = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))

    def get(name, shape):
        if name not in tensors:
            raise ValueError(f"load_checkpoint: missing tensor {name!r} (model_type and config.json say "
                             f"it should exist)")
        t = tensors[name]
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"load_checkpoint: tensor {name!r} has shape {tuple(t.shape)}, config.json "
                             f"implies {tuple(shape)}")
        return t

    def plain(name, transpose, shape):
        t = get(name, shape[::-1] if transpose else shape)
        return lambda idx: np.asarray((t.T if transpose else t)[idx])

    def stacked(suffix, transpose, shape):  # shape = [L, ...] of ours
        ts = [get(f"model.layers.{i}.{suffix}", shape[1:][::-1] if transpose else shape[1:])
              for i in range(cfg.n_layers)]

        def read(idx):
            rows = range(cfg.n_layers)[idx[0]]
            return np.stack([np.asarray((ts[i].T if transpose else ts[i])[idx[1:]]) for i in rows])
        return read

    src = {"embed_tokens": plain("model.embed_tokens.weight", False, want["embed_tokens"].shape),
           "norm": plain("model.norm.weight", False, want["norm"].shape),
           "layers": {ours: stacked(HF_LAYER_NAMES[ours][0], HF_LAYER_NAMES[ours][1], s.shape)
                      for ours, s in want["layers"].items()}}
    if not cfg.tie_embeddings:
        src["lm_head"] = plain("lm_head.weight", True, want["lm_head"].shape)
    return src


def fsdp_shardings(cfg: ModelConfig, mesh: Mesh) -> Params:
    """A ``NamedSharding`` per parameter that splits one axis over *all* mesh axes (ZeRO-3 / FSDP
    style: each device stores 1/|mesh| of the weights; ``jit`` all-gathers a layer's kernels when
    it uses them). The axis is the largest one divisible by the mesh size, never the stacked
    layer axis ``[L]`` (``lax.scan`` would gather every layer at once); no such axis: replicated."""
    want = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))
    n = mesh.size
    axes = tuple(mesh.axis_names)

    def pick(path, s):
        stacked = jax.tree_util.keystr(path).startswith("['layers']")
        cand = [(s.shape[a], a) for a in range(1 if stacked else 0, len(s.shape)) if s.shape[a] % n == 0]
        spec = [None] * len(s.shape)
        if cand:
            spec[max(cand)[1]] = axes
        return NamedSharding(mesh, PartitionSpec(*spec))

    return jax.tree_util.tree_map_with_path(pick, want)


def load_hf_state_dict(state, cfg: ModelConfig) -> Params:
    """Parameters from a Hugging Face Qwen3 ``state_dict`` (name -> array-like, e.g. numpy arrays
    from safetensors): ``nn.Linear`` weights ``[out, in]`` are transposed to ``[in, out]`` and
    layers stacked on ``[L]`` (layout in ``prs.models.qwen3``). A tied checkpoint's
    ``lm_head.weight`` is ignored. Raises ValueError naming a missing key or a wrong shape."""
    return load_params(state, cfg)


def load_params(tensors: Mapping[str, np.ndarray], cfg: ModelConfig, *, shardings: Params | None = None) -> Params:
    """Parameters for ``cfg`` from HF-named tensors (lazy memmaps or arrays), cast to
    ``cfg.param_dtype``. With ``shardings`` (a tree of ``jax.sharding.Sharding`` in the layout of
    ``init_params``, e.g. ``fsdp_shardings``) every device reads only its own slice from disk."""
    src = _sources(tensors, cfg)
    pd = np.dtype(cfg.param_dtype)
    full = (slice(None),)
    if shardings is None:
        return jax.tree.map(lambda read: jnp.asarray(read(full).astype(pd)), src)
    want = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))

    def place(read, s, sharding):
        return jax.make_array_from_callback(s.shape, sharding, lambda idx: read(idx).astype(pd))
    return jax.tree.map(place, src, want, shardings)


def load_checkpoint(path, *, mesh: Mesh | None = None, shardings: Params | Callable | None = None,
                    **overrides) -> tuple[ModelConfig, Params]:
    """``(ModelConfig, params)`` of a Hugging Face checkpoint directory.

    Args:
      path: directory with ``config.json`` and ``model.safetensors`` (or an index + shards).
      mesh: if given and ``shardings`` is None, parameters are stored sharded over it; each device
        reads only its slice. An Explicit mesh (``make_mesh``'s default) gets the layout the model
        runs on (``param_shardings``: the logical rules, FSDP over ``fsdp``, Megatron over
        ``tensor``); an Auto mesh the storage layout ``fsdp_shardings`` (every big kernel split over
        all devices; the compiler re-lays it out where it is used).
      shardings: a sharding tree, or a function ``(cfg, mesh) -> tree``.
      overrides: ``ModelConfig`` fields (``dtype=jnp.float32`` for fp32 compute over bf16 weights,
        ``param_dtype=jnp.float32`` to upcast the stored weights).
    Raises:
      ValueError: unsupported architecture or field, missing tensor, wrong shape.
    """
    cfg = load_config(path, **overrides)
    tensors = checkpoint_tensors(path)
    if callable(shardings):
        shardings = shardings(cfg, mesh)
    elif shardings is None and mesh is not None:
        shardings = param_shardings(cfg, mesh) if has_explicit_axes(mesh) else fsdp_shardings(cfg, mesh)
    return cfg, load_params(tensors, cfg, shardings=shardings)


def to_hf_state_dict(params: Params, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """Inverse of ``load_params``: HF names, ``[out, in]`` kernels, one tensor per layer (numpy,
    in ``cfg.param_dtype``). A tied model gets no ``lm_head.weight`` (HF re-ties it on load)."""
    pd = np.dtype(cfg.param_dtype)
    host = jax.tree.map(lambda x: np.asarray(jax.device_get(x)).astype(pd, copy=False), params)
    out = {"model.embed_tokens.weight": host["embed_tokens"], "model.norm.weight": host["norm"]}
    for ours, stack in host["layers"].items():
        suffix, transpose = HF_LAYER_NAMES[ours]
        for i in range(cfg.n_layers):
            out[f"model.layers.{i}.{suffix}"] = stack[i].T if transpose else stack[i]
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = host["lm_head"].T
    return out


def parse_size(size: int | str) -> int:
    """Bytes of a shard size given as an int or as transformers writes it (``"2GB"`` = 2·10⁹,
    ``"500MiB"`` = 500·2²⁰; ``convert_file_size_to_int``). ValueError on anything else."""
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    text = str(size).strip().upper().replace(" ", "")
    for unit in sorted(_HF_SIZE_UNITS, key=len, reverse=True):
        if text.endswith(unit):
            try:
                value = float(text[:-len(unit)])
            except ValueError:
                break
            if value > 0:
                return int(value * _HF_SIZE_UNITS[unit])
            break
    raise ValueError(f"max_shard_size={size!r}: give a positive number of bytes or a size such as '2GB', '500MB', "
                     f"'1GiB'")


def shard_names(tensors: Mapping[str, np.ndarray], max_shard_size: int | str) -> list[list[str]]:
    """Tensor names grouped into shards in order, a new shard starting where the next tensor would
    take the current one past ``max_shard_size`` bytes; a tensor larger than that gets a shard of its
    own (transformers' ``split_torch_state_dict_into_shards`` rule)."""
    limit = parse_size(max_shard_size)
    shards: list[list[str]] = [[]]
    size = 0
    for name, t in tensors.items():
        n = int(np.asarray(t).nbytes)
        if shards[-1] and size + n > limit:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += n
    return shards


def save_checkpoint(path, params: Params, cfg: ModelConfig, *, extra_files: Mapping[str, str] | None = None,
                    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE, dtype: Any = None,
                    base_config: Mapping[str, Any] | None = None) -> list[str]:
    """Writes ``config.json`` and the weights (HF layout) into directory ``path`` (created), plus
    ``extra_files`` (name -> text, e.g. a tokenizer); returns the weight files written.

    Weights as ``save_pretrained`` writes them: one ``model.safetensors`` when they fit in
    ``max_shard_size`` (bytes or ``"2GB"``-style; default 5GB), else shards
    ``model-0000i-of-0000n.safetensors`` and ``model.safetensors.index.json`` (``weight_map`` name ->
    shard, ``metadata.total_size`` bytes). ``dtype`` casts the stored weights (default
    ``cfg.param_dtype``; config.json's ``torch_dtype`` says which); ``base_config`` as in
    ``config_to_hf``. Weight files of an earlier save in ``path`` are removed first (the loader would
    read a stale shard). ``transformers``' ``AutoModelForCausalLM.from_pretrained(path)`` and
    ``load_checkpoint`` both read it."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    limit = parse_size(max_shard_size)
    if dtype is not None:
        cfg = dataclasses.replace(cfg, param_dtype=dtype)
    tensors = to_hf_state_dict(params, cfg)
    shards = shard_names(tensors, limit)
    for old in list(path.glob("model*.safetensors")) + [path / "model.safetensors.index.json"]:
        if old.exists():
            old.unlink()
    (path / "config.json").write_text(json.dumps(config_to_hf(cfg, base=base_config), indent=2))
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    for fname, members in zip(names, shards):
        tmp = path / f"{fname}.tmp{os.getpid()}"
        write_safetensors(tmp, {k: tensors[k] for k in members})
        os.replace(tmp, path / fname)
    if len(shards) > 1:
        index = {"metadata": {"total_size": int(sum(np.asarray(t).nbytes for t in tensors.values()))},
                 "weight_map": {k: fname for fname, members in zip(names, shards) for k in members}}
        (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    for name, data in (extra_files or {}).items():
        (path / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return names


# what transformers' tokenizers read from a checkpoint directory (any that exist are carried over)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")


def hf_extra_files(base, *, chat_template: str | None = None, template: str | None = None) -> dict[str, bytes]:
    """The files besides the weights and ``config.json`` that a checkpoint trained from ``base`` (a
    directory or a cached model id) needs: ``base``'s tokenizer files (``TOKENIZER_FILES``), its
    ``generation_config.json`` or, lacking one, one naming the tokenizer's eos / pad ids, and the
    chat template the run rendered prompts with: ``chat_template`` as ``Tokenizer.from_checkpoint``
    takes it (``"chatml"``, a Jinja file) is written to ``chat_template.jinja`` (which
    ``transformers`` reads before ``tokenizer_config.json``'s) and dropped from the config; ``template``
    (the Jinja text itself, e.g. a task tokenizer's ``chat_template``) likewise when it differs from
    the base's."""
    from prs.models.tokenizer import Tokenizer

    base = resolve_checkpoint(base)
    files = {name: (base / name).read_bytes() for name in TOKENIZER_FILES if (base / name).is_file()}
    if (base / "generation_config.json").is_file():
        files["generation_config.json"] = (base / "generation_config.json").read_bytes()
    elif "tokenizer.json" in files:
        tok = Tokenizer.from_checkpoint(base)
        files["generation_config.json"] = json.dumps(
            {"eos_token_id": tok.eos_id, "pad_token_id": tok.pad_id}, indent=2).encode()
    if chat_template is not None:
        template = Tokenizer.from_checkpoint(base, chat_template=chat_template).chat_template
    if template is not None and template != (Tokenizer.from_checkpoint(base).chat_template
                                             if "tokenizer.json" in files else None):
        files["chat_template.jinja"] = template.encode()
        if "tokenizer_config.json" in files:
            tc = json.loads(files["tokenizer_config.json"])
            tc.pop("chat_template", None)
            files["tokenizer_config.json"] = json.dumps(tc, indent=2).encode()
    return files


def make_tiny_checkpoint(path, *, seed: int = 0, vocab_size: int = 384, d_model: int = 64, n_layers: int = 2,
                         n_heads: int = 4, n_kv_heads: int = 2, head_dim: int = 16, d_ff: int = 128,
                         std: float = 0.02, texts) -> ModelConfig:
    """A tiny random Qwen3 checkpoint directory (``config.json``, ``model.safetensors``,
    ``tokenizer.json``, ``tokenizer_config.json`` with a ChatML template): the stand-in for a real
    checkpoint in CPU tests and smoke runs (``python -m prs.models.hf make-tiny DIR``). The byte-level BPE
    tokenizer is trained on ``texts`` (a list of strings; ``prs.tasks.math_jsonl.tokenizer_texts()``
    gives the shipped math problems and the chat markup). Needs the ``tokenizers`` package."""
    from prs.models.tokenizer import build_tiny_tokenizer, tokenizer_files

    texts = list(texts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("make_tiny_checkpoint: texts must be a non-empty list of strings")
    tok = build_tiny_tokenizer(texts, vocab_size=vocab_size)
    cfg = ModelConfig(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                      n_kv_heads=n_kv_heads, head_dim=head_dim, d_ff=d_ff, rope_theta=10_000.0)
    if tok.get_vocab_size() > vocab_size:
        raise ValueError(f"make_tiny_checkpoint: tokenizer has {tok.get_vocab_size()} ids > vocab_size={vocab_size}")
    save_checkpoint(path, init_params(cfg, jax.random.key(seed), std=std), cfg, extra_files=tokenizer_files(tok))
    return cfg
