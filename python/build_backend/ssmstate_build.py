"""The package's PEP 517 build backend: `pip install ./python` with no network.

The package is pure Python, so a wheel is its files and a dist-info folder.
Where setuptools can be imported (``pip install --no-build-isolation``, an
environment that has it) every hook is setuptools' own, configured by
pyproject.toml. In pip's isolated build environment, which holds nothing
since pyproject.toml requires nothing, the wheel is written here with the
standard library alone, so nothing has to be downloaded.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

try:
    from setuptools import build_meta as _setuptools
except ImportError:  # pip's isolated build environment: build it here
    _setuptools = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "ssmstate"
SUMMARY = ("Python binding (ctypes) of libssmstate: the recurrent state of hybrid "
           "linear-attention LLMs")


def _version():
    with open(os.path.join(ROOT, NAME, "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _metadata():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            f"Summary: {SUMMARY}\nRequires-Python: >=3.8\n"
            "Provides-Extra: numpy\nRequires-Dist: numpy; extra == \"numpy\"\n"
            "Provides-Extra: test\nRequires-Dist: pytest; extra == \"test\"\n"
            "Requires-Dist: numpy; extra == \"test\"\n"
            f"Description-Content-Type: text/markdown\n\n{readme}")


def _package_files():
    pkg = os.path.join(ROOT, NAME)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") or name == "py.typed":
            yield f"{NAME}/{name}", os.path.join(pkg, name)


def _write_wheel(wheel_directory, files):
    """files: (archive name, bytes). Returns the wheel's basename."""
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    files = list(files) + [
        (f"{dist_info}/METADATA", _metadata().encode()),
        (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: ssmstate_build\n"
                               b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{dist_info}/top_level.txt", f"{NAME}\n".encode()),
    ]
    record = []
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    basename = f"{NAME}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, basename), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return basename


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) if _setuptools else []


def get_requires_for_build_sdist(config_settings=None):
    return _setuptools.get_requires_for_build_sdist(config_settings) if _setuptools else []


def get_requires_for_build_editable(config_settings=None):
    if _setuptools and hasattr(_setuptools, "get_requires_for_build_editable"):
        return _setuptools.get_requires_for_build_editable(config_settings)
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if _setuptools:
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    return _write_wheel(wheel_directory, [(n, _read(p)) for n, p in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    if _setuptools and hasattr(_setuptools, "build_editable"):
        return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    # a .pth naming this folder: the source tree is imported in place
    return _write_wheel(wheel_directory, [(f"__editable__.{NAME}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    if _setuptools:
        return _setuptools.build_sdist(sdist_directory, config_settings)
    base = f"{NAME}-{_version()}"
    with tarfile.open(os.path.join(sdist_directory, base + ".tar.gz"), "w:gz") as tar:
        for rel in ["pyproject.toml", "README.md", "build_backend/ssmstate_build.py"] + [
                n for n, _ in _package_files()]:
            tar.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        data = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return base + ".tar.gz"
