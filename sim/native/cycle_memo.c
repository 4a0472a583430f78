/* Exact reuse of segments of runs: the memo. Included by cycle_kernel.c (one translation unit:
 * it uses the kernel's types and functions); sim/native.py's Memo owns one.
 *
 * Points. A memo point is the start of a memory-system cycle in which the front end is about
 * to take instruction ``h`` with nothing of the program outstanding: under the shared DMA no
 * blocking instruction waited on and no refused send; under the per-channel front end every
 * decoder at ``h``, none at a barrier or retrying a send. The points of a program are h = 0,
 * h right after a blocking instruction (per channel: after a barrier) and, under the shared
 * DMA, every ``memo_stride``-th instruction (``is_point``). A segment runs from a point to the
 * next point of the program (``next_point``), or to the end. A run that finds the front end
 * clean at that next point records the segment there; one that does not (a send refused just
 * then) records nothing.
 *
 * State. What a run does from a point depends only on the state there and on the segment's
 * instructions. ``words_of`` writes a controller's state: register and write modes, the bank
 * groups it reports open (the statistics follow them), whether an idle controller's next send
 * sets the write mode, the open row of every bank, every timing window still closed (as
 * cycles after the next tick: a window that opens by then is open for every later tick), and
 * every request it holds, in order, with its fields but the column and the instruction it
 * came from (only records read them) and its arrival as a rank (arrivals are only compared).
 * Counts and statistics are outputs; the scan caches, the wake-up plan and the request pool
 * are caches.
 *
 * Rows. The controllers use rows only through equality with the rows requests ask for. So a
 * key names rows in order of first appearance, the segment's first, then those of the
 * requests held (channel order), and writes OTHER for an open row that is none of them: any
 * such row behaves alike, and stays open on its bank through the segment (a bank opens only on
 * a row some request asks for). The stored end state uses the same names, so it maps back
 * onto the rows of whichever run meets the key.
 *
 * Key. 128 bits: for the segment, each instruction's decoded fields with its row named; then,
 * channel by channel, a hash of its controller's words with their rows named (so how channels
 * are grouped into controllers does not enter), and the setting. Two different states or
 * segments share a key with a probability of about 2^-128 per pair: the one way a reused
 * segment could be wrong, as for patton.sim.cost_cache's SHA-256 keys.
 *
 * Taking a segment adds its cycles, instructions and per-channel counts and statistics, and
 * moves to its stored end state without building controllers, from which the next point is
 * looked up at once: a chain of stored segments costs no simulation. At the first miss the
 * controllers are built from the state (``materialize``: channels whose state is the same
 * become one controller) and the run goes on simulating. tests/test_cycle_model_memo.py
 * requires the same cycles, counts, statistics and end states with and without a memo.
 */

enum { OTHER = -2 }; /* an open row no request of the segment asks for */
enum { G_REG, G_WMODE, G_REPORTED, G_IDLE, G_ROWS };                /* a state's header */
enum { R_KIND, R_FINAL, R_BANK, R_ROW, R_REGMODE, R_CALLBACK, R_READER, R_SYNC, R_RANK,
       R_WORDS };                                                   /* a request held */
enum { MEMO_HITS, MEMO_MISSES, MEMO_STORED, MEMO_CLEARS, MEMO_DROPPED, MEMO_UNSTORABLE,
       MEMO_TAKEN_INSTRUCTIONS, MEMO_ENTRIES, MEMO_BYTES, MEMO_STATS };
#define ARRIVED_BEFORE ((i64)1 << 40) /* a rebuilt request's arrival: before any new one */

/* -- hashing --------------------------------------------------------------------------------- */

typedef struct { u64 a, b; } hkey_t;
typedef struct { u64 a, b, n; } hasher_t;

static inline u64 mum(u64 x, u64 y) {
    __uint128_t r = (__uint128_t)x * y;
    return (u64)r ^ (u64)(r >> 64);
}

static inline u64 rotl(u64 x, int r) { return x << r | x >> (64 - r); }

/* Two independent lanes of 64 bits, each a keyed multiply-fold of every word and its
 * position. */
static inline void hput(hasher_t *h, u64 w) {
    h->n += 1;
    h->a = rotl(h->a, 23) ^ mum(w ^ 0xa0761d6478bd642fULL ^ h->n, 0xe7037ed1a0b428dbULL);
    h->b = (h->b + mum(w + 0x8ebc6af09c88c6e3ULL + (h->n << 32), 0x589965cc75374cc3ULL))
        * 0x9e3779b97f4a7c15ULL;
}

/* Two words at a time (one product per lane). */
static inline void hpair(hasher_t *h, u64 x, u64 y) {
    h->n += 1;
    h->a = rotl(h->a, 23) ^ mum(x ^ 0xa0761d6478bd642fULL ^ h->n, y ^ 0xe7037ed1a0b428dbULL);
    h->b = (h->b + mum(x + 0x8ebc6af09c88c6e3ULL, y ^ 0x589965cc75374cc3ULL ^ (h->n << 32)))
        * 0x9e3779b97f4a7c15ULL;
}

/* Pack small signed values into one word: each ``x + 2`` in ``bits`` bits; 0 if one does not
 * fit (the caller then hashes them one by one). */
static inline int pack(u64 *word, int *shift, i64 x, int bits) {
    u64 v = (u64)(x + 2);
    if (x < -2 || *shift + bits > 64 || (bits < 64 && v >> bits)) return 0;
    *word |= v << *shift;
    *shift += bits;
    return 1;
}

static inline hkey_t hdone(const hasher_t *h) {
    hkey_t k = {mum(h->a ^ 0x1d8e4e27c47d124fULL, h->b ^ h->n ^ 0xa0761d6478bd642fULL),
                mum(h->b ^ 0xe7037ed1a0b428dbULL, h->a + h->n + 0x8ebc6af09c88c6e3ULL)};
    return k;
}

static inline void hkey_put(hasher_t *h, hkey_t k) { hput(h, k.a); hput(h, k.b); }

/* -- rows to names ------------------------------------------------------------------------- */

/* An open-addressing map from rows (>= 0) to names, emptied in O(1) (``gen``). */
typedef struct {
    i64 *row;
    int32_t *name;
    uint32_t *gen;
    i64 cap, n;
    uint32_t now;
} rowmap_t;

static int rowmap_grow(rowmap_t *m, i64 cap);

static inline i64 rowmap_at(const rowmap_t *m, i64 row) {
    u64 i = (u64)row * 0x9e3779b97f4a7c15ULL >> 20;
    for (;; i++) {
        i64 s = (i64)(i & (u64)(m->cap - 1));
        if (m->gen[s] != m->now || m->row[s] == row) return s;
    }
}

static inline int32_t rowmap_get(const rowmap_t *m, i64 row) {
    i64 s = rowmap_at(m, row);
    return m->gen[s] == m->now ? m->name[s] : -1;
}

