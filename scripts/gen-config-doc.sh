#!/bin/sh
# gen-config-doc.sh - the config reference (docs/config.md), generated from the schema table in
# src/config_table.c through `gtrain --help-config --markdown` (nothing about a key is written twice).
#
#   scripts/gen-config-doc.sh [--print | --check | --update] [GTRAIN_BIN]
#
#   --print   (default) print the markdown table to stdout
#   --update  replace the text between the markers below in docs/config.md
#   --check   exit 1 if docs/config.md's reference differs from the binary's (for CI)
#
# docs/config.md markers (each on its own line):
#   <!-- config-reference:begin -->
#   <!-- config-reference:end -->
set -eu

mode=print
case "${1:-}" in
--print | --check | --update)
    mode=${1#--}
    shift
    ;;
-h | --help)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-${GTRAIN_BIN:-$root/build/gtrain}}
doc=${CONFIG_DOC:-$root/docs/config.md}
begin='<!-- config-reference:begin -->'
end='<!-- config-reference:end -->'

if [ ! -x "$bin" ]; then
    echo "gen-config-doc: $bin is not an executable gtrain (build it with make, or pass its path)" >&2
    exit 2
fi

table=$(mktemp)
trap 'rm -f "$table" "$table.new"' EXIT
"$bin" --help-config --markdown >"$table"

if [ "$mode" = print ]; then
    cat "$table"
    exit 0
fi

if [ ! -f "$doc" ] || ! grep -qxF "$begin" "$doc" || ! grep -qxF "$end" "$doc"; then
    echo "gen-config-doc: $doc lacks the lines '$begin' and '$end'" >&2
    exit 2
fi

# the doc with the block between the markers replaced by the table.
awk -v begin="$begin" -v end="$end" -v table="$table" '
    $0 == begin { print; while ((getline line < table) > 0) print line; skip = 1; next }
    $0 == end   { skip = 0 }
    !skip       { print }
' "$doc" >"$table.new"

if [ "$mode" = check ]; then
    if cmp -s "$doc" "$table.new"; then
        echo "gen-config-doc: $doc config reference is up to date"
        exit 0
    fi
    echo "gen-config-doc: $doc config reference is stale; run scripts/gen-config-doc.sh --update" >&2
    diff -u "$doc" "$table.new" >&2 || true
    exit 1
fi

cp "$table.new" "$doc"
echo "gen-config-doc: updated the config reference in $doc"
