"""Numerical comparisons shared by several test modules (not a test module): pytree distances and a
compiled function's temporary memory."""
import jax
import jax.numpy as jnp


def temp_bytes(fn, *args) -> int:
    """Bytes of XLA temporaries of ``jax.jit(fn)`` compiled for ``args`` (``memory_analysis``)."""
    return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


def max_abs(a, b) -> float:
    """Largest absolute element difference over two pytrees of the same structure."""
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def rel_norm(a, b) -> float:
    """‖a − b‖ / ‖b‖ over whole pytrees (global 2-norm)."""
    import optax

    return float(optax.tree.norm(jax.tree.map(jnp.subtract, a, b)) / optax.tree.norm(b))


def max_rel(a, b) -> float:
    """Largest per-leaf max|a − b| / max|b| over two pytrees of the same structure."""
    return max(float(jnp.max(jnp.abs(x - y)) / (jnp.max(jnp.abs(y)) + 1e-30))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
