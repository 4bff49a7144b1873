"""Reference networks as plain PyTorch modules, ready for ``torch.export`` and TVM Relax.

Each entry of :data:`MODELS` is a :class:`ModelSpec`: a name, a one-line description, the
expected parameter count, a builder and an example-input maker. The definitions follow the
torchvision architectures (AlexNet, VGG-16, ResNet-18, SqueezeNet 1.0, MobileNet-V2,
EfficientNet-B0) and HuggingFace's ``bert-base-uncased`` encoder layer for layer, so the
structure and the parameter counts are those of the reference variants. torchvision itself
is not used: its compiled operators do not load next to the CPU build of torch 2.13 installed
here. One extra network, ``tiny``, is a few layers deep for fast end-to-end tests.

Weights are random (nothing is downloaded): they are drawn from a ``torch.Generator`` seeded
with the ``seed`` given to :meth:`ModelSpec.build`, so one seed always gives bitwise the same
model. Batch-norm layers get random running statistics, so that inference-mode batch norm
is not an identity. Models are returned in ``eval()`` mode; dropout and stochastic depth are
identities there.

Usage::

    spec = get_model("resnet18")
    model = spec.build(seed=0)
    out = model(*spec.inputs())

Building a model under ``torch.device("meta")`` gives its structure without allocating or
drawing its weights (useful to count parameters of the large ones quickly).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from tune_gym.errors import TaskError

__all__ = [
    "MODELS",
    "VGG16",
    "AlexNet",
    "BasicBlock",
    "BertAttention",
    "BertEmbeddings",
    "BertLayer",
    "BertModel",
    "ConvBNAct",
    "EfficientNetB0",
    "Fire",
    "InvertedResidual",
    "MBConv",
    "MobileNetV2",
    "ModelSpec",
    "Network",
    "ResNet18",
    "SqueezeExcitation",
    "SqueezeNet",
    "TinyNet",
    "get_model",
    "inverted_bottleneck",
]

IMAGENET_CLASSES = 1000
BERT_VOCAB = 30522
BERT_SEQ_LEN = 128


class Network(nn.Module):
    """Base class of the networks here: a deterministic, seeded weight initialisation.

    Attributes:
        conv_mode: ``mode`` of the Kaiming-normal initialisation of convolutions
            (``"fan_out"`` as torchvision does for batch-normalised nets, ``"fan_in"`` to keep the
            forward activation scale in nets without batch norm).
        linear_std: standard deviation of the normal initialisation of ``nn.Linear`` weights.
    """

    conv_mode: Literal["fan_in", "fan_out"] = "fan_out"
    linear_std: float = 0.01

    def init_weights(self, generator: torch.Generator) -> None:
        """Draw every parameter and buffer from ``generator``.

        Convolutions: Kaiming normal (ReLU gain), zero bias. Linear layers: normal with
        :attr:`linear_std`, zero bias. Batch norm: weight 1, bias 0, running mean ~ N(0, 0.1),
        running variance ~ U(0.5, 1.5). Layer norm: weight 1, bias 0. Embeddings: N(0, 0.02)
        with the padding row zeroed.

        Raises:
            TypeError: a submodule holds parameters or buffers of a kind this method does not know.
        """
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode=self.conv_mode, nonlinearity="relu", generator=generator)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0.0, self.linear_std, generator=generator)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                _init_batch_norm(module, generator)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, 0.02, generator=generator)
                if module.padding_idx is not None:
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()
            elif _holds_tensors(module):
                raise TypeError(f"no initialisation for {type(module).__name__}")


def _holds_tensors(module: nn.Module) -> bool:
    """Whether ``module`` itself (not its children) has parameters or buffers."""
    return any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False))


def _init_batch_norm(bn: nn.BatchNorm2d, generator: torch.Generator) -> None:
    """Unit affine transform with random running statistics (not an identity at inference)."""
    nn.init.ones_(bn.weight)
    nn.init.zeros_(bn.bias)
    assert bn.running_mean is not None and bn.running_var is not None and bn.num_batches_tracked is not None
    with torch.no_grad():
        bn.running_mean.normal_(0.0, 0.1, generator=generator)
        bn.running_var.uniform_(0.5, 1.5, generator=generator)
        bn.num_batches_tracked.zero_()


class ConvBNAct(nn.Sequential):
    """Convolution without bias, batch norm, then an optional activation ("same" padding).

    Args:
        in_channels: input channels.
        out_channels: output channels.
        kernel_size: square kernel size (odd).
        stride: convolution stride.
        groups: convolution groups (``groups == in_channels`` for a depthwise convolution).
        activation: activation class instantiated after the batch norm, or ``None``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        groups: int = 1,
        activation: Callable[[], nn.Module] | None = nn.ReLU,
    ) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(
                in_channels, out_channels, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False
            ),
            nn.BatchNorm2d(out_channels),
        ]
        if activation is not None:
            layers.append(activation())
        super().__init__(*layers)


