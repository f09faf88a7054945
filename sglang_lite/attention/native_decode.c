/* Decode attention on a CPU straight from the paged KV pool: each row's one query against
 * its sequence's keys and values read in place through its pages (no gather, no padding
 * attended), softmax in fp32. Grouped-query: the q heads of a kv head share its k/v reads.
 *
 * q: [B, Hq, D], heads contiguous, rows q_row_stride elements apart (a view of the qkv
 * projection will do); out: [B, Hq, D]; k, v: [slots, Hkv, D] (one layer); pages: [B, max_pages]
 * int64 page numbers (slot = page * page_size + offset); lens: [B] int64. fp32 or bf16 (q, out
 * and the pool in one dtype). Chunks of a row's positions x kv heads are split between OpenMP
 * threads (torch's runtime), then merged (CHUNK, below). Where the CPU has AVX-512 or AVX2 with
 * FMA and the head size is a whole number of vectors, a chunk runs in vector code
 * (attend_chunk_vec); else, and for chunks of a few positions, in plain loops (attend_chunk).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "native_common.h"

#define MAX_GROUP 16
#define MAX_DIM 256

static inline void load_row(const void *base, int dtype, Py_ssize_t at, int d, float *out) {
    if (dtype == BF16) {
        const uint16_t *p = (const uint16_t *)base + at;
        for (int i = 0; i < d; i++)
            out[i] = bf16_to_f32(p[i]);
    } else {
        memcpy(out, (const float *)base + at, sizeof(float) * d);
    }
}

/* A row's positions are attended in chunks of CHUNK, each chunk one job (flash-decoding's
 * split): a decode step's few rows x kv heads (three at one row of SmolLM2) would leave a
 * thread idle; chunks keep both busy past a short sequence. A row and kv head's chunks are
 * merged in position order, so a row's result depends on its length only, never on the
 * threads or the other rows; a row of CHUNK positions or fewer is one chunk, its merge exact
 * (a weight of 1). */
#define CHUNK 64

/* One job's partial result, group * (d + 2) floats: for each of the kv head's `group` q heads,
 * the largest score m, then the sums l of exp(score - m), then the values weighed by those
 * [group][d]. */
static inline float *part_m(float *part) { return part; }
static inline float *part_l(float *part, int group) { return part + group; }
static inline float *part_acc(float *part, int group, int d, int g) { return part + 2 * group + g * d; }

/* Row b, kv head h, positions t0 .. t1 - 1 into `part`. Three passes, each loop branch-free
 * so it vectorizes: the scores (q . k, in vector lanes), their exponentials, the values. */
static void attend_chunk(const void *q, Py_ssize_t q_stride, const void *k, const void *v, const int64_t *pages,
                         int64_t t0, int64_t t1, int max_pages, int page_size, int hq, int hkv, int d, float scale,
                         int dtype, int b, int h, float *part) {
    int group = hq / hkv, n = (int)(t1 - t0);
    float qs[MAX_GROUP][MAX_DIM], kr[MAX_DIM], scores[MAX_GROUP][CHUNK];
    float *m = part_m(part), *l = part_l(part, group);
    for (int g = 0; g < group; g++) {
        load_row(q, dtype, b * q_stride + (Py_ssize_t)(h * group + g) * d, d, qs[g]);
        for (int i = 0; i < d; i++)
            qs[g][i] *= scale;
        m[g] = -INFINITY;
        memset(part_acc(part, group, d, g), 0, sizeof(float) * d);
    }
    for (int t = 0; t < n; t++) { /* scores, and each q head's largest */
        int64_t pos = t0 + t;
        Py_ssize_t slot = (Py_ssize_t)pages[(Py_ssize_t)b * max_pages + pos / page_size] * page_size + pos % page_size;
        load_row(k, dtype, (slot * hkv + h) * d, d, kr);
        for (int g = 0; g < group; g++) {
            float sc = 0.0f;
#pragma omp simd reduction(+ : sc) /* in vector lanes, then summed: not the sequential order */
            for (int i = 0; i < d; i++)
                sc += qs[g][i] * kr[i];
            scores[g][t] = sc;
            m[g] = sc > m[g] ? sc : m[g];
        }
    }
    for (int g = 0; g < group; g++) { /* the weights, unnormalized, and their sum */
        float *row = scores[g], mg = m[g], sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int t = 0; t < n; t++) {
            row[t] = exp_approx(row[t] - mg);
            sum += row[t];
        }
        l[g] = sum;
    }
    for (int t = 0; t < n; t++) { /* the values they weigh */
        int64_t pos = t0 + t;
        Py_ssize_t slot = (Py_ssize_t)pages[(Py_ssize_t)b * max_pages + pos / page_size] * page_size + pos % page_size;
        load_row(v, dtype, (slot * hkv + h) * d, d, kr);
        for (int g = 0; g < group; g++) {
            float w = scores[g][t], *acc = part_acc(part, group, d, g);
            for (int i = 0; i < d; i++)
                acc[i] += w * kr[i];
        }
    }
}


