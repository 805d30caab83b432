#!/usr/bin/env python3
"""make_tok_corpus.py - the texts tokenizer identity tests encode: one JSON string per line.

    make_tok_corpus.py [--seed N] [--random N] [--shakespeare FILE] [--shakespeare-lines N] [--paragraphs N]
                       [--out FILE]

Standard library only, and deterministic for a seed (and a Python's unicodedata version). Sections,
in this order:
  - Shakespeare (data/tinyshakespeare.txt) line by line, without the newline (its empty lines are
    empty strings), then its first paragraphs with their newlines, then windows at random offsets;
  - a multilingual set: CJK, kana, Hangul, Arabic, Hebrew and RTL marks, Devanagari, Thai,
    Cyrillic, Greek, emoji (ZWJ sequences, skin tones, flags, keycaps), combining marks,
    precomposed and decomposed accents (NFC matters for Qwen), full-width forms;
  - code (C, Python, JSON, shell, with indentation and tabs);
  - runs of spaces, tabs, newlines, \\r\\n, \\r and other Unicode spaces, alone and between words;
  - digits, long numbers, decimals, dates, non-ASCII digits;
  - contractions ('s 't 're 've 'm 'll 'd and n't in every case; the Llama-3 regex is
    case-insensitive for them), curly apostrophes;
  - special tokens inside text (<s>, </s>, <unk>, <|begin_of_text|>, <|eot_id|>, <|im_start|>,
    <|endoftext|> ...), partial ones, adjacent ones, surrounded by spaces;
  - leading and trailing spaces, the empty string, very long words (1000+ characters);
  - random strings drawn from Unicode general categories (every assigned category but the
    surrogates Cs: private use, format characters as ZWJ/ZWNJ/BOM, controls, marks ...).
Every line is json.dumps(text, ensure_ascii=False): valid UTF-8 JSON that decodes to exactly the
text (controls are escaped, everything else is written as itself). No lone surrogates.
"""
import argparse
import json
import os
import random
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SHAKESPEARE = os.path.join(HERE, "..", "..", "data", "tinyshakespeare.txt")


