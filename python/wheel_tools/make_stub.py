"""Writes python/stoker/_stoker.pyi from the built extension's own signatures.

    PYTHONPATH=build/python /usr/bin/python3 python/wheel_tools/make_stub.py

pybind11 puts each function's signature in the first line of its docstring; this turns
those into a stub (with the docstrings kept, so IDEs show them), so the stub says what
the bindings say. Rerun it after changing python/src/; python/tests/test_packaging.py
fails while the stub lacks a public name.
"""

import inspect
import re
import sys
from pathlib import Path

from stoker import _stoker

OUT = Path(__file__).resolve().parents[1] / "stoker" / "_stoker.pyi"
_SIG = re.compile(r"^(\w+)\((.*)\)(?: -> (.+))?$")
_GETTER = re.compile(r"^\((?:self|arg0): [^)]*\) -> (.+)$")
_C_TYPE = re.compile(r"\b[\w:]*::[\w:<>, ]*")


def _clean(text):
    text = text.replace("stoker._stoker.", "")
    text = re.sub(r"numpy\.ndarray(?!\[)", "numpy.typing.NDArray[typing.Any]", text)
    text = text.replace("numpy.ndarray[", "numpy.typing.NDArray[")
    text = re.sub(r"^self: [\w.]+", "self", text)
    return _C_TYPE.sub("typing.Any", text)


def _doc(obj, skip_signature=True):
    doc = inspect.getdoc(obj) or ""
    lines = doc.splitlines()
    if skip_signature and lines and (_SIG.match(lines[0]) or _GETTER.match(lines[0])):
        lines = lines[1:]
    return "\n".join(lines).strip()


def _docstring(text, indent):
    if not text:
        return f"{indent}    ...\n"
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    body = "\n".join((indent + "    " + l) if l else "" for l in text.splitlines())
    return f'{indent}    """\n{body}\n{indent}    """\n'


def _signatures(obj):
    """[(params, return)] from a pybind11 docstring, one per overload."""
    doc = obj.__doc__ or ""
    sigs = []
    for line in doc.splitlines():
        line = re.sub(r"^\d+\. ", "", line.strip())
        m = _SIG.match(line)
        if m and m.group(1) == obj.__name__:
            sigs.append((_clean(m.group(2)), _clean(m.group(3) or "None")))
    return sigs or [("*args: typing.Any, **kwargs: typing.Any", "typing.Any")]


def _function(obj, indent=""):
    sigs = _signatures(obj)
    out = ""
    for params, ret in sigs:
        if len(sigs) > 1:
            out += f"{indent}@typing.overload\n"
        params = re.sub(r"=\s*<[^>]*>", "= ...", params)
        params = re.sub(r"(: [^=,]+)= ?[^,]+", r"\1= ...", params)
        out += f"{indent}def {obj.__name__}({params}) -> {ret}:\n" + _docstring(_doc(obj), indent)
    return out


def _class(name, cls, indent=""):
    bases = [b.__name__ for b in cls.__bases__ if b.__name__ not in ("object", "pybind11_object")]
    out = f"{indent}class {name}({', '.join(bases)}):\n" if bases else f"{indent}class {name}:\n"
    doc = _doc(cls, skip_signature=False)
    if doc:
        out += _docstring(doc, indent)
    members = getattr(cls, "__members__", None)
    if isinstance(members, dict):  # a pybind11 enum
        for m in members:
            out += f"{indent}    {m}: typing.ClassVar[{name}]\n"
        out += f"{indent}    def __int__(self) -> int: ...\n"
        out += f"{indent}    @property\n{indent}    def name(self) -> str: ...\n"
        out += f"{indent}    @property\n{indent}    def value(self) -> int: ...\n"
        return out
    if issubclass(cls, BaseException):
        fields = {k: v for k, v in vars(cls).items() if not k.startswith("_")}
        for attr, value in fields.items():
            out += f"{indent}    {attr}: {type(value).__name__}\n"
        return out if doc or fields else out + f"{indent}    ...\n"
    for attr, value in vars(cls).items():
        if attr.startswith("__") and attr not in ("__init__", "__repr__", "__iter__", "__next__", "__enter__", "__exit__"):
            continue
        if isinstance(value, type):
            out += _class(attr, value, indent + "    ")
        elif isinstance(value, property):
            m = _GETTER.match((value.fget.__doc__ or "").strip().splitlines()[0]) if value.fget else None
            sig = ("", _clean(m.group(1)) if m else "typing.Any")
            out += f"{indent}    @property\n{indent}    def {attr}(self) -> {sig[1]}:\n"
            out += _docstring(_doc(value.fget) if value.fget else "", indent + "    ")
            if value.fset:
                out += f"{indent}    @{attr}.setter\n{indent}    def {attr}(self, value: {sig[1]}) -> None: ...\n"
        elif callable(value):
            out += _function(value, indent + "    ")
    return out


def main():
    parts = ['"""Types of stoker\'s native layer (python/src); written by',
             'python/wheel_tools/make_stub.py from the built extension."""',
             "import typing", "import numpy", "import numpy.typing", "", f"__version__: str"]
    for name in sorted(dir(_stoker)):
        if name.startswith("_"):
            continue
        obj = getattr(_stoker, name)
        if isinstance(obj, type):
            parts.append(_class(name, obj))
        elif callable(obj):
            parts.append(_function(obj))
        else:
            parts.append(f"{name}: {type(obj).__name__}")
    OUT.write_text("\n".join(parts) + "\n")
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
