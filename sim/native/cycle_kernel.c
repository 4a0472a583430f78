/* The AiM memory system of sim/cycle_model.py and sim/controller.py, compiled.
 *
 * The same semantics, line for line, as the Python model run with ``skip=False`` (every
 * controller ticked every cycle): read those two files for what each step means; this file
 * only restates them over flat arrays. Two shortcuts are exact by construction: a
 * controller that holds nothing is not ticked (its tick would only count an idle cycle and
 * set the write mode; both are done when a send wakes it), and a buffer scan that found no
 * request ready is remembered until the next issue (``scan_t``: until then the times its
 * requests wait for do not change, so later scans skip them until the earliest). Identical
 * channels are simulated once and split on a partial target, as in the Python model.
 *
 * Two front ends decode the program (config ``frontend``): the shared AiM DMA (dma, decode)
 * and the opt-in per-channel one (dma_each, decode_each), _Run._dma and _Run._dma_each.
 *
 * A run may take a memo (cycle_memo.c, included below): segments of the program between memo
 * points whose outcome an earlier run already found are not simulated again, and channels
 * whose state is the same are simulated once again (exact; see there). cycle_decode.c
 * decodes a program's columns as sim/native.py's Decoded does.
 *
 * Everything device- and timing-specific arrives as data from sim/native.py (the timing
 * table's rules in CSR form, latencies, command classes); nothing here names a timing value.
 * tests/test_cycle_model_native.py requires identical cycles, counts, statistics, schedules
 * and end states to the Python model on random programs of every instruction kind.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t i64;
typedef uint64_t u64;

enum { KIND_AIM = 0, KIND_READ = 1, KIND_WRITE = 2 };
enum { OP_NONE = 0, OP_CFR = 1, OP_SYNC = 2, OP_DRAM = 3 };  /* instruction classes */
enum { CAPACITY = 32 };                                      /* a buffer accepts at <= 32 */
enum { OK = 0, CONVERGED = 1, ERR_MEMORY = -1, ERR_STALL = -2 };
#define NEVER ((i64)1 << 62)
#define MIXED ((i64)-2) /* open banks on different rows (rows are >= 0) */

/* Device, timing and command classes (filled by sim/native.py). */
typedef struct {
    i64 channels, banks, banks_per_group, bankgroups, commands;
    const i64 *after_start;  /* [3][commands + 1]: CSR offsets per level and preceding command */
    const i64 *after_follow; /* following command of each rule entry */
    const i64 *after_gap;    /* its gap */
    const i64 *latency;      /* [commands], -1 if none */
    const i64 *closing, *opening, *channel_scoped, *bank_preq, *all_rows_preq; /* [commands] */
    const i64 *col_limit; /* [commands]: a request's column wraps at it (0: no column) */
    i64 act, pre, prea, act16, tmod, wra16, eoc;
    i64 record, drain, stall_limit;
    i64 frontend; /* 0: the shared DMA; 1: a decoder per controller */
    i64 memo_stride; /* with a memo, the shared front end's points every this many (0: none) */
} config_t;

/* The program, one entry per instruction (decoded facts; rows of AF16 already resolved). */
typedef struct {
    i64 n;
    const i64 *op_class, *final, *kind, *reg_mode, *blocking, *reader;
    const u64 *targets; /* channel bits */
    const i64 *bank, *row, *first_col, *columns;
} program_t;

typedef struct {
    i64 groups;
    const u64 *members;  /* [groups], in order of their lowest channel */
    const i64 *open_row; /* [channels][banks] */
    const i64 *reg_mode; /* [channels] */
} start_t;

typedef struct { i64 cycle, members, command, bank, row, col, pos, index, final; } record_t;

typedef struct {
    i64 cycles, retired;
    i64 controllers;
    u64 *members;      /* [channels] (caller-allocated) */
    i64 *counts;       /* [channels][commands] */
    i64 *stats;        /* [channels][3]: active, precharged, idle */
    i64 *open_row;     /* [channels][banks] */
    i64 *reg_mode;     /* [channels] */
    record_t *records; /* malloc'd here; release with aim_free */
    i64 n_records;
} result_t;

typedef void (*progress_fn)(i64 retired, i64 cycle);

/* Checkpoints of a run, to stop a later run of the same program once it is in the same state
 * (native.Trace). Checkpoint ``j`` is taken at the start of the first memory-system cycle in
 * which the head has passed ``at_head[j - 1]`` instructions (and not ``at_head[j]``): every
 * controller's statistics
 * accounted up to that cycle, its per-channel counts and statistics, and the run's state in a
 * canonical form (``state_of``) with every time relative to that cycle. ``mode`` 1 records
 * them; ``mode`` 2 compares each of its own with the recorded one of the same index and, on
 * the first that is equal, stops (CONVERGED) with its counts and statistics in ``now_*``. */
typedef struct {
    i64 mode, cap;           /* cap: checkpoints the arrays hold */
    const i64 *at_head;      /* [cap] ascending head positions */
    i64 n;                   /* checkpoints recorded */
    i64 *cycle, *index;      /* [cap] */
    i64 *counts, *stats;     /* [cap][channels][commands], [cap][channels][3] */
    i64 *offset;             /* [cap + 1] into ``state`` */
    i64 *state;              /* malloc'd here (record); release with aim_free */
    i64 state_cap;
    i64 matched, at;         /* match: the checkpoint matched (-1: none) and the cycle */
    i64 *now_counts, *now_stats; /* [channels][commands], [channels][3] */
} trace_t;

typedef struct {
    int kind, final, bank, bg, command, reg_mode, callback, reader, sync;
    i64 row, col, arrive, depart, pos, index;
} req_t;

/* A list of request slots; FIFOs pop from ``start``. */
typedef struct { int32_t *v; i64 start, n, cap; } list_t;

/* What a scan of a buffer found (see ``unready``): in issue ``epoch``, its first ``n``
 * requests are not ready before clock ``min``. */
typedef struct { i64 epoch, n, min; } scan_t;
enum { SCAN_ACTIVE = 0, SCAN_READS = 1, SCAN_WRITES = 2 };

typedef struct {
    u64 members;
    i64 nmembers;
    i64 *ch_ready, *bg_ready, *bank_ready, *open_row, *counts;
    u64 open_mask, reported_open;
    i64 same_row;   /* with open_mask: the row every open bank is on, or MIXED */
    i64 writes_due; /* the earliest depart in pending_writes (NEVER if empty) */
    int reg_mode, write_mode;
    i64 epoch;      /* issues so far: rows and timing windows change only with an issue */
    scan_t scan[3]; /* of active, reads, writes (SCAN_*) */
    list_t aim, reads, writes, active, pending_reads, pending_writes, remaining, free;
    req_t *pool;
    i64 pool_cap;
    i64 active_cycles, precharged_cycles, idle_cycles, clk;
    i64 idle_since; /* the clock of its last tick while holding work (0: none yet) */
    i64 wake;       /* the first clock at which a tick may change something (see plan) */
    i64 horizon;    /* no timing window of it opens later than this (cycle_memo.c) */
    /* the per-channel front end's decoder (_Front) */
    i64 head;       /* the next instruction it may take */
    int waiting;    /* at a barrier (SYNC, EOC, a blocking read) until it falls */
} ctl_t;

