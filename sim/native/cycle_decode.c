/* A program decoded as the kernel takes it: sim/native.py's Decoded, restated over the raw
 * program columns (included by cycle_kernel.c: one translation unit). Every fact comes in as
 * data (the per-op tables that Decoded is built from); tests/test_cycle_model_memo.py
 * requires every column equal to the Python Decoded's on random programs of every kind.
 */

/* The program's columns (patton.sim.program.Program), one entry per instruction. */
typedef struct {
    i64 n;
    const i64 *op, *opsize, *channel_mask, *bank, *row, *channel, *col, *cfr_id, *cfr_value;
} raw_t;

/* The per-op facts, indexed by op id, and the constants decoding uses. */
typedef struct {
    i64 nops;
    const i64 *op_class, *final, *kind, *reg_mode, *blocking, *reader, *behaviour, *dram,
        *one_channel, *has_columns;
    i64 af, wr_cfr, afm, cfrs, af_row_base, mask_bits, unset;
} optable_t;

/* What Decoded holds, caller-allocated: ``n`` entries each (``cfr``: ``cfrs`` rows of ``n``,
 * the value each CFR has when each instruction is decoded, written only if the program sets
 * a CFR (else each row is its start value); ``end_cfr``: after the last). */
typedef struct {
    i64 *op_class, *final, *kind, *reg_mode, *blocking, *reader, *behaviour, *bank, *row,
        *first_col, *columns;
    u64 *targets;
    i64 *cfr, *end_cfr;
} decoded_t;

static unsigned char reversed_byte[256];

static inline u64 reverse32(u64 x) {
    return (u64)reversed_byte[x & 0xFF] << 24 | (u64)reversed_byte[x >> 8 & 0xFF] << 16
        | (u64)reversed_byte[x >> 16 & 0xFF] << 8 | (u64)reversed_byte[x >> 24 & 0xFF];
}

/* One instruction as the kernel takes it (a row of Decoded's columns). */
typedef struct {
    i64 op_class, final, kind, reg_mode, blocking, reader, behaviour, bank, row, first_col,
        columns;
    u64 targets;
} ins_t;

static void reversal_table(void) {
    if (reversed_byte[1]) return;
    for (int b = 0; b < 256; b++) {
        int r = 0;
        for (int i = 0; i < 8; i++) r |= (b >> i & 1) << (7 - i);
        reversed_byte[b] = (unsigned char)r;
    }
}

/* Instruction ``i`` of ``raw`` decoded under the CFR values ``cfr``; ``reach`` is the channel
 * bits a mask may select (Decoded.__init__). */
static inline void decode_one(const raw_t *raw, const optable_t *t, i64 i, const i64 *cfr,
                              u64 reach, i64 channels, ins_t *o) {
    i64 op = raw->op[i];
    int dram = (int)t->dram[op], one = t->one_channel[op] == 1;
    o->op_class = t->op_class[op];
    o->final = t->final[op];
    o->kind = t->kind[op];
    o->reg_mode = t->reg_mode[op];
    o->blocking = t->blocking[op];
    o->reader = t->reader[op];
    o->behaviour = t->behaviour[op];
    i64 row = op == t->af ? t->af_row_base + cfr[t->afm] : raw->row[i];
    o->bank = dram ? raw->bank[i] : 0;
    o->row = dram ? row : 0;
    o->first_col = dram && (one || raw->col[i] != t->unset) ? raw->col[i] : 0;
    o->columns = !dram ? 0
        : (t->has_columns[op] == 0 || raw->opsize[i] == t->unset) ? 1 : raw->opsize[i];
    o->targets = 0;
    if (dram && one) {
        i64 ch = raw->channel[i];
        if (ch >= 0 && ch < channels) o->targets = (u64)1 << ch;
    } else if (dram) {
        i64 mask = raw->channel_mask[i];
        if (mask != t->unset && mask != 0) o->targets = reverse32((u64)mask) & reach;
    }
}

/* After instruction ``i``: the CFR it writes, if it is a W CFR. */
static inline void cfr_after(const raw_t *raw, const optable_t *t, i64 i, i64 *cfr) {
    if (raw->op[i] != t->wr_cfr) return;
    i64 which = raw->cfr_id[i];
    if (which >= 0 && which < t->cfrs) cfr[which] = raw->cfr_value[i];
}

/* The channel bits a mask may select on a device of ``channels`` channels. */
static inline u64 reach_of(const optable_t *t, i64 channels) {
    int bits = (int)(channels < t->mask_bits ? channels : t->mask_bits);
    return bits >= 64 ? ~(u64)0 : ((u64)1 << bits) - 1;
}

/* How many W CFRs ``raw`` has, or -1 if an op id is outside the table. */
static i64 cfr_writes(const raw_t *raw, const optable_t *t) {
    i64 writes = 0;
    for (i64 i = 0; i < raw->n; i++) {
        if (raw->op[i] < 0 || raw->op[i] >= t->nops) return -1;
        writes += raw->op[i] == t->wr_cfr;
    }
    return writes;
}

/* Decode ``raw`` from the CFR values ``start_cfr`` for a device of ``channels`` channels.
 * Returns how many CFR writes the program has (0: ``out->cfr`` is not written), or -1 for an
 * op id outside the table (nothing else is checked: the program is a validated Program). */
i64 aim_decode(const raw_t *raw, const optable_t *t, const i64 *start_cfr, i64 channels,
               decoded_t *out) {
    i64 cfr[8], n = raw->n;
    if (t->cfrs > 8) return -1;
    reversal_table();
    i64 writes = cfr_writes(raw, t);
    if (writes < 0) return -1;
    for (i64 c = 0; c < t->cfrs; c++) cfr[c] = start_cfr[c];
    u64 reach = reach_of(t, channels);
    for (i64 i = 0; i < n; i++) {
        ins_t o;
        if (writes)
            for (i64 c = 0; c < t->cfrs; c++) out->cfr[c * n + i] = cfr[c];
        decode_one(raw, t, i, cfr, reach, channels, &o);
        cfr_after(raw, t, i, cfr);
        out->op_class[i] = o.op_class;
        out->final[i] = o.final;
        out->kind[i] = o.kind;
        out->reg_mode[i] = o.reg_mode;
        out->blocking[i] = o.blocking;
        out->reader[i] = o.reader;
        out->behaviour[i] = o.behaviour;
        out->bank[i] = o.bank;
        out->row[i] = o.row;
        out->first_col[i] = o.first_col;
        out->columns[i] = o.columns;
        out->targets[i] = o.targets;
    }
    for (i64 c = 0; c < t->cfrs; c++) out->end_cfr[c] = cfr[c];
    return writes;
}
