"""Columnar programs expand to exactly the instructions of the list generators.

Random serving scenarios are served through the step driver; every write call's columnar
programs (:meth:`Runtime.write_program`) and every attention program (per request and batched
over all live requests) are expanded and compared field by field, payload words included, with
the instruction lists :mod:`patton.runtime.reference.programs` builds for the same placements
and data.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime
from patton.runtime.patton.metadata import CzPlace, ValuePlace, WriteMode
from patton.runtime.patton.variants import Variant
from patton.runtime.programs import plans
from patton.runtime.reference import programs as ref
from patton.serving.forward import STEP
from patton.serving.scenario import Scenario, run
from patton.sim.device import DEVICE
from patton.sim.isa import Instruction, Opcode
from patton.sim.program import Program, concat
from test_runtime_e2e import CASES, _config


def _same(got: list[Instruction], want: list[Instruction]) -> None:
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.same(b), (k, a, b)
        if b.data is not None:
            assert a.data.dtype == np.uint16 and len(a.data) == len(b.data), k


def _ref_writes(rt: Runtime, items: list, shadows: dict) -> list[Instruction]:
    """Return the write program of ``items`` built by the list generators (after the write).

    ``shadows`` holds each block's CZ shadow from before the write.
    """
    c = rt.config
    key: list[Instruction] = []
    value: list[Instruction] = []
    commit: list[Instruction] = []
    cz_parts = []
    o1v16: list[Instruction] = []  # no-CZ WR_ABK_OPEN token writes (extension wr16), by row
    open16 = rt.token_op == "abk" and rt.device_ext == "aim+wr16"
    for bid, start, keys, values in items:
        meta = rt.blocks[bid]
        n = keys.shape[1]
        for layer in range(c.n_layers):
            key += ref.key_writes(c, layer, meta.key, start, keys[layer])
        if rt.mode is WriteMode.NO_CZ:
            for layer in range(c.n_layers):
                if n == 1 and open16:
                    o1v16 += ref.o1v_token_writes(c, layer, meta.value, start, values[layer],
                                                  Opcode.WR_ABK_OPEN)
                elif n == 1 and rt.token_op == "abk":
                    value += ref.o1v_token_writes(c, layer, meta.value, start, values[layer])
                else:
                    value += ref.o1v_writes(c, layer, meta.value, start, values[layer])
        elif start + n < c.block_size:
            token = n == 1 and rt.writer.cz_op == "wr16"  # WR_ABK_OPEN (extension wr16)
            for layer in range(c.n_layers):
                build = ref.cz_token_writes if token else ref.cz_writes
                cz_parts.append(((layer, meta.cz.row, meta.cz.col0),
                                 build(c, layer, meta.cz, start, values[layer])))
        else:
            full = np.zeros((c.n_layers, c.block_size, c.heads, c.d_head), dtype=np.uint16)
            if shadows[bid] is not None:
                full[:, :start] = shadows[bid][:, :start]
            full[:, start:] = values
            target = value if start == 0 else commit
            for layer in range(c.n_layers):
                target += ref.o1v_writes(c, layer, meta.value, 0, full[layer])
    cz_parts.sort(key=lambda part: part[0])
    for _, part in cz_parts:
        value += part
    value += ref.by_row(o1v16)
    return key + value + commit


def _ref_attention(rt: Runtime, req: int, layer: int, query: np.ndarray,
                   padded: np.ndarray) -> tuple[list, list, plans.QkPlan, plans.SvPlan]:
    c = rt.config
    table = rt.table(req)
    body, qplan = ref.qk_body(c, layer, [rt.blocks[b].key for b in table])
    values = [rt.placements(b)[1] for b in table]
    bodies, splan = ref.sv_body(c, layer, values)
    return (ref.qk_program(c, query, body), ref.sv_program(c, padded, bodies, splan), qplan,
            splan)


def _readouts(prog: list[Instruction]) -> int:
    return sum(len(i.channels()) for i in prog if i.opcode is Opcode.RD_MAC)


class _Compare:
    """Compares every program the runtime builds in a served scenario with the list
    generators (an observer of the step driver): each step's write call, and every 7th step
    the attention of every live request, alone and batched."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.compared = 0
        self.ops: Counter[Opcode] = Counter()  # opcodes of the write programs compared
        self.rt: Runtime | None = None
        self.shadows: dict = {}
        self.got: list[Instruction] = []

    def start(self, driver) -> None:
        self.rt = driver.attached.runtime

    def writing(self, work, items) -> None:
        rt = self.rt
        self.shadows = {bid: None if rt.blocks[bid].shadow is None
                        else rt.blocks[bid].shadow.copy() for bid, *_ in items}
        self.got = []

    def ran(self, work, phase, program, result) -> None:
        if work.call == "write":
            self.got += program[:-1].to_instructions()  # its EOC left out

    def wrote(self, work, items) -> None:
        want = _ref_writes(self.rt, items, self.shadows)
        _same(self.got, want)
        self.compared += len(want)
        self.ops.update(i.opcode for i in want)

    def attending(self, work) -> None:
        if work.index % 7:
            return
        rt, rng = self.rt, self.rng
        c = rt.config
        reqs = sorted(rt.requests)
        width = max(len(rt.table(r)) for r in reqs) * c.block_size + c.block_size
        queries = rng.integers(0, 1 << 16, (len(reqs), c.heads, c.d_head), dtype=np.uint16)
        probs = np.zeros((len(reqs), c.heads, width), dtype=np.uint16)
        for layer in range(c.n_layers):
            qk_all, sv_all = [], []
            for k, r in enumerate(reqs):
                n = rt.seq_len(r)
                scores = rng.integers(0, 1 << 16, (c.heads, n), dtype=np.uint16)
                probs[k][:, rt.token_index(r)] = scores
                padded = probs[k][:, :len(rt.table(r)) * c.block_size]
                want_qk, want_sv, qplan, splan = _ref_attention(rt, r, layer, queries[k], padded)
                got_qk, got_qplan = rt.qk(r, layer, queries[k])
                got_sv, got_splan = rt.sv(r, layer, scores)
                _same(got_qk, want_qk)
                _same(got_sv, want_sv)
                assert (got_qplan.reads, got_qplan.blocks) == (qplan.reads, qplan.blocks)
                assert (got_splan.segments, got_splan.blocks) == (splan.segments, splan.blocks)
                assert qplan.readouts(c) == _readouts(want_qk)
                assert splan.readouts(c) == _readouts(want_sv)
                qk_all += want_qk
                sv_all += want_sv
                self.compared += len(want_qk) + len(want_sv)
            prog, _ = rt.qk_step(reqs, layer, queries)
            _same(prog.to_instructions(), qk_all)
            prog, _ = rt.sv_step(reqs, layer, probs)
            _same(prog.to_instructions(), sv_all)
            buf = rt.sv_buffer(reqs, layer, width)
            buf[:] = probs
            prog, _ = rt.sv_step(reqs, layer, buf)
            assert np.shares_memory(prog.data, buf)  # scores used in place
            _same(prog.to_instructions(), sv_all)
            # a second step reuses the batch and gives the same programs
            _same(rt.qk_step(reqs, layer, queries)[0].to_instructions(), qk_all)


