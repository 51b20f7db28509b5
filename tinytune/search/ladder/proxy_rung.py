"""The proxy's rung of the fidelity ladder (``--proxy``): the contribution table, the bases, and
the estimates stored as ``proxy`` evaluations.

Before the search, the contribution analysis of the study's reference sub-network
(:mod:`tinytune.search.ladder.contribution`; stored and reused by key) gives MCUNetV3's additive
gains. A candidate's estimate (:func:`tinytune.search.ladder.proxy.estimate`) adds the gains of its
scheme's parts to the classifier-only validation accuracy of its own sub-network, its base:
measured once per sub-network as a classifier-only fine-tune (a task of the ladder), stored with
the contribution tables under the sub-network's key, and reused by later runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from tinytune.db import EvaluationRecord, Store
from tinytune.errors import ModelError
from tinytune.evaluators import EvaluationResult
from tinytune.search.config.search_config import SearchConfig
from tinytune.search.execution.worker_tasks import Tasks
from tinytune.search.ladder.contribution import (
    ContributionEntry,
    TableIdentity,
    file_sha256,
    run_contributions,
    store_entry,
)
from tinytune.search.ladder.contribution_table import ContributionTable, build_table
from tinytune.search.ladder.decisions import Member
from tinytune.search.ladder.proxy import ProxyEstimate, estimate
from tinytune.spaces import (
    Candidate,
    LiteResidualConfig,
    SubnetConfig,
    SupernetSpec,
    UpdateScheme,
    default_subnet,
)

__all__ = ["ProxyRung"]

log = logging.getLogger(__name__)


class ProxyRung:
    """The proxy's table, its bases by sub-network, and its stored estimates, for one run.

    Attributes:
        table: the contribution table of the reference sub-network (None until
            :meth:`prepare` measured or found it).
        contribution_s: the wall time :meth:`prepare` took.
    """

    def __init__(self, config: SearchConfig, spec: SupernetSpec, store: Store) -> None:
        self.config, self.spec, self.store = config, spec, store
        self.identity: TableIdentity | None = None
        self.table: ContributionTable | None = None
        self.bases: dict[str, float | None] = {}  # table key -> classifier-only accuracy
        self.contribution_s = 0.0

    def prepare(self, tasks: Tasks, keep_going: Callable[[], bool]) -> bool:
        """Measure (or reuse) the contribution table of the study's reference sub-network on
        the run's executor, submitting while ``keep_going``; False when it cannot be had (its
        classifier-only fine-tune failed)."""
        config = self.config
        try:
            digest = file_sha256(config.checkpoint)
        except OSError as e:
            raise ModelError(
                f"cannot read the supernet weights {config.checkpoint!r} to identify its "
                f"contribution table: {e.strerror or e}"
            ) from e
        self.identity = TableIdentity(
            self.spec.name,
            config.checkpoint,
            digest,
            config.dataset,
            config.data_seed,
            config.finetune,
            default_subnet(self.spec),
        )
        started = time.monotonic()
        self.table = run_contributions(
            self.store,
            tasks.executor,
            self.identity,
            self.spec,
            config.contribution_plan,
            tasks.task,
            tasks.next_key,
            keep_going=keep_going,
            progress=lambda done, total: tasks.emit("contributions", done=done, total=total),
        )
        self.contribution_s = time.monotonic() - started
        if self.table is None:
            log.warning(
                "the classifier-only fine-tune of the reference sub-network failed; the proxy "
                "ladder is off for this run"
            )
            return False
        self.bases[self.identity.key] = self.table.base
        tasks.emit("contributions_ready", done=self.table.tasks, total=self.table.tasks)
        return True

    def known_base(self, subnet: SubnetConfig) -> float | None:
        """The classifier-only validation accuracy of ``subnet`` if it is measured."""
        assert self.identity is not None
        key = self.identity.with_subnet(subnet).key
        if key not in self.bases:
            table = build_table(key, self.spec, subnet, self.store.contributions(key))
            if table is None:
                return None
            self.bases[key] = table.base
        return self.bases[key]

    def base_candidate(self, subnet: SubnetConfig) -> Candidate:
        """The classifier-only candidate on ``subnet`` whose fine-tune is its base."""
        return Candidate(self.spec.name, subnet, LiteResidualConfig(), UpdateScheme(0))

    def store_base(self, subnet: SubnetConfig, result: EvaluationResult) -> float | None:
        """Store the result of a base's fine-tune; the base, None when it failed."""
        assert self.identity is not None
        entry = ContributionEntry("base", "base", self.base_candidate(subnet))
        store_entry(self.store, self.identity.with_subnet(subnet), entry, result)
        return self.known_base(subnet)

    def estimate(self, member: Member, base: float) -> ProxyEstimate:
        """A member's estimate on its sub-network's ``base``, stored as a ``proxy``
        evaluation (once per candidate)."""
        started = time.perf_counter()
        assert self.table is not None
        est = estimate(member.candidate, self.table, base)
        name = self.config.study_name
        if self.store.find_evaluation(name, member.candidate.key, "proxy") is None:
            self.store.add_evaluation(self._record(member, est, started))
        return est

    def rank(self, members: Sequence[Member]) -> list[float]:
        """Estimates (not stored) of members whose sub-network's base failed, on the table's
        own base: the members share a sub-network, so the gains still rank them."""
        assert self.table is not None
        table = self.table
        return [estimate(m.candidate, table, table.base).accuracy for m in members]

    def _record(self, member: Member, est: ProxyEstimate, started: float) -> EvaluationRecord:
        assert self.table is not None
        return EvaluationRecord(
            study_name=self.config.study_name,
            candidate_key=member.candidate.key,
            trial_number=member.trial.number,
            fidelity="proxy",
            status="ok",
            accuracy=est.accuracy,
            memory_bytes=member.cost.sram_bytes,
            latency_ms=1000.0 * float(member.cost.latency_s or 0.0),
            wall_time_s=time.perf_counter() - started,
            details={
                "estimate": est.to_dict(),
                "estimates": "validation accuracy",
                "table": self.table.key,
                "flash_bytes": member.cost.flash_bytes,
                "scheme": member.scheme,
            },
        )
