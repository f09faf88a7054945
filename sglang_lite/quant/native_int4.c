/* Int4 weights in torch's CPU layout times a few activation rows, with the activations
 * quantized to int8 per weight group (as llama.cpp multiplies its Q4 blocks by Q8 ones).
 *
 * Weights: torch's _convert_weight_to_int4pack_for_cpu layout, rows in blocks of 64: byte
 * (b, k, j) of packed.view(N / 64, K, 32) holds row 64 b + j in its low nibble and row
 * 64 b + 32 + j in its high one. The scales come in one of two layouts (sz_dtype):
 *   torch's (F32, BF16): scale_zero [K / group, N, 2] holds (s, z) with
 *     w = (q - 8) s + z = q s + c, c = z - 8 s;
 *   blocks (F16_BLOCKS, F32_BLOCKS): [N / 64, K / group, 2, 64] holds each block's s of its 64
 *     rows, then their c, group after group: a block's scales are one sequential stream beside
 *     its codes, where torch's layout has a block's groups N * 8 bytes apart, and in fp16 half
 *     the bytes of fp32 (GGUF's own d and m are fp16: c = m exactly). At one row the kernel
 *     reads its weights at memory speed, so bytes are time: a third of an fp32 layout's bytes
 *     were its scales.
 *
 * Activations: each row's group of `group` values x gets dx = max|x| / 127 and codes
 * xq = round(x / dx) in -127..127; the kernel computes, exactly up to float rounding,
 *     y[m, n] = sum_g s[g, n] dx[m, g] sum_k q[n, k] xq[m, k] + c[g, n] dx[m, g] sum_k xq[m, k]
 * i.e. the weight times the dequantized activation dx xq. The integer sums take four
 * columns at once: a row's four nibbles are interleaved into four adjacent bytes and
 * multiplied with the four activation bytes (vpdpbusd where the CPU has VNNI; maddubs and
 * madd with AVX2; plain C otherwise). The rows of a weight are split between OpenMP threads
 * (the process's runtime: torch's libgomp where torch is loaded, so no second thread pool).
 *
 * Byte codes (codes8_mm: GGUF's Q8_0, w = d q with q in -128..127): the codes u = q + 128 are
 * stored in the kernel's own order, each block of 64 rows as the vectors group_sums would
 * unpack from nibbles (CODE_STEP bytes per 4 columns: unpack4's 8 vectors, a row's 4 codes to
 * a 32-bit lane), with block scales s = d, c = -128 d. The same sums then read their vectors
 * straight from memory: one pass of 8-bit products where the two int4 halves of the same
 * weight took two passes and an unpacking each. Only where the products add in 32 bits
 * (VNNI, or plain C): AVX2's maddubs would saturate its int16 pairs (255 * 127 * 2).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "native_common.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX2__)
/* 8 values of a row from element i, as floats (bf16: its bits shifted into the top half). */
static inline __m256 load8_ps(const void *p, int dtype, Py_ssize_t i) {
    if (dtype == BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i))), 16));
    return _mm256_loadu_ps((const float *)p + i);
}
#endif

#define BLOCK 64
enum { F16_BLOCKS = 2, F32_BLOCKS = 3 }; /* the scales' block layout (header comment) */
#define TILE 8      /* rows whose accumulators stay in registers over one weight group */
#define MAX_ROWS 32 /* rows a block pass takes: tiles of TILE over each group while it is in L1 */
/* Rows from which the threads share the activations' quantizing, inside the region that then
 * shares the blocks (one fork). Before, one thread quantized every row up to 32 while the
 * others waited: 7% of a 32-row layer's samples (perf), with the workers spinning in libgomp
 * meanwhile. From 8 rows: 1.05x over 16 at 8-15 rows; 2 instead of 8 was not measurably
 * different at 2-6 (Zen 4, 2 threads). */
#define QUANTIZE_SPLIT 8
#define CODE_STEP 256 /* bytes of a block's byte codes per 4 columns: unpack4's 8 vectors */
#if !defined(__AVX2__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define CODES8 1 /* byte codes' products add in 32 bits here (the header) */
#endif

/* Codes and scales of one row's activations: xq [K], dx and xsum (dx * sum xq) [G]. With
 * AVX2, 8 values a step (bf16 widened by a shift): the same maximum (max_ps(v, amax) keeps
 * amax where v is NaN, as the scalar compare does), the same product rounded to nearest even
 * (cvtps_epi32 under the default rounding, as nearbyintf), the same clamp: the same codes. */
