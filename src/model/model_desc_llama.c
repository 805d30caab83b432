/* model_desc_llama.c - the RoPE families' Hugging Face config.json (model_type "llama" /
 * LlamaForCausalLM, "mistral" / MistralForCausalLM, "qwen2" / Qwen2ForCausalLM: ARCH_LLAMA;
 * "phi3" / Phi3ForCausalLM: ARCH_PHI3; "qwen3" / Qwen3ForCausalLM: ARCH_QWEN3) into a ModelDesc.
 * Where the families differ is each one's ArchFamily (arch.c), not a test here. Semantics are
 * those of transformers' LlamaConfig, MistralConfig, Qwen2Config, Phi3Config and Qwen3Config (4.4x
 * and 5.x); a field that would change the math in a way gtrain does not
 * implement is refused, one line naming the field and the value found, code 2.
 *
 * Required: hidden_size -> n_embd, intermediate_size -> n_inner, num_hidden_layers -> n_layer,
 *   num_attention_heads -> n_head, vocab_size, max_position_embeddings -> n_positions (HF has
 *   defaults for these, but a config without them is broken, not small).
 * num_key_value_heads -> n_kv_head: a divisor of num_attention_heads; null -> num_attention_heads.
 *   Absent: llama, phi3 -> num_attention_heads; mistral, qwen2 and qwen3 refuse it, because HF's
 *   default there is 8 (Mistral) or 32 (Qwen2, Qwen3), not num_attention_heads, and that surprise
 *   is better spelled out. qwen3 refuses an absent head_dim likewise (HF's default: 128).
 * head_dim (absent or null: hidden_size / num_attention_heads, which must then divide): even
 *   (RoPE rotates pairs), at most 4096, num_attention_heads * head_dim <= 65536; it need not
 *   equal hidden_size (Llama 3.2 style).
 * rms_norm_eps -> layer_norm_epsilon: (0, 1), default 1e-6; hidden_act: "silu" (or "swish", the same
 *   function in HF), absent: silu; tie_word_embeddings: default false (arch.c's ROPE_KEYS, read by
 *   model_desc.c as every family's).
 * Biases: llama: attention_bias (false) gives q, k, v and o biases, mlp_bias (false) gate, up and
 *   down biases. mistral: none; attention_bias / mlp_bias true is refused (HF's Mistral never has
 *   them). qwen2: q, k, v biases always, no o or MLP bias (HF's Qwen2 hard-codes them and has no
 *   attention_bias field): attention_bias true is accepted as saying the same, false is refused as
 *   contradicting the weights; mlp_bias true is refused. phi3: as mistral. qwen3: attention_bias
 *   (false) gives q, k, v and o biases; mlp_bias true is refused.
 * phi3: resid_pdrop and embd_pdrop must be 0 too (as attention_dropout); rope_scaling only
 *   "default" (HF's Phi3 has longrope / su / yarn, not implemented, and no llama3).
 * RoPE: rope_theta (> 0, default 10000). rope_scaling (transformers 4) or rope_parameters
 *   (transformers 5's name, which may also hold rope_theta; both given: refused; a theta in both
 *   places must agree). Null / absent / {} / rope_type "default": no scaling. rope_type (or the
 *   older key "type"; both given: they must agree) "llama3" needs factor (>= 1), low_freq_factor
 *   (> 0), high_freq_factor (> low_freq_factor), original_max_position_embeddings (integer >= 1).
 *   Any other type (linear, dynamic, yarn, longrope, su, ...) is refused naming
 *   rope_scaling.rope_type (or .type) and the value; so is any key the type does not use.
 *   partial_rotary_factor (top level or inside) must be 1.
 * sliding_window -> sliding_window (0: none):
 *   llama: not an HF Llama field, ignored (0).
 *   mistral: required, an integer in [1, 2^20] or null (HF's default for an absent field is 4096;
 *     spelled out for the same reason as num_key_value_heads). Every layer uses it.
 *   qwen2: HF's Qwen2Config keeps sliding_window only when use_sliding_window is true (else it
 *     becomes None) and then windows layer i iff i >= max_window_layers (layer_types, when given,
 *     overrides that). use_sliding_window false or absent (every published Qwen2 / Qwen2.5 config):
 *     sliding_window and max_window_layers are ignored, 0. use_sliding_window true: sliding_window
 *     is required (null: no window) and max_window_layers is required; 0 windows every layer,
 *     >= num_hidden_layers none, anything between is a per-layer pattern and refused.
 *   phi3: sliding_window absent or null: none; an integer: every layer (HF's Phi3 masks with it
 *     whenever it is not None). qwen3: as qwen2.
 *   layer_types (transformers 5): null, or num_hidden_layers entries "full_attention" /
 *     "sliding_attention", all the same and matching the above (a "sliding_attention" layer with
 *     no sliding_window is refused: HF raises on it too).
 * Refused when not the default: attention_dropout != 0 (gtrain has no dropout; every published
 *   config has 0.0 and a fine-tuner who sets it expects it to act), pretraining_tp != 1 (llama),
 *   partial_rotary_factor != 1, rope_interleaved / rope_traditional / use_mrope true,
 *   sliding_window_pattern, quantization_config.
 * architectures: null, or a list whose every entry is the model_type's ...ForCausalLM
 *   (LlamaForSequenceClassification and other heads are refused).
 * Every other field (bos/eos/pad token ids, torch_dtype / dtype, transformers_version, use_cache,
 *   initializer_range, _name_or_path, ...) is ignored. */
