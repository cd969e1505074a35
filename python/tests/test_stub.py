"""The extension module's type stub (baton/_baton.pyi) is the one python/make_stub.py makes from
the module as built: a binding added or changed without its stub fails here."""

import os
import sys

from baton import _baton

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import make_stub  # noqa: E402


def test_the_extensions_stub_matches_the_module_as_built():
    with open(os.path.join(os.path.dirname(HERE), "baton", "_baton.pyi")) as f:
        committed = f.read()
    assert committed == make_stub.stub(_baton), (
        "baton/_baton.pyi is out of date: run PYTHONPATH=python:build/python "
        "python3 python/make_stub.py")
    assert "class RdmaBuffer" in committed and "def attach(" in committed
