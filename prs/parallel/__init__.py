"""Meshes, sharding rules and multi-host start-up (``sharding``); several processes sampling, scoring
and checkpointing one step as one program (``multihost``).

May import ``prs.core`` only; the model, sampler and trainer lay their arrays out with it.
"""
