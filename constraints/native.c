/* Vocabulary walks of a pushdown automaton, in C: the extension module _native, which
 * constraints/native.py builds on first use and imports.
 *
 * pda_walk steps tokens byte by byte through the automaton of pushdown.py: a configuration is
 * (rule position g, stack); a call pushes the return position (and, into a counted leaf, a
 * count frame -(count + 1)) and jumps to the callee's start; an accepting position of a rule
 * pops back. Calls and returns read no byte, so each step is: the closure of the current
 * configurations, then one table lookup per configuration. Stacks are hash-consed nodes
 * (value, parent), so two configurations are equal exactly when their (g, node) are.
 *
 * Two ways to name the tokens:
 *   - trie: every token whose first byte some configuration allows, in lexicographic order;
 *     a token resumes from the configurations its common prefix with the one before reached,
 *     and a prefix found dead skips every token that shares it;
 *   - list: given tokens, each from a given byte on (the rest of a token that left a leaf).
 * Allowed tokens get their bit set in a packed row (bit i % 32 of word i / 32 = token id i).
 *
 * The result is the shallowest stack depth met (frames below it were never read), or -1
 * where the walk would need more configurations than _step keeps (MAX_CONFIGS) or than the
 * buffers hold: the caller then walks in Python, which knows how to prune.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { RETURNS = 1, IN_COUNTED = 2, CLOSES_COUNTED = 4, BOUNDED = 8 };

typedef struct {
    const int32_t *trans;        /* [S * 256] next position or < 0 */
    const int32_t *call_off;     /* [S + 1] calls of g: call_off[g] .. call_off[g + 1] */
    const int32_t *call_start;   /* callee's start position */
    const int32_t *call_ret;     /* position after the call */
    const uint8_t *call_counted; /* the callee is a counted leaf: push a count frame too */
    const uint8_t *flags;        /* [S] RETURNS | IN_COUNTED | CLOSES_COUNTED | BOUNDED */
    const int32_t *count_lo;     /* [S] characters a counted leaf needs before it may close */
    const int32_t *count_cap;    /* [S] hi, or lo where unbounded (counting stops there) */
    const uint8_t *inc;          /* [S * 256] how much the byte raises a counted leaf's count */
    int64_t max_configs;         /* a step past this many configurations: -1 (fallback) */
} Pda;

/* One big subtree (the tokens sharing some token's first d bytes): the bytes its tokens have
 * after those d (bit b of word b / 64 for an ASCII byte b; bit 0 also for any byte of 128 and
 * up, see Runs), the first token after the subtree, and the most bytes a token of it has after
 * d (255: or more). */
struct Whole { uint64_t below[2]; int32_t sub_end; uint8_t height; };

typedef struct {
    const uint8_t *bytes;  /* tokens in lexicographic order, concatenated */
    const int64_t *off;    /* [N + 1] */
    const int32_t *lcp;    /* [N] bytes in common with the token before */
    const int64_t *first;  /* [257] tokens starting with byte b: first[b] .. first[b + 1] */
    const int64_t *ids;    /* [N] token id */
    int64_t id_end;        /* 1 + the largest id: a packed row holds at least this many bits */
    int32_t *sub_end;      /* [off[N]] sub_end[off[i] + d - 1]: the first token after i that does
                              not start with token i's first d bytes (a dead prefix's subtree end) */
    /* The subtrees a walk may take whole (WHOLE_FROM tokens or more), one record each, found
     * from the token that opens them: token i opens the subtrees of its prefixes longer than
     * lcp[i], and those big enough are its first big_count[i] such prefixes (a deeper prefix
     * has no more tokens), records big_first[i] .. in order of depth. Read beside the token's
     * own arrays, a walk's reads stay few cache lines: a state's first walk reads the
     * vocabulary's tables from memory, not cache. */
    int32_t *big_first;    /* [N] */
    uint8_t *big_count;    /* [N] */
    struct Whole *whole;   /* [big subtrees] */
    int32_t max_len;       /* the longest token's bytes */
    uint32_t *all_row;     /* [ceil(id_end / 32)] the packed row of every token (NULL: none) */
    int32_t *first2;       /* [65537] first2[256 b + c]: the first token of two bytes or more
                              whose first two are (b, c) or sort after (NULL: none) */
} Vocab;

typedef struct { int32_t g, node; } Config;
typedef struct { int64_t value; int32_t parent, depth; } Node;

#define POOL_BITS 16
#define POOL_CAP (1 << POOL_BITS)
#define HASH_CAP (1 << (POOL_BITS + 1))
#define SET_CAP 1024
#define ARENA_CAP (1 << 16)

/* One workspace per thread (the walks run without the GIL). */
typedef struct {
    Node pool[POOL_CAP];
    int32_t hash_node[HASH_CAP];
    uint32_t hash_gen[HASH_CAP];
    uint32_t gen;
    int32_t n_nodes;
    Config arena[ARENA_CAP];
    Config scratch[SET_CAP];
    int overflow;
    int32_t lowest;
} Work;

static __thread Work *work_of_thread;

static Work *workspace(void) {
    if (!work_of_thread) {
        work_of_thread = calloc(1, sizeof(Work));
        if (!work_of_thread) return NULL;
    }
    Work *w = work_of_thread;
    if (++w->gen == 0) { /* stamps wrapped: clear them once */
        memset(w->hash_gen, 0, sizeof w->hash_gen);
        w->gen = 1;
    }
    w->n_nodes = 0;
    w->overflow = 0;
    return w;
}

static int32_t intern(Work *w, int64_t value, int32_t parent) {
    uint64_t h = (uint64_t)value * 0x9E3779B97F4A7C15ull ^ (uint64_t)(parent + 1) * 0xC2B2AE3D27D4EB4Full;
    uint32_t i = (uint32_t)(h >> (64 - POOL_BITS - 1));
    for (;;) {
        if (w->hash_gen[i] != w->gen) {
            if (w->n_nodes >= POOL_CAP) { w->overflow = 1; return -1; }
            int32_t n = w->n_nodes++;
            w->pool[n].value = value;
            w->pool[n].parent = parent;
            w->pool[n].depth = parent < 0 ? 1 : w->pool[parent].depth + 1;
            w->hash_gen[i] = w->gen;
            w->hash_node[i] = n;
            return n;
        }
        int32_t n = w->hash_node[i];
        if (w->pool[n].value == value && w->pool[n].parent == parent) return n;
        i = (i + 1) & (HASH_CAP - 1);
    }
}

static inline int32_t depth(const Work *w, int32_t node) { return node < 0 ? 0 : w->pool[node].depth; }
static inline int64_t count_of(const Work *w, int32_t node) { return -w->pool[node].value - 1; }

/* Append (g, node) to set[0..*n) unless present; note its depth. */
static void add(Work *w, Config *set, int64_t *n, int64_t cap, int32_t g, int32_t node) {
    for (int64_t i = 0; i < *n; i++)
        if (set[i].g == g && set[i].node == node) return;
    if (*n >= cap) { w->overflow = 1; return; }
    set[*n].g = g;
    set[*n].node = node;
    (*n)++;
    int32_t d = depth(w, node);
    if (d < w->lowest) w->lowest = d;
}

/* set[0..n) closed under calls and returns, in place; the new size. */
static int64_t closure(Work *w, const Pda *p, Config *set, int64_t n, int64_t cap) {
    for (int64_t i = 0; i < n && !w->overflow; i++) {
        int32_t g = set[i].g, node = set[i].node;
        for (int32_t c = p->call_off[g]; c < p->call_off[g + 1]; c++) {
            int32_t pushed = intern(w, p->call_ret[c], node);
            if (pushed >= 0 && p->call_counted[c]) pushed = intern(w, -1, pushed);
            if (pushed < 0) return n;
            add(w, set, &n, cap, p->call_start[c], pushed);
        }
        uint8_t f = p->flags[g];
        if ((f & RETURNS) && node >= 0) {
            if (f & IN_COUNTED) {
                if (count_of(w, node) >= p->count_lo[g]) {
                    int32_t below = w->pool[node].parent;
                    add(w, set, &n, cap, (int32_t)w->pool[below].value, w->pool[below].parent);
                }
            } else {
                add(w, set, &n, cap, (int32_t)w->pool[node].value, w->pool[node].parent);
            }
        }
    }
    return n;
}

/* The configurations after byte b from the closed set in[0..n), into out; their number. */
static int64_t step(Work *w, const Pda *p, const Config *in, int64_t n, int b, Config *out) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t g = in[i].g, node = in[i].node;
        int32_t t = p->trans[(int64_t)g * 256 + b];
        if (t < 0) continue;
        if (p->inc[(int64_t)g * 256 + b]) {
            int64_t count = count_of(w, node) + p->inc[(int64_t)g * 256 + b];
            if (count > p->count_cap[g]) {
                if (p->flags[g] & BOUNDED) continue;
                count = p->count_cap[g];
            }
            node = intern(w, -(count + 1), w->pool[node].parent);
            if (node < 0) return 0;
        }
        if ((p->flags[t] & CLOSES_COUNTED) && count_of(w, node) < p->count_lo[t]) continue;
        int64_t before = m;
        add(w, out, &m, SET_CAP, t, node);
        if (m > before && m > p->max_configs) { w->overflow = 1; return 0; }
    }
    return m;
}

/* Step and close: the closed set after byte b, at out; its size (0: dead). */
static int64_t advance(Work *w, const Pda *p, const Config *in, int64_t n, int b, Config *out, int64_t cap) {
    int64_t m = step(w, p, in, n, b, out);
    return m ? closure(w, p, out, m, cap) : 0;
}

static inline void set_bit(uint32_t *row, int64_t id) { row[id >> 5] |= 1u << (id & 31); }
static inline void clear_bit(uint32_t *row, int64_t id) { row[id >> 5] &= ~(1u << (id & 31)); }

/* The big subtree of token i's first k bytes where token i opens it (Vocab.whole), else NULL. */
static inline const struct Whole *whole_at(const Vocab *v, int64_t i, int64_t k) {
    int64_t j = k - 1 - v->lcp[i];
    return v->whole && j >= 0 && j < v->big_count[i] ? v->whole + v->big_first[i] + j : NULL;
}

/* Trie mode, from arena[0..n0). close_first = 0: the configurations read their first byte
 * as they are (rule positions whose calls the caller walks itself). */
/* The distinct configuration sets tokens end in (walk_trie with ends): sets[off[j]..off[j+1])
 * is set j, its configurations sorted; token i ends in set id[i] (-1: dead or not walked). */
typedef struct {
    Config *sets; int64_t n_conf, cap_conf;
    int64_t *off; int64_t n_sets, cap_sets;
    int64_t *slot; int64_t hash_cap;
    int32_t *id;
    int64_t last; /* the set end_set gave last (-1: none yet) */
} EndSets;

static int cmp_config(const void *a, const void *b) {
    const Config *x = a, *y = b;
    if (x->g != y->g) return (x->g > y->g) - (x->g < y->g);
    return (x->node > y->node) - (x->node < y->node);
}

static inline int config_less(Config x, Config y) { return x.g < y.g || (x.g == y.g && x.node < y.node); }

static inline int same_configs(const Config *a, const Config *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (a[i].g != b[i].g || a[i].node != b[i].node) return 0;
    return 1;
}

/* The id of the set cfg[0..n) (sorted in place), added if new; -1 out of memory. */
static int64_t end_set(EndSets *e, Config *cfg, int64_t n) {
    /* Sorted: a few configurations by insertion (most sets hold one or two), more by qsort.
     * Consecutive tokens mostly end alike: the last set found is tried first. */
    if (n > 8) {
        qsort(cfg, n, sizeof(Config), cmp_config);
    } else {
        for (int64_t i = 1; i < n; i++)
            for (int64_t j = i; j > 0 && config_less(cfg[j], cfg[j - 1]); j--) {
                Config t = cfg[j]; cfg[j] = cfg[j - 1]; cfg[j - 1] = t;
            }
    }
    if (e->last >= 0 && e->off[e->last + 1] - e->off[e->last] == n && same_configs(e->sets + e->off[e->last], cfg, n))
        return e->last;
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++) h = (h ^ ((uint64_t)(uint32_t)cfg[i].g << 32 | (uint32_t)cfg[i].node)) * 1099511628211ull;
    if (2 * (e->n_sets + 1) > e->hash_cap) { /* grow and rehash */
        int64_t cap = e->hash_cap ? 2 * e->hash_cap : 256;
        int64_t *slot = malloc(sizeof(int64_t) * cap);
        if (!slot) return -1;
        for (int64_t j = 0; j < cap; j++) slot[j] = -1;
        for (int64_t s = 0; s < e->n_sets; s++) {
            uint64_t g = 1469598103934665603ull;
            for (int64_t i = e->off[s]; i < e->off[s + 1]; i++)
                g = (g ^ ((uint64_t)(uint32_t)e->sets[i].g << 32 | (uint32_t)e->sets[i].node)) * 1099511628211ull;
            int64_t j = (int64_t)(g >> 9) & (cap - 1);
            while (slot[j] >= 0) j = (j + 1) & (cap - 1);
            slot[j] = s;
        }
        free(e->slot);
        e->slot = slot;
        e->hash_cap = cap;
    }
    int64_t j = (int64_t)(h >> 9) & (e->hash_cap - 1);
    for (; e->slot[j] >= 0; j = (j + 1) & (e->hash_cap - 1)) {
        int64_t s = e->slot[j];
        if (e->off[s + 1] - e->off[s] == n && same_configs(e->sets + e->off[s], cfg, n)) return e->last = s;
    }
    if (e->n_conf + n > e->cap_conf) {
        int64_t cap = e->cap_conf ? 2 * e->cap_conf + n : 1024 + n;
        Config *sets = realloc(e->sets, sizeof(Config) * cap);
        if (!sets) return -1;
        e->sets = sets;
        e->cap_conf = cap;
    }
    if (e->n_sets + 2 > e->cap_sets) {
        int64_t cap = e->cap_sets ? 2 * e->cap_sets : 256;
        int64_t *off = realloc(e->off, sizeof(int64_t) * cap);
        if (!off) return -1;
        e->off = off;
        e->cap_sets = cap;
        if (e->n_sets == 0) e->off[0] = 0;
    }
    memcpy(e->sets + e->n_conf, cfg, sizeof(Config) * n);
    e->n_conf += n;
    e->off[e->n_sets + 1] = e->n_conf;
    e->slot[j] = e->n_sets;
    e->last = e->n_sets;
    return e->n_sets++;
}

/* Trie mode, from arena[0..n0). close_first = 0: the configurations read their first byte
 * as they are (rule positions whose calls the caller walks itself). With ends: the set of
 * configurations each surviving token's last byte reached (before closure: the automaton's
 * own state after the token). */
/* A vocabulary subtree below configurations at plain positions (no call, no return, no
 * character count) whose bytes below all loop on each of them is allowed whole, every token
 * of it ending in those same configurations (see Vocab.below): one string position reached
 * under several stacks is as cheap as one. Subtrees of fewer tokens than this are walked. */
#define WHOLE_FROM 4
#define WHOLE_CONFIGS 8 /* the most configurations checked for a whole subtree (each must loop) */

/* The bytes of a 256-wide table row that lead to ``target``, in Vocab.below's form: bit b of
 * word b / 64 for an ASCII byte b, bit 0 only where NUL and every byte of 128 and up do. */
static void bytes_to(const int32_t *row, int32_t target, uint64_t *out) {
    out[0] = out[1] = 0;
    for (int b = 1; b < 128; b++)
        if (row[b] == target) out[b >> 6] |= 1ull << (b & 63);
    int high = row[0] == target;
    for (int b = 128; b < 256 && high; b++) high = row[b] == target;
    out[0] |= (uint64_t)high;
}

/* A position a byte leaves as one configuration with the same stack, that closure leaves
 * alone: no call, no return, no character count. */
static inline int plain_position(const Pda *p, int32_t g) {
    return !(p->flags[g] & (RETURNS | IN_COUNTED | CLOSES_COUNTED)) && p->call_off[g] == p->call_off[g + 1];
}

/* The bytes that lead from plain position g back to itself (bytes_to); none where g is not
 * plain (a counted position's bytes change its count, a call or a return adds
 * configurations). */
static void pda_loop(const Pda *p, int32_t g, uint64_t *out) {
    out[0] = out[1] = 0;
    if (!plain_position(p, g)) return;
    bytes_to(p->trans + (int64_t)g * 256, g, out);
}

