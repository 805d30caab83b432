#!/usr/bin/env python3
"""peft_lora.py - an independent PyTorch reference for LoRA and PiSSA fine-tuning of the Llama family,
written from Hugging Face PEFT's definitions (peft/tuners/lora: LoraConfig, LoraLayer's forward,
reset_lora_parameters, pissa_init; peft_model.py's save_pretrained with
path_initial_model_for_weight_conversion and subtract_mutated_init; utils/save_and_load.py's key names)
and from nothing of gtrain's. The model is tests/tools/hf_llama.py's (its own HF forward, safetensors
reader and writer); this file adds the adapters through forward()'s lora hook. No peft or transformers
package is used.

LoRA (PEFT's Linear.forward, dropout 0): y = base(x) + scale * lora_B(lora_A(x)), with
lora_A [r, in], lora_B [out, r], scale = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora.
Adapter directories as PEFT's save_pretrained writes them:
  adapter_model.safetensors  base_model.model.model.layers.L.self_attn.{q,k,v,o}_proj.lora_{A,B}.weight,
                             base_model.model.model.layers.L.mlp.{gate,up,down}_proj.lora_{A,B}.weight,
                             __metadata__ {"format": "pt"}
  adapter_config.json        LoraConfig's fields, json.dumps(indent=2, sort_keys=True)
PiSSA (pissa_init): W the base weight; "pissa": U, S, Vh = torch.linalg.svd(W, full_matrices=False), the
top r; "pissa_niter_N": U, S, V = torch.svd_lowrank(W, q=r, niter=N), Vh = V.T; Sr = S / scale;
lora_A = diag(sqrt(Sr)) @ Vh, lora_B = U @ diag(sqrt(Sr)), and the base becomes W_res = W - scale * B @ A.
Deviation, on purpose: everything (the SVD included) runs in float64, where PEFT runs the SVD in the
weight's float32; gtrain also runs its SVD in double.
Saving a trained PiSSA adapter (PEFT's conversion to a plain LoRA relative to the original base):
lora_A' = cat([A, A0], 0), lora_B' = cat([B, -B0], 1), r' = 2r, lora_alpha' = 2 alpha (use_rslora:
sqrt(2) alpha, so that alpha / sqrt(r) is kept, as PEFT >= 0.12 writes it), init_lora_weights true;
the initial adapter (A0, B0, init_lora_weights true) is written to OUT/pissa_init as PEFT's recipe does.

Training (as HF's Trainer runs a PEFT model): the base frozen, the adapters trained by
torch.optim.AdamW(foreach=False) in float64 with weight decay on every lora_A / lora_B (2-D weights:
get_decay_parameter_names keeps them), constant lr, torch.nn.utils.clip_grad_norm_ over the adapters,
full batch of all the rows every step.

usage (/usr/bin/python3 with Debian's python3-torch; CPU only):
  peft_lora.py make-adapter MODELDIR OUTDIR --r R --alpha A --targets q_proj,v_proj|all-linear
                  [--rslora] [--seed S] [--std 0.02] [--dtype f32|bf16]
  peft_lora.py train MODELDIR TOKENS.txt (--adapter DIR | --init true|gaussian|pissa|pissa_niter_N --r R
                  --alpha A --targets ... [--rslora] [--seed S]) [--steps 5 --lr 1e-3 --weight-decay 0.1
                  --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 1.0] [--out DIR] [--digits 17]
  peft_lora.py loss MODELDIR ADAPTERDIR TOKENS.txt [--digits 17]
  peft_lora.py pissa-check MODELDIR ADAPTERDIR [--tol 1e-5]
  peft_lora.py selftest
TOKENS.txt as hf_llama.py reads it (one row per line, whitespace-separated ids); the loss is the mean
over every predicted token of every row. train prints "step k loss L grad_norm G" (the loss before the
step's update, G before clipping), then "final loss L" (after the last update).
pissa-check: an adapter made by pissa_init from MODELDIR's weights (someone else's): scale * B @ A must
equal the top-r part U_r diag(S_r) Vh_r of each base weight (sign-free), to tol relative in the
Frobenius norm; prints the worst module.
"""
import argparse, json, math, os, sys
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_llama as hl  # noqa: E402

CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"
PREFIX = "base_model.model."
# PEFT's target names of the Llama family, their place in a layer, in the layer's order
MODULES = [("q_proj", "self_attn.q_proj"), ("k_proj", "self_attn.k_proj"), ("v_proj", "self_attn.v_proj"),
           ("o_proj", "self_attn.o_proj"), ("gate_proj", "mlp.gate_proj"), ("up_proj", "mlp.up_proj"),
           ("down_proj", "mlp.down_proj")]


def die(msg):
    print(f"peft_lora.py: {msg}", file=sys.stderr)
    sys.exit(2)


def dims(c, name):
    """(out, in) of a module."""
    q, kv, H, I = c.heads * c.head_dim, c.kv_heads * c.head_dim, c.hidden, c.inter
    return {"q_proj": (q, H), "k_proj": (kv, H), "v_proj": (kv, H), "o_proj": (H, q),
            "gate_proj": (I, H), "up_proj": (I, H), "down_proj": (H, I)}[name]


def scaling(alpha, r, rslora):
    return alpha / math.sqrt(r) if rslora else alpha / r


def parse_targets(t):
    """target_modules as PEFT holds it: "all-linear", a list, or "a,b" on the command line -> module names
    (PEFT's suffix match: "q_proj" or "self_attn.q_proj"), in layer order."""
    if isinstance(t, str):
        if t == "all-linear":  # every linear layer but the output layer
            return [n for n, _ in MODULES]
        t = [s for s in t.split(",") if s]
    if not isinstance(t, list) or not t:
        die(f"target_modules {t!r}: expected a non-empty list or \"all-linear\"")
    out = set()
    for name in t:
        hits = [n for n, path in MODULES if path == name or path.endswith("." + name)]
        if not hits:
            die(f"target_modules: {name!r} names no linear module of a Llama layer")
        out.update(hits)
    return [n for n, _ in MODULES if n in out]


def path_of(name):
    return dict(MODULES)[name]


def key(layer, name, which):
    return f"{PREFIX}model.layers.{layer}.{path_of(name)}.lora_{which}.weight"


class Adapter:
    """lora_A / lora_B per (layer, module) as float64 tensors, and the config that scales them."""

    def __init__(self, c, r, alpha, targets, rslora):
        self.c, self.r, self.alpha, self.targets, self.rslora = c, r, float(alpha), targets, rslora
        self.scale = scaling(self.alpha, r, rslora)
        self.A, self.B = {}, {}  # keyed by the module's HF prefix "model.layers.L.self_attn.q_proj"

    def sites(self):
        for l in range(self.c.layers):
            for n in self.targets:
                yield l, n, f"model.layers.{l}.{path_of(n)}"

    def hook(self):
        def lora(module, h):
            if module not in self.A:
                return None
            return self.scale * F.linear(F.linear(h, self.A[module]), self.B[module])
        return lora

    def params(self):
        return [t for m in self.A for t in (self.A[m], self.B[m])]


def read_config(d):
    p = os.path.join(d, CONFIG_FILE)
    try:
        cfg = json.load(open(p))
    except (OSError, ValueError) as e:
        die(f"{p}: {e}")
    for k, want in (("peft_type", "LORA"), ("bias", "none")):
        if cfg.get(k, want) != want:
            die(f"{p}: {k} is {cfg.get(k)!r}, expected {want!r}")
    for k in ("fan_in_fan_out", "use_dora"):
        if cfg.get(k):
            die(f"{p}: {k} true is not a plain Llama LoRA")
    if cfg.get("modules_to_save"):
        die(f"{p}: modules_to_save is not supported")
    r, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if not isinstance(r, int) or r < 1 or not isinstance(alpha, (int, float)) or not alpha > 0:
        die(f"{p}: r {r!r} / lora_alpha {alpha!r}: expected a positive integer and a positive number")
    return cfg


