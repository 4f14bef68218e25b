"""What a selector reads of a device (``cel.DeviceReads``), and the answers kept by it: devices equal on
what every selector reads share one answer, and that answer is always the one evaluating the selectors
on the device itself gives.

The kept answers are on the path tests/upstream/test_oracle_dra.py compares with upstream's allocator.
"""

from __future__ import annotations

import copy
import random

import pytest

from placement.core.dra import search
from placement.core.dra.cel import (
    DeviceReads,
    SelectorDevice,
    SelectorError,
    SelectorOutcome,
    compile_selector,
    selectors_match,
)
from placement.core.dra.pools import PoolDevice
from placement.core.dra.slices import parse_resource_slice
from tests.dra_cluster import fixture_slice


@pytest.mark.parametrize(
    ("expression", "reads"),
    [
        (
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            DeviceReads(driver=True, attributes=frozenset({("gpu.nvidia.com", "type")})),
        ),
        (
            "device.attributes['gpu.nvidia.com']['type'] == 'gpu' && has(device.attributes['x.io'].y)",
            DeviceReads(attributes=frozenset({("gpu.nvidia.com", "type"), ("x.io", "y")})),
        ),
        (
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
            DeviceReads(capacity=frozenset({("gpu.nvidia.com", "memory")})),
        ),
        ("[1, 2].all(device, device > 0) && device.allowMultipleAllocations", DeviceReads(allow_multiple=True)),
        ("'type' in device.attributes['gpu.nvidia.com']", None),  # the whole map's keys
        ("cel.bind(d, device.attributes['a.io'], d.x == 1)", None),  # the map under another name
        ("device.attributes[device.driver].type == 'gpu'", None),  # a computed domain
        ("device.attributes['gpu.nvidia.com'][\"ty\\x70e\"] == 'gpu'", None),  # an escape: not read as a name
    ],
)
def test_what_a_selector_reads(expression: str, reads: DeviceReads | None) -> None:
    assert compile_selector(expression).reads == reads


SELECTORS = (
    ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",),
    ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",),
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('60Gi')) > 0",),
    ("has(device.attributes['resource.kubernetes.io'].pcieRoot)",),
    ("'pcieRoot' in device.attributes['resource.kubernetes.io']",),  # read whole: the device is the key
    ("device.attributes['gpu.nvidia.com'].nosuch == 'x'",),  # a runtime error on every device
)


def test_kept_answers_are_the_devices_own_and_shared_where_the_reads_agree() -> None:
    rng = random.Random(7)
    devices = []
    for node in ("a", "b", "c"):
        obj = fixture_slice("alloc_nvswitch_8gpu.yaml", node)
        for device in obj["spec"]["devices"]:
            attributes = device["attributes"]
            attributes["uuid"]["string"] = f"GPU-{rng.getrandbits(64):016x}"
            if rng.random() < 0.5:
                attributes["resource.kubernetes.io/pcieRoot"] = {"string": f"pci0000:{rng.randrange(4):02x}"}
            if rng.random() < 0.3:
                attributes["productName"] = {"string": "NVIDIA A100-SXM4-80GB"}
            if rng.random() < 0.3:
                device["capacity"]["memory"] = {"value": "40Gi"}
        devices += [(entry.slice.driver, entry) for entry in _entries(obj)]
    for selectors in SELECTORS:
        search._KEPT_ANSWERS.clear()
        for driver, device in devices:
            own = _answer(selectors, search.selector_device(device))
            kept = _kept(selectors, driver, device)
            assert kept == own, (selectors, device.device.name)
        answers = {_answer(selectors, search.selector_device(device)) for _, device in devices}
        if answers == {SelectorOutcome.RUNTIME_ERROR.value}:
            assert search._KEPT_ANSWERS == {}  # an error is not kept
        elif search._selectors_read(selectors) is not None:  # many devices, few distinct reads
            assert 0 < len(search._KEPT_ANSWERS) <= 5  # at most 4 roots and absent
    search._KEPT_ANSWERS.clear()
    for driver, device in devices:  # read whole: a key per device
        _kept(SELECTORS[4], driver, device)
    assert len(search._KEPT_ANSWERS) == len(devices)


def _entries(obj: dict[str, object]) -> list[PoolDevice]:
    resource_slice = parse_resource_slice(copy.deepcopy(obj))
    return [PoolDevice(resource_slice, device) for device in resource_slice.devices]


def _answer(selectors: tuple[str, ...], device: SelectorDevice) -> bool | str:
    try:
        return selectors_match(selectors, device)
    except SelectorError as error:
        return error.outcome.value


def _kept(selectors: tuple[str, ...], driver: str, entry: PoolDevice) -> bool | str:
    try:
        return search._selectors_keep(selectors, driver, entry.device)
    except SelectorError as error:
        return error.outcome.value