static int64_t walk_trie(Work *w, const Pda *p, const Vocab *v, int64_t n0, int close_first, uint32_t *row,
                         EndSets *ends) {
    Config *arena = w->arena;
    if (close_first) n0 = closure(w, p, arena, n0, SET_CAP);
    if (w->overflow) return -1;
    /* frontier k: the closed set after the current token's first k bytes, at arena + at[k];
     * its first stepped[k] configurations are the ones the byte reached */
    int64_t at[260], stepped[260];
    Config scratch[SET_CAP];
    at[0] = 0;
    at[1] = n0;
    uint8_t live[256] = {0}; /* first bytes some configuration steps on */
    int32_t loop_of[64]; /* pda_loop of the positions met, direct-mapped by g % 64 */
    uint64_t loops[64][2];
    for (int j = 0; j < 64; j++) loop_of[j] = -1;
    for (int64_t i = 0; i < n0; i++) {
        const int32_t *t = p->trans + (int64_t)arena[i].g * 256;
        for (int b = 0; b < 256; b++) live[b] |= t[b] >= 0;
    }
    for (int b = 0; b < 256; b++) {
        int64_t lo = v->first[b], hi = v->first[b + 1];
        if (lo == hi || !live[b]) continue;
        int64_t valid = 0, dead_at = INT64_MAX;
        for (int64_t i = lo; i < hi; i++) {
            int64_t len = v->off[i + 1] - v->off[i];
            int64_t l = i == lo ? 0 : v->lcp[i];
            if (l >= dead_at) continue; /* shares a prefix already dead */
            dead_at = INT64_MAX;
            int64_t k = l < valid ? l : valid;
            const uint8_t *bytes = v->bytes + v->off[i];
            int whole = 0;
            while (k < len) {
                if (at[k + 1] + SET_CAP > ARENA_CAP || k + 2 >= 260) { w->overflow = 1; break; }
                Config *next = arena + at[k + 1];
                const Config *cur = arena + at[k];
                int64_t m;
                int32_t t = at[k + 1] - at[k] == 1 && p->max_configs >= 1 && plain_position(p, cur->g)
                            ? p->trans[(int64_t)cur->g * 256 + bytes[k]] : -2;
                if (t == -1 || (t >= 0 && plain_position(p, t))) { /* a lone plain configuration
                                         * steps to a plain one (or dies): no step, no closure */
                    m = t >= 0;
                    if (m) { next[0].g = t; next[0].node = cur->node; stepped[k + 1] = 1; }
                } else {
                    m = step(w, p, cur, at[k + 1] - at[k], bytes[k], next);
                    if (!w->overflow && m) {
                        stepped[k + 1] = m;
                        m = closure(w, p, next, m, SET_CAP);
                    }
                }
                if (w->overflow) break;
                if (!m) { dead_at = k + 1; break; }
                at[k + 2] = at[k + 1] + m;
                k++;
                const struct Whole *big = m <= WHOLE_CONFIGS ? whole_at(v, i, k) : NULL;
                if (big) { /* whole where every configuration loops on every byte below */
                    int all = 1;
                    for (int64_t c = at[k]; all && c < at[k] + m; c++) {
                        int32_t g = arena[c].g, slot = g & 63;
                        if (loop_of[slot] != g) { pda_loop(p, g, loops[slot]); loop_of[slot] = g; }
                        all = (loops[slot][0] | loops[slot][1]) && !(big->below[0] & ~loops[slot][0])
                              && !(big->below[1] & ~loops[slot][1]);
                    }
                    if (all) { whole = big->sub_end; break; }
                }
            }
            if (w->overflow) return -1;
            if (whole) { /* every token below ends in the configurations at depth k (each
                          * plain, so closing added none: they are the ones the byte reached) */
                int64_t end = whole, id = -1;
                if (ends) {
                    int64_t m = at[k + 1] - at[k];
                    memcpy(scratch, arena + at[k], sizeof(Config) * m);
                    id = end_set(ends, scratch, m);
                    if (id < 0) { w->overflow = 1; return -1; }
                }
                if (row)
                    for (int64_t j = i; j < end; j++) set_bit(row, v->ids[j]);
                if (ends && ends->id)
                    for (int64_t j = i; j < end; j++) ends->id[j] = (int32_t)id;
                valid = k;
                i = end - 1;
                continue;
            }
            if (dead_at == 1) break; /* the first byte itself: the whole range is dead */
            valid = k;
            if (k < len) { /* every token sharing the dead prefix: skipped at once */
                if (dead_at <= len) i = v->sub_end[v->off[i] + dead_at - 1] - 1;
                continue;
            }
            if (row) set_bit(row, v->ids[i]);
            if (ends) {
                memcpy(scratch, arena + at[len], sizeof(Config) * stepped[len]);
                int64_t id = end_set(ends, scratch, stepped[len]);
                if (id < 0) { w->overflow = 1; return -1; }
                if (ends->id) ends->id[i] = (int32_t)id;
            }
        }
    }
    return w->lowest == INT32_MAX ? 0 : w->lowest;
}

/* List mode, from arena[0..n0) (closed first): entry e is token index[e] (lexicographic)
 * from byte col[e] on; alive[e] says whether it survives (and its bit is set in row). */
static int64_t walk_list(Work *w, const Pda *p, const Vocab *v, int64_t n0, const int64_t *index,
                         const int64_t *col, int64_t m, uint8_t *alive, uint32_t *row) {
    Config *base = w->arena, *a = w->arena + SET_CAP, *b = w->arena + 2 * SET_CAP;
    n0 = closure(w, p, base, n0, SET_CAP);
    if (w->overflow) return -1;
    for (int64_t e = 0; e < m; e++) {
        const uint8_t *bytes = v->bytes + v->off[index[e]];
        int64_t len = v->off[index[e] + 1] - v->off[index[e]];
        const Config *cur = base;
        int64_t n = n0;
        for (int64_t j = col[e]; j < len && n; j++) {
            Config *out = cur == a ? b : a;
            n = advance(w, p, cur, n, bytes[j], out, SET_CAP);
            if (w->overflow) return -1;
            cur = out;
        }
        alive[e] = n > 0;
        if (n) set_bit(row, v->ids[index[e]]);
    }
    return w->lowest == INT32_MAX ? 0 : w->lowest;
}

/* ---- leaf walks ----------------------------------------------------------------------- */

/* Every token whose first byte state q of a byte DFA allows, walked from q in lexicographic
 * order (trans[s * stride + b] < 0: dead; accept[s]; starts[s * 256 + b], or NULL: byte b in
 * state s begins a counted character). A token whose bytes all stay alive is "inside":
 * (token index, characters, ends accepting); every byte j >= 1 it reaches in an accepting
 * state with bytes left is an "exit": (token index, j, characters before j). A token resumes
 * from the states its common prefix with the one before reached. Returns the inside count
 * (-1: the exit buffer of cap entries is full); the exit count goes to *n_ex. With a packed
 * row the inside tokens are set in it instead of listed (with starts, only the exits carry
 * counts: a subtree taken whole holds no exit). */
static inline void add_byte(uint64_t *set, uint8_t b) {
    if (b < 128) set[b >> 6] |= 1ull << (b & 63);
    else set[0] |= 1;
}

/* Runs of a leaf DFA, for walks that set a whole subtree at once: from state s, every string
 * of at most len[s] bytes of class[s] (Vocab.below's form; bit 0: NUL and every byte of 128
 * and up) stays alive and meets no accepting state. Made per state when first met: the
 * target most ASCII bytes lead to (a state that is not accepting), the bytes leading there,
 * and the same from it (so a self-loop's run is unbounded and a chain's as long as the chain,
 * its class the bytes every step of it takes). */
#define RUN_UNBOUNDED 0x7fffffff
typedef struct {
    const int32_t *trans;
    int64_t stride;
    const uint8_t *accept;
    uint64_t (*cls)[2];
    int32_t *len;
    uint8_t *status; /* 0 not made, 1 being made (on the path), 2 made */
    int32_t *path, *next;
    int32_t enough;  /* the longest token: a run this long is as good as unbounded */
} Runs;

static int32_t run_target(const Runs *r, int32_t s, uint64_t *bytes) {
    const int32_t *t = r->trans + (int64_t)s * r->stride;
    int32_t best = -1, most = 0, seen[128], count[128], n_seen = 0;
    for (int b = 0; b < 128; b++) { /* the target of the most ASCII bytes (ties: the first met) */
        if (t[b] < 0) continue;
        int j = 0;
        while (j < n_seen && seen[j] != t[b]) j++;
        if (j == n_seen) { seen[n_seen] = t[b]; count[n_seen++] = 0; }
        if (++count[j] > most) { most = count[j]; best = t[b]; }
    }
    bytes[0] = bytes[1] = 0;
    if (best < 0 || r->accept[best]) return -1;
    bytes_to(t, best, bytes);
    return best;
}

static void make_run(Runs *r, int32_t s) {
    /* Runs longer than the longest token are as good as unbounded: a path is followed at
     * most twice that far, and of its states only those at least that far from where it
     * stopped are kept made (the others are made again, further, when met). */
    int64_t n = 0, cap = 2 * (int64_t)r->enough;
    int cut = 0;
    for (int32_t cur = s; !r->status[cur];) { /* follow the targets to a made state, an end or a cycle */
        if (n == cap) { cut = 1; break; }
        r->status[cur] = 1;
        r->path[n] = cur;
        cur = r->next[n++] = run_target(r, cur, r->cls[cur]);
        if (cur < 0) break;
    }
    int64_t last = n;
    while (n--) { /* last first: each state's target is made, or on the path (a cycle: no run after) */
        int32_t q = r->path[n], t = r->next[n];
        if (t < 0) {
            r->len[q] = 0;
        } else if (t == q) {
            r->len[q] = RUN_UNBOUNDED;
        } else if (r->status[t] != 2 || r->len[t] == 0) {
            r->len[q] = 1;
        } else {
            r->cls[q][0] &= r->cls[t][0];
            r->cls[q][1] &= r->cls[t][1];
            r->len[q] = r->len[t] == RUN_UNBOUNDED ? RUN_UNBOUNDED : r->len[t] + 1;
        }
        if (!r->len[q] || !(r->cls[q][0] | r->cls[q][1])) { r->cls[q][0] = r->cls[q][1] = 0; r->len[q] = 0; }
        r->status[q] = 2;
    }
    for (int64_t k = cut ? last - r->enough : last; k < last; k++)
        if (k >= 1) r->status[r->path[k]] = 0;
}

/* The rise every byte of state s's run adds to the count, where its run is a loop on s itself
 * (every byte of its class leads back to s) and all those bytes rise alike; -1 otherwise (a
 * chain's states may rise differently step by step). */
static int uniform_rise(const Runs *r, const uint8_t *starts, int32_t s) {
    const int32_t *t = r->trans + (int64_t)s * r->stride;
    int rise = -1;
    for (int b = 0; b < 256; b++) {
        int in_class = b && b < 128 ? (r->cls[s][b >> 6] >> (b & 63)) & 1 : r->cls[s][0] & 1;
        if (!in_class) continue;
        if (t[b] != s) return -1;
        int here = starts[(int64_t)s * 256 + b];
        if (rise >= 0 && here != rise) return -1;
        rise = here;
    }
    return rise;
}

#define COUNT_CLOSES 0x80 /* lex_count: the token ends the leaf (its count in the low 7 bits) */

static int64_t leaf_walk(const int32_t *trans, int64_t stride, const uint8_t *accept, const uint8_t *starts,
                         const Vocab *v, int32_t q, int64_t *in_i, int64_t *in_count, uint8_t *in_end,
                         int64_t *ex_i, int64_t *ex_col, int64_t *ex_count, int64_t cap, int64_t *n_ex,
                         uint32_t *row, int64_t n_states, uint8_t *lex_count) {
    /* lex_count (row mode with starts, or NULL): every inside token's count by its lexicographic
     * index, COUNT_CLOSES where it ends accepting (tokens not inside are left as they are); a
     * subtree is taken whole only where its run loops on one state rising alike, each token's
     * count then its prefix's plus that rise per byte after it. -1 past 127 characters. */
    enum { DEPTH = 512 };
    /* Row mode: a subtree whose bytes below all lie in the run of the (non-accepting) state
     * reached, no deeper than it, with no exit on the way, is inside whole: its tokens are set
     * without walking them (a string body's state keeps most of the vocabulary this way). */
    Runs runs = {trans, stride, accept, NULL, NULL, NULL, NULL, NULL, v->max_len > 0 ? v->max_len : 1};
    if (row && v->whole) {
        size_t n = (size_t)(n_states ? n_states : 1), steps = 2 * (size_t)runs.enough + 1;
        runs.cls = malloc(sizeof *runs.cls * n);
        runs.len = malloc(sizeof *runs.len * n);
        runs.path = malloc(sizeof *runs.path * (n < steps ? n : steps));
        runs.next = malloc(sizeof *runs.next * (n < steps ? n : steps));
        runs.status = calloc(n, 1);
        if (!runs.cls || !runs.len || !runs.path || !runs.next || !runs.status) {
            free(runs.cls); free(runs.len); free(runs.path); free(runs.next); free(runs.status);
            runs.status = NULL;
        }
    }
    int16_t *rise_of = NULL; /* lex_count: uniform_rise per state, -2 not found yet */
    if (lex_count && runs.status) {
        rise_of = malloc(sizeof *rise_of * (size_t)(n_states ? n_states : 1));
        if (!rise_of) {
            free(runs.cls); free(runs.len); free(runs.path); free(runs.next); free(runs.status);
            runs.status = NULL;
        } else {
            for (int64_t s = 0; s < n_states; s++) rise_of[s] = -2;
        }
    }
    /* Most of the vocabulary inside (a string body's state): the row starts full and the walk
     * clears the tokens that are not inside, so a subtree taken whole costs nothing and the
     * ~48k inside tokens' ids are never read (setting them one by one was most of the walk). */
    int negative = 0;
    if (row && v->all_row) {
        int64_t allowed = 0, n_tok = v->first[256] - v->first[0];
        for (int b = 0; b < 256; b++)
            if (trans[(int64_t)q * stride + b] >= 0) allowed += v->first[b + 1] - v->first[b];
        negative = 2 * allowed > n_tok;
        if (negative) {
            for (int64_t w = 0, words = (v->id_end + 31) / 32; w < words; w++) row[w] |= v->all_row[w];
            for (int b = 0; b < 256; b++)
                if (trans[(int64_t)q * stride + b] < 0)
                    for (int64_t i = v->first[b]; i < v->first[b + 1]; i++) clear_bit(row, v->ids[i]);
        }
    }
    int32_t state[DEPTH + 1];
    int64_t count[DEPTH + 1], exits[DEPTH + 1]; /* exits[k]: accepting depths in 1..k */
    int64_t n_in = 0, k_ex = 0;
    state[0] = q;
    count[0] = 0;
    exits[0] = 0;
    for (int b = 0; b < 256; b++) {
        if (trans[(int64_t)q * stride + b] < 0) continue;
        int64_t reached = 0; /* state[0..reached]: the last walked token's prefix (the last may be dead) */
        for (int64_t i = v->first[b]; i < v->first[b + 1]; i++) {
            const uint8_t *bytes = v->bytes + v->off[i];
            int64_t len = v->off[i + 1] - v->off[i];
            if (len > DEPTH) { n_in = -1; goto done; }
            int64_t l = i == v->first[b] ? 0 : v->lcp[i];
            int64_t k = l < reached ? l : reached; /* state[k] may be dead: so is this token */
            int whole = 0;
            while (k < len && state[k] >= 0) {
                int32_t cur = state[k];
                count[k + 1] = count[k] + (starts ? starts[(int64_t)cur * 256 + bytes[k]] : 0);
                int32_t next = state[k + 1] = trans[(int64_t)cur * stride + bytes[k]];
                exits[k + 1] = exits[k] + (next >= 0 && accept[next]);
                k++;
                const struct Whole *big = runs.status && next >= 0 && !exits[k] ? whole_at(v, i, k) : NULL;
                if (big) {
                    if (runs.status[next] != 2) make_run(&runs, next);
                    if (runs.len[next] && big->height <= runs.len[next]
                        && !(big->below[0] & ~runs.cls[next][0]) && !(big->below[1] & ~runs.cls[next][1])) {
                        if (rise_of && rise_of[next] == -2) rise_of[next] = (int16_t)uniform_rise(&runs, starts, next);
                        if (!rise_of || rise_of[next] >= 0) {
                            whole = big->sub_end;
                            break;
                        }
                    }
                }
            }
            reached = k;
            if (whole) {
                int64_t end = whole;
                if (!negative)
                    for (int64_t j = i; j < end; j++) set_bit(row, v->ids[j]);
                if (lex_count) {
                    for (int64_t j = i; j < end; j++) {
                        int64_t c = count[k] + rise_of[state[k]] * (v->off[j + 1] - v->off[j] - k);
                        if (c > 127) { n_in = -1; goto done; }
                        lex_count[j] = (uint8_t)c;
                    }
                }
                n_in += end - i;
                i = end - 1;
                continue;
            }
            int64_t alive_to = state[k] >= 0 ? k : k - 1; /* deepest live depth on this token */
            int64_t last = alive_to < len - 1 ? alive_to : len - 1; /* exits need bytes left */
            if (last >= 1 && exits[last]) {
                for (int64_t j = 1; j <= last; j++) {
                    if (!accept[state[j]]) continue;
                    if (k_ex >= cap) { n_in = -1; goto done; }
                    ex_i[k_ex] = i;
                    ex_col[k_ex] = j;
                    ex_count[k_ex] = count[j];
                    k_ex++;
                }
            }
            if (k == len && state[len] >= 0 && row) {
                if (!negative) set_bit(row, v->ids[i]);
                if (lex_count) {
                    if (count[len] > 127) { n_in = -1; goto done; }
                    lex_count[i] = (uint8_t)(count[len] | (accept[state[len]] ? COUNT_CLOSES : 0));
                }
                n_in++;
            } else if (k == len && state[len] >= 0) {
                in_i[n_in] = i;
                in_count[n_in] = count[len];
                in_end[n_in] = accept[state[len]];
                n_in++;
            } else if (k >= 1 && state[k] < 0 && !exits[k - 1]) {
                /* the first k bytes are dead and no exit lies before: so for every token
                 * sharing them (each would walk to the same dead end, exiting nowhere) */
                int64_t end = v->sub_end[v->off[i] + k - 1];
                if (negative)
                    for (int64_t j = i; j < end; j++) clear_bit(row, v->ids[j]);
                i = end - 1;
            } else if (negative) {
                clear_bit(row, v->ids[i]);
            }
        }
    }
    *n_ex = k_ex;
done:
    if (runs.status) {
        free(runs.cls); free(runs.len); free(runs.path); free(runs.next); free(runs.status);
    }
    free(rise_of);
    return n_in;
}

