#!/usr/bin/env bash
# bench-tokenizer.sh [BUILD_DIR] - make bench's tokenizer part: tokens/s of `gtrain tokenize` beside
# Hugging Face's tokenizers (PyPI `tokenizers`, the Rust library through its Python binding:
# tests/tools/hf_tokenize_bench.py, run by the test references' Python) on data/tinyshakespeare.txt
# repeated BENCH_TOK_REPEAT times (default 20), as one document and as lines (gtrain: --jsonl, one
# JSON string a line; HF: encode_batch over the same lines), with the real Llama-3 and Llama-2
# (Mistral-style) tokenizer.json of the project's shared folder (../shared/data/tokenizers/, beside
# the checkout), one thread and all of them:
#   gtrain: OMP_NUM_THREADS=1, then OMP_NUM_THREADS=$(nproc)
#   HF:     RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false, then TOKENIZERS_PARALLELISM=true
#           (one document is one sequence: HF encodes it on one thread either way)
# gtrain's time is its whole process minus the same process on an empty input (start and loading
# the tokenizer); HF's is its encode alone. The ids of both are compared (the "same ids" column).
# Needs the test references' Python ($GTRAIN_REFS_PY, else scripts/install-deps.sh --venv-path's
# venv; scripts/install-deps.sh --test-refs installs it) and the shared tokenizer files; skipped,
# exit 0, saying which is missing. Never part of the tests.
set -uo pipefail
build="${1:-build}"
cd "$(dirname "$0")/.."
root="$PWD"
repeat="${BENCH_TOK_REPEAT:-20}"
threads="$(nproc)"
case "$build" in /*) gtrain="$build/gtrain" ;; *) gtrain="$root/$build/gtrain" ;; esac
[ -x "$gtrain" ] || { echo "bench-tokenizer: $gtrain not built"; exit 1; }
py="${GTRAIN_REFS_PY:-$(scripts/install-deps.sh --venv-path)/bin/python}"
if ! "$py" -c "import tokenizers" 2>/dev/null; then
  echo "bench-tokenizer: skipped (Hugging Face's tokenizers does not import with $py: run scripts/install-deps.sh --test-refs)"
  exit 0
fi
tokdir="$root/../shared/data/tokenizers"
for name in llama3 llama2; do
  [ -r "$tokdir/$name/tokenizer.json" ] || { echo "bench-tokenizer: skipped ($tokdir/$name/tokenizer.json is missing)"; exit 0; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for _ in $(seq "$repeat"); do cat data/tinyshakespeare.txt; done >"$tmp/text.txt"
"$py" -c '
import json, sys
with open(sys.argv[1], encoding="utf-8") as f, open(sys.argv[2], "w", encoding="utf-8") as out:
    lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
' "$tmp/text.txt" "$tmp/lines.jsonl"
: >"$tmp/empty.txt"
echo '""' >"$tmp/empty.jsonl"
mb="$(awk -v b="$(stat -c %s "$tmp/text.txt")" 'BEGIN { printf "%.1f", b / 1048576 }')"
n_lines="$(wc -l <"$tmp/lines.jsonl")"

now() { date +%s.%N; }

# seconds of `gtrain tokenize FLAGS INPUT > OUT` at OMP_NUM_THREADS=NT, less its start: the fastest
# of three runs on an empty input (prints "encode_seconds start_seconds")
gtrain_seconds() {
  local nt="$1" tok="$2" flags="$3" input="$4" empty="$5" out="$6" t0 t1 start="" k
  for k in 1 2 3; do
    t0="$(now)"
    OMP_NUM_THREADS="$nt" "$gtrain" tokenize --tokenizer "$tok" $flags "$empty" >/dev/null || return 1
    t1="$(now)"
    start="$(awk -v a="$t0" -v b="$t1" -v m="$start" 'BEGIN { s = b - a; if (m != "" && m < s) s = m; printf "%.4f", s }')"
  done
  t0="$(now)"
  OMP_NUM_THREADS="$nt" "$gtrain" tokenize --tokenizer "$tok" $flags "$input" >"$out" || return 1
  t1="$(now)"
  awk -v a="$t0" -v b="$t1" -v s0="$start" 'BEGIN { s = (b - a) - s0; if (s < 1e-3) s = 1e-3; printf "%.4f %.4f", s, s0 }'
}

rate() { awk -v n="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f", n / s; else printf "-" }'; }

echo "tokenizer bench: data/tinyshakespeare.txt x $repeat ($mb MiB, $n_lines lines), $threads threads"
declare -A loads
printf '%-8s %-10s %-8s %10s %14s %14s %8s %9s\n' tokenizer input threads tokens "gtrain tok/s" "HF tok/s" "gtrain/HF" "same ids"
for name in llama3 llama2; do
  tok="$tokdir/$name/tokenizer.json"
  for input in doc lines; do
    if [ "$input" = doc ]; then flags=""; file="$tmp/text.txt"; empty="$tmp/empty.txt"; label="1 file"
    else flags="--jsonl"; file="$tmp/lines.jsonl"; empty="$tmp/empty.jsonl"; label="lines"; fi
    for nt in 1 "$threads"; do
      if [ "$nt" = 1 ]; then hf_env=(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false)
      else hf_env=(TOKENIZERS_PARALLELISM=true); fi
      hf_line="$(env "${hf_env[@]}" "$py" tests/tools/hf_tokenize_bench.py "$tok" "$tmp/text.txt" "$input" \
                 --ids-out "$tmp/hf.ids")" || { echo "bench-tokenizer: the HF run failed ($name $input)"; continue; }
      hf_tokens="$(awk '{ print $2 }' <<<"$hf_line")"
      hf_s="$(awk '{ print $4 }' <<<"$hf_line")"
      if g_line="$(gtrain_seconds "$nt" "$tok" "$flags" "$file" "$empty" "$tmp/gtrain.ids")"; then
        g_s="${g_line% *}"
        loads[$name]="gtrain $(awk -v s="${g_line#* }" 'BEGIN { printf "%.2f", s }') s, HF $(awk '{ printf "%.2f", $6 }' <<<"$hf_line") s"
        g_tokens="$(wc -w <"$tmp/gtrain.ids")"
        cmp -s "$tmp/gtrain.ids" "$tmp/hf.ids" && same=yes || same=NO
        g_rate="$(rate "$g_tokens" "$g_s")"
        ratio="$(awk -v a="$g_rate" -v b="$(rate "$hf_tokens" "$hf_s")" 'BEGIN { printf "%.2f", a / b }')"
      else
        g_rate="failed"; ratio="-"; same="-"
      fi
      printf '%-8s %-10s %-8s %10s %14s %14s %8s %9s\n' "$name" "$label" "$nt" "$hf_tokens" "$g_rate" \
        "$(rate "$hf_tokens" "$hf_s")" "$ratio" "$same"
    done
  done
done
for name in llama3 llama2; do
  echo "loading the $name tokenizer.json (gtrain: the whole process on an empty input): ${loads[$name]:-?}"
done
