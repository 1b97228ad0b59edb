"""Pod and Secret bodies: template merge, route overrides (allow-list), resources and the
request/limit policy, safety defaults, staging; and the translation of API errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

import pytest

from gahp.backends.k8s import api as k8s_api
from gahp.backends.http import translate as door_translate, truncate
from gahp.backends.k8s.api import translate
from gahp.backends.k8s.identity import sandbox_key
from gahp.backends.k8s.spec import (ANN_ERR, ANN_OUT, ANN_SANDBOX_ID, build_pod, load_template, parse_job_id,
                                   pod_name, stage_inputs)
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.core.config import Knobs
from gahp.core.errors import (AuthError, BackendError, ConfigError, Conflict, Expired, Invalid, InvalidJob, NotFound,
                         QuotaExceeded, TransientError)

from k8s_helpers import make_job
from paths import DOCS

pytestmark = pytest.mark.both_engines

TEMPLATE = """
metadata:
  name: ignored
  labels: {site: example}
  annotations: {note: kept}
spec:
  priorityClassName: pilot-low
  nodeSelector: {kubernetes.io/arch: amd64}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  serviceAccountName: pilot
  securityContext: {runAsUser: 1000, fsGroup: 1000}
  containers:
  - name: sidecar
    image: proxy:1
  - name: pilot
    image: htcondor/execute:lts
    env: [{name: CONDOR_HOST, value: cm.example}, {name: SHARED, value: template}]
    resources: {limits: {memory: 1Gi}}
