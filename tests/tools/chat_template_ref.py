"""chat_template_ref.py - the chat template references for tests/test_chat_template.c.

  corpus TOKENIZERS_DIR OUT.json
      A corpus of conversations (fixed cases and seeded random ones: system/user/assistant, multi-turn,
      empty content, unicode, template-like text in content, Qwen3 reasoning and tool calls) rendered
      by transformers' tokenizer.apply_chat_template(..., tokenize=False) for every tokenizer there that
      has a chat template, with and without add_generation_prompt. Where TRL 1.16 ships a training
      template for the family (trl.chat_template_utils.get_training_chat_template, or for a revision of a
      Llama-3 or Qwen3 template it does not list, its training template of that family), that
      template's text and its {% generation %}
      spans as transformers' return_assistant_tokens_mask path records them (character offsets turned
      into UTF-8 byte offsets here).
  jinja IN.json OUT.json
      Each {template, context} of IN rendered by transformers' own compiled Jinja environment
      (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, its tojson, raise_exception,
      namespace; strftime_now fixed at 1 Jan 2026); OUT: {text} or {error} per case.
  trl-templates OUT.json
      Every chat template TRL ships (many Hub families: Gemma, Phi-3, Qwen, DeepSeek, Llama, ...) over a
      few conversations, with and without add_generation_prompt: {text, spans} or {error}.
"""
import datetime
import json
import os
import random
import re
import sys

import trl
from transformers import AutoTokenizer
from transformers.utils import chat_template_utils as ctu


def byte_spans(text, spans):
    return [[len(text[:s].encode()), len(text[:e].encode())] for s, e in spans]


WORDS = ["hello", "world", "Ça", "va", "你好", "🎉", "naïve", "{{ x }}", "{% if %}", "'quoted'", '"dq"', "\\", "tab\t",
         "line\nbreak", "  spaced  ", "<think>", "</think>", "<|eot_id|>", "ß", "Ω", "\u2028", "x" * 40, "1.5", "#"]


def rand_text(rng):
    k = rng.randint(0, 8)
    return "".join(rng.choice(WORDS) + rng.choice([" ", "", "\n", "  "]) for _ in range(k))


