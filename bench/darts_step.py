#!/usr/bin/env python3
"""PyTorch reference of exapt's DARTS search step, and the benchmark against it.

For each directory that bench_darts_step wrote (docs/bench.md, "DARTS search step
against PyTorch"), this script

1. builds the DARTS supernet in PyTorch exactly as exapt builds it (nas/supernet.c,
   nas/layers.c), with exapt's parameter names, and loads init.safetensors into it;
2. checks exapt's first step: the architecture step's validation loss and the gradient
   of alpha (recovered from Adam's first moment in step1.safetensors) against autograd
   in float32 and float64, and, after the whole step (Adam on alpha, then the weight
   step), the weights, batch-norm statistics and SGD momentum buffers;
3. times the same first-order step in PyTorch eager on the same device: strict float32
   (as exapt computes) and PyTorch's default precision (TF32 convolutions on NVIDIA);

then writes one JSON document for every directory (--out) and prints a table.

    python3 darts_step.py --run DIR32 --run DIR28 --out darts_step.json
"""
import argparse
import copy
import gc
import json
import statistics
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

WARMUP = 3
ALPHA_GRAD_GOAL = 1e-4  # relative error of exapt's alpha gradient against autograd

# ---- safetensors ----

_ST_DTYPES = {"F32": torch.float32, "I32": torch.int32, "I64": torch.int64, "F64": torch.float64}


def _read_safetensors(path):
    """A minimal reader, for machines without the safetensors package."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = _ST_DTYPES[info["dtype"]]
        raw = bytearray(data[8 + n + begin : 8 + n + end])
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def load_safetensors(path):
    try:
        from safetensors.torch import load_file
    except ImportError:
        return _read_safetensors(path)
    return load_file(path)


# ---- the supernet, named as exapt names it ----


def bn(c):
    # the search cells' batch norm: no affine, PyTorch's momentum 0.1 and eps 1e-5
    return nn.BatchNorm2d(c, affine=False)


def dw(c, k, stride, pad, dil):
    return nn.Conv2d(c, c, k, stride, pad, dilation=dil, groups=c, bias=False)


def pw(c):
    return nn.Conv2d(c, c, 1, bias=False)


class Op(nn.Module):
    """A candidate whose layers sit under `op.N`, as in DARTS's operations.py."""

    def __init__(self, *layers):
        super().__init__()
        self.op = nn.Sequential(*layers)

    def forward(self, x):
        return self.op(x)


class ReLUConvBN(Op):
    def __init__(self, cin, cout, k, stride, pad):
        super().__init__(nn.ReLU(), nn.Conv2d(cin, cout, k, stride, pad, bias=False), bn(cout))


