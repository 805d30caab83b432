#!/usr/bin/env python3
"""bnb_ref.py - bitsandbytes and transformers themselves as the reference for gtrain's reading of
bitsandbytes 4-bit model directories (tests/test_bnb_weights.c: src/io/hf_weights_bnb.c, bnb_state.c,
and `gtrain merge` onto such a base). Nothing here dequantizes on its own: the directories are
transformers' save_pretrained of a model loaded with BitsAndBytesConfig(load_in_4bit=True, nf4), the
values bitsandbytes.functional.dequantize_4bit's (its CPU path) with the QuantState bitsandbytes
itself rebuilds from the files (QuantState.from_dict), the merge PEFT's merge_and_unload on the
dequantized model (transformers' model.dequantize(), which calls dequantize_4bit).

usage ($GTRAIN_REFS_PY; CPU only; several commands run in one process joined by " + "):
  bnb_ref.py quantize BASEDIR OUTDIR [--no-double-quant] [--dtype f32|bf16|f16] [--extra-odd]
                    [--max-shard-bytes N]
      from_pretrained(BASEDIR, BitsAndBytesConfig(load_in_4bit, nf4, double quant unless
      --no-double-quant, compute dtype = --dtype), device_map="cpu", dtype=--dtype), save_pretrained
      (max_shard_size N: an index and shards; prints how many 4-bit weights have a part in another
      shard than the packed codes);
      --extra-odd: two more 4-bit tensors, "extra.odd.weight" [37, 27] (999 values: an odd count, a
      last block of 39) and "extra.wide.weight" [301, 63] (18963 values: 297 blocks, two nested
      blocks, a last block of 19), bitsandbytes' quantize_4bit of N(0, 1) values serialized as
      Params4bit saves its state (QuantState.as_dict(packed=True)); transformers' configs cannot
      have such counts (their hidden sizes are even).
      Note: bitsandbytes 0.50.2's CPU dequantize kernel (used when the last dimension is even)
      disagrees with its own quantize_4bit when that dimension is not a multiple of the blocksize
      (e.g. [5, 32] or [5, 96]: it blocks per row, quantize_4bit over the flat tensor; its default
      torch path and CUDA agree with quantize_4bit). Shapes here keep to where both agree: even
      last dimensions are multiples of 64, odd ones take the flat torch path.
  bnb_ref.py dequant BNBDIR OUTDIR
      for every 4-bit weight NAME of BNBDIR/model.safetensors: OUTDIR/NAME.f32 (dequantize_4bit's
      output, in its dtype, widened to float32: exact), the file's bytes of its parts as safetensors
      reads them (NAME.packed, NAME.absmax, NAME.nested_absmax), NAME.offset (float32 nested_offset as
      QuantState holds it); OUTDIR/list.txt one line "NAME numel blocksize nested" each
  bnb_ref.py mutate BNBDIR OUTPREFIX [--strip-config] CASE [CASE ...]
      for each CASE a copy OUTPREFIX-CASE of BNBDIR (double quant) whose model.safetensors is edited
      (MUTATIONS); prints "CASE NAME KEY" a line: the tensor the refusal must name and a word it must
      say. --strip-config: config.json without quantization_config (for a reader of config.json that
      refuses it)
  bnb_ref.py strip-config DIR OUTDIR
      a copy of DIR whose config.json has no quantization_config
  bnb_ref.py merge-check BNBDIR ADAPTERDIR MERGEDDIR
      the 4-bit model dequantized (model.dequantize()), PeftModel.from_pretrained, merge_and_unload:
      every weight of MERGEDDIR within 1e-6 of the largest |value| of that tensor (fp32), every
      tensor present and no other; prints "ok ..." or exits 1
"""
import argparse, json, os, shutil, struct, sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
QS = ".quant_state.bitsandbytes__nf4"


def fail(msg):
    print(f"bnb_ref.py: {msg}", file=sys.stderr)
    sys.exit(1)


