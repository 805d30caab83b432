#!/usr/bin/env python3
"""hf_generate.py - transformers' own generate() as the reference for gtrain's batched decoding
(tests/test_generate.c), and HF's own sampling warpers for gen_pick_token. Nothing of gtrain's: the
model is transformers' class loaded by from_pretrained (a LoRA adapter by PEFT's
PeftModel.from_pretrained, unmerged; a bitsandbytes 4-bit directory through its quantization_config),
the decoding is GenerationMixin.generate with its KV cache (use_cache=True), the warpers are
transformers.generation's TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper.

Each prompt is generated ALONE (batch 1, no padding: HF's left-padded batches are not the clean
reference), attn_implementation "eager", greedy (do_sample=False), exactly N new tokens: the model's
EOS is taken out of its generation_config (eos_token_id None), so nothing stops a row early (gtrain
runs with no EOS too), and the output is checked to hold N tokens.

usage ($GTRAIN_REFS_PY, CPU):
  hf_generate.py greedy MODELDIR PROMPTS.txt --new N [--adapter DIR] [--dtype f32|bf16] [--merged-out DIR]
                  [--eos ID ...]
      PROMPTS.txt: one prompt per line, whitespace-separated token ids. Prints per prompt i:
        "gen i: ID ID ..."       the N generated ids (--eos: generation_config.eos_token_id is these
                                 ids instead: a row ends after generating one, which is kept)
        "margin i: M M ..."      at each step, the top-1 minus top-2 raw logit (output_logits; %.3e)
      --dtype bf16: the model loaded and run in torch.bfloat16 (weights rounded to bf16, bf16 compute);
      a bitsandbytes 4-bit MODELDIR (quantization_config in config.json) computes in float32 with
      every Linear4bit replaced by a float32 Linear holding bitsandbytes' own dequantize_4bit of its
      weight (bitsandbytes' CPU inference path otherwise takes a gemv kernel that rounds through
      bfloat16: see bnb_qlora.py); --merged-out: the PEFT model's merge_and_unload() saved there
      (save_pretrained, F32) before generating (the generations are then the unmerged adapter's).
  hf_generate.py warp LOGITS.txt --temperature T --top-k K --top-p P
      LOGITS.txt: one vector per line. Prints per line "p i: P0 P1 ..." (%.17g): softmax of the
      scores after Temperature, TopK (K 0: none), TopP (P 1: none) warpers, HF's order, in float64.
"""
import argparse, os, sys, warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import logging  # noqa: E402

logging.disable(logging.WARNING)  # bitsandbytes' note about its optional CPU kernels package
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
DT = {"f32": torch.float32, "bf16": torch.bfloat16}


def die(msg, code=2):
    print(f"hf_generate.py: {msg}", file=sys.stderr)
    sys.exit(code)


def read_prompts(path):
    rows = [[int(x) for x in ln.split()] for ln in open(path) if ln.strip()]
    if not rows:
        die(f"{path}: no prompt")
    return rows


def dequantize_4bit_linears(model):
    """every bitsandbytes Linear4bit -> torch.nn.Linear (float32) with bitsandbytes' dequantize_4bit of
    its weight and the same bias"""
    import bitsandbytes.functional as bnbf
    n = 0
    for name, mod in list(model.named_modules()):
        if type(mod).__name__ != "Linear4bit":
            continue
        w = bnbf.dequantize_4bit(mod.weight.data, mod.weight.quant_state).float()
        lin = torch.nn.Linear(mod.in_features, mod.out_features, bias=mod.bias is not None, dtype=torch.float32)
        with torch.no_grad():
            lin.weight.copy_(w.reshape(mod.out_features, mod.in_features))
            if mod.bias is not None:
                lin.bias.copy_(mod.bias.float())
        parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        setattr(parent, name.rsplit(".", 1)[-1], lin)
        n += 1
    if n == 0:
        die("a 4-bit directory but no Linear4bit layer", 1)