static void quantize_row(const void *x, int x_dtype, int k, int group, int8_t *xq, float *dx, float *xsum) {
    int groups = k / group;
    for (int g = 0; g < groups; g++) {
        Py_ssize_t base = (Py_ssize_t)g * group;
        float amax = 0.0f;
        int i0 = 0; /* the values the vector loops took */
#if defined(__AVX2__)
        int vec = group - group % 8;
        const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        __m256 vmax = _mm256_setzero_ps();
        for (int i = 0; i < vec; i += 8)
            vmax = _mm256_max_ps(_mm256_and_ps(load8_ps(x, x_dtype, base + i), magnitude), vmax);
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
        amax = _mm_cvtss_f32(h);
        i0 = vec;
#endif
        for (int i = i0; i < group; i++) {
            float v = fabsf(load_value(x, x_dtype, base + i));
            amax = v > amax ? v : amax;
        }
        float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
#if defined(__AVX2__)
        const __m256i top = _mm256_set1_epi32(127), bottom = _mm256_set1_epi32(-127);
        __m256 vinv = _mm256_set1_ps(inv);
        __m256i vsum = _mm256_setzero_si256();
        for (int i = 0; i < vec; i += 8) {
            __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(load8_ps(x, x_dtype, base + i), vinv));
            q = _mm256_max_epi32(_mm256_min_epi32(q, top), bottom);
            vsum = _mm256_add_epi32(vsum, q);
            __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
            _mm_storel_epi64((__m128i *)(xq + base + i), _mm_packs_epi16(words, words));
        }
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(vsum), _mm256_extracti128_si256(vsum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        sum = _mm_cvtsi128_si32(s4);
#endif
        for (int i = i0; i < group; i++) {
            int q = (int)nearbyintf(load_value(x, x_dtype, base + i) * inv);
            q = q > 127 ? 127 : (q < -127 ? -127 : q);
            xq[base + i] = (int8_t)q;
            sum += q;
        }
        dx[g] = d;
        xsum[g] = d * (float)sum;
    }
}

/* sums[m][r]: sum over the group's columns of q[row r of the block] * xq[m], for one block of
 * 64 rows and one group (kk0 = its first column). */
#if defined(__AVX2__)
static inline __m256i dot4(__m256i acc, __m256i q, __m256i x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, q, x);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, q, x);
#else
    __m256i pairs = _mm256_maddubs_epi16(q, x); /* |15 * 127 * 2| fits int16 */
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

/* The block's 64 rows at columns kk..kk+3, four columns to a 32-bit lane (a row's four
 * nibbles interleaved into adjacent bytes): each 128-bit lane on its own, q[4h] rows 0-3 |
 * 16-19, q[4h+1] 4-7 | 20-23, q[4h+2] 8-11 | 24-27, q[4h+3] 12-15 | 28-31 (plus 32 h; h = 0:
 * the low nibbles, rows 0..31, 1: the high ones, rows 32..63). */
static inline __attribute__((always_inline)) void unpack4(const uint8_t *blk, int kk, __m256i *q) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    __m256i b0 = _mm256_loadu_si256((const __m256i *)(blk + (Py_ssize_t)kk * 32));
    __m256i b1 = _mm256_loadu_si256((const __m256i *)(blk + (Py_ssize_t)(kk + 1) * 32));
    __m256i b2 = _mm256_loadu_si256((const __m256i *)(blk + (Py_ssize_t)(kk + 2) * 32));
    __m256i b3 = _mm256_loadu_si256((const __m256i *)(blk + (Py_ssize_t)(kk + 3) * 32));
    for (int h = 0; h < 2; h++) {
        __m256i c0 = h ? _mm256_and_si256(_mm256_srli_epi16(b0, 4), low) : _mm256_and_si256(b0, low);
        __m256i c1 = h ? _mm256_and_si256(_mm256_srli_epi16(b1, 4), low) : _mm256_and_si256(b1, low);
        __m256i c2 = h ? _mm256_and_si256(_mm256_srli_epi16(b2, 4), low) : _mm256_and_si256(b2, low);
        __m256i c3 = h ? _mm256_and_si256(_mm256_srli_epi16(b3, 4), low) : _mm256_and_si256(b3, low);
        __m256i p01l = _mm256_unpacklo_epi8(c0, c1), p01h = _mm256_unpackhi_epi8(c0, c1);
        __m256i p23l = _mm256_unpacklo_epi8(c2, c3), p23h = _mm256_unpackhi_epi8(c2, c3);
        q[4 * h] = _mm256_unpacklo_epi16(p01l, p23l);
        q[4 * h + 1] = _mm256_unpackhi_epi16(p01l, p23l);
        q[4 * h + 2] = _mm256_unpacklo_epi16(p01h, p23h);
        q[4 * h + 3] = _mm256_unpackhi_epi16(p01h, p23h);
    }
}

