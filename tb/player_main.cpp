// The schedule player's own main: clock tb/player.v until it raises `done`, nothing else.
//
// The Verilator build of the player is made by cocotb's runner (tb/player.py), so that the
// cocotb regressions (tb/regressions.py) run on it; this main is linked against the same
// objects, as a second executable in the build folder (`patton_play`). A live session
// (tb/session.py) runs it: the player reads its schedule and writes its results itself, so a
// simulation needs no Python in the simulator process and no VPI call per clock edge (cocotb's
// clock costs a third of the simulator's time).
//
// Arguments, as cocotb's Verilator main takes them: the plusargs (+SCHEDULE=, +RESULTS=, ...,
// +verilator+coverage+file+<file>), and `--trace` to write dump.fst (an FST build) or dump.vcd
// (a VCD build) in the working folder. The clock is cocotb's Clock(clk, 2, "ns"): high at time
// 0, a rising edge every 2 ns, so cycles, waveform times and results equal a cocotb run's.
// Exit code: 0 when the player raised `done`, 1 after an error ($fatal, or an error count).

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "Vtop.h"
#include "verilated.h"

#if VM_TRACE
#if VM_TRACE_FST
#include <verilated_fst_c.h>
using Trace = VerilatedFstC;
static const char* const TRACE_FILE = "dump.fst";
#else
#include <verilated_vcd_c.h>
using Trace = VerilatedVcdC;
static const char* const TRACE_FILE = "dump.vcd";
#endif
#endif

int main(int argc, char** argv) {
    bool trace = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--trace") == 0) {
#if VM_TRACE
            trace = true;
#else
            std::fprintf(stderr, "patton_play: --trace needs a build with tracing\n");
            return 2;
#endif
        }
    }
    const std::unique_ptr<VerilatedContext> context{new VerilatedContext};
    context->commandArgs(argc, argv);
    const std::unique_ptr<Vtop> top{new Vtop{context.get(), ""}};
    // Half a clock period, 1 ns, in the model's time precision (10**precision seconds).
    const uint64_t half = static_cast<uint64_t>(
        std::llround(std::pow(10.0, -9 - context->timeprecision())));
#if VM_TRACE
    std::unique_ptr<Trace> waves;
    if (trace) {
        context->traceEverOn(true);
        waves.reset(new Trace);
        top->trace(waves.get(), 99);
        waves->open(TRACE_FILE);
    }
#endif
    top->clk = 0;  // as under cocotb: settle at time 0, then the clock's first rising edge
    top->eval();
    top->clk = 1;
    while (!context->gotFinish()) {
        top->eval();
#if VM_TRACE
        if (waves) waves->dump(context->time());
#endif
        if (top->done) break;
        context->timeInc(half);
        top->clk = !top->clk;
    }
    top->final();
#if VM_TRACE
    if (waves) waves->close();
#endif
#if VM_COVERAGE
    context->coveragep()->write();  // +verilator+coverage+file+<file>, else coverage.dat
#endif
    return context->gotFinish() && !top->done ? 1 : (context->errorCount() ? 1 : 0);
}
