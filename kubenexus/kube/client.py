"""Kubernetes API calls as raw JSON over the official client's ``ApiClient``, for both programs.

Not through ``CoreV1Api`` and the other generated classes: instantiating one costs the agent about 21 MB of
pydantic validators for its ~400 methods (a third of the agent's memory target, measured), and
deserialising every Node or Pod of a watch into models costs time neither program needs. Authentication,
TLS and kubeconfig handling stay the client's, unchanged.

Every failure leaves as one of ``errors.API_ERRORS``; a 404 on ``get`` is ``None``, not an error.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from kubenexus.kube.errors import ApiError, ApiUnavailable

Json = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
# One hung call must not stall a pass, a decision loop or a lease renewal for long.
REQUEST_TIMEOUT_S = (5.0, 15.0)


class KubeClient:
    """JSON requests against the API server; thread-safe (the underlying urllib3 pool is).

    ``field_manager`` names the program in every write's managed fields (``kubectl get -o yaml
    --show-managed-fields`` tells who wrote what).
    """

    def __init__(self, api_client: client.ApiClient, *, field_manager: str) -> None:
        self._client = api_client
        self.field_manager = field_manager
        self._streams: set[Any] = set()
        self._streams_lock = threading.Lock()

    def get(self, path: str) -> Json | None:
        """The object at ``path``; None when it does not exist."""
        try:
            return self._json("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def ready(self, timeout_s: float) -> None:
        """``GET /readyz`` within ``timeout_s``: returns when the API server answers that it is ready."""
        response = self._call("GET", "/readyz", timeout=(timeout_s, timeout_s))
        data: bytes = response.read()
        if response.status != 200:
            raise _error(response.status, data)

    def list(self, path: str, query: Mapping[str, str] | None = None) -> Json:
        return self._json("GET", path, query=query)

    def create(self, path: str, body: Mapping[str, Any]) -> Json:
        return self._json("POST", path, body=body, content_type="application/json")

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Json:
        return self._json("PATCH", path, body=patch, content_type=MERGE_PATCH)

    def watch(
        self, path: str, *, resource_version: str, timeout_s: float, query: Mapping[str, str] | None = None
    ) -> Iterator[Json]:
        """Watch events of the collection at ``path`` from ``resource_version``.

        Returns once the server has accepted the watch (HTTP 200): the watch is established then, before any
        event, as client-go's ``Watch`` returns its ``watch.Interface``; a refusal (410 Gone, 403, 429, ...)
        raises here. The events stream ends when the server closes it or after ``timeout_s`` without a byte
        (``ReadTimeoutError``), which a caller treats as "watch again from the last version seen";
        ``close_streams`` ends it at once.
        """
        params = {**(query or {}), "watch": "true", "allowWatchBookmarks": "true"}
        params["timeoutSeconds"] = str(int(timeout_s))
        if resource_version:
            params["resourceVersion"] = resource_version
        response = self._call("GET", path, query=params, timeout=(REQUEST_TIMEOUT_S[0], timeout_s + 5.0))
        raw = response.response
        if not 200 <= response.status <= 299:
            try:
                raise _error(response.status, raw.read())
            finally:
                raw.release_conn()
        with self._streams_lock:
            self._streams.add(raw)
        return self._events(raw)

    def _events(self, raw: Any) -> Iterator[Json]:
        try:
            buffer = b""
            try:
                for chunk in raw.stream(64 * 1024, decode_content=True):
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    yield from (_event(line) for line in lines if line.strip())
            except urllib3.exceptions.ReadTimeoutError:
                return  # quiet for the whole timeout: the caller watches again from where it was
            if buffer.strip():  # the last event of a stream that ended without a newline
                yield _event(buffer)
        finally:
            with self._streams_lock:
                self._streams.discard(raw)
            raw.release_conn()

    def close(self) -> None:
        """Close the connection pool (and with it any open watch)."""
        self.close_streams()
        self._client.close()  # type: ignore[no-untyped-call]

    def close_streams(self) -> None:
        """End every open watch now (shutdown: a thread blocked reading a quiet stream wakes up)."""
        with self._streams_lock:
            streams = list(self._streams)
        for raw in streams:
            with contextlib.suppress(Exception):  # already closed by its reader: nothing to do
                raw.shutdown()

    def _json(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str | None = None,
    ) -> Json:
        response = self._call(method, path, query=query, body=body, content_type=content_type)
        data: bytes = response.read()
        if not 200 <= response.status <= 299:
            raise _error(response.status, data)
        document = json.loads(data)
        if not isinstance(document, dict):
            raise ValueError(f"the API server answered {method} {path} with a JSON {type(document).__name__}")
        return document

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str | None = None,
        timeout: tuple[float, float] = REQUEST_TIMEOUT_S,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        params = list((query or {}).items())
        if method not in ("GET", "DELETE"):
            params.append(("fieldManager", self.field_manager))
        request = self._client.param_serialize(
            method=method,
            resource_path=path,
            query_params=params or None,
            header_params=headers,
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )
        try:
            return self._client.call_api(*request, _request_timeout=timeout)
        except ApiException as error:  # raised by the client itself for some statuses
            raise _error(error.status or 0, (error.body or error.reason or "").encode()) from None


def _event(line: bytes) -> Json:
    event = json.loads(line)
    if not isinstance(event, dict):
        raise ValueError(f"a watch event must be a JSON object, got {line[:80]!r}")
    return event


def _error(status: int, body: bytes) -> ApiError:
    message = body.decode("utf-8", "replace").strip()
    with contextlib.suppress(ValueError, KeyError, TypeError):
        message = str(json.loads(message)["message"])
    return ApiError(status, message[:500])


def connect(
    kubeconfig: str | None = None, *, field_manager: str, context: str | None = None, in_cluster: bool = True
) -> KubeClient:
    """A client from ``kubeconfig``; without one the pod's service account (``in_cluster``), else the default
    kubeconfig (``KUBECONFIG``, ``~/.kube/config``) as kubectl finds it."""
    configuration = client.Configuration()
    try:
        if kubeconfig is None and in_cluster:
            try:
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except ConfigException:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    context=context, client_configuration=configuration
                )
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
    except (ConfigException, OSError) as error:
        raise ApiUnavailable(f"cannot load cluster credentials: {error}") from None
    # Callers own retrying (with backoff, and a re-read or relist where needed); urllib3's immediate retries
    # would only multiply the requests an outage costs. Watches need more connections than the default 4.
    configuration.retries = 0
    configuration.connection_pool_maxsize = 16
    return KubeClient(client.ApiClient(configuration), field_manager=field_manager)
