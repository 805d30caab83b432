#!/usr/bin/env python3
"""hf_llama.py - a hand-written PyTorch Llama family (Llama, Mistral, Qwen2), kept as the library of
tests/tools/peft_lora.py and peft_merge_ref.py (its model with a LoRA hook, its safetensors reader and
writer) and checked here by `selftest` against naive loops. Its commands make, loss, train and
bench are no longer its own: they run Hugging Face transformers' real classes
(tests/tools/hf_models.py, same arguments), which is what gtrain's tests compare against.

Written from the equations of Hugging Face transformers' LlamaForCausalLM / MistralForCausalLM /
Qwen2ForCausalLM (modeling_llama.py, modeling_mistral.py, modeling_qwen2.py, modeling_rope_utils.py)
and from nothing of gtrain's: its own config reading, its own safetensors reader and writer
(struct + json), its own model. gtrain's tests run it to check gtrain's loss, gradients, training
and checkpoints against a second implementation.

The forward is HF's: RMSNorm (statistics in float32 or wider, then weight * x.to(dtype)), rotary
embeddings with rotate_half, grouped-query attention by repeat_kv (query head h reads kv head
h // (heads / kv_heads)), a causal mask plus a sliding window where HF has one (key j kept for query
t when t - j < window: Mistral on every layer; Qwen2 with use_sliding_window on layers i >=
max_window_layers, or as config layer_types says), scores * head_dim**-0.5, softmax in float32 or
wider, SwiGLU MLP down(silu(gate(x)) * up(x)), q/k/v biases for Qwen2, attention_bias (q, k, v, o)
and mlp_bias for Llama, tie_word_embeddings, no dropout, cross-entropy over logits upcast to float32.
Deviations, on purpose:
  * the rope cos/sin table is computed in float64 (inv_freq, the llama3 adjustment, pos * inv_freq,
    cos, sin), then cast to the model's dtype; rope_table(hf_fp32=True) computes it as HF does
    (inv_freq and the angles in float32).
  * in float64 RMSNorm and softmax stay in float64 (HF would drop them to float32).
rope_scaling: none, "linear" or "llama3" (exactly as _compute_llama3_parameters); others refused.

usage ($GTRAIN_REFS_PY; CPU only):
  hf_llama.py make|loss|train|bench ...   (tests/tools/hf_models.py: transformers' classes)
  hf_llama.py selftest
TOKENS.txt: one sequence per line, whitespace-separated token ids; each row predicts tokens 1..n-1
from their prefixes (with --seq-len T: a row is cut into windows of T+1 tokens, stride T). The loss
is the mean over all predicted tokens of all rows.
"""
import argparse, json, math, os, shutil, struct, sys
import torch
import torch.nn.functional as F

EMBED, NORM, HEAD = "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"


