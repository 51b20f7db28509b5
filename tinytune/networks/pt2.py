"""Read a ``torch.export`` archive (``torch.export.save``, a ``.pt2`` file) as data.

``torch.export.load`` would unpickle what the archive holds in pickled form (tensors of
unusual layouts, constants, example inputs), which runs code. This reader unpickles nothing: it
parses the archive's JSON (the program's graph and signature, the weights' metadata) and reads
each parameter and buffer from its raw bytes, and it refuses an archive whose tensors are
pickled. The graph is read at the level ``torch.export.export`` writes (``aten.conv2d``,
``aten.batch_norm``, ``aten.linear``) and at the core ATen level of ``run_decompositions()``
(``aten.convolution``, ``aten._native_batch_norm_legit_no_training``, ``aten.addmm``).
"""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
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

__all__ = ["read_pt2"]

# torch's serialized ScalarType codes (torch/_export/serde/schema.py) -> numpy
_DTYPES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float16,
    7: np.float32,
    8: np.float64,
    12: np.bool_,
}

# aten operator (without "torch.ops.aten." and the overload) -> canonical op
_OPS = {
    "conv2d": "conv",
    "conv1d": "conv",
    "convolution": "conv",
    "batch_norm": "batchnorm",
    "_native_batch_norm_legit_no_training": "batchnorm",
    "relu": "relu",
    "relu_": "relu",
    "relu6": "relu6",
    "hardtanh": "relu6",
    "hardtanh_": "relu6",
    "clamp": "relu6",
    "hardswish": "hardswish",
    "hardswish_": "hardswish",
    "hardsigmoid": "hardsigmoid",
    "hardsigmoid_": "hardsigmoid",
    "sigmoid": "sigmoid",
    "silu": "silu",
    "silu_": "silu",
    "add": "add",
    "add_": "add",
    "mul": "mul",
    "cat": "cat",
    "concat": "cat",
    "max_pool2d": "maxpool",
    "max_pool2d_with_indices": "maxpool",
    "max_pool1d": "maxpool",
    "avg_pool2d": "avgpool",
    "avg_pool1d": "avgpool",
    "adaptive_avg_pool2d": "gap",
    "_adaptive_avg_pool2d": "gap",
    "adaptive_avg_pool1d": "gap",
    "mean": "gap",
    "flatten": "flatten",
    "view": "flatten",
    "reshape": "flatten",
    "_unsafe_view": "flatten",
    "linear": "linear",
    "addmm": "linear",
    "pad": "pad",
    "constant_pad_nd": "pad",
    "dropout": "identity",
    "feature_dropout": "identity",
    "clone": "identity",
    "alias": "identity",
    "detach": "identity",
    "contiguous": "identity",
    # a 1-D network's way to a 2-D operator and back (core ATen pools so): nothing, once its
    # tensors are read as (N, C, 1, T)
    "unsqueeze": "squeeze",
    "squeeze": "squeeze",
}
# operators over a parameter alone, folded into the parameter (linear's weight at core level)
_TRANSPOSES = ("t", "permute", "transpose")


def _fail(path: str, what: str) -> ModelError:
    return ModelError(f"{path!r} {what}")


def _along_t(value: Any, default: int, other: int) -> tuple[int, int]:
    """A 1-D operator's size (an int or a one-element list) as (height, width): ``other``
    along the height, the size along the width."""
    if value is None:
        return other, default
    values = [value] if isinstance(value, int) else [int(v) for v in value]
    return other, (values[0] if values else default)


def _pair(value: Any, default: int) -> tuple[int, int]:
    if value is None:
        return default, default
    if isinstance(value, int):
        return value, value
    values = [int(v) for v in value]
    return (values[0], values[0]) if len(values) == 1 else (values[0], values[1])


