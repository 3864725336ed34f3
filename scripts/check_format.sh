#!/usr/bin/env bash
# The layout check: every tracked C++ file (.cc, .h, .inc) must be as clang-format (.clang-format)
# writes it, except the files in scripts/format_pending.txt, which predate the check; a listed file
# that passes must leave the list, so the list only shrinks. Fix a file with `clang-format -i FILE`.
# One clang-format run over all files (a few seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
pending=scripts/format_pending.txt
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.inc')
unformatted=$(clang-format --dry-run "${files[@]}" 2>&1 | grep -oE '^[^:]+:[0-9]+:[0-9]+: (warning|error):' |
  cut -d: -f1 | sort -u || true)
bad=$(comm -23 <(echo "$unformatted" | sed '/^$/d') <(sort -u "$pending"))
cleared=$(comm -13 <(echo "$unformatted" | sed '/^$/d') <(sort -u "$pending"))
for f in $bad; do echo "format: $f is not clang-formatted (clang-format -i $f)"; done
for f in $cleared; do echo "format: $f is formatted now (or gone): remove it from $pending"; done
[ -z "$bad$cleared" ] || exit 1
echo "format: ${#files[@]} files checked, $(grep -c . "$pending" || true) pending"
