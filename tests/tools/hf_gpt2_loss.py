#!/usr/bin/env python3
"""Independent check of gtrain's Hugging Face layout: load RUN_DIR/model.safetensors and
RUN_DIR/config.json exactly as Hugging Face's GPT2LMHeadModel would read them (names with the
"transformer." prefix, Conv1D weights stored [in, out], x @ W + b), rebuild GPT-2 in PyTorch with no
gtrain code, and print the mean loss over the eval windows of a byte-level text file: consecutive
windows of seq_len+1 bytes starting at 0, stride seq_len, the first N of them (gtrain's eval set).

usage: hf_gpt2_loss.py RUN_DIR TEXT_FILE SEQ_LEN N_WINDOWS [VAL_FRACTION]
(VAL_FRACTION > 0: the windows come from the last VAL_FRACTION of the bytes, as gtrain's split.)
Needs PyTorch (Debian: python3-torch); the safetensors file is parsed here by hand."""
import json, math, struct, sys
import torch
import torch.nn.functional as F

def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dtype = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}[t["dtype"]]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dtype).reshape(t["shape"]).float()
    return out

def main():
    run, text, T, n_windows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    val_fraction = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    cfg = json.load(open(f"{run}/config.json"))
    w = load_safetensors(f"{run}/model.safetensors")
    p = lambda k: w["transformer." + k]
    C, NH, L, eps = cfg["n_embd"], cfg["n_head"], cfg["n_layer"], cfg["layer_norm_epsilon"]
    raw = open(text, "rb").read()
    if val_fraction > 0:
        raw = raw[int(len(raw) * (1 - val_fraction)):]
    data = torch.tensor(list(raw), dtype=torch.long)
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(n_windows):
            win = data[i * T: i * T + T + 1]
            idx, tgt = win[:-1].unsqueeze(0), win[1:].unsqueeze(0)
            x = p("wte.weight")[idx] + p("wpe.weight")[:T]
            for l in range(L):
                h = F.layer_norm(x, (C,), p(f"h.{l}.ln_1.weight"), p(f"h.{l}.ln_1.bias"), eps)
                qkv = h @ p(f"h.{l}.attn.c_attn.weight") + p(f"h.{l}.attn.c_attn.bias")  # Conv1D
                q, k, v = qkv.split(C, dim=2)
                q, k, v = (t.view(1, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
                att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
                att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
                y = (att @ v).transpose(1, 2).reshape(1, T, C)
                x = x + y @ p(f"h.{l}.attn.c_proj.weight") + p(f"h.{l}.attn.c_proj.bias")
                h = F.layer_norm(x, (C,), p(f"h.{l}.ln_2.weight"), p(f"h.{l}.ln_2.bias"), eps)
                f = F.gelu(h @ p(f"h.{l}.mlp.c_fc.weight") + p(f"h.{l}.mlp.c_fc.bias"), approximate="tanh")
                x = x + f @ p(f"h.{l}.mlp.c_proj.weight") + p(f"h.{l}.mlp.c_proj.bias")
            x = F.layer_norm(x, (C,), p("ln_f.weight"), p("ln_f.bias"), eps)
            head = w.get("lm_head.weight", p("wte.weight"))
            logits = x @ head.t()
            total += F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1), reduction="sum").item()
            count += T
    print(f"{total / count:.9f}")

if __name__ == "__main__":
    main()
