// The schedule player's stream reader (DPI-C functions imported by tb/player.v).
//
// tb/player.v used to read its schedule with $fgets and $sscanf("%h %h %h %h"): Verilator
// reads such a line a character at a time through the locked C stream and converts hex a bit
// at a time, a seventh of the simulator's time on a MAC-dense schedule. Here a line is read
// with getline and its four hex fields are converted a digit at a time into the player's
// registers (DPI packed arrays: 32-bit words, least significant first).
//
// The stream's lines (tb/player.v and patton.tb.driver describe them):
//   "<cycle> <mask> <data> <head>"  a command, in hex     -> PATTON_COMMAND
//   "S <drain>"                      a segment end        -> PATTON_END (drain in `number`)
//   "M"                              dump the mats        -> PATTON_DUMP
//   "Q"                              quit                 -> PATTON_QUIT
//   end of file                                           -> PATTON_NOTHING
// A line that is none of these: its text and line number go to standard error, the call
// returns PATTON_BAD with the line number in `number` (the player stops with $fatal). In
// follow mode a line without its newline at the end of the file is not read yet: the file is
// rewound to its start (another process is still writing it) and PATTON_NOTHING returned.

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "Vtop__Dpi.h"  // the prototypes Verilator made from tb/player.v: checked here

namespace {

// Kinds of line, as tb/player.v names them.
enum Kind { PATTON_NOTHING = 0, PATTON_COMMAND = 1, PATTON_END = 2, PATTON_DUMP = 3,
            PATTON_QUIT = 4, PATTON_BAD = -1 };

FILE* stream = nullptr;
bool follow = false;
char* line = nullptr;
size_t capacity = 0;
int line_number = 0;
int head_bits = 0, data_bits = 0, mask_bits = 0;

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Read one hex field of at most `bits` bits at `*p` (after spaces) into `out` (its words,
// least significant first); advance `*p` past it. False when there is no field or it is wider.
bool hex_field(const char** p, svBitVecVal* out, int bits) {
    const char* s = *p;
    while (*s == ' ') ++s;
    const char* end = s;
    while (hex_digit(*end) >= 0) ++end;
    if (end == s) return false;
    const int words = (bits + 31) / 32;
    for (int w = 0; w < words; ++w) out[w] = 0;
    int shift = 0;
    for (const char* d = end; d != s; shift += 4) {
        const uint32_t digit = static_cast<uint32_t>(hex_digit(*--d));
        if (digit == 0) continue;
        if (shift + 4 > bits && (digit >> (bits - shift)) != 0) return false;  // too wide
        out[shift / 32] |= digit << (shift % 32);
    }
    *p = end;
    return true;
}

int bad(const char* why, int* number) {
    std::fprintf(stderr, "player: schedule line %d: %s: %s\n", line_number, why, line);
    std::fflush(stderr);
    *number = line_number;
    return PATTON_BAD;
}

}  // namespace

// Open the schedule stream at `path` (a file or a named pipe); the player's field widths.
// Returns 0, or errno when the file cannot be opened.
extern "C" int patton_stream_open(const char* path, int following, int head, int data,
                                  int mask) {
    stream = std::fopen(path, "r");
    if (stream == nullptr) return errno ? errno : -1;
    follow = following != 0;
    head_bits = head;
    data_bits = data;
    mask_bits = mask;
    return 0;
}

extern "C" void patton_stream_close() {
    if (stream != nullptr) std::fclose(stream);
    stream = nullptr;
}

// Read the stream's next line; see the kinds above.
extern "C" int patton_stream_next(svBitVecVal* cycle, svBitVecVal* mask, svBitVecVal* data,
                                  svBitVecVal* head, int* number) {
    *number = 0;
    if (stream == nullptr) return PATTON_NOTHING;
    const ssize_t length = getline(&line, &capacity, stream);
    if (length <= 0) {
        clearerr(stream);  // follow mode reads again; a pipe's writer may come back
        return PATTON_NOTHING;
    }
    if (line[length - 1] != '\n') {
        if (follow) {  // the writer is in the middle of the line: read it whole next time
            std::fseek(stream, -static_cast<long>(length), SEEK_CUR);
            return PATTON_NOTHING;
        }
    } else {
        line[length - 1] = '\0';
    }
    ++line_number;
    const char* p = line;
    switch (line[0]) {
        case 'S': {
            char* end = nullptr;
            const long drain = std::strtol(line + 1, &end, 10);
            if (end == line + 1 || *end != '\0' || drain < 0 || drain > 1000000000L)
                return bad("a segment end needs a drain (S <cycles>)", number);
            *number = static_cast<int>(drain);
            return PATTON_END;
        }
        case 'M': return line[1] == '\0' ? PATTON_DUMP : bad("unknown control line", number);
        case 'Q': return line[1] == '\0' ? PATTON_QUIT : bad("unknown control line", number);
        default:
            if (!hex_field(&p, cycle, 64) || !hex_field(&p, mask, mask_bits)
                    || !hex_field(&p, data, data_bits) || !hex_field(&p, head, head_bits)
                    || *p != '\0')
                return bad("not <cycle> <mask> <data> <head> in hex", number);
            return PATTON_COMMAND;
    }
}