static inline __attribute__((always_inline)) void load8(const uint8_t *blk, int kk, __m256i *q) {
    for (int i = 0; i < 8; i++)
        q[i] = _mm256_loadu_si256((const __m256i *)(blk + (Py_ssize_t)kk / 4 * CODE_STEP + 32 * i));
}

/* bits: 4 (nibbles, unpacked) or 8 (byte codes, loaded as they are); a constant where inlined. */
static inline __attribute__((always_inline)) void group_sums(const uint8_t *blk, int k, int kk0, int group, const int8_t *xq, int m_rows,
                              int bits, int32_t sums[TILE][BLOCK]) {
    __m256i acc[TILE][8];
    for (int m = 0; m < m_rows; m++)
        for (int i = 0; i < 8; i++)
            acc[m][i] = _mm256_setzero_si256();
    for (int kk = kk0; kk < kk0 + group; kk += 4) {
        __m256i q[8];
        if (bits == 8)
            load8(blk, kk, q);
        else
            unpack4(blk, kk, q);
        for (int m = 0; m < m_rows; m++) {
            int32_t four;
            memcpy(&four, xq + (Py_ssize_t)m * k + kk, 4);
            __m256i xb = _mm256_set1_epi32(four);
            for (int i = 0; i < 8; i++)
                acc[m][i] = dot4(acc[m][i], q[i], xb);
        }
    }
    for (int m = 0; m < m_rows; m++) {
        for (int h = 0; h < 2; h++) { /* back to row order: 0-7, 8-15, 16-23, 24-31 */
            __m256i *a = acc[m] + 4 * h;
            int32_t *out = sums[m] + 32 * h;
            _mm256_storeu_si256((__m256i *)(out + 0), _mm256_permute2x128_si256(a[0], a[1], 0x20));
            _mm256_storeu_si256((__m256i *)(out + 8), _mm256_permute2x128_si256(a[2], a[3], 0x20));
            _mm256_storeu_si256((__m256i *)(out + 16), _mm256_permute2x128_si256(a[0], a[1], 0x31));
            _mm256_storeu_si256((__m256i *)(out + 24), _mm256_permute2x128_si256(a[2], a[3], 0x31));
        }
    }
}
#else
/* Where row r of a block's byte codes sits in a step of 4 columns (load8's vectors: unpack4's
 * order, a row's 4 codes adjacent). */
static inline int code_at(int r) {
    int h = r / 32, rr = r % 32;
    return (4 * h + (rr % 16) / 4) * 32 + ((rr / 16) * 4 + rr % 4) * 4;
}

static inline __attribute__((always_inline)) void group_sums(const uint8_t *blk, int k, int kk0, int group, const int8_t *xq, int m_rows,
                              int bits, int32_t sums[TILE][BLOCK]) {
    for (int m = 0; m < m_rows; m++)
        memset(sums[m], 0, sizeof(int32_t) * BLOCK);
    if (bits == 8) {
        for (int kk = kk0; kk < kk0 + group; kk++) {
            const uint8_t *step = blk + (Py_ssize_t)kk / 4 * CODE_STEP + kk % 4;
            for (int m = 0; m < m_rows; m++) {
                int xv = xq[(Py_ssize_t)m * k + kk];
                for (int r = 0; r < BLOCK; r++)
                    sums[m][r] += step[code_at(r)] * xv;
            }
        }
        return;
    }
    for (int kk = kk0; kk < kk0 + group; kk++) {
        const uint8_t *col = blk + (Py_ssize_t)kk * 32;
        for (int m = 0; m < m_rows; m++) {
            int xv = xq[(Py_ssize_t)m * k + kk];
            for (int j = 0; j < 32; j++) {
                sums[m][j] += (col[j] & 15) * xv;
                sums[m][j + 32] += (col[j] >> 4) * xv;
            }
        }
    }
}
#endif

