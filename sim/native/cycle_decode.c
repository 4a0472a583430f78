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
 * the value each CFR has when each instruction is decoded; ``end_cfr``: after the last). */
typedef struct {
    i64 *op_class, *final, *kind, *reg_mode, *blocking, *reader, *behaviour, *bank, *row,
        *first_col, *columns;
    u64 *targets;
    i64 *cfr, *end_cfr;
} decoded_t;

static inline u64 reverse32(u64 x) {
    x &= 0xFFFFFFFFULL;
    u64 r = 0;
    for (int i = 0; i < 32; i++, x >>= 1) r = r << 1 | (x & 1);
    return r;
}

/* Decode ``raw`` from the CFR values ``start_cfr`` for a device of ``channels`` channels.
 * Returns 0, or -1 for an op id outside the table (nothing else is checked: the program is
 * a validated Program). */
i64 aim_decode(const raw_t *raw, const optable_t *t, const i64 *start_cfr, i64 channels,
               decoded_t *out) {
    i64 cfr[8];
    if (t->cfrs > 8) return -1;
    for (i64 c = 0; c < t->cfrs; c++) cfr[c] = start_cfr[c];
    int bits = (int)(channels < t->mask_bits ? channels : t->mask_bits);
    u64 reach = bits >= 64 ? ~(u64)0 : ((u64)1 << bits) - 1;
    for (i64 i = 0; i < raw->n; i++) {
        i64 op = raw->op[i];
        if (op < 0 || op >= t->nops) return -1;
        for (i64 c = 0; c < t->cfrs; c++) out->cfr[c * raw->n + i] = cfr[c];
        if (op == t->wr_cfr) {
            i64 which = raw->cfr_id[i];
            if (which >= 0 && which < t->cfrs) cfr[which] = raw->cfr_value[i];
        }
        int dram = (int)t->dram[op], one = t->one_channel[op] == 1;
        out->op_class[i] = t->op_class[op];
        out->final[i] = t->final[op];
        out->kind[i] = t->kind[op];
        out->reg_mode[i] = t->reg_mode[op];
        out->blocking[i] = t->blocking[op];
        out->reader[i] = t->reader[op];
        out->behaviour[i] = t->behaviour[op];
        i64 row = op == t->af ? t->af_row_base + out->cfr[t->afm * raw->n + i] : raw->row[i];
        out->bank[i] = dram ? raw->bank[i] : 0;
        out->row[i] = dram ? row : 0;
        out->first_col[i] = dram && (one || raw->col[i] != t->unset) ? raw->col[i] : 0;
        out->columns[i] = !dram ? 0
            : (t->has_columns[op] == 0 || raw->opsize[i] == t->unset) ? 1 : raw->opsize[i];
        u64 targets = 0;
        if (dram && one) {
            i64 ch = raw->channel[i];
            if (ch >= 0 && ch < channels) targets = (u64)1 << ch;
        } else if (dram) {
            i64 mask = raw->channel_mask[i];
            if (mask != t->unset && mask != 0) targets = reverse32((u64)mask) & reach;
        }
        out->targets[i] = targets;
    }
    for (i64 c = 0; c < t->cfrs; c++) out->end_cfr[c] = cfr[c];
    return 0;
}