/* The name of ``row`` (< 0: itself), giving it the next one (``names`` grows) if it has none;
 * -3 if out of memory. */
static int32_t rowmap_name(rowmap_t *m, buf_t *names, i64 row) {
    if (row < 0) return (int32_t)row;
    i64 s = rowmap_at(m, row);
    if (m->gen[s] == m->now) return m->name[s];
    if (2 * (m->n + 1) > m->cap) {
        if (!rowmap_grow(m, 2 * m->cap)) return -3;
        s = rowmap_at(m, row);
    }
    m->gen[s] = m->now;
    m->row[s] = row;
    m->name[s] = (int32_t)names->n;
    m->n += 1;
    put(names, row);
    return names->failed ? -3 : m->name[s];
}

static void rowmap_clear(rowmap_t *m) {
    m->n = 0;
    if (++m->now == 0) { memset(m->gen, 0, (size_t)m->cap * sizeof *m->gen); m->now = 1; }
}

static int rowmap_grow(rowmap_t *m, i64 cap) {
    rowmap_t g = {malloc((size_t)cap * sizeof(i64)), malloc((size_t)cap * sizeof(int32_t)),
                  calloc((size_t)cap, sizeof(uint32_t)), cap, 0, 1};
    if (!g.row || !g.name || !g.gen) { free(g.row); free(g.name); free(g.gen); return 0; }
    for (i64 s = 0; s < m->cap; s++) {
        if (m->gen[s] != m->now) continue;
        i64 t = rowmap_at(&g, m->row[s]);
        g.gen[t] = 1; g.row[t] = m->row[s]; g.name[t] = m->name[s]; g.n++;
    }
    free(m->row); free(m->name); free(m->gen);
    *m = g;
    return 1;
}

static void rowmap_release(rowmap_t *m) { free(m->row); free(m->name); free(m->gen); }

/* -- states ---------------------------------------------------------------------------------- */

/* A device state at a point, as the distinct states of its controllers and each channel's. The
 * rows in the words are names: ``names.v[name]`` is the row. ``slot[g]`` lists where group
 * ``g``'s words hold a row (its open rows first, bank by bank, then its requests'); ``nonrow[g]``
 * hashes the rest; ``quiet[g]``: the group holds no request. A group's words are in ``own`` or
 * in a stored entry. */
typedef struct {
    i64 ngroups;
    const i64 *w[64], *slot[64];
    i64 nw[64], nslot[64];
    hkey_t nonrow[64];
    int8_t quiet[64];
    int group_of[64];
    buf_t names, own, own_slots;
    i64 woff[64], soff[64]; /* of groups in ``own`` (-1: elsewhere) */
} vstate_t;

static void vstate_begin(vstate_t *v) {
    v->ngroups = 0;
    v->names.n = v->own.n = v->own_slots.n = 0;
    v->names.failed = v->own.failed = v->own_slots.failed = 0;
}

/* Point the groups kept in ``own`` at their words (once ``own`` no longer grows). */
static void vstate_end(vstate_t *v) {
    for (i64 g = 0; g < v->ngroups; g++) {
        if (v->woff[g] < 0) continue;
        v->w[g] = v->own.v + v->woff[g];
        v->slot[g] = v->own_slots.v + v->soff[g];
    }
}

static hkey_t nonrow_hash(const i64 *w, i64 nw, const i64 *slot, i64 nslot) {
    hasher_t h = {0x243f6a8885a308d3ULL, 0x13198a2e03707344ULL, 0};
    i64 s = 0;
    for (i64 i = 0; i < nw; i++) {
        if (s < nslot && slot[s] == i) { s++; continue; }
        hput(&h, (u64)w[i]);
    }
    hput(&h, (u64)nw);
    return hdone(&h);
}

/* True if the words hold no request (the counts after the windows are all 0). */
static int quiet_words(const config_t *cfg, const i64 *w) {
    i64 i = G_ROWS + cfg->banks;
    i += 1 + 2 * w[i];
    for (int l = 0; l < 6; l++) if (w[i++]) return 0; /* 4 queues, pending reads and writes */
    return 1;
}

static void sort_i64(i64 *a, i64 n) { /* insertion sort: short lists */
    for (i64 i = 1; i < n; i++) {
        i64 x = a[i], j = i - 1;
        while (j >= 0 && a[j] > x) { a[j + 1] = a[j]; j--; }
        a[j + 1] = x;
    }
}

/* Append controller ``c``'s state at the start of cycle ``k`` as group words of ``v``. */
static void words_of(const run_t *run, ctl_t *c, i64 k, int busy, vstate_t *v, rowmap_t *local,
                     buf_t *scratch) {
    const config_t *cfg = run->cfg;
    buf_t *b = &v->own, *sl = &v->own_slots;
    i64 base = b->n;
    put(b, c->reg_mode); put(b, c->write_mode); put(b, (i64)c->reported_open);
    put(b, busy ? 0 : k > c->idle_since);
    for (i64 j = 0; j < cfg->banks; j++) {
        put(sl, b->n - base);
        put(b, rowmap_name(local, &v->names, c->open_row[j]));
    }
    i64 at = b->n; /* the count of closed windows, filled in below */
    put(b, 0);
    const i64 *ready[3] = {c->ch_ready, c->bg_ready, c->bank_ready};
    i64 len[3] = {cfg->commands, cfg->bankgroups * cfg->commands, cfg->banks * cfg->commands};
    i64 index = 0, closed = 0;
    if (c->horizon > k + 1) /* else every window is open */
        for (int l = 0; l < 3; l++)
            for (i64 j = 0; j < len[l]; j++, index++)
                if (ready[l][j] > k + 1) { put(b, index); put(b, ready[l][j] - k - 1); closed++; }
    if (!b->failed) b->v[at] = closed;
    /* arrival ranks over the requests whose arrivals are compared (conventional ones) */
    scratch->n = 0;
    const list_t *ranked[3] = {&c->reads, &c->writes, &c->active};
    for (int l = 0; l < 3; l++)
        for (i64 i = 0; i < list_len(ranked[l]); i++)
            put(scratch, c->pool[list_at(ranked[l], i)].arrive);
    if (scratch->failed) { b->failed = 1; return; }
    sort_i64(scratch->v, scratch->n);
    i64 distinct = 0;
    for (i64 i = 0; i < scratch->n; i++)
        if (!distinct || scratch->v[distinct - 1] != scratch->v[i])
            scratch->v[distinct++] = scratch->v[i];
    const list_t *held[4] = {&c->aim, &c->reads, &c->writes, &c->active};
    for (int l = 0; l < 4; l++) {
        put(b, list_len(held[l]));
        for (i64 i = 0; i < list_len(held[l]); i++) {
            const req_t *r = &c->pool[list_at(held[l], i)];
            i64 rank = 0;
            if (l > 0) { /* binary search of its arrival among the distinct ones */
                i64 lo = 0, hi = distinct - 1;
                while (lo < hi) {
                    i64 mid = (lo + hi) / 2;
                    if (scratch->v[mid] < r->arrive) lo = mid + 1; else hi = mid;
                }
                rank = lo;
            }
            put(b, r->kind); put(b, r->final); put(b, r->bank);
            put(sl, b->n - base);
            put(b, rowmap_name(local, &v->names, r->row));
            put(b, r->reg_mode); put(b, r->callback); put(b, r->reader); put(b, r->sync);
            put(b, rank);
        }
    }
    put(b, list_len(&c->pending_reads));
    for (i64 i = 0; i < list_len(&c->pending_reads); i++) {
        const req_t *r = &c->pool[list_at(&c->pending_reads, i)];
        put(b, ahead(r->depart, k)); put(b, r->callback); put(b, r->sync);
    }
    i64 n = list_len(&c->pending_writes), first = b->n;
    put(b, n);
    for (i64 i = 0; i < n; i++)
        put(b, ahead(c->pool[list_at(&c->pending_writes, i)].depart, k));
    if (!b->failed) sort_i64(b->v + first + 1, n); /* released in any order */
}