"""


def _build(tmp_path: Path, knobs: Optional[Dict[str, str]] = None, template: str = TEMPLATE,
           **job: Any) -> Dict[str, Any]:
    path = tmp_path / "pod.yaml"
    path.write_text(template)
    settings = KubernetesSettings.from_knobs(Knobs({"PODGAHP_K8S_POD_TEMPLATE": str(path), **(knobs or {})}))
    queue = settings.queue(None)
    pilot = make_job(tmp_path, **job)
    staged = stage_inputs(pilot, queue, settings.secret_max_bytes)
    return build_pod(pilot, queue, load_template(queue.pod_template), name="pilot-x-1", namespace="ns",
                     ce_name="ce", generation=1, user="alice", staged=staged)


def _pilot(pod: Dict[str, Any]) -> Dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "pilot")


def test_template_is_kept_and_the_job_fills_the_pilot_container(tmp_path: Path) -> None:
    pod = _build(tmp_path, {"PODGAHP_K8S_MAX_GPUS": "2"}, env=[("SHARED", "job"), ("X", "1")], gpus=2, disk_kb=1000,
                 wall_time_s=3600)
    spec, container = pod["spec"], _pilot(pod)
    assert pod["metadata"]["name"] == "pilot-x-1" and pod["metadata"]["labels"]["site"] == "example"
    assert pod["metadata"]["annotations"]["note"] == "kept"
    assert pod["metadata"]["annotations"][ANN_SANDBOX_ID] == "ce.test_host_1.0_1795297304"
    assert pod["metadata"]["annotations"][ANN_OUT].endswith("pilot.out")
    assert pod["metadata"]["annotations"][ANN_ERR].endswith("pilot.err")
    assert spec["priorityClassName"] == "pilot-low" and spec["serviceAccountName"] == "pilot"
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu" and spec["nodeSelector"]
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] == 3600
    assert container["image"] == "htcondor/execute:lts" and spec["containers"][0]["image"] == "proxy:1"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SHARED"] == "job" and env["CONDOR_HOST"] == "cm.example" and env["X"] == "1"
    assert env["PODGAHP_JOB_ID"] == "k8s/ns/pilot-x-1"
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "256Mi", "ephemeral-storage": "1000Ki",
                                                  "nvidia.com/gpu": "2"}
    # a 1000 KiB disk request keeps its request, but its limit is the queue's floor (10 GiB)
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "256Mi", "ephemeral-storage": "10485760Ki",
                                                "nvidia.com/gpu": "2"}
    # The template's explicit security context wins; the container gets the safe defaults.
    assert spec["securityContext"]["runAsUser"] == 1000 and spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert container["workingDir"] == "/pilot" and container["command"] == ["/pilot/glidein_startup.sh"]


def test_requests_only_policy_and_cpu_percentage(tmp_path: Path) -> None:
    pod = _build(tmp_path, {"PODGAHP_K8S_LIMITS": "memory", "PODGAHP_K8S_CPU_REQUEST_PERCENT": "90"}, cpus=8)
    resources = _pilot(pod)["resources"]
    assert resources["requests"]["cpu"] == "7200m" and "cpu" not in resources["limits"]
    assert resources["limits"]["memory"] == "256Mi"


def test_template_limit_kept_when_the_job_is_silent(tmp_path: Path) -> None:
    pod = _build(tmp_path, memory_mb=None)
    assert _pilot(pod)["resources"]["limits"]["memory"] == "1Gi"


def test_route_overrides_only_from_the_allow_list(tmp_path: Path) -> None:
    pod = _build(tmp_path, {"PODGAHP_K8S_ALLOWED_IMAGES": "registry.example/*",
                            "PODGAHP_K8S_ALLOWED_PRIORITY_CLASSES": "pilot-*"},
                 settings={"k8s_image": "registry.example/pilot:2", "k8s_priority_class": "pilot-high",
                           "k8s_namespace": "kube-system", "k8s_hostnetwork": True})
    assert _pilot(pod)["image"] == "registry.example/pilot:2"
    assert pod["spec"]["priorityClassName"] == "pilot-high" and "hostNetwork" not in pod["spec"]
    with pytest.raises(InvalidJob, match="not allowed in queue default"):
        _build(tmp_path, {"PODGAHP_K8S_ALLOWED_IMAGES": "registry.example/*"},
               settings={"k8s_image": "evil.example/miner:1"})
    with pytest.raises(InvalidJob, match="PODGAHP_K8S_ALLOWED_PRIORITY_CLASSES"):
        _build(tmp_path, {"PODGAHP_K8S_ALLOWED_PRIORITY_CLASSES": "pilot-*"},
               settings={"k8s_priority_class": "system-node-critical"})


def test_stdin_goes_through_a_shell(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("input")
    pod = _build(tmp_path, stdin=str(tmp_path / "in.txt"))
    assert _pilot(pod)["command"][:2] == ["/bin/sh", "-c"]


def test_bare_pod_needs_an_image(tmp_path: Path) -> None:
    settings = KubernetesSettings.from_knobs(Knobs({}))
    queue = settings.queue(None)
    with pytest.raises(ConfigError, match="PODGAHP_K8S_IMAGE"):
        build_pod(make_job(tmp_path), queue, load_template(None), name="n", namespace="ns", ce_name="c",
                  generation=1, user="u", staged=[])


@pytest.mark.parametrize("template, message", [
    ("- a list", "not a YAML mapping"),
    ("kind: Deployment\nspec: {containers: [{name: a}]}", "kind 'Deployment'"),
    ("spec: {}", "no spec.containers"),
    ("spec: [unclosed", "not readable YAML"),
], ids=["list", "kind", "containers", "yaml"])
def test_bad_templates_name_the_file(tmp_path: Path, template: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(template)
    with pytest.raises(ConfigError, match=message):
        load_template(str(path))
    with pytest.raises(ConfigError, match="cannot be read"):
        load_template(str(tmp_path / "missing.yaml"))


def test_staging_refusals(tmp_path: Path) -> None:
    queue = KubernetesSettings.from_knobs(Knobs({})).queue(None)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_text("1")
    (tmp_path / "f").write_text("2")
    with pytest.raises(InvalidJob, match="same name 'f'"):
        stage_inputs(make_job(tmp_path, transfer_input=(str(tmp_path / "a" / "f"), str(tmp_path / "f"))), queue, 10 ** 6)
    with pytest.raises(InvalidJob, match="is a URL"):
        stage_inputs(make_job(tmp_path, transfer_input=("https://example.org/x",)), queue, 10 ** 6)
    with pytest.raises(InvalidJob, match="is a directory"):
        stage_inputs(make_job(tmp_path, transfer_input=(str(tmp_path / "a"),)), queue, 10 ** 6)
    with pytest.raises(InvalidJob, match="cannot be read"):
        stage_inputs(make_job(tmp_path, transfer_input=(str(tmp_path / "nope"),)), queue, 10 ** 6)
    with pytest.raises(InvalidJob, match="exceed the Kubernetes Secret size limit"):
        stage_inputs(make_job(tmp_path), queue, 5)


def test_names_and_job_ids() -> None:
    key = sandbox_key("ce", "alice", "a_1.0_1")
    assert pod_name(key, 2) == pod_name(key, 2) != pod_name(key, 1)
    assert len(pod_name(sandbox_key("ce", "u" * 300, "x" * 500), 999999999)) <= 63
    assert parse_job_id(f"k8s/ns/pilot-{key}-1") == ("ns", f"pilot-{key}-1")


# ------------------------------------------------------------------------------------------------
# Error translation (the one choke point).


def _api_error(status: int, message: str, reason: str, what: str) -> Exception:
    """The error of an answer of the API with a ``Status`` body, as a request doing ``what`` raises it."""
    body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "reason": reason,
                       "code": status}).encode()
    return door_translate(k8s_api.answer_failure(status, body, "HTTP reason"), what, k8s_api.API)


@pytest.mark.parametrize("status, message, reason, kind", [
    (401, "Unauthorized", "Unauthorized", AuthError),
    (403, 'pods "p" is forbidden: User "u" cannot create resource "pods"', "Forbidden", AuthError),
    (403, 'pods "p" is forbidden: exceeded quota: compute, requested: pods=1', "Forbidden", QuotaExceeded),
    (403, 'pods "p" is forbidden: no PriorityClass with name x was found', "Forbidden", QuotaExceeded),
    (403, 'pods "p" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi', "Forbidden",
     QuotaExceeded),
    (403, 'pods "p" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true', "Forbidden",
     QuotaExceeded),
    (403, "Forbidden", "Forbidden", AuthError),
    (404, 'pods "p" not found', "NotFound", NotFound),
    (409, 'pods "p" already exists', "AlreadyExists", Conflict),
    (410, "too old resource version", "Expired", Expired),
    (422, 'Pod "p" is invalid: spec.containers[0].image: Required value', "Invalid", Invalid),
    (429, "too many requests", "TooManyRequests", TransientError),
    (500, "etcdserver: request timed out", "InternalError", TransientError),
    (503, "unavailable", "ServiceUnavailable", TransientError),
    (400, "bad selector", "BadRequest", Invalid),
    (402, "payment required", "PaymentRequired", BackendError),
], ids=["401", "403-rbac", "403-quota", "403-priority", "403-limitrange",
                                                               "403-podsecurity", "403-bare", "404", "409", "410", "422", "429", "500", "503", "400", "402"])
def test_api_errors_translate_to_the_error_tree(status: int, message: str, reason: str, kind: type) -> None:
    error = _api_error(status, message, reason, "create pod ns/p")
    assert isinstance(error, kind)
    assert "create pod ns/p" in str(error)
    if status != 401:
        assert message[:40] in str(error)


def test_api_messages_are_truncated() -> None:
    error = _api_error(422, "x" * 5000, "Invalid", "create pod")
    assert len(str(error)) < 400 and str(error).endswith("...")


@pytest.mark.parametrize("body, message", [(b"<html>bad gateway</html>", "HTTP reason"), (b"", "HTTP reason"),
                                           (b'{"kind": "Pod"}', "HTTP reason"), (b"{not json", "HTTP reason")],
                         ids=["html", "empty", "not-a-status", "bad-json"])
def test_an_error_answer_without_a_status_body_says_its_http_reason(body: bytes, message: str) -> None:
    failure = k8s_api.answer_failure(502, body, "HTTP reason", {"Retry-After": "3"})
    assert (failure.status, failure.message, failure.reason, failure.retry_after) == (502, message, "", 3.0)


def test_a_transport_failure_is_no_answer() -> None:
    import urllib3

    failure = k8s_api.failure_of(urllib3.exceptions.NewConnectionError(None, "refused"))  # type: ignore[arg-type]
    assert failure is not None and failure.status == 0 and not failure.sent
    assert isinstance(translate(urllib3.exceptions.ReadTimeoutError(None, "/", "timed out"), "watch"),  # type: ignore[arg-type]
                      TransientError)


@pytest.mark.parametrize("method, args, kwargs, expected", [
    ("list_namespaced_pod", ("ns",), dict(label_selector="a=b,c=d", limit=500, _continue="tok en"),
     ("GET", "/api/v1/namespaces/ns/pods?labelSelector=a%3Db%2Cc%3Dd&limit=500&continue=tok+en", None)),
    ("list_namespaced_pod", ("ns",), dict(watch=True, resource_version="12", allow_watch_bookmarks=True,
                                          timeout_seconds=300),
     ("GET", "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=12&allowWatchBookmarks=true&timeoutSeconds=300",
      None)),
    ("create_namespaced_pod", ("ns", {"kind": "Pod"}), dict(dry_run="All"),
     ("POST", "/api/v1/namespaces/ns/pods?dryRun=All", {"kind": "Pod"})),
    ("delete_namespaced_pod", ("p", "ns"), dict(body={"preconditions": {"uid": "u"}}, propagation_policy="Background",
                                                grace_period_seconds=0),
     ("DELETE", "/api/v1/namespaces/ns/pods/p?propagationPolicy=Background&gracePeriodSeconds=0",
      {"preconditions": {"uid": "u"}})),
    ("read_namespaced_pod_log", ("p/../x", "ns"), dict(container="pilot", limit_bytes=10),
     ("GET", "/api/v1/namespaces/ns/pods/p%2F..%2Fx/log?container=pilot&limitBytes=10", None)),
    ("replace_namespaced_secret", ("s", "ns", {"data": {}}), {},
     ("PUT", "/api/v1/namespaces/ns/secrets/s", {"data": {}})),
    ("create_self_subject_access_review", ({"spec": {}},), {},
     ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {"spec": {}})),
], ids=["list", "watch", "dry-run", "delete", "log-quoted", "replace", "review"])
def test_each_request_is_the_api_path_of_the_clients_method(method: str, args: tuple, kwargs: dict,
                                                            expected: tuple) -> None:
    assert k8s_api.request_of(method, args, kwargs) == expected


def test_a_request_podgahp_does_not_make_is_refused() -> None:
    with pytest.raises(ValueError, match="no request"):
        k8s_api.request_of("delete_collection_namespaced_pod", ("ns",), {})
    with pytest.raises(ValueError, match="takes name, namespace"):
        k8s_api.request_of("read_namespaced_pod", ("p",), {})
    assert truncate("a\n b   c") == "a b c"


def test_example_template_builds_a_pod_the_client_models_accept(tmp_path: Path) -> None:
    example = DOCS / "podgahp-pod-template.yaml"
    pod = _build(tmp_path, {"PODGAHP_K8S_MAX_GPUS": "1"}, template=example.read_text(), gpus=1)
    assert _pilot(pod)["image"] == "htcondor/execute:lts" and pod["spec"]["volumes"][0]["name"] == "cvmfs"
    from kubernetes import client  # type: ignore[import-untyped,unused-ignore]

    if hasattr(client.V1Pod, "model_validate"):  # pydantic models (kubernetes >= 37) reject unknown fields
        client.V1Pod.model_validate(pod)


@pytest.mark.parametrize("disk_kb,floor_mb,limit", [(4, None, "10485760Ki"), (20 * 1024 ** 2, None, "20971520Ki"),
                                                    (4, "100", "102400Ki"), (4, "0", "4Ki")],
                         ids=["few-KiB-from-23.x", "large-request", "floor-knob", "floor-off"])
def test_disk_limit_never_below_the_floor(tmp_path: Path, disk_kb: int, floor_mb: Optional[str], limit: str) -> None:
    knobs = {"PODGAHP_K8S_DISK_LIMIT_FLOOR_MB": floor_mb} if floor_mb is not None else {}
    resources = _pilot(_build(tmp_path, knobs, disk_kb=disk_kb))["resources"]
    assert resources["requests"]["ephemeral-storage"] == f"{disk_kb}Ki"
    assert resources["limits"]["ephemeral-storage"] == limit


@pytest.mark.parametrize("sandbox, label", [
    ("ce.example_9619_ce.example#12.0#1795684261_1234.0_1795684261", "1234.0"),
    ("127.0.0.1_0_vm_2.0_1795684261", "2.0"),
    ("home_bl_made-up", None),
    ("x_1234.0_99_", None),
], ids=["ce-sandbox", "local-sandbox", "not-a-job", "trailing"])
def test_a_pod_is_labelled_with_the_job_its_sandbox_names(tmp_path: Path, sandbox: str, label: Optional[str]) -> None:
    from gahp.backends.k8s.spec import LABEL_JOB

    pod = _build(tmp_path, sandbox_id=sandbox)
    assert pod["metadata"]["labels"].get(LABEL_JOB) == label
