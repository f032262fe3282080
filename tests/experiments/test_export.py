"""``python -m experiments.export``: a run directory's orbax checkpoint -> a Hugging Face model directory
that ``transformers`` loads with prs's logits and the run's tokenizer / chat template.

The run directory is made as ``prs.rl.runner.run`` makes it (``rundir.check_config`` records the
configuration, ``Trainer.init_state`` + ``ocp.CheckpointManager.save(step, StandardSave(checkpoint_tree(state)))``
writes the checkpoint) from perturbed parameters, so no training step is compiled; the slow test
exports a run the runner itself trained."""
import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("tokenizers")

from experiments import export  # noqa: E402
from prs.models import hf  # noqa: E402
from prs.models import qwen3 as M  # noqa: E402
from prs.models.tokenizer import build_tiny_tokenizer, tokenizer_files  # noqa: E402
from prs.tasks.math_jsonl import tokenizer_texts  # noqa: E402

CONF = pathlib.Path(__file__).resolve().parents[2] / "conf"
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}


def _base(path, family):
    """A tiny random base checkpoint: qwen3 (make_tiny_checkpoint: ChatML template, pad token) or a
    Llama 3.1-shaped one with no chat template and no pad token (a base model)."""
    if family == "qwen3":
        hf.make_tiny_checkpoint(path, seed=0, texts=tokenizer_texts(), d_model=32, head_dim=8, d_ff=64)
        return
    tok = build_tiny_tokenizer(tokenizer_texts(), vocab_size=384)
    files = tokenizer_files(tok)
    tc = json.loads(files["tokenizer_config.json"])
    del tc["chat_template"], tc["pad_token"]
    files["tokenizer_config.json"] = json.dumps(tc)
    cfg = M.ModelConfig(vocab_size=384, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64,
                        tie_embeddings=False, qk_norm=False, rope_theta=500.0, rope_scaling=LLAMA3)
    hf.save_checkpoint(path, M.init_params(cfg, jax.random.key(1), std=0.1), cfg, extra_files=files)


def _run_dir(tmp_path, family, *, steps=(1, 3)):
    """A run directory with checkpoints at ``steps`` written the runner's way; returns (run dir,
    {step: params}, the task)."""
    import orbax.checkpoint as ocp
    from hydra import compose, initialize_config_dir

    from experiments.config import TrainCfg, upgrade, validate
    from experiments.train import build
    from prs.rl import rundir
    from prs.rl.trainer import Trainer, checkpoint_tree

    base = tmp_path / "base"
    _base(base, family)
    extra = ["task.params.chat_template=chatml"] if family == "llama3" else []
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        dcfg = compose(config_name="config", overrides=[
            "+experiment=math_qwen3_tiny", f"model.checkpoint={base}", "task.params.backend=fallback",
            f"sft.base_dir={tmp_path}/sft", "ckpt_every=1", *[f"++{x}" for x in extra]])
    cfg = validate(dcfg)
    task, model_cfg, rl, prefix, run_cfg = build(cfg)
    run = tmp_path / "run"
    run.mkdir()
    rundir.check_config(run, dataclasses.asdict(cfg), defaults=dataclasses.asdict(TrainCfg()), upgrade=upgrade)
    trainer = Trainer(task, model_cfg, rl, prefix, seed=0)
    _, params0 = hf.load_checkpoint(base)
    saved = {}
    mngr = ocp.CheckpointManager(run / "checkpoints", options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True))
    for s in steps:  # "trained" parameters: the base plus noise (a lost or stale tensor shows)
        noise = jax.tree.map(lambda x, k: x + 0.05 * jax.random.normal(k, x.shape, x.dtype), params0,
                             jax.tree.unflatten(jax.tree.structure(params0),
                                                list(jax.random.split(jax.random.key(s), len(jax.tree.leaves(params0))))))
        state = trainer.init_state(noise)._replace(step=jnp.asarray(s, jnp.int32))
        saved[s] = jax.tree.map(np.asarray, noise)
        mngr.save(s, args=ocp.args.StandardSave(checkpoint_tree(state)))
    mngr.wait_until_finished()
    mngr.close()
    return run, saved, task, model_cfg


