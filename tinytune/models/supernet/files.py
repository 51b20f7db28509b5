"""Supernet weights on disk: tinytune's checkpoints (plain dicts of tensors and primitives, loaded
with ``torch.load(weights_only=True)``; floating-point tensors may be stored as float16 and are
loaded back as float32), the cache of pre-trained ones, partial runs, and published
Once-for-All checkpoints; each refused in one line when it cannot be used.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tinytune.errors import ModelError, flag
from tinytune.models.ofa_adapter import build_ofa_supernet
from tinytune.models.supernet.recipes import PretrainRecipe
from tinytune.paths import cache_dir
from tinytune.spaces import SupernetSpec

__all__ = [
    "CHECKPOINT_FORMAT",
    "PUBLISHED_URL",
    "PartialRun",
    "checkpoint_path",
    "load_partial",
    "load_supernet",
    "require_weights",
    "save_supernet",
]

CHECKPOINT_FORMAT = "tinytune-supernet/1"
PUBLISHED_URL = "https://raw.githubusercontent.com/han-cai/files/master/ofa/ofa_nets/{name}"


def checkpoint_path(spec: SupernetSpec, recipe: PretrainRecipe) -> Path:
    return cache_dir() / "supernets" / f"{spec.name}-{recipe.digest}.pt"


@dataclass(frozen=True)
class PartialRun:
    """A pre-training run stopped after ``step`` steps: what it needs to go on."""

    recipe: PretrainRecipe
    step: int
    state_dict: dict[str, torch.Tensor]
    optimizer: dict[str, Any]


def load_partial(spec: SupernetSpec, path: Path) -> PartialRun | None:
    """The partial run saved at ``path`` with its optimiser state, or None where the file
    holds none (a checkpoint saved before partial runs kept it).

    Raises:
        ModelError: the file cannot be read or is of another supernet.
    """
    way_out = "start over with 'tinytune pretrain --force', or remove it"
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        reason = "not a PyTorch file" if "Weights only load failed" in str(e) else text
        raise ModelError(f"cannot read the partial run {str(path)!r} ({reason}); {way_out}") from e
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ModelError(f"{str(path)!r} is not a partial run of tinytune's; {way_out}")
    if data.get("supernet") != spec.name:
        raise ModelError(
            f"{str(path)!r} is a partial run of supernet {data.get('supernet')}, not "
            f"{spec.name}; {way_out}"
        )
    if "optimizer" not in data or "step" not in data:
        return None
    fields = {k: v for k, v in data["recipe"].items() if k in PretrainRecipe.__dataclass_fields__}
    return PartialRun(
        PretrainRecipe(**fields), int(data["step"]), data["state_dict"], data["optimizer"]
    )


def save_supernet(
    net: nn.Module,
    spec: SupernetSpec,
    recipe: PretrainRecipe | None,
    path: Path,
    *,
    half: bool = False,
    partial: tuple[int, dict[str, Any]] | None = None,
) -> None:
    """Write a checkpoint atomically (a temporary file renamed into place).

    Args:
        half: store floating-point tensors as float16 (half the size; :func:`load_supernet`
            converts them back to float32).
        partial: ``(steps done, optimiser state)`` of a run that goes on: saved beside the
            weights so that :func:`load_partial` can resume it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        key: value.detach().cpu().half() if half and value.is_floating_point() else value.cpu()
        for key, value in net.state_dict().items()
    }
    payload = {
        "format": CHECKPOINT_FORMAT,
        "supernet": spec.name,
        "n_classes": int(net.classifier.linear.out_features),
        "recipe": asdict(recipe) if recipe is not None else {},
        "state_dict": state,
    }
    if partial is not None:
        payload["step"], payload["optimizer"] = partial
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    torch.save(payload, tmp)
    tmp.replace(path)


def _published_state(spec: SupernetSpec, path: Path) -> dict[str, torch.Tensor]:
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        expected = f"the weights of {spec.name}" if spec.fixed else None
        raise ModelError(_unreadable(path, "supernet weights", e, expected)) from e
    state = data.get("state_dict", data) if isinstance(data, dict) else None
    if not isinstance(state, dict):
        raise ModelError(f"{str(path)!r} holds no state dict for {spec.name}")
    return state


_CHECKPOINTS = "a file written by 'tinytune pretrain' or a published Once-for-All checkpoint"


