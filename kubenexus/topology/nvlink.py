"""NVLink counts between GPU pairs: the ``NV<n>`` of ``nvidia-smi topo -m``.

On NVSwitch systems (DGX/HGX A100 and H100, GB200 trays) every GPU link ends at a switch, and
NVML reports the switch's PCI bus id as the remote end, never the peer GPU's. Matching remote
bus ids against GPUs (what NVIDIA's go-gpuallocator does) therefore finds no NVLink at all
there. Through a fully connected switch fabric a pair can use as many links as the GPU with
fewer switch links has, which is what nvidia-smi prints (NV12 on DGX A100, NV18 on HGX H100).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kubenexus.topology.model import Gpu, NvLinkRemote

# A driver without nvmlDeviceGetNvLinkRemoteDeviceType leaves the type unknown; a remote bus id
# that is one of our GPUs is then evidence enough of a direct link.
_DIRECT = (NvLinkRemote.GPU, NvLinkRemote.UNKNOWN)


def nvlink_pair_counts(gpus: Sequence[Gpu]) -> dict[tuple[int, int], int]:
    """Active NVLinks per GPU pair, keyed ``(lower index, higher index)``; pairs without NVLink left out."""
    index_by_bus_id = {gpu.pci_bus_id: gpu.index for gpu in gpus}
    counts: dict[tuple[int, int], int] = {}
    switch_links: dict[int, int] = {}
    for gpu in gpus:
        peers: Counter[int] = Counter()
        for link in gpu.nvlinks:
            if not link.active:
                continue
            if link.remote_type is NvLinkRemote.SWITCH:
                switch_links[gpu.index] = switch_links.get(gpu.index, 0) + 1
            elif link.remote_type in _DIRECT and link.remote_bus_id in index_by_bus_id:
                peers[index_by_bus_id[link.remote_bus_id]] += 1
        for peer, links in peers.items():
            if peer == gpu.index:
                continue
            pair = (min(gpu.index, peer), max(gpu.index, peer))
            # Both ends report the same bridge links; the larger side survives one end being unreadable.
            counts[pair] = max(counts.get(pair, 0), links)
    switched = sorted(switch_links.items())
    for position, (first, first_links) in enumerate(switched):
        for second, second_links in switched[position + 1 :]:
            pair = (min(first, second), max(first, second))
            counts[pair] = counts.get(pair, 0) + min(first_links, second_links)
    return dict(sorted(counts.items()))


def naive_remote_bus_matching(gpus: Sequence[Gpu]) -> dict[tuple[int, int], int]:
    """go-gpuallocator's ``GetNVLink``: active links of the lower GPU whose remote bus id is the peer's.

    What NVIDIA's device plugin sees when it ranks GPU sets (``placement.core.gpuallocator`` predicts its
    answers with it), and what that method misses on NVSwitch systems.
    """
    counts: dict[tuple[int, int], int] = {}
    ordered = sorted(gpus, key=lambda gpu: gpu.index)
    for position, first in enumerate(ordered):
        for second in ordered[position + 1 :]:
            links = sum(1 for link in first.nvlinks if link.active and link.remote_bus_id == second.pci_bus_id)
            if links:
                counts[(first.index, second.index)] = links
    return counts
