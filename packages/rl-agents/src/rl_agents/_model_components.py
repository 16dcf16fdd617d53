"""Building blocks for agent models. They take one batch dim ([B, ...]); the complete
models in ``_pg_models`` handle the ``[]`` / ``[B]`` / ``[T, B]`` leading dims around them."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rl_arrays import as_count, infer_leading_dims

from ._model_utils import conv2d_output_shape

__all__ = ["Conv2dHeadModel", "Conv2dModel", "MlpModel", "RunningMeanStdModel"]


def layer_sizes(name: str, sizes: int | Sequence[int] | None) -> list[int]:
    """An int, a sequence of ints, or None (no layers) as a list of positive ints (integral
    floats such as 64.0 taken as ints)."""
    if sizes is None:
        return []
    values = [sizes] if isinstance(sizes, (int, float)) else list(sizes)
    try:
        return [as_count(name, v, 1) for v in values]
    except ValueError:
        raise ValueError(
            f"{name} must be a positive int or a list of them, got {sizes!r}"
        ) from None


class MlpModel(torch.nn.Module):
    """Multilayer perceptron on [B, input_size] inputs.

    Each hidden layer is Linear + ``nonlinearity()`` (a Module class, e.g. ``torch.nn.ReLU``).
    With ``output_size`` a final linear layer (no nonlinearity) follows; without it the last
    hidden layer is the output. ``hidden_sizes`` may be empty for a linear model.
    """

    def __init__(
        self,
        input_size: int,
        hidden_sizes: int | Sequence[int] | None,
        output_size: int | None = None,
        nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
    ):
        super().__init__()
        (input_size,) = layer_sizes("input_size", input_size)
        hidden = layer_sizes("hidden_sizes", hidden_sizes)
        if output_size is None and not hidden:
            raise ValueError("MlpModel needs hidden_sizes or an output_size")
        layers: list[torch.nn.Module] = []
        last = input_size
        for size in hidden:
            layers += [torch.nn.Linear(last, size), nonlinearity()]
            last = size
        if output_size is not None:
            (output_size,) = layer_sizes("output_size", output_size)
            layers.append(torch.nn.Linear(last, output_size))
            last = output_size
        self.model = torch.nn.Sequential(*layers)
        self._output_size = last

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)

    @property
    def output_size(self) -> int:
        """Size of the last dim of the output."""
        return self._output_size


class Conv2dModel(torch.nn.Module):
    """A stack of Conv2d + ``nonlinearity()`` layers on [B, C, H, W] inputs.

    With ``use_maxpool`` each layer's stride is taken by a max-pool after it (the conv itself
    has stride 1) instead of a strided convolution. Needs the input channels only; see
    ``conv_out_size`` for the flattened output size of a given image size.

    Weights and activations are channels-last (NHWC in memory, shapes unchanged): oneDNN's
    convolutions on CPU and cuDNN's run faster on that layout; on CPU the Nature CNN's
    forward and backward on a batch of Atari frames take about a quarter less time.
    """

    def __init__(
        self,
        in_channels: int,
        channels: Sequence[int],
        kernel_sizes: Sequence[int],
        strides: Sequence[int],
        paddings: Sequence[int] | None = None,
        nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
        use_maxpool: bool = False,
    ):
        super().__init__()
        channels = layer_sizes("channels", channels)
        paddings = [0] * len(channels) if paddings is None else list(paddings)
        lengths = {len(channels), len(kernel_sizes), len(strides), len(paddings)}
        if len(lengths) != 1 or not channels:
            raise ValueError(
                "channels, kernel_sizes, strides and paddings must be non-empty lists of equal "
                f"length, got {list(channels)}, {list(kernel_sizes)}, {list(strides)}, {paddings}"
            )
        layers: list[torch.nn.Module] = []
        for c_in, c_out, k, s, p in zip(
            [in_channels, *channels[:-1]], channels, kernel_sizes, strides, paddings, strict=True
        ):
            conv_stride = 1 if use_maxpool else s
            layers += [torch.nn.Conv2d(c_in, c_out, k, stride=conv_stride, padding=p)]
            layers += [nonlinearity()]
            if use_maxpool and s > 1:
                layers.append(torch.nn.MaxPool2d(s))
        self.conv = torch.nn.Sequential(*layers)
        # Module.to takes memory_format (in place); torch's overloads of it leave it out.
        self.conv.to(memory_format=torch.channels_last)  # type: ignore[call-overload]

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.conv(input.contiguous(memory_format=torch.channels_last))

    def conv_out_size(self, h: int, w: int, c: int | None = None) -> int:
        """Number of outputs (C * H * W) for an [h, w] image, without running the model."""
        in_h, in_w = h, w
        for layer in self.conv:
            if isinstance(layer, (torch.nn.Conv2d, torch.nn.MaxPool2d)):
                h, w = conv2d_output_shape(
                    h, w, layer.kernel_size, layer.stride, layer.padding, layer.dilation
                )
                if h < 1 or w < 1:
                    raise ValueError(f"an image of {in_h}x{in_w} is too small for these layers")
            if isinstance(layer, torch.nn.Conv2d):
                c = layer.out_channels
        if c is None:
            raise ValueError("conv_out_size needs c when the model has no conv layer")
        return h * w * c


class Conv2dHeadModel(torch.nn.Module):
    """A ``Conv2dModel`` followed by an ``MlpModel`` head on the flattened features.

    Needs the full ``image_shape`` (C, H, W) to size the head. Without ``hidden_sizes`` and
    ``output_size`` there is no head and the output is the flattened conv features, in
    height, width, channel order: the order of the channels-last feature maps in memory, so
    flattening is a view and the gradient flows back in the convolutions' own layout.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        channels: Sequence[int],
        kernel_sizes: Sequence[int],
        strides: Sequence[int],
        hidden_sizes: int | Sequence[int] | None,
        output_size: int | None = None,
        paddings: Sequence[int] | None = None,
        nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
        use_maxpool: bool = False,
    ):
        super().__init__()
        if len(image_shape) != 3:
            raise ValueError(f"image_shape must be (C, H, W), got {tuple(image_shape)}")
        c, h, w = (int(s) for s in image_shape)
        self.conv = Conv2dModel(
            in_channels=c,
            channels=channels,
            kernel_sizes=kernel_sizes,
            strides=strides,
            paddings=paddings,
            nonlinearity=nonlinearity,
            use_maxpool=use_maxpool,
        )
        conv_out_size = self.conv.conv_out_size(h, w)
        self.head: torch.nn.Module
        if layer_sizes("hidden_sizes", hidden_sizes) or output_size is not None:
            self.head = MlpModel(conv_out_size, hidden_sizes, output_size, nonlinearity)
            self._output_size = self.head.output_size
        else:
            self.head = torch.nn.Identity()
            self._output_size = conv_out_size

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(input).permute(0, 2, 3, 1).reshape(input.shape[0], -1))

    @property
    def output_size(self) -> int:
        return self._output_size