typedef struct {
    const config_t *cfg;
    const program_t *prog;
    ctl_t *ctls;
    i64 nctl;
    i64 owner[64]; /* the controller of each channel (reorder keeps it, after any split) */
    u64 busy;    /* bit i: controller i holds work or refused sends (it must be ticked) */
    i64 head;    /* the instruction at the queue's head */
    i64 stalled; /* callbacks the blocking head still waits for */
    /* the per-channel front end (_Run._front_end) */
    i64 arrived;   /* channels at the barrier: taken (a read) or called back (SYNC, EOC) */
    i64 callbacks; /* callbacks the barrier at a blocking read still waits for */
    i64 due;       /* a blocking read every channel took in this cycle, to send; else -1 */
    int finished, failed;
    record_t *records;
    i64 n_records, cap_records;
    i64 last_change;
    i64 reach[64]; /* per command: the longest gap of a rule it starts (horizon) */
    i64 *acc; /* [channels][commands + 3]: counts and statistics (active, precharged, idle) of
               * each channel not held by its controller (segments taken from a memo, and
               * controllers rebuilt from one); NULL without a memo */
} run_t;

static inline int lowest(u64 x) { return __builtin_ctzll(x); }

/* Words per channel of an output row: the command counts, then active, precharged, idle. */
static inline i64 out_width(const config_t *cfg) { return cfg->commands + 3; }

/* -- lists ---------------------------------------------------------------------------------- */

static int list_push(list_t *l, int32_t x) {
    if (l->n == l->cap) {
        if (l->start > 0) {
            memmove(l->v, l->v + l->start, (size_t)(l->n - l->start) * sizeof *l->v);
            l->n -= l->start;
            l->start = 0;
        } else {
            i64 cap = l->cap ? 2 * l->cap : 64;
            int32_t *v = realloc(l->v, (size_t)cap * sizeof *v);
            if (!v) return 0;
            l->v = v;
            l->cap = cap;
        }
    }
    l->v[l->n++] = x;
    return 1;
}

static inline i64 list_len(const list_t *l) { return l->n - l->start; }
static inline int32_t list_at(const list_t *l, i64 i) { return l->v[l->start + i]; }

static inline int32_t list_pop_front(list_t *l) {
    int32_t x = l->v[l->start++];
    if (l->start == l->n) l->start = l->n = 0;
    return x;
}

static void list_remove(list_t *l, int32_t x) {
    for (i64 i = l->start; i < l->n; i++) {
        if (l->v[i] == x) {
            memmove(l->v + i, l->v + i + 1, (size_t)(l->n - i - 1) * sizeof *l->v);
            l->n--;
            if (l->start == l->n) l->start = l->n = 0;
            return;
        }
    }
}

static int list_copy(list_t *dst, const list_t *src) {
    dst->start = 0;
    dst->n = src->n - src->start;
    dst->cap = dst->n > 64 ? dst->n : 64;
    dst->v = malloc((size_t)dst->cap * sizeof *dst->v);
    if (!dst->v) return 0;
    memcpy(dst->v, src->v + src->start, (size_t)dst->n * sizeof *dst->v);
    return 1;
}

/* -- controllers ---------------------------------------------------------------------------- */

static i64 *zeros(i64 n, i64 value) {
    i64 *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    if (p) for (i64 i = 0; i < n; i++) p[i] = value;
    return p;
}

static int ctl_init(ctl_t *c, const config_t *cfg, u64 members) {
    memset(c, 0, sizeof *c);
    c->members = members;
    c->nmembers = __builtin_popcountll(members);
    c->ch_ready = zeros(cfg->commands, -1);
    c->bg_ready = zeros(cfg->bankgroups * cfg->commands, -1);
    c->bank_ready = zeros(cfg->banks * cfg->commands, -1);
    c->open_row = zeros(cfg->banks, -1);
    c->counts = zeros(cfg->commands, 0);
    c->writes_due = NEVER;
    c->horizon = -1;
    for (int i = 0; i < 3; i++) c->scan[i].epoch = -1;
    return c->ch_ready && c->bg_ready && c->bank_ready && c->open_row && c->counts;
}

static void ctl_release(ctl_t *c) {
    free(c->ch_ready); free(c->bg_ready); free(c->bank_ready); free(c->open_row);
    free(c->counts); free(c->pool);
    list_t *lists[] = {&c->aim, &c->reads, &c->writes, &c->active, &c->pending_reads,
                       &c->pending_writes, &c->remaining, &c->free};
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) free(lists[i]->v);
}

/* Make an initialised controller stand for ``members`` and hold nothing, every window open,
 * keeping its arrays and request pool (cycle_memo.c rebuilds controllers from a state so). */
static void ctl_reset(ctl_t *c, const config_t *cfg, u64 members) {
    for (i64 i = 0; i < cfg->commands; i++) { c->ch_ready[i] = -1; c->counts[i] = 0; }
    for (i64 i = 0; i < cfg->bankgroups * cfg->commands; i++) c->bg_ready[i] = -1;
    for (i64 i = 0; i < cfg->banks * cfg->commands; i++) c->bank_ready[i] = -1;
    for (i64 b = 0; b < cfg->banks; b++) c->open_row[b] = -1;
    list_t *lists[] = {&c->aim, &c->reads, &c->writes, &c->active, &c->pending_reads,
                       &c->pending_writes, &c->remaining, &c->free};
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) lists[i]->start = lists[i]->n = 0;
    for (i64 i = c->pool_cap - 1; i >= 0; i--) list_push(&c->free, (int32_t)i); /* fits: it
                                                                                held them */
    c->members = members;
    c->nmembers = __builtin_popcountll(members);
    c->open_mask = c->reported_open = 0;
    c->same_row = -1;
    c->writes_due = NEVER;
    c->reg_mode = c->write_mode = 0;
    c->epoch = 0;
    for (int i = 0; i < 3; i++) c->scan[i].epoch = -1;
    c->active_cycles = c->precharged_cycles = c->idle_cycles = c->clk = 0;
    c->idle_since = c->wake = c->head = 0;
    c->horizon = -1;
    c->waiting = 0;
}

static i64 *dup(const i64 *p, i64 n) {
    i64 *q = malloc((size_t)(n ? n : 1) * sizeof *q);
    if (q) memcpy(q, p, (size_t)n * sizeof *q);
    return q;
}

/* A deep copy: the new controller's requests are its own (Python: ChannelController.split). */
static int ctl_clone(ctl_t *dst, const ctl_t *src, const config_t *cfg) {
    *dst = *src;
    for (int i = 0; i < 3; i++) dst->scan[i].epoch = -1;
    dst->ch_ready = dup(src->ch_ready, cfg->commands);
    dst->bg_ready = dup(src->bg_ready, cfg->bankgroups * cfg->commands);
    dst->bank_ready = dup(src->bank_ready, cfg->banks * cfg->commands);
    dst->open_row = dup(src->open_row, cfg->banks);
    dst->counts = dup(src->counts, cfg->commands);
    dst->pool = malloc((size_t)(src->pool_cap ? src->pool_cap : 1) * sizeof *dst->pool);
    if (!dst->ch_ready || !dst->bg_ready || !dst->bank_ready || !dst->open_row || !dst->counts
        || !dst->pool)
        return 0;
    memcpy(dst->pool, src->pool, (size_t)src->pool_cap * sizeof *dst->pool);
    list_t *d[] = {&dst->aim, &dst->reads, &dst->writes, &dst->active, &dst->pending_reads,
                   &dst->pending_writes, &dst->remaining, &dst->free};
    const list_t *s[] = {&src->aim, &src->reads, &src->writes, &src->active,
                         &src->pending_reads, &src->pending_writes, &src->remaining,
                         &src->free};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++)
        if (!list_copy(d[i], s[i])) return 0;
    return 1;
}

static int32_t ctl_alloc(ctl_t *c) {
    if (list_len(&c->free) == 0) {
        i64 cap = c->pool_cap ? 2 * c->pool_cap : 128;
        req_t *pool = realloc(c->pool, (size_t)cap * sizeof *pool);
        if (!pool) return -1;
        c->pool = pool;
        for (i64 i = cap - 1; i >= c->pool_cap; i--)
            if (!list_push(&c->free, (int32_t)i)) return -1;
        c->pool_cap = cap;
    }
    i64 last = c->free.n - 1;  /* pop the back (order of slots is irrelevant) */
    int32_t slot = c->free.v[last];
    c->free.n = last;
    if (c->free.start == c->free.n) c->free.start = c->free.n = 0;
    return slot;
}