#if defined(__AVX2__)
/* Several rows (a prefill's, a batch's): a group's codes are unpacked once per pass into
 * group_sums' 4-column interleave (q[8] per 4 columns, qbuf, in L1), and each row (with VNNI,
 * each pair of rows: row_sums2) reads them from there. Without VNNI, as maddubs's memory
 * operand; maddubs's pairs are added in int16 over
 * up to 8 steps of 4 columns (|8 * 2 * 15 * 127| = 30480 fits) and widened once (madd), where
 * group_sums widens at every step and keeps TILE rows' 64 accumulators, more than AVX2's 16
 * registers. The same integer sums, so the same results. An AVX2-only EPYC (Zen 3), fp32,
 * 2 threads, the embedded model's four layer shapes, this path and group_sums' alone taking
 * turns in one process: 1.2-1.4x from 32 to 144 rows, 1.0-1.3x from 3 to 16 (the 192-wide
 * layer least), the same at 1 and 2 (which keep group_sums); the unroll by 4 measured 1.2x
 * the full unroll by 8. With VNNI (an AVX512-VNNI EPYC, Zen 4, bf16, 2 threads, the same
 * shapes, against group_sums' tiles, whose 64 accumulators spilled): 1.25-1.45x at 8 and 16
 * rows, the Q8_0 head's 49152x576 halves 1.37x; identical sums. */
#define ROWS_FROM_L1 3       /* rows from which block_rows takes this path */
#define UNPACKED_GROUP 256   /* the largest group qbuf holds */

static inline __attribute__((always_inline)) void unpack_group(const uint8_t *blk, int kk0, int group, __m256i *qbuf) {
    for (int kk = kk0; kk < kk0 + group; kk += 4, qbuf += 8)
        unpack4(blk, kk, qbuf);
}

/* The 32 sums of half h of the block in row order (group_sums' store). */
static inline void store_half(const __m256i *a, int32_t *out) {
    _mm256_storeu_si256((__m256i *)(out + 0), _mm256_permute2x128_si256(a[0], a[1], 0x20));
    _mm256_storeu_si256((__m256i *)(out + 8), _mm256_permute2x128_si256(a[2], a[3], 0x20));
    _mm256_storeu_si256((__m256i *)(out + 16), _mm256_permute2x128_si256(a[0], a[1], 0x31));
    _mm256_storeu_si256((__m256i *)(out + 24), _mm256_permute2x128_si256(a[2], a[3], 0x31));
}

#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
/* With VNNI: the same from the unpacked codes, each product added into 32-bit lanes at once
 * (no int16 stage). Where group_sums keeps TILE rows' 64 accumulators (more than the 32
 * registers: they spill), a row here keeps 8. */
static inline __attribute__((always_inline)) void row_sums(const __m256i *qbuf, int steps, const int8_t *x,
                                                           int32_t *out) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int st = 0; st < steps; st++) {
        const __m256i *q = qbuf + st * 8;
        int32_t four;
        memcpy(&four, x + 4 * st, 4);
        __m256i xb = _mm256_set1_epi32(four);
        a0 = dot4(a0, q[0], xb);
        a1 = dot4(a1, q[1], xb);
        a2 = dot4(a2, q[2], xb);
        a3 = dot4(a3, q[3], xb);
        a4 = dot4(a4, q[4], xb);
        a5 = dot4(a5, q[5], xb);
        a6 = dot4(a6, q[6], xb);
        a7 = dot4(a7, q[7], xb);
    }
    __m256i w[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    store_half(w, out);
    store_half(w + 4, out + 32);
}

static inline __attribute__((always_inline)) void row_sums32(const __m256i *qbuf, const int8_t *x, int32_t *out) {
    row_sums(qbuf, 8, x, out);
}

#if defined(__AVX512VNNI__) && defined(__AVX512F__)
/* row_sums of two rows at once: each code vector loaded once for both. With AVX-512, 512-bit
 * products: two of the 256-bit code vectors a load and a product (8 accumulators), half the
 * instructions (Zen 4 runs a 512-bit product as two 256-bit halves: the gain is in issue, 4-5%
 * at 16-32 rows here, not in arithmetic); the same integer sums. */
