/* lora.h - LoRA and PiSSA adapters on a model: PEFT's LoraConfig (the run config's lora: section,
 * or an adapter's adapter_config.json) applied to a ModelDesc, and the adapters as data.
 *
 * A LoRA model trains only its adapters: for each adapted module of each layer, lora_A [r, in]
 * and lora_B [rows, r] (PEFT's shapes), and the module's output gains
 *     y += scale * (dropout(x) A^T) B^T
 * The adapters are the model's trainable layout (params, grads, AdamW state, ZeRO-1 shards,
 * clipping and the all-reduce all run over them alone); the base weights are frozen, held once in
 * the compute dtype (MEM_FROZEN), with no gradient and no optimizer state.
 *
 * Modules map onto gtrain's fused tensors: q_proj, k_proj and v_proj are row blocks of the fused
 * q|k|v weight, gate_proj and up_proj of gate|up (the arch table's HF blocks say which rows). */
#ifndef GT_LORA_H
#define GT_LORA_H

#include "arch.h"
#include "config.h"
#include "peft.h"

/* init_lora_weights as model_create applies it (PiSSA starts from LORA_INIT_TRUE and is then
 * lora_pissa_init's, once the base weights are loaded):
 *   LORA_INIT_TRUE     PEFT's default: A Kaiming-uniform (a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B zero
 *   LORA_INIT_GAUSSIAN A normal(0, 1/r), B zero
 *   LORA_INIT_FALSE    A and B both Kaiming-uniform (nn.Linear's default; the adapter is not a no-op)
 * Deterministic in (seed, tensor, element) as arch_init_tensor. */
typedef enum { LORA_INIT_TRUE = 0, LORA_INIT_GAUSSIAN, LORA_INIT_FALSE } LoraInit;

/* Where an adapted module sits in its layer. */
typedef struct {
    PeftModule module;
    TensorRole role;   /* the base weight: ROLE_QKV_W, ROLE_O_W, ROLE_FC_W or ROLE_DOWN_W */
    int64_t row0, rows; /* the output rows of that weight the module is (a block of a fused weight) */
    int64_t in;        /* its input width */
    const ArchTensor *tensor; /* that weight in the arch table, and the HF block (tensor->blocks[block]) the module is */
    int block;
} LoraSite;

/* Where module sits in d's architecture, from the arch table's HF names (its weight's block is
 * named "...<peft_module_path>.weight"); false when the architecture has no such module. Every
 * other mapping of a PEFT module onto gtrain's tensors (the adapters' sites and shapes, PEFT's
 * entries, gtrain merge's target tensors) is this one. */
bool lora_module_site(const ModelDesc *d, PeftModule module, LoraSite *out);

/* The adapted modules of d (d->adapter.targets), in the order of the layer's forward. Returns the count. */
int lora_sites(const ModelDesc *d, LoraSite out[PEFT_MODULE_COUNT]);

/* d->adapter.targets as a mask over PeftModule (what peft.h's functions take) */
void lora_targets_mask(const ModelDesc *d, bool mask[PEFT_MODULE_COUNT]);

/* The most consecutive sites (lora_sites' order) on one base weight: the rank of the widest
 * concatenated lora_A (adapter_linear.c's group GEMM) is this times r; 0 without adapters. */
int lora_group_max(const ModelDesc *d);

/* The row stride of the adapters' intermediates lora_h = x A^T and its gradient lora_dh (buffers.c
 * plans them [BT, this], adapter_linear.c's GEMMs use it as their leading dimension): under LoRA
 * their widest use, r * lora_group_max (a group's concatenated x A_cat^T), rounded up to 8
 * elements, so each row starts on a 16-byte boundary in bf16 (32 in fp32) and the adapter GEMMs
 * run on cuBLASLt's 16-byte path (cuda/gemm_align.cu) whatever r is; the columns past a GEMM's
 * width are padding, never written or read. DoRA: r (its h and dh are matmul inputs, packed).
 * 0 without adapters. */
int lora_h_stride(const ModelDesc *d);