/* ---- Python ------------------------------------------------------------------------------ */

#define PDA_ARRAYS 9
#define VOCAB_ARRAYS 5

typedef struct { Pda p; Py_buffer views[PDA_ARRAYS]; } PdaCapsule;
typedef struct { Vocab v; Py_buffer views[VOCAB_ARRAYS]; } VocabCapsule;

static int get_views(PyObject *const *arrays, Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) {
        if (PyObject_GetBuffer(arrays[i], &views[i], PyBUF_C_CONTIGUOUS) < 0) {
            while (i--) PyBuffer_Release(&views[i]);
            return -1;
        }
    }
    return 0;
}

static void free_pda(PyObject *capsule) {
    PdaCapsule *c = PyCapsule_GetPointer(capsule, "pda");
    for (int i = 0; i < PDA_ARRAYS; i++) PyBuffer_Release(&c->views[i]);
    free(c);
}

static void free_vocab(PyObject *capsule) {
    VocabCapsule *c = PyCapsule_GetPointer(capsule, "vocab");
    for (int i = 0; i < VOCAB_ARRAYS; i++) PyBuffer_Release(&c->views[i]);
    free(c->v.sub_end);
    free(c->v.big_first);
    free(c->v.big_count);
    free(c->v.whole);
    free(c->v.all_row);
    free(c->v.first2);
    free(c);
}

/* pda_tables(trans i32, call_off i32, call_start i32, call_ret i32, call_counted u8, flags u8,
 *            count_lo i32, count_cap i32, inc u8, max_configs) -> capsule */
static PyObject *py_pda_tables(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != PDA_ARRAYS + 1) {
        PyErr_SetString(PyExc_TypeError, "pda_tables takes 9 arrays and max_configs");
        return NULL;
    }
    PdaCapsule *c = calloc(1, sizeof *c);
    if (!c) return PyErr_NoMemory();
    if (get_views(args, c->views, PDA_ARRAYS) < 0) { free(c); return NULL; }
    const void **fields[PDA_ARRAYS] = {(const void **)&c->p.trans, (const void **)&c->p.call_off,
        (const void **)&c->p.call_start, (const void **)&c->p.call_ret, (const void **)&c->p.call_counted,
        (const void **)&c->p.flags, (const void **)&c->p.count_lo, (const void **)&c->p.count_cap,
        (const void **)&c->p.inc};
    for (int i = 0; i < PDA_ARRAYS; i++) *fields[i] = c->views[i].buf;
    c->p.max_configs = PyLong_AsLongLong(args[PDA_ARRAYS]);
    PyObject *out = PyCapsule_New(c, "pda", free_pda);
    if (!out) {
        for (int i = 0; i < PDA_ARRAYS; i++) PyBuffer_Release(&c->views[i]);
        free(c);
    }
    return out;
}

/* vocab_tables(data u8, off i64, lcp i32, first i64, ids i64) -> capsule */
static PyObject *py_vocab_tables(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != VOCAB_ARRAYS) {
        PyErr_SetString(PyExc_TypeError, "vocab_tables takes 5 arrays");
        return NULL;
    }
    VocabCapsule *c = calloc(1, sizeof *c);
    if (!c) return PyErr_NoMemory();
    if (get_views(args, c->views, VOCAB_ARRAYS) < 0) { free(c); return NULL; }
    c->v.bytes = c->views[0].buf;
    c->v.off = c->views[1].buf;
    c->v.lcp = c->views[2].buf;
    c->v.first = c->views[3].buf;
    c->v.ids = c->views[4].buf;
    for (Py_ssize_t i = 0; i < c->views[4].len / 8; i++)
        if (c->v.ids[i] >= c->v.id_end) c->v.id_end = c->v.ids[i] + 1;
    c->v.first2 = malloc(sizeof(int32_t) * 65537);
    for (int64_t i = 0, k = 0, n = c->views[4].len / 8; c->v.first2 && k <= 65536; i++) {
        if (i < n && c->v.off[i + 1] - c->v.off[i] < 2) continue;
        int64_t key = i < n ? 256 * c->v.bytes[c->v.off[i]] + c->v.bytes[c->v.off[i] + 1] : 65536;
        while (k <= key) c->v.first2[k++] = (int32_t)i;
    }
    c->v.all_row = calloc((size_t)(c->v.id_end + 31) / 32 + 1, sizeof(uint32_t));
    for (Py_ssize_t i = 0; c->v.all_row && i < c->views[4].len / 8; i++)
        if (c->v.off[i + 1] > c->v.off[i]) set_bit(c->v.all_row, c->v.ids[i]);
    /* subtree ends, last token first: token i + 1 shares d bytes with i exactly when its lcp
     * is at least d, and then so does everything in its own subtree of depth d */
    int64_t n_tok = c->views[4].len / 8;
    c->v.sub_end = malloc(sizeof(int32_t) * (c->v.off[n_tok] ? c->v.off[n_tok] : 1));
    if (!c->v.sub_end) {
        for (int i = 0; i < VOCAB_ARRAYS; i++) PyBuffer_Release(&c->views[i]);
        free(c->v.all_row);
        free(c->v.first2);
        free(c);
        return PyErr_NoMemory();
    }
    for (int64_t i = n_tok - 1; i >= 0; i--)
        for (int64_t d = 1; d <= c->v.off[i + 1] - c->v.off[i]; d++)
            c->v.sub_end[c->v.off[i] + d - 1] = i + 1 == n_tok || c->v.lcp[i + 1] < d
                ? (int32_t)(i + 1) : c->v.sub_end[c->v.off[i + 1] + d - 1];
    /* the bytes below each depth, the same way: token i's own bytes after d, and those of the
     * next token's subtree where it shares the first d bytes (none: walks go byte by byte);
     * built per position, then only the big subtrees' kept (Vocab.whole) */
    size_t positions = (size_t)(c->v.off[n_tok] ? c->v.off[n_tok] : 1);
    uint64_t (*below)[2] = malloc(sizeof *below * positions);
    uint8_t *height = malloc(positions);
    for (int64_t i = n_tok - 1; i >= 0 && below && height; i--) {
        uint64_t own[2] = {0, 0};
        int64_t len = c->v.off[i + 1] - c->v.off[i];
        if (len > c->v.max_len) c->v.max_len = (int32_t)len;
        for (int64_t d = len; d >= 1; d--) {
            int64_t at = c->v.off[i] + d - 1;
            uint64_t *out = below[at];
            int64_t h = len - d;
            out[0] = own[0];
            out[1] = own[1];
            if (i + 1 < n_tok && c->v.lcp[i + 1] >= d) {
                int64_t after = c->v.off[i + 1] + d - 1;
                out[0] |= below[after][0];
                out[1] |= below[after][1];
                if (height[after] > h) h = height[after];
            }
            height[at] = (uint8_t)(h < 255 ? h : 255);
            add_byte(own, c->v.bytes[at]);
        }
    }
    int64_t big = 0;
    c->v.big_first = malloc(sizeof(int32_t) * (n_tok ? n_tok : 1));
    c->v.big_count = malloc(n_tok ? n_tok : 1);
    if (below && height && c->v.big_first && c->v.big_count) {
        for (int64_t i = 0; i < n_tok; i++) {  /* lcp[0] is 0: nothing comes before */
            int64_t len = c->v.off[i + 1] - c->v.off[i], d = c->v.lcp[i] + 1;
            c->v.big_first[i] = (int32_t)big;
            while (d <= len && d - c->v.lcp[i] <= 255 && c->v.sub_end[c->v.off[i] + d - 1] - i >= WHOLE_FROM) d++;
            c->v.big_count[i] = (uint8_t)(d - 1 - c->v.lcp[i]);
            big += c->v.big_count[i];
        }
        c->v.whole = malloc(sizeof *c->v.whole * (big ? big : 1));
    }
    if (c->v.whole) {
        for (int64_t i = 0; i < n_tok; i++)
            for (int64_t j = 0; j < c->v.big_count[i]; j++) {
                int64_t at = c->v.off[i] + c->v.lcp[i] + j;  /* depth lcp + j + 1 */
                struct Whole *out = c->v.whole + c->v.big_first[i] + j;
                out->below[0] = below[at][0];
                out->below[1] = below[at][1];
                out->sub_end = c->v.sub_end[at];
                out->height = height[at];
            }
    } else {  /* walks go byte by byte without them */
        free(c->v.big_first); free(c->v.big_count);
        c->v.big_first = NULL; c->v.big_count = NULL;
    }
    free(below);
    free(height);
    PyObject *out = PyCapsule_New(c, "vocab", free_vocab);
    if (!out) {
        for (int i = 0; i < VOCAB_ARRAYS; i++) PyBuffer_Release(&c->views[i]);
        free(c->v.sub_end);
        free(c->v.big_first);
        free(c->v.big_count);
        free(c->v.whole);
        free(c->v.all_row);
        free(c->v.first2);
        free(c);
    }
    return out;
}

/* configs: a sequence of (stack tuple of ints, g) into w->arena; -1 with an error set. */
static int64_t start_configs(Work *w, PyObject *configs) {
    PyObject *seq = PySequence_Fast(configs, "configs must be a sequence");
    if (!seq) return -1;
    int64_t n = 0;
    w->lowest = INT32_MAX;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *cfg = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(cfg) || PyTuple_GET_SIZE(cfg) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(cfg, 0))) {
            PyErr_SetString(PyExc_TypeError, "a configuration is (stack tuple, position)");
            Py_DECREF(seq);
            return -1;
        }
        PyObject *stack = PyTuple_GET_ITEM(cfg, 0);
        int32_t node = -1;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(stack) && !w->overflow; k++)
            node = intern(w, PyLong_AsLongLong(PyTuple_GET_ITEM(stack, k)), node);
        long g = PyLong_AsLong(PyTuple_GET_ITEM(cfg, 1));
        if (PyErr_Occurred()) { Py_DECREF(seq); return -1; }
        if (w->overflow) { Py_DECREF(seq); return -2; }
        add(w, w->arena, &n, SET_CAP, (int32_t)g, node);
    }
    Py_DECREF(seq);
    return w->overflow ? -2 : n;
}

static int row_view(PyObject *obj, Py_buffer *view, Py_ssize_t min_bytes, int writable) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (view->len < min_bytes) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "buffer too small");
        return -1;
    }
    return 0;
}

/* args[0..2] = (pda, vocab, configs): 1 with the start configurations in the workspace, 0
 * where they already overflow (the caller falls back), -1 with an error set. */
static int begin_walk(PyObject *const *args, const Pda **p, const Vocab **v, Work **w, int64_t *n0) {
    *p = PyCapsule_GetPointer(args[0], "pda");
    *v = PyCapsule_GetPointer(args[1], "vocab");
    if (!*p || !*v) return -1;
    *w = workspace();
    if (!*w) { PyErr_NoMemory(); return -1; }
    *n0 = start_configs(*w, args[2]);
    return *n0 == -1 ? -1 : *n0 >= 0;
}

/* walk_list(pda, vocab, configs, index i64, cols i64, alive u8, row) -> depth, or -1 */
static PyObject *py_walk_list(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) { PyErr_SetString(PyExc_TypeError, "walk_list takes 7 arguments"); return NULL; }
    const Pda *p;
    const Vocab *v;
    Work *w;
    int64_t n0;
    int ready = begin_walk(args, &p, &v, &w, &n0);
    if (ready <= 0) return ready < 0 ? NULL : PyLong_FromLong(-1);
    Py_buffer index, cols, alive, row;
    if (row_view(args[3], &index, 0, 0) < 0) return NULL;
    if (row_view(args[4], &cols, index.len, 0) < 0) { PyBuffer_Release(&index); return NULL; }
    if (row_view(args[5], &alive, index.len / 8, 1) < 0) {
        PyBuffer_Release(&index); PyBuffer_Release(&cols); return NULL;
    }
    if (row_view(args[6], &row, (Py_ssize_t)((v->id_end + 31) / 32 * 4), 1) < 0) {
        PyBuffer_Release(&index); PyBuffer_Release(&cols); PyBuffer_Release(&alive); return NULL;
    }
    int64_t out;
    Py_BEGIN_ALLOW_THREADS
    out = walk_list(w, p, v, n0, index.buf, cols.buf, index.len / 8, alive.buf, row.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&index); PyBuffer_Release(&cols); PyBuffer_Release(&alive); PyBuffer_Release(&row);
    return PyLong_FromLongLong(out);
}

/* walk_leaf(trans i32 [S, W], accept bool [S], starts bool [S, 256] or None, vocab, q,
 *           in_i i64 [N], in_count i64 [N], in_end bool [N], ex_i i64, ex_col i64, ex_count i64,
 *           row i32 [ceil(V / 32)] or None, lex_count u8 [N] or None) -> (n_in, n_ex), or None
 * where the exit buffers are full (or, with lex_count, a count passes 127). With a row the
 * inside tokens are set in it, not listed; with lex_count too (and starts) their counts are
 * written there by lexicographic index (leaf_walk). */
static PyObject *py_walk_leaf(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 13) { PyErr_SetString(PyExc_TypeError, "walk_leaf takes 13 arguments"); return NULL; }
    const Vocab *v = PyCapsule_GetPointer(args[3], "vocab");
    if (!v) return NULL;
    long q = PyLong_AsLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    enum { N_VIEWS = 11 };
    static const int arg_of[N_VIEWS] = {0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 12};
    static const int writable[N_VIEWS] = {0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    Py_buffer views[N_VIEWS];
    int has_starts = args[2] != Py_None, has_row = args[11] != Py_None, has_counts = args[12] != Py_None, got = 0;
    for (; got < N_VIEWS; got++) {
        views[got].obj = NULL;
        if ((arg_of[got] == 2 && !has_starts) || (arg_of[got] == 11 && !has_row) || (arg_of[got] == 12 && !has_counts))
            continue;
        if (row_view(args[arg_of[got]], &views[got], 0, writable[got]) < 0) break;
    }
    PyObject *out = NULL;
    if (got == N_VIEWS) {
        int64_t states = views[1].len;
        int64_t stride = states ? views[0].len / 4 / states : 256;
        int64_t cap = views[6].len / 8, n_ex = 0, n_in = 0;
        if (views[7].len < cap * 8 || views[8].len < cap * 8 || views[3].len / 8 > views[5].len
            || views[4].len < views[3].len || stride < 256 || q < 0 || q >= states
            || (has_row && views[9].len * 8 < v->id_end)
            || (has_counts && (!has_row || !has_starts || views[10].len < v->first[256]))) {
            PyErr_SetString(PyExc_ValueError, "walk_leaf: bad table or output buffers");
        } else {
            Py_BEGIN_ALLOW_THREADS
            n_in = leaf_walk(views[0].buf, stride, views[1].buf, has_starts ? views[2].buf : NULL, v,
                             (int32_t)q, views[3].buf, views[4].buf, views[5].buf, views[6].buf,
                             views[7].buf, views[8].buf, cap, &n_ex, has_row ? views[9].buf : NULL, states,
                             has_counts ? views[10].buf : NULL);
            Py_END_ALLOW_THREADS
            out = n_in < 0 ? Py_NewRef(Py_None) : Py_BuildValue("LL", (long long)n_in, (long long)n_ex);
        }
    }
    for (int i = 0; i < got; i++)
        if (views[i].obj) PyBuffer_Release(&views[i]);
    return out;
}

/* rows [top + 1, words]: each row ORed with all above it (row c then holds rows 0..c). */
static void cumulate(uint32_t *rows, int64_t top, int64_t words) {
    for (int64_t c = 1; c <= top; c++)
        for (int64_t w = 0; w < words; w++) rows[c * words + w] |= rows[(c - 1) * words + w];
}

/* rows_by_count(ids i64 [N], counts i64 [N], rows i32 [top + 1, words]) -> None: rows[c] gets
 * every id whose count is at most c (the rows come zeroed; counts in 0..top). */
static PyObject *py_rows_by_count(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "rows_by_count takes 4 arguments"); return NULL; }
    long long words = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer ids, counts, rows;
    if (row_view(args[0], &ids, 0, 0) < 0) return NULL;
    if (row_view(args[1], &counts, ids.len, 0) < 0) { PyBuffer_Release(&ids); return NULL; }
    if (row_view(args[2], &rows, 4, 1) < 0) { PyBuffer_Release(&ids); PyBuffer_Release(&counts); return NULL; }
    int64_t n = ids.len / 8, top = words > 0 ? rows.len / 4 / words - 1 : -1;
    const int64_t *id = ids.buf, *count = counts.buf;
    uint32_t *out = rows.buf;
    int ok = top >= 0;
    for (int64_t i = 0; i < n && ok; i++)
        ok = count[i] >= 0 && count[i] <= top && id[i] >= 0 && id[i] < words * 32;
    if (ok) {
        for (int64_t i = 0; i < n; i++) set_bit(out + count[i] * words, id[i]);
        cumulate(out, top, words);
    }
    PyBuffer_Release(&ids); PyBuffer_Release(&counts); PyBuffer_Release(&rows);
    if (!ok) { PyErr_SetString(PyExc_ValueError, "rows_by_count: a count or id out of range"); return NULL; }
    Py_RETURN_NONE;
}

/* bucket_rows(vocab, lex_count u8 [N], open i32 [top + 1, words], closing i32 [top + 1, words],
 *             words) -> None: walk_leaf's counts (lex_count; 0xff: not inside) as cumulative rows
 * by count, the inside tokens that leave the leaf open and those that close it: open[c]
 * gets every open token of at most c characters (the rows come zeroed; counts in 0..top). */