static inline __attribute__((always_inline)) void row_sums2(const __m256i *qbuf, int steps, const int8_t *x0,
                                                            const int8_t *x1, int32_t *out0, int32_t *out1) {
    __m512i a[4], b[4];
    for (int j = 0; j < 4; j++)
        a[j] = b[j] = _mm512_setzero_si512();
    for (int st = 0; st < steps; st++) {
        const __m256i *q = qbuf + st * 8;
        int32_t f0, f1;
        memcpy(&f0, x0 + 4 * st, 4);
        memcpy(&f1, x1 + 4 * st, 4);
        __m512i xb0 = _mm512_set1_epi32(f0), xb1 = _mm512_set1_epi32(f1);
        for (int j = 0; j < 4; j++) {
            __m512i qj = _mm512_loadu_si512((const void *)(q + 2 * j));
            a[j] = _mm512_dpbusd_epi32(a[j], qj, xb0);
            b[j] = _mm512_dpbusd_epi32(b[j], qj, xb1);
        }
    }
    __m256i wa[8], wb[8];
    for (int j = 0; j < 4; j++) {
        wa[2 * j] = _mm512_castsi512_si256(a[j]);
        wa[2 * j + 1] = _mm512_extracti64x4_epi64(a[j], 1);
        wb[2 * j] = _mm512_castsi512_si256(b[j]);
        wb[2 * j + 1] = _mm512_extracti64x4_epi64(b[j], 1);
    }
    store_half(wa, out0);
    store_half(wa + 4, out0 + 32);
    store_half(wb, out1);
    store_half(wb + 4, out1 + 32);
}
#else
/* row_sums of two rows at once: each code vector loaded once for both (16 accumulators). */
static inline __attribute__((always_inline)) void row_sums2(const __m256i *qbuf, int steps, const int8_t *x0,
                                                            const int8_t *x1, int32_t *out0, int32_t *out1) {
    __m256i a[8], b[8];
    for (int i = 0; i < 8; i++)
        a[i] = b[i] = _mm256_setzero_si256();
    for (int st = 0; st < steps; st++) {
        const __m256i *q = qbuf + st * 8;
        int32_t f0, f1;
        memcpy(&f0, x0 + 4 * st, 4);
        memcpy(&f1, x1 + 4 * st, 4);
        __m256i xb0 = _mm256_set1_epi32(f0), xb1 = _mm256_set1_epi32(f1);
        for (int i = 0; i < 8; i++) {
            __m256i qi = _mm256_loadu_si256(q + i);
            a[i] = dot4(a[i], qi, xb0);
            b[i] = dot4(b[i], qi, xb1);
        }
    }
    store_half(a, out0);
    store_half(a + 4, out0 + 32);
    store_half(b, out1);
    store_half(b + 4, out1 + 32);
}
#endif
#define ROW_PAIRS 1
#else
/* row_sums of a group of 32 columns (GGUF's Q4 blocks): 8 steps (unrolled by 4), no widening
 * until the end. */
static inline __attribute__((always_inline)) void row_sums32(const __m256i *qbuf, const int8_t *x, int32_t *out) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
#pragma GCC unroll 4
    for (int st = 0; st < 8; st++) {
        const __m256i *q = qbuf + st * 8;
        int32_t four;
        memcpy(&four, x + 4 * st, 4);
        __m256i xb = _mm256_set1_epi32(four);
        a0 = _mm256_add_epi16(a0, _mm256_maddubs_epi16(q[0], xb));
        a1 = _mm256_add_epi16(a1, _mm256_maddubs_epi16(q[1], xb));
        a2 = _mm256_add_epi16(a2, _mm256_maddubs_epi16(q[2], xb));
        a3 = _mm256_add_epi16(a3, _mm256_maddubs_epi16(q[3], xb));
        a4 = _mm256_add_epi16(a4, _mm256_maddubs_epi16(q[4], xb));
        a5 = _mm256_add_epi16(a5, _mm256_maddubs_epi16(q[5], xb));
        a6 = _mm256_add_epi16(a6, _mm256_maddubs_epi16(q[6], xb));
        a7 = _mm256_add_epi16(a7, _mm256_maddubs_epi16(q[7], xb));
    }
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i w[8] = {_mm256_madd_epi16(a0, ones), _mm256_madd_epi16(a1, ones), _mm256_madd_epi16(a2, ones),
                    _mm256_madd_epi16(a3, ones), _mm256_madd_epi16(a4, ones), _mm256_madd_epi16(a5, ones),
                    _mm256_madd_epi16(a6, ones), _mm256_madd_epi16(a7, ones)};
    store_half(w, out);
    store_half(w + 4, out + 32);
}

/* out[0..64) = the sums of one row (x at the group's first column) over one group from its
 * unpacked codes: the block's 8 vectors of 4-column products accumulated in int16 (8
 * registers, the codes read from L1 as maddubs's memory operand), widened every 8 steps. */
static inline __attribute__((always_inline)) void row_sums(const __m256i *qbuf, int steps, const int8_t *x,
                                                           int32_t *out) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i w[8];
    for (int st0 = 0; st0 < steps; st0 += 8) {
        __m256i a[8];
        for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_si256();
        int end = st0 + 8 < steps ? st0 + 8 : steps;
        for (int st = st0; st < end; st++) {
            const __m256i *q = qbuf + st * 8;
            int32_t four;
            memcpy(&four, x + 4 * st, 4);
            __m256i xb = _mm256_set1_epi32(four);
            for (int i = 0; i < 8; i++) a[i] = _mm256_add_epi16(a[i], _mm256_maddubs_epi16(q[i], xb));
        }
        for (int i = 0; i < 8; i++) {
            __m256i wide = _mm256_madd_epi16(a[i], ones);
            w[i] = st0 ? _mm256_add_epi32(w[i], wide) : wide;
        }
    }
    store_half(w, out);
    store_half(w + 4, out + 32);
}
#endif
#endif

