"""A sensor-window folder of synthesised machine vibration, in the ``series:PATH`` layout.

Each window is 256 steps (128 ms at 2 kHz) of a three-axis accelerometer bolted to a rotating
machine, one CSV file with a column per axis. A machine has a shaft speed of its own (18-35
revolutions a second), a structural resonance (250-650 Hz) that rings after every impact, a
mounting that mixes its radial and axial motion into the three axes, a sensor bias (gravity on
its third axis) and a noise floor. A condition (the class) is what its vibration shows, each a
textbook signature of vibration analysis relative to the machine's own shaft speed: an
imbalance's strong once-per-revolution component, a misalignment's twice-per-revolution and
axial one, a bearing's impacts at its fault frequency ringing the resonance, a gear's mesh with
its sidebands, an oil whirl's sub-synchronous orbit, and so on. Files are named
``MACHINE_nohash_N.csv``, so that the data set holds each machine's windows in one split: the
test accuracy is that of machines the fine-tune never saw.

    python3 -m bench.vibration /tmp/vibration --machines 20 --takes 3
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import numpy as np

RATE = 2_000
STEPS = 256
_T = np.arange(STEPS) / RATE

Machine = dict[str, float | np.ndarray]
Signature = Callable[[Machine, np.random.Generator], tuple[np.ndarray, np.ndarray]]


def _tone(freq: float, amplitude: float, rng: np.random.Generator) -> np.ndarray:
    return amplitude * np.sin(2 * np.pi * freq * _T + rng.uniform(0, 2 * np.pi))


def _orbit(freq: float, amplitude: float, rng: np.random.Generator) -> np.ndarray:
    """Two radial axes of a whirl at ``freq``: the same tone a quarter period apart."""
    phase = rng.uniform(0, 2 * np.pi)
    angle = 2 * np.pi * freq * _T + phase
    return amplitude * np.stack([np.cos(angle), np.sin(angle)])


def _impacts(m: Machine, rate_hz: float, rng: np.random.Generator) -> np.ndarray:
    """Impacts ``rate_hz`` apart (jittered), each ringing the machine's resonance."""
    out = np.zeros(STEPS)
    period = RATE / rate_hz
    start = rng.uniform(0, period)
    ring = np.exp(-np.arange(60) / (RATE / float(m["resonance"]) * 2.5))
    ring = ring * np.sin(2 * np.pi * float(m["resonance"]) * np.arange(60) / RATE)
    k = start
    while k < STEPS:
        n = int(k)
        size = 1.0 + 0.2 * rng.standard_normal()
        out[n : n + 60] += size * ring[: STEPS - n]
        k += period * (1 + 0.02 * rng.standard_normal())
    return out