class _Archive:
    """The entries of one model of a ``.pt2`` archive."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.zip = zipfile.ZipFile(path)
            names = self.zip.namelist()
        except (OSError, zipfile.BadZipFile) as e:
            raise _fail(path, f"is not a torch.export archive ({e})") from e
        if any(n.endswith("data.pkl") for n in names) and not any(
            n.endswith("archive_format") for n in names
        ):
            raise _fail(
                path,
                "is a pickled module (torch.save), which tinytune never loads since "
                "unpickling runs code; export it instead: torch.export.save("
                "torch.export.export(model.eval(), (example,)), 'model.pt2')",
            )
        formats = [n for n in names if PurePosixPath(n).name == "archive_format"]
        if not formats:
            raise _fail(path, "is a zip archive but not a torch.export archive (.pt2)")
        self.root = str(PurePosixPath(formats[0]).parent)
        if self.read("archive_format").decode().strip() != "pt2":
            raise _fail(path, "is not a torch.export archive (its archive_format is not pt2)")
        models = [n for n in names if n.startswith(f"{self.root}/models/") and n.endswith(".json")]
        if not models:
            raise _fail(path, "holds no exported program (no models/*.json)")
        self.model = PurePosixPath(models[0]).stem
        if len(models) > 1:
            raise _fail(path, f"holds {len(models)} exported programs; tinytune reads one")

    def read(self, name: str) -> bytes:
        try:
            return self.zip.read(f"{self.root}/{name}")
        except KeyError:
            raise _fail(self.path, f"lacks {name}; the archive is incomplete") from None

    def json(self, name: str) -> Any:
        try:
            return json.loads(self.read(name))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _fail(self.path, f"has a corrupt {name} ({e})") from e

    def tensors(self, kind: str) -> dict[str, np.ndarray]:
        """The raw tensors of ``kind`` (``weights`` or ``constants``) by their name in the
        module; a pickled one is refused."""
        config_name = f"data/{kind}/{self.model}_{kind}_config.json"
        if f"{self.root}/{config_name}" not in self.zip.namelist():
            return {}
        out = {}
        for fqn, entry in self.json(config_name).get("config", {}).items():
            if entry.get("use_pickle"):
                raise _fail(
                    self.path,
                    f"stores {fqn!r} pickled, which tinytune never loads since unpickling "
                    "runs code; export a network of plain dense tensors",
                )
            out[fqn] = self._tensor(fqn, entry, self.read(f"data/{kind}/{entry['path_name']}"))
        return out

    def _tensor(self, fqn: str, entry: dict[str, Any], raw: bytes) -> np.ndarray:
        meta = entry["tensor_meta"]
        dtype = _DTYPES.get(meta["dtype"])
        if dtype is None:
            raise _fail(self.path, f"stores {fqn!r} as dtype code {meta['dtype']}, not a number")
        sizes = [s["as_int"] for s in meta["sizes"]]
        strides = [s["as_int"] for s in meta["strides"]]
        offset = meta["storage_offset"]["as_int"]
        item = np.dtype(dtype).itemsize
        storage = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))
        need = offset + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True)) + 1
        if math.prod(sizes) and need > storage.size:
            raise _fail(self.path, f"has {storage.size} values for {fqn!r}, which needs {need}")
        view = np.lib.stride_tricks.as_strided(
            storage[offset:], shape=sizes, strides=[s * item for s in strides], writeable=False
        )
        return np.array(view, dtype=np.float32 if np.dtype(dtype).kind == "f" else dtype)


def _shape(meta: dict[str, Any], name: str, path: str) -> tuple[int, ...]:
    out = []
    for s in meta["sizes"]:
        if "as_int" not in s:
            raise _fail(
                path,
                f"gives tensor {name!r} a dynamic shape; export it with a static input size "
                "(torch.export.export without dynamic_shapes)",
            )
        out.append(int(s["as_int"]))
    return tuple(out)


def _arg(arg: dict[str, Any]) -> Any:
    """A serialized argument as Python: a tensor's name, a number, a list, or None."""
    ((kind, value),) = arg.items()
    if kind == "as_tensor":
        return ("tensor", value["name"])
    if kind == "as_tensors":
        return [("tensor", v["name"]) for v in value]
    if kind in ("as_none",):
        return None
    if kind == "as_optional_tensors":
        return [("tensor", v["as_tensor"]["name"]) if "as_tensor" in v else None for v in value]
    return value