/* 64 fp16 values as floats (F16C where the CPU has it; else bit by bit, subnormals included). */
static inline void half_to_float(const uint16_t *h, float *out) {
#if defined(__F16C__) && defined(__AVX2__)
    for (int r = 0; r < BLOCK; r += 8)
        _mm256_storeu_ps(out + r, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + r))));
#else
    for (int r = 0; r < BLOCK; r++) {
        uint32_t sign = (uint32_t)(h[r] & 0x8000) << 16, exp = (h[r] >> 10) & 31, man = h[r] & 1023;
        float v;
        if (exp == 31) {
            uint32_t u = sign | 0x7f800000u | man << 13;
            memcpy(&v, &u, 4);
        } else {
            v = ldexpf((float)(exp ? man | 1024 : man), (exp ? (int)exp : 1) - 25);
            if (sign) v = -v;
        }
        out[r] = v;
    }
#endif
}

/* A row's group sums scaled into its accumulators: the weights' s and c, the activations'
 * dx (d) and dx * sum xq (xs), the header's formula. */
static inline void add_group(float *acc, const float *s, const float *c, float d, float xs, const int32_t *sums) {
    for (int r = 0; r < BLOCK; r++)
        acc[r] += s[r] * d * (float)sums[r] + c[r] * xs;
}

/* One block of 64 rows: y[m, 64 b + r] for r < 64 (rows past n_out not written); bits 4 or 8
 * (a constant: block_rows4, block_rows8). */
static inline __attribute__((always_inline)) void block_rows(const uint8_t *packed, const void *scale_zero, int sz_dtype,
                       Py_ssize_t n_pad, int k, int group, int b, const int8_t *xq, const float *dx,
                       const float *xsum, int m_rows, void *y, int y_dtype, Py_ssize_t n_out, int bits) {
    int groups = k / group;
    const uint8_t *blk = packed + (Py_ssize_t)b * k * (bits == 8 ? BLOCK : BLOCK / 2);
    float acc[MAX_ROWS][BLOCK];
    int32_t sums[TILE][BLOCK];
    float s[BLOCK], c[BLOCK];
#ifdef ROWS_FROM_L1
    __m256i qbuf[UNPACKED_GROUP / 4 * 8];
#endif
    memset(acc, 0, sizeof(acc[0]) * (size_t)m_rows); /* the rows this pass takes */
    for (int g = 0; g < groups; g++) {
        Py_ssize_t base = ((Py_ssize_t)g * n_pad + (Py_ssize_t)b * BLOCK) * 2; /* torch's layout */
        if (sz_dtype == F16_BLOCKS || sz_dtype == F32_BLOCKS) { /* s[64] then c[64] */
            Py_ssize_t at = ((Py_ssize_t)b * groups + g) * 2 * BLOCK;
            if (sz_dtype == F32_BLOCKS) {
                memcpy(s, (const float *)scale_zero + at, sizeof(s));
                memcpy(c, (const float *)scale_zero + at + BLOCK, sizeof(c));
            } else {
                half_to_float((const uint16_t *)scale_zero + at, s);
                half_to_float((const uint16_t *)scale_zero + at + BLOCK, c);
            }
        } else if (sz_dtype == BF16) { /* (s, z) pairs as one 32-bit word each: vectorizes */
            const uint32_t *pair = (const uint32_t *)((const uint16_t *)scale_zero + base);
            for (int r = 0; r < BLOCK; r++) {
                uint32_t lo = pair[r] << 16, hi = pair[r] & 0xffff0000u;
                float sv, zv;
                memcpy(&sv, &lo, 4);
                memcpy(&zv, &hi, 4);
                s[r] = sv;
                c[r] = zv - 8.0f * sv;
            }
        } else {
            const float *pair = (const float *)scale_zero + base;
            for (int r = 0; r < BLOCK; r++) {
                s[r] = pair[2 * r];
                c[r] = pair[2 * r + 1] - 8.0f * pair[2 * r];
            }
        }
#ifdef ROWS_FROM_L1
        if (m_rows >= ROWS_FROM_L1 && (group <= UNPACKED_GROUP || bits == 8)) {
            const __m256i *qg = qbuf; /* the group's vectors: unpacked into qbuf, or byte codes in place */
            if (bits == 8)
                qg = (const __m256i *)(blk + (Py_ssize_t)g * group / 4 * CODE_STEP);
            else
                unpack_group(blk, g * group, group, qbuf);
            int m = 0;
#ifdef ROW_PAIRS
            for (; m + 1 < m_rows; m += 2) {
                const int8_t *xr = xq + (Py_ssize_t)m * k + (Py_ssize_t)g * group;
                row_sums2(qg, group / 4, xr, xr + k, sums[0], sums[1]);
                for (int e = 0; e < 2; e++)
                    add_group(acc[m + e], s, c, dx[(m + e) * groups + g], xsum[(m + e) * groups + g], sums[e]);
            }
#endif
            for (; m < m_rows; m++) {
                const int8_t *xr = xq + (Py_ssize_t)m * k + (Py_ssize_t)g * group;
                if (group == 32) row_sums32(qg, xr, sums[0]);
                else row_sums(qg, group / 4, xr, sums[0]);
                add_group(acc[m], s, c, dx[m * groups + g], xsum[m * groups + g], sums[0]);
            }
            continue;
        }
#endif
        for (int m0 = 0; m0 < m_rows; m0 += TILE) { /* the group's weights stay in L1 across tiles */
            int tile = m_rows - m0 < TILE ? m_rows - m0 : TILE;
            const int8_t *xt = xq + (Py_ssize_t)m0 * k;
            switch (tile) { /* constant row counts: the accumulators stay in registers */
            case 1: group_sums(blk, k, g * group, group, xt, 1, bits, sums); break;
            case 2: group_sums(blk, k, g * group, group, xt, 2, bits, sums); break;
            case TILE: group_sums(blk, k, g * group, group, xt, TILE, bits, sums); break;
            default: group_sums(blk, k, g * group, group, xt, tile, bits, sums); break;
            }
            for (int m = 0; m < tile; m++)
                add_group(acc[m0 + m], s, c, dx[(m0 + m) * groups + g], xsum[(m0 + m) * groups + g], sums[m]);
        }
    }
    Py_ssize_t first = (Py_ssize_t)b * BLOCK;
    int count = (int)(n_out - first < BLOCK ? n_out - first : BLOCK);
    for (int m = 0; m < m_rows; m++) {
        for (int r = 0; r < count; r++) {
            Py_ssize_t at = (Py_ssize_t)m * n_out + first + r;
            if (y_dtype == BF16)
                ((uint16_t *)y)[at] = f32_to_bf16(acc[m][r]);
            else
                ((float *)y)[at] = acc[m][r];
        }
    }
}

