"""Probe (#30): vLLM 0.32 (CPU) with a TIED Qwen3 loaded as tied, weights pushed in place with
``reload_weights``: are greedy rollouts those of the new weights (the jax engine on them)?
Measured 2026-12-02: before the push 6/6 rows equal; after it 0/6, and vLLM logs
``ParallelLMHead: Failed to load weights``. Hence ``prs.rollout.vllm_engine`` always loads the
model untied (lm_head = embed copy) and pushes both; tests/rollout/test_vllm_engine.py checks that case.

  /work/vllm-venv/bin/python benchmarks/probe_vllm_tied.py
"""
import os, tempfile, time
for k, v in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}.items(): os.environ.setdefault(k, v)
import jax, numpy as np, torch
from prs.models import qwen3 as M, sampler as S, hf
from prs.rollout import JaxEngine
import vllm
cfg = M.ModelConfig(vocab_size=128, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=128, rope_theta=1e4, tie_embeddings=True)
p0, p1 = (M.init_params(cfg, jax.random.key(s), std=0.15) for s in (0, 5))
d = tempfile.mkdtemp(); hf.save_checkpoint(d, p0, cfg)
llm = vllm.LLM(model=d, skip_tokenizer_init=True, dtype="float32", max_model_len=64, enforce_eager=True, enable_chunked_prefill=False)
rng = np.random.default_rng(0); prompts = rng.integers(4, 128, (6, 8)).astype(np.int32)
sp = vllm.SamplingParams(max_tokens=8, temperature=0, ignore_eos=True, detokenize=False)
scfg = S.SamplerConfig(max_new_tokens=8, temperature=0.0, buckets=(8,))
ref = JaxEngine(cfg)
def run(p):
    outs = llm.generate([{"prompt_token_ids": r.tolist()} for r in prompts], sp, use_tqdm=False)
    ref.update_params(p); ro = ref.generate(prompts, np.full(6, 8), key=jax.random.key(0), scfg=scfg)
    return [list(o.outputs[0].token_ids) for o in outs], np.asarray(ro.tokens)[:, 8:].tolist()
a, b = run(p0); print("TIED load, before update: vllm == jax:", a == b)
sd = hf.to_hf_state_dict(p1, cfg)
llm.collective_rpc("reload_weights", kwargs={"weights_iterator": [(k, torch.from_numpy(np.array(v))) for k, v in sd.items()]})
llm.reset_prefix_cache()
a, b = run(p1); print("TIED load, after in-place update: vllm == jax:", a == b, sum(x == y for x, y in zip(a, b)), "/ 6 rows")