def read_pt2(path: str) -> NetworkGraph:
    """The network of a ``torch.export`` archive.

    Raises:
        ModelError: the file is not such an archive, is corrupt, is a pickled module, holds
            pickled tensors, has a dynamic input shape, or an operator with no canonical form
            (named with its node).
    """
    archive = _Archive(path)
    program = archive.json(f"models/{archive.model}.json")
    try:
        gm = program["graph_module"]
        graph, signature = gm["graph"], gm["signature"]
    except (KeyError, TypeError) as e:
        raise _fail(path, f"has an exported program without {e}") from e
    stored = archive.tensors("weights") | archive.tensors("constants")
    params: dict[str, np.ndarray] = {}
    user_inputs = []
    for spec in signature["input_specs"]:
        ((kind, body),) = spec.items()
        arg = body.get("arg", {})
        arg = arg.get("name") or arg.get("as_tensor", {}).get("name")
        target = body.get("parameter_name") or body.get("buffer_name")
        target = target or body.get("tensor_constant_name")
        if kind == "user_input":
            user_inputs.append(arg)
        elif target is not None:
            if target not in stored:
                raise _fail(path, f"lacks the tensor {target!r} its program reads")
            params[arg] = stored[target]
    if len(user_inputs) != 1:
        raise _fail(path, f"takes {len(user_inputs)} inputs; tinytune trains one-input networks")
    outputs = graph["outputs"]
    if len(outputs) != 1 or "as_tensor" not in outputs[0]:
        raise _fail(path, f"returns {len(outputs)} values; tinytune trains one-output networks")
    values = graph["tensor_values"]
    shapes = {name: _shape(meta, name, path) for name, meta in values.items()}
    lifted: frozenset[str] = frozenset()
    if len(shapes.get(user_inputs[0], ())) == 3:  # (N, C, T): a 1-D network, read as 2-D
        lifted = frozenset(name for name, shape in shapes.items() if len(shape) == 3)
        shapes = {name: lift_1d(shape) for name, shape in shapes.items()}
    nodes = _nodes(_hard_activations(graph["nodes"]), params, shapes, lifted, path)
    live = {n.output for n in nodes} | {user_inputs[0]}
    return NetworkGraph(
        tuple(nodes),
        {k: v for k, v in shapes.items() if k in live},
        user_inputs[0],
        outputs[0]["as_tensor"]["name"],
        path,
    )


