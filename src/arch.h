/* arch.h - each architecture as data: the table of its parameter tensors (role, shape from the
 * model's dims, initialisation, weight decay, Hugging Face name(s), transposed or not, row blocks
 * when one gtrain tensor is several HF tensors), and the parameter layout built from it.
 *
 * Everything that needs to know what a model holds reads this table: the layout (offsets in the
 * flat params/grads buffers), the parameter count, initialisation, the memory plan, the
 * checkpoint names (run checkpoints use gtrain's names; model.safetensors uses HF's), the
 * weight-decay mask, and the model's forward/backward (which find a tensor by its role). */
#ifndef GT_ARCH_H
#define GT_ARCH_H

#include "backend.h"
#include "model_desc.h"

/* What a tensor is to the forward. Per-layer roles are NORM1_W .. DOWN_B. */
typedef enum {
    ROLE_WTE = 0,  /* token embedding [V, C] */
    ROLE_WPE,      /* position embedding [P, C] (GPT-2) */
    ROLE_NORM1_W,  /* norm before attention */
    ROLE_NORM1_B,
    ROLE_QKV_W,    /* fused q | k | v projection [QKV, C] */
    ROLE_QKV_B,
    ROLE_O_W,      /* attention output projection [C, Q] */
    ROLE_O_B,
    ROLE_NORM2_W,  /* norm before the MLP */
    ROLE_NORM2_B,
    ROLE_FC_W,     /* MLP up: GPT-2 c_fc [I, C]; Llama gate | up [2I, C] */
    ROLE_FC_B,
    ROLE_DOWN_W,   /* MLP down [C, I] */
    ROLE_DOWN_B,
    ROLE_NORMF_W,  /* final norm */
    ROLE_NORMF_B,
    ROLE_LM_HEAD,  /* [V, C], absent when tied to wte */
    ROLE_COUNT
} TensorRole;

/* A dimension, resolved against a ModelDesc by arch_dim. */
typedef enum {
    DIM_1 = 0, /* a vector's second dimension */
    DIM_V,     /* vocab_size */
    DIM_P,     /* n_positions */
    DIM_C,     /* n_embd (hidden_size) */
    DIM_Q,     /* n_head * head_dim */
    DIM_KV,    /* n_kv_head * head_dim */
    DIM_QKV,   /* Q + 2 KV */
    DIM_I,     /* n_inner (intermediate_size) */
    DIM_2I     /* 2 n_inner (gate | up) */
} ArchDim;

typedef enum {
    INIT_NORMAL = 0,   /* normal(0, 0.02) */
    INIT_NORMAL_RESID, /* normal(0, 0.02 / sqrt(2 n_layer)): GPT-2's residual projections */
    INIT_ONES,         /* norm weights */
    INIT_ZEROS         /* biases */
} ArchInit;

/* When a tensor exists (depends on the config) */
typedef enum { WHEN_ALWAYS = 0, WHEN_UNTIED, WHEN_QKV_BIAS, WHEN_O_BIAS, WHEN_MLP_BIAS } ArchWhen;

/* One HF tensor: its name ("%d": the layer) and the rows of the gtrain tensor it holds. */
typedef struct {
    const char *hf;
    ArchDim rows;
} ArchBlock;

#define ARCH_MAX_BLOCKS 3

typedef struct {
    TensorRole role;
    bool per_layer;
    const char *name;  /* gtrain's name ("%d": the layer): run checkpoints, messages */
    ArchDim dim0, dim1; /* gtrain's shape [dim0, dim1] (dim1 DIM_1: a vector); linear weights [out, in] */
    ArchInit init;
    bool decay;        /* AdamW weight decay (matrices; not norms or biases) */
    bool transposed;   /* HF stores it [dim1, dim0] (GPT-2's Conv1D) */
    ArchWhen when;
    int n_blocks;      /* HF tensors it is made of, stacked along dim 0 in this order */
    ArchBlock blocks[ARCH_MAX_BLOCKS];
} ArchTensor;

typedef struct {
    ModelArch arch;
    const char *hf_class;        /* "GPT2LMHeadModel", "LlamaForCausalLM" (config.json "architectures") */
    const char *hf_optional_prefix; /* loading also accepts HF names without it ("transformer."), or NULL */
    const ArchTensor *tensors;   /* globals before the layers, per-layer ones, globals after, in layout order */
    int n_tensors;
} ArchSpec;