# ----------------------------------------------------------------------------- AlexNet, VGG


class AlexNet(Network):
    """torchvision's AlexNet: five convolutions (64-192-384-256-256), a 6x6 adaptive average
    pool and a 4096-4096-1000 classifier with dropout (61,100,840 parameters)."""

    conv_mode = "fan_in"

    def __init__(self, num_classes: int = IMAGENET_CLASSES, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(256, 256, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(dropout),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, 3, 224, 224) -> logits (N, num_classes)."""
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


VGG16_LAYERS: tuple[int | str, ...] = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
)


class VGG16(Network):
    """torchvision's VGG-16 without batch norm: thirteen 3x3 convolutions with ReLU and five max
    pools, a 7x7 adaptive average pool and a 4096-4096-1000 classifier with dropout
    (138,357,544 parameters)."""

    conv_mode = "fan_in"

    def __init__(self, num_classes: int = IMAGENET_CLASSES, dropout: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for item in VGG16_LAYERS:
            if item == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                assert isinstance(item, int)
                layers += [nn.Conv2d(channels, item, kernel_size=3, padding=1), nn.ReLU()]
                channels = item
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, 3, 224, 224) -> logits (N, num_classes)."""
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ----------------------------------------------------------------------------- ResNet-18


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv + BN (ReLU between), plus the input, then ReLU.

    When the stride or the width changes, the shortcut is a 1x1 strided convolution without
    bias followed by batch norm.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        stride: stride of the first convolution (and of the shortcut).
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, in, H, W) -> (N, out, H / stride, W / stride)."""
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(Network):
    """torchvision's ResNet-18: 7x7 stem, four stages of two basic blocks (64-128-256-512),
    global average pool and a 1000-way linear layer (11,689,512 parameters)."""

    def __init__(self, num_classes: int = IMAGENET_CLASSES) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._stage(64, 64, stride=1)
        self.layer2 = self._stage(64, 128, stride=2)
        self.layer3 = self._stage(128, 256, stride=2)
        self.layer4 = self._stage(256, 512, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    @staticmethod
    def _stage(in_channels: int, out_channels: int, stride: int) -> nn.Sequential:
        return nn.Sequential(BasicBlock(in_channels, out_channels, stride), BasicBlock(out_channels, out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, 3, 224, 224) -> logits (N, num_classes)."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ----------------------------------------------------------------------------- SqueezeNet 1.0


class Fire(nn.Module):
    """SqueezeNet Fire module: a 1x1 squeeze convolution, then 1x1 and 3x3 expand convolutions
    whose outputs are concatenated along channels (all followed by ReLU).

    Args:
        in_channels: input channels.
        squeeze: channels of the squeeze convolution.
        expand1x1: output channels of the 1x1 expand branch.
        expand3x3: output channels of the 3x3 expand branch.
    """

    def __init__(self, in_channels: int, squeeze: int, expand1x1: int, expand3x3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(in_channels, squeeze, kernel_size=1)
        self.squeeze_activation = nn.ReLU()
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, kernel_size=1)
        self.expand1x1_activation = nn.ReLU()
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, kernel_size=3, padding=1)
        self.expand3x3_activation = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, in, H, W) -> (N, expand1x1 + expand3x3, H, W)."""
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat(
            [self.expand1x1_activation(self.expand1x1(x)), self.expand3x3_activation(self.expand3x3(x))], dim=1
        )


