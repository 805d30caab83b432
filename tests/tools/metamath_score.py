"""metamath_score.py - the test reference for src/run/scorers.c: the answer extraction and scoring
functions of MetaMath's evaluation scripts, copied verbatim (below, between the "verbatim" marks)
from github.com/meta-math/MetaMath at commit fe667b14f9a4c51bde9809adafb82b6b5d255800 (Apache
License 2.0): eval_gsm8k.py (is_number, extract_answer_number), util.py (last_boxed_only_string,
fix_fracs, fix_a_slash_b, remove_right_units, fix_sqrt, strip_string, is_equiv) and eval_math.py
(remove_boxed, process_results). PiSSA's utils/test_acc.py (github.com/GraphPKU/PiSSA at
87f4db6fc75a58b92c803cd9880c642bf011e69a) holds the same functions (process_math_results is
process_results without the doc argument). `Fraction` is the PyPI package the scripts import
(tests/tools/fraction/, Fraction 2.2.0, MIT). This is a test anchor, not product code.

usage: python metamath_score.py < cases.jsonl > results.jsonl
Each input line is one JSON object; each output line answers it:
  {"task": "gsm8k"|"math", "generated": str, "gold_field": str}
      -> {"extracted": str|null, "gold": str|null, "correct": bool}
     gsm8k: extracted = str(extract_answer_number(generated)); gold = the gold field's text after
       "#### " (eval_gsm8k.py's split('#### ')[1], or the whole field as test_acc.py's
       data["answer"]) with commas removed, stripped, null unless float() takes it; correct =
       float(y_pred) == float(gold) as both scripts compare.
     math: extracted = process_results' extract_ans (its lines repeated here: the function returns
       only the verdict), null without "The answer is: "; gold = remove_boxed(
       last_boxed_only_string(solution)) (the field itself when it holds no \\boxed or \\fbox, as
       test_acc.py's data['answer']); correct = process_results(None, generated, gold).
     A script function that raises is what the script's caller would not survive: the driver
       counts it as None / incorrect (what src/run/scorers.c does).
  {"task": "strip", "text": str}  -> {"out": strip_string(text) | null when it raises}
  {"task": "boxed", "text": str}  -> {"out": remove_boxed(last_boxed_only_string(text))}
"""
import json
import re
import sys
import types

from fraction import Fraction

# ---- eval_gsm8k.py (verbatim) ----


def is_number(s):
    try:
        float(s)
        return True
    except ValueError:
        pass
    try:
        import unicodedata
        unicodedata.numeric(s)
        return True
    except (TypeError, ValueError):
        pass
    return False

def extract_answer_number(completion):
    text = completion.split('The answer is: ')
    if len(text) > 1:
        extract_ans = text[-1].strip()
        match = re.search(r'[\-+]?\d*[\.,/]?\d+', extract_ans)
        if match:
            if '/' in match.group():
                denominator = match.group().split('/')[1]
                numerator = match.group().split('/')[0]
                if is_number(denominator) == True and is_number(numerator) == True:
                    if denominator == '0':
                        return round(float(numerator.replace(',', '')))
                    else:
                        frac = Fraction(match.group().replace(',', ''))
                        num_numerator = frac.numerator
                        num_denominator = frac.denominator
                        return round(float(num_numerator / num_denominator))
                else:
                    return None
            else:
                if float(match.group().replace(',', '')) == float('inf'):
                    return None
                return round(float(match.group().replace(',', '')))
        else:
            return None
    else:
        return None

# ---- util.py (verbatim) ----


def last_boxed_only_string(string):
    idx = string.rfind("\\boxed")
    if idx < 0:
        idx = string.rfind("\\fbox")
        if idx < 0:
            return None

    i = idx
    right_brace_idx = None
    num_left_braces_open = 0
    while i < len(string):
        if string[i] == "{":
            num_left_braces_open += 1
        if string[i] == "}":
            num_left_braces_open -= 1
            if num_left_braces_open == 0:
                right_brace_idx = i
                break
        i += 1
    
    if right_brace_idx == None:
        retval = None
    else:
        retval = string[idx:right_brace_idx + 1]
    
    return retval

