"""Rows of a data set from a file or a local Hugging Face dataset, and dotted-path column access.

    load_table("train.jsonl")            # one JSON object a line
    load_table("train.parquet")          # verl's format (pyarrow; nested columns come back as dicts)
    load_table("saved_dir")              # datasets.Dataset.save_to_disk / DatasetDict.save_to_disk
    load_table("org/name", split="test") # a dataset already in the local HF cache (offline only)
    get_path(row, "reward_model.ground_truth")

Parquet and Hugging Face datasets need the optional packages of the ``data`` extra
(``pip install -e '.[data]'``: pyarrow, datasets); a missing one is a one-line ``ValueError`` naming
the extra. Nothing here touches the network: a dataset name is looked up in the local cache with
``HF_HUB_OFFLINE=1`` / ``HF_DATASETS_OFFLINE=1`` set, and one not there is an error.
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Any

_MISSING = object()
_NONE = object()


def _need(package: str, what: str):
    try:
        return __import__(package)
    except ImportError:
        raise ValueError(f"{what} needs the {package} package: pip install -e '.[data]' (or pip install "
                         f"{package})") from None


def _jsonl(p: pathlib.Path) -> list[dict]:
    rows = []
    for i, line in enumerate(p.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p} line {i + 1} is not JSON ({e})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{p} line {i + 1} is a JSON {type(row).__name__}, not an object")
        rows.append(row)
    return rows


def _parquet(p: pathlib.Path) -> list[dict]:
    _need("pyarrow", f"reading {p.name} (Parquet)")
    import pyarrow.parquet as pq

    return pq.read_table(p).to_pylist()


def _hf_dataset(ds, split: str, where: str) -> list[dict]:
    if type(ds).__name__ in ("DatasetDict", "IterableDatasetDict"):
        if split not in ds:
            raise ValueError(f"{where} holds the splits {sorted(ds)}, not split={split!r}")
        ds = ds[split]
    return [dict(r) for r in ds]


def load_table(path: str, *, split: str = "train") -> list[dict[str, Any]]:
    """The rows (dicts) of ``path``: a ``.jsonl`` / ``.json`` (one object a line) or ``.parquet``
    file, a directory written by ``datasets.save_to_disk``, or a dataset name in the local Hugging
    Face cache (``split`` picks the split of a ``DatasetDict`` or a cached dataset)."""
    p = pathlib.Path(path).expanduser()
    if p.is_file():
        if p.suffix == ".parquet":
            return _parquet(p)
        if p.suffix in (".jsonl", ".json", ""):
            return _jsonl(p)
        raise ValueError(f"{p}: unknown data file type {p.suffix!r}; give a .jsonl, .parquet or a "
                         f"datasets.save_to_disk directory")
    if p.is_dir():
        _need("datasets", f"reading the directory {p} (a datasets.save_to_disk dataset)")
        import datasets

        try:
            ds = datasets.load_from_disk(str(p))
        except FileNotFoundError as e:
            raise ValueError(f"{p} is a directory but not a datasets.save_to_disk dataset ({e})") from None
        return _hf_dataset(ds, split, str(p))
    if str(path).endswith((".jsonl", ".json", ".parquet")) or "/" not in str(path).strip("/") or str(path).startswith((".", "/", "~")):
        raise ValueError(f"data path {path!r} does not exist (a file, a save_to_disk directory, or an org/name "
                         f"dataset in the local Hugging Face cache)")
    os.environ["HF_HUB_OFFLINE"] = "1"  # offline only: the local cache, never a download (read at import)
    _need("datasets", f"loading {path!r} from the local Hugging Face cache")
    import datasets
    import huggingface_hub.constants as hub

    saved = hub.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE
    hub.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True  # imported before
    try:
        ds = datasets.load_dataset(str(path), split=split)
    except Exception as e:
        raise ValueError(f"data path {path!r} is not a file and not in the local Hugging Face cache "
                         f"(split={split!r}; offline, nothing is downloaded): {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}") from None
    finally:
        hub.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE = saved
    return _hf_dataset(ds, split, str(path))


def get_path(row: dict, key: str, default=_MISSING):
    """``row[a][b]...`` for ``key = "a.b..."``; a key present verbatim (dots included) wins.
    ``"a|b.c"``: the first of the alternatives the row has (files of different layouts in one run).
    Missing: ``default`` if given, else ``KeyError(key)``."""
    if "|" in key and key not in row:
        for alt in key.split("|"):
            got = get_path(row, alt, _NONE)
            if got is not _NONE:
                return got
        if default is _MISSING:
            raise KeyError(key)
        return default
    if key in row:
        return row[key]
    cur: Any = row
    for part in key.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            if default is _MISSING:
                raise KeyError(key)
            return default
    return cur
