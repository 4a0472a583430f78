"""The "model" of a serving run: the Keys, Values and queries the forward pass writes and asks.

The testbench has no model weights; a token's K, V and query are made up, two ways:

* :class:`TokenKV`: bf16 from a seeded generator as a function of the token's prefix, so two
  requests with the same prefix get the same KV (what a prefix-cache hit relies on) and a
  recomputed prefix gets it again. Every value the device returns can then be checked against
  the NumPy references (the chat demo, a checked cost run).
* :class:`Pattern`: one constant word everywhere. The device's timing and energy do not depend
  on data, so a cost run writes this and skips the generator.

Both give arrays ``(layers, tokens, heads, D)`` for a run of one sequence's tokens and
``(requests, layers, heads, D)`` for one token of each of several sequences.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from typing import Protocol

import numpy as np
from patton.runtime.interface import Geometry
from patton.serving.engine import Sequence
from patton.sim import datapath as dp

__all__ = ["KvData", "TokenKV", "Pattern", "PATTERN"]

#: The bf16 word of every Key, Value and query element of :class:`Pattern` (1.0).
PATTERN = 0x3F80


class KvData(Protocol):
    """Where a run's Keys, Values and queries come from."""

    def kv(self, seq: Sequence, position: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and Values ``(layers, n, heads, D)`` of ``seq``'s tokens from ``position``."""
        ...

    def last_kv(self, seqs: Seq[Sequence]) -> tuple[np.ndarray, np.ndarray]:
        """Keys and Values ``(requests, layers, heads, D)`` of each sequence's last token."""
        ...

    def queries(self, seqs: Seq[Sequence]) -> np.ndarray:
        """Queries ``(requests, layers, heads, D)`` of each sequence's last token."""
        ...


class TokenKV:
    """Keys, Values and queries as a function of the token prefix (see the module docstring).

    A token's data is drawn from ``(seed, prefix hash)``, where the prefix hash chains the
    token ids from the start of the sequence.
    """

    def __init__(self, config: Geometry, seed: int) -> None:
        self.config = config
        self.seed = seed
        self._shape = (config.n_layers, config.heads, config.d_head)
        self._kv: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._hashes: dict[str, list[int]] = {}

    def hashes(self, request_id: str, tokens: Seq[int], n: int) -> list[int]:
        """Return the prefix hashes of ``tokens[:n]`` (cached per request; tokens only grow)."""
        h = self._hashes.setdefault(request_id, [])
        last = h[-1] if h else self.seed
        for t in tokens[len(h):n]:
            last = hash((last, t)) & 0x7FFF_FFFF_FFFF_FFFF
            h.append(last)
        return h[:n]

    def _token(self, h: int) -> tuple[np.ndarray, np.ndarray]:
        kv = self._kv.get(h)
        if kv is None:
            rng = np.random.default_rng([self.seed, h])
            kv = self._kv[h] = (dp.to_bf16(rng.standard_normal(self._shape)),
                                dp.to_bf16(rng.standard_normal(self._shape)))
        return kv

    def of(self, hashes: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Return Keys and Values ``(layers, n, heads, D)`` of the tokens with ``hashes``."""
        if not hashes:
            empty = np.zeros((self._shape[0], 0) + self._shape[1:], np.uint16)
            return empty, empty
        pairs = [self._token(h) for h in hashes]
        return (np.stack([k for k, _ in pairs], axis=1), np.stack([v for _, v in pairs], axis=1))

    def written(self, request_id: str, position: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and Values ``(layers, n, heads, D)`` of tokens ``position ..`` of a request
        whose KV was drawn before (finished ones too)."""
        return self.of(self._hashes[request_id][position:position + n])

    def query(self, h: int) -> np.ndarray:
        """Return the query ``(layers, heads, D)`` of the token with prefix hash ``h``."""
        rng = np.random.default_rng([self.seed, h, 1])
        return dp.to_bf16(rng.standard_normal(self._shape))

    def kv(self, seq: Sequence, position: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and Values ``(layers, n, heads, D)`` of ``seq``'s tokens from ``position``."""
        return self.of(self.hashes(seq.request_id, seq.tokens, position + n)[position:])

    def last_kv(self, seqs: Seq[Sequence]) -> tuple[np.ndarray, np.ndarray]:
        """Keys and Values ``(requests, layers, heads, D)`` of each sequence's last token."""
        pairs = [self.kv(seq, len(seq.tokens) - 1, 1) for seq in seqs]
        return np.stack([k[:, 0] for k, _ in pairs]), np.stack([v[:, 0] for _, v in pairs])

    def queries(self, seqs: Seq[Sequence]) -> np.ndarray:
        """Queries ``(requests, layers, heads, D)`` of each sequence's last token."""
        return np.stack([self.query(self.hashes(seq.request_id, seq.tokens,
                                                len(seq.tokens))[-1]) for seq in seqs])


class Pattern:
    """:data:`PATTERN` everywhere (one array per shape, made once and shared: read only)."""

    def __init__(self, config: Geometry) -> None:
        self._shape = (config.n_layers, config.heads, config.d_head)
        self._arrays: dict[tuple[int, ...], np.ndarray] = {}

    def _pattern(self, shape: tuple[int, ...]) -> np.ndarray:
        a = self._arrays.get(shape)
        if a is None:
            a = self._arrays[shape] = np.full(shape, PATTERN, np.uint16)
        return a

    def kv(self, seq: Sequence, position: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and Values ``(layers, n, heads, D)``: the pattern."""
        layers, heads, d = self._shape
        a = self._pattern((layers, n, heads, d))
        return a, a

    def last_kv(self, seqs: Seq[Sequence]) -> tuple[np.ndarray, np.ndarray]:
        """Keys and Values ``(requests, layers, heads, D)``: the pattern."""
        a = self._pattern((len(seqs), *self._shape))
        return a, a

    def queries(self, seqs: Seq[Sequence]) -> np.ndarray:
        """Queries ``(requests, layers, heads, D)``: the pattern."""
        return self._pattern((len(seqs), *self._shape))
