"""Made-up inputs for the search tests: an evaluator that trains nothing, with an accuracy
that adds up by parts, a contribution table written by hand, and the small search config the
driver tests start from."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tinytune.db import ContributionRecord
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask
from tinytune.quant.schedule import WEIGHT_LR_SCALE
from tinytune.search import SearchConfig
from tinytune.search.ladder.contribution import subnet_key
from tinytune.spaces import Candidate, conv_kinds, default_subnet, get_supernet

SPEC = get_supernet("ofa-proxyless-w0.35")
SUBNET = default_subnet(SPEC)
KINDS = conv_kinds(SPEC, SUBNET)  # 37 convolutions, 12 blocks
N = len(KINDS)


def search_config(ckpt: Path, **kw: Any) -> SearchConfig:
    """A study ``s`` of 2 fine-tunes of 1 epoch at a fixed rate, with no reference; ``kw``
    overrides or adds any field."""
    fields: dict[str, Any] = {
        "checkpoint": str(ckpt),
        "study_name": "s",
        "trials": 2,
        "reference": False,
        "tune_lr": False,
        "finetune": FinetuneConfig(epochs=1, batch_size=32, lr=0.05),
        **kw,
    }
    return SearchConfig(**fields)


def fake_accuracy(candidate: Candidate) -> float:
    """Additive in the scheme's parts, and higher at a larger input resolution."""
    update = candidate.update
    acc = (
        0.3
        + 0.004 * update.bias_last_k
        + sum(0.03 * r for _, r in update.weights)
        + 0.01 * len(candidate.lite_residual.blocks)
        + 0.002 * candidate.subnet.resolution / 8
    )
    return min(acc, 0.99)


class FakeEvaluator:
    """A task function in the shape of :func:`tinytune.evaluators.run_evaluation` that records
    the candidates it was given."""

    def __init__(self) -> None:
        self.candidates: list[Candidate] = []

    def __call__(self, task: FinetuneTask) -> EvaluationResult:
        candidate = Candidate.from_json(task.candidate)
        self.candidates.append(candidate)
        acc = fake_accuracy(candidate)
        details: dict[str, object] = {}
        if task.int8 is not None:  # what an int8 training reports of how it trained
            int8 = task.int8
            details = {"lr": int8.lrs[0], "schedule": int8.schedule, "epochs": int8.epochs,
                       "qas": int8.qas, "weight_lr_scale": WEIGHT_LR_SCALE}  # fmt: skip
        return EvaluationResult(
            "ok", accuracy=acc, val_accuracy=acc - 0.01, wall_time_s=0.01, details=details
        )


def _record(
    entry: str, part: str, accuracy: float, layer: int | None = None, ratio: float | None = None
) -> ContributionRecord:
    return ContributionRecord(
        table_key="t" * 64,
        entry=entry,
        part=part,
        layer=layer,
        ratio=ratio,
        supernet=SPEC.name,
        checkpoint_sha256="0" * 64,
        dataset="digits",
        data_seed=0,
        seed=0,
        subnet_key=subnet_key(SUBNET),
        candidate_key="c" * 16,
        status="ok",
        accuracy=accuracy,
    )


def made_up_records() -> list[ContributionRecord]:
    """A table by hand: base 0.40; biases of the last 1, 4 and 37 convolutions 0.42, 0.50,
    0.60; the last pw1 (33) at 1/2 with its 4-layer tail 0.55 (+0.05 over that tail); the head
    (36) in full with its 1-layer tail 0.45 (+0.03); lite residuals on blocks 11 and 9 0.43
    and 0.41; all scales 0.62 (+0.02 over all biases); the dw (34) failed."""
    return [
        _record("base", "base", 0.40),
        _record("bias:1", "bias", 0.42, layer=1),
        _record("bias:4", "bias", 0.50, layer=4),
        _record(f"bias:{N}", "bias", 0.60, layer=N),
        _record("weight:33:0.5", "weight", 0.55, layer=33, ratio=0.5),
        _record("weight:36:1", "weight", 0.45, layer=36, ratio=1.0),
        _record("lite:11", "lite", 0.43, layer=11),
        _record("lite:9", "lite", 0.41, layer=9),
        _record("norm", "norm", 0.62),
        dataclasses.replace(
            _record("weight:34:1", "weight", 0.0, layer=34, ratio=1.0),
            status="failed",
            accuracy=None,
            error="diverged",
        ),
    ]
