"""Pod templates are checked against the Pod schema (the official client's models) when loaded: the
file, the field and the expected type are named; a template that fits loads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gahp.backends.k8s.spec import load_template
from gahp.backends.k8s.schema import schema_errors
from gahp.core.errors import ConfigError
from paths import DOCS

pytestmark = pytest.mark.both_engines



@pytest.mark.parametrize("container,message", [
    ({"volumeMounts": "work"}, "spec.containers[0].volumeMounts: expected a list, got a string"),
    ({"resources": "big"}, "spec.containers[0].resources: expected a mapping (V1ResourceRequirements), got a string"),
    ({"securityContext": "none"}, "spec.containers[0].securityContext: expected a mapping"),
    ({"env": {"A": "1"}}, "spec.containers[0].env: expected a list, got a mapping"),
    ({"env": [{"name": "A", "value": 1}]}, "spec.containers[0].env[0].value: expected a string, got an integer"),
    ({"imagee": "x"}, "spec.containers[0].imagee: not a field of V1Container"),
    ({"ports": [{"containerPort": "80"}]}, "containerPort: expected an integer, got a string"),
], ids=["volumeMounts", "resources", "securityContext", "env-mapping", "env-value", "typo", "port"])
def test_wrong_fields_are_named(tmp_path: Path, container: dict, message: str) -> None:
    template = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "pilot", **container}]}}
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(template))
    with pytest.raises(ConfigError, match=rf"pod template {path} does not fit the Pod schema: .*"
                       + message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        load_template(str(path))


def test_spec_level_types(tmp_path: Path) -> None:
    errors = schema_errors({"spec": {"volumes": "x", "containers": [{"name": "p"}], "nodeSelector": ["a"]}})
    assert errors == ["spec.volumes: expected a list, got a string", "spec.nodeSelector: expected a mapping, got a list"]


def test_shipped_templates_and_numeric_quantities_fit() -> None:
    for path in [DOCS / "podgahp-pod-template.yaml"]:
        assert schema_errors(yaml.safe_load(path.read_text())) == [], path
    ok = {"spec": {"containers": [{"name": "p", "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}}],
                   "overhead": {"cpu": 0.5}, "tolerations": [{"key": "k", "operator": "Exists"}]}}
    assert schema_errors(ok) == []


def test_not_yaml_and_not_a_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"spec: [\xff")
    with pytest.raises(ConfigError, match="is not readable YAML"):
        load_template(str(bad))
    with pytest.raises(ConfigError, match="is a directory"):
        load_template(str(tmp_path))
