/* The elementwise work of a decoder layer on a CPU, each op one call instead of a chain of
 * torch ops: residual add + RMSNorm, RoPE on q and k in place, SiLU-and-mul. The math and
 * its rounding points are the plain-torch references' (sglang_lite_kernels/*_ref): fp32
 * arithmetic, rounded to the tensor's dtype where torch rounds. fp32 or bf16. Rows go to
 * OpenMP threads (torch's runtime) only when there are many: a decode step's few rows stay
 * on the calling thread, with no wake-up. store_kv writes a decode step's keys and values
 * into the paged pool (model/native_step.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#include "native_common.h"

#define PARALLEL_ROWS 32

#define CHUNK 256

static inline void load_floats(const void *p, int dtype, int n, float *out) {
    if (dtype == BF16)
        for (int i = 0; i < n; i++)
            out[i] = bf16_to_f32(((const uint16_t *)p)[i]);
    else
        memcpy(out, p, sizeof(float) * n);
}

static inline void store_floats(void *p, int dtype, int n, const float *in) {
    if (dtype == BF16)
        for (int i = 0; i < n; i++)
            ((uint16_t *)p)[i] = f32_to_bf16(in[i]);
    else
        memcpy(p, in, sizeof(float) * n);
}

/* out = w * norm(h), h = x + residual (x where there is none): one row of H, in chunks
 * converted to fp32 (branch-free loops, so vectorized). The sum of squares runs in 16 lanes,
 * added in double at the end. */
static void rmsnorm_row(const char *x, const char *res, const char *w, char *out, char *h, int hsize, float eps,
                        int dtype, int size) {
    float a[CHUNK], b[CHUNK], lanes[16] = {0};
    const char *src = res ? h : x; /* where the normalized row is read back from */
    for (int i0 = 0; i0 < hsize; i0 += CHUNK) {
        int m = hsize - i0 < CHUNK ? hsize - i0 : CHUNK;
        load_floats(x + (Py_ssize_t)i0 * size, dtype, m, a);
        if (res) {
            load_floats(res + (Py_ssize_t)i0 * size, dtype, m, b);
            for (int i = 0; i < m; i++)
                a[i] += b[i];
            store_floats(h + (Py_ssize_t)i0 * size, dtype, m, a); /* rounded: torch's x + residual */
            if (dtype == BF16)
                load_floats(h + (Py_ssize_t)i0 * size, dtype, m, a);
        }
        int i = 0;
        for (; i + 16 <= m; i += 16)
            for (int j = 0; j < 16; j++)
                lanes[j] += a[i + j] * a[i + j];
        for (; i < m; i++)
            lanes[i & 15] += a[i] * a[i];
    }
    double ss = 0.0;
    for (int j = 0; j < 16; j++)
        ss += lanes[j];
    float r = 1.0f / sqrtf((float)(ss / hsize) + eps);
    for (int i0 = 0; i0 < hsize; i0 += CHUNK) {
        int m = hsize - i0 < CHUNK ? hsize - i0 : CHUNK;
        load_floats(src + (Py_ssize_t)i0 * size, dtype, m, a);
        load_floats(w + (Py_ssize_t)i0 * size, dtype, m, b);
        for (int i = 0; i < m; i++)
            a[i] *= r;
        if (dtype == BF16)
            for (int i = 0; i < m; i++)
                a[i] = bf16_to_f32(f32_to_bf16(a[i])); /* the normalized row, rounded as torch's */
        for (int i = 0; i < m; i++)
            a[i] *= b[i];
        store_floats(out + (Py_ssize_t)i0 * size, dtype, m, a);
    }
}

static PyObject *rmsnorm(PyObject *self, PyObject *args) {
    Py_ssize_t x, res, w, out, h, x_stride, res_stride;
    int rows, hsize, dtype;
    float eps;
    if (!PyArg_ParseTuple(args, "nnnnnnniifi", &x, &res, &w, &out, &h, &x_stride, &res_stride, &rows, &hsize,
                          &eps, &dtype))
        return NULL;
    int size = dtype == BF16 ? 2 : 4;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static) if (rows >= PARALLEL_ROWS)
    for (int n = 0; n < rows; n++)
        rmsnorm_row((const char *)x + n * x_stride * size, res ? (const char *)res + n * res_stride * size : NULL,
                    (const char *)w, (char *)out + (Py_ssize_t)n * hsize * size,
                    h ? (char *)h + (Py_ssize_t)n * hsize * size : NULL, hsize, eps, dtype, size);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* One row of SiLU-and-mul, in chunks converted to fp32 (each loop branch-free, so vectorized). */
static void silu_and_mul_row(const char *gate, const char *up, char *out, int inter, int dtype, int size) {
    float g[CHUNK], u[CHUNK];
    for (int i0 = 0; i0 < inter; i0 += CHUNK) {
        int m = inter - i0 < CHUNK ? inter - i0 : CHUNK;
        load_floats(gate + (Py_ssize_t)i0 * size, dtype, m, g);
        load_floats(up + (Py_ssize_t)i0 * size, dtype, m, u);
        for (int i = 0; i < m; i++)
            g[i] = g[i] / (1.0f + exp_approx(-g[i]));
        if (dtype == BF16)
            for (int i = 0; i < m; i++)
                g[i] = bf16_to_f32(f32_to_bf16(g[i])); /* silu's result, rounded as torch's */
        for (int i = 0; i < m; i++)
            g[i] *= u[i];
        store_floats(out + (Py_ssize_t)i0 * size, dtype, m, g);
    }
}

