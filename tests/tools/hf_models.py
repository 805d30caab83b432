#!/usr/bin/env python3
"""hf_models.py - Hugging Face transformers itself as gtrain's model reference: GPT2LMHeadModel,
LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Phi3ForCausalLM and Qwen3ForCausalLM, built from a config.json through the
config classes (AutoConfig.for_model), checkpoints written by save_pretrained (sharded with
max_shard_size, safetensors, F32 / BF16 / F16) and read by from_pretrained. Nothing here computes
a forward of its own: the model, its attention masks (the sliding window included), rotary table,
norms and MLP are transformers' code. Attention is "eager" (the masked softmax written out), the
model is in eval() (dropout off) also when it trains, float32 unless --compute says otherwise.

Where transformers itself computes below the model's dtype, so does this reference: in a float64
model the RMSNorm statistics, the attention softmax and the rotary angles stay float32 (HF casts
them), so --compute f64 is float64 only up to those float32 steps (about 1e-7 relative).

usage (run with the test references' Python, $GTRAIN_REFS_PY):
  hf_models.py make CONFIG.json OUTDIR [--seed S] [--dtype f32|bf16|f16] [--max-shard-bytes N]
                  [--init-std 0.02] [--bias-std 0.02] [--set key=json ...]
  hf_models.py loss MODELDIR TOKENS.txt [--also MODELDIR2 ...] [--seq-len T] [--compute f64|f32|bf16]
                  [--attn eager|sdpa] [--digits 10]
  hf_models.py train MODELDIR TOKENS.txt [--steps 5 --lr 1e-3 --weight-decay 0.1 --beta1 0.9
                  --beta2 0.95 --eps 1e-8 --grad-clip 1.0] [--seq-len T] [--compute f64|f32]
                  [--digits 10] [--grads GRADS.safetensors] [--print-decay] [--eval-model MODELDIR]
                  --out OUTDIR [--max-shard-bytes N]
make: random weights, drawn in named_parameters() order from one torch.Generator(seed): linear and
  embedding weights N(0, init_std), norm weights 1 + 0.1 N(0, 1) (so that they matter), biases and
  LayerNorm biases N(0, bias_std); --set overrides config keys (JSON values) before the model is built.
loss: the mean next-token cross-entropy over all predicted tokens of all rows (one line per model).
train: full-batch steps of torch.optim.AdamW (foreach=False) with HF Trainer's parameter groups
  (Trainer.get_decay_parameter_names: no weight decay on biases and norm weights), constant lr,
  torch.nn.utils.clip_grad_norm_ (0: none). Prints "step K loss L grad_norm G" per step (the loss
  before that step's update, the norm before clipping), then "final loss L", and saves the trained
  model with save_pretrained (F32). --grads: the gradients of step 1 (before clipping), under the
  parameters' HF names (a tied lm_head is the embedding: one tensor), as one safetensors file;
  --print-decay: one line "decay NAME" per parameter in the weight-decay group, first;
  --eval-model: last, "eval_model loss L" of another model directory on the same rows.
TOKENS.txt: one sequence per line, whitespace-separated token ids; each row predicts tokens 1..n-1
from their prefixes (--seq-len T: a row is cut into windows of T+1 tokens, stride T); rows of
different lengths are padded at the end (targets -100; the causal mask keeps padding out).
"""
import argparse, json, os, sys

import torch
import torch.nn.functional as F

DTYPE = {"f64": torch.float64, "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "phi3", "qwen3")


def die(msg):
    print(f"hf_models.py: {msg}", file=sys.stderr)
    sys.exit(2)


def quiet_transformers():
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def config_from_json(path, overrides=()):
    """the config class of config.json's model_type, built from its fields (AutoConfig.for_model)"""
    tf = quiet_transformers()
    d = json.load(open(path))
    for kv in overrides:
        k, _, v = kv.partition("=")
        d[k] = json.loads(v)
    mt = d.pop("model_type", "gpt2")
    if mt not in FAMILIES:
        die(f"{path}: model_type {mt!r}: expected one of {', '.join(FAMILIES)}")
    return tf.AutoConfig.for_model(mt, **d)


def build(cfg, dtype=torch.float32):
    tf = quiet_transformers()
    m = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=dtype)
    return m.eval()