def die(msg):
    print(f"hf_llama.py: {msg}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------- config (HF config classes' defaults)
class Cfg:
    def __init__(self, d):
        mt = d.get("model_type")
        if mt not in ("llama", "mistral", "qwen2"):
            die(f"model_type {mt!r}: expected llama, mistral or qwen2")
        self.model_type = mt
        if d.get("hidden_act", "silu") != "silu":
            die(f"hidden_act {d.get('hidden_act')!r}: only silu")
        defaults = {"llama": (32000, 4096, 11008, 32, 32, None),
                    "mistral": (32000, 4096, 14336, 32, 32, 8),
                    "qwen2": (151936, 4096, 22016, 32, 32, 32)}[mt]
        self.vocab = d.get("vocab_size", defaults[0])
        self.hidden = d.get("hidden_size", defaults[1])
        self.inter = d.get("intermediate_size", defaults[2])
        self.layers = d.get("num_hidden_layers", defaults[3])
        self.heads = d.get("num_attention_heads", defaults[4])
        kv = d.get("num_key_value_heads", defaults[5])
        self.kv_heads = self.heads if kv is None else kv
        self.head_dim = d.get("head_dim") or self.hidden // self.heads
        if self.heads % self.kv_heads or self.head_dim % 2:
            die("num_attention_heads must be a multiple of num_key_value_heads, head_dim even")
        self.eps = float(d.get("rms_norm_eps", 1e-6))
        self.tie = bool(d.get("tie_word_embeddings", False))
        rp = d.get("rope_parameters") or {}  # newer transformers keep theta and the type here
        self.theta = float(rp.get("rope_theta", d.get("rope_theta", 10000.0)))
        rs = d.get("rope_scaling") or (rp if rp.get("rope_type", "default") != "default" else None)
        self.rope_type, self.rope = "default", {}
        if rs:
            self.rope_type = rs.get("rope_type", rs.get("type", "default"))
            if self.rope_type not in ("default", "linear", "llama3"):
                die(f"rope_scaling type {self.rope_type!r}: only default, linear, llama3")
            self.rope = rs
        if mt == "llama":
            ab = bool(d.get("attention_bias", False))
            self.qkv_bias, self.o_bias, self.mlp_bias = ab, ab, bool(d.get("mlp_bias", False))
        else:
            self.qkv_bias, self.o_bias, self.mlp_bias = mt == "qwen2", False, False
        # per-layer sliding window (None: full causal)
        if mt == "llama":
            sw = None
        elif mt == "mistral":
            sw = d.get("sliding_window", 4096)
        else:
            sw = d.get("sliding_window", 4096) if d.get("use_sliding_window", False) else None
        lt = d.get("layer_types")
        if lt is None:
            mwl = d.get("max_window_layers", 28) if mt == "qwen2" else 0
            lt = ["sliding_attention" if sw is not None and i >= mwl else "full_attention" for i in range(self.layers)]
        if len(lt) != self.layers:
            die("layer_types must have num_hidden_layers entries")
        self.window = [sw if t == "sliding_attention" else None for t in lt]


def param_specs(c):
    """(name, shape, kind) in HF's state-dict order; kind: w (2-D weight), norm, bias."""
    q, kv, H, I = c.heads * c.head_dim, c.kv_heads * c.head_dim, c.hidden, c.inter
    out = [(EMBED, (c.vocab, H), "w")]
    for i in range(c.layers):
        p = f"model.layers.{i}."
        for nm, o, n_in, has_b in (("q", q, H, c.qkv_bias), ("k", kv, H, c.qkv_bias), ("v", kv, H, c.qkv_bias),
                                   ("o", H, q, c.o_bias)):
            out.append((f"{p}self_attn.{nm}_proj.weight", (o, n_in), "w"))
            if has_b:
                out.append((f"{p}self_attn.{nm}_proj.bias", (o,), "bias"))
        for nm, o, n_in in (("gate", I, H), ("up", I, H), ("down", H, I)):
            out.append((f"{p}mlp.{nm}_proj.weight", (o, n_in), "w"))
            if c.mlp_bias:
                out.append((f"{p}mlp.{nm}_proj.bias", (o,), "bias"))
        out.append((f"{p}input_layernorm.weight", (H,), "norm"))
        out.append((f"{p}post_attention_layernorm.weight", (H,), "norm"))
    out.append((NORM, (H,), "norm"))
    if not c.tie:
        out.append((HEAD, (c.vocab, H), "w"))
    return out


def init_params(c, seed, std=0.02, bias_std=0.02):
    """weights N(0, std), RMSNorm weights 1 + 0.1 N(0, 1) (so that they matter), biases N(0, bias_std);
    float32, drawn in param_specs order from one torch.Generator seeded with seed"""
    g = torch.Generator().manual_seed(seed)
    P = {}
    for name, shape, kind in param_specs(c):
        r = torch.randn(shape, generator=g, dtype=torch.float32)
        P[name] = 1.0 + 0.1 * r if kind == "norm" else (bias_std if kind == "bias" else std) * r
    return P


# ---------------------------------------------------------------- safetensors (own reader / writer)
ST_DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (None, 2), "F64": (torch.float64, 8)}
OUT_DTYPES = {"f32": "F32", "bf16": "BF16", "f16": "F16"}


