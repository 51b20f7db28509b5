"""Read an ONNX model (``torch.onnx.export``, a Keras or TensorFlow user's converter) as data.

An ONNX file is protobuf: reading it runs no code. Shapes come from ONNX's shape inference;
parameters are the graph's initializers (and ``Constant`` nodes). Each operator maps to a
canonical op of :data:`tinytune.networks.graph.OPS`; a ``MatMul`` by a constant followed by the
``Add`` of a constant is one linear layer, as converters write ``Dense``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinytune.errors import ModelError
from tinytune.networks.graph import (
    NetworkGraph,
    Node,
    fold_pads,
    fuse_silu,
    lift_1d,
    lift_1d_dim,
)

__all__ = ["read_onnx"]

_OPS = {
    "Conv": "conv",
    "BatchNormalization": "batchnorm",
    "Relu": "relu",
    "Clip": "relu6",
    "HardSwish": "hardswish",
    "HardSigmoid": "hardsigmoid",
    "Sigmoid": "sigmoid",
    "Add": "add",
    "Mul": "mul",
    "Concat": "cat",
    "MaxPool": "maxpool",
    "AveragePool": "avgpool",
    "GlobalAveragePool": "gap",
    "ReduceMean": "gap",
    "Flatten": "flatten",
    "Reshape": "flatten",
    "Squeeze": "squeeze",
    "Unsqueeze": "squeeze",
    "Gemm": "linear",
    "MatMul": "linear",
    "Pad": "pad",
    "Dropout": "identity",
    "Identity": "identity",
}


def _fail(path: str, what: str) -> ModelError:
    return ModelError(f"{path!r} {what}")


def read_onnx(path: str) -> NetworkGraph:
    """The network of an ONNX model.

    Raises:
        ModelError: the file is not an ONNX model, has a dynamic input shape, or an operator
            with no canonical form (named with its node).
    """
    import onnx
    from onnx import numpy_helper, shape_inference

    try:
        model = shape_inference.infer_shapes(_folded(onnx.load(path)), strict_mode=False)
    except Exception as e:  # protobuf's DecodeError and onnx's own errors
        raise _fail(path, f"is not a readable ONNX model ({type(e).__name__}: {e})") from e
    g = model.graph
    params: dict[str, np.ndarray] = {
        t.name: numpy_helper.to_array(t).astype(np.float32)
        if numpy_helper.to_array(t).dtype.kind == "f"
        else numpy_helper.to_array(t)
        for t in g.initializer
    }
    shapes: dict[str, tuple[int, ...]] = {}
    for value in [*g.input, *g.value_info, *g.output]:
        dims = value.type.tensor_type.shape.dim
        if value.name in params or not value.type.tensor_type.HasField("shape"):
            continue
        if any(not d.HasField("dim_value") for d in dims):
            raise _fail(
                path,
                f"gives tensor {value.name!r} a dynamic shape "
                f"({[d.dim_param or d.dim_value for d in dims]}); export it with a static "
                "input size (batch 1 included)",
            )
        shapes[value.name] = tuple(int(d.dim_value) for d in dims)
    inputs = [i.name for i in g.input if i.name not in params]
    if len(inputs) != 1:
        raise _fail(path, f"takes {len(inputs)} inputs; tinytune trains one-input networks")
    lifted: frozenset[str] = frozenset()
    if len(shapes.get(inputs[0], ())) == 3:  # (N, C, T): a 1-D network, read as 2-D
        lifted = frozenset(name for name, shape in shapes.items() if len(shape) == 3)
        shapes = {name: lift_1d(shape) for name, shape in shapes.items()}
    if len(g.output) != 1:
        raise _fail(path, f"returns {len(g.output)} values; tinytune trains one-output networks")
    nodes: list[Node] = []
    for i, node in enumerate(g.node):
        name = node.name or node.output[0] or f"node{i}"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.input and node.input[0] in lifted:
            attrs = _along_t(attrs)
        op = _OPS.get(node.op_type)
        if op is None:
            raise ModelError(
                f"{path!r}: node {name!r} is the ONNX operator {node.op_type}, which tinytune "
                f"cannot read; it reads {', '.join(sorted(_OPS))}"
            )
        call = _Call(op, node.op_type, name, list(node.input), node.output[0], attrs, params,
                     shapes, lifted, path)  # fmt: skip
        nodes.append(_READERS[op](call))
    nodes = fold_pads(fuse_silu(_merge_dense_bias(nodes, params)))
    return NetworkGraph(tuple(nodes), shapes, inputs[0], g.output[0].name, path)


def _folded(model: Any) -> Any:
    """``model`` with every node whose inputs are all constants computed once into an
    initializer (the padding amounts that exporters build from ``Constant``,
    ``ConstantOfShape``, ``Concat``, ``Reshape``, ``Slice``, ``Transpose``, ``Cast``), by
    ``onnx``'s own reference implementation of those operators (numpy; nothing of the file
    runs), so that shape inference sees them."""
    import onnx
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    g = model.graph
    constants = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    kept = []
    for node in g.node:
        inputs = [t for t in node.input if t]
        if not all(t in constants for t in inputs):  # it reads an activation
            kept.append(node)
            continue
        outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
                   for o in node.output]  # fmt: skip
        single = helper.make_model(
            helper.make_graph(
                [node],
                "constant",
                [],
                outputs,
                [numpy_helper.from_array(np.asarray(constants[t]), t) for t in set(inputs)],
            ),
            opset_imports=model.opset_import,
        )
        for name, value in zip(node.output, ReferenceEvaluator(single).run(None, {}), strict=True):
            constants[name] = np.asarray(value)
    del g.node[:]
    g.node.extend(kept)
    del g.initializer[:]
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items())
    return model


def _merge_dense_bias(nodes: list[Node], params: dict[str, np.ndarray]) -> list[Node]:
    """A bias-free linear layer whose one reader adds a constant: one linear layer with that
    bias (the ``MatMul`` + ``Add`` of a converted ``Dense``)."""
    out: list[Node] = []
    for node in nodes:
        prev = out[-1] if out else None
        if (
            node.op == "add"
            and len(node.inputs) == 1
            and prev is not None
            and prev.op == "linear"
            and "bias" not in prev.params
            and prev.output == node.inputs[0]
        ):
            bias = node.params["constant"].reshape(-1)
            out[-1] = Node(
                prev.name,
                "linear",
                prev.source,
                prev.inputs,
                node.output,
                prev.attrs,
                prev.params | {"bias": bias},
            )
            continue
        out.append(node)
    return out


def _along_t(attrs: dict[str, Any]) -> dict[str, Any]:
    """A 1-D operator's attributes as those of the 2-D one over (N, C, 1, T): a size of 1,
    stride 1 and no padding along the height."""
    out = dict(attrs)
    for key, height in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
        if key in attrs and len(attrs[key]) == 1:
            out[key] = [height, *attrs[key]]
    if "pads" in attrs and len(attrs["pads"]) == 2:
        begin, end = attrs["pads"]
        out["pads"] = [0, begin, 0, end]
    return out


def _ints(value: Any, n: int, default: int) -> tuple[int, ...]:
    return tuple(int(v) for v in value) if value is not None else (default,) * n


@dataclass(frozen=True)
class _Call:
    """One ONNX node, as the op readers below take it."""

    op: str
    op_type: str
    name: str
    inputs: list[str]
    output: str
    attrs: dict[str, Any]
    params: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]
    lifted: frozenset[str]  # a 1-D network's (N, C, T) tensors, read as (N, C, 1, T)
    path: str

    def node(
        self,
        inputs: list[str],
        attrs: dict[str, Any] | None = None,
        params: dict[str, np.ndarray] | None = None,
    ) -> Node:
        return Node(
            self.name, self.op, self.op_type, tuple(inputs), self.output, attrs or {}, params or {}
        )

    def constant(self, i: int) -> np.ndarray | None:
        """Input ``i`` where it is a constant, else None."""
        t = self.inputs[i] if len(self.inputs) > i else ""
        return self.params.get(t) if t else None

    @property
    def activations(self) -> list[str]:
        return [t for t in self.inputs if t and t not in self.params]

    def text(self, key: str, default: str) -> str:
        value = self.attrs.get(key, default)
        return value.decode() if isinstance(value, bytes) else value

    def refuse(self, what: str) -> ModelError:
        return ModelError(f"{self.path!r}: node {self.name!r} ({self.op_type}) {what}")


def _conv_padding(c: _Call, kernel: tuple[int, int], stride: tuple[int, ...]) -> tuple[int, ...]:
    """(top, bottom, left, right) of a ``Conv``: its ``pads``, or what ``auto_pad`` makes."""
    auto = c.text("auto_pad", "NOTSET")
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        top, left, bottom, right = _ints(c.attrs.get("pads"), 4, 0)
        return (top, bottom, left, right)
    dilation = _ints(c.attrs.get("dilations"), 2, 1)
    padding: list[int] = []
    for size, k, s, d in zip(c.shapes[c.inputs[0]][2:], kernel, stride, dilation, strict=True):
        total = max((-(-size // s) - 1) * s + d * (k - 1) + 1 - size, 0)
        small, big = total // 2, total - total // 2
        padding += [big, small] if auto == "SAME_LOWER" else [small, big]
    return tuple(padding)


def _conv(c: _Call) -> Node:
    w = c.constant(1)
    if w is None:
        raise c.refuse("has a weight that is not a constant")
    if w.ndim == 3 and c.inputs[0] in c.lifted:  # (O, C/g, k): 1 x k over (N, C, 1, T)
        w = w[:, :, None, :]
    if w.ndim != 4:
        raise c.refuse(f"is a {w.ndim - 2}-D convolution; tinytune trains 1-D and 2-D ones")
    kernel = (int(w.shape[2]), int(w.shape[3]))
    stride = _ints(c.attrs.get("strides"), 2, 1)
    bias = c.constant(2)
    attrs = {
        "kernel": kernel,
        "stride": stride,
        "padding": _conv_padding(c, kernel, stride),
        "dilation": _ints(c.attrs.get("dilations"), 2, 1),
        "groups": int(c.attrs.get("group", 1)),
    }
    return c.node(
        [c.inputs[0]], attrs, {"weight": w} | ({"bias": bias} if bias is not None else {})
    )


def _batchnorm(c: _Call) -> Node:
    scale, bias, mean, var = (c.constant(i) for i in range(1, 5))
    if mean is None or var is None or scale is None or bias is None:
        raise c.refuse("has statistics that are not constants")
    prm = {"weight": scale, "bias": bias, "mean": mean, "var": var}
    return c.node([c.inputs[0]], {"eps": float(c.attrs.get("epsilon", 1e-5))}, prm)


def _unary(c: _Call) -> Node:
    if c.op == "relu6":
        lo = c.constant(1) if c.constant(1) is not None else c.attrs.get("min")
        hi = c.constant(2) if c.constant(2) is not None else c.attrs.get("max")
        if lo is None or hi is None or (float(lo), float(hi)) != (0.0, 6.0):
            raise c.refuse(f"clamps to [{lo}, {hi}]; tinytune reads a clip to [0, 6] (ReLU6)")
    if c.op == "hardsigmoid":
        alpha, beta = float(c.attrs.get("alpha", 0.2)), float(c.attrs.get("beta", 0.5))
        if abs(alpha - 1 / 6) > 1e-6 or abs(beta - 0.5) > 1e-6:
            raise c.refuse(
                f"is max(0, min(1, {alpha:g}x + {beta:g})); tinytune reads PyTorch's "
                "hard-sigmoid, x/6 + 1/2"
            )
    return c.node([c.inputs[0]])


def _binary(c: _Call) -> Node:
    acts = c.activations
    if len(acts) == 1 and c.op == "add":  # a Dense's bias: see _merge_dense_bias
        constant = next(c.params[t] for t in c.inputs if t in c.params)
        return c.node(acts, {}, {"constant": constant})
    if len(acts) != 2:
        raise c.refuse(
            "combines a tensor with a constant; tinytune reads sums and products of two "
            "activations"
        )
    return c.node(acts)


def _cat(c: _Call) -> Node:
    dim = int(c.attrs.get("axis", 1))
    if c.inputs and c.inputs[0] in c.lifted:  # a 1-D network's axis, as (N, C, 1, T) has it
        dim = lift_1d_dim(dim)
    return c.node(c.activations, {"dim": dim})


def _pad(c: _Call) -> Node:
    pads = c.attrs.get("pads")
    if pads is None and c.constant(1) is not None:
        pads = c.constant(1).tolist()  # type: ignore[union-attr]
    mode, value = c.text("mode", "constant"), c.constant(2)
    zero = value is None or float(np.asarray(value).reshape(-1)[0]) == 0.0
    if pads is None or len(pads) != 8 or any(pads[i] for i in (0, 1, 4, 5)):
        zero = False
    if mode != "constant" or not zero:
        raise c.refuse(
            f"pads {pads} ({mode}); tinytune reads zero padding of height and width before a "
            "convolution"
        )
    return c.node([c.inputs[0]], {"padding": (pads[2], pads[6], pads[3], pads[7])})


def _pool(c: _Call) -> Node:
    pads = _ints(c.attrs.get("pads"), 4, 0)
    kernel = _ints(c.attrs.get("kernel_shape"), 2, 1)
    if c.op == "avgpool" and kernel == c.shapes[c.inputs[0]][2:] and not any(pads):
        # over the whole map (Keras' AveragePooling2D(8) on 8 x 8): a global average pool
        return Node(c.name, "gap", c.op_type, (c.inputs[0],), c.output)
    attrs = {
        "kernel": _ints(c.attrs.get("kernel_shape"), 2, 1),
        "stride": _ints(c.attrs.get("strides"), 2, 1),
        "padding": (pads[0], pads[2], pads[1], pads[3]),
    }
    if c.op == "maxpool":
        attrs["dilation"] = _ints(c.attrs.get("dilations"), 2, 1)
    return c.node([c.inputs[0]], attrs)


def _gap(c: _Call) -> Node:
    if c.op_type == "ReduceMean":
        axes = c.attrs.get("axes")
        if axes is None and c.constant(1) is not None:
            axes = c.constant(1).tolist()  # type: ignore[union-attr]
        rank = 3 if c.inputs[0] in c.lifted else len(c.shapes[c.inputs[0]])
        want = {2} if c.inputs[0] in c.lifted else {2, 3}  # a 1-D tensor's length
        if axes is None or {int(a) % rank for a in axes} != want:
            raise c.refuse(
                f"averages over axes {axes}; tinytune reads a mean over height and width (a "
                "global average pool)"
            )
    return c.node([c.inputs[0]])


def _squeeze(c: _Call) -> Node:
    """A 1-D network's unsqueeze to (N, C, 1, T) and squeeze back: nothing once its tensors
    are read so; a squeeze of pooled (N, C, 1, 1) features: a flatten."""
    x = c.inputs[0]
    same = c.shapes[x] == c.shapes.get(c.output)
    if same or (len(c.shapes.get(c.output, ())) == 2 and c.shapes[x][2:] == (1, 1)):
        return Node(c.name, "identity" if same else "flatten", c.op_type, (x,), c.output)
    raise c.refuse(
        f"reshapes {list(c.shapes[x])} to {list(c.shapes.get(c.output, ()))}; tinytune reads a "
        "1-D network's unsqueeze to (N, C, 1, T) and squeeze back, and a squeeze of pooled "
        "features"
    )


def _linear(c: _Call) -> Node:
    """A ``Gemm`` (y = αA·op(B) + βC) or a ``MatMul`` by a constant."""
    w = c.constant(1)
    if w is None:
        raise c.refuse("has a weight that is not a constant")
    if c.op_type == "Gemm":
        if c.attrs.get("transA", 0) or float(c.attrs.get("alpha", 1.0)) != 1.0:
            raise c.refuse("has transA or alpha, not a linear layer")
        if float(c.attrs.get("beta", 1.0)) != 1.0:
            raise c.refuse("has beta, not a linear layer")
    weight = w if c.op_type == "Gemm" and c.attrs.get("transB", 0) else w.T.copy()
    prm = {"weight": weight}
    bias = c.constant(2) if c.op_type == "Gemm" else None
    if bias is not None:
        prm["bias"] = bias.reshape(-1)
    return c.node([c.inputs[0]], {}, prm)


_READERS: dict[str, Callable[[_Call], Node]] = {
    "conv": _conv,
    "batchnorm": _batchnorm,
    **dict.fromkeys(
        ("relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "identity", "flatten"),
        _unary,
    ),
    "add": _binary,
    "mul": _binary,
    "cat": _cat,
    "pad": _pad,
    "maxpool": _pool,
    "avgpool": _pool,
    "gap": _gap,
    "squeeze": _squeeze,
    "linear": _linear,
}
