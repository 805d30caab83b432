/* adapter_parts.h - what each adapter kind stores and how PEFT's files carry it, as data: its tensors
 * ("parts", in PEFT_PART_* order: lora_A, lora_B, DoRA's lora_magnitude_vector), each part's shape,
 * the adapter_config.json flag that names the kind, and how `gtrain merge` folds it into the base.
 * The one description that the layout and parameter count (lora.c), the PEFT reader and writer
 * (peft.c, which keeps only the key format), loading and saving (lora_io.c) and merging (merge.c)
 * read; adapter.h's AdapterKind adds the compute at a linear layer. No dependencies: the file code
 * reads it without the model. */
#ifndef GT_ADAPTER_PARTS_H
#define GT_ADAPTER_PARTS_H

#include <stdbool.h>
#include <stdint.h>

/* The shape of one part of a site's adapter, in the site's r, input width and output rows. */
typedef enum { PART_R_BY_IN = 0, /* [r, in]: lora_A */
               PART_ROWS_BY_R,   /* [rows, r]: lora_B */
               PART_ROWS         /* [rows]: DoRA's magnitude */ } AdapterPartShape;

#define ADAPTER_MAX_PARTS 3

typedef struct AdapterParts {
    const char *name;                          /* "LoRA", "DoRA" */
    int n;                                     /* parts per adapted block */
    AdapterPartShape shape[ADAPTER_MAX_PARTS]; /* each part's shape, in PEFT_PART_* order */
    bool peft_use_dora;                        /* adapter_config.json's use_dora for this kind */
    /* merge: merged row o is (W + s B A)[o] scaled by the PART_ROWS part's m[o] over the row's norm
     * ||(W + s B A)[o]|| (DoRA, as PEFT's merge_and_unload); false: W + s B A as it is */
    bool merge_row_norm;
} AdapterParts;

extern const AdapterParts ADAPTER_PARTS_LORA, ADAPTER_PARTS_DORA;

/* the kind an adapter_config.json names (use_dora: DoRA, else LoRA) */
const AdapterParts *adapter_parts_of_peft(bool use_dora);
/* part p's dimensions [*dim0, *dim1] (dim1 1 for a vector) and its ndim, at rank r on a block of
 * `in` inputs and `rows` outputs */
int adapter_parts_shape(const AdapterParts *k, int p, int64_t r, int64_t in, int64_t rows, int64_t *dim0,
                        int64_t *dim1);

#endif
