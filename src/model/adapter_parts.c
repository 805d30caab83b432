/* adapter_parts.c - the adapter kinds' parts as data (adapter_parts.h). */
#include "adapter_parts.h"

const AdapterParts ADAPTER_PARTS_LORA = {"LoRA", 2, {PART_R_BY_IN, PART_ROWS_BY_R}, false, false};
const AdapterParts ADAPTER_PARTS_DORA = {"DoRA", 3, {PART_R_BY_IN, PART_ROWS_BY_R, PART_ROWS}, true, true};

const AdapterParts *adapter_parts_of_peft(bool use_dora) {
    return use_dora ? &ADAPTER_PARTS_DORA : &ADAPTER_PARTS_LORA;
}

int adapter_parts_shape(const AdapterParts *k, int p, int64_t r, int64_t in, int64_t rows, int64_t *dim0,
                        int64_t *dim1) {
    switch (k->shape[p]) {
    case PART_R_BY_IN: *dim0 = r, *dim1 = in; return 2;
    case PART_ROWS_BY_R: *dim0 = rows, *dim1 = r; return 2;
    default: *dim0 = rows, *dim1 = 1; return 1;
    }
}
