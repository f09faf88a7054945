/* Decode attention on a CPU straight from the paged KV pool: each row's one query against
 * its sequence's keys and values read in place through its pages (no gather, no padding
 * attended), softmax in fp32. Grouped-query: the q heads of a kv head share its k/v reads.
 *
 * q: [B, Hq, D], heads contiguous, rows q_row_stride elements apart (a view of the qkv
 * projection will do); out: [B, Hq, D]; k, v: [slots, Hkv, D] (one layer); pages: [B, max_pages]
 * int64 page numbers (slot = page * page_size + offset); lens: [B] int64. fp32 or bf16 (q, out
 * and the pool in one dtype). Chunks of a row's positions x kv heads are split between OpenMP
 * threads (torch's runtime), then merged (CHUNK, below).
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

static PyMethodDef methods[] = {
    {"decode_attention", decode_attention, METH_VARARGS,
     "decode_attention(q, k, v, pages, lens, out, rows, Hq, Hkv, D, max_pages, page_size, scale, dtype, "
     "q_row_stride)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_decode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native_decode(void) { return PyModule_Create(&module); }
