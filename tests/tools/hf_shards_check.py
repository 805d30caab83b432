#!/usr/bin/env python3
"""Independent check of gtrain's sharded Hugging Face writer (src/hf_writer.c), with no gtrain
code: recompute huggingface_hub's shard split from the tensors' sizes, then read DIR's files as
save_pretrained's readers would and check every byte that matters.

usage: hf_shards_check.py DIR MAX_SHARD_BYTES TENSORS_JSONL

TENSORS_JSONL: one {"name", "dtype" ("F32"/"BF16"), "shape", "seed"} per line, in the order given
to the writer. Element k of the tensor with seed t holds ((7k + 13t) mod 251 - 125) * 2^(t mod 5 - 2),
exact in fp32 and bf16. Checks:
  - the split: a tensor bigger than the max gets a shard of its own, appended at once; a tensor that
    would push the current shard over the max starts a new one; file names model-%05d-of-%05d
    (one shard: model.safetensors and no index);
  - the index is byte for byte json.dumps({"metadata": {"total_size"}, "weight_map"}, indent=2,
    sort_keys=True) + "\\n", as transformers' save_pretrained writes it;
  - each shard: 8-byte little-endian header length, a multiple of 8, space padded; __metadata__
    {"format": "pt"}; exactly its tensors with their dtype and shape; data contiguous and
    covering the file to its last byte; every value (struct, and torch.frombuffer where PyTorch
    is installed).
Prints one line and exits 0 when everything holds, 1 otherwise."""
import json, os, struct, sys

def fail(msg):
    print("hf_shards_check: FAIL: " + msg)
    sys.exit(1)

def value(k, t):
    return float(((7 * k + 13 * t) % 251) - 125) * 2.0 ** ((t % 5) - 2)

def main():
    d, max_shard, spec_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(spec_path, encoding="utf-8") as f:
        tensors = [json.loads(line) for line in f if line.strip()]
    size_of = {"F32": 4, "BF16": 2}
    for t in tensors:
        n = 1
        for s in t["shape"]:
            n *= s
        t["numel"], t["bytes"] = n, n * size_of[t["dtype"]]

    # huggingface_hub's split_state_dict_into_shards_factory, on sizes only
    shards, current, current_size = [], [], 0
    for t in tensors:
        if t["bytes"] > max_shard:
            shards.append([t])
            continue
        if current_size + t["bytes"] > max_shard:
            shards.append(current)
            current, current_size = [], 0
        current.append(t)
        current_size += t["bytes"]
    if current:
        shards.append(current)
    names = ["model.safetensors"] if len(shards) == 1 else [
        "model-%05d-of-%05d.safetensors" % (i + 1, len(shards)) for i in range(len(shards))]

    index_path = os.path.join(d, "model.safetensors.index.json")
    if len(shards) == 1:
        if os.path.exists(index_path):
            fail("one shard, yet an index was written")
    else:
        if os.path.exists(os.path.join(d, "model.safetensors")):
            fail("sharded, yet model.safetensors is there")
        index = {"metadata": {"total_size": sum(t["bytes"] for t in tensors)},
                 "weight_map": {t["name"]: names[i] for i, sh in enumerate(shards) for t in sh}}
        want = json.dumps(index, indent=2, sort_keys=True) + "\n"
        with open(index_path, "rb") as f:
            got = f.read().decode("utf-8")
        if got != want:
            fail("index text differs from json.dumps(indent=2, sort_keys=True):\n--- got\n%s--- want\n%s" % (got, want))
    extra = sorted(set(x for x in os.listdir(d) if x.endswith(".safetensors") or x.endswith(".tmp")) - set(names))
    if extra:
        fail("files beside the shards: %s" % extra)

    try:
        import torch
        have_torch = True
    except ImportError:
        have_torch = False
    for name, sh in zip(names, shards):
        path = os.path.join(d, name)
        with open(path, "rb") as f:
            blob = f.read()
        (n,) = struct.unpack("<Q", blob[:8])
        if n % 8 or 8 + n > len(blob):
            fail("%s: header length %d" % (path, n))
        text = blob[8:8 + n].decode("utf-8")
        if not text.startswith("{") or not text.rstrip(" ").endswith("}"):
            fail("%s: header not a JSON object padded with spaces" % path)
        header = json.loads(text)
        meta = header.pop("__metadata__", None)
        if meta != {"format": "pt"}:
            fail("%s: __metadata__ %r" % (path, meta))
        if set(header) != set(t["name"] for t in sh):
            fail("%s: tensors %s, expected %s" % (path, sorted(header), sorted(t["name"] for t in sh)))
        data = blob[8 + n:]
        off = 0
        for t in sh:
            h = header[t["name"]]
            if h["dtype"] != t["dtype"] or h["shape"] != t["shape"]:
                fail("%s: %s: %s %s, expected %s %s" % (path, t["name"], h["dtype"], h["shape"], t["dtype"], t["shape"]))
            a, b = h["data_offsets"]
            if a != off or b - a != t["bytes"]:
                fail("%s: %s: data_offsets [%d, %d], expected [%d, %d]" % (path, t["name"], a, b, off, off + t["bytes"]))
            off = b
            raw = data[a:b]
            if t["dtype"] == "F32":
                vals = struct.unpack("<%df" % t["numel"], raw)
            else:
                vals = [struct.unpack("<f", struct.pack("<I", u << 16))[0] for u in struct.unpack("<%dH" % t["numel"], raw)]
            for k, v in enumerate(vals):
                if v != value(k, t["seed"]):
                    fail("%s: %s[%d] = %r, expected %r" % (path, t["name"], k, v, value(k, t["seed"])))
            if have_torch and t["numel"] > 0:
                dt = torch.float32 if t["dtype"] == "F32" else torch.bfloat16
                x = torch.frombuffer(bytearray(raw), dtype=dt).reshape(t["shape"]).float()
                want = torch.tensor([value(k, t["seed"]) for k in range(t["numel"])], dtype=torch.float32).reshape(t["shape"])
                if not torch.equal(x, want):
                    fail("%s: %s differs when read by torch.frombuffer" % (path, t["name"]))
        if off != len(data):
            fail("%s: %d data bytes, the tensors cover %d" % (path, len(data), off))
    print("hf_shards_check: ok: %d tensors in %d shard(s), index %s, torch %s" % (
        len(tensors), len(shards), "byte-exact" if len(shards) > 1 else "absent", "yes" if have_torch else "absent (struct only)"))

if __name__ == "__main__":
    main()
