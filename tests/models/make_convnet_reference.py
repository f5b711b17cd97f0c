#!/usr/bin/python3
"""Writes tests/models/convnet_reference.json: PyTorch's own forward output and gradients of
the FedAvg paper's CNN and of LeNet-5 for fixed parameters and inputs, read by
ConvNet.MatchesTheStoredPyTorchReference. Run once, with Debian's python3-torch:

    /usr/bin/python3 tests/models/make_convnet_reference.py > tests/models/convnet_reference.json

Parameters, images and labels come from formulas both sides evaluate alike (double-precision
sin/cos of the index, rounded to float32): parameter i of a tensor of fan-in f is
2 * sin(0.37 * i + 0.1) / sqrt(f) over the flat buffer, biases included; pixel j of the
batch is cos(0.013 * j); label b is (3 * b + 1) % 10. Stored: the logits of every example,
the mean cross-entropy loss, each parameter tensor's gradient sum of squares, and the
gradient at 16 evenly spaced positions of each tensor.
"""
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SIDE, CLASSES = 4, 28, 10


def build(kind, side=SIDE, classes=CLASSES):
    """The model from torch.nn: its convolutions, hidden fully connected layers and output.
    Also imported by ConvNet.LossAndGradientAreThoseOfPyTorch's script."""
    if kind == "cnn":
        convs, hidden = [nn.Conv2d(1, 32, 5, padding=2), nn.Conv2d(32, 64, 5, padding=2)], [512]
    else:
        convs, hidden = [nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5, padding=0)], [120, 84]
    with torch.no_grad():
        probe = torch.zeros(1, 1, side, side)
        for c in convs:
            probe = F.max_pool2d(F.relu(c(probe)), 2)
    widths = [probe.numel()] + hidden
    fcs = [nn.Linear(widths[i], widths[i + 1]) for i in range(len(hidden))]
    out = nn.Linear(widths[-1], classes)
    return convs, fcs, out


def logits_of(convs, fcs, out, x):
    """The forward pass of build()'s model on images x [batch, 1, side, side]."""
    for c in convs:
        x = F.max_pool2d(F.relu(c(x)), 2)
    x = x.flatten(1)
    for f in fcs:
        x = F.relu(f(x))
    return out(x)


def main():
    result = {"batch": BATCH, "side": SIDE, "classes": CLASSES, "torch": torch.__version__, "models": {}}
    images = torch.tensor([math.cos(0.013 * j) for j in range(BATCH * SIDE * SIDE)], dtype=torch.float32)
    labels = torch.tensor([(3 * b + 1) % CLASSES for b in range(BATCH)])
    for kind in ("cnn", "lenet5"):
        convs, fcs, out = build(kind)
        modules = convs + fcs + [out]
        params = [p for m in modules for p in (m.weight, m.bias)]
        fan_in = [m.weight[0].numel() for m in modules for _ in (0, 1)]
        at = 0
        with torch.no_grad():
            for p, f in zip(params, fan_in):
                n = p.numel()
                values = [2.0 * math.sin(0.37 * (at + i) + 0.1) / math.sqrt(f) for i in range(n)]
                p.copy_(torch.tensor(values, dtype=torch.float32).view_as(p))
                at += n
        logits = logits_of(convs, fcs, out, images.view(BATCH, 1, SIDE, SIDE))
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        tensors = []
        for p in params:
            g = p.grad.reshape(-1).double()
            picks = [(k * (g.numel() - 1)) // 15 for k in range(16)]
            tensors.append({"numel": g.numel(), "grad_sumsq": float((g * g).sum()),
                            "picks": picks, "grad_at": [float(g[i]) for i in picks]})
        result["models"][kind] = {"numel": at, "loss": float(loss), "logits": [float(v) for v in logits.reshape(-1)],
                                  "tensors": tensors}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
