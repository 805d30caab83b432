#!/usr/bin/env python3
"""peft_merge_ref.py - Hugging Face PEFT itself as the reference for `gtrain merge` (tests/test_merge.c).

The merge's values are PEFT's: the base loaded with transformers (AutoModelForCausalLM.from_pretrained),
PeftModel.from_pretrained(base, ADAPTERDIR), merge_and_unload(). PEFT merges in the model's dtype
(LoraLayer.merge: W += get_delta_weight, delta = transpose(B @ A, fan_in_fan_out) * scaling; on the CPU a
bf16 delta is formed in float32 and rounded to bf16 before the add, so a bf16 merge rounds twice), where
gtrain computes W + s B A in double and rounds once. Hand-written, because PEFT has no such thing: the
float64 merge rounded once (gtrain's documented rounding, checked exactly in bf16 and to 1e-6 in fp32),
save_pretrained's shard split and index, the config, and the base's other tensors copied exactly. The
base's GPT-2 files with the old names (no "transformer.", attention-mask buffers) are written here
(transformers writes only the new ones) and the adapters by PEFT (get_peft_model, save_pretrained), with
hostile edits made to PEFT's files afterwards.

usage ($GTRAIN_REFS_PY; CPU only; several commands run in one process joined by " + "):
  peft_merge_ref.py gpt2 OUTDIR [--seed S] [--layers 2] [--embd 32] [--heads 4] [--vocab 64]
                    [--positions 32] [--dtype f32|bf16] [--old-names]
      a random GPT2LMHeadModel directory (config.json as the Hub's gpt2 writes it, Conv1D weights
      [in, out]); --old-names: the old checkpoints' names without "transformer." and with the
      attention-mask buffers h.N.attn.bias [1, 1, P, P]
  peft_merge_ref.py adapter BASEDIR OUTDIR --targets q_proj,v_proj [--r 4] [--alpha 8] [--rslora] [--dora]
                    [--seed S] [--dtype f32|bf16] [--config-r R] [--bad-shape] [--extra-layer]
      a PEFT adapter: get_peft_model(base, LoraConfig(...)) with lora_A, lora_B N(0, 0.3^2) (torch's
      generator), save_pretrained. --dora: use_dora, PEFT's magnitudes times 1 + 0.2 N(0, 1) (so m is
      neither ||W|| nor ||W + s B A||); check then merges (m / ||W + s B A||_row) (W + s B A), PEFT's DoRA merge. Hostile variants, edited into PEFT's files: --config-r (the config's r
      differs from the tensors'), --bad-shape (the first lora_A one column wider than the base's in),
      --extra-layer (one more module a layer past the base's last)
  peft_merge_ref.py edit-base BASEDIR (--drop NAME | --bad-shape NAME)
      rewrite a one-file base without tensor NAME, or with NAME one row short
  peft_merge_ref.py check BASEDIR ADAPTERDIR MERGEDDIR --dtype f32|bf16 [--max-shard-bytes N]
                    [--min-shards K]
      compare MERGEDDIR with PEFT's merge_and_unload (the base loaded in the output's dtype): every adapted
      weight within PEFT's and gtrain's roundings of each other (fp32: (r + 2) 2^-24 (|W| + s |B| |A|) per
      element; bf16: 2^-8 (2 |W'| + |s B A|) per element, PEFT rounding the delta and then the sum); and
      exactly (bf16) or to 1e-6 relative (f32) the float64 merge rounded once; every other tensor exactly
      the base's converted; config.json the base's with torch_dtype set; the shards as save_pretrained
      splits them (each at most N bytes unless it holds one tensor, a shard closed only when the next
      tensor would pass N, the index's weight_map and total_size) and no other file. Prints "ok ..." or
      exits 1 naming the mismatch.
"""
import argparse, json, math, os, struct, sys

import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

ROOT, A_SUF, B_SUF = "base_model.model.", ".lora_A.weight", ".lora_B.weight"
LINEAR = {"llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
          "gpt2": ("c_attn", "c_proj", "c_fc")}
DT = {"f32": "F32", "bf16": "BF16"}
DT_BYTES = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8}


TORCH_DT = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def st_read(path):
    """{name: float64} of one safetensors file"""
    return {k: v.to(torch.float64) for k, v in load_file(path).items()}


