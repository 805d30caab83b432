#!/usr/bin/env python3
"""peft_lora.py - Hugging Face PEFT itself (peft, transformers, torch from the test references' venv:
tests/requirements-refs.txt) as the reference for gtrain's LoRA and PiSSA runs (tests/test_lora_io.c).
Nothing of gtrain's: the models are transformers' classes (AutoModelForCausalLM), the adapters PEFT's
(LoraConfig, get_peft_model, PeftModel.from_pretrained, save_pretrained with
path_initial_model_for_weight_conversion); the only hand-written parts are the training loop (what
HF's Trainer does for a PEFT model, full batch: torch.optim.AdamW(foreach=False) with weight decay on
every lora_A / lora_B, clip_grad_norm_ over them, constant lr) and the comparisons.

Models run in float64 (the base's stored weights widened exactly; PEFT's own pissa_init still runs its
SVD in float32, as PEFT always does). Rows: TOKENS.txt, one row per line, whitespace-separated ids; the
loss is the mean cross entropy over every predicted token of every row (row[t] predicts row[t+1]).

usage ($GTRAIN_REFS_PY; CPU only; several commands run in one process joined by " + "):
  peft_lora.py make-base CONFIG.json OUTDIR [--seed S] [--std 0.1] [--dtype f32|bf16] [--spectrum RHO]
      a random transformers model of CONFIG's model_type (llama, mistral, qwen2, gpt2 ...) saved by
      save_pretrained: weights N(0, std), norm weights 1 + 0.1 N(0, 1), biases N(0, 0.1); --spectrum: every
      linear weight of every layer W = Q1 diag(c RHO^j) Q2^T (random orthonormal Q1, Q2: a known decaying
      spectrum, for the randomised SVD)
  peft_lora.py make-adapter MODELDIR OUTDIR --r R --alpha A --targets q_proj,v_proj|all-linear [--rslora]
      [--dora] [--seed S] [--std 0.02] [--dtype f32|bf16]
      get_peft_model + save_pretrained: lora_A and lora_B both N(0, std) (torch's generator); --dora: use_dora,
      the magnitude PEFT's own (||W|| per output row, computed at get_peft_model with B = 0, so after the
      random B it is no longer ||W + s B A||: the runs see a magnitude that is not the norm)
  peft_lora.py train MODELDIR TOKENS.txt (--adapter DIR | --init true|gaussian|pissa|pissa_niter_N --r R
      --alpha A --targets ... [--rslora] [--seed S]) [--steps 5 --lr 1e-3 --weight-decay 0.1 --beta1 0.9
      --beta2 0.95 --eps 1e-8 --grad-clip 1.0] [--out DIR] [--digits 17] [--base-linear-bf16]
      prints "step k loss L grad_norm G" (before the step's update; G before clipping), "final loss L";
      --out: save_pretrained (a PiSSA run: the initial adapter to OUT/pissa_init, init_lora_weights true,
      and the trained one converted with path_initial_model_for_weight_conversion, PEFT's workflow)
      --base-linear-bf16: the decoder layers' linear weights rounded to bf16 by torch first (a base stored
      bf16 under fp32 compute, gtrain's lora.base_dtype: bf16)
  peft_lora.py loss MODELDIR ADAPTERDIR|- TOKENS.txt [--digits 17]
      PeftModel.from_pretrained(base, ADAPTERDIR) (- : the base alone): the mean loss
  peft_lora.py pissa-check MODELDIR INITDIR RESIDUAL.safetensors [--niter N --seed S] [--dtype f32|bf16]
      PEFT's pissa_init (get_peft_model with init_lora_weights "pissa" / "pissa_niter_N", INITDIR's r,
      lora_alpha, use_rslora, target_modules) against gtrain's initial adapter INITDIR and gtrain's residual
      base (RESIDUAL: "<module>.weight" [out, in] per adapted module); see cmd_pissa_check for the bounds
  peft_lora.py convert-check MODELDIR INITDIR SAVEDDIR
      PEFT's rank-2r conversion: a PEFT model holding the trained adapter (the first r rows / columns of
      gtrain's SAVEDDIR) saved with path_initial_model_for_weight_conversion = a copy of gtrain's INITDIR,
      against gtrain's SAVEDDIR: the same tensors (exactly: the conversion is a concatenation) and config
"""
import argparse, json, math, os, shutil, sys, tempfile, warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()
WEIGHTS, CONFIG = "adapter_model.safetensors", "adapter_config.json"
DT = {"f32": torch.float32, "bf16": torch.bfloat16}


