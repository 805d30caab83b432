/* hf_weights_bnb.c - bitsandbytes' 4-bit weights in a Hugging Face model directory (see
 * hf_weights.h): at open, each "X.quant_state.bitsandbytes__nf4" is read (bnb_state.c) and X's
 * sibling tensors (absmax, quant_map, nested_absmax, nested_quant_map) checked against it and
 * folded into the one logical tensor X; reads give X's unit as it is (hf_weights_read_nf4) or its
 * values dequantized (nf4.h), a range at a time: only the packed bytes and scales of the blocks
 * that hold the range are read, so a tensor streams as a float one does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hf_weights_internal.h"

#define BAD(...) gt_error(err, GT_EXIT_BAD_INPUT, __VA_ARGS__)

enum { UNCLAIMED = -2, SIBLING = -1 };

/* the siblings a 4-bit weight X has: X + suffix */
static const char *const SIB_NESTED_QUANT_MAP = ".nested_quant_map", *const SIB_NESTED_ABSMAX = ".nested_absmax",
                  *const SIB_QUANT_MAP = ".quant_map", *const SIB_ABSMAX = ".absmax";

static const char *file_of(const HfWeights *w, int k) { return safetensors_path(w->shards[w->t[k].shard]); }

static StDtype dtype_of(const HfWeights *w, int k) { return safetensors_dtype(w->shards[w->t[k].shard], w->t[k].idx); }
static int64_t numel_of(const HfWeights *w, int k) { return safetensors_numel(w->shards[w->t[k].shard], w->t[k].idx); }

/* the length of the weight name in front of a sibling suffix of name, or 0 when name has none */
static size_t sibling_prefix(const char *name) {
    const char *q = strstr(name, BNB_STATE_SUFFIX);
    while (q) { /* the last occurrence */
        const char *r = strstr(q + 1, BNB_STATE_SUFFIX);
        if (!r) break;
        q = r;
    }
    if (q) return (size_t)(q - name);
    const size_t len = strlen(name);
    const char *const s[] = {SIB_NESTED_QUANT_MAP, SIB_NESTED_ABSMAX, SIB_QUANT_MAP, SIB_ABSMAX};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        const size_t k = strlen(s[i]);
        if (len > k && strcmp(name + len - k, s[i]) == 0) return len - k;
    }
    return 0;
}

/* the sibling X + suffix (t's index, or -1); claimed as X's */
static int sibling(HfWeights *w, int x, const char *suffix, int *out, GtError *err) {
    char name[1024];
    *out = -1;
    if ((size_t)snprintf(name, sizeof name, "%s%s", w->t[x].name, suffix) >= sizeof name) return 0;
    const int k = hf_weights_raw_find(w, name);
    if (k < 0) return 0;
    if (w->t[k].logical != UNCLAIMED || w->t[k].bnb >= 0)
        return BAD("%s: tensor %.200s: expected the %s of 4-bit weight %.200s only, found it a 4-bit weight or claimed "
                   "twice", file_of(w, k), name, suffix + 1, w->t[x].name);
    w->t[k].logical = SIBLING;
    *out = k;
    return 0;
}

/* sibling k of weight x: present, of dtype dt and count n */
static int expect_part(const HfWeights *w, int x, int k, const char *suffix, StDtype dt, int64_t n, const char *why,
                       GtError *err) {
    if (k < 0)
        return BAD("%s: tensor %.200s%s: expected the %s of 4-bit weight %.200s (%s), found no such tensor", file_of(w, x),
                   w->t[x].name, suffix, suffix + 1, w->t[x].name, why);
    if (dtype_of(w, k) != dt || numel_of(w, k) != n)
        return BAD("%s: tensor %.200s: expected %s of %lld values (%s), found %s of %lld", file_of(w, k), w->t[k].name,
                   st_dtype_name(dt), (long long)n, why, st_dtype_name(dtype_of(w, k)), (long long)numel_of(w, k));
    return 0;
}