def st_write(path, items, st_dtype):
    """[(name, tensor)] as st_dtype (through float32: one rounding of a float32 value)"""
    save_file({n: t.detach().to(torch.float32).to(TORCH_DT[st_dtype]).contiguous() for n, t in items}, path,
              metadata={"format": "pt"})


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
def cmd_adapter(a):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    cfg = json.load(open(os.path.join(a.base, "config.json")))
    conv1d = family(cfg) == "gpt2"
    model = AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.float32)
    targets = a.targets.split(",")
    pm = get_peft_model(model, LoraConfig(r=a.r, lora_alpha=a.alpha, target_modules=targets, use_rslora=a.rslora,
                                          lora_dropout=0.0, task_type="CAUSAL_LM", fan_in_fan_out=conv1d,
                                          use_dora=a.dora))
    g = torch.Generator().manual_seed(a.seed)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_A" in n or "lora_B" in n:
                p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64))
                p.data = p.data.to(torch.float32 if a.dtype == "f32" else torch.bfloat16)
            elif "lora_magnitude_vector" in n:
                p.mul_(1 + 0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
                p.data = p.data.to(torch.float32 if a.dtype == "f32" else torch.bfloat16)
    pm.save_pretrained(a.outdir)
    wpath, cpath = os.path.join(a.outdir, "adapter_model.safetensors"), os.path.join(a.outdir, "adapter_config.json")
    T = load_file(wpath)
    mods = sorted({k[len(ROOT):-len(A_SUF)] for k in T if k.endswith(A_SUF)},
                  key=lambda m: [int(x) if x.isdigit() else x for x in m.split(".")])
    if a.bad_shape or a.extra_layer:  # hostile edits of PEFT's file
        if a.bad_shape:
            k = ROOT + mods[0] + A_SUF
            T[k] = torch.cat([T[k], T[k][:, :1]], 1)
        if a.extra_layer:
            layers = [int(x) for m in mods for x in m.split(".") if x.isdigit()]
            mod = mods[0].replace(f".{min(layers)}.", f".{max(layers) + 1}.", 1)
            T[ROOT + mod + A_SUF] = T[ROOT + mods[0] + A_SUF].clone()
            T[ROOT + mod + B_SUF] = T[ROOT + mods[0] + B_SUF].clone()
        save_file(T, wpath, metadata={"format": "pt"})
    if a.config_r:
        acfg = json.load(open(cpath))
        acfg["r"] = a.config_r
        with open(cpath, "w") as f:
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
    dora = bool(acfg.get("use_dora"))
    if len(ad) != (3 if dora else 2) * len(mods):
        fail("adapter keys are not lora_A/lora_B pairs" + (" with their magnitudes" if dora else ""))
    gpt2 = family(bcfg) == "gpt2"
    ref, adapted, bound = dict(base), set(), {}
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
        absd = (B.abs() @ A.abs()) * scale
        bound[name] = (r + 2) * 2.0 ** -24 * (base[name].abs() + (absd.T if gpt2 else absd))
        if dora:  # (m / ||W + s B A||_row) (W + s B A), rows = output rows ([in, out] columns for Conv1D)
            M = ad[ROOT + mod + ".lora_magnitude_vector"]
            Wd = ref[name].T if gpt2 else ref[name]
            f = M / torch.linalg.norm(Wd, dim=1)
            Wd = f[:, None] * Wd
            ref[name] = Wd.T if gpt2 else Wd
            fb = f[None, :] if gpt2 else f[:, None]
            # PEFT in float32: the lora merge's roundings scaled by the factor, and the norm's over `in` terms
            bound[name] = fb.abs() * bound[name] + (A.shape[1] + 8) * 2.0 ** -24 * ref[name].abs()
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

    # PEFT's merge: the base in the output's dtype, PeftModel.from_pretrained, merge_and_unload
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(a.base, dtype=TORCH_DT[want])
    peft_sd = PeftModel.from_pretrained(model, a.adapter).merge_and_unload().state_dict()
    peft_worst, peft_diff, peft_n = 0.0, 0, 0
    for n in sorted(adapted):
        pn = n if n in peft_sd else "transformer." + n
        if pn not in peft_sd:
            fail(f"{n}: not in PEFT's merged model")
        p = peft_sd[pn].detach().to(torch.float64)
        if want == "F32":  # both round W + s B A once: PEFT's float32 product and sum, gtrain's double
            b = bound[n]
        else:  # one bf16 ulp of the result: PEFT adds a float32 delta to the bf16 weight and rounds
            b = 2.0 ** -7 * torch.maximum(p.abs(), ref[n].abs()) + bound[n]
        diff = (got[n] - p).abs()
        peft_n += p.numel()
        peft_diff += int((diff > 0).sum())
        peft_worst = max(peft_worst, float((diff / b.clamp_min(1e-30)).max()))
        if bool((diff > b).any()):
            k = tuple((diff > b).nonzero()[0].tolist())
            fail(f"{n}{list(k)}: gtrain {got[n][k].item()!r}, PEFT's merge_and_unload {p[k].item()!r} "
                 f"(bound {b[k].item():.3g})")

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
          f"PEFT's merge_and_unload: {peft_diff} of {peft_n} adapted elements differ, worst at {peft_worst:.3g} of the "
          f"bound; float64 merge: max relative difference {worst:.3g}" + (f" ({worst_at})" if worst_at else "") +
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
    p.add_argument("--dora", action="store_true")
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
    torch.set_num_threads(1)
    cmds = [[]]  # several commands in one process (one import of transformers and peft): CMD ARGS + CMD ARGS
    for x in sys.argv[1:]:
        if x == "+":
            cmds.append([])
        else:
            cmds[-1].append(x)
    for c in cmds:
        a = ap.parse_args(c)
        {"gpt2": cmd_gpt2, "adapter": cmd_adapter, "edit-base": cmd_edit_base, "check": cmd_check}[a.cmd](a)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
