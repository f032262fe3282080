"""Annotations for JAX's explicit sharding ("sharding in types", ``AxisType.Explicit``).

Under a mesh with explicit axes (``prs.parallel.sharding.make_mesh(axis_types="explicit")``
entered with ``jax.set_mesh``) every traced array carries its ``PartitionSpec`` in its type and an
op whose output sharding is ambiguous (a matmul over a sharded contraction, a gather from a
sharded table, a carry that changes layout) is a ``ShardingTypeError`` instead of a guess by the
compiler. The model code calls the helpers below at those few places. Each helper is the plain
op, unchanged, when there is no explicit mesh: single device (no mesh) and ``AxisType.Auto``
meshes trace exactly the program they traced before (same numbers, same HLO).

The layout rules they encode (maxtext's FSDP + Megatron, ``prs.parallel.sharding``'s docstring):

* a weight is all-gathered along the axes that split the activation rows (FSDP: ``data``,
  ``fsdp``) where it is used (``matmul``), keeping its ``tensor`` split;
* ``x [N, I] @ w [I, O]``: the output rows keep ``x``'s row split, the columns take ``w``'s; a
  contraction split over ``tensor`` on both sides (the row-parallel o/down projections) is summed
  over ``tensor`` (an all-reduce) into unsplit columns;
* gathers from a table split along the gathered axis (the embedding over ``vocab``, the picked
  logit over ``vocab``) run in an ``auto_axes`` region (the compiler partitions the gather, as with
  ``AxisType.Auto``) and come back with the rows' split (``.at[].get(out_sharding=)`` does the same).

References: JAX "Explicit sharding" (docs/notebooks/explicit-sharding), ``jax.sharding.reshard``,
``jax.sharding.auto_axes``; maxtext ``layers/linears.py`` (the same rules as logical axes).
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from prs.parallel.sharding import DATA_AXIS, FSDP_AXIS, TENSOR_AXIS

BATCH_AXES = (DATA_AXIS, FSDP_AXIS)  # the mesh axes that split rows (as prs.parallel.sharding.batch_axes)


def explicit_mesh():
    """The context's abstract mesh if it has an explicit axis, else None (no mesh, or Auto axes)."""
    am = jax.sharding.get_abstract_mesh()
    if am.empty or not am.explicit_axes:
        return None
    return am


def spec(x) -> tuple:
    """``x``'s partition per dimension (a tuple of length ``x.ndim``) from its type."""
    s = jax.typeof(x).sharding.spec
    return tuple(s) + (None,) * (jnp.ndim(x) - len(s))


def _axes(entry) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _entry(axes: tuple[str, ...]):
    return None if not axes else (axes[0] if len(axes) == 1 else axes)


def _drop(entry, axes) -> object:
    return _entry(tuple(a for a in _axes(entry) if a not in axes))


def row_spec(am, ndim: int) -> P:
    """Rows (axis 0) split over the mesh's batch axes of size > 1, the rest whole."""
    axes = tuple(a for a in BATCH_AXES if a in am.axis_names and am.shape[a] > 1)
    return P(_entry(axes), *([None] * (ndim - 1)))


def constrain_rows(x: jax.Array) -> jax.Array:
    """Under an explicit mesh: ``x`` resharded to rows over the batch axes (``row_spec``); else
    ``x`` itself (Auto meshes use ``with_sharding_constraint`` in the model code)."""
    am = explicit_mesh()
    if am is None:
        return x
    want = row_spec(am, x.ndim)  # x.ndim entries
    return x if spec(x) == tuple(want) else jax.sharding.reshard(x, want)


