#!/usr/bin/env python3
"""hf_tokenize.py - the independent reference for gtrain's tokenizer: Hugging Face's own tokenizers
library (the Rust crate through its Python binding, PyPI `tokenizers`, pinned in
tests/requirements-refs.txt), nothing of gtrain's. Run with the references' Python ($GTRAIN_REFS_PY).

    hf_tokenize.py TOKENIZER_JSON [--add-special-tokens] [--decode] [--skip-special-tokens] < lines
    hf_tokenize.py TOKENIZER_JSON --offsets [--add-special-tokens] < lines
    hf_tokenize.py TOKENIZER_JSON --info

Reads stdin as lines (split on '\\n' only; a final empty line after the last '\\n' is not an input).
Encode (the default): each line is a JSON string; prints one line of space-separated decimal ids per
input line (an empty line for an empty string), the format of `gtrain tokenize --jsonl`. The lines go
through Tokenizer.encode_batch (over rayon's threads unless TOKENIZERS_PARALLELISM=false), in chunks.
--decode: each line is a JSON array of ids; prints the decoded text as a JSON string per line
(HF's decode_batch(ids, skip_special_tokens), false unless --skip-special-tokens), the format of
`gtrain tokenize --decode --jsonl`.
--offsets: each line is a JSON string; prints one line per input of space-separated `ID:START:END`,
each token's id and Encoding.offsets converted from the binding's character offsets to UTF-8 byte
offsets in the line's text (the format of gtrain's tok_encode_offsets in tests/test_tokenizer_offsets.c).
--info: prints `vocab_size N added_first F added_count C added_contiguous 0|1` (the vocabulary with
the added tokens, the added tokens' lowest id, their number, whether their ids are F..F+C-1).
TOKENIZER_JSON may be a directory holding tokenizer.json. A bad argument, a file HF does not load, or
an input line that is not the expected JSON (or not UTF-8, or a lone surrogate HF cannot take): one
line on stderr naming it, exit 2.
"""
import json
import os
import sys

CHUNK = 4096  # bounds the memory of the Encoding objects; each chunk is one batch


def fail(msg, code=2, prog="hf_tokenize"):
    sys.stderr.write(f"{prog}: {msg}\n")
    sys.exit(code)


def first_line(e):
    s = str(e).strip().split("\n")[0]
    return s or type(e).__name__


def load(path, prog="hf_tokenize"):
    """Tokenizer.from_file(path) (path/tokenizer.json for a directory); one line and exit 2 when HF refuses it."""
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        fail(f"Hugging Face's tokenizers is not importable with {sys.executable}: {first_line(e)} "
             "(run scripts/install-deps.sh --test-refs)", 1, prog)
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # HF raises its own Exception type for a file it refuses
        fail(f"{path}: {first_line(e)}", 2, prog)


def read_lines(data):
    """stdin's bytes as its lines (no terminator kept), each decoded from UTF-8 (strictly)."""
    if not data:
        return []
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    out = []
    for i, r in enumerate(raw):
        try:
            out.append(r.decode("utf-8"))
        except UnicodeDecodeError as e:
            fail(f"stdin:{i + 1}: not UTF-8 ({e.reason} at byte {e.start})")
    return out


def parse(line, i):
    try:
        return json.loads(line)
    except ValueError as e:
        fail(f"stdin:{i + 1}: not JSON: {first_line(e)}")


def byte_offsets(s, offsets):
    """the binding's character offsets into s as UTF-8 byte offsets"""
    at = [0]
    for ch in s:
        at.append(at[-1] + len(ch.encode("utf-8")))
    return [(at[a], at[b]) for a, b in offsets]


def encode_all(tok, lines, add_special_tokens, offsets=False):
    texts = []
    for i, line in enumerate(lines):
        s = parse(line, i)
        if not isinstance(s, str):
            fail(f"stdin:{i + 1}: expected a JSON string, found {type(s).__name__}")
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            fail(f"stdin:{i + 1}: a lone surrogate escape (not text Hugging Face's tokenizers can take)")
        texts.append(s)
    out = []
    for at in range(0, len(texts), CHUNK):
        chunk = texts[at : at + CHUNK]
        for k, e in enumerate(tok.encode_batch(chunk, add_special_tokens=add_special_tokens)):
            if offsets:
                spans = byte_offsets(chunk[k], e.offsets)
                out.append(" ".join(f"{i}:{a}:{b}" for i, (a, b) in zip(e.ids, spans)) + "\n")
            else:
                out.append(" ".join(map(str, e.ids)) + "\n")
    return out


def is_id(x):
    return type(x) is int and 0 <= x <= 0xFFFFFFFF


def decode_all(tok, lines, skip_special_tokens):
    seqs = []
    for i, line in enumerate(lines):
        a = parse(line, i)
        if not isinstance(a, list) or not all(is_id(x) for x in a):
            fail(f"stdin:{i + 1}: expected a JSON array of non-negative integer ids")
        seqs.append(a)
    out = []
    for at in range(0, len(seqs), CHUNK):
        for t in tok.decode_batch(seqs[at : at + CHUNK], skip_special_tokens=skip_special_tokens):
            out.append(json.dumps(t, ensure_ascii=False) + "\n")
    return out


def info(tok):
    added = sorted(tok.get_added_tokens_decoder())
    first = added[0] if added else -1
    contiguous = added == list(range(first, first + len(added)))
    print(f"vocab_size {tok.get_vocab_size(with_added_tokens=True)} added_first {first} "
          f"added_count {len(added)} added_contiguous {int(contiguous)}")


def main(argv):
    path = None
    add_special = decode = skip_special = show_info = offsets = False
    for a in argv:
        if a == "--offsets":
            offsets = True
        elif a == "--info":
            show_info = True
        elif a == "--add-special-tokens":
            add_special = True
        elif a == "--decode":
            decode = True
        elif a == "--skip-special-tokens":
            skip_special = True
        elif a.startswith("--"):
            fail(f"unknown option {a}")
        elif path is None:
            path = a
        else:
            fail(f"a second tokenizer file {a}")
    if path is None:
        fail("usage: hf_tokenize.py TOKENIZER_JSON [--add-special-tokens] [--decode] [--skip-special-tokens] | --info")
    tok = load(path)
    if show_info:
        return info(tok)
    lines = read_lines(sys.stdin.buffer.read())
    out = decode_all(tok, lines, skip_special) if decode else encode_all(tok, lines, add_special, offsets)
    sys.stdout.buffer.write("".join(out).encode("utf-8"))
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
