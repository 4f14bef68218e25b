"""Every manifest in deploy/ against the official Kubernetes JSON schemas (kubernetes-validate, strict: an
unknown or misspelt field is an error), for the oldest Kubernetes the project supports and the newest the
library knows; the two kinds that have no schema there against one transcribed from their Go types.

* ``KubeSchedulerConfiguration`` is a component's configuration file, not an API object: its schema below
  follows ``k8s.io/kube-scheduler/config/v1`` (types.go: KubeSchedulerConfiguration, KubeSchedulerProfile,
  Extender, ExtenderTLSConfig, ExtenderManagedResource) and component-base's LeaderElectionConfiguration,
  ClientConnectionConfiguration and DebuggingConfiguration, with only the json names and types.
* cert-manager's ``Issuer`` and ``Certificate`` (deploy/placement/cert-manager/certificates.yaml) are CRDs of a
  project we do not vendor: the schema below allows the fields of cert-manager.io/v1's IssuerSpec (the
  selfSigned and ca issuers) and CertificateSpec, and the KeyUsage values, so a misspelt field fails here
  rather than at `kubectl apply`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests import REPO

Json = dict[str, Any]

DEPLOY = REPO / "deploy"
EXAMPLES = DEPLOY / "examples"
HELM = DEPLOY / "helm"
OLDEST_SUPPORTED = "1.30.0"  # docs/deploy.md: ValidatingAdmissionPolicy GA, pod-bound tokens name the node
NEWEST_KNOWN = f"{kubernetes_validate.latest_version()}.0"


def _documents() -> list[tuple[str, int, Json]]:
    return [
        (str(path.relative_to(DEPLOY)), index, doc)
        for path in sorted(DEPLOY.rglob("*.yaml"))
        if EXAMPLES not in path.parents  # other operators' kinds: tests/deploy/test_operator_examples.py checks them
        if HELM not in path.parents  # templates, not manifests: tests/deploy/test_helm_chart.py renders and checks them
        for index, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if doc is not None
    ]


def _id(entry: tuple[str, int, Json]) -> str:
    path, _, doc = entry
    return f"{path}:{doc['kind']}/{doc['metadata']['name'] if 'metadata' in doc else ''}"


KUBERNETES_OBJECTS = [entry for entry in _documents() if entry[2]["apiVersion"].partition("/")[0] != "cert-manager.io"]
KUBERNETES_OBJECTS = [entry for entry in KUBERNETES_OBJECTS if entry[2]["kind"] != "KubeSchedulerConfiguration"]
# prometheus-operator's kinds (deploy/monitoring): tests/deploy/test_monitoring.py checks them against its CRD schemas.
KUBERNETES_OBJECTS = [
    entry for entry in KUBERNETES_OBJECTS if entry[2]["apiVersion"].partition("/")[0] != "monitoring.coreos.com"
]
# Kueue's kinds (deploy/kueue): tests/deploy/test_kueue_manifests.py checks them against Kueue's own CRDs.
KUBERNETES_OBJECTS = [
    entry for entry in KUBERNETES_OBJECTS if entry[2]["apiVersion"].partition("/")[0] != "kueue.x-k8s.io"
]


def test_the_schema_library_covers_the_versions_the_project_supports() -> None:
    assert kubernetes_validate.utils.major_minor(OLDEST_SUPPORTED) in {
        kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()
    }
    assert tuple(int(part) for part in NEWEST_KNOWN.split(".")[:2]) >= (1, 37)


@pytest.mark.parametrize("version", [OLDEST_SUPPORTED, NEWEST_KNOWN])
@pytest.mark.parametrize("entry", KUBERNETES_OBJECTS, ids=[_id(e) for e in KUBERNETES_OBJECTS])
def test_every_kubernetes_object_is_valid_under_the_official_schema(entry: tuple[str, int, Json], version: str) -> None:
    _, _, doc = entry
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        where = "/".join(str(part) for part in error.absolute_path)
        problem = f"{_id(entry)} is not a valid {doc['kind']} for Kubernetes {version}: {where}: {error.message}"
    else:
        return
    pytest.fail(problem)


def test_every_document_is_checked_by_one_schema_or_the_other() -> None:
    kinds = {(doc["apiVersion"], doc["kind"]) for _, _, doc in _documents()}
    without_official_schema = kinds - {(doc["apiVersion"], doc["kind"]) for _, _, doc in KUBERNETES_OBJECTS}
    assert without_official_schema == {
        ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration"),
        ("cert-manager.io/v1", "Issuer"),
        ("cert-manager.io/v1", "Certificate"),
        ("monitoring.coreos.com/v1", "PodMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
        ("kueue.x-k8s.io/v1beta2", "Topology"),
        ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
        ("kueue.x-k8s.io/v1beta2", "Cohort"),
        ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
        ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
    }
    for api_version, kind in without_official_schema:
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate({"apiVersion": api_version, "kind": kind}, NEWEST_KNOWN, strict=True)


# --- KubeSchedulerConfiguration (k8s.io/kube-scheduler/config/v1) -------------------------------------------


def _strict(properties: Json, required: tuple[str, ...] = ()) -> Json:
    return {"type": "object", "properties": properties, "additionalProperties": False, "required": list(required)}


STRING: Json = {"type": "string"}
BOOLEAN: Json = {"type": "boolean"}
INTEGER: Json = {"type": "integer"}
DURATION: Json = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
STRINGS: Json = {"type": "array", "items": STRING}
PLUGIN_SET = _strict(
    {
        "enabled": {"type": "array", "items": _strict({"name": STRING, "weight": INTEGER}, ("name",))},
        "disabled": {"type": "array", "items": _strict({"name": STRING, "weight": INTEGER}, ("name",))},
    }
)
EXTENSION_POINTS = [
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "multiPoint",
]
KUBE_SCHEDULER_CONFIGURATION = _strict(
    {
        "apiVersion": {"const": "kubescheduler.config.k8s.io/v1"},
        "kind": {"const": "KubeSchedulerConfiguration"},
        "parallelism": INTEGER,
        "leaderElection": _strict(
            {
                "leaderElect": BOOLEAN,
                "leaseDuration": DURATION,
                "renewDeadline": DURATION,
                "retryPeriod": DURATION,
                "resourceLock": STRING,
                "resourceName": STRING,
                "resourceNamespace": STRING,
            }
        ),
        "clientConnection": _strict(
            {
                "kubeconfig": STRING,
                "acceptContentTypes": STRING,
                "contentType": STRING,
                "qps": {"type": "number"},
                "burst": INTEGER,
            }
        ),
        "enableProfiling": BOOLEAN,
        "enableContentionProfiling": BOOLEAN,
        "percentageOfNodesToScore": INTEGER,
        "podInitialBackoffSeconds": INTEGER,
        "podMaxBackoffSeconds": INTEGER,
        "profiles": {
            "type": "array",
            "items": _strict(
                {
                    "schedulerName": STRING,
                    "percentageOfNodesToScore": INTEGER,
                    "plugins": _strict(dict.fromkeys(EXTENSION_POINTS, PLUGIN_SET)),
                    "pluginConfig": {
                        "type": "array",
                        "items": _strict({"name": STRING, "args": {"type": "object"}}, ("name",)),
                    },
                }
            ),
        },
        "extenders": {
            "type": "array",
            "items": _strict(
                {
                    "urlPrefix": STRING,
                    "filterVerb": STRING,
                    "preemptVerb": STRING,
                    "prioritizeVerb": STRING,
                    "weight": INTEGER,
                    "bindVerb": STRING,
                    "enableHTTPS": BOOLEAN,
                    "tlsConfig": _strict(
                        {
                            "insecure": BOOLEAN,
                            "serverName": STRING,
                            "certFile": STRING,
                            "keyFile": STRING,
                            "caFile": STRING,
                            "certData": STRING,
                            "keyData": STRING,
                            "caData": STRING,
                        }
                    ),
                    "httpTimeout": DURATION,
                    "nodeCacheCapable": BOOLEAN,
                    "managedResources": {
                        "type": "array",
                        "items": _strict({"name": STRING, "ignoredByScheduler": BOOLEAN}, ("name",)),
                    },
                    "ignorable": BOOLEAN,
                },
                ("urlPrefix",),
            ),
        },
        "delayCacheUntilActive": BOOLEAN,
    },
    ("apiVersion", "kind"),
)


def _schema_errors(schema: Json, doc: Json) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_the_kube_scheduler_configuration_has_only_fields_kube_scheduler_knows() -> None:
    configs = {Path(path).name: doc for path, _, doc in _documents() if doc["kind"] == "KubeSchedulerConfiguration"}
    assert sorted(configs) == ["kube-scheduler-config.yaml", "kubenexus-scheduler-config.yaml"]  # extender, plugin
    for config in configs.values():
        assert _schema_errors(KUBE_SCHEDULER_CONFIGURATION, config) == []
    config = configs["kube-scheduler-config.yaml"]
    # The schema is strict where it matters: a misspelt TLS field is caught, not ignored.
    misspelt = {**config, "extenders": [{**config["extenders"][0], "tlsConfig": {"caFIle": "/ca.crt"}}]}
    assert _schema_errors(KUBE_SCHEDULER_CONFIGURATION, misspelt) == [
        "extenders/0/tlsConfig: Additional properties are not allowed ('caFIle' was unexpected)"
    ]


# --- cert-manager.io/v1 Issuer and Certificate ----------------------------------------------------------------

KEY_USAGES = [
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
]
OBJECT_META = _strict(
    {
        "name": STRING,
        "namespace": STRING,
        "labels": {"type": "object", "additionalProperties": STRING},
        "annotations": {"type": "object", "additionalProperties": STRING},
    },
    ("name", "namespace"),
)
ISSUER = _strict(
    {
        "apiVersion": {"const": "cert-manager.io/v1"},
        "kind": {"const": "Issuer"},
        "metadata": OBJECT_META,
        "spec": {
            "oneOf": [
                _strict({"selfSigned": _strict({"crlDistributionPoints": STRINGS})}, ("selfSigned",)),
                _strict(
                    {
                        "ca": _strict(
                            {
                                "secretName": STRING,
                                "crlDistributionPoints": STRINGS,
                                "ocspServers": STRINGS,
                                "issuingCertificateURLs": STRINGS,
                            },
                            ("secretName",),
                        )
                    },
                    ("ca",),
                ),
            ]
        },
    },
    ("apiVersion", "kind", "metadata", "spec"),
)
CERTIFICATE = _strict(
    {
        "apiVersion": {"const": "cert-manager.io/v1"},
        "kind": {"const": "Certificate"},
        "metadata": OBJECT_META,
        "spec": _strict(
            {
                "subject": {"type": "object"},
                "literalSubject": STRING,
                "commonName": STRING,
                "duration": DURATION,
                "renewBefore": DURATION,
                "renewBeforePercentage": INTEGER,
                "dnsNames": STRINGS,
                "ipAddresses": STRINGS,
                "uris": STRINGS,
                "otherNames": {"type": "array"},
                "emailAddresses": STRINGS,
                "secretName": STRING,
                "secretTemplate": _strict(
                    {
                        "labels": {"type": "object", "additionalProperties": STRING},
                        "annotations": {"type": "object", "additionalProperties": STRING},
                    }
                ),
                "keystores": {"type": "object"},
                "issuerRef": _strict(
                    {"name": STRING, "kind": {"enum": ["Issuer", "ClusterIssuer"]}, "group": STRING}, ("name",)
                ),
                "isCA": BOOLEAN,
                "usages": {"type": "array", "items": {"enum": KEY_USAGES}},
                "privateKey": _strict(
                    {
                        "rotationPolicy": {"enum": ["Never", "Always"]},
                        "encoding": {"enum": ["PKCS1", "PKCS8"]},
                        "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                        "size": INTEGER,
                    }
                ),
                "signatureAlgorithm": STRING,
                "encodeUsagesInRequest": BOOLEAN,
                "revisionHistoryLimit": INTEGER,
                "additionalOutputFormats": {"type": "array"},
                "nameConstraints": {"type": "object"},
            },
            ("secretName", "issuerRef"),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)
CERT_MANAGER = [entry for entry in _documents() if entry[2]["apiVersion"] == "cert-manager.io/v1"]


@pytest.mark.parametrize("entry", CERT_MANAGER, ids=[_id(e) for e in CERT_MANAGER])
def test_every_cert_manager_object_has_only_fields_cert_manager_knows(entry: tuple[str, int, Json]) -> None:
    _, _, doc = entry
    schema = {"Issuer": ISSUER, "Certificate": CERTIFICATE}[doc["kind"]]
    assert _schema_errors(schema, doc) == []
