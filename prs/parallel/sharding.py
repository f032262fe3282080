"""Device mesh, logical-axis sharding rules and batch placement.

The mesh has three axes (maxtext's names, ``configs/base.yml``):

* ``data``   pure data parallelism: parameters replicated, batch rows split;
* ``fsdp``   ZeRO-3 / FSDP: batch rows split *and* every parameter (and optimizer moment) split along
  its ``embed`` dimension; ``jit`` all-gathers a layer's kernels where the layer uses them;
* ``tensor`` Megatron-style tensor parallelism: q/k/v/gate/up kernels split by output columns
  (heads, kv_heads, mlp), o/down kernels by input rows, the vocabulary split.

Parameters carry *logical* axis names (``prs.models.qwen3.param_logical_axes``: ``vocab``,
``embed``, ``heads``, ``kv_heads``, ``mlp``, ``layers``, ``norm``, ``head_dim``) and one rules
table maps them to mesh axes (``LOGICAL_RULES``). Per tensor, each dimension takes its rule's
mesh axis unless that axis is already used by an earlier dimension, has size 1, or does not divide
the dimension (then that dimension is replicated); the stacked ``layers`` axis is never split (the
layer ``lax.scan`` would gather every layer at once).

Batches ``[R, ...]`` are split along R over the batch axes ``(data, fsdp)``.

Axis types: the mesh uses ``AxisType.Explicit`` by default (JAX's "sharding in types", the default
of ``jax.make_mesh`` in jax 0.10: under ``jax.set_mesh`` every traced array carries its
``PartitionSpec`` and an ambiguous layout is an error, not a compiler guess). The model, the
chunked LM head, the micro-batched update and the sampler state their layouts through
``prs.parallel.explicit`` (FSDP weights gathered where used, row-parallel o/down matmuls summed
over ``tensor``, the embedding and picked-logit gathers in ``auto_axes`` regions, the KV cache and
decode attention split over rows only), annotations that are the plain ops without a mesh or under
Auto axes; the trainer's host glue runs on host copies of the rollouts. ``axis_types="auto"``
builds an ``AxisType.Auto`` mesh (the compiler propagates shardings from the annotated inputs,
outputs and the per-layer activation constraints). Both give the 1-device numbers
(``tests/parallel/test_explicit_axes.py``, ``tests/rl/test_trainer_scale.py``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"
FSDP_AXIS = "fsdp"
TENSOR_AXIS = "tensor"
MODEL_AXIS = TENSOR_AXIS  # the former name of the model-parallel axis
MESH_AXES = (DATA_AXIS, FSDP_AXIS, TENSOR_AXIS)

# logical axis name -> mesh axis (None: replicated). maxtext base.yml, restricted to our three axes.
LOGICAL_RULES: dict[str, str | None] = {
    "vocab": TENSOR_AXIS,
    "embed": FSDP_AXIS,
    "heads": TENSOR_AXIS,
    "kv_heads": TENSOR_AXIS,
    "mlp": TENSOR_AXIS,
    "layers": None,
    "norm": None,
    "head_dim": None,
}


def make_mesh(devices: Sequence[jax.Device] | None = None, *, data: int = -1, fsdp: int = 1, tensor: int = 1,
              model_parallel: int | None = None, axis_types: str = "explicit") -> Mesh:
    """A ``(data, fsdp, tensor)`` mesh over ``devices`` (default: all, across every process).

    Args:
      devices: the devices; default ``jax.devices()``.
      data, fsdp, tensor: axis sizes; exactly one may be ``-1`` ("the rest"). The product must equal
        the device count.
      model_parallel: another name of ``tensor`` (for callers that build a ``(data, model)`` mesh).
      axis_types: ``"explicit"`` (default; see the module docstring) or ``"auto"``.
    """
    devices = list(jax.devices() if devices is None else devices)
    if model_parallel is not None:
        if tensor != 1:
            raise ValueError("make_mesh: pass tensor= or model_parallel=, not both")
        tensor = model_parallel
    if axis_types not in ("auto", "explicit"):
        raise ValueError(f"make_mesh: axis_types={axis_types!r}; choose from ('auto', 'explicit')")
    sizes = {DATA_AXIS: data, FSDP_AXIS: fsdp, TENSOR_AXIS: tensor}
    rest = [k for k, s in sizes.items() if s == -1]
    bad = {k: s for k, s in sizes.items() if s != -1 and (not isinstance(s, int) or s < 1)}
    if bad or len(rest) > 1:
        raise ValueError(f"make_mesh: axis sizes {sizes} must be ints >= 1, with at most one -1 (the rest)")
    known = int(np.prod([s for s in sizes.values() if s != -1]))
    if rest:
        if len(devices) % known:
            raise ValueError(f"make_mesh: {len(devices)} devices are not divisible by the fixed axes {sizes}")
        sizes[rest[0]] = len(devices) // known
    if int(np.prod(list(sizes.values()))) != len(devices):
        raise ValueError(f"make_mesh: axis sizes {sizes} (product {int(np.prod(list(sizes.values())))}) "
                         f"must multiply to the device count {len(devices)}")
    grid = np.array(devices, dtype=object).reshape(tuple(sizes.values()))
    kind = AxisType.Auto if axis_types == "auto" else AxisType.Explicit
    return Mesh(grid, MESH_AXES, axis_types=(kind,) * 3)


def batch_axes(mesh: Mesh) -> str | tuple[str, ...] | None:
    """The mesh axes that split batch rows: ``data`` and ``fsdp`` (those present and of size > 1;
    ``data`` alone when nothing is split, as the former data-only mesh)."""
    axes = tuple(a for a in (DATA_AXIS, FSDP_AXIS) if a in mesh.shape and mesh.shape[a] > 1)
    if not axes:
        return DATA_AXIS if DATA_AXIS in mesh.shape else None
    return axes[0] if len(axes) == 1 else axes


def pad_rows(rows: int, multiple: int) -> np.ndarray:
    """Row ids ``[R']`` that pad ``rows`` up to ``R' = ⌈R / multiple⌉ · multiple`` (the batch shards of
    a mesh): ``0 .. R − 1`` and then copies of the first rows (real prompts, so the padding decodes
    like real rows and no sampler input is special). The sampler draws row ``r`` from its own stream
    ``fold_in(key, r)``, so rows ``0 .. R − 1`` of the padded call are those of the unpadded one
    and dropping the rest leaves the unpadded result (e.g. an evaluation of 30 problems × 8 samples =
    240 rows on a 32-way v5p-64 batch: 256 rows sampled, 240 scored)."""
    if not (isinstance(multiple, (int, np.integer)) and multiple >= 1):
        raise ValueError(f"pad_rows: multiple must be an int >= 1, got {multiple!r}")
    if rows < 1:
        raise ValueError(f"pad_rows: rows must be >= 1, got {rows}")
    return np.arange(-(-rows // multiple) * multiple) % rows


def batch_size_multiple(mesh: Mesh) -> int:
    """How many shards a batch's rows are split into (the row count must be a multiple)."""
    return int(np.prod([mesh.shape[a] for a in (DATA_AXIS, FSDP_AXIS) if a in mesh.shape]))


def data_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """Sharding that splits the leading axis of an ``ndim``-array over the batch axes."""
    if ndim < 1:
        raise ValueError(f"data_sharding needs ndim >= 1, got {ndim}")
    return NamedSharding(mesh, PartitionSpec(batch_axes(mesh), *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    """Sharding that places a full copy on every device."""
    return NamedSharding(mesh, PartitionSpec())


def logical_to_spec(names: Sequence[str], shape: Sequence[int], mesh: Mesh,
                    rules: dict[str, str | None] | None = None) -> PartitionSpec:
    """PartitionSpec of one tensor from its logical axis names (rules in the module docstring)."""
    rules = LOGICAL_RULES if rules is None else rules
    if len(names) != len(shape):
        raise ValueError(f"logical_to_spec: names {tuple(names)} and shape {tuple(shape)} differ in rank")
    used, spec = set(), []
    for name, dim in zip(names, shape):
        if name not in rules:
            raise ValueError(f"logical_to_spec: unknown logical axis {name!r}; known: {sorted(rules)}")
        axis = rules[name]
        ok = (axis is not None and axis in mesh.shape and axis not in used and mesh.shape[axis] > 1
              and dim % mesh.shape[axis] == 0)
        spec.append(axis if ok else None)
        if ok:
            used.add(axis)
    return PartitionSpec(*spec)


def param_shardings(cfg: Any, mesh: Mesh, rules: dict[str, str | None] | None = None) -> Any:
    """A ``NamedSharding`` per parameter of ``cfg`` (a ``prs.models.qwen3.ModelConfig``: its
    ``param_shapes()`` and ``param_logical_axes()`` give the layout), by ``LOGICAL_RULES``."""
    shapes, names = cfg.param_shapes(), cfg.param_logical_axes()
    return jax.tree.map(lambda n, s: NamedSharding(mesh, logical_to_spec(n, s.shape, mesh, rules)),
                        names, shapes, is_leaf=lambda x: isinstance(x, tuple))


# The sampler's layout: its rows are split over the batch axes (data, fsdp), so every device
# needs whole weights along those axes (no per-token FSDP all-gather inside the decode loop);
# Megatron's tensor split stays. Same logical names, the batch axes dropped from the rules.
SAMPLING_RULES: dict[str, str | None] = {k: (None if v in (DATA_AXIS, FSDP_AXIS) else v)
                                         for k, v in LOGICAL_RULES.items()}


def sampling_shardings(cfg: Any, mesh: Mesh) -> Any:
    """A ``NamedSharding`` per parameter for the sampler's copy (``Trainer.sampling_params``):
    ``param_shardings`` under ``SAMPLING_RULES``, i.e. replicated over ``data`` and ``fsdp``,
    q/k/v/gate/up split by output columns and o/down by input rows over ``tensor``, the vocabulary
    over ``tensor``. On a mesh without a ``tensor`` axis > 1 this is fully replicated."""
    return param_shardings(cfg, mesh, SAMPLING_RULES)


def sampler_placement(params: Any, mesh: Mesh) -> Any:
    """The sampler's parameters on ``mesh``: a leaf already laid out on this mesh without using the
    batch axes (e.g. by ``sampling_shardings``) keeps its layout; any other leaf (host, another
    device, FSDP-split training parameters) is replicated, as the sampler always did."""
    batch = {DATA_AXIS, FSDP_AXIS}

    def keep(x):
        sh = getattr(x, "sharding", None)
        if not (isinstance(sh, NamedSharding) and sh.mesh == mesh):
            return False
        used = {a for entry in sh.spec if entry is not None for a in (entry if isinstance(entry, tuple) else (entry,))}
        return not (used & batch)

    return jax.tree.map(lambda x: x if keep(x) else jax.device_put(x, replicated(mesh)), params)


def opt_state_shardings(tx, params_abstract: Any, param_sh: Any, mesh: Mesh) -> Any:
    """Shardings of ``tx.init(params)``: every leaf shaped like a parameter (Adam's moments) is
    sharded like that parameter; the rest (counts, scalars) is replicated."""
    import optax

    state = jax.eval_shape(tx.init, params_abstract)
    return optax.tree_map_params(tx, lambda _, s: s, state, param_sh,
                                 transform_non_params=lambda _: replicated(mesh))


def shard_batch(tree, mesh: Mesh):
    """Places every array leaf ``[B, ...]`` of ``tree`` split along ``B`` over the batch axes.

    Raises ``ValueError`` naming the leaf if ``B`` is not divisible by the number of batch shards:
    we never pad or drop rows silently. With several processes, numpy leaves are each process's
    *own* rows (``jax.make_array_from_process_local_data``: the global B is the sum).
    """
    n_data = batch_size_multiple(mesh)
    multi = jax.process_count() > 1

    def place(path, x):
        local = not isinstance(x, jax.Array)
        x = np.asarray(x) if local else x
        if x.ndim == 0:
            raise ValueError(f"shard_batch: leaf {jax.tree_util.keystr(path)} is a scalar; batches are [B, ...]")
        rows = x.shape[0] * (jax.process_count() if (multi and local) else 1)
        if rows % n_data:
            raise ValueError(
                f"shard_batch: leaf {jax.tree_util.keystr(path)} has leading size {rows} "
                f"(shape {tuple(x.shape)}), not divisible by the batch shards {n_data}"
            )
        if multi and local:
            return jax.make_array_from_process_local_data(data_sharding(mesh, x.ndim), x)
        return jax.device_put(x, data_sharding(mesh, x.ndim))

    return jax.tree_util.tree_map_with_path(place, tree)


def replicate(tree, mesh: Mesh):
    """Places a full copy of every leaf of ``tree`` (parameters, optimiser state) on every device."""
    return jax.device_put(tree, replicated(mesh))


# ---------------------------------------------------------------------- several processes


def process_rows(mesh: Mesh, rows: int) -> slice:
    """The rows ``[start, stop)`` of a ``[rows, ...]`` batch split over the batch axes that this
    process's devices hold (all rows with one process). Raises ``ValueError`` when they are not
    one contiguous block (a mesh whose devices interleave the processes along the batch axes)."""
    if jax.process_count() == 1:
        return slice(0, rows)
    idx = data_sharding(mesh, 1).addressable_devices_indices_map((rows,))
    got = sorted({(s.start or 0, rows if s.stop is None else s.stop) for (s,) in idx.values()})
    start, stop = got[0][0], got[-1][1]
    covered = np.zeros((rows,), bool)
    for a, b in got:
        covered[a:b] = True
    if not covered[start:stop].all():
        raise ValueError(f"process_rows: process {jax.process_index()} holds rows {got} of {rows}, not one block; "
                         "build the mesh with each process's devices adjacent along (data, fsdp) (make_mesh's default)")
    return slice(start, stop)


def _per_process(tree, shardings, make):
    """``jax.device_put`` on one process; with several, ``make(host_array, sharding)`` for every leaf
    each process holds in full, and ``device_put`` (a reshard) for global arrays. ``shardings``: one
    sharding or a tree matching ``tree``."""
    if jax.process_count() == 1:
        return jax.device_put(tree, shardings)

    def one(x, sh):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return jax.device_put(x, sh)
        return make(np.asarray(x), sh)

    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda x: one(x, shardings), tree)
    return jax.tree.map(one, tree, shardings)


def place(tree, shardings):
    """``jax.device_put(tree, shardings)`` that also builds arrays spanning several processes from
    values every process holds in full (host arrays or process-local ``jax.Array``; e.g. parameters
    initialised or loaded identically everywhere): each process transfers only the slices its
    devices hold (``jax.make_array_from_callback``). Global arrays (not fully addressable) are
    resharded as ``device_put`` does. ``shardings``: one sharding or a tree matching ``tree``."""
    return _per_process(tree, shardings,
                        lambda host, sh: jax.make_array_from_callback(host.shape, sh, lambda idx: host[idx]))


def shard_rows(tree, shardings):
    """Places a batch every process holds in full (``[R, ...]`` leaves, the same values on every
    process) row-split by ``shardings`` (a tree of batch shardings, e.g. ``data_sharding``): with
    several processes each one feeds only its own rows, ``x[process_rows]``, through
    ``jax.make_array_from_process_local_data`` (global shape ``[R, ...]``). One process:
    ``jax.device_put``. ``None`` leaves stay ``None``."""
    def rows(host, sh):
        return jax.make_array_from_process_local_data(sh, host[process_rows(sh.mesh, host.shape[0])], host.shape)

    return _per_process(tree, shardings, rows)
