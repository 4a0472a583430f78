"""The DRAM mat of one bank: a behavioural Verilog macro, or a small Amaranth stand-in.

Large arrays do not belong in Amaranth ``Memory`` (its Verilog back end emits every initial
bit), so the generated channel instantiates the macro :data:`MAT_MODULE` as a black box and
:func:`mat_verilog` gives its text. The stand-in (``blackbox=False``) is a ``lib.memory.Memory``
with the same ports and behaviour, for ``amaranth.sim`` tests at a tiny depth.

Behaviour of both: one write port and one read port with an enable, both addressed by (row,
column). A write stores the lanes its mask enables at the clock edge. The read port is
synchronous: the data of the address presented in a cycle with ``rd_en`` appears in the next
and stays until the next read, and a write to the same address at the same edge is visible in
it (write-first). The mat holds ``rows`` normal rows and, behind
them, the activation-function LUT rows (LUT row ``k`` at row ``rows + k``). Never-written
words of the normal rows read as zero, those of the LUT rows as the default tables
(:func:`patton.hw.af.lut_words`, from ``sim.datapath.af_lut``): the macro's text carries them
(a function ``lut_word`` generated with it, no file to find at run time), the stand-in has them
as its memory's initial contents.

The macro (simulation only) also writes the words that differ from their power-up contents
(zero, or the default LUT word) to the file a testbench names with ``+MATS=<file>``: when the
simulation ends, and at the clock edge after the package variable ``patton_mat_dump::request``
changes (``tb/player.v`` bumps it on an ``M`` line, so a live simulation can be inspected
between programs). The package and the whole module body are guarded by
`` `ifndef SYNTHESIS ``: a synthesis tool sees the ports of a black box only (Yosys needed 15
minutes to derive the body's array at 16,384 rows).
"""

from __future__ import annotations

from amaranth.hdl import ClockSignal, Instance, Module, Mux, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from patton.hw.af import lut_words
from patton.hw.params import ChannelParams

__all__ = ["Mat", "MAT_MODULE", "mat_verilog"]

#: Verilog module name of the mat macro.
MAT_MODULE = "patton_mat"


class Mat(wiring.Component):
    """DRAM mat of one bank.

    Parameters
    ----------
    params : ChannelParams
        Organisation (rows, columns, lanes).
    blackbox : bool
        Instantiate the Verilog macro (for generated Verilog) instead of the stand-in.

    Members
    -------
    rd_en : In
        Read this cycle: ``rd_data`` changes only in the cycle after one (a read enable, so
        that a simulator copies a word only when a command reads one).
    rd_row, rd_col : In
        Read address (rows ``0 .. rows - 1``, then the LUT rows); the data appears on
        ``rd_data`` in the next cycle.
    rd_data : Out
        Read data, lane ``i`` in bits ``[16i+15:16i]``; held from the last read.
    wr_en : In
        Write this cycle.
    wr_row, wr_col, wr_data, wr_mask : In
        Write address, data and lane mask.
    """

    def __init__(self, params: ChannelParams, *, blackbox: bool = False) -> None:
        if not isinstance(params, ChannelParams):
            raise TypeError(f"params must be a ChannelParams, not {params!r}")
        self._params = params
        self._blackbox = bool(blackbox)
        super().__init__({
            "rd_en": In(1), "rd_row": In(params.mat_row_bits), "rd_col": In(params.col_bits),
            "rd_data": Out(params.width),
            "wr_en": In(1), "wr_row": In(params.mat_row_bits), "wr_col": In(params.col_bits),
            "wr_data": In(params.width), "wr_mask": In(params.lanes),
        })

    @property
    def params(self) -> ChannelParams:
        """Organisation the mat is built for."""
        return self._params

    @property
    def blackbox(self) -> bool:
        """Whether the Verilog macro is instantiated."""
        return self._blackbox

    def elaborate(self, platform):
        m = Module()
        p = self._params
        if self._blackbox:
            m.submodules.macro = Instance(
                MAT_MODULE,
                p_ROWS=p.rows, p_LUT_ROWS=p.lut_rows, p_COLS=p.columns, p_LANES=p.lanes,
                p_ROW_BITS=p.mat_row_bits, p_COL_BITS=p.col_bits,
                i_clk=ClockSignal(),
                i_rd_en=self.rd_en, i_rd_row=self.rd_row, i_rd_col=self.rd_col,
                o_rd_data=self.rd_data,
                i_wr_en=self.wr_en, i_wr_row=self.wr_row, i_wr_col=self.wr_col,
                i_wr_data=self.wr_data, i_wr_mask=self.wr_mask)
            return m
        m.submodules.array = array = memory.Memory(
            shape=unsigned(p.width), depth=p.mat_rows * p.columns,
            init=[0] * (p.rows * p.columns) + list(lut_words(p)))
        wp = array.write_port(granularity=16)
        rp = array.read_port(transparent_for=(wp,))
        m.d.comb += [
            rp.en.eq(self.rd_en),
            wp.addr.eq(self.wr_row * p.columns + self.wr_col),
            wp.data.eq(self.wr_data),
            wp.en.eq(Mux(self.wr_en, self.wr_mask, 0)),
            rp.addr.eq(self.rd_row * p.columns + self.rd_col),
            self.rd_data.eq(rp.data),
        ]
        return m


