#!/usr/bin/env python3
"""The same training step as bench/bench_step.c in PyTorch on the CPU (make bench compares them).

usage: bench_torch.py MODEL.json B T [steps]   (threads: torch.set_num_threads(2))
A plain GPT-2 (pre-LN, tanh GELU, tied head), forward + backward + clip + AdamW, fp32.
"""
import json, math, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

class Block(nn.Module):
    def __init__(s, C, NH, I):
        super().__init__()
        s.NH = NH
        s.ln_1, s.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.c_attn, s.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.c_fc, s.mlp_proj = nn.Linear(C, I), nn.Linear(I, C)
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.NH, C // s.NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // s.NH)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + s.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + s.mlp_proj(F.gelu(s.c_fc(s.ln_2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s, d):
        super().__init__()
        C = d["n_embd"]
        s.wte = nn.Embedding(d["vocab_size"], C)
        s.wpe = nn.Embedding(d["n_positions"], C)
        s.h = nn.ModuleList(Block(C, d["n_head"], d.get("n_inner") or 4 * C) for _ in range(d["n_layer"]))
        s.ln_f = nn.LayerNorm(C)
    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1]))
        for b in s.h:
            x = b(x)
        logits = s.ln_f(x) @ s.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))

def main():
    d = json.load(open(sys.argv[1]))
    B, T = int(sys.argv[2]), int(sys.argv[3])
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    torch.set_num_threads(2)
    torch.manual_seed(0)
    m = GPT(d)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.1)
    idx = torch.randint(0, d["vocab_size"], (B, T))
    tgt = torch.randint(0, d["vocab_size"], (B, T))
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        loss = m(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    print(f"pytorch {sys.argv[1]:<28s} B={B} T={T}                          {med*1e3:8.1f} ms/step  {B*T/med:9.0f} tok/s"
          f"  (torch {torch.__version__}, {torch.get_num_threads()} threads)")

if __name__ == "__main__":
    main()