def tensor_bytes(t, st_dtype):
    t = t.detach().contiguous()
    if st_dtype == "BF16":  # the upper 16 bits of fp32, round to nearest even (torch's cast)
        return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    return t.to(ST_DTYPES[st_dtype][0]).numpy().astype({"F32": "<f4", "F16": "<f2", "F64": "<f8"}[st_dtype]).tobytes()


def st_write(path, items, st_dtype):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in items:
        b = tensor_bytes(t, st_dtype)
        header[name] = {"dtype": st_dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # padded to 8 bytes, as the safetensors library does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def _no_dup(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise ValueError(f"duplicate key {k!r}")
        d[k] = v
    return d


def st_read(path):
    """{name: float64 tensor} of one safetensors file (F32, BF16, F16, F64), every field checked."""
    raw = open(path, "rb").read()
    if len(raw) < 8:
        die(f"{path}: shorter than 8 bytes")
    n = struct.unpack("<Q", raw[:8])[0]
    if n > len(raw) - 8 or n > 100_000_000:
        die(f"{path}: header length {n} past the end of the file")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"), object_pairs_hook=_no_dup)
    except ValueError as e:
        die(f"{path}: bad header JSON: {e}")
    data, out, end = memoryview(raw)[8 + n:], {}, 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (a, b) = t["dtype"], t["shape"], t["data_offsets"]
        if dt not in ST_DTYPES:
            die(f"{path}: tensor {name}: dtype {dt} not supported")
        numel = math.prod(shape)
        if not (0 <= a <= b <= len(data)) or b - a != numel * ST_DTYPES[dt][1]:
            die(f"{path}: tensor {name}: data_offsets [{a}, {b}] do not hold {shape} {dt}")
        end = max(end, b)
        buf = bytearray(data[a:b])
        if dt == "BF16":  # bf16 bits are the upper half of an fp32
            bits = torch.frombuffer(buf, dtype=torch.int16).to(torch.int32) & 0xFFFF if numel else torch.zeros(0, dtype=torch.int32)
            v = (bits << 16).view(torch.float32)
        else:
            v = torch.frombuffer(buf, dtype=ST_DTYPES[dt][0]) if numel else torch.zeros(0, dtype=ST_DTYPES[dt][0])
        out[name] = v.to(torch.float64).reshape(shape)
    if end != len(data):
        die(f"{path}: {len(data) - end} bytes after the last tensor")
    return out


def save_model(outdir, config_path, P, st_dtype, max_shard_bytes=0, names=None):
    """HF layout: model.safetensors, or model-0000K-of-0000N.safetensors + model.safetensors.index.json
    when the tensors pass max_shard_bytes (a shard closes before a tensor that would overflow it)."""
    os.makedirs(outdir, exist_ok=True)
    names = names or list(P)
    size = ST_DTYPES[st_dtype][1]
    shards, cur, cur_bytes = [], [], 0
    for nm in names:
        nb = P[nm].numel() * size
        if cur and max_shard_bytes > 0 and cur_bytes + nb > max_shard_bytes:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append(nm)
        cur_bytes += nb
    shards.append(cur)
    for f in os.listdir(outdir):  # no stale shards of an earlier save
        if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".safetensors.index.json")):
            os.remove(os.path.join(outdir, f))
    if len(shards) == 1:
        st_write(os.path.join(outdir, "model.safetensors"), [(n, P[n]) for n in names], st_dtype)
    else:
        wmap = {}
        for k, sh in enumerate(shards):
            fn = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
            st_write(os.path.join(outdir, fn), [(n, P[n]) for n in sh], st_dtype)
            wmap.update({n: fn for n in sh})
        index = {"metadata": {"total_size": sum(P[n].numel() * size for n in names)}, "weight_map": wmap}
        with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
    if os.path.abspath(config_path) != os.path.abspath(os.path.join(outdir, "config.json")):
        shutil.copyfile(config_path, os.path.join(outdir, "config.json"))