static void block_rows4(const uint8_t *packed, const void *scale_zero, int sz_dtype, Py_ssize_t n_pad, int k,
                        int group, int b, const int8_t *xq, const float *dx, const float *xsum, int m_rows,
                        void *y, int y_dtype, Py_ssize_t n_out) {
    block_rows(packed, scale_zero, sz_dtype, n_pad, k, group, b, xq, dx, xsum, m_rows, y, y_dtype, n_out, 4);
}

#ifdef CODES8
static void block_rows8(const uint8_t *packed, const void *scale_zero, int sz_dtype, Py_ssize_t n_pad, int k,
                        int group, int b, const int8_t *xq, const float *dx, const float *xsum, int m_rows,
                        void *y, int y_dtype, Py_ssize_t n_out) {
    block_rows(packed, scale_zero, sz_dtype, n_pad, k, group, b, xq, dx, xsum, m_rows, y, y_dtype, n_out, 8);
}
#endif

/* int4_mm and codes8_mm: the same arguments, the weight's codes as nibbles or bytes. */
static PyObject *weight_mm(PyObject *args, int bits) {
    const char *name = bits == 8 ? "codes8_mm" : "int4_mm";
    Py_ssize_t x_ptr, packed_ptr, sz_ptr, y_ptr, n_pad, n_out;
    int m_rows, k, group, x_dtype, sz_dtype, y_dtype;
    if (!PyArg_ParseTuple(args, "niiinnniinni", &x_ptr, &x_dtype, &m_rows, &k, &packed_ptr, &n_pad, &sz_ptr,
                          &sz_dtype, &group, &y_ptr, &n_out, &y_dtype))
        return NULL;
    if (m_rows < 1 || group < 4 || group % 4 || k % group || n_pad % BLOCK ||
        n_out > n_pad || n_out < 0) {
        PyErr_Format(PyExc_ValueError, "%s: unsupported shape (rows %d, K %d, group %d, N %zd of %zd)",
                     name, m_rows, k, group, n_out, n_pad);
        return NULL;
    }
    if (sz_dtype < F32 || sz_dtype > F32_BLOCKS || (bits == 8 && sz_dtype < F16_BLOCKS)) {
        PyErr_Format(PyExc_ValueError, "%s: no scale layout %d (0-3: native_int4.c's header; byte codes: 2-3)",
                     name, sz_dtype);
        return NULL;
    }
#ifndef CODES8
    if (bits == 8) {
        PyErr_SetString(PyExc_ValueError, "codes8_mm: this build has no byte-code path (AVX2 without VNNI)");
        return NULL;
    }
#endif
    if (bits == 8 && packed_ptr % 32) {
        PyErr_SetString(PyExc_ValueError, "codes8_mm: the codes must be 32-byte aligned");
        return NULL;
    }
    void (*rows_of_block)(const uint8_t *, const void *, int, Py_ssize_t, int, int, int, const int8_t *,
                          const float *, const float *, int, void *, int, Py_ssize_t) = block_rows4;
#ifdef CODES8
    if (bits == 8)
        rows_of_block = block_rows8;
#endif
    int groups = k / group;
    int8_t *xq = malloc((size_t)m_rows * k);
    float *dx = malloc(sizeof(float) * (size_t)m_rows * groups * 2);
    if (!xq || !dx) {
        free(xq);
        free(dx);
        return PyErr_NoMemory();
    }
    float *xsum = dx + (size_t)m_rows * groups;
    int blocks = (int)((n_out + BLOCK - 1) / BLOCK);
    Py_BEGIN_ALLOW_THREADS
    size_t x_size = x_dtype == BF16 ? 2 : 4, y_size = y_dtype == BF16 ? 2 : 4;
    int split = m_rows >= QUANTIZE_SPLIT;
    if (!split)
        for (int m = 0; m < m_rows; m++)
            quantize_row((const char *)x_ptr + (size_t)m * k * x_size, x_dtype, k, group, xq + (size_t)m * k,
                         dx + (size_t)m * groups, xsum + (size_t)m * groups);
#pragma omp parallel
    {
        if (split) { /* the same on every thread: all or none meet this loop */
#pragma omp for schedule(static)
            for (int m = 0; m < m_rows; m++)
                quantize_row((const char *)x_ptr + (size_t)m * k * x_size, x_dtype, k, group,
                             xq + (size_t)m * k, dx + (size_t)m * groups, xsum + (size_t)m * groups);
        }
#pragma omp for schedule(static)
        for (int b = 0; b < blocks; b++) /* MAX_ROWS rows at a time over a block kept in L2: each
                                          * row's sums are the same whatever rows share its call */
            for (int m0 = 0; m0 < m_rows; m0 += MAX_ROWS)
                rows_of_block((const uint8_t *)packed_ptr, (const void *)sz_ptr, sz_dtype, n_pad, k, group, b,
                              xq + (size_t)m0 * k, dx + (size_t)m0 * groups, xsum + (size_t)m0 * groups,
                              m_rows - m0 < MAX_ROWS ? m_rows - m0 : MAX_ROWS,
                              (char *)y_ptr + (size_t)m0 * n_out * y_size, y_dtype, n_out);
    }
    Py_END_ALLOW_THREADS
    free(xq);
    free(dx);
    Py_RETURN_NONE;
}

