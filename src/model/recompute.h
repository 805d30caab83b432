/* recompute.h - the gradient checkpointing ("recompute") policy, one home.
 *
 * gradient_checkpointing: false keeps every layer's activations. true with every_n_layers n
 * recomputes layers i with i % n == 0 (n = 1: all; n = 2: 0, 2, 4, ...). A recomputed layer keeps
 * only its input (B*T*C) in forward - on the device (recompute stash) or, with offload, in host
 * memory with two device prefetch buffers - and in backward re-runs its forward into one scratch
 * buffer shared by all recomputed layers. */
#ifndef GT_RECOMPUTE_H
#define GT_RECOMPUTE_H

#include <stdbool.h>

typedef struct {
    int n_layer;
    int every_n;  /* 0 when recompute is off */
    bool offload;
} RecomputePolicy;

RecomputePolicy recompute_policy(bool gradient_checkpointing, int every_n_layers, bool offload, int n_layer);
bool recompute_layer(const RecomputePolicy *p, int layer);
bool recompute_offloaded(const RecomputePolicy *p, int layer);
/* number of recomputed layers */
int recompute_count(const RecomputePolicy *p);
/* prefetch slot (0/1) of an offloaded layer: its ordinal among recomputed layers, mod 2 */
int recompute_slot(const RecomputePolicy *p, int layer);
/* device buffers holding stashed inputs: one per recomputed layer, or min(2, count) with offload */
int recompute_device_stash_buffers(const RecomputePolicy *p);
/* host buffers: one per recomputed layer with offload, else 0 */
int recompute_host_stash_buffers(const RecomputePolicy *p);
/* the previous recomputed layer before `layer` (for prefetch), or -1 */
int recompute_prev(const RecomputePolicy *p, int layer);
/* "none", "every 1 layer (12 of 12)", "every 2 layers (6 of 12), offload" */
const char *recompute_describe(const RecomputePolicy *p, char *buf, int cap);

#endif
