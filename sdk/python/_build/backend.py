"""A PEP 517 build backend for this one pure-Python package, standard library only.

pip builds the package with it offline: no setuptools or wheel to fetch. It writes a wheel of
agent_sandbox/*.py and an sdist of the sources; name and version come from pyproject.toml's
[project] table (read with a small parser of its `key = "value"` lines, as tomllib is 3.11+).
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "agent_sandbox"


def _project():
    fields, section = {}, None
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            m = re.match(r"^\[(.+)\]$", line)
            if m:
                section = m.group(1)
                continue
            m = re.match(r'^([A-Za-z_-]+)\s*=\s*"(.*)"$', line)
            if section == "project" and m:
                fields[m.group(1)] = m.group(2)
    return fields


def _metadata(p):
    return (f"Metadata-Version: 2.1\nName: {p['name']}\nVersion: {p['version']}\n"
            f"Summary: {p.get('description', '')}\n"
            f"Requires-Python: {p.get('requires-python', '')}\n").encode()


def _sources():
    """Package files, relative to ROOT, in a stable order."""
    out = []
    for name in sorted(os.listdir(os.path.join(ROOT, PACKAGE))):
        if name.endswith(".py") or name == "py.typed":
            out.append(f"{PACKAGE}/{name}")
    return out


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def _wheel(wheel_directory, editable):
    p = _project()
    dist = p["name"].replace("-", "_")
    info = f"{dist}-{p['version']}.dist-info"
    name = f"{dist}-{p['version']}-py3-none-any.whl"
    files = []
    if editable:
        files.append((f"{dist}.pth", (ROOT + "\n").encode()))
    else:
        for rel in _sources():
            with open(os.path.join(ROOT, rel), "rb") as f:
                files.append((rel, f.read()))
    files.append((f"{info}/METADATA", _metadata(p)))
    files.append((f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: agent-sandbox backend\n"
                  b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    record = [_record_line(path, data) for path, data in files] + [f"{info}/RECORD,,"]
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            z.writestr(path, data)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, editable=False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{p['name'].replace('-', '_')}-{p['version']}"
    name = f"{base}.tar.gz"
    rels = ["pyproject.toml", "README.md", "_build/backend.py"] + _sources()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in rels:
            t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        pkg_info = _metadata(p)
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return name
