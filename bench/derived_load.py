#!/usr/bin/env python3
"""Loads the weights that `exapt train` saved into a PyTorch model of DARTS's
NetworkCIFAR with load_state_dict(strict=True), evaluates it on the Fashion-MNIST test
set, and compares the accuracy with the one exapt reported.

  derived_load.py --run DIR --data DIR [--channels C --layers L --auxiliary 0|1] --out F

DIR is the output of an `exapt search` that trained what it found (genotype.json,
metrics.jsonl, train/weights.safetensors, train/metrics.jsonl); the network's size comes
from the run's recorded configuration unless given."""
import argparse
import gzip
import json
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from darts_step import load_safetensors


class ReLUConvBN(nn.Module):
    def __init__(self, ci, co, k, stride, pad):
        super().__init__()
        self.op = nn.Sequential(nn.ReLU(), nn.Conv2d(ci, co, k, stride, pad, bias=False),
                                nn.BatchNorm2d(co))

    def forward(self, x):
        return self.op(x)


class FactorizedReduce(nn.Module):
    def __init__(self, ci, co):
        super().__init__()
        self.conv_1 = nn.Conv2d(ci, co // 2, 1, 2, bias=False)
        self.conv_2 = nn.Conv2d(ci, co // 2, 1, 2, bias=False)
        self.bn = nn.BatchNorm2d(co)

    def forward(self, x):
        x = F.relu(x)
        return self.bn(torch.cat([self.conv_1(x), self.conv_2(x[:, :, 1:, 1:])], dim=1))


class Seq(nn.Module):
    """A named `op` sequence, as DARTS's SepConv and DilConv."""

    def __init__(self, *layers):
        super().__init__()
        self.op = nn.Sequential(*layers)

    def forward(self, x):
        return self.op(x)


def sep_conv(c, k, s):
    return Seq(nn.ReLU(), nn.Conv2d(c, c, k, s, k // 2, groups=c, bias=False),
               nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
               nn.Conv2d(c, c, k, 1, k // 2, groups=c, bias=False),
               nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))


def dil_conv(c, k, s):
    return Seq(nn.ReLU(), nn.Conv2d(c, c, k, s, k - 1, dilation=2, groups=c, bias=False),
               nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))


def operation(name, c, s):
    if name == "max_pool_3x3":
        return nn.MaxPool2d(3, s, 1)
    if name == "avg_pool_3x3":
        return nn.AvgPool2d(3, s, 1, count_include_pad=False)
    if name == "skip_connect":
        return nn.Identity() if s == 1 else FactorizedReduce(c, c)
    if name.startswith("sep_conv_"):
        return sep_conv(c, int(name[-1]), s)
    if name.startswith("dil_conv_"):
        return dil_conv(c, int(name[-1]), s)
    if name == "conv_7x1_1x7":
        return Seq(nn.ReLU(), nn.Conv2d(c, c, (1, 7), (1, s), (0, 3), bias=False),
                   nn.Conv2d(c, c, (7, 1), (s, 1), (3, 0), bias=False), nn.BatchNorm2d(c))
    raise ValueError(name)


class Cell(nn.Module):
    def __init__(self, g, cpp, cp, c, reduction, reduction_prev):
        super().__init__()
        self.preprocess0 = FactorizedReduce(cpp, c) if reduction_prev else ReLUConvBN(cpp, c, 1, 1, 0)
        self.preprocess1 = ReLUConvBN(cp, c, 1, 1, 0)
        edges = g["reduce" if reduction else "normal"]
        self.concat = g["reduce_concat" if reduction else "normal_concat"]
        self.inputs = [i for _, i in edges]
        self._ops = nn.ModuleList(operation(op, c, 2 if reduction and i < 2 else 1)
                                  for op, i in edges)
        self.multiplier = len(self.concat)

    def forward(self, s0, s1):
        states = [self.preprocess0(s0), self.preprocess1(s1)]
        for i in range(len(self._ops) // 2):
            h = [self._ops[2 * i + k](states[self.inputs[2 * i + k]]) for k in range(2)]
            states.append(h[0] + h[1])
        return torch.cat([states[i] for i in self.concat], dim=1)


class AuxiliaryHead(nn.Module):
    """DARTS's AuxiliaryHeadCIFAR; its second convolution spans what the pooling leaves."""

    def __init__(self, c, classes, size):
        super().__init__()
        k = (size - 5) // 3 + 1
        self.features = nn.Sequential(nn.ReLU(), nn.AvgPool2d(5, 3, 0, count_include_pad=False),
                                      nn.Conv2d(c, 128, 1, bias=False), nn.BatchNorm2d(128),
                                      nn.ReLU(), nn.Conv2d(128, 768, k, bias=False),
                                      nn.BatchNorm2d(768), nn.ReLU())
        self.classifier = nn.Linear(768, classes)


class NetworkCIFAR(nn.Module):
    def __init__(self, g, cin, c, classes, layers, stem_multiplier=3, auxiliary=False, size=28):
        super().__init__()
        cs = stem_multiplier * c
        self.stem = nn.Sequential(nn.Conv2d(cin, cs, 3, padding=1, bias=False), nn.BatchNorm2d(cs))
        cpp, cp, cc, rp = cs, cs, c, False
        self.cells = nn.ModuleList()
        for i in range(layers):
            red = i in (layers // 3, 2 * layers // 3)
            if red:
                cc *= 2
            cell = Cell(g, cpp, cp, cc, red, rp)
            self.cells.append(cell)
            cpp, cp, rp = cp, cell.multiplier * cc, red
            if red:
                size = (size + 1) // 2
            if auxiliary and i == 2 * layers // 3:
                self.auxiliary_head = AuxiliaryHead(cp, classes, size)
        self.classifier = nn.Linear(cp, classes)

    def forward(self, x):
        s0 = s1 = self.stem(x)
        for cell in self.cells:
            s0, s1 = s1, cell(s0, s1)
        return self.classifier(F.adaptive_avg_pool2d(s1, 1).flatten(1))


def idx(path):
    data = gzip.open(path).read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--channels", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--auxiliary", type=int)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    g = json.load(open(f"{a.run}/genotype.json"))
    header = json.loads(open(f"{a.run}/metrics.jsonl").readline())
    train = header["config"].get("train", {"channels": 12, "layers": 5, "auxiliary": False})
    c = a.channels or train["channels"]
    layers = a.layers or train["layers"]
    aux = bool(train["auxiliary"] if a.auxiliary is None else a.auxiliary)
    model = NetworkCIFAR(g, 1, c, 10, layers, auxiliary=aux)
    tensors = {k: torch.as_tensor(v) for k, v in load_safetensors(f"{a.run}/train/weights.safetensors").items()}
    missing = model.load_state_dict(tensors, strict=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(dev).eval()
    x = (idx(f"{a.data}/t10k-images-idx3-ubyte.gz").float() / 255 - 0.2860) / 0.3530
    y = idx(f"{a.data}/t10k-labels-idx1-ubyte.gz").long()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(y), 500):
            out = model(x[i:i + 500, None].to(dev))
            correct += (out.argmax(1).cpu() == y[i:i + 500]).sum().item()
    acc = correct / len(y)
    epochs = [json.loads(l) for l in open(f"{a.run}/train/metrics.jsonl") if '"type":"epoch"' in l]
    exapt_acc = epochs[-1]["valid_acc"]
    result = {"load_state_dict": "strict, all keys matched" if not missing.missing_keys and
              not missing.unexpected_keys else str(missing),
              "tensors": len(tensors), "pytorch_test_accuracy": acc,
              "exapt_test_accuracy": exapt_acc, "torch": torch.__version__, "device": dev}
    json.dump(result, open(a.out, "w"), indent=1)
    print(json.dumps(result))
    return 0 if abs(acc - exapt_acc) < 2e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
