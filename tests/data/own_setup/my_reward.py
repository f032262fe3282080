"""A user's reward file (docs/your_own_setup.md): TRL's signature, one float per completion.

Full credit for the right boxed answer; with ``graded`` scoring, 0.25 for a boxed wrong answer.
The dataset's columns arrive as lists aligned with ``completions`` (here ``final`` and ``level``).
"""


def _boxed(text):
    """Content of the last \\boxed{...} (nested braces balanced), else None."""
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    depth, start = 0, i + len("\\boxed")
    for j in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start + 1:j].strip()
    return None


def correct(completions, final, **columns):
    """1.0 iff the last \\boxed{...} equals the ``final`` column, else 0.0."""
    return [1.0 if _boxed(c) == str(f).strip() else 0.0 for c, f in zip(completions, final)]


def graded(completions, final, **columns):
    """1.0 for the right boxed answer, 0.25 for a boxed wrong one, 0.0 without a box."""
    out = []
    for c, f in zip(completions, final):
        b = _boxed(c)
        out.append(0.0 if b is None else 1.0 if b == str(f).strip() else 0.25)
    return out
