"""The record of a serving run: its steps and requests, and the report keys (``docs/serving.md``).

:class:`Run` is what the step driver keeps of a run (:class:`~patton.serving.driver.Driver`)
and the body of a golden file (``tests/data/serving/golden/``): every step's schedule and
preemptions, every request's prompt, output, history, and when it was sent and finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Step", "RequestRecord", "Report", "Run"]


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a run, as the golden files record it."""

    scheduled: tuple[tuple[str, int], ...]  # (request id, tokens), in scheduled order
    preempted: tuple[str, ...]  # request ids preempted in the step


@dataclass(slots=True)
class RequestRecord:
    """One request of a run.

    Invariants: ``cached_tokens`` and ``finish_step`` are None until the request finished;
    ``history`` is what the conversation's previous turn had computed (its prompt and all but
    its last output token; 0 for turn 1).
    """

    request_id: str
    prompt_tokens: int  # len(prompt)
    output_tokens: int  # len(output)
    history: int  # tokens the previous turn computed
    sent_step: int  # index (from 0) of the first step the request was in the engine for
    cached_tokens: int | None = None  # vLLM's num_cached_tokens, reported at finish
    finish_step: int | None = None  # index (from 0) of the step that produced its last token

    @property
    def recomputed_tokens(self) -> int:
        """History that was computed before and had to be computed again (0 until finished)."""
        if self.cached_tokens is None:
            return 0
        return max(0, min(self.prompt_tokens, self.history) - self.cached_tokens)


@dataclass(frozen=True, slots=True)
class Report:
    """The report keys of a run (sums over finished requests; ``docs/serving.md``)."""

    steps: int  # scheduler steps run
    requests: int  # requests finished
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float  # cached_tokens / prompt_tokens (0.0 when no prompt tokens)
    preemptions: int  # times a running request was preempted
    recomputed_tokens: int

    def as_dict(self) -> dict[str, Any]:
        """Return the report as a plain dict in the table's key order."""
        return {"steps": self.steps, "requests": self.requests,
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "hit_rate": self.hit_rate, "preemptions": self.preemptions,
                "recomputed_tokens": self.recomputed_tokens}


@dataclass(slots=True)
class Run:
    """Everything a run did: steps in order and requests in the order they were sent."""

    steps: list[Step] = field(default_factory=list)
    requests: dict[str, RequestRecord] = field(default_factory=dict)
    complete: bool = False  # True when every request finished before the step limit

    def report(self) -> Report:
        """Return the report keys of the run."""
        done = [r for r in self.requests.values() if r.finish_step is not None]
        prompt = sum(r.prompt_tokens for r in done)
        cached = sum(r.cached_tokens or 0 for r in done)
        return Report(steps=len(self.steps), requests=len(done), prompt_tokens=prompt,
                      cached_tokens=cached, hit_rate=cached / prompt if prompt else 0.0,
                      preemptions=sum(len(s.preempted) for s in self.steps),
                      recomputed_tokens=sum(r.recomputed_tokens for r in done))

    def as_dict(self) -> dict[str, Any]:
        """Return the run as plain JSON data (the body of a golden file).

        ``steps`` is a list of ``{"scheduled": [[request id, tokens], ...], "preempted":
        [...]}`` in step order; ``requests`` maps request ids, in the order they were sent, to
        their record (``cached_tokens``/``finish_step`` null when unfinished).
        """
        return {
            "complete": self.complete,
            "report": self.report().as_dict(),
            "steps": [{"scheduled": [list(s) for s in st.scheduled],
                       "preempted": list(st.preempted)} for st in self.steps],
            "requests": {rid: {"prompt_tokens": r.prompt_tokens,
                               "output_tokens": r.output_tokens, "history": r.history,
                               "sent_step": r.sent_step, "cached_tokens": r.cached_tokens,
                               "finish_step": r.finish_step}
                         for rid, r in self.requests.items()},
        }
