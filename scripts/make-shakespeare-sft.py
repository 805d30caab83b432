#!/usr/bin/env python3
"""make-shakespeare-sft.py - data/shakespeare-sft-{train,val}.jsonl, the SFT example's data, from the
Shakespeare text: each speech becomes one example whose prompt is the line before it and its
speaker ("<previous line>\\n\\nROMEO:\\n") and whose completion is the speech's first line(s), up to
120 bytes, ending in a newline. Byte-level text: {"prompt": ..., "completion": ...} per line
(data.h's jsonl). Every 20th example goes to the validation file. Deterministic; run it again to
regenerate the committed files."""
import json
import sys

src = sys.argv[1] if len(sys.argv) > 1 else "data/tinyshakespeare.txt"
out = sys.argv[2] if len(sys.argv) > 2 else "data/shakespeare-sft"
blocks = [b.strip("\n").split("\n") for b in open(src, encoding="ascii").read().split("\n\n")]
n = 0
with open(out + "-train.jsonl", "w", encoding="ascii") as f, open(out + "-val.jsonl", "w", encoding="ascii") as v:
    prev = ""
    for b in blocks:
        if len(b) < 2 or not b[0].endswith(":"):
            continue
        speaker, lines = b[0], b[1:]
        comp = ""
        for ln in lines:
            if len(comp) + len(ln) + 1 > 120:
                break
            comp += ln + "\n"
        if comp and prev:
            (v if n % 20 == 19 else f).write(json.dumps({"prompt": prev + "\n\n" + speaker + "\n", "completion": comp}) + "\n")
            n += 1
        prev = lines[-1]
print(f"{out}-train.jsonl, {out}-val.jsonl: {n} examples ({n // 20} for validation)")