def shakespeare(path, max_lines, max_paragraphs, rng):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if max_lines is not None:
        lines = lines[:max_lines]
    out = list(lines)
    # paragraphs (blank-line separated) with their newlines, the blank line after them included
    paras = text.split("\n\n")
    picked = paras[:max_paragraphs] if max_lines is None else paras[: min(max_paragraphs, max(1, max_lines // 8))]
    out += [p + "\n\n" for p in picked[:-1]] + picked[-1:]
    # windows at random offsets (they start and end mid-word, mid-line, on newlines)
    for _ in range(300):
        n = rng.choice([1, 2, 3, 7, 30, 100, 400, 1500, 5000])
        at = rng.randrange(0, max(1, len(text) - n))
        out.append(text[at : at + n])
    return out


MULTILINGUAL = [
    "中文分词测试：今天天气很好，我们去公园散步吧。",
    "漢字と平仮名とカタカナが混ざった日本語の文章です。",
    "ひらがな カタカナ ｶﾀｶﾅ（半角）",
    "한국어 문장입니다. 안녕하세요, 세계!",
    "ᄒᆞᆫ글 (conjoining jamo) 한글",
    "مرحبا بالعالم! هذا نص عربي مع أرقام ١٢٣٤٥٦٧٨٩٠.",
    "שלום עולם, זה טקסט בעברית.",
    "mixed \u200fעברית\u200e and English \u202bembedded\u202c \u2067isolate\u2069",
    "नमस्ते दुनिया, यह हिन्दी पाठ है। १२३",
    "สวัสดีชาวโลก นี่คือข้อความภาษาไทย",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε! Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "ქართული ენა, Հայերեն, ኢትዮጵያ, ᠮᠣᠩᠭᠣᠯ",
    "Tiếng Việt có dấu: Trăm năm trong cõi người ta",
    "emoji 👍 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 😀😃😄",
    "family 👨\u200d👩\u200d👧\u200d👦 and 👩🏽\u200d💻 and 🏳️\u200d🌈 and 🏴\u200d☠️",
    "flags 🇺🇸🇬🇧🇯🇵🇩🇪 🇫🇷 and a lone 🇺 regional indicator",
    "keycaps 1️⃣ #️⃣ *️⃣ and variation ☺︎ ☺️",
    "tags 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "combining: e\u0301 a\u0300 o\u0308 n\u0303 c\u0327 Z\u0351\u0352\u0353\u0354\u0355 q\u0307\u0323",
    "precomposed é à ö ñ ç Å vs decomposed e\u0301 a\u0300 o\u0308 n\u0303 c\u0327 A\u030a",
    "NFC changes: \u212b (angstrom) \u2126 (ohm) \u1e9b\u0323 \u0344 \u0958 \uf900",
    "Hangul decomposed \u1100\u1161\u11a8 vs composed \uac01",
    "ｆｕｌｌ－ｗｉｄｔｈ　ＡＳＣＩＩ　１２３！？",
    "ligatures ﬁ ﬂ ﬀ ﬃ, ㎞ ㎏ ㈱ ① ⅷ ½ ² ₃",
    "math 𝐀𝐁𝐂 𝔸𝔹ℂ ∀x∈ℝ: x²≥0 ∑∫∂√∞≠≈",
    "old scripts 𐌰𐌱𐌲 𓀀𓀁 𒀀 𐎀",
    "CJK ext B 𠀀𠀁𠀂 𪜀 and compat 丽",
    "Ω≈ç√∫˜µ≤≥÷ åß∂ƒ©˙∆˚¬…æ œ∑´®†¥¨ˆøπ“‘",
    "«guillemets» „Anführungszeichen“ 「括弧」 『二重』 【】",
    "soft\u00adhyphen zero\u200bwidth no\u2060break joiner\u200dnon\u200cjoiner",
    "\ufeffBOM at the start",
    "BOM \ufeff in the middle",
    "nbsp\u00a0thin\u2009hair\u200aideographic\u3000em\u2003",
    "line\u2028separator and paragraph\u2029separator",
    "private use \ue000\ue001\uf8ff \U000f0000 \U0010fffd",
    "noncharacters \ufdd0 \ufffe \uffff \U0001fffe \U0010ffff",
    "replacement \ufffd char and object \ufffc",
    "controls \x01\x02\x1b[31mred\x1b[0m \x7f \x85 \x9f",
    "a NUL \x00 inside",
    "\x00",
    "zalgo: Z̵̡̢̛̗̘̙̜̝̞̟̠̀́̂̃̄̅̆̇̉̊̋̌̍̎̏̐̑̒̓̔à̸̧̨̡̛̖̗̘̙̜̝̞̟̠̣̤̥̦̩̪̫̬̭̮̯̰̱̲̳́̂̃l̴̢̧̡̛̖̗̘̙̜̝̞̟̠̣̤̥̦̩̪g̷o",
    "Ελληνικά: ΆΈΉΊΌΎΏ άέήίόύώ ΐΰ ς σ Σ",
    "Turkish İ ı ß ẞ ǅ ǈ ǋ (title case)",
]

CODE = [
    "#include <stdio.h>\n\nint main(void) {\n    printf(\"hello, world\\n\");\n    return 0;\n}\n",
    "static int add(int a, int b)\n{\n\treturn a + b;\t/* tab */\n}\n",
    "for (size_t i = 0; i < n; i++) {\n        if (x[i] != 0x7fffffff) y[i] += x[i] * 2.5e-3f;\n}",
    "def f(x, *args, **kwargs):\n    \"\"\"Docstring.\"\"\"\n    if x:\n        return [i ** 2 for i in range(10)]\n    return None\n",
    "class A:\n\tdef __init__(self):\n\t\tself.x = {'a': 1, \"b\": 2}\n",
    "    \n    \n        indented blank lines\n",
    '{"name": "gtrain", "version": [1, 2, 3], "nested": {"a": null, "b": true, "c": -1.5e10}}',
    '{\n  "key": "value",\n  "list": [\n    1,\n    2\n  ]\n}\n',
    "#!/bin/sh\nset -eu\nfor f in *.txt; do echo \"$f\" | tr a-z A-Z; done 2>&1 >/dev/null\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "<html><body><p class=\"x\">Hello&nbsp;&amp;&lt;world&gt;</p></body></html>",
    "x=>x*2; a&&b||c; a!==b; i++; --j; a<<=2; b>>>=1; ::std::vector<int>{};",
    "https://example.com/path?query=1&other=two#frag user@example.org C:\\Windows\\System32",
    "    return self._cache.get(key, default)  # type: ignore[attr-defined]\r\n",
]

SPACES = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\v", "\f", "\u2003", "\u0085"]


def whitespace(rng):
    out = []
    base = [" ", "\t", "\n", "\r\n", "\r"]
    for a in base:
        for n in (1, 2, 3, 4, 7, 16):
            out.append(a * n)
            out.append("x" + a * n + "y")
            out.append(a * n + "word")
            out.append("word" + a * n)
    for a in base:
        for b in base:
            out.append(a + b)
            out.append("a" + a + b + "b")
            out.append(" " + a + b + " z")
    for _ in range(400):
        parts = []
        for _ in range(rng.randrange(1, 12)):
            parts.append("".join(rng.choice(SPACES) for _ in range(rng.randrange(1, 6))))
            parts.append(rng.choice(["", "a", "The", "word", "1", "!", "日本", "é", "'s", "--"]))
        out.append("".join(parts))
    out += ["\n\n\n", " \n \n ", "\t\n\t\n", "a \n b", "a  \n\n  b", "end.\n", "\n start", "   \n"]
    return out


def numbers(rng):
    out = ["0", "7", "42", "123", "1234", "12345", "123456", "1234567", "0000", "007", "1,234,567",
           "3.14159", "-2.5e-10", "1e100", "0.000001", "1/2", "99.99%", "$1,000.00", "€5", "5€",
           "2024-01-15", "15/01/2024", "12:34:56", "2024-01-15T12:34:56Z", "+1 (555) 123-4567",
           "v1.2.3", "0x1F", "0b1010", "1st 2nd 3rd 4th", "abc123def", "123abc", "a1b2c3",
           "١٢٣٤ ٥٦", "१२३४", "１２３４５", "²³¹ ½ ¾ ⅔", "Ⅻ ⅻ", "𝟏𝟐𝟑", "๑๒๓"]
    for n in (20, 50, 100, 400, 1200):
        out.append("".join(rng.choice("0123456789") for _ in range(n)))
    for _ in range(100):
        out.append(" ".join(str(rng.randrange(10 ** rng.randrange(1, 12))) for _ in range(rng.randrange(1, 6))))
    return out


def contractions():
    out = []
    suffixes = ["s", "t", "re", "ve", "m", "ll", "d"]
    for suf in suffixes:
        variants = {suf, suf.upper(), suf.capitalize(), suf[:-1] + suf[-1].upper() if len(suf) > 1 else suf}
        for v in sorted(variants):
            out += ["it'" + v, "IT'" + v, "'" + v, " '" + v, "x '" + v + " y", "''" + v, "it’" + v, "it'" + v + "s"]
    out += ["don't", "DON'T", "Don'T", "doN't", "can't", "won't", "n't", "N'T", "shouldn't've",
            "I'm you're we've they'll he'd", "I'M YOU'RE WE'VE THEY'LL HE'D", "rock'n'roll", "'tis",
            "'twas", "O'Brien", "ma'am", "y'all", "'''", "'", "' '", "it's'", "it' s", "Mary's dog's bone",
            "l'été d'or", "‘quoted’ “double”"]
    return out


SPECIALS = ["<s>", "</s>", "<unk>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_5|>", "<|im_start|>",
            "<|im_end|>", "<|endoftext|>", "<|fim_prefix|>", "<think>", "</think>", "<tool_call>"]


def specials(rng):
    out = []
    for s in SPECIALS:
        out += [s, " " + s, s + " ", " " + s + " ", "a" + s + "b", "hello " + s + " world", s + s, s + " " + s,
                s + "\n", "\n" + s, s[:-1], s[1:], s.upper(), s.replace("|", "｜")]
    out += ["<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a bot.<|eot_id|>",
            "<s>[INST] hi [/INST] hello</s><s>[INST] more [/INST]", "<|eot_id", "<|eot_id|", "|eot_id|>",
            "<<s>>", "<</s>", "<s><s></s></s>", "< s >", "<S>", "<unk><unk>", "<|endoftext|><|endoftext|>x",
            "text<|endoftext|>", "<|<|eot_id|>|>"]
    for _ in range(60):
        parts = [rng.choice(SPECIALS + ["x", " ", "hi", "\n", "é", "日"]) for _ in range(rng.randrange(2, 8))]
        out.append("".join(parts))
    return out


def edges(rng):
    out = ["", " ", "  ", "a", " a", "a ", " a ", "  leading two", "trailing two  ", "   both   ",
           " Hello", "Hello ", "\tHello", "Hello\n", "\u00a0Hello", " 日本", " 👍", " 1", " .", " 's"]
    long_words = ["a" * 1000, "ab" * 600, "x" * 3000, "é" * 1200, "日" * 1100, "👍" * 1000, "!" * 1500,
                  "-" * 2000, " " * 1000, "\n" * 1000, "\t" * 1000, "_" * 1024, "9" * 2000,
                  "\ue000" * 1000, "a\u0301" * 600,
                  "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(2500)),
                  "".join(rng.choice("ᚠᚡᚢᚣᚤᚥ𐀀𐀁ꀀꀁ") for _ in range(1200)),
                  "Supercalifragilisticexpialidocious" * 40, "The " + "very" * 400 + " end"]
    return out + long_words


# Code points by general category, excluding surrogates (Cs) and unassigned (Cn).
def categories():
    cats = {}
    for cp in range(0x110000):
        c = unicodedata.category(chr(cp))
        if c in ("Cs", "Cn"):
            continue
        cats.setdefault(c, []).append(cp)
    return {k: cats[k] for k in sorted(cats)}


def random_strings(rng, n):
    cats = categories()
    names = list(cats)
    ascii_bits = ["a", "the", " ", "  ", "\n", "1", "'s", ".", "!", "\t", "\r\n", "Z"]
    out = []
    for i in range(n):
        mode = i % 4
        length = rng.choice([1, 1, 2, 3, 5, 8, 13, 24, 40, 80])
        chars = []
        if mode == 0:  # one category throughout
            cat = names[(i // 4) % len(names)]
            chars = [chr(rng.choice(cats[cat])) for _ in range(length)]
        elif mode == 1:  # any category, per character
            chars = [chr(rng.choice(cats[rng.choice(names)])) for _ in range(length)]
        elif mode == 2:  # categories mixed with ASCII words and spaces
            for _ in range(length):
                if rng.random() < 0.5:
                    chars.append(rng.choice(ascii_bits))
                else:
                    chars.append(chr(rng.choice(cats[rng.choice(names)])))
        else:  # letters with marks, format characters and spaces between (the joiners' cases)
            pool = ["L", "M", "Cf", "Zs", "Lo", "Mn", "Nd", "So", "Sk", "Co", "Cc", "P"]
            for _ in range(length):
                key = rng.choice(pool)
                group = [c for c in names if c.startswith(key)]
                chars.append(chr(rng.choice(cats[rng.choice(group)])))
        out.append("".join(chars))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--random", type=int, default=3000, help="random category strings (default 3000)")
    ap.add_argument("--shakespeare", default=DEFAULT_SHAKESPEARE)
    ap.add_argument("--shakespeare-lines", type=int, default=None, help="only the first N lines (default all)")
    ap.add_argument("--paragraphs", type=int, default=2000, help="the first N paragraphs (default 2000)")
    ap.add_argument("--out", default="-")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    texts = shakespeare(a.shakespeare, a.shakespeare_lines, a.paragraphs, rng)
    texts += MULTILINGUAL + CODE + whitespace(rng) + numbers(rng) + contractions() + specials(rng) + edges(rng)
    texts += random_strings(rng, a.random)
    for t in texts:  # no lone surrogates: every line must be valid UTF-8 text
        t.encode("utf-8")
    data = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in texts).encode("utf-8")
    if a.out == "-":
        sys.stdout.buffer.write(data)
    else:
        with open(a.out, "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
