#!/usr/bin/env bash
# The layout check: every tracked C++ file (.cc, .h, .inc) must be as clang-format (.clang-format)
# writes it, except the files in scripts/format_pending.txt, which predate the check; a listed file
# that passes must leave the list, so the list only shrinks. Fix a file with `clang-format -i FILE`.
set -euo pipefail
cd "$(dirname "$0")/.."
pending=scripts/format_pending.txt
bad=() cleared=()
while IFS= read -r f; do
  if grep -qxF "$f" "$pending"; then
    clang-format --dry-run --Werror "$f" > /dev/null 2>&1 && cleared+=("$f")
  elif ! clang-format --dry-run --Werror "$f" > /dev/null 2>&1; then
    bad+=("$f")
  fi
done < <(git ls-files '*.cc' '*.h' '*.inc')
for f in "${bad[@]}"; do echo "format: $f is not clang-formatted (clang-format -i $f)"; done
for f in "${cleared[@]}"; do echo "format: $f is formatted now: remove it from $pending"; done
((${#bad[@]} + ${#cleared[@]} == 0)) || exit 1
echo "format: $(git ls-files '*.cc' '*.h' '*.inc' | wc -l) files checked, $(grep -c . "$pending") pending"