#include "model_desc_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* What every reader below needs: fam says how this family's keys differ (arch.h's ArchFamily). */
typedef struct {
    const cJSON *root;
    const char *path;
    GtError *err;
    const ArchFamily *fam;
    ModelDesc *d;
} Ctx;

#define BAD(c, ...) gt_error((c)->err, GT_EXIT_BAD_INPUT, __VA_ARGS__)
/* a number for a message, in a buffer of the enclosing block */
#define NUM(v) mj_num((v), (char[40]){0}, 40)

/* "prefix.key" for messages; a key that is not a plain identifier is quoted (and escaped). */
static const char *key_label(const char *prefix, const char *key, char *buf, size_t cap) {
    bool plain = *key != '\0' && strlen(key) <= 48;
    for (const char *p = key; plain && *p; p++)
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_';
    char q[MJ_FOUND_MAX];
    snprintf(buf, cap, "%s.%s", prefix, plain ? key : mj_quote(key, q, sizeof q));
    return buf;
}

static int read_architectures(Ctx *c) {
    const cJSON *j;
    char f[MJ_FOUND_MAX];
    const char *want = c->fam->hf_class;
    if (mj_get(c->root, "architectures", NULL, &j, c->path, c->err)) return -1;
    if (!j || cJSON_IsNull(j)) return 0;
    if (!cJSON_IsArray(j))
        return BAD(c, "%s: architectures: expected a list [\"%s\"] or null, found %s", c->path, want,
                   mj_found(j, f, sizeof f));
    for (const cJSON *it = j->child; it; it = it->next)
        if (!cJSON_IsString(it) || strcmp(it->valuestring, want) != 0)
            return BAD(c, "%s: architectures: expected [\"%s\"] for model_type \"%s\" (gtrain trains a causal LM head), found %s",
                       c->path, want, c->fam->model_type, mj_found(it, f, sizeof f));
    return 0;
}

