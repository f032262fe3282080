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
