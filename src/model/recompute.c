/* recompute.c - which layers are recomputed, and where their kept inputs live. */
#include "recompute.h"

#include <stdio.h>

RecomputePolicy recompute_policy(bool gradient_checkpointing, int every_n_layers, bool offload, int n_layer) {
    RecomputePolicy p = {.n_layer = n_layer, .every_n = 0, .offload = false};
    if (gradient_checkpointing) {
        p.every_n = every_n_layers < 1 ? 1 : every_n_layers;
        p.offload = offload;
    }
    return p;
}

bool recompute_layer(const RecomputePolicy *p, int layer) {
    return p->every_n > 0 && layer >= 0 && layer < p->n_layer && layer % p->every_n == 0;
}

bool recompute_offloaded(const RecomputePolicy *p, int layer) { return p->offload && recompute_layer(p, layer); }

int recompute_count(const RecomputePolicy *p) {
    return p->every_n > 0 ? (p->n_layer + p->every_n - 1) / p->every_n : 0;
}

int recompute_slot(const RecomputePolicy *p, int layer) { return p->every_n > 0 ? (layer / p->every_n) % 2 : 0; }

int recompute_device_stash_buffers(const RecomputePolicy *p) {
    int k = recompute_count(p);
    if (!p->offload) return k;
    return k < 2 ? k : 2;
}

int recompute_host_stash_buffers(const RecomputePolicy *p) { return p->offload ? recompute_count(p) : 0; }

int recompute_prev(const RecomputePolicy *p, int layer) {
    if (p->every_n <= 0) return -1;
    int prev = layer - p->every_n;
    return prev >= 0 ? prev : -1;
}

const char *recompute_describe(const RecomputePolicy *p, char *buf, int cap) {
    if (p->every_n <= 0)
        snprintf(buf, (size_t)cap, "none");
    else
        snprintf(buf, (size_t)cap, "every %d layer%s (%d of %d recomputed)%s", p->every_n,
                 p->every_n == 1 ? "" : "s", recompute_count(p), p->n_layer, p->offload ? ", offload" : "");
    return buf;
}
