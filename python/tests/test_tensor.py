"""Typed frames: send() of numpy arrays and torch tensors, typed loan views, frame shape/dtype/
capture time/metadata, zero-copy numpy and torch views, in-place writes, bad input, and the
same frames seen from another process, from C++ (ringdump echo) and in ringdump show --json."""

import json
import time
import os
import subprocess
import sys

import numpy as np
import pytest

import child
import ipcring
import ringtest

torch = pytest.importorskip("torch")


def make(channel, **kw):
    kw.setdefault("frame_bytes", 1 << 20)
    kw.setdefault("max_held", 2)
    kw.setdefault("slots", 6)
    kw.setdefault("max_readers", 2)
    return ipcring.Producer(channel, **kw)


def test_send_numpy_and_torch_zero_copy_views(channel):
    image, features = child.tensor_frames()
    with make(channel) as p, ipcring.Reader(channel, policy="sequential") as r:
        p.send(image, capture_time_ns=5, metadata=b"front")
        p.send(features)
        with r.read(timeout=1) as f:
            assert (f.shape, f.dtype, f.strides) == ((480, 640, 3), "uint8", (1920, 3, 1))
            assert f.size == image.nbytes and f.capture_time_ns == 5 and f.metadata == b"front"
            a = np.asarray(f)
            assert a.shape == image.shape and a.dtype == np.uint8
            assert np.array_equal(a, image)
            assert a.__array_interface__["data"][0] == f.address  # zero-copy
            assert not a.flags.writeable
            with pytest.raises(ValueError):
                a[0, 0, 0] = 1
            t = torch.from_dlpack(f)
            assert t.shape == (480, 640, 3) and t.dtype == torch.uint8
            assert t.data_ptr() == f.address
            del a, t
        with r.read(timeout=1) as f:
            assert (f.shape, f.dtype) == ((3, 64, 64), "float32")
            assert f.capture_time_ns is None and f.metadata == b""
            t = torch.from_dlpack(f)
            assert t.shape == (3, 64, 64) and t.dtype == torch.float32
            assert torch.equal(t, features) and t.data_ptr() == f.address
            m = memoryview(f)
            assert (m.format, m.shape, m.readonly) == ("f", (3, 64, 64), True)
            del t, m


def test_array_method_of_a_host_frame_is_the_same_read_only_view(channel):
    # Frame.__array__ exists for CUDA frames (a clear TypeError instead of a 0-d object array);
    # on a host frame it is the buffer protocol's view, with the frame's dtype if none is asked.
    src = np.arange(12, dtype=np.int16).reshape(3, 4)
    with make(channel) as p, ipcring.Reader(channel) as r:
        p.send(src)
        with r.read(timeout=1) as f:
            a = f.__array__()
            assert a.shape == (3, 4) and a.dtype == np.int16 and np.array_equal(a, src)
            assert a.__array_interface__["data"][0] == f.address and not a.flags.writeable
            assert f.__array__(np.float32).dtype == np.float32
            del a


def test_send_compacts_strided_sources_and_records_their_type(channel):
    base = np.arange(2 * 3 * 4, dtype=np.int16).reshape(2, 3, 4)
    sources = [
        (base.transpose(2, 0, 1), (4, 2, 3), "int16"),  # strided numpy
        (base[:, ::-1, ::2], (2, 3, 2), "int16"),  # negative and step strides
        (np.float64(2.5) * np.ones(()), (), "float64"),  # 0-d
        (torch.arange(12, dtype=torch.float64).reshape(3, 4).t(), (4, 3), "float64"),
        (torch.ones(3, requires_grad=True), (3,), "float32"),  # its value is sent
        (torch.tensor([True, False, True]), (3,), "bool"),  # torch 1.13 has no bool DLPack
        (torch.zeros(2, 2, dtype=torch.bfloat16), (2, 2), "bfloat16"),
        (bytearray(b"abc"), (3,), "uint8"),
        (np.zeros((0, 5), dtype=np.complex64), (0, 5), "complex64"),
    ]
    with make(channel) as p, ipcring.Reader(channel, policy="sequential") as r:
        for obj, shape, dtype in sources:
            p.send(obj)
            with r.read(timeout=1) as f:
                assert (f.shape, f.dtype) == (shape, dtype), obj
                if dtype == "bfloat16":
                    assert torch.equal(torch.from_dlpack(f), obj)
                    continue
                expect = obj.detach().numpy() if isinstance(obj, torch.Tensor) else np.asarray(obj)
                got = np.asarray(f)
                if dtype == "uint8" and isinstance(obj, bytearray):
                    expect = np.frombuffer(obj, dtype=np.uint8)
                assert got.shape == expect.shape and np.array_equal(got, expect), obj
                assert f.size == expect.nbytes


