#!/usr/bin/env python3
"""The CPU speed targets, measured and judged on this machine in one run (20-30 minutes on 2 cores).

Runs, one after another on a quiet machine:
  - build/train_bench on the llama-125m preset: float32 at batch 8 x 1024 (remat none), bfloat16 at
    8 x 1024 (remat none) and at 2 x 1024 (remat full); each run's median step gives its hardware
    FLOP rate (every FLOP executed, recompute included) as a fraction of the calibrated peak (HFU);
  - build/decode_bench --quick: batch-1 decoding of the 125m and 1b models, f32 and bf16, against
    the memory-bandwidth bound measured in the same run, then the other families' presets on the
    same graph engine (GPT-2, Qwen 3, Gemma 3 in f32 and bf16; the GPT-OSS mixture of experts in
    bf16, whose bound counts the routed experts' weights);
  - bench/maxtext_bench.sh, one round of bf16 at 2 x 1024 with remat full, when its venv imports
    MaxText (--setup there builds it); --skip-maxtext leaves it out.

Then prints one table: each target, the figure measured, the bar and the verdict, and after it the
per-op tables of every run (train_bench --profile over the measured steps, decode_bench --profile
over one more batch-1 round), decode_bench's small-M table (gemv against oneDNN's GEMM at 1 to 32
rows: where decoding's products should leave gemv, GemmKernels::gemv_rows_below) and, where the
CPU has a bf16 dot product, attention_bench's rows on it (--quick --only dot): where the time
went, should a target miss. The training
targets (f32 >= 85 % of the f32 peak, bf16 >= 80 % of the bf16 peak in both cases, >= 4x
MaxText's tokens/s) hold for a machine whose bf16 dot product (vdpbf16ps) runs at least 1.5x its
f32 FMAs, as AMD Zen 4/5 do; elsewhere (an AMX Xeon, whose bf16 peak is its tiles') the figures
are reported, marked as not judged, with which side of the bar they fall. Decoding (>= 85 % of the
bound, the median of decode_bench's rounds, each against the mean of triads taken before and after
it; their range beside it) is judged everywhere.

    bench/cpu_targets.py [--skip-maxtext] [--steps 3] [--out FILE]

BUILD_DIR (default build) names the build; OMP_NUM_THREADS, if set, the threads (default: all).
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
TRAIN_CASES = [  # (name, dtype, batch, remat)
    ("f32 8x1024 remat none", "float32", 8, "none"),
    ("bf16 8x1024 remat none", "bfloat16", 8, "none"),
    ("bf16 2x1024 remat full", "bfloat16", 2, "full"),
]
DECODE_RUNS = [  # (models, dtypes) of one decode_bench run each; every row is judged
    ("125m,1b", "f32,bf16"),
    ("gpt2-124m,qwen3-0.6b,gemma3-1b", "f32,bf16"),
    ("gpt-oss-3.5b", "bf16"),  # 14 GB in f32
]
FULL_RATE_DOT = 1.5  # vdpbf16ps over the f32 FMAs, one thread, for the training targets to apply


def run(cmd, what):
    print(f"== {what}: {' '.join(cmd)}", flush=True)
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"cpu_targets: {what} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout, p.stderr


def train_case(dtype, batch, remat, steps, threads):
    out, err = run([os.path.join(BUILD, "train_bench"), "--warmup", "1", "--steps", str(steps), "--profile",
                    "model_name=llama-125m", f"dtype={dtype}", f"per_device_batch_size={batch}",
                    "max_target_length=1024", f"remat_policy={remat}", f"num_threads={threads}"],
                   f"train_bench {dtype} {batch}x1024 remat {remat}")
    row = json.loads(out.strip().splitlines()[-1])
    device = next((line for line in err.splitlines() if line.startswith("device:")), "")
    print(f"   {device[:160]}")
    print(f"   step {row['step_seconds']:.3f} s, HW {row['hw_tflops_per_device']:.3f} TFLOP/s, "
          f"HFU {100 * row['hfu']:.1f} %, MFU {100 * row['mfu']:.1f} %, peak {row['peak_gflops']:.0f} GFLOP/s",
          flush=True)
    lines = err.splitlines()
    at = next((i for i, line in enumerate(lines) if line.split()[:2] == ["op", "phase"]), len(lines))
    row["profile"] = "\n".join(line for line in lines[at:] if line.strip())
    return row


def decode_rows():
    """The batch-1 rows as [(model, dtype, row)], and decode_bench's per-op sections as one text."""
    rows, profiles = [], []
    for models, dtypes in DECODE_RUNS:
        out, _ = run([os.path.join(BUILD, "decode_bench"), "--quick", "--models", models, "--dtypes", dtypes,
                      "--skip-gemv", "--profile"], f"decode_bench --quick --profile {models} {dtypes}")
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 7 and cells[0] in models.split(",") and cells[5].endswith("%"):
                rows.append((cells[0], cells[1], (float(cells[3]), float(cells[4]),
                                                  float(cells[5].rstrip("%")) / 100, cells[6])))
        at = out.find("### Per-op time")
        if at >= 0:
            profiles.append(out[at:].strip())
    out, _ = run([os.path.join(BUILD, "decode_bench"), "--quick", "--skip-engine"],
                 "decode_bench --quick --skip-engine (small-M products)")
    at = out.find("## Small-M products")
    if at >= 0:
        profiles.append("#" + out[at:].strip())
    for m, dt, (tps, bound, frac, spread) in rows:
        print(f"   {m} {dt}: {tps:.1f} tokens/s, bound {bound:.1f}, {100 * frac:.0f} % (rounds {spread})")
    return rows, "\n\n".join(profiles)


