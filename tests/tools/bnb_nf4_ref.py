#!/usr/bin/python3
"""bnb_nf4_ref.py - an independent reference for tests/test_nf4.c: bitsandbytes' own NF4
quantize_4bit / dequantize_4bit (its CPU path) on raw little-endian float32 inputs.
usage: bnb_nf4_ref.py DIR NAME:NUMEL:BLOCKSIZE:NESTED ...
For each case reads DIR/NAME.f32 and writes DIR/NAME.{packed,absmax,nested,offset,deq32,deq16}
(packed uint8 codes; absmax uint8 or float32; nested_absmax float32; the offset float32; the values
dequantized as float32 and as bfloat16) and once DIR/codes.f32 (the NF4 table, then the dynamic
map of the nested absmax)."""
import os
import sys
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import bitsandbytes.functional as F  # noqa: E402


def save(path, t):
    with open(path, "wb") as f:
        f.write(t.contiguous().view(torch.uint8).numpy().tobytes())


def main():
    d = sys.argv[1]
    nf4 = F.get_4bit_type("nf4", device="cpu").to(torch.float32)
    dyn = F.create_dynamic_map(signed=True).to(torch.float32)
    save(os.path.join(d, "codes.f32"), torch.cat([nf4, dyn]))
    for case in sys.argv[2:]:
        name, numel, bs, nested = case.split(":")
        numel, bs, nested = int(numel), int(bs), nested == "1"
        with open(os.path.join(d, name + ".f32"), "rb") as f:
            x = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
        assert x.numel() == numel
        packed, st = F.quantize_4bit(x, blocksize=bs, quant_type="nf4", compress_statistics=nested)
        p = os.path.join(d, name)
        save(p + ".packed", packed.flatten())
        save(p + ".absmax", st.absmax)
        if nested:
            save(p + ".nested", st.state2.absmax.to(torch.float32))
            save(p + ".offset", st.offset.reshape(1).to(torch.float32))
        save(p + ".deq32", F.dequantize_4bit(packed, st))
        st.dtype = torch.bfloat16
        save(p + ".deq16", F.dequantize_4bit(packed, st))


if __name__ == "__main__":
    main()
