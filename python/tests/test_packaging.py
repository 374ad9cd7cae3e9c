"""What the package promises about itself: one version, and stubs that name everything.

The version comes from CMakeLists.txt's project(VERSION) only; the type stubs
(_stoker.pyi) must name every public name of the extension, module-level and on each
class, so IDEs and type checkers see all of it and the stub cannot drift silently.
"""

import ast
import re
from pathlib import Path

import stoker
from stoker import _stoker

SOURCE = Path(__file__).resolve().parents[2]
STUB = SOURCE / "python" / "stoker" / "_stoker.pyi"


def _public(names):
    return {n for n in names if not n.startswith("_")}


def _stub_names(body):
    names = set()
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _own_members(cls):
    """Names a class defines itself, not those it inherits (object's, Exception's)."""
    inherited = set()
    for base in cls.__mro__[1:]:
        inherited.update(vars(base))
    return _public(n for n in vars(cls) if n not in inherited or n in ("__init__",))


def test_version_is_the_cmake_project_version():
    m = re.search(r"project\(\s*stoker\s+VERSION\s+([0-9.]+)", (SOURCE / "CMakeLists.txt").read_text())
    assert m, "no project(stoker VERSION ...) in CMakeLists.txt"
    assert stoker.__version__ == _stoker.__version__ == m.group(1)


def test_stub_names_every_public_name_of_the_extension():
    stub = ast.parse(STUB.read_text())
    in_stub = _public(_stub_names(stub.body))
    assert _public(dir(_stoker)) - in_stub == set(), "names missing from _stoker.pyi (rerun python/wheel_tools/make_stub.py)"
    assert in_stub - _public(dir(_stoker)) == set(), "_stoker.pyi names what the extension lacks"


def test_stub_classes_name_every_member():
    stub = {n.name: n for n in ast.parse(STUB.read_text()).body if isinstance(n, ast.ClassDef)}
    for name in sorted(_public(dir(_stoker))):
        cls = getattr(_stoker, name)
        if not isinstance(cls, type):
            continue
        in_stub = _stub_names(stub[name].body)
        missing = _own_members(cls) - in_stub
        assert missing == set(), f"_stoker.pyi: class {name} lacks {sorted(missing)} (rerun python/wheel_tools/make_stub.py)"
