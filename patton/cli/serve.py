"""``patton workload ...`` and ``patton serve``: the multi-turn serving workload from the shell.

``patton workload sharegpt --out FILE.jsonl [--skip N] [--count N] [--max-message-tokens N]``
    Build a token-level conversation file (and its ``.meta.json``) from the ShareGPT wheel,
    tokenised with Llama-3's BPE (``conversations.write_sharegpt``).
``patton serve --conversations FILE.jsonl [--engine embedded|vllm] [--runtime gpu|patton|
patton-wo-cz|patton-no-o2v] [--model M] [--clients C] [--pool P] [--num-blocks N]
[--block-size 16] [--max-num-seqs S] [--max-batched-tokens B] [--max-model-len L]
[--steps N] [--json]``
    Serve the file with the closed-loop client model through an engine with a KV-cache runtime
    attached, and report the run (the report keys of ``docs/serving.md``), the live context
    tokens and the runtime's capacity use (:func:`patton.serving.serve.serve`). Without
    ``--num-blocks`` the KV memory is the 16 GiB AiM device
    (:func:`patton.serving.capacity.capacity`). ``--json`` prints one JSON object and nothing
    else on stdout.

Bad input (a malformed conversation file, inconsistent parameters, an engine that cannot be
imported) is reported as ``error: ...`` on stderr with exit status 2, never a traceback.
:func:`add_parsers` registers both commands on the ``patton`` command's sub-parsers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from patton.cli.options import (
    BLOCK_SIZE,
    BLOCKS,
    CLIENTS,
    COUNT,
    MODEL_LEN,
    POOL,
    SKIP,
    STEPS,
    TOKENS,
    check_file,
    choice,
    commands,
)
from patton.runtime.models import MODELS
from patton.serving.capacity import RUNTIMES, max_context
from patton.serving.clients import ClientError
from patton.serving.conversations import WorkloadError, read
from patton.sim.progress import PROGRESS_HELP, Progress
from patton.sim.textfile import shown

__all__ = ["add_parsers", "serve", "workload"]

#: A run longer than this (seconds) shows a progress bar on a terminal.
PROGRESS_DELAY = 2.0


class UsageError(ValueError):
    """Inconsistent command-line parameters (reported with exit status 2)."""


# ------------------------------------------------------------------------------ commands


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    """Register ``workload`` (with ``sharegpt``) and ``serve`` on the ``patton`` sub-parsers."""
    wl = subparsers.add_parser("workload", help="build serving workloads: token-level "
                                                "conversation files",
                               description="Build token-level conversation files.")
    wsub = commands(wl, "workload_command")
    sg = wsub.add_parser("sharegpt", help="ShareGPT conversations, Llama-3 tokens",
                         description="Build a conversation file (and its .meta.json) from "
                                     "the ShareGPT wheel, tokenised with Llama-3's BPE.")
    sg.add_argument("--out", required=True, metavar="FILE.jsonl", help="conversation file")
    sg.add_argument("--skip", type=SKIP, default=0, metavar="N",
                    help="kept conversations to pass over first (default 0)")
    sg.add_argument("--count", type=COUNT, default=None, metavar="N",
                    help="conversations to write (default: all)")
    sg.add_argument("--max-message-tokens", type=TOKENS, default=None, metavar="N",
                    help="truncate every message to its first N tokens (default: whole)")
    sg.set_defaults(func=workload)

    sv = subparsers.add_parser("serve", help="serve a conversation file through an engine with "
                                             "a KV-cache runtime (hit rates, capacity)",
                               description="Serve a conversation file with the client model "
                                           "through an engine with a KV-cache runtime.")
    sv.add_argument("--conversations", required=True, metavar="FILE.jsonl",
                    help="conversation file (JSONL of token ids, patton workload sharegpt "
                         "writes one; docs/serving.md)")
    engines = choice(("embedded", "vllm"))
    sv.add_argument("--engine", type=engines, metavar=engines.metavar, default="embedded",
                    help="the embedded vLLM-equivalent engine (default) or real vLLM 0.33 "
                         "(its venv's python)")
    sv.add_argument("--runtime", type=choice(RUNTIMES), metavar=choice(RUNTIMES).metavar,
                    default="gpu",
                    help="KV-cache runtime (default gpu: vLLM's own cache)")
    sv.add_argument("--model", type=choice(sorted(MODELS)),
                    metavar=choice(sorted(MODELS)).metavar, default="llama3-8b",
                    help="model whose KV geometry the runtime lays out (default llama3-8b)")
    sv.add_argument("--clients", type=CLIENTS, default=32, metavar="C", help="(default 32)")
    sv.add_argument("--pool", type=POOL, default=64, metavar="P",
                    help="live conversations, a multiple of C (default 64)")
    sv.add_argument("--num-blocks", type=BLOCKS, default=None, metavar="N",
                    help="KV memory in blocks, null block included (default: the 16 GiB AiM "
                         "device: 8192 for llama3-8b)")
    sv.add_argument("--block-size", type=BLOCK_SIZE, default=None,
                    help="tokens per KV block (default: the runtime's; 16, vLLM's, for all but "
                         "blockpim's row-bound 128)")
    sv.add_argument("--max-num-seqs", type=CLIENTS, default=None, metavar="S",
                    help="running requests at most (default: C)")
    sv.add_argument("--max-batched-tokens", type=TOKENS, default=2048, metavar="B",
                    help="tokens scheduled per step at most (vLLM's max_num_batched_tokens; "
                         "default 2048)")
    sv.add_argument("--max-model-len", type=MODEL_LEN, default=8192, metavar="L",
                    help="longest request in tokens (vLLM's max_model_len; default 8192)")
    sv.add_argument("--steps", type=STEPS, default=None, metavar="N",
                    help="stop after N scheduler steps (default: until the file is served)")
    sv.add_argument("--json", action="store_true", help="print one JSON object")
    sv.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                    help=PROGRESS_HELP)
    sv.set_defaults(func=serve)


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def workload(args: argparse.Namespace) -> int:
    """``patton workload sharegpt``: write the file; print where and what."""
    from patton.serving.conversations import write_sharegpt

    try:
        check_file(args.out, "--out")
        path = write_sharegpt(args.out, skip=args.skip, count=args.count,
                              max_message_tokens=args.max_message_tokens)
    except (OSError, RuntimeError, ValueError) as e:
        return _error(str(e))
    meta = json.loads(path.with_suffix(".meta.json").read_text()) \
        if path.with_suffix(".meta.json").exists() else {}
    print(f"{path}: {meta.get('conversations', '?')} conversations, "
          f"{meta.get('tokens', '?')} tokens")
    return 0


def _check(args: argparse.Namespace) -> None:
    """Raise UsageError for parameters inconsistent with each other (each one's own bounds
    are the parser's: ``patton.cli.options``)."""
    if args.pool % args.clients:
        raise UsageError(f"--pool must be a positive multiple of --clients ({args.clients}), "
                         f"got {args.pool}")


def _bar(args: argparse.Namespace) -> Progress | None:
    """Progress over the run's steps (:mod:`patton.sim.progress`), or None with
    ``--no-progress``."""
    bar = Progress(args.steps, "serve", "step", show=args.progress, delay=PROGRESS_DELAY)
    return bar if bar.mode is not None else None


def serve(args: argparse.Namespace) -> int:
    """``patton serve``: run, then print the report (one JSON object with ``--json``)."""
    from patton.serving.engine import EmbeddedEngine
    from patton.serving.serve import serve as run
    from patton.serving.vllm_engine import VllmEngine, VllmUnavailable

    try:
        _check(args)
        conversations = read(args.conversations)
        limit = max_context(args.runtime, MODELS[args.model])
        if limit is not None and args.max_model_len > limit:
            raise UsageError(f"--runtime {args.runtime} holds at most {limit} tokens of "
                             f"{args.model} context; give --max-model-len {limit} or less")
    except WorkloadError as e:
        return _error(str(e))
    except OSError as e:
        return _error(f"{shown(args.conversations)}: {e.strerror or e}")
    except ValueError as e:  # UsageError
        return _error(str(e))
    bar = _bar(args)
    t = time.perf_counter()
    try:
        served = run(conversations, args.runtime, MODELS[args.model], clients=args.clients,
                     pool=args.pool, num_blocks=args.num_blocks, block_size=args.block_size,
                     max_num_seqs=args.max_num_seqs, max_batched_tokens=args.max_batched_tokens,
                     max_model_len=args.max_model_len, steps=args.steps,
                     engine=VllmEngine if args.engine == "vllm" else EmbeddedEngine,
                     progress=bar)
        if bar is not None:  # the meter reports every 64 steps: the rest
            bar.update(len(served.run.steps) - bar.n)
    except VllmUnavailable as e:
        return _error(f"--engine vllm: {e}")
    except ClientError as e:
        return _error(f"the run cannot go on: {e}")
    except ValueError as e:  # a capacity the runtime cannot lay out
        return _error(str(e))
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - t
    params = served.params
    report = served.report()
    if report["requests"] == 0:  # nothing silently empty (docs/reliability.md)
        why = (f"all {served.passed_over:,} conversations' first turns exceed --max-model-len "
               f"{args.max_model_len}" if served.passed_over else "no request was sent")
        return _error(f"{shown(args.conversations)}: nothing was served: {why}")
    out: dict[str, Any] = {k: report[k] for k in ("steps", "requests", "prompt_tokens",
                                                  "cached_tokens", "hit_rate", "preemptions",
                                                  "recomputed_tokens", "complete",
                                                  "live_context_tokens")}
    out["passed_over"] = served.passed_over
    out["runtime"] = args.runtime
    out["engine"] = args.engine
    out.update({k: report[k] for k in ("capacity", "usage", "refusals",
                                       "placement_evictions")})
    out["params"] = {"conversations": str(args.conversations), "model": args.model,
                     "clients": args.clients, "pool": args.pool,
                     "block_size": params.block_size, "num_blocks": params.num_blocks,
                     "num_blocks_default": args.num_blocks is None,
                     "max_num_seqs": params.max_num_seqs,
                     "max_batched_tokens": params.max_num_batched_tokens,
                     "max_model_len": params.max_model_len, "steps": args.steps}
    out["wall_seconds"] = round(seconds, 2)
    out["steps_per_second"] = round(len(served.run.steps) / seconds) if seconds > 0 else None
    if args.json:
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
    else:
        _print(out)
    return 0


def _print(out: dict[str, Any]) -> None:
    cap, p = out["capacity"], out["params"]
    where = ("the AiM device" if p["num_blocks_default"] else
             f"{p['num_blocks']} blocks of memory")
    shape = (f"{cap['layer_rows']} rows/layer ({cap['crs_rows']} Commit Zone), O2V "
             f"{cap['o2v_blocks']} blocks, " if cap["crs_rows"] is not None else
             f"{cap['layer_rows']} rows/layer, " if cap["layer_rows"] is not None else "")
    print(f"runtime     {out['runtime']} on {where} ({cap['bytes'] / 2**30:.3g} GiB): {shape}"
          f"{cap['blocks']} blocks = {cap['tokens']:,} tokens; engine {p['num_blocks']} "
          f"blocks")
    print(f"served      {out['requests']} requests in {out['steps']} steps "
          f"({'complete' if out['complete'] else 'step limit'}), {out['wall_seconds']} s")
    if out["passed_over"]:
        print(f"passed over {out['passed_over']:,} conversations whose first turn exceeds "
              f"--max-model-len {p['max_model_len']}")
    print(f"hit rate    {out['hit_rate']:.4f} ({out['cached_tokens']:,} of "
          f"{out['prompt_tokens']:,} prompt tokens cached)")
    print(f"recomputed  {out['recomputed_tokens']:,} tokens; {out['preemptions']} preemptions")
    live = out["live_context_tokens"]
    print(f"live        {live['mean']:,.0f} context tokens on average, {live['max']:,} at most")
    if "usage" in out:
        u = out["usage"]
        print(f"capacity    {u['blocks_mean']:,.0f} blocks bound on average, "
              f"{u['blocks_peak']:,} at peak; stranded {u['stranded_mean']:,.0f} on average; "
              f"{out['refusals']} refusals, {out['placement_evictions']} placement evictions")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``workload``/``serve`` alone (``python -m patton.cli.serve serve ...``)."""
    top = argparse.ArgumentParser(prog="patton", description="Serving workloads and runs.")
    add_parsers(commands(top, "part"))
    args = top.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