def _replay(c: Config, mode: WriteMode, seed: int, token_op: str = "abk",
            device_ext: str = "aim") -> int:
    """Serve a random scenario, comparing every program; return the instructions compared.

    Only a device with ``wr16`` has ``WR_ABK_OPEN``: a Commit Zone runtime writes it, and a
    runtime without one whose ``token_op`` is ``"abk"``.
    """
    compare = _Compare(seed)
    variant = Variant("compared", commit_zone=mode is WriteMode.PATTON, token_op=token_op)
    served = run(c, Scenario(requests=3, steps=30, seed=seed), variant, device=False,
                 batching=STEP, observers=[compare], device_ext=device_ext)
    assert served.counts.decode_tokens > 0 and served.checks.total.failures == []
    assert served.attached.runtime.device_ext == device_ext
    wr16 = device_ext == "aim+wr16" and (mode is WriteMode.PATTON or token_op == "abk")
    assert (compare.ops[Opcode.WR_ABK_OPEN] > 0) == wr16, compare.ops
    return compare.compared


@pytest.mark.parametrize("name", sorted(CASES))
def test_columnar_matches_lists(name: str) -> None:
    assert _replay(_config(name), WriteMode.PATTON, seed=5) > 1000


@pytest.mark.parametrize("name", ["gqa-d64", "mha-d128", "two-layers"])
def test_columnar_matches_lists_with_wr16(name: str) -> None:
    """On a device with the extension ``wr16`` the single-token CZ writes are
    ``WR_ABK_OPEN`` (``ref.cz_token_writes``), on both write paths, and still equal the
    lists."""
    assert _replay(_config(name), WriteMode.PATTON, seed=5, device_ext="aim+wr16") > 1000


