#!/usr/bin/env python3
"""Check of gtrain's sharded Hugging Face writer (src/io/hf_writer.c) by the Hugging Face stack itself:
the split save_pretrained makes (huggingface_hub.split_torch_state_dict_into_shards on the same
tensors, filename pattern model{suffix}.safetensors), and DIR's files read by safetensors' own
reader (safetensors.safe_open), plus the bytes of the format that matter.

usage: hf_shards_check.py DIR MAX_SHARD_BYTES TENSORS_JSONL

TENSORS_JSONL: one {"name", "dtype" ("F32"/"BF16"), "shape", "seed"} per line, in the order given
to the writer. Element k of the tensor with seed t holds ((7k + 13t) mod 251 - 125) * 2^(t mod 5 - 2),
exact in fp32 and bf16. Checks:
  - the split and the file names are huggingface_hub's (one shard: model.safetensors and no index);
  - the index is byte for byte json.dumps({"metadata": <the split's metadata: total_size>,
    "weight_map"}, indent=2, sort_keys=True) + "\n" (save_pretrained adds "total_parameters" to the
    metadata since transformers 5; loaders ignore it, and gtrain does not write it);
  - each shard: 8-byte little-endian header length, a multiple of 8, space padded; __metadata__
    {"format": "pt"}; exactly its tensors with their dtype and shape, in order; data contiguous and
    covering the file to its last byte; every value, as safetensors.safe_open reads it.
Prints one line and exits 0 when everything holds, 1 otherwise. Run with $GTRAIN_REFS_PY."""
import json, os, struct, sys

import torch
from huggingface_hub import split_torch_state_dict_into_shards
from safetensors import safe_open

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

    dt = {"F32": torch.float32, "BF16": torch.bfloat16}
    want_vals = {t["name"]: torch.tensor([value(k, t["seed"]) for k in range(t["numel"])], dtype=torch.float32)
                 .reshape(t["shape"]).to(dt[t["dtype"]]) for t in tensors}
    split = split_torch_state_dict_into_shards(want_vals, filename_pattern="model{suffix}.safetensors",
                                               max_shard_size=max_shard)
    by_name = {t["name"]: t for t in tensors}
    names = list(split.filename_to_tensors)
    shards = [[by_name[n] for n in split.filename_to_tensors[f]] for f in names]
    index_path = os.path.join(d, "model.safetensors.index.json")
    if len(shards) == 1:
        if os.path.exists(index_path):
            fail("one shard, yet an index was written")
    else:
        if os.path.exists(os.path.join(d, "model.safetensors")):
            fail("sharded, yet model.safetensors is there")
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        want = json.dumps(index, indent=2, sort_keys=True) + "\n"
        with open(index_path, "rb") as f:
            got = f.read().decode("utf-8")
        if got != want:
            fail("index text differs from json.dumps(indent=2, sort_keys=True):\n--- got\n%s--- want\n%s" % (got, want))
    extra = sorted(set(x for x in os.listdir(d) if x.endswith(".safetensors") or x.endswith(".tmp")) - set(names))
    if extra:
        fail("files beside the shards: %s" % extra)

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
        with safe_open(path, framework="pt") as f:
            if set(f.keys()) != set(t["name"] for t in sh):
                fail("%s: safetensors reads tensors %s" % (path, sorted(f.keys())))
            for t in sh:
                x = f.get_tensor(t["name"])
                if x.dtype != dt[t["dtype"]] or list(x.shape) != t["shape"]:
                    fail("%s: %s read by safetensors as %s %s" % (path, t["name"], x.dtype, list(x.shape)))
                if not torch.equal(x, want_vals[t["name"]]):
                    k = int((x != want_vals[t["name"]]).flatten().nonzero()[0])
                    fail("%s: %s[%d] = %r, expected %r" % (path, t["name"], k, x.flatten()[k].item(), value(k, t["seed"])))
        if off != len(data):
            fail("%s: %d data bytes, the tensors cover %d" % (path, len(data), off))
    print("hf_shards_check: ok: %d tensors in %d shard(s) as huggingface_hub splits them, index %s, values as "
          "safetensors reads them" % (len(tensors), len(shards), "byte-exact" if len(shards) > 1 else "absent"))

if __name__ == "__main__":
    main()
