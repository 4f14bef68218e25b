"""The monitoring bundle in deploy/monitoring/ against the programs it watches.

* Every PromQL expression of the Grafana dashboard and of the PrometheusRule names only metrics the programs
  really export. The exported names come from the real metrics objects (``PlacementMetrics`` over an empty
  engine, ``AgentMetrics``), read through prometheus_client's text exposition and its parser, and expanded
  by each family's type the way the exposition names its series (a counter ``x`` is queried as
  ``x_total``, a histogram as ``x_bucket``, ``x_sum`` and ``x_count``). ``up`` is the one other name
  allowed: Prometheus writes it for every target.
* Every label a query matches or groups by is one its metrics carry (from the samples, or the metric
  object's declared label names while it has none), or one the scrape adds (job, instance, and the
  PodMonitors' namespace, pod, container, endpoint, node).
* Every value a query matches on a program's label (method, code, kind, target, outcome, source) is one the
  programs give it.
* The PodMonitors and the PrometheusRule are valid under prometheus-operator's CRD schemas (vendored,
  trimmed, in tests/monitoring_crds), and the PodMonitors select the pods and ports that deploy/agent and
  deploy/placement really run.
* The dashboard loads, and every panel that draws something has a query.

No PromQL engine runs here (promtool is a Go binary, not packaged for Python): the expressions are
tokenized, not evaluated, so a query that is well-named but wrongly shaped is not caught.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from typing import Any

import grpc
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from agent.publish import Outcome, Target
from agent.serving import AgentMetrics
from placement.api.metrics import PlacementMetrics
from placement.api.v1 import placement_pb2 as pb
from placement.core.vocabulary import RejectionKind
from placement.service.engine import PlacementEngine
from placement.state.cluster_index import ClusterIndex
from tests import REPO, TESTS
from tests.api_conformance import crd_schemas, custom_resource_violations
from tests.deploy.test_shim_deploy import binder_container

Json = dict[str, Any]

ROOT = REPO
MONITORING = ROOT / "deploy" / "monitoring"
CRDS = TESTS / "monitoring_crds"

# Series Prometheus itself writes for every scrape target (prometheus/scrape/scrape.go, scrapeHealthMetricName).
PROMETHEUS_SERIES = frozenset({"up"})
# The PromQL functions and aggregations these files may call (prometheus/promql/parser/functions.go and
# lex.go's aggregators): a misspelt function fails here rather than in Prometheus's rule loader.
PROMQL_CALLS = frozenset(
    {"histogram_quantile", "rate", "increase", "min_over_time", "max_over_time", "time", "sum", "max", "min", "avg"}
)
PROMQL_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*")
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_VALUE_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|=)\s*"([^"]*)"')
_GROUPING_LABELS = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
# Labels a target's series carry besides the program's own: Prometheus's job and instance, and what the
# PodMonitors' relabelings add (prometheus-operator's namespace, pod, container, endpoint; our node).
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "container", "endpoint", "node"})


def _series_labels(registry: CollectorRegistry, wrappers: Iterable[object]) -> dict[str, frozenset[str]]:
    """Series name -> label names, for what a scrape of ``registry`` lets a query name: each family's series,
    whether or not it has samples yet (a labelled counter shows none until its first increment). The label
    names come from the samples and, for a family without any, from its metric object (``wrappers``)."""
    declared = {
        wrapper._name: frozenset(wrapper._labelnames) for wrapper in wrappers if isinstance(wrapper, MetricWrapperBase)
    }
    series: dict[str, frozenset[str]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        labels = declared.get(family.name, frozenset()).union(*(sample.labels for sample in family.samples))
        names = {sample.name for sample in family.samples}
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
        for name in names:
            series[name] = labels | ({"le"} if name.endswith("_bucket") else set())
    return series


@functools.cache
def exported_labels() -> dict[str, frozenset[str]]:
    placement = PlacementMetrics(PlacementEngine.over(ClusterIndex()))
    agent = AgentMetrics()
    return _series_labels(placement.registry, vars(placement).values()) | _series_labels(
        agent.registry, vars(agent).values()
    )


def exported_series() -> frozenset[str]:
    return frozenset(exported_labels())


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left once strings, label matchers, grouping
    clauses and ranges are removed, less function calls and keywords. Raises ValueError for a call to a
    function outside PROMQL_CALLS."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("{}", text)
    text = _GROUPING.sub("", text)
    text = _RANGE.sub("[]", text)
    names: set[str] = set()
    for match in _IDENTIFIER.finditer(text):
        name = match.group()
        if text[match.end() :].lstrip().startswith("("):
            if name not in PROMQL_CALLS:
                raise ValueError(f"{name}() in {expr!r} is not a PromQL function these files may use")
        elif name not in PROMQL_KEYWORDS:
            names.add(name)
    return names


def unknown_labels(expr: str) -> set[str]:
    """Label names a PromQL expression matches or groups by that its metrics do not carry (as
    ``metric:label``, or ``by:label`` for a grouping label that none of its metrics has)."""
    text = _STRING.sub('""', expr)
    labels = exported_labels()
    unknown: set[str] = set()
    for metric, matchers in _SELECTOR.findall(text):
        carried = labels.get(metric, frozenset()) | TARGET_LABELS
        unknown.update(f"{metric}:{label}" for label in _MATCHER_LABEL.findall(matchers) if label not in carried)
    available = TARGET_LABELS.union(*(labels.get(metric, frozenset()) for metric in metric_names(expr)))
    for grouping in _GROUPING_LABELS.findall(text):
        names = {label.strip() for label in grouping.split(",") if label.strip()}
        unknown.update(f"by:{label}" for label in names - available)
    return unknown


def _yaml_documents(name: str) -> list[Json]:
    return [doc for doc in yaml.safe_load_all((MONITORING / name).read_text()) if doc is not None]


def _dashboard() -> Json:
    loaded: Json = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return loaded


def _dashboard_panels() -> list[Json]:
    return [panel for panel in _dashboard()["panels"] if panel["type"] != "row"]


def _rules() -> list[Json]:
    (rule,) = _yaml_documents("prometheusrule.yaml")
    return [entry for group in rule["spec"]["groups"] for entry in group["rules"]]


def _queries() -> list[tuple[str, str]]:
    """(where, expr) for every query of the dashboard and the rules."""
    dashboard = [
        (f"dashboard panel {panel['title']!r} target {target['refId']}", target["expr"])
        for panel in _dashboard_panels()
        for target in panel["targets"]
    ]
    rules = [(f"alert {rule['alert']}", rule["expr"]) for rule in _rules()]
    return dashboard + rules


QUERIES = _queries()


# --- the tokenizer ------------------------------------------------------------------------------------------


def test_the_tokenizer_finds_metrics_and_skips_labels_functions_and_groupings() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (method, le) (rate(a_bucket{job="x", code=~"OK|up"}[5m:1m]))) '
        "> 0.005 and on (pod) b_total unless c"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c"}


def test_the_tokenizer_refuses_an_unknown_function() -> None:
    with pytest.raises(ValueError, match="ratee"):
        metric_names("ratee(x_total[5m])")


def test_the_exported_names_come_from_the_programs_with_their_type_suffixes() -> None:
    names = exported_series()
    # A labelled counter with no sample yet, a histogram and a gauge from each program.
    assert "kubenexus_placement_rejections_total" in names
    assert "kubenexus_placement_rejections" not in names  # Prometheus stores counters under _total
    assert {"kubenexus_placement_rpc_duration_seconds_bucket", "kubenexus_placement_gangs_waiting"} <= names
    assert {"kubenexus_agent_publish_results_total", "kubenexus_agent_discovery_duration_seconds_count"} <= names
    assert "kubenexus_agent_last_publish_success_timestamp_seconds" in names


def test_the_label_check_finds_a_label_the_metric_does_not_carry() -> None:
    assert unknown_labels('sum by (kind) (rate(kubenexus_placement_rejections_total{job="x"}[5m]))') == set()
    assert unknown_labels('rate(kubenexus_placement_rejections_total{reason="y"}[5m])') == {
        "kubenexus_placement_rejections_total:reason"
    }
    assert unknown_labels("sum by (method) (kubenexus_placement_gangs_waiting)") == {"by:method"}


# --- every query names what the programs export -------------------------------------------------------------


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[where for where, _ in QUERIES])
def test_every_query_names_only_exported_metrics(where: str, expr: str) -> None:
    names = metric_names(expr)
    assert names, f"{where}: {expr!r} selects no metric"
    unknown = names - exported_series() - PROMETHEUS_SERIES
    assert not unknown, f"{where} names {sorted(unknown)}, which neither program exports"


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[where for where, _ in QUERIES])
def test_every_query_uses_only_labels_its_metrics_carry(where: str, expr: str) -> None:
    assert unknown_labels(expr) == set(), f"{where}: labels that no scrape would carry"


def test_the_dashboard_and_the_alerts_cover_what_an_operator_watches() -> None:
    dashboard = set().union(*(metric_names(expr) for where, expr in QUERIES if where.startswith("dashboard")))
    assert {
        "kubenexus_placement_rpc_duration_seconds_bucket",  # decision latency
        "kubenexus_placement_rejections_total",  # rejections by kind
        "kubenexus_placement_gangs_waiting",
        "kubenexus_placement_cache_age_seconds",
        "kubenexus_placement_cache_synced",
        "kubenexus_agent_publish_results_total",  # agent publish outcomes
    } <= dashboard
    alerts = {rule["alert"]: metric_names(rule["expr"]) for rule in _rules()}
    assert alerts["KubeNexusAgentNotReporting"] == {"kubenexus_agent_last_publish_success_timestamp_seconds"}
    assert alerts["KubeNexusPlacementNotSynced"] == {"kubenexus_placement_cache_age_seconds"}
    assert alerts["KubeNexusGangsStarving"] == {"kubenexus_placement_gangs_waiting"}
    assert alerts["KubeNexusDecisionLatencyHigh"] == {"kubenexus_placement_rpc_duration_seconds_bucket"}


def test_the_latency_alert_threshold_is_a_histogram_bucket_bound() -> None:
    """histogram_quantile interpolates inside a bucket: at a bucket bound the comparison is exact."""
    (rule,) = [rule for rule in _rules() if rule["alert"] == "KubeNexusDecisionLatencyHigh"]
    threshold = float(rule["expr"].rsplit(">", 1)[1])
    assert threshold in _latency_bucket_bounds()


def _latency_bucket_bounds() -> set[float]:
    metrics = PlacementMetrics(PlacementEngine.over(ClusterIndex()))
    metrics.latency.labels("Filter", "OK").observe(0.0)  # a sample shows the buckets' bounds
    families = text_string_to_metric_families(generate_latest(metrics.registry).decode())
    return {
        float(sample.labels["le"])
        for family in families
        for sample in family.samples
        if sample.name == "kubenexus_placement_rpc_duration_seconds_bucket"
    }


# The values the programs give each label the queries match on: the wire's methods, gRPC's status codes,
# and the programs' own enums (the exposition shows a value only once it has been counted).
LABEL_VALUES = {
    "method": frozenset(pb.DESCRIPTOR.services_by_name["Placement"].methods_by_name),
    "code": frozenset(code.name for code in grpc.StatusCode),
    "kind": frozenset(kind.value for kind in RejectionKind),
    "target": frozenset(target.value for target in Target),
    # The agent's publish outcomes, and the Preempt outcomes PlacementMetrics.count_preemption writes.
    "outcome": frozenset(outcome.value for outcome in Outcome) | {"preempted", "none"},
    "source": frozenset({"kept", "judged"}),
}


def test_the_verdict_sources_are_the_ones_the_service_exposes() -> None:
    families = text_string_to_metric_families(
        generate_latest(PlacementMetrics(PlacementEngine.over(ClusterIndex())).registry).decode()
    )
    (verdicts,) = [family for family in families if family.name == "kubenexus_placement_node_verdicts"]
    assert {sample.labels["source"] for sample in verdicts.samples} == LABEL_VALUES["source"]


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[where for where, _ in QUERIES])
def test_every_matched_label_value_is_one_the_programs_give(where: str, expr: str) -> None:
    for label, operator, value in _VALUE_MATCHER.findall(expr):
        if label not in LABEL_VALUES:
            continue  # a target label (job, endpoint): the PodMonitor tests check those
        # A regex here is an alternation of plain values, so each alternative must be a real value.
        values = set(value.split("|")) if operator == "=~" else {value}
        assert values <= LABEL_VALUES[label], f"{where}: {label}{operator}{value!r} matches nothing the programs give"


# --- the objects ----------------------------------------------------------------------------------------------


def _schemas() -> dict[tuple[str, str], Json]:
    schemas: dict[tuple[str, str], Json] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        schemas |= crd_schemas(yaml.safe_load(path.read_text()))
    return schemas


MONITORING_OBJECTS = [doc for path in sorted(MONITORING.glob("*.yaml")) for doc in _yaml_documents(path.name)]


@pytest.mark.parametrize(
    "doc", MONITORING_OBJECTS, ids=[f"{doc['kind']}/{doc['metadata']['name']}" for doc in MONITORING_OBJECTS]
)
def test_every_object_is_valid_under_prometheus_operators_crd(doc: Json) -> None:
    schema = _schemas()[(doc["apiVersion"], doc["kind"])]
    assert custom_resource_violations(doc, schema) == []


def test_a_misspelt_field_is_caught_by_the_vendored_schema() -> None:
    (agent, _) = _yaml_documents("podmonitors.yaml")
    broken = {**agent, "spec": {**agent["spec"], "podMetricEndpoints": agent["spec"]["podMetricsEndpoints"]}}
    schema = _schemas()[("monitoring.coreos.com/v1", "PodMonitor")]
    assert any("podMetricEndpoints" in problem for problem in custom_resource_violations(broken, schema))


def _workload_pods() -> dict[str, tuple[str, Json, set[str]]]:
    """Workload name -> (namespace, pod labels, container port names) for deploy/agent and deploy/placement; the
    placement pod's with the binder container the chart's binder mode adds (its metrics port is scraped too)."""
    pods: dict[str, tuple[str, Json, set[str]]] = {}
    for folder in ("agent", "placement"):
        for path in sorted((ROOT / "deploy" / folder).glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc["kind"] in ("DaemonSet", "Deployment"):
                    template = doc["spec"]["template"]
                    containers = template["spec"]["containers"]
                    if doc["metadata"]["name"] == "kubenexus-placement":
                        containers = [*containers, binder_container()]
                    ports = {port["name"] for container in containers for port in container["ports"]}
                    pods[doc["metadata"]["name"]] = (
                        doc["metadata"]["namespace"],
                        template["metadata"]["labels"],
                        ports,
                    )
    return pods


@pytest.mark.parametrize("monitor", _yaml_documents("podmonitors.yaml"), ids=lambda doc: doc["metadata"]["name"])
def test_each_pod_monitor_selects_its_workloads_pods_and_metrics_ports(monitor: Json) -> None:
    namespace, labels, ports = _workload_pods()[monitor["metadata"]["name"]]
    spec = monitor["spec"]
    # Without a namespaceSelector a PodMonitor looks in its own namespace only.
    assert "namespaceSelector" not in spec
    assert monitor["metadata"]["namespace"] == namespace
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    endpoints = {endpoint["port"] for endpoint in spec["podMetricsEndpoints"]}
    assert endpoints <= ports
    # Every port the pods serve /metrics on is scraped: the NetworkPolicies admit Prometheus to exactly these.
    assert endpoints == {port for port in ports if port.endswith("metrics")}
    # The queries select on `job`, which jobLabel takes from this pod label.
    assert labels[spec["jobLabel"]] == monitor["metadata"]["name"]


def test_the_queries_select_the_jobs_the_pod_monitors_produce() -> None:
    jobs = {
        _workload_pods()[monitor["metadata"]["name"]][1][monitor["spec"]["jobLabel"]]
        for monitor in _yaml_documents("podmonitors.yaml")
    }
    selected = {job for _, expr in QUERIES for job in re.findall(r'job="([^"]+)"', expr)}
    assert selected == jobs
    # Unscoped, a query would also count series of another job that happened to share a name.
    assert all('job="' in expr for _, expr in QUERIES)


def test_the_rules_have_unique_groups_and_each_alert_says_what_happened() -> None:
    (rule,) = _yaml_documents("prometheusrule.yaml")
    groups = [group["name"] for group in rule["spec"]["groups"]]
    assert len(groups) == len(set(groups))  # the CRD's list-map key, trimmed from the vendored schema
    for entry in _rules():
        assert entry["labels"]["severity"] in {"warning", "critical"}
        assert entry["annotations"]["summary"].endswith(".")


# --- the dashboard ----------------------------------------------------------------------------------------------


def test_every_dashboard_panel_has_a_query_on_the_chosen_datasource() -> None:
    dashboard = _dashboard()
    assert [variable["name"] for variable in dashboard["templating"]["list"]] == ["datasource"]
    panels = _dashboard_panels()
    assert panels
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["expr"].strip(), f"panel {panel['title']!r} target {target['refId']} has no expr"
            assert target["datasource"]["uid"] == "${datasource}"