def matmul(x2: jax.Array, w: jax.Array, *, preferred_element_type=None) -> jax.Array:
    """``x2 [N, I] @ w [I, O]`` (``jnp.matmul``) with explicit shardings: ``w`` is gathered along
    the axes that split ``x2``'s rows (FSDP), the contraction split alike on both sides (``x2``
    sliced to ``w``'s split when ``x2``'s is whole, else ``w`` laid out like ``x2``), and the
    output laid out ``[N: x2's rows, O: w's columns]`` (a contraction split on both sides is summed,
    Megatron's row-parallel all-reduce). Without an explicit mesh: ``jnp.matmul(x2, w)``."""
    if explicit_mesh() is None:
        return jnp.matmul(x2, w, preferred_element_type=preferred_element_type)
    (xr, xi), (wi, wo) = spec(x2), spec(w)
    rows = _axes(xr)
    wi = _drop(wi, rows)
    if xi is None and wi is not None:  # split x's contraction like w's (a local slice, no gather of w)
        x2, xi = jax.sharding.reshard(x2, P(xr, wi)), wi
    wo = _drop(wo, rows + _axes(xi))
    w_want = P(xi, wo)
    if spec(w) != tuple(w_want):
        w = jax.sharding.reshard(w, w_want)
    return jnp.matmul(x2, w, preferred_element_type=preferred_element_type, out_sharding=P(xr, wo))


def gather_rows(table: jax.Array, ids: jax.Array) -> jax.Array:
    """``jnp.take(table, ids, axis=0)`` ([V, D] table, ids [R, T] -> [R, T, D]); under an explicit
    mesh the gather runs in an ``auto_axes`` region and the output takes ``ids``' split, ``D``
    whole (the embedding lookup)."""
    if explicit_mesh() is None:
        return jnp.take(table, ids, axis=0)
    out = P(*spec(ids), None)
    return table.at[ids].get(mode="fill", out_sharding=out)


def like_rows(fn: Callable, x: jax.Array, *args) -> jax.Array:
    """``fn(x, *args)`` whose output ``[R, ...]`` is split like ``x``'s rows; under an explicit mesh
    ``fn`` runs in an ``auto_axes`` region (for gathers along a split axis, e.g. the picked logit
    ``take_along_axis`` over a ``vocab``-split ``[R, C, V]``). Without one: ``fn(x, *args)``."""
    if explicit_mesh() is None:
        return fn(x, *args)
    return jax.sharding.auto_axes(fn, out_sharding=P(spec(x)[0]))(x, *args)  # P(r) = P(r, None, ...)


