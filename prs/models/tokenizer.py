"""A checkpoint's own tokenizer and chat format (``tokenizer.json`` + ``tokenizer_config.json``).

    tok = Tokenizer.from_checkpoint("/models/Qwen3-4B")
    text = tok.apply_chat_template([{"role": "user", "content": q}], enable_thinking=False)
    ids = tok.encode(text)                           # no special tokens added: the template has them
    tok.decode(ids), tok.eos_id, tok.pad_id

Encoding uses the ``tokenizers`` package (the Rust tokenizer behind ``transformers``' fast
tokenizers) on the checkpoint's ``tokenizer.json``, so ids equal ``AutoTokenizer``'s. The chat
template is the checkpoint's Jinja ``chat_template`` (``tokenizer_config.json`` or
``chat_template.jinja``) rendered the way ``transformers`` renders it (sandboxed ``jinja2``,
``trim_blocks``/``lstrip_blocks``, ``raise_exception``, ``tojson``, ``strftime_now``). A checkpoint
without a template (a base model) is an error when a prompt is rendered, unless the caller picks
one: ``chat_template="chatml"`` (``math_jsonl``'s ``task.params.chat_template=chatml``), the built-in
ChatML of Qwen (``CHATML``),

    <|im_start|>user\\n{content}<|im_end|>\\n<|im_start|>assistant\\n[<think>\\n\\n</think>\\n\\n]

where the bracketed empty think block is Qwen3's non-thinking mode (``enable_thinking=False``), or a
path to a ``.jinja`` file. Nothing falls back silently: without ``jinja2`` rendering raises ImportError.

``eos_id`` is the chat's end-of-turn token (``eos_token`` of ``tokenizer_config.json``, ``<|im_end|>``
for Qwen3 instruct/hybrid models), ``pad_id`` its ``pad_token`` (``<|endoftext|>``). A tokenizer without
a pad token (Llama 3) pads with ``eos`` (TRL's and verl's rule; one log line says so): prompts are
right-padded and the pad is never attended, so its id does not change any number.
"""
from __future__ import annotations

import json
import logging
import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

from prs.models.hub import resolve_checkpoint

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")


def _render_chatml(messages, *, add_generation_prompt: bool, enable_thinking: bool | None) -> str:
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    if add_generation_prompt:
        out += "<|im_start|>assistant\n"
        if enable_thinking is False:
            out += "<think>\n\n</think>\n\n"
    return out


def _token_text(tok) -> str | None:
    if tok is None or isinstance(tok, str):
        return tok
    return tok.get("content")  # AddedToken serialised as a dict


class Tokenizer:
    """``tokenizers.Tokenizer`` plus the checkpoint's special tokens and chat template."""

    def __init__(self, tok, *, config: dict[str, Any] | None = None, chat_template: str | None = None):
        self.tok = tok
        self.config = dict(config or {})
        self.chat_template = chat_template if chat_template is not None else self.config.get("chat_template")
        eos = _token_text(self.config.get("eos_token")) or "<|im_end|>"
        pad = _token_text(self.config.get("pad_token"))
        self.eos_id = self.token_id(eos)
        if pad is None:
            logging.getLogger(__name__).warning("tokenizer has no pad_token: padding with eos_token %r (id %d), as "
                                                "TRL and verl do", eos, self.eos_id)
            pad = eos
        self.pad_id = self.token_id(pad)

    @classmethod
    def from_checkpoint(cls, path, *, chat_template: str | None = None) -> "Tokenizer":
        """From a directory (or a model id in the local HF cache, ``prs.models.hub.resolve_checkpoint``)
        holding ``tokenizer.json`` (and optionally ``tokenizer_config.json``, ``chat_template.jinja``).
        ``chat_template``: None = the checkpoint's own; ``"chatml"`` = ``CHATML``; else a path to a
        Jinja file. ValueError if ``tokenizer.json`` or the template file is missing; ImportError (with
        the install line) if the ``tokenizers`` package is."""
        path = resolve_checkpoint(path)
        if not (path / "tokenizer.json").exists():
            raise ValueError(f"Tokenizer.from_checkpoint: {path / 'tokenizer.json'} does not exist")
        try:
            from tokenizers import Tokenizer as _Tok
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("prs.models.tokenizer needs the `tokenizers` package: pip install tokenizers") from e
        config = {}
        if (path / "tokenizer_config.json").exists():
            config = json.loads((path / "tokenizer_config.json").read_text())
        template = None
        if (path / "chat_template.jinja").exists():
            template = (path / "chat_template.jinja").read_text()
        if chat_template == "chatml":
            template = CHATML
        elif chat_template is not None:
            f = pathlib.Path(chat_template).expanduser()
            if not f.is_file():
                raise ValueError(f"chat_template={chat_template!r}: give 'chatml', a path to a Jinja template file, "
                                 f"or null (the checkpoint's own)")
            template = f.read_text()
        return cls(_Tok.from_file(str(path / "tokenizer.json")), config=config, chat_template=template)

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce (the model's embedding may be larger)."""
        return int(self.tok.get_vocab_size(with_added_tokens=True))

    def token_id(self, text: str) -> int:
        i = self.tok.token_to_id(text)
        if i is None:
            raise ValueError(f"Tokenizer: special token {text!r} is not in the vocabulary")
        return int(i)

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(e.ids) for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True,
                            enable_thinking: bool | None = None) -> str:
        """The prompt text for ``messages`` (``[{"role": ..., "content": ...}]``) as
        ``transformers``' ``apply_chat_template(..., tokenize=False)`` renders it."""
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"apply_chat_template: messages[{i}]={m!r} needs 'role' and 'content'")
        if not self.chat_template:
            raise ValueError("the checkpoint has no chat template (tokenizer_config.json chat_template or "
                             "chat_template.jinja); set chat_template='chatml' (task.params.chat_template=chatml) "
                             "or a path to a Jinja file")
        try:
            import jinja2  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("rendering the chat template needs jinja2: pip install jinja2") from e
        kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
        return _compiled(self.chat_template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt,
            bos_token=_token_text(self.config.get("bos_token")) or "",
            eos_token=_token_text(self.config.get("eos_token")) or "", **kwargs)


_TEMPLATES: dict[str, Any] = {}


def _compiled(template: str):
    """The template compiled as ``transformers`` does (sandboxed, trim/lstrip blocks)."""
    if template not in _TEMPLATES:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise ValueError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(x, indent=indent, ensure_ascii=False)
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: __import__("datetime").datetime.now().strftime(fmt)  # Llama 3.2
        _TEMPLATES[template] = env.from_string(template)
    return _TEMPLATES[template]


def build_tiny_tokenizer(texts: Iterable[str], *, vocab_size: int = 384,
                         specials: Sequence[str] = QWEN_SPECIALS):
    """A small byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts`` with Qwen's special
    tokens (the tokenizer of the tiny test checkpoints; any string encodes, via bytes)."""
    from tokenizers import Tokenizer as _Tok
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = _Tok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    return tok


def tokenizer_files(tok, *, chat_template: str = CHATML, eos_token: str = "<|im_end|>",
                    pad_token: str = "<|endoftext|>") -> dict[str, str]:
    """``{"tokenizer.json": ..., "tokenizer_config.json": ...}`` texts for a checkpoint directory,
    in the layout ``transformers``' ``AutoTokenizer`` and ``Tokenizer.from_checkpoint`` read."""
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos_token, "pad_token": pad_token,
              "bos_token": None, "chat_template": chat_template, "model_max_length": 131072}
    return {"tokenizer.json": tok.to_str(), "tokenizer_config.json": json.dumps(config, indent=2)}