static int read_heads(Ctx *c) {
    ModelDesc *d = c->d;
    const cJSON *r = c->root, *j;
    const char *p = c->path;
    bool present;
    /* the sizes themselves: the description's key table (model_desc_read_sizes), read before */
    if (mj_get(r, "num_key_value_heads", NULL, &j, p, c->err)) return -1;
    if (!j && c->fam->kv_heads_absent)
        return BAD(c, "%s: num_key_value_heads: expected an integer in [1, %d] (absent means %d in HF's %s, not num_attention_heads: write it out), found no such field",
                   p, d->n_head, c->fam->kv_heads_absent, c->fam->hf);
    d->n_kv_head = d->n_head;
    if (mj_get_int(r, "num_key_value_heads", NULL, false, 1, d->n_head, &d->n_kv_head, NULL, p, c->err)) return -1;
    if (d->n_head % d->n_kv_head != 0)
        return BAD(c, "%s: num_key_value_heads: expected a divisor of num_attention_heads = %d, found %d", p, d->n_head,
                   d->n_kv_head);

    if (mj_get(r, "head_dim", NULL, &j, p, c->err)) return -1;
    if (!j && c->fam->head_dim_absent)
        return BAD(c, "%s: head_dim: expected an integer in [1, %d] (absent means %d in HF's %s, not hidden_size / num_attention_heads: write it out), found no such field",
                   p, MAX_HEAD_DIM, c->fam->head_dim_absent, c->fam->hf);
    if (mj_get_int(r, "head_dim", NULL, false, 1, MAX_HEAD_DIM, &d->head_dim, &present, p, c->err)) return -1;
    if (!present) {
        if (d->n_embd % d->n_head != 0)
            return BAD(c, "%s: num_attention_heads: expected a divisor of hidden_size = %d (or a head_dim field), found %d",
                       p, d->n_embd, d->n_head);
        d->head_dim = d->n_embd / d->n_head;
        if (d->head_dim > MAX_HEAD_DIM)
            return BAD(c, "%s: head_dim: expected at most %d, found hidden_size / num_attention_heads = %d", p,
                       MAX_HEAD_DIM, d->head_dim);
    }
    if (d->head_dim % 2 != 0)
        return BAD(c, "%s: head_dim: expected an even number (RoPE rotates pairs of channels), found %s%d", p,
                   present ? "" : "hidden_size / num_attention_heads = ", d->head_dim);
    long attn = (long)d->n_head * d->head_dim;
    if (attn > MAX_ATTN_DIM)
        return BAD(c, "%s: head_dim: expected num_attention_heads * head_dim <= %d, found %d * %d = %ld", p,
                   MAX_ATTN_DIM, d->n_head, d->head_dim, attn);
    return 0;
}

/* A boolean field that must not say `forbidden` (absent is fine); why ends the message. */
static int refuse_bool(Ctx *c, const char *name, bool forbidden, const char *why) {
    bool v = !forbidden, present;
    if (mj_get_bool(c->root, name, NULL, false, &v, &present, c->path, c->err)) return -1;
    if (present && v == forbidden)
        return BAD(c, "%s: %s: expected %s or no such field (%s), found %s", c->path, name, forbidden ? "false" : "true",
                   why, forbidden ? "true" : "false");
    return 0;
}

static int read_biases(Ctx *c) {
    ModelDesc *d = c->d;
    char why[160], why2[80];
    snprintf(why2, sizeof why2, "HF's %s has no MLP biases", c->fam->hf);
    switch (c->fam->biases) {
    case BIAS_KEYS_LLAMA:
    case BIAS_KEYS_ATTN: {
        bool attn = false;
        if (mj_get_bool(c->root, "attention_bias", NULL, false, &attn, NULL, c->path, c->err)) return -1;
        d->qkv_bias = d->o_bias = attn;
        if (c->fam->biases == BIAS_KEYS_ATTN) return refuse_bool(c, "mlp_bias", true, why2);
        return mj_get_bool(c->root, "mlp_bias", NULL, false, &d->mlp_bias, NULL, c->path, c->err);
    }
    case BIAS_KEYS_NONE:
        snprintf(why, sizeof why, "HF's %s has no attention biases", c->fam->hf);
        return refuse_bool(c, "attention_bias", true, why) || refuse_bool(c, "mlp_bias", true, why2) ? -1 : 0;
    case BIAS_KEYS_QKV:
        d->qkv_bias = true;
        snprintf(why, sizeof why, "HF's %s always has q/k/v biases and no o_proj bias; it reads no attention_bias",
                 c->fam->hf);
        return refuse_bool(c, "attention_bias", false, why) || refuse_bool(c, "mlp_bias", true, why2) ? -1 : 0;
    }
    return BAD(c, "%s: model_type: internal error", c->path);
}

