#!/usr/bin/env bash
# Builds the pd-en corpus: public-domain English prose from Debian packages, as plain text.
#
#   scripts/prepare_corpus.sh [OUT_DIR]        # default data/pd-en
#
# 1. `apt-get download` fetches the packages' .deb files into $BUILD_DIR/pd-en-debs/debs/ (only the
#    missing ones: running again downloads nothing); nothing is installed on the system.
# 2. `dpkg-deb -x` unpacks them into $BUILD_DIR/pd-en-debs/unpacked/, with a PACKAGES file listing
#    "<package> <version>" for SOURCES.md.
# 3. Tessera's corpus tool (tools/corpus/, built as tessera-corpus) writes OUT_DIR/train/*.txt,
#    OUT_DIR/validation/persuasion.txt and OUT_DIR/SOURCES.md.
# Needs a configured build ($BUILD_DIR, default build): it builds the program it runs. See docs/data.md.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
OUT=${1:-data/pd-en}
WORK=$BUILD_DIR/pd-en-debs
packages=(bible-kjv-text bible-kjv sword-text-web r-cran-janeaustenr r-cran-tokenizers dict-devil jargon-text)

mkdir -p "$WORK/debs"
missing=()
for p in "${packages[@]}"; do
  compgen -G "$WORK/debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "prepare_corpus: downloading ${missing[*]}"
  # apt-get download works without root; as root it warns that the _apt user cannot write here.
  if ! (cd "$WORK/debs" && apt-get download "${missing[@]}" 2>&1 | grep -v "unsandboxed as root"); then
    echo "prepare_corpus: apt-get download failed; trying again after apt-get update" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    (cd "$WORK/debs" && apt-get download "${missing[@]}")
  fi
fi

rm -rf "$WORK/unpacked"
mkdir -p "$WORK/unpacked"
: > "$WORK/unpacked/PACKAGES"
for p in "${packages[@]}"; do
  deb=$(ls "$WORK/debs/${p}"_*.deb | sort -V | tail -n 1)
  dpkg-deb -x "$deb" "$WORK/unpacked"
  echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)" >> "$WORK/unpacked/PACKAGES"
done

[ -x "$BUILD_DIR/tessera-corpus" ] || cmake --build "$BUILD_DIR" --target tessera-corpus >/dev/null
"$BUILD_DIR/tessera-corpus" "$WORK/unpacked" "$OUT"
echo "prepare_corpus: $(du -sb "$OUT/train" | cut -f1) bytes of training text, $(du -sb "$OUT/validation" | cut -f1) bytes of validation text in $OUT (sources: $OUT/SOURCES.md)"
