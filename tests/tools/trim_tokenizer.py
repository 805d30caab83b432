#!/usr/bin/env python3
"""trim_tokenizer.py - a smaller BPE tokenizer.json from a real one, for tests that load many variants.

    trim_tokenizer.py IN.json OUT.json K

Keeps the vocabulary entries with an id below K (the byte tokens of the byte-level and byte-fallback
vocabularies are among the first ids) and the merges whose two parts and result are all kept, in
their order; everything else (normalizer, pre-tokenizer, added tokens with their ids, post-processor,
decoder, model options) is unchanged. The result is a valid tokenizer.json that loads in a fraction
of the time; it tokenizes differently from the original (a smaller vocabulary), which is fine for
comparing two implementations on it. Standard library only.
"""
import json
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.splitlines()[2].strip())
    src, dst, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(src, encoding="utf-8") as f:
        tok = json.load(f)
    model = tok["model"]
    if model.get("type") != "BPE":
        sys.exit(f"{src}: model.type is not BPE")
    vocab = {t: i for t, i in model["vocab"].items() if i < k}
    merges = []
    for m in model["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    model["vocab"] = vocab
    model["merges"] = merges
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
