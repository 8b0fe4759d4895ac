#!/usr/bin/env python3
"""PyTorch's formulations of one DARTS edge's mixed sum, forward and backward: y = sum_i
w_i * x_i over 7 candidate outputs, then y.backward(g) for the gradients of every x_i and
of w; median ms per step, a synchronize included. bench_mixed_sum gives exapt's time for
the same work (its edge_ms: the forward, alpha-gradient and candidate-gradient nodes).

  mixed_sum.py [--exapt EXAPT.jsonl] [--iters N] [--out REPORT.json]

Formulations: a Python loop of products (DARTS's MixedOp), torch.stack + a weighted sum,
torch.einsum, and the loop under torch.compile (when it works on this machine). With
--exapt, the report puts bench_mixed_sum's figures beside PyTorch's fastest."""
import argparse
import json
import statistics
import sys
import time

import torch

SHAPES = [(64, 16, 32, 32), (256, 64, 32, 32)]
NX = 7


def loop(w, xs):
    return sum(w[i + 1] * x for i, x in enumerate(xs))


def stacked(w, xs):
    return (torch.stack(xs) * w[1:].view(-1, 1, 1, 1, 1)).sum(0)


def einsum(w, xs):
    return torch.einsum("k,knchw->nchw", w[1:], torch.stack(xs))


def time_one(fn, w, xs, g, iters):
    def step():
        for t in [w, *xs]:
            t.grad = None
        fn(w, xs).backward(g)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exapt", help="bench_mixed_sum's output (JSON lines)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out")
    a = ap.parse_args()
    dev = torch.device("cuda")
    forms = {"loop": loop, "stack": stacked, "einsum": einsum}
    try:
        forms["compiled_loop"] = torch.compile(loop)
    except Exception as e:  # torch.compile is optional
        print(f"torch.compile unavailable: {e}", file=sys.stderr)
    exapt = {}
    if a.exapt:
        with open(a.exapt) as f:
            for line in f:
                r = json.loads(line)
                exapt[tuple(r["shape"])] = r
    rows = []
    for shape in SHAPES:
        gen = torch.Generator(device=dev).manual_seed(0)
        xs = [torch.rand(shape, device=dev, generator=gen).requires_grad_() for _ in range(NX)]
        w = torch.rand(NX + 1, device=dev, generator=gen).requires_grad_()
        g = torch.rand(shape, device=dev, generator=gen)
        row = {"shape": list(shape), "pytorch_ms": {}}
        for name, fn in forms.items():
            try:
                row["pytorch_ms"][name] = time_one(fn, w, xs, g, a.iters)
            except Exception as e:
                print(f"{name} at {shape}: {e}", file=sys.stderr)
        best = min(row["pytorch_ms"].items(), key=lambda kv: kv[1])
        row["pytorch_fastest"] = {"formulation": best[0], "ms": best[1]}
        if shape in exapt:
            row["exapt_edge_ms"] = exapt[shape]["edge_ms"]
            row["speedup_vs_fastest"] = best[1] / exapt[shape]["edge_ms"]
        rows.append(row)
        del xs, w, g
        torch.cuda.empty_cache()
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "candidates": NX, "iters": a.iters, "rows": rows}
    text = json.dumps(report, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    for r in rows:
        print(f"{r['shape']}: PyTorch fastest {r['pytorch_fastest']['formulation']} "
              f"{r['pytorch_fastest']['ms']:.3f} ms, exapt {r.get('exapt_edge_ms', float('nan')):.3f} ms")


if __name__ == "__main__":
    main()