def quantize(a):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    dt = DTYPE[a.dtype]
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=not a.no_double_quant,
                           bnb_4bit_compute_dtype=dt)
    m = AutoModelForCausalLM.from_pretrained(a.base, quantization_config=q, device_map="cpu", dtype=dt)
    if a.max_shard_bytes:
        m.save_pretrained(a.out, max_shard_size=a.max_shard_bytes)
        wm = json.load(open(os.path.join(a.out, "model.safetensors.index.json")))["weight_map"]
        split = {k[: -len(QS)] for k in wm if k.endswith(QS)
                 if any(wm[p] != wm[k[: -len(QS)]] for p in wm if p.startswith(k[: -len(QS)] + "."))}
        print(f"ok quantize: {len(set(wm.values()))} shards, {len(split)} 4-bit weights with parts in another shard")
        return
    m.save_pretrained(a.out)
    if a.extra_odd:
        import bitsandbytes.functional as F
        g = torch.Generator().manual_seed(7)
        path = os.path.join(a.out, "model.safetensors")
        sd = load_file(path)
        for name, shape in (("extra.odd.weight", (37, 27)), ("extra.wide.weight", (301, 63))):
            x = torch.randn(*shape, generator=g).to(dt)
            packed, qs = F.quantize_4bit(x, blocksize=64, compress_statistics=not a.no_double_quant, quant_type="nf4")
            sd[name] = packed
            sd.update({name + "." + k: v for k, v in qs.as_dict(packed=True).items()})
        save_file(sd, path, metadata={"format": "pt"})


def parts(sd, name):
    """bitsandbytes' own QuantState from the file's tensors beside weight `name`"""
    import bitsandbytes.functional as F
    pre = name + "."
    d = {k[len(pre):]: v for k, v in sd.items() if k.startswith(pre)}
    return F.QuantState.from_dict(d, device=torch.device("cpu"))


def dequant(a):
    import bitsandbytes.functional as F
    sd = {}
    for f in sorted(os.listdir(a.bnb)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(a.bnb, f)))
    os.makedirs(a.out, exist_ok=True)
    lines = []
    for k in sorted(sd):
        if not k.endswith(QS):
            continue
        name = k[: -len(QS)]
        qs = parts(sd, name)
        w = F.dequantize_4bit(sd[name], qs)
        assert list(w.shape) == list(qs.shape) and w.dtype == qs.dtype
        out = os.path.join(a.out, name)
        open(out + ".f32", "wb").write(w.to(torch.float32).contiguous().numpy().tobytes())
        open(out + ".packed", "wb").write(sd[name].contiguous().numpy().tobytes())
        open(out + ".absmax", "wb").write(sd[name + ".absmax"].contiguous().numpy().tobytes())
        nested = qs.nested
        if nested:
            open(out + ".nested_absmax", "wb").write(sd[name + ".nested_absmax"].contiguous().numpy().tobytes())
            open(out + ".offset", "wb").write(struct.pack("<f", float(qs.offset.to(torch.float32).item())))
        lines.append(f"{name} {w.numel()} {qs.blocksize} {1 if nested else 0}\n")
    open(os.path.join(a.out, "list.txt"), "w").write("".join(lines))


def state_of(sd, name):
    return json.loads(bytes(sd[name + QS].tolist()).decode())


def set_state(sd, name, st, raw=None):
    b = raw if raw is not None else json.dumps(st).encode()
    sd[name + QS] = torch.tensor(list(b), dtype=torch.uint8)


# CASE: (edit(sd, w) -> the tensor name the refusal names (w: the first 4-bit weight), the key it must name)
def m_state(fn, key, names_weight=False):
    def edit(sd, w):
        st = state_of(sd, w)
        fn(st)
        set_state(sd, w, st)
        return (w if names_weight else w + QS), key
    return edit


def m_raw(raw, key):
    def edit(sd, w):
        set_state(sd, w, None, raw)
        return w + QS, key
    return edit


