/* adapter_desc.h - the adapters a run puts on the model (the run config's lora: section, filled by
 * lora.c's lora_configure): kept apart from the numbers config.json gives (model_desc.h), which
 * holds one of these as its adapter member. r 0: no adapters (full fine-tuning); otherwise the base
 * weights are frozen and only the adapters train. */
#ifndef GT_ADAPTER_DESC_H
#define GT_ADAPTER_DESC_H

#include <stdbool.h>
#include <stdint.h>

/* The storage dtype of the frozen base's linear weights under LoRA (the run config's
 * lora.base_dtype; arch_storage_dtype says which tensors): auto = the activation dtype. */
typedef enum { BASE_DTYPE_AUTO = 0, BASE_DTYPE_FP32, BASE_DTYPE_BF16 } BaseDtype;

/* lora.quantize_base and lora.bnb_4bit_compute_dtype (the run config's; config_table.c's names in
 * this order) */
typedef enum { QUANTIZE_BASE_NONE = 0, QUANTIZE_BASE_NF4 } QuantizeBase;
typedef enum { COMPUTE_DTYPE_AUTO = 0, COMPUTE_DTYPE_FP32, COMPUTE_DTYPE_BF16 } ComputeDtype;

typedef struct AdapterDesc {
    int r;            /* the rank; 0: no adapters */
    uint32_t targets; /* bit (1u << PeftModule) for each adapted module of the architecture */
    double scale;     /* alpha / r, or alpha / sqrt(r) with use_rslora (peft_scaling) */
    double dropout;   /* PEFT's lora_dropout on each adapter's input, in [0, 1) */
    int init;         /* LoraInit (lora.h): how model_create initialises the adapters */
    bool dora;        /* DoRA (PEFT's use_dora): a magnitude per output row of each adapted block */
    int base_dtype;   /* BaseDtype: the frozen base's storage under LoRA (lora.base_dtype, arch.h) */
} AdapterDesc;

#endif