def conversations():
    tool_call = {"type": "function", "function": {"name": "multiply", "arguments": {"a": 2, "b": 3}}}
    tool_call_str = {"type": "function", "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"}}
    fixed = [
        [{"role": "user", "content": "Hello"}],
        [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "What is 2+2?"},
         {"role": "assistant", "content": "4"}],
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
         {"role": "user", "content": "Tell me a joke."}, {"role": "assistant", "content": "Why did the chicken..."}],
        [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
        [{"role": "system", "content": ""}, {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
        [{"role": "user", "content": "Héllo wörld 你好 🎉"}, {"role": "assistant", "content": "Ça va? 😀 \u2028 ok"}],
        [{"role": "user", "content": "  padded \n\n"}, {"role": "assistant", "content": "\n answer \n"}],
        [{"role": "user", "content": "{{ not a tag }} {% neither %} {# nor #}"},
         {"role": "assistant", "content": "'single' \"double\" \\back"}],
        [{"role": "user", "content": "What is 6*7?"},
         {"role": "assistant", "reasoning_content": "6 times 7 is 42.", "content": "42"}],
        [{"role": "user", "content": "Think"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nDone"}],
        [{"role": "user", "content": "q1"}, {"role": "assistant", "reasoning_content": "r1", "content": "a1"},
         {"role": "user", "content": "q2"}, {"role": "assistant", "reasoning_content": "r2", "content": "a2"}],
        [{"role": "user", "content": "What is 2 * 3?"}, {"role": "assistant", "content": "", "tool_calls": [tool_call]},
         {"role": "tool", "name": "multiply", "content": "6"}, {"role": "assistant", "content": "It is 6."}],
        [{"role": "user", "content": "Look up x"},
         {"role": "assistant", "content": "Sure.", "tool_calls": [tool_call_str, tool_call]},
         {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}, {"role": "assistant", "content": "ok"}],
        [{"role": "system", "content": "Only system."}],
        [{"role": "user", "content": "<tool_response>x</tool_response>"}, {"role": "assistant", "content": "a"}],
        [{"role": "user", "content": "t"}, {"role": "assistant", "thinking": "via thinking", "content": "b"}],
    ]
    rng = random.Random(1)
    out = list(fixed)
    for _ in range(40):
        conv = []
        if rng.random() < 0.4:
            conv.append({"role": "system", "content": rand_text(rng)})
        for t in range(rng.randint(1, 4)):
            conv.append({"role": "user", "content": rand_text(rng)})
            if rng.random() < 0.85:
                m = {"role": "assistant", "content": rand_text(rng)}
                if rng.random() < 0.3:
                    m["reasoning_content"] = rand_text(rng)
                conv.append(m)
        out.append(conv)
    return out


TOOLS = [{"type": "function", "function": {"name": "multiply", "description": "Multiply two numbers ünïcode",
                                           "parameters": {"type": "object", "properties": {
                                               "a": {"type": "integer"}, "b": {"type": "number", "minimum": 0.5}},
                                                          "required": ["a", "b"]}}}]


def training_template(tok):
    try:
        t = trl.chat_template_utils.get_training_chat_template(tok)
        if t:
            return t, "trl"
    except ValueError:
        pass
    # a revision of a family's template TRL does not list: that family's TRL training template
    family = "llama3" if "<|start_header_id|>" in tok.chat_template else "qwen3" if "enable_thinking" in tok.chat_template else None
    if family:
        path = os.path.join(os.path.dirname(trl.__file__), "chat_templates", family + "_training.jinja")
        return open(path).read(), "trl-" + family
    return None, None


def corpus(tok_root, out_path):
    convs = conversations()
    cases = []
    train = {}
    for name in sorted(os.listdir(tok_root)):
        d = os.path.join(tok_root, name)
        tok = AutoTokenizer.from_pretrained(d)
        if not tok.chat_template:
            continue
        ttpl, tsrc = training_template(tok)
        if ttpl:
            train[name] = {"template": ttpl, "source": tsrc}
        variants = [{}]
        if "enable_thinking" in tok.chat_template:
            variants += [{"enable_thinking": False}, {"tools": TOOLS}]
        for ci, conv in enumerate(convs):
            for extra in variants:
                for gen in (False, True):
                    case = {"tok": name, "conv": ci, "gen": gen, "extra": extra}
                    try:
                        case["text"] = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen,
                                                               **extra)
                    except Exception as e:  # noqa: BLE001 - the C side must refuse it too
                        case["error"] = str(e)
                    if ttpl and "text" in case:
                        kw = dict(extra)
                        tools = kw.pop("tools", None)
                        texts, spans = ctu.render_jinja_template(
                            conversations=[conv], tools=tools, chat_template=ttpl, return_assistant_tokens_mask=True,
                            add_generation_prompt=gen, **tok.special_tokens_map, **kw)
                        case["train_text"] = texts[0]
                        case["train_spans"] = byte_spans(texts[0], spans[0])
                    cases.append(case)
    json.dump({"conversations": convs, "training": train, "cases": cases}, open(out_path, "w"), ensure_ascii=False)


def fixed_date(fmt):
    return datetime.datetime(2026, 1, 1).strftime(fmt)


def jinja(in_path, out_path):
    cases = json.load(open(in_path))
    res = []
    for c in cases:
        ctx = {"messages": [], "tools": None, "documents": None, "add_generation_prompt": False,
               "strftime_now": fixed_date, **c.get("context", {})}
        try:
            t = ctu._compile_jinja_template(c["template"])
            res.append({"text": t.render(**ctx)})
        except Exception as e:  # noqa: BLE001
            res.append({"error": type(e).__name__ + ": " + str(e)})
    json.dump(res, open(out_path, "w"), ensure_ascii=False)


def trl_templates(out_path):
    """Every chat template TRL ships (Hub templates of many families) over a few conversations."""
    convs = [
        [{"role": "user", "content": "Hello"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
         {"role": "assistant", "content": "Hello!"}],
        [{"role": "user", "content": "q1 ü"}, {"role": "assistant", "content": "a1"},
         {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2 😀"}],
    ]
    d = os.path.join(os.path.dirname(trl.__file__), "chat_templates")
    out = []
    for f in sorted(os.listdir(d)):
        if not f.endswith(".jinja"):
            continue
        src = open(os.path.join(d, f)).read()
        marked = re.search(r"\{%-?\s*generation\s*-?%\}", src) is not None
        cases = []
        for ci, conv in enumerate(convs):
            for gen in (False, True):
                case = {"conv": ci, "gen": gen}
                try:
                    # the date fixed in the compiled template's globals (a keyword would reach the template
                    # as a placeholder string: transformers keeps only plain data there)
                    ctu._compile_jinja_template(src).environment.globals["strftime_now"] = fixed_date
                    texts, spans = ctu.render_jinja_template(
                        conversations=[conv], chat_template=src, add_generation_prompt=gen, bos_token="<s>",
                        eos_token="</s>", return_assistant_tokens_mask=marked)
                    case["text"] = texts[0]
                    if marked:
                        case["spans"] = byte_spans(texts[0], spans[0])
                except Exception as e:  # noqa: BLE001
                    case["error"] = type(e).__name__ + ": " + str(e)
                cases.append(case)
        out.append({"file": f, "template": src, "cases": cases})
    json.dump({"conversations": convs, "templates": out}, open(out_path, "w"), ensure_ascii=False)


if __name__ == "__main__":
    if sys.argv[1] == "corpus":
        corpus(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "jinja":
        jinja(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "trl-templates":
        trl_templates(sys.argv[2])
    else:
        sys.exit("usage: chat_template_ref.py corpus TOKDIR OUT.json | jinja IN.json OUT.json | trl-templates OUT.json")
