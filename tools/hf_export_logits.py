#!/usr/bin/env python3
"""Logits of Hugging Face model folders as transformers computes them, for the test in
tests/models/hf_convert_test.cc that checks `tessera convert --to hf` against transformers.

    python3 tools/hf_export_logits.py TOKENS B T FOLDER OUT [FOLDER OUT ...]

TOKENS is a file of B*T little-endian int32 token ids. Each FOLDER is loaded with
AutoModelForCausalLM.from_pretrained in float32 (eager attention), run on the tokens, and its logits
[B, T, V] are written to OUT as little-endian float32. One line per folder goes to stdout:
    <FOLDER> <model class> <config dtype> <number of parameters>
Exit status 0 only when every folder loaded and ran. Needs torch and transformers.
"""
import struct
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main(argv):
    if len(argv) < 6 or (len(argv) - 4) % 2:
        sys.exit(__doc__)
    b, t = int(argv[2]), int(argv[3])
    with open(argv[1], "rb") as f:
        ids = struct.unpack(f"<{b * t}i", f.read())
    tokens = torch.tensor(ids, dtype=torch.int64).reshape(b, t)
    for folder, out in zip(argv[4::2], argv[5::2]):
        config = AutoConfig.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=tokens).logits.float().flatten().tolist()
        with open(out, "wb") as f:
            f.write(struct.pack(f"<{len(logits)}f", *logits))
        params = sum(p.numel() for p in model.parameters())
        print(folder, type(model).__name__, config.dtype, params, flush=True)


if __name__ == "__main__":
    main(sys.argv)