/* The live state of the run at the start of cycle ``k`` (controllers accounted up to it);
 * controllers in the same state make one group. */
static int snapshot(const run_t *run, i64 k, vstate_t *v, rowmap_t *local, buf_t *scratch) {
    vstate_begin(v);
    rowmap_clear(local);
    for (i64 i = 0; i < run->nctl; i++) {
        ctl_t *c = &run->ctls[i];
        i64 g = v->ngroups, wo = v->own.n, so = v->own_slots.n;
        words_of(run, c, k, (int)(run->busy >> i & 1), v, local, scratch);
        if (v->own.failed || v->own_slots.failed) return 0;
        i64 nw = v->own.n - wo, ns = v->own_slots.n - so;
        hkey_t nonrow = nonrow_hash(v->own.v + wo, nw, v->own_slots.v + so, ns);
        i64 same = 0;
        for (; same < g; same++)
            if (v->nonrow[same].a == nonrow.a && v->nonrow[same].b == nonrow.b
                && v->nw[same] == nw
                && !memcmp(v->own.v + v->woff[same], v->own.v + wo, (size_t)nw * sizeof(i64)))
                break;
        if (same < g) {
            v->own.n = wo;
            v->own_slots.n = so;
        } else {
            v->woff[g] = wo;
            v->soff[g] = so;
            v->nw[g] = nw;
            v->nslot[g] = ns;
            v->nonrow[g] = nonrow;
            v->quiet[g] = (int8_t)quiet_words(run->cfg, v->own.v + wo);
            v->ngroups += 1;
        }
        for (u64 m = c->members; m; m &= m - 1) v->group_of[lowest(m)] = (int)same;
    }
    if (v->names.failed) return 0;
    vstate_end(v);
    return 1;
}

/* -- the table ------------------------------------------------------------------------------- */

/* A stored segment: from a point with ``key``, ``dk`` cycles and ``dh`` instructions to the
 * next point (or, ``terminal``, to the end of the program); for each channel it involves
 * (``group_of[ch] >= 0``), its counts and statistics grow by ``deltas[delta_of[ch]]`` and its
 * state there is group ``group_of[ch]`` (rows named as in the key: names, -1 closed, OTHER).
 * A channel it does not involve held nothing and got nothing: it only waited ``dk`` cycles. */
typedef struct {
    hkey_t key;
    i64 dk, dh, terminal, ngroups, ndeltas, bytes;
    int8_t group_of[64], delta_of[64];
    int8_t other[64], quiet[64]; /* per group: it has an OTHER row; it holds no request */
    hkey_t *nonrow; /* [ngroups] */
    i64 *woff, *soff; /* [ngroups + 1] */
    i64 *words, *slots, *deltas;
} entry_t;

/* Entries live in chunks that are only freed together (when the memo starts over). */
typedef struct chunk { struct chunk *next; i64 size, used; } chunk_t;
enum { CHUNK = 1 << 22 };

typedef struct {
    entry_t **slot;
    i64 cap, n, bytes, budget;
    chunk_t *chunks;
    i64 stat[MEMO_STATS];
} memo_t;

static void *arena_alloc(memo_t *m, i64 bytes) {
    bytes = (bytes + 15) & ~(i64)15;
    chunk_t *c = m->chunks;
    if (!c || c->used + bytes > c->size) {
        i64 size = bytes > CHUNK ? bytes : CHUNK;
        c = malloc(sizeof(chunk_t) + (size_t)size);
        if (!c) return NULL;
        c->size = size;
        c->used = 0;
        c->next = m->chunks;
        m->chunks = c;
    }
    void *p = (char *)(c + 1) + c->used;
    c->used += bytes;
    return p;
}

static void arena_free(memo_t *m) {
    while (m->chunks) { chunk_t *next = m->chunks->next; free(m->chunks); m->chunks = next; }
}

memo_t *aim_memo_new(i64 budget) {
    memo_t *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->cap = 1024;
    m->slot = calloc((size_t)m->cap, sizeof *m->slot);
    if (!m->slot) { free(m); return NULL; }
    m->budget = budget;
    return m;
}

void aim_memo_clear(memo_t *m) {
    memset(m->slot, 0, (size_t)m->cap * sizeof *m->slot);
    arena_free(m);
    m->n = m->bytes = 0;
    m->stat[MEMO_CLEARS] += 1;
}

void aim_memo_free(memo_t *m) {
    if (!m) return;
    arena_free(m);
    free(m->slot);
    free(m);
}

void aim_memo_stats(const memo_t *m, i64 *out) {
    for (int i = 0; i < MEMO_STATS; i++) out[i] = m->stat[i];
    out[MEMO_ENTRIES] = m->n;
    out[MEMO_BYTES] = m->bytes;
}

static entry_t *memo_find(const memo_t *m, hkey_t key) {
    for (u64 i = key.a;; i++) {
        entry_t *e = m->slot[i & (u64)(m->cap - 1)];
        if (!e) return NULL;
        if (e->key.a == key.a && e->key.b == key.b) return e;
    }
}

/* Room for an entry of ``bytes`` (the memo starts over when its budget is reached). */
static entry_t *memo_alloc(memo_t *m, i64 bytes) {
    if (m->bytes + bytes > m->budget) aim_memo_clear(m); /* start over: simple, bounded */
    return arena_alloc(m, bytes);
}

