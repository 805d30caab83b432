#!/usr/bin/env python3
"""peft_adapter_check.py - an independent reader and writer of PEFT LoRA adapter directories
(json + struct only; the peft package is not used), for tests/test_peft.c.

  check DIR ARCH N_LAYER R C I     read DIR/adapter_model.safetensors and adapter_config.json as
                                   gtrain's test wrote them (Llama q_proj + down_proj, or GPT-2
                                   c_attn + mlp.c_proj) and check keys, shapes, values, config
  write DIR ARCH N_LAYER R C I     write an adapter with the same keys and values, and the config
                                   PEFT 0.18 writes (every key it saves), for the C reader
Values: element k of tensor t (the t-th key in PEFT order) is ((7k + 13t) % 251 - 125) / 64."""
import json
import struct
import sys


def modules(arch, c, i):
    if arch == "llama":
        return [("model.layers.%d.self_attn.q_proj", c, c), ("model.layers.%d.mlp.down_proj", i, c)]
    return [("transformer.h.%d.attn.c_attn", c, 3 * c), ("transformer.h.%d.mlp.c_proj", i, c)]


def expected(arch, n_layer, r, c, i):
    out = []
    for l in range(n_layer):
        for path, fin, fout in modules(arch, c, i):
            base = "base_model.model." + path % l
            out.append((base + ".lora_A.weight", [r, fin]))
            out.append((base + ".lora_B.weight", [fout, r]))
    return out


def value(k, t):
    return ((7 * k + 13 * t) % 251 - 125) / 64.0


def check(d, arch, n_layer, r, c, i):
    raw = open(d + "/adapter_model.safetensors", "rb").read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + hlen])
    assert header.pop("__metadata__") == {"format": "pt"}, "metadata"
    want = expected(arch, n_layer, r, c, i)
    assert sorted(header) == sorted(k for k, _ in want), ("keys", sorted(header))
    data = raw[8 + hlen :]
    for t, (key, shape) in enumerate(want):
        h = header[key]
        assert h["dtype"] == "F32" and h["shape"] == shape, (key, h)
        b, e = h["data_offsets"]
        vals = struct.unpack("<%df" % ((e - b) // 4), data[b:e])
        assert len(vals) == shape[0] * shape[1], key
        for k, v in enumerate(vals):
            assert v == value(k, t), (key, k, v)
    cfg = json.load(open(d + "/adapter_config.json"))
    assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM", cfg
    assert cfg["r"] == r and cfg["lora_alpha"] == 2 * r and cfg["lora_dropout"] == 0.05, cfg
    assert cfg["bias"] == "none" and cfg["modules_to_save"] is None and cfg["use_dora"] is False, cfg
    assert cfg["use_rslora"] is True and cfg["init_lora_weights"] == "pissa_niter_4", cfg
    tm = ["q_proj", "down_proj"] if arch == "llama" else ["c_attn", "mlp.c_proj"]
    assert sorted(cfg["target_modules"]) == sorted(tm), cfg["target_modules"]
    assert cfg["fan_in_fan_out"] is (arch == "gpt2"), cfg
    assert cfg["base_model_name_or_path"] == "some/base \"model\"", cfg
    text = open(d + "/adapter_config.json").read()
    assert text == json.dumps(cfg, indent=2, sort_keys=True), "not json.dumps(indent=2, sort_keys=True)"


def write(d, arch, n_layer, r, c, i):
    want = expected(arch, n_layer, r, c, i)
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for t, (key, shape) in enumerate(want):
        n = shape[0] * shape[1]
        blob = struct.pack("<%df" % n, *[value(k, t) for k in range(n)])
        header[key] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(d + "/adapter_model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    cfg = {
        "alora_invocation_tokens": None, "alpha_pattern": {}, "arrow_config": None, "auto_mapping": None,
        "base_model_name_or_path": "base", "bias": "none", "corda_config": None, "ensure_weight_tying": False,
        "eva_config": None, "exclude_modules": None, "fan_in_fan_out": arch == "gpt2", "inference_mode": True,
        "init_lora_weights": True, "layer_replication": None, "layers_pattern": None, "layers_to_transform": None,
        "loftq_config": {}, "lora_alpha": 16, "lora_bias": False, "lora_dropout": 0.0, "megatron_config": None,
        "megatron_core": "megatron.core", "modules_to_save": None, "peft_type": "LORA", "peft_version": "0.18.1",
        "qalora_group_size": 16, "r": r, "rank_pattern": {}, "revision": None,
        "target_modules": ["down_proj", "q_proj"] if arch == "llama" else ["c_attn", "mlp.c_proj"],
        "target_parameters": None, "task_type": "CAUSAL_LM", "trainable_token_indices": None, "use_dora": False,
        "use_qalora": False, "use_rslora": False,
    }
    with open(d + "/adapter_config.json", "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True))


if __name__ == "__main__":
    cmd, d, arch = sys.argv[1], sys.argv[2], sys.argv[3]
    n_layer, r, c, i = (int(x) for x in sys.argv[4:8])
    (check if cmd == "check" else write)(d, arch, n_layer, r, c, i)
    print("ok")
