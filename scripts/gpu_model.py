#!/usr/bin/env python3
"""scripts/gpu_model.py - the GPU cost model (make gpu-model): a roofline over the work the CUDA
simulator counts (cuda/sim/cost.cpp), for GPUs this project has not been lent.

For each case it runs build-cudasim/gtrain (the unchanged cuda/*.cu on the CPU) with GTCSIM_COST set
and max_steps 1: the simulator writes, per kernel name / cuBLAS shape / copy, the launches, the
device bytes first read and written (4 KiB pages, compulsory traffic), the tensor-core FLOPs (wmma
and mma.sync, 2mnk per warp MMA) and the cuBLAS FLOPs (2mnk) of the step (its timed window). The
simulator is slow, so the runs use fewer layers and batch rows than the case and scale exactly: the
work of a step is affine in the layer count L (identical layers) and in the batch rows B at a fixed
T, and bilinear in both, so runs at L in {1, 2} and B in {1, b} give every count at any L and B (t = (B - 1) / (b - 1)):
    w(L, B) = w11 + (L - 1)(w21 - w11) + t (w1b - w11) + (L - 1) t (w2b - w21 - w1b + w11).
cuBLAS shapes are named with their token-row dimension replaced by "rows" so that the same call
matches across the runs; the second B is chosen so that B T is not a model dimension (Mistral: B 3,
as 2 x 512 = 1024 is its kv width). (The LM-head chunks' rows depend on B: their sums are exact, their launch
count approximate.)

Per op and GPU: time = max(tensor FLOPs / bf16 tensor peak + fp32 FLOPs / fp32 peak,
bytes / memory bandwidth) + launches x launch overhead; copies with "Host" in their name move over
PCIe. Summed to a step time, tokens/s and "MFU" = the counted (executed) tensor-core + cuBLAS FLOPs /
(step time x bf16 peak); with recompute that counts the recomputed forward too (hardware FLOPs).
Every op runs at 100 % of peak FLOPs or bandwidth, so the step time is a lower bound: kernels that
reach a fraction of peak (the wmma attention) look cheaper here than they are. The exception: cuBLAS
calls off the 16-byte path (OFF_PATH_GEMM_EFF below) run at the fraction of peak measured for them.

THIS IS A MODEL, NOT A MEASUREMENT: no caches beyond a launch, no occupancy, no overlap between
ops, CUDA-core FLOPs of the non-GEMM kernels not counted (they are bandwidth-bound here), kernels
at the simulator's H100 shared-memory limits (the RTX 4090 row uses the same kernel choice).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

# Peak figures, dense (no sparsity), per GPU:
#   H100 SXM5: bf16 tensor 989.4 TFLOP/s, fp32 66.9 TFLOP/s, HBM3 3.35 TB/s
#     (NVIDIA H100 Tensor Core GPU datasheet, "H100 SXM" column; the sparse figure 1979 halved).
#   H200 SXM: bf16 tensor 989.4 TFLOP/s, fp32 66.9 TFLOP/s, HBM3e 4.8 TB/s
#     (NVIDIA H200 Tensor Core GPU datasheet: same GH100 compute as H100 SXM, 141 GB at 4.8 TB/s).
#   RTX 4090: bf16 tensor with fp32 accumulate 165.2 TFLOP/s, fp32 82.6 TFLOP/s, GDDR6X 1008 GB/s
#     (NVIDIA Ada Lovelace architecture whitepaper v2.1, appendix table 2: "Peak BF16 Tensor TFLOPS
#     with FP32 Accumulate" 165.2/330.4 dense/sparse; GeForce accumulate rate is half of FP16-acc).
#   Launch overhead: 3 us per kernel or library call on the stream, no CUDA graphs (a commonly
#     measured figure for back-to-back launches; an assumption, not a datasheet number).
#   PCIe: Gen5 x16 ~ 55 GB/s achieved (H100/H200 SXM hosts), Gen4 x16 ~ 25 GB/s (RTX 4090).
GPUS = [
    ("H100 SXM", 989.4e12, 66.9e12, 3.35e12, 55e9),
    ("H200", 989.4e12, 66.9e12, 4.8e12, 55e9),
    ("RTX 4090", 165.2e12, 82.6e12, 1.008e12, 25e9),
]
LAUNCH_S = 3e-6
# cuBLAS calls off the 16-byte path: the simulator names a cuBLASLt call "misaligned" when an operand's
# pointer, leading dimension or contiguous extent is not a multiple of 16 bytes (cuda/sim/cublas.cpp,
# gemm_audit), and the plain cuBLAS calls (cublasGemmEx, cublasSgemm: gemm's fallback) are named by
# their API. Such GEMMs run element-by-element-loading kernels: measured on an H200 with Nsight
# Compute (bench/device-check-h200-2026-12-04.md), GPT-2's three LM-head GEMMs on V = 50257 (3 x 25
# calls, 3.79 TFLOP) took 30.95 ms = 122.6 TFLOP/s = 12.4 % of the bf16 peak. That fraction of the
# peak (FLOPs, tensor and fp32 alike) is charged to every such call on every GPU here: an
# assumption outside the H200's LM head.
OFF_PATH_GEMM_EFF = 0.124


def off_path_gemm(kind, op):
    return kind == "blas" and (op.endswith(" misaligned") or op.startswith("cublasGemmEx") or op.startswith("cublasSgemm"))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_counts(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            kind, name, n, rd, wr, tc, fl = line.rstrip("\n").split("\t")
            rows[(kind, name)] = [float(n), float(rd), float(wr), float(tc), float(fl)]
    return rows


def chunk_rows_normalise(rows, model_dims):
    out = {}
    for (kind, name), v in rows.items():
        if kind == "blas":
            name = re.sub(r"\b([mnk]) (\d+)\b",
                          lambda m: m.group(0) if int(m.group(2)) in model_dims else m.group(1) + " rows", name)
        acc = out.setdefault((kind, name), [0.0] * 5)
        for i in range(5):
            acc[i] += v[i]
    return out


def run_case(case, L, B, work, log):
    """one simulated run: the counts of its step 2"""
    mdir = os.path.join(work, "L%dB%d" % (L, B))
    os.makedirs(mdir, exist_ok=True)
    with open(os.path.join(ROOT, case["model_json"])) as f:
        mj = json.load(f)
    mj[case["layers_key"]] = L
    mpath = os.path.join(mdir, "model.json")
    with open(mpath, "w") as f:
        json.dump(mj, f)
    counts = os.path.join(mdir, "counts.tsv")
    cmd = [os.path.join(ROOT, case["bin"]), "--config", os.path.join(ROOT, case["config"]),
           "--set", "model=" + mpath, "--set", "device=cuda",
           "--set", "data.train=" + os.path.join(ROOT, "data/tinyshakespeare.txt"), "--set", "data.format=text",
           "--set", "data.val=", "--set", "data.seq_len=%d" % case["T"],
           "--set", "per_device_train_batch_size=%d" % B, "--set", "train_batch_size=%d" % B,
           "--set", "gradient_accumulation_steps=1", "--set", "max_steps=1", "--set", "per_device_eval_batch_size=1", "--set", "logging_steps=1",
           "--set", "eval_steps=0", "--set", "eval_max_batches=1", "--set", "save_steps=0",
           "--set", "warmup_steps=0", "--set", "memory_limit=80GiB", "--set", "output_dir=" + os.path.join(mdir, "run")]
    for s in case["sets"]:
        cmd += ["--set", s]
    env = dict(os.environ, GTCSIM_COST=counts, GTCSIM_COST_FAST_BLAS="1")
    t0 = time.time()
    with open(log, "a") as lf:
        lf.write("$ " + " ".join(cmd) + "\n")
        lf.flush()
        r = subprocess.run(cmd, env=env, stdout=lf, stderr=subprocess.STDOUT)
    if r.returncode != 0 or not os.path.exists(counts):
        sys.exit("gpu_model: the simulated run L=%d B=%d of %s failed (exit %d); see %s" %
                 (L, B, case["title"], r.returncode, log))
    return read_counts(counts), time.time() - t0


def combine(w11, w21, w12, w22, L, B, b2=2):
    """w at any L, B from runs at L 1, 2 and B 1, b2"""
    keys = set(w11) | set(w21) | set(w12) | set(w22)
    z = [0.0] * 5
    out = {}
    for k in keys:
        a, b, c, d = (w.get(k, z) for w in (w11, w21, w12, w22))
        t = (B - 1) / (b2 - 1)
        v = [a[i] + (L - 1) * (b[i] - a[i]) + t * (c[i] - a[i]) + (L - 1) * t * (d[i] - b[i] - c[i] + a[i])
             for i in range(5)]
        if any(abs(x) > 1e-9 for x in v):
            out[k] = [max(x, 0.0) for x in v]
    return out


def roofline(ops, gpu):
    name, tc_peak, fp_peak, bw, pcie = gpu
    res = []
    for (kind, op), (n, rd, wr, tc, fl) in ops.items():
        compute = (tc / tc_peak + fl / fp_peak) / (OFF_PATH_GEMM_EFF if off_path_gemm(kind, op) else 1.0)
        memory = (rd + wr) / (pcie if "Host" in op else bw)
        t = max(compute, memory) + n * LAUNCH_S
        res.append((t, kind, op, n, rd + wr, tc + fl, "compute" if compute >= memory else "memory"))
    res.sort(reverse=True)
    return res


def op_group(kind, op):
    """the name Nsight Compute's per-kernel table is matched on (scripts/ncu_summary.py): a kernel's
    function name without template arguments, every cuBLAS call as "cuBLAS"; None for copies"""
    if kind == "blas":
        return "cuBLAS"
    if kind != "kernel":
        return None
    return kernel_base_name(op)


def kernel_base_name(name):
    """'(map_kernel<Out, In, Op>)' or 'void ns::fa_dq_kernel<64, 8>(...)' -> 'map_kernel', 'fa_dq_kernel'"""
    name = name.replace("(anonymous namespace)::", "").strip()
    if name.startswith("(") and name.endswith(")"):
        name = name[1:-1]
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch in "<(" and depth == 0:
            cut = i
            break
    return name[:cut].split("::")[-1].strip()


def ops_by_group(ops, gpu):
    """predicted ms per op_group on gpu, for the device check's per-kernel comparison"""
    out = {}
    for t, kind, op, _n, _b, _fl, _bound in roofline(ops, gpu):
        g = op_group(kind, op)
        if g:
            out[g] = out.get(g, 0.0) + t * 1e3
    return out


