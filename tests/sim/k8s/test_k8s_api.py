"""Fidelity of the simulated API server's request handling: discovery/ping endpoints, pod create
(defaults, generateName, resource versions), reads, selectors, errors as ``Status`` bodies, auth,
RBAC, priority classes, quota, fault injection, patch/put, secrets and their garbage collection."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any, Callable, Dict, List

import pytest
import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from podgahp_sim.k8s import KubeSim, PodQuota, RbacRule, serve
from test_k8s_support import (CLIENT_MAJOR, NS, api_client_for, core, expect_error, make_sim, pod_body, raw,
                              roundtrip, sim, status_of)
from polling import wait_until

pytestmark = [pytest.mark.filterwarnings("error"), pytest.mark.both_engines]
__all__ = ["api_client_for", "core", "make_sim", "sim"]  # fixtures used by name

ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


# ------------------------------------------------------------------ ping / discovery

@pytest.mark.simulator_only("the release the simulator claims (v1.30.0; the real engine runs 1.20.2)")
def test_ping_endpoints(sim: KubeSim, api_client_for: Callable[..., client.ApiClient]) -> None:
    api_client = api_client_for(sim)
    version = client.VersionApi(api_client).get_code()
    assert (version.major, version.minor, version.git_version) == ("1", "30", "v1.30.0")
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    resources = {r.name for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"pods", "pods/log", "pods/status", "secrets", "namespaces"} <= resources
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert groups == {"scheduling.k8s.io", "authorization.k8s.io", "authentication.k8s.io", "rbac.authorization.k8s.io",
                      "apps", "coordination.k8s.io"}
    core_api = client.CoreV1Api(api_client)
    assert core_api.read_namespace(NS).status.phase == "Active"
    assert [n.metadata.name for n in core_api.list_namespace().items] == [NS, "kube-node-lease", "kube-public",
                                                                         "kube-system"]
    assert expect_error(core_api.read_namespace, "nope").status == 404
    nodes = core_api.list_node().items
    assert [n.metadata.name for n in nodes] == ["sim-node-1", "sim-node-2"]
    assert nodes[0].status.allocatable["cpu"] == "4"


def test_priority_classes_endpoint(sim: KubeSim, api_client_for: Callable[..., client.ApiClient]) -> None:
    scheduling = client.SchedulingV1Api(api_client_for(sim))
    names = {pc.metadata.name: pc.value for pc in scheduling.list_priority_class().items}
    assert names == {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
    assert scheduling.read_priority_class("system-node-critical").value == 2000001000
    error = expect_error(scheduling.read_priority_class, "pilot-low")
    assert status_of(error) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'priorityclasses.scheduling.k8s.io "pilot-low" not found', "reason": "NotFound",
        "details": {"name": "pilot-low", "group": "scheduling.k8s.io", "kind": "priorityclasses"}, "code": 404}


@pytest.mark.parametrize("verb,resource,namespace,allowed", [
    ("create", "pods", NS, False),
    ("create", "pods", "other", True),
    ("list", "pods", NS, True),
    ("get", "pods/log", NS, False),
], ids=["denied", "other-namespace", "other-verb", "subresource"])
@pytest.mark.simulator_only("starts simulators of its own")
def test_self_subject_access_review(make_sim: Callable[..., KubeSim], api_client_for: Callable[..., client.ApiClient],
                                    verb: str, resource: str, namespace: str, allowed: bool) -> None:
    sim = make_sim(rbac_deny=(RbacRule("create", "pods", NS), RbacRule("get", "pods/log")))
    auth = client.AuthorizationV1Api(api_client_for(sim))
    name, _, sub = resource.partition("/")
    review = auth.create_self_subject_access_review(client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=client.V1ResourceAttributes(
            namespace=namespace, verb=verb, resource=name, subresource=sub or None))))
    assert review.status.allowed is allowed


# ------------------------------------------------------------------ create

def test_create_sets_server_fields_and_defaults(sim: KubeSim, core: client.CoreV1Api, engine: str) -> None:
    before = int(sim.resource_version)
    pod = core.create_namespaced_pod(NS, pod_body(restart=None, resources={"limits": {"cpu": "1", "memory": "1Gi"}}))
    meta, spec = pod.metadata, pod.spec
    assert meta.name == "p1" and meta.namespace == NS
    assert re.fullmatch(r"[0-9a-f-]{36}", meta.uid)
    assert int(meta.resource_version) > before  # opaque; the real one is etcd's revision, every write's
    assert meta.creation_timestamp is not None
    assert (spec.restart_policy, spec.dns_policy, spec.scheduler_name) == ("Always", "ClusterFirst", "default-scheduler")
    assert (spec.termination_grace_period_seconds, spec.enable_service_links) == (30, True)
    assert (spec.service_account_name, spec.priority, spec.preemption_policy) == ("default", 0, "PreemptLowerPriority")
    assert {t.key for t in spec.tolerations} == {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
    container = spec.containers[0]
    assert (container.image_pull_policy, container.termination_message_path,
            container.termination_message_policy) == ("IfNotPresent", "/dev/termination-log", "File")
    assert container.resources.requests == {"cpu": "1", "memory": "1Gi"}
    assert container.volume_mounts[0].mount_path == "/var/run/secrets/kubernetes.io/serviceaccount"
    if engine == "real":  # 1.20: the account's legacy token Secret (the projected token came with 1.21)
        assert spec.volumes[0].secret.secret_name.startswith("default-token-")
    else:
        assert spec.volumes[0].projected is not None
    assert (pod.status.phase, pod.status.qos_class) == ("Pending", "Guaranteed")
    assert core.read_namespaced_pod("p1", NS).metadata.uid == meta.uid


@pytest.mark.parametrize("image,policy", [
    ("busybox", "Always"), ("busybox:latest", "Always"), ("htcondor/execute:lts", "IfNotPresent"),
    ("registry.example:5000/pilot@sha256:" + "a" * 64, "IfNotPresent"),
], ids=["untagged", "latest", "tagged", "digest"])
def test_image_pull_policy_default(core: client.CoreV1Api, image: str, policy: str) -> None:
    assert core.create_namespaced_pod(NS, pod_body(image=image)).spec.containers[0].image_pull_policy == policy


@pytest.mark.parametrize("resources,qos", [
    (None, "BestEffort"),
    ({"requests": {"cpu": "500m"}}, "Burstable"),
    ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}, "Burstable"),
    ({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
], ids=["none", "request-only", "request-below-limit", "equal"])
def test_qos_class(core: client.CoreV1Api, resources: Any, qos: str) -> None:
    assert core.create_namespaced_pod(NS, pod_body(resources=resources)).status.qos_class == qos


def test_resource_quantities_are_stored_as_the_server_writes_them(core: client.CoreV1Api) -> None:
    """Decoded and written back canonical, in the format they came in: binary unless below 1024 or
    not whole, decimal, exponent."""
    resources = {"requests": {"cpu": "1000m", "memory": "3000M", "ephemeral-storage": "0.5Gi", "example.com/a": "2000",
                              "example.com/b": "12e2", "example.com/c": "0.5Ki"},
                 "limits": {"cpu": "1500m", "memory": "3000Mi", "ephemeral-storage": "10485760Ki",
                            "example.com/a": "2000", "example.com/b": "12e2", "example.com/c": "0.5Ki"}}
    made = core.api_client.sanitize_for_serialization(core.create_namespaced_pod(NS, pod_body(resources=resources)))
    assert made["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1", "memory": "3G", "ephemeral-storage": "512Mi", "example.com/a": "2k",
                     "example.com/b": "1200", "example.com/c": "512"},
        "limits": {"cpu": "1500m", "memory": "3000Mi", "ephemeral-storage": "10Gi", "example.com/a": "2k",
                   "example.com/b": "1200", "example.com/c": "512"}}


@pytest.mark.parametrize("prefix", ["pilot-", "x" * 70], ids=["short", "truncated"])
def test_generate_name(core: client.CoreV1Api, prefix: str) -> None:
    names = set()
    for _ in range(5):
        body = pod_body(name=None)
        body["metadata"]["generateName"] = prefix
        name = core.create_namespaced_pod(NS, body).metadata.name
        kept = prefix[:58]
        assert name.startswith(kept) and len(name) == len(kept) + 5
        assert all(c in ALPHABET for c in name[len(kept):])
        names.add(name)
    assert len(names) == 5


def test_resource_version_is_one_global_counter(core: client.CoreV1Api) -> None:
    first = int(core.create_namespaced_pod(NS, pod_body("a")).metadata.resource_version)
    secret = core.create_namespaced_secret(NS, client.V1Secret(metadata=client.V1ObjectMeta(name="s"),
                                                               string_data={"k": "v"}))
    second = int(core.create_namespaced_pod(NS, pod_body("b")).metadata.resource_version)
    assert first < int(secret.metadata.resource_version) < second
    listed = core.list_namespaced_pod(NS)
    assert int(listed.metadata.resource_version) >= second


# ------------------------------------------------------------------ list and selectors

LABELS = {"a": {"app": "pilot", "pilot-id": "42", "tier": "1"},
          "b": {"app": "pilot", "pilot-id": "43"},
          "c": {"app": "other", "tier": "3"}}


@pytest.mark.parametrize("selector,names", [
    ("app=pilot", ["a", "b"]),
    ("app==pilot", ["a", "b"]),
    ("app!=pilot", ["c"]),
    ("pilot-id in (42,43)", ["a", "b"]),
    ("pilot-id notin (42)", ["b", "c"]),
    ("tier", ["a", "c"]),
    ("!tier", ["b"]),
    ("tier>2", ["c"]),
    ("tier<2", ["a"]),
    ("app=pilot,tier", ["a"]),
    ("app in (pilot, other),!pilot-id", ["c"]),
    ("", ["a", "b", "c"]),
], ids=["eq", "eqeq", "neq", "in", "notin", "exists", "not-exists", "gt", "lt", "and", "in-and-not", "empty"])
def test_label_selectors(core: client.CoreV1Api, selector: str, names: List[str]) -> None:
    for name, labels in LABELS.items():
        core.create_namespaced_pod(NS, pod_body(name, labels=labels))
    listed = core.list_namespaced_pod(NS, label_selector=selector)
    assert [p.metadata.name for p in listed.items] == names


@pytest.mark.parametrize("selector", ["app in pilot", "app=(x", "=x", "app in (a", "a,,b", "bad key!=x"],
                         ids=["in-without-parens", "paren-value", "no-key", "unclosed", "empty-term", "space-key"])
def test_bad_label_selector_is_400(core: client.CoreV1Api, selector: str) -> None:
    error = expect_error(core.list_namespaced_pod, NS, label_selector=selector)
    body = status_of(error)
    assert (error.status, body["reason"], body["code"]) == (400, "BadRequest", 400)


@pytest.mark.parametrize("selector,names", [
    ("metadata.name=a", ["a"]),
    ("metadata.name!=a", ["b"]),
    ("metadata.namespace==default", ["a", "b"]),
    ("status.phase=Pending", ["a", "b"]),
    ("status.phase!=Pending", []),
    ("spec.nodeName=", ["a", "b"]),
    ("spec.restartPolicy=Never,metadata.name=b", ["b"]),
    ("spec.schedulerName=manual", ["a", "b"]),
    ("spec.serviceAccountName=default", ["a", "b"]),
    ("status.podIP=", ["a", "b"]),
    ("status.nominatedNodeName=", ["a", "b"]),
    ("spec.hostNetwork=false", ["a", "b"]),
], ids=["name", "name-neq", "namespace", "phase", "phase-neq", "node-empty", "and", "scheduler", "account",
        "pod-ip", "nominated", "host-network"])
@pytest.mark.simulator_only("configures the simulated API server's policy")
def test_field_selectors(sim: KubeSim, core: client.CoreV1Api, selector: str, names: List[str]) -> None:
    sim.set_quota(None)
    for name in ("a", "b"):
        core.create_namespaced_pod(NS, pod_body(name, schedulerName="manual"))
    assert [p.metadata.name for p in core.list_namespaced_pod(NS, field_selector=selector).items] == names


@pytest.mark.parametrize("selector,message", [
    ("spec.containers=x", "field label not supported: spec.containers"),
    ("metadata.labels=x", "field label not supported: metadata.labels"),
    ("status.phase", "invalid selector: 'status.phase'; can't understand 'status.phase'"),
], ids=["unsupported", "labels", "no-operator"])
def test_bad_field_selector_is_400(core: client.CoreV1Api, selector: str, message: str) -> None:
    error = expect_error(core.list_namespaced_pod, NS, field_selector=selector)
    assert status_of(error) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": message, "reason": "BadRequest", "code": 400}


@pytest.mark.simulator_only("starts simulators of its own")
def test_list_all_namespaces_and_pagination(make_sim: Callable[..., KubeSim],
                                            api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_sim(namespaces=("default", "pilots"))
    core = client.CoreV1Api(api_client_for(sim))
    for ns in ("default", "pilots"):
        for name in ("x", "y"):
            core.create_namespaced_pod(ns, pod_body(name))
    everything = core.list_pod_for_all_namespaces()
    assert [(p.metadata.namespace, p.metadata.name) for p in everything.items] == [
        ("default", "x"), ("default", "y"), ("pilots", "x"), ("pilots", "y")]
    assert len(core.list_pod_for_all_namespaces(field_selector="metadata.namespace=pilots").items) == 2
    page = core.list_pod_for_all_namespaces(limit=3)
    assert len(page.items) == 3 and page.metadata._continue
    rest = core.list_pod_for_all_namespaces(limit=3, _continue=page.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["y"] and not rest.metadata._continue
    assert core.list_namespaced_pod("unknown").items == []


@pytest.mark.simulator_only("injects API faults (errors, latency, dropped or expired watches)")
def test_list_pages_carry_the_first_pages_version_and_expire_with_the_event_log(
        make_sim: Callable[..., KubeSim], api_client_for: Callable[..., client.ApiClient]) -> None:
    """Every page of a paginated LIST answers with the first page's resourceVersion (a watch from it
    misses no change made while the pages were read); remainingItemCount only without selectors; a
    continue token older than the event log is 410, a forged one 400."""
    sim = make_sim()
    core = client.CoreV1Api(api_client_for(sim))
    for name in ("a", "b", "c", "d", "e"):
        core.create_namespaced_pod("default", pod_body(name))
    first = core.list_namespaced_pod("default", limit=2)
    assert first.metadata.remaining_item_count == 3
    assert core.list_namespaced_pod("default", limit=2, label_selector="x!=y").metadata.remaining_item_count is None
    core.create_namespaced_pod("default", pod_body("f"))
    second = core.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    assert [p.metadata.name for p in second.items] == ["c", "d"]
    assert second.metadata.resource_version == first.metadata.resource_version
    sim.compact()
    with pytest.raises(client.ApiException) as expired:
        core.list_namespaced_pod("default", limit=2, _continue=second.metadata._continue)
    assert expired.value.status == 410 and json.loads(expired.value.body)["reason"] == "Expired"
    with pytest.raises(client.ApiException) as forged:
        core.list_namespaced_pod("default", limit=2, _continue="not-a-token")
    assert forged.value.status == 400


# ------------------------------------------------------------------ errors

def _status(code: int, reason: str, message: str, details: Any = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason}
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def test_not_found_and_already_exists(core: client.CoreV1Api) -> None:
    assert status_of(expect_error(core.read_namespaced_pod, "abc", NS)) == _status(
        404, "NotFound", 'pods "abc" not found', {"name": "abc", "kind": "pods"})
    assert status_of(expect_error(core.delete_namespaced_pod, "abc", NS)).get("code") == 404
    core.create_namespaced_pod(NS, pod_body("p1"))
    assert status_of(expect_error(core.create_namespaced_pod, NS, pod_body("p1"))) == _status(
        409, "AlreadyExists", 'pods "p1" already exists', {"name": "p1", "kind": "pods"})
    assert status_of(expect_error(core.create_namespaced_pod, "nowhere", pod_body("p2"))) == _status(
        404, "NotFound", 'namespaces "nowhere" not found', {"name": "nowhere", "kind": "namespaces"})


GPU = "nvidia.com/gpu"


@pytest.mark.parametrize("body,field,reason,message", [
    (dict(pod_body(), metadata={}), "metadata.name", "FieldValueRequired",
     'Pod "" is invalid: metadata.name: Required value: name or generateName is required'),
    (pod_body("Bad_Name"), "metadata.name", "FieldValueInvalid", None),
    (dict(pod_body(), spec={"containers": []}), "spec.containers", "FieldValueRequired",
     'Pod "p1" is invalid: spec.containers: Required value'),
    (pod_body(image=""), "spec.containers[0].image", "FieldValueRequired",
     'Pod "p1" is invalid: spec.containers[0].image: Required value'),
    (pod_body(resources={"requests": {GPU: "2"}, "limits": {GPU: "1"}}), "spec.containers[0].resources.requests",
     "FieldValueInvalid", 'Pod "p1" is invalid: spec.containers[0].resources.requests: Invalid value: "2": '
                          'must be equal to nvidia.com/gpu limit of 1'),
    (pod_body(resources={"requests": {GPU: "1"}}), "spec.containers[0].resources.limits", "FieldValueRequired",
     'Pod "p1" is invalid: spec.containers[0].resources.limits: Required value: Limit must be set for non '
     'overcommitable resources'),
    (pod_body(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}), "spec.containers[0].resources.requests",
     "FieldValueInvalid", 'Pod "p1" is invalid: spec.containers[0].resources.requests: Invalid value: "2": '
                          'must be less than or equal to cpu limit of 1'),
    (pod_body(activeDeadlineSeconds=0), "spec.activeDeadlineSeconds", "FieldValueInvalid",
     'Pod "p1" is invalid: spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, '
     'inclusive'),
    (pod_body(restart="Sometimes"), "spec.restartPolicy", "FieldValueNotSupported",
     'Pod "p1" is invalid: spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", '
     '"OnFailure", "Never"'),
    (pod_body(volumes=[{"name": "s", "secret": {"secretName": "s", "defaultMode": 1000}}]),
     "spec.volumes[0].secret.defaultMode", "FieldValueInvalid",
     'Pod "p1" is invalid: spec.volumes[0].secret.defaultMode: Invalid value: 1000: must be a number between 0 and '
     '0777 (octal), both inclusive'),
], ids=["no-name", "bad-name", "no-containers", "no-image", "gpu-request-neq-limit", "gpu-request-only",
        "request-over-limit", "deadline-zero", "restart-policy", "secret-mode"])
def test_validation_is_422(core: client.CoreV1Api, body: Dict[str, Any], field: str, reason: str,
                           message: Any, engine: str) -> None:
    if engine == "real" and message:
        message = message.replace(" limit of 1", " limit")  # 1.20's words (the value came later)
    error = expect_error(core.create_namespaced_pod, NS, body)
    status = status_of(error)
    assert (error.status, status["reason"], status["code"]) == (422, "Invalid", 422)
    assert status["details"]["kind"] == "Pod"
    assert status["details"]["causes"][0]["field"] == field
    assert status["details"]["causes"][0]["reason"] == reason
    if message:
        assert status["message"] == message
    assert core.list_namespaced_pod(NS).items == []


def test_a_delete_whose_precondition_fails_is_a_conflict_on_the_kind(core: client.CoreV1Api) -> None:
    made = core.create_namespaced_pod(NS, pod_body("g1"))
    zero = "00000000-0000-0000-0000-000000000000"
    error = expect_error(core.delete_namespaced_pod, "g1", NS, body=client.V1DeleteOptions(
        preconditions=client.V1Preconditions(uid=zero)))
    assert status_of(error) == _status(409, "Conflict", 'Operation cannot be fulfilled on Pod "g1": the UID in the '
                                       "precondition (%s) does not match the UID in record (%s). The object might "
                                       "have been deleted and then recreated" % (zero, made.metadata.uid),
                                       {"name": "g1", "kind": "Pod"})
    error = expect_error(core.delete_namespaced_pod, "g1", NS, body=client.V1DeleteOptions(
        preconditions=client.V1Preconditions(resource_version="1")))
    status = status_of(error)  # the record's version moves as the scheduler and the node write the pod
    assert (status["code"], status["reason"], status["details"]) == (409, "Conflict", {"name": "g1", "kind": "Pod"})
    assert re.fullmatch(r'Operation cannot be fulfilled on Pod "g1": the ResourceVersion in the precondition \(1\) '
                        r"does not match the ResourceVersion in record \(\d+\)\. The object might have been modified",
                        status["message"]), status["message"]


def test_several_validation_errors_are_bracketed(core: client.CoreV1Api) -> None:
    body = pod_body(image="", activeDeadlineSeconds=-1)
    message = status_of(expect_error(core.create_namespaced_pod, NS, body))["message"]
    assert message.startswith('Pod "p1" is invalid: [spec.containers[0].image: Required value, ')
    assert message.endswith("]")


@pytest.mark.parametrize("payload,message", [
    (b"{not json", "couldn't get version/kind; json parse error"),
    (json.dumps(pod_body(resources={"requests": {"cpu": "one"}})).encode(),
     "Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression "
     "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    (json.dumps(dict(pod_body(), metadata={"name": "p1", "namespace": "other"})).encode(),
     "the namespace of the provided object does not match the namespace sent on the request"),
], ids=["bad-json", "bad-quantity", "namespace-mismatch"])
def test_bad_request_is_400(sim: KubeSim, payload: bytes, message: str, engine: str) -> None:
    if engine == "real":  # 1.20's words: its decoder's, and the kind first
        message = {"couldn't get version/kind; json parse error": "the object provided is unrecognized (must be of "
                   "type Pod): couldn't get version/kind; json parse error"}.get(message, message.split(": ")[0])
    response = raw(sim, "POST", "/api/v1/namespaces/default/pods", payload)
    body = json.loads(response.data)
    assert (response.status, body["reason"], body["code"]) == (400, "BadRequest", 400)
    assert body["message"].startswith(message)


@pytest.mark.simulator_only("changes the credentials the simulator accepts")
def test_unauthorized(sim: KubeSim, api_client_for: Callable[..., client.ApiClient]) -> None:
    core = client.CoreV1Api(api_client_for(sim, token="wrong"))
    error = expect_error(core.list_namespaced_pod, NS)
    assert status_of(error) == _status(401, "Unauthorized", "Unauthorized")
    assert raw(sim, "GET", "/version", token="").status == 401


@pytest.mark.parametrize("call,message,details", [
    (lambda core: core.create_namespaced_pod(NS, pod_body()),
     'pods is forbidden: User "system:serviceaccount:default:podgahp" cannot create resource "pods" in API group '
     '"" in the namespace "default"', {"kind": "pods"}),
    (lambda core: core.list_namespaced_pod(NS),
     'pods is forbidden: User "system:serviceaccount:default:podgahp" cannot list resource "pods" in API group '
     '"" in the namespace "default"', {"kind": "pods"}),
    (lambda core: core.delete_namespaced_pod("p9", NS),
     'pods "p9" is forbidden: User "system:serviceaccount:default:podgahp" cannot delete resource "pods" in API '
     'group "" in the namespace "default"', {"name": "p9", "kind": "pods"}),
    (lambda core: core.list_node(),
     'nodes is forbidden: User "system:serviceaccount:default:podgahp" cannot list resource "nodes" in API group '
     '"" at the cluster scope', {"kind": "nodes"}),
], ids=["create", "list", "delete", "cluster-scope"])
@pytest.mark.simulator_only("configures the simulated API server's policy")
def test_rbac_forbidden(make_sim: Callable[..., KubeSim], api_client_for: Callable[..., client.ApiClient],
                        call: Callable[[client.CoreV1Api], Any], message: str, details: Dict[str, str]) -> None:
    sim = make_sim(rbac_deny=(RbacRule("create", "pods"), RbacRule("list", "*"), RbacRule("delete", "pods", NS)))
    core = client.CoreV1Api(api_client_for(sim))
    assert status_of(expect_error(call, core)) == _status(403, "Forbidden", message, details)
    sim.allow_all()
    try:
        call(core)
    except ApiException as e:
        assert e.status == 404


@pytest.mark.simulator_only("starts simulators of its own")
def test_priority_class_admission(make_sim: Callable[..., KubeSim],
                                  api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_sim(priority_classes={"pilot-low": -10})
    core = client.CoreV1Api(api_client_for(sim))
    body = pod_body(name=None, priorityClassName="pilot-high")
    assert status_of(expect_error(core.create_namespaced_pod, NS, body)) == _status(
        403, "Forbidden", 'pods "pilot-" is forbidden: no PriorityClass with name pilot-high was found',
        {"name": "pilot-", "kind": "pods"})
    pod = core.create_namespaced_pod(NS, pod_body(priorityClassName="pilot-low"))
    assert (pod.spec.priority, pod.spec.priority_class_name) == (-10, "pilot-low")


@pytest.mark.simulator_only("configures the simulated API server's policy")
def test_quota(make_sim: Callable[..., KubeSim], api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_sim(quota=PodQuota("pilots", {"pods": "2", "requests.cpu": "3"}), run_seconds=60)
    core = client.CoreV1Api(api_client_for(sim))
    cpu = {"requests": {"cpu": "1500m"}}
    core.create_namespaced_pod(NS, pod_body("a", resources=cpu))
    core.create_namespaced_pod(NS, pod_body("b", resources={"requests": {"cpu": "1"}}))
    error = expect_error(core.create_namespaced_pod, NS, pod_body("c", resources=cpu))
    assert status_of(error) == _status(
        403, "Forbidden", 'pods "c" is forbidden: exceeded quota: pilots, requested: pods=1,requests.cpu=1500m, '
                          'used: pods=2,requests.cpu=2500m, limited: pods=2,requests.cpu=3', {"name": "c", "kind": "pods"})
    sim.set_quota(PodQuota("mem", {"limits.memory": "10Gi"}))
    error = expect_error(core.create_namespaced_pod, NS, pod_body("d"))
    assert status_of(error)["message"] == 'pods "d" is forbidden: failed quota: mem: must specify limits.memory'


# ------------------------------------------------------------------ faults and request log

@pytest.mark.parametrize("status,reason", [(429, "TooManyRequests"), (500, "InternalError"),
                                           (503, "ServiceUnavailable")], ids=["429", "500", "503"])
@pytest.mark.simulator_only("injects API faults (errors, latency, dropped or expired watches)")
def test_injected_faults(sim: KubeSim, core: client.CoreV1Api, status: int, reason: str) -> None:
    fault = sim.fail_next(count=2, status=status, method="GET", path=r"/pods$")
    for _ in range(2):
        error = expect_error(core.list_namespaced_pod, NS)
        assert (error.status, status_of(error)["reason"], status_of(error)["code"]) == (status, reason, status)
    assert core.list_namespaced_pod(NS).items == [] and fault.hits == 2


@pytest.mark.simulator_only("counts requests in the simulator's request log")
@pytest.mark.parametrize("status", [429, 503], ids=["429", "503"])
def test_retry_after_is_honoured_by_the_client_transport(sim: KubeSim, core: client.CoreV1Api, status: int) -> None:
    """urllib3's default Retry re-sends 429/503 answers carrying Retry-After: callers never see them."""
    sim.fail_next(count=1, status=status, method="GET", path=r"/pods$", retry_after=1)
    sim.clear_requests()
    assert core.list_namespaced_pod(NS).items == []
    assert [r.status for r in sim.requests("GET")] == [status, 200]


