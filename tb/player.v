// Schedule player: the testbench top that replays a timed command schedule into one AiM
// channel at exactly its cycles, without a Python wake-up per command.
//
// +SCHEDULE=<file>  one command per line, "<cycle> <mask> <data> <head>" in hex, cycles
//                   ascending, at most one command per cycle. The packed command (the packing
//                   is patton.hw.isa.command_layout) is {mask, data, head}: head holds the
//                   fields below the payload (valid, command, bank, row, col, broadcast).
//                   Split this way, a command without payload is a short line, which the
//                   simulator parses faster.
// +RESULTS=<file>   written here: "R <cycle> <packed read data>" for every returned read (RD
//                   data from `rdata`, RDMAC16 data from `rdata_mac`; when both return in one
//                   cycle, the RD, which was issued first, is written first) and
//                   "V <cycle> <packed violation>" for every flagged command, in hex; then
//                   "E <cycle> <violation counter>" when the schedule and its reads are done.
// +DRAIN=<cycles>   cycles to run after the last command (longest read latency + margin).
//
// The simulator runs freely; `done` rises when the results file is complete. `clk` and `done`
// are the only signals cocotb touches, and the only public ones: tb/player.py builds with
// --no-public-flat-rw, which lets Verilator optimise everything else.
module patton_player #(
    parameter HEAD_BITS = 36,
    parameter DATA_BITS = 256,
    parameter MASK_BITS = 16,
    parameter READ_BITS = 262,
    parameter VIOLATION_BITS = 122
) (
    input  wire clk  /*verilator public_flat_rw*/,
    output reg  done /*verilator public_flat_rw*/
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

    integer schedule_file, results_file, drain, left;
    reg [63:0] next_cycle;
    reg [HEAD_BITS-1:0] next_head;
    reg [DATA_BITS-1:0] next_data;
    reg [MASK_BITS-1:0] next_mask;
    wire [CMD_BITS-1:0] next_cmd = {next_mask, next_data, next_head};
    reg have;
    reg [1023:0] schedule_path, results_path;

    // Read the next schedule line. A whole line, then parsed from the string: $fscanf on the
    // file peeks (and puts back) every character through the locked C stream, at twice the
    // cost of a line read plus $sscanf.
    string line;
    task automatic read_next;
        have = 1'b0;
        if ($fgets(line, schedule_file) != 0)
            have = ($sscanf(line, "%h %h %h %h", next_cycle, next_mask, next_data, next_head)
                    == 4);
    endtask

    initial begin
        done = 1'b0;
        if (!$value$plusargs("SCHEDULE=%s", schedule_path)) $fatal(1, "player: no +SCHEDULE");
        if (!$value$plusargs("RESULTS=%s", results_path)) $fatal(1, "player: no +RESULTS");
        if (!$value$plusargs("DRAIN=%d", drain)) drain = 64;
        schedule_file = $fopen(schedule_path, "r");
        if (schedule_file == 0) $fatal(1, "player: cannot open the schedule");
        results_file = $fopen(results_path, "w");
        if (results_file == 0) $fatal(1, "player: cannot open the results file");
        read_next();
        left = drain;
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
                $fatal(1, "player: schedule cycles must strictly increase");
            if (have && next_cycle == {32'd0, cycle}) begin
                read_next();
            end else if (!have) begin
                left = left - 1;
                if (left == 0) begin
                    $fwrite(results_file, "E %h %h\n", cycle, violations);
                    $fclose(results_file);
                    $fclose(schedule_file);
                    done <= 1'b1;
                end
            end
        end
    end
endmodule
