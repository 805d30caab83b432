#!/usr/bin/env python3
"""hf_trainer_ref.py - the real Hugging Face transformers.Trainer (v5) as the reference for gtrain's
training loop: gradient accumulation (num_items_in_batch), activation checkpointing (every_n_layers,
offload), the pre-2024 per-micro-batch loss ("steps"), AdamW parameter groups, the LR schedule.

Nothing here is gtrain's: the model is transformers' LlamaForCausalLM, the loop is Trainer.train(),
the optimizer torch's AdamW as Trainer builds it, the sampler Trainer's own SequentialSampler
(train_sampling_strategy="sequential"), the batches a right-padding collator (labels -100 on prompt
and padding) as SFT scripts write it.

usage (with the test references' Python, $GTRAIN_REFS_PY):
  hf_trainer_ref.py run CONFIG.json WORKDIR VARIANTS.json [--seed S] [--n 16] [--max-len 25] [--config2 C2.json]
    WORKDIR/base: AutoModelForCausalLM.from_config(CONFIG) with torch.manual_seed(S) (norm weights
                  uniform in [0.5, 1.5], biases in [-1, 1]), save_pretrained (safetensors, fp32);
    WORKDIR/base2: the same from C2.json (the same vocab_size), when given;
    WORKDIR/train.jsonl: n rows {"prompt_ids": [...], "completion_ids": [...]} of 4 .. max-len tokens,
                  different numbers of completion tokens (random.Random(S + 1));
    VARIANTS.json: {"common": {TrainingArguments...},
                    "variants": [{"name": N, "args": {...}, "loss": "tokens"|"steps", "base": "base"|"base2"}]}
    each variant trains a fresh copy of its base (default base); writes WORKDIR/hf/N/model.safetensors,
    WORKDIR/hf/N/result.txt (the lists below as "key v1 v2 ..." lines) and
    WORKDIR/hf/N/result.json: {"logged_loss": [per step, Trainer's log_history],
                    "token_mean_loss": [per step: sum of the token losses / num_items of the step, from
                    the micro-batches' losses as the model returned them], "lr": [lr of each step's update],
                    "grad_norm": [...], "decay": [names], "no_decay": [names]}
  hf_trainer_ref.py compare A.safetensors B.safetensors [...]
    per pair one line "max_abs D max_ref R tensors N worst NAME" (same tensor names and shapes, or exit 2)
"""
import json, math, os, sys


def die(msg):
    print(f"hf_trainer_ref.py: {msg}", file=sys.stderr)
    sys.exit(2)


def make_model(config, outdir, seed):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    with open(config) as f:
        d = json.load(f)
    cfg = AutoConfig.for_model(d.pop("model_type"), **d)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.float32)
    with torch.no_grad():  # norms away from 1 and biases away from 0, so that a decay on them (or not) shows
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(0.5, 1.5)
            elif n.endswith(".bias"):
                p.uniform_(-1.0, 1.0)
    model.save_pretrained(outdir, safe_serialization=True)


def make_data(out, n, max_len, vocab, seed):
    import random
    rng = random.Random(seed)
    with open(out, "w") as f:
        for i in range(n):
            total = rng.randint(4, max_len)
            c = rng.randint(1, total - 2) if i % 3 else rng.randint(1, 3)  # some rows with few completion tokens
            p = total - c
            ids = [rng.randrange(3, vocab) for _ in range(total)]
            f.write(json.dumps({"prompt_ids": ids[:p], "completion_ids": ids[p:]}) + "\n")


def read_rows(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                ids = r["prompt_ids"] + r["completion_ids"]
                rows.append({"input_ids": ids, "labels": [-100] * len(r["prompt_ids"]) + r["completion_ids"]})
    return rows


def collate(batch):
    """right padding: pad id 0, attention 0, label -100"""
    import torch
    L = max(len(b["input_ids"]) for b in batch)
    ids = torch.zeros(len(batch), L, dtype=torch.long)
    att = torch.zeros(len(batch), L, dtype=torch.long)
    lab = torch.full((len(batch), L), -100, dtype=torch.long)
    for i, b in enumerate(batch):
        n = len(b["input_ids"])
        ids[i, :n] = torch.tensor(b["input_ids"])
        att[i, :n] = 1
        lab[i, :n] = torch.tensor(b["labels"])
    return {"input_ids": ids, "attention_mask": att, "labels": lab}


def cmd_run(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="hf_trainer_ref.py run")
    ap.add_argument("config"); ap.add_argument("workdir"); ap.add_argument("variants")
    ap.add_argument("--seed", type=int, default=0); ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=25); ap.add_argument("--config2")
    a = ap.parse_args(argv)
    with open(a.config) as f:
        vocab = json.load(f)["vocab_size"]
    make_model(a.config, os.path.join(a.workdir, "base"), a.seed)
    if a.config2:
        with open(a.config2) as f:
            if json.load(f)["vocab_size"] != vocab:
                die(f"{a.config2}: another vocab_size than {a.config}'s")
        make_model(a.config2, os.path.join(a.workdir, "base2"), a.seed)
    make_data(os.path.join(a.workdir, "train.jsonl"), a.n, a.max_len, vocab, a.seed + 1)
    train(a.workdir, os.path.join(a.workdir, "train.jsonl"), os.path.join(a.workdir, "hf"), a.variants)