def test_send_of_bad_input_is_a_clear_ipcring_error(channel):
    with make(channel, frame_bytes=4096) as p:
        cases = [
            (object(), "got object"),
            ([1, 2, 3], "got list"),
            (np.array([object()]), "element format 'O'"),
            (np.zeros(4, dtype=">i4"), "element format"),  # not native byte order
            (np.zeros((1,) * 9, dtype=np.uint8), "9 dimensions"),
            (np.zeros(4097, dtype=np.uint8), "exceeds the frame capacity of 4096"),
            (torch.zeros(1025), "float32 array of shape (1025,)"),
        ]
        for obj, words in cases:
            with pytest.raises(ipcring.InvalidArgument) as e:
                p.send(obj)
            assert words in str(e.value) and channel in str(e.value), str(e.value)
        with pytest.raises(ipcring.InvalidArgument, match="metadata_bytes = 256"):
            p.send(b"x", metadata=b"m" * 257)
        with pytest.raises(ipcring.InvalidArgument, match="capture_time_ns=-1"):
            p.send(b"x", capture_time_ns=-1)
        assert p.send(torch.zeros(16)) == 1  # once a raw pybind TypeError


def test_metadata_bytes_is_a_channel_option(channel):
    with make(channel, metadata_bytes=4096) as p, ipcring.Reader(channel) as r:
        assert p.metadata_bytes == 4096
        meta = bytes(range(256)) * 16
        p.send(b"x", metadata=meta)
        with r.read(timeout=1) as f:
            assert f.metadata == meta
        assert ipcring.inspect(channel)["metadata_bytes"] == 4096
    with pytest.raises(ipcring.InvalidConfig, match="metadata_bytes = 4097"):
        make(channel, metadata_bytes=4097)


def test_typed_loan_views_fill_in_place(channel):
    with make(channel) as p, ipcring.Reader(channel, policy="sequential") as r:
        with p.loan() as loan:
            a = loan.ndarray((480, 640, 3), "uint8")
            assert a.flags.writeable and a.__array_interface__["data"][0] == loan.address
            a[:] = 7
            a[1, 2] = [1, 2, 3]
            with pytest.raises(BufferError):
                p.publish(loan)  # a view is alive
            del a
            loan.set_capture_time_ns(99)
            assert p.publish(loan) == 1  # the default size is the tensor's
        with p.loan() as loan:
            t = loan.tensor((3, 64, 64), torch.float32)
            assert t.data_ptr() == loan.address
            t.copy_(torch.full((3, 64, 64), 0.5))
            del t
            p.publish(loan)
        with p.loan() as loan:
            loan.set_tensor((4, 2), "int32", strides=(1, 4))  # column-major
            np.frombuffer(loan, dtype=np.int32, count=8)[:] = np.arange(8)
            p.publish(loan)
        with pytest.raises(ipcring.InvalidArgument, match="the frame capacity is"):
            with p.loan() as loan:
                loan.ndarray((1 << 20) + 1, "uint8")
        with pytest.raises(ipcring.InvalidArgument, match="not a frame element type"):
            with p.loan() as loan:
                loan.ndarray(4, "object")
        with r.read(timeout=1) as f:
            assert (f.shape, f.dtype, f.size, f.capture_time_ns) == ((480, 640, 3), "uint8",
                                                                      921600, 99)
            a = np.asarray(f)
            assert a[0, 0, 0] == 7 and list(a[1, 2]) == [1, 2, 3]
            del a
        with r.read(timeout=1) as f:
            assert torch.equal(torch.from_dlpack(f), torch.full((3, 64, 64), 0.5))
        with r.read(timeout=1) as f:
            assert f.strides == (1, 4)
            assert np.array_equal(np.asarray(f), np.arange(8, dtype=np.int32).reshape(2, 4).T)
            assert np.array_equal(torch.from_dlpack(f).numpy(), np.asarray(f))


def test_in_place_write_on_a_frame_changes_a_private_copy_only(channel):
    """t.add_(1) on a frame's tensor once killed the reader (SIGSEGV on the read-only mapping).
    Python readers map the pool copy-on-write: the write changes this process's copy of the
    touched pages, other readers and later frames of the slot never see it."""
    with make(channel, slots=1, max_readers=2, max_held=1) as p, \
            ipcring.Reader(channel) as writer, ipcring.Reader(channel) as other:
        p.send(np.zeros((64, 1024), dtype=np.float32))
        f = writer.read(timeout=1)
        t = torch.from_dlpack(f)
        t.add_(1)  # no SIGSEGV
        assert float(t.sum()) == 64 * 1024 and t.data_ptr() == f.address
        assert float(np.asarray(f).sum()) == 64 * 1024  # this process's views share the copy
        with other.read(timeout=1) as g:
            assert float(np.asarray(g).sum()) == 0  # the producer's buffer is untouched
        del t
        f.release()
        p.send(np.full((64, 1024), 2, dtype=np.float32))  # the same buffer
        with writer.read(timeout=1) as f:
            assert float(np.asarray(f).sum()) == 2 * 64 * 1024  # not the old private copy


