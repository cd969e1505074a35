"""Writes python/baton/_baton.pyi, the type stub of the extension module, from the signatures
pybind11 gives its functions (python/tests/test_stub.py checks that the stub in the tree is the
one this makes):

    PYTHONPATH=python:build/python python3 python/make_stub.py
"""

import inspect
import os
import re
import sys
from typing import Any, List

HEADER = '''"""The extension module baton._baton (pybind11): the runtime's objects as the baton
package uses them. Made by python/make_stub.py from the module's own signatures; do not edit."""

from typing import Any, Callable, Dict, List, Optional, Tuple

'''

_SIGNATURE = re.compile(r"^(\w+)\((.*)\) -> (.+)$")


def _type(text: str) -> str:
    """A pybind11 type name as the stub spells it."""
    text = text.strip()
    text = re.sub(r"\bbaton\._baton\.", "", text)
    text = re.sub(r"\bhandle\b|\bobject\b|\bbuffer\b|\bfunction\b", "Any", text)
    if "::" in text or text.startswith("std"):
        return "Any"
    return text


def _split_args(text: str) -> List[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [a.strip() for a in out]


def _defs(name: str, doc: str, indent: str, method: bool) -> List[str]:
    lines = []
    found = [s.strip().lstrip("0123456789. ") for s in (doc or "").splitlines()]
    overloads = [s for s in found if _SIGNATURE.match(s)]
    if not overloads:
        overloads = [(doc or "").strip().splitlines()[0]] if doc else []
    sigs = [_SIGNATURE.match(s.strip().lstrip("0123456789. ")) for s in overloads]
    sigs = [m for m in sigs if m is not None]
    if not sigs:
        args = "self, *args: Any, **kwargs: Any" if method else "*args: Any, **kwargs: Any"
        return [f"{indent}def {name}({args}) -> Any: ..."]
    for m in sigs:
        params = []
        for i, arg in enumerate(_split_args(m.group(2))):
            pname, _, rest = arg.partition(":")
            ptype, _, default = rest.partition("=")
            pname = pname.strip()
            if method and i == 0 and pname == "self":
                params.append("self")
                continue
            params.append(f"{pname}: {_type(ptype)}" + (" = ..." if default else ""))
        if method and (not params or params[0] != "self"):
            lines.append(f"{indent}@staticmethod")
        if len(sigs) > 1:
            lines.insert(len(lines) - (1 if lines and lines[-1].endswith("staticmethod") else 0),
                         f"{indent}@overload")
        lines.append(f"{indent}def {name}({', '.join(params)}) -> {_type(m.group(3))}: ...")
    return lines


def stub(module: Any) -> str:
    out = [HEADER.rstrip("\n"), ""]
    uses_overload = False
    body: List[str] = []
    for name in sorted(n for n in dir(module) if not n.startswith("__")):
        obj = getattr(module, name)
        if inspect.isclass(obj):
            body += ["", f"class {name}:"]
            members = sorted(n for n in vars(obj) if not n.startswith("__") or n == "__init__")
            written = 0
            for attr in members:
                raw = vars(obj)[attr]
                if isinstance(raw, property):
                    body.append(f"    {attr}: Any")
                    written += 1
                    continue
                if attr == "__init__" and "Initialize self" in (raw.__doc__ or ""):
                    continue
                lines = _defs(attr, getattr(obj, attr).__doc__, "    ", True)
                uses_overload |= any("@overload" in x for x in lines)
                body += lines
                written += 1
            if not written:
                body.append("    pass")
        elif callable(obj):
            lines = _defs(name, obj.__doc__, "", False)
            uses_overload |= any("@overload" in x for x in lines)
            body += [""] + lines
        else:
            body += ["", f"{name}: {type(obj).__name__}"]
    if uses_overload:
        out[0] = out[0].replace("Tuple\n", "Tuple, overload\n")
    return "\n".join(out + body).replace("\n\n\n", "\n\n") + "\n"


def main() -> None:
    from baton import _baton

    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "baton", "_baton.pyi")
    with open(path, "w") as f:
        f.write(stub(_baton))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
