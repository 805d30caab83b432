/* arch.h - each architecture as data: what its block computes (norm, MLP, positions, QK-norm),
 * its Hugging Face classes and model_types, its PEFT module names and layer prefix, the table of
 * its parameter tensors (role, shape from the model's dims, initialisation, weight decay, Hugging
 * Face name(s), transposed or not, row blocks when one gtrain tensor is several HF tensors), and
 * the parameter layout built from it. No code outside arch.c asks which family a model is: it
 * reads these fields.
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
    ROLE_QNORM_W,  /* per-head RMSNorm weight of the queries [head_dim] (QK-norm) */
    ROLE_KNORM_W,  /* and of the keys */
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
    DIM_2I,    /* 2 n_inner (gate | up) */
    DIM_HD     /* head_dim */
} ArchDim;

typedef enum {
    INIT_NORMAL = 0,   /* normal(0, 0.02) */
    INIT_NORMAL_RESID, /* normal(0, 0.02 / sqrt(2 n_layer)): GPT-2's residual projections */
    INIT_ONES,         /* norm weights */
    INIT_ZEROS         /* biases */
} ArchInit;

/* When a tensor exists (depends on the config) */
typedef enum { WHEN_ALWAYS = 0, WHEN_UNTIED, WHEN_QKV_BIAS, WHEN_O_BIAS, WHEN_MLP_BIAS } ArchWhen;

/* The linear modules of a layer that LoRA can adapt (PEFT's names: each architecture lists its
 * own with arch_peft_module). */
typedef enum {
    PEFT_Q_PROJ = 0, PEFT_K_PROJ, PEFT_V_PROJ, PEFT_O_PROJ, PEFT_GATE_PROJ, PEFT_UP_PROJ, PEFT_DOWN_PROJ, /* Llama */
    PEFT_C_ATTN, PEFT_ATTN_C_PROJ, PEFT_C_FC, PEFT_MLP_C_PROJ,                                           /* GPT-2 */
    PEFT_QKV_PROJ, PEFT_GATE_UP_PROJ,                       /* Phi-3's fused ones (its o_proj, down_proj: Llama's) */
    PEFT_MODULE_COUNT
} PeftModule;

/* What a block computes. */
typedef enum { NORM_LAYERNORM = 0 /* (x - mean) rstd w + b */, NORM_RMSNORM /* x rstd w, no bias */ } ArchNorm;
typedef enum {
    MLP_GELU_TANH = 0, /* act = gelu_tanh(x Wfc + b) [I] */
    MLP_SWIGLU         /* [gate | up] = x Wfc [2I] (gate first); act = silu(gate) * up */
} ArchMlp;
typedef enum {
    POS_LEARNED = 0, /* wpe added to the token embedding */
    POS_ROPE         /* rotary on q and k (halves rotated, as HF's Llama; llama3 rope_scaling when configured) */
} ArchPos;

/* One PEFT module of an architecture: PEFT's target name and its path inside a layer */
typedef struct {
    PeftModule module;
    const char *name, *path;
} ArchPeft;

/* How a family's config.json says which biases there are (model_desc_llama.c reads them):
 *   BIAS_KEYS_LLAMA  attention_bias (false): q, k, v and o biases; mlp_bias (false): gate, up, down
 *   BIAS_KEYS_NONE   none; attention_bias / mlp_bias true refused (HF's class never has them)
 *   BIAS_KEYS_QKV    q, k, v always, no o or MLP bias (HF hard-codes them): attention_bias true is
 *                    accepted as saying the same, false refused; mlp_bias true refused
 *   BIAS_KEYS_ATTN   attention_bias (false): q, k, v and o biases; mlp_bias true refused */
typedef enum { BIAS_KEYS_NONE = 0, BIAS_KEYS_LLAMA, BIAS_KEYS_QKV, BIAS_KEYS_ATTN } ArchBiasKeys;
/* How it says the attention window (one window for every layer, or none):
 *   WINDOW_KEYS_NONE      HF's class has none and reads no key (layer_types must be full attention)
 *   WINDOW_KEYS_REQUIRED  sliding_window on every layer, required (an integer or null)
 *   WINDOW_KEYS_USE_FLAG  Qwen2's use_sliding_window / sliding_window / max_window_layers
 *   WINDOW_KEYS_OPTIONAL  sliding_window on every layer; absent or null: none */
