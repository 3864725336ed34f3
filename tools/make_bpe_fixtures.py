#!/usr/bin/env python3
"""Writes the tiny byte-level BPE vocabulary of tests/data/fixtures/tiny_bpe/ in both formats Tessera
reads: tiny.tiktoken (ranks) and vocab.json + merges.txt (Hugging Face). Standard library only.

The vocabulary: byte b has id/rank b (0..255), then eight merges with ids 256..263, and
<|endoftext|> = 264 (Hugging Face only; the tiktoken side names its special tokens in code). The
ids the tests expect are worked out by hand in tests/data/bpe_test.cc.

    python3 tools/make_bpe_fixtures.py tests/data/fixtures/tiny_bpe
"""
import base64
import json
import sys
from pathlib import Path

MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), (" ", "w"), ("o", "r"), (" w", "or"), ("l", "d")]


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tokens = [bytes([b]) for b in range(256)] + [(a + b).encode() for a, b in MERGES]
    with open(out / "tiny.tiktoken", "w") as f:
        for rank, tok in enumerate(tokens):
            f.write(f"{base64.b64encode(tok).decode()} {rank}\n")
    b2u = bytes_to_unicode()
    spell = lambda bs: "".join(b2u[b] for b in bs)
    vocab = {spell(tok): i for i, tok in enumerate(tokens)}
    vocab["<|endoftext|>"] = len(tokens)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    with open(out / "merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in MERGES:
            f.write(f"{spell(a.encode())} {spell(b.encode())}\n")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/fixtures/tiny_bpe"))
