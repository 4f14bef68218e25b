"""The pods fingerprint against the upstream library's published golden signatures.

The pod lists and signatures are github.com/k8stopologyawareschedwg/podfingerprint's
testdata/compat-*.txt and .sign (namespace, name as the first two columns), signed there by the Go code.
"""

from __future__ import annotations

import random

import pytest

from kubenexus.topology.podfingerprint import (
    ATTRIBUTE,
    ATTRIBUTE_METHOD,
    METHOD_ALL,
    METHOD_EXCLUDE_TERMINAL,
    METHOD_WITH_EXCLUSIVE_RESOURCES,
    pods_fingerprint,
    xxh64,
)

COMPAT_TINY_3PODS_1NS = """\
production                      jaeger-dpgjk      1/1 Running 1 42d
production                      nginx-rt684       1/1 Running 1 42d
production                      envoy-g9m22       1/1 Running 1 42d
"""
COMPAT_SMALL_10PODS_3NS = """\
analytics                       controller-69dkj  1/1 Running 1 42d
kube-public                     subscriber-tq6v7  1/1 Running 1 42d
kube-public                     transformer-hfbng 1/1 Running 1 42d
kube-public                     validator-c6pn5   1/1 Running 1 42d
kube-system                     proxy-wszrd       1/1 Running 1 42d
middleware                      processor-jkrl4   1/1 Running 1 42d
network                         gateway-vsll5     1/1 Running 1 42d
network                         importer-kzdfr    1/1 Running 1 42d
network                         importer-q5vt9    1/1 Running 1 42d
staging                         prometheus-bwgbn  1/1 Running 1 42d
"""
COMPAT_MEDIUM_20PODS_1NS = """\
development                     importer-kxqpk    1/1 Running 1 42d
development                     processor-424xv   1/1 Running 1 42d
development                     transformer-84vpn 1/1 Running 1 42d
development                     jaeger-6g6n9      1/1 Running 1 42d
development                     publisher-cq98w   1/1 Running 1 42d
development                     subscriber-24lpk  1/1 Running 1 42d
development                     collector-zvl28   1/1 Running 1 42d
development                     watcher-bj7b6     1/1 Running 1 42d
development                     transformer-mk7qw 1/1 Running 1 42d
development                     mongodb-b5pxs     1/1 Running 1 42d
development                     watcher-4qzlg     1/1 Running 1 42d
development                     publisher-ftpnk   1/1 Running 1 42d
development                     fluentd-fs9j8     1/1 Running 1 42d
development                     jaeger-flvh4      1/1 Running 1 42d
development                     manager-l6n55     1/1 Running 1 42d
development                     grafana-q7sdf     1/1 Running 1 42d
development                     prometheus-qds9v  1/1 Running 1 42d
development                     collector-b7fx4   1/1 Running 1 42d
development                     consumer-l94c8    1/1 Running 1 42d
development                     redis-k7rmn       1/1 Running 1 42d
"""
GOLDEN = [
    pytest.param(COMPAT_TINY_3PODS_1NS, "pfp0v001607b76a0e9d3aeb4", id="compat-tiny-3pods-1ns"),
    pytest.param(COMPAT_SMALL_10PODS_3NS, "pfp0v001567144e4a561bb5a", id="compat-small-10pods-3ns"),
    pytest.param(COMPAT_MEDIUM_20PODS_1NS, "pfp0v00111a79869f24a9528", id="compat-medium-20pods-1ns"),
]


def parse_pods(listing: str) -> list[tuple[str, str]]:
    return [(fields[0], fields[1]) for fields in (line.split() for line in listing.splitlines()) if len(fields) >= 2]


@pytest.mark.parametrize(("listing", "signature"), GOLDEN)
def test_upstream_golden_signatures_reproduce(listing: str, signature: str) -> None:
    assert pods_fingerprint(parse_pods(listing)) == signature


@pytest.mark.parametrize(("listing", "signature"), GOLDEN)
def test_the_order_of_the_pods_does_not_matter(listing: str, signature: str) -> None:
    pods = parse_pods(listing)
    random.Random(12345).shuffle(pods)
    assert pods_fingerprint(pods) == signature


def test_namespace_and_name_are_not_interchangeable() -> None:
    assert pods_fingerprint([("a", "b")]) != pods_fingerprint([("b", "a")])


def test_no_pods_is_the_digest_of_nothing() -> None:
    assert pods_fingerprint([]) == "pfp0v001ef46db3751d8e999"


@pytest.mark.parametrize(
    ("data", "seed", "digest"),
    [
        # The xxHash reference values (also python-xxhash's documented examples).
        (b"", 0, 0xEF46DB3751D8E999),
        (b"a", 0, 0xD24EC4F1A98C6E5B),
        (b"Nobody inspects the spammish repetition", 0, 0xFBCEA83C8A378BF1),
        (b"", 1, 0xD5AFBA1336A3BE4B),
    ],
)
def test_xxh64_reference_values(data: bytes, seed: int, digest: int) -> None:
    assert xxh64(data, seed=seed) == digest


def test_the_names_the_nrt_publishes() -> None:
    assert (ATTRIBUTE, ATTRIBUTE_METHOD) == ("nodeTopologyPodsFingerprint", "nodeTopologyPodsFingerprintMethod")
    assert (METHOD_ALL, METHOD_WITH_EXCLUSIVE_RESOURCES, METHOD_EXCLUDE_TERMINAL) == (
        "all",
        "with-exclusive-resources",
        "exclude-terminal",
    )
