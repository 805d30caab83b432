#!/usr/bin/env python3
"""Check of gtrain's Hugging Face layout by transformers itself: GPT2LMHeadModel.from_pretrained(RUN_DIR)
(RUN_DIR/config.json and model.safetensors as gtrain wrote them: names, Conv1D [in, out] weights,
the tied head), eager attention, float32, eval() (no dropout), and the mean next-token loss over
the eval windows of a byte-level text file: consecutive windows of seq_len+1 bytes starting at 0,
stride seq_len, the first N of them (gtrain's eval set).

usage: hf_gpt2_loss.py RUN_DIR TEXT_FILE SEQ_LEN N_WINDOWS [VAL_FRACTION]
(VAL_FRACTION > 0: the windows come from the last VAL_FRACTION of the bytes, as gtrain's split.)
Run with the test references' Python ($GTRAIN_REFS_PY)."""
import os, sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import torch
import torch.nn.functional as F
import transformers


def main():
    if len(sys.argv) not in (5, 6):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    run, text, T, n_windows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    val_fraction = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    transformers.logging.set_verbosity_error()
    model = transformers.GPT2LMHeadModel.from_pretrained(run, attn_implementation="eager", dtype=torch.float32).eval()
    raw = open(text, "rb").read()
    if val_fraction > 0:
        raw = raw[int(len(raw) * (1 - val_fraction)):]
    data = torch.tensor(list(raw), dtype=torch.long)
    win = torch.stack([data[i * T: i * T + T + 1] for i in range(n_windows)])
    with torch.no_grad():
        logits = model(input_ids=win[:, :-1]).logits.float()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1))
    print(f"{loss.item():.9f}")


if __name__ == "__main__":
    main()
