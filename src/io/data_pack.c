/* data_pack.c - packing SFT examples into rows without cross-talk (data.packing: true), as Hugging
 * Face's DataCollatorWithFlattening / TRL's padding_free: whole examples in rows of seq_len by
 * first-fit decreasing, each with its own positions from 0 (and so, through the ops' per-token
 * positions, attending only to itself), no target across an example boundary.
 *
 * An example of n tokens (kept as an unpacked row keeps it: truncated to seq_len+1) takes n-1
 * input positions: inputs e[0..n-2], targets e[1..n-1] under its labels, positions 0..n-2. The
 * last token, which predicts nothing, is not an input: the losses and gradients are exactly those
 * of the unpacked rows (there the last token's only output has target -100). Examples of one token
 * (no target) take no room and are left out.
 *
 * First-fit decreasing, once at open, deterministic: the examples by size, largest first (ties in
 * file order), each into the first row (lowest index) with room, a new row when none has; a max
 * tree over the rows' free room finds that row in O(log rows). A row holds its examples in the
 * order they were placed; its tail is padding (token DATA_PAD_TOKEN, target -100) with positions
 * 0, 1, ... as a segment of its own. */
#include "data.h"
#include "data_internal.h"

#include <stdlib.h>
#include <string.h>

/* example sizes (input positions), descending, ties by index */
typedef struct {
    int32_t size;
    uint32_t ex;
} PackItem;

static int item_cmp(const void *a, const void *b) {
    const PackItem *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return x->ex < y->ex ? -1 : x->ex > y->ex;
}

/* Max tree over cap leaves (free room of row i; rows not yet opened have room T). */
typedef struct {
    int32_t *t;
    size_t leaves; /* a power of two */
} RoomTree;

static void tree_set(RoomTree *r, size_t i, int32_t v) {
    size_t k = r->leaves + i;
    r->t[k] = v;
    for (k /= 2; k >= 1; k /= 2) r->t[k] = r->t[2 * k] > r->t[2 * k + 1] ? r->t[2 * k] : r->t[2 * k + 1];
}

/* the lowest leaf with room >= need (the root holds at least need) */
static size_t tree_first(const RoomTree *r, int32_t need) {
    size_t k = 1;
    while (k < r->leaves) k = r->t[2 * k] >= need ? 2 * k : 2 * k + 1;
    return k - r->leaves;
}

int data_pack_build(DataSource *d, const char *name, GtError *err) {
    const int T = d->seq_len;
    const uint64_t n = d->n; /* the split's examples */
    if (n > UINT32_MAX) return gt_error(err, GT_EXIT_BAD_INPUT, "%s: %llu examples, too many to pack", name,
                                        (unsigned long long)n);
    PackItem *items = data_malloc((size_t)n * sizeof *items, name, err);
    if (!items) return -1;
    size_t m = 0;
    uint64_t used = 0;
    for (uint64_t e = 0; e < n; e++) {
        int32_t size = data_ex_len(d, e) - 1;
        if (size > T) size = T; /* kept examples hold at most seq_len+1 tokens; defensive */
        if (size <= 0) continue;
        items[m++] = (PackItem){size, (uint32_t)e};
        used += (uint64_t)size;
    }
    qsort(items, m, sizeof *items, item_cmp);
    size_t leaves = 1;
    while (leaves < (m ? m : 1)) leaves *= 2;
    RoomTree rt = {data_malloc(2 * leaves * sizeof(int32_t), name, err), leaves};
    uint32_t *row_of = data_malloc((m ? m : 1) * sizeof *row_of, name, err);
    int rc = -1;
    if (!rt.t || !row_of) goto out;
    for (size_t k = 0; k < 2 * leaves; k++) rt.t[k] = T;
    size_t rows = 0;
    for (size_t i = 0; i < m; i++) {
        size_t r = tree_first(&rt, items[i].size); /* an unopened row (room T) always fits */
        if (r >= rows) rows = r + 1;
        tree_set(&rt, r, rt.t[leaves + r] - items[i].size);
        row_of[i] = (uint32_t)r;
    }
    /* rows' examples in placement order: counting sort by row (stable) */
    d->pk_row_off = data_malloc((rows + 1) * sizeof *d->pk_row_off, name, err);
    d->pk_ex = data_malloc((m ? m : 1) * sizeof *d->pk_ex, name, err);
    if (!d->pk_row_off || !d->pk_ex) goto out;
    memset(d->pk_row_off, 0, (rows + 1) * sizeof *d->pk_row_off);
    for (size_t i = 0; i < m; i++) d->pk_row_off[row_of[i] + 1]++;
    for (size_t r = 0; r < rows; r++) d->pk_row_off[r + 1] += d->pk_row_off[r];
    for (size_t i = 0; i < m; i++) d->pk_ex[d->pk_row_off[row_of[i]]++] = items[i].ex;
    for (size_t r = rows; r > 0; r--) d->pk_row_off[r] = d->pk_row_off[r - 1];
    d->pk_row_off[0] = 0;
    d->pk_rows = rows;
    d->pk_used = used;
    if (rows == 0) {
        gt_error(err, GT_EXIT_BAD_INPUT, "%s: no example has two tokens or more, expected at least one to pack", name);
        goto out;
    }
    rc = 0;
out:
    free(items);
    free(rt.t);
    free(row_of);
    return rc;
}

void data_pack_fill_row(const DataSource *d, uint64_t r, int *tokens, int *targets, int *positions) {
    const int T = d->seq_len;
    int t = 0;
    for (uint64_t i = d->pk_row_off[r]; i < d->pk_row_off[r + 1]; i++) {
        const uint64_t e = d->pk_ex[i];
        const int32_t *tok = data_ex_tokens(d, e);
        int size = data_ex_len(d, e) - 1;
        if (size > T - t) size = T - t; /* never: placement kept the row within T */
        for (int j = 0; j < size; j++, t++) {
            tokens[t] = tok[j];
            targets[t] = data_ex_label(d, e, j + 1);
            if (positions) positions[t] = j;
        }
    }
    for (int j = 0; t < T; t++, j++) {
        tokens[t] = DATA_PAD_TOKEN;
        targets[t] = DATA_IGNORE_INDEX;
        if (positions) positions[t] = j;
    }
}
