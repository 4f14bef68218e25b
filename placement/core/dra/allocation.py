"""What the scheduler writes into a claim once its devices are chosen: ``status.allocation`` and ``reservedFor``.

The shapes are DRA-lib's stable ``Allocate`` and kube-scheduler's ``bindClaim`` (NOTES 4.4-4.5):

* ``devices.results[]``: ``{request, driver, pool, device}`` in the order the search chose them, the
  request named ``<request>/<subrequest>`` for a ``firstAvailable`` alternative, plus the request's
  ``tolerations`` when it had any;
* ``devices.config[]``: for each request in spec order, the configs of the DeviceClass it used
  (``source: FromClass``, no ``requests``: they apply to all); then the claim's configs
  (``source: FromClaim``): one that names no request once, and one that names requests once per
  request (or chosen ``<request>/<subrequest>``) it names, with its ``requests`` list kept, as upstream
  appends it inside its loop over the requests;
* ``nodeSelector``: ``metadata.name In [node]`` when any device comes from a node-local slice (a
  ``nodeName``, or a device's own with ``perDeviceNodeSelection``); omitted when every device is
  available on all nodes. Devices from ``nodeSelector`` slices also get the node-name term here: upstream
  copies the slices' selector terms instead, which this module does not reproduce;
* ``reservedFor[]`` gains ``{resource: pods, name, uid}`` in the same status write.

The delete-protection finalizer that the scheduler adds in a separate update before this write is the
caller's business.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from placement.core.dra.claims import ClaimConfig, OpaqueConfig
from placement.core.dra.pools import PoolDevice
from placement.core.dra.search import ClaimSolution


def allocation_result(solution: ClaimSolution, node_name: str) -> dict[str, Any]:
    """The ``status.allocation`` object for one claim's chosen devices on ``node_name``."""
    results = []
    for chosen in solution.devices:
        ref = chosen.device.ref
        result: dict[str, Any] = {"request": chosen.request, "driver": ref.driver, "pool": ref.pool}
        result["device"] = ref.device
        if chosen.spec.tolerations:
            result["tolerations"] = [t.as_api() for t in chosen.spec.tolerations]
        results.append(result)
    devices: dict[str, Any] = {"results": results}
    config = _configs(solution)
    if config:
        devices["config"] = config
    allocation: dict[str, Any] = {"devices": devices}
    if any(_node_local(c.device) or _by_selector(c.device) for c in solution.devices):
        allocation["nodeSelector"] = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]
        }
    return allocation


def reservation(pod_name: str, pod_uid: str) -> dict[str, str]:
    """The ``status.reservedFor`` entry for the pod the claim is allocated for."""
    return {"resource": "pods", "name": pod_name, "uid": pod_uid}


def allocated_claim(
    claim_object: Mapping[str, Any], solution: ClaimSolution, node_name: str, *, pod_name: str, pod_uid: str
) -> dict[str, Any]:
    """A copy of the decoded claim with ``status.allocation`` set and the pod appended to ``reservedFor``."""
    claim = copy.deepcopy(dict(claim_object))
    status = dict(claim.get("status") or {})
    status["allocation"] = allocation_result(solution, node_name)
    status["reservedFor"] = [*(status.get("reservedFor") or []), reservation(pod_name, pod_uid)]
    claim["status"] = status
    return claim


def _configs(solution: ClaimSolution) -> list[dict[str, Any]]:
    out = [_config_entry("FromClass", (), c) for device_class in solution.request_classes for c in device_class.config]
    requests = solution.claim.spec.requests
    for config in solution.claim.spec.config:
        if not config.requests:
            out.append(_config_entry("FromClaim", (), config.opaque))
            continue
        for request, subrequest in zip(requests, solution.chosen_subrequests, strict=True):
            if request.name in config.requests or (subrequest and f"{request.name}/{subrequest}" in config.requests):
                out.append(_claim_config(config))
    return out


def _claim_config(config: ClaimConfig) -> dict[str, Any]:
    return _config_entry("FromClaim", config.requests, config.opaque)


def _config_entry(source: str, requests: tuple[str, ...], opaque: OpaqueConfig) -> dict[str, Any]:
    entry: dict[str, Any] = {"source": source}
    if requests:
        entry["requests"] = list(requests)
    entry["opaque"] = {"driver": opaque.driver, "parameters": copy.deepcopy(opaque.parameters)}
    return entry


def _node_local(entry: PoolDevice) -> bool:
    if entry.slice.per_device_node_selection:
        return entry.device.node_selection.node_name is not None
    return entry.slice.node_selection.node_name is not None


def _by_selector(entry: PoolDevice) -> bool:
    selection = entry.device.node_selection if entry.slice.per_device_node_selection else entry.slice.node_selection
    return selection.node_selector is not None
