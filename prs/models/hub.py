"""Checkpoint names -> directories: a path, or a Hugging Face model id (``org/name``) already in the
local Hugging Face cache, resolved offline (``huggingface_hub.snapshot_download(local_files_only=True)``);
nothing is downloaded. Used by ``prs.models.hf`` (weights, config.json) and ``prs.models.tokenizer``.

    resolve_checkpoint("/models/Qwen3-4B")           # -> that path
    resolve_checkpoint("Qwen/Qwen2.5-Math-1.5B")     # -> $HF_HOME/hub/models--Qwen--Qwen2.5-Math-1.5B/snapshots/<commit>
"""
from __future__ import annotations

import os
import pathlib


def hf_hub_cache() -> pathlib.Path:
    """The Hugging Face hub cache directory as ``huggingface_hub`` finds it, read from the
    environment at call time: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return pathlib.Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return pathlib.Path(home).expanduser() / "hub"


def _looks_like_model_id(name: str) -> bool:
    parts = name.split("/")
    return (len(parts) == 2 and all(parts) and not name.startswith((".", "~"))
            and all(c.isalnum() or c in "-_." for c in name.replace("/", "")))


def resolve_checkpoint(name_or_path) -> pathlib.Path:
    """A checkpoint directory from a path or a Hugging Face model id (``org/name``).

    An existing path, or anything that is not of the form ``org/name``, is returned as a path
    (the loaders then name what is missing). A model id that is not a local directory is looked up
    offline in the local cache (``huggingface_hub.snapshot_download(repo_id, local_files_only=True,
    cache_dir=hf_hub_cache())``: the snapshot ``refs/main`` points to); nothing is downloaded.
    Raises ValueError (one line) when the id is not cached or ``huggingface_hub`` is missing."""
    path = pathlib.Path(str(name_or_path)).expanduser()
    name = str(name_or_path)
    if path.exists() or not _looks_like_model_id(name):
        return path
    cache = hf_hub_cache()
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ValueError(f"checkpoint {name!r} is not a directory, and resolving it as a model id in the local "
                         f"Hugging Face cache needs huggingface_hub: pip install huggingface_hub") from None
    try:
        return pathlib.Path(snapshot_download(repo_id=name, local_files_only=True, cache_dir=str(cache)))
    except Exception as e:  # noqa: BLE001  (LocalEntryNotFoundError, a malformed id, ...: one line)
        raise ValueError(f"checkpoint {name!r} is neither a directory nor a model in the local Hugging Face cache "
                         f"{cache} ({type(e).__name__}); download it once with `hf download {name}` (or "
                         f"`huggingface-cli download {name}`), or give a checkpoint directory") from None