/* attend_chunk in vectors of LANES floats (AVX-512: 16, AVX2 with FMA: 8) where the head
 * size is a whole number of them: each position's key and value read once for all the kv
 * head's q heads, the scores of LANES positions summed together (sum_lanes) instead of one
 * reduction each, the weighed values accumulated in vectors, each position's page looked up
 * once per page (no division per position). */
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#define VECTOR_PATH 1
/* Chunks of this many positions or fewer stay on the scalar loops: at a position or two, the
 * vector path's fixed work (a sum tree over mostly empty lanes) costs more than it saves. */
#define VECTOR_FROM 4

#if defined(__AVX512F__)
#define LANES 16
typedef __m512 vec;
#define vzero _mm512_setzero_ps
#define vset1 _mm512_set1_ps
#define vmul _mm512_mul_ps
#define vfma _mm512_fmadd_ps
#define vstore _mm512_storeu_ps

static inline vec vload(const void *base, int dtype, Py_ssize_t at) { /* LANES of a row as fp32 */
    if (dtype == BF16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)base + at));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_loadu_ps((const float *)base + at);
}

/* The lane sums of 16 vectors as one vector (lane j: the sum of x[j]'s lanes): a tree of
 * shuffles and adds, about three instructions a sum where a reduction of each costs eight. */
static inline vec sum_lanes(const vec *x) {
    __m512 y[8], z[4], w[2];
    for (int i = 0; i < 8; i++) /* per 128-bit lane: x[2i], x[2i+1], x[2i], x[2i+1] */
        y[i] = _mm512_add_ps(_mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]), _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]));
    for (int i = 0; i < 4; i++) /* per 128-bit lane: x[4i] .. x[4i + 3] */
        z[i] = _mm512_add_ps(_mm512_shuffle_ps(y[2 * i], y[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(y[2 * i], y[2 * i + 1], 0xEE));
    for (int i = 0; i < 2; i++) /* 128-bit lanes: x[8i .. 8i + 3] twice, x[8i + 4 .. 8i + 7] twice */
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(z[2 * i], z[2 * i + 1], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88), _mm512_shuffle_f32x4(w[0], w[1], 0xDD));
}
#else
#define LANES 8
typedef __m256 vec;
#define vzero _mm256_setzero_ps
#define vset1 _mm256_set1_ps
#define vmul _mm256_mul_ps
#define vfma _mm256_fmadd_ps
#define vstore _mm256_storeu_ps

static inline vec vload(const void *base, int dtype, Py_ssize_t at) {
    if (dtype == BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)base + at));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)base + at);
}

