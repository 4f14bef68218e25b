# PYTHON_ARGCOMPLETE_OK (argcomplete's marker: shell completion may run this entry point)
"""``kubectl kubenexus NODE``: a node's topology as its agent published it.

Installed as the ``kubectl-kubenexus`` console script, which kubectl finds on PATH as a plugin.
It reads only what the cluster holds (the Node's annotation, or its NodeResourceTopology) and
decodes it with the codecs the agent wrote it with, so what it shows is what the scheduler sees.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import argcomplete

from agent.publish import NodeNotFound, Published, PublishError, connect_nodes, read_published
from kubenexus import __version__
from kubenexus.kube.errors import ApiUnavailable
from kubenexus.topology.json_codec import dumps
from kubenexus.topology.labels import MODEL_KEY, decode_node_metadata
from kubenexus.topology.model import NodeTopology
from kubenexus.topology.nrt import decode_nrt, nrt_writers, written_by_kubenexus
from kubenexus.topology.table import render_table_with_links

EXIT_ERROR = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl kubenexus",
        description="Show a node's NUMA cells, GPUs and link matrix as kubenexus-agent published them.",
    )
    parser.add_argument("--version", action="version", version=f"kubectl-kubenexus {__version__}")
    parser.add_argument("node", metavar="NODE", help="the Node's name, as `kubectl get nodes` lists it")
    parser.add_argument(
        "--source",
        choices=["auto", "annotation", "nrt"],
        default="auto",
        help="read the Node's model annotation, the NodeResourceTopology, or the first present (default: %(default)s)",
    )
    parser.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="table: cells, GPUs and the link matrix; json: the lossless model (default: %(default)s)",
    )
    parser.add_argument("--kubeconfig", metavar="FILE", help="like kubectl: default $KUBECONFIG, then ~/.kube/config")
    parser.add_argument(
        "--context", metavar="NAME", help="the kubeconfig context to use (default: the file's current one)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    try:
        api = connect_nodes(args.kubeconfig, context=args.context, in_cluster=False)
        published = read_published(api, args.node)
        topology, origin = _decode(args.node, published, args.source)
    except NodeNotFound as error:
        print(
            f"kubectl-kubenexus: node {error.node_name!r} not found in this cluster "
            "(`kubectl get nodes` lists the names; --context or --kubeconfig picks another cluster)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    except (ApiUnavailable, PublishError, ValueError) as error:
        print(f"kubectl-kubenexus: {error}", file=sys.stderr)
        return EXIT_ERROR
    if args.format == "json":
        sys.stdout.write(dumps(topology, indent=2) + "\n")
        return 0
    sys.stdout.write(f"Node {args.node} (from the {origin})\n\n")
    sys.stdout.write(render_table_with_links(topology))
    return 0


def _decode(node: str, published: Published, source: str) -> tuple[NodeTopology, str]:
    """The topology and where it came from; ValueError (one sentence) when nothing usable is there."""
    if source == "annotation" or (source == "auto" and MODEL_KEY in published.annotations):
        return decode_node_metadata(published.labels, published.annotations), "Node annotation"
    if source in ("auto", "nrt") and published.nrt is not None:
        if not written_by_kubenexus(published.nrt):
            by = ", ".join(nrt_writers(published.nrt)) or "another writer"
            raise ValueError(
                f"node {node!r}: its NodeResourceTopology is written by {by}, not by kubenexus-agent, and holds no "
                "KubeNexus model (the agent leaves it to that writer and publishes on the Node: --source annotation)"
            )
        return decode_nrt(published.nrt), "NodeResourceTopology"
    wanted = {"auto": "topology", "annotation": "model annotation", "nrt": "NodeResourceTopology"}[source]
    raise ValueError(f"node {node!r} has no published {wanted} yet (is kubenexus-agent running on it?)")


if __name__ == "__main__":
    sys.exit(main())