/* partial_rotary_factor in obj (the root or a rope object) must be 1 when present. */
static int check_partial_rotary(Ctx *c, const cJSON *obj, const char *label) {
    double v = 1;
    bool present;
    if (mj_get_number(obj, "partial_rotary_factor", label, true, "1", &v, &present, c->path, c->err)) return -1;
    if (present && v != 1)
        return BAD(c, "%s: %s: expected 1 (gtrain rotates the whole head), found %s", c->path, label, NUM(v));
    return 0;
}

static int read_unsupported(Ctx *c) {
    const cJSON *r = c->root, *j;
    char f[MJ_FOUND_MAX];
    double v = 0;
    bool present;
    for (int i = 0; i < 4 && c->fam->zero_keys[i]; i++) {
        const char *k = c->fam->zero_keys[i];
        if (mj_get_number(r, k, NULL, true, "0", &v, &present, c->path, c->err)) return -1;
        if (present && v != 0)
            return BAD(c, "%s: %s: expected 0 (gtrain trains without dropout), found %s", c->path, k, NUM(v));
    }
    if (c->fam->pretraining_tp) {
        if (mj_get(r, "pretraining_tp", NULL, &j, c->path, c->err)) return -1;
        if (j && !cJSON_IsNull(j) && !(cJSON_IsNumber(j) && j->valuedouble == 1))
            return BAD(c, "%s: pretraining_tp: expected 1 (gtrain does not reproduce the sliced matmuls of pretraining_tp > 1), found %s",
                       c->path, mj_found(j, f, sizeof f));
    }
    if (check_partial_rotary(c, r, "partial_rotary_factor") ||
        refuse_bool(c, "rope_interleaved", true, "gtrain's RoPE rotates halves, as HF's Llama does") ||
        refuse_bool(c, "rope_traditional", true, "gtrain's RoPE rotates halves, as HF's Llama does") ||
        refuse_bool(c, "use_mrope", true, "multimodal RoPE is not implemented"))
        return -1;
    if (mj_get(r, "sliding_window_pattern", NULL, &j, c->path, c->err)) return -1;
    if (j && !cJSON_IsNull(j))
        return BAD(c, "%s: sliding_window_pattern: expected no such field (a per-layer window pattern gtrain does not implement), found %s",
                   c->path, mj_found(j, f, sizeof f));
    return 0; /* quantization_config: model_desc.c's (a bitsandbytes 4-bit base, for every family) */
}

/* A rope object's member `key` is one that rope_type llama3 (or any type) uses. */
static bool rope_key_known(const char *key, bool llama3) {
    static const char *const common[] = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
    static const char *const l3[] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
        if (strcmp(key, common[i]) == 0) return true;
    for (size_t i = 0; llama3 && i < sizeof l3 / sizeof l3[0]; i++)
        if (strcmp(key, l3[i]) == 0) return true;
    return false;
}

/* A required number of a rope object (absent: "no such field"). */
static int rope_number(Ctx *c, const cJSON *r, const char *rname, const char *key, const char *what, double *out) {
    char label[64];
    bool present;
    snprintf(label, sizeof label, "%s.%s", rname, key);
    if (mj_get_number(r, key, label, false, what, out, &present, c->path, c->err)) return -1;
    if (!present) return BAD(c, "%s: %s: expected %s, found no such field", c->path, label, what);
    return 0;
}

