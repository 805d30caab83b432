#!/usr/bin/env python3
"""bnb_qlora.py - QLoRA as transformers + peft + bitsandbytes run it on the CPU (the test references'
venv: bitsandbytes 0.50.2, whose CPU path quantizes, dequantizes and saves 4-bit models), the reference
for gtrain's NF4 base (tests/test_qpissa.c). Nothing of gtrain's: the base is transformers' class with
random weights, quantized by BitsAndBytesConfig(load_in_4bit) at from_pretrained and written by
save_pretrained (bitsandbytes' own tensors: packed uint8 weight, absmax, quant_map, nested_absmax,
nested_quant_map, quant_state.bitsandbytes__nf4); the adapter is PEFT's (get_peft_model,
save_pretrained); the only hand-written parts are the training loop (full batch,
torch.optim.AdamW(foreach=False) over every lora_A / lora_B, constant lr, no clipping) and the output.
The model trains as PEFT's QLoRA recipe has it (prepare_model_for_kbit_training's input gradients, train
mode), so every Linear4bit takes bitsandbytes' autograd path: dequantize_4bit to float32, then the matmul.

The 4-bit model computes in float32 (bnb_4bit_compute_dtype float32: each Linear4bit dequantizes its
weight to float32 and multiplies). Rows: TOKENS.txt, one row per line, whitespace-separated ids; the
loss is the mean cross entropy (in float64 from the float32 logits) over every predicted token.

usage ($GTRAIN_REFS_PY; CPU only; several commands run in one process joined by " + "):
  bnb_qlora.py make CONFIG.json OUTDIR [--seed S] [--std 0.1] [--r 4] [--alpha 8] [--double-quant 0|1]
      OUTDIR/base: a random model of CONFIG's model_type (weights N(0, std), norm weights 1 + 0.1 N(0, 1)),
      float32, save_pretrained; OUTDIR/bnb: that base loaded with BitsAndBytesConfig(load_in_4bit,
      bnb_4bit_quant_type nf4, bnb_4bit_use_double_quant, bnb_4bit_compute_dtype float32), device_map cpu,
      and save_pretrained; OUTDIR/adapter: get_peft_model on the 4-bit model, LoRA r / alpha on q, k, v, o,
      gate, up, down, lora_A and lora_B N(0, 0.05) (torch's generator, seed S), save_pretrained (F32)
  bnb_qlora.py train BNBDIR ADAPTERDIR TOKENS.txt [--steps 5 --lr 1e-3 --weight-decay 0.1 --beta1 0.9
      --beta2 0.95 --eps 1e-8] [--grads OUT.safetensors] [--digits 17]
      AutoModelForCausalLM.from_pretrained(BNBDIR) (its quantization_config: the 4-bit tensors as saved),
      PeftModel.from_pretrained(ADAPTERDIR, is_trainable); prints "step k loss L grad_norm G" (before the
      step's update) and "final loss L"; --grads: step 1's gradient of every adapter tensor, keyed as in
      adapter_model.safetensors ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), F32
"""
import argparse, json, os, sys, warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import logging  # noqa: E402

logging.disable(logging.WARNING)  # bitsandbytes' note about its optional CPU kernels package
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def die(msg, code=2):
    print(f"bnb_qlora.py: {msg}", file=sys.stderr)
    sys.exit(code)


def read_rows(path):
    rows = [[int(x) for x in line.split()] for line in open(path) if line.strip()]
    if not rows or any(len(r) != len(rows[0]) or len(r) < 2 for r in rows):
        die(f"{path}: expected rows of one length >= 2")
    return torch.tensor(rows, dtype=torch.long)


def mean_loss(model, ids):
    logits = model(input_ids=ids[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), ids[:, 1:].reshape(-1))


def lora_params(pm):
    return [(n, p) for n, p in pm.named_parameters() if "lora_A" in n or "lora_B" in n]


def load_4bit(d, quant=None):
    kw = {"quantization_config": quant} if quant is not None else {}
    m = AutoModelForCausalLM.from_pretrained(d, device_map="cpu", dtype=torch.float32, attn_implementation="eager", **kw)
    m.eval()
    return m