def die(msg, code=2):
    print(f"peft_lora.py: {msg}", file=sys.stderr)
    sys.exit(code)


def load_base(d, dtype=torch.float64):
    m = AutoModelForCausalLM.from_pretrained(d, dtype=dtype, attn_implementation="eager")
    m.eval()  # no dropout anywhere (GPT-2's resid/attn/embd dropout): gtrain runs dropout 0 here
    return m


def is_conv1d(model):
    return model.config.model_type == "gpt2"


def targets_arg(t):
    return "all-linear" if t == "all-linear" else [s for s in t.split(",") if s]


def lora_params(pm):
    return [p for n, p in pm.named_parameters() if "lora_A" in n or "lora_B" in n or "lora_magnitude_vector" in n]


def ab_params(pm):
    return [p for n, p in pm.named_parameters() if "lora_A" in n or "lora_B" in n]


def cast_lora(pm, dtype):
    for p in lora_params(pm):
        p.data = p.data.to(dtype)


def read_rows(path):
    rows = [[int(x) for x in line.split()] for line in open(path) if line.strip()]
    if not rows or any(len(r) != len(rows[0]) or len(r) < 2 for r in rows):
        die(f"{path}: expected rows of one length >= 2")
    return torch.tensor(rows, dtype=torch.long)


def mean_loss(model, ids):
    logits = model(input_ids=ids[:, :-1]).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), ids[:, 1:].reshape(-1))