def fix_fracs(string):
    substrs = string.split("\\frac")
    new_str = substrs[0]
    if len(substrs) > 1:
        substrs = substrs[1:]
        for substr in substrs:
            new_str += "\\frac"
            if substr[0] == "{":
                new_str += substr
            else:
                try:
                    assert len(substr) >= 2
                except AssertionError:
                    return string
                a = substr[0]
                b = substr[1]
                if b != "{":
                    if len(substr) > 2:
                        post_substr = substr[2:]
                        new_str += "{" + a + "}{" + b + "}" + post_substr
                    else:
                        new_str += "{" + a + "}{" + b + "}"
                else:
                    if len(substr) > 2:
                        post_substr = substr[2:]
                        new_str += "{" + a + "}" + b + post_substr
                    else:
                        new_str += "{" + a + "}" + b
    string = new_str
    return string

def fix_a_slash_b(string):
    if len(string.split("/")) != 2:
        return string
    a = string.split("/")[0]
    b = string.split("/")[1]
    try:
        a = int(a)
        b = int(b)
        assert string == "{}/{}".format(a, b)
        new_string = "\\frac{" + str(a) + "}{" + str(b) + "}"
        return new_string
    except AssertionError:
        return string

def remove_right_units(string):
    # "\\text{ " only ever occurs (at least in the val set) when describing units
    if "\\text{ " in string:
        splits = string.split("\\text{ ")
        assert len(splits) == 2
        return splits[0]
    else:
        return string

def fix_sqrt(string):
    if "\\sqrt" not in string:
        return string
    splits = string.split("\\sqrt")
    new_string = splits[0]
    for split in splits[1:]:
        if split[0] != "{":
            a = split[0]
            new_substr = "\\sqrt{" + a + "}" + split[1:]
        else:
            new_substr = "\\sqrt" + split
        new_string += new_substr
    return new_string

def strip_string(string):
    # linebreaks
    string = string.replace("\n", "")

    # remove inverse spaces
    string = string.replace("\\!", "")

    # replace \\ with \
    string = string.replace("\\\\", "\\")

    # replace tfrac and dfrac with frac
    string = string.replace("tfrac", "frac")
    string = string.replace("dfrac", "frac")

    # remove \left and \right
    string = string.replace("\\left", "")
    string = string.replace("\\right", "")

    # Remove circ (degrees)
    string = string.replace("^{\\circ}", "")
    string = string.replace("^\\circ", "")

    # remove dollar signs
    string = string.replace("\\$", "")

    # remove units (on the right)
    string = remove_right_units(string)

    # remove percentage
    string = string.replace("\\%", "")
    string = string.replace("\%", "")  # noqa: W605

    # " 0." equivalent to " ." and "{0." equivalent to "{." Alternatively, add "0" if "." is the start of the string
    string = string.replace(" .", " 0.")
    string = string.replace("{.", "{0.")
    # if empty, return empty string
    if len(string) == 0:
        return string
    if string[0] == ".":
        string = "0" + string

    # to consider: get rid of e.g. "k = " or "q = " at beginning
    if len(string.split("=")) == 2:
        if len(string.split("=")[0]) <= 2:
            string = string.split("=")[1]

    # fix sqrt3 --> sqrt{3}
    string = fix_sqrt(string)

    # remove spaces
    string = string.replace(" ", "")

    # \frac1b or \frac12 --> \frac{1}{b} and \frac{1}{2}, etc. Even works with \frac1{72} (but not \frac{72}1). Also does a/b --> \\frac{a}{b}
    string = fix_fracs(string)

    # manually change 0.5 --> \frac{1}{2}
    if string == "0.5":
        string = "\\frac{1}{2}"

    # NOTE: X/Y changed to \frac{X}{Y} in dataset, but in simple cases fix in case the model output is X/Y
    string = fix_a_slash_b(string)

    return string

