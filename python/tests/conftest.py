"""Fixtures of the ipcring Python tests (run: see docs/python.md, or `ctest -L python`)."""

import os

import pytest

import ipcring
import ringtest


@pytest.fixture
def channel(request):
    """A channel name unique to this test; the channel is removed (force) afterwards."""
    name = ringtest.unique_name(request.node.name)
    yield name
    try:
        ipcring.remove_channel(name, force=True)
    except ipcring.Error:
        pass


@pytest.fixture
def ringpub():
    path = os.environ.get("IPCRING_RINGPUB")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("ringpub not built (IPCRING_RINGPUB unset or not executable)")
    return path


@pytest.fixture
def ringsub():
    path = os.environ.get("IPCRING_RINGSUB")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("ringsub not built (IPCRING_RINGSUB unset or not executable)")
    return path


@pytest.fixture
def ringdump():
    path = os.environ.get("IPCRING_RINGDUMP")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("ringdump not built (IPCRING_RINGDUMP unset or not executable)")
    return path