def _unreadable(path: Path, what: str, error: Exception, expected: str | None = None) -> str:
    """One line on a file ``torch.load`` refused: not a file of tensors, whatever torch's own
    message suggests (it proposes loading with ``weights_only=False``, which runs the file's
    code, and tinytune never does that)."""
    text = str(error)
    reason = text.splitlines()[0] if text else type(error).__name__
    if "Weights only load failed" in text:
        reason = (
            "it holds objects besides tensors, and tinytune loads only tensors"
            if "Unsupported global" in text
            else "not a PyTorch checkpoint"
        )
    return (
        f"cannot read {what} {str(path)!r}: {reason.rstrip('.')}; expected "
        f"{expected or _CHECKPOINTS}"
    )


def _reason(error: Exception) -> str:
    """The first line of a failed ``load_state_dict`` that names a tensor (torch puts a header
    line first; ofa's loader asserts without a message on a name it does not know)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("Error(s) in loading")]
    return lines[0].rstrip(".") if lines else "it holds a tensor of a name the network has not"


def require_weights(spec: SupernetSpec, path: Path | None) -> None:
    """Weights a supernet can load: a published supernet's must be given (tinytune never
    downloads them; without them it cannot be pre-trained here), and given weights must be a file.

    Raises:
        ModelError: ``spec`` is published and ``path`` is None, or ``path`` is not a file.
    """
    if spec.imported:  # the network's file holds its weights
        if path is not None and path.resolve() != Path(spec.network_file).resolve():
            raise ModelError(
                f"the network {spec.network_file!r} holds its own weights; leave out "
                + flag("weights")
            )
        return
    if path is not None and path.is_file():
        return
    if path is None and spec.weights_package:
        from tinytune.models.pretrained import pretrained_weights

        pretrained_weights(spec)  # installed and intact, or one line saying how to get it
        return
    if path is None and spec.config_file:
        raise ModelError(
            f"the network of {spec.config_file!r} needs its weights, which tinytune does not "
            "download: pass the weights file downloaded with the config as "
            + flag("weights")
            + " FILE"
        )
    if path is not None and path.is_dir():
        raise ModelError(f"supernet checkpoint {str(path)!r} is a folder; name the file in it")
    missing = f"supernet checkpoint {str(path)!r} does not exist" if path is not None else ""
    if spec.published:
        raise ModelError(
            f"{missing}{'; ' if missing else ''}supernet {spec.name} needs its published "
            f"ImageNet weights, which tinytune does not download: fetch "
            f"{PUBLISHED_URL.format(name=spec.name)} and pass the file with "
            + flag("weights")
            + " FILE"
        )
    if missing:
        raise ModelError(missing)


def load_supernet(spec: SupernetSpec, path: Path) -> nn.Module:
    """Load a supernet checkpoint written by :func:`save_supernet`, a published
    Once-for-All ImageNet checkpoint (for published supernets), or a fixed network's ImageNet
    weights (a state dict named as its registry package names it)."""
    require_weights(spec, path)
    if spec.imported:
        from tinytune.models.graphnet import ImportedNetwork
        from tinytune.networks import read_network

        return ImportedNetwork(read_network(str(path)))
    if spec.fixed:
        from tinytune.models.pretrained import lite0_state
        from tinytune.spaces.configs import read_config

        classes = 1000
        if spec.config_file:
            classes = read_config(spec.config_file)["classifier"].get("out_features", classes)
        net = build_ofa_supernet(spec, int(classes))
        state = _published_state(spec, path)
        try:  # ofa's loader keeps the tensors the state leaves out (the batch counters) and
            # renames the zoo's "mobile_inverted_conv" to "conv"; it asserts on other names
            net.load_state_dict(state if spec.config_file else lite0_state(spec, state))
        except (RuntimeError, ModelError, AssertionError, KeyError) as e:
            raise ModelError(f"{str(path)!r} does not match {spec.name}: {_reason(e)}") from e
        return net
    if spec.published:
        net = build_ofa_supernet(spec, 1000)
        state = _published_state(spec, path)
        try:
            net.load_state_dict(state)
        except (RuntimeError, ValueError, KeyError) as e:  # ofa remaps keys and raises ValueError
            detail = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ModelError(f"{str(path)!r} does not match supernet {spec.name}: {detail}") from e
        return net
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ModelError(_unreadable(path, "supernet checkpoint", e)) from e
    if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ModelError(
            f"{str(path)!r} is not a tinytune supernet checkpoint ({CHECKPOINT_FORMAT})"
        )
    if data["supernet"] != spec.name:
        raise ModelError(f"{str(path)!r} holds supernet {data['supernet']}, not {spec.name}")
    net = build_ofa_supernet(spec, int(data["n_classes"]))
    state = {
        key: value.float() if value.is_floating_point() else value
        for key, value in data["state_dict"].items()
    }
    try:
        net.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelError(f"{str(path)!r} does not match supernet {spec.name}: {detail}") from e
    return net
