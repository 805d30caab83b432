#!/usr/bin/python3
"""torch_svd.py - an independent reference for tests/test_svd.c: torch.linalg.svd (float64) of a
raw little-endian float32 matrix [rows, cols]; writes S [k], U [rows, k], Vh [k, cols] as raw
float64 to OUT.S, OUT.U, OUT.Vh (k = min(rows, cols), full_matrices=False as PEFT calls it).
usage: torch_svd.py IN.f32 ROWS COLS OUT"""
import sys

import torch


def main():
    path, rows, cols, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    w = torch.frombuffer(raw, dtype=torch.float32).reshape(rows, cols).to(torch.float64)
    u, s, vh = torch.linalg.svd(w, full_matrices=False)
    for name, t in (("S", s), ("U", u), ("Vh", vh)):
        with open(out + "." + name, "wb") as f:
            f.write(t.contiguous().numpy().tobytes())


if __name__ == "__main__":
    main()
