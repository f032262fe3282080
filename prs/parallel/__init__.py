"""Meshes, sharding rules and multi-host start-up (``sharding``).

May import ``prs.core`` only; the model, sampler and trainer lay their arrays out with it.
"""
