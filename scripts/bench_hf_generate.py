#!/usr/bin/env python3
"""The anchor of make bench's decode line: transformers' own generate() with its KV cache on the CPU.

usage: bench_hf_generate.py MODELDIR PROMPTS.txt BATCH NEW [--threads N]

Loads MODELDIR (a save_pretrained checkpoint) in fp32 with transformers' default attention (sdpa),
reads PROMPTS.txt (one prompt a line, token ids; bench/bench_decode.c reads the same file), and
generates greedily (do_sample=False, use_cache=True) exactly NEW tokens for every prompt (the model's
EOS taken out of its generation_config), BATCH prompts per generate() call (the prompts of a call must
have one length: no padding), torch on N threads (default 2). One warm-up call of 4 tokens first, not
timed. Prints one line: the wall time of all the calls and generated tokens per second.
"""
import argparse
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("modeldir")
    ap.add_argument("prompts")
    ap.add_argument("batch", type=int)
    ap.add_argument("new", type=int)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    import transformers
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(a.threads)
    m = AutoModelForCausalLM.from_pretrained(a.modeldir, dtype=torch.float32).eval()
    gc = m.generation_config
    gc.eos_token_id = None
    if gc.pad_token_id is None:
        gc.pad_token_id = 0
    rows = [[int(x) for x in ln.split()] for ln in open(a.prompts) if ln.strip()]
    groups = [rows[i:i + a.batch] for i in range(0, len(rows), a.batch)]
    if any(len({len(r) for r in g}) != 1 for g in groups):
        raise SystemExit("bench_hf_generate.py: the prompts of one batch must have one length")

    def run(g, n):
        ids = torch.tensor(g, dtype=torch.long)
        out = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                         min_new_tokens=0, use_cache=True, num_beams=1, generation_config=gc)
        return (out.shape[1] - ids.shape[1]) * ids.shape[0]

    with torch.no_grad():
        run(groups[0], 4)
        t0 = time.perf_counter()
        gen = sum(run(g, a.new) for g in groups)
        t = time.perf_counter() - t0
    print("HF      decode %-24s batch %2d  %3d prompts of %d tokens + %d new  %7.2f s  %8.1f new tok/s  "
          "(transformers %s, torch %s, %d threads, %s attention)"
          % (m.config.model_type, a.batch, len(rows), max(len(r) for r in rows), a.new, t, gen / t,
             transformers.__version__, torch.__version__, torch.get_num_threads(), m.config._attn_implementation))


if __name__ == "__main__":
    main()
