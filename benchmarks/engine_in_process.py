"""Filter+Score through the engine in one process, no gRPC: what the service's own Python costs a decision.

``python -m benchmarks.engine_in_process [--tree PATH]`` builds the 1,000-node cluster of
``benchmarks.placement_service`` and times ``PlacementEngine.filter`` then ``score`` for its 4-GPU pod: on a cluster
that holds still, and with 5 pod events applied through the cluster feed's batches before each decision (the
service's churn, without the wall clock). ``--tree``: another checkout's packages first on the path (an earlier
commit, to compare with this one in the same session; ``benchmarks.side_by_side`` needs the module in both).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _percentile(times: list[float], share: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--tree", help="a checkout whose packages go first on the path")
    parser.add_argument("--decisions", type=int, default=2000)
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
    # Imported after the path is set: the tree's own modules.
    from benchmarks.placement_core import machines  # noqa: PLC0415
    from benchmarks.placement_service import CHURN_WARM_UP, Churn, _kind, gpu_pod, label_nodes, node_names  # noqa: PLC0415
    from kubenexus.kube.paths import PODS_PATH  # noqa: PLC0415
    from placement.api import codec  # noqa: PLC0415
    from placement.api.v1 import placement_pb2 as pb  # noqa: PLC0415
    from placement.cluster.feed import ClusterFeed  # noqa: PLC0415
    from placement.service.engine import PlacementEngine  # noqa: PLC0415
    from placement.state.cluster_index import ClusterIndex  # noqa: PLC0415

    kinds = machines()
    index = ClusterIndex(initial_capacity=1000)
    names = node_names(1000)
    for n, name in enumerate(names):
        index.upsert_topology(name, kinds[n % len(kinds)])
    label_nodes(index, [_kind(topology) for topology in kinds], constrained=False)
    engine = PlacementEngine.over(index)
    feed = ClusterFeed(None, index, engine.reservations, batch_interval_s=0.01)  # type: ignore[arg-type]
    batches = feed.batches
    assert batches is not None
    churn = Churn(index, feed.handlers[PODS_PATH])
    for _ in range(CHURN_WARM_UP):
        churn.step()
    batches.flush()
    spec = codec.decode_pod(pb.FilterRequest(pod=gpu_pod()))

    def decide() -> float:
        started = time.perf_counter()
        engine.filter(spec, names, names_key=b"names")
        engine.score(spec, names, names_key=b"names")
        return time.perf_counter() - started

    print(f"engine in one process, 1000 nodes, Filter+Score of a 4-GPU pod, {args.decisions} decisions:")
    for label, events in (("a cluster that holds still", 0), ("5 pod events before each decision", 5)):
        times = []
        for decision in range(args.decisions + 200):
            for _ in range(events):
                churn.step()
            if events:
                batches.flush()
            took = decide()
            if decision >= 200:  # the first ones fill the kept verdicts
                times.append(took)
        print(f"  {label}: p50 {statistics.median(times) * 1000:.3f} ms, p99 {_percentile(times, 0.99):.3f} ms")


if __name__ == "__main__":
    main()