def load_model(mdir):
    """(Cfg, {name: float64 tensor}) of a model directory, names and shapes checked against the config."""
    c = Cfg(json.load(open(os.path.join(mdir, "config.json"))))
    idx = os.path.join(mdir, "model.safetensors.index.json")
    W = {}
    if os.path.exists(idx):
        wmap = json.load(open(idx))["weight_map"]
        for fn in sorted(set(wmap.values())):
            part = st_read(os.path.join(mdir, fn))
            for n in part:
                if wmap.get(n) != fn:
                    die(f"{fn}: tensor {n} is not mapped to this shard by the index")
            W.update(part)
        missing = set(wmap) - set(W)
        if missing:
            die(f"{idx}: names tensors no shard holds: {sorted(missing)[:3]}")
    else:
        W = st_read(os.path.join(mdir, "model.safetensors"))
    want = {n: s for n, s, _ in param_specs(c)}
    for n, s in want.items():
        if n not in W:
            die(f"{mdir}: tensor {n} missing")
        if tuple(W[n].shape) != s:
            die(f"{mdir}: tensor {n}: expected shape {list(s)}, found {list(W[n].shape)}")
    extra = sorted(set(W) - set(want))
    if extra:
        die(f"{mdir}: unexpected tensors {extra[:3]}" + (" (tie_word_embeddings is true)" if HEAD in extra else ""))
    return c, W


# ---------------------------------------------------------------- the model
def llama3_inv_freq(inv, factor, low, high, orig):
    """_compute_llama3_parameters: wavelengths above orig/low divided by factor, below orig/high kept,
    between them interpolated by smooth = (orig / wavelen - low) / (high - low)."""
    low_wl, high_wl = orig / low, orig / high
    wl = 2 * math.pi / inv
    out = torch.where(wl > low_wl, inv / factor, inv)
    smooth = (orig / wl - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wl < high_wl) * ~(wl > low_wl)
    return torch.where(medium, smoothed, out)


def inv_freq(c, hf_fp32=False):
    ar = torch.arange(0, c.head_dim, 2, dtype=torch.int64)
    inv = 1.0 / (c.theta ** (ar.float() / c.head_dim)) if hf_fp32 else 1.0 / (c.theta ** (ar.double() / c.head_dim))
    r = c.rope
    if c.rope_type == "linear":
        inv = inv / r["factor"]
    elif c.rope_type == "llama3":
        inv = llama3_inv_freq(inv, r["factor"], r["low_freq_factor"], r["high_freq_factor"],
                              r["original_max_position_embeddings"])
    return inv