@pytest.mark.parametrize("family", ["qwen3", "llama3"])
def test_export_loads_in_transformers(family, tmp_path, capsys):
    """The exported directory: transformers' logits equal prs's on the checkpoint's parameters, at the
    latest step and at ``--step``; sharded with an index under ``--max-shard-size``; its tokenizer
    renders the run's prompts (llama3: the base has no template, the run chose ``chatml``, and the
    missing pad token was eos); a non-empty ``--out`` and an absent step are one error line each."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    run, saved, task, model_cfg = _run_dir(tmp_path, family)
    tokens = np.random.default_rng(0).integers(0, model_cfg.vocab_size, (2, 40)).astype(np.int32)
    for step, args in [(3, []), (1, ["--step", "1", "--max-shard-size", "30KB"])]:
        out = tmp_path / f"hf{step}"
        assert export.main([str(run), "--out", str(out), *args]) == 0
        model = transformers.AutoModelForCausalLM.from_pretrained(out).float().eval()
        with torch.no_grad():
            ref = model(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
        ours = np.asarray(M.forward(jax.tree.map(jnp.asarray, saved[step]), jnp.asarray(tokens), cfg=model_cfg))
        np.testing.assert_allclose(ours, ref, atol=2e-5, rtol=1e-5)
        shards = sorted(p.name for p in out.glob("*.safetensors"))
        if args:
            index = json.loads((out / "model.safetensors.index.json").read_text())
            assert len(shards) > 1 and sorted(set(index["weight_map"].values())) == shards
        else:
            assert shards == ["model.safetensors"]
    tok = transformers.AutoTokenizer.from_pretrained(out)
    msgs = [{"role": "user", "content": "1+1?"}]
    want = task.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=False)
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False) == want
    gen = transformers.GenerationConfig.from_pretrained(out)
    assert gen.eos_token_id == task.eos_id and gen.pad_token_id == task.pad_id
    if family == "llama3":
        assert task.pad_id == task.eos_id and (out / "chat_template.jinja").exists()
        assert json.loads((out / "config.json").read_text())["rope_scaling"] == LLAMA3
    capsys.readouterr()
    assert export.main([str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and "not empty" in err and err.count("\n") == 1
    assert export.main([str(run), "--out", str(tmp_path / "new"), "--step", "2"]) == 2
    assert "holds steps [1, 3]" in capsys.readouterr().err and not (tmp_path / "new").exists()


def test_restore_params_from_a_relative_run_dir(tmp_path, monkeypatch):
    """A run directory given relative to the working directory (``python -m experiments.export
    runs/NAME``, as docs/your_own_setup.md writes it) restores the checkpointed parameters (orbax reads
    no metadata from a relative path)."""
    run, saved, _, _ = _run_dir(tmp_path, "qwen3", steps=(2,))
    monkeypatch.chdir(tmp_path)
    params = export.restore_params(pathlib.Path(run.name) / "checkpoints" / "2")
    jax.tree.map(np.testing.assert_array_equal, params, saved[2])


@pytest.mark.slow
def test_export_of_a_trained_run(tmp_path):
    """A run the runner trained (2 RL steps, checkpointed, ``logging.save_hf_every=1``) exports to a
    directory whose logits in transformers equal the runner's restored parameters; the runner's own
    Hugging Face copies ``hf/step_1``, ``hf/step_2`` hold the same weights as the exports of steps 1, 2."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build
    from prs.rl.runner import run

    base = tmp_path / "base"
    _base(base, "qwen3")
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        dcfg = compose(config_name="config", overrides=[
            "+experiment=math_qwen3_tiny", f"model.checkpoint={base}", "task.params.max_new_tokens=8",
            "task.params.backend=fallback", f"sft.base_dir={tmp_path}/sft", "ckpt_every=1",
            "logging.save_hf_every=1"])
    cfg = validate(dcfg)
    task, model_cfg, rl, prefix, run_cfg = build(cfg)
    assert run_cfg.save_hf_every == 1
    run(task, model_cfg, rl, prefix, run_cfg, tmp_path / "run", config_dict=dataclasses.asdict(cfg),
        log=lambda *a: None)
    params = export.restore_params(tmp_path / "run" / "checkpoints" / "2")
    assert np.abs(params["norm"] - np.asarray(hf.load_checkpoint(base)[1]["norm"])).max() > 0  # it trained
    assert export.main([str(tmp_path / "run"), "--out", str(tmp_path / "hf")]) == 0
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").float().eval()
    tokens = np.random.default_rng(1).integers(0, model_cfg.vocab_size, (2, 12)).astype(np.int32)
    with torch.no_grad():
        ref = model(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
    ours = np.asarray(M.forward(jax.tree.map(jnp.asarray, params), jnp.asarray(tokens), cfg=model_cfg))
    np.testing.assert_allclose(ours, ref, atol=2e-5, rtol=1e-5)
    assert export.main([str(tmp_path / "run"), "--out", str(tmp_path / "hf1"), "--step", "1"]) == 0
    for step, exported in [(1, tmp_path / "hf1"), (2, tmp_path / "hf")]:
        own = tmp_path / "run" / "hf" / f"step_{step}"
        assert sorted(p.name for p in own.iterdir()) == sorted(p.name for p in exported.iterdir())
        for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
            assert (own / name).read_bytes() == (exported / name).read_bytes(), (step, name)