class SqueezeNet(Network):
    """torchvision's SqueezeNet 1.0: a 96-channel 7x7/2 convolution, eight Fire modules between
    ceil-mode max pools, and a classifier of dropout, a 1x1 convolution to 1000 channels, ReLU
    and a global average pool (1,248,424 parameters)."""

    conv_mode = "fan_in"

    def __init__(self, num_classes: int = IMAGENET_CLASSES, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, kernel_size=7, stride=2),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(96, 16, 64, 64),
            Fire(128, 16, 64, 64),
            Fire(128, 32, 128, 128),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(256, 32, 128, 128),
            Fire(256, 48, 192, 192),
            Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
            Fire(512, 64, 256, 256),
        )
        self.final_conv = nn.Conv2d(512, num_classes, kernel_size=1)
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), self.final_conv, nn.ReLU(), nn.AdaptiveAvgPool2d((1, 1))
        )

    def init_weights(self, generator: torch.Generator) -> None:
        """As :meth:`Network.init_weights`, with the final convolution drawn from N(0, 0.01)."""
        super().init_weights(generator)
        nn.init.normal_(self.final_conv.weight, 0.0, 0.01, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, 3, 224, 224) -> logits (N, num_classes)."""
        return torch.flatten(self.classifier(self.features(x)), 1)


# ----------------------------------------------------------------------------- MobileNet-V2


def inverted_bottleneck(in_channels: int, out_channels: int, kernel_size: int, stride: int, expand_ratio: int,
                        activation: Callable[[], nn.Module], squeeze_channels: int | None = None) -> nn.Sequential:
    """The layers of a mobile inverted bottleneck (MobileNet-V2, EfficientNet): a 1x1 expansion to
    ``expand_ratio * in_channels`` (skipped for ratio 1), a ``kernel_size`` depthwise convolution
    of ``stride`` (both with BN and ``activation``), squeeze-excitation with a bottleneck of
    ``squeeze_channels`` when given, then a linear 1x1 projection with BN."""
    hidden = in_channels * expand_ratio
    layers: list[nn.Module] = []
    if expand_ratio != 1:
        layers.append(ConvBNAct(in_channels, hidden, kernel_size=1, activation=activation))
    layers.append(ConvBNAct(hidden, hidden, kernel_size=kernel_size, stride=stride, groups=hidden,
                            activation=activation))
    if squeeze_channels is not None:
        layers.append(SqueezeExcitation(hidden, squeeze_channels))
    layers.append(ConvBNAct(hidden, out_channels, kernel_size=1, activation=None))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """MobileNet-V2 block: 1x1 expansion (skipped for ratio 1), 3x3 depthwise convolution,
    both with BN + ReLU6, then a linear 1x1 projection with BN; the input is added when the
    shape is kept.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        stride: stride of the depthwise convolution.
        expand_ratio: hidden width as a multiple of ``in_channels``.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        self.use_residual = stride == 1 and in_channels == out_channels
        self.conv = inverted_bottleneck(in_channels, out_channels, 3, stride, expand_ratio, nn.ReLU6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, in, H, W) -> (N, out, H / stride, W / stride)."""
        out = self.conv(x)
        return x + out if self.use_residual else out


# (expand ratio t, output channels c, repeats n, first stride s), width multiplier 1.0.
MOBILENET_V2_STAGES: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
)


class MobileNetV2(Network):
    """torchvision's MobileNet-V2 (width 1.0): 32-channel stem, seventeen inverted residual
    blocks, a 1x1 convolution to 1280 channels, global average pool, dropout 0.2 and a
    1000-way linear layer (3,504,872 parameters)."""

    def __init__(self, num_classes: int = IMAGENET_CLASSES, dropout: float = 0.2) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNAct(3, 32, stride=2, activation=nn.ReLU6)]
        channels = 32
        for t, c, n, s in MOBILENET_V2_STAGES:
            for i in range(n):
                layers.append(InvertedResidual(channels, c, s if i == 0 else 1, t))
                channels = c
        layers.append(ConvBNAct(channels, 1280, kernel_size=1, activation=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, 3, 224, 224) -> logits (N, num_classes)."""
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ----------------------------------------------------------------------------- EfficientNet-B0


