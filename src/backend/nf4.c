/* nf4.c - bitsandbytes' NF4 format on the host: its two code tables, a unit's layout, quantize
 * and dequantize exactly as bitsandbytes computes them on the CPU (see nf4.h). */
#include "nf4.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

/* bitsandbytes' get_4bit_type("nf4") and create_dynamic_map(signed=True), as fp32 bits */
const float NF4_CODE[16] = {
    -0x1.000000p+0f, -0x1.647362p-1f, -0x1.0cd660p-1f, -0x1.946540p-2f,
    -0x1.23449ap-2f, -0x1.7a6a7ep-3f, -0x1.74f0e2p-4f, 0.0f,
    0x1.45f5fep-4f, 0x1.4995c6p-3f, 0x1.f809bap-3f, 0x1.5a0674p-2f,
    0x1.c34970p-2f, 0x1.200f56p-1f, 0x1.722766p-1f, 0x1.000000p+0f,
};
const float NF4_DYNAMIC_CODE[256] = {
    -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.ee0000p-1f, -0x1.e6ccccp-1f,
    -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.ca0000p-1f,
    -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f,
    -0x1.a60000p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f,
    -0x1.893334p-1f, -0x1.820000p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f,
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5e0000p-1f, -0x1.56ccccp-1f,
    -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3a0000p-1f,
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
    -0x1.160000p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f,
    -0x1.f26664p-2f, -0x1.e40000p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
    -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9c0000p-2f, -0x1.8d9998p-2f,
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.540000p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f,
    -0x1.0c0000p-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f,
    -0x1.a4ccccp-3f, -0x1.880000p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.f00000p-4f, -0x1.b66668p-4f,
    -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f,
    -0x1.65c290p-4f, -0x1.5a3d70p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f,
    -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
    -0x1.b70a3ep-5f, -0x1.a00000p-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c290p-5f,
    -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f,
    -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c290p-7f,
    -0x1.3e76c8p-7f, -0x1.2c0830p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f,
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d500p-11f, -0x1.3dd982p-11f,
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f,
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f,
    0x1.78d500p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f,
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c0830p-7f, 0x1.3e76c8p-7f, 0x1.75c290p-7f,
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f,
    0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c290p-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f,
    0x1.88f5c2p-5f, 0x1.a00000p-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
    0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
    0x1.4eb854p-4f, 0x1.5a3d70p-4f, 0x1.65c290p-4f, 0x1.7147aep-4f,
    0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.f00000p-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f,
    0x1.6b3334p-3f, 0x1.880000p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
    0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0c0000p-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.540000p-2f,
    0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f,
    0x1.9c0000p-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e40000p-2f, 0x1.f26664p-2f, 0x1.006666p-1f,
    0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.160000p-1f, 0x1.1d3334p-1f,
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3a0000p-1f,
    0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f,
    0x1.5e0000p-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f,
    0x1.7accccp-1f, 0x1.820000p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a60000p-1f, 0x1.ad3334p-1f,
    0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.ca0000p-1f,
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f,
    0x1.ee0000p-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1.000000p+0f,
};

int nf4_format_check(const Nf4Format *f, char *why, size_t cap) {
    if (f->numel < 1) {
        snprintf(why, cap, "%lld elements: expected at least 1", (long long)f->numel);
        return -1;
    }
    if (f->blocksize < 32 || f->blocksize > 4096 || (f->blocksize & (f->blocksize - 1)) != 0) {
        snprintf(why, cap, "blocksize %d: expected a power of two in [32, 4096]", f->blocksize);
        return -1;
    }
    if (cap) why[0] = '\0';
    return 0;
}

static size_t align_up(size_t n) { return (n + NF4_ALIGN - 1) / NF4_ALIGN * NF4_ALIGN; }

void nf4_layout(const Nf4Format *f, Nf4Layout *l) {
    memset(l, 0, sizeof *l);
    l->nblocks = (f->numel + f->blocksize - 1) / f->blocksize;
    l->absmax = align_up(((size_t)f->numel + 1) / 2);
    size_t end = l->absmax + (size_t)l->nblocks * (f->nested ? 1 : sizeof(float));
    if (f->nested) {
        l->nnested = (l->nblocks + NF4_NESTED_BLOCK - 1) / NF4_NESTED_BLOCK;
        l->nested_absmax = align_up(end);
        l->offset = l->nested_absmax + (size_t)l->nnested * sizeof(float);
        end = l->offset + sizeof(float);
    }
    l->bytes = align_up(end);
}

/* the nearest of the 16 NF4 values to x in [-1, 1] as torch.bucketize on the midpoints picks it
 * (bnb's CPU quantize_4bit): the number of midpoints strictly below x */
static unsigned nf4_code_of(float x) {
    unsigned q = 0;
    for (int i = 0; i < 15; i++) q += (NF4_CODE[i] + NF4_CODE[i + 1]) / 2.0f < x;
    return q;
}

/* bnb's CPU quantize_blockwise of n values in blocks of 256 (its quantize_block): x / blockmax,
 * the largest code <= it (code[0] read as -1), then the right neighbour if strictly nearer */