def m_drop(suffix, key):
    def edit(sd, w):
        del sd[w + suffix]
        return w + suffix, key
    return edit


def m_tensor(suffix, fn, key):
    def edit(sd, w):
        sd[w + suffix] = fn(sd[w + suffix])
        return (w + suffix) if suffix else w, key
    return edit


def m_fp4(sd, w):
    st = state_of(sd, w)
    st["quant_type"] = "fp4"
    del sd[w + QS]
    sd[w + ".quant_state.bitsandbytes__fp4"] = torch.tensor(list(json.dumps(st).encode()), dtype=torch.uint8)
    return w + ".quant_state.bitsandbytes__fp4", "nf4"


def m_orphan(sd, w):
    sd["model.layers.0.self_attn.q_norm.weight.absmax"] = torch.ones(4)
    return "model.layers.0.self_attn.q_norm.weight.absmax", "beside"


def m_u8(sd, w):
    sd["model.extra"] = torch.zeros(4, dtype=torch.uint8)
    return "model.extra", "U8"


def m_no_nested_keys(sd, w):
    st = state_of(sd, w)
    for k in ("nested_blocksize", "nested_dtype", "nested_offset"):
        del st[k]
    set_state(sd, w, st)
    # absmax must then be float32 [nblocks]: keep the U8 codes so the count matches but the dtype does not
    return w + ".absmax", "F32"


