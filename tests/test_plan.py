"""prs.plan: the planner's update temp bytes against XLA's memory_analysis on two small configs
(not the shapes its constants were fitted on), and the accelerator presets print "fits"."""
import functools

import jax
import jax.numpy as jnp
import optax
import pytest

from prs import plan as PL
from prs.models.qwen3 import ModelConfig
from prs.rl import trainer as T


def _measured_temp(cfg, rows, width, rl):
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
    params = cfg.param_shapes()
    opt = jax.eval_shape(tx.init, params)
    s = lambda dt: jax.ShapeDtypeStruct((rows, width), dt)  # noqa: E731
    batch = T.Batch(s(jnp.int32), s(jnp.int32), s(jnp.bool_), s(jnp.bool_), s(jnp.float32),
                    jax.ShapeDtypeStruct((rows,), jnp.float32))
    f = jax.jit(functools.partial(T.update_step, cfg=cfg, rl=rl, tx=tx), donate_argnums=(0, 1))
    return f.lower(params, opt, batch).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("remat, shape, rows, width, micro, chunk", [
    ("full", dict(vocab_size=2048, d_model=96, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=24, d_ff=384), 8, 97, 1, 32),
    ("none", dict(vocab_size=3072, d_model=64, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=32, d_ff=256), 16, 65, 2, 16),
])
def test_planner_matches_memory_analysis_within_25_percent(remat, shape, rows, width, micro, chunk):
    cfg = ModelConfig(**shape, remat=remat)
    rl = T.RLConfig(micro_batches=micro, logits_chunk=chunk)
    got = _measured_temp(cfg, rows, width, rl)
    p = PL.plan(cfg, rows=rows, width=width, prompt_len=8, max_new_tokens=8, micro_batches=micro, logits_chunk=chunk)
    assert 0.75 <= p.update_temp / got <= 1.25, (p.update_temp / 2**20, got / 2**20)
    assert p.parameters == PL.param_count(cfg) * 4  # one device: the whole fp32 model


def test_planner_splits_by_the_mesh_and_rejects_bad_shapes():
    cfg = ModelConfig.preset("qwen3_4b", dtype=jnp.bfloat16)
    one = PL.plan(cfg, rows=64, width=1024, prompt_len=512, max_new_tokens=256, micro_batches=8)
    eight = PL.plan(cfg, rows=64, width=1024, prompt_len=512, max_new_tokens=256, micro_batches=8, fsdp=8)
    assert one.parameters == 8 * eight.parameters and one.optimizer_state == 8 * eight.optimizer_state
    assert one.kv_cache == 8 * eight.kv_cache
    assert eight.activations < one.activations
    with pytest.raises(ValueError, match="multiple"):
        PL.plan(cfg, rows=60, width=1024, prompt_len=512, max_new_tokens=256, micro_batches=8)


@pytest.mark.parametrize("preset", ["grpo_ps_qwen3_4b_h200x8", "grpo_ps_qwen3_4b_v5p64",
                                    "grpo_ps_qwen3_8b_h200x8", "grpo_ps_qwen3_8b_v5p64"])
def test_accelerator_presets_fit(preset, capsys, monkeypatch):
    from experiments.plan import main

    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.92")  # as scripts/slurm_multinode.sbatch exports it
    assert main([f"+experiment={preset}"]) == 0
    out = capsys.readouterr().out
    assert "verdict: fits" in out and "PEAK per device" in out


def test_planner_refuses_agent_sampling_keys_the_run_refuses(capsys):
    """An agent task refuses ``rollout.row_chunk`` (issue 45, item 3: it was dropped while the plan budgeted
    its sampler calls as chunked): the plan says so in the run's own line instead of planning a run that
    cannot start; a single-turn task still plans with it."""
    from experiments.plan import main

    for task in ("repair", "trap", "flaky_chain"):
        with pytest.raises(SystemExit, match=r"^experiments.plan: RolloutConfig.row_chunk=8 \(rollout.row_chunk\) "
                                             r"with a multi-turn agent task.*allowed row_chunk=null$"):
            main([f"task={task}", "rollout.row_chunk=8", "--devices", "1"])
    main(["task=repair", "--devices", "1"])
    main(["task=arith", "rollout.row_chunk=8", "--devices", "1"])
    assert "verdict" in capsys.readouterr().out