static int read_rope(Ctx *c) {
    ModelDesc *d = c->d;
    const cJSON *rs, *rp, *rt, *ty;
    char f[MJ_FOUND_MAX], f2[MJ_FOUND_MAX], label[128];
    bool present;
    double theta = 10000;
    if (mj_get_number(c->root, "rope_theta", NULL, false, "a number > 0", &theta, &present, c->path, c->err)) return -1;
    if (present && !(theta > 0)) return BAD(c, "%s: rope_theta: expected a number > 0, found %s", c->path, NUM(theta));
    bool top_theta = present;
    if (mj_get(c->root, "rope_scaling", NULL, &rs, c->path, c->err) ||
        mj_get(c->root, "rope_parameters", NULL, &rp, c->path, c->err))
        return -1;
    if (rs && !cJSON_IsNull(rs) && !cJSON_IsObject(rs))
        return BAD(c, "%s: rope_scaling: expected an object or null, found %s", c->path, mj_found(rs, f, sizeof f));
    if (rp && !cJSON_IsNull(rp) && !cJSON_IsObject(rp))
        return BAD(c, "%s: rope_parameters: expected an object or null, found %s", c->path, mj_found(rp, f, sizeof f));
    bool has_rs = cJSON_IsObject(rs), has_rp = cJSON_IsObject(rp);
    if (has_rs && has_rp)
        return BAD(c, "%s: rope_parameters: expected either rope_scaling or rope_parameters (its transformers 5 name), found both",
                   c->path);
    d->rope_theta = theta;
    if (!has_rs && !has_rp) return 0;
    const cJSON *r = has_rs ? rs : rp;
    const char *rname = has_rs ? "rope_scaling" : "rope_parameters";

    char lt[64], lty[64];
    snprintf(lt, sizeof lt, "%s.rope_type", rname);
    snprintf(lty, sizeof lty, "%s.type", rname);
    if (mj_get(r, "rope_type", lt, &rt, c->path, c->err) || mj_get(r, "type", lty, &ty, c->path, c->err)) return -1;
    if (rt && !cJSON_IsString(rt))
        return BAD(c, "%s: %s: expected a string, found %s", c->path, lt, mj_found(rt, f, sizeof f));
    if (ty && !cJSON_IsString(ty))
        return BAD(c, "%s: %s: expected a string, found %s", c->path, lty, mj_found(ty, f, sizeof f));
    if (rt && ty && strcmp(rt->valuestring, ty->valuestring) != 0)
        return BAD(c, "%s: %s: expected the same as %s = %s, found %s", c->path, lty, lt, mj_found(rt, f, sizeof f),
                   mj_found(ty, f2, sizeof f2));
    const cJSON *t = rt ? rt : ty;
    const char *type = t ? t->valuestring : "default";
    bool llama3 = strcmp(type, "llama3") == 0;
    if (llama3 && !c->fam->rope_llama3)
        return BAD(c, "%s: %s: expected \"default\" (HF's %s has no llama3 RoPE; gtrain implements no other scaling), found %s",
                   c->path, rt ? lt : lty, c->fam->hf, mj_found(t, f, sizeof f));
    if (!llama3 && strcmp(type, "default") != 0)
        return BAD(c, "%s: %s: expected \"default\"%s (gtrain implements no other RoPE scaling), found %s", c->path,
                   rt ? lt : lty, c->fam->rope_llama3 ? " or \"llama3\"" : "", mj_found(t, f, sizeof f));
    for (const cJSON *it = r->child; it; it = it->next)
        if (!rope_key_known(it->string, llama3))
            return BAD(c, "%s: %s: expected no such field with rope_type \"%s\" (%s), found %s", c->path,
                       key_label(rname, it->string, label, sizeof label), type,
                       llama3 ? "llama3 takes factor, low_freq_factor, high_freq_factor, original_max_position_embeddings"
                              : "the default RoPE takes only rope_theta",
                       mj_found(it, f, sizeof f));

    double inner = 0;
    snprintf(label, sizeof label, "%s.rope_theta", rname);
    if (mj_get_number(r, "rope_theta", label, false, "a number > 0", &inner, &present, c->path, c->err)) return -1;
    if (present) {
        if (!(inner > 0)) return BAD(c, "%s: %s: expected a number > 0, found %s", c->path, label, NUM(inner));
        if (top_theta && inner != theta)
            return BAD(c, "%s: rope_theta: expected the same value as %s = %s, found %s", c->path, label, NUM(inner),
                       NUM(theta));
        d->rope_theta = inner;
    }
    snprintf(label, sizeof label, "%s.partial_rotary_factor", rname);
    if (check_partial_rotary(c, r, label)) return -1;
    if (!llama3) return 0;

    double factor, lo, hi;
    if (rope_number(c, r, rname, "factor", "a number >= 1", &factor)) return -1;
    if (!(factor >= 1)) return BAD(c, "%s: %s.factor: expected a number >= 1, found %s", c->path, rname, NUM(factor));
    if (rope_number(c, r, rname, "low_freq_factor", "a number > 0", &lo)) return -1;
    if (!(lo > 0)) return BAD(c, "%s: %s.low_freq_factor: expected a number > 0, found %s", c->path, rname, NUM(lo));
    if (rope_number(c, r, rname, "high_freq_factor", "a number > low_freq_factor", &hi)) return -1;
    if (!(hi > lo))
        return BAD(c, "%s: %s.high_freq_factor: expected a number > low_freq_factor = %s, found %s", c->path, rname,
                   NUM(lo), NUM(hi));
    snprintf(label, sizeof label, "%s.original_max_position_embeddings", rname);
    if (mj_get_int(r, "original_max_position_embeddings", label, true, 1, MAX_POSITIONS,
                   &d->rope_original_max_positions, NULL, c->path, c->err))
        return -1;
    d->rope_llama3 = true;
    d->rope_factor = factor;
    d->rope_low_freq_factor = lo;
    d->rope_high_freq_factor = hi;
    return 0;
}

