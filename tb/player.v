// Schedule player: the testbench top that replays timed command schedules into one AiM channel
// at exactly their cycles, without a Python wake-up per command. It can stay alive across
// schedules: the stream is cut into segments, and the channel (mats, open rows, accumulators,
// global buffer, register mode) keeps its state from one segment to the next.
//
// +SCHEDULE=<file>  the schedule stream, one line each (read one line ahead by tb/player_dpi.cpp):
//                   "<cycle> <mask> <data> <head>"  a command, in hex; cycles strictly ascending
//                       over the whole stream (one command per cycle). The packed command (the
//                       packing is patton.hw.isa.command_layout) is {mask, data, head}: head
//                       holds the fields below the payload (valid, command, bank, row, col,
//                       broadcast, ewmul_bg, lut). Split this way, a command without payload is
//                       a short line.
//                   "S <drain>"  end of a segment (decimal): run <drain> more cycles (the
//                       longest read latency plus margin), write the end line, flush the
//                       results and read on.
//                   "M"  dump the mats now (between segments): every patton_mat writes the
//                       words that differ from their power-up contents to +MATS (hw/mat.py),
//                       then "M <cycle>" is written and flushed; read on.
//                   "Q"  quit: close the files, raise `done`.
//                   end of file: as "S +DRAIN" then "Q" (a one-shot schedule file needs no
//                       control lines); with +FOLLOW, end of file means "nothing yet": the
//                       player idles and reads again next cycle (a regular file another
//                       process appends to).
//                   The stream may be a named pipe: a blocking $fgets simply pauses the
//                   simulation until the writer sends the next segment.
// +RESULTS=<file>   written here (hex): "H <cycle>" once, when the files are open; "R <cycle>
//                   <packed read data>" for every returned read (RD data from `rdata`, RDMAC16
//                   and RDAF16 data from `rdata_mac`; when both return in one cycle, the RD,
//                   which was issued first, is written first); "V <cycle> <packed violation>" for every
//                   flagged command; "E <cycle> <violation counter>" at each segment end (the
//                   counter is the channel's sticky count since reset); "M <cycle>" after a mat
//                   dump. Flushed at every "H", "E" and "M".
// +DRAIN=<cycles>   the drain of the implicit segment end at end of file (default 64).
//
// The simulator runs freely; `done` rises when the results file is complete, and `segments`
// counts the end lines written (a cocotb test can await it). `clk`, `done` and `segments` are
// the only signals cocotb touches, and the only public ones: tb/player.py builds with
// --no-public-flat-rw, which lets Verilator optimise everything else.
module patton_player #(
    parameter HEAD_BITS = 38,
    parameter DATA_BITS = 256,
    parameter MASK_BITS = 16,
    parameter READ_BITS = 262,
    parameter VIOLATION_BITS = 122
) (
    input  wire        clk      /*verilator public_flat_rw*/,
    output reg         done     /*verilator public_flat_rw*/,
    output reg  [31:0] segments /*verilator public_flat_rw*/
);
    localparam CMD_BITS = HEAD_BITS + DATA_BITS + MASK_BITS;
    reg rst = 1'b1;
    reg [CMD_BITS-1:0] cmd;
    wire [READ_BITS-1:0] rdata;
    wire [READ_BITS-1:0] rdata_mac;
    wire [VIOLATION_BITS-1:0] violation;
    wire [15:0] violations;
    wire [31:0] cycle;
    wire reg_mode;

    patton_channel channel (
        .clk(clk), .rst(rst), .cmd(cmd), .rdata(rdata), .rdata_mac(rdata_mac),
        .violation(violation),
        .violations(violations), .cycle(cycle), .reg_mode(reg_mode)
    );

    integer results_file, drain, left, dump_left, kind, number, opened;
    reg [63:0] next_cycle;
    reg [HEAD_BITS-1:0] next_head;
    reg [DATA_BITS-1:0] next_data;
    reg [MASK_BITS-1:0] next_mask;
    wire [CMD_BITS-1:0] next_cmd = {next_mask, next_data, next_head};
    reg have;      // a command is pending (at next_cycle)
    reg ending;    // a segment end was read: drain `left` cycles, then write the end line
    reg quitting;  // finish after the end line
    reg quit_now;  // finish now
    reg waiting;   // +FOLLOW and at end of file: read again next cycle
    reg follow;
    string schedule_path;
    reg [1023:0] results_path;

    // The stream is read by C (tb/player_dpi.cpp): Verilator's $fgets reads a character at a
    // time through the locked C stream and its $sscanf converts hex a bit at a time.
    import "DPI-C" function int patton_stream_open(input string path, input int following,
                                                   input int head, input int data,
                                                   input int mask);
    import "DPI-C" function void patton_stream_close();
    import "DPI-C" function int patton_stream_next(output bit [63:0] cycle,
                                                   output bit [MASK_BITS-1:0] mask,
                                                   output bit [DATA_BITS-1:0] data,
                                                   output bit [HEAD_BITS-1:0] head,
                                                   output int number);
    // What patton_stream_next read (its kinds).
    localparam NOTHING = 0, COMMAND = 1, END = 2, DUMP = 3, QUIT = 4;

    // Read the stream until there is something to do: a command, a segment end, a dump, quit.
    task automatic read_next;
        have = 1'b0;
        waiting = 1'b0;
        kind = patton_stream_next(next_cycle, next_mask, next_data, next_head, number);
        case (kind)
            COMMAND: have = 1'b1;
            END: begin
                ending = 1'b1;
                left = number;
            end
            DUMP: dump_left = 3;
            QUIT: quit_now = 1'b1;
            NOTHING:
                if (follow) begin
                    waiting = 1'b1;
                end else begin
                    ending = 1'b1;
                    quitting = 1'b1;
                    left = drain;
                end
            default: $fatal(1, "player: unreadable schedule line %0d (printed above)", number);
        endcase
    endtask

    initial begin
        done = 1'b0;
        segments = 32'd0;
        ending = 1'b0;
        quitting = 1'b0;
        quit_now = 1'b0;
        dump_left = 0;
        if (!$value$plusargs("SCHEDULE=%s", schedule_path)) $fatal(1, "player: no +SCHEDULE");
        if (!$value$plusargs("RESULTS=%s", results_path)) $fatal(1, "player: no +RESULTS");
        if (!$value$plusargs("DRAIN=%d", drain)) drain = 64;
        follow = $test$plusargs("FOLLOW");
        opened = patton_stream_open(schedule_path, follow, HEAD_BITS, DATA_BITS,
                                    MASK_BITS);
        if (opened != 0) $fatal(1, "player: cannot open the schedule (errno %0d)", opened);
        results_file = $fopen(results_path, "w");
        if (results_file == 0) $fatal(1, "player: cannot open the results file");
        $fwrite(results_file, "H %h\n", 0);
        $fflush(results_file);
        read_next();
    end

    // The command for this cycle, if the schedule has one (valid is bit 0 of the packing).
    always @(*) begin
        if (!rst && have && next_cycle == {32'd0, cycle})
            cmd = next_cmd;
        else
            cmd = {CMD_BITS{1'b0}};
    end

    always @(posedge clk) begin
        if (rst) begin
            rst <= 1'b0;
        end else if (!done) begin
            if (rdata[0])
                $fwrite(results_file, "R %h %h\n", cycle, rdata);
            if (rdata_mac[0])
                $fwrite(results_file, "R %h %h\n", cycle, rdata_mac);
            if (violation[0])
                $fwrite(results_file, "V %h %h\n", cycle, violation);
            if (have && next_cycle < {32'd0, cycle})
                $fatal(1, "player: schedule cycle %0d is not after cycle %0d (cycles must strictly increase)",
                       next_cycle, cycle);
            if (have) begin
                if (next_cycle == {32'd0, cycle}) read_next();
            end else if (ending) begin
                left = left - 1;
                if (left <= 0) begin
                    ending = 1'b0;
                    $fwrite(results_file, "E %h %h\n", cycle, violations);
                    $fflush(results_file);
                    segments <= segments + 32'd1;
                    if (quitting) begin
                        $fclose(results_file);
                        patton_stream_close();
                        done <= 1'b1;
                    end else begin
                        read_next();
                    end
                end
            end else if (dump_left > 0) begin
                // Cycle 1: bump the request (the mats see it at the next edge, whatever the
                // order of the always blocks); cycle 3: every mat has written its words.
                if (dump_left == 3) patton_mat_dump::request <= patton_mat_dump::request + 1;
                dump_left = dump_left - 1;
                if (dump_left == 0) begin
                    $fwrite(results_file, "M %h\n", cycle);
                    $fflush(results_file);
                    read_next();
                end
            end else if (quit_now) begin
                $fclose(results_file);
                patton_stream_close();
                done <= 1'b1;
            end else if (waiting) begin
                read_next();
            end
        end
    end
endmodule