static PyObject *int4_mm(PyObject *self, PyObject *args) { return weight_mm(args, 4); }

static PyObject *codes8_mm(PyObject *self, PyObject *args) { return weight_mm(args, 8); }

static PyObject *features(PyObject *self, PyObject *noargs) {
#if defined(__AVX2__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
    const char *simd = "avx512-vnni";
#elif defined(__AVX2__) && defined(__AVXVNNI__)
    const char *simd = "avx-vnni";
#elif defined(__AVX2__)
    const char *simd = "avx2";
#else
    const char *simd = "scalar";
#endif
#ifdef _OPENMP
    int threads = omp_get_max_threads();
#else
    int threads = 1;
#endif
#ifdef CODES8
    int codes8 = 1;
#else
    int codes8 = 0;
#endif
    return Py_BuildValue("(sii)", simd, threads, codes8);
}

static PyMethodDef methods[] = {
    {"int4_mm", int4_mm, METH_VARARGS,
     "int4_mm(x, x_dtype, rows, K, packed, N_pad, scale_zero, sz_dtype, group, y, N, y_dtype): pointers as ints"},
    {"codes8_mm", codes8_mm, METH_VARARGS,
     "codes8_mm(...): int4_mm's arguments, the codes bytes in the kernel's order (header)"},
    {"features", features, METH_NOARGS, "(SIMD path, OpenMP threads, whether codes8_mm runs)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native_int4", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native_int4(void) { return PyModule_Create(&module); }
