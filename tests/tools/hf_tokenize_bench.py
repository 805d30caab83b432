#!/usr/bin/env python3
"""hf_tokenize_bench.py - Hugging Face's tokenizers (PyPI `tokenizers`, the Rust library through its
Python binding) timed on a text, for scripts/bench-tokenizer.sh beside `gtrain tokenize`.

    hf_tokenize_bench.py TOKENIZER_JSON FILE doc|lines [--ids-out FILE]

doc:   the whole file is one text: encode(text) (one sequence: one thread whatever the settings).
lines: each line of the file (split on '\\n', the newline not included) is one text, all of them
       through encode_batch: over rayon's threads, or one when RAYON_NUM_THREADS=1 /
       TOKENIZERS_PARALLELISM=false.
No special tokens are added. Prints one line: `tokens N seconds S load_seconds L` (S the encode alone,
after the tokenizer is loaded and the file read). --ids-out writes the ids afterwards in the format of
`gtrain tokenize` (one line of space-separated ids per text), untimed. Loading and failing are
hf_tokenize.py's (one line, exit 2).
"""
import sys
import time

from hf_tokenize import fail, load

PROG = "hf_tokenize_bench"
CHUNK = 8192  # bounds the memory of the Encoding objects; each chunk is one encode_batch


def main(argv):
    ids_out = None
    pos = []
    i = 0
    while i < len(argv):
        if argv[i] == "--ids-out" and i + 1 < len(argv):
            ids_out = argv[i + 1]
            i += 2
            continue
        if argv[i].startswith("--"):
            fail(f"unknown option {argv[i]}", 2, PROG)
        pos.append(argv[i])
        i += 1
    if len(pos) != 3 or pos[2] not in ("doc", "lines"):
        fail("usage: hf_tokenize_bench.py TOKENIZER_JSON FILE doc|lines [--ids-out FILE]", 2, PROG)
    tok_file, text_file, mode = pos
    t0 = time.perf_counter()
    tok = load(tok_file, PROG)
    load_seconds = time.perf_counter() - t0
    try:
        with open(text_file, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{text_file}: {e}", 2, PROG)
    if mode == "lines":
        inputs = text.split("\n")
        if inputs and inputs[-1] == "":
            inputs.pop()
    t1 = time.perf_counter()
    if mode == "doc":
        encodings = [tok.encode(text, add_special_tokens=False).ids]
    else:
        encodings = []
        for at in range(0, len(inputs), CHUNK):
            encodings += [e.ids for e in tok.encode_batch(inputs[at : at + CHUNK], add_special_tokens=False)]
    seconds = time.perf_counter() - t1
    tokens = sum(len(ids) for ids in encodings)
    if ids_out:
        with open(ids_out, "w", encoding="ascii") as f:
            for ids in encodings:
                f.write(" ".join(map(str, ids)) + "\n")
    print(f"tokens {tokens} seconds {seconds:.4f} load_seconds {load_seconds:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
