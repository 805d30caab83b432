#!/usr/bin/env python3
"""hf_special_tokens.py - the independent reference for the BOS/EOS/PAD ids gtrain takes for a
tokenizer: what transformers' AutoTokenizer.from_pretrained(DIR) reports (it reads DIR's
tokenizer_config.json / special_tokens_map.json), nothing of gtrain's. Run with the references'
Python ($GTRAIN_REFS_PY).

    hf_special_tokens.py DIR

Prints one line `bos B eos E pad P`, each an id or -1 for None. A directory transformers does not
load: its error on stderr, exit 2.
"""
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.stderr.write("hf_special_tokens: expected one argument, a tokenizer directory\n")
        return 2
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(sys.argv[1])
    except Exception as e:  # noqa: BLE001 - one line, whatever transformers raised
        sys.stderr.write(f"hf_special_tokens: {sys.argv[1]}: {type(e).__name__}: {e}\n")
        return 2

    def idof(v):
        return -1 if v is None else int(v)

    print(f"bos {idof(tok.bos_token_id)} eos {idof(tok.eos_token_id)} pad {idof(tok.pad_token_id)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