def _call_of(node: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """A raw node's operator name (``add``, ``clamp``), its arguments and its first output."""
    parts = node["target"].split(".")
    outputs = [_arg(o) for o in node["outputs"]]
    first = outputs[0] if outputs else None
    out = first[1] if isinstance(first, tuple) else ""
    return (
        parts[-2] if len(parts) >= 2 else "",
        {i["name"]: _arg(i["arg"]) for i in node["inputs"]},
        out,
    )


def _hard_activations(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Core ATen's hard-swish, x·clamp(x + 3, 0, 6)/6, and hard-sigmoid, clamp(x + 3, 0, 6)/6
    (``run_decompositions()`` spells them out), as the one operator each that
    ``torch.export.export`` gives; any other use of those operators is left as it is."""
    calls = [_call_of(n) for n in raw]
    made = {out: i for i, (_, _, out) in enumerate(calls)}
    readers: dict[str, int] = {}
    for _, args, _ in calls:
        for v in args.values():
            for t in v if isinstance(v, list) else [v]:
                if isinstance(t, tuple) and t[0] == "tensor":
                    readers[t[1]] = readers.get(t[1], 0) + 1

    def single(value: Any, op: str, **want: Any) -> tuple[int, dict[str, Any]] | None:
        """The node that makes ``value``, read once, of operator ``op`` with ``want``."""
        if not (isinstance(value, tuple) and value[0] == "tensor") or readers.get(value[1]) != 1:
            return None
        i = made.get(value[1])
        if i is None or calls[i][0] != op:
            return None
        args = calls[i][1]
        if any(args.get(k) != v and not (v is None and k not in args) for k, v in want.items()):
            return None
        return i, args

    gone: set[int] = set()
    fused: dict[int, dict[str, Any]] = {}
    for i, (op, args, _) in enumerate(calls):
        if op != "div" or args.get("other") not in (6, 6.0):
            continue
        top = args.get("self")
        product = single(top, "mul")
        clamp_of = (
            [product[1].get("other"), product[1].get("self")] if product else [top]
        )  # x * clamp(...), clamp(...) * x, or clamp(...) alone
        for clamped in clamp_of:
            high = single(clamped, "clamp", min=None, max=6)
            low = high and single(high[1].get("self"), "clamp", min=0, max=None)
            shifted = low and single(low[1].get("self"), "add", other=3)
            if not shifted:
                continue
            x = shifted[1].get("self")
            others = [v for v in product[1].values() if v != clamped] if product else []
            if product and others != [x]:
                continue
            gone.update(j for j, _ in (high, low, shifted))
            gone.update([product[0]] if product else [])
            name = "hardswish" if product else "hardsigmoid"
            fused[i] = {
                "target": f"torch.ops.aten.{name}.default",
                "inputs": [{"name": "self", "arg": {"as_tensor": {"name": x[1]}}}],
                "outputs": raw[i]["outputs"],
                "name": raw[i].get("name") or calls[i][2],
            }
            break
    return [fused.get(i, n) for i, n in enumerate(raw) if i not in gone]


def _nodes(
    raw: list[dict[str, Any]],
    params: dict[str, np.ndarray],
    shapes: dict[str, tuple[int, ...]],
    lifted: frozenset[str],
    path: str,
) -> list[Node]:
    nodes: list[Node] = []
    # a multi-output node's other tensors (BatchNorm's saved statistics, which an eval-mode
    # program never reads) -> its first
    alias: dict[str, str] = {}
    for node in raw:
        target = node["target"]
        parts = target.split(".")
        op_name = parts[-2] if len(parts) >= 2 else target
        args = {i["name"]: _arg(i["arg"]) for i in node["inputs"]}
        out_names = []
        for o in node["outputs"]:
            value = _arg(o)
            out_names += [v[1] for v in (value if isinstance(value, list) else [value]) if v]
        name = node.get("name") or (out_names[0] if out_names else target)
        if target == "_operator.getitem":
            continue
        weight = _tensor(args.get("self"), params)
        if op_name in _TRANSPOSES and weight is not None and params[weight].ndim == 2:
            params[out_names[0]] = params[weight].T.copy()  # a linear layer's weight, turned
            continue
        op = _OPS.get(op_name) if target.startswith("torch.ops.aten.") else None
        if op is None:
            raise ModelError(
                f"{path!r}: node {name!r} is {target.removeprefix('torch.ops.')}, which "
                "tinytune cannot read; it reads convolutions, BatchNorm, ReLU, ReLU6, "
                "hard-swish, hard-sigmoid, sigmoid, add, mul, cat, max and average pooling, "
                "mean, zero padding, flatten/view, linear, dropout and identity"
            )
        if not out_names:
            raise _fail(path, f"has a node {name!r} without an output")
        source = target.removeprefix("torch.ops.")
        call = _Call(op, op_name, name, source, args, out_names[0], params, shapes, lifted, path)
        node_obj = _READERS[op](call)
        for extra in out_names[1:]:
            alias[extra] = out_names[0]
        nodes.append(node_obj)
    renamed = [
        Node(n.name, n.op, n.source, tuple(alias.get(t, t) for t in n.inputs), n.output,
             n.attrs, n.params)
        for n in nodes
    ]  # fmt: skip
    return fold_pads(fuse_silu(_merge_means(renamed, path)))


def _merge_means(nodes: list[Node], path: str) -> list[Node]:
    """A mean over the width then the height (or the other way round), as ``ofa``'s networks
    pool, is one global average pool; a mean over one of them alone is refused."""
    readers: dict[str, list[Node]] = {}
    for n in nodes:
        for t in n.inputs:
            readers.setdefault(t, []).append(n)
    out: list[Node] = []
    merged: set[str] = set()
    for n in nodes:
        if n.name in merged:
            continue
        if n.op == "gap" and "dims" in n.attrs:
            dim, rank, keep = n.attrs["dims"]
            nxt = readers.get(n.output, [])
            # what the reader must average: the other spatial dim, at 2 once the first is gone
            other = (5 - dim, 4) if keep else (2, 3)
            if not (
                rank == 4
                and len(nxt) == 1
                and nxt[0].op == "gap"
                and nxt[0].attrs.get("dims", (0, 0))[:2] == other
            ):
                raise ModelError(
                    f"{path!r}: node {n.name!r} ({n.source}) averages over dim {dim} alone; "
                    "tinytune reads a mean over height and width (a global average pool)"
                )
            merged.add(nxt[0].name)
            n = Node(n.name, "gap", n.source, n.inputs, nxt[0].output)
        out.append(n)
    return out


def _tensor(value: Any, params: dict[str, np.ndarray]) -> str | None:
    """The name of a parameter argument, else None."""
    if isinstance(value, tuple) and value[0] == "tensor" and value[1] in params:
        return value[1]
    return None


def _activation(value: Any, params: dict[str, np.ndarray], what: str, path: str) -> str:
    if not (isinstance(value, tuple) and value[0] == "tensor") or value[1] in params:
        raise _fail(path, f"has {what} whose input is not an activation")
    return value[1]


@dataclass(frozen=True)
class _Call:
    """One operator call of the program, as the op readers below take it."""

    op: str
    op_name: str
    name: str
    source: str
    args: dict[str, Any]
    output: str
    params: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]
    lifted: frozenset[str]  # a 1-D network's (N, C, T) tensors, read as (N, C, 1, T)
    path: str

    @property
    def where(self) -> str:
        return f"node {self.name!r} ({self.source})"

    def node(
        self,
        inputs: tuple[str, ...],
        attrs: dict[str, Any] | None = None,
        params: dict[str, np.ndarray] | None = None,
    ) -> Node:
        return Node(
            self.name, self.op, self.source, inputs, self.output, attrs or {}, params or {}
        )

    def activation(self, value: Any) -> str:
        return _activation(value, self.params, self.where, self.path)

    def first(self) -> str:
        return self.activation(next(iter(self.args.values()), None))

    def refuse(self, what: str) -> ModelError:
        return ModelError(f"{self.path!r}: {self.where} {what}")


def _conv(c: _Call) -> Node:
    x = c.activation(c.args.get("input"))
    weight = _tensor(c.args.get("weight"), c.params)
    if weight is None:
        raise c.refuse("has a weight that is not a parameter")
    w = c.params[weight]
    one_d = w.ndim == 3  # (O, C/g, k): a 1-D convolution, a 1 x k one over (N, C, 1, T)
    if one_d:
        w = w[:, :, None, :]
    if w.ndim != 4:
        raise c.refuse(f"is a {w.ndim - 2}-D convolution; tinytune trains 1-D and 2-D ones")
    if c.args.get("transposed"):
        raise c.refuse("is a transposed convolution, not supported")
    pad = c.args.get("padding", 0)
    kh, kw = w.shape[2:]
    sizes = _pair if not one_d else lambda value, default: _along_t(value, default, 1)
    dilation = sizes(c.args.get("dilation"), 1)
    if pad == "valid":
        padding = (0, 0, 0, 0)
    elif isinstance(pad, str):  # conv2d.padding "same" (stride 1)
        th, tw = dilation[0] * (kh - 1), dilation[1] * (kw - 1)
        padding = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
    else:
        ph, pw = _along_t(pad, 0, 0) if one_d else _pair(pad, 0)
        padding = (ph, ph, pw, pw)
    bias = _tensor(c.args.get("bias"), c.params)
    attrs = {
        "kernel": (kh, kw),
        "stride": sizes(c.args.get("stride"), 1),
        "padding": padding,
        "dilation": dilation,
        "groups": int(c.args.get("groups", 1) or 1),
    }
    return c.node((x,), attrs, {"weight": w} | ({"bias": c.params[bias]} if bias else {}))


def _batchnorm(c: _Call) -> Node:
    x = c.activation(c.args.get("input"))
    roles = {"weight": "weight", "bias": "bias", "running_mean": "mean", "running_var": "var"}
    prm = {}
    for arg, role in roles.items():
        p = _tensor(c.args.get(arg), c.params)
        if p is None and role in ("mean", "var"):
            raise c.refuse("has no running statistics")
        if p is not None:
            prm[role] = c.params[p]
    if c.args.get("training"):
        raise c.refuse("was exported in training mode; export model.eval()")
    return c.node((x,), {"eps": float(c.args.get("eps", 1e-5))}, prm)


def _unary(c: _Call) -> Node:
    if c.op_name in ("hardtanh", "hardtanh_", "clamp"):
        lo = c.args.get("min_val", c.args.get("min", -1.0))
        hi = c.args.get("max_val", c.args.get("max", 1.0))
        if (lo, hi) != (0.0, 6.0) and (lo, hi) != (0, 6):
            raise c.refuse(f"clamps to [{lo}, {hi}]; tinytune reads a clamp to [0, 6] (ReLU6)")
    return c.node((c.first(),))


def _binary(c: _Call) -> Node:
    a, b = c.args.get("self"), c.args.get("other")
    if c.args.get("alpha", 1) != 1:
        raise c.refuse(f"has alpha {c.args['alpha']}")
    if not (isinstance(a, tuple) and isinstance(b, tuple)) or a[1] in c.params or b[1] in c.params:
        raise c.refuse(
            "combines a tensor with a constant; tinytune reads sums and products of two "
            "activations"
        )
    return c.node((a[1], b[1]))


def _cat(c: _Call) -> Node:
    tensors = [t[1] for t in c.args.get("tensors") or []]
    dim = int(c.args.get("dim", 0))
    if tensors and tensors[0] in c.lifted:  # a 1-D network's dim, as its (N, C, 1, T) has it
        dim = lift_1d_dim(dim)
    return c.node(tuple(tensors), {"dim": dim})


def _pool(c: _Call) -> Node:
    x = c.first()
    if c.op_name.endswith("1d"):  # a 1 x k pool over (N, C, 1, T)
        kernel = _along_t(c.args.get("kernel_size"), 1, 1)
        stride = _along_t(c.args.get("stride") or None, kernel[1], 1)
        ph, pw = _along_t(c.args.get("padding"), 0, 0)
        dilation = _along_t(c.args.get("dilation"), 1, 1)
    else:
        kernel = _pair(c.args.get("kernel_size"), 1)
        stride = _pair(c.args.get("stride") or None, kernel[0])
        ph, pw = _pair(c.args.get("padding"), 0)
        dilation = _pair(c.args.get("dilation"), 1)
    if c.op == "avgpool" and kernel == c.shapes[x][2:] and (ph, pw) == (0, 0):
        # over the whole map (Keras' AveragePooling2D(8) on 8 x 8): a global average pool
        return Node(c.name, "gap", c.source, (x,), c.output)
    attrs = {"kernel": kernel, "stride": stride, "padding": (ph, ph, pw, pw)}
    if c.op == "maxpool":
        attrs |= {"dilation": dilation}
    return c.node((x,), attrs)


def _gap(c: _Call) -> Node:
    x = c.first()
    shape = c.shapes[x]
    if c.op_name == "mean" and x in c.lifted:  # (N, C, T): a mean over T is a global pool
        if {d % 3 for d in (c.args.get("dim") or [])} != {2}:
            raise c.refuse(
                f"averages over dims {c.args.get('dim')} of a 1-D tensor; tinytune reads a "
                "mean over its length (a global average pool)"
            )
        return c.node((x,))
    if c.op_name == "mean":
        dims = {d % len(shape) for d in (c.args.get("dim") or [])}
        if len(shape) == 4 and dims in ({2}, {3}) and shape[5 - min(dims)] == 1:
            return c.node((x,))  # the other spatial axis is 1: a 1-D network's global pool
        if len(dims) == 1 and dims <= {2, 3} and len(shape) in (3, 4):  # see _merge_means
            return c.node((x,), {"dims": (*dims, len(shape), bool(c.args.get("keepdim")))})
        if dims != {2, 3}:
            raise c.refuse(
                f"averages over dims {sorted(dims)}; tinytune reads a mean over height and "
                "width (a global average pool)"
            )
    elif tuple(c.args.get("output_size") or ()) not in ((1, 1), (1,)):
        raise c.refuse(
            f"pools to {c.args.get('output_size')}; tinytune reads an adaptive pool to 1x1 (a "
            "global average pool)"
        )
    return c.node((x,))


def _reshape(c: _Call) -> Node:
    """A 1-D network's unsqueeze to a 2-D operator and squeeze back: nothing, once its
    tensors are (N, C, 1, T); any other is refused."""
    x = c.first()
    same = c.shapes[x] == c.shapes[c.output]
    flat = len(c.shapes[c.output]) == 2 and c.shapes[x][2:] in ((1, 1), ())
    if not (same or flat):
        raise c.refuse(
            f"reshapes {list(c.shapes[x])} to {list(c.shapes[c.output])}; tinytune reads a "
            "1-D network's unsqueeze to (N, C, 1, T) and squeeze back"
        )
    return Node(c.name, "identity" if same else "flatten", c.source, (x,), c.output)


def _pad(c: _Call) -> Node:
    x = c.first()
    amounts = [int(v) for v in (c.args.get("pad") or [])]
    mode = c.args.get("mode", "constant")
    if len(amounts) != 4 or mode != "constant" or float(c.args.get("value") or 0.0) != 0.0:
        raise c.refuse(
            f"pads {amounts} ({mode}, value {c.args.get('value')}); tinytune reads zero padding "
            "of height and width before a convolution"
        )
    left, right, top, bottom = amounts
    return c.node((x,), {"padding": (top, bottom, left, right)})


def _linear(c: _Call) -> Node:
    if c.op_name == "addmm":
        bias, x, weight = c.args.get("self"), c.args.get("mat1"), c.args.get("mat2")
        w = _tensor(weight, c.params)
        if w is None or _tensor(bias, c.params) is None:
            raise c.refuse("is not a linear layer")
        prm = {"weight": c.params[w].T.copy(), "bias": c.params[bias[1]]}
    else:
        x, w = c.args.get("input"), _tensor(c.args.get("weight"), c.params)
        if w is None:
            raise c.refuse("has a weight that is not a parameter")
        b = _tensor(c.args.get("bias"), c.params)
        prm = {"weight": c.params[w]} | ({"bias": c.params[b]} if b else {})
    return c.node((c.activation(x),), {}, prm)


_READERS: dict[str, Callable[[_Call], Node]] = {
    "conv": _conv,
    "batchnorm": _batchnorm,
    **dict.fromkeys(
        ("relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "silu", "identity", "flatten"),
        _unary,
    ),
    "squeeze": _reshape,
    "add": _binary,
    "mul": _binary,
    "cat": _cat,
    "maxpool": _pool,
    "avgpool": _pool,
    "gap": _gap,
    "pad": _pad,
    "linear": _linear,
}