static PyObject *py_bucket_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) { PyErr_SetString(PyExc_TypeError, "bucket_rows takes 5 arguments"); return NULL; }
    const Vocab *v = PyCapsule_GetPointer(args[0], "vocab");
    if (!v) return NULL;
    long long words = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer views[3];
    int got = 0;
    for (; got < 3; got++)
        if (row_view(args[1 + got], &views[got], 0, got > 0) < 0) break;
    int64_t n = v->first[256], top = words > 0 && got == 3 ? views[1].len / 4 / words - 1 : -1;
    int ok = got == 3 && top >= 0 && words * 32 >= v->id_end && views[0].len >= n && views[1].len == views[2].len
             && views[1].len == (top + 1) * words * 4;
    const uint8_t *lex_count = ok ? views[0].buf : NULL;
    for (int64_t i = 0; i < n && ok; i++)
        ok = lex_count[i] == 0xff || (lex_count[i] & ~COUNT_CLOSES) <= top;
    if (ok) {
        uint32_t *rows[2] = {views[1].buf, views[2].buf};
        for (int64_t i = 0; i < n; i++) {
            uint8_t c = lex_count[i];
            if (c != 0xff) set_bit(rows[(c & COUNT_CLOSES) != 0] + (int64_t)(c & ~COUNT_CLOSES) * words, v->ids[i]);
        }
        cumulate(rows[0], top, words);
        cumulate(rows[1], top, words);
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    if (got < 3) return NULL;
    if (!ok) { PyErr_SetString(PyExc_ValueError, "bucket_rows: bad counts or rows"); return NULL; }
    Py_RETURN_NONE;
}

/* pack_groups(ids i64 [N], end i32 [N], group i64 [E], rows i32 [G, words], words) -> None:
 * token ids[i] gets its bit in rows[group[end[i]]], skipped where end[i] < 0 (the token
 * dies) or its end's group is < 0 (the rows come zeroed). The closing's budget rows: the
 * tokens of a walk grouped by the bound after them, in one pass over its end indices. */
static PyObject *py_pack_groups(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) { PyErr_SetString(PyExc_TypeError, "pack_groups takes 5 arguments"); return NULL; }
    long long words = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer v[4];
    int got = 0;
    for (; got < 4; got++)
        if (row_view(args[got], &v[got], got == 1 ? v[0].len / 2 : 0, got == 3) < 0) break;
    int ok = got == 4 && words > 0;
    if (ok) {
        int64_t n = v[0].len / 8, n_ends = v[2].len / 8, n_rows = v[3].len / 4 / words;
        const int64_t *id = v[0].buf, *group = v[2].buf;
        const int32_t *end = v[1].buf;
        uint32_t *rows = v[3].buf;
        for (int64_t i = 0; i < n_ends && ok; i++) ok = group[i] < n_rows;
        for (int64_t i = 0; i < n && ok; i++) {
            int32_t e = end[i];
            if (e < 0) continue;
            ok = e < n_ends && id[i] >= 0 && id[i] < words * 32;
            if (ok && group[e] >= 0) set_bit(rows + group[e] * words, id[i]);
        }
        if (!ok) PyErr_SetString(PyExc_ValueError, "pack_groups: an end, group or id out of range");
    } else if (got == 4) {
        PyErr_SetString(PyExc_ValueError, "pack_groups: words must be positive");
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* ---- trim and minimize ------------------------------------------------------------------ */

typedef struct { uint64_t h; int64_t i; } Keyed;

static int by_key(const void *a, const void *b) {
    const Keyed *x = a, *y = b;
    return x->h < y->h ? -1 : x->h > y->h ? 1 : (x->i > y->i) - (x->i < y->i);
}

static uint64_t signature(const int64_t *table, int64_t nc, const int64_t *cls, int64_t i) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int64_t k = 0; k < nc; k++) {
        int64_t t = table[i * nc + k];
        h = (h ^ (uint64_t)(t < 0 ? -1 : cls[t])) * 0xBF58476D1CE4E5B9ull;
    }
    return h;
}

static int same_signature(const int64_t *table, int64_t nc, const int64_t *cls, int64_t a, int64_t b) {
    for (int64_t k = 0; k < nc; k++) {
        int64_t x = table[a * nc + k], y = table[b * nc + k];
        if ((x < 0 ? -1 : cls[x]) != (y < 0 ? -1 : cls[y])) return 0;
    }
    return 1;
}

/* The coarsest partition of the states of table[kept * nc] (successor or < 0) that refines
 * cls[kept] (classes 0 .. classes - 1) and is stable: equal classes have equal successors'
 * classes in every column. A worklist of classes to split: a class is split by its members'
 * successor classes, the largest part keeps the class, and only the classes of states with
 * an edge into a moved state are split again (the rounds of Moore's refinement revisit every
 * state, hundreds of times on long chains). The coarsest stable refinement is unique, so
 * the order of splits does not change the result. cls gets class ids below kept. */
static int refine(const int64_t *table, int64_t kept, int64_t nc, int64_t *cls, int64_t classes) {
    int64_t *elems = malloc(sizeof(int64_t) * (kept ? kept : 1));
    int64_t *cstart = calloc(kept + 1, sizeof(int64_t)), *csize = calloc(kept + 1, sizeof(int64_t));
    int64_t *roff = calloc(kept + 1, sizeof(int64_t)), *rsrc = NULL, *stack = NULL, *group = NULL;
    uint8_t *dirty = calloc(kept + 1, 1);
    Keyed *keyed = malloc(sizeof(Keyed) * (kept ? kept : 1));
    int64_t *reps = malloc(sizeof(int64_t) * (kept ? kept : 1)), *gsize = NULL;
    int ret = -1;
    if (!elems || !cstart || !csize || !roff || !dirty || !keyed || !reps) goto out;
    stack = malloc(sizeof(int64_t) * (kept ? kept : 1));
    group = malloc(sizeof(int64_t) * (kept ? kept : 1));
    gsize = malloc(sizeof(int64_t) * (kept ? kept : 1));
    if (!stack || !group || !gsize) goto out;
    /* members by class: a segment of elems each */
    for (int64_t i = 0; i < kept; i++) csize[cls[i]]++;
    for (int64_t c = 1; c < classes; c++) cstart[c] = cstart[c - 1] + csize[c - 1];
    for (int64_t c = 0; c < classes; c++) gsize[c] = cstart[c];
    for (int64_t i = 0; i < kept; i++) elems[gsize[cls[i]]++] = i;
    /* predecessors over the table */
    for (int64_t i = 0; i < kept * nc; i++)
        if (table[i] >= 0) roff[table[i] + 1]++;
    for (int64_t j = 0; j < kept; j++) roff[j + 1] += roff[j];
    rsrc = malloc(sizeof(int64_t) * (roff[kept] ? roff[kept] : 1));
    if (!rsrc) goto out;
    for (int64_t j = 0; j < kept; j++) group[j] = roff[j];
    for (int64_t i = 0; i < kept * nc; i++)
        if (table[i] >= 0) rsrc[group[table[i]]++] = i / nc;
    int64_t top = 0;
    for (int64_t c = classes - 1; c >= 0; c--) { stack[top++] = c; dirty[c] = 1; }
    while (top) {
        int64_t c = stack[--top];
        dirty[c] = 0;
        int64_t size = csize[c], *seg = elems + cstart[c];
        if (size < 2) continue;
        for (int64_t x = 0; x < size; x++) {
            keyed[x].h = signature(table, nc, cls, seg[x]);
            keyed[x].i = seg[x];
        }
        qsort(keyed, size, sizeof(Keyed), by_key);
        /* groups: runs of one hash, told apart exactly within a run (collisions) */
        int64_t groups = 0;
        for (int64_t x = 0, run = 0; x < size; x++) {
            if (x && keyed[x].h != keyed[x - 1].h) run = groups;
            int64_t g = run;
            while (g < groups && !same_signature(table, nc, cls, reps[g], keyed[x].i)) g++;
            if (g == groups) { reps[groups] = keyed[x].i; gsize[groups++] = 0; }
            group[x] = g;
            gsize[g]++;
        }
        if (groups == 1) continue;
        int64_t big = 0;
        for (int64_t g = 1; g < groups; g++)
            if (gsize[g] > gsize[big]) big = g;
        /* the segment rewritten group by group: the largest first, keeping the class */
        int64_t at = cstart[c];
        for (int64_t pass = 0; pass < 2; pass++)
            for (int64_t g = 0; g < groups; g++) {
                if ((g == big) != (pass == 0)) continue;
                int64_t id = g == big ? c : classes++;
                cstart[id] = at;
                csize[id] = gsize[g];
                for (int64_t x = 0; x < size; x++)
                    if (group[x] == g) { elems[at++] = keyed[x].i; cls[keyed[x].i] = id; }
            }
        /* the classes with an edge into a moved state split again */
        for (int64_t x = cstart[c] + csize[c]; x < cstart[c] + size; x++) {
            int64_t j = elems[x];
            for (int64_t e = roff[j]; e < roff[j + 1]; e++) {
                int64_t pc = cls[rsrc[e]];
                if (!dirty[pc]) { dirty[pc] = 1; stack[top++] = pc; }
            }
        }
    }
    ret = 0;
out:
    free(elems); free(cstart); free(csize); free(roff); free(rsrc); free(stack); free(group);
    free(dirty); free(keyed); free(reps); free(gsize);
    return ret;
}

/* Each live state's longest way to acceptance in bytes (n + 1 where a cycle makes it
 * unbounded), by peeling states whose live successors are all done (Kahn, backwards over
 * pred). Equivalent states accept the same words, so they agree on it as on the shortest:
 * starting the refinement from both tells apart at once what the shortest alone leaves to
 * hundreds of splits (a length-bounded product's states differ by the room they have left).
 * NULL: out of memory. */
static int64_t *longest_to_accept(const int32_t *trans, int64_t n, int64_t w, const int64_t *cols, int64_t nc,
                                  const uint8_t *accept, const int64_t *dist, const int64_t *pred_off,
                                  const int64_t *pred) {
    int64_t *most = malloc(sizeof(int64_t) * (n ? n : 1)), *out = calloc(n ? n : 1, sizeof(int64_t));
    int64_t *queue = malloc(sizeof(int64_t) * (n ? n : 1));
    if (!most || !out || !queue) { free(most); free(out); free(queue); return NULL; }
    int64_t head = 0, tail = 0;
    for (int64_t s = 0; s < n; s++) {
        most[s] = accept[s] ? 0 : -1;
        if (dist[s] < 0) continue;
        for (int64_t k = 0; k < nc; k++) {
            int32_t t = trans[s * w + cols[k]];
            out[s] += t >= 0 && dist[t] >= 0;
        }
        if (!out[s]) queue[tail++] = s;
    }
    while (head < tail) {
        int64_t t = queue[head++];
        for (int64_t i = pred_off[t]; i < pred_off[t + 1]; i++) {
            int64_t p = pred[i];
            if (dist[p] < 0) continue;
            if (most[t] + 1 > most[p]) most[p] = most[t] + 1;
            if (--out[p] == 0) queue[tail++] = p;
        }
    }
    for (int64_t s = 0; s < n; s++)
        if (dist[s] >= 0 && out[s]) most[s] = n + 1;  /* reaches a cycle */
    free(out); free(queue);
    return most;
}

/* fsm.trim_and_minimize on a table trans[n * w] (< 0 dead), accept[n]: drop the states that
 * are not reachable from 0 or cannot reach acceptance, then (minimize) merge equivalent ones
 * (from the distance to acceptance: refine). States are numbered as fsm.py numbers
 * them: kept states ascending; classes in the order of their smallest member. Work happens on
 * the table's distinct live columns. Output: cls_of[n] (the new state of each old one, -1
 * gone), rep[m] (the smallest member of each new state) and, where out is given and m < n,
 * the new table in its first m rows (m == n: the table is trans as it is, out untouched);
 * returns m (0: state 0 is dead), or -1 out of memory. */
static int64_t trim_minimize(const int32_t *trans, int64_t n, int64_t w, const uint8_t *accept, int minimize,
                             int64_t *cls_of, int64_t *rep, int32_t *out) {
    int64_t ret = -1;
    int64_t *col_hash = malloc(sizeof(int64_t) * (w > 0 ? w : 1));
    int64_t *col_of = malloc(sizeof(int64_t) * (w > 0 ? w : 1));
    int64_t *cols = NULL, *dist = NULL, *pred_off = NULL, *pred = NULL, *order = NULL, *cls = NULL,
            *next = NULL, *table = NULL, *stack = NULL, *run_of = NULL;
    int64_t runs = 0;
    if (!col_hash || !col_of) goto done;
    /* distinct live columns: col_of[c] = its distinct column, or -1 (dead in every state).
     * First the runs of adjacent columns that no row tells apart (one compare per cell), then
     * the runs' first columns hashed row by row, each run matched to the first run of its
     * hash and the match checked in a second pass. Equal columns left apart (not adjacent,
     * or a hash collision) cost work, not correctness. */
    uint8_t *cut = calloc(w + 1, 1), *live_col = calloc(w + 1, 1), *bad = calloc(w + 1, 1);
    int64_t *first = NULL, *match = NULL;
    run_of = malloc(sizeof(int64_t) * (w + 1));
    int64_t cap = 1;
    while (cap < 2 * w) cap <<= 1;
    first = malloc(sizeof(int64_t) * cap);
    match = malloc(sizeof(int64_t) * (w + 1));
    if (!cut || !live_col || !bad || !run_of || !first || !match) {
        free(cut); free(live_col); free(bad); free(first); free(match);
        goto done;
    }
    if (w) cut[0] = 1;
    for (int64_t s = 0; s < n; s++) {
        const int32_t *row = trans + s * w;
        for (int64_t c = 1; c < w; c++) cut[c] |= row[c] != row[c - 1];
    }
    for (int64_t c = 0; c < w; c++) { /* run_of[r] = run r's first column; cut[c] its run */
        if (cut[c]) run_of[runs++] = c;
        col_of[c] = runs - 1;
    }
    for (int64_t r = 0; r < runs; r++) col_hash[r] = (int64_t)1469598103934665603ull;
    for (int64_t s = 0; s < n; s++) {
        const int32_t *row = trans + s * w;
        for (int64_t r = 0; r < runs; r++) {
            int32_t t = row[run_of[r]];
            live_col[r] |= t >= 0;
            col_hash[r] = (int64_t)(((uint64_t)col_hash[r] ^ (uint64_t)(t + 2)) * 1099511628211ull);
        }
    }
    for (int64_t j = 0; j < cap; j++) first[j] = -1;
    for (int64_t r = 0; r < runs; r++) { /* match[r] = the first live run of its hash */
        match[r] = -1;
        if (!live_col[r]) continue;
        int64_t j = (int64_t)((uint64_t)col_hash[r] >> 7) & (cap - 1);
        while (first[j] >= 0 && col_hash[first[j]] != col_hash[r]) j = (j + 1) & (cap - 1);
        if (first[j] < 0) first[j] = r;
        match[r] = first[j];
    }
    for (int64_t s = 0; s < n; s++) {
        const int32_t *row = trans + s * w;
        for (int64_t r = 0; r < runs; r++)
            if (match[r] >= 0 && match[r] != r && row[run_of[r]] != row[run_of[match[r]]]) bad[r] = 1;
    }
    int64_t nc = 0;
    for (int64_t r = 0; r < runs; r++) { /* number the distinct columns in order */
        if (match[r] < 0) continue;
        if (match[r] == r || bad[r]) match[r] = -2 - nc++;  /* -2 - k: distinct column k */
        else match[r] = match[match[r]];
    }
    for (int64_t c = 0; c < w; c++) {
        int64_t k = match[col_of[c]];
        col_of[c] = k <= -2 ? -2 - k : -1;
    }
    free(cut); free(live_col); free(bad); free(first); free(match);
    cols = malloc(sizeof(int64_t) * (nc > 0 ? nc : 1)); /* a source column of each distinct one */
    dist = malloc(sizeof(int64_t) * n);
    pred_off = calloc(n + 1, sizeof(int64_t));
    pred = malloc(sizeof(int64_t) * (n * nc > 0 ? n * nc : 1));
    order = malloc(sizeof(int64_t) * n);
    stack = malloc(sizeof(int64_t) * n);
    if (!cols || !dist || !pred_off || !pred || !order || !stack) goto done;
    for (int64_t c = w - 1; c >= 0; c--)
        if (col_of[c] >= 0) cols[col_of[c]] = c;
    /* predecessors, then breadth-first backwards from the accepting states */
    for (int64_t s = 0; s < n; s++)
        for (int64_t k = 0; k < nc; k++) {
            int32_t t = trans[s * w + cols[k]];
            if (t >= 0) pred_off[t + 1]++;
        }
    for (int64_t s = 0; s < n; s++) pred_off[s + 1] += pred_off[s];
    for (int64_t s = 0; s < n; s++) order[s] = pred_off[s];
    for (int64_t s = 0; s < n; s++)
        for (int64_t k = 0; k < nc; k++) {
            int32_t t = trans[s * w + cols[k]];
            if (t >= 0) pred[order[t]++] = s;
        }
    int64_t head = 0, tail = 0;
    for (int64_t s = 0; s < n; s++) {
        dist[s] = accept[s] ? 0 : -1;
        if (accept[s]) order[tail++] = s;
    }
    while (head < tail) {
        int64_t t = order[head++];
        for (int64_t i = pred_off[t]; i < pred_off[t + 1]; i++)
            if (dist[pred[i]] < 0) {
                dist[pred[i]] = dist[t] + 1;
                order[tail++] = pred[i];
            }
    }
    for (int64_t s = 0; s < n; s++) cls_of[s] = -1;
    if (n == 0 || dist[0] < 0) { ret = 0; goto done; }
    /* reachable from 0 through live states; kept ones numbered ascending */
    int64_t top = 0, kept = 0;
    cls_of[0] = 0;
    stack[top++] = 0;
    while (top) {
        int64_t s = stack[--top];
        for (int64_t k = 0; k < nc; k++) {
            int32_t t = trans[s * w + cols[k]];
            if (t >= 0 && dist[t] >= 0 && cls_of[t] < 0) {
                cls_of[t] = 0;
                stack[top++] = t;
            }
        }
    }
    for (int64_t s = 0; s < n; s++)
        if (cls_of[s] == 0) order[kept++] = s; /* order: kept states ascending */
    cls = malloc(sizeof(int64_t) * n);
    next = malloc(sizeof(int64_t) * n);
    if (!cls || !next) goto done;
    for (int64_t i = 0; i < kept; i++) cls_of[order[i]] = i; /* old state -> kept index */
    /* classes: the shortest and the longest way to acceptance, then refined by successors'
     * classes (over the kept states' table of distinct columns, built only to minimize) */
    for (int64_t i = 0; i < kept; i++) cls[i] = i;
    if (minimize) {
        table = malloc(sizeof(int64_t) * (kept * nc > 0 ? kept * nc : 1));
        if (!table) goto done;
        for (int64_t i = 0; i < kept; i++)
            for (int64_t k = 0; k < nc; k++) {
                int32_t t = trans[order[i] * w + cols[k]];
                table[i * nc + k] = t >= 0 && dist[t] >= 0 ? cls_of[t] : -1;
            }
        int64_t *most = longest_to_accept(trans, n, w, cols, nc, accept, dist, pred_off, pred);
        Keyed *keyed = malloc(sizeof(Keyed) * (kept ? kept : 1));
        if (!most || !keyed) { free(most); free(keyed); goto done; }
        for (int64_t i = 0; i < kept; i++) {
            keyed[i].h = (uint64_t)dist[order[i]] * (uint64_t)(n + 2) + (uint64_t)most[order[i]];
            keyed[i].i = i;
        }
        qsort(keyed, kept, sizeof(Keyed), by_key);
        int64_t classes = 0;
        for (int64_t x = 0; x < kept; x++) {
            if (x && keyed[x].h != keyed[x - 1].h) classes++;
            cls[keyed[x].i] = classes;
        }
        free(most); free(keyed);
        if (refine(table, kept, nc, cls, kept ? classes + 1 : 0) < 0) goto done;
    }
    /* classes renumbered by their smallest member (kept order ascends with the old states) */
    for (int64_t i = 0; i < kept; i++) next[i] = -1;
    int64_t m = 0;
    for (int64_t i = 0; i < kept; i++) {
        if (next[cls[i]] < 0) {
            next[cls[i]] = m;
            rep[m++] = order[i];
        }
    }
    for (int64_t i = 0; i < kept; i++) cls_of[order[i]] = next[cls[i]];
    /* the new table: each class's smallest member's row, renumbered (dead: -1), one lookup
     * per run (every row is constant on it); none where every state stays as it was (m == n:
     * all kept, each its own class, numbered as before), the table then being trans itself */
    if (out && m < n)
        for (int64_t i = 0; i < m; i++) {
            const int32_t *src = trans + rep[i] * w;
            int32_t *dst = out + i * w;
            for (int64_t r = 0; r < runs; r++) {
                int32_t t = src[run_of[r]], v = t >= 0 ? (int32_t)cls_of[t] : -1;
                for (int64_t c = run_of[r], e = r + 1 < runs ? run_of[r + 1] : w; c < e; c++) dst[c] = v;
            }
        }
    ret = m;
done:
    free(col_hash); free(col_of); free(cols); free(dist); free(pred_off); free(pred); free(order); free(stack);
    free(cls); free(next); free(table); free(run_of);
    return ret;
}

