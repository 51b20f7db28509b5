"""Trace a torch module into a :class:`~tinytune.ir.graph.Graph`.

Leaf op modules describe themselves through a method ``ir_describe() -> dict`` with the keys
``kind``, and optionally ``act``, ``role``, ``conv_index``, ``attrs`` and ``params`` (keyword
arguments of :class:`~tinytune.ir.graph.ParamInfo`). The tracer runs one forward pass with
forward hooks on those modules and records which tensors each reads and writes, their shapes,
and whether autograd tracks them. Tensors are identified by object identity during the pass; a
call that returns one of its inputs unchanged is no op and is not recorded.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from tinytune.ir.graph import OP_KINDS, Graph, Op, ParamInfo, TensorInfo

__all__ = ["trace"]


def _macs(kind: str, attrs: dict[str, int], ins: list[TensorInfo], out: TensorInfo) -> int:
    if kind == "conv":
        taps = attrs["kernel"] * attrs.get("kernel_w", attrs["kernel"])
        return out.numel * (ins[0].shape[1] // attrs["groups"]) * taps
    if kind == "linear":
        return out.numel * math.prod(ins[0].shape[1:])
    if kind == "maxpool":  # comparisons
        return out.numel * attrs["kernel_h"] * attrs["kernel_w"]
    if kind in ("gap", "avgpool"):
        return ins[0].numel
    return out.numel


def trace(module: nn.Module, example: Tensor) -> Graph:
    """Trace ``module`` on ``example`` (N, C, H, W); autograd flags are recorded as the update
    scheme set them. The module is not modified."""
    tensor_ids: dict[int, int] = {}
    keep: list[Tensor] = []  # keeps traced tensors alive so that their ids stay unique
    tensors: dict[int, TensorInfo] = {}
    ops: list[Op] = []

    def tid(t: Tensor) -> int:
        key = id(t)
        if key not in tensor_ids:
            tensor_ids[key] = len(tensor_ids)
            keep.append(t)
            tensors[tensor_ids[key]] = TensorInfo(
                tensor_ids[key], tuple(t.shape), bool(t.requires_grad)
            )
        return tensor_ids[key]

    names = {m: n for n, m in module.named_modules()}

    def hook(mod: nn.Module, args: tuple[Any, ...], output: Tensor) -> None:
        if any(output is a for a in args):
            return  # an identity (e.g. upsampling to the size a tensor already has): no op
        desc = mod.ir_describe()  # type: ignore[operator]
        kind = desc["kind"]
        if kind not in OP_KINDS:
            raise ValueError(f"unknown op kind {kind!r} from {names[mod]}; allowed: {OP_KINDS}")
        inputs = [a for a in args if isinstance(a, Tensor)]
        if kind == "upsample":
            inputs = inputs[:1]  # the second argument only gives the size
        in_ids = tuple(tid(a) for a in inputs)
        out_id = tid(output)
        attrs = dict(desc.get("attrs", {}))
        ops.append(
            Op(
                index=len(ops),
                name=names[mod],
                kind=kind,
                inputs=in_ids,
                output=out_id,
                act=desc.get("act", "none"),
                conv_index=desc.get("conv_index"),
                role=desc.get("role", ""),
                attrs=attrs,
                params=ParamInfo(**desc.get("params", {})),
                macs=_macs(kind, attrs, [tensors[i] for i in in_ids], tensors[out_id]),
            )
        )

    handles = [
        m.register_forward_hook(hook) for m in module.modules() if hasattr(m, "ir_describe")
    ]
    try:
        with torch.enable_grad():
            x = example.detach()
            input_id = tid(x)
            y = module(x)
            output_id = tid(y)
    finally:
        for h in handles:
            h.remove()
    return Graph(tuple(ops), tensors, input_id, output_id, int(y.shape[-1]))
