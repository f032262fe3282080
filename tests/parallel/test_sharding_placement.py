"""Where parameters land (issue #14, 8 fake devices): the starting policy loaded straight into the
trainer's layout (``runner.base_params(shardings=trainer.param_shardings)``), the sampler's bf16
copy laid out by ``sampling_shardings`` and kept in that layout by the sampler, and the row block
each process feeds (``process_rows``, one process here). References: the unsharded load / init and
the sampler on a replicated copy."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from prs.core import prefix as ps
from prs.models import hf
from prs.models import qwen3 as M
from prs.models.sampler import SamplerConfig, sample
from prs.parallel import sharding as shd
from prs.rl import runner
from prs.rl import trainer as T
from prs.tasks.registry import make_task

TASK = make_task("arith", min_terms=2, max_terms=4)
# tensor-splittable widths: heads 4, kv_heads 2, d_ff 64, vocab and embed even
MODEL = M.ModelConfig.preset("tiny", vocab_size=TASK.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                             head_dim=8, d_ff=64, tie_embeddings=False)
RL = T.RLConfig(tasks_per_step=2, group_size=8, eval=T.EvalConfig(count=4, samples=1))
PC = ps.PrefixConfig(mode="baseline", n=8)


def _trainer(devices, rl=RL, **axes):
    return T.Trainer(TASK, MODEL, rl, PC, mesh=shd.make_mesh(devices, **axes))


def _split(x) -> bool:
    return x.addressable_shards[0].data.size < x.size


def _check_layout_and_values(got, want, shardings, rtol=0.0):
    n_split = 0
    for (path, x), w, sh in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want),
                                jax.tree.leaves(shardings)):
        name = jax.tree_util.keystr(path)
        assert isinstance(x.sharding, NamedSharding) and x.sharding.is_equivalent_to(sh, x.ndim), name
        assert x.dtype == w.dtype, name
        np.testing.assert_allclose(np.asarray(x), np.asarray(w), rtol=rtol, atol=0, err_msg=name)
        n_split += _split(x)
    return n_split


def _whole_copies_on_one_device(before, params):
    """Arrays created since ``before`` (ids) that hold a whole (>= 512-element) parameter on one device."""
    full = {x.shape for x in jax.tree.leaves(params) if x.size >= 512}
    return [a.shape for a in jax.live_arrays()
            if id(a) not in before and len(a.sharding.device_set) == 1 and a.shape in full]


@pytest.mark.parametrize("source", ["hf_checkpoint", "cached_warm_start", "fresh_init"])
def test_base_params_arrive_in_the_trainer_layout(source, tmp_path, eight_devices):
    tr = _trainer(eight_devices, fsdp=4, tensor=2)
    base = tmp_path / "base"
    if source == "hf_checkpoint":
        hf.save_checkpoint(tmp_path / "ckpt", M.init_params(MODEL, jax.random.PRNGKey(3), std=0.2), MODEL)
        run = runner.RunConfig(init_checkpoint=str(tmp_path / "ckpt"))
    elif source == "cached_warm_start":
        run = runner.RunConfig(sft_steps=2, sft_batch=4)
        runner.base_params(TASK, MODEL, run, base, log=lambda *a: None)  # builds the cache (one device)
    else:
        run = runner.RunConfig(sft_steps=0, sft_seed=4)
    want = runner.base_params(TASK, MODEL, run, base, log=lambda *a: None)  # the unsharded load
    want = jax.tree.map(np.asarray, want)
    before = {id(a) for a in jax.live_arrays()}
    got = runner.base_params(TASK, MODEL, run, base, log=lambda *a: None, shardings=tr.param_shardings)
    # loaded: bit-identical; a fresh init is jitted into the layout, the unsharded one eager: 1 ulp apart
    rtol = 1e-6 if source == "fresh_init" else 0.0
    assert _check_layout_and_values(got, want, tr.param_shardings, rtol) >= 5  # the kernels are split 8 ways
    q = got["layers"]["q_proj"]
    assert q.sharding.spec == P(None, "fsdp", "tensor") and q.addressable_shards[0].data.shape == (2, 8, 16)
    assert not _whole_copies_on_one_device(before, want)  # no whole copy left on one device
    # and the trainer keeps that layout (init_state places nothing anew)
    s = tr.init_state(got)
    assert s.params["layers"]["q_proj"].sharding.is_equivalent_to(tr.param_shardings["layers"]["q_proj"], 3)


def test_sampling_copy_laid_out_for_the_sampler(eight_devices):
    tr = _trainer(eight_devices, rl=dataclasses.replace(RL, rollout=dataclasses.replace(RL.rollout, sampling_dtype="bfloat16")), fsdp=4, tensor=2)
    params = tr.init_state(M.init_params(MODEL, jax.random.PRNGKey(0), std=0.2)).params
    sp = tr.sampling_params(params)
    want_sh = shd.sampling_shardings(MODEL, tr.mesh)
    # the expected layout, by hand: no batch axis anywhere; tensor on heads/kv_heads/mlp/vocab
    assert want_sh["layers"]["q_proj"].spec == P(None, None, "tensor")
    assert want_sh["layers"]["o_proj"].spec == P(None, "tensor", None)
    assert want_sh["layers"]["down_proj"].spec == P(None, "tensor", None)
    assert want_sh["embed_tokens"].spec == P("tensor", None)
    assert all("fsdp" not in str(s.spec) and "data" not in str(s.spec) for s in jax.tree.leaves(want_sh))
    n_split = _check_layout_and_values(sp, jax.tree.map(lambda x: np.asarray(x).astype(jnp.bfloat16), params),
                                       want_sh)
    assert n_split >= 5
    assert sp["layers"]["q_proj"].addressable_shards[0].data.shape == (2, 32, 16)  # half the columns, all rows
    # the sampler keeps that layout (no re-replication) and samples what it samples from a replicated copy
    kept = shd.sampler_placement(sp, tr.mesh)
    assert all(a is b for a, b in zip(jax.tree.leaves(kept), jax.tree.leaves(sp)))
    fsdp_params = shd.sampler_placement(params, tr.mesh)  # training layout (fsdp-split): replicated as before
    assert all(x.sharding.is_fully_replicated for x in jax.tree.leaves(fsdp_params))
    rep = jax.device_put(sp, shd.replicated(tr.mesh))
    prompt, plen = TASK.prompts(TASK.eval_problems(count=8))
    scfg = SamplerConfig(max_new_tokens=6, eos_id=TASK.eos_id, pad_id=TASK.pad_id)
    key = jax.random.PRNGKey(5)
    a = sample(sp, prompt, plen, key, cfg=MODEL, scfg=scfg, mesh=tr.mesh)
    b = sample(rep, prompt, plen, key, cfg=MODEL, scfg=scfg, mesh=tr.mesh)
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    np.testing.assert_allclose(np.asarray(a.logprobs), np.asarray(b.logprobs), atol=2e-2)  # bf16 sums, reordered


def test_fsdp_only_mesh_sampling_copy_is_replicated(eight_devices):
    tr = _trainer(eight_devices, rl=dataclasses.replace(RL, rollout=dataclasses.replace(RL.rollout, sampling_dtype="bfloat16")), fsdp=8)
    sp = tr.sampling_params(tr.init_state(M.init_params(MODEL, jax.random.PRNGKey(0))).params)
    assert all(x.sharding.is_fully_replicated and x.dtype == jnp.bfloat16 for x in jax.tree.leaves(sp))


def test_process_rows_and_shard_rows_one_process(eight_devices):
    mesh = shd.make_mesh(eight_devices, fsdp=4, tensor=2)
    assert shd.process_rows(mesh, 16) == slice(0, 16)
    x = np.arange(32).reshape(16, 2)
    g = shd.shard_rows({"x": x}, {"x": shd.data_sharding(mesh, 2)})["x"]
    assert g.sharding.spec == P("fsdp", None)
    np.testing.assert_array_equal(np.asarray(g), x)