def maxtext_ratio():
    venv = os.environ.get("MAXTEXT_VENV", os.path.join(ROOT, ".venv-maxtext"))
    py = os.path.join(venv, "bin", "python")
    if subprocess.run([py, "-c", "import jax, maxtext"], capture_output=True).returncode != 0:
        return None, f"no MaxText venv at {venv} (bench/maxtext_bench.sh --setup builds it)"
    out, _ = run([os.path.join(ROOT, "bench", "maxtext_bench.sh"), "--rounds", "1", "--steps", "5", "--cases",
                  "bf16-b2-full"], "maxtext_bench.sh bf16-b2-full")
    for line in out.splitlines():
        if line.strip().startswith(("maxtext:", "tessera:")):
            print(f"   {line.strip()[:170]}")
    m = re.search(r"bf16-b2-full: .*median ([0-9.]+)x", out)
    return (float(m.group(1)), "") if m else (None, "a run did not finish (see maxtext_bench.sh's output)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-maxtext", action="store_true")
    ap.add_argument("--steps", type=int, default=3, help="measured training steps after one warm-up")
    ap.add_argument("--out", help="also write the table to this file")
    a = ap.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), "?")

    train = {name: train_case(dt, b, r, a.steps, threads) for name, dt, b, r in TRAIN_CASES}
    decode, decode_profile = decode_rows()
    ratio, why = (None, "skipped (--skip-maxtext)") if a.skip_maxtext else maxtext_ratio()

    any_row = next(iter(train.values()))
    speedup, amx = any_row["bf16_dot_speedup"], any_row["amx"]
    attention = ""
    if speedup > 0:  # bf16 attention's products on vdpbf16ps, whichever path training chose
        out, _ = run([os.path.join(BUILD, "attention_bench"), "--quick", "--only", "dot"],
                     "attention_bench --quick --only dot")
        attention = out.strip()
    full_rate = speedup >= FULL_RATE_DOT and not amx
    if full_rate:
        judged, note = True, ""
    else:
        judged = False
        if speedup == 0:
            note = "not judged: this CPU has no bf16 dot product (no AVX-512 BF16)"
        else:
            note = (f"not judged: vdpbf16ps runs at {speedup:.2f}x the f32 FMAs here"
                    + (", and the bf16 peak is the AMX tiles'" if amx else ""))
    rows = []

    def verdict(value, bar, applies=True, why_not=""):
        if value is None:
            return why_not
        if not applies:
            return f"{why_not}; {'at or above' if value >= bar else 'below'} the bar"
        return "met" if value >= bar else "MISSED"

    f32 = train["f32 8x1024 remat none"]
    rows.append(("f32 training, 8x1024 remat none: HFU", f"{100 * f32['hfu']:.1f} %", ">= 85 %",
                 verdict(f32["hfu"], 0.85, judged, note)))
    for name in ("bf16 8x1024 remat none", "bf16 2x1024 remat full"):
        r = train[name]
        rows.append((f"{name}: HFU of the bf16 peak", f"{100 * r['hfu']:.1f} %", ">= 80 %",
                     verdict(r["hfu"], 0.80, judged, note)))
    rows.append(("bf16 2x1024 remat full: tokens/s over MaxText's", f"{ratio:.2f}x" if ratio else "-", ">= 4x",
                 verdict(ratio, 4.0, judged, note) if ratio else why))
    for models, dtypes in DECODE_RUNS:
        for m in models.split(","):
            for dt in dtypes.split(","):
                d = next((r for mm, dd, r in decode if (mm, dd) == (m, dt)), None)
                rows.append((f"decode {m} {dt}, batch 1: of the bandwidth bound",
                             f"{100 * d[2]:.0f} % (rounds {d[3]})" if d else "-",
                             ">= 85 %", verdict(d[2], 0.85) if d else "decode_bench printed no row"))

    lines = [f"Machine: {model}, {os.cpu_count()} cores, {threads} threads; peaks (calibrated): "
             f"f32 {f32['peak_gflops']:.0f} GFLOP/s, bf16 {train['bf16 8x1024 remat none']['peak_gflops']:.0f} "
             f"GFLOP/s; vdpbf16ps {f'{speedup:.2f}x the f32 FMAs' if speedup else 'absent'}, AMX {'yes' if amx else 'no'}", "",
             "| target | measured | bar | verdict |", "| --- | ---: | ---: | --- |"]
    lines += [f"| {t} | {m} | {b} | {v} |" for t, m, b, v in rows]
    lines += ["", "## Where the time went", ""]
    for name, r in train.items():
        lines += [f"### train_bench {name}, the measured steps", "", "```", r["profile"], "```", ""]
    lines.append(decode_profile)
    if attention:
        lines += ["", "### attention_bench --quick --only dot (bf16 attention on vdpbf16ps)", "", "```", attention,
                  "```"]
    text = "\n".join(lines)
    print("\n" + text)
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
