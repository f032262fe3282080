"""The vLLM engine on untied weights (a separate LM head): greedy rollouts equal the jax engine's
before and after an in-place weight push that moves the LM head alone. Runs only where vLLM is
importable (the ``.ci/vllm`` venv); one engine for the module (vLLM starts slowly)."""

import pytest

pytest.importorskip("vllm", reason="vLLM not installed (the prs[vllm] extra; .ci/vllm builds a venv with it)")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from prs.models import qwen3 as M  # noqa: E402
from prs.models import sampler as S  # noqa: E402
from prs.rollout import JaxEngine, make_engine  # noqa: E402

CFG = M.ModelConfig(vocab_size=128, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=128,
                    rope_theta=10_000.0, tie_embeddings=False)
GREEDY = S.SamplerConfig(max_new_tokens=8, temperature=0.0, pad_id=0, buckets=(16,))


def test_untied_greedy_before_and_after_an_lm_head_push():
    p0 = M.init_params(CFG, jax.random.key(0), std=0.15)
    rng = np.random.default_rng(0)
    prompts, plen = rng.integers(4, 128, (6, 8)).astype(np.int32), rng.integers(2, 9, 6)
    eng, ref = make_engine("vllm", cfg=CFG, params=p0, max_model_len=64), JaxEngine(CFG)
    try:
        outs = []
        p1 = dict(p0, lm_head=M.init_params(CFG, jax.random.key(1), std=0.15)["lm_head"])
        for p in (p0, p1):
            eng.update_params(p)
            ref.update_params(p)
            got = eng.generate(prompts, plen, key=jax.random.key(0), scfg=GREEDY)
            want = ref.generate(prompts, plen, key=jax.random.key(0), scfg=GREEDY)
            np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(want.tokens))
            np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(want.logprobs), atol=1e-4)
            outs.append(np.asarray(got.tokens))
        assert (outs[0] != outs[1]).any()  # the pushed LM head changed the rollouts
    finally:
        eng.close()