static inline vec sum_lanes(const vec *x) { /* as above, for 8 vectors of 8 */
    __m256 y[4], z[2];
    for (int i = 0; i < 4; i++)
        y[i] = _mm256_add_ps(_mm256_unpacklo_ps(x[2 * i], x[2 * i + 1]), _mm256_unpackhi_ps(x[2 * i], x[2 * i + 1]));
    for (int i = 0; i < 2; i++)
        z[i] = _mm256_add_ps(_mm256_shuffle_ps(y[2 * i], y[2 * i + 1], 0x44),
                             _mm256_shuffle_ps(y[2 * i], y[2 * i + 1], 0xEE));
    return _mm256_add_ps(_mm256_permute2f128_ps(z[0], z[1], 0x20), _mm256_permute2f128_ps(z[0], z[1], 0x31));
}
#endif

static inline __attribute__((always_inline)) void attend_chunk_body(
    const void *q, Py_ssize_t q_stride, const void *k, const void *v, const int64_t *pages, int64_t t0, int64_t t1,
    int max_pages, int page_size, int hq, int hkv, int d, float scale, int dtype, int b, int h, float *part,
    const int nv, const int group) {
    int n = (int)(t1 - t0);
    vec qv[MAX_GROUP * (MAX_DIM / LANES)], acc[MAX_GROUP * (MAX_DIM / LANES)], pv[MAX_GROUP][LANES];
    float scores[MAX_GROUP][CHUNK + LANES];
    Py_ssize_t at[CHUNK]; /* each position's row, in elements */
    float *m = part_m(part), *l = part_l(part, group);
    for (int64_t pos = t0; pos < t1;) {
        Py_ssize_t first = (Py_ssize_t)pages[(Py_ssize_t)b * max_pages + pos / page_size] * page_size;
        for (int64_t off = pos % page_size; off < page_size && pos < t1; off++, pos++)
            at[pos - t0] = ((first + off) * hkv + h) * d;
    }
    vec vscale = vset1(scale);
    for (int g = 0; g < group; g++)
        for (int j = 0; j < nv; j++) {
            qv[g * nv + j] = vmul(vload(q, dtype, b * q_stride + (Py_ssize_t)(h * group + g) * d + LANES * j), vscale);
            acc[g * nv + j] = vzero();
        }
    for (int tb = 0; tb < n; tb += LANES) { /* scores, LANES positions at a time */
        int cnt = n - tb < LANES ? n - tb : LANES;
        for (int u = 0; u < LANES; u++) {
            if (u >= cnt) { /* past the chunk's end: sums of zeros, never read */
                for (int g = 0; g < group; g++)
                    pv[g][u] = vzero();
                continue;
            }
            vec kr[MAX_DIM / LANES];
            for (int j = 0; j < nv; j++)
                kr[j] = vload(k, dtype, at[tb + u] + LANES * j);
            for (int g = 0; g < group; g++) {
                vec s = vmul(qv[g * nv], kr[0]);
                for (int j = 1; j < nv; j++)
                    s = vfma(qv[g * nv + j], kr[j], s);
                pv[g][u] = s;
            }
        }
        for (int g = 0; g < group; g++)
            vstore(scores[g] + tb, sum_lanes(pv[g]));
    }
    for (int g = 0; g < group; g++) { /* each q head's largest score, the weights, their sum */
        float *row = scores[g], mg = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : mg)
        for (int t = 0; t < n; t++)
            mg = row[t] > mg ? row[t] : mg;
#pragma omp simd reduction(+ : sum)
        for (int t = 0; t < n; t++) {
            row[t] = exp_approx(row[t] - mg);
            sum += row[t];
        }
        m[g] = mg;
        l[g] = sum;
    }
    for (int t = 0; t < n; t++) { /* the values they weigh */
        vec vr[MAX_DIM / LANES];
        for (int j = 0; j < nv; j++)
            vr[j] = vload(v, dtype, at[t] + LANES * j);
        for (int g = 0; g < group; g++) {
            vec w = vset1(scores[g][t]);
            for (int j = 0; j < nv; j++)
                acc[g * nv + j] = vfma(w, vr[j], acc[g * nv + j]);
        }
    }
    for (int g = 0; g < group; g++)
        for (int j = 0; j < nv; j++)
            vstore(part_acc(part, group, d, g) + LANES * j, acc[g * nv + j]);
}