def load_adapter(c, d):
    cfg = read_config(d)
    a = Adapter(c, cfg["r"], cfg["lora_alpha"], parse_targets(cfg.get("target_modules")), bool(cfg.get("use_rslora")))
    T = hl.st_read(os.path.join(d, WEIGHTS_FILE))
    want = set()
    for l, n, m in a.sites():
        o, i = dims(c, n)
        for which, shape in (("A", (a.r, i)), ("B", (o, a.r))):
            k = key(l, n, which)
            want.add(k)
            if k not in T:
                die(f"{d}/{WEIGHTS_FILE}: tensor {k} missing")
            if tuple(T[k].shape) != shape:
                die(f"{d}/{WEIGHTS_FILE}: tensor {k}: expected shape {list(shape)}, found {list(T[k].shape)}")
            (a.A if which == "A" else a.B)[m] = T[k].clone()
    extra = sorted(set(T) - want)
    if extra:
        die(f"{d}/{WEIGHTS_FILE}: tensors the config's target_modules do not name: {extra[:3]}")
    return a, cfg


def save_adapter(d, a, base, st_dtype="F32", init="true", r=None, alpha=None, A=None, B=None):
    """PEFT's save_pretrained: the tensors in the model's order (layer, module, lora_A then lora_B) and the config."""
    os.makedirs(d, exist_ok=True)
    A, B = A or a.A, B or a.B
    items = []
    for l, n, m in a.sites():
        items += [(key(l, n, "A"), A[m].detach()), (key(l, n, "B"), B[m].detach())]
    hl.st_write(os.path.join(d, WEIGHTS_FILE), items, st_dtype)
    alpha = a.alpha if alpha is None else alpha
    cfg = {
        "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": base, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True,
        "init_lora_weights": True if init == "true" else False if init == "false" else init,
        "layer_replication": None, "layers_pattern": None, "layers_to_transform": None, "loftq_config": {},
        "lora_alpha": int(alpha) if float(alpha).is_integer() else alpha, "lora_dropout": 0.0,
        "megatron_config": None, "megatron_core": "megatron.core", "modules_to_save": None, "peft_type": "LORA",
        "r": a.r if r is None else r, "rank_pattern": {}, "revision": None, "target_modules": sorted(a.targets),
        "task_type": "CAUSAL_LM", "use_dora": False, "use_rslora": a.rslora,
    }
    with open(os.path.join(d, CONFIG_FILE), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True))


# ---------------------------------------------------------------- initialisations
def init_plain(a, how, seed):
    """PEFT's reset_lora_parameters: true: lora_A kaiming_uniform_(a=sqrt(5)) (U(-1/sqrt(in), 1/sqrt(in))),
    lora_B 0; gaussian: lora_A normal(0, 1/r), lora_B 0 (torch's own random numbers: not gtrain's)."""
    g = torch.Generator().manual_seed(seed)
    for l, n, m in a.sites():
        o, i = dims(a.c, n)
        if how == "gaussian":
            A = torch.randn((a.r, i), generator=g, dtype=torch.float64) / a.r
        else:
            bound = 1.0 / math.sqrt(i)
            A = (torch.rand((a.r, i), generator=g, dtype=torch.float64) * 2 - 1) * bound
        a.A[m], a.B[m] = A, torch.zeros((o, a.r), dtype=torch.float64)


def topr(W, r, niter):
    """U [rows, r], S [r], Vh [r, cols]: exact (niter None) or torch.svd_lowrank(W, q=r, niter)."""
    if niter is None:
        U, S, Vh = torch.linalg.svd(W, full_matrices=False)
        return U[:, :r], S[:r], Vh[:r]
    U, S, V = torch.svd_lowrank(W, q=r, niter=niter)
    return U, S, V.t()


def pissa_niter(init):
    if init == "pissa":
        return None
    if init.startswith("pissa_niter_") and init[len("pissa_niter_"):].isdigit():
        return int(init[len("pissa_niter_"):])
    die(f"init {init!r}: expected true, gaussian, pissa or pissa_niter_N")