/* F32 sibling k equals table[n] value for value */
static int expect_table(const HfWeights *w, int k, const float *table, int n, const char *what, GtError *err) {
    float v[256];
    const SafeTensors *st = w->shards[w->t[k].shard];
    if (safetensors_read_f32(st, w->t[k].idx, v, (size_t)n, err)) return -1;
    for (int q = 0; q < n; q++)
        if (!(v[q] == table[q]))
            return BAD("%s: tensor %.200s: element %d: expected %.9g (%s), found %.9g", file_of(w, k), w->t[k].name, q,
                       (double)table[q], what, (double)v[q]);
    return 0;
}

/* one quant_state tensor q: its weight, the state, the siblings; adds a BnbTensor */
static int link_one(HfWeights *w, int q, size_t xlen, GtError *err) {
    const char *qname = w->t[q].name, *kind = qname + xlen + strlen(BNB_STATE_SUFFIX);
    w->t[q].logical = SIBLING;
    if (strcmp(kind, "nf4") != 0)
        return BAD("%s: tensor %.200s: quant_type: expected nf4 (gtrain reads NF4 only), found bitsandbytes__%.40s",
                   file_of(w, q), qname, kind);
    char xname[1024];
    if (xlen >= sizeof xname) return BAD("%s: tensor %.200s: expected a name shorter than %zu bytes", file_of(w, q), qname, sizeof xname);
    memcpy(xname, qname, xlen);
    xname[xlen] = '\0';
    const int x = hf_weights_raw_find(w, xname);
    if (x < 0)
        return BAD("%s: tensor %.200s: expected the 4-bit weight %.200s it describes, found no such tensor", file_of(w, q),
                   qname, xname);
    if (w->t[x].logical != UNCLAIMED || w->t[x].bnb >= 0)
        return BAD("%s: tensor %.200s: expected one quant_state for 4-bit weight %.200s, found it a sibling or described "
                   "twice", file_of(w, q), qname, xname);
    /* the state */
    const int64_t qn = numel_of(w, q);
    if (dtype_of(w, q) != ST_U8 || qn < 1 || qn > BNB_STATE_MAX_BYTES)
        return BAD("%s: tensor %.200s: expected U8 bytes of JSON (1 to %d), found %s of %lld", file_of(w, q), qname,
                   BNB_STATE_MAX_BYTES, st_dtype_name(dtype_of(w, q)), (long long)qn);
    char text[BNB_STATE_MAX_BYTES], why[GT_ERR_MAX];
    if (safetensors_read_bytes(w->shards[w->t[q].shard], w->t[q].idx, 0, (size_t)qn, text, err)) return -1;
    BnbTensor b = {.weight = x, .absmax = -1, .nested_absmax = -1};
    if (bnb_state_parse(text, (size_t)qn, &b.s, why, sizeof why)) return BAD("%s: tensor %.200s: %s", file_of(w, q), qname, why);
    /* the packed codes */
    const Nf4Format *f = &b.s.f;
    Nf4Layout l;
    nf4_layout(f, &l);
    const int64_t packed = (f->numel + 1) / 2;
    const SafeTensors *xs = w->shards[w->t[x].shard];
    int64_t xshape[ST_MAX_DIMS];
    int xnd = 0;
    safetensors_shape(xs, w->t[x].idx, xshape, &xnd);
    if (dtype_of(w, x) != ST_U8 || numel_of(w, x) != packed || xnd < 1 || xnd > 2 || (xnd == 2 && xshape[1] != 1))
        return BAD("%s: tensor %.200s: expected U8 [%lld, 1] (the packed codes of the quant_state's %lld values), found %s "
                   "of %lld values in %d dimensions",
                   file_of(w, x), xname, (long long)packed, (long long)f->numel, st_dtype_name(dtype_of(w, x)),
                   (long long)numel_of(w, x), xnd);
    /* the siblings */
    int qmap, nqmap;
    if (sibling(w, x, SIB_ABSMAX, &b.absmax, err) || sibling(w, x, SIB_QUANT_MAP, &qmap, err) ||
        sibling(w, x, SIB_NESTED_ABSMAX, &b.nested_absmax, err) || sibling(w, x, SIB_NESTED_QUANT_MAP, &nqmap, err))
        return -1;
    if (expect_part(w, x, b.absmax, SIB_ABSMAX, f->nested ? ST_U8 : ST_F32, l.nblocks,
                    f->nested ? "one 8-bit code per block: double quantization" : "one per block", err) ||
        expect_part(w, x, qmap, SIB_QUANT_MAP, ST_F32, 16, "bitsandbytes' nf4 values", err) ||
        expect_table(w, qmap, NF4_CODE, 16, "NF4's value of that code", err))
        return -1;
    if (f->nested) {
        if (expect_part(w, x, b.nested_absmax, SIB_NESTED_ABSMAX, ST_F32, l.nnested, "one per 256 absmax values", err) ||
            expect_part(w, x, nqmap, SIB_NESTED_QUANT_MAP, ST_F32, 256, "bitsandbytes' dynamic 8-bit map", err) ||
            expect_table(w, nqmap, NF4_DYNAMIC_CODE, 256, "the dynamic map's value of that code", err))
            return -1;
    } else if (b.nested_absmax >= 0 || nqmap >= 0) {
        const int k = b.nested_absmax >= 0 ? b.nested_absmax : nqmap;
        return BAD("%s: tensor %.200s: expected no nested state (%s has no nested_* keys: no double quantization), "
                   "found this tensor",
                   file_of(w, k), w->t[k].name, qname);
    }
    w->bnb = gt_xrealloc(w->bnb, (size_t)(w->n_bnb + 1) * sizeof *w->bnb);
    w->t[x].bnb = w->n_bnb;
    w->bnb[w->n_bnb++] = b;
    return 0;
}