class FactorizedReduce(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv_1 = nn.Conv2d(cin, cout // 2, 1, 2, 0, bias=False)
        self.conv_2 = nn.Conv2d(cin, cout // 2, 1, 2, 0, bias=False)
        self.bn = bn(cout)

    def forward(self, x):
        x = F.relu(x)
        return self.bn(torch.cat([self.conv_1(x), self.conv_2(x[:, :, 1:, 1:])], dim=1))


def sep_conv(c, k, stride):
    return Op(nn.ReLU(), dw(c, k, stride, k // 2, 1), pw(c), bn(c),
              nn.ReLU(), dw(c, k, 1, k // 2, 1), pw(c), bn(c))


def dil_conv(c, k, stride):
    return Op(nn.ReLU(), dw(c, k, stride, k - 1, 2), pw(c), bn(c))


def conv_7x1_1x7(c, stride):
    return Op(nn.ReLU(),
              nn.Conv2d(c, c, (1, 7), (1, stride), (0, 3), bias=False),
              nn.Conv2d(c, c, (7, 1), (stride, 1), (3, 0), bias=False), bn(c))


def candidate(name, c, stride):
    if name == "max_pool_3x3":
        return nn.Sequential(nn.MaxPool2d(3, stride, 1), bn(c))
    if name == "avg_pool_3x3":
        return nn.Sequential(nn.AvgPool2d(3, stride, 1, count_include_pad=False), bn(c))
    if name == "skip_connect":
        return nn.Identity() if stride == 1 else FactorizedReduce(c, c)
    if name.startswith("sep_conv_"):
        return sep_conv(c, int(name[-1]), stride)
    if name.startswith("dil_conv_"):
        return dil_conv(c, int(name[-1]), stride)
    if name == "conv_7x1_1x7":
        return conv_7x1_1x7(c, stride)
    raise ValueError(f"unknown candidate {name}")


class MixedOp(nn.Module):
    """Every candidate but `none`, keyed by its index in the candidate list."""

    def __init__(self, c, stride, cands):
        super().__init__()
        self._ops = nn.ModuleDict(
            {str(k): candidate(name, c, stride) for k, name in enumerate(cands) if name != "none"})

    def forward(self, x, w):
        out = None
        for key, op in self._ops.items():
            y = w[int(key)] * op(x)
            out = y if out is None else out + y
        return out


class Cell(nn.Module):
    def __init__(self, steps, multiplier, cpp, cp, c, reduction, reduction_prev, cands):
        super().__init__()
        self.reduction = reduction
        self.steps, self.multiplier = steps, multiplier
        self.preprocess0 = (FactorizedReduce(cpp, c) if reduction_prev
                            else ReLUConvBN(cpp, c, 1, 1, 0))
        self.preprocess1 = ReLUConvBN(cp, c, 1, 1, 0)
        self._ops = nn.ModuleList()
        for i in range(steps):
            for j in range(2 + i):
                stride = 2 if reduction and j < 2 else 1
                self._ops.append(MixedOp(c, stride, cands))

    def forward(self, s0, s1, w):
        states = [self.preprocess0(s0), self.preprocess1(s1)]
        e = 0
        for _ in range(self.steps):
            total = None
            for h in list(states):
                y = self._ops[e](h, w[e])
                total = y if total is None else total + y
                e += 1
            states.append(total)
        return torch.cat(states[-self.multiplier :], dim=1)


def is_reduction(i, layers):
    return i == layers // 3 or i == 2 * layers // 3


class Network(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, layers = cfg["channels"], cfg["layers"]
        steps, mult, cands = cfg["steps"], cfg["multiplier"], cfg["candidates"]
        c_stem = cfg["stem_multiplier"] * c
        self.stem = nn.Sequential(
            nn.Conv2d(cfg["in_channels"], c_stem, 3, padding=1, bias=False),
            nn.BatchNorm2d(c_stem))
        cpp, cp, reduction_prev = c_stem, c_stem, False
        self.cells = nn.ModuleList()
        for i in range(layers):
            reduction = is_reduction(i, layers)
            if reduction:
                c *= 2
            self.cells.append(Cell(steps, mult, cpp, cp, c, reduction, reduction_prev, cands))
            cpp, cp, reduction_prev = cp, mult * c, reduction
        self.classifier = nn.Linear(cp, cfg["classes"])

    def forward(self, x, w_normal, w_reduce):
        s0 = s1 = self.stem(x)
        for cell in self.cells:
            s0, s1 = s1, cell(s0, s1, w_reduce if cell.reduction else w_normal)
        return self.classifier(s1.mean(dim=(2, 3)))


# exapt's checkpoint also holds alpha and the optimizers' state; the model takes the rest.
ALPHAS = ("alphas_normal", "alphas_reduce")
TENSOR_NAME_MAX = 47  # exapt's tensor names (core/engine.h) keep at most 47 bytes


def momentum_key(tensors, param):
    """The name of a weight's SGD momentum buffer in an exapt checkpoint: exapt names the
    buffer after its tensor, whose name may be cut short (TENSOR_NAME_MAX)."""
    full = param + ".momentum_buffer"
    for key in (full, full[:TENSOR_NAME_MAX]):
        if key in tensors:
            return key
    raise SystemExit(f"checkpoint has no momentum buffer for {param}")


def load_model(cfg, tensors):
    model = Network(cfg)
    own = model.state_dict()
    search = {k for a in ALPHAS for k in (a, a + ".adam_m", a + ".adam_v")}
    search |= {momentum_key(tensors, p) for p, _ in model.named_parameters()}
    extra = sorted(k for k in tensors if k not in own and k not in search)
    missing = sorted(k for k in own if k not in tensors) + sorted(search - set(tensors))
    if extra or missing:
        raise SystemExit(f"checkpoint and model differ: missing {missing[:5]} "
                         f"({len(missing)}), unexpected {extra[:5]} ({len(extra)})")
    model.load_state_dict({k: tensors[k] for k in own}, strict=True)
    return model


# ---- the batch ----


def read_batch(path, cfg):
    n, shape = cfg["batch"], (cfg["batch"], cfg["in_channels"], cfg["height"], cfg["width"])
    pixels = n * cfg["in_channels"] * cfg["height"] * cfg["width"]
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    if len(raw) != 2 * 4 * (pixels + n):
        raise SystemExit(f"{path}: {len(raw)} bytes, expected {2 * 4 * (pixels + n)}")
    parts, at = [], 0
    for count, dtype in ((pixels, torch.float32), (n, torch.int32)) * 2:
        parts.append(torch.frombuffer(raw, dtype=dtype, count=count, offset=at).clone())
        at += 4 * count
    tx, ty, vx, vy = parts
    return tx.reshape(shape), ty.long(), vx.reshape(shape), vy.long()


# ---- the step ----


def correct(logits, y):
    return (logits.argmax(dim=1) == y).sum().to(logits.dtype)


def make_optimizers(model, alphas, cfg):
    arch = torch.optim.Adam(alphas, lr=cfg["arch_lr"], betas=(cfg["arch_beta1"], cfg["arch_beta2"]),
                            eps=1e-8, weight_decay=cfg["arch_weight_decay"])
    weights = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"],
                              weight_decay=cfg["weight_decay"])
    return arch, weights


def search_step(model, alphas, opt_arch, opt_w, batch, cfg):
    """First-order DARTS: an architecture step on the validation batch (gradient to alpha
    only, Adam), then a weight step on the training batch with the updated alpha (SGD
    with momentum after clipping the gradient norm). Returns the four figures, on the
    device: train loss, train correct, valid loss, valid correct."""
    tx, ty, vx, vy = batch
    an, ar = alphas
    logits_v = model(vx, F.softmax(an, dim=-1), F.softmax(ar, dim=-1))
    loss_v = F.cross_entropy(logits_v, vy)
    an.grad, ar.grad = torch.autograd.grad(loss_v, [an, ar])
    opt_arch.step()
    with torch.no_grad():
        wn, wr = F.softmax(an, dim=-1), F.softmax(ar, dim=-1)
    logits_t = model(tx, wn, wr)
    loss_t = F.cross_entropy(logits_t, ty)
    opt_w.zero_grad(set_to_none=True)
    loss_t.backward()
    nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
    opt_w.step()
    with torch.no_grad():
        return torch.stack([loss_t, correct(logits_t, ty), loss_v, correct(logits_v, vy)])


def leaf_alphas(tensors, device, dtype):
    return [tensors[k].to(device=device, dtype=dtype).clone().requires_grad_()
            for k in ALPHAS]


def to_device(batch, device, dtype):
    tx, ty, vx, vy = batch
    return (tx.to(device, dtype), ty.to(device), vx.to(device, dtype), vy.to(device))


# ---- correctness ----


def rel_err(a, b):
    """||a - b|| / ||b|| in float64."""
    a, b = a.detach().double().cpu().flatten(), b.detach().double().cpu().flatten()
    nb = b.norm().item()
    return (a - b).norm().item() / nb if nb > 0 else (a - b).norm().item()


def alpha_grad(model0, tensors, batch, device, dtype):
    model = copy.deepcopy(model0).to(device=device, dtype=dtype).train()
    an, ar = leaf_alphas(tensors, device, dtype)
    _, _, vx, vy = to_device(batch, device, dtype)
    logits = model(vx, F.softmax(an, dim=-1), F.softmax(ar, dim=-1))
    loss = F.cross_entropy(logits, vy)
    gn, gr = torch.autograd.grad(loss, [an, ar])
    acc = correct(logits, vy).item() / len(vy)
    return loss.item(), acc, torch.cat([gn.flatten(), gr.flatten()])


def exapt_alpha_grad(init, step1, cfg):
    """Adam's first moment after one step is (1 - beta1) (g + wd alpha0): solve for g."""
    b1, wd = cfg["arch_beta1"], cfg["arch_weight_decay"]
    parts = []
    for k in ALPHAS:
        parts.append(step1[k + ".adam_m"].double() / (1 - b1) - wd * init[k].double())
    return torch.cat([p.flatten() for p in parts])


def after_step(model0, tensors, step1, batch, cfg, device, dtype):
    """The whole first step in PyTorch, compared tensor group by tensor group."""
    model = copy.deepcopy(model0).to(device=device, dtype=dtype).train()
    alphas = leaf_alphas(tensors, device, dtype)
    opt_arch, opt_w = make_optimizers(model, alphas, cfg)
    figures = search_step(model, alphas, opt_arch, opt_w, to_device(batch, device, dtype), cfg)
    state = model.state_dict()
    params = dict(model.named_parameters())
    groups = {"weight_update": ([], []), "momentum_buffer": ([], []), "bn_running_stats": ([], [])}
    for name, p in params.items():
        groups["weight_update"][0].append((step1[name].double() - tensors[name].double()).flatten())
        moved = p.detach().cpu().double() - tensors[name].double()
        groups["weight_update"][1].append(moved.flatten())
        groups["momentum_buffer"][0].append(step1[momentum_key(step1, name)].flatten())
        groups["momentum_buffer"][1].append(opt_w.state[p]["momentum_buffer"].flatten().cpu())
    for name, t in state.items():
        if name.endswith(("running_mean", "running_var")):
            groups["bn_running_stats"][0].append(step1[name].flatten())
            groups["bn_running_stats"][1].append(t.flatten().cpu())
    out = {k: rel_err(torch.cat(a), torch.cat(b)) for k, (a, b) in groups.items()}
    out["alpha_update"] = rel_err(
        torch.cat([(step1[k].double() - tensors[k].double()).flatten() for k in ALPHAS]),
        torch.cat([(a.detach().cpu().double() - tensors[k].double()).flatten()
                   for a, k in zip(alphas, ALPHAS)]))
    out["train_loss_pytorch"] = figures[0].item()
    out["train_acc_pytorch"] = figures[1].item() / cfg["batch"]
    return out


def perturbed(batch, seed):
    """The batch with the validation images scaled by 1 + u 2^-24, u uniform in [-1, 1):
    the rounding a float32 implementation may differ by, in float64."""
    tx, ty, vx, vy = batch
    gen = torch.Generator().manual_seed(seed)
    u = 2 * torch.rand(vx.shape, generator=gen, dtype=torch.float64) - 1
    return tx, ty, vx.double() * (1 + u * 2.0**-24), vy


def check(model0, init, step1, step1_figures, batch, cfg, device, f64):
    g_exapt = exapt_alpha_grad(init, step1, cfg)
    loss32, acc32, g32 = alpha_grad(model0, init, batch, device, torch.float32)
    res = {
        "valid_loss_exapt": step1_figures["valid_loss"],
        "valid_loss_pytorch_f32": loss32,
        "valid_loss_rel_err_f32": abs(step1_figures["valid_loss"] - loss32) / abs(loss32),
        "valid_acc_exapt": step1_figures["valid_acc"],
        "valid_acc_pytorch": acc32,
        "alpha_grad_norm": g32.norm().item(),
        "alpha_grad_rel_err_f32": rel_err(g_exapt, g32),
        "goal": ALPHA_GRAD_GOAL,
    }
    res["alpha_grad_goal_met"] = res["alpha_grad_rel_err_f32"] <= ALPHA_GRAD_GOAL
    if f64:
        loss64, _, g64 = alpha_grad(model0, init, batch, device, torch.float64)
        res["valid_loss_pytorch_f64"] = loss64
        res["valid_loss_rel_err_f64"] = abs(step1_figures["valid_loss"] - loss64) / abs(loss64)
        res["alpha_grad_rel_err_f64"] = rel_err(g_exapt, g64)
        res["pytorch_f32_alpha_grad_rel_err_f64"] = rel_err(g32, g64)
        # how far the exact gradient moves when the input moves by float32 rounding: no
        # float32 implementation can be expected to agree with another much better
        _, _, gp = alpha_grad(model0, init, perturbed(batch, 1), device, torch.float64)
        res["alpha_grad_sensitivity_f64"] = rel_err(gp, g64)
    step = after_step(model0, init, step1, batch, cfg, device, torch.float32)
    step["train_loss_exapt"] = step1_figures["train_loss"]
    loss_t = step["train_loss_pytorch"]
    step["train_loss_rel_err"] = abs(step1_figures["train_loss"] - loss_t) / abs(loss_t)
    step["train_acc_exapt"] = step1_figures["train_acc"]
    res["after_step"] = step
    return res


# ---- precision settings ----


def _new_precision_api():
    conv = getattr(torch.backends.cudnn, "conv", None)
    return conv is not None and hasattr(conv, "fp32_precision")


def precision_state():
    """The float32 precision settings of convolutions and matrix products, read through
    whichever API this PyTorch has (the two must not be mixed)."""
    if _new_precision_api():
        return {"api": "fp32_precision",
                "conv": torch.backends.cudnn.conv.fp32_precision,
                "matmul": torch.backends.cuda.matmul.fp32_precision}
    return {"api": "allow_tf32", "conv": torch.backends.cudnn.allow_tf32,
            "matmul": torch.backends.cuda.matmul.allow_tf32}


def set_precision(state):
    if state["api"] == "fp32_precision":
        torch.backends.cudnn.conv.fp32_precision = state["conv"]
        torch.backends.cuda.matmul.fp32_precision = state["matmul"]
    else:
        torch.backends.cudnn.allow_tf32 = state["conv"]
        torch.backends.cuda.matmul.allow_tf32 = state["matmul"]


def strict_fp32(default):
    if default["api"] == "fp32_precision":
        return {"api": default["api"], "conv": "ieee", "matmul": "ieee"}
    return {"api": default["api"], "conv": False, "matmul": False}


# ---- timing ----


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(model0, init, batch, cfg, device, iters):
    """Whole steps as exapt's are timed: the batch copied from host memory, the step, the
    four figures read back."""
    model = copy.deepcopy(model0).to(device).train()
    alphas = leaf_alphas(init, device, torch.float32)
    opt_arch, opt_w = make_optimizers(model, alphas, cfg)

    def one():
        data = to_device(batch, device, torch.float32)
        return search_step(model, alphas, opt_arch, opt_w, data, cfg).cpu()

    for _ in range(WARMUP):
        one()
    sync(device)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ms = []
    for _ in range(iters):
        t0 = time.perf_counter()
        one()
        sync(device)
        ms.append(1e3 * (time.perf_counter() - t0))
    res = {"warmup": WARMUP, "iters": iters, "ms_median": statistics.median(ms),
           "ms_min": min(ms), "ms_mean": statistics.fmean(ms), "ms_all": ms}
    if device.type == "cuda":
        res["max_memory_allocated"] = torch.cuda.max_memory_allocated(device)
        res["max_memory_reserved"] = torch.cuda.max_memory_reserved(device)
    return res


# ---- one directory ----


def load_run(run):
    with open(f"{run}/exapt.json") as f:
        exapt = json.load(f)
    with open(f"{run}/step1.json") as f:
        figures = json.load(f)
    cfg = dict(exapt["config"])
    if cfg["mode"] != "darts" or cfg["order"] != 1:
        raise SystemExit(f"{run}: only first-order darts mode is reproduced here")
    return exapt, figures, cfg


def bench_run(run, device, iters, f64, precisions):
    exapt, figures, cfg = load_run(run)
    init = load_safetensors(f"{run}/init.safetensors")
    step1 = load_safetensors(f"{run}/step1.safetensors")
    batch = read_batch(f"{run}/batch.bin", cfg)
    model0 = load_model(cfg, init)
    iters = iters or exapt["timing"]["iters"]
    timings = {}
    for label, state in precisions:
        if state:
            set_precision(state)
        if label == "fp32":
            correctness = check(model0, init, step1, figures, batch, cfg, device, f64)
        timings[label] = time_steps(model0, init, batch, cfg, device, iters)
    ex_ms = exapt["timing"]["ms_median"]
    pt = {label: t for label, t in timings.items()}
    return {
        "input": exapt["input"],
        "batch": cfg["batch"], "channels": cfg["channels"], "layers": cfg["layers"],
        "exapt": {
            "backend": exapt["backend"],
            "ms_median": ex_ms, "ms_min": exapt["timing"]["ms_min"],
            "iters": exapt["timing"]["iters"],
            "host_syncs_per_step": exapt["timing"]["host_syncs_per_step"],
            "memory": exapt["memory"],
            "counters": exapt.get("counters"),
            "command": exapt["command"], "date": exapt["date"],
        },
        "pytorch": pt,
        "speedup": {label: t["ms_median"] / ex_ms for label, t in pt.items()},
        "correctness": correctness,
    }


# ---- the report ----


def mib(n):
    return "-" if n is None else f"{n / 2**20:.0f}"


def _num(v, fmt):
    return "-" if v is None else format(v, fmt)


def print_table(doc):
    print(f"DARTS search step on {doc['device']} (PyTorch {doc['torch_version']}); ms per step, "
          f"median")
    print(f"{'input':9} {'exapt':>8} {'torch fp32':>10} {'speed-up':>8} {'torch tf32':>10} "
          f"{'speed-up':>8} {'exapt MiB':>9} {'held MiB':>9} {'torch MiB':>9} {'syncs':>5}")
    for r in doc["results"]:
        fp32, tf32 = r["pytorch"]["fp32"], r["pytorch"].get("default", {})
        print(f"{r['input']:9} {r['exapt']['ms_median']:8.2f} {fp32['ms_median']:10.2f} "
              f"{r['speedup']['fp32']:7.2f}x {_num(tf32.get('ms_median'), '10.2f'):>10} "
              f"{_num(r['speedup'].get('default'), '7.2f'):>7}x "
              f"{mib(r['exapt']['memory']['planned_bytes']):>9} "
              f"{mib((r['exapt'].get('counters') or {}).get('device_bytes')):>9} "
              f"{mib(fp32.get('max_memory_allocated')):>9} "
              f"{r['exapt']['host_syncs_per_step']:5.1f}")
    print("relative errors of exapt's first step (goal for the alpha gradient against PyTorch "
          f"float32: {ALPHA_GRAD_GOAL:g})")
    print(f"{'input':9} {'loss':>9} {'a-grad f32':>10} {'a-grad f64':>10} {'torch f32':>10} "
          f"{'x-sens':>9} {'w update':>9} {'momentum':>9} {'bn stats':>9} {'train loss':>10}")
    for r in doc["results"]:
        c, s = r["correctness"], r["correctness"]["after_step"]
        print(f"{r['input']:9} {c['valid_loss_rel_err_f32']:9.2e} "
              f"{c['alpha_grad_rel_err_f32']:10.2e} "
              f"{_num(c.get('alpha_grad_rel_err_f64'), '10.2e'):>10} "
              f"{_num(c.get('pytorch_f32_alpha_grad_rel_err_f64'), '10.2e'):>10} "
              f"{_num(c.get('alpha_grad_sensitivity_f64'), '9.2e'):>9} "
              f"{s['weight_update']:9.2e} {s['momentum_buffer']:9.2e} "
              f"{s['bn_running_stats']:9.2e} {s['train_loss_rel_err']:10.2e}")


def device_info(device):
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return name, torch.version.cuda, torch.backends.cudnn.version()
    return "cpu", None, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True,
                    help="a directory bench_darts_step wrote (repeatable)")
    ap.add_argument("--out", required=True, help="the JSON document to write")
    ap.add_argument("--iters", type=int, default=0, help="timed steps (default: exapt's)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-f64", action="store_true", help="skip the float64 reference")
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    if device.type == "cuda":
        # DARTS's train_search.py sets it; it lets cuDNN pick its fastest algorithms
        torch.backends.cudnn.benchmark = True
        default = precision_state()
        precisions = [("fp32", strict_fp32(default)), ("default", default)]
    else:
        default = None
        precisions = [("fp32", None)]
    name, cuda, cudnn = device_info(device)
    results = [bench_run(run, device, args.iters, not args.no_f64, precisions) for run in args.run]
    doc = {
        "format": "exapt-darts-vs-pytorch", "version": 1,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv),
        "device": name, "torch_version": torch.__version__, "cuda_version": cuda,
        "cudnn_version": cudnn,
        "pytorch_settings": {"cudnn_benchmark": device.type == "cuda",
                             "precisions": {label: s for label, s in precisions}},
        "results": results,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
    print_table(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
