"""flavour_coverage.py OUT CODE_REGEX CHECK FLAVOUR [KEEP_REGEX] - the analysis half of scripts/flavour-coverage.sh.

Reads the gcov counters each run of OUT/runs left (kept: the tests a flavour keeps; cN: candidate N
alone, named in cN.name), keeps the lines of files whose path matches CODE_REGEX that ran at least
once, and prints which candidates the flavour can leave out with no line of that code unrun:
from the slowest down, a candidate goes when each of its lines is also run by the kept tests or by a
candidate still kept. CHECK=1: every candidate is an entry already listed as covered; fails naming the
lines one of them alone runs. KEEP_REGEX: candidates (suite/test) that stay whatever their lines: their
lines count as kept."""
import glob
import json
import os
import re
import subprocess
import sys


def lines_of(run_dir, code):
    """the (file, line) pairs of CODE that ran in one run (every process of it)"""
    gcdas = sorted(glob.glob(os.path.join(run_dir, "**", "*.gcda"), recursive=True))
    got = set()
    for i in range(0, len(gcdas), 64):
        txt = subprocess.run(["gcov", "--json-format", "--stdout", *gcdas[i:i + 64]], check=True,
                             capture_output=True, text=True).stdout
        dec, pos = json.JSONDecoder(), 0
        while True:
            while pos < len(txt) and txt[pos].isspace():
                pos += 1
            if pos >= len(txt):
                break
            doc, pos = dec.raw_decode(txt, pos)
            for f in doc.get("files", []):
                name = os.path.normpath(f["file"])
                if not code.match(name):
                    continue
                for ln in f.get("lines", []):
                    if ln.get("count", 0) > 0:
                        got.add((name, ln["line_number"]))
    return got


def seconds(tap):
    """suite/test -> seconds, from a flavour's TAP file"""
    t = {}
    if os.path.exists(tap):
        for line in open(tap):
            m = re.match(r"ok - (\w+)::(\w+) +\(([0-9.]+)s\)", line)
            if m:
                t[m.group(1) + "/" + m.group(2)] = float(m.group(3))
    return t


def main():
    out, code, check, flavour = sys.argv[1], re.compile(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
    runs = os.path.join(out, "runs")
    keep = re.compile(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[5] else None
    kept = lines_of(os.path.join(runs, "kept"), code)
    cands = []
    for name_file in glob.glob(os.path.join(runs, "c*.name")):
        name = open(name_file).read().strip()
        ls = lines_of(name_file[:-len(".name")], code)
        if keep and keep.fullmatch(name):
            kept |= ls
        else:
            cands.append((name, ls))
    tap = {"asan": "build-asan/test.tap", "cudasim": "build-cudasim/test.tap"}[flavour]
    secs = seconds(tap)
    print(f"flavour-coverage: {flavour}: the kept tests run {len(kept)} lines of its code")
    if check:
        bad = 0
        for name, ls in sorted(cands):
            alone = sorted(ls - kept)
            if alone:
                bad = 1
                shown = ", ".join(f"{f}:{n}" for f, n in alone[:8])
                print(f"flavour-coverage: {name} runs {len(alone)} line(s) no kept test runs: {shown}")
        print(f"flavour-coverage: {len(cands)} listed test(s) checked: "
              + ("some run lines nothing else runs" if bad else "each one's lines run in the kept tests"))
        sys.exit(bad)
    count = {}
    for ln in kept:
        count[ln] = 1
    for _, ls in cands:
        for ln in ls:
            count[ln] = count.get(ln, 0) + 1
    left_out, total = [], 0.0
    for name, ls in sorted(cands, key=lambda c: -secs.get(c[0], 0.0)):
        if all(count[ln] >= 2 for ln in ls):
            for ln in ls:
                count[ln] -= 1
            left_out.append(name)
            total += secs.get(name, 0.0)
        else:
            alone = [ln for ln in ls if count[ln] < 2]
            print(f"  keeps {name} ({secs.get(name, 0):.1f} s): {len(alone)} line(s) only it runs, "
                  f"e.g. {alone[0][0]}:{alone[0][1]}")
    print(f"flavour-coverage: {len(left_out)} of {len(cands)} candidates add no line "
          f"({total:.1f} s of test time in {tap}):")
    for name in left_out:
        print(f"  '{name}'  # {secs.get(name, 0):.1f} s")


main()