/* attend_chunk_body with the head size in vectors and the group constant where they are
 * common (the accumulators then stay in registers), else as they come. */
static void attend_chunk_vec(const void *q, Py_ssize_t q_stride, const void *k, const void *v, const int64_t *pages,
                             int64_t t0, int64_t t1, int max_pages, int page_size, int hq, int hkv, int d, float scale,
                             int dtype, int b, int h, float *part) {
    int nv = d / LANES, group = hq / hkv;
#define BODY(NV, G) attend_chunk_body(q, q_stride, k, v, pages, t0, t1, max_pages, page_size, hq, hkv, d, scale, \
                                      dtype, b, h, part, NV, G)
    if (nv == 4 && group == 3) BODY(4, 3); /* SmolLM2: 9 / 3 heads of 64, AVX-512 */
    else if (nv == 8 && group == 3) BODY(8, 3); /* ... AVX2 */
    else if (nv == 4 && group == 4) BODY(4, 4); /* Llama 3.2 1B: 32 / 8 heads of 64 */
    else if (nv == 8 && group == 4) BODY(8, 4); /* ... AVX2, and heads of 128 on AVX-512 */
    else BODY(nv, group);
#undef BODY
}
#endif

/* Row b, kv head h: its `chunks` partials (position order, `stride` floats apart) merged and
 * normalized into out. A chunk whose largest score is the row's weighs 1 (no exp: a row of
 * no positions has m = -inf everywhere and gives zeros, as l = 0). */
static void merge(float *parts, int chunks, Py_ssize_t stride, int hq, int hkv, int d, int dtype, int b, int h,
                  void *out) {
    int group = hq / hkv;
    for (int g = 0; g < group; g++) {
        float top = part_m(parts)[g];
        for (int c = 1; c < chunks; c++)
            top = part_m(parts + c * stride)[g] > top ? part_m(parts + c * stride)[g] : top;
        float acc[MAX_DIM], l = 0.0f;
        memset(acc, 0, sizeof(float) * d);
        for (int c = 0; c < chunks; c++) {
            float *part = parts + c * stride, mc = part_m(part)[g];
            float w = mc == top ? 1.0f : exp_approx(mc - top), *pa = part_acc(part, group, d, g);
            l += w * part_l(part, group)[g];
            for (int i = 0; i < d; i++)
                acc[i] += w * pa[i];
        }
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        Py_ssize_t at = ((Py_ssize_t)b * hq + h * group + g) * d;
        for (int i = 0; i < d; i++) {
            if (dtype == BF16)
                ((uint16_t *)out)[at + i] = f32_to_bf16(acc[i] * inv);
            else
                ((float *)out)[at + i] = acc[i] * inv;
        }
    }
}