int hf_weights_bnb_link(HfWeights *w, GtError *err) {
    for (int k = 0; k < w->n; k++) w->t[k].logical = UNCLAIMED, w->t[k].bnb = -1;
    for (int k = 0; k < w->n; k++) {
        const char *q = strstr(w->t[k].name, BNB_STATE_SUFFIX);
        if (!q || w->t[k].logical != UNCLAIMED) continue;
        if (link_one(w, k, sibling_prefix(w->t[k].name), err)) return -1;
    }
    w->vis = gt_xcalloc((size_t)w->n + 1, sizeof *w->vis);
    for (int k = 0; k < w->n; k++) {
        Entry *e = &w->t[k];
        if (e->logical == SIBLING) continue;
        const size_t xlen = e->bnb < 0 ? sibling_prefix(e->name) : 0;
        if (xlen)
            return BAD("%s: tensor %.200s: expected beside a bitsandbytes 4-bit weight %.*s (a tensor with its %.*s"
                       BNB_STATE_SUFFIX "nf4), found none",
                       file_of(w, k), e->name, (int)(xlen > 200 ? 200 : xlen), e->name, (int)(xlen > 200 ? 200 : xlen),
                       e->name);
        if (e->bnb < 0 && dtype_of(w, k) == ST_U8)
            return BAD("%s: tensor %.200s: dtype: expected \"F32\", \"BF16\" or \"F16\", found \"U8\" (read only as a "
                       "bitsandbytes 4-bit weight, beside its %.200s" BNB_STATE_SUFFIX "nf4)",
                       file_of(w, k), e->name, e->name);
        e->logical = w->n_vis;
        w->vis[w->n_vis++] = k;
    }
    return 0;
}

/* ------------------------------------------------------------------ reads */

int hf_weights_nf4(const HfWeights *w, int i, Nf4Format *f) {
    if (i < 0 || i >= w->n_vis || w->t[w->vis[i]].bnb < 0) return 0;
    if (f) *f = w->bnb[w->t[w->vis[i]].bnb].s.f;
    return 1;
}

static int part_bytes(const HfWeights *w, int k, uint64_t off, size_t len, void *dst, GtError *err) {
    return safetensors_read_bytes(w->shards[w->t[k].shard], w->t[k].idx, off, len, dst, err);
}

