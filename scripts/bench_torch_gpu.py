#!/usr/bin/env python3
"""bench_torch_gpu.py - the same-machine PyTorch baseline of scripts/device-check.sh (stage s2).

usage: bench_torch_gpu.py --device cuda|cpu --steps N --gpt2 CONFIG.json:B:T --mistral CONFIG.json:B:T

Builds each Hugging Face config with random weights and trains on random tokens: GPT-2 full
fine-tuning, the Mistral-dimension model full and with PEFT LoRA r 16 (alpha 32, no dropout) on
q/k/v/o/gate/up/down with the base frozen in bf16. On cuda: bf16 autocast, fused AdamW, SDPA
attention; on cpu (the dry run): fp32. Prints one line per model, "NAME: ..." with the median step
time after half the steps of warm-up and tokens/s (steps timed with torch.cuda.synchronize).
"""
import argparse
import time


def run(name, cfg_path, B, T, steps, device, lora):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(cfg_path)
    for k in ("attn_pdrop", "embd_pdrop", "resid_pdrop", "attention_dropout", "hidden_dropout"):
        if hasattr(cfg, k):
            setattr(cfg, k, 0.0)
    cuda = device == "cuda"
    kw = {"attn_implementation": "sdpa"} if cuda else {}
    dtype = torch.bfloat16 if (cuda and lora) else torch.float32
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype, **kw).to(device)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                 "gate_proj", "up_proj", "down_proj"]))
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.float()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=cuda)
    ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    times = []
    for _ in range(steps):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=cuda):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    t = sorted(times[steps // 2:])
    med = t[len(t) // 2]
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    print(f"{name}: torch {torch.__version__} {device} {'bf16 autocast' if cuda else 'fp32'} B={B} T={T}: "
          f"{B * T / med:.0f} tok/s, step {med * 1e3:.1f} ms (peak {peak:.1f} GiB)", flush=True)
    del model, opt
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--gpt2", required=True)
    ap.add_argument("--mistral", required=True)
    a = ap.parse_args()
    import torch

    torch.manual_seed(0)
    if a.device == "cpu":
        torch.set_num_threads(2)
    for name, spec, lora in (("gpt2", a.gpt2, False), ("mistral-full", a.mistral, False), ("mistral-lora", a.mistral, True)):
        path, B, T = spec.rsplit(":", 2)
        run(name, path, int(B), int(T), a.steps, a.device, lora)


if __name__ == "__main__":
    main()