static PyObject *decode_attention(PyObject *self, PyObject *args) {
    Py_ssize_t q_ptr, k_ptr, v_ptr, pages_ptr, lens_ptr, out_ptr, q_stride;
    int rows, hq, hkv, d, max_pages, page_size, dtype;
    float scale;
    if (!PyArg_ParseTuple(args, "nnnnnniiiiiifin", &q_ptr, &k_ptr, &v_ptr, &pages_ptr, &lens_ptr, &out_ptr, &rows,
                          &hq, &hkv, &d, &max_pages, &page_size, &scale, &dtype, &q_stride))
        return NULL;
    if (rows < 0 || hkv < 1 || hq % hkv || hq / hkv > MAX_GROUP || d < 1 || d > MAX_DIM || page_size < 1) {
        PyErr_Format(PyExc_ValueError, "decode_attention: unsupported shape (Hq %d, Hkv %d, D %d)", hq, hkv, d);
        return NULL;
    }
    const int64_t *lens = (const int64_t *)lens_ptr;
    int group = hq / hkv;
    Py_ssize_t stride = (Py_ssize_t)group * (d + 2); /* floats of one partial */
    /* first[b]: row b's first chunk (a row of no positions still has one), its jobs from first[b] * hkv;
     * row_of[c]: chunk c's row, so job j's row is row_of[j / hkv] */
    int64_t *first = malloc(sizeof(int64_t) * ((size_t)rows + 1));
    if (!first)
        return PyErr_NoMemory();
    first[0] = 0;
    for (int b = 0; b < rows; b++)
        first[b + 1] = first[b] + (lens[b] > CHUNK ? (lens[b] + CHUNK - 1) / CHUNK : 1);
    int64_t chunks = first[rows], jobs = chunks * hkv;
    float *parts = malloc(sizeof(float) * (size_t)(jobs ? jobs : 1) * (size_t)stride); /* [row][kv head][chunk] */
    int64_t *row_of = malloc(sizeof(int64_t) * (size_t)(chunks ? chunks : 1));
    if (!parts || !row_of) {
        free(first); free(parts); free(row_of);
        return PyErr_NoMemory();
    }
    for (int b = 0; b < rows; b++)
        for (int64_t c = first[b]; c < first[b + 1]; c++)
            row_of[c] = b;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel
    {
#pragma omp for schedule(static) /* each thread a run of jobs: its reads stay sequential */
        for (int64_t job = 0; job < jobs; job++) { /* row b's jobs: its kv heads, each its chunks */
            int b = (int)row_of[job / hkv];
            int64_t n = first[b + 1] - first[b], local = job - first[b] * hkv, c = local % n;
            int h = (int)(local / n);
            int64_t t0 = c * CHUNK, t1 = t0 + CHUNK < lens[b] ? t0 + CHUNK : lens[b];
#ifdef VECTOR_PATH
            if (d % LANES == 0 && t1 - t0 > VECTOR_FROM)
                attend_chunk_vec((const void *)q_ptr, q_stride, (const void *)k_ptr, (const void *)v_ptr,
                                 (const int64_t *)pages_ptr, t0, t1 > t0 ? t1 : t0, max_pages, page_size, hq, hkv, d,
                                 scale, dtype, b, h, parts + job * stride);
            else
#endif
            attend_chunk((const void *)q_ptr, q_stride, (const void *)k_ptr, (const void *)v_ptr,
                         (const int64_t *)pages_ptr, t0, t1 > t0 ? t1 : t0, max_pages, page_size, hq, hkv, d, scale,
                         dtype, b, h, parts + job * stride);
        }
#pragma omp for schedule(static)
        for (int job = 0; job < rows * hkv; job++) { /* each row and kv head: its chunks in order */
            int b = job / hkv, h = job % hkv;
            int64_t n = first[b + 1] - first[b];
            merge(parts + (first[b] * hkv + h * n) * stride, (int)n, stride, hq, hkv, d, dtype, b, h, (void *)out_ptr);
        }
    }
    Py_END_ALLOW_THREADS
    free(first); free(parts); free(row_of);
    Py_RETURN_NONE;
}


#ifdef VECTOR_PATH
/* Extend (prefill) attention: the n new tokens of one sequence, at positions total - n ..
 * total - 1, each against the keys up to its own position (causal past a cached prefix),
 * read in place through the sequence's pool slots. A job is one kv head and a block of
 * queries (its q heads' vectors, at most QV_MAX); keys come LANES at a time, transposed into
 * KT so a query's LANES scores are d vector FMAs, softmax online (flash attention), the
 * weighed values accumulated in fp32. Blocks of keys all past a query are skipped. */
#define QV_MAX 64

#define QT 4 /* query vectors that share each key and value load (independent FMA chains) */

/* The scores, softmax step and weighed values of up to QT query vectors (qi .. qi + nt - 1)
 * against one block of keys; nv constant where the caller can make it (the accumulators then
 * stay in registers). */