static inline int ctl_holding(const ctl_t *c) {
    return list_len(&c->aim) || list_len(&c->reads) || list_len(&c->writes)
        || list_len(&c->active) || list_len(&c->pending_reads) || list_len(&c->pending_writes);
}

static inline int ctl_buffered(const ctl_t *c) { /* the idle test of the statistics */
    return list_len(&c->reads) || list_len(&c->writes) || list_len(&c->aim)
        || list_len(&c->pending_reads) || list_len(&c->pending_writes);
}

/* ChannelController._account: the statistics of the quiet cycles up to ``upto``. */
static void ctl_account(ctl_t *c, i64 upto) {
    i64 n = upto - c->clk;
    if (n <= 0) return;
    if (c->reported_open) c->active_cycles += n; else c->precharged_cycles += n;
    if (!ctl_buffered(c)) c->idle_cycles += n;
    c->clk = upto;
}

/* ChannelController._count_cycle */
static void ctl_count_cycle(ctl_t *c, i64 clk, int found) {
    if (!found && !ctl_buffered(c)) c->idle_cycles += 1;
    if (c->reported_open) c->active_cycles += 1; else c->precharged_cycles += 1;
    c->clk = clk;
}

/* Recompute ``same_row`` from the open rows (start states and PREs of a mixed set). */
static void same_row_of(ctl_t *c, const config_t *cfg) {
    c->same_row = -1;
    for (i64 b = 0; b < cfg->banks; b++) {
        i64 row = c->open_row[b];
        if (row < 0) continue;
        if (c->same_row < 0) c->same_row = row;
        else if (c->same_row != row) { c->same_row = MIXED; return; }
    }
}

/* ChannelController.ready_at: the earliest clock every timing rule allows ``command``. */
static inline i64 ready_at(const ctl_t *c, const config_t *cfg, i64 command, const req_t *r) {
    i64 t = c->ch_ready[command];
    if (r->bank >= 0 && !cfg->channel_scoped[command]) {
        i64 b = c->bg_ready[r->bg * cfg->commands + command];
        if (b > t) t = b;
        b = c->bank_ready[r->bank * cfg->commands + command];
        if (b > t) t = b;
    }
    return t;
}

/* ChannelController.preq: the command ``r`` needs next, given the open rows. */
static inline i64 preq(const ctl_t *c, const config_t *cfg, const req_t *r) {
    i64 final = r->final;
    if (cfg->bank_preq[final]) {
        i64 row = c->open_row[r->bank];
        if (row < 0) return cfg->act;
        return row == r->row ? final : cfg->pre;
    }
    if (cfg->all_rows_preq[final]) {
        if (!c->open_mask) return cfg->act16;
        if (c->same_row != r->row) return cfg->prea; /* an open bank on another row */
        if (c->open_mask != ((u64)1 << cfg->banks) - 1) return cfg->act16;
        return final;
    }
    return final;
}

static void apply_after(i64 *ready, const config_t *cfg, int level, i64 command, i64 clk) {
    const i64 *start = cfg->after_start + level * (cfg->commands + 1);
    for (i64 i = start[command]; i < start[command + 1]; i++) {
        i64 f = cfg->after_follow[i], t = clk + cfg->after_gap[i];
        if (ready[f] < t) ready[f] = t;
    }
}

static int record_issue(run_t *run, const ctl_t *c, i64 command, const req_t *r, i64 clk) {
    const config_t *cfg = run->cfg;
    if (run->n_records == run->cap_records) {
        i64 cap = run->cap_records ? 2 * run->cap_records : 4096;
        record_t *p = realloc(run->records, (size_t)cap * sizeof *p);
        if (!p) return 0;
        run->records = p;
        run->cap_records = cap;
    }
    int final = command == r->final;
    record_t *rec = &run->records[run->n_records++];
    rec->cycle = clk;
    rec->members = (i64)c->members;
    rec->command = command;
    rec->bank = cfg->channel_scoped[command] ? -1 : r->bank;
    rec->row = (final || cfg->opening[command]) ? r->row : -1;
    rec->col = final ? r->col : -1;
    rec->pos = r->pos;
    rec->index = r->index;
    rec->final = final;
    return 1;
}

/* ChannelController._issue: timing windows, row state, counts and the record. */
static int ctl_issue(run_t *run, ctl_t *c, i64 command, const req_t *r, i64 clk) {
    const config_t *cfg = run->cfg;
    c->epoch += 1;
    if (clk + run->reach[command] > c->horizon) c->horizon = clk + run->reach[command];
    apply_after(c->ch_ready, cfg, 0, command, clk);
    if (r->bank >= 0) {
        apply_after(c->bg_ready + r->bg * cfg->commands, cfg, 1, command, clk);
        apply_after(c->bank_ready + r->bank * cfg->commands, cfg, 2, command, clk);
    }
    u64 full = ((u64)1 << cfg->banks) - 1;
    if (command == cfg->act) {
        c->open_row[r->bank] = r->row;
        if (!c->open_mask) c->same_row = r->row;
        else if (c->same_row != r->row) c->same_row = MIXED;
        c->open_mask |= (u64)1 << r->bank;
        c->reported_open |= (u64)1 << (r->bank % cfg->banks_per_group);
    } else if (command == cfg->pre) {
        c->open_row[r->bank] = -1;
        c->open_mask &= ~((u64)1 << r->bank);
        c->reported_open &= ~((u64)1 << (r->bank % cfg->banks_per_group));
        if (c->same_row == MIXED) same_row_of(c, cfg); /* the rest may now agree */
    } else if (command == cfg->act16) {
        for (i64 b = 0; b < cfg->banks; b++) c->open_row[b] = r->row;
        c->open_mask = c->reported_open = full;
        c->same_row = r->row;
    } else if (command == cfg->prea || command == cfg->wra16) {
        for (i64 b = 0; b < cfg->banks; b++) c->open_row[b] = -1;
        c->open_mask = c->reported_open = 0;
    }
    c->counts[command] += 1;
    return !cfg->record || record_issue(run, c, command, r, clk);
}

/* Offer request ``slot`` at the DMA's clock; return 1 if accepted (ChannelController.send). */
static int ctl_send(ctl_t *c, int32_t slot, i64 clk) {
    req_t *r = &c->pool[slot];
    list_t *buffer;
    ctl_account(c, clk);
    if (r->kind == KIND_AIM) {
        if (list_len(&c->writes) || list_len(&c->reads)) return 0;
        buffer = &c->aim;
    } else {
        if (list_len(&c->aim)) return 0;
        if (r->kind == KIND_READ && list_len(&c->writes)) {
            r->depart = clk + 1;
            return list_push(&c->pending_reads, slot) ? 1 : -1;
        }
        buffer = r->kind == KIND_READ ? &c->reads : &c->writes;
    }
    if (list_len(buffer) > CAPACITY) return 0;
    r->arrive = clk;
    return list_push(buffer, slot) ? 1 : -1;
}

/* ChannelController._best: FR-FCFS (ready first, then oldest; ties keep buffer order). */
static int32_t best(ctl_t *c, const config_t *cfg, const list_t *buffer, scan_t *scan, i64 clk,
                    int *ready) {
    int32_t b = -1;
    int b_ready = 0;
    i64 soonest = NEVER;
    for (i64 i = 0; i < list_len(buffer); i++) {
        req_t *r = &c->pool[list_at(buffer, i)];
        r->command = (int)preq(c, cfg, r);
    }
    for (i64 i = 0; i < list_len(buffer); i++) {
        int32_t slot = list_at(buffer, i);
        req_t *r = &c->pool[slot];
        i64 t = ready_at(c, cfg, r->command, r);
        int rd = clk >= t;
        if (t < soonest) soonest = t;
        if (b < 0) { b = slot; b_ready = rd; }
        else if (rd != b_ready) { if (rd) { b = slot; b_ready = rd; } }
        else if (c->pool[b].arrive > r->arrive) { b = slot; b_ready = rd; }
    }
    if (!b_ready) *scan = (scan_t){c->epoch, list_len(buffer), soonest};
    *ready = b_ready;
    return b;
}