def cmd_make(a):
    cfg = AutoConfig.for_model(**json.load(open(a.config)))
    torch.manual_seed(a.seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    g = torch.Generator().manual_seed(a.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            p.copy_(1.0 + 0.1 * r if p.ndim == 1 and "norm" in name else a.std * r)
    base, bnb, adir = (os.path.join(a.outdir, s) for s in ("base", "bnb", "adapter"))
    model.save_pretrained(base)
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=bool(a.double_quant),
                           bnb_4bit_compute_dtype=torch.float32)
    mq = load_4bit(base, q)
    n4 = sum(1 for m in mq.modules() if type(m).__name__ == "Linear4bit")
    if n4 == 0:
        die("bitsandbytes quantized no linear layer", 1)
    mq.save_pretrained(bnb)
    lc = LoraConfig(r=a.r, lora_alpha=a.alpha, target_modules=MODULES, lora_dropout=0.0, init_lora_weights=True,
                    task_type="CAUSAL_LM")
    pm = get_peft_model(mq, lc)
    with torch.no_grad():
        for _, p in lora_params(pm):
            p.copy_(0.05 * torch.randn(p.shape, generator=g, dtype=torch.float32))
    pm.save_pretrained(adir)
    print(f"{a.outdir}: base, bnb ({n4} Linear4bit), adapter ({len(lora_params(pm))} tensors, r {a.r})")


def cmd_train(a):
    ids = read_rows(a.tokens)
    base = load_4bit(a.bnbdir)
    # what PEFT's prepare_model_for_kbit_training does for training: the embeddings' output requires grad,
    # so every Linear4bit runs bitsandbytes' autograd path (dequantize_4bit to float32, then the matmul).
    # And train mode (no dropout anywhere here): in eval mode bitsandbytes' CPU path repacks the weights
    # for its AVX512-BF16 gemv kernel, which rounds through bfloat16 (1 % on the gradients).
    base.enable_input_require_grads()
    base.train()
    pm = PeftModel.from_pretrained(base, a.adapterdir, is_trainable=True)
    pm.train()
    named = lora_params(pm)
    params = [p for _, p in named]
    if not params:
        die(f"{a.adapterdir}: no lora_A / lora_B parameters", 1)
    opt = torch.optim.AdamW([{"params": params, "weight_decay": a.weight_decay}], lr=a.lr, betas=(a.beta1, a.beta2),
                            eps=a.eps, foreach=False)
    for step in range(1, a.steps + 1):
        loss = mean_loss(pm, ids)
        loss.backward()
        gn = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params))
        print("step %d loss %.*g grad_norm %.*g" % (step, a.digits, loss.item(), a.digits, float(gn)))
        if step == 1 and a.grads:
            save_file({n.replace(".default.", "."): p.grad.detach().float().contiguous() for n, p in named}, a.grads)
        opt.step()
        opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        print("final loss %.*g" % (a.digits, mean_loss(pm, ids).item()))
    sys.stdout.flush()


def main(argv):
    p = argparse.ArgumentParser(prog="bnb_qlora.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("config"), m.add_argument("outdir")
    m.add_argument("--seed", type=int, default=0), m.add_argument("--std", type=float, default=0.1)
    m.add_argument("--r", type=int, default=4), m.add_argument("--alpha", type=float, default=8)
    m.add_argument("--double-quant", type=int, default=1)
    t = sub.add_parser("train")
    t.add_argument("bnbdir"), t.add_argument("adapterdir"), t.add_argument("tokens")
    t.add_argument("--steps", type=int, default=5), t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--weight-decay", type=float, default=0.1), t.add_argument("--beta1", type=float, default=0.9)
    t.add_argument("--beta2", type=float, default=0.95), t.add_argument("--eps", type=float, default=1e-8)
    t.add_argument("--grads"), t.add_argument("--digits", type=int, default=17)
    a = p.parse_args(argv)
    {"make": cmd_make, "train": cmd_train}[a.cmd](a)


if __name__ == "__main__":
    args, cmds = sys.argv[1:], [[]]
    for x in args:
        if x == "+":
            cmds.append([])
        else:
            cmds[-1].append(x)
    for c in cmds:
        main(c)
