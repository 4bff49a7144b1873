"""A model zoo's convolution layers: the prior of One-Shot Tuner's prior-guided task sampling.

One-Shot Tuner (Ryu, Park & Sung, "One-Shot Tuner for Deep Learning Compilers", CC 2022) builds
the distribution that its task sampler follows from the layers of popular models in public model
zoos. This module lists the 2-D convolution layers of 29 image classifiers, written out from each
architecture's published definition (the torchvision model definitions: channel counts, kernels,
strides, paddings), batch 1, at each model's evaluation resolution (224x224 unless noted). The
layer lists are written here rather than read from a torchvision install: the torchvision wheels
that install beside this project's CPU build of torch do not import, and a layer list is all the
prior needs.

A layer is a :class:`ZooLayer`: its op (``conv2d_nchw``, or ``depthwise_conv2d_nchw`` where the
groups equal the input channels), in channels ``c``, input size ``h`` (square), out channels ``k``
(``= c * multiplier`` for depthwise), kernel ``r``, stride ``s``, padding ``p``. Grouped
convolutions that are not depthwise (ResNeXt's, RegNet's) have no op here and are left out, as
are non-square kernels (Inception-V3's 1x7 / 7x1) and non-convolution layers.

The zoo leaves out the networks the project evaluates on (:data:`HELD_OUT_NETWORKS`: the
standard suite's ResNet-18 and MobileNet-V2, and EfficientNet-B0 of the whole-network list), so
a predictor trained on sampled tasks has not seen those networks' layer statistics directly.
AlexNet, VGG-16 and SqueezeNet 1.0 are both suite networks and zoo members: the standard
leaderboard does not evaluate on them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["HELD_OUT_NETWORKS", "ZOO", "ZooLayer", "zoo_layers"]

#: Networks whose layers are not in the zoo (evaluation networks).
HELD_OUT_NETWORKS = ("resnet18", "mobilenet_v2", "efficientnet_b0")


@dataclass(frozen=True)
class ZooLayer:
    """One convolution layer of a zoo model (batch 1, square input and kernel)."""

    model: str
    op: str
    c: int
    h: int
    k: int
    r: int
    s: int
    p: int

    @property
    def params(self) -> dict[str, int]:
        """The op's parameters as in a task URI."""
        if self.op == "depthwise_conv2d_nchw":
            return {"n": 1, "c": self.c, "h": self.h, "w": self.h, "m": self.k // self.c, "r": self.r, "s": self.s,
                    "p": self.p}
        return {"n": 1, "c": self.c, "h": self.h, "w": self.h, "k": self.k, "r": self.r, "s": self.s, "p": self.p,
                "d": 1}