# ---------------------------------------------------------------- make-base
def cmd_make_base(a):
    cfg = AutoConfig.for_model(**json.load(open(a.config)))
    torch.manual_seed(a.seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    g = torch.Generator().manual_seed(a.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if p.ndim == 1:
                p.copy_(1.0 + 0.1 * r if "norm" in name or "ln_" in name else 0.1 * r)
            else:
                p.copy_(a.std * r)
            if a.spectrum and p.ndim == 2 and (".layers." in name or ".h." in name):
                rows, cols = p.shape
                k = min(rows, cols)
                q1, _ = torch.linalg.qr(torch.randn(rows, k, generator=g, dtype=torch.float64))
                q2, _ = torch.linalg.qr(torch.randn(cols, k, generator=g, dtype=torch.float64))
                s = a.std * math.sqrt(max(rows, cols)) * a.spectrum ** torch.arange(k, dtype=torch.float64)
                p.copy_((q1 * s) @ q2.T)
    model.to(DT[a.dtype]).save_pretrained(a.outdir)
    print(f"{a.outdir}: {type(model).__name__}, {a.dtype}")


# ---------------------------------------------------------------- make-adapter
def cmd_make_adapter(a):
    base = load_base(a.modeldir, torch.float32)
    lc = LoraConfig(r=a.r, lora_alpha=a.alpha, target_modules=targets_arg(a.targets), use_rslora=a.rslora,
                    lora_dropout=0.0, init_lora_weights=True, task_type="CAUSAL_LM", fan_in_fan_out=is_conv1d(base),
                    use_dora=a.dora)
    pm = get_peft_model(base, lc)
    g = torch.Generator().manual_seed(a.seed)
    with torch.no_grad():
        for p in ab_params(pm):
            p.copy_(a.std * torch.randn(p.shape, generator=g, dtype=torch.float32))
    cast_lora(pm, DT[a.dtype])
    pm.save_pretrained(a.outdir)
    print(f"{a.outdir}: {len(lora_params(pm))} tensors, r {a.r}, {a.dtype}")


# ---------------------------------------------------------------- loss
def cmd_loss(a):
    model = load_base(a.modeldir)
    if a.adapterdir != "-":
        model = PeftModel.from_pretrained(model, a.adapterdir)
        cast_lora(model, torch.float64)
    with torch.no_grad():
        print("%.*g" % (a.digits, mean_loss(model, read_rows(a.tokens)).item()))


# ---------------------------------------------------------------- train
def train(pm, ids, a, out=print):
    params = lora_params(pm)
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW([{"params": params, "weight_decay": a.weight_decay}], lr=a.lr, betas=(a.beta1, a.beta2),
                            eps=a.eps, foreach=False)
    for step in range(1, a.steps + 1):
        loss = mean_loss(pm, ids)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, a.grad_clip) if a.grad_clip > 0 else \
            torch.sqrt(sum((p.grad ** 2).sum() for p in params))
        out("step %d loss %.*g grad_norm %.*g" % (step, a.digits, loss.item(), a.digits, float(gn)))
        opt.step()
        opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        final = mean_loss(pm, ids).item()
    out("final loss %.*g" % (a.digits, final))
    return final


def round_linear_bf16(model):
    """the decoder layers' linear weights (nn.Linear and GPT-2's Conv1D, 2-D, under .layers.N. / .h.N.)
    rounded to bfloat16 by torch and widened back: a base stored in bf16 under fp32 compute (gtrain's
    lora.base_dtype: bf16); embeddings, norms, biases and lm_head as loaded"""
    import re
    n = 0
    with torch.no_grad():
        for name, mod in model.named_modules():
            w = getattr(mod, "weight", None)
            if re.search(r"\.(layers|h)\.\d+\.", name) and isinstance(w, torch.nn.Parameter) and w.dim() == 2:
                w.copy_(w.to(torch.bfloat16).to(w.dtype))
                n += 1
    if n == 0:
        die("--base-linear-bf16: no linear weight found in the decoder layers")


def cmd_train(a):
    base = load_base(a.modeldir)
    if a.base_linear_bf16:
        round_linear_bf16(base)
    ids = read_rows(a.tokens)
    pissa = False
    if a.adapter:
        if a.init:
            die("--adapter and --init exclude each other")
        pm = PeftModel.from_pretrained(base, a.adapter, is_trainable=True)
    else:
        if not (a.init and a.r and a.alpha and a.targets):
            die("without --adapter: --init, --r, --alpha and --targets are needed")
        init = {"true": True, "false": False}.get(a.init, a.init)
        pissa = isinstance(init, str) and init.startswith("pissa")
        if pissa:  # PEFT refuses PiSSA on a float64 model: initialise in float32 (W_res is float32, as gtrain's)
            base = base.float()
        torch.manual_seed(a.seed)  # kaiming / gaussian / svd_lowrank's test matrix: torch's own numbers
        lc = LoraConfig(r=a.r, lora_alpha=a.alpha, target_modules=targets_arg(a.targets), use_rslora=a.rslora,
                        lora_dropout=0.0, init_lora_weights=init, task_type="CAUSAL_LM", fan_in_fan_out=is_conv1d(base))
        pm = get_peft_model(base, lc)
        pm.double()
    cast_lora(pm, torch.float64)
    pm.eval()
    init_dir = os.path.join(a.out, "pissa_init") if a.out and pissa else None
    if init_dir:  # PEFT's PiSSA recipe: the initial adapter saved as a plain LoRA (init_lora_weights True)
        cast_lora(pm, torch.float32)
        cfg = pm.peft_config["default"]
        keep, cfg.init_lora_weights = cfg.init_lora_weights, True
        pm.save_pretrained(init_dir)
        cfg.init_lora_weights = keep
        cast_lora(pm, torch.float64)
    train(pm, ids, a)
    if a.out:
        cast_lora(pm, torch.float32)  # the files gtrain reads are F32 (or BF16)
        pm.save_pretrained(a.out, path_initial_model_for_weight_conversion=init_dir)


# ---------------------------------------------------------------- pissa-check
def adapted(pm):
    """{module name as in the HF model ("model.layers.0.self_attn.q_proj"): its LoRA layer}"""
    from peft.tuners.lora import LoraLayer
    pre = "base_model.model."
    return {n[len(pre):]: m for n, m in pm.named_modules() if isinstance(m, LoraLayer)}


def gtrain_adapter(d):
    """gtrain's adapter directory: ({module: (A, B)} in float64, its adapter_config)"""
    T = load_file(os.path.join(d, WEIGHTS))
    cfg = json.load(open(os.path.join(d, CONFIG)))
    out, pre = {}, "base_model.model."
    for k in T:
        if k.endswith(".lora_A.weight"):
            mod = k[len(pre):-len(".lora_A.weight")]
            out[mod] = (T[k].double(), T[pre + mod + ".lora_B.weight"].double())
    if len(T) != 2 * len(out):
        die(f"{d}/{WEIGHTS}: not lora_A / lora_B pairs", 1)
    return out, cfg


def cmd_pissa_check(a):
    """PEFT's pissa_init (a float32 SVD, as PEFT runs it) against gtrain's (double, rounded to fp32), per
    adapted module W [out, in], S its singular values (float64), relgap_j = min(S_{j-1} - S_j, S_j - S_{j+1})
    / S_0, EPS = 1e-6 (a float32 SVD's backward error, ~2^-24 sqrt(n) |W|, with room):

    exact ("pissa"):
      pairs    each singular pair's factors sign-normalised (one sign for A's row and B's column together):
               max |A_g[j] - sign A_p[j]|, |B_g[:, j] - sign B_p[:, j]| <= EPS (1 + 1/relgap_j) sqrt(S_j / s)
               (a singular vector moves by eps |W| / gap under a perturbation eps |W|: Wedin)
      product  |s B_g A_g - s B_p A_p|_F <= EPS (1 + sqrt(r) / relgap_r) |W|_F, relgap_r = (S_{r-1} - S_r) / S_0
               (the top-r subspace moves by eps |W| / (S_{r-1} - S_r))
    randomised ("pissa_niter_N": two subspace iterations with their own Gaussian test matrices): each
      against the exact SVD (float64), the bound above plus subspace iteration's own error (Halko,
      Martinsson & Tropp 2011; Gu 2015: the j-th direction's error decays as (S_r / S_j)^(2N+1) with q = r),
      C = 1000: pairs + C (S_r / S_j)^(2N+1) sqrt(S_j / s); product + C sqrt(r) (S_r / S_{r-1})^(2N+1) S_0 /
      |W|_F, and gtrain's and PEFT's products within the sum of their bounds. C is large because q = r means
      no oversampling: the constant is ~ |Omega_1^-1| of an r x r Gaussian, heavy-tailed. Measured for both
      torch's algorithm and gtrain's svd_topr (128 x 64, r 4, N 4, 1000 draws each, the 4th left singular
      vector's max error): spectrum 0.5^j: median 2.6e-4, 99th percentile 1.0e-2 (torch) / 1.4e-2 (gtrain),
      worst 0.22 / 0.07; spectrum 0.25^j: median 2.5e-7 / 2.6e-7, 99th percentile 1.8e-5 / 1.4e-5, worst
      8e-5 and once 0.065 (torch) / 1.1e-4. So C = 1000 with a steep spectrum (make-base --spectrum 0.25)
      holds for all but ~0.1% of draws; the draws here are fixed (gtrain's per-module key, torch.manual_seed),
      so the check is deterministic.
    residual: gtrain's W_res against PEFT's base weight after pissa_init (W - s B A in float32):
      max |R_g - R_p| <= (r + 2) 2^-24 (max |W| + max s |B_p| |A_p|) + max |P_g - P_p| (PEFT's float32 product
      and subtraction, gtrain's one rounding); and W_res + s B_g A_g = W to 1e-6 max |W|.
    --dtype bf16 (the base loaded in bf16): PEFT's residual is its float32 one rounded to bf16, gtrain's is
      rounded once from double: 2 x 2^-8 max |W_res| more, and the identity to 2^-8 max |W_res| + 1e-6; and 2^-8
      more on the pairs and the products: PEFT's A and B on a bf16 model hold bf16-rounded values (cast to
      the base's dtype after pissa_init; its W_res was formed from the float32 ones, so PEFT's own
      W_res + s B A is W only to that rounding), gtrain's are float32.
    Prints the worst of each (and of each measured / bound); exits 1 naming the module past a bound."""
    EPS, C = 1e-6, 1000.0
    gt, icfg = gtrain_adapter(a.initdir)
    R = load_file(a.residual)
    base = load_base(a.modeldir, DT[a.dtype])
    conv = is_conv1d(base)
    W0 = {n: (p.detach().double().T if conv else p.detach().double()) for n, p in base.named_parameters()}
    init = "pissa" if a.niter is None else f"pissa_niter_{a.niter}"
    torch.manual_seed(a.seed)
    lc = LoraConfig(r=icfg["r"], lora_alpha=icfg["lora_alpha"], target_modules=icfg["target_modules"],
                    use_rslora=bool(icfg.get("use_rslora")), lora_dropout=0.0, init_lora_weights=init,
                    task_type="CAUSAL_LM", fan_in_fan_out=conv)
    pm = get_peft_model(base, lc)
    layers = adapted(pm)
    if sorted(layers) != sorted(gt):
        die(f"modules: PEFT adapts {sorted(layers)[:4]}..., gtrain's {a.initdir} holds {sorted(gt)[:4]}...", 1)
    r, rand = icfg["r"], a.niter is not None
    # PEFT on a bf16 model: its float32 A and B are cast to the base's bf16 after pissa_init (and back to
    # float32 by autocast_adapter_dtype), so they hold bf16-rounded values, while its residual was formed
    # from the unrounded ones; gtrain keeps float32 factors. Allow PEFT's rounding: 2^-8 relative.
    BF16_FACTORS = 2.0 ** -8 if a.dtype == "bf16" else 0.0
    pw = 2 * a.niter + 1 if rand else 0
    worst, bad = {}, []

    def note(what, v, bound=None):
        worst[what] = max(worst.get(what, 0.0), v)
        if bound is not None:
            worst[what + "/bound"] = max(worst.get(what + "/bound", 0.0), v / bound)
            return v <= bound
        return True

    for mod, layer in sorted(layers.items()):
        s = layer.scaling["default"]
        Ap, Bp = layer.lora_A["default"].weight.detach().double(), layer.lora_B["default"].weight.detach().double()
        Rp = layer.get_base_layer().weight.detach().double()
        Rp = Rp.T if conv else Rp
        Ag, Bg = gt[mod]
        W, Rg = W0[mod + ".weight"], R[mod + ".weight"].double()
        if Rg.shape != W.shape:
            die(f"{a.residual}: {mod}.weight has shape {list(Rg.shape)}, the base's block {list(W.shape)}", 1)
        U, S, Vh = torch.linalg.svd(W, full_matrices=False)
        S0, k, Wn, wmax = float(S[0]), S.shape[0], float(torch.linalg.norm(W)), float(W.abs().max())
        Pg, Pp = s * Bg @ Ag, s * Bp @ Ap
        for j in range(r):
            gap = min(float(S[j - 1] - S[j]) if j > 0 else math.inf, float(S[j] - S[j + 1]) if j + 1 < k else math.inf) / S0
            f = math.sqrt(float(S[j]) / s)
            bound = EPS * (1 + 1 / gap) + (C * float(S[r] / S[j]) ** pw if rand and r < k else 0) + BF16_FACTORS
            refs = [("PEFT", Ap[j], Bp[:, j])] if not rand else [("the exact SVD", f * Vh[j], f * U[:, j])]
            for who, A_, B_ in ([("gtrain", Ag, Bg)] + ([("PEFT", Ap, Bp)] if rand else [])):
                _, ra, rb = refs[0]
                sg = 1.0 if float(A_[j] @ ra) >= 0 else -1.0
                if float(B_[:, j] @ rb) * sg < 0:
                    bad.append(f"{mod} pair {j}: {who}'s A and B carry different signs")
                e = max(float((A_[j] - sg * ra).abs().max()), float((B_[:, j] - sg * rb).abs().max())) / f
                if not note(f"pairs ({who})", e, bound):
                    bad.append(f"{mod} pair {j} (S {float(S[j]):.6g}, relgap {gap:.3g}): {who}'s factors {e:.3g} "
                               f"(relative) from {refs[0][0]}'s, bound {bound:.3g}")
        gap_r = float(S[r - 1] - S[r]) / S0 if r < k else 1.0
        bound_p = EPS * (1 + math.sqrt(r) / gap_r) + BF16_FACTORS
        dp = float(torch.linalg.norm(Pg - Pp)) / Wn
        if not rand:
            Wr = (U[:, :r] * S[:r]) @ Vh[:r]
            for who, P in (("gtrain", Pg), ("PEFT", Pp)):  # reported: each against the float64 SVD
                note(f"|sBA - W_r|_F/|W|_F ({who})", float(torch.linalg.norm(P - Wr)) / Wn)
            if not note("product", dp, bound_p):
                bad.append(f"{mod}: |sBA gtrain - sBA PEFT|_F = {dp:.3g} |W|_F, bound {bound_p:.3g} (relgap_r {gap_r:.3g})")
        else:
            bound_p += C * math.sqrt(r) * float(S[r] / S[r - 1]) ** pw * S0 / Wn if r < k else 0
            Wr = (U[:, :r] * S[:r]) @ Vh[:r]
            for who, P in (("gtrain", Pg), ("PEFT", Pp)):
                e = float(torch.linalg.norm(P - Wr)) / Wn
                if not note(f"|sBA - W_r|_F/|W|_F ({who})", e, bound_p):
                    bad.append(f"{mod}: {who}'s |sBA - W_r|_F = {e:.3g} |W|_F, bound {bound_p:.3g}")
            if not note("product", dp, 2 * bound_p):
                bad.append(f"{mod}: |sBA gtrain - sBA PEFT|_F = {dp:.3g} |W|_F, bound {2 * bound_p:.3g}")
        dr = float((Rg - Rp).abs().max())
        # PEFT's W - s (B @ A) in float32: the product's and the subtraction's roundings; gtrain's one rounding
        bound_r = (r + 2) * 2.0 ** -24 * (wmax + float((s * Bp.abs() @ Ap.abs()).max())) + float((Pg - Pp).abs().max())
        if a.dtype == "bf16":  # both residuals rounded to bf16 (gtrain once from double, PEFT from float32)
            bound_r += 2.0 ** -8 * 2 * max(float(Rg.abs().max()), float(Rp.abs().max()))
        if not note("residual", dr / wmax, bound_r / wmax):
            bad.append(f"{mod}: gtrain's residual {dr:.3g} from PEFT's (max |W| {wmax:.3g}), bound {bound_r:.3g}")
        di = float((Rg + Pg - W).abs().max()) / wmax
        if not note("W_res + sBA - W (gtrain)", di, 1e-6 + (0 if a.dtype == "f32" else 2.0 ** -8 * float(Rg.abs().max()) / wmax)):
            bad.append(f"{mod}: |W_res + sBA - W| = {di:.3g} max |W| (gtrain)")
    print(f"{init}: {len(layers)} modules, r {r}; worst: " + ", ".join(f"{k} {v:.3g}" for k, v in worst.items()))
    if bad:
        print("\n".join(bad[:8]), file=sys.stderr)
        sys.exit(1)


# ---------------------------------------------------------------- convert-check
def cmd_convert_check(a):
    gt, scfg = gtrain_adapter(a.saveddir)
    _, icfg = gtrain_adapter(a.initdir)
    r = icfg["r"]
    base = load_base(a.modeldir, torch.float32)
    lc = LoraConfig(r=r, lora_alpha=icfg["lora_alpha"], target_modules=icfg["target_modules"],
                    use_rslora=bool(icfg.get("use_rslora")), lora_dropout=0.0, init_lora_weights=True,
                    task_type="CAUSAL_LM", fan_in_fan_out=is_conv1d(base))
    pm = get_peft_model(base, lc)
    layers = adapted(pm)
    if sorted(layers) != sorted(gt):
        die(f"modules: {sorted(layers)[:4]}... vs gtrain's {sorted(gt)[:4]}...", 1)
    with torch.no_grad():  # the trained PiSSA adapter: the first halves of gtrain's file
        for mod, layer in layers.items():
            A2, B2 = gt[mod]
            layer.lora_A["default"].weight.copy_(A2[:r].float())
            layer.lora_B["default"].weight.copy_(B2[:, :r].float())
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "pissa_init")
        shutil.copytree(a.initdir, init)
        out = os.path.join(tmp, "converted")
        pm.save_pretrained(out, path_initial_model_for_weight_conversion=init)
        T = load_file(os.path.join(out, WEIGHTS))
        pcfg = json.load(open(os.path.join(out, CONFIG)))
    G = load_file(os.path.join(a.saveddir, WEIGHTS))
    bad = []
    if sorted(T) != sorted(G):
        bad.append(f"keys: PEFT {sorted(set(T) - set(G))[:3]} not in gtrain's, gtrain {sorted(set(G) - set(T))[:3]} not in PEFT's")
    worst = 0.0
    for k in sorted(set(T) & set(G)):
        if T[k].shape != G[k].shape or T[k].dtype != G[k].dtype:
            bad.append(f"{k}: PEFT {list(T[k].shape)} {T[k].dtype}, gtrain {list(G[k].shape)} {G[k].dtype}")
            continue
        d = float((T[k].double() - G[k].double()).abs().max())
        worst = max(worst, d)
        if d != 0:
            bad.append(f"{k}: PEFT's conversion and gtrain's differ by {d:.3g}")
    for key in ("r", "lora_alpha", "use_rslora", "init_lora_weights", "peft_type"):
        pv, gv = pcfg.get(key), scfg.get(key)
        same = abs(pv - gv) <= 1e-12 * abs(pv) if isinstance(pv, float) or isinstance(gv, float) else pv == gv
        if not same:
            bad.append(f"adapter_config.json {key}: PEFT writes {pv!r}, gtrain {gv!r}")
    if sorted(pcfg.get("target_modules") or []) != sorted(scfg.get("target_modules") or []):
        bad.append(f"target_modules: PEFT {pcfg.get('target_modules')}, gtrain {scfg.get('target_modules')}")
    print(f"conversion: {len(T)} tensors, r {pcfg['r']}, lora_alpha {pcfg['lora_alpha']}; max difference {worst:.3g}")
    if bad:
        print("\n".join(bad[:8]), file=sys.stderr)
        sys.exit(1)


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make-base")
    p.add_argument("config"), p.add_argument("outdir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--std", type=float, default=0.1)
    p.add_argument("--dtype", choices=list(DT), default="f32")
    p.add_argument("--spectrum", type=float, default=0.0)
    p = sub.add_parser("make-adapter")
    p.add_argument("modeldir"), p.add_argument("outdir")
    p.add_argument("--r", type=int, required=True)
    p.add_argument("--alpha", type=float, required=True)
    p.add_argument("--targets", required=True)
    p.add_argument("--rslora", action="store_true")
    p.add_argument("--dora", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--std", type=float, default=0.02)
    p.add_argument("--dtype", choices=list(DT), default="f32")
    p = sub.add_parser("train")
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
    p.add_argument("--base-linear-bf16", action="store_true",
                   help="round the decoder layers' linear weights to bf16 first (lora.base_dtype: bf16)")
    p = sub.add_parser("loss")
    p.add_argument("modeldir"), p.add_argument("adapterdir"), p.add_argument("tokens")
    p.add_argument("--digits", type=int, default=17)
    p = sub.add_parser("pissa-check")
    p.add_argument("modeldir"), p.add_argument("initdir"), p.add_argument("residual")
    p.add_argument("--niter", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=list(DT), default="f32", help="the dtype the base is loaded in (PEFT's PiSSA)")
    p = sub.add_parser("convert-check")
    p.add_argument("modeldir"), p.add_argument("initdir"), p.add_argument("saveddir")
    return ap


def main():
    """several commands in one process (one import of torch, transformers and peft): CMD ARGS + CMD ARGS ..."""
    torch.set_num_threads(1)
    argv, cmds = sys.argv[1:], [[]]
    for x in argv:
        if x == "+":
            cmds.append([])
        else:
            cmds[-1].append(x)
    for c in cmds:
        a = parser().parse_args(c)
        {"make-base": cmd_make_base, "make-adapter": cmd_make_adapter, "train": cmd_train, "loss": cmd_loss,
         "pissa-check": cmd_pissa_check, "convert-check": cmd_convert_check}[a.cmd](a)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
