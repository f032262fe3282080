"""Pure jitted kernels: group advantages, policy losses, the prefix controller, argument checks.

Imports nothing from ``prs`` outside ``prs.core`` (tested in ``tests/test_layout.py``): everything
else builds on these, and users import them into their own JAX trainers.
"""