def load(a):
    import json
    cfg = json.load(open(os.path.join(a.modeldir, "config.json")))
    four_bit = "quantization_config" in cfg
    if four_bit and a.dtype != "f32":
        die("a 4-bit base runs in f32 only here")
    kw = {"device_map": "cpu"} if four_bit else {}
    m = AutoModelForCausalLM.from_pretrained(a.modeldir, dtype=DT[a.dtype], attn_implementation="eager", **kw)
    if four_bit:
        dequantize_4bit_linears(m)
    m.eval()
    if a.adapter:
        from peft import PeftModel
        m = PeftModel.from_pretrained(m, a.adapter)
        m.eval()
        if a.merged_out:
            # merge a copy (the unmerged model generates)
            import copy
            merged = copy.deepcopy(m).merge_and_unload()
            merged.to(torch.float32).save_pretrained(a.merged_out)
    elif a.merged_out:
        die("--merged-out needs --adapter")
    return m


def cmd_greedy(a):
    prompts = read_prompts(a.prompts)
    m = load(a)
    gc = m.generation_config
    gc.eos_token_id = a.eos or None  # default no early stop: exactly N tokens, as gtrain runs here (no EOS)
    if gc.pad_token_id is None:
        gc.pad_token_id = 0
    vocab = m.config.vocab_size if hasattr(m, "config") else m.base_model.config.vocab_size
    for i, p in enumerate(prompts):
        if min(p) < 0 or max(p) >= vocab:
            die(f"{a.prompts}: prompt {i + 1}: a token id outside [0, {vocab})")
        ids = torch.tensor([p], dtype=torch.long)
        with torch.no_grad():
            out = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=a.new, min_new_tokens=0, use_cache=True, num_beams=1,
                             output_logits=True, return_dict_in_generate=True, generation_config=gc)
        gen = out.sequences[0, len(p):].tolist()
        if len(gen) != a.new and not (a.eos and 0 < len(gen) < a.new and gen[-1] in a.eos):
            die(f"prompt {i + 1}: generate gave {len(gen)} tokens, expected {a.new}", 1)
        if a.eos and any(t in a.eos for t in gen[:-1]):
            die(f"prompt {i + 1}: generate went on after an EOS", 1)
        margins = []
        for step, lg in enumerate(out.logits):
            top = torch.topk(lg[0].double(), 2).values
            if int(torch.argmax(lg[0])) != gen[step]:
                die(f"prompt {i + 1} step {step}: the token is not the logits' argmax", 1)
            margins.append(float(top[0] - top[1]))
        print(f"gen {i}: " + " ".join(str(t) for t in gen))
        print(f"margin {i}: " + " ".join("%.3e" % x for x in margins))
    sys.stdout.flush()


def cmd_warp(a):
    from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)
    warpers = [TemperatureLogitsWarper(a.temperature)]
    if a.top_k > 0:
        warpers.append(TopKLogitsWarper(a.top_k))
    if a.top_p < 1.0:
        warpers.append(TopPLogitsWarper(a.top_p))
    rows = [[float(x) for x in ln.split()] for ln in open(a.logits) if ln.strip()]
    for i, r in enumerate(rows):
        s = torch.tensor([r], dtype=torch.float64)
        ids = torch.zeros((1, 1), dtype=torch.long)
        for w in warpers:
            s = w(ids, s)
        p = torch.softmax(s, dim=-1)[0]
        print(f"p {i}: " + " ".join("%.17g" % float(x) for x in p))


def main():
    ap = argparse.ArgumentParser(prog="hf_generate.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("greedy")
    g.add_argument("modeldir"), g.add_argument("prompts")
    g.add_argument("--new", type=int, required=True)
    g.add_argument("--adapter")
    g.add_argument("--dtype", choices=list(DT), default="f32")
    g.add_argument("--merged-out")
    g.add_argument("--eos", type=int, action="append", default=[])
    w = sub.add_parser("warp")
    w.add_argument("logits")
    w.add_argument("--temperature", type=float, default=1.0)
    w.add_argument("--top-k", type=int, default=0)
    w.add_argument("--top-p", type=float, default=1.0)
    a = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    {"greedy": cmd_greedy, "warp": cmd_warp}[a.cmd](a)


if __name__ == "__main__":
    main()