static void quantize_dynamic(const float *x, int64_t n, uint8_t *out, float *blockmax) {
    for (int64_t b0 = 0, blk = 0; b0 < n; b0 += NF4_NESTED_BLOCK, blk++) {
        const int64_t b1 = b0 + NF4_NESTED_BLOCK < n ? b0 + NF4_NESTED_BLOCK : n;
        float m = -3.402823466e38f;
        for (int64_t i = b0; i < b1; i++) m = fmaxf(m, fabsf(x[i]));
        blockmax[blk] = m;
        for (int64_t i = b0; i < b1; i++) {
            const float v = x[i] / m;
            int lo = 0, hi = 255; /* the largest index whose code <= v (code[0] taken as -1) */
            while (lo < hi) {
                int mid = (lo + hi + 1) / 2;
                if ((mid == 0 ? -1.0f : NF4_DYNAMIC_CODE[mid]) <= v) lo = mid;
                else hi = mid - 1;
            }
            if (lo < 255 && fabsf(v - NF4_DYNAMIC_CODE[lo + 1]) < fabsf(v - (lo == 0 ? -1.0f : NF4_DYNAMIC_CODE[lo])))
                lo++;
            out[i] = (uint8_t)lo;
        }
    }
}

static void quantize(const Nf4Format *f, const float *src, const float *given_offset, void *unit) {
    Nf4Layout l;
    nf4_layout(f, &l);
    uint8_t *u = unit;
    memset(u, 0, l.bytes);
    float *absmax = gt_xmalloc((size_t)l.nblocks * sizeof *absmax);
    const int64_t n = f->numel, bs = f->blocksize, full = n / bs * bs;
    for (int64_t b = 0; b < l.nblocks; b++) {
        const int64_t e0 = b * bs, e1 = e0 + bs < n ? e0 + bs : n;
        float m = 0.0f;
        for (int64_t e = e0; e < e1; e++) m = fmaxf(m, fabsf(src[e]));
        /* bnb: full blocks keep their absmax and scale by its clamped reciprocal; the remainder's
         * absmax is clamped itself and divides */
        const bool rem = e0 >= full;
        if (rem) m = fmaxf(m, 1e-38f);
        absmax[b] = m;
        const float recip = 1.0f / fmaxf(m, 1e-38f);
        for (int64_t e = e0; e < e1; e++) {
            float x = rem ? src[e] / m : src[e] * recip;
            x = x < -1.0f ? -1.0f : x > 1.0f ? 1.0f : x;
            const unsigned q = nf4_code_of(x);
            u[e / 2] |= (uint8_t)(e % 2 ? q : q << 4);
        }
    }
    if (n % 2) u[n / 2] |= (uint8_t)nf4_code_of(0.0f); /* bnb pads with a 0.0 value */
    if (!f->nested) {
        memcpy(u + l.absmax, absmax, (size_t)l.nblocks * sizeof *absmax);
    } else {
        float offset;
        if (given_offset) {
            offset = *given_offset;
        } else {
            double s = 0.0;
            for (int64_t b = 0; b < l.nblocks; b++) s += absmax[b];
            offset = (float)(s / (double)l.nblocks);
        }
        for (int64_t b = 0; b < l.nblocks; b++) absmax[b] -= offset;
        quantize_dynamic(absmax, l.nblocks, u + l.absmax, (float *)(u + l.nested_absmax));
        memcpy(u + l.offset, &offset, sizeof offset);
    }
    free(absmax);
}

void nf4_quantize(const Nf4Format *f, const float *src, void *unit) { quantize(f, src, NULL, unit); }

void nf4_quantize_with_offset(const Nf4Format *f, const float *src, float offset, void *unit) {
    quantize(f, src, &offset, unit);
}

/* absmax of block i, the unit's layout given (the dequantize loops compute it once) */
static float absmax_at(const Nf4Format *f, const Nf4Layout *l, const uint8_t *u, int64_t i) {
    float v;
    if (!f->nested) {
        memcpy(&v, u + l->absmax + (size_t)i * sizeof v, sizeof v);
        return v;
    }
    float scale, offset;
    memcpy(&scale, u + l->nested_absmax + (size_t)(i / NF4_NESTED_BLOCK) * sizeof scale, sizeof scale);
    memcpy(&offset, u + l->offset, sizeof offset);
    v = NF4_DYNAMIC_CODE[u[l->absmax + (size_t)i]] * scale; /* fp32, then + offset in fp32 (bnb's order) */
    return v + offset;
}

float nf4_absmax(const Nf4Format *f, const void *unit, int64_t i) {
    Nf4Layout l;
    nf4_layout(f, &l);
    return absmax_at(f, &l, unit, i);
}

/* element e's value in fp32, its block's absmax given */
static inline float nf4_value(const uint8_t *packed, int64_t e, float absmax) {
    const uint8_t byte = packed[e / 2];
    return NF4_CODE[e % 2 ? byte & 15 : byte >> 4] * absmax;
}

void nf4_dequantize_f32(const Nf4Format *f, const void *unit, int64_t e0, int64_t n, float *dst) {
    Nf4Layout l;
    nf4_layout(f, &l);
    for (int64_t k = 0; k < n;) {
        const int64_t e = e0 + k, b = e / f->blocksize, end = (b + 1) * f->blocksize - e0;
        const float a = absmax_at(f, &l, unit, b);
        for (; k < n && k < end; k++) dst[k] = nf4_value(unit, e0 + k, a);
    }
}

void nf4_dequantize_bf16(const Nf4Format *f, const void *unit, int64_t e0, int64_t n, uint16_t *dst) {
    Nf4Layout l;
    nf4_layout(f, &l);
    for (int64_t k = 0; k < n;) {
        const int64_t e = e0 + k, b = e / f->blocksize, end = (b + 1) * f->blocksize - e0;
        const float a = absmax_at(f, &l, unit, b);
        for (; k < n && k < end; k++) dst[k] = gt_f32_to_bf16(nf4_value(unit, e0 + k, a));
    }
}