/* True if a scan of ``buffer`` in this epoch found all its requests unready before a later
 * clock than ``clk``: none is ready now (the rows and timing windows they wait on change only
 * with an issue, and a buffer loses requests only by one). */
static inline int unready(const ctl_t *c, const scan_t *scan, const list_t *buffer, i64 clk) {
    return scan->epoch == c->epoch && scan->n == list_len(buffer) && clk < scan->min;
}

/* ``best`` for the read or write buffer, which holds its requests in order of arrival (sends
 * come in cycle order, and removals keep the order): the oldest ready one is the first ready
 * one, and if none is ready, the oldest is the first. Only the chosen one's ``command`` is set
 * (no other is read before the next tick sets it again). */
static int32_t best_arrived(ctl_t *c, const config_t *cfg, const list_t *buffer, scan_t *scan,
                            i64 clk, int *ready) {
    /* requests join at the back, so a scan of this epoch that found the first ``n`` unready
     * before a later clock lets this one start past them */
    i64 i = 0, soonest = NEVER;
    if (scan->epoch == c->epoch && scan->n <= list_len(buffer) && clk < scan->min) {
        i = scan->n;
        soonest = scan->min;
    }
    for (; i < list_len(buffer); i++) {
        int32_t slot = list_at(buffer, i);
        req_t *r = &c->pool[slot];
        r->command = (int)preq(c, cfg, r);
        i64 t = ready_at(c, cfg, r->command, r);
        if (clk >= t) { *ready = 1; return slot; }
        if (t < soonest) soonest = t;
    }
    *scan = (scan_t){c->epoch, list_len(buffer), soonest};
    int32_t first = list_at(buffer, 0);
    req_t *r = &c->pool[first];
    r->command = (int)preq(c, cfg, r);
    *ready = 0;
    return first;
}

/* ChannelController._set_write_mode (watermarks 0.8 and 0.2 of the capacity) */
static void set_write_mode(ctl_t *c) {
    i64 writes = list_len(&c->writes);
    int reads = list_len(&c->reads) > 0;
    if (!c->write_mode) {
        if (writes * 5 > CAPACITY * 4 || !reads) c->write_mode = 1;  /* > 0.8 x 32 */
    } else if (writes * 5 < CAPACITY && reads) {                       /* < 0.2 x 32 */
        c->write_mode = 0;
    }
}

/* _Run._release: every decoder past the barrier it waits at (``end``: the EOC). */
static void release_all(run_t *run, int end) {
    run->arrived = 0;
    for (i64 i = 0; i < run->nctl; i++) {
        run->ctls[i].head += 1;
        run->ctls[i].waiting = 0;
    }
    if (end) run->finished = 1;
}

/* _Run._receive_each: the ``n`` channels of ``c`` called back for the barrier's SYNC or EOC
 * (``sync``) or for its blocking read. */
static void receive_each(run_t *run, ctl_t *c, int sync, i64 n) {
    if (sync) {
        run->arrived += n;
        if (run->arrived == run->cfg->channels)
            release_all(run, run->prog->final[c->head] == run->cfg->eoc);
        return;
    }
    run->callbacks -= n;
    if (run->callbacks == 0) release_all(run, 0);
}

/* _Run._receive: ``n`` channels (those of ``c``) called back for the blocking head. */
static void receive(run_t *run, ctl_t *c, int sync, i64 n) {
    if (run->cfg->frontend) { receive_each(run, c, sync, n); return; }
    run->stalled -= n;
    if (run->stalled == 0) {
        if (run->prog->final[run->head] == run->cfg->eoc
            && run->prog->op_class[run->head] == OP_SYNC)
            run->finished = 1;
        run->head += 1;
    }
}

static void release(ctl_t *c, int32_t slot, run_t *run) {
    if (!list_push(&c->free, slot)) run->failed = ERR_MEMORY;
}

/* One cycle of one controller (ChannelController.tick); returns 1 if anything changed. */
static int ctl_tick(run_t *run, ctl_t *c, i64 clk) {
    const config_t *cfg = run->cfg;
    int changed = 0;
    ctl_account(c, clk - 1);
    if (list_len(&c->pending_reads)) {
        int32_t slot = list_at(&c->pending_reads, 0);
        req_t *r = &c->pool[slot];
        if (r->depart <= clk && (!r->sync || !list_len(&c->pending_writes))) {
            if (r->callback) receive(run, c, r->sync, c->nmembers);
            list_pop_front(&c->pending_reads);
            release(c, slot, run);
            changed = 1;
        }
    }
    if (c->writes_due <= clk) {
        list_t *l = &c->pending_writes;
        i64 kept = l->start, due = NEVER;
        for (i64 i = l->start; i < l->n; i++) {
            int32_t slot = l->v[i];
            i64 t = c->pool[slot].depart;
            if (t > clk) {
                l->v[kept++] = slot;
                if (t < due) due = t;
            } else {
                release(c, slot, run);
            }
        }
        c->writes_due = due;
        if (kept != l->n) {
            l->n = kept;
            if (l->start == l->n) l->start = l->n = 0;
            changed = 1;
        }
    }
    int found = 0, from_aim = 0;
    list_t *buffer = NULL;
    int32_t slot = -1;
    if (list_len(&c->active)) {
        buffer = &c->active;
        if (unready(c, &c->scan[SCAN_ACTIVE], buffer, clk))
            slot = list_at(buffer, 0); /* not found: the slot is not used */
        else
            slot = best(c, cfg, buffer, &c->scan[SCAN_ACTIVE], clk, &found);
    }
    if (!found) {
        if (list_len(&c->aim)) {
            slot = list_at(&c->aim, 0);
            buffer = &c->aim;
            from_aim = 1;
            req_t *r = &c->pool[slot];
            if (r->sync) {
                r->depart = clk;
                if (!list_push(&c->pending_reads, slot)) run->failed = ERR_MEMORY;
                list_pop_front(&c->aim);
                ctl_count_cycle(c, clk, 1);
                return 1;
            }
            r->command = (int)preq(c, cfg, r);
            found = clk >= ready_at(c, cfg, r->command, r);
        } else {
            set_write_mode(c);
            buffer = c->write_mode ? &c->writes : &c->reads;
            from_aim = 0;
            if (list_len(buffer))
                slot = best_arrived(c, cfg, buffer,
                                    &c->scan[c->write_mode ? SCAN_WRITES : SCAN_READS], clk,
                                    &found);
        }
    }
    if (found && cfg->closing[c->pool[slot].command]) {
        req_t *r = &c->pool[slot];
        for (i64 i = 0; i < list_len(&c->active); i++) {
            req_t *o = &c->pool[list_at(&c->active, i)];
            if (o->bank == r->bank && o->bg == r->bg) { found = 0; break; }
        }
    }
    if (found) {
        req_t *r = &c->pool[slot];
        changed = 1;
        if ((r->kind == KIND_AIM && r->reg_mode) != c->reg_mode) {
            r->command = (int)cfg->tmod;
            c->reg_mode = !c->reg_mode;
        }
        i64 command = r->command;
        if (!ctl_issue(run, c, command, r, clk)) run->failed = ERR_MEMORY;
        if (command == r->final) {
            r->depart = clk + cfg->latency[command];
            if (!list_push(r->reader ? &c->pending_reads : &c->pending_writes, slot))
                run->failed = ERR_MEMORY;
            if (!r->reader && r->depart < c->writes_due) c->writes_due = r->depart;
            if (from_aim) list_pop_front(&c->aim);
            else list_remove(buffer, slot);
        } else if (r->kind != KIND_AIM && cfg->opening[command]) {
            if (!list_push(&c->active, slot)) run->failed = ERR_MEMORY;
            list_remove(buffer, slot);
        }
    }
    ctl_count_cycle(c, clk, found);
    return changed;
}