@pytest.mark.simulator_only("injects API faults (errors, latency, dropped or expired watches)")
def test_retry_after_body(sim: KubeSim) -> None:
    sim.fail_next(status=429, retry_after=7)
    response = raw(sim, "GET", "/api/v1/namespaces/default/pods")
    assert response.status == 429 and response.headers["Retry-After"] == "7"
    assert json.loads(response.data) == _status(429, "TooManyRequests", "Too many requests, please try again later.",
                                                {"retryAfterSeconds": 7})


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_delay_provokes_client_timeout(sim: KubeSim, core: client.CoreV1Api) -> None:
    sim.delay_next(0.6, count=10, path="/pods$")
    sim.clear_requests()
    # a (connect, read) tuple: client 30.x ignores a float _request_timeout (only int or tuple count)
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.list_namespaced_pod(NS, _request_timeout=(1, 0.1))
    sim.clear_faults()
    assert core.list_namespaced_pod(NS, _request_timeout=(1, 2)).items == []
    # the delayed requests are logged when answered; the transport retried the timed-out read
    sim.wait_for(lambda: len(sim.requests("GET")) >= 3, 5, "delayed requests answered")


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_request_log(sim: KubeSim, core: client.CoreV1Api) -> None:
    sim.clear_requests()
    core.create_namespaced_pod(NS, pod_body())
    core.list_namespaced_pod(NS, label_selector="app=pilot,pilot-id in (42,43)", limit=100)
    core.delete_namespaced_pod("p1", NS, grace_period_seconds=30, propagation_policy="Background")
    log = sim.requests()
    assert [(r.method, r.path, r.status) for r in log] == [
        ("POST", "/api/v1/namespaces/default/pods", 201), ("GET", "/api/v1/namespaces/default/pods", 200),
        ("DELETE", "/api/v1/namespaces/default/pods/p1", 200)]
    assert log[1].query == {"labelSelector": "app=pilot,pilot-id in (42,43)", "limit": "100"}
    assert log[2].query == {"gracePeriodSeconds": "30", "propagationPolicy": "Background"}
    assert "authorization" not in log[0].headers
    assert len(sim.requests("GET", r"/pods$")) == 1
    if CLIENT_MAJOR >= 37:
        assert "content-type" not in log[0].headers
    else:
        assert log[0].headers["content-type"] == "application/json"


