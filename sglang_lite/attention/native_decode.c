/* Decode attention on a CPU straight from the paged KV pool: each row's one query against
 * its sequence's keys and values read in place through its pages (no gather, no padding
 * attended), softmax in fp32. Grouped-query: the q heads of a kv head share its k/v reads.
 *
 * q: [B, Hq, D], heads contiguous, rows q_row_stride elements apart (a view of the qkv
 * projection will do); out: [B, Hq, D]; k, v: [slots, Hkv, D] (one layer); pages: [B, max_pages]
 * int64 page numbers (slot = page * page_size + offset); lens: [B] int64. fp32 or bf16 (q, out
 * and the pool in one dtype). Rows x kv heads are split between OpenMP threads (torch's runtime).
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

/* One row b and kv head h: the `group` q heads h * group .. (h + 1) * group - 1. Three passes
 * over the row's positions, each loop branch-free so it vectorizes: the scores (q . k, in
 * vector lanes), their exponentials (one q head's scores contiguous), the values they weigh. */
static int attend(const void *q, Py_ssize_t q_stride, const void *k, const void *v, const int64_t *pages, int64_t len,
                  int max_pages, int page_size, int hq, int hkv, int d, float scale, int dtype, int b, int h, void *out) {
    int group = hq / hkv;
    float qs[MAX_GROUP][MAX_DIM], acc[MAX_GROUP][MAX_DIM], kr[MAX_DIM], m[MAX_GROUP], l[MAX_GROUP];
    int64_t n = len > 0 ? len : 1;
    float *scores = malloc(sizeof(float) * (size_t)n * group); /* [group][len] */
    if (!scores)
        return -1;
    for (int g = 0; g < group; g++) {
        load_row(q, dtype, b * q_stride + (Py_ssize_t)(h * group + g) * d, d, qs[g]);
        for (int i = 0; i < d; i++)
            qs[g][i] *= scale;
        m[g] = -INFINITY;
        memset(acc[g], 0, sizeof(float) * d);
    }
    for (int64_t t = 0; t < len; t++) { /* scores, and each q head's largest */
        Py_ssize_t slot = (Py_ssize_t)pages[(Py_ssize_t)b * max_pages + t / page_size] * page_size + t % page_size;
        load_row(k, dtype, (slot * hkv + h) * d, d, kr);
        for (int g = 0; g < group; g++) {
            float s = 0.0f;
#pragma omp simd reduction(+ : s) /* in vector lanes, then summed: not the sequential order */
            for (int i = 0; i < d; i++)
                s += qs[g][i] * kr[i];
            scores[g * n + t] = s;
            m[g] = s > m[g] ? s : m[g];
        }
    }
    for (int g = 0; g < group; g++) { /* the weights, unnormalized, and their sum */
        float *row = scores + g * n, mg = m[g], sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t t = 0; t < len; t++) {
            row[t] = exp_approx(row[t] - mg);
            sum += row[t];
        }
        l[g] = sum;
    }
    for (int64_t t = 0; t < len; t++) { /* the values they weigh */
        Py_ssize_t slot = (Py_ssize_t)pages[(Py_ssize_t)b * max_pages + t / page_size] * page_size + t % page_size;
        load_row(v, dtype, (slot * hkv + h) * d, d, kr);
        for (int g = 0; g < group; g++) {
            float p = scores[g * n + t];
            for (int i = 0; i < d; i++)
                acc[g][i] += p * kr[i];
        }
    }
    free(scores);
    for (int g = 0; g < group; g++) {
        float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
        Py_ssize_t at = ((Py_ssize_t)b * hq + h * group + g) * d;
        for (int i = 0; i < d; i++) {
            if (dtype == BF16)
                ((uint16_t *)out)[at + i] = f32_to_bf16(acc[g][i] * inv);
            else
                ((float *)out)[at + i] = acc[g][i] * inv;
        }
    }
    return 0;
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
    int failed = 0;
    const int64_t *lens = (const int64_t *)lens_ptr;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed)
    for (int job = 0; job < rows * hkv; job++) {
        int b = job / hkv, h = job % hkv;
        failed |= attend((const void *)q_ptr, q_stride, (const void *)k_ptr, (const void *)v_ptr, (const int64_t *)pages_ptr,
                         lens[b], max_pages, page_size, hq, hkv, d, scale, dtype, b, h, (void *)out_ptr) != 0;
    }
    Py_END_ALLOW_THREADS
    if (failed)
        return PyErr_NoMemory();
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