def init_pissa(a, P, niter, seed):
    """pissa_init on every adapted module: the adapters, and P's base weights replaced by W_res."""
    torch.manual_seed(seed)  # svd_lowrank's Gaussian test matrix
    for l, n, m in a.sites():
        W = P[m + ".weight"]
        U, S, Vh = topr(W, a.r, niter)
        Sr = S / a.scale
        A = torch.diag(torch.sqrt(Sr)) @ Vh
        B = U @ torch.diag(torch.sqrt(Sr))
        a.A[m], a.B[m] = A, B
        P[m + ".weight"] = W - a.scale * B @ A


# ---------------------------------------------------------------- commands
def model_rows(mdir, tokens):
    c, W = hl.load_model(mdir)
    rows = hl.read_rows(tokens)
    idx, tgt = hl.batch(rows, c.vocab)
    cos, sin = hl.rope_table(c, idx.shape[1])
    return c, W, idx, tgt, cos, sin


def cmd_make_adapter(a):
    c, _ = hl.load_model(a.modeldir)
    ad = Adapter(c, a.r, a.alpha, parse_targets(a.targets), a.rslora)
    g = torch.Generator().manual_seed(a.seed)
    for l, n, m in ad.sites():
        o, i = dims(c, n)
        ad.A[m] = (a.std * torch.randn((a.r, i), generator=g, dtype=torch.float32)).double()
        ad.B[m] = (a.std * torch.randn((o, a.r), generator=g, dtype=torch.float32)).double()
    save_adapter(a.outdir, ad, a.modeldir, hl.OUT_DTYPES[a.dtype])
    print(f"{a.outdir}: {2 * len(ad.A)} tensors, r {a.r}, lora_alpha {a.alpha}, targets {','.join(ad.targets)}, {a.dtype}")


def mean_loss(c, P, idx, tgt, cos, sin, ad):
    s, n = hl.loss_sum(c, P, idx, tgt, cos, sin, ad.hook() if ad else None)
    return s / n


def cmd_loss(a):
    c, P, idx, tgt, cos, sin = model_rows(a.modeldir, a.tokens)
    ad, _ = load_adapter(c, a.adapterdir)
    with torch.no_grad():
        print("%.*g" % (a.digits, mean_loss(c, P, idx, tgt, cos, sin, ad).item()))


def train(c, P, idx, tgt, cos, sin, ad, steps, lr, wd, betas, eps, clip, digits, out=print):
    for t in ad.params():
        t.requires_grad_(True)
    opt = torch.optim.AdamW([{"params": ad.params(), "weight_decay": wd}], lr=lr, betas=betas, eps=eps, foreach=False)
    for step in range(1, steps + 1):
        loss = mean_loss(c, P, idx, tgt, cos, sin, ad)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(ad.params(), clip) if clip > 0 else \
            torch.sqrt(sum((t.grad ** 2).sum() for t in ad.params()))
        out("step %d loss %.*g grad_norm %.*g" % (step, digits, loss.item(), digits, float(gn)))
        opt.step()
        opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        final = mean_loss(c, P, idx, tgt, cos, sin, ad).item()
    out("final loss %.*g" % (digits, final))
    for t in ad.params():
        t.requires_grad_(False)
    return final