/* After a tick at ``clk`` that changed nothing: the first clock at which one may (a pending
 * completion falls due, or a candidate command meets its timing rules). Until then ticks do
 * nothing but count cycles, which ctl_account does in bulk, and re-evaluate the write mode,
 * which one evaluation already settled (its two conditions exclude each other). A candidate
 * that is ready but was held back (a closing command against the active buffer) waits for a
 * change, which only an issue or a send makes. Cf. ChannelController.plan, which is finer;
 * this is the conservative form (every due write and both conventional buffers count). */
static i64 plan(ctl_t *c, const config_t *cfg, i64 clk) {
    i64 nxt = NEVER;
    if (list_len(&c->pending_reads)) {
        const req_t *head = &c->pool[list_at(&c->pending_reads, 0)];
        if (head->depart > clk) nxt = head->depart;
    }
    if (c->writes_due < nxt) nxt = c->writes_due;
    const list_t *lists[3] = {&c->active, &c->reads, &c->writes}; /* SCAN_* order */
    for (int l = 0; l < 3; l++) {
        scan_t *scan = &c->scan[l];
        if (unready(c, scan, lists[l], clk)) { /* every request's time is >= scan->min > clk */
            if (scan->min < nxt) nxt = scan->min;
            continue;
        }
        for (i64 i = 0; i < list_len(lists[l]); i++) {
            const req_t *r = &c->pool[list_at(lists[l], i)];
            i64 t = ready_at(c, cfg, preq(c, cfg, r), r);
            if (t > clk && t < nxt) nxt = t;
        }
    }
    if (list_len(&c->aim)) {
        const req_t *r = &c->pool[list_at(&c->aim, 0)];
        if (r->sync) return clk + 1;
        i64 t = ready_at(c, cfg, preq(c, cfg, r), r);
        if (t > clk && t < nxt) nxt = t;
    }
    return nxt;
}

/* -- the DMA -------------------------------------------------------------------------------- */


/* Note each channel's controller. */
static void own(run_t *run) {
    for (i64 i = 0; i < run->nctl; i++)
        for (u64 m = run->ctls[i].members; m; m &= m - 1) run->owner[lowest(m)] = i;
}

/* Keep the controllers ordered by their lowest channel after splits (insertion sort: few
 * moves), and the busy bits with them. */
static void reorder(run_t *run) {
    for (i64 i = 1; i < run->nctl; i++) {
        ctl_t key = run->ctls[i];
        i64 j = i - 1;
        while (j >= 0 && lowest(run->ctls[j].members) > lowest(key.members)) {
            run->ctls[j + 1] = run->ctls[j];
            j--;
        }
        run->ctls[j + 1] = key;
    }
    run->busy = 0;  /* indices moved: bit i follows controller i */
    for (i64 i = 0; i < run->nctl; i++) {
        ctl_t *c = &run->ctls[i];
        if (ctl_holding(c) || list_len(&c->remaining)) run->busy |= (u64)1 << i;
    }
    own(run);
}

/* The controllers for ``targets``, splitting partly targeted groups (_Run._targets). */
static int targets_of(run_t *run, u64 targets, i64 *out, i64 *nout) {
    u64 hit = 0; /* bit i: controller i holds a targeted channel */
    int split = 0;
    *nout = 0;
    for (u64 m = targets; m; m &= m - 1) hit |= (u64)1 << run->owner[lowest(m)];
    for (u64 h = hit; h; h &= h - 1) {
        ctl_t *c = &run->ctls[lowest(h)];
        u64 inside = c->members & targets;
        if (inside != c->members) {
            ctl_t *part = &run->ctls[run->nctl];
            if (!ctl_clone(part, c, run->cfg)) return 0;
            c->members &= ~inside;
            c->nmembers = __builtin_popcountll(c->members);
            part->members = inside;
            part->nmembers = __builtin_popcountll(inside);
            run->nctl++;
            split = 1;
        }
    }
    if (split) {
        reorder(run);
        hit = 0;
        for (u64 m = targets; m; m &= m - 1) hit |= (u64)1 << run->owner[lowest(m)];
    }
    for (u64 h = hit; h; h &= h - 1) out[(*nout)++] = lowest(h);
    return 1;
}

/* Mark controller ``c`` busy before a send at DMA cycle ``k``. While it held nothing it was
 * not ticked; each such tick would have set the write mode (ChannelController.tick with empty
 * buffers) and counted an idle cycle (counted lazily by ctl_account). */
static void wake(run_t *run, ctl_t *c, i64 k) {
    u64 bit = (u64)1 << (c - run->ctls);
    if (!(run->busy & bit)) {
        if (k > c->idle_since) c->write_mode = 1;
        run->busy |= bit;
    }
    if (c->wake > k + 1) c->wake = k + 1;
}

static int dma_send(run_t *run, ctl_t *c, int32_t slot, i64 k) {
    wake(run, c, k);
    if (!list_len(&c->remaining)) {
        int ok = ctl_send(c, slot, k);
        if (ok < 0) { run->failed = ERR_MEMORY; return 0; }
        if (ok) return 1;
    }
    if (!list_push(&c->remaining, slot)) run->failed = ERR_MEMORY;
    return 0;
}

/* The column of request ``i`` of instruction ``pos`` (CycleModel._decode): ``first_col + i``,
 * wrapped at its command's column count (sim.protocol.bus_column); -1 if it has none. */
static inline i64 request_column(const config_t *cfg, const program_t *p, i64 pos, i64 i) {
    i64 first = p->first_col[pos], wrap = cfg->col_limit[p->final[pos]];
    if (first < 0) return -1;
    return wrap ? (first + i) % wrap : first + i;
}

static int32_t new_request(run_t *run, ctl_t *c, int kind, i64 final, i64 bank, i64 row, i64 col,
                           int reg_mode, int callback, int reader, i64 pos, i64 index) {
    int32_t slot = ctl_alloc(c);
    if (slot < 0) { run->failed = ERR_MEMORY; return -1; }
    req_t *r = &c->pool[slot];
    r->kind = kind;
    r->final = (int)final;
    r->bank = (int)bank;
    r->bg = bank >= 0 ? (int)(bank / run->cfg->banks_per_group) : -1;
    r->row = row;
    r->col = col;
    r->command = -1;
    r->arrive = r->depart = -1;
    r->reg_mode = reg_mode;
    r->callback = callback;
    r->reader = reader;
    r->sync = final == run->cfg->eoc || run->prog->op_class[pos] == OP_SYNC;
    r->pos = pos;
    r->index = index;
    return slot;
}