/* floats x[n] of part k (from element e0): finite, or refused naming the tensor */
static int finite_part(const HfWeights *w, int k, const void *x, size_t n, uint64_t e0, GtError *err) {
    for (size_t q = 0; q < n; q++) {
        float v;
        memcpy(&v, (const char *)x + 4 * q, 4);
        if (!isfinite(v))
            return BAD("%s: tensor %.200s: element %llu: expected a finite scale, found %g", file_of(w, k), w->t[k].name,
                       (unsigned long long)(e0 + q), (double)v);
    }
    return 0;
}

/* the part of b's unit that covers blocks [blk0, blk0 + sub->numel / blocksize rounded up) into
 * unit (laid out for sub); blk0 a multiple of NF4_NESTED_BLOCK when nested */
static int read_unit(const HfWeights *w, const BnbTensor *b, const Nf4Format *sub, int64_t blk0, void *unit,
                     GtError *err) {
    Nf4Layout l;
    nf4_layout(sub, &l);
    memset(unit, 0, l.bytes);
    char *u = unit;
    const uint64_t e0 = (uint64_t)blk0 * (uint64_t)sub->blocksize; /* even: blocksize >= 32 */
    if (part_bytes(w, b->weight, e0 / 2, (size_t)((sub->numel + 1) / 2), u + l.packed, err)) return -1;
    const size_t as = sub->nested ? 1 : 4;
    if (part_bytes(w, b->absmax, (uint64_t)blk0 * as, (size_t)l.nblocks * as, u + l.absmax, err)) return -1;
    if (!sub->nested) return finite_part(w, b->absmax, u + l.absmax, (size_t)l.nblocks, (uint64_t)blk0, err);
    const uint64_t n0 = (uint64_t)blk0 / NF4_NESTED_BLOCK;
    if (part_bytes(w, b->nested_absmax, n0 * 4, (size_t)l.nnested * 4, u + l.nested_absmax, err) ||
        finite_part(w, b->nested_absmax, u + l.nested_absmax, (size_t)l.nnested, n0, err))
        return -1;
    memcpy(u + l.offset, &b->s.offset, 4);
    return 0;
}

int hf_weights_read_nf4(const HfWeights *w, int i, void *unit, GtError *err) {
    if (!hf_weights_nf4(w, i, NULL))
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor index %d: expected a bitsandbytes 4-bit weight", w->path, i);
    const BnbTensor *b = &w->bnb[w->t[w->vis[i]].bnb];
    return read_unit(w, b, &b->s.f, 0, unit, err);
}

int hf_weights_bnb_read_range(const HfWeights *w, const BnbTensor *b, uint64_t e0, size_t n, float *dst, GtError *err) {
    if (n == 0) return 0;
    const Nf4Format *f = &b->s.f;
    const uint64_t bs = (uint64_t)f->blocksize, group = f->nested ? bs * NF4_NESTED_BLOCK : bs;
    const uint64_t first = e0 / group * group, end = (e0 + n + bs - 1) / bs * bs;
    const Nf4Format sub = {.numel = (int64_t)((end < (uint64_t)f->numel ? end : (uint64_t)f->numel) - first),
                           .blocksize = f->blocksize, .nested = f->nested};
    const uint64_t bytes = nf4_bytes(&sub);
    void *unit = malloc(bytes);
    if (!unit)
        return gt_error(err, GT_EXIT_FAILURE, "%s: tensor %.200s: out of host memory for %llu bytes of 4-bit weights",
                        file_of(w, b->weight), w->t[b->weight].name, (unsigned long long)bytes);
    int rc = read_unit(w, b, &sub, (int64_t)(first / bs), unit, err);
    if (rc == 0) {
        nf4_dequantize_f32(&sub, unit, (int64_t)(e0 - first), (int64_t)n, dst);
        if (b->s.dtype == ST_BF16) /* dequantize_4bit returns the quant_state's dtype */
            for (size_t k = 0; k < n; k++) dst[k] = gt_bf16_to_f32(gt_f32_to_bf16(dst[k]));
        else if (b->s.dtype == ST_F16)
            for (size_t k = 0; k < n; k++) dst[k] = st_f16_to_f32(st_f32_to_f16(dst[k]));
    }
    free(unit);
    return rc;
}