/* trim_minimize(trans i32 [n, w], accept bool [n], minimize, cls_of i64 [n], rep i64 [n],
 *               out i32 [n, w] or None) -> m (0: the start state is dead) */
static PyObject *py_trim_minimize(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) { PyErr_SetString(PyExc_TypeError, "trim_minimize takes 6 arguments"); return NULL; }
    enum { N_VIEWS = 5 };
    static const int arg_of[N_VIEWS] = {0, 1, 3, 4, 5};
    Py_buffer views[N_VIEWS];
    int has_out = args[5] != Py_None, got = 0;
    for (; got < N_VIEWS; got++) {
        views[got].obj = NULL;
        if (arg_of[got] == 5 && !has_out) continue;
        if (row_view(args[arg_of[got]], &views[got], 0, got >= 2) < 0) break;
    }
    PyObject *out = NULL;
    if (got == N_VIEWS) {
        int64_t n = views[1].len, w = n ? views[0].len / 4 / n : 0;
        if (views[0].len != n * w * 4 || views[2].len < n * 8 || views[3].len < n * 8
            || (has_out && views[4].len < n * w * 4)) {
            PyErr_SetString(PyExc_ValueError, "trim_minimize: trans must be int32 [len(accept), w], "
                            "cls_of and rep int64 [len(accept)], out int32 like trans");
        } else {
            int minimize = PyObject_IsTrue(args[2]);
            int64_t m;
            Py_BEGIN_ALLOW_THREADS
            m = trim_minimize(views[0].buf, n, w, views[1].buf, minimize, views[2].buf, views[3].buf,
                              has_out ? views[4].buf : NULL);
            Py_END_ALLOW_THREADS
            out = m < 0 ? PyErr_NoMemory() : PyLong_FromLongLong(m);
        }
    }
    for (int i = 0; i < got; i++)
        if (views[i].obj) PyBuffer_Release(&views[i]);
    return out;
}

/* ---- the pushdown automaton's global table ------------------------------------------------ */

/* stack_rules(tables [i32 [n_k, w_k >= 256]], out i32 [N, 256], one i32 [N], one_next i32 [N])
 * -> None: the rules' byte columns one under the other, each rule's states moved by the rows
 * above it (dead stays -1); one[g] = position g's only live byte, or -1 where none or several;
 * one_next[g] = out[g, one[g]] (byte 0's cell where one[g] is -1). */
static PyObject *py_stack_rules(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "stack_rules takes 4 arguments"); return NULL; }
    PyObject *seq = PySequence_Fast(args[0], "stack_rules: tables must be a sequence");
    if (!seq) return NULL;
    Py_buffer out, one, one_next;
    if (row_view(args[1], &out, 0, 1) < 0) { Py_DECREF(seq); return NULL; }
    if (row_view(args[2], &one, out.len / 256, 1) < 0) {
        PyBuffer_Release(&out); Py_DECREF(seq); return NULL;
    }
    if (row_view(args[3], &one_next, out.len / 256, 1) < 0) {
        PyBuffer_Release(&out); PyBuffer_Release(&one); Py_DECREF(seq); return NULL;
    }
    int64_t rows = out.len / 4 / 256, at = 0;
    int ok = out.len % (4 * 256) == 0;
    for (Py_ssize_t k = 0; ok && k < PySequence_Fast_GET_SIZE(seq); k++) {
        Py_buffer t;
        if (row_view(PySequence_Fast_GET_ITEM(seq, k), &t, 0, 0) < 0) { ok = -1; break; }
        int64_t n = t.shape && t.ndim == 2 ? t.shape[0] : -1, w = n >= 0 ? t.shape[1] : 0;
        if (n < 0 || w < 256 || t.itemsize != 4 || at + n > rows) {
            PyBuffer_Release(&t);
            ok = 0;
            break;
        }
        const int32_t *src = t.buf;
        int32_t *dst = (int32_t *)out.buf + at * 256, *first = (int32_t *)one.buf + at;
        int32_t *after = (int32_t *)one_next.buf + at;
        Py_BEGIN_ALLOW_THREADS
        const int32_t shift = (int32_t)at;
        for (int64_t q = 0; q < n; q++) {
            const int32_t *row = src + q * w;
            int32_t *to = dst + q * 256, live = 0;
            for (int b = 0; b < 256; b++) { /* branch-free: vectorizes */
                int32_t x = row[b], keep = x >> 31; /* -1 where dead, else 0 */
                to[b] = (x + shift) | keep;
                live += 1 + keep;
            }
            int byte = -1;
            if (live == 1)
                for (int b = 0; b < 256 && byte < 0; b++) if (row[b] >= 0) byte = b;
            first[q] = byte;
            after[q] = to[byte >= 0 ? byte : 0];
        }
        Py_END_ALLOW_THREADS
        at += n;
        PyBuffer_Release(&t);
    }
    if (ok == 1 && at != rows) ok = 0;
    PyBuffer_Release(&out); PyBuffer_Release(&one); PyBuffer_Release(&one_next); Py_DECREF(seq);
    if (ok == 1) Py_RETURN_NONE;
    if (ok == 0) PyErr_SetString(PyExc_ValueError, "stack_rules: tables must be int32 [n, >= 256] filling out");
    return NULL;
}

/* ---- leaf states of one language ---------------------------------------------------------- */

/* A DFA as the two functions below read it: trans[s * stride + b] (< 0: dead), accept[s], and
 * starts[s * 256 + b] (what byte b adds to a count in state s; NULL: no counts). */
typedef struct { const int32_t *trans; int64_t stride, n; const uint8_t *accept, *starts; } Dfa;

/* args[at..at + 3] = (trans i32 [S, >= 256], accept bool [S], starts u8 [S, 256] or None, q):
 * views taken into v[0..2] (v[2].obj NULL without starts); 0, or -1 with an error set. */
static int dfa_views(PyObject *const *args, Py_buffer *v, Dfa *d, int32_t *q) {
    long long state = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return -1;
    v[0].obj = v[1].obj = v[2].obj = NULL;
    if (row_view(args[0], &v[0], 0, 0) < 0) return -1;
    if (row_view(args[1], &v[1], 0, 0) < 0) { PyBuffer_Release(&v[0]); return -1; }
    d->n = v[1].len;
    d->stride = d->n ? v[0].len / 4 / d->n : 256;
    int ok = d->stride >= 256 && v[0].len == d->n * d->stride * 4 && state >= 0 && state < d->n;
    if (ok && args[2] != Py_None) {
        if (row_view(args[2], &v[2], 0, 0) < 0) { PyBuffer_Release(&v[0]); PyBuffer_Release(&v[1]); return -1; }
        ok = v[2].len == d->n * 256;
    }
    if (!ok) {
        for (int i = 0; i < 3; i++) if (v[i].obj) PyBuffer_Release(&v[i]);
        PyErr_SetString(PyExc_ValueError, "a DFA must be trans i32 [S, >= 256], accept bool [S], starts u8 [S, 256] and 0 <= q < S");
        return -1;
    }
    d->trans = v[0].buf;
    d->accept = v[1].buf;
    d->starts = v[2].obj ? v[2].buf : NULL;
    *q = (int32_t)state;
    return 0;
}

/* The states reachable from q numbered in breadth-first order, bytes ascending: two states
 * whose reachable automata are the same up to renaming (in minimal DFAs: the same language
 * from there) number alike, and every walk of the vocabulary from them is the same. A hash of
 * that numbered automaton (accepting flags, targets, counts) into *hash; the states reached,
 * or -1 past `most` (the hash is then not made: hashing costs what the states hold). */
static int64_t right_hash(const Dfa *d, int32_t q, int64_t most, uint64_t *hash) {
    int32_t *order = malloc(sizeof *order * (size_t)d->n), *queue = malloc(sizeof *queue * (size_t)d->n);
    if (!order || !queue) { free(order); free(queue); return -2; }
    for (int64_t i = 0; i < d->n; i++) order[i] = -1;
    int64_t head = 0, tail = 0;
    uint64_t lane[4] = {0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull, 0x2545f4914f6cdd1dull};
    order[q] = 0;
    queue[tail++] = q;
    while (head < tail) {
        int32_t s = queue[head++];
        const int32_t *row = d->trans + (int64_t)s * d->stride;
        const uint8_t *rise = d->starts ? d->starts + (int64_t)s * 256 : NULL;
        lane[0] = (lane[0] + (uint64_t)d->accept[s] + 1) * 0x100000001b3ull;
        for (int b = 0; b < 256; b += 4) { /* four lanes: no chain of multiplies through the row */
            for (int k = 0; k < 4; k++) {
                int32_t t = row[b + k];
                uint64_t x = 0;
                if (t >= 0) {
                    if (order[t] < 0) {
                        if (tail == most) { free(order); free(queue); return -1; }
                        order[t] = (int32_t)tail;
                        queue[tail++] = t;
                    }
                    x = (uint64_t)order[t] + 1;
                }
                if (rise) x |= (uint64_t)rise[b + k] << 40;
                lane[k] = (lane[k] + x) * 0x100000001b3ull;
            }
        }
    }
    uint64_t h = 0;
    for (int k = 0; k < 4; k++) { h = (h ^ lane[k]) * 0xff51afd7ed558ccdull; h ^= h >> 33; }
    free(order);
    free(queue);
    *hash = h;
    return tail;
}

/* Whether state qa of a and qb of b number alike (right_hash's order): both breadth-first
 * walks at once, every pair of states met compared (accepting, counts, which bytes lead where). */
static int same_right(const Dfa *a, int32_t qa, const Dfa *b, int32_t qb) {
    int32_t *in_a = malloc(sizeof *in_a * (size_t)a->n), *in_b = malloc(sizeof *in_b * (size_t)b->n);
    int32_t *queue = malloc(sizeof *queue * (size_t)(a->n < b->n ? a->n : b->n) * 2);
    int same = in_a && in_b && queue ? 1 : -1;
    if (same < 0) { free(in_a); free(in_b); free(queue); return same; }
    for (int64_t i = 0; i < a->n; i++) in_a[i] = -1;
    for (int64_t i = 0; i < b->n; i++) in_b[i] = -1;
    int64_t head = 0, tail = 0, cap = a->n < b->n ? a->n : b->n;
    in_a[qa] = in_b[qb] = 0;
    queue[0] = qa;
    queue[1] = qb;
    tail = 1;
    while (same && head < tail) {
        int32_t sa = queue[2 * head], sb = queue[2 * head + 1];
        head++;
        const int32_t *ra = a->trans + (int64_t)sa * a->stride, *rb = b->trans + (int64_t)sb * b->stride;
        same = a->accept[sa] == b->accept[sb]
            && (!a->starts == !b->starts)
            && (!a->starts || !memcmp(a->starts + (int64_t)sa * 256, b->starts + (int64_t)sb * 256, 256));
        for (int c = 0; same && c < 256; c++) {
            int32_t ta = ra[c], tb = rb[c];
            if (ta < 0 || tb < 0) { same = ta < 0 && tb < 0; continue; }
            if (in_a[ta] < 0 && in_b[tb] < 0) {
                if (tail == cap) { same = 0; break; }
                in_a[ta] = in_b[tb] = (int32_t)tail;
                queue[2 * tail] = ta;
                queue[2 * tail + 1] = tb;
                tail++;
            } else {
                same = in_a[ta] == in_b[tb];
            }
        }
    }
    free(in_a); free(in_b); free(queue);
    return same;
}

/* right_hash(trans, accept, starts or None, q, most) -> (hash, states) or None past `most` states */
static PyObject *py_right_hash(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) { PyErr_SetString(PyExc_TypeError, "right_hash takes 5 arguments"); return NULL; }
    long long most = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer v[3];
    Dfa d;
    int32_t q;
    if (dfa_views(args, v, &d, &q) < 0) return NULL;
    uint64_t h = 0;
    int64_t n = right_hash(&d, q, most, &h);
    for (int i = 0; i < 3; i++) if (v[i].obj) PyBuffer_Release(&v[i]);
    if (n == -2) return PyErr_NoMemory();
    if (n < 0) Py_RETURN_NONE;
    return Py_BuildValue("(KL)", (unsigned long long)h, (long long)n);
}

/* same_right(trans_a, accept_a, starts_a or None, qa, trans_b, accept_b, starts_b or None, qb) -> bool */
static PyObject *py_same_right(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) { PyErr_SetString(PyExc_TypeError, "same_right takes 8 arguments"); return NULL; }
    Py_buffer va[3], vb[3];
    Dfa a, b;
    int32_t qa, qb;
    if (dfa_views(args, va, &a, &qa) < 0) return NULL;
    if (dfa_views(args + 4, vb, &b, &qb) < 0) {
        for (int i = 0; i < 3; i++) if (va[i].obj) PyBuffer_Release(&va[i]);
        return NULL;
    }
    int same = same_right(&a, qa, &b, qb);
    for (int i = 0; i < 3; i++) {
        if (va[i].obj) PyBuffer_Release(&va[i]);
        if (vb[i].obj) PyBuffer_Release(&vb[i]);
    }
    if (same < 0) return PyErr_NoMemory();
    return PyBool_FromLong(same);
}

/* ---- fewest bytes to acceptance --------------------------------------------------------- */

typedef struct { int64_t d, q; } HeapItem;

static void heap_push(HeapItem *h, int64_t *n, int64_t d, int64_t q) {
    int64_t i = (*n)++;
    while (i > 0) {
        int64_t up = (i - 1) / 2;
        if (h[up].d <= d) break;
        h[i] = h[up];
        i = up;
    }
    h[i].d = d;
    h[i].q = q;
}