/* out[n, i] = silu(gate) * up, gate = x[n, i], up = x[n, inter + i]; silu rounded first. */
static PyObject *silu_and_mul(PyObject *self, PyObject *args) {
    Py_ssize_t x, out, x_stride;
    int rows, inter, dtype;
    if (!PyArg_ParseTuple(args, "nnniii", &x, &out, &x_stride, &rows, &inter, &dtype))
        return NULL;
    int size = dtype == BF16 ? 2 : 4;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static) if (rows >= PARALLEL_ROWS)
    for (int n = 0; n < rows; n++) {
        const char *row = (const char *)x + n * x_stride * size;
        silu_and_mul_row(row, row + (Py_ssize_t)inter * size, (char *)out + (Py_ssize_t)n * inter * size, inter,
                         dtype, size);
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* One head's first ``rot`` dims (rot / 2 <= CHUNK) turned in place, rotate-half layout, by
 * the cos / sin row; each product rounded to fp32 before the sum, as torch computes it. */
static inline void rotate_head(char *x, int dtype, int size, int rot, const float *c, const float *s) {
    float x1[CHUNK], x2[CHUNK], y1[CHUNK], y2[CHUNK];
    int half = rot / 2;
    load_floats(x, dtype, half, x1);
    load_floats(x + (Py_ssize_t)half * size, dtype, half, x2);
    for (int i = 0; i < half; i++) {
        y1[i] = x1[i] * c[i] - x2[i] * s[i];
        y2[i] = x2[i] * c[i] + x1[i] * s[i];
    }
    store_floats(x, dtype, half, y1);
    store_floats(x + (Py_ssize_t)half * size, dtype, half, y2);
}

/* q [T, Hq, D], k [T, Hk, D] (heads contiguous, rows strided) rotated in place at positions
 * [T] (int64) from the fp32 tables [P, rot / 2]. Returns the first row whose position is
 * outside the tables, or -1. */
static PyObject *rope(PyObject *self, PyObject *args) {
    Py_ssize_t q, k, cos_t, sin_t, pos_ptr, q_stride, k_stride, table_rows;
    int rows, hq, hk, d, rot, dtype;
    if (!PyArg_ParseTuple(args, "nnnnnnnniiiiii", &q, &k, &cos_t, &sin_t, &pos_ptr, &q_stride, &k_stride,
                          &table_rows, &rows, &hq, &hk, &d, &rot, &dtype))
        return NULL;
    const int64_t *pos = (const int64_t *)pos_ptr;
    for (int t = 0; t < rows; t++)
        if (pos[t] < 0 || pos[t] >= table_rows)
            return PyLong_FromLong(t);
    int size = dtype == BF16 ? 2 : 4, half = rot / 2;
    Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for schedule(static) if (rows >= PARALLEL_ROWS)
    for (int t = 0; t < rows; t++) {
        const float *c = (const float *)cos_t + pos[t] * half, *s = (const float *)sin_t + pos[t] * half;
        for (int h = 0; h < hq; h++)
            rotate_head((char *)q + (t * q_stride + (Py_ssize_t)h * d) * size, dtype, size, rot, c, s);
        for (int h = 0; h < hk; h++)
            rotate_head((char *)k + (t * k_stride + (Py_ssize_t)h * d) * size, dtype, size, rot, c, s);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(-1);
}

/* A decode step's new keys and values into one layer's pool: row t of k / v ([T, width],
 * rows ``stride`` elements apart, as in the qkv projection) to row slots[t] of k_buf / v_buf
 * ([slots, width]). Returns the first row whose slot is outside the pool, or -1. */
static PyObject *store_kv(PyObject *self, PyObject *args) {
    Py_ssize_t k, v, stride, slots_ptr, k_buf, v_buf, num_slots;
    int rows, width, size;
    if (!PyArg_ParseTuple(args, "nnnnnnniii", &k, &v, &stride, &slots_ptr, &k_buf, &v_buf, &num_slots, &rows,
                          &width, &size))
        return NULL;
    const int64_t *slots = (const int64_t *)slots_ptr;
    for (int t = 0; t < rows; t++)
        if (slots[t] < 0 || slots[t] >= num_slots)
            return PyLong_FromLong(t);
    size_t row_bytes = (size_t)width * size;
    for (int t = 0; t < rows; t++) {
        memcpy((char *)k_buf + slots[t] * row_bytes, (const char *)k + t * stride * size, row_bytes);
        memcpy((char *)v_buf + slots[t] * row_bytes, (const char *)v + t * stride * size, row_bytes);
    }
    return PyLong_FromLong(-1);
}

static PyMethodDef methods[] = {
    {"rmsnorm", rmsnorm, METH_VARARGS, "rmsnorm(x, res, w, out, h, x_stride, res_stride, rows, H, eps, dtype)"},
    {"silu_and_mul", silu_and_mul, METH_VARARGS, "silu_and_mul(x, out, x_stride, rows, inter, dtype)"},
    {"rope", rope, METH_VARARGS,
     "rope(q, k, cos, sin, positions, q_stride, k_stride, table_rows, T, Hq, Hk, D, rot, dtype) -> bad row or -1"},
    {"store_kv", store_kv, METH_VARARGS,
     "store_kv(k, v, row_stride, slots, k_buf, v_buf, num_slots, T, width, elem_size) -> bad row or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_ops", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native_ops(void) { return PyModule_Create(&module); }