@pytest.mark.parametrize("rerolls", [False, True], ids=["fresh", "prefix_reroll"])
def test_planner_kv_cache_is_the_samplers_cache_of_a_fresh_and_a_reroll_call(rerolls):
    """The sampling line against the KV cache the sampler really allocates (``return_cache``) in the
    trainer's own configuration (``SingleTurnRollouts.scfg``): fresh rows of the prompt width, and
    re-roll rows of prompt + a replayed prefix (they fall in the prompt + budget bucket, so the
    cache is prompt + 2 x budget slots)."""
    import numpy as np

    from prs.core import prefix as ps
    from prs.models import qwen3 as M
    from prs.models.sampler import sample
    from prs.tasks.registry import make_task

    task = make_task("arith", min_terms=2, max_terms=4)
    cfg = ModelConfig.preset("tiny", vocab_size=task.vocab_size)
    rl = T.RLConfig(tasks_per_step=2, group_size=4, eval=T.EvalConfig(count=2))
    tr = T.Trainer(task, cfg, rl, ps.PrefixConfig(n=4))
    scfg = tr.rollouts.scfg
    prompt, plen = task.prompts(task.train_problems(seed=0, step=0, count=2))
    rows = np.repeat(prompt, 4, axis=0)                                     # [B·N, P]
    lens = np.repeat(plen, 4)
    if rerolls:  # prompt + a 3-token replayed prefix
        rows = np.concatenate([rows, np.full((rows.shape[0], 3), 1, rows.dtype)], axis=1)
        lens = lens + 3
    _, cache = sample(M.init_params(cfg, jax.random.PRNGKey(0)), rows, lens, jax.random.PRNGKey(1), cfg=cfg,
                      scfg=scfg, return_cache=True)
    got = sum(x.nbytes for x in jax.tree.leaves(cache))
    p = PL.plan_run(cfg, rl, prompt_len=prompt.shape[1], max_new_tokens=scfg.max_new_tokens, data=1, fsdp=1,
                    tensor=1, device_gib=1.0, prefix_rerolls=rerolls)
    assert p.kv_cache == got, (p.kv_cache, got)


def test_mem_fraction_reads_the_launchers_variable():
    """``XLA_PYTHON_CLIENT_MEM_FRACTION`` as JAX's GPU client reads it (0.75 unset; no pool with the
    platform allocator), never on TPU; a bad value is one error naming the variable."""
    assert PL.mem_fraction(env={}) == 0.75
    assert PL.mem_fraction(env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.92"}) == 0.92
    assert PL.mem_fraction(env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5", "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}) == 1.0
    assert PL.mem_fraction(platform="tpu", env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}) == 1.0
    for bad in ("1.5", "0", "most"):
        with pytest.raises(ValueError, match=rf"XLA_PYTHON_CLIENT_MEM_FRACTION='{bad}' must be a number in \(0, 1\]"):
            PL.mem_fraction(env={"XLA_PYTHON_CLIENT_MEM_FRACTION": bad})
    with pytest.raises(ValueError, match=r"platform='cpu'; choose from \('gpu', 'tpu'\)"):
        PL.mem_fraction(platform="cpu", env={})