class SqueezeExcitation(nn.Module):
    """Squeeze-and-excitation: global average pool, 1x1 conv reduce + SiLU, 1x1 conv expand +
    sigmoid, and the result scales the input channel-wise.

    Args:
        channels: input (and output) channels.
        squeeze_channels: width of the bottleneck.
    """

    def __init__(self, channels: int, squeeze_channels: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, channels, 1)
        self.activation = nn.SiLU()
        self.scale_activation = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) -> (N, C, H, W)."""
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return x * self.scale_activation(scale)


class MBConv(nn.Module):
    """EfficientNet mobile inverted bottleneck: 1x1 expansion (skipped for ratio 1), kxk
    depthwise convolution (both BN + SiLU), squeeze-excitation with a bottleneck of a quarter
    of the *input* channels, then a linear 1x1 projection with BN; the input is added when the
    shape is kept. Stochastic depth on that residual is an identity at inference and omitted.

    Args:
        in_channels: input channels.
        out_channels: output channels.
        kernel_size: depthwise kernel size (3 or 5).
        stride: depthwise stride.
        expand_ratio: hidden width as a multiple of ``in_channels``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        self.use_residual = stride == 1 and in_channels == out_channels
        self.block = inverted_bottleneck(in_channels, out_channels, kernel_size, stride, expand_ratio, nn.SiLU,
                                         squeeze_channels=max(1, in_channels // 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, in, H, W) -> (N, out, H / stride, W / stride)."""
        out = self.block(x)
        return x + out if self.use_residual else out


# (expand ratio, kernel, first stride, input channels, output channels, repeats) of B0.
EFFICIENTNET_B0_STAGES: tuple[tuple[int, int, int, int, int, int], ...] = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)


class EfficientNetB0(Network):
    """torchvision's EfficientNet-B0: 32-channel stem, sixteen MBConv blocks in seven stages,
    a 1x1 convolution to 1280 channels (all with SiLU), global average pool, dropout 0.2 and a
    1000-way linear layer (5,288,548 parameters)."""

    def __init__(self, num_classes: int = IMAGENET_CLASSES, dropout: float = 0.2) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNAct(3, 32, stride=2, activation=nn.SiLU)]
        for expand, kernel, stride, in_channels, out_channels, repeats in EFFICIENTNET_B0_STAGES:
            stage = [
                MBConv(in_channels if i == 0 else out_channels, out_channels, kernel, stride if i == 0 else 1, expand)
                for i in range(repeats)
            ]
            layers.append(nn.Sequential(*stage))
        layers.append(ConvBNAct(320, 1280, kernel_size=1, activation=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, 3, 224, 224) -> logits (N, num_classes)."""
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ----------------------------------------------------------------------------- BERT-base


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, then LayerNorm and dropout.

    The position ids are ``0 .. seq_len - 1`` and the token-type ids all zero (HuggingFace's
    defaults when they are not given), so the position embeddings are the first ``seq_len``
    rows of their table and the token-type embedding is row 0, added by broadcasting: the same
    values as the lookups, with no index tensors to build inside the graph.

    Args:
        vocab_size: word vocabulary size.
        hidden: embedding width.
        max_positions: rows of the position table.
        type_vocab_size: rows of the token-type table.
        eps: LayerNorm epsilon.
        dropout: dropout probability.
    """

    def __init__(
        self, vocab_size: int, hidden: int, max_positions: int, type_vocab_size: int, eps: float, dropout: float
    ) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden)
        self.layer_norm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token ids (N, S) int64 -> embeddings (N, S, hidden)."""
        seq_len = input_ids.shape[1]
        x = self.word_embeddings(input_ids)
        x = x + self.position_embeddings.weight[:seq_len] + self.token_type_embeddings.weight[0]
        return self.dropout(self.layer_norm(x))


class BertAttention(nn.Module):
    """Multi-head self-attention without a mask, output projection, dropout, residual add and
    post-LayerNorm.

    Attention is written out as ``softmax(Q K^T / sqrt(d)) V`` with plain matmuls and reshapes.

    Args:
        hidden: model width.
        num_heads: attention heads (``hidden`` must be a multiple).
        eps: LayerNorm epsilon.
        dropout: dropout probability (attention probabilities and output).
    """

    def __init__(self, hidden: int, num_heads: int, eps: float, dropout: float) -> None:
        super().__init__()
        if hidden % num_heads:
            raise ValueError(f"hidden {hidden} is not a multiple of num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = hidden // num_heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention_dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(hidden, eps=eps)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(N, S, hidden) -> (N, heads, S, head_dim)."""
        n, s, _ = x.shape
        return x.view(n, s, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, S, hidden) -> (N, S, hidden)."""
        n, s, hidden = x.shape
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = self.attention_dropout(torch.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).transpose(1, 2).reshape(n, s, hidden)
        return self.layer_norm(x + self.dropout(self.dense(context)))


class BertLayer(nn.Module):
    """One BERT encoder layer: self-attention, then a GELU (exact, erf form) feed-forward
    network with dropout, residual add and post-LayerNorm.

    Args:
        hidden: model width.
        num_heads: attention heads.
        intermediate: feed-forward width.
        eps: LayerNorm epsilon.
        dropout: dropout probability.
    """

    def __init__(self, hidden: int, num_heads: int, intermediate: int, eps: float, dropout: float) -> None:
        super().__init__()
        self.attention = BertAttention(hidden, num_heads, eps, dropout)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.activation = nn.GELU()
        self.output = nn.Linear(intermediate, hidden)
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, S, hidden) -> (N, S, hidden)."""
        x = self.attention(x)
        return self.layer_norm(x + self.dropout(self.output(self.activation(self.intermediate(x)))))


