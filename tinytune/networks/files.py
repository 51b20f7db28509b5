"""Which files hold a network, and reading one (cached by path, size and modification time)."""

from __future__ import annotations

import functools
import os

from tinytune.errors import ModelError
from tinytune.networks.graph import NetworkGraph, check_supported, dense_as_conv

__all__ = ["NETWORK_SUFFIXES", "is_network_file", "read_network"]

NETWORK_SUFFIXES = (".pt2", ".onnx")
"""A ``torch.export`` archive (``torch.export.save``) and an ONNX model."""
_PICKLES = (".pt", ".pth", ".pkl", ".ckpt", ".bin")


def is_network_file(name: str) -> bool:
    """Whether ``name`` names a network file by its suffix (a pickled one included, which
    :func:`read_network` refuses in words of its own)."""
    return name.lower().endswith(NETWORK_SUFFIXES + _PICKLES)


def read_network(path: str) -> NetworkGraph:
    """The network in ``path``, checked to be one tinytune trains end to end
    (:func:`~tinytune.networks.check_supported`).

    Raises:
        ModelError: in one line: the file cannot be read, is a pickle, is corrupt, or holds an
            op outside the supported set (named with its node).
    """
    resolved = os.path.abspath(path)
    try:
        stat = os.stat(resolved)
    except OSError as e:
        raise ModelError(f"cannot read the network {path!r}: {e.strerror or e}") from e
    return _read(resolved, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read(path: str, _size: int, _mtime: int) -> NetworkGraph:
    lower = path.lower()
    if lower.endswith(_PICKLES) or _is_pickle(path):
        raise ModelError(
            f"{path!r} is a pickled file, which tinytune never loads since unpickling runs "
            "code; export the network instead: torch.export.save(torch.export.export("
            "model.eval(), (example,)), 'model.pt2'), or torch.onnx.export to a .onnx file"
        )
    if lower.endswith(".onnx"):
        from tinytune.networks.onnx import read_onnx

        graph = read_onnx(path)
    elif lower.endswith(".pt2"):
        from tinytune.networks.pt2 import read_pt2

        graph = read_pt2(path)
    else:
        raise ModelError(f"{path!r} is not a network file; allowed: {', '.join(NETWORK_SUFFIXES)}")
    graph = dense_as_conv(graph)
    check_supported(graph)
    return graph


def _is_pickle(path: str) -> bool:
    """A raw pickle (protocol 2 or later starts with 0x80) or torch.save's zip of one."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError:
        return False
    return head[:1] == b"\x80"