def rope_table(c, T, hf_fp32=False):
    """cos, sin [T, head_dim] (both halves), float64 (float32 with hf_fp32)."""
    inv = inv_freq(c, hf_fp32)
    freqs = torch.outer(torch.arange(T, dtype=inv.dtype), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def wide(dt):  # HF's float32 statistics, kept at float64 in float64
    return torch.float64 if dt == torch.float64 else torch.float32


def rms_norm(x, w, eps):
    dt = x.dtype
    h = x.to(wide(dt))
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(dt)


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


def repeat_kv(x, n_rep):  # [B, NKV, T, hd] -> [B, NKV * n_rep, T, hd], kv head g serving heads g*n_rep ..
    B, NKV, T, hd = x.shape
    return x if n_rep == 1 else x[:, :, None].expand(B, NKV, n_rep, T, hd).reshape(B, NKV * n_rep, T, hd)


def keep_mask(T, window):
    t = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    keep = j <= t
    return keep & (t - j < window) if window is not None else keep


def forward(c, P, idx, cos, sin, lora=None):
    """logits [B, T, V] of token ids idx [B, T]; P: {HF name: tensor}, all one dtype.
    lora(module, h): None, or a term added to the output of the linear module ("model.layers.0.self_attn.q_proj")
    applied to h (the hook of tests/tools/peft_lora.py's adapters)."""
    B, T = idx.shape
    NH, NKV, hd = c.heads, c.kv_heads, c.head_dim
    x = F.embedding(idx, P[EMBED])
    dt = x.dtype
    cs, sn = cos[:T].to(dt)[None, None], sin[:T].to(dt)[None, None]
    for i in range(c.layers):
        p = f"model.layers.{i}."

        def L(nm, h):
            y = F.linear(h, P[p + nm + ".weight"], P.get(p + nm + ".bias"))
            d = lora(p + nm, h) if lora else None
            return y if d is None else y + d
        h = rms_norm(x, P[p + "input_layernorm.weight"], c.eps)
        q = L("self_attn.q_proj", h).view(B, T, NH, hd).transpose(1, 2)
        k = L("self_attn.k_proj", h).view(B, T, NKV, hd).transpose(1, 2)
        v = L("self_attn.v_proj", h).view(B, T, NKV, hd).transpose(1, 2)
        q, k = q * cs + rotate_half(q) * sn, k * cs + rotate_half(k) * sn
        k, v = repeat_kv(k, NH // NKV), repeat_kv(v, NH // NKV)
        att = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5
        att = att.masked_fill(~keep_mask(T, c.window[i]), float("-inf"))
        att = torch.softmax(att, dim=-1, dtype=wide(dt)).to(dt)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, NH * hd)
        x = x + L("self_attn.o_proj", y)
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], c.eps)
        x = x + L("mlp.down_proj", F.silu(L("mlp.gate_proj", h)) * L("mlp.up_proj", h))
    x = rms_norm(x, P[NORM], c.eps)
    return F.linear(x, P[EMBED] if c.tie else P[HEAD])


def loss_sum(c, P, idx, tgt, cos, sin, lora=None):
    """(sum of cross-entropies over targets != -100, their count)"""
    logits = forward(c, P, idx, cos, sin, lora)
    logits = logits.to(wide(logits.dtype))
    s = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100, reduction="sum")
    return s, int((tgt != -100).sum())


def read_rows(path, seq_len=None):
    rows = [[int(v) for v in ln.split()] for ln in open(path) if ln.strip()]
    if seq_len:
        rows = [r[s:s + seq_len + 1] for r in rows for s in range(0, max(len(r) - 1, 1), seq_len)]
    rows = [r for r in rows if len(r) >= 2]
    if not rows:
        die(f"{path}: no row of two or more tokens")
    return rows


def batch(rows, vocab):
    """idx [B, Tmax], tgt [B, Tmax] (-100 past a row's end; the causal mask keeps padding out)."""
    T = max(len(r) for r in rows) - 1
    idx = torch.zeros(len(rows), T, dtype=torch.long)
    tgt = torch.full((len(rows), T), -100, dtype=torch.long)
    for b, r in enumerate(rows):
        if min(r) < 0 or max(r) >= vocab:
            die(f"row {b + 1}: token id outside [0, {vocab})")
        idx[b, :len(r) - 1] = torch.tensor(r[:-1])
        tgt[b, :len(r) - 1] = torch.tensor(r[1:])
    return idx, tgt


# ---------------------------------------------------------------- commands
DTYPE = {"f64": torch.float64, "f32": torch.float32, "bf16": torch.bfloat16}


# ---------------------------------------------------------------- selftest: a naive loop implementation
def llama3_scalar(f, factor, low, high, orig):
    """The llama3 rule for one frequency, written out by cases."""
    wavelen = 2 * math.pi / f
    if wavelen < orig / high:
        return f
    if wavelen > orig / low:
        return f / factor
    smooth = (orig / wavelen - low) / (high - low)
    return (1 - smooth) * f / factor + smooth * f