static HeapItem heap_pop(HeapItem *h, int64_t *n) {
    HeapItem top = h[0], last = h[--(*n)];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].d < h[c].d) c++;
        if (h[c].d >= last.d) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* The byte columns of row where an edge starts: alphabet bytes whose target is live and
 * differs from the byte before (or that byte is outside the alphabet), as 1 in edge[256].
 * Plain loops over the whole row that vectorize: rows are most often dead in all but a few
 * bytes, and a byte-by-byte walk with a branch per cell took about twice as long. */
static void byte_edges(const int32_t *row, const uint8_t *alphabet, uint8_t *edge) {
    edge[0] = alphabet[0] & (row[0] >= 0);
    for (int64_t c = 1; c < 256; c++)
        edge[c] = alphabet[c] & (row[c] >= 0) & ((row[c] != row[c - 1]) | !alphabet[c - 1]);
}

/* completion.rule_distances on a table trans[n * w] (< 0 dead), accept[n]: Dijkstra backwards
 * from the accepting states; a byte column allowed by alphabet[256] costs 1, call column
 * 256 + k costs costs[k] (>= unreachable: no edge). dist[n] gets unreachable where no
 * acceptance is reached. Returns 0, or -1 out of memory. */
static int fewest_bytes(const int32_t *trans, int64_t n, int64_t w, const uint8_t *accept,
                        const uint8_t *alphabet, const int64_t *costs, int64_t n_costs,
                        int64_t unreachable, int64_t *dist) {
    int64_t *off = calloc(n + 1, sizeof(int64_t)), *fill = malloc(sizeof(int64_t) * (n ? n : 1));
    int64_t *src = NULL, *weight = NULL;
    HeapItem *heap = NULL;
    uint8_t edge[256];
    int ret = -1;
    if (!off || !fill) goto done;
    /* edges t <- s: a byte stretch's first byte of each target (runs of one target repeat
     * it), each live call */
    for (int pass = 0; pass < 2; pass++) {
        if (pass) {
            for (int64_t q = 0; q < n; q++) off[q + 1] += off[q];
            memcpy(fill, off, sizeof(int64_t) * n);
            src = malloc(sizeof(int64_t) * (off[n] ? off[n] : 1));
            weight = malloc(sizeof(int64_t) * (off[n] ? off[n] : 1));
            if (!src || !weight) goto done;
        }
        for (int64_t s = 0; s < n; s++) {
            const int32_t *row = trans + s * w;
            byte_edges(row, alphabet, edge);
            for (int64_t at = 0; at < 256; at += 8) {
                uint64_t word;  /* eight bytes at once: most are none */
                memcpy(&word, edge + at, 8);
                if (!word) continue;
                for (int64_t c = at; c < at + 8; c++) {
                    if (!edge[c]) continue;
                    int64_t t = row[c];
                    if (t >= n) continue;
                    if (!pass) { off[t + 1]++; continue; }
                    src[fill[t]] = s;
                    weight[fill[t]++] = 1;
                }
            }
            for (int64_t k = 0; k < n_costs && 256 + k < w; k++) {
                int32_t t = row[256 + k];
                if (costs[k] >= unreachable || t < 0 || t >= n) continue;
                if (!pass) { off[t + 1]++; continue; }
                src[fill[t]] = s;
                weight[fill[t]++] = costs[k];
            }
        }
    }
    heap = malloc(sizeof(HeapItem) * (off[n] + n + 1));
    if (!heap) goto done;
    int64_t size = 0;
    for (int64_t q = 0; q < n; q++) {
        dist[q] = accept[q] ? 0 : unreachable;
        if (accept[q]) heap_push(heap, &size, 0, q);
    }
    while (size) {
        HeapItem it = heap_pop(heap, &size);
        if (it.d > dist[it.q]) continue;
        for (int64_t i = off[it.q]; i < off[it.q + 1]; i++) {
            int64_t p = src[i], d = it.d + weight[i];
            if (d < dist[p]) {
                dist[p] = d;
                heap_push(heap, &size, d, p);
            }
        }
    }
    ret = 0;
done:
    free(off); free(fill); free(src); free(weight); free(heap);
    return ret;
}

/* fewest_bytes(trans i32 [n, w], accept bool [n], alphabet bool [256], costs i64 [k],
 * unreachable, dist i64 [n]) -> None */
static PyObject *py_fewest_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) { PyErr_SetString(PyExc_TypeError, "fewest_bytes takes 6 arguments"); return NULL; }
    long long unreachable = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    enum { N_VIEWS = 5 };
    static const int arg_of[N_VIEWS] = {0, 1, 2, 3, 5};
    Py_buffer views[N_VIEWS];
    int got = 0;
    for (; got < N_VIEWS; got++)
        if (row_view(args[arg_of[got]], &views[got], 0, got == 4) < 0) break;
    PyObject *out = NULL;
    if (got == N_VIEWS) {
        int64_t n = views[1].len, w = n ? views[0].len / 4 / n : 256;
        if (views[0].len != n * w * 4 || w < 256 || views[2].len != 256 || views[4].len != n * 8
            || views[3].len % 8) {
            PyErr_SetString(PyExc_ValueError, "fewest_bytes: bad table, alphabet or output");
        } else {
            int r;
            Py_BEGIN_ALLOW_THREADS
            r = fewest_bytes(views[0].buf, n, w, views[1].buf, views[2].buf, views[3].buf,
                             views[3].len / 8, unreachable, views[4].buf);
            Py_END_ALLOW_THREADS
            out = r < 0 ? PyErr_NoMemory() : Py_NewRef(Py_None);
        }
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    return out;
}

/* ---- sparse rows (automaton.fill_words) ------------------------------------------------- */

#define SPARSE_MOST 256

/* The (word index, word) pairs of the nonzero words of a packed row of n words into
 * ``pairs`` (room for 2 * most), their count; -1 where it has more than ``most``. One pass,
 * two words at a time (most pairs of words are both zero), given up at the first live word
 * past ``most``: a dense row costs a few of its words, not all. */
static Py_ssize_t sparse_pairs(const uint32_t *w, Py_ssize_t n, Py_ssize_t most, int32_t *pairs) {
    Py_ssize_t live = 0;
    for (Py_ssize_t i = 0; i < n; i += 2) {
        uint64_t two = i + 1 < n ? (uint64_t)w[i] | (uint64_t)w[i + 1] << 32 : w[i];
        if (!two) continue;
        for (Py_ssize_t j = i; j < i + 2 && j < n; j++) {
            if (!w[j]) continue;
            if (live == most) return -1;
            pairs[2 * live] = (int32_t)j;
            pairs[2 * live + 1] = (int32_t)w[j];
            live++;
        }
    }
    return live;
}

/* sparse_row(row, most) -> bytes of (int32 word index, int32 word) pairs, one per nonzero word
 * of the packed row, or None where it has more than ``most`` (rows are mostly a few live words
 * of thousands: a fill from the pairs reads a few bytes, not the whole row, cold). */
static PyObject *py_sparse_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) { PyErr_SetString(PyExc_TypeError, "sparse_row takes 2 arguments"); return NULL; }
    Py_ssize_t most = PyLong_AsSsize_t(args[1]);
    if (most < 0 || most > SPARSE_MOST) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "sparse_row: most outside 0..256");
        return NULL;
    }
    Py_buffer row;
    if (row_view(args[0], &row, 0, 0) < 0) return NULL;
    int32_t pairs[2 * SPARSE_MOST];
    Py_ssize_t live = sparse_pairs(row.buf, row.len / 4, most, pairs);
    PyBuffer_Release(&row);
    if (live < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)pairs, live * 8);
}

/* fill_sparse(rows, row, pairs[, base]): row ``row`` of the packed rows ``rows`` ([n, W] int32,
 * C order) zeroed, or a copy of the packed row ``base``, then sparse_row's pairs ORed into it
 * (a row kept as a shared dense row plus a few live words of its own) */
static PyObject *py_fill_sparse(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 && nargs != 4) { PyErr_SetString(PyExc_TypeError, "fill_sparse takes 3 or 4 arguments"); return NULL; }
    Py_ssize_t r = PyLong_AsSsize_t(args[1]);
    if (r == -1 && PyErr_Occurred()) return NULL;
    Py_buffer out, pairs, base = {0};
    if (PyObject_GetBuffer(args[0], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return NULL;
    if (row_view(args[2], &pairs, 0, 0) < 0) { PyBuffer_Release(&out); return NULL; }
    int based = nargs == 4 && args[3] != Py_None;
    if (based && row_view(args[3], &base, 0, 0) < 0) {
        PyBuffer_Release(&out); PyBuffer_Release(&pairs); return NULL;
    }
    Py_ssize_t rows = out.ndim == 2 ? out.shape[0] : 1, n = out.ndim == 2 ? out.shape[1] : out.len / 4;
    Py_ssize_t k = pairs.len / 8, bad = out.itemsize != 4 || out.ndim > 2 || r < 0 || r >= rows;
    if (!bad && based && base.len != n * 4) bad = 3;
    if (!bad) {
        uint32_t *w = (uint32_t *)out.buf + r * n;
        const int32_t *p = pairs.buf;
        if (based) memcpy(w, base.buf, (size_t)n * 4);
        else memset(w, 0, (size_t)n * 4);
        for (Py_ssize_t j = 0; j < k; j++) {
            if (p[2 * j] < 0 || p[2 * j] >= n) { bad = 2; break; }
            w[p[2 * j]] |= (uint32_t)p[2 * j + 1];
        }
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&pairs);
    if (based) PyBuffer_Release(&base);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, bad == 2 ? "fill_sparse: a word index outside the row"
                                          : bad == 3 ? "fill_sparse: base is not one row of the rows' width"
                                                     : "fill_sparse: no such row of 4-byte words");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* walk_trie_kept(pda, vocab, configs, close_first, rows, r, most) -> -1 where the walk gives
 * up, else (shallowest depth, pairs): row ``r`` of the packed rows ``rows`` ([n, W] int32, C
 * order) zeroed and walk_trie's tokens set in it, and its sparse_row pairs (None past
 * ``most`` live words): a first visit's fill and the form it is kept in, in one call. */
static PyObject *py_walk_trie_kept(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) { PyErr_SetString(PyExc_TypeError, "walk_trie_kept takes 7 arguments"); return NULL; }
    Py_ssize_t r = PyNumber_AsSsize_t(args[5], PyExc_OverflowError);
    Py_ssize_t most = r == -1 && PyErr_Occurred() ? -1 : PyNumber_AsSsize_t(args[6], PyExc_OverflowError);
    if (PyErr_Occurred()) return NULL;
    if (most < 0 || most > SPARSE_MOST) {
        PyErr_SetString(PyExc_ValueError, "walk_trie_kept: most outside 0..256");
        return NULL;
    }
    const Pda *p;
    const Vocab *v;
    Work *w;
    int64_t n0;
    int ready = begin_walk(args, &p, &v, &w, &n0);
    if (ready <= 0) return ready < 0 ? NULL : PyLong_FromLong(-1);
    int close_first = PyObject_IsTrue(args[3]);
    if (close_first < 0) return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(args[4], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return NULL;
    Py_ssize_t rows = out.ndim == 2 ? out.shape[0] : 1, n = out.ndim == 2 ? out.shape[1] : out.len / 4;
    if (out.itemsize != 4 || out.ndim > 2 || r < 0 || r >= rows || n < (v->id_end + 31) / 32) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "walk_trie_kept: no such row of 4-byte words, or too short");
        return NULL;
    }
    uint32_t *row = (uint32_t *)out.buf + r * n;
    int32_t pairs[2 * SPARSE_MOST];
    int64_t lowest;
    Py_ssize_t live = -1;
    Py_BEGIN_ALLOW_THREADS
    memset(row, 0, (size_t)n * 4);
    lowest = walk_trie(w, p, v, n0, close_first, row, NULL);
    if (lowest >= 0) live = sparse_pairs(row, n, most, pairs);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    if (lowest < 0) return PyLong_FromLong(-1);
    if (live < 0) return Py_BuildValue("(LO)", (long long)lowest, Py_None);
    return Py_BuildValue("(Ly#)", (long long)lowest, (const char *)pairs, live * 8);
}

/* ---- subset construction --------------------------------------------------------------- */

typedef struct { int32_t *data; int64_t len, cap; } Ints;

static int ints_push(Ints *v, int32_t x) {
    if (v->len == v->cap) {
        int64_t cap = v->cap ? 2 * v->cap : 1024;
        int32_t *data = realloc(v->data, sizeof(int32_t) * cap);
        if (!data) return -1;
        v->data = data;
        v->cap = cap;
    }
    v->data[v->len++] = x;
    return 0;
}

static int ints_fill(Ints *v, int64_t k, int32_t x) { /* k copies of x */
    if (v->len + k > v->cap) {
        int64_t cap = v->cap ? v->cap : 1024;
        while (cap < v->len + k) cap *= 2;
        int32_t *data = realloc(v->data, sizeof(int32_t) * cap);
        if (!data) return -1;
        v->data = data;
        v->cap = cap;
    }
    for (int64_t i = 0; i < k; i++) v->data[v->len + i] = x;
    v->len += k;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int64_t n;                            /* NFA states */
    const int64_t *e_off; const int32_t *e_lo, *e_hi, *e_dst;   /* edges by source (CSR) */
    const int64_t *p_off; const int32_t *p_dst;                  /* epsilon moves by source */
    const uint8_t *absorbing;
    uint32_t *stamp; uint32_t gen;        /* closure visits */
    int32_t *stack;
} Nfa;

/* The epsilon closure of set[0..k) into out (sorted); an absorbing member replaces the set by
 * the closure of the smallest one (fsm._absorbed). Returns its size. */
static int64_t eps_closure(Nfa *a, const int32_t *set, int64_t k, int32_t *out, int absorb_pass) {
    if (++a->gen == 0) { memset(a->stamp, 0, sizeof(uint32_t) * a->n); a->gen = 1; }
    int64_t m = 0, top = 0;
    for (int64_t i = 0; i < k; i++)
        if (a->stamp[set[i]] != a->gen) { a->stamp[set[i]] = a->gen; a->stack[top++] = set[i]; out[m++] = set[i]; }
    while (top) {
        int32_t s = a->stack[--top];
        for (int64_t i = a->p_off[s]; i < a->p_off[s + 1]; i++) {
            int32_t t = a->p_dst[i];
            if (a->stamp[t] != a->gen) { a->stamp[t] = a->gen; a->stack[top++] = t; out[m++] = t; }
        }
    }
    qsort(out, m, sizeof(int32_t), cmp_i32);
    if (absorb_pass && a->absorbing) {
        for (int64_t i = 0; i < m; i++)
            if (a->absorbing[out[i]]) {
                int32_t first = out[i];
                return eps_closure(a, &first, 1, out, 0);
            }
    }
    return m;
}

/* Subset construction as fsm.determinize: states in breadth-first order, each one's moves by
 * ascending symbol. Returns the number of DFA states, -2 past max_states, -3 past the
 * deadline, -1 out of memory; *trans_out (rows of width) and *accept_out are malloc'd. */
static int64_t subset_construction(Nfa *a, int32_t start, int32_t final, int64_t width, int64_t max_states,
                                   double seconds, int32_t **trans_out, uint8_t **accept_out) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Ints sets = {0}, trans = {0};
    int64_t *set_off = NULL, n_sets = 0, off_cap = 0, hash_cap = 1024, ret = -1;
    int64_t *slot = malloc(sizeof(int64_t) * hash_cap);
    int32_t *buf = malloc(sizeof(int32_t) * (a->n + 1)), *targets = malloc(sizeof(int32_t) * (a->n + 1));
    int64_t *cuts = NULL, cuts_cap = 0;
    uint8_t *accept = NULL;
    if (!slot || !buf || !targets) goto fail;
    for (int64_t i = 0; i < hash_cap; i++) slot[i] = -1;
    int64_t k = eps_closure(a, &start, 1, buf, 0); /* the start is not absorbed (as fsm.py) */
