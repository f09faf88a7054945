/* What the serving path's C kernels share: the dtypes they read and write (fp32, bf16) and
 * an exp that vectorizes (built with -I on this folder; sglang_lite/native.py puts this file
 * in their cache key). */
#ifndef SGLANG_LITE_NATIVE_COMMON_H
#define SGLANG_LITE_NATIVE_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { F32 = 0, BF16 = 1 };

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even, as torch does */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 64); /* a quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Element i of a row in ``dtype``, as float; and a float stored (rounded) into one. */
static inline float load_value(const void *p, int dtype, int64_t i) {
    return dtype == BF16 ? bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void store_value(void *p, int dtype, int64_t i, float v) {
    if (dtype == BF16)
        ((uint16_t *)p)[i] = f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* ``v`` rounded to ``dtype`` and back: the value torch holds after an op in that dtype. */
static inline float round_to(int dtype, float v) { return dtype == BF16 ? bf16_to_f32(f32_to_bf16(v)) : v; }

/* e^x for x in [-87, 87] (clamped outside), within 2 ulp of expf: x = n ln2 + r, e^r by a
 * degree-6 polynomial, 2^n built in the exponent bits. No libm call, so SiLU's loop vectorizes
 * (libm's expf does not without -ffast-math, and scalar it costs more than the rest of a layer's
 * elementwise work at a decode step). */
static inline float exp_approx(float x) {
    x = x < -87.0f ? -87.0f : (x > 87.0f ? 87.0f : x); /* no fminf: a libm call, not vectorized */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = x - n * 0.693145751953125f - n * 1.428606765330187045e-6f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.16666666666f + r * (0.041666666666f
              + r * (0.0083333333333f + r * 0.0013888888889f)))));
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale;
}

#endif