# ------------------------------------------------------------------ patch, put, status

def test_patch_flavours(sim: KubeSim, core: client.CoreV1Api, engine: str) -> None:
    core.create_namespaced_pod(NS, pod_body(labels={"app": "pilot", "keep": "1"}, schedulerName="manual"))
    pod = core.patch_namespaced_pod("p1", NS, {"metadata": {"labels": {"app": "done", "keep": None}}})
    assert pod.metadata.labels == {"app": "done"}
    pod = core.patch_namespaced_pod("p1", NS, [{"op": "add", "path": "/metadata/labels/x", "value": "y"},
                                               {"op": "test", "path": "/metadata/labels/app", "value": "done"}])
    assert pod.metadata.labels == {"app": "done", "x": "y"}
    error = expect_error(core.patch_namespaced_pod, "p1", NS,
                         [{"op": "test", "path": "/metadata/labels/app", "value": "nope"}])
    assert error.status == 422
    merged = raw(sim, "PATCH", "/api/v1/namespaces/default/pods/p1",
                 json.dumps({"metadata": {"annotations": {"a": "b"}}}).encode(),
                 headers={"Content-Type": "application/merge-patch+json"})
    assert merged.status == 200 and json.loads(merged.data)["metadata"]["annotations"] == {"a": "b"}
    bad = raw(sim, "PATCH", "/api/v1/namespaces/default/pods/p1", b"{}", headers={"Content-Type": "text/plain"})
    assert bad.status == 415
    rv = core.read_namespaced_pod("p1", NS).metadata.resource_version
    assert core.patch_namespaced_pod("p1", NS, {"status": {"phase": "Running"}}).status.phase == "Pending"
    # nothing changed: the simulator keeps the version; 1.20 writes all the same (its managedFields' time)
    kept = core.read_namespaced_pod("p1", NS).metadata.resource_version == rv
    assert kept is (engine == "simulated")