/* Send the head instruction's requests; return 1 if all were accepted (_Run._decode). */
static int decode(run_t *run, i64 k) {
    const program_t *p = run->prog;
    i64 pos = run->head;
    i64 cls = p->op_class[pos];
    if (cls == OP_NONE || cls == OP_CFR) return 1;
    int ok = 1;
    if (cls == OP_SYNC) {
        for (i64 i = 0; i < run->nctl; i++) {
            ctl_t *c = &run->ctls[i];
            int32_t slot = new_request(run, c, KIND_AIM, p->final[pos], -1, -1, -1, 0, 1, 1,
                                       pos, 0);
            if (slot < 0) return 0;
            ok &= dma_send(run, c, slot, k);
            run->stalled += c->nmembers;
        }
        return ok;
    }
    i64 targets[64], ntargets;
    if (!targets_of(run, p->targets[pos], targets, &ntargets)) {
        run->failed = ERR_MEMORY;
        return 0;
    }
    for (i64 i = 0; i < p->columns[pos]; i++) {
        i64 col = request_column(run->cfg, p, pos, i);
        for (i64 t = 0; t < ntargets; t++) {
            ctl_t *c = &run->ctls[targets[t]];
            int32_t slot = new_request(run, c, (int)p->kind[pos], p->final[pos], p->bank[pos],
                                       p->row[pos], col, (int)p->reg_mode[pos],
                                       (int)p->blocking[pos], (int)p->reader[pos], pos, i);
            if (slot < 0) return 0;
            ok &= dma_send(run, c, slot, k);
            if (p->blocking[pos]) run->stalled += c->nmembers;
        }
    }
    return ok;
}

/* Send instruction ``pos``'s requests to controller ``c`` alone (_Run._decode_each); return 1
 * if all were accepted. */
static int decode_each(run_t *run, ctl_t *c, i64 pos, i64 k) {
    const program_t *p = run->prog;
    i64 cls = p->op_class[pos];
    if (cls == OP_NONE || cls == OP_CFR) return 1;
    if (cls == OP_SYNC) {
        int32_t slot = new_request(run, c, KIND_AIM, p->final[pos], -1, -1, -1, 0, 1, 1, pos, 0);
        return slot >= 0 && dma_send(run, c, slot, k);
    }
    if (!(p->targets[pos] & c->members)) return 1; /* an instruction for no channel */
    int ok = 1;
    for (i64 i = 0; i < p->columns[pos]; i++) {
        i64 col = request_column(run->cfg, p, pos, i);
        int32_t slot = new_request(run, c, (int)p->kind[pos], p->final[pos], p->bank[pos],
                                   p->row[pos], col, (int)p->reg_mode[pos],
                                   (int)p->blocking[pos], (int)p->reader[pos], pos, i);
        if (slot < 0) return 0;
        ok &= dma_send(run, c, slot, k);
    }
    return ok;
}

/* A blocking read with targets: every channel synchronises there (_Run.ordered). */
static inline int ordered(const program_t *p, i64 pos) {
    return p->op_class[pos] == OP_DRAM && p->blocking[pos] && p->targets[pos];
}

/* Controller ``i``'s decoder in cycle ``k`` under the per-channel front end: retry its refused
 * sends, else take its next instruction, splitting the controller when that addresses only
 * some of its channels (the others, split off to the end of the list, skip it and take their
 * next one in this same cycle, or, at a barrier, wait at it too). Returns 1 if it made
 * progress. */
static int front_step(run_t *run, i64 i, i64 k, int *split) {
    const program_t *p = run->prog;
    ctl_t *c = &run->ctls[i];
    int progress = 0;
    if (list_len(&c->remaining)) {
        while (list_len(&c->remaining)) {
            int ok = ctl_send(c, list_at(&c->remaining, 0), k);
            if (ok < 0) { run->failed = ERR_MEMORY; return 0; }
            if (!ok) break;
            list_pop_front(&c->remaining);
            if (c->wake > k + 1) c->wake = k + 1;
            progress = 1;
        }
        if (!c->waiting && !list_len(&c->remaining)) { c->head += 1; progress = 1; }
        return progress;
    }
    if (c->waiting) return 0;
    i64 pos = c->head;
    while (pos < p->n && p->targets[pos] && !ordered(p, pos) && !(p->targets[pos] & c->members))
        pos++;
    c->head = pos;
    if (pos == p->n) return 0;
    u64 wanted = p->targets[pos];
    if ((wanted & c->members) && (wanted & c->members) != c->members) {
        ctl_t *part = &run->ctls[run->nctl];
        if (!ctl_clone(part, c, run->cfg)) { run->failed = ERR_MEMORY; return 0; }
        part->members = c->members & ~wanted;
        part->nmembers = __builtin_popcountll(part->members);
        part->head = ordered(p, pos) ? pos : pos + 1;
        c->members &= wanted;
        c->nmembers = __builtin_popcountll(c->members);
        if (ctl_holding(part)) run->busy |= (u64)1 << run->nctl;
        run->nctl++;
        *split = 1;
    }
    if (ordered(p, pos)) { /* the shared DMA's ordering: every channel takes it first */
        c->waiting = 1;
        run->arrived += c->nmembers;
        if (run->arrived == run->cfg->channels) run->due = pos;
    } else if (p->op_class[pos] == OP_SYNC) {
        c->waiting = 1; /* held until every channel called back */
        decode_each(run, c, pos, k);
    } else if (decode_each(run, c, pos, k)) {
        c->head = pos + 1;
    }
    return 1;
}

/* The per-channel front end's part of memory-system cycle ``k`` (_Run._dma_each): a blocking
 * read is sent, by its channels, in the cycle the last channel takes it. Returns 1 if it made
 * progress. */
static int dma_each(run_t *run, i64 k) {
    int progress = 0, split = 0;
    i64 least = run->prog->n;
    for (i64 i = 0; i < run->nctl; i++) {  /* parts split off in this cycle get their turn */
        progress |= front_step(run, i, k, &split);
        if (run->failed) return 0;
        if (run->ctls[i].head < least) least = run->ctls[i].head;
    }
    if (run->due >= 0) {
        i64 pos = run->due;
        run->due = -1;
        run->arrived = 0;
        for (i64 i = 0; i < run->nctl; i++) {
            ctl_t *c = &run->ctls[i];
            if (!(c->members & run->prog->targets[pos])) continue;
            decode_each(run, c, pos, k);
            run->callbacks += run->prog->columns[pos] * c->nmembers;
        }
        if (run->failed) return 0;
    }
    run->head = least; /* what every channel is past (progress reports) */
    if (split) reorder(run);
    return progress;
}

/* True if every per-channel decoder waits for its controller: a refused send or a barrier. */
static int fronts_wait(const run_t *run) {
    for (i64 i = 0; i < run->nctl; i++) {
        const ctl_t *c = &run->ctls[i];
        if (!c->waiting && !list_len(&c->remaining)) return 0;
    }
    return 1;
}

/* True if a refused send waits to be retried (the DMA decodes nothing until it passes). */
static int dma_waits(const run_t *run) {
    for (u64 m = run->busy; m; m &= m - 1)
        if (list_len(&run->ctls[lowest(m)].remaining)) return 1;
    return 0;
}

/* The DMA part of memory-system cycle ``k`` (_Run._dma). Returns 1 if it made progress. */
static int dma(run_t *run, i64 k) {
    int was_remaining = 0, still_remaining = 0, progress = 0;
    for (u64 m = run->busy; m; m &= m - 1) {
        ctl_t *c = &run->ctls[lowest(m)];
        while (list_len(&c->remaining)) {
            was_remaining = 1;
            int ok = ctl_send(c, list_at(&c->remaining, 0), k);
            if (ok < 0) { run->failed = ERR_MEMORY; return 0; }
            if (!ok) { still_remaining = 1; break; }
            list_pop_front(&c->remaining);
            if (c->wake > k + 1) c->wake = k + 1;
            progress = 1;
        }
    }
    if (run->stalled) return progress;
    if (was_remaining) {
        if (!still_remaining) { run->head += 1; progress = 1; }
    } else if (run->head < run->prog->n) {
        progress = 1;
        if (decode(run, k) && run->stalled == 0) run->head += 1;
    }
    return progress;
}

/* -- checkpoints ---------------------------------------------------------------------------- */

typedef struct { i64 *v; i64 n, cap; int failed; } buf_t;

