#!/usr/bin/env python3
"""peft_merge_ref.py - an independent reference for `gtrain merge` (tests/test_merge.c).

Written from PEFT's LoRA (peft/tuners/lora/layer.py: get_delta_weight = transpose(B @ A,
fan_in_fan_out) * scaling, merge_and_unload adds it to the base weight; scaling = lora_alpha / r,
or lora_alpha / sqrt(r) with use_rslora; GPT-2's Conv1D weights are stored [in, out], so PEFT
forces fan_in_fan_out there) and from nothing of gtrain's. Safetensors are read and written with
tests/tools/hf_llama.py's own reader and writer (struct + json); the peft package is not used.

usage (/usr/bin/python3, Debian's python3-torch; CPU only):
  peft_merge_ref.py gpt2 OUTDIR [--seed S] [--layers 2] [--embd 32] [--heads 4] [--vocab 64]
                    [--positions 32] [--dtype f32|bf16] [--old-names]
      a random GPT2LMHeadModel directory (config.json as the Hub's gpt2 writes it, Conv1D weights
      [in, out]); --old-names: the old checkpoints' names without "transformer." and with the
      attention-mask buffers h.N.attn.bias [1, 1, P, P]
  peft_merge_ref.py adapter BASEDIR OUTDIR --targets q_proj,v_proj [--r 4] [--alpha 8] [--rslora]
                    [--seed S] [--dtype f32|bf16] [--config-r R] [--bad-shape] [--extra-layer]
      a PEFT adapter as PEFT's save_pretrained writes it (adapter_model.safetensors with keys
      base_model.model.<module>.lora_A.weight [r, in] / lora_B.weight [out, r], adapter_config.json
      with PEFT 0.18's keys), for every module of the base that a target names (PEFT's suffix
      match), random non-zero A and B. Hostile variants: --config-r (the config's r differs from
      the tensors'), --bad-shape (the first lora_A one column wider than the base's in), --extra-layer
      (one more module a layer past the base's last)
  peft_merge_ref.py edit-base BASEDIR (--drop NAME | --bad-shape NAME)
      rewrite a one-file base without tensor NAME, or with NAME one row short
  peft_merge_ref.py check BASEDIR ADAPTERDIR MERGEDDIR --dtype f32|bf16 [--max-shard-bytes N]
                    [--min-shards K]
      merge in float64 (torch) and compare with MERGEDDIR: the same tensors and shapes, every one in
      the dtype; adapted weights within 1e-6 relative (f32) or exactly the float64 merge rounded once
      to bf16 (ties to even); every other tensor exactly the base's converted; config.json the base's
      with torch_dtype set; the shards as save_pretrained splits them (each at most N bytes unless
      it holds one tensor, a shard closed only when the next tensor would pass N, the index's
      weight_map and total_size) and no other file. Prints "ok ..." or exits 1 naming the mismatch.
"""
import argparse, json, math, os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from hf_llama import st_read, st_write  # noqa: E402

ROOT, A_SUF, B_SUF = "base_model.model.", ".lora_A.weight", ".lora_B.weight"
LINEAR = {"llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
          "gpt2": ("c_attn", "c_proj", "c_fc")}
DT = {"f32": "F32", "bf16": "BF16"}
DT_BYTES = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8}


def fail(msg):
    print(f"peft_merge_ref.py: {msg}", file=sys.stderr)
    sys.exit(1)


def family(cfg):
    return "gpt2" if cfg["model_type"] == "gpt2" else "llama"


def st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def load_dir(d):
    """(config, {name: float64}, {name: dtype}, {file: [names in data order]}, index or None)"""
    cfg = json.load(open(os.path.join(d, "config.json")))
    idx_path = os.path.join(d, "model.safetensors.index.json")
    index = json.load(open(idx_path)) if os.path.exists(idx_path) else None
    files = sorted(set(index["weight_map"].values())) if index else ["model.safetensors"]
    W, dt, order = {}, {}, {}
    for fn in files:
        h = st_header(os.path.join(d, fn))
        order[fn] = sorted(h, key=lambda k: h[k]["data_offsets"][0])
        for k, v in h.items():
            dt[k] = v["dtype"]
        W.update(st_read(os.path.join(d, fn)))
    return cfg, W, dt, order, index


