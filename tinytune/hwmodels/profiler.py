"""Measure the latency of training steps on the host itself.

A training step is forward, cross-entropy loss, backward and an SGD update of the trained
parameters, at the batch size of the example, timed by :func:`clock`: with one intra-op thread
(``tinytune profile``'s default) the CPU time of the calling thread (``time.thread_time``),
which PyTorch's CPU forward and backward both run on, so that time the thread spends waiting
for a core is not counted; with several threads the wall clock (``time.perf_counter``), which
counts every thread's work (the two clocks side by side, quiet and under load:
``bench/profile_clocks.py``, results in ``docs/calibration.md``). On a shared
machine a single burst of other work can slow one network's repeats all together, so
:func:`measure_steps` interleaves: in every round each network runs a few steps in turn, in a
shuffled order. Interference from other work only ever adds time, and on the shared two-core
machine tinytune is developed on it added up to 40 % to a quarter of the repeats (the repeats of
one network were bimodal). The figure a latency profile is fitted to is therefore the fastest
of the interleaved repeats — the step's time on an otherwise idle core; the median over all
repeats is reported beside it. Each op's forward and backward time is taken in hooked passes
inside the same rounds, and is likewise its fastest pass: taken apart, after the steps, as
the median of nine consecutive passes, the forward parts of one network summed to 1.0–2.6×
its fastest forward pass, and to up to 1.7× between two such runs; inside the rounds two
runs' sums agree within 0.91–1.06× (the hooks add their own small overhead, so the whole-step
figures are timed without them).

This is I/O-free but not pure: it runs the modules.
"""

from __future__ import annotations

import random
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "StepTiming",
    "clock",
    "measure_op_backward",
    "measure_op_forward",
    "measure_step",
    "measure_steps",
]


def clock() -> Callable[[], float]:
    """The clock that times steps and ops: the calling thread's CPU time when PyTorch runs on
    one intra-op thread and the system keeps it to the microsecond (Linux and macOS do; some
    systems count it in scheduler ticks), else the wall clock (with several threads, the other
    threads' work would go uncounted)."""
    fine = time.get_clock_info("thread_time").resolution <= 1e-6
    return time.thread_time if fine and torch.get_num_threads() == 1 else time.perf_counter


def clock_name() -> str:
    """What :func:`clock` measures now, in words, for a measurement file's machine record."""
    return "thread CPU time" if clock() is time.thread_time else "wall time"


@dataclass(frozen=True)
class StepTiming:
    """Seconds of a training step and of a forward pass: the fastest repeat (``train_step_s``,
    ``inference_s``) and the median (``*_median_s``), every step sample in the order taken,
    and, where ops were named, each op's fastest forward and backward pass."""

    train_step_s: float
    inference_s: float
    samples: tuple[float, ...]
    train_step_median_s: float = 0.0
    inference_median_s: float = 0.0
    per_op_forward_s: dict[str, float] = field(default_factory=dict)
    per_op_backward_s: dict[str, float] = field(default_factory=dict)


class _OpTimer:
    """Times the forward and the backward pass of named sub-modules of a network, one hooked
    pass at a time, collecting every pass's seconds per op.

    A forward pass is timed with forward pre- and post-hooks as a training step runs it, with
    autograd recording (what an op keeps for its backward, a ReLU's mask, is part of its
    forward in a step); the graph it records is let go. A
    backward pass is a training step's (cross-entropy against label 0, no update): a module's
    backward pre-hook fires when the gradient of its output is ready; autograd then runs the
    module's own backward (its gradient to the input and of its weights) before the gradient
    reaches the module before it, whose pre-hook fires next. A module's time is from its
    pre-hook to the next one, the last's to the end of the backward pass; modules that no
    gradient reaches are left out. The hooks are in place only during their pass.
    """

    def __init__(self, module: nn.Module, example: torch.Tensor, names: Sequence[str]) -> None:
        modules = dict(module.named_modules())
        missing = [n for n in names if n not in modules]
        if missing:
            raise ValueError(f"no sub-modules named {missing[:3]} in the network")
        self.module, self.example = module, example
        self.named = [(n, modules[n]) for n in names]
        self.labels = torch.zeros(example.shape[0], dtype=torch.long)
        self.now = clock()
        self.forward: dict[str, list[float]] = {n: [] for n in names}
        self.backward: dict[str, list[float]] = {n: [] for n in names}

    def forward_pass(self) -> None:
        started: dict[str, float] = {}
        passed: dict[str, float] = {}
        handles = []
        now = self.now
        for name, sub in self.named:

            def pre(_m: nn.Module, _a: object, name: str = name) -> None:
                started[name] = now()

            def post(_m: nn.Module, _a: object, _o: object, name: str = name) -> None:
                passed[name] = now() - started[name]

            handles.append(sub.register_forward_pre_hook(pre))
            handles.append(sub.register_forward_hook(post))
        try:
            with torch.enable_grad():
                self.module(self.example)  # its graph is let go unused
        finally:
            for h in handles:
                h.remove()
        for name, secs in passed.items():
            self.forward[name].append(secs)

    def backward_pass(self) -> None:
        fired: list[tuple[str, float]] = []
        now = self.now
        handles = [
            sub.register_full_backward_pre_hook(
                lambda _m, _g, name=name: fired.append((name, now()))
            )
            for name, sub in self.named
        ]
        try:
            with warnings.catch_warnings():
                # a module whose inputs need no gradient fires on its output's: what is timed
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                F.cross_entropy(self.module(self.example), self.labels).backward()
                end = now()
        finally:
            self.module.zero_grad(set_to_none=True)
            for h in handles:
                h.remove()
        times = [t for _, t in fired[1:]] + [end]
        for (name, start), stop in zip(fired, times, strict=True):
            self.backward[name].append(stop - start)

    def warm_up(self) -> None:
        """One pass of each kind, whose times are let go."""
        self.forward_pass()
        self.backward_pass()
        self.forward = {n: [] for n in self.forward}
        self.backward = {n: [] for n in self.backward}

    @staticmethod
    def fastest(samples: dict[str, list[float]]) -> dict[str, float]:
        return {n: min(v) for n, v in samples.items() if v}


