#!/usr/bin/env python3
"""peft_adapter_check.py - Hugging Face PEFT itself reading and writing the LoRA adapter directories of
tests/test_peft.c (peft, transformers and torch from the test references' venv).

  check DIR ARCH N_LAYER R C I     PeftModel.from_pretrained(base, DIR) on a transformers model of ARCH
                                   (llama: LlamaForCausalLM hidden C, intermediate I, 4 heads of which 2
                                   kv; gpt2: GPT2LMHeadModel n_embd C, n_inner I) loads what gtrain's test
                                   wrote (q_proj + down_proj, or c_attn + mlp.c_proj): every lora_A / lora_B
                                   of PEFT's model holds the expected values, and PEFT's LoraConfig reads the
                                   config's r, lora_alpha, lora_dropout, use_rslora, init_lora_weights,
                                   target_modules, fan_in_fan_out, base_model_name_or_path as written. Also
                                   the file's layout as PEFT's save_pretrained writes it, which PEFT's reader
                                   does not check: __metadata__ {"format": "pt"}, F32, the config text
                                   json.dumps(indent=2, sort_keys=True)
  write DIR ARCH N_LAYER R C I     get_peft_model(base, LoraConfig(r=R, lora_alpha=16, those modules)) with the
                                   expected values, save_pretrained: PEFT's own files, for the C reader
Values: element k of tensor t (the t-th key in layer order, lora_A before lora_B) is
((7k + 13t) % 251 - 125) / 64, exact in float32 and bfloat16."""
import json
import os
import struct
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import torch  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402


def modules(arch, c, i):
    if arch == "llama":
        return [("model.layers.%d.self_attn.q_proj", c, c), ("model.layers.%d.mlp.down_proj", i, c)]
    return [("transformer.h.%d.attn.c_attn", c, 3 * c), ("transformer.h.%d.mlp.c_proj", i, c)]


def expected(arch, n_layer, r, c, i):
    """[(module, lora_A or lora_B, shape)] in key order"""
    out = []
    for l in range(n_layer):
        for path, fin, fout in modules(arch, c, i):
            out.append((path % l, "lora_A", [r, fin]))
            out.append((path % l, "lora_B", [fout, r]))
    return out


def values(t, shape):
    k = torch.arange(shape[0] * shape[1], dtype=torch.float64)
    return (((7 * k + 13 * t) % 251 - 125) / 64).reshape(shape)


def base_model(arch, n_layer, c, i):
    torch.manual_seed(0)
    if arch == "llama":
        return LlamaForCausalLM(LlamaConfig(hidden_size=c, intermediate_size=i, num_attention_heads=4,
                                            num_key_value_heads=2, num_hidden_layers=n_layer, vocab_size=64,
                                            max_position_embeddings=16))
    return GPT2LMHeadModel(GPT2Config(n_embd=c, n_inner=i, n_head=4, n_layer=n_layer, vocab_size=64, n_positions=16))


def lora_layers(pm):
    pre = "base_model.model."
    return {n[len(pre):]: m for n, m in pm.named_modules() if hasattr(m, "lora_A") and "default" in getattr(m, "lora_A", {})}


def check(d, arch, n_layer, r, c, i):
    raw = open(os.path.join(d, "adapter_model.safetensors"), "rb").read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    assert header.pop("__metadata__") == {"format": "pt"}, "metadata"
    assert all(h["dtype"] == "F32" for h in header.values()), "dtype"
    text = open(os.path.join(d, "adapter_config.json")).read()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True), "not json.dumps(indent=2, sort_keys=True)"
    cfg = LoraConfig.from_pretrained(d)  # PEFT's reading of the config
    assert cfg.peft_type.value == "LORA" and cfg.task_type == "CAUSAL_LM", cfg
    assert cfg.r == r and cfg.lora_alpha == 2 * r and cfg.lora_dropout == 0.05, cfg
    assert cfg.bias == "none" and cfg.modules_to_save is None and cfg.use_dora is False, cfg
    assert cfg.use_rslora is True and cfg.init_lora_weights == "pissa_niter_4", cfg
    tm = {"q_proj", "down_proj"} if arch == "llama" else {"c_attn", "mlp.c_proj"}
    assert set(cfg.target_modules) == tm, cfg.target_modules
    assert cfg.fan_in_fan_out is (arch == "gpt2"), cfg
    assert cfg.base_model_name_or_path == "some/base \"model\"", cfg.base_model_name_or_path
    # PEFT loads it onto the base (init_lora_weights pissa_niter_4 first initialises from the base's
    # weights, as PEFT does on load; the file's values then replace the adapters)
    pm = PeftModel.from_pretrained(base_model(arch, n_layer, c, i), d)
    layers = lora_layers(pm)
    want = expected(arch, n_layer, r, c, i)
    assert sorted(layers) == sorted({m for m, _, _ in want}), ("PEFT adapted", sorted(layers))
    for t, (mod, which, shape) in enumerate(want):
        w = getattr(layers[mod], which)["default"].weight.detach().double()
        assert list(w.shape) == shape, (mod, which, list(w.shape), shape)
        assert torch.equal(w, values(t, shape)), (mod, which, "values differ")
    s = layers[want[0][0]].scaling["default"]
    assert abs(s - 2 * r / r ** 0.5) < 1e-12, ("rslora scaling", s)


def write(d, arch, n_layer, r, c, i):
    tm = ["q_proj", "down_proj"] if arch == "llama" else ["c_attn", "mlp.c_proj"]
    pm = get_peft_model(base_model(arch, n_layer, c, i),
                        LoraConfig(r=r, lora_alpha=16, target_modules=tm, task_type="CAUSAL_LM",
                                   fan_in_fan_out=arch == "gpt2"))
    layers = lora_layers(pm)
    with torch.no_grad():
        for t, (mod, which, shape) in enumerate(expected(arch, n_layer, r, c, i)):
            getattr(layers[mod], which)["default"].weight.copy_(values(t, shape))
    pm.save_pretrained(d)


if __name__ == "__main__":
    cmd, d, arch = sys.argv[1], sys.argv[2], sys.argv[3]
    n_layer, r, c, i = (int(x) for x in sys.argv[4:8])
    torch.set_num_threads(1)
    (check if cmd == "check" else write)(d, arch, n_layer, r, c, i)
    print("ok")