def _normal(m: Machine, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return _orbit(float(m["shaft"]), 0.12, rng), _tone(float(m["shaft"]), 0.03, rng)


def _signature(
    radial: Callable[[float, np.random.Generator], np.ndarray], axial: float = 0.0
) -> Signature:
    """A condition whose radial motion ``radial(shaft, rng)`` adds to a healthy machine's."""

    def condition(m: Machine, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        base_radial, base_axial = _normal(m, rng)
        f = float(m["shaft"])
        return base_radial + radial(f, rng), base_axial + _tone(f, axial, rng)

    return condition


def _bearing(order: tuple[float, float], modulation: float = 0.0) -> Signature:
    """Impacts at a bearing's fault frequency (``order`` times the shaft speed, a range: the
    bearing's geometry), their size modulated at ``modulation`` times the shaft speed."""

    def condition(m: Machine, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        radial, axial = _normal(m, rng)
        f = float(m["shaft"])
        fault = f * (order[0] + float(m["bearing"]) * (order[1] - order[0]))
        hits = 0.9 * _impacts(m, fault, rng)
        if modulation:
            hits *= 1 + 0.8 * np.sin(2 * np.pi * modulation * f * _T + rng.uniform(0, 6.3))
        return radial + np.stack([hits, 0.6 * hits]), axial + 0.3 * hits

    return condition


def _looseness(m: Machine, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    radial, axial = _normal(m, rng)
    f = float(m["shaft"])
    rattle = sum(_tone(k * f, 0.5 / k, rng) for k in range(1, 7))
    return radial + np.stack([np.maximum(rattle, -0.15), 0.4 * rattle]), axial


def _gear(m: Machine, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    radial, axial = _normal(m, rng)
    f, teeth = float(m["shaft"]), float(m["teeth"])
    mesh = _tone(teeth * f, 0.5, rng) * (1 + 0.7 * np.sin(2 * np.pi * f * _T))
    return radial + np.stack([mesh, mesh]), axial + 0.2 * mesh


def _cavitation(m: Machine, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    radial, axial = _normal(m, rng)
    noise = rng.standard_normal(STEPS)
    high = noise - np.convolve(noise, np.ones(4) / 4, mode="same")  # above about 300 Hz
    bursts = (rng.uniform(size=STEPS // 32) < 0.5).repeat(32)
    return radial + 0.7 * np.stack([high * bursts, high[::-1] * bursts]), axial + 0.4 * high


def _electrical(m: Machine, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    radial, axial = _normal(m, rng)
    hum = _tone(100.0, 0.45, rng)  # twice the line frequency, whatever the shaft speed
    return radial + np.stack([hum, 0.8 * hum]), axial + 0.3 * hum


CONDITIONS: dict[str, Signature] = {
    "normal": _normal,
    "imbalance": _signature(lambda f, rng: _orbit(f, 0.9, rng)),
    "misalignment": _signature(lambda f, rng: _orbit(2 * f, 0.6, rng), axial=0.7),
    "looseness": _looseness,
    "outer_race": _bearing((3.0, 3.6)),
    "inner_race": _bearing((4.9, 5.5), modulation=1.0),
    "ball": _bearing((2.0, 2.4), modulation=0.4),
    "gear": _gear,
    "rub": _signature(lambda f, rng: _orbit(0.5 * f, 0.5, rng) + _orbit(1.5 * f, 0.3, rng)),
    "cavitation": _cavitation,
    "belt": _signature(lambda f, rng: _orbit(0.38 * f, 0.6, rng) + _orbit(0.76 * f, 0.3, rng)),
    "oil_whirl": _signature(lambda f, rng: _orbit(0.45 * f, 0.9, rng)),
    "electrical": _electrical,
    "bent_shaft": _signature(lambda f, rng: _orbit(f, 0.4, rng), axial=1.0),
}
"""Each condition's signature: its radial (two axes) and axial motion, in g."""


def machine(rng: np.random.Generator) -> Machine:
    """A machine: its shaft speed, resonance, bearing and gear, mounting, bias and noise."""
    mixing = np.eye(3) + 0.35 * rng.standard_normal((3, 3))
    return {
        "shaft": float(rng.uniform(18, 35)),
        "resonance": float(rng.uniform(250, 650)),
        "bearing": float(rng.uniform(0, 1)),
        "teeth": float(rng.integers(5, 12)),
        "mixing": mixing,
        "bias": np.array([0.0, 0.0, 1.0]) + 0.05 * rng.standard_normal(3),
        "noise": float(rng.uniform(0.05, 0.2)),
    }


def window(condition: str, m: Machine, rng: np.random.Generator) -> np.ndarray:
    """One window of ``condition`` on machine ``m``: (3, :data:`STEPS`) accelerations in g."""
    radial, axial = CONDITIONS[condition](m, rng)
    motion = np.vstack([radial, axial[None]])
    axes = np.asarray(m["mixing"]) @ motion + np.asarray(m["bias"])[:, None]
    return axes + float(m["noise"]) * rng.standard_normal((3, STEPS))


def write(path: Path, values: np.ndarray) -> None:
    """A window as CSV: a header, then a row per step of the three axes (4 decimals)."""
    rows = "\n".join(f"{x:.4f},{y:.4f},{z:.4f}" for x, y, z in values.T)
    path.write_text("ax,ay,az\n" + rows + "\n")


def make(
    out: Path, machines: int, takes: int, conditions: int, seed: int = 0, first: int = 0
) -> int:
    """Write the folder of ``conditions`` conditions from number ``first``; the windows."""
    rng = np.random.default_rng(seed)
    names = list(CONDITIONS)[first : first + conditions]
    count = 0
    for k in range(machines):
        m, name = machine(rng), f"m{seed:03d}{k:04d}"
        for condition in names:
            (out / condition).mkdir(parents=True, exist_ok=True)
            for take in range(takes):
                write(out / condition / f"{name}_nohash_{take}.csv", window(condition, m, rng))
                count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--machines", type=int, default=20)
    parser.add_argument("--takes", type=int, default=3)
    parser.add_argument("--conditions", type=int, default=8)
    parser.add_argument("--first", type=int, default=0, help="the first condition's number")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n = make(args.out, args.machines, args.takes, args.conditions, args.seed, args.first)
    print(f"{n} windows of {args.conditions} conditions by {args.machines} machines in {args.out}")


if __name__ == "__main__":
    main()
