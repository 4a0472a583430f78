// Schedule player: the testbench top that replays a timed command schedule into one AiM
// channel at exactly its cycles, without a Python wake-up per command.
//
// +SCHEDULE=<file>  one command per line, "<cycle> <packed command>" in hex, cycles ascending,
//                   at most one command per cycle (the packing is patton.hw.isa.command_layout).
// +RESULTS=<file>   written here: "R <cycle> <packed read data>" for every returned read and
//                   "V <cycle> <packed violation>" for every flagged command, in hex; then
//                   "E <cycle> <violation counter>" when the schedule and its reads are done.
// +DRAIN=<cycles>   cycles to run after the last command (longest read latency + margin).
//
// The simulator runs freely; `done` rises when the results file is complete.
module patton_player #(
    parameter CMD_BITS = 307,
    parameter READ_BITS = 262,
    parameter VIOLATION_BITS = 122
) (
    input  wire clk,
    output reg  done
);
    reg rst = 1'b1;
    reg [CMD_BITS-1:0] cmd;
    wire [READ_BITS-1:0] rdata;
    wire [VIOLATION_BITS-1:0] violation;
    wire [15:0] violations;
    wire [31:0] cycle;
    wire reg_mode;

    patton_channel channel (
        .clk(clk), .rst(rst), .cmd(cmd), .rdata(rdata), .violation(violation),
        .violations(violations), .cycle(cycle), .reg_mode(reg_mode)
    );

    integer schedule_file, results_file, got, drain, left;
    reg [63:0] next_cycle;
    reg [CMD_BITS-1:0] next_cmd;
    reg have;
    reg [1023:0] schedule_path, results_path;

    initial begin
        done = 1'b0;
        if (!$value$plusargs("SCHEDULE=%s", schedule_path)) $fatal(1, "player: no +SCHEDULE");
        if (!$value$plusargs("RESULTS=%s", results_path)) $fatal(1, "player: no +RESULTS");
        if (!$value$plusargs("DRAIN=%d", drain)) drain = 64;
        schedule_file = $fopen(schedule_path, "r");
        if (schedule_file == 0) $fatal(1, "player: cannot open the schedule");
        results_file = $fopen(results_path, "w");
        if (results_file == 0) $fatal(1, "player: cannot open the results file");
        got = $fscanf(schedule_file, "%h %h\n", next_cycle, next_cmd);
        have = (got == 2);
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
            if (violation[0])
                $fwrite(results_file, "V %h %h\n", cycle, violation);
            if (have && next_cycle < {32'd0, cycle})
                $fatal(1, "player: schedule cycles must strictly increase");
            if (have && next_cycle == {32'd0, cycle}) begin
                got = $fscanf(schedule_file, "%h %h\n", next_cycle, next_cmd);
                have = (got == 2);
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