static inline __attribute__((always_inline)) void extend_step(
    float (*qf)[MAX_DIM], float (*acc)[MAX_DIM], float *m, float *l, float (*kt)[LANES], float (*vb)[MAX_DIM],
    int qi, int nt, const int *live, int d, const int nv) {
    vec s[QT], a[QT][MAX_DIM / LANES];
    float sc[QT][LANES], alpha[QT];
    for (int r = 0; r < QT; r++)
        s[r] = vzero();
    for (int j = 0; j < d; j++) {
        vec kv = vload(kt[j], F32, 0);
        for (int r = 0; r < QT; r++)
            s[r] = vfma(vset1(qf[qi + (r < nt ? r : 0)][j]), kv, s[r]);
    }
    int most = 0;
    for (int r = 0; r < nt; r++) {
        vstore(sc[r], s[r]);
        float top = m[qi + r], sum = 0.0f;
#pragma omp simd reduction(max : top)
        for (int u = 0; u < LANES; u++) {
            float x = u < live[r] ? sc[r][u] : -INFINITY;
            top = x > top ? x : top;
        }
        alpha[r] = m[qi + r] == -INFINITY ? 0.0f : exp_approx(m[qi + r] - top);
#pragma omp simd reduction(+ : sum)
        for (int u = 0; u < LANES; u++) {
            sc[r][u] = u < live[r] ? exp_approx(sc[r][u] - top) : 0.0f;
            sum += sc[r][u];
        }
        m[qi + r] = top;
        l[qi + r] = l[qi + r] * alpha[r] + sum;
        most = live[r] > most ? live[r] : most;
        for (int j = 0; j < nv; j++)
            a[r][j] = vmul(vload(acc[qi + r], F32, LANES * j), vset1(alpha[r]));
    }
    for (int u = 0; u < most; u++) { /* weights past a query's live keys are 0 */
        vec vv[MAX_DIM / LANES];
        for (int j = 0; j < nv; j++)
            vv[j] = vload(vb[u], F32, LANES * j);
        for (int r = 0; r < nt; r++) {
            vec w = vset1(sc[r][u]);
            for (int j = 0; j < nv; j++)
                a[r][j] = vfma(w, vv[j], a[r][j]);
        }
    }
    for (int r = 0; r < nt; r++)
        for (int j = 0; j < nv; j++)
            vstore(acc[qi + r] + LANES * j, a[r][j]);
}

static void extend_job(const void *q, Py_ssize_t q_stride, const void *k, const void *v, const int64_t *slots,
                       int n, int64_t total, int hq, int hkv, int d, float scale, int dtype, int i0, int i1, int h,
                       void *out) {
    int group = hq / hkv, nv = d / LANES, nq = (i1 - i0) * group;
    int64_t prefix = total - n, kend = prefix + i1; /* keys [0, kend) are seen by some query */
    float qf[QV_MAX][MAX_DIM], acc[QV_MAX][MAX_DIM], m[QV_MAX], l[QV_MAX];
    float kt[MAX_DIM][LANES], vb[LANES][MAX_DIM];
    for (int qi = 0; qi < nq; qi++) {
        int i = i0 + qi / group, g = qi % group;
        Py_ssize_t at = (Py_ssize_t)i * q_stride + (Py_ssize_t)(h * group + g) * d;
        for (int j = 0; j < d; j++)
            qf[qi][j] = load_value(q, dtype, at + j) * scale;
        memset(acc[qi], 0, sizeof(float) * d);
        m[qi] = -INFINITY;
        l[qi] = 0.0f;
    }
    for (int64_t kb = 0; kb < kend; kb += LANES) {
        int cnt = kend - kb < LANES ? (int)(kend - kb) : LANES;
        for (int u = 0; u < LANES; u++) { /* the block's keys transposed, its values as rows */
            if (u < cnt) {
                Py_ssize_t row = ((Py_ssize_t)slots[kb + u] * hkv + h) * d;
                for (int j = 0; j < d; j++)
                    kt[j][u] = load_value(k, dtype, row + j);
                for (int j = 0; j < nv; j++)
                    vstore(vb[u] + LANES * j, vload(v, dtype, row + LANES * j));
            } else {
                for (int j = 0; j < d; j++)
                    kt[j][u] = 0.0f;
            }
        }
        /* queries in position order: those before the block's first key are a prefix */
        int first = kb > prefix + i0 ? (int)(kb - prefix - i0) * group : 0;
        for (int qi = first; qi < nq; qi += QT) {
            int nt = nq - qi < QT ? nq - qi : QT, live[QT];
            for (int r = 0; r < nt; r++) {
                int64_t pos = prefix + i0 + (qi + r) / group;
                live[r] = pos - kb + 1 < cnt ? (int)(pos - kb + 1) : cnt;
            }
            switch (nv) {
            case 2: extend_step(qf, acc, m, l, kt, vb, qi, nt, live, d, 2); break;
            case 4: extend_step(qf, acc, m, l, kt, vb, qi, nt, live, d, 4); break;
            case 8: extend_step(qf, acc, m, l, kt, vb, qi, nt, live, d, 8); break;
            default: extend_step(qf, acc, m, l, kt, vb, qi, nt, live, d, nv); break;
            }
        }
    }
    for (int qi = 0; qi < nq; qi++) {
        int i = i0 + qi / group, g = qi % group;
        float inv = l[qi] > 0.0f ? 1.0f / l[qi] : 0.0f;
        Py_ssize_t at = ((Py_ssize_t)i * hq + h * group + g) * d;
        for (int j = 0; j < d; j++)
            store_value(out, dtype, at + j, acc[qi][j] * inv);
    }
}
#endif