_MAT_TEXT = """\
// Behavioural DRAM mat of one AiM bank (PATTON testbench). Not synthesizable as a real
// DRAM array; a simulation model with the ports the channel expects.
// Synchronous write (per-lane mask) and synchronous, write-first read. ROWS normal rows, then
// LUT_ROWS activation-function LUT rows (LUT row k is row ROWS + k); reads of never-written
// words return zero in the normal rows and the default tables (lut_word) in the LUT rows.
`ifndef SYNTHESIS
// Contents on demand: a testbench bumps `request` (tb/player.v does on an "M" line) and every
// mat appends its non-zero words to +MATS at the next clock edge.
/* verilator lint_off DECLFILENAME */
package {name}_dump;
    int unsigned request = 0;
endpackage
/* verilator lint_on DECLFILENAME */
`endif
module {name} #(
    parameter ROWS = 4,
    parameter LUT_ROWS = 8,
    parameter COLS = 64,
    parameter LANES = 16,
    parameter ROW_BITS = 4,
    parameter COL_BITS = 6
) (
    input  wire                  clk,
    input  wire                  rd_en,
    input  wire [ROW_BITS-1:0]   rd_row,
    input  wire [COL_BITS-1:0]   rd_col,
    output reg  [LANES*16-1:0]   rd_data,
    input  wire                  wr_en,
    input  wire [ROW_BITS-1:0]   wr_row,
    input  wire [COL_BITS-1:0]   wr_col,
    input  wire [LANES*16-1:0]   wr_data,
    input  wire [LANES-1:0]      wr_mask
);
`ifndef SYNTHESIS
    // The body is simulation only: a synthesis tool reads the macro as a black box, its ports
    // alone (deriving the body's million-word array for ROWS = 16384 took Yosys 15 minutes).
    localparam ADDR_BITS = ROW_BITS + COL_BITS;
    localparam PLAIN = ROWS * COLS;  // words of the normal rows; the LUT rows follow
    localparam WORDS = (ROWS + LUT_ROWS) * COLS;
    localparam [ADDR_BITS-1:0] STRIDE = COLS[ADDR_BITS-1:0];
    reg [LANES*16-1:0] words [0:WORDS-1];
    wire [ADDR_BITS-1:0] rd_addr = {{{{COL_BITS{{1'b0}}}}, rd_row}} * STRIDE
                                 + {{{{ROW_BITS{{1'b0}}}}, rd_col}};
    wire [ADDR_BITS-1:0] wr_addr = {{{{COL_BITS{{1'b0}}}}, wr_row}} * STRIDE
                                 + {{{{ROW_BITS{{1'b0}}}}, wr_col}};
    // Bit mask of the lanes a lane mask selects.
    function automatic [LANES*16-1:0] lane_bits(input [LANES-1:0] mask);
        integer k;
        begin
            for (k = 0; k < LANES; k = k + 1) lane_bits[16*k +: 16] = {{16{{mask[k]}}}};
        end
    endfunction
    // Default contents of the LUT rows: word k is (LUT row k / COLS, column k % COLS), the
    // tables of sim.datapath.af_lut (generated by patton.hw.mat; zero where not listed).
    function automatic [LANES*16-1:0] lut_word(input integer k);
        case (k)
{lut_cases}            default: lut_word = {{(LANES*16){{1'b0}}}};
        endcase
    endfunction
    // Power-up contents of word k.
    function automatic [LANES*16-1:0] initial_word(input integer k);
        initial_word = k < PLAIN ? {{(LANES*16){{1'b0}}}} : lut_word(k - PLAIN);
    endfunction
    integer i;
    initial begin
        for (i = 0; i < PLAIN; i = i + 1) words[i] = {{(LANES*16){{1'b0}}}};
        for (i = 0; i < LUT_ROWS * COLS; i = i + 1) words[PLAIN + i] = lut_word(i);
        rd_data = {{(LANES*16){{1'b0}}}};
    end
    // Every right-hand side sees the values before the edge; the bypass makes the read
    // write-first. Whole words, the lane merge only when there is a write and the read only
    // when there is one (rd_en): this runs every cycle in simulation.
    always @(posedge clk) begin
        if (wr_en)
            words[wr_addr] <= (words[wr_addr] & ~lane_bits(wr_mask))
                            | (wr_data & lane_bits(wr_mask));
        if (rd_en) begin
            if (wr_en && wr_addr == rd_addr)
                rd_data <= (words[rd_addr] & ~lane_bits(wr_mask))
                         | (wr_data & lane_bits(wr_mask));
            else
                rd_data <= words[rd_addr];
        end
    end
    // Contents, for a testbench that asks with +MATS=<file>: every word that differs from its
    // power-up contents as "M <instance path> <word address> <data>" (hex), appended when the
    // simulation ends and whenever {name}_dump::request changes (at the next clock edge).
    integer dump, k;
    reg [8*1024-1:0] dump_path;
    task automatic dump_words;
        if ($value$plusargs("MATS=%s", dump_path)) begin
            dump = $fopen(dump_path, "a");
            for (k = 0; k < WORDS; k = k + 1)
                if (words[k] != initial_word(k))
                    $fwrite(dump, "M %m %h %h\\n", k, words[k]);
            $fclose(dump);
        end
    endtask
    final dump_words();
    int unsigned dumped;
    initial dumped = 0;
    always @(posedge clk) begin
        if ({name}_dump::request != dumped) begin
            dumped <= {name}_dump::request;
            dump_words();
        end
    end
`endif
endmodule
"""


def mat_verilog(name: str = MAT_MODULE, params: ChannelParams | None = None) -> str:
    """Return the Verilog text of the mat macro, its LUT rows' default contents those of
    ``params``' organisation (default: the device's; the row count stays a parameter)."""
    p = params if params is not None else ChannelParams()
    digits = p.width // 4
    cases = "".join(f"            {k}: lut_word = {p.width}'h{word:0{digits}x};\n"
                    for k, word in enumerate(lut_words(p)) if word)
    return _MAT_TEXT.format(name=name, lut_cases=cases)