def test_in_place_write_in_a_child_process_does_not_kill_it(channel):
    code = """
import sys, numpy as np, torch, ipcring
p = ipcring.Producer(sys.argv[1], frame_bytes=4096)
r = ipcring.Reader(sys.argv[1])
p.send(np.zeros(16, dtype=np.float32))
f = r.read(timeout=1)
t = torch.from_dlpack(f)
t.mul_(3).add_(1)
print("alive", float(t.sum()))
"""
    out = subprocess.run([sys.executable, "-c", code, channel], capture_output=True, text=True,
                         timeout=60, env=_child_env())
    assert out.returncode == 0, out.stderr  # -11 was SIGSEGV
    assert out.stdout.split() == ["alive", "16.0"]


def _child_env():
    """The environment of the other children: this interpreter finds this ipcring."""
    e = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(ipcring.__file__)))
    e["PYTHONPATH"] = os.pathsep.join([root] + [x for x in e.get("PYTHONPATH", "").split(
        os.pathsep) if x])
    return e


def test_acceptance_tensor_frames_across_processes(channel, ringdump):
    """A Python producer sends a (480, 640, 3) uint8 numpy array and a (3, 64, 64) float32 torch
    tensor; a Python reader in another process gets the same shapes, dtypes and values zero-copy;
    a C++ reader (ringdump echo) sees the same descriptors; ringdump show --json lists both."""
    image, features = child.tensor_frames()
    producer = ringtest.spawn_child("tensor_producer", channel, stdin=subprocess.PIPE)
    echo = None
    try:
        ringtest.expect_line(producer, "ready")
        reader = ipcring.Reader(channel, policy="sequential")
        echo = subprocess.Popen([ringdump, "echo", channel, "--sequential", "--count", "2",
                                 "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        # ringdump echo reads as an observer: it takes no reader entry, so nothing in the channel
        # shows that it attached; give it time to (an attach takes milliseconds).
        assert ringtest.wait_until(lambda: len(ipcring.inspect(channel)["readers"]) == 1)
        time.sleep(2.0)
        producer.stdin.write("go\n")
        producer.stdin.flush()
        ringtest.expect_line(producer, "sent")
        first = reader.read(timeout=10)
        second = reader.read(timeout=10)
        a = np.asarray(first)
        t = torch.from_dlpack(second)
        assert a.shape == (480, 640, 3) and a.dtype == np.uint8 and np.array_equal(a, image)
        assert t.shape == (3, 64, 64) and t.dtype == torch.float32 and torch.equal(t, features)
        assert a.__array_interface__["data"][0] == first.address
        assert t.data_ptr() == second.address
        assert (first.capture_time_ns, first.metadata) == (1111, b"camera front")
        assert (second.capture_time_ns, second.metadata) == (2222, bytes([0, 1, 2, 255]))

        shown = json.loads(subprocess.run([ringdump, "show", channel, "--json",
                                           "--rate-window-ms", "0"], capture_output=True,
                                          text=True, timeout=30, check=True).stdout)
        by_sequence = {s["sequence"]: s for s in shown["slots"]}
        s1, s2 = by_sequence[first.sequence], by_sequence[second.sequence]
        assert (s1["dtype"], s1["shape"], s1["capture_time_ns"]) == ("uint8", [480, 640, 3], 1111)
        assert (s2["dtype"], s2["shape"], s2["capture_time_ns"]) == ("float32", [3, 64, 64], 2222)
        assert s1["state"] == s2["state"] == "held"  # our reader holds both

        out, err = echo.communicate(timeout=30)
        assert echo.returncode == 0, err
        frames = [json.loads(line) for line in out.splitlines()]
        assert [f["sequence"] for f in frames] == [first.sequence, second.sequence]
        assert frames[0]["tensor"]["dtype"] == "uint8"
        assert frames[0]["tensor"]["shape"] == [480, 640, 3]
        assert frames[0]["tensor"]["strides"] == [1920, 3, 1]
        assert frames[1]["tensor"]["dtype"] == "float32"
        assert frames[1]["tensor"]["shape"] == [3, 64, 64]
        assert frames[0]["metadata"] == {"bytes": 12, "text": "camera front"}
        assert frames[1]["metadata"] == {"bytes": 4, "hex": "000102ff"}
        assert frames[0]["capture_time_ns"] == 1111
        v = frames[1]["values"]  # the first 1000 elements of arange(...) / 7
        assert v["count"] == 1000 and v["min"] == 0
        assert v["max"] == pytest.approx(999 / 7) and v["mean"] == pytest.approx(499.5 / 7)
        del a, t
        first.release()
        second.release()
        reader.close()
    finally:
        if echo is not None and echo.poll() is None:
            echo.kill()
            echo.communicate()
        producer.stdin.close()
        producer.wait(timeout=30)