static int memo_insert(memo_t *m, entry_t *e) {
    if (2 * (m->n + 1) > m->cap) {
        i64 cap = 2 * m->cap;
        entry_t **slot = calloc((size_t)cap, sizeof *slot);
        if (!slot) return 0;
        for (i64 i = 0; i < m->cap; i++) {
            entry_t *x = m->slot[i];
            if (!x) continue;
            u64 j = x->key.a;
            while (slot[j & (u64)(cap - 1)]) j++;
            slot[j & (u64)(cap - 1)] = x;
        }
        free(m->slot);
        m->slot = slot;
        m->cap = cap;
    }
    u64 j = e->key.a;
    while (m->slot[j & (u64)(m->cap - 1)]) {
        entry_t *x = m->slot[j & (u64)(m->cap - 1)];
        if (x->key.a == e->key.a && x->key.b == e->key.b) return 1; /* known (its room is
                                                                        lost until a clear) */
        j++;
    }
    m->slot[j & (u64)(m->cap - 1)] = e;
    m->n += 1;
    m->bytes += e->bytes;
    m->stat[MEMO_STORED] += 1;
    return 1;
}

/* -- a run's use of the memo ------------------------------------------------------------- */

/* What a run keeps: the state at the point it is at (``v[cur]``) and the next (``v[!cur]``),
 * the names of the last key looked up, and the segment being simulated since a miss. */
typedef struct {
    memo_t *memo;
    vstate_t v[2];
    int cur;
    rowmap_t local, canon;
    buf_t canon_names; /* the last key's names: name -> row */
    u64 involved;      /* the channels the last key's segment involves */
    buf_t scratch, map; /* map: a state's names -> the key's (or OTHER) */
    hkey_t group_hash[64];
    /* the segment being simulated */
    int pending;
    hkey_t pkey;
    i64 pk, ph, pnext;
    u64 pinvolved;
    i64 *pout;        /* [channels][out_width] outputs at its start */
    i64 *prows;       /* [channels][banks] open rows at its start */
    buf_t pnames;     /* its key's names */
    rowmap_t pmap;    /* row -> name of its key */
    i64 *out;         /* scratch [channels][out_width] */
} memo_run_t;

static int memo_run_init(memo_run_t *mr, memo_t *memo, const config_t *cfg) {
    memset(mr, 0, sizeof *mr);
    mr->memo = memo;
    i64 w = out_width(cfg) * cfg->channels;
    mr->pout = malloc((size_t)w * sizeof(i64));
    mr->out = malloc((size_t)w * sizeof(i64));
    mr->prows = malloc((size_t)(cfg->channels * cfg->banks) * sizeof(i64));
    return mr->pout && mr->out && mr->prows && rowmap_grow(&mr->local, 64)
        && rowmap_grow(&mr->canon, 64) && rowmap_grow(&mr->pmap, 64);
}

static void memo_run_release(memo_run_t *mr) {
    for (int i = 0; i < 2; i++) {
        free(mr->v[i].names.v); free(mr->v[i].own.v); free(mr->v[i].own_slots.v);
    }
    rowmap_release(&mr->local); rowmap_release(&mr->canon); rowmap_release(&mr->pmap);
    free(mr->canon_names.v); free(mr->scratch.v); free(mr->map.v); free(mr->pnames.v);
    free(mr->pout); free(mr->out); free(mr->prows);
}

/* Under the shared DMA: h = 0, after a blocking instruction, or every ``memo_stride``-th;
 * per channel: h = 0 or after a barrier (a SYNC, or a blocking read with targets). */
static inline int is_point(const config_t *cfg, const program_t *p, i64 h) {
    if (h == 0) return 1;
    if (cfg->frontend)
        return ordered(p, h - 1) || p->op_class[h - 1] == OP_SYNC;
    return p->blocking[h - 1] || (cfg->memo_stride && h % cfg->memo_stride == 0);
}

static i64 next_point(const config_t *cfg, const program_t *p, i64 h) {
    i64 i = h + 1;
    while (i < p->n && !is_point(cfg, p, i)) i++;
    return i;
}

/* The instruction the front end is at, and whether it is clean there (the module comment). */
static i64 memo_head(const run_t *run) {
    return run->cfg->frontend && run->nctl ? run->ctls[0].head : run->head;
}

static int clean(const run_t *run, i64 h) {
    if (run->finished) return 0;
    if (!run->cfg->frontend) {
        if (run->stalled) return 0;
        for (u64 m = run->busy; m; m &= m - 1)
            if (list_len(&run->ctls[lowest(m)].remaining)) return 0;
        return 1;
    }
    if (run->arrived || run->callbacks || run->due >= 0) return 0;
    for (i64 i = 0; i < run->nctl; i++) {
        const ctl_t *c = &run->ctls[i];
        if (c->head != h || c->waiting || list_len(&c->remaining)) return 0;
    }
    return 1;
}

/* The key of the segment from ``h`` to ``end`` in state ``v``. It involves the channels the
 * segment sends to (all under the per-channel front end, whose segments end at barriers every
 * channel takes, and for a SYNC or EOC) and those holding requests; a channel it does not
 * involve cannot change what the others do, nor its own state but for waiting. Leaves the
 * key's names in ``canon_names`` (name -> row) and ``canon`` (row -> name), in ``map`` each
 * of ``v``'s names as a key name or OTHER, and the channels in ``involved``. Returns 0 if out
 * of memory. */
