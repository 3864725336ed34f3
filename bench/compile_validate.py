#!/usr/bin/env python3
"""Predicted against measured: `tessera compile` for this machine (compile_topology=cpu-<C>x<M>)
against `tessera train` of the same config on M MPI ranks of C threads each.

For 1, 2 and 4 ranks and the data-parallel, FSDP, tensor-parallel and expert-parallel layouts
(the last on the mixture-of-experts model, --moe-model), it prints the predicted memory per rank
(the plan's total, with the cpu target's reservation) against the largest rank's peak RSS
(/usr/bin/time), and the predicted step time against the median measured step after the first
WARMUP steps. The issue's bar: memory within 5 %, step time within 25 %.

Run it on a quiet machine: other work on the cores inflates the measured steps, and the cpu
target's peak, GEMM rate and bandwidth are measured by compile when it starts.

    bench/compile_validate.py [--steps 8] [--warmup 2] [--model llama-125m] [--moe-model gpt-oss-tiny]
                              [--only dense|moe] [key=value ...]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
TESSERA = os.path.join(BUILD, "tessera")
BASE = os.path.join(ROOT, "configs", "base.yml")

LAYOUTS = [  # (ranks, name, mesh keys): the dense model
    (1, "one", []),
    (2, "dp", ["ici_data_parallelism=2", "ici_fsdp_parallelism=1"]),
    (2, "fsdp", ["ici_fsdp_parallelism=2"]),
    (2, "tp", ["ici_tensor_parallelism=2", "ici_fsdp_parallelism=1"]),
    (4, "dp", ["ici_data_parallelism=4", "ici_fsdp_parallelism=1"]),
    (4, "fsdp", ["ici_fsdp_parallelism=4"]),
    (4, "tp", ["ici_tensor_parallelism=2", "ici_fsdp_parallelism=2"]),
]
MOE_LAYOUTS = [  # the mixture of experts, with the expert axis
    (1, "one", []),
    (2, "ep", ["ici_expert_parallelism=2", "ici_fsdp_parallelism=1"]),
    (4, "ep", ["ici_expert_parallelism=4", "ici_fsdp_parallelism=1"]),
    (4, "epxfsdp", ["ici_expert_parallelism=2", "ici_fsdp_parallelism=2"]),
]


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    return p.returncode, p.stdout


def predict(keys, topology):
    rc, out = run([TESSERA, "compile", BASE, f"compile_topology={topology}"] + keys)
    if rc not in (0, 4):
        sys.exit(f"tessera compile failed ({rc}):\n{out}")
    total = float(re.search(r"^\s+total\s+([\d.]+) GiB", out, re.M).group(1))
    step = float(re.search(r"estimated step time: ([\d.]+) s", out).group(1))
    return total, step


def measure(keys, ranks, threads, outdir, steps):
    train = [TESSERA, "train", BASE, "run_name=validate", f"base_output_directory={outdir}", f"steps={steps}",
             "log_period=1", "enable_checkpointing=false", "enable_tensorboard=false", f"num_threads={threads}"] + keys
    timed = ["/usr/bin/time", "-f", "%M", "-o", os.path.join(outdir, "rss")]
    if ranks == 1:
        cmd = timed + train
    else:
        # One time(1) per rank, each writing its own file (OpenMPI sets OMPI_COMM_WORLD_RANK).
        wrapper = os.path.join(outdir, "timed_rank.sh")
        with open(wrapper, "w") as f:
            f.write('#!/bin/sh\nexec /usr/bin/time -f %M -o "$RSS_DIR/rss.$OMPI_COMM_WORLD_RANK" "$@"\n')
        os.chmod(wrapper, 0o755)
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader,tcp",
               "-x", f"OMP_NUM_THREADS={threads}", "-x", f"RSS_DIR={outdir}"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += [wrapper] + train
    rc, out = run(cmd)
    if rc != 0:
        sys.exit(f"tessera train failed ({rc}):\n{out[-4000:]}")
    rss = []
    for name in os.listdir(outdir):
        if name.startswith("rss"):
            with open(os.path.join(outdir, name)) as f:
                text = f.read().split()
                if text:
                    rss.append(int(text[-1]) * 1024 / 2**30)
    seconds = [float(s) for s in re.findall(r"completed step: \d+, seconds: ([\d.]+)", out)]
    return max(rss), seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--model", default="llama-125m")
    ap.add_argument("--moe-model", default="gpt-oss-tiny")
    ap.add_argument("--only", choices=["dense", "moe"])
    ap.add_argument("keys", nargs="*", help="key=value for both commands")
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    common = ["per_device_batch_size=2", "max_target_length=256", "dtype=float32"] + a.keys
    rows = []
    if a.only != "moe":
        rows += [(a.model, *layout) for layout in LAYOUTS]
    if a.only != "dense":
        rows += [(a.moe_model, *layout) for layout in MOE_LAYOUTS]
    print(f"{cores} cores; {a.steps} steps, median after {a.warmup}")
    print(f"{'model':<13} {'ranks':>5} {'layout':<8} {'topology':<10} {'mem pred':>9} {'RSS':>9} {'ratio':>6} "
          f"{'step pred':>10} {'step meas':>10} {'ratio':>6}")
    worst_mem = worst_step = 0.0
    for model, ranks, name, mesh in rows:
        threads = max(1, cores // ranks)
        topology = f"cpu-{threads}x{ranks}"
        keys = [f"model_name={model}"] + common + mesh
        pred_mem, pred_step = predict(keys, topology)
        with tempfile.TemporaryDirectory() as d:
            rss, seconds = measure(keys, ranks, threads, d, a.steps)
        steady = seconds[a.warmup:] or seconds
        step = statistics.median(steady)
        mr, sr = pred_mem / rss, pred_step / step
        worst_mem, worst_step = max(worst_mem, abs(mr - 1)), max(worst_step, abs(sr - 1))
        note = " (oversubscribed)" if ranks > cores else ""
        print(f"{model:<13} {ranks:>5} {name:<8} {topology:<10} {pred_mem:>7.3f}Gi {rss:>7.3f}Gi {mr:>6.2f} "
              f"{pred_step:>9.3f}s {step:>9.3f}s {sr:>6.2f}{note}")
    print(f"worst: memory {100 * worst_mem:.1f}% (bar 5%), step time {100 * worst_step:.1f}% (bar 25%)")


if __name__ == "__main__":
    main()
