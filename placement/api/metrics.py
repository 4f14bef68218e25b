"""The placement service's Prometheus metrics, in their own registry so that tests and benchmarks read them."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from placement.core.vocabulary import RejectionKind
from placement.service.engine import PlacementEngine
from placement.service.gang_port import GangCounts
from placement.service.results import PreemptOutcome, Rejections

# Decisions take about a millisecond over 1,000 nodes; the buckets resolve that and the slow tail.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class PlacementMetrics:
    def __init__(self, engine: PlacementEngine) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "kubenexus_placement_rpc_duration_seconds",
            "Time to answer one RPC, decoding to encoding, by method and status code.",
            ["method", "code"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.rejections = Counter(
            "kubenexus_placement_rejections",
            "Candidate nodes rejected for a pod, by kind (insufficient-resources, kubelet-topology, intent, ...).",
            ["kind"],
            registry=self.registry,
        )
        self.preemptions = Counter(
            "kubenexus_placement_preemptions",
            "Preempt answers, by outcome: preempted (victims chosen, nodes held) or none (nothing may be evicted).",
            ["outcome"],
            registry=self.registry,
        )
        self.preemption_victims = Counter(
            "kubenexus_placement_preemption_victims",
            "Pods chosen as victims by Preempt answers (each a pod, a gang's members counted one by one).",
            registry=self.registry,
        )
        Gauge(
            "kubenexus_placement_gangs_waiting",
            "Pod groups waiting for all their members to fit.",
            registry=self.registry,
        ).set_function(lambda: float(engine.gangs_waiting()))
        Gauge(
            "kubenexus_placement_cache_age_seconds",
            "Seconds since the cluster cache was last in sync with the API (0 while it is).",
            registry=self.registry,
        ).set_function(engine.cache_age_s)
        Gauge(
            "kubenexus_placement_cache_synced",
            "1 while the cluster cache is synced and decisions are served.",
            registry=self.registry,
        ).set_function(lambda: float(engine.is_synced()))
        Gauge(
            "kubenexus_placement_nodes",
            "Nodes with a topology report in the cache.",
            registry=self.registry,
        ).set_function(lambda: float(len(engine.index)))
        self.registry.register(_VerdictCollector(engine))
        self.registry.register(_GangCollector(engine))

    def count_rejections(self, rejected: Iterable[Rejections]) -> None:
        # One increment per kind, not per node: a Filter over 1,000 nodes stays cheap.
        tally: Tally[RejectionKind] = Tally()
        for group in rejected:
            tally[group.kind] += len(group.nodes)
        for kind, count in tally.items():
            self.rejections.labels(kind.value).inc(count)

    def count_preemption(self, outcome: PreemptOutcome) -> None:
        self.preemptions.labels("preempted" if outcome.preempted else "none").inc()
        self.preemption_victims.inc(len(outcome.victims))


class _VerdictCollector(Collector):
    """How Filter and Score came by each node's verdict: kept from an earlier call on the unchanged node,
    or judged afresh. Read at scrape time from the engine's counts, which the hot path keeps anyway."""

    def __init__(self, engine: PlacementEngine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[CounterMetricFamily]:
        verdicts = self._engine.verdicts
        family = CounterMetricFamily(
            "kubenexus_placement_node_verdicts",
            "Node verdicts of Filter and Score calls, by source: kept (the node unchanged since it was judged "
            "for the same pod shape) or judged afresh.",
            labels=["source"],
        )
        family.add_metric(["kept"], float(verdicts.kept))
        family.add_metric(["judged"], float(verdicts.judged))
        yield family


class _GangCollector(Collector):
    """Gang events read at scrape time from the coordinator's counts: permit timeouts (reserved members
    released for not binding in time) and members dropped because the pod watch never showed them."""

    def __init__(self, engine: PlacementEngine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[CounterMetricFamily]:
        gangs = self._engine.gangs
        counts = gangs.counts() if gangs is not None else GangCounts(permit_timeouts=0, members_dropped=0)
        yield CounterMetricFamily(
            "kubenexus_placement_gang_permit_timeouts",
            "Pod groups whose reserved members were all released because they did not bind within the permit timeout.",
            value=float(counts.permit_timeouts),
        )
        yield CounterMetricFamily(
            "kubenexus_placement_gang_members_dropped",
            "Pod-group members named by PlaceGang requests and dropped because the pod watch never showed "
            "the pod within the permit timeout.",
            value=float(counts.members_dropped),
        )