MUTATIONS = {
    "state_not_json": m_raw(b'{"quant_type": "nf4", "blocksize": 64,', "valid JSON"),
    "state_not_object": m_raw(b"[1, 2]", "JSON object"),
    "state_no_blocksize": m_state(lambda s: s.pop("blocksize"), "blocksize"),
    "state_no_shape": m_state(lambda s: s.pop("shape"), "shape"),
    "state_fp4": m_state(lambda s: s.update(quant_type="fp4"), "quant_type"),
    "state_fp4_name": m_fp4,
    "state_blocksize_48": m_state(lambda s: s.update(blocksize=48), "blocksize"),
    "state_blocksize_float": m_state(lambda s: s.update(blocksize=64.5), "blocksize"),
    "state_shape_3d": m_state(lambda s: s.update(shape=[2, 2, s["shape"][0] * s["shape"][1] // 4]), "shape"),
    "state_shape_zero": m_state(lambda s: s.update(shape=[0, s["shape"][1]]), "shape[0]"),
    "state_shape_numel": m_state(lambda s: s.update(shape=[s["shape"][0] + 2, s["shape"][1]]), "packed", True),
    "state_dtype_f64": m_state(lambda s: s.update(dtype="float64"), "dtype"),
    "state_nested_bs": m_state(lambda s: s.update(nested_blocksize=128), "nested_blocksize"),
    "state_nested_partial": m_state(lambda s: s.pop("nested_offset"), "nested_offset"),
    "state_nested_offset_str": m_state(lambda s: s.update(nested_offset="x"), "nested_offset"),
    "state_no_nested_keys": m_no_nested_keys,
    "weight_f32": m_tensor("", lambda t: t.to(torch.float32), "U8"),
    "weight_short": m_tensor("", lambda t: t[:-1].clone(), "U8"),
    "absmax_f32": m_tensor(".absmax", lambda t: t.to(torch.float32), "U8"),
    "absmax_count": m_tensor(".absmax", lambda t: t[:-1].clone(), "values"),
    "quant_map_missing": m_drop(".quant_map", "quant_map"),
    "quant_map_values": m_tensor(".quant_map", lambda t: t.flip(0).clone(), "element"),
    "quant_map_count": m_tensor(".quant_map", lambda t: t[:15].clone(), "16"),
    "nested_absmax_missing": m_drop(".nested_absmax", "nested_absmax"),
    "nested_absmax_count": m_tensor(".nested_absmax", lambda t: torch.cat([t, t]), "values"),
    "nested_quant_map_missing": m_drop(".nested_quant_map", "nested_quant_map"),
    "nested_quant_map_size": m_tensor(".nested_quant_map", lambda t: t[:255].clone(), "256"),
    "nested_quant_map_values": m_tensor(".nested_quant_map", lambda t: t * 2, "element"),
    "orphan_sibling": m_orphan,
    "plain_u8": m_u8,
}


def mutate(a):
    for case in a.cases:
        out = f"{a.out}-{case}"
        shutil.copytree(a.bnb, out)
        path = os.path.join(out, "model.safetensors")
        sd = load_file(path)
        w = sorted(k[: -len(QS)] for k in sd if k.endswith(QS) and k.startswith("model."))[0]
        name, key = MUTATIONS[case](sd, w)
        save_file(sd, path, metadata={"format": "pt"})
        if a.strip_config:
            strip_config(out)
        print(case, name, key)


def strip_config(d):
    p = os.path.join(d, "config.json")
    c = json.load(open(p))
    c.pop("quantization_config", None)
    json.dump(c, open(p, "w"), indent=2)


def merge_check(a):
    from transformers import AutoModelForCausalLM
    from peft import PeftModel
    m = AutoModelForCausalLM.from_pretrained(a.bnb, device_map="cpu")
    m = m.dequantize()
    m = PeftModel.from_pretrained(m, a.adapter).merge_and_unload()
    want = {k: v.detach().to(torch.float32) for k, v in m.state_dict().items()}
    got = {}
    for f in sorted(os.listdir(a.merged)):
        if f.endswith(".safetensors"):
            got.update(load_file(os.path.join(a.merged, f)))
    if set(got) != set(want):
        fail(f"tensors differ: only gtrain {sorted(set(got) - set(want))[:5]}, only PEFT {sorted(set(want) - set(got))[:5]}")
    worst, worst_name = 0.0, ""
    for k, w in want.items():
        g = got[k].to(torch.float32)
        if g.shape != w.shape:
            fail(f"{k}: shape {list(g.shape)}, PEFT's {list(w.shape)}")
        scale = float(w.abs().max()) or 1.0
        rel = float((g - w).abs().max()) / scale
        if rel > worst:
            worst, worst_name = rel, k
        if rel > 1e-6:
            fail(f"{k}: max |gtrain - PEFT| / max |PEFT| = {rel:.3g} > 1e-6")
    print(f"ok merge-check: {len(want)} tensors, worst {worst:.3g} relative ({worst_name})")


def main(argv):
    p = argparse.ArgumentParser()
    s = p.add_subparsers(dest="cmd", required=True)
    q = s.add_parser("quantize")
    q.add_argument("base")
    q.add_argument("out")
    q.add_argument("--no-double-quant", action="store_true")
    q.add_argument("--dtype", default="f32", choices=list(DTYPE))
    q.add_argument("--extra-odd", action="store_true")
    q.add_argument("--max-shard-bytes", type=int, default=0)
    d = s.add_parser("dequant")
    d.add_argument("bnb")
    d.add_argument("out")
    mu = s.add_parser("mutate")
    mu.add_argument("bnb")
    mu.add_argument("out")
    mu.add_argument("--strip-config", action="store_true")
    mu.add_argument("cases", nargs="+", choices=sorted(MUTATIONS))
    sc = s.add_parser("strip-config")
    sc.add_argument("dir")
    sc.add_argument("out")
    mc = s.add_parser("merge-check")
    mc.add_argument("bnb")
    mc.add_argument("adapter")
    mc.add_argument("merged")
    a = p.parse_args(argv)
    if a.cmd == "strip-config":
        shutil.copytree(a.dir, a.out)
        return strip_config(a.out)
    {"quantize": quantize, "dequant": dequant, "mutate": mutate, "merge-check": merge_check}[a.cmd](a)


if __name__ == "__main__":
    args = sys.argv[1:]
    while args:
        cut = args.index("+") if "+" in args else len(args)
        main(args[:cut])
        args = args[cut + 1:]