static int key_of(const run_t *run, memo_run_t *mr, const vstate_t *v, i64 h, i64 end,
                  hkey_t *key) {
    const config_t *cfg = run->cfg;
    const program_t *p = run->prog;
    u64 all = cfg->channels == 64 ? ~(u64)0 : ((u64)1 << cfg->channels) - 1, involved = 0;
    if (cfg->frontend) involved = all;
    rowmap_clear(&mr->canon);
    mr->canon_names.n = 0;
    mr->canon_names.failed = 0;
    hasher_t seg = {0x452821e638d01377ULL, 0xbe5466cf34e90c6cULL, 0};
    hput(&seg, (u64)cfg->frontend); hput(&seg, (u64)cfg->drain);
    hput(&seg, (u64)cfg->memo_stride); hput(&seg, (u64)(end - h));
    for (i64 i = h; i < end; i++) {
        if (p->op_class[i] == OP_SYNC) involved = all;
        else if (p->op_class[i] == OP_DRAM) involved |= p->targets[i];
        i64 row = p->columns[i] > 0 ? p->row[i] : -1;
        int32_t name = rowmap_name(&mr->canon, &mr->canon_names, row);
        if (name == -3) return 0;
        u64 w = 0;
        int at = 0;
        if (pack(&w, &at, p->op_class[i], 3) && pack(&w, &at, p->final[i], 6)
            && pack(&w, &at, p->kind[i], 3) && pack(&w, &at, p->reg_mode[i], 2)
            && pack(&w, &at, p->blocking[i], 2) && pack(&w, &at, p->reader[i], 2)
            && pack(&w, &at, p->bank[i], 10) && pack(&w, &at, p->columns[i], 16)
            && pack(&w, &at, name, 20)) {
            hpair(&seg, w, p->targets[i]);
            continue;
        }
        hput(&seg, (u64)-1); /* a field too wide to pack: every one in full */
        hput(&seg, (u64)p->op_class[i]); hput(&seg, (u64)p->final[i]);
        hput(&seg, (u64)p->kind[i]); hput(&seg, (u64)p->reg_mode[i]);
        hput(&seg, (u64)p->blocking[i]); hput(&seg, (u64)p->reader[i]);
        hput(&seg, p->targets[i]); hput(&seg, (u64)p->bank[i]);
        hput(&seg, (u64)p->columns[i]); hput(&seg, (u64)(i64)name);
    }
    for (i64 ch = 0; ch < cfg->channels; ch++)
        if (!v->quiet[v->group_of[ch]]) involved |= (u64)1 << ch;
    involved &= all;
    mr->involved = involved;
    hput(&seg, involved);
    /* the requests' rows, channel by channel (a group on its first channel) */
    int seen[64] = {0};
    for (u64 m = involved; m; m &= m - 1) {
        int g = v->group_of[lowest(m)];
        if (seen[g]) continue;
        seen[g] = 1;
        for (i64 s = cfg->banks; s < v->nslot[g]; s++) {
            i64 name = v->w[g][v->slot[g][s]];
            if (name >= 0 && rowmap_name(&mr->canon, &mr->canon_names, v->names.v[name]) == -3)
                return 0;
        }
    }
    mr->map.n = 0;
    for (i64 i = 0; i < v->names.n; i++) {
        int32_t name = rowmap_get(&mr->canon, v->names.v[i]);
        put(&mr->map, name >= 0 ? name : OTHER);
    }
    if (mr->map.failed) return 0;
    for (i64 g = 0; g < v->ngroups; g++) {
        if (!seen[g]) { /* only a quiet channel the segment does not involve */
            int any = 0;
            for (u64 m = involved; m && !any; m &= m - 1) any = v->group_of[lowest(m)] == g;
            if (!any) continue;
        }
        hasher_t h2 = {0x3f84d5b5b5470917ULL, 0x9216d5d98979fb1bULL, 0};
        hpair(&h2, v->nonrow[g].a, v->nonrow[g].b);
        u64 w = 0;
        int at = 0;
        for (i64 s = 0; s < v->nslot[g]; s++) { /* the named rows, four to a word */
            i64 name = v->w[g][v->slot[g][s]];
            if (name >= 0) name = mr->map.v[name];
            if (!pack(&w, &at, name, 16)) { hput(&h2, w); w = 0; at = 0; pack(&w, &at, name, 64); }
        }
        hput(&h2, w);
        hput(&h2, (u64)v->nslot[g]);
        mr->group_hash[g] = hdone(&h2);
    }
    /* channel by channel (those involved) its state, numbered in order of first appearance,
     * and each distinct state's hash once, in that order */
    hkey_t sk = hdone(&seg);
    hasher_t whole = {sk.a, sk.b, 0};
    hkey_t distinct[64];
    int ndistinct = 0;
    u64 w = 0;
    int at = 0;
    for (u64 m = involved; m; m &= m - 1) {
        hkey_t gh = mr->group_hash[v->group_of[lowest(m)]];
        int number = 0;
        while (number < ndistinct && !(distinct[number].a == gh.a && distinct[number].b == gh.b))
            number++;
        if (number == ndistinct) {
            distinct[ndistinct++] = gh;
            hpair(&whole, gh.a, gh.b);
        }
        if (at == 64) { hput(&whole, w); w = 0; at = 0; }
        w |= (u64)number << at;
        at += 8;
    }
    hput(&whole, w);
    *key = hdone(&whole);
    return 1;
}

/* Append to ``to`` the state of group ``fg`` of ``from`` after ``dk`` cycles of waiting with
 * nothing held (the windows that open by then open, an idle controller's next send sets the
 * write mode); returns its group, -1 if out of memory. */
static int waited(const config_t *cfg, const vstate_t *from, int fg, i64 dk, vstate_t *to,
                  rowmap_t *canon) {
    const i64 *w = from->w[fg];
    i64 n = to->ngroups++, base = to->own.n;
    to->woff[n] = base;
    to->soff[n] = to->own_slots.n;
    put(&to->own, w[G_REG]); put(&to->own, w[G_WMODE]); put(&to->own, w[G_REPORTED]);
    put(&to->own, 1);
    for (i64 b = 0; b < cfg->banks; b++) {
        i64 name = w[G_ROWS + b];
        put(&to->own_slots, to->own.n - base);
        if (name < 0) { put(&to->own, name); continue; }
        i64 row = from->names.v[name];
        int32_t known = rowmap_get(canon, row);
        if (known >= 0) { put(&to->own, known); continue; }
        put(&to->own, to->names.n);
        put(&to->names, row);
    }
    i64 i = G_ROWS + cfg->banks, closed = w[i++], at = to->own.n, still = 0;
    put(&to->own, 0);
    for (i64 j = 0; j < closed; j++, i += 2)
        if (w[i + 1] > dk) { put(&to->own, w[i]); put(&to->own, w[i + 1] - dk); still++; }
    for (int l = 0; l < 6; l++) put(&to->own, 0);
    if (to->own.failed || to->own_slots.failed || to->names.failed) return -1;
    to->own.v[at] = still;
    to->nw[n] = to->own.n - base;
    to->nslot[n] = cfg->banks;
    to->nonrow[n] = nonrow_hash(to->own.v + base, to->nw[n], to->own_slots.v + to->soff[n],
                                cfg->banks);
    to->quiet[n] = 1;
    return (int)n;
}

/* ``e``'s end state in terms of the run that took it: its names are the key's (``canon_names``
 * of the state ``from`` it was looked up in), each OTHER is the row ``from`` had on that bank
 * of that channel, and the channels it does not involve waited ``e->dk`` cycles. Returns 0 if
 * out of memory. */
