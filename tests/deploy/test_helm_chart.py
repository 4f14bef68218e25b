"""The Helm chart (deploy/helm/kubenexus) through Helm's own Go code (helm-python-sdk: the Helm v4 SDK as a
shared library): it lints clean; its default render is exactly the plain YAML in deploy/, object by object;
extender mode adds the second kube-scheduler with deploy/scheduler/kube-scheduler-config.yaml and drops the
binder; values land where they should; every rendered object of both modes is valid under the official
Kubernetes schemas, as tests/deploy/test_deploy_schemas.py checks deploy/ itself.

No cluster is involved: this is what `helm template` produces, not what `helm install` applies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from helm_python.chart import Chart, lint
from helm_python.errors import HelmRenderError, HelmValuesError

from placement.service.framework.profile import Profile
from tests import REPO
from tests.deploy.test_deploy_pod_security import restricted_violations
from tests.deploy.test_deploy_schemas import NEWEST_KNOWN, OLDEST_SUPPORTED

Json = dict[str, Any]
Key = tuple[str, str, str]  # kind, namespace, name

DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "kubenexus"
# The plain YAML the default render (plugin mode) must reproduce; the CRD travels in the chart's crds/ (Helm
# applies it first and never templates it), extender mode's scheduler configuration inside its ConfigMap.
PLAIN_DIRECTORIES = ("agent", "placement", "kubenexus-scheduler")
CERT_MANAGER = DEPLOY / "placement" / "cert-manager"
KUBE_SCHEDULER_CONFIG = DEPLOY / "scheduler" / "kube-scheduler-config.yaml"
PLUGIN_CONFIG = DEPLOY / "scheduler" / "kubenexus-scheduler-config.yaml"
PLUGIN_RBAC = DEPLOY / "kubenexus-scheduler" / "01-rbac.yaml"
# Kinds without an official schema: cert-manager's CRDs (tests/deploy/test_deploy_schemas.py checks them).
NOT_OFFICIAL_GROUPS = {"cert-manager.io"}


def _render(values: Json | None = None) -> list[Json]:
    manifests = Chart.load(CHART).render(values, name="kubenexus", namespace="kubenexus-system")
    return [doc for text in manifests.values() for doc in yaml.safe_load_all(text) if doc is not None]


def _plain(paths: list[Path]) -> list[Json]:
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _plain_default() -> list[Json]:
    return _plain([path for directory in PLAIN_DIRECTORIES for path in sorted((DEPLOY / directory).glob("*.yaml"))])


def _by_key(docs: list[Json]) -> dict[Key, Json]:
    keyed = {(doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]): doc for doc in docs}
    assert len(keyed) == len(docs), "two objects with one kind, namespace and name"
    return keyed


def _containers(docs: list[Json], kind: str, name: str) -> dict[str, Json]:
    [workload] = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    return {container["name"]: container for container in workload["spec"]["template"]["spec"]["containers"]}


def _pod_spec(docs: list[Json], kind: str, name: str) -> Json:
    [workload] = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    spec: Json = workload["spec"]["template"]["spec"]
    return spec


def test_the_chart_lints_clean_under_strict_mode() -> None:
    for values in (
        {},
        {"scheduler": {"mode": "extender"}, "tls": {"certManager": True}},
        {"scheduler": {"mode": "plugin"}, "tls": {"certManager": True}, "monitoring": {"enabled": True}},
        {"kueue": {"enabled": True, "flavor": {"nodeLabels": {"nvidia.com/gpu.present": "true"}}}},
    ):
        report = lint(CHART, values, strict=True, kube_version="v1.30.0")
        problems = [message for message in report["messages"] if message["severity"] >= 2]
        assert report["errors"] == [], (values, report)
        assert problems == [], (values, report)


def test_the_default_render_is_the_plain_yaml_object_by_object() -> None:
    rendered, plain = _by_key(_render()), _by_key(_plain_default())
    assert sorted(rendered) == sorted(plain)
    for key, doc in plain.items():
        assert rendered[key] == doc, f"the chart's {key} differs from deploy/"


def test_cert_manager_on_adds_exactly_the_plain_certificates() -> None:
    rendered = _by_key(_render({"tls": {"certManager": True}}))
    default = _by_key(_render())
    added = {key: doc for key, doc in rendered.items() if key not in default}
    assert added == _by_key(_plain(sorted(CERT_MANAGER.glob("*.yaml"))))


def test_monitoring_on_adds_exactly_the_plain_monitoring_objects() -> None:
    for name in ("podmonitors.yaml", "prometheusrule.yaml"):
        assert (CHART / "files" / name).read_text() == (DEPLOY / "monitoring" / name).read_text()
    rendered = _by_key(_render({"monitoring": {"enabled": True}}))
    added = {key: doc for key, doc in rendered.items() if key not in _by_key(_render())}
    assert added == _by_key(_plain(sorted((DEPLOY / "monitoring").glob("*.yaml"))))


def test_the_chart_ships_the_plain_crd() -> None:
    [crd] = Chart.load(CHART).crds
    assert yaml.safe_load(crd["data"]) == yaml.safe_load((DEPLOY / "crd" / "noderesourcetopologies.yaml").read_text())


def test_extender_mode_runs_a_second_kube_scheduler_with_the_plain_config_and_no_binder() -> None:
    docs = _render({"scheduler": {"mode": "extender"}})
    keys = set(_by_key(docs))
    assert {
        ("ServiceAccount", "kubenexus-system", "kubenexus-kube-scheduler"),
        ("ClusterRoleBinding", "", "kubenexus-kube-scheduler-as-kube-scheduler"),
        ("ClusterRoleBinding", "", "kubenexus-kube-scheduler-as-volume-scheduler"),
        ("RoleBinding", "kube-system", "kubenexus-kube-scheduler-extension-apiserver-authentication-reader"),
        ("Role", "kubenexus-system", "kubenexus-kube-scheduler-lease"),
        ("RoleBinding", "kubenexus-system", "kubenexus-kube-scheduler-lease"),
        ("ConfigMap", "kubenexus-system", "kubenexus-kube-scheduler-config"),
        ("Deployment", "kubenexus-system", "kubenexus-scheduler"),
    } <= keys
    bound_roles = {doc["roleRef"]["name"] for doc in docs if doc["kind"] in {"ClusterRoleBinding", "RoleBinding"}}
    assert {
        "system:kube-scheduler",
        "system:volume-scheduler",
        "extension-apiserver-authentication-reader",
    } <= bound_roles

    [config_map] = [doc for doc in docs if doc["metadata"]["name"] == "kubenexus-kube-scheduler-config"]
    config = yaml.safe_load(config_map["data"]["kube-scheduler-config.yaml"])
    assert config == yaml.safe_load(KUBE_SCHEDULER_CONFIG.read_text())

    [lease_role] = [doc for doc in docs if doc["kind"] == "Role" and doc["metadata"]["name"].endswith("-lease")]
    assert lease_role["rules"][0]["resourceNames"] == [config["leaderElection"]["resourceName"]]
    assert lease_role["metadata"]["namespace"] == config["leaderElection"]["resourceNamespace"]

    pod = _pod_spec(docs, "Deployment", "kubenexus-scheduler")
    [scheduler] = pod["containers"]
    assert scheduler["image"].startswith("registry.k8s.io/kube-scheduler:")
    assert "--config=/etc/kubenexus/kube-scheduler-config.yaml" in scheduler["command"]
    mounts = {mount["mountPath"]: mount["name"] for mount in scheduler["volumeMounts"]}
    secrets = {volume["name"]: volume["secret"]["secretName"] for volume in pod["volumes"] if "secret" in volume}
    assert secrets[mounts["/etc/kubenexus/extender-client"]] == "kubenexus-kube-scheduler-client-tls"
    tls_dir = "/etc/kubenexus/extender-client/"
    assert config["extenders"][0]["tlsConfig"]["caFile"].startswith(tls_dir)

    # The placement NetworkPolicy admits this label to the extender.
    [deployment] = [doc for doc in docs if doc["metadata"]["name"] == "kubenexus-scheduler"]
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "kubenexus-kube-scheduler"

    assert set(_containers(docs, "Deployment", "kubenexus-placement")) == {"placement", "extender"}
    binder = _render({"scheduler": {"mode": "binder"}})
    assert set(_containers(binder, "Deployment", "kubenexus-placement")) == {"placement", "extender", "binder"}


def test_plugin_mode_runs_kubenexus_scheduler_with_the_plain_config_rbac_and_writer_identity() -> None:
    docs = _render({"scheduler": {"mode": "plugin"}})
    by_key = _by_key(docs)
    [config_map] = [doc for doc in docs if doc["metadata"]["name"] == "kubenexus-kube-scheduler-config"]
    config = yaml.safe_load(config_map["data"]["kubenexus-scheduler-config.yaml"])
    assert config == yaml.safe_load(PLUGIN_CONFIG.read_text())
    for key, doc in _by_key(_plain([PLUGIN_RBAC])).items():
        assert by_key[key] == doc, f"the chart's {key} differs from deploy/"
    # The identity, bindings and Lease of the extender mode's kube-scheduler, the same ServiceAccount.
    extender = _by_key(_render({"scheduler": {"mode": "extender"}}))
    shared = {key for key in extender if key[0] in {"ServiceAccount", "ClusterRoleBinding", "Role", "RoleBinding"}}
    assert {key: by_key[key] for key in shared} == {key: extender[key] for key in shared}

    pod = _pod_spec(docs, "Deployment", "kubenexus-scheduler")
    [scheduler] = pod["containers"]
    assert scheduler["image"] == "kubenexus/scheduler:0.1.0"
    assert scheduler["command"] == [
        "/usr/local/bin/kubenexus-scheduler",
        "--config=/etc/kubenexus/kubenexus-scheduler-config.yaml",
    ]
    mounts = {mount["mountPath"]: mount["name"] for mount in scheduler["volumeMounts"]}
    secrets = {volume["name"]: volume["secret"]["secretName"] for volume in pod["volumes"] if "secret" in volume}
    # The writer identity (CN kubenexus-scheduler), which the service lets reserve; the files where the args say.
    assert secrets[mounts["/etc/kubenexus/placement-client"]] == "kubenexus-scheduler-client-tls"
    (plugin_config,) = config["profiles"][0]["pluginConfig"]
    assert plugin_config["args"]["caFile"].startswith("/etc/kubenexus/placement-client/")
    assert set(_containers(docs, "Deployment", "kubenexus-placement")) == {"placement", "extender"}


@pytest.mark.parametrize("mode", ["extender", "plugin"])
def test_the_second_kube_scheduler_passes_its_namespaces_restricted_pod_security(mode: str) -> None:
    docs = _render({"scheduler": {"mode": mode}})
    [deployment] = [doc for doc in docs if doc["metadata"]["name"] == "kubenexus-scheduler"]
    [namespace] = [doc for doc in docs if doc["kind"] == "Namespace" and doc["metadata"]["name"] == "kubenexus-system"]
    assert deployment["metadata"]["namespace"] == "kubenexus-system"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    template = deployment["spec"]["template"]
    assert restricted_violations(template["metadata"], template["spec"]) == set()


def test_binder_mode_renders_no_kube_scheduler() -> None:
    names = {doc["metadata"]["name"] for doc in _render({"scheduler": {"mode": "binder"}})}
    assert not any(name.startswith("kubenexus-kube-scheduler") or name == "kubenexus-scheduler" for name in names)


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        (
            {"scheduler": {"mode": "standalone"}},
            "at '/scheduler/mode': value must be one of 'binder', 'extender', 'plugin'",
        ),
        # null deletes a value in Helm: it rendered kubenexus/agent:%!s(<nil>) before the schema.
        ({"agent": {"image": {"tag": None}}}, "at '/agent/image': missing property 'tag'"),
        ({"agent": {"image": {"tag": 1.2}}}, "at '/agent/image/tag': got number, want string"),
        ({"agent": {"imag": {"tag": "1.2"}}}, "at '/agent': additional properties 'imag' not allowed"),
        ({"placement": {"replicas": 0}}, "at '/placement/replicas': minimum: got 0, want 1"),
        ({"imagePullSecrets": ["regcred"]}, "at '/imagePullSecrets/0': got string, want object"),
    ],
)
def test_values_outside_the_schema_fail_naming_the_value(values: Json, refusal: str) -> None:
    with pytest.raises(HelmValuesError) as refused:
        _render(values)
    assert refusal in str(refused.value)


def test_pod_extras_land_on_every_pod_of_every_mode() -> None:
    extras = {"podAnnotations": {"example.com/team": "ml"}, "priorityClassName": "high", "extraArgs": ["--x=1"]}
    values = {"imagePullSecrets": [{"name": "regcred"}], "agent": extras, "placement": extras}
    for mode in ("binder", "extender", "plugin"):
        docs = _render({**values, "scheduler": {"mode": mode, "kubeScheduler": extras}})
        workloads = [doc for doc in docs if doc["kind"] in {"Deployment", "DaemonSet"}]
        assert len(workloads) == (2 if mode == "binder" else 3)
        for workload in workloads:
            template = workload["spec"]["template"]
            assert template["metadata"]["annotations"]["example.com/team"] == "ml"
            assert template["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
            assert template["spec"]["priorityClassName"] == "high"
            first = template["spec"]["containers"][0]
            assert (first.get("args") or first["command"])[-1] == "--x=1"
    # The chart's own annotations stay beside them.
    (agent,) = [doc for doc in docs if doc["kind"] == "DaemonSet"]
    assert agent["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9400"


def test_values_land_where_they_should() -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    docs = _render(
        {
            "scheduler": {"mode": "extender", "kubeScheduler": {"image": {"tag": "v1.33.2"}}},
            "agent": {
                "image": {"repository": "registry.example/agent", "tag": "1.2.3", "pullPolicy": "Always"},
                "nodeSelector": {"pool": "gpu"},
                "tolerations": [toleration],
                "resources": {"requests": {"cpu": "50m"}},
            },
            "placement": {
                "image": {"tag": "9.9.9"},
                "nodeSelector": {"pool": "system"},
                "tolerations": [toleration],
                "resources": {"extender": {"limits": {"memory": "512Mi"}}},
            },
            "tls": {"secrets": {"placementServer": "my-server-tls", "kubeSchedulerClient": "my-ks-tls"}},
        }
    )
    [agent] = _containers(docs, "DaemonSet", "kubenexus-agent").values()
    assert (agent["image"], agent["imagePullPolicy"]) == ("registry.example/agent:1.2.3", "Always")
    # Helm merges a map value into the default: the other requests and limits stay.
    assert agent["resources"] == {
        "requests": {"cpu": "50m", "memory": "80Mi"},
        "limits": {"cpu": "500m", "memory": "160Mi"},
    }
    agent_pod = _pod_spec(docs, "DaemonSet", "kubenexus-agent")
    # A list replaces the default; a map is merged into it (null removes a default key, below).
    assert agent_pod["tolerations"] == [toleration]
    assert agent_pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "pool": "gpu"}
    replaced = _render({"agent": {"nodeSelector": {"nvidia.com/gpu.present": None, "pool": "gpu"}}})
    assert _pod_spec(replaced, "DaemonSet", "kubenexus-agent")["nodeSelector"] == {"pool": "gpu"}

    placement = _containers(docs, "Deployment", "kubenexus-placement")
    assert {container["image"] for container in placement.values()} == {"kubenexus/placement:9.9.9"}
    assert placement["extender"]["resources"] == {
        "requests": {"cpu": "100m", "memory": "96Mi"},
        "limits": {"memory": "512Mi"},
    }
    assert placement["placement"]["resources"] == {
        "requests": {"cpu": "500m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }
    placement_pod = _pod_spec(docs, "Deployment", "kubenexus-placement")
    assert (placement_pod["nodeSelector"], placement_pod["tolerations"]) == ({"pool": "system"}, [toleration])
    volumes = {volume["name"]: volume for volume in placement_pod["volumes"]}
    assert volumes["server-tls"]["secret"]["secretName"] == "my-server-tls"

    [scheduler] = _containers(docs, "Deployment", "kubenexus-scheduler").values()
    assert scheduler["image"] == "registry.k8s.io/kube-scheduler:v1.33.2"
    scheduler_volumes = _pod_spec(docs, "Deployment", "kubenexus-scheduler")["volumes"]
    assert {
        "name": "extender-client-tls",
        "secret": {"secretName": "my-ks-tls", "defaultMode": 288},
    } in scheduler_volumes


def test_workload_policies_off_drops_the_config_map_its_flag_and_its_mount() -> None:
    docs = _render({"placement": {"workloadPolicies": {"enabled": False}}})
    assert "kubenexus-workload-policies" not in {doc["metadata"]["name"] for doc in docs}
    service = _containers(docs, "Deployment", "kubenexus-placement")["placement"]
    assert not any(arg.startswith("--workload-policies") for arg in service["args"])
    assert {mount["name"] for mount in service["volumeMounts"]} == {"server-tls"}
    assert "workload-policies" not in {
        volume["name"] for volume in _pod_spec(docs, "Deployment", "kubenexus-placement")["volumes"]
    }


def test_disabled_plugins_become_the_services_flag_and_only_optional_ones_pass_the_schema() -> None:
    docs = _render({"placement": {"disabledPlugins": ["Gangs", "Preemption"]}})
    service = _containers(docs, "Deployment", "kubenexus-placement")["placement"]
    flags = [arg for arg in service["args"] if arg.startswith("--disable-plugins")]
    assert flags == ["--disable-plugins=Gangs,Preemption"]
    assert not Profile.without(flags[0].split("=", 1)[1].split(",")).runs("Gangs")  # what serve accepts
    default = _containers(_render(), "Deployment", "kubenexus-placement")["placement"]
    assert not any(arg.startswith("--disable-plugins") for arg in default["args"])
    with pytest.raises(HelmValuesError) as refused:
        _render({"placement": {"disabledPlugins": ["NodeResources"]}})
    assert "/placement/disabledPlugins/0" in str(refused.value)


def test_cpu_nodes_get_the_agent_without_nvml_where_the_gpu_daemonset_does_not_go() -> None:
    docs = _render({"agent": {"cpuNodes": {"enabled": True, "nodeSelector": {"pool": "cpu"}}}})
    gpu, cpu = (_pod_spec(docs, "DaemonSet", name) for name in ("kubenexus-agent", "kubenexus-agent-cpu"))
    assert gpu == _pod_spec(_render(), "DaemonSet", "kubenexus-agent")  # the GPU one as deploy/ ships it
    assert "runtimeClassName" not in cpu  # no NVIDIA runtime on a CPU node
    [agent] = cpu["containers"]
    assert agent["args"][-1] == "--no-nvml"
    assert [variable["name"] for variable in agent["env"]] == ["NODE_NAME"]
    assert cpu["nodeSelector"] == {"pool": "cpu"}
    (term,) = cpu["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}]
    # Its own selector: the two DaemonSets' pods stay apart; both are the agent to the NetworkPolicy.
    [daemonset] = [doc for doc in docs if doc["metadata"]["name"] == "kubenexus-agent-cpu"]
    assert daemonset["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "cpu-nodes"
    assert daemonset["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "kubenexus-agent"
    assert [doc["metadata"]["name"] for doc in _render() if doc["kind"] == "DaemonSet"] == ["kubenexus-agent"]


def test_cpu_nodes_need_a_gpu_node_selector_to_stay_apart_from() -> None:
    with pytest.raises(HelmRenderError, match=r"agent\.cpuNodes\.enabled needs agent\.nodeSelector"):
        _render({"agent": {"cpuNodes": {"enabled": True}, "nodeSelector": {"nvidia.com/gpu.present": None}}})


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, NEWEST_KNOWN])
def test_every_rendered_object_of_both_modes_is_valid_under_the_official_schema(version: str) -> None:
    # Most objects are the same in both modes: each distinct one is validated once.
    distinct = {
        json.dumps(doc, sort_keys=True): doc
        for mode in ("binder", "extender", "plugin")
        for doc in _render(
            {"scheduler": {"mode": mode}, "tls": {"certManager": True}, "agent": {"cpuNodes": {"enabled": True}}}
        )
        if doc["apiVersion"].partition("/")[0] not in NOT_OFFICIAL_GROUPS
    }
    problems = []
    for doc in distinct.values():
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = "/".join(str(part) for part in error.absolute_path)
            problems.append(f"{doc['kind']}/{doc['metadata']['name']}: {where}: {error.message}")
    assert problems == []
