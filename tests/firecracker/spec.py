"""Validates Firecracker API requests against the published OpenAPI (swagger 2.0) spec.

Firecracker rejects fields it does not know, so on top of required fields, types, enums and
bounds, any property the spec does not define is an error. Path parameters must match the ids
in the body (PUT /drives/rootfs with drive_id "rootfs").
"""

import os
import re

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
# Firecracker's own API description (swagger) of the version the driver speaks, kept here so
# that every checkout checks against it.
DEFAULT_SPEC = os.path.join(HERE, "firecracker-v1.16.1.yaml")


def spec_path():
    return os.environ.get("FIRECRACKER_SPEC") or DEFAULT_SPEC


class Spec:
    def __init__(self, path=None):
        with open(path or spec_path()) as f:
            self.doc = yaml.safe_load(f)
        self.paths = []
        for template, ops in self.doc["paths"].items():
            names = re.findall(r"{(\w+)}", template)
            rx = "^" + re.sub(r"{\w+}", r"([^/]+)", template) + "$"
            self.paths.append((template, re.compile(rx), names, ops))

    def resolve(self, schema):
        while "$ref" in schema:
            name = schema["$ref"].split("/")[-1]
            schema = self.doc["definitions"][name]
        return schema

    def find(self, method, path):
        for template, rx, names, ops in self.paths:
            m = rx.match(path)
            if m and method.lower() in ops:
                return template, dict(zip(names, m.groups())), ops[method.lower()]
        return None, None, None

    def validate(self, method, path, body):
        """Returns a list of problems (empty when the request is valid)."""
        template, params, op = self.find(method, path)
        if op is None:
            return [f"{method} {path}: no such operation in the spec"]
        errors = []
        body_param = next((p for p in op.get("parameters", []) if p.get("in") == "body"), None)
        if body_param is None:
            if body not in (None, b"", ""):
                errors.append(f"{method} {template}: takes no body")
            return errors
        if body is None:
            if body_param.get("required"):
                errors.append(f"{method} {template}: a body is required")
            return errors
        self._check(self.resolve(body_param["schema"]), body, "body", errors)
        # Path ids must match the body's (Firecracker checks this too).
        for name, value in params.items():
            if isinstance(body, dict) and name in body and body[name] != value:
                errors.append(f"{template}: path {name} `{value}` differs from body `{body[name]}`")
            if isinstance(body, dict) and name not in body and name in ("drive_id", "iface_id"):
                errors.append(f"{template}: body lacks {name}")
        return errors

    def _check(self, schema, value, where, errors):
        schema = self.resolve(schema)
        t = schema.get("type")
        if t == "object" or (t is None and "properties" in schema):
            if not isinstance(value, dict):
                errors.append(f"{where}: expected an object")
                return
            props = schema.get("properties", {})
            for req in schema.get("required", []):
                if req not in value:
                    errors.append(f"{where}: missing required `{req}`")
            for k, v in value.items():
                if k not in props:
                    if props or schema.get("additionalProperties") is False:
                        errors.append(f"{where}: `{k}` is not defined by the spec")
                    continue
                self._check(props[k], v, f"{where}.{k}", errors)
        elif t == "array":
            if not isinstance(value, list):
                errors.append(f"{where}: expected an array")
                return
            for i, item in enumerate(value):
                self._check(schema.get("items", {}), item, f"{where}[{i}]", errors)
        elif t == "string":
            if not isinstance(value, str):
                errors.append(f"{where}: expected a string")
        elif t == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                errors.append(f"{where}: expected an integer")
                return
        elif t == "boolean":
            if not isinstance(value, bool):
                errors.append(f"{where}: expected a boolean")
        elif t == "number":
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                errors.append(f"{where}: expected a number")
        if "enum" in schema and value not in schema["enum"]:
            errors.append(f"{where}: `{value}` is not one of {schema['enum']}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                errors.append(f"{where}: {value} is below {schema['minimum']}")
            if "maximum" in schema and value > schema["maximum"]:
                errors.append(f"{where}: {value} is above {schema['maximum']}")
