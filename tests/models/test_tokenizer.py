"""The tokenizer and chat template (``prs.models.tokenizer``) against ``transformers`` on a tiny
random Qwen3 checkpoint: token ids, the checkpoint's template, a template using the Jinja features
real chat templates rely on, and the built-in ChatML rendering."""
import json

import pytest

pytest.importorskip("tokenizers")

from prs.models import hf  # noqa: E402
from prs.models.tokenizer import CHATML, Tokenizer, _render_chatml  # noqa: E402
from prs.tasks.math_jsonl import tokenizer_texts  # noqa: E402


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_qwen3")
    hf.make_tiny_checkpoint(path, seed=0, texts=tokenizer_texts())
    return path


MSGS = [[{"role": "user", "content": "What is $2+2$?"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Compute \\frac{1}{2}."},
         {"role": "assistant", "content": "\\boxed{0.5}"}, {"role": "user", "content": "Again?"}]]


def test_tokenizer_and_template_match_transformers(ckpt):
    transformers = pytest.importorskip("transformers")
    ref = transformers.AutoTokenizer.from_pretrained(str(ckpt))
    tok = Tokenizer.from_checkpoint(ckpt)
    assert tok.eos_id == ref.convert_tokens_to_ids("<|im_end|>") and tok.pad_id == ref.pad_token_id
    for msgs in MSGS:
        for thinking in (False, True):
            want = ref.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=thinking)
            got = tok.apply_chat_template(msgs, enable_thinking=thinking)
            assert got == want
            assert tok.encode(got) == ref(want, add_special_tokens=False)["input_ids"]
            assert tok.decode(tok.encode(got)) == got
    assert tok.decode(tok.encode("x \\boxed{3}"), skip_special_tokens=True) == "x \\boxed{3}"


# A template using the Jinja features real chat templates rely on (namespace, reversed slices,
# string methods, tests, filters), written for this test.
RICH_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages[::-1] %}{%- if ns.last_user < 0 and m.role == 'user' %}"
    "{%- set ns.last_user = (messages|length - 1) - loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.content is string %}{%- set c = m.content %}{%- else %}{%- set c = '' %}{%- endif %}"
    "{%- if m.role == 'assistant' and '</think>' in c %}{%- set c = c.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>' + m.role + ('*' if loop.index0 == ns.last_user else '') + '\\n' + c.strip() + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def test_rich_template_renders_like_transformers(ckpt, tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = json.loads((ckpt / "tokenizer_config.json").read_text())
    cfg["chat_template"] = RICH_TEMPLATE
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    (tmp_path / "tokenizer.json").write_text((ckpt / "tokenizer.json").read_text())
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    tok = Tokenizer.from_checkpoint(tmp_path)
    msgs = MSGS[1][:2] + [{"role": "assistant", "content": "<think>\nhmm\n</think>\n\n 0.5 "}] + MSGS[1][3:]
    for thinking in (False, True, None):
        kw = {} if thinking is None else {"enable_thinking": thinking}
        assert tok.apply_chat_template(msgs, **kw) == ref.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=True, **kw)


def test_builtin_chatml_equals_jinja_template(ckpt):
    pytest.importorskip("jinja2")
    tok = Tokenizer.from_checkpoint(ckpt)
    assert tok.chat_template == CHATML
    for msgs in MSGS:
        for gen, thinking in [(True, False), (True, True), (False, None), (True, None)]:
            assert tok.apply_chat_template(msgs, add_generation_prompt=gen, enable_thinking=thinking) == \
                _render_chatml(msgs, add_generation_prompt=gen, enable_thinking=thinking)
    with pytest.raises(ValueError, match="messages\\[0\\]"):
        tok.apply_chat_template([{"content": "no role"}])


def _copy_without(ckpt, dst, *drop):
    """The tiny checkpoint's tokenizer files with ``drop``ped tokenizer_config.json keys."""
    cfg = json.loads((ckpt / "tokenizer_config.json").read_text())
    for key in drop:
        cfg.pop(key)
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "tokenizer_config.json").write_text(json.dumps(cfg))
    (dst / "tokenizer.json").write_text((ckpt / "tokenizer.json").read_text())
    return dst


def test_missing_pad_token_pads_with_eos_said_once(ckpt, tmp_path, caplog):
    """A tokenizer without pad_token (Llama 3) pads with eos as TRL / verl do; one warning line;
    transformers' own tokenizer indeed has no pad token there."""
    transformers = pytest.importorskip("transformers")
    path = _copy_without(ckpt, tmp_path / "nopad", "pad_token")
    assert transformers.AutoTokenizer.from_pretrained(str(path)).pad_token is None
    with caplog.at_level("WARNING", logger="prs.models.tokenizer"):
        tok = Tokenizer.from_checkpoint(path)
    assert tok.pad_id == tok.eos_id == tok.token_id("<|im_end|>")
    lines = [r.getMessage() for r in caplog.records if r.name == "prs.models.tokenizer"]
    assert len(lines) == 1 and "no pad_token" in lines[0] and "<|im_end|>" in lines[0]


def test_missing_chat_template_is_an_error_unless_chosen(ckpt, tmp_path):
    """No template in the checkpoint: rendering is an error naming the option; ``chatml`` renders
    ChatML (equal to the checkpoint template it replaces), a .jinja path renders that file, and the
    math task passes the option through (before: a silent ChatML fallback)."""
    pytest.importorskip("jinja2")
    from prs.tasks import math_jsonl

    path = _copy_without(ckpt, tmp_path / "notemplate", "chat_template")
    (path / "config.json").write_text((ckpt / "config.json").read_text())
    with pytest.raises(ValueError, match="no chat template.*task.params.chat_template=chatml"):
        Tokenizer.from_checkpoint(path).apply_chat_template(MSGS[0])
    with pytest.raises(ValueError, match="no chat template"):
        math_jsonl.make_math_jsonl(tokenizer=str(path), backend="fallback")
    chatml = Tokenizer.from_checkpoint(path, chat_template="chatml")
    assert chatml.apply_chat_template(MSGS[1], enable_thinking=False) == \
        Tokenizer.from_checkpoint(ckpt).apply_chat_template(MSGS[1], enable_thinking=False)
    task = math_jsonl.make_math_jsonl(tokenizer=str(path), backend="fallback", chat_template="chatml")
    assert task.prompt_text("1+1?").startswith("<|im_start|>user\n1+1?")
    (tmp_path / "t.jinja").write_text("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}")
    own = Tokenizer.from_checkpoint(path, chat_template=str(tmp_path / "t.jinja"))
    assert own.apply_chat_template(MSGS[0]) == "[user] What is $2+2$?\n"
    with pytest.raises(ValueError, match="chat_template='chatmll'"):
        Tokenizer.from_checkpoint(path, chat_template="chatmll")