def reshape_rows(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``x.reshape(shape)`` for an ``x`` split only along its rows (axis 0, kept as axis 0); under
    an explicit mesh the output's split is stated (rows as ``x``'s, the rest whole), which JAX
    asks for when a reshape both inserts and merges axes (e.g. the attention mask's heads-major
    ``[R, G, T, S] -> [R, 1, G·T, S]``)."""
    if explicit_mesh() is None:
        return x.reshape(shape)
    return jax.lax.reshape(x, tuple(shape), out_sharding=P(spec(x)[0], *([None] * (len(shape) - 1))))


def has_explicit_axes(mesh) -> bool:
    """True for a concrete ``mesh`` with an ``AxisType.Explicit`` axis (``make_mesh``'s default)."""
    return bool(mesh.abstract_mesh.explicit_axes)


def mesh_context(mesh):
    """Inside a jitted function that takes a concrete ``mesh`` as a static argument (the sampler):
    a context that makes ``mesh``'s abstract mesh the context's when it has explicit axes, so the
    helpers above see it; a null context for ``None`` or an Auto mesh (unchanged tracing)."""
    if mesh is None or not has_explicit_axes(mesh):
        return contextlib.nullcontext()
    return jax.sharding.use_abstract_mesh(mesh.abstract_mesh)


def in_mesh(fn: Callable) -> Callable:
    """Decorator (under ``jax.jit``) for a function with a static ``mesh=`` keyword: runs it in
    ``mesh_context(mesh)``."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with mesh_context(kwargs.get("mesh")):
            return fn(*args, **kwargs)
    return wrapped


def keep_rows(x: jax.Array) -> jax.Array:
    """Under an explicit mesh: ``x`` resharded to its own row split only (axis 0; every other axis
    whole, e.g. a ``tensor``-split head axis gathered), else ``x``. The KV cache's layout."""
    if explicit_mesh() is None:
        return x
    want = (spec(x)[0],) + (None,) * (x.ndim - 1)
    return x if spec(x) == want else jax.sharding.reshard(x, P(*want))


def zeros(shape: tuple[int, ...], dtype, *, row_axis: int = 0, head_axis: int | None = None) -> jax.Array:
    """``jnp.zeros(shape, dtype)``; under an explicit mesh with axis ``row_axis`` split over the
    batch axes (``row_spec``), e.g. the KV cache ``[L, R, S, Kv, H]`` with ``row_axis=1``, and axis
    ``head_axis`` over ``tensor`` where ``head_split`` splits its heads (the cache's ``Kv``)."""
    am = explicit_mesh()
    if am is None:
        return jnp.zeros(shape, dtype)
    heads = None if head_axis is None else head_split(shape[head_axis])
    return jnp.zeros(shape, dtype, out_sharding=rows_heads_spec(len(shape), row_axis=row_axis,
                                                                head_axis=head_axis, heads=heads))


def same(x: jax.Array):
    """``x``'s sharding under an explicit mesh, else ``None``: the ``out_sharding=`` of an in-place
    update ``x.at[...].set(..., out_sharding=same(x))`` (a scatter whose indices are split like the
    rows of ``x``), a no-op argument without an explicit mesh."""
    return None if explicit_mesh() is None else jax.typeof(x).sharding


def head_split(n_heads: int, mesh=None):
    """The mesh axis that splits an attention head axis of ``n_heads`` heads (the KV cache's
    ``Kv`` and its queries' ``K``, Megatron's head-parallel attention): ``tensor`` under an explicit
    mesh (``mesh``, else the context's) whose ``tensor`` axis is > 1 and divides ``n_heads``; else
    None (rows-only layout: no explicit mesh, an Auto mesh, no ``tensor`` split, or heads it does
    not divide)."""
    am = explicit_mesh() if mesh is None else (mesh.abstract_mesh if has_explicit_axes(mesh) else None)
    if am is None or TENSOR_AXIS not in am.axis_names:
        return None
    t = am.shape[TENSOR_AXIS]
    return TENSOR_AXIS if t > 1 and n_heads % t == 0 else None


def rows_heads_spec(ndim: int, *, row_axis: int = 0, head_axis: int | None = None, heads=None, mesh=None) -> P:
    """``PartitionSpec`` of an array whose axis ``row_axis`` is split over the batch axes and whose
    axis ``head_axis`` over ``heads`` (``head_split``'s answer; None: whole)."""
    am = explicit_mesh() if mesh is None else mesh.abstract_mesh
    spec = [None] * ndim
    spec[row_axis] = row_spec(am, 1)[0]
    if head_axis is not None:
        spec[head_axis] = heads
    return P(*spec)


def constrain_rows_heads(x: jax.Array, *, row_axis: int = 0, head_axis: int, heads) -> jax.Array:
    """Under an explicit mesh: ``x`` resharded to ``rows_heads_spec`` (rows over the batch axes,
    the head axis over ``heads``, the rest whole); else ``x``."""
    if explicit_mesh() is None:
        return x
    want = rows_heads_spec(x.ndim, row_axis=row_axis, head_axis=head_axis, heads=heads)
    return x if spec(x) == tuple(want) else jax.sharding.reshard(x, want)


def per_shard(fn: Callable, args: tuple, in_specs: tuple, out_specs):
    """``fn(*args)`` run on each device's own block (``jax.shard_map`` over the context's explicit
    mesh, ``in_specs`` / ``out_specs`` the blocks' ``PartitionSpec`` trees): for the attention of a
    KV cache split over rows and heads, whose every op is local to a (rows, heads) block. Inside,
    the helpers above are the plain ops (the axes are manual there)."""
    def place(want, x):
        full = tuple(want) + (None,) * (jnp.ndim(x) - len(want))
        return x if spec(x) == full else jax.sharding.reshard(x, want)

    args = jax.tree.map(place, tuple(in_specs), tuple(args), is_leaf=lambda x: isinstance(x, P))
    return jax.shard_map(fn, mesh=explicit_mesh(), in_specs=tuple(in_specs), out_specs=out_specs, check_vma=False)(*args)