class _Stepper:
    """One network's training step, with learning rate 0 so the network never changes."""

    def __init__(
        self, module: nn.Module, example: torch.Tensor, names: Sequence[str] = ()
    ) -> None:
        self.module, self.example = module, example
        params = [p for p in module.parameters() if p.requires_grad]
        self.opt = torch.optim.SGD(params, lr=0.0) if params else None
        self.labels = torch.zeros(example.shape[0], dtype=torch.long)
        self.clock = clock()
        self.ops = _OpTimer(module, example, names) if names else None

    def step(self) -> float:
        start = self.clock()
        loss = F.cross_entropy(self.module(self.example), self.labels)
        if self.opt is not None:
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        return self.clock() - start

    def forward(self) -> float:
        start = self.clock()
        with torch.no_grad():
            self.module(self.example)
        return self.clock() - start


def measure_steps(
    nets: Sequence[tuple[nn.Module, torch.Tensor]],
    *,
    rounds: int = 7,
    repeats: int = 3,
    warmup: int = 3,
    seed: int = 0,
    ops: Sequence[Sequence[str]] | None = None,
) -> list[StepTiming]:
    """Time training steps and forward passes of several networks, interleaved in rounds.

    Args:
        nets: (module, example input) pairs; labels are all 0.
        rounds: rounds over all networks, each in a new shuffled order.
        repeats: consecutive steps of one network per round.
        warmup: untimed steps of each network before the first round.
        seed: seeds the shuffling, so a run is repeatable in its order.
        ops: per network, the sub-modules (module paths) whose forward and backward passes
            to time: each round, after its steps, ``repeats`` hooked forward passes and as
            many hooked backward passes of the network (:class:`_OpTimer`); an op's figure is
            its fastest pass, as the step's is. The hooks add their own small overhead, so the
            whole-step figures are timed without them.

    Raises:
        ValueError: bad counts, or a name that is not a sub-module of its network.
    """
    if rounds < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"need rounds >= 1, repeats >= 1, warmup >= 0; got {rounds, repeats}")
    if ops is not None and len(ops) != len(nets):
        raise ValueError(f"need one list of op names per network, got {len(ops)}")
    steppers = [_Stepper(m, x, ops[i] if ops is not None else ()) for i, (m, x) in enumerate(nets)]
    for s in steppers:
        for _ in range(warmup):
            s.step()
            s.forward()
        if s.ops is not None:
            s.ops.warm_up()
    train: list[list[float]] = [[] for _ in steppers]
    infer: list[list[float]] = [[] for _ in steppers]
    order = list(range(len(steppers)))
    rng = random.Random(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for i in order:
            s = steppers[i]
            train[i].extend(s.step() for _ in range(repeats))
            infer[i].extend(s.forward() for _ in range(repeats))
            if s.ops is not None:
                for _ in range(repeats):
                    s.ops.forward_pass()
                for _ in range(repeats):
                    s.ops.backward_pass()
    return [
        StepTiming(
            min(t),
            min(f),
            tuple(t),
            statistics.median(t),
            statistics.median(f),
            _OpTimer.fastest(s.ops.forward) if s.ops is not None else {},
            _OpTimer.fastest(s.ops.backward) if s.ops is not None else {},
        )
        for t, f, s in zip(train, infer, steppers, strict=True)
    ]


def measure_step(
    module: nn.Module, example: torch.Tensor, *, warmup: int = 3, repeats: int = 15
) -> StepTiming:
    """Time training steps of one network (see :func:`measure_steps`)."""
    return measure_steps([(module, example)], rounds=1, repeats=repeats, warmup=warmup)[0]


def measure_op_forward(
    module: nn.Module, example: torch.Tensor, names: Sequence[str], *, repeats: int = 9
) -> dict[str, float]:
    """Fastest forward seconds of the sub-modules named ``names`` (module paths) over
    ``repeats`` hooked passes after a warm-up (:class:`_OpTimer`).

    Raises:
        ValueError: a name is not a sub-module of ``module``.
    """
    return _fastest_passes(module, example, names, repeats, backward=False)


def measure_op_backward(
    module: nn.Module, example: torch.Tensor, names: Sequence[str], *, repeats: int = 9
) -> dict[str, float]:
    """Fastest backward seconds of the sub-modules named ``names`` (module paths), in a
    training step's backward pass, over ``repeats`` hooked passes after a warm-up
    (:class:`_OpTimer`); modules that no gradient reaches are left out.

    Raises:
        ValueError: a name is not a sub-module of ``module``.
    """
    return _fastest_passes(module, example, names, repeats, backward=True)


def _fastest_passes(
    module: nn.Module, example: torch.Tensor, names: Sequence[str], repeats: int, backward: bool
) -> dict[str, float]:
    timer = _OpTimer(module, example, names)
    timer.warm_up()
    for _ in range(repeats):
        (timer.backward_pass if backward else timer.forward_pass)()
    return timer.fastest(timer.backward if backward else timer.forward)