def train(workdir, data, outroot, vpath):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # a tiny model: one thread is as fast, and the suite runs tests side by side
    with open(vpath) as f:
        spec = json.load(f)
    rows = read_rows(data)

    class Recording(Trainer):
        """Trainer as it is; compute_loss only records each micro-batch's loss as the model returned it
        and its number of predicted tokens (labels[..., 1:] != -100), to rebuild the step's token mean."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            n = int((inputs["labels"][..., 1:] != -100).sum())
            out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            loss = out[0] if return_outputs else out
            # the loss's token sum: times num_items_in_batch where the model normalised by it, else times n
            scale = float(num_items_in_batch) if (self.model_accepts_loss_kwargs and num_items_in_batch is not None) else n
            self.micro.append((float(loss.detach()) * scale, n))
            return out

    class StepEnd(TrainerCallback):
        def __init__(self, tr):
            self.tr = tr

        def on_step_end(self, args, state, control, **kw):
            s = sum(x for x, _ in self.tr.micro)
            n = sum(k for _, k in self.tr.micro)
            self.tr.token_mean.append(s / n)
            self.tr.micro.clear()

    for v in spec["variants"]:
        name = v["name"]
        out = os.path.join(outroot, name)
        kw = dict(spec["common"])
        kw.update(v.get("args", {}))
        args = TrainingArguments(output_dir=out, **kw)
        model_dir = os.path.join(workdir, v.get("base", "base"))
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
        tr = Recording(model=model, args=args, train_dataset=rows, data_collator=collate)
        tr.micro, tr.token_mean = [], []
        if v.get("loss", "tokens") == "steps":
            # the pre-2024 loss: each micro-batch's mean over its own tokens, divided by the accumulation
            # count (training_step: loss_is_scaled_for_ga False -> loss / current_gradient_accumulation_steps;
            # _get_num_items_in_batch -> None, so the model takes the plain mean)
            tr.model_accepts_loss_kwargs = False
        elif not tr.model_accepts_loss_kwargs:
            die(f"{type(model).__name__} does not accept loss kwargs: num_items_in_batch would not be used")
        tr.add_callback(StepEnd(tr))
        decay = set(tr.get_decay_parameter_names(model))
        tr.train()
        tr.save_model(out)
        logs = [h for h in tr.state.log_history if "loss" in h and "step" in h and "train_loss" not in h]
        res = {
            "logged_loss": [h["loss"] for h in logs],
            "lr": [h["learning_rate"] for h in logs],
            "grad_norm": [h.get("grad_norm") for h in logs],
            "token_mean_loss": tr.token_mean,
            "decay": sorted(n for n, _ in model.named_parameters() if n in decay),
            "no_decay": sorted(n for n, _ in model.named_parameters() if n not in decay),
            "gradient_checkpointing": [bool(getattr(l, "gradient_checkpointing", False)) for l in model.model.layers],
        }
        if len(res["logged_loss"]) != args.max_steps or len(tr.token_mean) != args.max_steps:
            die(f"{name}: {len(res['logged_loss'])} logged steps, {len(tr.token_mean)} recorded, expected {args.max_steps}")
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump(res, f)
        with open(os.path.join(out, "result.txt"), "w") as f:  # for the C test: "key v1 v2 ..." lines
            for k in ("logged_loss", "token_mean_loss", "lr", "grad_norm", "gradient_checkpointing"):
                f.write(k + "".join(f" {float(x):.17g}" for x in res[k]) + "\n")
            f.write(f"n_decay {len(res['decay'])}\nn_no_decay {len(res['no_decay'])}\n")


def cmd_compare(argv):
    if len(argv) < 2 or len(argv) % 2:
        die("compare A.safetensors B.safetensors [A2 B2 ...]")
    for i in range(0, len(argv), 2):
        compare(argv[i], argv[i + 1])


def compare(pa, pb):
    from safetensors.numpy import load_file
    a, b = load_file(pa), load_file(pb)
    if set(a) != set(b):
        die(f"different tensors: only in A {sorted(set(a) - set(b))}, only in B {sorted(set(b) - set(a))}")
    worst, ref, where = 0.0, 0.0, ""
    for k in sorted(a):
        if a[k].shape != b[k].shape:
            die(f"{k}: shape {a[k].shape} vs {b[k].shape}")
        d = float(abs(a[k].astype("float64") - b[k].astype("float64")).max())
        ref = max(ref, float(abs(b[k].astype("float64")).max()))
        if d > worst:
            worst, where = d, k
    print(f"max_abs {worst:.9g} max_ref {ref:.9g} tensors {len(a)} worst {where or '-'}")


def main():
    if len(sys.argv) < 2:
        die("expected run or compare")
    cmds = {"run": cmd_run, "compare": cmd_compare}
    if sys.argv[1] not in cmds:
        die(f"unknown command {sys.argv[1]!r}")
    cmds[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
