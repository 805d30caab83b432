#!/usr/bin/env python3
"""scripts/ncu_summary.py - Nsight Compute's per-kernel times of one training step, summed per kernel
function, beside the cost model's prediction for the same function (scripts/device-check.sh's s6).

    ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \\
        gtrain ... (with GTRAIN_PROFILE_STEP=N: step N runs between cudaProfilerStart and Stop)
    scripts/ncu_summary.py NCU_OUTPUT [--json bench/gpu-model-predictions.json --case gpt2 --gpu H200]

NCU_OUTPUT is what ncu printed (its CSV rows may sit among the program's own lines): the header row
"ID","Process ID",...,"Kernel Name",...,"Metric Name","Metric Unit","Metric Value" and one row per
kernel launch. Kernels are grouped by function name without template arguments (the cost model's
grouping, gpu_model.kernel_base_name); every kernel of cuBLAS/cuBLASLt (nvjet, CUTLASS, split-K
reductions, ...) goes into one "cuBLAS" row, as the model charges cuBLAS calls by their FLOPs, not
by kernel. ncu runs the kernels one at a time, so the sum is kernel time without overlap or launch
gaps; the model's figure includes 3 us a launch. Prints one line "ncu-summary: ..." last, for the
device check's table. Exit 2 when the file holds no kernel rows."""
import argparse
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_model import kernel_base_name  # noqa: E402

UNIT_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
CUBLAS_MARKS = ("nvjet", "cutlass", "cublas", "xmma", "gemv", "gemmk", "gemmSN", "splitKreduce")


def is_cublas(full_name):
    return any(m in full_name for m in CUBLAS_MARKS)


def read_rows(path):
    """(kernel name, ns) per launch from ncu's CSV among other lines"""
    header, rows = None, []
    with open(path, errors="replace") as f:
        for line in f:
            if not line.startswith('"'):
                continue
            fields = next(csv.reader([line]))
            if fields[:2] == ["ID", "Process ID"]:
                header = {name: i for i, name in enumerate(fields)}
                continue
            if header is None or len(fields) != len(header):
                continue
            if fields[header["Metric Name"]] != "gpu__time_duration.sum":
                continue
            unit = fields[header["Metric Unit"]]
            if unit not in UNIT_NS:
                sys.exit("ncu_summary: %s: expected a time unit (%s), found '%s'" % (path, ", ".join(UNIT_NS), unit))
            value = float(fields[header["Metric Value"]].replace(",", ""))
            rows.append((fields[header["Kernel Name"]], value * UNIT_NS[unit]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ncu_output")
    ap.add_argument("--json", default="", help="the cost model's predictions (make gpu-model)")
    ap.add_argument("--case", default="", help="the model's case id (gpt2, mistral-dc)")
    ap.add_argument("--gpu", default="", help="the model's GPU name (H200, H100 SXM, RTX 4090)")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    rows = read_rows(a.ncu_output)
    if not rows:
        print("ncu_summary: %s: expected Nsight Compute CSV rows of gpu__time_duration.sum, found none"
              % a.ncu_output, file=sys.stderr)
        sys.exit(2)
    model = {}
    if a.json and a.case and a.gpu and os.path.exists(a.json):
        with open(a.json) as f:
            model = json.load(f).get("ops_ms", {}).get(a.case, {}).get(a.gpu, {})
    # the simulator names a kernel by its launch expression: fa_dkdv for fa_dkdv_kernel<HS, W>
    for g in list(model):
        if not g.endswith("_kernel") and g != "cuBLAS":
            model.setdefault(g + "_kernel", model.pop(g))
    groups = {}
    for name, ns in rows:
        g = "cuBLAS" if is_cublas(name) else kernel_base_name(name)
        acc = groups.setdefault(g, [0, 0.0])
        acc[0] += 1
        acc[1] += ns / 1e6
    total = sum(v[1] for v in groups.values())
    pred_total = sum(model.values())
    print("%d kernel launches, %.2f ms of kernel time (Nsight Compute, kernels one at a time)%s"
          % (len(rows), total, "; model %.2f ms for the same step on %s" % (pred_total, a.gpu) if model else ""))
    print("  %9s %6s %6s %12s %9s  %s" % ("ms", "share", "calls", "model ms", "measured/", "kernel"))
    print("  %9s %6s %6s %12s %9s  %s" % ("", "", "", "", "model", ""))
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][1])
    for g, (n, ms) in ranked[:a.top]:
        p = model.get(g)
        print("  %9.3f %5.1f%% %6d %12s %9s  %s" % (ms, 100 * ms / total, n, "%.3f" % p if p else "-",
                                                   "%.1fx" % (ms / p) if p else "-", g))
    rest = ranked[a.top:]
    if rest:
        print("  %9.3f %5.1f%% %6d %12s %9s  (%d other kernels)" % (sum(v[1] for _, v in rest),
              100 * sum(v[1] for _, v in rest) / total, sum(v[0] for _, v in rest), "", "", len(rest)))
    missing = sorted(g for g in model if g not in groups)
    if missing:
        print("  in the model but not measured: %s" % ", ".join(missing))
    worst = max(((ms / model[g], g) for g, (_, ms) in groups.items() if model.get(g)), default=None)
    print("ncu-summary: %d launches, %.2f ms kernel time%s%s" % (
        len(rows), total, " vs %.2f ms modelled" % pred_total if model else "",
        "; furthest from the model: %s %.1fx" % (worst[1], worst[0]) if worst else ""))


if __name__ == "__main__":
    main()
