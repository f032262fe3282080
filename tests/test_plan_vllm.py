"""prs.plan's vLLM engine section (``plan_vllm``, ``python -m experiments.plan ... rollout=vllm``): parameter and
KV bytes against independent counts (the HF state dict prs writes for vLLM, the KV cache prs allocates),
the colocation rule with JAX's pool, sleep mode, the weight push's arithmetic, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs import plan as PL
from prs.models import hf
from prs.models import qwen3 as M
from prs.rollout.vllm_engine import hf_weights

TINY = dict(vocab_size=96, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=48)


@pytest.mark.parametrize("tied", [True, False])
def test_hf_parameter_count_equals_the_state_dict_the_engine_loads(tied):
    cfg = M.ModelConfig(**TINY, tie_embeddings=tied)
    params = M.init_params(cfg, jax.random.key(0))
    loaded = sum(int(np.prod(a.shape)) for a in hf_weights(params, cfg).values())  # what vLLM is given: untied
    assert PL.hf_param_count(cfg) == loaded
    assert PL.hf_param_count(cfg, untied=False) == M.param_count(params)  # tied stays tied


@pytest.mark.parametrize("name, billions", [("qwen3_4b", 4.022), ("qwen3_8b", 8.191)])
def test_hf_parameter_count_of_the_real_shapes_equals_the_parameter_shapes(name, billions):
    cfg = M.ModelConfig.preset(name)
    assert PL.hf_param_count(cfg, untied=False) == PL.param_count(cfg)  # second way: jax.eval_shape of init
    assert PL.hf_param_count(cfg, untied=False) / 1e9 == pytest.approx(billions, abs=1e-3)  # the models' cards


def test_kv_bytes_per_token_equal_the_cache_prs_allocates_and_split_over_tensor_parallel():
    cfg = M.ModelConfig(**TINY)
    S = 40
    cache = M.init_cache(cfg, 1, S, dtype=jnp.bfloat16)
    per_token = sum(x.nbytes for x in cache.values()) // S
    assert PL.kv_bytes_per_token(cfg) == per_token == 2 * 3 * 2 * 16 * 2
    q4 = M.ModelConfig.preset("qwen3_4b")
    assert PL.kv_bytes_per_token(q4) == 2 * 36 * 8 * 128 * 2 == 147_456
    assert PL.kv_bytes_per_token(q4, tensor_parallel=2) == 147_456 // 2
    assert PL.kv_bytes_per_token(q4, tensor_parallel=16) == 2 * 36 * 1 * 128 * 2  # Kv=8 < tp: one head each


def _jax_plan(cfg, **kw):
    return PL.plan(cfg, rows=512, width=512 + 2 * 4096, prompt_len=512, max_new_tokens=4096, micro_batches=64,
                   fsdp=8, device_gib=141, **kw)


def _vllm(cfg, jp, **kw):
    args = dict(rows=512, prompt_len=512, max_new_tokens=4096, devices=8, device_gib=141, jax_plan=jp,
                jax_fraction=0.5, memory_utilization=0.45)
    return PL.plan_vllm(cfg, **{**args, **kw})


def test_kv_pool_pages_rows_and_the_colocation_rule():
    cfg = M.ModelConfig.preset("qwen3_4b", dtype=jnp.bfloat16, remat="full", attention_impl="cudnn")
    jp = _jax_plan(cfg)
    v = _vllm(cfg, jp)
    hbm = 141 * PL.GIB
    assert v.data_parallel == 8 and v.rows_per_replica == 64 and v.slots == 512 + 2 * 4096
    assert v.weights == PL.hf_param_count(cfg) * 2  # tp = 1: the whole untied bf16 model on each GPU
    assert v.kv_pool == int(0.45 * hbm - v.weights - v.activations - PL.CONTEXT_BYTES)
    assert v.kv_tokens % PL.VLLM_PAGE == 0 and 0 <= v.kv_pool - v.kv_tokens * v.kv_per_token < (PL.VLLM_PAGE + 1) * v.kv_per_token
    assert v.concurrent_rows == min(64, v.kv_tokens // v.slots) and v.colocated_fits
    # JAX's pool and vLLM's share exceed the GPU: refused (vLLM would not start)
    assert not _vllm(cfg, jp, jax_fraction=0.75, memory_utilization=0.3).colocated_fits
    # too small a share for one row's KV
    assert _vllm(cfg, jp, jax_fraction=0.9, memory_utilization=0.08).concurrent_rows == 0
    # sleep mode: the phases apart; the update alone and resident + vLLM's share each fit
    big = _vllm(cfg, jp, jax_fraction=0.6, memory_utilization=0.8)
    assert not big.colocated_fits and _vllm(cfg, jp, jax_fraction=0.6, memory_utilization=0.8, sleep_mode=True).colocated_fits
    # tensor parallel: weights and KV per GPU split, more rows per replica, fewer replicas
    t2 = _vllm(cfg, jp, tensor_parallel=2)
    assert t2.data_parallel == 4 and t2.rows_per_replica == 128
    assert t2.weights == v.weights // 2 and t2.kv_per_token == v.kv_per_token // 2
    # TPU: one allocator in one process: the update peak and vLLM's share add up
    tpu = _vllm(cfg, jp, platform="tpu", device_gib=95, memory_utilization=0.5)
    assert tpu.colocated_fits == (jp.update_total + 0.5 * 95 * PL.GIB <= 95 * PL.GIB)


def test_weight_push_seconds_follow_the_stated_bandwidths():
    cfg = M.ModelConfig.preset("qwen3_8b", dtype=jnp.bfloat16, remat="full")
    jp = _jax_plan(cfg)
    bw = dict(hbm=4e12, nvlink=400e9, pcie=40e9, host=8e9)
    v = _vllm(cfg, jp, bandwidths=bw)
    n = PL.hf_param_count(cfg)  # 8B is untied already: no extra head
    assert n == PL.param_count(cfg) and v.sync_bytes == 2 * n
    assert v.sync_dlpack_s == pytest.approx(2 * n * 7 / 8 / 400e9 + 2 * 2 * n / 4e12)
    assert v.sync_host_s == pytest.approx(4 * n / 40e9 + 4 * n / 8e9 + 2 * n / 40e9)  # fp32 masters out, bf16 in
    assert 15 < v.sync_bytes / PL.GIB < 16  # 8.19e9 x 2 B
    # the decode roofline: replicas x rows at once x HBM bandwidth / bytes a step reads
    step = v.weights + v.concurrent_rows * (512 + 4096 / 2) * v.kv_per_token
    assert v.decode_tokens_per_s == pytest.approx(8 * v.concurrent_rows * 4e12 / step)


@pytest.mark.parametrize("kw, word", [(dict(tensor_parallel=3), "tensor_parallel"),
                                      (dict(memory_utilization=1.5), "memory_utilization"),
                                      (dict(platform="cuda"), "platform"),
                                      (dict(bandwidths={"nvme": 1e9}), "bandwidths")])
def test_bad_input_is_one_clear_error(kw, word):
    cfg = M.ModelConfig.preset("qwen3_4b")
    with pytest.raises(ValueError, match=word):
        _vllm(cfg, _jax_plan(cfg), **kw)


def test_cli_prints_the_vllm_section_and_refuses_a_pool_that_leaves_vllm_nothing(capsys, monkeypatch):
    from experiments.plan import main

    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
    assert main(["+experiment=grpo_ps_qwen3_4b_h200x8", "rollout=vllm", "rollout.row_chunk=null", "--vllm-tensor-parallel", "2"]) == 0
    out = capsys.readouterr().out
    assert "tensor_parallel=2 x data_parallel=4" in out and "gpu_memory_utilization=0.45" in out
    assert "colocated (both shares at once): fits" in out and "by host copy" in out
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.92")  # the launchers' value: 0.03 left for vLLM
    assert main(["+experiment=grpo_ps_qwen3_4b_h200x8", "rollout=vllm", "rollout.row_chunk=null"]) == 1
    assert "DOES NOT FIT" in capsys.readouterr().out


def test_sbatch_command_plans_on_two_nodes(capsys, monkeypatch):
    """The SLURM script's ``experiments.train`` overrides, with SLURM_NTASKS = 16 (2 nodes x 8 GPUs),
    give a plan that fits; the preset's one-node micro-batches alone are refused in one line."""
    import pathlib
    import re

    from experiments.plan import main

    text = (pathlib.Path(__file__).resolve().parent.parent / "scripts" / "slurm_multinode.sbatch").read_text()
    code = " ".join(line.rstrip("\\") for line in text.splitlines() if not line.lstrip().startswith("#"))
    code = code.replace("$((512 / SLURM_NTASKS))", str(512 // 16))  # bash's arithmetic at 16 tasks
    args = [a for a in re.search(r"-m experiments\.train (.*)", code).group(1).split()
            if a.startswith(("+experiment=", "mesh=", "algo."))]
    assert "algo.micro_batches=32" in args
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.92")
    assert main([*args, "--devices", "16"]) == 0 and "verdict: fits" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main([a for a in args if not a.startswith("algo.micro_batches")] + ["--devices", "16"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and "micro_batches" in err[0], err


def test_cli_plans_with_the_rollout_config_keys_and_a_flag_overrides_them(capsys, monkeypatch):
    """``rollout.gpu_memory_utilization`` / ``rollout.tensor_parallel_size`` set the plan's vLLM share and TP
    (the numbers the run would start vLLM with); ``--vllm-*`` flags still win."""
    from experiments.plan import main

    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
    keys = ["+experiment=grpo_ps_qwen3_4b_h200x8", "rollout=vllm", "rollout.row_chunk=null", "rollout.gpu_memory_utilization=0.3",
            "rollout.tensor_parallel_size=2"]
    assert main(keys) == 0
    out = capsys.readouterr().out
    assert "tensor_parallel=2 x data_parallel=4" in out and "gpu_memory_utilization=0.3" in out
    assert main(keys + ["--vllm-tensor-parallel", "4", "--vllm-memory-utilization", "0.4"]) == 0
    out = capsys.readouterr().out
    assert "tensor_parallel=4 x data_parallel=2" in out and "gpu_memory_utilization=0.4" in out