static PyObject *extend_attention(PyObject *self, PyObject *args) {
    Py_ssize_t q_ptr, k_ptr, v_ptr, slots_ptr, out_ptr, q_stride;
    int n, hq, hkv, d, dtype;
    long long total;
    float scale;
    if (!PyArg_ParseTuple(args, "nnnnniLiiifin", &q_ptr, &k_ptr, &v_ptr, &slots_ptr, &out_ptr, &n, &total, &hq,
                          &hkv, &d, &scale, &dtype, &q_stride))
        return NULL;
#ifndef VECTOR_PATH
    PyErr_SetString(PyExc_ValueError, "extend_attention: no vector code in this build (extend_lanes() is 0)");
    return NULL;
#else
    if (n < 0 || total < n || hkv < 1 || hq % hkv || hq / hkv > MAX_GROUP || d < 1 || d > MAX_DIM || d % LANES) {
        PyErr_Format(PyExc_ValueError, "extend_attention: unsupported shape (Hq %d, Hkv %d, D %d)", hq, hkv, d);
        return NULL;
    }
    int block = QV_MAX / (hq / hkv), blocks = (n + block - 1) / block, jobs = blocks * hkv;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(dynamic, 1) /* later blocks see more keys: deal them out */
    for (int job = 0; job < jobs; job++) {
        int blk = blocks - 1 - job / hkv, h = job % hkv; /* the longest first */
        int i0 = blk * block, i1 = i0 + block < n ? i0 + block : n;
        extend_job((const void *)q_ptr, q_stride, (const void *)k_ptr, (const void *)v_ptr,
                   (const int64_t *)slots_ptr, n, total, hq, hkv, d, scale, dtype, i0, i1, h, (void *)out_ptr);
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
#endif
}

static PyObject *extend_lanes(PyObject *self, PyObject *noargs) {
#ifdef VECTOR_PATH
    return PyLong_FromLong(LANES);
#else
    return PyLong_FromLong(0);
#endif
}

static PyMethodDef methods[] = {
    {"decode_attention", decode_attention, METH_VARARGS,
     "decode_attention(q, k, v, pages, lens, out, rows, Hq, Hkv, D, max_pages, page_size, scale, dtype, "
     "q_row_stride)"},
    {"extend_attention", extend_attention, METH_VARARGS,
     "extend_attention(q, k, v, slots, out, n, total, Hq, Hkv, D, scale, dtype, q_row_stride)"},
    {"extend_lanes", extend_lanes, METH_NOARGS,
     "the head sizes extend_attention takes are multiples of this (0: none, no vector code here)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_decode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native_decode(void) { return PyModule_Create(&module); }
