/* The dtypes the serving path's C kernels read and write (fp32, bf16), shared by each of
 * them (built with -I on this folder; sglang_lite/native.py puts this file in their cache key). */
#ifndef SGLANG_LITE_NATIVE_DTYPES_H
#define SGLANG_LITE_NATIVE_DTYPES_H

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

#endif
