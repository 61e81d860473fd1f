"""The package's build backend writes an installable wheel with the standard
library alone (what pip's isolated, offline build runs)."""
import importlib.util
import os
import zipfile

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


def backend():
    path = os.path.join(PYTHON_DIR, "build_backend", "ssmstate_build.py")
    spec = importlib.util.spec_from_file_location("ssmstate_build_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod._setuptools = None  # as in pip's isolated build environment
    return mod


def test_wheel_with_the_standard_library(tmp_path):
    b = backend()
    assert b.get_requires_for_build_wheel() == []
    name = b.build_wheel(str(tmp_path))
    assert name == "ssmstate-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        assert {"ssmstate/__init__.py", "ssmstate/_lib.py", "ssmstate/_tensor.py",
                "ssmstate/_context.py", "ssmstate/py.typed"} <= names
        record = z.read("ssmstate-0.1.0.dist-info/RECORD").decode()
        assert all(n in record for n in names)
        assert "Name: ssmstate" in z.read("ssmstate-0.1.0.dist-info/METADATA").decode()


def test_version_agrees_with_pyproject():
    import ssmstate
    with open(os.path.join(PYTHON_DIR, "pyproject.toml")) as f:
        assert f'version = "{ssmstate.__version__}"' in f.read()
    assert backend()._version() == ssmstate.__version__