typedef enum { WINDOW_KEYS_NONE = 0, WINDOW_KEYS_REQUIRED, WINDOW_KEYS_USE_FLAG, WINDOW_KEYS_OPTIONAL } ArchWindowKeys;

/* One Hugging Face family of an architecture: config.json's model_type and its ...ForCausalLM
 * class; hf names it in messages ("HF's Qwen2"); and how its config.json is read where families
 * of one architecture differ. */
typedef struct ArchFamily {
    const char *model_type, *hf_class, *hf;
    int kv_heads_absent;     /* num_key_value_heads absent: 0 means num_attention_heads; else it is HF's
                              * default, not num_attention_heads, and absent is refused naming it */
    int head_dim_absent;     /* head_dim absent: 0 means hidden_size / num_attention_heads; else HF's
                              * default, and absent is refused naming it */
    ArchBiasKeys biases;
    ArchWindowKeys window;
    bool pretraining_tp;     /* reads pretraining_tp (must be 1) */
    bool rope_llama3;        /* rope_scaling "llama3" is one of HF's types for it (else only "default") */
    const char *zero_keys[4]; /* dropout probabilities that must be 0 when present (gtrain has none), NULL-ended */
} ArchFamily;

/* A size config.json gives (model_desc.c reads the table in order, hf_checkpoint.c writes it). */
typedef enum { FIELD_N_LAYER = 0, FIELD_N_HEAD, FIELD_N_EMBD, FIELD_N_INNER, FIELD_VOCAB, FIELD_POSITIONS } ArchField;
typedef struct {
    const char *key;   /* config.json's name */
    const char *alt;   /* read when key is absent (GPT-2's n_ctx) and written too, or NULL */
    ArchField field;
    int lo, hi;        /* bounds (model_desc_internal.h's MAX_*) */
    int embd_times;    /* 0: required; else optional (absent or null: embd_times * n_embd) */
} ArchSizeKey;
#define ARCH_MAX_SIZE_KEYS 6

#define ARCH_MAX_FAMILIES 3
#define ARCH_MAX_PEFT 7

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

struct cJSON;
/* one step of reading config.json into d (model_desc_internal.h's readers): 0, or -1 with err set */
typedef int (*ArchKeyReader)(ModelDesc *d, const struct cJSON *root, const ArchFamily *fam, const char *path,
                             GtError *err);
#define ARCH_MAX_READERS 6

typedef struct {
    ModelArch arch;
    const char *name;            /* in messages: "GPT-2", "Llama-family" */
    ArchNorm norm;               /* every norm of the model (the two of a block and the final one) */
    ArchMlp mlp;
    ArchPos pos;
    bool qk_norm;                /* every query and key head RMS-normalised over head_dim (ROLE_QNORM_W,
                                  * ROLE_KNORM_W) after the projection and before RoPE (Qwen3) */
    int n_families;
    ArchFamily families[ARCH_MAX_FAMILIES]; /* the first is the default (a description filled by hand) */
    const char *hf_optional_prefix; /* loading also accepts HF names without it ("transformer."), or NULL */
    const char *layer_prefix;    /* HF module names of layer L: layer_prefix L "." path ("model.layers.") */
    int n_peft;
    ArchPeft peft[ARCH_MAX_PEFT]; /* the modules LoRA can adapt, in the layer's forward order */
    const char *peft_default_targets; /* PEFT's default target_modules (comma-separated); NULL: PEFT has none */
    const char *peft_summary;    /* its module names for messages: "c_attn, c_proj, c_fc" */
    bool config_from_desc;       /* a saved model's config.json is written from the description (GPT-2: every
                                  * field it has is one gtrain reads), not copied from the one read */
    ArchSizeKey sizes[ARCH_MAX_SIZE_KEYS]; /* config.json's sizes, in the order they are read */
    /* config.json's keys beside the sizes (model_desc.c reads them after the sizes, in this order) */
    const char *norm_eps_key;    /* "layer_norm_epsilon" / "rms_norm_eps": a number in (0, 1) */
    double norm_eps_default;     /* when it is absent */
    const char *act_key;         /* the MLP's activation: "activation_function" / "hidden_act" */
    const char *act_values[3];   /* the values meaning the MLP's function, NULL-ended (absent: the same) */
    const char *act_expected;    /* them in messages: "\"silu\" (the SwiGLU MLP)" */
    bool tie_default;            /* tie_word_embeddings (true or false) when absent */
    /* how config.json is read: the readers in order (model_desc.c runs them, NULL-ended): the sizes
     * by the table above, the heads, the norm/activation/tie keys above, and for the RoPE families
     * their keys (model_desc_llama.c, by ArchFamily: architectures, num_key_value_heads, head_dim,
     * biases, RoPE, window); a key no reader names is ignored */
    ArchKeyReader readers[ARCH_MAX_READERS];
    const ArchTensor *tensors;   /* globals before the layers, per-layer ones, globals after, in layout order */
    int n_tensors;
} ArchSpec;

