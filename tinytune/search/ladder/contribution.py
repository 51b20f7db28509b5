"""Contribution analysis: what each part of an update scheme adds to accuracy (MCUNetV3 §2.2).

MCUNetV3 ("On-Device Training Under 256KB Memory", Lin et al. 2022, Eq. 5) scores a sparse
update scheme by the sum of measured accuracy gains over fine-tuning the classifier alone:

    Δacc_b[:k]  updating the biases of the last k convolutions (counted from the output);
    Δacc_W(i,r) updating the weight of convolution i (counted from the input) on the first
                ⌈r·C_in⌉ input channels, r ∈ {1/8, 1/4, 1/2, 1}.

Following the convention that a weight-updated layer lies inside the bias-updated tail, the
weight entry (i, r) is fine-tuned with the biases of the last n−i convolutions — the tail it
needs — and its gain is measured against that same bias tail alone, so the sweep of k always
holds the tail of every analysed layer. tinytune adds the TinyTL parts: a lite residual branch
on one block (default shape, classifier also trained; gain over classifier only), and the
per-channel scales of the whole tail (gain over all biases).

Every configuration is an ordinary candidate fine-tuned by
:func:`tinytune.evaluators.run_evaluation` through the search's executor (so Ray runs them in
parallel) and scored on the **validation** split; the test split stays for the accuracy that
the search reports. Entries are stored one by one under a table key — supernet, SHA-256 of the
weights file, data set and its seed, fine-tuning settings (seed included) and sub-network — so a
later run with the same key trains nothing, and an interrupted analysis resumes where it
stopped.

To keep the number of fine-tunes sensible the default :class:`ContributionPlan` analyses a
subset: the weights of five layers (the final convolution, the projection, depthwise and
expansion convolutions of the last block, and the expansion convolution of the middle block)
at the four ratios, the bias tails those layers need plus all biases and one more point, lite
residual branches on five blocks counted from the output, and the scales — 34 fine-tunes for
the default ``ofa-proxyless-w0.35`` sub-network.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tinytune.db import ContributionRecord, Store
from tinytune.evaluators import EvaluationResult, FinetuneConfig, FinetuneTask
from tinytune.hashing import sha256_file
from tinytune.search.config.contribution_plan import (
    LITE_BRANCH,
    ContributionEntry,
    ContributionPlan,
)
from tinytune.search.execution.executor import Executor
from tinytune.search.ladder.contribution_table import ContributionTable, build_table
from tinytune.spaces import (
    Candidate,
    SubnetConfig,
    SupernetSpec,
)

__all__ = [
    "LITE_BRANCH",
    "ContributionEntry",
    "ContributionPlan",
    "TableIdentity",
    "file_sha256",
    "run_contributions",
    "store_entry",
    "subnet_key",
]

log = logging.getLogger(__name__)


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (:func:`tinytune.hashing.sha256_file`)."""
    return sha256_file(Path(path))


def subnet_key(subnet: SubnetConfig) -> str:
    """A stable 16-hex-digit key of a sub-network (SHA-256 of its canonical JSON)."""
    text = json.dumps(subnet.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TableIdentity:
    """What a contribution table's numbers depend on; its :attr:`key` finds it in the store.

    The weights file is identified by its content (SHA-256), so a moved or copied checkpoint
    still finds its tables; ``checkpoint`` is the path the workers load.
    """

    supernet: str
    checkpoint: str
    checkpoint_sha256: str
    dataset: str
    data_seed: int
    finetune: FinetuneConfig
    subnet: SubnetConfig

    @property
    def key(self) -> str:
        identity = {
            "supernet": self.supernet,
            "checkpoint_sha256": self.checkpoint_sha256,
            "dataset": self.dataset,
            "data_seed": self.data_seed,
            "finetune": self.finetune.to_dict(),
            "subnet": self.subnet.to_dict(),
        }
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def with_subnet(self, subnet: SubnetConfig) -> TableIdentity:
        return TableIdentity(
            self.supernet,
            self.checkpoint,
            self.checkpoint_sha256,
            self.dataset,
            self.data_seed,
            self.finetune,
            subnet,
        )


def run_contributions(
    store: Store,
    executor: Executor,
    identity: TableIdentity,
    spec: SupernetSpec,
    plan: ContributionPlan,
    make_task: Callable[[Candidate], FinetuneTask],
    next_key: Callable[[], int],
    *,
    keep_going: Callable[[], bool] = lambda: True,
    progress: Callable[[int, int], None] | None = None,
) -> ContributionTable | None:
    """Fine-tune the configurations of ``plan`` that the store lacks, then build the table.

    Entries already stored as ok are reused; the others run as tasks on ``executor`` (up to its
    slots at once) and are stored as they finish. Stops submitting when ``keep_going`` turns
    false (the tasks in flight still finish and are stored).

    Returns:
        The table, or None when its classifier-only base could not be measured.
    """
    key = identity.key
    stored = {r.entry for r in store.contributions(key) if r.status == "ok"}
    todo = [e for e in plan.entries(spec, identity.subnet) if e.entry not in stored]
    total, done, task_time = len(todo), 0, 0.0
    if todo:
        log.info("contribution analysis of %s: %d fine-tunes", key[:12], total)
    in_flight: dict[int, ContributionEntry] = {}
    queue = list(todo)
    while queue or in_flight:
        while queue and len(in_flight) < executor.slots and keep_going():
            entry = queue.pop(0)
            store.add_candidate(entry.candidate.key, spec.name, entry.candidate.to_json())
            task_key = next_key()
            in_flight[task_key] = entry
            executor.submit(task_key, make_task(entry.candidate))
        if not in_flight:
            break
        for task_key, result in executor.wait(timeout=1.0):
            entry = in_flight.pop(task_key)
            store_entry(store, identity, entry, result)
            done += 1
            task_time += result.wall_time_s
            if progress is not None:
                progress(done, total)
    records = store.contributions(key)
    table = build_table(key, spec, identity.subnet, records)
    if table is None:
        return None
    return dataclasses.replace(table, tasks=done, task_time_s=task_time)


def store_entry(
    store: Store, identity: TableIdentity, entry: ContributionEntry, result: EvaluationResult
) -> None:
    """Store one fine-tune's result."""
    ok = result.ok
    store.add_contribution(
        ContributionRecord.of(
            result,
            table_key=identity.key,
            entry=entry.entry,
            part=entry.part,
            layer=entry.layer,
            ratio=entry.ratio,
            supernet=identity.supernet,
            checkpoint_sha256=identity.checkpoint_sha256,
            dataset=identity.dataset,
            data_seed=identity.data_seed,
            seed=identity.finetune.seed,
            subnet_key=subnet_key(identity.subnet),
            candidate_key=entry.candidate.key,
            details={
                "checkpoint": identity.checkpoint,
                "finetune": identity.finetune.to_dict(),
                "subnet": identity.subnet.to_dict(),
            },
        )
    )
    if not ok:
        log.warning("contribution entry %s failed: %s", entry.entry, result.error)
