"""Packages the template tests install in a sandbox without a network, made here at test time
(nothing binary is kept in the repository). Standard library only.

wheel():       a pure-Python wheel, (file name, bytes), for `pip install --no-index`
npm_tarball(): an npm package tarball, (file name, bytes), for `npm install --offline`
go_module():   {path: text} of a Go module with a local dependency (a `replace` directive)
"""

import base64
import hashlib
import io
import json
import tarfile
import zipfile

# What each fixture's code returns; the tests look for it in the output.
ANSWER = "sandbox-fixture says 42"

WHEEL_NAME = "sandbox_fixture"
WHEEL_VERSION = "1.0.0"


def _record_digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def wheel():
    """A valid py3-none-any wheel of the package `sandbox_fixture` (function answer())."""
    dist_info = f"{WHEEL_NAME}-{WHEEL_VERSION}.dist-info"
    files = {
        f"{WHEEL_NAME}/__init__.py": (
            '"""A package made by the template tests."""\n\n\n'
            f"def answer():\n    return {ANSWER!r}\n"
        ).encode(),
        f"{dist_info}/METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {WHEEL_NAME.replace('_', '-')}\n"
            f"Version: {WHEEL_VERSION}\n"
            "Summary: A package made by the agent-sandbox template tests\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\n"
            "Generator: agent-sandbox-tests\n"
            "Root-Is-Purelib: true\n"
            "Tag: py3-none-any\n"
        ).encode(),
        f"{dist_info}/top_level.txt": f"{WHEEL_NAME}\n".encode(),
    }
    record_path = f"{dist_info}/RECORD"
    record = "".join(f"{path},{_record_digest(data)},{len(data)}\n"
                     for path, data in files.items())
    record += f"{record_path},,\n"
    files[record_path] = record.encode()

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return f"{WHEEL_NAME}-{WHEEL_VERSION}-py3-none-any.whl", buf.getvalue()


NPM_NAME = "sandbox-fixture"
NPM_VERSION = "1.0.0"


def npm_tarball():
    """An npm package tarball (package/package.json, package/index.js) without dependencies;
    require("sandbox-fixture").answer() returns ANSWER."""
    files = {
        "package/package.json": json.dumps({
            "name": NPM_NAME,
            "version": NPM_VERSION,
            "description": "A package made by the agent-sandbox template tests",
            "main": "index.js",
            "license": "MIT",
        }, indent=2).encode() + b"\n",
        "package/index.js": f"exports.answer = () => {json.dumps(ANSWER)};\n".encode(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 1577836800
            tar.addfile(info, io.BytesIO(data))
    return f"{NPM_NAME}-{NPM_VERSION}.tgz", buf.getvalue()


def go_module():
    """A main module `example.com/app` using `example.com/fixture` from ./fixture through a
    replace directive: builds without a module proxy. Its program prints ANSWER."""
    return {
        "go.mod": (
            "module example.com/app\n\n"
            "go 1.19\n\n"
            "require example.com/fixture v0.0.0\n\n"
            "replace example.com/fixture => ./fixture\n"
        ),
        "main.go": (
            "package main\n\n"
            'import (\n\t"fmt"\n\n\t"example.com/fixture"\n)\n\n'
            "func main() {\n\tfmt.Println(fixture.Answer())\n}\n"
        ),
        "fixture/go.mod": "module example.com/fixture\n\ngo 1.19\n",
        "fixture/fixture.go": (
            "// Package fixture is made by the agent-sandbox template tests.\n"
            "package fixture\n\n"
            "// Answer returns a known string.\n"
            f"func Answer() string {{ return {json.dumps(ANSWER)} }}\n"
        ),
    }
