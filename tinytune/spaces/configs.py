"""Networks described by a ``ProxylessNASNets`` JSON config: the format of ``ofa``'s
``net.config`` and of the MCUNet model zoo (``mcunet-5fps``, ``mbv2-w0.35``,
``proxyless-w0.3``, … as MCUNetV3 fine-tunes them), whose configs and weights a user downloads
once and names (``--supernet net.json --weights net.pth``); nothing is fetched here.

The config is read into a fixed :class:`~tinytune.spaces.SupernetSpec`: the stem, the first
block, then one stage per run of blocks that starts where the shortcut is missing (a stride or
a channel change) and goes on while blocks add their input. The search may cut the network
after its last stages, leave out the last block of a stage, and choose the input resolution.
Reading is cached by the file's path, size and modification time.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

from tinytune.errors import ConfigError

__all__ = ["CONFIG_RESOLUTIONS", "config_fields", "read_config"]

CONFIG_RESOLUTIONS = tuple(range(48, 161, 16))
"""Input resolutions searched besides the config's own (MCUNetV3 fine-tunes at 128 px)."""
_ACTS = ("relu", "relu6")


def read_config(path: str | Path) -> dict[str, Any]:
    """The config in ``path``, checked to be a ``ProxylessNASNets`` of MBConv blocks with
    ReLU or ReLU6 and no squeeze-and-excitation.

    Raises:
        ConfigError: the file cannot be read, is not JSON, or is not such a config (the
            message says which part).
    """
    name = str(path)
    try:
        config = json.loads(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"cannot read the network config {name!r}: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"the network config {name!r} is not JSON: {e}") from e
    where = f"the network config {name!r}"
    if not isinstance(config, dict) or not isinstance(config.get("blocks"), list):
        raise ConfigError(f"{where} is not a ProxylessNASNets config (no list of 'blocks')")
    for part in ("first_conv", "classifier"):
        if not isinstance(config.get(part), dict):
            raise ConfigError(f"{where} has no '{part}' layer")
    if not config["blocks"]:
        raise ConfigError(f"{where} has no blocks")
    for i, block in enumerate(config["blocks"]):
        conv = (
            block.get("conv", block.get("mobile_inverted_conv"))
            if isinstance(block, dict)
            else None
        )
        if not isinstance(conv, dict) or conv.get("name") not in (
            "MBConvLayer",
            "MBInvertedConvLayer",
        ):
            got = conv.get("name") if isinstance(conv, dict) else type(conv).__name__
            raise ConfigError(
                f"{where}: block {i} is {got!r}; allowed: an MBConvLayer or MBInvertedConvLayer"
            )
        if conv.get("use_se"):
            raise ConfigError(f"{where}: block {i} uses squeeze-and-excitation, not supported")
        if conv.get("act_func", "relu6") not in _ACTS:
            raise ConfigError(
                f"{where}: block {i} uses activation {conv.get('act_func')!r}; allowed: {_ACTS}"
            )
        for key in ("in_channels", "out_channels", "kernel_size", "stride", "expand_ratio"):
            if not isinstance(conv.get(key), int) or isinstance(conv.get(key), bool):
                raise ConfigError(f"{where}: block {i} has no integer {key!r}")
    return config


def _conv(block: dict[str, Any]) -> dict[str, Any]:
    return block.get("conv", block.get("mobile_inverted_conv"))  # type: ignore[no-any-return]


def config_fields(path: str) -> dict[str, Any]:
    """The fields of the fixed :class:`~tinytune.spaces.SupernetSpec` of the config in
    ``path``, its name the file's absolute path."""
    resolved = os.path.abspath(path)
    try:
        stat = os.stat(resolved)
    except OSError as e:
        raise ConfigError(
            f"cannot read the network config {path!r}: {e.strerror or e}; name a "
            "ProxylessNASNets JSON config file (e.g. one of the MCUNet model zoo's)"
        ) from e
    return dict(_fields(resolved, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=16)
def _fields(path: str, _size: int, _mtime: int) -> tuple[tuple[str, Any], ...]:
    config = read_config(path)
    blocks = [_conv(b) for b in config["blocks"]]
    first = blocks[0]
    stages: list[list[tuple[int, int, int, int]]] = []
    for block, conv in zip(config["blocks"][1:], blocks[1:], strict=True):
        row = (conv["kernel_size"], conv["stride"], conv["expand_ratio"], conv["out_channels"])
        if block.get("shortcut") is None or not stages:
            stages.append([row])
        else:
            stages[-1].append(row)
    if not stages:
        raise ConfigError(f"the network config {path!r} has one block; tinytune needs two or more")
    resolution = config.get("resolution")
    own = (resolution,) if isinstance(resolution, int) and 32 <= resolution <= 512 else ()
    resolutions = tuple(sorted(set(CONFIG_RESOLUTIONS) | set(own)))
    mix = config.get("feature_mix_layer")
    return tuple(
        dict(
            name=path,
            family="config",
            width_mult=1.0,
            ks_choices=tuple(sorted({r[0] for s in stages for r in s})),
            expand_choices=tuple(sorted({r[2] for s in stages for r in s})),
            resolutions=resolutions,
            blocks=tuple(tuple(s) for s in stages),
            min_stages=max(1, len(stages) - 2),
            default_stages=len(stages),
            default_resolution=min(own[0], 128)
            if own and min(own[0], 128) in resolutions
            else 128,
            max_drop=1,
            stem_channels=int(config["first_conv"].get("out_channels", 0)),
            first_block=(
                first["kernel_size"],
                first["stride"],
                first["expand_ratio"],
                first["out_channels"],
            ),
            head_channels=int(mix.get("out_channels", 0)) if isinstance(mix, dict) else 0,
            config_file=path,
        ).items()
    )