/* Trainable parameters of the adapters: n_layer * sum over sites of r * (in + rows) (+ rows: DoRA's magnitude). */
uint64_t lora_num_params(const ModelDesc *d);

/* Tensors per site in the adapters' layout: lora_A, lora_B and under DoRA the magnitude (peft.h's
 * PEFT_PART_*): the adapter kind's parts (adapter.h). */
int lora_parts(const ModelDesc *d);

/* What adapter tensor i of the layout lora_layout_init builds for d is, from the layout's fixed order
 * (per layer, per part, per site), so the tensor table itself knows no adapter: its module, and its
 * part (PEFT_PART_A, PEFT_PART_B or DoRA's PEFT_PART_M). */
PeftModule lora_tensor_module(const ModelDesc *d, int i);
int lora_tensor_part(const ModelDesc *d, int i);
/* Entry e of peft_entries_for (layer e / n, site e % n of the n lora_sites) and the layout: the index
 * of its part, and the entry of tensor i */
int lora_entry_tensor(const ModelDesc *d, int e, int part);
int lora_tensor_entry(const ModelDesc *d, int i);

/* The adapters' layout (the model's trainable layout under LoRA): for each layer, part-major: every
 * site's lora_A [r, in] (the sites in lora_sites' order), then every lora_B [rows, r] (then under
 * DoRA every lora_magnitude_vector [rows]), so the A's of the sites on one fused weight (q, k, v on
 * the qkv weight; gate, up) are one [sum of r, in] matrix in the parameters, their compute copy and
 * their gradients, which one GEMM multiplies (adapter_linear.c). Named by their PEFT keys
 * ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), weight decay on (as HF's
 * Trainer decays every non-bias, non-norm weight). layer_begin brackets each layer's adapters;
 * there are no globals. */
void lora_layout_init(ParamLayout *pl, const ModelDesc *d);

/* PiSSA's initialisation runs on the host before step 1, one adapted block at a time: about how
 * many bytes it needs at its peak (the largest block's fp32 copy, A, B and pissa_host_bytes);
 * freed before training, not part of the plan's categories. niter as lora_pissa_niter_of. */
uint64_t lora_pissa_host_bytes(const ModelDesc *d, int niter);

/* The dropout key (dropout.h) of one adapter application: a pure function of the run's seed,
 * the optimizer step, the layer and the module. Not of the micro-batch or the rank: the element
 * index within the key counts over the step's whole batch (dropout.h), so the mask is a function
 * of (seed, step, the row's place in the step's batch, layer, module, element) and the
 * accumulation split and the number of ranks change nothing. */
uint64_t lora_dropout_key(uint64_t seed, long step, int layer, PeftModule module);

/* The adapter tensor i of the layout (t = &pl->tensors[i]): elements [k0, k0 + n) of its initial
 * values per d->adapter.init, deterministic in (seed, i, element) (model.c's initialisation calls it for
 * the tensors the arch table does not describe). */
void lora_init_tensor(const ParamTensor *t, const ModelDesc *d, uint64_t seed, int i, size_t k0, size_t n,
                      float *dst);

/* Apply the run config's lora: section to d (adapter.r 0 without one), and fill pc with the PEFT
 * config the run's adapter files will carry. With lora.init_from the adapter's
 * adapter_config.json gives r, lora_alpha, use_rslora and the modules (keys also given in the run
 * config must agree; lora_dropout may differ). Errors name the file and key (code 2). */
int lora_configure(ModelDesc *d, PeftConfig *pc, const RunConfig *cfg, GtError *err);
/* lora_configure's checks of the lora: section's values that need no model (init_lora_weights
 * one of PEFT's, target_modules names PEFT knows, no PiSSA with init_from): the config reads them
 * as text; these refuse one named at its file:line:col (or --set), code 2. */
int lora_check_config(const RunConfig *cfg, GtError *err);

/* The adapter directory's adapter_config.json applied to d (r, scale, dropout, modules), as
 * lora_configure does for lora.init_from; pc gets the config. Code 2 for a bad or foreign one. */
