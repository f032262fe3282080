"""Device mesh and batch placement.

One mesh with a ``data`` axis over the available devices (and room for a ``model`` axis later).
Batches ``[B, ...]`` are split along their leading axis over ``data``; parameters are replicated.

We build the mesh with ``jax.sharding.Mesh`` rather than ``jax.make_mesh`` because in jax 0.10 the
latter defaults to explicit axis types, under which some ops demand ``out_sharding`` arguments.
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"
MODEL_AXIS = "model"


def make_mesh(
    devices: Sequence[jax.Device] | None = None, *, model_parallel: int = 1
) -> Mesh:
    """A ``(data, model)`` mesh over ``devices`` (default: all devices).

    Args:
      devices: the devices to use; default ``jax.devices()``.
      model_parallel: size of the ``model`` axis; must divide the device count. ``1`` gives a pure
        data-parallel mesh (the ``model`` axis exists but has size 1).
    """
    devices = list(jax.devices() if devices is None else devices)
    if model_parallel < 1 or len(devices) % model_parallel:
        raise ValueError(
            f"model_parallel={model_parallel} must be >= 1 and divide the device count {len(devices)}"
        )
    grid = np.array(devices, dtype=object).reshape(len(devices) // model_parallel, model_parallel)
    return Mesh(grid, (DATA_AXIS, MODEL_AXIS))


def data_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """Sharding that splits the leading axis of an ``ndim``-array over ``data``."""
    if ndim < 1:
        raise ValueError(f"data_sharding needs ndim >= 1, got {ndim}")
    return NamedSharding(mesh, PartitionSpec(DATA_AXIS, *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    """Sharding that places a full copy on every device."""
    return NamedSharding(mesh, PartitionSpec())


def shard_batch(tree, mesh: Mesh):
    """Places every array leaf ``[B, ...]`` of ``tree`` split along ``B`` over the ``data`` axis.

    Raises ``ValueError`` naming the leaf if ``B`` is not divisible by the ``data`` axis size:
    we never pad or drop rows silently.
    """
    n_data = mesh.shape[DATA_AXIS]

    def place(path, x):
        x = np.asarray(x) if not isinstance(x, jax.Array) else x
        if x.ndim == 0:
            raise ValueError(f"shard_batch: leaf {jax.tree_util.keystr(path)} is a scalar; batches are [B, ...]")
        if x.shape[0] % n_data:
            raise ValueError(
                f"shard_batch: leaf {jax.tree_util.keystr(path)} has leading size {x.shape[0]} "
                f"(shape {tuple(x.shape)}), not divisible by the data axis size {n_data}"
            )
        return jax.device_put(x, data_sharding(mesh, x.ndim))

    return jax.tree_util.tree_map_with_path(place, tree)


def replicate(tree, mesh: Mesh):
    """Places a full copy of every leaf of ``tree`` (parameters, optimiser state) on every device."""
    return jax.device_put(tree, replicated(mesh))