def load(mdir, dtype=torch.float32, attn="eager"):
    tf = quiet_transformers()
    m = tf.AutoModelForCausalLM.from_pretrained(mdir, attn_implementation=attn, dtype=dtype)
    return m.eval()


def is_norm(name, p):
    return p.dim() == 1 and not name.endswith(".bias")


def init_weights(m, seed, std, bias_std):
    """every parameter (a tied lm_head once: named_parameters() skips the alias), in its order"""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith(".bias"):
                v = bias_std * r
            elif is_norm(name, p):
                v = 1.0 + 0.1 * r
            else:
                v = std * r
            p.copy_(v.to(p.dtype))


def save(m, outdir, dtype, max_shard_bytes):
    """save_pretrained in dtype (safetensors), max_shard_size bytes per shard (0: one file)"""
    os.makedirs(outdir, exist_ok=True)
    for f in os.listdir(outdir):  # no stale shards of an earlier save
        if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".safetensors.index.json")):
            os.remove(os.path.join(outdir, f))
    m = m.to(dtype)
    m.save_pretrained(outdir, max_shard_size=max_shard_bytes if max_shard_bytes > 0 else "50GB")


def read_rows(path, seq_len=None):
    rows = [[int(v) for v in ln.split()] for ln in open(path) if ln.strip()]
    if seq_len:
        rows = [r[s:s + seq_len + 1] for r in rows for s in range(0, max(len(r) - 1, 1), seq_len)]
    rows = [r for r in rows if len(r) >= 2]
    if not rows:
        die(f"{path}: no row of two or more tokens")
    return rows


def batch(rows, vocab):
    """idx [B, Tmax], tgt [B, Tmax] (-100 past a row's end)"""
    T = max(len(r) for r in rows) - 1
    idx = torch.zeros(len(rows), T, dtype=torch.long)
    tgt = torch.full((len(rows), T), -100, dtype=torch.long)
    for b, r in enumerate(rows):
        if min(r) < 0 or max(r) >= vocab:
            die(f"row {b + 1}: token id outside [0, {vocab})")
        idx[b, :len(r) - 1] = torch.tensor(r[:-1])
        tgt[b, :len(r) - 1] = torch.tensor(r[1:])
    return idx, tgt


def mean_loss(m, idx, tgt):
    """the model's logits, cross-entropy in float32 (float64 for a float64 model) as HF's
    ForCausalLMLoss computes it (mean over targets != -100)"""
    logits = m(input_ids=idx).logits
    logits = logits.to(torch.float64 if logits.dtype == torch.float64 else torch.float32)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)


def decay_groups(m, wd):
    """HF Trainer's groups: Trainer.get_decay_parameter_names' rule (transformers.trainer_pt_utils
    get_parameter_names with nn.LayerNorm and the bias / norm name patterns)"""
    from transformers.trainer_pt_utils import get_parameter_names
    pats = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]
    decay = set(get_parameter_names(m, [torch.nn.LayerNorm], pats))
    named = list(m.named_parameters())
    return [{"params": [p for n, p in named if n in decay], "weight_decay": wd},
            {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}], decay


# ---------------------------------------------------------------- commands
def cmd_make(a):
    cfg = config_from_json(a.config, a.set)
    torch.manual_seed(a.seed)
    m = build(cfg)
    init_weights(m, a.seed, a.init_std, a.bias_std)
    save(m, a.outdir, DTYPE[a.dtype], a.max_shard_bytes)
    n = sum(p.numel() for p in m.parameters())
    print(f"{a.outdir}: {type(m).__name__}, {n} parameters, {a.dtype}")


