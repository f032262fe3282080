"""docs/your_own_setup.md end to end: every ```bash block marked ``<!-- tested -->`` runs verbatim
(two training steps on a user's JSONL with a reward file, Prefix Sampling on verl's Parquet, evaluate
of a run and of a checkpoint; train, export and evaluate a Qwen2-family and a Llama-3-family checkpoint
that transformers' ``save_pretrained`` wrote) on tiny random checkpoints and the shipped tiny data; then
the records say what the page promises and transformers reads the exports with prs's logits."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("pyarrow")

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "your_own_setup.md"


def _blocks(text: str) -> list[str]:
    """The bash blocks that follow a ``<!-- tested -->`` line."""
    return re.findall(r"<!-- tested -->\n```bash\n(.*?)```", text, flags=re.S)


def _families(blocks: list[str]) -> tuple[list[str], list[str]]:
    """(the blocks on the Qwen3 ``$CKPT``, the blocks on the ``$QWEN2`` / ``$LLAMA`` checkpoints)."""
    return [b for b in blocks if "$QWEN2" not in b], [b for b in blocks if "$QWEN2" in b]


def _env(tmp_path, **extra) -> dict:
    return {**os.environ, "D": str(REPO / "tests" / "data" / "own_setup"),
            "S": str(REPO / "prs" / "tasks" / "data" / "math_tiny.jsonl"),
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "PATH": os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ["PATH"]]), **extra}


def test_the_page_marks_its_commands():
    blocks = _blocks(PAGE.read_text())
    assert len(blocks) == 4
    assert "reward.path=$D/my_reward.py" in blocks[0] and "verl_test.parquet" in blocks[1]
    assert "experiments.evaluate" in blocks[2]
    qwen3, others = _families(blocks)
    assert len(qwen3) == 3 and len(others) == 1
    for cmd in ("experiments.train", "experiments.export", "experiments.evaluate"):
        assert others[0].count(f"python -m {cmd} ") == 2, cmd
    assert "model.checkpoint=$QWEN2" in others[0] and "model.checkpoint=$LLAMA" in others[0]


@pytest.mark.slow
def test_the_page_runs(tmp_path):
    from prs.models import hf
    from prs.tasks.math_jsonl import tokenizer_texts

    hf.make_tiny_checkpoint(tmp_path / "tiny_ckpt", seed=0, texts=tokenizer_texts())
    env = _env(tmp_path, CKPT="tiny_ckpt")
    script = "set -euo pipefail\n" + "\n".join(_families(_blocks(PAGE.read_text()))[0])
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = tmp_path / "runs"
    mine, verl = runs / "math_jsonl-baseline-mine-s0", runs / "math_jsonl-ps_ada-verl-s0"
    for run in (mine, verl):
        summary = json.loads((run / "summary.json").read_text())
        assert summary["steps"] == 2
        assert summary["provenance"]["grader"]["backend"] in ("math-verify", "fallback")
        metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        last = [m for m in metrics if m["kind"] == "eval"][-1]
        assert last["eval/pass_at_1"] == pytest.approx(last["eval/all/mean@4"])
    reward_fn = json.loads((mine / "summary.json").read_text())["provenance"]["reward_fn"]
    import hashlib
    assert reward_fn["name"] == "correct" and reward_fn["sha256"] == hashlib.sha256(
        (REPO / "tests" / "data" / "own_setup" / "my_reward.py").read_bytes()).hexdigest()
    last = [json.loads(x) for x in (verl / "metrics.jsonl").read_text().splitlines()][-1]
    assert {"eval/tiny_math/maj@4", "eval/tiny_algebra/pass@4", "eval/math_tiny/mean@4"} <= set(last)
    ev = json.loads((tmp_path / "eval_verl.json").read_text())
    assert ev["rows"] == {"tiny_math": 5, "tiny_algebra": 3, "math_tiny": 24} and ev["step"] == 2
    base = json.loads((tmp_path / "eval_base.json").read_text())
    assert base["rows"] == {"problems": 12} and "table" not in base
    assert "source" in out.stdout and "all" in out.stdout


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}


def _transformers_checkpoint(path, family: str) -> None:
    """A tiny random checkpoint written by transformers' ``save_pretrained`` plus a tiny BPE tokenizer:
    ``qwen2`` (random q/k/v biases, ChatML template, pad token) or ``llama3`` (``llama3`` RoPE scaling,
    untied ``lm_head``, no chat template, no pad token: a base model)."""
    import torch
    import transformers

    from prs.models.tokenizer import build_tiny_tokenizer, tokenizer_files
    from prs.tasks.math_jsonl import tokenizer_texts

    torch.manual_seed(0 if family == "qwen2" else 1)
    common = dict(vocab_size=384, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=1024, initializer_range=0.1)
    if family == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(tie_word_embeddings=True, rope_theta=10_000.0,
                                                                       **common))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            tie_word_embeddings=False, head_dim=8, rope_parameters={**LLAMA3, "rope_theta": 500.0}, **common))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):  # Qwen2's q/k/v biases (initialised to 0): a lost bias shows
                p.copy_(0.5 * torch.randn_like(p))
    model.save_pretrained(path)
    files = tokenizer_files(build_tiny_tokenizer(tokenizer_texts(), vocab_size=384))
    if family == "llama3":
        tc = json.loads(files["tokenizer_config.json"])
        del tc["chat_template"], tc["pad_token"]
        files["tokenizer_config.json"] = json.dumps(tc)
    for name, text in files.items():
        (path / name).write_text(text)


@pytest.mark.slow
def test_the_page_runs_qwen2_and_llama3(tmp_path):
    """The page's Qwen2 / Llama block verbatim on checkpoints transformers wrote: each run trains two
    steps and checkpoints step 2, its export loads in transformers as the
    family's class with logits equal to prs's forward on the run's checkpoint (within 2e-5; the
    reference is transformers), llama3 RoPE scaling and the chosen ChatML template kept, and
    ``experiments.evaluate`` on the export scores every row."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    import jax
    import jax.numpy as jnp
    import numpy as np

    from experiments import export
    from prs.models import hf
    from prs.models import qwen3 as M

    for name, family in (("tiny_qwen2", "qwen2"), ("tiny_llama3", "llama3")):
        _transformers_checkpoint(tmp_path / name, family)
    env = _env(tmp_path, QWEN2="tiny_qwen2", LLAMA="tiny_llama3")
    script = "set -euo pipefail\n" + "\n".join(_families(_blocks(PAGE.read_text()))[1])
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "pad" in out.stderr  # the Llama tokenizer's missing pad token is said once per process
    tokens = np.random.default_rng(0).integers(0, 384, (2, 24)).astype(np.int32)
    for tag, cls in (("qwen2", "Qwen2ForCausalLM"), ("llama", "LlamaForCausalLM")):
        run = tmp_path / "runs" / f"math_jsonl-baseline-{tag}-s0"
        assert json.loads((run / "summary.json").read_text())["steps"] == 2
        # a random model earns reward 0 on every rollout, so no group is mixed and the parameters stay
        # the base's; the check is that the run's step-2 checkpoint is what transformers reads back
        params = export.restore_params(run / "checkpoints" / "2")
        exported = tmp_path / "exported" / tag
        config = json.loads((exported / "config.json").read_text())
        assert config["architectures"] == [cls]
        model = transformers.AutoModelForCausalLM.from_pretrained(exported).float().eval()
        assert type(model).__name__ == cls
        with torch.no_grad():
            ref = model(torch.as_tensor(tokens, dtype=torch.long)).logits.numpy()
        cfg = hf.load_config(exported)
        ours = np.asarray(M.forward(jax.tree.map(jnp.asarray, params), jnp.asarray(tokens), cfg=cfg))
        np.testing.assert_allclose(ours, ref, atol=2e-5, rtol=1e-5)
        if tag == "qwen2":
            assert cfg.qkv_bias and not cfg.qk_norm
        else:
            rope = config.get("rope_scaling") or config.get("rope_parameters")
            assert {k: rope[k] for k in LLAMA3} == LLAMA3 and (exported / "chat_template.jinja").exists()
        ev = json.loads((tmp_path / f"eval_{tag}.json").read_text())
        assert ev["rows"] == {"problems": 12}