class BertModel(Network):
    """HuggingFace's ``bert-base-uncased`` encoder with its pooler (109,482,240 parameters):
    embeddings, twelve layers of width 768 with 12 heads and a 3072-wide GELU feed-forward
    network (post-LayerNorm, eps 1e-12), and a tanh dense layer on the first token.

    Args:
        vocab_size: word vocabulary size.
        hidden: model width.
        num_layers: encoder layers.
        num_heads: attention heads.
        intermediate: feed-forward width.
        max_positions: longest sequence.
        type_vocab_size: token types.
        eps: LayerNorm epsilon.
        dropout: dropout probability (identity in eval mode).
    """

    linear_std = 0.02

    def __init__(
        self,
        vocab_size: int = BERT_VOCAB,
        hidden: int = 768,
        num_layers: int = 12,
        num_heads: int = 12,
        intermediate: int = 3072,
        max_positions: int = 512,
        type_vocab_size: int = 2,
        eps: float = 1e-12,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(vocab_size, hidden, max_positions, type_vocab_size, eps, dropout)
        self.layers = nn.ModuleList(
            [BertLayer(hidden, num_heads, intermediate, eps, dropout) for _ in range(num_layers)]
        )
        self.pooler = nn.Linear(hidden, hidden)
        self.pooler_activation = nn.Tanh()

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids (N, S) int64 -> (last hidden state (N, S, hidden), pooled output (N, hidden))."""
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x)
        pooled = self.pooler_activation(self.pooler(x[:, 0]))
        return x, pooled


# ----------------------------------------------------------------------------- tiny test net


class TinyNet(Network):
    """A few-layer network for fast end-to-end tests on (N, 3, 32, 32) images: 3x3 conv +
    BN + ReLU to 16 channels, one residual basic block, a stride-2 depthwise 3x3 conv + BN +
    ReLU, a 1x1 conv to 32 channels, global average pool and a 10-way linear layer (6,186
    parameters). Its linear weights are drawn from N(0, 0.1) so that the logits are not tiny
    next to a numerical tolerance of 1e-4."""

    linear_std = 0.1

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = ConvBNAct(3, 16)
        self.block = BasicBlock(16, 16)
        self.depthwise = ConvBNAct(16, 16, stride=2, groups=16)
        self.pointwise = nn.Conv2d(16, 32, kernel_size=1)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Images (N, 3, 32, 32) -> logits (N, num_classes)."""
        x = self.pointwise(self.depthwise(self.block(self.stem(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ----------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class ModelSpec:
    """A named network: how to build it with seeded random weights and example inputs for it.

    Attributes:
        name: registry name (``"resnet18"``).
        description: one line saying what the network is.
        parameters: the expected parameter count (that of the reference implementation).
        factory: builds the module (its weights are drawn by :meth:`build`).
        input_shape: shape of one example input without the batch dimension.
        vocab_size: for token-id inputs, the vocabulary size; ``None`` for float images.
    """

    name: str
    description: str
    parameters: int
    factory: Callable[[], Network] = field(kw_only=True, repr=False, compare=False)
    input_shape: tuple[int, ...] = field(kw_only=True, default=(3, 224, 224))
    vocab_size: int | None = field(kw_only=True, default=None)

    def build(self, seed: int = 0) -> nn.Module:
        """Build the network in eval mode with weights drawn from a generator seeded with ``seed``.

        The same seed gives bitwise the same weights. The module is placed on
        ``torch.get_default_device()``; on the meta device no weights are drawn.

        Args:
            seed: seed of the weight generator.

        Returns:
            The module, in ``eval()`` mode.
        """
        device = torch.get_default_device()
        with torch.device("meta"):
            model = self.factory()
        if device.type != "meta":
            model = model.to_empty(device="cpu")
            model.init_weights(torch.Generator().manual_seed(seed))
            model = model.to(device)
        return model.eval()

    def inputs(self, batch: int = 1, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Example inputs for ``model(*inputs)``, deterministic in ``seed``.

        Images are float32 uniform in [-1, 1); token ids are int64 uniform in ``[0, vocab_size)``.

        Args:
            batch: batch size (leading dimension).
            seed: seed of the input generator.

        Returns:
            A one-tuple with the input tensor.
        """
        generator = torch.Generator().manual_seed(seed)
        shape = (batch, *self.input_shape)
        if self.vocab_size is not None:
            return (torch.randint(0, self.vocab_size, shape, generator=generator, dtype=torch.int64),)
        return (torch.rand(shape, generator=generator, dtype=torch.float32) * 2 - 1,)


def _specs(specs: Sequence[ModelSpec]) -> dict[str, ModelSpec]:
    return {spec.name: spec for spec in specs}


MODELS: dict[str, ModelSpec] = _specs([
    ModelSpec("alexnet", "AlexNet (torchvision architecture), ImageNet 224x224", 61_100_840, factory=AlexNet),
    ModelSpec("vgg16", "VGG-16 without batch norm (torchvision architecture), ImageNet 224x224", 138_357_544,
              factory=VGG16),
    ModelSpec("resnet18", "ResNet-18 (torchvision architecture), ImageNet 224x224", 11_689_512, factory=ResNet18),
    ModelSpec("squeezenet1.0", "SqueezeNet 1.0 (torchvision architecture), ImageNet 224x224", 1_248_424,
              factory=SqueezeNet),
    ModelSpec("mobilenet_v2", "MobileNet-V2 width 1.0 (torchvision architecture), ImageNet 224x224", 3_504_872,
              factory=MobileNetV2),
    ModelSpec("efficientnet_b0", "EfficientNet-B0 (torchvision architecture), ImageNet 224x224", 5_288_548,
              factory=EfficientNetB0),
    ModelSpec("bert_base", "BERT-base encoder + pooler (HuggingFace bert-base-uncased architecture), 128 tokens",
              109_482_240, factory=BertModel, input_shape=(BERT_SEQ_LEN,), vocab_size=BERT_VOCAB),
    ModelSpec("tiny", "Tiny conv net (conv-BN-ReLU, residual block, depthwise, 1x1, linear), 32x32 images",
              6_186, factory=TinyNet, input_shape=(3, 32, 32)),
])
"""The networks, by name, in a fixed order."""


def get_model(name: str) -> ModelSpec:
    """The :class:`ModelSpec` called ``name``.

    Raises:
        TaskError: no such model (the message lists the known names).
    """
    try:
        return MODELS[name]
    except KeyError:
        raise TaskError(f"unknown model {name!r}; known models: {', '.join(MODELS)}") from None