def cmd_loss(a):
    rows = read_rows(a.tokens, a.seq_len)
    for mdir in [a.modeldir] + a.also:
        m = load(mdir, DTYPE[a.compute], a.attn)
        idx, tgt = batch(rows, m.config.vocab_size)
        with torch.no_grad():
            loss = mean_loss(m, idx, tgt)
        print("%.*g" % (a.digits, loss.item()))


def cmd_train(a):
    m = load(a.modeldir, DTYPE[a.compute])
    idx, tgt = batch(read_rows(a.tokens, a.seq_len), m.config.vocab_size)
    groups, decay = decay_groups(m, a.weight_decay)
    if a.print_decay:
        print("".join(f"decay {n}\n" for n in sorted(decay)), end="")
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, foreach=False)
    params = list(m.parameters())
    for step in range(1, a.steps + 1):
        loss = mean_loss(m, idx, tgt)
        loss.backward()
        if step == 1 and a.grads:
            from safetensors.torch import save_file
            os.makedirs(os.path.dirname(os.path.abspath(a.grads)), exist_ok=True)
            save_file({n: p.grad.detach().float().contiguous() for n, p in m.named_parameters()}, a.grads)
        gn = torch.nn.utils.clip_grad_norm_(params, a.grad_clip) if a.grad_clip > 0 else \
            torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params))
        print("step %d loss %.*g grad_norm %.*g" % (step, a.digits, loss.item(), a.digits, float(gn)))
        opt.step()
        opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        print("final loss %.*g" % (a.digits, mean_loss(m, idx, tgt).item()))
    save(m, a.out, torch.float32, a.max_shard_bytes)
    if a.eval_model:
        e = load(a.eval_model, DTYPE[a.compute])
        with torch.no_grad():
            print("eval_model loss %.*g" % (a.digits, mean_loss(e, idx, tgt).item()))


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make", help="random weights, save_pretrained")
    p.add_argument("config"), p.add_argument("outdir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    p.add_argument("--max-shard-bytes", type=int, default=0, help="0: one file")
    p.add_argument("--init-std", type=float, default=0.02, help="std of linear/embedding weights")
    p.add_argument("--bias-std", type=float, default=0.02, help="std of biases")
    p.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="override a config.json field")
    p = sub.add_parser("loss", help="mean next-token loss (float64 unless --compute)")
    p.add_argument("modeldir"), p.add_argument("tokens")
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--compute", choices=["f64", "f32", "bf16"], default="f64")
    p.add_argument("--attn", choices=["eager", "sdpa"], default="eager", help="attn_implementation")
    p.add_argument("--also", action="append", default=[], metavar="MODELDIR", help="another model: one more line")
    p.add_argument("--hf-rope-fp32", action="store_true", help="accepted, no effect: transformers' table is float32")
    p.add_argument("--digits", type=int, default=10, help="significant digits printed (%%.10g)")
    p = sub.add_parser("train", help="full-batch AdamW (float64 unless --compute), final weights saved F32")
    p.add_argument("modeldir"), p.add_argument("tokens")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--grad-clip", type=float, default=1.0, help="0: no clipping")
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--compute", choices=["f64", "f32"], default="f64")
    p.add_argument("--hf-rope-fp32", action="store_true", help="accepted, no effect")
    p.add_argument("--max-shard-bytes", type=int, default=0)
    p.add_argument("--digits", type=int, default=10)
    p.add_argument("--grads", default=None, help="write step 1's gradients here (safetensors)")
    p.add_argument("--print-decay", action="store_true", help="print 'decay NAME' for each parameter with weight decay")
    p.add_argument("--eval-model", default=None, metavar="MODELDIR", help="at the end, the loss of this model")
    p.add_argument("--out", required=True)
    return ap


COMMANDS = {"make": cmd_make, "loss": cmd_loss, "train": cmd_train}


def main(argv=None):
    a = parser().parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    COMMANDS[a.cmd](a)


if __name__ == "__main__":
    main()
