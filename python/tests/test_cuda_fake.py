"""The CUDA frame path (DLPack with streams, __cuda_array_interface__, release fences) on the CPU,
through the fake CUDA module (TEST ONLY; see cuda_fake_checks.py).

Each check runs in its own process with IPCRING_CUDA_PLUGIN pointing at the fake module: the loader
reads that variable once per process, and the other tests of this session need the real loader
(Backend::cuda must stay unsupported without a GPU).
"""

import os
import subprocess
import sys

import pytest

import ipcring
import ringtest
from cuda_fake_checks import CHECKS


def fake_module():
    path = os.environ.get("IPCRING_FAKE_CUDA_MODULE")
    if not path:  # the build tree's copy, next to the package
        here = os.path.dirname(os.path.dirname(os.path.abspath(ipcring.__file__)))
        path = os.path.join(here, "testing", "libipcring_fake_cuda.so")
    return path if os.path.exists(path) else None


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_cuda_frames_with_fake_cuda(check, request):
    module = fake_module()
    if module is None:
        pytest.skip("the fake CUDA module (libipcring_fake_cuda.so) is not built")
    name = ringtest.unique_name(request.node.name)
    env = dict(os.environ, IPCRING_CUDA_PLUGIN=module)
    try:
        r = subprocess.run([sys.executable, os.path.join(ringtest.HERE, "cuda_fake_checks.py"),
                            check, name], env=env, capture_output=True, text=True, timeout=60)
    finally:
        for n in (name, name + "-h"):
            try:
                ipcring.remove_channel(n, force=True)
            except ipcring.Error:
                pass
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