#define INTERN(SET, K, ID) do {                                                            \
        uint64_t h_ = 1469598103934665603ull;                                             \
        for (int64_t q_ = 0; q_ < (K); q_++) h_ = (h_ ^ (uint32_t)(SET)[q_]) * 1099511628211ull; \
        int64_t j_ = (int64_t)(h_ >> 7) & (hash_cap - 1);                                  \
        (ID) = -1;                                                                         \
        while (slot[j_] >= 0) {                                                            \
            int64_t c_ = slot[j_];                                                         \
            if (set_off[c_ + 1] - set_off[c_] == (K)                                       \
                && !memcmp(sets.data + set_off[c_], (SET), sizeof(int32_t) * (K))) { (ID) = c_; break; } \
            j_ = (j_ + 1) & (hash_cap - 1);                                                \
        }                                                                                  \
        if ((ID) < 0) {                                                                    \
            if (n_sets + 2 > off_cap) {                                                    \
                off_cap = off_cap ? 2 * off_cap : 1024;                                    \
                int64_t *o_ = realloc(set_off, sizeof(int64_t) * off_cap);                  \
                if (!o_) goto fail;                                                        \
                set_off = o_;                                                              \
            }                                                                              \
            if (n_sets == 0) set_off[0] = 0;                                               \
            for (int64_t q_ = 0; q_ < (K); q_++) if (ints_push(&sets, (SET)[q_])) goto fail; \
            set_off[n_sets + 1] = sets.len;                                                \
            slot[j_] = n_sets;                                                             \
            (ID) = n_sets++;                                                               \
            if (ints_fill(&trans, width, -1)) goto fail;                                   \
            if (2 * n_sets > hash_cap) {                                                   \
                int64_t cap_ = 2 * hash_cap;                                               \
                int64_t *s_ = malloc(sizeof(int64_t) * cap_);                              \
                if (!s_) goto fail;                                                        \
                for (int64_t i_ = 0; i_ < cap_; i_++) s_[i_] = -1;                         \
                for (int64_t c_ = 0; c_ < n_sets; c_++) {                                  \
                    uint64_t g_ = 1469598103934665603ull;                                  \
                    for (int64_t q_ = set_off[c_]; q_ < set_off[c_ + 1]; q_++)             \
                        g_ = (g_ ^ (uint32_t)sets.data[q_]) * 1099511628211ull;            \
                    int64_t i_ = (int64_t)(g_ >> 7) & (cap_ - 1);                          \
                    while (s_[i_] >= 0) i_ = (i_ + 1) & (cap_ - 1);                        \
                    s_[i_] = c_;                                                           \
                }                                                                          \
                free(slot); slot = s_; hash_cap = cap_;                                    \
            }                                                                              \
        }                                                                                  \
    } while (0)
    int64_t first_id;
    INTERN(buf, k, first_id);
    (void)first_id;
    for (int64_t d = 0; d < n_sets; d++) {
        if (n_sets > max_states) { ret = -2; goto fail; }
        if ((d & 63) == 63) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9 > seconds) { ret = -3; goto fail; }
        }
        /* the member edges' range ends, ascending: each piece between two is one move */
        int64_t n_cuts = 0;
        for (int64_t q = set_off[d]; q < set_off[d + 1]; q++) {
            int32_t s = sets.data[q];
            for (int64_t e = a->e_off[s]; e < a->e_off[s + 1]; e++) {
                if (n_cuts + 2 > cuts_cap) {
                    cuts_cap = cuts_cap ? 2 * cuts_cap : 256;
                    int64_t *c = realloc(cuts, sizeof(int64_t) * cuts_cap);
                    if (!c) goto fail;
                    cuts = c;
                }
                cuts[n_cuts++] = a->e_lo[e];
                cuts[n_cuts++] = (int64_t)a->e_hi[e] + 1;
            }
        }
        if (!n_cuts) continue;
        qsort(cuts, n_cuts, sizeof(int64_t), cmp_i64);
        for (int64_t c = 0; c + 1 < n_cuts; c++) {
            int64_t lo = cuts[c], hi = cuts[c + 1];
            if (lo == hi) continue;
            int64_t nt = 0;
            for (int64_t q = set_off[d]; q < set_off[d + 1]; q++) {
                int32_t s = sets.data[q];
                for (int64_t e = a->e_off[s]; e < a->e_off[s + 1]; e++)
                    if (a->e_lo[e] <= lo && lo <= a->e_hi[e]) targets[nt++] = a->e_dst[e];
            }
            if (!nt) continue;
            int64_t kk = eps_closure(a, targets, nt, buf, 1), id;
            INTERN(buf, kk, id);
            for (int64_t x = lo; x < hi && x < width; x++) trans.data[d * width + x] = (int32_t)id;
        }
    }
#undef INTERN
    accept = malloc(n_sets ? n_sets : 1);
    if (!accept) goto fail;
    for (int64_t d = 0; d < n_sets; d++) {
        accept[d] = 0;
        int32_t *lo = sets.data + set_off[d], *hi = sets.data + set_off[d + 1];
        accept[d] = bsearch(&final, lo, hi - lo, sizeof(int32_t), cmp_i32) != NULL;
    }
    *trans_out = trans.data;
    *accept_out = accept;
    free(sets.data); free(set_off); free(slot); free(buf); free(targets); free(cuts);
    return n_sets;
fail:
    free(sets.data); free(set_off); free(slot); free(buf); free(targets); free(cuts); free(trans.data);
    free(accept);
    return ret;
}

/* fsm.product: the pairs (state of a, state of b or -1 once b is dead) reachable from (0, 0),
 * numbered as fsm.py numbers them (breadth first; a row's new pairs in ascending order of
 * a * (nb + 1) + b + 1). mode 0: both live (intersection); 1: a live (a minus b). Returns the
 * number of states, -1 out of memory, -2 past max_states, -3 past the time. */
static int64_t product_pairs(const int32_t *ta, int64_t wa, const uint8_t *acc_a,
                             const int32_t *tb, int64_t nb, int64_t wb, const uint8_t *acc_b, int diff,
                             int64_t max_states, double seconds, int32_t **trans_out, uint8_t **accept_out) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t cap = 1024, n = 0, hash_cap = 4096, ret = -1;
    int64_t *key = malloc(sizeof(int64_t) * cap), *slot = malloc(sizeof(int64_t) * hash_cap);
    int32_t *trans = NULL;
    int64_t row_keys[256], uniq[256];
    if (!key || !slot) goto fail;
    for (int64_t i = 0; i < hash_cap; i++) slot[i] = -1;
    trans = malloc(sizeof(int32_t) * 256 * cap);
    if (!trans) goto fail;
    const int64_t span = nb + 1;
#define LOOKUP(K, J) do {                                                                  \
        (J) = (int64_t)(((uint64_t)(K) * 0x9E3779B97F4A7C15ull) >> 20) & (hash_cap - 1);     \
        while (slot[(J)] >= 0 && key[slot[(J)]] != (K)) (J) = ((J) + 1) & (hash_cap - 1);    \
    } while (0)
    key[n++] = 0 * span + 0 + 1; /* (0, 0) */
    { int64_t j; LOOKUP(key[0], j); slot[j] = 0; }
    for (int64_t d = 0; d < n; d++) {
        if ((d & 63) == 63) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9 > seconds) { ret = -3; goto fail; }
        }
        int64_t sa = key[d] / span, sb = key[d] % span - 1, m = 0;
        const int32_t *ra = ta + sa * wa, *rb = sb >= 0 ? tb + sb * wb : NULL;
        for (int c = 0; c < 256; c++) { /* a run of one pair is listed once: rows run long */
            int32_t x = ra[c], y = rb ? rb[c] : -1;
            row_keys[c] = x >= 0 && (diff || y >= 0) ? (int64_t)x * span + y + 1 : -1;
            if (row_keys[c] >= 0 && (c == 0 || row_keys[c] != row_keys[c - 1])) uniq[m++] = row_keys[c];
        }
        qsort(uniq, m, sizeof(int64_t), cmp_i64);
        for (int64_t i = 0; i < m; i++) { /* new pairs in ascending order */
            if (i && uniq[i] == uniq[i - 1]) continue;
            int64_t j;
            LOOKUP(uniq[i], j);
            if (slot[j] >= 0) continue;
            if (n >= max_states) { ret = -2; goto fail; }
            if (n == cap) {
                cap *= 2;
                int64_t *k2 = realloc(key, sizeof(int64_t) * cap);
                if (!k2) goto fail;
                key = k2;
                int32_t *t2 = realloc(trans, sizeof(int32_t) * 256 * cap);
                if (!t2) goto fail;
                trans = t2;
            }
            key[n] = uniq[i];
            slot[j] = n++;
            if (2 * n > hash_cap) { /* grow and rehash */
                int64_t *s2 = malloc(sizeof(int64_t) * 2 * hash_cap);
                if (!s2) goto fail;
                free(slot);
                slot = s2;
                hash_cap *= 2;
                for (int64_t x = 0; x < hash_cap; x++) slot[x] = -1;
                for (int64_t x = 0; x < n; x++) { int64_t jj; LOOKUP(key[x], jj); slot[jj] = x; }
            }
        }
        int32_t id = -1;
        for (int c = 0; c < 256; c++) { /* looked up once a run */
            if (c == 0 || row_keys[c] != row_keys[c - 1]) {
                id = -1;
                if (row_keys[c] >= 0) { int64_t j; LOOKUP(row_keys[c], j); id = (int32_t)slot[j]; }
            }
            trans[d * 256 + c] = id;
        }
    }
#undef LOOKUP
    uint8_t *accept = malloc(n ? n : 1);
    if (!accept) goto fail;
    for (int64_t d = 0; d < n; d++) {
        int64_t sa = key[d] / span, sb = key[d] % span - 1;
        int in_b = sb >= 0 && acc_b[sb];
        accept[d] = acc_a[sa] && (diff ? !in_b : in_b);
    }
    free(key); free(slot);
    *trans_out = trans;
    *accept_out = accept;
    return n;
fail:
    free(key); free(slot); free(trans);
    return ret;
}

/* product(a_trans i32 [na, >= 256], a_accept bool [na], b_trans i32 [nb, >= 256], b_accept
 * bool [nb], diff, max_states, seconds) -> (trans bytes [m, 256], accept bytes [m]) or an
 * int: -2 past max_states, -3 past the time */
static PyObject *py_product(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) { PyErr_SetString(PyExc_TypeError, "product takes 7 arguments"); return NULL; }
    int diff = PyObject_IsTrue(args[4]);
    int64_t max_states = PyLong_AsLongLong(args[5]);
    double seconds = PyFloat_AsDouble(args[6]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer v[4];
    int got = 0;
    for (; got < 4; got++)
        if (row_view(args[got], &v[got], 0, 0) < 0) break;
    PyObject *out = NULL;
    if (got == 4) {
        int64_t na = v[1].len, nb = v[3].len;
        int64_t wa = na ? v[0].len / 4 / na : 0, wb = nb ? v[2].len / 4 / nb : 0;
        int ok = na > 0 && nb > 0 && wa >= 256 && wb >= 256 && v[0].len == na * wa * 4 && v[2].len == nb * wb * 4;
        const int32_t *ta = v[0].buf, *tb = v[2].buf;
        for (int64_t q = 0; ok && q < na; q++)
            for (int c = 0; c < 256 && ok; c++) ok = ta[q * wa + c] < na;
        for (int64_t q = 0; ok && q < nb; q++)
            for (int c = 0; c < 256 && ok; c++) ok = tb[q * wb + c] < nb;
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "product: tables must be int32 [len(accept), >= 256] of their own states");
        } else {
            int32_t *trans = NULL;
            uint8_t *accept = NULL;
            int64_t m;
            Py_BEGIN_ALLOW_THREADS
            m = product_pairs(ta, wa, v[1].buf, tb, nb, wb, v[3].buf, diff, max_states, seconds, &trans, &accept);
            Py_END_ALLOW_THREADS
            if (m >= 0)
                out = Py_BuildValue("(y#y#)", (const char *)trans, (Py_ssize_t)(m * 256 * 4),
                                    (const char *)accept, (Py_ssize_t)m);
            else
                out = m == -1 ? PyErr_NoMemory() : PyLong_FromLongLong(m);
            free(trans); free(accept);
        }
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return out;
}

static int64_t *csr(const int32_t *src, int64_t m, int64_t n, int64_t **order_out) {
    int64_t *off = calloc(n + 1, sizeof(int64_t)), *order = malloc(sizeof(int64_t) * (m ? m : 1));
    int64_t *at = malloc(sizeof(int64_t) * (n + 1));
    if (!off || !order || !at) { free(off); free(order); free(at); return NULL; }
    for (int64_t i = 0; i < m; i++) off[src[i] + 1]++;
    for (int64_t s = 0; s < n; s++) off[s + 1] += off[s];
    memcpy(at, off, sizeof(int64_t) * (n + 1));
    for (int64_t i = 0; i < m; i++) order[at[src[i]]++] = i;
    free(at);
    *order_out = order;
    return off;
}

/* determinize(n, start, final, edge_src, edge_lo, edge_hi, edge_dst, eps_src, eps_dst (i32),
 *             absorbing bool [n], width, max_states, seconds) -> (trans bytes, accept bytes)
 * or an int: -2 past max_states, -3 past the time */
static PyObject *py_determinize(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 13) { PyErr_SetString(PyExc_TypeError, "determinize takes 13 arguments"); return NULL; }
    int64_t n = PyLong_AsLongLong(args[0]);
    int32_t start = (int32_t)PyLong_AsLong(args[1]), final = (int32_t)PyLong_AsLong(args[2]);
    int64_t width = PyLong_AsLongLong(args[10]), max_states = PyLong_AsLongLong(args[11]);
    double seconds = PyFloat_AsDouble(args[12]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer v[7];
    int got = 0;
    for (; got < 7; got++)
        if (row_view(args[3 + got], &v[got], 0, 0) < 0) break;
    PyObject *out = NULL;
    if (got == 7) {
        int64_t m = v[0].len / 4, p = v[4].len / 4;
        const int32_t *es = v[0].buf, *elo = v[1].buf, *ehi = v[2].buf, *ed = v[3].buf, *ps = v[4].buf, *pd = v[5].buf;
        int ok = v[1].len == m * 4 && v[2].len == m * 4 && v[3].len == m * 4 && v[5].len == p * 4
                 && v[6].len == n && start >= 0 && start < n && width > 0;
        for (int64_t i = 0; ok && i < m; i++) ok = es[i] >= 0 && es[i] < n && ed[i] >= 0 && ed[i] < n && elo[i] <= ehi[i];
        for (int64_t i = 0; ok && i < p; i++) ok = ps[i] >= 0 && ps[i] < n && pd[i] >= 0 && pd[i] < n;
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "determinize: malformed NFA arrays");
        } else {
            int64_t *e_order = NULL, *p_order = NULL;
            int64_t *e_off = csr(es, m, n, &e_order), *p_off = csr(ps, p, n, &p_order);
            int32_t *e_lo = malloc(4 * (m ? m : 1)), *e_hi = malloc(4 * (m ? m : 1)), *e_dst = malloc(4 * (m ? m : 1));
            int32_t *p_dst = malloc(4 * (p ? p : 1)), *stack = malloc(4 * (n + 1));
            uint32_t *stamp = calloc(n + 1, 4);
            int32_t *trans = NULL;
            uint8_t *accept = NULL;
            int64_t states = -1;
            if (e_off && p_off && e_lo && e_hi && e_dst && p_dst && stack && stamp) {
                for (int64_t i = 0; i < m; i++) {
                    e_lo[i] = elo[e_order[i]]; e_hi[i] = ehi[e_order[i]]; e_dst[i] = ed[e_order[i]];
                }
                for (int64_t i = 0; i < p; i++) p_dst[i] = pd[p_order[i]];
                Nfa a = {n, e_off, e_lo, e_hi, e_dst, p_off, p_dst, v[6].buf, stamp, 0, stack};
                if (final < 0 || final >= n) final = -1;
                Py_BEGIN_ALLOW_THREADS
                states = subset_construction(&a, start, final, width, max_states, seconds, &trans, &accept);
                Py_END_ALLOW_THREADS
            }
            if (states >= 0) {
                out = Py_BuildValue("(y#y#)", (const char *)trans, (Py_ssize_t)(states * width * 4),
                                    (const char *)accept, (Py_ssize_t)states);
            } else if (states == -1) {
                PyErr_NoMemory();
            } else {
                out = PyLong_FromLongLong(states);
            }
            free(e_off); free(p_off); free(e_order); free(p_order); free(e_lo); free(e_hi); free(e_dst);
            free(p_dst); free(stack); free(stamp); free(trans); free(accept);
        }
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return out;
}

static PyObject *stack_tuple(const Work *w, int32_t node) {
    int32_t depth = node < 0 ? 0 : w->pool[node].depth;
    PyObject *t = PyTuple_New(depth);
    if (!t) return NULL;
    for (int32_t k = depth - 1; k >= 0; k--, node = w->pool[node].parent) {
        PyObject *x = PyLong_FromLongLong(w->pool[node].value);
        if (!x) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, k, x);
    }
    return t;
}

_Static_assert(RETURNS == 1, "descent_byte reads the flags' RETURNS as bit 0");

/* The first byte of the alphabet from position g (its table row, its inc row) one byte closer
 * to the rule's end; counting (a counted leaf still needs characters): one that starts a
 * character and keeps the distance, else progress that does not close it (a target whose
 * returns[t] & 1 is clear). -1: none. */
static int descent_byte(const int32_t *row, const int64_t *dist, const uint8_t *alpha, const uint8_t *inc,
                        const uint8_t *returns, int32_t g, int counting) {
    for (int b = 0; b < 256; b++) {
        int32_t t = row[b];
        if (t < 0 || !alpha[b]) continue;
        if (counting ? inc[b] && dist[t] == dist[g] : dist[t] == dist[g] - 1) return b;
    }
    for (int b = 0; counting && b < 256; b++) {
        int32_t t = row[b];
        if (t >= 0 && alpha[b] && dist[t] == dist[g] - 1 && !inc[b] && !(returns[t] & 1)) return b;
    }
    return -1;
}

/* descent_byte(trans i32 [S, 256], dist i64 [S], alphabet bool [256], inc bool [S, 256],
 * returns bool [S], g, counting) -> the first byte of alphabet from g one byte closer to
 * the rule's end (dist one less); counting (a counted leaf still needs characters): the first
 * that starts a character and keeps the distance, else one closer that neither starts a
 * character nor returns. -1: none. */
static PyObject *py_descent_byte(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) { PyErr_SetString(PyExc_TypeError, "descent_byte takes 7 arguments"); return NULL; }
    long g = PyLong_AsLong(args[5]);
    int counting = PyObject_IsTrue(args[6]);
    if (PyErr_Occurred() || counting < 0) return NULL;
    Py_buffer v[5];
    if (get_views(args, v, 5) < 0) return NULL;
    PyObject *out = NULL;
    {
        int64_t states = v[1].len / 8;
        if (v[0].len != states * 256 * 4 || v[2].len < 256 || v[3].len != states * 256 || v[4].len != states
            || g < 0 || g >= states) {
            PyErr_SetString(PyExc_ValueError, "descent_byte: bad tables");
        } else {
            out = PyLong_FromLong(descent_byte((const int32_t *)v[0].buf + g * 256, v[1].buf, v[2].buf,
                                               (const uint8_t *)v[3].buf + g * 256, v[4].buf, g, counting));
        }
    }
    for (int i = 0; i < 5; i++) PyBuffer_Release(&v[i]);
    return out;
}

