/* dropout.h - LoRA dropout's mask as a pure function of a key and an element index, the same on
 * the host and in CUDA kernels (so recompute, resume and every backend drop the same elements).
 *
 * The key of one application is lora_dropout_key(seed, step, layer, module) (lora.h), and the
 * element index is global over the optimizer step's whole batch: element (n, c) of the adapter's
 * [N = B*T, in] input (row-major, n = b*T + t) of a micro-batch whose first row is row g0 of the
 * step's batch (the trainer's rows g = (a * world + rank) * B + b) has index
 * i = (g0 * T + n) * in + c. So the mask is a pure function of (seed, step, the row's place in the
 * step's batch, layer, module, element): the accumulation split and the number of ranks change
 * nothing. Element i is kept when the top 24 bits of gt_mix64(key ^ gt_mix64(i)) are >= threshold,
 * threshold = round(p * 2^24) (gt_dropout_threshold): each element dropped with probability p to
 * within 2^-25. Kept elements are scaled by 1 / (1 - p) (PEFT's nn.Dropout in training mode). */
#ifndef GT_DROPOUT_H
#define GT_DROPOUT_H

#include <stdint.h>

#ifdef __CUDACC__
#define GT_HD __host__ __device__
#else
#define GT_HD
#endif

/* splitmix64's finaliser */
static inline GT_HD uint64_t gt_mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline GT_HD int gt_dropout_keep(uint64_t key, uint64_t i, uint32_t threshold) {
    return (uint32_t)(gt_mix64(key ^ gt_mix64(i)) >> 40) >= threshold;
}

/* p in [0, 1): the threshold for gt_dropout_keep (0 keeps everything) */
static inline uint32_t gt_dropout_threshold(double p) { return (uint32_t)(p * 16777216.0 + 0.5); }

#endif