def test_status_subresource_merges_conditions(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(schedulerName="manual"))
    patch = {"status": {"conditions": [{"type": "Custom", "status": "True"}]}}
    core.patch_namespaced_pod_status("p1", NS, patch)
    patch = {"status": {"conditions": [{"type": "Other", "status": "False"}]}, "spec": {"nodeName": "x"}}
    pod = core.patch_namespaced_pod_status("p1", NS, patch)
    # merged by type; a new condition goes ahead of those only the pod had (strategic merge's order)
    assert [(c.type, c.status) for c in pod.status.conditions] == [("Other", "False"), ("Custom", "True")]
    assert pod.spec.node_name is None
    assert core.read_namespaced_pod_status("p1", NS).status.phase == "Pending"


def test_put_conflict_and_forbidden_spec_change(core: client.CoreV1Api) -> None:
    pod = core.create_namespaced_pod(NS, pod_body(schedulerName="manual"))
    pod.metadata.labels = {"v": "2"}
    updated = core.replace_namespaced_pod("p1", NS, pod)
    assert updated.metadata.labels == {"v": "2"}
    assert int(updated.metadata.resource_version) > int(pod.metadata.resource_version)
    error = expect_error(core.replace_namespaced_pod, "p1", NS, pod)
    assert status_of(error) == _status(
        409, "Conflict", 'Operation cannot be fulfilled on pods "p1": the object has been modified; please apply '
                         'your changes to the latest version and try again', {"name": "p1", "kind": "pods"})
    updated.spec.containers[0].image = "htcondor/execute:24"
    assert core.replace_namespaced_pod("p1", NS, updated).spec.containers[0].image == "htcondor/execute:24"
    fresh = core.read_namespaced_pod("p1", NS)
    fresh.spec.restart_policy = "Always"
    error = expect_error(core.replace_namespaced_pod, "p1", NS, fresh)
    assert (error.status, status_of(error)["details"]["causes"][0]["reason"]) == (422, "FieldValueForbidden")