const ArchSpec *arch_spec(ModelArch arch);
/* The family of model_type (NULL when no architecture has it), and its architecture in *arch;
 * model_type NULL (config.json has none): GPT-2's */
const ArchFamily *arch_family_of(const char *model_type, ModelArch *arch);
/* d's family (its model_type's; the architecture's first when d's model_type is not one of them) */
const ArchFamily *arch_family(const ModelDesc *d);
/* d's field of a size key */
int *arch_size_field(ModelDesc *d, ArchField f);
/* HF class name for the config.json gtrain writes and for messages: d's family's */
const char *arch_hf_class(const ModelDesc *d);
/* arch's entry for PEFT module m, or NULL when the architecture has no such module */
const ArchPeft *arch_peft_module(ModelArch arch, PeftModule m);
/* the entry of m in the first architecture that has it (names are the same wherever it appears) */
const ArchPeft *arch_peft_any(PeftModule m);
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
    /* Its storage in the buffer the layout describes (param_layout_storage; zero until then):
     * dtype, and where it starts in bytes. GT_NF4 (a 4-bit base): its units start at byte_offset
     * (arch_nf4_unit), each with its own absmax (and nested) state inside it; block = the
     * blocksize (0 otherwise); scales_offset is unused (0). */
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
    /* NF4 tensors (GT_NF4): the most elements and the most bytes of one unit (one HF tensor), 0
     * without: the host buffer a unit's values gather in as they load (model.c) */
    uint64_t nf4_unit_max, nf4_unit_bytes_max;
} ParamLayout;

void param_layout_init(ParamLayout *pl, const ModelDesc *d);
void param_layout_free(ParamLayout *pl);
int param_layout_find(const ParamLayout *pl, const char *name);
/* tensor index of a role (layer -1 for the globals), or -1 when the model has none */
int param_layout_role(const ParamLayout *pl, int layer, TensorRole role);

/* The storage dtype of tensor t of model d under act dtype act: the act dtype, but under LoRA
 * with lora.base_dtype set (GT_NF4 with a 4-bit base, d->quant) the frozen base's per-layer
 * matrices (the linear weights adapters attach to and a 4-bit base quantizes; embeddings, norms, biases and the LM head stay in
 * the act dtype, which the forward reads them in directly). The one home of that rule. */
GtDtype arch_storage_dtype(const ModelDesc *d, const ArchTensor *t, GtDtype act);
/* Each tensor's storage (dtype, byte offset: packed in layout order, each tensor aligned to its
 * element size, so a layout of one dtype has byte_offset = offset * size; an NF4 tensor's units
 * NF4_ALIGN-aligned, nf4_bytes each, block = the blocksize) and pl->bytes, pl->convert_max,
 * pl->nf4_unit_*: what model.c's base buffer and buffers.c's plan both read. */
void param_layout_storage(ParamLayout *pl, const ModelDesc *d, GtDtype act);

/* An NF4 tensor's units (GT_NF4: one per HF block of its spec, 0 for any other dtype), and unit b's
 * format (numel: the block's rows times the tensor's columns; d->quant's blocksize and nesting),
 * its byte offset in the buffer (t->byte_offset plus the units before it) and its first element
 * (within the tensor, in gtrain's [out, in] order). The one home of where a unit is. */
int arch_nf4_units(const ParamTensor *t);
void arch_nf4_unit(const ParamTensor *t, const ModelDesc *d, int b, Nf4Format *f, size_t *byte_offset, size_t *e0);

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
