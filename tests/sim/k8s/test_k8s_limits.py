"""Sizes the simulated API server refuses as a real one does (Kubernetes 1.30, etcd defaults), through
the official client, on both engines: request bodies over 3 MiB (413), objects over etcd's 1.5 MiB
(500 "etcdserver: request is too large"; not for managedFields alone, which the API server drops),
annotations over 256 KiB in all, label values over 63 characters or of the wrong form, Secret data
over 1 MiB (422) — on create and on update alike, nothing stored."""

from __future__ import annotations

import base64
from typing import Any, Dict

import pytest
from kubernetes import client

from test_k8s_support import NS, api_client_for, core, expect_error, make_sim, pod_body, raw, sim, status_of

pytestmark = [pytest.mark.filterwarnings("error"), pytest.mark.both_engines]
__all__ = ["api_client_for", "core", "make_sim", "sim"]  # fixtures used by name

MIB = 1024 * 1024


def with_env(total_bytes: int, entries: int = 1) -> Dict[str, Any]:
    """A pod whose environment holds about ``total_bytes`` of values in ``entries`` variables."""
    each = total_bytes // entries
    return pod_body(env={f"V{i}": "x" * each for i in range(entries)})


def test_a_request_body_over_3_mib_is_413(sim: Any, core: client.CoreV1Api) -> None:
    error = expect_error(core.create_namespaced_pod, NS, with_env(3 * MIB + 10))
    assert status_of(error) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": "Request entity too large: limit is 3145728",
                                "reason": "RequestEntityTooLarge", "code": 413}
    assert error.status == 413 and core.list_namespaced_pod(NS).items == []
    # the connection stays usable: the next request on it is answered
    assert core.list_namespaced_pod(NS).items == []


def test_the_limit_is_on_the_body_whatever_the_verb(sim: Any, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body())
    error = expect_error(core.patch_namespaced_pod, "p1", NS, {"metadata": {"labels": {"a": "b" * (3 * MIB)}}})
    assert (error.status, status_of(error)["reason"]) == (413, "RequestEntityTooLarge")
    response = raw(sim, "POST", f"/api/v1/namespaces/{NS}/pods", b" " * (3 * MIB + 1))
    assert response.status == 413


def test_an_object_over_what_etcd_takes_is_500(core: client.CoreV1Api) -> None:
    """Under the body limit but over etcd's 1.5 MiB per write (and under the 2 MiB the API server's etcd
    client sends at most, which 1.20 refuses in gRPC's words): a 500 with etcd's own words and no reason."""
    error = expect_error(core.create_namespaced_pod, NS, with_env(1600 * 1024))
    assert status_of(error) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": "etcdserver: request is too large", "code": 500}
    assert core.list_namespaced_pod(NS).items == []


def test_an_object_too_large_only_with_its_managed_fields_is_stored(core: client.CoreV1Api) -> None:
    """Many small variables, each recorded again in managedFields: with them the write is over etcd's
    limit, so the API server writes the pod again without them, and it is stored."""
    created = core.create_namespaced_pod(NS, with_env(20 * 20000, 20000))
    assert len(created.spec.containers[0].env) == 20000
    assert not created.metadata.managed_fields


def test_a_pod_of_a_mebibyte_is_stored(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod(NS, with_env(MIB))
    assert len(created.spec.containers[0].env[0].value) == MIB


def test_annotations_over_256_kib_in_all_are_422(core: client.CoreV1Api) -> None:
    half = 128 * 1024
    body = dict(pod_body(), metadata={"name": "p1", "annotations": {"a": "x" * half, "b": "y" * half}})
    error = expect_error(core.create_namespaced_pod, NS, body)
    status = status_of(error)
    assert (error.status, status["reason"]) == (422, "Invalid")
    assert status["message"] == 'Pod "p1" is invalid: metadata.annotations: Too long: must have at most 262144 bytes'
    assert status["details"]["causes"] == [{"reason": "FieldValueTooLong", "message": "Too long: must have at most "
                                            "262144 bytes", "field": "metadata.annotations"}]
    # keys count too; exactly the limit is fine
    fits = dict(pod_body(), metadata={"name": "p1", "annotations": {"a": "x" * (256 * 1024 - 1)}})
    core.create_namespaced_pod(NS, fits)
    error = expect_error(core.patch_namespaced_pod, "p1", NS, {"metadata": {"annotations": {"c": "z"}}})
    assert (error.status, status_of(error)["details"]["causes"][0]["field"]) == (422, "metadata.annotations")


@pytest.mark.parametrize("value, message", [
    ("v" * 64, "must be no more than 63 characters"),
    ("-bad", "a valid label must be an empty string or consist of alphanumeric characters"),
], ids=["too-long", "bad-form"])
def test_label_values_are_validated(core: client.CoreV1Api, value: str, message: str) -> None:
    error = expect_error(core.create_namespaced_pod, NS, pod_body(labels={"podgahp.htcondor.org/owner": value}))
    status = status_of(error)
    assert (error.status, status["details"]["causes"][0]["field"]) == (422, "metadata.labels")
    assert message in status["message"]


def test_secret_data_over_1_mib_is_422_on_create_and_update(core: client.CoreV1Api) -> None:
    big = base64.b64encode(b"x" * (MIB + 1)).decode()
    error = expect_error(core.create_namespaced_secret, NS, client.V1Secret(
        metadata=client.V1ObjectMeta(name="in"), data={"f": big}))
    assert (error.status, status_of(error)["message"]) == (
        422, 'Secret "in" is invalid: data: Too long: must have at most 1048576 bytes')
    core.create_namespaced_secret(NS, client.V1Secret(metadata=client.V1ObjectMeta(name="in"),
                                                      data={"f": base64.b64encode(b"x" * MIB).decode()}))
    error = expect_error(core.patch_namespaced_secret, "in", NS, {"data": {"g": base64.b64encode(b"y").decode()}})
    assert (error.status, status_of(error)["message"]) == (
        422, 'Secret "in" is invalid: data: Too long: must have at most 1048576 bytes')