# ------------------------------------------------------------------ secrets

def test_secret_crud(core: client.CoreV1Api) -> None:
    secret = core.create_namespaced_secret(NS, client.V1Secret(
        metadata=client.V1ObjectMeta(name="token", labels={"app": "pilot"}), string_data={"token": "abc"}))
    assert (secret.type, secret.data) == ("Opaque", {"token": "YWJj"})
    assert core.read_namespaced_secret("token", NS).data == {"token": "YWJj"}
    assert [s.metadata.name for s in core.list_namespaced_secret(NS, label_selector="app=pilot").items] == ["token"]
    patched = core.patch_namespaced_secret("token", NS, {"data": {"more": "eHl6"}})
    assert patched.data == {"token": "YWJj", "more": "eHl6"}
    patched.string_data = {"token": "new"}
    replaced = core.replace_namespaced_secret("token", NS, patched)
    assert replaced.data["token"] == "bmV3"
    assert status_of(expect_error(core.create_namespaced_secret, NS, client.V1Secret(
        metadata=client.V1ObjectMeta(name="token"))))["reason"] == "AlreadyExists"
    core.delete_namespaced_secret("token", NS)
    assert status_of(expect_error(core.read_namespaced_secret, "token", NS))["message"] == 'secrets "token" not found'


@pytest.mark.parametrize("create", [True, False], ids=["create", "patch"])
def test_a_configmap_key_that_is_no_config_key_is_422(core: client.CoreV1Api, create: bool) -> None:
    if not create:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "settings"}, "data": {"MODE": "fast"}})
    call = (core.create_namespaced_config_map, NS, {"metadata": {"name": "settings"}, "data": {"bad key": "x"}}) \
        if create else (core.patch_namespaced_config_map, "settings", NS, {"data": {"bad key": "x"}})
    error = expect_error(*call)
    status = status_of(error)
    assert (error.status, status["reason"], status["details"]["causes"][0]["field"]) == (422, "Invalid", "data[bad key]")
    assert status["message"].startswith('ConfigMap "settings" is invalid: data[bad key]: Invalid value: "bad key": '
                                        "a valid config key must consist of alphanumeric characters")
    stored = core.list_namespaced_config_map(NS).items
    assert [c.data for c in stored if c.metadata.name == "settings"] == ([] if create else [{"MODE": "fast"}])