# ---------------------------------------------------------------- gpt2
def cmd_gpt2(a):
    C, L, P, V = a.embd, a.layers, a.positions, a.vocab
    cfg = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
           "bos_token_id": V - 1, "embd_pdrop": 0.1, "eos_token_id": V - 1, "initializer_range": 0.02,
           "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": P, "n_embd": C, "n_head": a.heads,
           "n_layer": L, "n_positions": P, "resid_pdrop": 0.1, "summary_activation": None,
           "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
           "summary_use_proj": True, "vocab_size": V}
    pre = "" if a.old_names else "transformer."
    g = torch.Generator().manual_seed(a.seed)
    P_ = {}

    def add(name, shape, kind="w"):
        r = torch.randn(shape, generator=g, dtype=torch.float32)
        P_[name] = 1.0 + 0.1 * r if kind == "norm" else 0.1 * r

    add(pre + "wte.weight", (V, C))
    add(pre + "wpe.weight", (P, C))
    for i in range(L):
        h = f"{pre}h.{i}."
        add(h + "ln_1.weight", (C,), "norm"), add(h + "ln_1.bias", (C,))
        if a.old_names:
            P_[h + "attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P)
        add(h + "attn.c_attn.weight", (C, 3 * C)), add(h + "attn.c_attn.bias", (3 * C,))
        add(h + "attn.c_proj.weight", (C, C)), add(h + "attn.c_proj.bias", (C,))
        add(h + "ln_2.weight", (C,), "norm"), add(h + "ln_2.bias", (C,))
        add(h + "mlp.c_fc.weight", (C, 4 * C)), add(h + "mlp.c_fc.bias", (4 * C,))
        add(h + "mlp.c_proj.weight", (4 * C, C)), add(h + "mlp.c_proj.bias", (C,))
    add(pre + "ln_f.weight", (C,), "norm"), add(pre + "ln_f.bias", (C,))
    os.makedirs(a.outdir, exist_ok=True)
    st_write(os.path.join(a.outdir, "model.safetensors"), list(P_.items()), DT[a.dtype])
    with open(os.path.join(a.outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    print(f"{a.outdir}: {len(P_)} tensors")


# ---------------------------------------------------------------- adapter
def adapted_modules(cfg, names, targets):
    """[(PEFT module name, base tensor name)] of the base's linear modules a target names (PEFT's
    suffix match), in the base's order"""
    fam, out = family(cfg), []
    for n in names:
        if not n.endswith(".weight"):
            continue
        mod = n[: -len(".weight")]
        if mod.rsplit(".", 1)[-1] not in LINEAR[fam]:
            continue
        full = mod if fam != "gpt2" or mod.startswith("transformer.") else "transformer." + mod
        if any(full == t or full.endswith("." + t) for t in targets):
            out.append((full, n))
    return out


def cmd_adapter(a):
    cfg, W, _, order, _ = load_dir(a.base)
    names = [n for fn in order for n in order[fn]]
    targets = a.targets.split(",")
    mods = adapted_modules(cfg, names, targets)
    if not mods:
        fail(f"{a.base}: no module matches {targets}")
    conv1d = family(cfg) == "gpt2"
    g = torch.Generator().manual_seed(a.seed)
    items = []
    for j, (mod, n) in enumerate(mods):
        w = W[n]
        fin, fout = (w.shape[0], w.shape[1]) if conv1d else (w.shape[1], w.shape[0])
        A = 0.3 * torch.randn((a.r, fin + (1 if a.bad_shape and j == 0 else 0)), generator=g, dtype=torch.float64)
        B = 0.3 * torch.randn((fout, a.r), generator=g, dtype=torch.float64)
        items += [(ROOT + mod + A_SUF, A), (ROOT + mod + B_SUF, B)]
    if a.extra_layer:
        layers = [int(p) for mod, _ in mods for p in mod.split(".") if p.isdigit()]
        mod = mods[0][0].replace(f".{min(layers)}.", f".{max(layers) + 1}.", 1)
        items += [(ROOT + mod + A_SUF, items[0][1]), (ROOT + mod + B_SUF, items[1][1])]
    os.makedirs(a.outdir, exist_ok=True)
    st_write(os.path.join(a.outdir, "adapter_model.safetensors"), items, DT[a.dtype])
    acfg = {
        "alora_invocation_tokens": None, "alpha_pattern": {}, "arrow_config": None, "auto_mapping": None,
        "base_model_name_or_path": a.base, "bias": "none", "corda_config": None, "ensure_weight_tying": False,
        "eva_config": None, "exclude_modules": None, "fan_in_fan_out": conv1d, "inference_mode": True,
        "init_lora_weights": True, "layer_replication": None, "layers_pattern": None, "layers_to_transform": None,
        "loftq_config": {}, "lora_alpha": int(a.alpha) if a.alpha == int(a.alpha) else a.alpha, "lora_bias": False, "lora_dropout": 0.0, "megatron_config": None,
        "megatron_core": "megatron.core", "modules_to_save": None, "peft_type": "LORA", "peft_version": "0.18.1",
        "qalora_group_size": 16, "r": a.config_r or a.r, "rank_pattern": {}, "revision": None,
        "target_modules": targets, "target_parameters": None, "task_type": "CAUSAL_LM",
        "trainable_token_indices": None, "use_dora": False, "use_qalora": False, "use_rslora": a.rslora,
    }
    with open(os.path.join(a.outdir, "adapter_config.json"), "w") as f:
        f.write(json.dumps(acfg, indent=2, sort_keys=True))
    print(f"{a.outdir}: {len(mods)} modules, r {a.r}")


def cmd_edit_base(a):
    path = os.path.join(a.base, "model.safetensors")
    h = st_header(path)
    W = st_read(path)
    names = sorted(h, key=lambda k: h[k]["data_offsets"][0])
    dts = {h[k]["dtype"] for k in names}
    if len(dts) != 1:
        fail(f"{path}: mixed dtypes")
    items = []
    for n in names:
        if n == a.drop:
            continue
        items.append((n, W[n][:-1] if n == a.bad_shape else W[n]))
    for n in (a.drop, a.bad_shape):
        if n and n not in W:
            fail(f"{path}: no tensor {n}")
    st_write(path, items, dts.pop())
    print(f"{path}: {len(items)} tensors")


# ---------------------------------------------------------------- check
def bf16_rne(x):
    """float64 -> the nearest bfloat16 (ties to even), as float64: no float32 in between"""
    _, e = torch.frexp(x)  # |x| in [2^(e-1), 2^e)
    q = torch.pow(torch.tensor(2.0, dtype=torch.float64), (e - 8).to(torch.float64))
    return torch.round(x / q) * q  # torch.round: half to even


def cast(x, dt):
    if dt == "F32":
        return x.to(torch.float32).to(torch.float64)
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float64)  # from the base's float32 values: one rounding


def cmd_check(a):
    bcfg, base, bdt, border, _ = load_dir(a.base)
    acfg = json.load(open(os.path.join(a.adapter, "adapter_config.json")))
    if acfg["peft_type"] != "LORA":
        fail("not a LoRA adapter")
    r, alpha = acfg["r"], acfg["lora_alpha"]
    scale = alpha / math.sqrt(r) if acfg.get("use_rslora") else alpha / r
    ad = st_read(os.path.join(a.adapter, "adapter_model.safetensors"))
    mods = sorted({k[len(ROOT):-len(A_SUF)] for k in ad if k.endswith(A_SUF)})
    if len(ad) != 2 * len(mods):
        fail("adapter keys are not lora_A/lora_B pairs")
    gpt2 = family(bcfg) == "gpt2"
    ref, adapted = dict(base), set()
    for mod in mods:
        A, B = ad[ROOT + mod + A_SUF], ad[ROOT + mod + B_SUF]
        if A.shape[0] != r or B.shape[1] != r:
            fail(f"{mod}: r {r} vs A {list(A.shape)}, B {list(B.shape)}")
        name = mod + ".weight"
        if name not in ref and gpt2 and name.startswith("transformer.") and name[len("transformer."):] in ref:
            name = name[len("transformer."):]
        delta = (B @ A) * scale  # [out, in]
        if gpt2:  # Conv1D: fan_in_fan_out
            delta = delta.T
        if tuple(delta.shape) != tuple(ref[name].shape):
            fail(f"{name}: delta {list(delta.shape)} vs base {list(ref[name].shape)}")
        ref[name] = ref[name] + delta
        adapted.add(name)

    want = DT[a.dtype]
    mcfg, got, mdt, morder, index = load_dir(a.merged)
    if set(got) != set(ref):
        fail(f"tensors differ: missing {sorted(set(ref) - set(got))[:3]}, extra {sorted(set(got) - set(ref))[:3]}")
    worst, worst_at, inexact = 0.0, "", 0
    for n in ref:
        if mdt[n] != want:
            fail(f"{n}: dtype {mdt[n]}, expected {want}")
        if tuple(got[n].shape) != tuple(ref[n].shape):
            fail(f"{n}: shape {list(got[n].shape)}, base {list(ref[n].shape)}")
        if n in adapted:
            if want == "F32":
                rel = ((got[n] - ref[n]).abs() / ref[n].abs().clamp_min(1e-30)).max().item()
                inexact += int((got[n] != ref[n].to(torch.float32).to(torch.float64)).sum())
                if rel > worst:
                    worst, worst_at = rel, n
                if rel > 1e-6:
                    fail(f"{n}: relative difference {rel:.3g} > 1e-6 from the float64 merge")
            else:
                exp = bf16_rne(ref[n])
                bad = (got[n] != exp).nonzero()
                if len(bad):
                    i = tuple(bad[0].tolist())
                    fail(f"{n}{list(i)}: {got[n][i].item()!r}, the float64 merge {ref[n][i].item()!r} rounds to "
                         f"{exp[i].item()!r} in bf16 ({len(bad)} elements differ)")
        elif not torch.equal(got[n], cast(ref[n], want)):
            fail(f"{n}: not the base's values converted to {want}")
    if not adapted:
        fail("no tensor was adapted")

    ecfg = dict(bcfg)
    ecfg["torch_dtype"] = "float32" if want == "F32" else "bfloat16"
    if "dtype" in bcfg:
        ecfg["dtype"] = ecfg["torch_dtype"]
    if mcfg != ecfg:
        fail(f"config.json: {sorted(k for k in set(mcfg) | set(ecfg) if mcfg.get(k) != ecfg.get(k))} differ from the base's")

    # files: save_pretrained's split
    size = DT_BYTES[want]
    nbytes = {n: got[n].numel() * size for n in got}
    files = list(morder)
    present = sorted(os.listdir(a.merged))
    if index is None:
        if present != ["config.json", "model.safetensors"]:
            fail(f"files {present}, expected config.json and model.safetensors")
    else:
        k = len(files)
        names = [f"model-{i + 1:05d}-of-{k:05d}.safetensors" for i in range(k)]
        if files != names or present != sorted(["config.json", "model.safetensors.index.json"] + names):
            fail(f"files {present}")
        if index["metadata"]["total_size"] != sum(nbytes.values()):
            fail(f"total_size {index['metadata']['total_size']}, tensors hold {sum(nbytes.values())}")
        if any(index["weight_map"][n] != fn for fn in files for n in morder[fn]) or len(index["weight_map"]) != len(got):
            fail("weight_map does not say where the tensors are")
        if json.dumps(index, indent=2, sort_keys=True) + "\n" != open(os.path.join(a.merged, "model.safetensors.index.json")).read():
            fail("the index is not json.dumps(indent=2, sort_keys=True)")
    if a.max_shard_bytes:
        mx = a.max_shard_bytes
        normal = []
        for fn in files:
            sb = sum(nbytes[n] for n in morder[fn])
            if sb > mx and len(morder[fn]) > 1:
                fail(f"{fn}: {sb} bytes in {len(morder[fn])} tensors, more than {mx}")
            if sb <= mx:
                normal.append((fn, sb))
        for (f0, s0), (f1, _) in zip(normal, normal[1:]):
            if s0 + nbytes[morder[f1][0]] <= mx:
                fail(f"{f0} ({s0} bytes) was closed though {morder[f1][0]} of {f1} still fitted under {mx}")
    if len(files) < a.min_shards:
        fail(f"{len(files)} weight files, expected at least {a.min_shards}")
    print(f"ok {len(got)} tensors, {len(adapted)} merged (scale {scale:.6g}), {want}, {len(files)} weight files, "
          f"max relative difference {worst:.3g}" + (f" ({worst_at})" if worst_at else "") +
          (f", {inexact} elements not the float64 merge's nearest float32" if want == "F32" else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("gpt2")
    p.add_argument("outdir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--embd", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--positions", type=int, default=32)
    p.add_argument("--dtype", choices=list(DT), default="f32")
    p.add_argument("--old-names", action="store_true")
    p = sub.add_parser("adapter")
    p.add_argument("base"), p.add_argument("outdir")
    p.add_argument("--targets", required=True)
    p.add_argument("--r", type=int, default=4)
    p.add_argument("--alpha", type=float, default=8)
    p.add_argument("--rslora", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=list(DT), default="f32")
    p.add_argument("--config-r", type=int, default=0)
    p.add_argument("--bad-shape", action="store_true")
    p.add_argument("--extra-layer", action="store_true")
    p = sub.add_parser("edit-base")
    p.add_argument("base")
    p.add_argument("--drop", default="")
    p.add_argument("--bad-shape", default="")
    p = sub.add_parser("check")
    p.add_argument("base"), p.add_argument("adapter"), p.add_argument("merged")
    p.add_argument("--dtype", choices=list(DT), required=True)
    p.add_argument("--max-shard-bytes", type=int, default=0)
    p.add_argument("--min-shards", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(1)
    {"gpt2": cmd_gpt2, "adapter": cmd_adapter, "edit-base": cmd_edit_base, "check": cmd_check}[a.cmd](a)


if __name__ == "__main__":
    main()