static int take(const config_t *cfg, memo_run_t *mr, const entry_t *e, const vstate_t *from,
                vstate_t *to) {
    vstate_begin(to);
    for (i64 i = 0; i < mr->canon_names.n; i++) put(&to->names, mr->canon_names.v[i]);
    /* the group of ``to`` made for an entry group (+ 1), and for the entry groups with an
     * OTHER row, one per group of ``from`` its channels were in; per group of ``from``, the
     * group its channels that waited make (+ 1) */
    int plain[64], waits[64], split_eg[64], split_fg[64], split_to[64], nsplit = 0;
    for (i64 g = 0; g < e->ngroups; g++) plain[g] = 0;
    for (i64 g = 0; g < from->ngroups; g++) waits[g] = 0;
    for (i64 ch = 0; ch < cfg->channels; ch++) {
        int eg = e->group_of[ch];
        if (eg < 0) {
            int fg = from->group_of[ch];
            if (!waits[fg]) {
                int n = waited(cfg, from, fg, e->dk, to, &mr->canon);
                if (n < 0) return 0;
                waits[fg] = n + 1;
            }
            to->group_of[ch] = waits[fg] - 1;
            continue;
        }
        const i64 *w = e->words + e->woff[eg], *sl = e->slots + e->soff[eg];
        i64 nw = e->woff[eg + 1] - e->woff[eg], ns = e->soff[eg + 1] - e->soff[eg];
        int other = e->other[eg], fg = 0, *g = &plain[eg];
        if (other) {
            fg = from->group_of[ch] + 1;
            i64 j = 0;
            while (j < nsplit && !(split_eg[j] == eg && split_fg[j] == fg)) j++;
            if (j == nsplit) { split_eg[j] = eg; split_fg[j] = fg; split_to[j] = 0; nsplit++; }
            g = &split_to[j];
        }
        if (!*g) {
            i64 n = to->ngroups++;
            *g = (int)n + 1;
            to->nonrow[n] = e->nonrow[eg];
            to->quiet[n] = e->quiet[eg];
            to->nw[n] = nw;
            to->nslot[n] = ns;
            if (!other) {
                to->woff[n] = to->soff[n] = -1;
                to->w[n] = w;
                to->slot[n] = sl;
            } else { /* a copy with each OTHER as the row ``from`` had there */
                to->woff[n] = to->own.n;
                to->soff[n] = to->own_slots.n;
                for (i64 i = 0; i < nw; i++) put(&to->own, w[i]);
                for (i64 i = 0; i < ns; i++) put(&to->own_slots, sl[i]);
                if (to->own.failed) return 0;
                const i64 *fw = from->w[fg - 1], *fs = from->slot[fg - 1];
                for (i64 b = 0; b < cfg->banks; b++) {
                    if (w[sl[b]] != OTHER) continue;
                    i64 row = from->names.v[fw[fs[b]]];
                    to->own.v[to->woff[n] + sl[b]] = to->names.n;
                    put(&to->names, row);
                }
            }
        }
        to->group_of[ch] = *g - 1;
    }
    if (to->names.failed || to->own.failed || to->own_slots.failed) return 0;
    vstate_end(to);
    return 1;
}

/* Build the controllers of state ``v`` at the start of cycle ``k``, the front end at ``h``
 * (every channel of one state in one controller). */
static int materialize(run_t *run, const vstate_t *v, i64 k, i64 h) {
    const config_t *cfg = run->cfg;
    i64 ngroups = v->ngroups;
    for (i64 g = run->nctl; g < ngroups; g++)
        if (!ctl_init(&run->ctls[g], cfg, 0)) { run->nctl = g; return 0; }
    for (i64 g = ngroups; g < run->nctl; g++) ctl_release(&run->ctls[g]);
    run->nctl = ngroups;
    u64 members[64] = {0};
    for (i64 ch = 0; ch < cfg->channels; ch++) members[v->group_of[ch]] |= (u64)1 << ch;
    const i64 *names = v->names.v;
    for (i64 g = 0; g < ngroups; g++) {
        ctl_t *c = &run->ctls[g];
        ctl_reset(c, cfg, members[g]);
        const i64 *w = v->w[g];
        c->reg_mode = (int)w[G_REG];
        c->write_mode = (int)w[G_WMODE];
        c->reported_open = (u64)w[G_REPORTED];
        for (i64 b = 0; b < cfg->banks; b++) {
            i64 name = w[G_ROWS + b];
            c->open_row[b] = name >= 0 ? names[name] : name;
            if (c->open_row[b] >= 0) c->open_mask |= (u64)1 << b;
        }
        same_row_of(c, cfg);
        i64 i = G_ROWS + cfg->banks, closed = w[i++];
        i64 nch = cfg->commands, nbg = cfg->bankgroups * cfg->commands;
        for (i64 j = 0; j < closed; j++, i += 2) {
            i64 index = w[i], t = k + 1 + w[i + 1];
            if (t > c->horizon) c->horizon = t;
            if (index < nch) c->ch_ready[index] = t;
            else if (index < nch + nbg) c->bg_ready[index - nch] = t;
            else c->bank_ready[index - nch - nbg] = t;
        }
        list_t *held[4] = {&c->aim, &c->reads, &c->writes, &c->active};
        for (int l = 0; l < 4; l++) {
            i64 n = w[i++];
            for (i64 j = 0; j < n; j++, i += R_WORDS) {
                int32_t slot = ctl_alloc(c);
                if (slot < 0 || !list_push(held[l], slot)) return 0;
                req_t *r = &c->pool[slot];
                memset(r, 0, sizeof *r);
                r->kind = (int)w[i + R_KIND];
                r->final = (int)w[i + R_FINAL];
                r->bank = (int)w[i + R_BANK];
                r->bg = r->bank >= 0 ? (int)(r->bank / cfg->banks_per_group) : -1;
                i64 name = w[i + R_ROW];
                r->row = name >= 0 ? names[name] : name;
                r->col = -1;
                r->command = -1;
                r->reg_mode = (int)w[i + R_REGMODE];
                r->callback = (int)w[i + R_CALLBACK];
                r->reader = (int)w[i + R_READER];
                r->sync = (int)w[i + R_SYNC];
                r->arrive = w[i + R_RANK] - ARRIVED_BEFORE;
                r->depart = -1;
                r->pos = h;
            }
        }
        i64 n = w[i++];
        for (i64 j = 0; j < n; j++, i += 3) {
            int32_t slot = ctl_alloc(c);
            if (slot < 0 || !list_push(&c->pending_reads, slot)) return 0;
            req_t *r = &c->pool[slot];
            memset(r, 0, sizeof *r);
            r->depart = k + 1 + w[i];
            r->callback = (int)w[i + 1];
            r->sync = (int)w[i + 2];
            r->reader = 1;
            r->bank = r->bg = -1;
            r->row = r->col = -1;
            r->pos = h;
        }
        n = w[i++];
        for (i64 j = 0; j < n; j++, i++) {
            int32_t slot = ctl_alloc(c);
            if (slot < 0 || !list_push(&c->pending_writes, slot)) return 0;
            req_t *r = &c->pool[slot];
            memset(r, 0, sizeof *r);
            r->depart = k + 1 + w[i];
            r->bank = r->bg = -1;
            r->row = r->col = -1;
            r->pos = h;
            if (r->depart < c->writes_due) c->writes_due = r->depart;
        }
        c->clk = k;
        c->idle_since = w[G_IDLE] ? -1 : k;
        c->wake = k + 1;
        c->head = h;
    }
    reorder(run); /* order, busy bits, owners */
    run->head = h;
    run->stalled = run->arrived = run->callbacks = 0;
    run->due = -1;
    run->last_change = k;
    return 1;
}