def _out(h: int, r: int, s: int, p: int, ceil: bool = False) -> int:
    span = h + 2 * p - r
    return (-(-span // s) if ceil else span // s) + 1


class _Net:
    """Collects a network's layers while tracking the feature map's size."""

    def __init__(self, name: str, h: int) -> None:
        self.name, self.h, self.layers = name, h, []  # type: ignore[var-annotated]

    def conv(self, c: int, k: int, r: int, s: int = 1, p: int | None = None, h: int | None = None) -> int:
        """A conv at the current size (or ``h``); moves the current size to its output. Returns ``k``."""
        p = (r - 1) // 2 if p is None else p
        h = self.h if h is None else h
        self.layers.append(ZooLayer(self.name, "conv2d_nchw", c, h, k, r, s, p))
        self.h = _out(h, r, s, p)
        return k

    def dw(self, c: int, r: int, s: int = 1, p: int | None = None) -> int:
        p = (r - 1) // 2 if p is None else p
        self.layers.append(ZooLayer(self.name, "depthwise_conv2d_nchw", c, self.h, c, r, s, p))
        self.h = _out(self.h, r, s, p)
        return c

    def se(self, c: int, squeeze: int) -> None:
        """Squeeze-and-excitation: two 1x1 convs on the pooled 1x1 map."""
        self.layers.append(ZooLayer(self.name, "conv2d_nchw", c, 1, squeeze, 1, 1, 0))
        self.layers.append(ZooLayer(self.name, "conv2d_nchw", squeeze, 1, c, 1, 1, 0))

    def pool(self, r: int, s: int, p: int = 0, ceil: bool = False) -> None:
        self.h = _out(self.h, r, s, p, ceil)


def _divisible(v: float, divisor: int = 8) -> int:
    """Channel rounding of the MobileNet family (torchvision ``_make_divisible``)."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _vgg(name: str, cfg: list[int | str]) -> list[ZooLayer]:
    net, c = _Net(name, 224), 3
    for v in cfg:
        if v == "M":
            net.pool(2, 2)
        else:
            c = net.conv(c, int(v), 3, 1, 1)
    return net.layers


def _resnet(name: str, blocks: list[int], bottleneck: bool, width_factor: int = 1) -> list[ZooLayer]:
    net = _Net(name, 224)
    c = net.conv(3, 64, 7, 2, 3)
    net.pool(3, 2, 1)
    for i, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks)):
        for j in range(n):
            stride = 2 if i > 0 and j == 0 else 1
            h = net.h
            out = planes * 4 if bottleneck else planes
            if bottleneck:
                width = planes * width_factor
                net.conv(c, width, 1)
                net.conv(width, width, 3, stride)
                net.conv(width, out, 1)
            else:
                net.conv(c, planes, 3, stride)
                net.conv(planes, planes, 3)
            if stride != 1 or c != out:
                net.conv(c, out, 1, stride, 0, h=h)
            c = out
    return net.layers


def _densenet(name: str, growth: int, blocks: tuple[int, ...], init: int) -> list[ZooLayer]:
    net = _Net(name, 224)
    c = net.conv(3, init, 7, 2, 3)
    net.pool(3, 2, 1)
    for i, n in enumerate(blocks):
        for j in range(n):
            h = net.h
            net.conv(c + j * growth, 4 * growth, 1)
            net.conv(4 * growth, growth, 3, h=h)
            net.h = h
        c += n * growth
        if i < len(blocks) - 1:
            c = net.conv(c, c // 2, 1)
            net.pool(2, 2)
    return net.layers


def _googlenet() -> list[ZooLayer]:
    net = _Net("googlenet", 224)
    net.conv(3, 64, 7, 2, 3)
    net.pool(3, 2, ceil=True)
    net.conv(64, 64, 1)
    net.conv(64, 192, 3)
    net.pool(3, 2, ceil=True)

    def inception(c: int, b1: int, r3: int, b3: int, r5: int, b5: int, proj: int) -> int:
        h = net.h
        net.conv(c, b1, 1)
        net.conv(c, r3, 1)
        net.conv(r3, b3, 3)
        net.conv(c, r5, 1)
        net.conv(r5, b5, 3)  # torchvision's "5x5" branch is a 3x3 conv
        net.conv(c, proj, 1)
        net.h = h
        return b1 + b3 + b5 + proj

    c = inception(192, 64, 96, 128, 16, 32, 32)
    c = inception(c, 128, 128, 192, 32, 96, 64)
    net.pool(3, 2, ceil=True)
    for args in [(192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64),
                 (112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128)]:
        c = inception(c, *args)
    net.pool(2, 2, ceil=True)
    c = inception(c, 256, 160, 320, 32, 128, 128)
    inception(c, 384, 192, 384, 48, 128, 128)
    return net.layers


def _mobilenet_v3(name: str, cfg: list[tuple[int, int, int, int, bool, int]], last: int) -> list[ZooLayer]:
    net = _Net(name, 224)
    c = net.conv(3, 16, 3, 2)
    for cin, r, exp, out, se, s in cfg:
        if exp != cin:
            net.conv(cin, exp, 1)
        net.dw(exp, r, s)
        if se:
            net.se(exp, _divisible(exp // 4))
        c = net.conv(exp, out, 1)
    net.conv(c, last, 1)
    return net.layers


_MBV3_LARGE = [(16, 3, 16, 16, False, 1), (16, 3, 64, 24, False, 2), (24, 3, 72, 24, False, 1),
               (24, 5, 72, 40, True, 2), (40, 5, 120, 40, True, 1), (40, 5, 120, 40, True, 1),
               (40, 3, 240, 80, False, 2), (80, 3, 200, 80, False, 1), (80, 3, 184, 80, False, 1),
               (80, 3, 184, 80, False, 1), (80, 3, 480, 112, True, 1), (112, 3, 672, 112, True, 1),
               (112, 5, 672, 160, True, 2), (160, 5, 960, 160, True, 1), (160, 5, 960, 160, True, 1)]
_MBV3_SMALL = [(16, 3, 16, 16, True, 2), (16, 3, 72, 24, False, 2), (24, 3, 88, 24, False, 1),
               (24, 5, 96, 40, True, 2), (40, 5, 240, 40, True, 1), (40, 5, 240, 40, True, 1),
               (40, 5, 120, 48, True, 1), (48, 5, 144, 48, True, 1), (48, 5, 288, 96, True, 2),
               (96, 5, 576, 96, True, 1), (96, 5, 576, 96, True, 1)]


def _efficientnet(name: str, width: float, depth: float, size: int) -> list[ZooLayer]:
    net = _Net(name, size)
    stages = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
              (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
    c = net.conv(3, _divisible(32 * width), 3, 2)
    for expand, r, stride, _, out, n in stages:
        out = _divisible(out * width)
        for j in range(math.ceil(n * depth)):
            exp = _divisible(c * expand)
            if exp != c:
                net.conv(c, exp, 1)
            net.dw(exp, r, stride if j == 0 else 1)
            net.se(exp, max(1, c // 4))
            c = net.conv(exp, out, 1)
    net.conv(c, 4 * c, 1)
    return net.layers


def _mnasnet(name: str, alpha: float) -> list[ZooLayer]:
    depths = [_divisible(d * alpha, 8) for d in (32, 16, 24, 40, 80, 96, 192, 320)]
    net = _Net(name, 224)
    c = net.conv(3, depths[0], 3, 2)
    net.dw(c, 3)
    c = net.conv(c, depths[1], 1)
    for out, r, s, expand, n in [(depths[2], 3, 2, 3, 3), (depths[3], 5, 2, 3, 3), (depths[4], 5, 2, 6, 3),
                                 (depths[5], 3, 1, 6, 2), (depths[6], 5, 2, 6, 4), (depths[7], 3, 1, 6, 1)]:
        for j in range(n):
            net.conv(c, c * expand, 1)
            net.dw(c * expand, r, s if j == 0 else 1)
            c = net.conv(c * expand, out, 1)
    net.conv(c, 1280, 1)
    return net.layers


def _shufflenet_v2(name: str, stages: tuple[int, int, int], last: int) -> list[ZooLayer]:
    net = _Net(name, 224)
    c = net.conv(3, 24, 3, 2)
    net.pool(3, 2, 1)
    for out, n in zip(stages, (4, 8, 4)):
        half = out // 2
        h = net.h
        net.dw(c, 3, 2)  # branch 1 of the strided unit
        net.conv(c, half, 1)
        net.h = h
        net.conv(c, half, 1)  # branch 2
        net.dw(half, 3, 2)
        net.conv(half, half, 1)
        for _ in range(n - 1):
            net.conv(half, half, 1)
            net.dw(half, 3)
            net.conv(half, half, 1)
        c = out
    net.conv(c, last, 1)
    return net.layers


def _squeezenet11() -> list[ZooLayer]:
    net = _Net("squeezenet1_1", 224)
    net.conv(3, 64, 3, 2, 0)
    c = 64

    def fire(squeeze: int, expand: int) -> int:
        net.conv(c, squeeze, 1)
        net.conv(squeeze, expand, 1)
        net.conv(squeeze, expand, 3)
        return 2 * expand

    for i, (sq, ex) in enumerate([(16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256),
                                  (64, 256)]):
        if i in (0, 2, 4):
            net.pool(3, 2, ceil=True)
        c = fire(sq, ex)
    net.conv(c, 1000, 1)
    return net.layers


def _from_suite(name: str, zoo_name: str) -> Callable[[], list[ZooLayer]]:
    def layers() -> list[ZooLayer]:
        from tune_gym.tasks.suites import get_suite

        out = []
        for st in get_suite(name).tasks:
            q, op = dict(st.task.params), st.task.op
            if op not in ("conv2d_nchw", "depthwise_conv2d_nchw"):
                continue
            k = q["c"] * q.get("m", 1) if op == "depthwise_conv2d_nchw" else q["k"]
            out += [ZooLayer(zoo_name, op, q["c"], q["h"], k, q["r"], q["s"], q["p"])] * st.weight
        return out

    return layers


_VGG11: list[int | str] = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]
#: Zoo models: name -> a function listing its conv layers (one entry per occurrence).
ZOO: dict[str, Callable[[], list[ZooLayer]]] = {
    "alexnet": _from_suite("alexnet", "alexnet"),
    "vgg16": _from_suite("vgg16", "vgg16"),
    "squeezenet1_0": _from_suite("squeezenet1.0", "squeezenet1_0"),
    "vgg11": lambda: _vgg("vgg11", _VGG11),
    "vgg13": lambda: _vgg("vgg13", [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]),
    "vgg19": lambda: _vgg("vgg19", [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
                                    512, 512, 512, 512, "M"]),
    "resnet34": lambda: _resnet("resnet34", [3, 4, 6, 3], False),
    "resnet50": lambda: _resnet("resnet50", [3, 4, 6, 3], True),
    "resnet101": lambda: _resnet("resnet101", [3, 4, 23, 3], True),
    "resnet152": lambda: _resnet("resnet152", [3, 8, 36, 3], True),
    "wide_resnet50_2": lambda: _resnet("wide_resnet50_2", [3, 4, 6, 3], True, 2),
    "wide_resnet101_2": lambda: _resnet("wide_resnet101_2", [3, 4, 23, 3], True, 2),
    "densenet121": lambda: _densenet("densenet121", 32, (6, 12, 24, 16), 64),
    "densenet161": lambda: _densenet("densenet161", 48, (6, 12, 36, 24), 96),
    "densenet169": lambda: _densenet("densenet169", 32, (6, 12, 32, 32), 64),
    "densenet201": lambda: _densenet("densenet201", 32, (6, 12, 48, 32), 64),
    "googlenet": _googlenet,
    "mobilenet_v3_large": lambda: _mobilenet_v3("mobilenet_v3_large", _MBV3_LARGE, 960),
    "mobilenet_v3_small": lambda: _mobilenet_v3("mobilenet_v3_small", _MBV3_SMALL, 576),
    "efficientnet_b1": lambda: _efficientnet("efficientnet_b1", 1.0, 1.1, 240),
    "efficientnet_b2": lambda: _efficientnet("efficientnet_b2", 1.1, 1.2, 288),
    "efficientnet_b3": lambda: _efficientnet("efficientnet_b3", 1.2, 1.4, 300),
    "mnasnet0_5": lambda: _mnasnet("mnasnet0_5", 0.5),
    "mnasnet1_0": lambda: _mnasnet("mnasnet1_0", 1.0),
    "shufflenet_v2_x0_5": lambda: _shufflenet_v2("shufflenet_v2_x0_5", (48, 96, 192), 1024),
    "shufflenet_v2_x1_0": lambda: _shufflenet_v2("shufflenet_v2_x1_0", (116, 232, 464), 1024),
    "shufflenet_v2_x1_5": lambda: _shufflenet_v2("shufflenet_v2_x1_5", (176, 352, 704), 1024),
    "shufflenet_v2_x2_0": lambda: _shufflenet_v2("shufflenet_v2_x2_0", (244, 488, 976), 2048),
    "squeezenet1_1": _squeezenet11,
}


def zoo_layers(models: list[str] | None = None) -> Iterator[ZooLayer]:
    """Every conv layer of ``models`` (default: the whole zoo), one entry per occurrence."""
    for name in models or list(ZOO):
        if name not in ZOO:
            raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(ZOO)}")
        yield from ZOO[name]()