int lora_desc_from_adapter(ModelDesc *d, const char *dir, PeftConfig *pc, GtError *err);
/* The same from a config already read (cfile names it in messages). */
int lora_desc_apply(ModelDesc *d, const PeftConfig *pc, const char *cfile, GtError *err);

/* init_lora_weights: -1 "pissa" (exact SVD), N "pissa_niter_N", -2 not PiSSA */
int lora_pissa_niter_of(const char *init);

struct Model;
/* Give the model the PEFT config its adapter files carry (copied), and for a PiSSA run the
 * directory its initial adapter is (to be) written to (NULL otherwise). */
void lora_set_run(struct Model *m, const PeftConfig *pc, const char *pissa_init_dir);

/* PiSSA (init_lora_weights pissa / pissa_niter_N; niter -1: exact SVD): for every adapted block
 * of the loaded base weights W (read in the act dtype, as PEFT reads a bf16 model's weights),
 * A = diag(sqrt(S_r/s)) Vh_r, B = U_r diag(sqrt(S_r/s)) into the adapters and W - s B A into the
 * frozen base (svd.h's pissa_init; a 4-bit base: its dequantized W, the residual quantized again, unless
 * the armed QPiSSA hook already made every adapter from the full-precision W as the base loaded);
 * then (write) the initial adapter is written to m->ad.pissa_init_dir as a
 * PEFT adapter directory (PEFT's pissa_init save, which the rank-2r conversion reads). Host
 * memory: one block of W and the SVD's workspace (svd.h) at a time. */
int lora_pissa_init(struct Model *m, int niter, uint64_t seed, bool write, GtError *err);

/* QPiSSA: PiSSA with a 4-bit (NF4) base. Armed, the model's base_hook sees each adapted unit's fp32
 * values as the base loads (model.h's ModelBaseHook), before they are quantized:
 *   conv_dir NULL: PiSSA itself on those values (the full-precision W of the files; of a bitsandbytes
 *     base, its dequantized W, as PEFT does): A and B into the adapters (the seeds and keys of
 *     lora_pissa_init: the adapter an unquantized run with the same W gets) and W - s B A into values,
 *     so the residual is what is quantized; lora_pissa_init then only writes the initial adapter;
 *   conv_dir a PiSSA run's rank-2r conversion (a checkpoint resumed from): W - s B0 A0 from its second
 *     halves (pissa_residual, bit for bit the residual PiSSA made), the adapters untouched.
 * Loading the base again while armed rebuilds it. 0, or -1 (code 2: a bad conv_dir). */
int lora_qpissa_arm(struct Model *m, int niter, uint64_t seed, const char *conv_dir, GtError *err);
/* The hook off and conv_dir closed; which adapters the hook made stays known to lora_pissa_init. */
void lora_qpissa_disarm(struct Model *m);
void lora_qpissa_free(struct Model *m);
/* whether the hook made every adapter (the SVD on the full-precision W) */
bool lora_qpissa_made(const struct Model *m);

/* Read a PEFT adapter directory into the model's adapters: its r, modules and scale checked
 * against the model's (code 2 naming the file and key otherwise). On a PiSSA run
 * (m->ad.pissa_init_dir) the directory holds the rank-2r conversion (a run checkpoint): A and B are
 * its first halves, and the base, freshly loaded, becomes W - s B0 A0 from the second halves,
 * bit for bit what lora_pissa_init made. */
int lora_load_adapter(struct Model *m, const char *dir, GtError *err);

/* A PiSSA run resumed into an output_dir without its initial adapter: write m->ad.pissa_init_dir
 * from the second halves of the rank-2r conversion in conv_dir (the checkpoint resumed from). */
int lora_write_pissa_init(struct Model *m, const char *conv_dir, GtError *err);

/* Write the model's adapters as a PEFT adapter directory (adapter_model.safetensors and
 * adapter_config.json; F32, or BF16 with bf16). On a PiSSA run: PEFT's conversion to a plain LoRA
 * of rank 2r relative to the original base (svd.h's pissa_to_lora_2r), streamed. */
int lora_save_adapter(const char *dir, struct Model *m, bool bf16, GtError *err);

#endif
