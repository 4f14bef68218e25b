"""The DRA version both programs use, read once from the group's discovery document: the service's feed reads
objects at it and the binder's claim writer writes claims at it, so the two can never disagree."""

from __future__ import annotations

from typing import Any

import pytest

from kubenexus.kube.paths import served_dra_version


def _group(*versions: Any) -> dict[str, Any]:
    return {"kind": "APIGroup", "name": "resource.k8s.io", "versions": [{"version": v} for v in versions]}


@pytest.mark.parametrize(
    ("group", "version"),
    [
        (_group("v1", "v1beta2", "v1beta1"), "v1"),  # GA since 1.34: preferred wherever it is served
        (_group("v1beta1", "v1beta2"), "v1beta2"),  # the order is ours, not the document's
        (_group("v1beta1"), "v1beta1"),
        (_group("v1alpha3"), None),  # only versions this product reads
        (_group(), None),
        ({"versions": ["v1", None, 3]}, None),  # malformed entries are skipped, not trusted
        (None, None),  # the group is not served (404)
    ],
    ids=["all", "betas", "v1beta1", "alpha-only", "none", "malformed", "not-served"],
)
def test_the_first_version_this_product_reads_that_the_cluster_serves(group: Any, version: str | None) -> None:
    assert served_dra_version(group) == version
