"""A batch of requests' attention programs over one payload array, filled per step.

The paper's fixed placements split an attention program into addresses (fixed until a table
changes) and the step's data (the query or the scores). A :class:`Batch` holds the former for
several requests, laid out over one payload array (:mod:`patton.runtime.programs.layout` builds
it from the requests' tables, :mod:`patton.runtime.programs.layout_patch` patches it step to
step), so a step only copies its data into that array, or writes it there in place
(:meth:`Batch.buffer`, :meth:`Batch.fill`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from patton.sim.program import Program

__all__ = ["Batch"]


@dataclass(frozen=True, slots=True)
class Batch:
    """The attention programs of several requests over one payload array of a fixed shape.

    The payload is the step's data ``(requests, heads, width)`` flattened, then every tile
    (``Rv`` copies of ``T`` words), then one zero burst. Invariants: ``prog.start`` addresses
    that layout; ``width`` is a multiple of ``T`` and ``tiles[j]`` is the step data's ``T``-word
    row that tile ``j`` repeats.
    """

    prog: Program  # every request's instructions, in request order (empty payload)
    shape: tuple[int, int, int]  # (requests, heads, width) of the step's data
    tiles: np.ndarray  # per tile: its source row in the step data viewed as (-1, T)
    rv: int  # copies per tile
    t: int  # words per tile copy (block size T)
    lanes: int  # words of the zero burst
    # buffers handed out by buffer() and not yet filled: id(view) -> (view, payload)
    lent: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def buffer(self) -> np.ndarray:
        """Return zeroed ``(requests, heads, width)`` step data that :meth:`fill` adopts as
        the payload without copying (write the step's data straight into it)."""
        out = np.zeros(len(self.prog.data), dtype=np.uint16)
        view = out[:self._body()].reshape(self.shape)
        if len(self.lent) >= 4:  # buffers never filled are forgotten (and copied if filled)
            self.lent.clear()
        self.lent[id(view)] = (view, out)
        return view

    def _body(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2]

    def fill(self, data: np.ndarray) -> Program:
        """Return the program over this step's data.

        ``data`` is ``(requests, heads, width)``, or ``(requests, heads, 1, w)`` repeated along
        each row (a query tiled over the GB). Data from :meth:`buffer` becomes the payload
        itself (once); other data is copied.
        """
        body, size = self._body(), len(self.prog.data)
        lent = self.lent.pop(id(data), None)
        if lent is not None and lent[0] is data:
            out = lent[1]
        else:
            out = np.empty(size, dtype=np.uint16)
            shape = self.shape if data.ndim == 3 else self.shape[:2] + (-1, data.shape[-1])
            out[:body].reshape(shape)[:] = data
        if len(self.tiles):
            rows = out[:body].reshape(-1, self.t)[self.tiles]
            out[body:size - self.lanes].reshape(len(self.tiles), self.rv, self.t)[:] = \
                rows[:, None, :]
        out[size - self.lanes:] = 0
        return self.prog.with_data(out)