@pytest.mark.parametrize("env, want_gib", [(None, 0.75 * 141), ("0.92", 0.92 * 141), ("0.5", 0.5 * 141)])
def test_planner_cli_compares_against_the_memory_jax_gets(env, want_gib, monkeypatch, capsys):
    """``python -m experiments.plan`` on the H200 preset: the device memory it plans against is
    ``XLA_PYTHON_CLIENT_MEM_FRACTION × 141 GiB`` from the environment (as the sbatch script exports
    it), 0.75 × when unset; on the v5p preset (``mesh.platform: tpu``) all 95 GiB whatever the variable."""
    from experiments.plan import main

    if env is None:
        monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    else:
        monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", env)
    main(["+experiment=grpo_ps_qwen3_8b_h200x8"])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("usable"))   # device memory x fraction
    assert float(line.split()[-2]) == pytest.approx(want_gib, abs=0.01), line
    main(["+experiment=grpo_ps_qwen3_8b_v5p64"])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("usable"))
    assert float(line.split()[-2]) == pytest.approx(95.0, abs=0.01), line


def test_prs_plan_cli_over_explicit_sizes_matches_the_config_cli(capsys, monkeypatch):
    """``python -m prs.plan`` (explicit sizes, no Hydra) and ``python -m experiments.plan`` (the same run
    read from ``conf/experiment/grpo_ps_qwen3_4b_h200x8.yaml``) print the same per-device report; a Hydra
    override given to ``prs.plan`` is refused with one line naming ``experiments.plan``."""
    from experiments.plan import main as config_main

    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.92")
    assert config_main(["+experiment=grpo_ps_qwen3_4b_h200x8"]) == 0
    want = capsys.readouterr().out.split("\n", 1)[1]  # the report, after the header line
    assert PL.main(["--preset", "qwen3_4b", "--rows", "512", "--prompt-len", "512", "--max-new-tokens", "4096",
                    "--micro-batches", "64", "--row-chunk", "128", "--fsdp", "8", "--device-gib", "141",
                    "--sampling-dtype", "bfloat16", "--remat", "full", "--attention-impl", "xla"]) == 0
    got = capsys.readouterr().out.split("\n", 1)[1]
    assert got == want
    with pytest.raises(SystemExit, match="python -m experiments.plan"):
        PL.main(["+experiment=grpo_ps_qwen3_4b_h200x8"])


def test_planner_kv_cache_per_device_on_an_explicit_fsdp_tensor_mesh(eight_devices):
    """The sampling KV line per device against the bytes one device really holds of the sampler's
    cache (``return_cache``, an Explicit fsdp4_tp2 mesh: rows over fsdp, kv heads over tensor), and
    the rule behind it: the cache is split over ``tensor`` only where it divides Kv."""
    import numpy as np

    from prs.models import qwen3 as M
    from prs.models import sampler as S
    from prs.parallel import sharding as shd

    cfg = ModelConfig.preset("tiny")  # Kv = 2
    scfg = S.SamplerConfig(max_new_tokens=5, buckets=(8,))
    mesh = shd.make_mesh(eight_devices, fsdp=4, tensor=2, axis_types="explicit")
    params = jax.device_put(M.init_params(cfg, jax.random.PRNGKey(0)), shd.sampling_shardings(cfg, mesh))
    toks = np.ones((8, 6), np.int32)
    _, cache = S.sample(params, toks, np.full(8, 6), jax.random.PRNGKey(1), cfg=cfg, scfg=scfg, mesh=mesh,
                        return_cache=True)
    got = sum(x.addressable_shards[0].data.nbytes for x in jax.tree.leaves(cache))
    p = PL.plan(cfg, rows=8, width=16, prompt_len=8, max_new_tokens=5, fsdp=4, tensor=2)
    assert p.kv_cache == got, (p.kv_cache, got)
    assert PL.plan(cfg, rows=8, width=16, prompt_len=8, max_new_tokens=5, fsdp=4, tensor=1).kv_cache == 2 * got
    odd = ModelConfig.preset("tiny", n_heads=6, n_kv_heads=3)  # tensor = 2 does not divide Kv = 3: rows only
    assert (PL.plan(odd, rows=8, width=16, prompt_len=8, max_new_tokens=5, fsdp=4, tensor=2).kv_cache
            == PL.plan(odd, rows=8, width=16, prompt_len=8, max_new_tokens=5, fsdp=4, tensor=1).kv_cache)
