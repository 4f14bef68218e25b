"""The cluster index: its roles together (see the package's docstring)."""

from __future__ import annotations

from placement.state.cluster_index.node_views import IndexViews
from placement.state.cluster_index.reports import IndexReports


class ClusterIndex(IndexReports, IndexViews):
    """Per-node NUMA arrays for vectorised filtering and scoring; see the package docstring."""