@pytest.mark.parametrize("token_op", ["abk", "mem"])
def test_columnar_matches_lists_without_commit_zone(token_op: str) -> None:
    assert _replay(_config("gqa-d64"), WriteMode.NO_CZ, seed=6, token_op=token_op) > 1000


@pytest.mark.parametrize("name,token_op", [("gqa-d64", "abk"), ("two-layers", "abk"),
                                           ("gqa-d64", "mem")])
def test_no_commit_zone_on_wr16(name: str, token_op: str) -> None:
    """Without the Commit Zone on a ``wr16`` device, a single-token write's ``WR_ABK`` s are
    ``WR_ABK_OPEN`` s sorted by row (``ref.by_row``) and ``token_op="mem"`` writes as on
    AiM."""
    assert _replay(_config(name), WriteMode.NO_CZ, seed=6, token_op=token_op,
                   device_ext="aim+wr16") > 1000


def _runs(values: list) -> list:
    """The runs of :func:`plans.sv_segments`, one block at a time (the reference)."""
    runs: list = []
    for pos, v in enumerate(values):
        if isinstance(v, CzPlace):
            runs.append((pos, v))
            continue
        last = runs[-1] if runs else None
        if isinstance(last, plans.Run) and last.row0 == v.row0 and last.col + last.count == v.col:
            runs[-1] = plans.Run(last.first, last.count + 1, last.row0, last.col)
        else:
            runs.append(plans.Run(pos, 1, v.row0, v.col))
    return runs


def test_sv_runs() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        values = []
        for _ in range(int(rng.integers(0, 24))):
            if rng.random() < 0.15:
                values.append(CzPlace(int(rng.integers(0, 2)), int(rng.integers(0, 8))))
            else:
                values.append(ValuePlace(int(rng.integers(0, 2)), int(rng.integers(0, 6))))
        runs = [(r.first, r.count) if isinstance(r, plans.Run) else r[0] for r in _runs(values)]
        got = []
        for seg in plans.sv_segments(values):
            got += [r.first if seg.cz else (r.first, r.count) for r in seg.runs]
        assert got == runs


def test_round_trip_and_concat() -> None:
    c = Config(ModelSpec("small", 1, 1, 1, 64), DEVICE.with_(channels=4), layer_rows=6)
    rt = Runtime(c)
    rt.allocate(0, 0)
    rng = np.random.default_rng(0)
    kv = rng.integers(0, 1 << 16, (2, 1, 3, 1, 64), dtype=np.uint16)
    w = rt.write_many([(0, 0, kv[0], kv[1])]).all
    q, _ = rt.qk(0, 0, rng.integers(0, 1 << 16, (1, 64), dtype=np.uint16))
    for prog in (w, q, w + q):
        _same(Program.of(prog).to_instructions(), prog)
    _same(concat([Program.of(w), Program.of(q)]).to_instructions(), w + q)
    assert concat([]).to_instructions() == []
    host = [Instruction(Opcode.EWADD, opsize=1, gpr0=0, gpr1=1),
            Instruction(Opcode.WR_CFR, cfr=0, value=1), Instruction(Opcode.RD_GPR, gpr=3)]
    _same(Program.of(host).to_instructions(), host)  # host-side fields are stored too
    _same(list(Program.of(host)[1:]), host[1:])
    assert Program.of(host)[-1] == host[-1]


def test_step_data_must_cover_tables() -> None:
    c = Config(ModelSpec("small", 1, 1, 1, 64), DEVICE.with_(channels=4), layer_rows=6)
    rt = Runtime(c)
    rt.allocate(0, 0)
    rt.allocate(0, 1)
    with pytest.raises(ValueError, match="width 16 below"):
        rt.sv_step([0], 0, np.zeros((1, c.heads, c.block_size), dtype=np.uint16))
