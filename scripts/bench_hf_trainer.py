#!/usr/bin/env python3
"""The anchor of make bench: the real Hugging Face `Trainer` (transformers, + PEFT for LoRA) on the CPU.

usage: bench_hf_trainer.py CONFIG.json B T [STEPS] [--lora R] [--threads N]

Builds the model CONFIG.json (a Hugging Face config.json) describes with random weights, in fp32
(dropout off, as gtrain's bench_step runs), and trains it with `Trainer` on random tokens: batch B,
sequence T (labels = the inputs, so T - 1 predicted tokens a row, Hugging Face's causal-LM shift),
AdamW lr 1e-4, weight decay 0.1, clipping at 1.0, no accumulation, no logging, no saving, `torch`
on N threads (default 2, as gtrain). With --lora R: PEFT LoRA of rank R, alpha 2R, no dropout, on
every linear module of the blocks (q/k/v/o/gate/up/down; GPT-2: c_attn, c_proj, c_fc), the base
frozen. Prints one line: the median time of an optimizer step (a callback's on_step_begin to
on_step_end) over STEPS steps after 2 of warm-up, and tokens/s.
"""
import argparse
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("B", type=int)
    ap.add_argument("T", type=int)
    ap.add_argument("steps", type=int, nargs="?", default=10)
    ap.add_argument("--lora", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(a.config)
    for k in ("attn_pdrop", "embd_pdrop", "resid_pdrop", "attention_dropout", "hidden_dropout"):
        if hasattr(cfg, k):
            setattr(cfg, k, 0.0)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    what = "full"
    if a.lora:
        from peft import LoraConfig, get_peft_model

        targets = (["c_attn", "c_proj", "c_fc"] if cfg.model_type == "gpt2" else
                   ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
        model = get_peft_model(model, LoraConfig(r=a.lora, lora_alpha=2 * a.lora, lora_dropout=0.0,
                                                 target_modules=targets, task_type="CAUSAL_LM"))
        what = f"lora r{a.lora}"

    warm = 2
    n_rows = a.B * (a.steps + warm)
    ids = torch.randint(0, cfg.vocab_size, (n_rows, a.T))

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return n_rows

        def __getitem__(self, i):
            return {"input_ids": ids[i], "labels": ids[i]}

    times = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    args = TrainingArguments(output_dir="/tmp/gtrain-bench-hf-trainer", per_device_train_batch_size=a.B,
                             max_steps=a.steps + warm, learning_rate=1e-4, weight_decay=0.1, max_grad_norm=1.0,
                             lr_scheduler_type="constant", optim="adamw_torch", report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True, seed=0,
                             dataloader_num_workers=0, disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=Rows(), callbacks=[StepTimer()]).train()
    t = sorted(times[warm:])
    med = t[len(t) // 2]
    print(f"hf-trainer {a.config:<28s} fp32 {what} B={a.B} T={a.T}  {med * 1e3:8.1f} ms/step  "
          f"{a.B * a.T / med:9.0f} tok/s  (transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{'MKL' if torch.backends.mkl.is_available() else 'no MKL'} {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