/* Move every controller's counts and statistics, accounted up to the start of cycle ``k``,
 * to its channels' accumulators: from here the accumulators are the run's outputs. */
static void flush(run_t *run, i64 k) {
    const config_t *cfg = run->cfg;
    i64 w = out_width(cfg);
    for (i64 i = 0; i < run->nctl; i++) {
        ctl_t *c = &run->ctls[i];
        ctl_account(c, k);
        for (u64 m = c->members; m; m &= m - 1) {
            i64 *acc = run->acc + lowest(m) * w;
            for (i64 j = 0; j < cfg->commands; j++) acc[j] += c->counts[j];
            acc[cfg->commands] += c->active_cycles;
            acc[cfg->commands + 1] += c->precharged_cycles;
            acc[cfg->commands + 2] += c->idle_cycles;
        }
        memset(c->counts, 0, (size_t)cfg->commands * sizeof(i64));
        c->active_cycles = c->precharged_cycles = c->idle_cycles = 0;
    }
}

/* Record the pending segment, which ends at cycle ``k`` in the live state ``v``: for the
 * channels it involves, their counts and statistics since its start and their states (rows
 * named as in the segment's key, OTHER where a bank kept a row the key did not name). */
static void record(run_t *run, memo_run_t *mr, const vstate_t *v, i64 k, i64 h, int terminal) {
    const config_t *cfg = run->cfg;
    memo_t *memo = mr->memo;
    i64 wd = out_width(cfg);
    u64 involved = mr->pinvolved;
    mr->pending = 0;
    flush(run, k);
    int8_t delta_of[64], group_of[64];
    int egroup[64]; /* group of ``v`` -> entry group (+ 1) */
    i64 ndeltas = 0, ngroups = 0, first[64], vgroup[64];
    for (i64 g = 0; g < v->ngroups; g++) egroup[g] = 0;
    for (i64 ch = 0; ch < cfg->channels; ch++) {
        delta_of[ch] = group_of[ch] = -1;
        if (!(involved >> ch & 1)) continue;
        i64 *d = mr->out + ch * wd;
        for (i64 j = 0; j < wd; j++) d[j] = run->acc[ch * wd + j] - mr->pout[ch * wd + j];
        i64 x = 0;
        for (; x < ndeltas; x++)
            if (!memcmp(mr->out + first[x] * wd, d, (size_t)wd * sizeof(i64))) break;
        if (x == ndeltas) first[ndeltas++] = ch;
        delta_of[ch] = (int8_t)x;
        int g = v->group_of[ch];
        if (!egroup[g]) { vgroup[ngroups] = g; egroup[g] = (int)++ngroups; }
        group_of[ch] = (int8_t)(egroup[g] - 1);
    }
    i64 nw = 0, ns = 0;
    for (i64 x = 0; x < ngroups; x++) { nw += v->nw[vgroup[x]]; ns += v->nslot[vgroup[x]]; }
    i64 bytes = (i64)sizeof(entry_t) + ngroups * (i64)sizeof(hkey_t)
        + (2 * (ngroups + 1) + nw + ns + ndeltas * wd) * (i64)sizeof(i64);
    entry_t *e = memo_alloc(memo, bytes);
    if (!e) { memo->stat[MEMO_UNSTORABLE] += 1; return; }
    e->key = mr->pkey;
    e->dk = k - mr->pk;
    e->dh = h - mr->ph;
    e->terminal = terminal;
    e->ngroups = ngroups;
    e->ndeltas = ndeltas;
    e->bytes = bytes;
    e->nonrow = (hkey_t *)(e + 1);
    e->woff = (i64 *)(e->nonrow + ngroups);
    e->soff = e->woff + ngroups + 1;
    e->words = e->soff + ngroups + 1;
    e->slots = e->words + nw;
    e->deltas = e->slots + ns;
    memcpy(e->group_of, group_of, sizeof group_of);
    memcpy(e->delta_of, delta_of, sizeof delta_of);
    for (i64 x = 0; x < ndeltas; x++)
        memcpy(e->deltas + x * wd, mr->out + first[x] * wd, (size_t)wd * sizeof(i64));
    i64 wo = 0, so = 0;
    for (i64 x = 0; x < ngroups; x++) {
        i64 g = vgroup[x];
        e->nonrow[x] = v->nonrow[g];
        e->quiet[x] = v->quiet[g];
        e->woff[x] = wo;
        e->soff[x] = so;
        memcpy(e->words + wo, v->w[g], (size_t)v->nw[g] * sizeof(i64));
        memcpy(e->slots + so, v->slot[g], (size_t)v->nslot[g] * sizeof(i64));
        int ch = 0; /* an involved channel of the group: its rows at the segment's start */
        while (group_of[ch] != x) ch++;
        e->other[x] = 0;
        for (i64 s = 0; s < v->nslot[g]; s++) {
            i64 *word = &e->words[wo + v->slot[g][s]];
            if (*word < 0) continue;
            i64 row = v->names.v[*word];
            int32_t name = rowmap_get(&mr->pmap, row);
            if (name >= 0) *word = name;
            else if (s < cfg->banks && mr->prows[ch * cfg->banks + s] == row) {
                *word = OTHER;
                e->other[x] = 1;
            } else { /* cannot happen: the entry is left unused in the arena */
                memo->stat[MEMO_UNSTORABLE] += 1;
                return;
            }
        }
        wo += v->nw[g];
        so += v->nslot[g];
    }
    e->woff[ngroups] = wo;
    e->soff[ngroups] = so;
    if (!memo_insert(memo, e)) memo->stat[MEMO_UNSTORABLE] += 1;
}

/* Start simulating the segment from ``h`` at cycle ``k`` (its key just missed; the run's
 * outputs are in the accumulators). */
static int begin(run_t *run, memo_run_t *mr, const vstate_t *v, hkey_t key, i64 k, i64 h) {
    const config_t *cfg = run->cfg;
    mr->pending = 1;
    mr->pkey = key;
    mr->pk = k;
    mr->ph = h;
    mr->pnext = next_point(cfg, run->prog, h);
    mr->pinvolved = mr->involved;
    memcpy(mr->pout, run->acc, (size_t)(cfg->channels * out_width(cfg)) * sizeof(i64));
    for (u64 m = mr->involved; m; m &= m - 1) {
        int ch = lowest(m), g = v->group_of[ch];
        for (i64 b = 0; b < cfg->banks; b++) {
            i64 name = v->w[g][v->slot[g][b]];
            mr->prows[ch * cfg->banks + b] = name >= 0 ? v->names.v[name] : name;
        }
    }
    rowmap_clear(&mr->pmap);
    mr->pnames.n = 0;
    mr->pnames.failed = 0;
    for (i64 i = 0; i < mr->canon_names.n; i++)
        if (rowmap_name(&mr->pmap, &mr->pnames, mr->canon_names.v[i]) == -3) return 0;
    return 1;
}