def cmd_train(a):
    c, P, idx, tgt, cos, sin = model_rows(a.modeldir, a.tokens)
    init0 = None
    if a.adapter:
        if a.init:
            die("--adapter and --init exclude each other")
        ad, cfg = load_adapter(c, a.adapter)
    else:
        if not (a.init and a.r and a.alpha and a.targets):
            die("without --adapter: --init, --r, --alpha and --targets are needed")
        ad = Adapter(c, a.r, a.alpha, parse_targets(a.targets), a.rslora)
        if a.init in ("true", "gaussian"):
            init_plain(ad, a.init, a.seed)
        else:
            init_pissa(ad, P, pissa_niter(a.init), a.seed)
            init0 = ({m: t.clone() for m, t in ad.A.items()}, {m: t.clone() for m, t in ad.B.items()})
    train(c, P, idx, tgt, cos, sin, ad, a.steps, a.lr, a.weight_decay, (a.beta1, a.beta2), a.eps, a.grad_clip, a.digits)
    if a.out:
        if init0 is None:
            save_adapter(a.out, ad, a.modeldir)
        else:
            A0, B0 = init0
            save_adapter(os.path.join(a.out, "pissa_init"), ad, a.modeldir, A=A0, B=B0)
            A2 = {m: torch.cat([ad.A[m], A0[m]], 0) for m in ad.A}
            B2 = {m: torch.cat([ad.B[m], -B0[m]], 1) for m in ad.B}
            alpha2 = ad.alpha * (2 ** 0.5 if ad.rslora else 2)
            save_adapter(a.out, ad, a.modeldir, r=2 * ad.r, alpha=alpha2, A=A2, B=B2)


def cmd_pissa_check(a):
    c, P = hl.load_model(a.modeldir)
    ad, _ = load_adapter(c, a.adapterdir)
    worst, where = 0.0, ""
    for l, n, m in ad.sites():
        U, S, Vh = topr(P[m + ".weight"], ad.r, None)
        want = U @ torch.diag(S) @ Vh
        got = ad.scale * ad.B[m] @ ad.A[m]
        rel = float(torch.linalg.norm(got - want) / torch.linalg.norm(want))
        if rel >= worst:
            worst, where = rel, m
    print(f"worst {worst:.3g} at {where}")
    sys.exit(0 if worst <= a.tol else 1)