def report(case, ops, sim_s, top):
    L, B, T = case["L"], case["B"], case["T"]
    flops = sum(v[3] + v[4] for v in ops.values())
    byts = sum(v[1] + v[2] for v in ops.values())
    launches = sum(v[0] for v in ops.values())
    print()
    print("== %s: L %d, B %d, T %d  -- THIS IS A MODEL, NOT A MEASUREMENT (scripts/gpu_model.py)" % (case["title"], L, B, T))
    print("   counted per step: %.2f TFLOP (tensor-core + cuBLAS), %.2f GB device traffic, %d launches; simulated in %.0f s"
          % (flops / 1e12, byts / 1e9, launches, sim_s))
    print("   %-9s %10s %10s %8s %10s %10s %10s" % ("GPU", "step ms", "tok/s", "MFU", "compute ms", "memory ms", "launch ms"))
    for g in GPUS:
        res = roofline(ops, g)
        step = sum(r[0] for r in res)
        comp = sum(r[0] - r[3] * LAUNCH_S for r in res if r[6] == "compute")
        mem = sum(r[0] - r[3] * LAUNCH_S for r in res if r[6] == "memory")
        tok = B * T / step
        print("   %-9s %10.1f %10.0f %7.1f%% %10.1f %10.1f %10.1f" % (g[0], step * 1e3, tok, 100 * flops / (step * g[1]),
                                                                  comp * 1e3, mem * 1e3, launches * LAUNCH_S * 1e3))
    g = GPUS[0]
    res = roofline(ops, g)
    step = sum(r[0] for r in res)
    print("   top %d ops on %s (time = max(FLOPs/peak, bytes/bandwidth) + launches x %.0f us):" % (top, g[0], LAUNCH_S * 1e6))
    print("   %6s %8s %9s %9s %-8s %s" % ("share", "ms", "launches", "GB", "bound", "op"))
    for t, kind, op, n, b, fl, bound in res[:top]:
        print("   %5.1f%% %8.2f %9d %9.3f %-8s %s %s" % (100 * t / step, t * 1e3, n, b / 1e9, bound, kind, op))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("GPU_MODEL_BIN", "build-cudasim/gtrain"))
    ap.add_argument("--only", default="", help="comma-separated case ids (gpt2, gpt2-rc, mistral, mistral-rc)")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--reuse", default="", help="read the counts of an earlier run's work folder instead of simulating")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench/gpu-model-predictions.json"),
                    help="merge the predicted step ms into this file (scripts/device-check.sh reads it)")
    a = ap.parse_args()
    gpt2_dims = {768, 2304, 3072, 50257, 50256, 64, 12}  # 50256: the aligned part of V (gemm_align.cu)
    mis_dims = {4096, 1024, 6144, 14336, 28672, 32000, 128, 32, 8} | {16 * i for i in range(1, 9)}
    cases = [
        dict(id="gpt2", title="GPT-2 124M bf16", model_json="configs/gpt2-124m.json", layers_key="n_layer",
             config="configs/gpt2-124m.yaml", L=12, B=16, T=1024, dims=gpt2_dims,
             sets=["precision=bf16", "gradient_checkpointing=false"]),
        dict(id="gpt2-rc", title="GPT-2 124M bf16, every layer recomputed", model_json="configs/gpt2-124m.json",
             layers_key="n_layer", config="configs/gpt2-124m.yaml", L=12, B=16, T=1024, dims=gpt2_dims,
             sets=["precision=bf16", "gradient_checkpointing=true", "gradient_checkpointing_kwargs.every_n_layers=1"]),
        dict(id="mistral", title="Mistral-7B LoRA r 16 bf16", model_json="configs/mistral-7b-v0.1.json",
             layers_key="num_hidden_layers", config="configs/mistral-7b-lora-r16.yaml", L=32, B=4, T=512,
             dims=mis_dims, b2=3, sets=["gradient_checkpointing=false", "lora.lora_dropout=0"],
             device_check=[("mistral-dc", 2, 4)]),
        dict(id="mistral-rc", title="Mistral-7B LoRA r 16 bf16, every layer recomputed",
             model_json="configs/mistral-7b-v0.1.json", layers_key="num_hidden_layers",
             config="configs/mistral-7b-lora-r16.yaml", L=32, B=4, T=512, dims=mis_dims, b2=3,
             sets=["gradient_checkpointing=true", "gradient_checkpointing_kwargs.every_n_layers=1", "lora.lora_dropout=0"]),
    ]
    only = set(x for x in a.only.split(",") if x)
    unknown = sorted(only - {c["id"] for c in cases})
    if unknown:  # a misspelt case would otherwise run nothing for it, silently
        print("gpu-model: --only (GPU_MODEL_CASES): expected case ids among %s, found %s (mistral-dc is part "
              "of mistral)" % (", ".join(c["id"] for c in cases), ", ".join(unknown)), file=sys.stderr)
        sys.exit(2)
    work = a.reuse or tempfile.mkdtemp(prefix="gpu-model.")
    log = os.path.join(work, "sim.log")
    print("gpu-model: a roofline over the simulator's counts; sim log in %s" % log)
    out, by_group = {}, {}
    for c in cases:
        if only and c["id"] not in only:
            continue
        c["bin"] = a.bin
        t0 = time.time()
        w = {}
        b2 = c.get("b2", 2)
        for L in (1, 2):
            for B in (1, b2):
                done = os.path.join(work, c["id"], "L%dB%d" % (L, B), "counts.tsv")
                if a.reuse and os.path.exists(done):
                    counts = read_counts(done)
                else:
                    counts, _ = run_case(c, L, B, os.path.join(work, c["id"]), log)
                w[(L, 1 if B == 1 else 2)] = chunk_rows_normalise(counts, c["dims"])
        ops = combine(w[(1, 1)], w[(2, 1)], w[(1, 2)], w[(2, 2)], c["L"], c["B"], b2)
        report(c, ops, time.time() - t0, a.top)
        out[c["id"]] = {g[0]: sum(r[0] for r in roofline(ops, g)) * 1e3 for g in GPUS}
        by_group[c["id"]] = {g[0]: ops_by_group(ops, g) for g in GPUS}
        for dc_id, dc_L, dc_B in c.get("device_check", []):  # the device check's smaller runs
            dops = combine(w[(1, 1)], w[(2, 1)], w[(1, 2)], w[(2, 2)], dc_L, dc_B, b2)
            out[dc_id] = {g[0]: sum(r[0] for r in roofline(dops, g)) * 1e3 for g in GPUS}
            by_group[dc_id] = {g[0]: ops_by_group(dops, g) for g in GPUS}
    if a.json and out:
        old = {}
        if os.path.exists(a.json):
            with open(a.json) as f:
                old = json.load(f)
        step_ms, ops_ms = old.get("step_ms", {}), old.get("ops_ms", {})
        step_ms.update(out)
        ops_ms.update(by_group)
        with open(a.json, "w") as f:
            json.dump({"step_ms": step_ms, "ops_ms": ops_ms,
                       "note": "predicted step ms, and ms per kernel (function name) and for all cuBLAS calls: a "
                               "model, not a measurement (make gpu-model)"}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