/* layer_types (null / absent: *present false): num_hidden_layers entries, each "full_attention"
 * or "sliding_attention"; *n_sliding counts the latter. */
static int read_layer_types(Ctx *c, bool *present, int *n_sliding) {
    const cJSON *j;
    char f[MJ_FOUND_MAX];
    *present = false;
    *n_sliding = 0;
    if (mj_get(c->root, "layer_types", NULL, &j, c->path, c->err)) return -1;
    if (!j || cJSON_IsNull(j)) return 0;
    if (!cJSON_IsArray(j))
        return BAD(c, "%s: layer_types: expected a list of num_hidden_layers = %d strings or null, found %s", c->path,
                   c->d->n_layer, mj_found(j, f, sizeof f));
    int n = 0;
    for (const cJSON *it = j->child; it; it = it->next, n++) {
        if (cJSON_IsString(it) && strcmp(it->valuestring, "sliding_attention") == 0)
            ++*n_sliding;
        else if (!(cJSON_IsString(it) && strcmp(it->valuestring, "full_attention") == 0))
            return BAD(c, "%s: layer_types: expected \"full_attention\" or \"sliding_attention\" entries, found %s at index %d",
                       c->path, mj_found(it, f, sizeof f), n);
    }
    if (n != c->d->n_layer)
        return BAD(c, "%s: layer_types: expected num_hidden_layers = %d entries, found %d", c->path, c->d->n_layer, n);
    if (*n_sliding != 0 && *n_sliding != n)
        return BAD(c, "%s: layer_types: expected the same type for every layer (gtrain has one window for all layers), found %d \"sliding_attention\" and %d \"full_attention\" layers",
                   c->path, *n_sliding, n - *n_sliding);
    *present = true;
    return 0;
}