def naive_loss(c, P, rows):
    """Mean loss over rows with Python floats and explicit loops (no torch ops): the check of forward()."""
    W = {k: v.double().tolist() for k, v in P.items()}
    NH, NKV, hd, half = c.heads, c.kv_heads, c.head_dim, c.head_dim // 2

    def lin(name, x):
        w, b = W[name + ".weight"], W.get(name + ".bias")
        return [sum(w[o][i] * x[i] for i in range(len(x))) + (b[o] if b else 0.0) for o in range(len(w))]

    def rms(x, w):
        r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + c.eps)
        return [w[i] * x[i] * r for i in range(len(x))]

    def freq(i):
        f = 1.0 / c.theta ** (2 * i / hd)
        if c.rope_type == "linear":
            f /= c.rope["factor"]
        if c.rope_type == "llama3":
            r = c.rope
            f = llama3_scalar(f, r["factor"], r["low_freq_factor"], r["high_freq_factor"], r["original_max_position_embeddings"])
        return f

    def rot(vec, nheads, pos):
        out = list(vec)
        for h in range(nheads):
            for i in range(half):
                cs, sn = math.cos(pos * freq(i)), math.sin(pos * freq(i))
                a, b = vec[h * hd + i], vec[h * hd + i + half]
                out[h * hd + i], out[h * hd + i + half] = a * cs - b * sn, b * cs + a * sn
        return out

    total, count = 0.0, 0
    for row in rows:
        T = len(row) - 1
        xs = [list(W[EMBED][tok]) for tok in row[:T]]
        for l in range(c.layers):
            p = f"model.layers.{l}."
            hs = [rms(x, W[p + "input_layernorm.weight"]) for x in xs]
            qs = [rot(lin(p + "self_attn.q_proj", h), NH, t) for t, h in enumerate(hs)]
            ks = [rot(lin(p + "self_attn.k_proj", h), NKV, t) for t, h in enumerate(hs)]
            vs = [lin(p + "self_attn.v_proj", h) for h in hs]
            win = c.window[l]
            for t in range(T):
                y = [0.0] * (NH * hd)
                for h in range(NH):
                    g = h // (NH // NKV)
                    js = [j for j in range(t + 1) if win is None or t - j < win]
                    sc = [sum(qs[t][h * hd + i] * ks[j][g * hd + i] for i in range(hd)) / math.sqrt(hd) for j in js]
                    m = max(sc)
                    e = [math.exp(s - m) for s in sc]
                    z = sum(e)
                    for i in range(hd):
                        y[h * hd + i] = sum(e[n] / z * vs[j][g * hd + i] for n, j in enumerate(js))
                o = lin(p + "self_attn.o_proj", y)
                xs[t] = [xs[t][i] + o[i] for i in range(c.hidden)]
            for t in range(T):
                h = rms(xs[t], W[p + "post_attention_layernorm.weight"])
                gt, up = lin(p + "mlp.gate_proj", h), lin(p + "mlp.up_proj", h)
                a = [gt[i] / (1.0 + math.exp(-gt[i])) * up[i] for i in range(c.inter)]
                d = lin(p + "mlp.down_proj", a)
                xs[t] = [xs[t][i] + d[i] for i in range(c.hidden)]
        head = W[EMBED] if c.tie else W[HEAD]
        for t in range(T):
            h = rms(xs[t], W[NORM])
            lg = [sum(head[v][i] * h[i] for i in range(c.hidden)) for v in range(c.vocab)]
            m = max(lg)
            total += m + math.log(sum(math.exp(z - m) for z in lg)) - lg[row[t + 1]]
            count += 1
    return total / count


