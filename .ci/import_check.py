"""Run by .ci/run inside a clean venv holding only `pip install .` (no extras): the kernels import
and compute without the test stack, torch or transformers (issue #21, item 9)."""
import importlib.util
import sys

import jax.numpy as jnp

from prs import group_advantages, policy_loss, sample  # noqa: F401

heavy = [m for m in ("torch", "transformers", "pytest", "hypothesis") if importlib.util.find_spec(m) is not None]
if heavy:
    sys.exit(f"`pip install .` pulled in {heavy}: they belong to the [dev]/[hf] extras")
adv = group_advantages(jnp.array([[1.0, 0.0, 0.0, 0.0]]), estimator="rloo")  # [B, N]
expected = [1.0, -1 / 3, -1 / 3, -1 / 3]
if not all(abs(float(a) - e) < 1e-5 for a, e in zip(adv[0], expected)):
    sys.exit(f"rloo advantages {adv.tolist()} != {expected}")
print(f"import check: prs {sys.modules['prs'].__file__} imports and computes without torch/transformers")