static inline void put(buf_t *b, i64 x) {
    if (b->n == b->cap) {
        i64 cap = b->cap ? 2 * b->cap : 4096;
        i64 *v = realloc(b->v, (size_t)cap * sizeof *v);
        if (!v) { b->failed = 1; return; }
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = x;
}

/* A time as the run from cycle ``k`` on sees it: a ready, depart or wake time at or before
 * the next tick (``k + 1``) acts as that tick (rule gaps are >= 0, checked in native.py). */
static inline i64 ahead(i64 t, i64 k) { return t > k + 1 ? t - k - 1 : 0; }

static void put_list(buf_t *b, const ctl_t *c, const list_t *l, i64 k) {
    put(b, list_len(l));
    for (i64 i = 0; i < list_len(l); i++) {
        const req_t *r = &c->pool[list_at(l, i)];
        put(b, r->kind); put(b, r->final); put(b, r->bank); put(b, r->row); put(b, r->col);
        put(b, r->reg_mode); put(b, r->callback); put(b, r->reader); put(b, r->sync);
        put(b, r->pos); put(b, r->index);
        put(b, r->arrive < 0 ? NEVER : r->arrive - k); /* only ordered against each other */
        put(b, r->depart < 0 ? -1 : ahead(r->depart, k));
    }
}

/* What the rest of the run depends on, per channel (so the grouping of channels into
 * controllers, which only saves work, does not enter): its controller's rows (and the bank
 * groups it reports open, which the statistics follow), modes, timing windows and requests,
 * and the front end's position. Counts and statistics (outputs) and the ticks a controller
 * may skip (``wake``: skipping them is exact) are left out. */
static void state_of(const run_t *run, i64 k, buf_t *b) {
    const config_t *cfg = run->cfg;
    put(b, run->head); put(b, run->stalled); put(b, run->arrived); put(b, run->callbacks);
    put(b, run->due); put(b, run->finished);
    for (i64 ch = 0; ch < cfg->channels; ch++) {
        i64 i = run->owner[ch];
        const ctl_t *c = &run->ctls[i];
        int busy = (int)(run->busy >> i & 1);
        put(b, c->reg_mode); put(b, c->write_mode); put(b, (i64)c->reported_open); put(b, busy);
        put(b, busy ? 0 : k > c->idle_since);  /* a send now or later sets the write mode */
        put(b, c->head); put(b, c->waiting);
        for (i64 j = 0; j < cfg->banks; j++) put(b, c->open_row[j]);
        for (i64 j = 0; j < cfg->commands; j++) put(b, ahead(c->ch_ready[j], k));
        for (i64 j = 0; j < cfg->bankgroups * cfg->commands; j++)
            put(b, ahead(c->bg_ready[j], k));
        for (i64 j = 0; j < cfg->banks * cfg->commands; j++)
            put(b, ahead(c->bank_ready[j], k));
        const list_t *lists[] = {&c->aim, &c->reads, &c->writes, &c->active,
                                 &c->pending_reads, &c->pending_writes, &c->remaining};
        for (size_t l = 0; l < sizeof lists / sizeof *lists; l++) put_list(b, c, lists[l], k);
    }
}

/* Per-channel counts and statistics, every controller accounted up to cycle ``k``. */
static void outputs_of(run_t *run, i64 k, i64 *counts, i64 *stats) {
    const config_t *cfg = run->cfg;
    i64 w = out_width(cfg);
    for (i64 i = 0; i < run->nctl; i++) {
        ctl_t *c = &run->ctls[i];
        ctl_account(c, k);
        for (u64 m = c->members; m; m &= m - 1) {
            int ch = lowest(m);
            const i64 *acc = run->acc ? run->acc + ch * w : NULL;
            for (i64 j = 0; j < cfg->commands; j++)
                counts[ch * cfg->commands + j] = c->counts[j] + (acc ? acc[j] : 0);
            i64 own[3] = {c->active_cycles, c->precharged_cycles, c->idle_cycles};
            for (int j = 0; j < 3; j++)
                stats[3 * ch + j] = own[j] + (acc ? acc[cfg->commands + j] : 0);
        }
    }
}

/* The result, per channel in ``out`` ([channels][out_width]), ``rows`` and ``modes``, written
 * one entry per set of channels that ended alike (in order of their lowest channel). */
static void emit(const config_t *cfg, result_t *res, const i64 *out, const i64 *rows,
                 const i64 *modes) {
    i64 w = out_width(cfg), n = 0;
    int entry[64];
    for (i64 ch = 0; ch < cfg->channels; ch++) {
        i64 e = 0;
        for (; e < n; e++) {
            int first = lowest(res->members[e]);
            if (modes[first] == modes[ch]
                && !memcmp(out + first * w, out + ch * w, (size_t)w * sizeof(i64))
                && !memcmp(rows + first * cfg->banks, rows + ch * cfg->banks,
                           (size_t)cfg->banks * sizeof(i64)))
                break;
        }
        if (e == n) res->members[n++] = 0;
        res->members[e] |= (u64)1 << ch;
        entry[ch] = (int)e;
    }
    for (i64 ch = cfg->channels - 1; ch >= 0; ch--) { /* each entry from its lowest channel */
        i64 e = entry[ch];
        memcpy(res->counts + e * cfg->commands, out + ch * w,
               (size_t)cfg->commands * sizeof(i64));
        memcpy(res->stats + 3 * e, out + ch * w + cfg->commands, 3 * sizeof(i64));
        memcpy(res->open_row + e * cfg->banks, rows + ch * cfg->banks,
               (size_t)cfg->banks * sizeof(i64));
        res->reg_mode[e] = modes[ch];
    }
    res->controllers = n;
}

/* Take checkpoint ``j`` at the start of cycle ``k``; return 1 if a match stops the run. */
static int checkpoint(run_t *run, trace_t *t, i64 j, i64 k, buf_t *scratch) {
    const config_t *cfg = run->cfg;
    i64 per = cfg->channels * cfg->commands, per_stats = cfg->channels * 3;
    if (t->mode == 1) {
        if (t->n == t->cap) return 0;
        buf_t b = {t->state, t->offset[t->n], t->state_cap, 0};
        state_of(run, k, &b);
        t->state = b.v;
        t->state_cap = b.cap;
        if (b.failed) { run->failed = ERR_MEMORY; return 0; }
        outputs_of(run, k, t->counts + t->n * per, t->stats + t->n * per_stats);
        t->cycle[t->n] = k;
        t->index[t->n] = j;
        t->offset[t->n + 1] = b.n;
        t->n += 1;
        return 0;
    }
    i64 e = 0;
    while (e < t->n && t->index[e] < j) e++;
    if (e == t->n || t->index[e] != j) return 0;
    scratch->n = 0;
    state_of(run, k, scratch);
    if (scratch->failed) { run->failed = ERR_MEMORY; return 0; }
    i64 len = t->offset[e + 1] - t->offset[e];
    if (scratch->n != len
        || memcmp(scratch->v, t->state + t->offset[e], (size_t)len * sizeof(i64)))
        return 0;
    outputs_of(run, k, t->now_counts, t->now_stats);
    t->matched = e;
    t->at = k;
    return 1;
}

#include "cycle_decode.c"
#include "cycle_memo.c"

/* -- the run -------------------------------------------------------------------------------- */

/* The result from the live controllers (counts and statistics on top of the accumulators). */
static int emit_live(run_t *run, result_t *res) {
    const config_t *cfg = run->cfg;
    i64 w = out_width(cfg), nch = cfg->channels;
    i64 *out = malloc((size_t)(nch * w) * sizeof(i64));
    i64 *rows = malloc((size_t)(nch * cfg->banks) * sizeof(i64));
    i64 *modes = malloc((size_t)nch * sizeof(i64));
    if (!out || !rows || !modes) { free(out); free(rows); free(modes); return 0; }
    for (i64 i = 0; i < run->nctl; i++) {
        const ctl_t *c = &run->ctls[i];
        for (u64 m = c->members; m; m &= m - 1) {
            int ch = lowest(m);
            i64 *o = out + ch * w;
            for (i64 j = 0; j < cfg->commands; j++) o[j] = c->counts[j];
            o[cfg->commands] = c->active_cycles;
            o[cfg->commands + 1] = c->precharged_cycles;
            o[cfg->commands + 2] = c->idle_cycles;
            if (run->acc)
                for (i64 j = 0; j < w; j++) o[j] += run->acc[ch * w + j];
            memcpy(rows + ch * cfg->banks, c->open_row, (size_t)cfg->banks * sizeof(i64));
            modes[ch] = c->reg_mode;
        }
    }
    emit(cfg, res, out, rows, modes);
    free(out); free(rows); free(modes);
    return 1;
}

i64 aim_run(const config_t *cfg, const program_t *prog, const start_t *start, result_t *res,
            progress_fn progress, trace_t *trace, memo_t *memo) {
    run_t run;
    memset(&run, 0, sizeof run);
    run.cfg = cfg;
    run.prog = prog;
    run.due = -1;
    run.ctls = calloc((size_t)cfg->channels, sizeof *run.ctls);
    if (!run.ctls || cfg->commands > 64) { free(run.ctls); return ERR_MEMORY; }
    for (i64 c = 0; c < cfg->commands; c++) /* the longest gap of a rule each command starts */
        for (int l = 0; l < 3; l++) {
            const i64 *at = cfg->after_start + l * (cfg->commands + 1);
            for (i64 i = at[c]; i < at[c + 1]; i++)
                if (cfg->after_gap[i] > run.reach[c]) run.reach[c] = cfg->after_gap[i];
        }
    i64 status = OK, k = 0, clk = 0;
    buf_t scratch = {NULL, 0, 0, 0}; /* a matching run's state at its checkpoints */
    memo_run_t mr;
    int memoised = memo && !trace && !cfg->record; /* a memo records no schedule */
    int ended = 0; /* the run ended in a segment taken from the memo */
    i64 *end_rows = NULL, *end_modes = NULL;
    if (memoised) {
        run.acc = calloc((size_t)(cfg->channels * out_width(cfg)), sizeof(i64));
        end_rows = malloc((size_t)(cfg->channels * cfg->banks) * sizeof(i64));
        end_modes = malloc((size_t)cfg->channels * sizeof(i64));
        if (!memo_run_init(&mr, memo, cfg) || !run.acc || !end_rows || !end_modes) {
            status = ERR_MEMORY;
            goto done;
        }
    }
    for (i64 g = 0; g < start->groups; g++) {
        ctl_t *c = &run.ctls[run.nctl++];
        if (!ctl_init(c, cfg, start->members[g])) { status = ERR_MEMORY; goto done; }
        int first = lowest(start->members[g]);
        for (i64 b = 0; b < cfg->banks; b++) {
            i64 row = start->open_row[first * cfg->banks + b];
            c->open_row[b] = row;
            if (row >= 0) {
                c->open_mask |= (u64)1 << b;
                c->reported_open |= (u64)1 << (b % cfg->banks_per_group);
            }
        }
        same_row_of(c, cfg);
        c->reg_mode = (int)start->reg_mode[first];
    }
    own(&run);
    i64 next_progress = (i64)1 << 20;
    i64 passed = 0; /* the last checkpoint index taken */
    i64 last_point = -1; /* the last memo point looked at */
    if (trace) trace->matched = -1;
    for (;;) {
        if (progress && k >= next_progress) {
            progress(run.head, k);
            next_progress = k + ((i64)1 << 20);
        }
        if (memoised) {
            i64 h = memo_head(&run);
            if (mr.pending && h > mr.pnext) { mr.pending = 0; memo->stat[MEMO_DROPPED] += 1; }
            if (h != last_point && h < prog->n && is_point(cfg, prog, h)) {
                last_point = h;
                if (clean(&run, h)) {
                    int got = memo_point(&run, &mr, &k, h, end_rows, end_modes);
                    if (got < 0) { status = ERR_MEMORY; goto done; }
                    if (got) { ended = 1; clk = k; break; }
                    last_point = memo_head(&run);
                } else if (mr.pending && h == mr.pnext) {
                    mr.pending = 0;
                    memo->stat[MEMO_DROPPED] += 1;
                }
            }
        }
        if (trace && passed < trace->cap && run.head >= trace->at_head[passed]) {
            while (passed < trace->cap && run.head >= trace->at_head[passed]) passed++;
            if (checkpoint(&run, trace, passed, k, &scratch)) { status = CONVERGED; break; }
            if (run.failed) { status = run.failed; goto done; }
        }
        int changed = cfg->frontend ? dma_each(&run, k) : dma(&run, k);
        if (changed) run.last_change = k;
        clk = k + 1;
        /* Only busy controllers are ticked (an idle one's tick would only count an idle cycle
         * and set the write mode, both done when a send wakes it), and a busy one only from
         * the clock its last tick planned (plan) or the cycle after a send. */
        int holding = 0;
        i64 wake = NEVER;
        for (u64 m = run.busy; m; m &= m - 1) {
            int i = lowest(m);
            ctl_t *c = &run.ctls[i];
            if (c->wake > clk) {  /* busy means holding: refused sends need full buffers */
                holding = 1;
                if (c->wake < wake) wake = c->wake;
                continue;
            }
            if (ctl_tick(&run, c, clk)) {
                run.last_change = k;
                changed = 1;
                c->wake = clk + 1;
            } else {
                c->wake = plan(c, cfg, clk);
            }
            if (ctl_holding(c)) {
                holding = 1;
                if (c->wake < wake) wake = c->wake;
            } else if (!list_len(&c->remaining)) {
                run.busy &= ~((u64)1 << i);
                c->idle_since = clk;
            }
        }
        if (run.failed) { status = run.failed; goto done; }
        if (run.finished && !(cfg->drain && holding)) break;
        k += 1;
        /* Nothing changed and the DMA waits for the controllers (a blocking instruction's
         * callbacks, or refused sends that only a controller's change can admit): the cycles
         * until the first controller wakes would repeat this one. */
        if (!changed && wake > k + 1 && (cfg->frontend ? fronts_wait(&run)
                                         : run.stalled || dma_waits(&run))) {
            if (wake >= NEVER) { status = ERR_STALL; goto done; }
            k = wake - 1;
        }
        if (k - run.last_change > cfg->stall_limit) { status = ERR_STALL; goto done; }
    }
    if (status == CONVERGED) clk = k; /* the run stops at the checkpoint's cycle */
    res->cycles = clk;
    if (ended) {
        emit(cfg, res, mr.out, end_rows, end_modes);
    } else {
        for (i64 i = 0; i < run.nctl; i++) ctl_account(&run.ctls[i], clk);
        if (memoised && mr.pending && mr.pnext == prog->n) { /* the last segment: to the end */
            vstate_t *v = &mr.v[0];
            if (!snapshot(&run, clk, v, &mr.local, &mr.scratch)) { status = ERR_MEMORY; goto done; }
            record(&run, &mr, v, clk, prog->n, 1);
        }
        if (!emit_live(&run, res)) { status = ERR_MEMORY; goto done; }
    }
done:
    free(scratch.v);
    if (memoised) memo_run_release(&mr);
    free(run.acc); free(end_rows); free(end_modes);
    res->retired = ended ? prog->n : run.head;
    res->records = run.records;
    res->n_records = run.n_records;
    if (status != OK && status != CONVERGED) res->cycles = k;
    for (i64 i = 0; i < run.nctl; i++) ctl_release(&run.ctls[i]);
    free(run.ctls);
    return status;
}

void aim_free(void *p) { free(p); }
