"""Read an ONNX model (``torch.onnx.export``, a Keras or TensorFlow user's converter) as data.

An ONNX file is protobuf: reading it runs no code. Shapes come from ONNX's shape inference;
parameters are the graph's initializers (and ``Constant`` nodes). Each operator maps to a
canonical op of :data:`tinytune.networks.graph.OPS`; a ``MatMul`` by a constant followed by the
``Add`` of a constant is one linear layer, as converters write ``Dense``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytune.errors import ModelError
from tinytune.networks.graph import NetworkGraph, Node, fold_pads

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
    "Squeeze": "flatten",
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
    if len(g.output) != 1:
        raise _fail(path, f"returns {len(g.output)} values; tinytune trains one-output networks")
    nodes: list[Node] = []
    for i, node in enumerate(g.node):
        name = node.name or node.output[0] or f"node{i}"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        op = _OPS.get(node.op_type)
        if op is None:
            raise ModelError(
                f"{path!r}: node {name!r} is the ONNX operator {node.op_type}, which tinytune "
                f"cannot read; it reads {', '.join(sorted(_OPS))}"
            )
        made = _node(
            op, node.op_type, name, list(node.input), node.output[0], attrs, params, shapes, path
        )
        if made is not None:
            nodes.append(made)
    nodes = fold_pads(_merge_dense_bias(nodes, params))
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


def _ints(value: Any, n: int, default: int) -> tuple[int, ...]:
    return tuple(int(v) for v in value) if value is not None else (default,) * n


def _node(
    op: str,
    op_type: str,
    name: str,
    inputs: list[str],
    output: str,
    attrs: dict[str, Any],
    params: dict[str, np.ndarray],
    shapes: dict[str, tuple[int, ...]],
    path: str,
) -> Node | None:
    where = f"node {name!r} ({op_type})"
    acts = [t for t in inputs if t and t not in params]

    def node(ins: list[str], a: dict[str, Any], p: dict[str, np.ndarray]) -> Node:
        return Node(name, op, op_type, tuple(ins), output, a, p)

    if op == "conv":
        w = params.get(inputs[1])
        if w is None:
            raise _fail(path, f"has {where} whose weight is not a constant")
        if w.ndim != 4:
            raise ModelError(
                f"{path!r}: {where} is a {w.ndim - 2}-D convolution; tinytune trains 2-D ones"
            )
        kh, kw = w.shape[2:]
        stride = _ints(attrs.get("strides"), 2, 1)
        dilation = _ints(attrs.get("dilations"), 2, 1)
        pads = _ints(attrs.get("pads"), 4, 0)
        auto = attrs.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        h, wd = shapes[inputs[0]][2:]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            padding = []
            for size, k, s, d in (
                (h, kh, stride[0], dilation[0]),
                (wd, kw, stride[1], dilation[1]),
            ):
                total = max((-(-size // s) - 1) * s + d * (k - 1) + 1 - size, 0)
                small, big = total // 2, total - total // 2
                padding += [big, small] if auto == "SAME_LOWER" else [small, big]
            top, bottom, left, right = padding
        elif auto == "VALID":
            top = bottom = left = right = 0
        else:
            top, left, bottom, right = pads
        prm = {"weight": w} | (
            {"bias": params[inputs[2]]} if len(inputs) > 2 and inputs[2] else {}
        )
        attrs_out = {
            "kernel": (kh, kw),
            "stride": stride,
            "padding": (top, bottom, left, right),
            "dilation": dilation,
            "groups": int(attrs.get("group", 1)),
        }
        return node([inputs[0]], attrs_out, prm)
    if op == "batchnorm":
        scale, bias, mean, var = (params.get(t) for t in inputs[1:5])
        if mean is None or var is None or scale is None or bias is None:
            raise _fail(path, f"has {where} whose statistics are not constants")
        prm = {"weight": scale, "bias": bias, "mean": mean, "var": var}
        return node([inputs[0]], {"eps": float(attrs.get("epsilon", 1e-5))}, prm)
    if op == "relu6":
        lo = params[inputs[1]] if len(inputs) > 1 and inputs[1] else attrs.get("min")
        hi = params[inputs[2]] if len(inputs) > 2 and inputs[2] else attrs.get("max")
        if lo is None or hi is None or (float(lo), float(hi)) != (0.0, 6.0):
            raise ModelError(
                f"{path!r}: {where} clamps to [{lo}, {hi}]; tinytune reads a clip to [0, 6] "
                "(ReLU6)"
            )
        return node([inputs[0]], {}, {})
    if op == "hardsigmoid":
        alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
        if abs(alpha - 1 / 6) > 1e-6 or abs(beta - 0.5) > 1e-6:
            raise ModelError(
                f"{path!r}: {where} is max(0, min(1, {alpha:g}x + {beta:g})); tinytune reads "
                "PyTorch's hard-sigmoid, x/6 + 1/2"
            )
        return node([inputs[0]], {}, {})
    if op in ("relu", "hardswish", "sigmoid", "identity", "flatten"):
        return node([inputs[0]], {}, {})
    if op in ("add", "mul"):
        if len(acts) == 1 and op == "add":
            constant = next(params[t] for t in inputs if t in params)
            return Node(name, op, op_type, tuple(acts), output, {}, {"constant": constant})
        if len(acts) != 2:
            raise ModelError(
                f"{path!r}: {where} combines a tensor with a constant; tinytune reads sums and "
                "products of two activations"
            )
        return node(acts, {}, {})
    if op == "cat":
        return node(acts, {"dim": int(attrs.get("axis", 1))}, {})
    if op == "pad":
        pads = attrs.get("pads")
        if pads is None and len(inputs) > 1 and inputs[1] in params:
            pads = params[inputs[1]].tolist()
        mode = attrs.get("mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        value = params.get(inputs[2]) if len(inputs) > 2 and inputs[2] else None
        zero = value is None or float(np.asarray(value).reshape(-1)[0]) == 0.0
        if (
            pads is None
            or len(pads) != 8
            or any(pads[i] for i in (0, 1, 4, 5))
            or mode != "constant"
            or not zero
        ):
            raise ModelError(
                f"{path!r}: {where} pads {pads} ({mode}); tinytune reads zero padding of height "
                "and width before a convolution"
            )
        return node([inputs[0]], {"padding": (pads[2], pads[6], pads[3], pads[7])}, {})
    if op in ("maxpool", "avgpool"):
        kernel = _ints(attrs.get("kernel_shape"), 2, 1)
        pads = _ints(attrs.get("pads"), 4, 0)
        stride = _ints(attrs.get("strides"), 2, 1)
        padding = (pads[0], pads[2], pads[1], pads[3])
        return node([inputs[0]], {"kernel": kernel, "stride": stride, "padding": padding}, {})
    if op == "gap":
        if op_type == "ReduceMean":
            axes = attrs.get("axes")
            if axes is None and len(inputs) > 1 and inputs[1] in params:
                axes = params[inputs[1]].tolist()
            rank = len(shapes[inputs[0]])
            if axes is None or {int(a) % rank for a in axes} != {2, 3}:
                raise ModelError(
                    f"{path!r}: {where} averages over axes {axes}; tinytune reads a mean over "
                    "height and width (a global average pool)"
                )
        return node([inputs[0]], {}, {})
    # linear: Gemm (y = αA·op(B) + βC) or MatMul by a constant
    w = params.get(inputs[1])
    if w is None:
        raise _fail(path, f"has {where} whose weight is not a constant")
    if op_type == "Gemm":
        if attrs.get("transA", 0) or float(attrs.get("alpha", 1.0)) != 1.0:
            raise _fail(path, f"has {where} with transA or alpha, not a linear layer")
        if float(attrs.get("beta", 1.0)) != 1.0:
            raise _fail(path, f"has {where} with beta, not a linear layer")
        weight = w if attrs.get("transB", 0) else w.T.copy()
    else:
        weight = w.T.copy()
    prm = {"weight": weight}
    if op_type == "Gemm" and len(inputs) > 2 and inputs[2]:
        prm["bias"] = params[inputs[2]].reshape(-1)
    return node([inputs[0]], {}, prm)