static int read_window(Ctx *c) {
    ModelDesc *d = c->d;
    const cJSON *r = c->root, *j;
    const char *p = c->path;
    int L = d->n_layer, n_sliding = 0, window = 0, ignored = 0;
    bool types, present;
    d->sliding_window = 0;
    if (read_layer_types(c, &types, &n_sliding)) return -1;
    const char *hf = c->fam->hf;
    switch (c->fam->window) {
    case WINDOW_KEYS_NONE: /* HF's Llama has no sliding window and reads none of these fields */
        if (n_sliding)
            return BAD(c, "%s: layer_types: expected \"full_attention\" layers (HF's %s has no sliding window), found %d \"sliding_attention\"",
                       p, hf, n_sliding);
        return 0;
    case WINDOW_KEYS_REQUIRED:
    case WINDOW_KEYS_OPTIONAL:
        if (mj_get(r, "sliding_window", NULL, &j, p, c->err)) return -1;
        if (!j && c->fam->window == WINDOW_KEYS_REQUIRED)
            return BAD(c, "%s: sliding_window: expected an integer in [1, %d] or null (absent means 4096 in HF's %s: write it out), found no such field",
                       p, MAX_POSITIONS, hf);
        if (mj_get_int(r, "sliding_window", NULL, false, 1, MAX_POSITIONS, &window, NULL, p, c->err)) return -1;
        if (types && (n_sliding > 0) != (window > 0))
            return BAD(c, "%s: layer_types: expected every layer \"%s\" (HF's %s applies sliding_window to every layer), found \"%s\"",
                       p, window ? "sliding_attention" : "full_attention", hf,
                       window ? "full_attention" : "sliding_attention");
        d->sliding_window = window;
        return 0;
    case WINDOW_KEYS_USE_FLAG: {
        bool use = false;
        if (mj_get_bool(r, "use_sliding_window", NULL, false, &use, NULL, p, c->err)) return -1;
        if (!use) { /* HF: sliding_window becomes None; max_window_layers then selects nothing */
            if (mj_get_int(r, "sliding_window", NULL, false, 0, INT_MAX, &ignored, NULL, p, c->err) ||
                mj_get_int(r, "max_window_layers", NULL, false, 0, INT_MAX, &ignored, NULL, p, c->err))
                return -1;
            if (n_sliding)
                return BAD(c, "%s: layer_types: expected \"full_attention\" layers with use_sliding_window false (HF's %s then has no sliding_window), found %d \"sliding_attention\"",
                           p, hf, n_sliding);
            return 0;
        }
        if (mj_get(r, "sliding_window", NULL, &j, p, c->err)) return -1;
        if (!j)
            return BAD(c, "%s: sliding_window: expected an integer in [1, %d] or null with use_sliding_window true (absent means 4096 in HF's %s: write it out), found no such field",
                       p, MAX_POSITIONS, hf);
        if (mj_get_int(r, "sliding_window", NULL, false, 1, MAX_POSITIONS, &window, NULL, p, c->err)) return -1;
        if (types) {
            if (n_sliding && !window)
                return BAD(c, "%s: layer_types: expected \"full_attention\" layers with sliding_window null, found %d \"sliding_attention\"",
                           p, n_sliding);
            d->sliding_window = n_sliding ? window : 0;
            return 0;
        }
        int mwl = 0;
        if (mj_get_int(r, "max_window_layers", NULL, false, 0, INT_MAX, &mwl, &present, p, c->err)) return -1;
        if (!window) return 0; /* null: no layer has a window */
        if (!present)
            return BAD(c, "%s: max_window_layers: expected an integer >= 0 with use_sliding_window true (layers from max_window_layers on use the window; absent means 28 in HF's %s: write it out), found no such field",
                       p, hf);
        if (mwl > 0 && mwl < L)
            return BAD(c, "%s: max_window_layers: expected 0 (every layer windowed) or at least num_hidden_layers = %d (none) with use_sliding_window true, found %d (layers %d to %d would use the window and layers 0 to %d not: a per-layer pattern gtrain does not implement)",
                       p, L, mwl, mwl, L - 1, mwl - 1);
        d->sliding_window = mwl == 0 ? window : 0;
        return 0;
    }
    }
    return BAD(c, "%s: model_type: internal error", p);
}

#define CTX(name) Ctx name = {.root = root, .path = path, .err = err, .fam = fam, .d = desc}

int model_desc_rope_architectures(ModelDesc *desc, const cJSON *root, const ArchFamily *fam, const char *path,
                                  GtError *err) {
    CTX(c);
    return read_architectures(&c);
}

int model_desc_rope_heads(ModelDesc *desc, const cJSON *root, const ArchFamily *fam, const char *path, GtError *err) {
    CTX(c);
    return read_heads(&c);
}

int model_desc_rope_keys(ModelDesc *desc, const cJSON *root, const ArchFamily *fam, const char *path, GtError *err) {
    CTX(c);
    return read_biases(&c) || read_unsupported(&c) || read_rope(&c) || read_window(&c) ? -1 : 0;
}