class RunningMeanStdModel(torch.nn.Module):
    """Running mean and variance of data shaped ``shape``, kept as buffers (so they live in
    the model's state dict, move with it between devices and are shared with it).

    Only ``update`` changes them. Under torch.distributed (when initialised) every process
    must call ``update`` together: the batch statistics are combined across processes, so all
    keep identical values.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: Sequence[int]):
        super().__init__()
        self.shape = tuple(int(s) for s in shape)
        self.register_buffer("mean", torch.zeros(self.shape))
        self.register_buffer("var", torch.ones(self.shape))
        # float64: float32 counts stop growing past 2**24 samples.
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold the batch ``x`` ([...] + shape, any leading dims) into the statistics."""
        _, T, B, _ = infer_leading_dims(x, len(self.shape))
        x = x.reshape(T * B, *self.shape).to(device=self.mean.device, dtype=self.mean.dtype)
        batch_mean = x.mean(dim=0)
        batch_var = x.var(dim=0, unbiased=False)
        batch_count = float(T * B)
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            # Equal counts on every process: pool means first, then within-process variance
            # plus the spread of the process means around the pooled mean.
            world_size = dist.get_world_size()
            pooled_mean = batch_mean.clone()
            dist.all_reduce(pooled_mean)
            pooled_mean /= world_size
            pooled_var = batch_var + (batch_mean - pooled_mean) ** 2
            dist.all_reduce(pooled_var)
            batch_mean, batch_var = pooled_mean, pooled_var / world_size
            batch_count *= world_size
        count = float(self.count)
        total = count + batch_count
        delta = batch_mean - self.mean
        m2 = self.var * count + batch_var * batch_count + delta**2 * (count * batch_count / total)
        self.mean += delta * (batch_count / total)
        self.var.copy_(m2 / total)
        self.count += batch_count