/* At a point where the front end is clean (cycle ``*k``, instruction ``h``): record the
 * segment simulated since the last miss if it ends here, then take stored segments for as
 * long as there are. Returns 1 if the run ended in a stored segment (its outputs in
 * ``mr->out``, rows and modes in ``rows``/``modes``, cycles in ``*k``), 0 to simulate on from
 * ``*k`` (controllers built), -1 if out of memory. */
static int memo_point(run_t *run, memo_run_t *mr, i64 *k, i64 h, i64 *rows, i64 *modes) {
    const config_t *cfg = run->cfg;
    memo_t *memo = mr->memo;
    i64 wd = out_width(cfg);
    mr->cur = 0;
    vstate_t *v = &mr->v[0];
    flush(run, *k);
    if (!snapshot(run, *k, v, &mr->local, &mr->scratch)) return -1;
    if (mr->pending) {
        if (mr->pnext == h) record(run, mr, v, *k, h, 0);
        else { mr->pending = 0; memo->stat[MEMO_DROPPED] += 1; }
    }
    int live = 1;
    for (;;) {
        i64 end = next_point(cfg, run->prog, h);
        hkey_t key;
        if (!key_of(run, mr, v, h, end, &key)) return -1;
        const entry_t *e = memo_find(memo, key);
        if (!e) {
            memo->stat[MEMO_MISSES] += 1;
            if (!live && !materialize(run, v, *k, h)) return -1;
            return begin(run, mr, v, key, *k, h) ? 0 : -1;
        }
        memo->stat[MEMO_HITS] += 1;
        memo->stat[MEMO_TAKEN_INSTRUCTIONS] += e->dh;
        vstate_t *to = &mr->v[!mr->cur];
        if (!take(cfg, mr, e, v, to)) return -1;
        for (i64 ch = 0; ch < cfg->channels; ch++) {
            i64 *acc = run->acc + ch * wd;
            if (e->delta_of[ch] >= 0) {
                const i64 *d = e->deltas + e->delta_of[ch] * wd;
                for (i64 j = 0; j < wd; j++) acc[j] += d[j];
            } else { /* it waited, holding nothing: quiet cycles (ctl_account) */
                int open = v->w[v->group_of[ch]][G_REPORTED] != 0;
                acc[cfg->commands + (open ? 0 : 1)] += e->dk;
                acc[cfg->commands + 2] += e->dk;
            }
        }
        *k += e->dk;
        h += e->dh;
        mr->cur = !mr->cur;
        v = to;
        live = 0;
        if (e->terminal) { /* the program's end: outputs from the accumulators */
            for (i64 ch = 0; ch < cfg->channels; ch++) {
                memcpy(mr->out + ch * wd, run->acc + ch * wd, (size_t)wd * sizeof(i64));
                int g = v->group_of[ch];
                for (i64 b = 0; b < cfg->banks; b++) {
                    i64 name = v->w[g][v->slot[g][b]];
                    rows[ch * cfg->banks + b] = name >= 0 ? v->names.v[name] : name;
                }
                modes[ch] = v->w[g][G_REG];
            }
            return 1;
        }
    }
}

/* -- the cost cache's key ---------------------------------------------------------------- */

/* The key under which patton.sim.cost_cache keeps a program's cost from a start state, made
 * from the program's columns (decoded on the way, as aim_decode decodes them, so a cost found
 * needs no decoded program): 128 bits over ``salt`` (the setting), every instruction's decoded
 * fields with its row named (rows >= 0 of DRAM instructions, in order of first appearance),
 * the start state's open rows as those names, OTHER for a row the program does not ask for,
 * or -1 closed, and its register modes. Writes the named rows to ``rows`` in order (room for
 * ``raw->n``); returns how many, or -1 (an unknown op id, or out of memory). */
i64 aim_program_key(const raw_t *raw, const optable_t *t, const i64 *start_cfr,
                    i64 channels, i64 banks, const i64 *open_row, const i64 *reg_mode,
                    u64 salt, u64 *key, i64 *rows) {
    i64 cfr[8];
    if (t->cfrs > 8 || cfr_writes(raw, t) < 0) return -1;
    reversal_table();
    for (i64 c = 0; c < t->cfrs; c++) cfr[c] = start_cfr[c];
    u64 reach = reach_of(t, channels);
    rowmap_t m = {0};
    buf_t names = {rows, 0, raw->n > 0 ? raw->n : 1, 0}; /* writes straight into ``rows`` */
    if (!rowmap_grow(&m, 64)) return -1;
    hasher_t h = {0x13198a2e03707344ULL, 0xa4093822299f31d0ULL, 0};
    hput(&h, salt);
    hput(&h, (u64)raw->n);
    for (i64 i = 0; i < raw->n; i++) {
        ins_t o;
        decode_one(raw, t, i, cfr, reach, channels, &o);
        cfr_after(raw, t, i, cfr);
        i64 row = o.columns > 0 && o.row >= 0 ? o.row : -1;
        int32_t name = rowmap_name(&m, &names, row);
        if (name == -3) { rowmap_release(&m); return -1; }
        u64 w = 0;
        int at = 0;
        if (pack(&w, &at, o.behaviour, 8) && pack(&w, &at, o.bank, 10)
            && pack(&w, &at, o.columns, 24) && pack(&w, &at, name, 22)) {
            hpair(&h, w, o.targets);
            continue;
        }
        hput(&h, (u64)-1); /* a field too wide to pack: every one in full */
        hput(&h, (u64)o.behaviour); hput(&h, o.targets); hput(&h, (u64)o.bank);
        hput(&h, (u64)o.columns); hput(&h, (u64)(i64)name);
    }
    u64 w = 0;
    int at = 0;
    for (i64 i = 0; i < channels * banks; i++) {
        i64 r = open_row[i];
        i64 name = r < 0 ? -1 : rowmap_get(&m, r);
        if (r >= 0 && name < 0) name = OTHER;
        if (!pack(&w, &at, name, 16)) { hput(&h, w); w = 0; at = 0; pack(&w, &at, name, 64); }
    }
    hput(&h, w);
    for (i64 c = 0; c < channels; c++) hput(&h, (u64)reg_mode[c]);
    for (i64 c = 0; c < t->cfrs; c++) hput(&h, (u64)start_cfr[c]);
    hkey_t k = hdone(&h);
    key[0] = k.a;
    key[1] = k.b;
    rowmap_release(&m);
    return names.failed ? -1 : names.n;
}