def is_equiv(str1, str2, verbose=False):
    if str1 is None and str2 is None:
        print("WARNING: Both None")
        return True
    if str1 is None or str2 is None:
        return False

    try:
        ss1 = strip_string(str1)
        ss2 = strip_string(str2)
        #pdb.set_trace()
        if verbose:
            print(ss1, ss2)
        return ss1 == ss2
    except Exception:
        return str1 == str2

# ---- eval_math.py (verbatim) ----

invalid_outputs = []

def remove_boxed(s):
    left = "\\boxed{"
    try:
        assert s[:len(left)] == left
        assert s[-1] == "}"
        return s[len(left):-1]
    except:
        return None

def process_results(doc, completion, answer):
    split_ans = completion.split('The answer is: ')
    if len(split_ans) > 1:
        ans = split_ans[-1]
        extract_ans_temp = ans.split('.\n')[0]
        extract_ans_temp = extract_ans_temp.strip()
        if len(extract_ans_temp)>0 and extract_ans_temp[-1] == '.':
            extract_ans = extract_ans_temp[0:-1]
        else:
            extract_ans = extract_ans_temp
        extract_ans = extract_ans.strip()
        if util.is_equiv(extract_ans, answer):
            return True
        else:
            return False
    else:
        temp = {'question': doc, 'output': completion, 'answer': answer}
        invalid_outputs.append(temp)
        return False

# ---- end of the verbatim copies ----

# eval_math.py calls util.is_equiv (`import util`): the same function, copied above
util = types.SimpleNamespace(is_equiv=is_equiv)


def gsm8k(generated, gold_field):
    try:
        y_pred = extract_answer_number(generated)
    except Exception:  # a raise (inf, a zero denominator, an overlong int): the script stops there
        y_pred = None
    g = gold_field.split('#### ')[1] if '#### ' in gold_field else gold_field
    g = g.replace(',', '').strip()
    try:
        gold_value = float(g)
        gold = g
    except ValueError:
        gold, gold_value = None, None
    correct = y_pred is not None and gold is not None and float(y_pred) == gold_value
    return {"extracted": None if y_pred is None else str(y_pred), "gold": gold, "correct": correct}


def score_math(generated, gold_field):
    extracted = None
    split_ans = generated.split('The answer is: ')  # process_results' own lines
    if len(split_ans) > 1:
        ans = split_ans[-1]
        extract_ans_temp = ans.split('.\n')[0]
        extract_ans_temp = extract_ans_temp.strip()
        if len(extract_ans_temp) > 0 and extract_ans_temp[-1] == '.':
            extract_ans = extract_ans_temp[0:-1]
        else:
            extract_ans = extract_ans_temp
        extracted = extract_ans.strip()
    if '\\boxed' in gold_field or '\\fbox' in gold_field:
        gold = remove_boxed(last_boxed_only_string(gold_field))
    else:
        gold = gold_field
    correct = bool(process_results(None, generated, gold))
    return {"extracted": extracted, "gold": gold, "correct": correct}


def strip(text):
    try:
        return {"out": strip_string(text)}
    except Exception:
        return {"out": None}


def main():
    out = []
    for line in sys.stdin.buffer.read().decode("utf-8").split("\n"):  # not splitlines: U+0085 is text
        if not line.strip():
            continue
        c = json.loads(line)
        if c["task"] == "gsm8k":
            r = gsm8k(c["generated"], c["gold_field"])
        elif c["task"] == "math":
            r = score_math(c["generated"], c["gold_field"])
        elif c["task"] == "strip":
            r = strip(c["text"])
        elif c["task"] == "boxed":
            r = {"out": remove_boxed(last_boxed_only_string(c["text"]))}
        else:
            sys.exit(f"metamath_score.py: unknown task {c['task']!r}")
        out.append(json.dumps(r, ensure_ascii=True))
    sys.stdout.write("\n".join(out) + ("\n" if out else ""))


if __name__ == "__main__":
    main()
