"""Character-level vocabulary of the arithmetic reasoning task.

Every token is one printable character, so ``decode(encode(s)) == s`` for any string over the
alphabet and a decoded rollout is readable as it is:

  ``_`` PAD, ``^`` BOS, ``$`` EOS, ``0``-``9`` digits, ``+`` ``=`` (prompt), ``,`` (step separator),
  ``!`` (self-correction: "what I wrote since the last restart is wrong, start again"),
  ``#`` (final answer follows).

A rollout reads ``^3+5+2+7=8,0,7#7$`` (prompt ``^3+5+2+7=``, solution ``8,0,7#7$``).

``HARD_VOCAB`` appends ``*`` (the hard operation of ``ArithConfig(hard_op=...)``: multiply mod m)
after the 18 tokens above, so every shared id is the same and ``VOCAB`` (size 18) is unchanged.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

PAD, BOS, EOS = "_", "^", "$"
DIGITS = "0123456789"
PLUS, EQUALS, SEP, FIX, ANSWER = "+", "=", ",", "!", "#"
TIMES = "*"


class Vocab:
    """The task's vocabulary: ``tokens[i]`` is the character of id ``i``.

    Ids are fixed (``pad_id = 0``, ``bos_id = 1``, ``eos_id = 2``, digit ``d`` has id ``3 + d``),
    so arrays written by one process are read the same by another. ``extra`` tokens are appended
    after the base ones (``Vocab(extra=(TIMES,))`` is ``HARD_VOCAB``).
    """

    tokens: tuple[str, ...] = (PAD, BOS, EOS, *DIGITS, PLUS, EQUALS, SEP, FIX, ANSWER)

    def __init__(self, extra: tuple[str, ...] = ()) -> None:
        extra = tuple(extra)
        if any(len(t) != 1 for t in extra) or len(set(self.tokens + extra)) != len(self.tokens) + len(extra):
            raise ValueError(f"extra must be new single characters not in {''.join(self.tokens)!r}, got {extra}")
        if extra:
            self.tokens = self.tokens + extra
        self._index = {t: i for i, t in enumerate(self.tokens)}

    @property
    def size(self) -> int:
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def id(self, token: str) -> int:
        """The id of one token character."""
        try:
            return self._index[token]
        except KeyError:
            raise ValueError(f"token {token!r} is not in the vocabulary {''.join(self.tokens)!r}") from None

    @property
    def pad_id(self) -> int:
        return self._index[PAD]

    @property
    def bos_id(self) -> int:
        return self._index[BOS]

    @property
    def eos_id(self) -> int:
        return self._index[EOS]

    @property
    def sep_id(self) -> int:
        return self._index[SEP]

    @property
    def fix_id(self) -> int:
        return self._index[FIX]

    @property
    def answer_id(self) -> int:
        return self._index[ANSWER]

    @property
    def digit0_id(self) -> int:
        """Id of ``0``; digit ``d`` has id ``digit0_id + d``."""
        return self._index["0"]

    def encode(self, text: str) -> list[int]:
        """Ids of the characters of ``text``; ``ValueError`` names the first unknown character."""
        out = []
        for pos, ch in enumerate(text):
            if ch not in self._index:
                raise ValueError(
                    f"text={text!r}: character {ch!r} at position {pos} is not in the vocabulary "
                    f"{''.join(self.tokens)!r}"
                )
            out.append(self._index[ch])
        return out

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """The characters of ``ids`` (PAD, BOS and EOS appear as ``_``, ``^``, ``$``)."""
        arr = np.asarray(ids).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= len(self.tokens)):
            raise ValueError(f"ids must lie in [0, {len(self.tokens)}), got min {arr.min()} max {arr.max()}")
        return "".join(self.tokens[int(i)] for i in arr)

    def __repr__(self) -> str:
        return f"Vocab({''.join(self.tokens)!r})"


VOCAB = Vocab()
HARD_VOCAB = Vocab(extra=(TIMES,))