@pytest.mark.parametrize("policy,collected", [(None, True), ("Orphan", False)], ids=["background", "orphan"])
def test_secret_garbage_collected_with_owner_pod(sim: KubeSim, core: client.CoreV1Api, policy: Any,
                                                 collected: bool) -> None:
    pod = core.create_namespaced_pod(NS, pod_body())
    owner = client.V1OwnerReference(api_version="v1", kind="Pod", name="p1", uid=pod.metadata.uid)
    core.create_namespaced_secret(NS, client.V1Secret(
        metadata=client.V1ObjectMeta(name="p1-token", owner_references=[owner]), string_data={"t": "x"}))
    core.create_namespaced_secret(NS, client.V1Secret(metadata=client.V1ObjectMeta(name="unowned")))
    core.delete_namespaced_pod("p1", NS, propagation_policy=policy)
    if collected:
        sim.wait_for(lambda: sim.secret(NS, "p1-token") is None, 5, "garbage collection")
    else:
        sim.wait_for(lambda: sim.pod(NS, "p1") is None, 5, "pod removal")
        for _ in range(10):
            sim.tick()
        assert "ownerReferences" not in sim.secret(NS, "p1-token")["metadata"]
    assert sim.secret(NS, "unowned") is not None


@pytest.mark.simulator_only("runs the simulator's loop by hand")
def test_every_emitted_pod_deserialises(sim: KubeSim, api_client_for: Callable[..., client.ApiClient]) -> None:
    """Objects at every lifecycle stage pass the installed client's model validation."""
    api_client = api_client_for(sim)
    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(NS, pod_body("ok"))
    core.create_namespaced_pod(NS, pod_body("bad", image="does-not-exist:1"))
    core.create_namespaced_pod(NS, pod_body("big", resources={"requests": {"cpu": "64"}}))
    seen = set()
    for _ in range(60):
        for pod in sim.pods():
            roundtrip(api_client, pod, "V1Pod")
            seen.add((pod["metadata"]["name"], phase_key(pod)))
        sim.tick()
        if ("ok", "Succeeded") in seen:
            break
        time.sleep(0.02)
    assert {("ok", "Succeeded"), ("bad", "ImagePullBackOff"), ("big", "Unschedulable")} <= seen or \
        {("ok", "Succeeded"), ("bad", "ErrImagePull"), ("big", "Unschedulable")} <= seen


