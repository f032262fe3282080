"""Hydra schema nodes derived from the library's own dataclasses, so each field is declared once.

``node("OptimCfg", (OptimConfig, ["lr", ...]))`` is a dataclass whose fields are ``OptimConfig``'s fields
of those names, with ``OptimConfig``'s types and defaults; ``{"every": "eval_every"}`` renames a field
(node key -> library field). ``to_kwargs`` maps a filled node back to the library's keyword
arguments. Types OmegaConf cannot check (``float | tuple``) become ``Any``; the library's own
``__post_init__`` still validates the value. ``prs`` never imports this module (nor Hydra).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Optional, Union

_PRIMITIVE = (int, float, str, bool)


def _omegaconf_type(t):
    """An OmegaConf-checkable annotation for ``t``: primitives, ``Optional[primitive]``, else ``Any``."""
    if t in _PRIMITIVE:
        return t
    origin = typing.get_origin(t)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(t)) == 2 and args[0] in _PRIMITIVE:
            return Optional[args[0]]
    return Any


def node(name: str, *parts, extra: dict[str, tuple[type, Any]] | None = None) -> type:
    """A dataclass ``name`` whose fields come from library dataclasses, with their types and defaults.

    ``parts``: ``(source_class, keys)`` pairs; ``keys`` is a list of field names or a dict
    ``node key -> source field`` (a rename). ``extra``: node-only fields ``key -> (type, default)``
    (e.g. a method's display ``name``; a ``dataclasses.field(...)`` default for a sub-node). The mapping is kept on the class as ``__source_fields__``
    (node key -> (source class, field)) for ``to_kwargs``.
    """
    mapping: dict[str, tuple[type, str]] = {}
    fields = [(key, typ, default if isinstance(default, dataclasses.Field) else dataclasses.field(default=default))
              for key, (typ, default) in (extra or {}).items()]
    for source, keys in parts:
        keys = dict(keys) if isinstance(keys, dict) else {k: k for k in keys}
        hints = typing.get_type_hints(source)
        src_fields = {f.name: f for f in dataclasses.fields(source)}
        for key, src in keys.items():
            if src not in src_fields:
                raise ValueError(f"schema {name}: {source.__name__} has no field {src!r}; fields: {sorted(src_fields)}")
            if key in mapping or key in (extra or {}):
                raise ValueError(f"schema {name}: key {key!r} declared twice")
            f = src_fields[src]
            if f.default is not dataclasses.MISSING:
                fld = dataclasses.field(default=f.default)
            elif f.default_factory is not dataclasses.MISSING:
                fld = dataclasses.field(default_factory=f.default_factory)
            else:
                raise ValueError(f"schema {name}: {source.__name__}.{src} has no default")
            fields.append((key, _omegaconf_type(hints[src]), fld))
            mapping[key] = (source, src)
    cls = dataclasses.make_dataclass(name, fields)
    cls.__source_fields__ = mapping
    cls.__doc__ = "Schema node from " + ", ".join(f"{s.__module__}.{s.__name__}" for s, _ in parts) + "."
    return cls


def rest_of(source: type, *taken) -> list[str]:
    """``source``'s fields that none of the lists in ``taken`` claims (a node that gets every new field)."""
    claimed = {k for keys in taken for k in keys}
    return [f.name for f in dataclasses.fields(source) if f.name not in claimed]


def to_kwargs(obj, source: type) -> dict[str, Any]:
    """A filled ``node`` -> ``{field of source: value}`` for the keys that came from ``source``."""
    return {src: getattr(obj, key) for key, (s, src) in type(obj).__source_fields__.items() if s is source}