/* The next step from position g one byte closer to its rule's end (pushdown._descent_move):
 * a byte b (0..255) or a call 256 + its index, -1 none; memo moves[2 g + counting] (-2: not
 * yet found). counting: a counted leaf still needs characters, so the byte must start one and
 * keep the distance (else progress that does not close it). */
static int64_t descent_step(const Pda *p, const int64_t *dist, const uint8_t *alpha, int64_t *moves,
                            int32_t g, int counting) {
    int64_t *memo = moves + 2 * (int64_t)g + counting;
    if (*memo != -2) return *memo;
    int64_t found = descent_byte(p->trans + (int64_t)g * 256, dist, alpha, p->inc + (int64_t)g * 256, p->flags,
                                 g, counting);
    for (int32_t c = p->call_off[g]; !counting && found < 0 && c < p->call_off[g + 1]; c++) {
        int32_t start = p->call_start[c];
        int64_t lo = p->call_counted[c] ? p->count_lo[start] : 0;
        if (dist[start] + lo + dist[p->call_ret[c]] == dist[g]) found = 256 + c;
    }
    *memo = found;
    return found;
}

/* segment(pda, stack tuple, g, dist i64 [S], alphabet bool [256], final bool [S], moves i64
 * [2 S], limit) -> (bytes, stack tuple, g) or None: pushdown._segment's descent along the
 * distances from (stack, g) until its frame returns (or the main rule ends), at most limit
 * steps, the stack kept in an array (a call pushes its return, and a count frame for a
 * counted leaf; a return pops them). */
static PyObject *py_segment(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) { PyErr_SetString(PyExc_TypeError, "segment takes 8 arguments"); return NULL; }
    const Pda *p = PyCapsule_GetPointer(args[0], "pda");
    if (!p) return NULL;
    if (!PyTuple_Check(args[1])) { PyErr_SetString(PyExc_TypeError, "segment: the stack is a tuple"); return NULL; }
    long g0 = PyLong_AsLong(args[2]);
    long limit = PyLong_AsLong(args[7]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer v[4];
    if (get_views(args + 3, v, 4) < 0) return NULL;
    PyObject *out = NULL;
    int64_t states = v[0].len / 8, depth = PyTuple_GET_SIZE(args[1]);
    int64_t *stk = NULL;
    uint8_t *data = NULL;
    if (v[1].len < 256 || v[2].len != states || v[3].len != states * 16 || g0 < 0 || g0 >= states || limit < 0) {
        PyErr_SetString(PyExc_ValueError, "segment: bad tables");
        goto done;
    }
    stk = malloc(sizeof(int64_t) * (size_t)(depth + 2 * limit + 2));
    data = malloc((size_t)limit + 1);
    if (!stk || !data) { PyErr_NoMemory(); goto done; }
    for (int64_t i = 0; i < depth; i++) {
        stk[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(args[1], i));
        if (PyErr_Occurred()) goto done;
    }
    const int64_t *dist = v[0].buf;
    const uint8_t *alpha = v[1].buf, *final = v[2].buf;
    int64_t *moves = v[3].buf, n = depth, len = 0;
    int32_t g = (int32_t)g0;
    int64_t floor = n - ((p->flags[g] & IN_COUNTED) ? 1 : 0);
    int ok = 0; /* 1: the frame returned or the main rule ended; 0: no way (None) */
    for (long step = 0; step < limit; step++) {
        int counted = (p->flags[g] & IN_COUNTED) != 0;
        if (counted && n < 1) break;
        int64_t need = counted ? p->count_lo[g] - (-stk[n - 1] - 1) : 0;
        if (need < 0) need = 0;
        if (final[g] && n == 0) { ok = 1; break; }
        if ((p->flags[g] & RETURNS) && need == 0) {
            int64_t pop = counted ? 2 : 1;
            if (n < pop) break;
            g = (int32_t)stk[n - pop];
            n -= pop;
            if (g < 0 || g >= states) break;
            if (n < floor) { ok = 1; break; }
            continue;
        }
        int64_t move = descent_step(p, dist, alpha, moves, g, need > 0);
        if (move < 0) break;
        if (move >= 256) { /* a call: its return below, a count frame above it if counted */
            int32_t c = (int32_t)(move - 256);
            stk[n++] = p->call_ret[c];
            if (p->call_counted[c]) stk[n++] = -1;
            g = p->call_start[c];
            continue;
        }
        if (p->inc[(int64_t)g * 256 + move]) { /* the count rises (pushdown._counted_up) */
            int64_t count = -stk[n - 1] - 1 + p->inc[(int64_t)g * 256 + move], cap = p->count_cap[g];
            if (count > cap) {
                if (p->flags[g] & BOUNDED) break;
                count = cap;
            }
            stk[n - 1] = -(count + 1);
        }
        data[len++] = (uint8_t)move;
        g = p->trans[(int64_t)g * 256 + move];
    }
    if (!ok) { out = Py_NewRef(Py_None); goto done; }
    PyObject *stack = PyTuple_New(n);
    for (int64_t i = 0; stack && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(stk[i]);
        if (!x) { Py_CLEAR(stack); break; }
        PyTuple_SET_ITEM(stack, i, x);
    }
    if (stack) out = Py_BuildValue("(y#Ni)", (const char *)data, (Py_ssize_t)len, stack, (int)g);
done:
    free(stk);
    free(data);
    for (int i = 0; i < 4; i++) PyBuffer_Release(&v[i]);
    return out;
}

/* The closing's fewest-token spellings (spell_after): the tokens that are prefixes of data[i:]
 * are found by narrowing the lexicographic order byte by byte (a prefix sorts before its
 * extensions). Ties keep the shortest first token, as the Python loop does. */
static int64_t lower_at(const Vocab *v, int64_t lo, int64_t hi, int64_t d, int c) {
    while (lo < hi) { /* first token in [lo, hi) whose byte d is >= c (none: -1) */
        int64_t mid = lo + (hi - lo) / 2, len = v->off[mid + 1] - v->off[mid];
        int x = d < len ? v->bytes[v->off[mid] + d] : -1;
        if (x < c) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* For i from upto - 1 down to 0, the fewest tokens that spell d[i:] (c[i], inf where none
 * do) and where the first token of one such spelling ends (st[i]), from the entries at
 * i + 1 .. n (those at upto .. n come filled). */
static void spell(const Vocab *v, const uint8_t *d, int64_t n, double *c, int64_t *st, int64_t upto) {
    for (int64_t i = upto - 1; i >= 0; i--) {
        int64_t lo = v->first[d[i]], hi = v->first[d[i] + 1], j = i + 1;
        if (v->first2 && i + 1 < n && lo < hi) { /* the first two bytes from the table */
            if (v->off[lo + 1] - v->off[lo] == 1 && c[i + 1] + 1 < c[i]) { c[i] = c[i + 1] + 1; st[i] = i + 1; }
            int64_t key = 256 * d[i] + d[i + 1];
            lo = v->first2[key];
            hi = v->first2[key + 1] < v->first[d[i] + 1] ? v->first2[key + 1] : v->first[d[i] + 1];
            j = i + 2;
        }
        for (; lo < hi; j++) { /* [lo, hi): the tokens starting with d[i:j] */
            int64_t depth = j - i;
            if (v->off[lo + 1] - v->off[lo] == depth && c[j] + 1 < c[i]) { c[i] = c[j] + 1; st[i] = j; }
            if (j == n) break;
            lo = lower_at(v, lo, hi, depth, d[j]);
            hi = lower_at(v, lo, hi, depth, d[j] + 1);
        }
    }
}

/* spell_after(vocab, data bytes, cost f64 [n + 1], step i64 [n + 1], last bytes, last_cost f64
 * [m + 1], last_step i64 [m + 1]) -> shared: spell() over all of data, the suffix it
 * shares with the last data spelled (the closing of one structure, seen a token later) copied
 * from that one's arrays (its steps shifted), the rest computed; cost and step come unfilled. */
static PyObject *py_spell_after(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) { PyErr_SetString(PyExc_TypeError, "spell_after takes 7 arguments"); return NULL; }
    const Vocab *v = PyCapsule_GetPointer(args[0], "vocab");
    if (!v) return NULL;
    Py_buffer b[6];
    int got = 0;
    for (; got < 6; got++) /* data, cost, step, last, last_cost, last_step: the arrays written */
        if (PyObject_GetBuffer(args[got + 1], &b[got], PyBUF_C_CONTIGUOUS | (got == 1 || got == 2 ? PyBUF_WRITABLE : 0)) < 0)
            break;
    PyObject *out = NULL;
    if (got == 6) {
        const uint8_t *d = b[0].buf, *last = b[3].buf;
        int64_t n = b[0].len, m = b[3].len;
        if (b[1].len < (n + 1) * 8 || b[2].len < (n + 1) * 8 || b[4].len < (m + 1) * 8 || b[5].len < (m + 1) * 8) {
            PyErr_SetString(PyExc_ValueError, "spell_after: buffer too small");
        } else {
            double *c = b[1].buf;
            int64_t *st = b[2].buf, shared = 0;
            const double *lc = b[4].buf;
            const int64_t *ls = b[5].buf;
            Py_BEGIN_ALLOW_THREADS
            while (shared < n && shared < m && d[n - 1 - shared] == last[m - 1 - shared]) shared++;
            for (int64_t i = 0; i < n - shared; i++) { c[i] = INFINITY; st[i] = n; }
            for (int64_t i = n - shared; i <= n; i++) { c[i] = lc[i + m - n]; st[i] = ls[i + m - n] - (m - n); }
            spell(v, d, n, c, st, n - shared);
            Py_END_ALLOW_THREADS
            out = PyLong_FromLongLong(shared);
        }
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return out;
}

/* advance_bytes(pda, configs, data bytes) -> frozenset of (stack tuple, position): the state
 * after data as the automaton's own steps give it (the configurations the last byte
 * reached); None where a byte leaves no configuration, -1 where the walk gives up (a step
 * past max_configs configurations, or the stack pool full: step in Python instead). */
static PyObject *py_advance_bytes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "advance_bytes takes 3 arguments"); return NULL; }
    const Pda *p = PyCapsule_GetPointer(args[0], "pda");
    if (!p) return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(args[2], &data, PyBUF_SIMPLE) < 0) return NULL;
    Work *w = workspace();
    if (!w) { PyBuffer_Release(&data); return PyErr_NoMemory(); }
    int64_t n = start_configs(w, args[1]);
    if (n == -1) { PyBuffer_Release(&data); return NULL; }
    Config *cur = w->arena, *next = w->arena + SET_CAP;
    int64_t stepped = n;
    const uint8_t *bytes = data.buf;
    int dead = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; n > 0 && k < data.len && !w->overflow; k++) {
        n = closure(w, p, cur, n, SET_CAP);
        if (w->overflow) break;
        stepped = step(w, p, cur, n, bytes[k], next);
        if (!stepped && !w->overflow) { dead = 1; break; }
        Config *t = cur; cur = next; next = t;
        n = stepped;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (n < 0 || w->overflow) return PyLong_FromLong(-1);
    if (dead) Py_RETURN_NONE;
    PyObject *set = PyFrozenSet_New(NULL);
    for (int64_t i = 0; set && i < stepped; i++) {
        PyObject *stack = stack_tuple(w, cur[i].node);
        PyObject *cfg = stack ? Py_BuildValue("(Ni)", stack, cur[i].g) : NULL;
        if (!cfg || PySet_Add(set, cfg) < 0) { Py_XDECREF(cfg); Py_CLEAR(set); }
        else Py_DECREF(cfg);
    }
    return set;
}

/* walk_ends(pda, vocab, configs, row or None, end_id i32 [N] or None) -> (depth, [frozenset of
 * (stack, g)]) or -1 (fall back): the trie walk from the closed configurations; end_id[i]
 * (lexicographic token i, -1 left where it dies) indexes the list of the distinct states
 * tokens end in (None: the list only; a row None: no row either, so a subtree taken whole
 * costs one step, not one bit per token). */
static PyObject *py_walk_ends(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) { PyErr_SetString(PyExc_TypeError, "walk_ends takes 5 arguments"); return NULL; }
    const Pda *p;
    const Vocab *v;
    Work *w;
    int64_t n0;
    int ready = begin_walk(args, &p, &v, &w, &n0);
    if (ready <= 0) return ready < 0 ? NULL : PyLong_FromLong(-1);
    Py_buffer row = {0}, ids = {0};
    int per_token = args[4] != Py_None; /* None: the distinct end states only */
    int has_row = args[3] != Py_None;   /* None: no row either (the ends are all that is asked) */
    if (has_row && row_view(args[3], &row, (Py_ssize_t)((v->id_end + 31) / 32 * 4), 1) < 0) return NULL;
    if (per_token && row_view(args[4], &ids, (Py_ssize_t)(v->first[256] * 4), 1) < 0) {
        if (has_row) PyBuffer_Release(&row);
        return NULL;
    }
    EndSets e = {0};
    e.last = -1;
    e.id = per_token ? ids.buf : NULL;
    int64_t depth;
    Py_BEGIN_ALLOW_THREADS
    depth = walk_trie(w, p, v, n0, 1, has_row ? row.buf : NULL, &e);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL, *sets = NULL;
    if (depth < 0) {
        out = PyLong_FromLong(-1);
    } else if ((sets = PyList_New(e.n_sets))) {
        for (int64_t s = 0; s < e.n_sets; s++) {
            PyObject *set = PyFrozenSet_New(NULL);
            for (int64_t i = e.off[s]; set && i < e.off[s + 1]; i++) {
                PyObject *stack = stack_tuple(w, e.sets[i].node);
                PyObject *cfg = stack ? Py_BuildValue("(Ni)", stack, e.sets[i].g) : NULL;
                if (!cfg || PySet_Add(set, cfg) < 0) { Py_XDECREF(cfg); Py_CLEAR(set); }
                else Py_DECREF(cfg);
            }
            if (!set) { Py_CLEAR(sets); break; }
            PyList_SET_ITEM(sets, s, set);
        }
        if (sets) out = Py_BuildValue("(LN)", (long long)depth, sets);
    }
    free(e.sets); free(e.off); free(e.slot);
    if (has_row) PyBuffer_Release(&row);
    if (per_token) PyBuffer_Release(&ids);
    return out;
}

static PyMethodDef methods[] = {
    {"pda_tables", (PyCFunction)(void (*)(void))py_pda_tables, METH_FASTCALL, "pushdown tables -> capsule"},
    {"vocab_tables", (PyCFunction)(void (*)(void))py_vocab_tables, METH_FASTCALL, "vocabulary -> capsule"},
    {"walk_list", (PyCFunction)(void (*)(void))py_walk_list, METH_FASTCALL, "walk of given tokens"},
    {"walk_leaf", (PyCFunction)(void (*)(void))py_walk_leaf, METH_FASTCALL, "walk of a leaf DFA"},
    {"advance_bytes", (PyCFunction)(void (*)(void))py_advance_bytes, METH_FASTCALL, "a state after bytes"},
    {"descent_byte", (PyCFunction)(void (*)(void))py_descent_byte, METH_FASTCALL, "a byte one closer to the end"},
    {"bucket_rows", (PyCFunction)(void (*)(void))py_bucket_rows, METH_FASTCALL, "a leaf's listing as rows by count"},
    {"rows_by_count", (PyCFunction)(void (*)(void))py_rows_by_count, METH_FASTCALL, "cumulative rows by count"},
    {"spell_after", (PyCFunction)(void (*)(void))py_spell_after, METH_FASTCALL, "spellings after the last"},
    {"segment", (PyCFunction)(void (*)(void))py_segment, METH_FASTCALL, "a frame's way to its end"},
    {"walk_ends", (PyCFunction)(void (*)(void))py_walk_ends, METH_FASTCALL, "trie walk with end states"},
    {"pack_groups", (PyCFunction)(void (*)(void))py_pack_groups, METH_FASTCALL, "token rows by end group"},
    {"trim_minimize", (PyCFunction)(void (*)(void))py_trim_minimize, METH_FASTCALL, "fsm.trim_and_minimize"},
    {"determinize", (PyCFunction)(void (*)(void))py_determinize, METH_FASTCALL, "fsm.determinize"},
    {"right_hash", (PyCFunction)(void (*)(void))py_right_hash, METH_FASTCALL, "a hash of the automaton from a state"},
    {"same_right", (PyCFunction)(void (*)(void))py_same_right, METH_FASTCALL, "whether two states number alike"},
    {"stack_rules", (PyCFunction)(void (*)(void))py_stack_rules, METH_FASTCALL, "pushdown._global_table"},
    {"product", (PyCFunction)(void (*)(void))py_product, METH_FASTCALL, "fsm.product"},
    {"fewest_bytes", (PyCFunction)(void (*)(void))py_fewest_bytes, METH_FASTCALL, "completion.rule_distances"},
    {"sparse_row", (PyCFunction)(void (*)(void))py_sparse_row, METH_FASTCALL, "a row's live words"},
    {"walk_trie_kept", (PyCFunction)(void (*)(void))py_walk_trie_kept, METH_FASTCALL, "trie walk into a row, and its live words"},
    {"fill_sparse", (PyCFunction)(void (*)(void))py_fill_sparse, METH_FASTCALL, "a row from its live words"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