const ArchSpec *arch_spec(ModelArch arch);
/* HF class name for the config.json gtrain writes: per model_type for the Llama family */
const char *arch_hf_class(const ModelDesc *d);
/* the size of a dimension for d */
int64_t arch_dim(const ModelDesc *d, ArchDim dim);
/* whether tensor t exists in model d */
bool arch_tensor_present(const ModelDesc *d, const ArchTensor *t);

/* One parameter tensor inside the flat params buffer. */
typedef struct {
    char name[96];    /* gtrain's name with the layer filled in */
    size_t offset;    /* in floats */
    size_t numel;
    int ndim;
    int64_t shape[2]; /* gtrain's layout: linear weights [out, in] */
    bool decay;
    bool transposed;  /* HF stores it [in, out] */
    int layer;        /* -1 for non-layer tensors */
    TensorRole role;   /* an adapter: the role of the base weight it adapts */
    const ArchTensor *spec; /* NULL for an adapter */
    int peft_module;   /* an adapter (lora.c): its PeftModule; -1 for the architecture's tensors */
    bool lora_B;       /* an adapter: lora_B [rows, r] (else lora_A [r, in]) */
    /* Its storage in the buffer the layout describes (param_layout_storage; zero until then):
     * dtype, and where it starts in bytes. Room for a block-quantized dtype (a 4-bit base): each
     * block of `block` elements shares one scale, the scales at byte scales_offset of the same
     * buffer; block 0: no scales (fp32, bf16). */
    GtDtype dtype;
    size_t byte_offset;
    int block;
    size_t scales_offset;
} ParamTensor;

typedef struct {
    int n_tensors;
    ParamTensor *tensors;
    size_t total;          /* floats */
    int n_layer;
    int global[ROLE_COUNT]; /* tensor index of each global role, -1 if absent */
    int (*layer)[ROLE_COUNT]; /* [n_layer][role]: tensor index of each per-layer role, -1 if absent */
    size_t *layer_begin;   /* [n_layer + 1]: offset of layer l's first tensor; [n_layer]: end of the last */
    /* param_layout_storage: the buffer's bytes, and the most elements of one tensor whose
     * storage dtype is not the act dtype (the model's conversion scratch; 0: none) */
    uint64_t bytes;
    size_t convert_max;
} ParamLayout;

void param_layout_init(ParamLayout *pl, const ModelDesc *d);
void param_layout_free(ParamLayout *pl);
int param_layout_find(const ParamLayout *pl, const char *name);
/* tensor index of a role (layer -1 for the globals), or -1 when the model has none */
int param_layout_role(const ParamLayout *pl, int layer, TensorRole role);

/* The storage dtype of tensor t of model d under act dtype act: the act dtype, but under LoRA
 * with lora.base_dtype set the frozen base's per-layer matrices (the linear weights adapters
 * attach to and a 4-bit base would quantize; embeddings, norms, biases and the LM head stay in
 * the act dtype, which the forward reads them in directly). The one home of that rule. */
GtDtype arch_storage_dtype(const ModelDesc *d, const ArchTensor *t, GtDtype act);
/* Each tensor's storage (dtype, byte offset: packed in layout order, each tensor aligned to its
 * element size, so a layout of one dtype has byte_offset = offset * size) and pl->bytes,
 * pl->convert_max: what model.c's base buffer and buffers.c's plan both read. */
void param_layout_storage(ParamLayout *pl, const ModelDesc *d, GtDtype act);

/* Parameters of d (tied embeddings counted once), from the table without building a layout. */
uint64_t arch_num_params(const ModelDesc *d);

/* HF name of block b of tensor t in layer (ignored for globals), and the rows [*row0, *row0 + *rows)
 * of the gtrain tensor it holds */
void arch_block_name(const ParamTensor *t, int b, char *buf, size_t cap, const ModelDesc *d, int64_t *row0,
                     int64_t *rows);

/* Deterministic initial values of elements [k0, k0 + n) of tensor i (k0 even), as the table says,
 * from seed: each tensor's values depend only on (seed, i, element), so a tensor can be
 * initialised through a bounded staging buffer chunk by chunk. */
void arch_init_tensor(const ParamLayout *pl, const ModelDesc *d, uint64_t seed, int i, size_t k0, size_t n,
                      float *dst);

/* The rotary table for positions [p0, p0 + np): cos and sin [np, head_dim / 2], computed in double
 * (HF's inv_freq = theta^(-2i/head_dim), with the llama3 rope_scaling adjustment when the config
 * has it) and rounded to fp32 once, so every backend reads the same bits. */
void arch_rope_table(const ModelDesc *d, int p0, int np, float *cos_out, float *sin_out);

#endif