# ---------------------------------------------------------------- selftest
def cmd_selftest(a):
    import tempfile
    torch.manual_seed(0)
    ok = True

    def check(what, cond, detail=""):
        nonlocal ok
        ok &= bool(cond)
        print(f"{'ok  ' if cond else 'FAIL'} {what} {detail}")

    rows = [[1, 5, 2, 7, 3, 11, 0, 4], [6, 2, 9, 12, 1, 3, 3, 8], [3, 3, 8, 10, 2, 2, 1, 0]]
    for k, d in enumerate(hl.SELFTEST_CONFIGS):
        c = hl.Cfg(d)
        P = {n: t.double() for n, t in hl.init_params(c, 20 + k, std=0.4, bias_std=0.2).items()}
        idx, tgt = hl.batch(rows, c.vocab)
        cos, sin = hl.rope_table(c, idx.shape[1])
        base = mean_loss(c, P, idx, tgt, cos, sin, None).item()
        tag = f"[{d['model_type']}]"
        for targets, rsl in (("q_proj,v_proj", False), ("all-linear", True)):
            ad = Adapter(c, 3, 5.0, parse_targets(targets), rsl)
            init_plain(ad, "true", 1)
            l0 = mean_loss(c, P, idx, tgt, cos, sin, ad).item()
            check(f"{tag} {targets}: B = 0 gives the base loss", l0 == base, f"{l0:.17g} vs {base:.17g}")
            g = torch.Generator().manual_seed(3 + k)
            for m in ad.A:
                ad.A[m] = 0.3 * torch.randn(ad.A[m].shape, generator=g, dtype=torch.float64)
                ad.B[m] = 0.3 * torch.randn(ad.B[m].shape, generator=g, dtype=torch.float64)
            la = mean_loss(c, P, idx, tgt, cos, sin, ad).item()
            M = dict(P)
            for m in ad.A:
                M[m + ".weight"] = P[m + ".weight"] + ad.scale * ad.B[m] @ ad.A[m]
            lm = mean_loss(c, M, idx, tgt, cos, sin, None).item()
            nv = hl.naive_loss(c, M, rows)
            check(f"  adapter forward == merged W + s B A (and hf_llama's naive loops on it)",
                  abs(la - lm) < 1e-12 * abs(lm) and abs(la - nv) < 1e-10 * abs(nv) and abs(la - base) > 1e-3,
                  f"{la:.15g} / {lm:.15g} / {nv:.15g} (base {base:.6g})")
            # PiSSA identity, exact and randomised
            for init in ("pissa", "pissa_niter_2"):
                ad2 = Adapter(c, 2, 4.0, parse_targets(targets), rsl)
                R = dict(P)
                init_pissa(ad2, R, pissa_niter(init), 7)
                worst = max(float((R[m + ".weight"] + ad2.scale * ad2.B[m] @ ad2.A[m] - P[m + ".weight"]).abs().max())
                            for m in ad2.A)
                lp = mean_loss(c, R, idx, tgt, cos, sin, ad2).item()
                check(f"  {init}: W_res + s B A == W, the loss unchanged", worst < 1e-13 and abs(lp - base) < 1e-12 * abs(base),
                      f"(max {worst:.2e}, loss diff {abs(lp - base):.2e})")
                if init == "pissa":  # A = sqrt(S/s) Vh: rows of A orthogonal with squared norms S/s; W_res loses the top r
                    m = next(iter(ad2.A))
                    U, S, Vh = torch.linalg.svd(P[m + ".weight"], full_matrices=False)
                    gram = ad2.A[m] @ ad2.A[m].t()
                    S_res = torch.linalg.svdvals(R[m + ".weight"])
                    check("    A A^T = diag(S_r / s); W_res's spectrum is S[r:]",
                          torch.allclose(gram, torch.diag(S[:2] / ad2.scale), atol=1e-12) and
                          torch.allclose(S_res[:len(S) - 2], S[2:], atol=1e-12))

    # the files: an adapter written and read back, the PiSSA rank-2r conversion over the original base
    with tempfile.TemporaryDirectory() as tmp:
        d = hl.SELFTEST_CONFIGS[1]
        mdir = os.path.join(tmp, "base")
        os.makedirs(mdir)
        json.dump(d, open(os.path.join(mdir, "config.json"), "w"))
        c = hl.Cfg(d)
        hl.save_model(mdir, os.path.join(mdir, "config.json"), hl.init_params(c, 4, std=0.4, bias_std=0.2), "F32")
        toks = os.path.join(tmp, "tokens.txt")
        open(toks, "w").write("".join(" ".join(map(str, r)) + "\n" for r in rows))
        c, P, idx, tgt, cos, sin = model_rows(mdir, toks)
        ad = Adapter(c, 3, 6, parse_targets("q_proj,self_attn.v_proj,down_proj"), False)
        check("targets by suffix, in layer order", ad.targets == ["q_proj", "v_proj", "down_proj"], str(ad.targets))
        g = torch.Generator().manual_seed(9)
        for l, n, m in ad.sites():
            o, i = dims(c, n)
            ad.A[m] = (0.3 * torch.randn((3, i), generator=g, dtype=torch.float32)).double()
            ad.B[m] = (0.3 * torch.randn((o, 3), generator=g, dtype=torch.float32)).double()
        save_adapter(os.path.join(tmp, "ad"), ad, mdir)
        rd, cfg = load_adapter(c, os.path.join(tmp, "ad"))
        text = open(os.path.join(tmp, "ad", CONFIG_FILE)).read()
        hdr_keys = sorted(k for k in hl.st_read(os.path.join(tmp, "ad", WEIGHTS_FILE)))
        check("adapter round trip: values", all(torch.equal(rd.A[m], ad.A[m]) and torch.equal(rd.B[m], ad.B[m]) for m in ad.A))
        check("  config", cfg["r"] == 3 and cfg["lora_alpha"] == 6 and cfg["target_modules"] == ["down_proj", "q_proj", "v_proj"]
              and cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM" and cfg["init_lora_weights"] is True and
              text == json.dumps(cfg, indent=2, sort_keys=True), str(cfg))
        check("  keys", "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight" in hdr_keys and
              len(hdr_keys) == 2 * 3 * c.layers, str(hdr_keys[:2]))
        for rsl in (False, True):
            sub = os.path.join(tmp, f"pissa{int(rsl)}")
            out = []
            sys_argv = ["train", mdir, toks, "--init", "pissa", "--r", "2", "--alpha", "3", "--targets", "all-linear",
                        "--steps", "3", "--lr", "0.05", "--out", sub] + (["--rslora"] if rsl else [])
            ns = parser().parse_args(sys_argv)
            import contextlib, io
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                cmd_train(ns)
            final = float(buf.getvalue().strip().splitlines()[-1].split()[-1])
            ad2, cfg2 = load_adapter(c, sub)
            lconv = mean_loss(c, P, idx, tgt, cos, sin, ad2).item()
            ad0, cfg0 = load_adapter(c, os.path.join(sub, "pissa_init"))
            want_alpha = 3 * (2 ** 0.5 if rsl else 2)
            check(f"PiSSA (rslora {rsl}) saved as rank 2r over the original base: the trained loss",
                  abs(lconv - final) < 1e-6 * abs(final) and cfg2["r"] == 4 and abs(cfg2["lora_alpha"] - want_alpha) < 1e-12
                  and abs(ad2.scale - ad0.scale) < 1e-15 and cfg0["r"] == 2 and cfg2["init_lora_weights"] is True,
                  f"{lconv:.15g} vs {final:.15g}, alpha {cfg2['lora_alpha']}")
            sub_ns = argparse.Namespace(modeldir=mdir, adapterdir=os.path.join(sub, "pissa_init"), tol=1e-6)
            try:
                with contextlib.redirect_stdout(buf):
                    cmd_pissa_check(sub_ns)
            except SystemExit as e:
                check("  pissa-check accepts the initial adapter", e.code == 0)
        # training moves only the adapters; the loss falls; clip and decay as AdamW with param groups
        ad3, _ = load_adapter(c, os.path.join(tmp, "ad"))
        Pb = {k: v.clone() for k, v in P.items()}
        losses = []
        train(c, P, idx, tgt, cos, sin, ad3, 4, 0.02, 0.1, (0.9, 0.95), 1e-8, 1.0, 17,
              out=lambda s: losses.append(float(s.split()[-1] if s.startswith("final") else s.split()[3])))
        check("train: base untouched, loss falls", all(torch.equal(P[k], Pb[k]) for k in P) and losses[-1] < losses[0],
              str([round(x, 5) for x in losses]))
    print("selftest:", "all passed" if ok else "FAILED")
    sys.exit(0 if ok else 1)


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make-adapter", help="a PEFT adapter with random nonzero lora_A and lora_B")
    p.add_argument("modeldir"), p.add_argument("outdir")
    p.add_argument("--r", type=int, required=True)
    p.add_argument("--alpha", type=float, required=True)
    p.add_argument("--targets", required=True)
    p.add_argument("--rslora", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--std", type=float, default=0.02)
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p = sub.add_parser("train", help="full-batch AdamW on the adapters, float64")
    p.add_argument("modeldir"), p.add_argument("tokens")
    p.add_argument("--adapter")
    p.add_argument("--init")
    p.add_argument("--r", type=int)
    p.add_argument("--alpha", type=float)
    p.add_argument("--targets")
    p.add_argument("--rslora", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--grad-clip", type=float, default=1.0, help="0: no clipping")
    p.add_argument("--digits", type=int, default=17)
    p.add_argument("--out")
    p = sub.add_parser("loss", help="mean loss of the base with the adapter, float64")
    p.add_argument("modeldir"), p.add_argument("adapterdir"), p.add_argument("tokens")
    p.add_argument("--digits", type=int, default=17)
    p = sub.add_parser("pissa-check", help="an initial PiSSA adapter against the exact top-r SVD of the base")
    p.add_argument("modeldir"), p.add_argument("adapterdir")
    p.add_argument("--tol", type=float, default=1e-5)
    sub.add_parser("selftest", help="identities of LoRA and PiSSA, file round trips")
    return ap


def main():
    a = parser().parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    {"make-adapter": cmd_make_adapter, "train": cmd_train, "loss": cmd_loss, "pissa-check": cmd_pissa_check,
     "selftest": cmd_selftest}[a.cmd](a)


if __name__ == "__main__":
    main()
