#!/usr/bin/env python3
"""hf_packed.py - transformers' padding-free packing as the reference for gtrain's data.packing:
the examples go through transformers.DataCollatorWithFlattening (return_position_ids=True), which
lays them end to end in one row with position_ids restarting at 0 and labels -100 at each example's
first token; the model (from_pretrained, eager attention, float32, eval, use_cache=False as in
training: with a cache transformers does not look for packed rows) then builds the block-diagonal
causal mask from position_ids itself (masking_utils' packed-sequence detection), so nothing here
writes a mask or a loss of its own.

usage (the test references' Python, $GTRAIN_REFS_PY):
  hf_packed.py MODELDIR EXAMPLES.txt --seq-len T [--grads GRADS.safetensors] [--digits 17]
EXAMPLES.txt: one example a line, "PLEN id0 id1 ...": its tokens and how many are the prompt; each
  is cut to T+1 tokens as gtrain keeps it (an unpacked row's length); labels are the tokens, -100
  on the prompt.
Prints "items N" (the targets), "loss_sum S" (the mean loss times N), "loss L"; --grads: the
gradients of loss_sum under the parameters' HF names (a tied head once), one safetensors file.
"""
import argparse, os, sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_models import load, quiet_transformers  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modeldir"), ap.add_argument("examples")
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--grads")
    ap.add_argument("--digits", type=int, default=17)
    a = ap.parse_args()
    tf = quiet_transformers()
    feats = []
    for ln, line in enumerate(open(a.examples), 1):
        v = [int(x) for x in line.split()]
        if not v:
            continue
        plen, ids = v[0], v[1:a.seq_len + 2]
        if len(ids) < 2:
            continue  # nothing to predict: gtrain leaves such examples out of the rows
        feats.append({"input_ids": ids, "labels": [-100] * min(plen, len(ids)) + ids[plen:]})
    batch = tf.DataCollatorWithFlattening(return_position_ids=True, return_tensors="pt")(feats)
    m = load(a.modeldir, torch.float32)
    out = m(input_ids=batch["input_ids"], position_ids=batch["position_ids"], labels=batch["labels"],
              use_cache=False)
    items = int((batch["labels"][:, 1:] != -100).sum())
    loss_sum = out.loss * items
    loss_sum.backward()
    print("items %d" % items)
    print("loss_sum %.*g" % (a.digits, loss_sum.item()))
    print("loss %.*g" % (a.digits, out.loss.item()))
    if a.grads:
        from safetensors.torch import save_file
        os.makedirs(os.path.dirname(os.path.abspath(a.grads)), exist_ok=True)
        save_file({n: p.grad.detach().float().contiguous() for n, p in m.named_parameters()}, a.grads)


if __name__ == "__main__":
    main()