def phase_key(pod: Dict[str, Any]) -> str:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in ("ContainerCreating",):
            return str(waiting["reason"])
    for condition in status.get("conditions") or []:
        if condition.get("reason") == "Unschedulable":
            return "Unschedulable"
    return str(status.get("phase"))


def test_serve_runs_until_stopped(tmp_path: Any) -> None:
    path = str(tmp_path / "kubeconfig")
    ready: List[KubeSim] = []
    stop = threading.Event()
    thread = threading.Thread(target=serve, kwargs=dict(
        port=0, kubeconfig_path=path, namespace="pilots", nodes=4, node_cpu="16", node_memory="64Gi", node_gpus=1,
        ready=ready.append, stop=stop))
    thread.start()
    try:
        wait_until(lambda: ready, "serve() reports readiness", timeout=5)
        contexts, active = config.list_kube_config_contexts(config_file=path)
        assert active["context"]["namespace"] == "pilots"
        api_client = config.new_client_from_config(config_file=path, persist_config=False)
        core = client.CoreV1Api(api_client)
        nodes = core.list_node().items
        assert len(nodes) == 4
        assert (nodes[0].status.allocatable["cpu"], nodes[0].status.allocatable["memory"],
                nodes[0].status.allocatable["nvidia.com/gpu"]) == ("16", "64Gi", "1")
        assert core.create_namespaced_pod("pilots", pod_body()).metadata.namespace == "pilots"
        api_client.close()
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
