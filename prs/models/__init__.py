"""The Qwen3-shaped decoder (``qwen3``), the KV-cached sampler (``sampler``), Hugging Face
checkpoint I/O (``hf``) and tokenizers (``tokenizer``).

May import ``prs.core`` and ``prs.parallel``; never tasks, rewards or the RL loop.
"""