SELFTEST_CONFIGS = [
    {"model_type": "llama", "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 2,
     "vocab_size": 13},
    {"model_type": "llama", "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 4,
     "num_key_value_heads": 2, "head_dim": 6, "vocab_size": 13, "attention_bias": True, "mlp_bias": True,
     "rope_theta": 50.0, "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}},
    {"model_type": "mistral", "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 4,
     "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 13, "sliding_window": 3, "tie_word_embeddings": True, "rms_norm_eps": 1e-5},
    {"model_type": "qwen2", "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 3, "num_attention_heads": 2,
     "num_key_value_heads": 1, "vocab_size": 13, "use_sliding_window": True, "sliding_window": 2,
     "max_window_layers": 1, "tie_word_embeddings": True, "rope_theta": 1e6},
]


def cmd_selftest(a):
    import tempfile
    torch.manual_seed(0)
    ok = True

    def check(what, cond, detail=""):
        nonlocal ok
        ok &= bool(cond)
        print(f"{'ok  ' if cond else 'FAIL'} {what} {detail}")

    rows = [[1, 5, 2, 7, 3, 11, 0, 4], [6, 2, 9, 12, 1], [3, 3, 8]]  # ragged: padding is exercised
    for k, d in enumerate(SELFTEST_CONFIGS):
        c = Cfg(d)
        P = {n: t.double() for n, t in init_params(c, 10 + k, std=0.4, bias_std=0.2).items()}
        idx, tgt = batch(rows, c.vocab)
        cos, sin = rope_table(c, idx.shape[1])
        s, n = loss_sum(c, P, idx, tgt, cos, sin)
        ref = naive_loss(c, P, rows)
        desc = f"{d['model_type']} H={c.heads} KV={c.kv_heads} hd={c.head_dim} window={c.window} rope={c.rope_type}"
        check(f"loss vs naive loops [{desc}]", abs(s.item() / n - ref) < 1e-10 * max(1, abs(ref)),
              f"{s.item() / n:.15g} vs {ref:.15g} (diff {abs(s.item() / n - ref):.2e})")
        cf, sf = rope_table(c, idx.shape[1], hf_fp32=True)
        s32, _ = loss_sum(c, P, idx, tgt, cf.double(), sf.double())
        check("  --hf-rope-fp32 table moves the loss by fp32 rounding only", abs(s32.item() - s.item()) / n < 1e-5,
              f"(diff {abs(s32.item() - s.item()) / n:.2e})")
        want_win = {0: [None] * 2, 1: [None] * 2, 2: [3, 3], 3: [None, 2, 2]}[k]
        check("  per-layer windows from the config", c.window == want_win, str(c.window))
        if k == 2:  # the window must matter: it changes the loss
            c2 = Cfg(dict(d, sliding_window=None))
            s2, _ = loss_sum(c2, P, idx, tgt, cos, sin)
            check("  sliding window changes the loss", abs(s2.item() - s.item()) / n > 1e-4)
        # f32 and bf16 HF-dtype forwards run and stay near float64
        for dn, tol in (("f32", 1e-5), ("bf16", 5e-2)):
            Pd = {nm: t.to(DTYPE[dn]) for nm, t in P.items()}
            with torch.no_grad():
                sd, _ = loss_sum(c, Pd, idx, tgt, cos, sin)
            check(f"  {dn} forward near float64", abs(sd.item() - s.item()) / n < tol, f"(diff {abs(sd.item() - s.item()) / n:.2e})")

    # llama3 frequencies: Llama 3.1's parameters, bands and values by hand
    c = Cfg({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}})
    got = inv_freq(c).tolist()
    base = [1.0 / 500000.0 ** (2 * i / 128) for i in range(64)]
    wl = [2 * math.pi / f for f in base]
    high = [i for i in range(64) if wl[i] < 2048]  # kept
    low = [i for i in range(64) if wl[i] > 8192]  # divided by 8
    check("llama3 bands: 0..28 kept, 29..34 smoothed, 35..63 divided by 8",
          high == list(range(29)) and low == list(range(35, 64)), f"(kept up to {high[-1]}, divided from {low[0]})")
    check("llama3 kept/divided frequencies", all(abs(got[i] - base[i]) <= 1e-15 * base[i] for i in high) and
          all(abs(got[i] - base[i] / 8) <= 1e-15 * base[i] for i in low))
    i = 31
    sm = (8192 / wl[i] - 1) / 3
    hand = (1 - sm) * base[i] / 8 + sm * base[i]
    check("llama3 smoothed frequency 31 by hand", abs(got[i] - hand) < 1e-15 * hand, f"{got[i]:.17g} vs {hand:.17g}")
    check("llama3 all 64 vs the case-by-case rule", max(abs(got[j] - llama3_scalar(base[j], 8, 1, 4, 8192)) / base[j]
                                                        for j in range(64)) < 1e-14)
    hf = inv_freq(c, hf_fp32=True).double().tolist()
    check("llama3 fp32 (HF) vs float64 frequencies", max(abs(hf[j] - got[j]) / got[j] for j in range(64)) < 1e-6)

    # safetensors: bf16 rounding, round trips, sharding
    v = torch.tensor([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -2.0], dtype=torch.float32)
    bits = [int(b) & 0xFFFF for b in v.to(torch.bfloat16).view(torch.int16)]
    check("bf16 round to nearest even", bits == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC000], str([hex(b) for b in bits]))
    with tempfile.TemporaryDirectory() as tmp:
        d = SELFTEST_CONFIGS[1]
        cp = os.path.join(tmp, "config.json")
        json.dump(d, open(cp, "w"))
        c = Cfg(d)
        P = init_params(c, 3)
        total = sum(t.numel() for t in P.values()) * 2
        for dt in ("f32", "bf16", "f16"):
            for shard in (0, 700):
                out = os.path.join(tmp, f"{dt}_{shard}")
                save_model(out, cp, P, OUT_DTYPES[dt], shard)
                _, R = load_model(out)
                ref = {n: t.to(DTYPE.get(dt, torch.float16)).double() for n, t in P.items()}
                files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
                same = all(torch.equal(R[n], ref[n]) for n in P)
                hlen = struct.unpack("<Q", open(os.path.join(out, files[0]), "rb").read(8))[0]
                check(f"safetensors {dt} shard={shard}: {len(files)} file(s), values exact, header % 8 == 0",
                      same and hlen % 8 == 0 and (len(files) == 1) == (shard == 0))
                if shard:
                    ix = json.load(open(os.path.join(out, "model.safetensors.index.json")))
                    check("  index total_size and weight_map", ix["metadata"]["total_size"] == total // 2 * (4 if dt == "f32" else 2)
                          and set(ix["weight_map"]) == set(P) and files[0] == f"model-00001-of-{len(files):05d}.safetensors")

    # AdamW as torch runs it == the update written out (decay on 2-D weights only), clip with 1e-6
    w, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    gw, gb = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    pw, pb = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
    opt = torch.optim.AdamW([{"params": [pw], "weight_decay": 0.1}, {"params": [pb], "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    pw.grad, pb.grad = gw.clone(), gb.clone()
    norm = torch.nn.utils.clip_grad_norm_([pw, pb], 1.0)
    opt.step()
    gn = math.sqrt(float((gw ** 2).sum() + (gb ** 2).sum()))
    sc = min(1.0, 1.0 / (gn + 1e-6))

    def adam(p, g, wd):
        m, v = 0.1 * g * sc, 0.05 * (g * sc) ** 2
        return p * (1 - 1e-2 * wd) - 1e-2 * (m / 0.1) / ((v / 0.05).sqrt() + 1e-8)

    check("AdamW step and clipping as documented", abs(float(norm) - gn) < 1e-12 and
          torch.allclose(pw.detach(), adam(w, gw, 0.1), rtol=0, atol=1e-14) and
          torch.allclose(pb.detach(), adam(b, gb, 0.0), rtol=0, atol=1e-14))
    print("selftest:", "all passed" if ok else "FAILED")
    sys.exit(0 if ok else 1)


def main():
    # make / loss / train / bench are transformers' models now (tests/tools/hf_models.py, same arguments)
    if len(sys.argv) > 1 and sys.argv[1] in ("make", "loss", "train", "bench"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import hf_models
        hf_models.main(sys.argv[1:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("selftest", help="check this file against naive loops and hand computations")
    sub.add_parser("make", help="tests/tools/hf_models.py make")
    sub.add_parser("loss", help="tests/tools/hf_models.py loss")
    sub.add_parser("train", help="tests/tools/hf_models.py train")
    sub.add_parser("bench", help="tests/tools/hf_models.py bench")
    a = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    cmd_selftest(a)


if __name__ == "__main__":
    main()
