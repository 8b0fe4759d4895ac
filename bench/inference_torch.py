#!/usr/bin/env python3
"""Inference speed of saved weights (those bench_inference timed), beside exapt's: PyTorch eager fp32
(CUDA, and the CPU with a stated thread count) and onnxruntime on the exported model (each
provider it offers of CPU and CUDA), batch-1 latency and batch-256 throughput, host tensors
in and out (the copies included, as bench_inference times them). Each one's batch-256
logits are compared with exapt's. Prints one JSON object per line and a table last.

  inference_torch.py --weights W.safetensors --onnx W.onnx --dump DIR --exapt A.json ...
      [--threads N] [--seconds S] [--no-torch]

Differences are ||logits - exapt cpu's|| / ||exapt cpu's|| over the batch of 256."""
import argparse
import json
import re
import struct
import sys
import time

import numpy as np
import torch

from darts_step import load_safetensors
from derived_load import NetworkCIFAR


def recorded(path):
    """The genotype (as derived_load's NetworkCIFAR takes it) and the architecture in the
    weights' metadata."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(f.read(n))["__metadata__"]
    text = meta["genotype"]
    g = {}
    for part in ("normal", "reduce"):
        edges = re.search(part + r"=\[(.*?)\]", text).group(1)
        g[part] = [[op, int(i)] for op, i in re.findall(r"'(\w+)', (\d+)", edges)]
        g[part + "_concat"] = [int(i) for i in re.search(part + r"_concat=\[(.*?)\]", text).group(1).split(",")]
    return g, json.loads(meta["network"])


def median_ms(fn, seconds):
    for _ in range(3):
        fn()
    times, start = [], time.perf_counter()
    while len(times) < 5 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def compare(got, want):
    """||got - want|| / ||want|| over the batch's logits."""
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--exapt", nargs="+", default=[])
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--no-torch", action="store_true", help="onnxruntime's rows only")
    a = ap.parse_args()
    x = np.fromfile(f"{a.dump}/input-256.f32", dtype=np.float32).reshape(256, 1, 28, 28)
    ref = np.fromfile(f"{a.dump}/logits-cpu-256.f32", dtype=np.float32).reshape(256, -1)
    rows = [json.loads(open(p).read()) for p in a.exapt]
    for r in rows:
        r["runtime"] = f"exapt {r['backend']}"
        got = np.fromfile(f"{a.dump}/logits-{r['backend']}-256.f32", dtype=np.float32)
        r["logits_vs_exapt_cpu"] = compare(got.reshape(256, -1), ref)
    torch.set_num_threads(a.threads)
    g, net = recorded(a.weights)
    model = NetworkCIFAR(g, net["in_channels"], net["channels"], net["classes"], net["layers"],
                         net["stem_multiplier"], net["auxiliary"], net["height"])
    model.load_state_dict(load_safetensors(a.weights), strict=True)
    model.eval()
    # fp32 on CUDA twice: PyTorch's default, whose cuDNN convolutions may use TF32, and
    # strict fp32 (TF32 off), the arithmetic exapt does
    devices = [("cuda", True), ("cuda", False), ("cpu", False)] if torch.cuda.is_available() else [("cpu", False)]
    for dev, tf32 in [] if a.no_torch else devices:
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        m = model.to(dev)
        out = {}

        def run(n):
            with torch.inference_mode():
                t = torch.from_numpy(x[:n]).to(dev)
                out[n] = m(t).cpu().numpy()

        kind = "eager, cuDNN TF32 on" if tf32 else "eager fp32"
        r = {"runtime": f"pytorch {torch.__version__} {kind}", "backend": dev,
             "threads": a.threads if dev == "cpu" else None,
             "batch1_ms": median_ms(lambda: run(1), a.seconds),
             "batch256_ms": median_ms(lambda: run(256), a.seconds)}
        r["logits_vs_exapt_cpu"] = compare(out[256], ref)
        rows.append(r)
    try:
        import onnxruntime as ort
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                     if p in ort.get_available_providers()]
        for p in providers:
            o = ort.SessionOptions()
            o.intra_op_num_threads = a.threads
            s = ort.InferenceSession(a.onnx, o, providers=[p])
            got = {}

            def run(n):
                got[n] = s.run(["logits"], {"input": x[:n]})[0]

            r = {"runtime": f"onnxruntime {ort.__version__}", "backend": p,
                 "threads": a.threads if p.startswith("CPU") else None,
                 "batch1_ms": median_ms(lambda: run(1), a.seconds),
                 "batch256_ms": median_ms(lambda: run(256), a.seconds)}
            r["logits_vs_exapt_cpu"] = compare(got[256], ref)
            rows.append(r)
    except ImportError as e:
        print(json.dumps({"onnxruntime": f"not importable: {e}"}))
    for r in rows:
        r["batch256_images_per_s"] = 256 / (r["batch256_ms"] / 1e3)
        print(json.dumps(r))
    print(f"{'runtime':34} {'backend':22} {'batch 1 ms':>10} {'batch 256 img/s':>16} {'logits vs cpu':>13}")
    for r in rows:
        print(f"{r['runtime'][:34]:34} {str(r['backend'])[:22]:22} {r['batch1_ms']:10.3f} "
              f"{r['batch256_images_per_s']:16.1f} {r.get('logits_vs_exapt_cpu', 0):13.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
