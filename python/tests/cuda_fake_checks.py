"""The CUDA frame path of the Python module against the fake CUDA (TEST ONLY).

Run by test_cuda_fake.py, one check per process, as

    IPCRING_CUDA_PLUGIN=<build>/python/testing/libipcring_fake_cuda.so python3 cuda_fake_checks.py NAME CHANNEL

The loader (cuda_plugin.hpp) then loads the fake CUDA of tests/unit/fake_cuda.* instead of the CUDA
runtime: one simulated GPU whose device memory is host memory (so ctypes can write a loan and read a
frame), and streams that are queues this script controls through the module's C functions: a kernel
launched "held" runs only when finished, so a stream operation queued behind it (a wait, a fence
write) has not happened until then.

Exit status 0: the check passed; anything else (an AssertionError) failed.
"""

import ctypes
import os
import sys

import ipcring

FAKE = None  # the fake module, the very one the loader opened (load_fake())


def load_fake():
    global FAKE
    FAKE = ctypes.CDLL(os.environ["IPCRING_CUDA_PLUGIN"])
    FAKE.ipcring_fake_cuda_make_stream.restype = ctypes.c_size_t
    FAKE.ipcring_fake_cuda_make_stream.argtypes = [ctypes.c_int]
    FAKE.ipcring_fake_cuda_launch.restype = ctypes.c_uint64
    FAKE.ipcring_fake_cuda_launch.argtypes = [ctypes.c_size_t, ctypes.c_int]
    FAKE.ipcring_fake_cuda_finish.argtypes = [ctypes.c_uint64]
    FAKE.ipcring_fake_cuda_done.argtypes = [ctypes.c_uint64]
    FAKE.ipcring_fake_cuda_calls.argtypes = [ctypes.c_char_p]

LEGACY = 1  # DLPack's legacy default stream


def stream(nonblocking=False):
    return FAKE.ipcring_fake_cuda_make_stream(1 if nonblocking else 0)


def launch(s, held=True):
    return FAKE.ipcring_fake_cuda_launch(s, 1 if held else 0)


def finish(work):
    FAKE.ipcring_fake_cuda_finish(work)


def done(work):
    return FAKE.ipcring_fake_cuda_done(work) == 1


def calls(name):
    n = FAKE.ipcring_fake_cuda_calls(name.encode())
    assert n >= 0, name
    return n


# ---- DLPack capsules, read with ctypes ---------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))),
]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def tensor_of(capsule):
    return DLManagedTensor.from_address(_api.PyCapsule_GetPointer(capsule, b"dltensor"))


def consume(capsule):
    """What torch.from_dlpack does: take the tensor out of the capsule (renamed "used_dltensor");
    the consumer's view then lives until deleter() is called (its last reference dies)."""
    managed = tensor_of(capsule)
    assert _api.PyCapsule_SetName(capsule, b"used_dltensor") == 0
    return managed


def delete(managed):
    managed.deleter(ctypes.pointer(managed))


# ---- a CUDA channel with one frame --------------------------------------------------------------

FRAME = bytes(range(256)) * 16  # 4096 bytes


def producer(channel, slots=3):
    return ipcring.Producer(channel, slots=slots, max_readers=1, max_held=1, frame_bytes=4096,
                            backend="cuda")


def publish(p, stream=None, shape=(16, 256), dtype="uint8"):
    """Loans, writes FRAME into the device buffer (host memory in the fake), describes it."""
    loan = p.loan(timeout=0)
    ctypes.memmove(loan.address, FRAME, len(FRAME))
    loan.set_tensor(shape, dtype)
    slot = loan.slot
    p.publish(loan, stream=stream)
    return slot


def fenced_slot_is_reused(p, slot, loans):
    """Loans and publishes up to `loans` frames (timeout 0); True if one of them got `slot`. A
    loan refused with NoFreeSlot (the producer's loan treats a slot whose fence is still running
    as held) does not count."""
    for _ in range(loans):
        try:
            loan = p.loan(timeout=0)
        except ipcring.NoFreeSlot:
            continue
        got = loan.slot
        p.publish(loan, 0)
        if got == slot:
            return True
    return False


# ---- checks ---------------------------------------------------------------------------------------


def check_device_and_capsule(channel):
    with producer(channel) as p, ipcring.Reader(channel) as r:
        assert p.backend == "cuda" and r.backend == "cuda"
        publish(p, shape=(16, 128), dtype="uint16")
        f = r.read(timeout=1)
        assert f.__dlpack_device__() == (2, 0)  # kDLCUDA, the reader's device
        assert f.shape == (16, 128) and f.dtype == "uint16"
        assert ctypes.string_at(f.address, len(FRAME)) == FRAME
        cap = f.__dlpack__(stream=LEGACY)
        t = tensor_of(cap).dl_tensor
        assert (t.device.device_type, t.device.device_id) == (2, 0)
        assert t.data == f.address
        assert (t.ndim, t.dtype.code, t.dtype.bits) == (2, 1, 16)  # kDLUInt 16
        assert [t.shape[k] for k in range(2)] == [16, 128]
        assert [t.strides[k] for k in range(2)] == [128, 1]
        # No buffer protocol for device memory, no numpy view, and no numpy loans.
        try:
            memoryview(f)
            raise AssertionError("memoryview of a CUDA frame")
        except BufferError as e:
            assert channel in str(e) and "__dlpack__" in str(e)
        import numpy as np

        try:
            a = np.asarray(f)
            raise AssertionError(f"numpy.asarray of a CUDA frame gave {a!r}")
        except TypeError as e:
            assert channel in str(e) and "CUDA memory (device 0)" in str(e)
        del cap
        # The array API's newer keywords: max_version (1, 0) gets a versioned capsule (see
        # check_dlpack_versioned_read_only), an older one a DLPack 0.6 capsule; no copies.
        cap = f.__dlpack__(stream=LEGACY, max_version=(0, 8), dl_device=(2, 0), copy=False)
        assert tensor_of(cap).dl_tensor.data == f.address
        del cap
        for kwargs in ({"dl_device": (1, 0)}, {"copy": True}):
            try:
                f.__dlpack__(stream=LEGACY, **kwargs)
                raise AssertionError(f"__dlpack__({kwargs}) accepted")
            except BufferError as e:
                assert channel in str(e)
        f.release()
        loan = p.loan(timeout=0)
        assert loan.__dlpack_device__() == (2, 0)
        try:
            loan.ndarray((4,), "uint8")
            raise AssertionError("ndarray of a CUDA loan")
        except ipcring.InvalidArgument as e:
            assert channel in str(e) and "device 0" in str(e)
        loan.discard()


def check_wait_on_consumer_stream_before_capsule(channel):
    """__dlpack__(stream=S) makes S wait for the producer's write before the capsule is returned:
    work queued on S after the call runs only once the producer's stream wrote the frame."""
    with producer(channel) as p, ipcring.Reader(channel) as r:
        prod_stream = stream(nonblocking=True)
        writing = launch(prod_stream)  # the producer's kernel filling the frame, still running
        publish(p, stream=prod_stream)  # write-done recorded on prod_stream, after `writing`
        f = r.read(timeout=1)
        s = stream(nonblocking=True)
        # The write-done wait: on the IPC event (legacy IPC) or on the slot's word (VMM).
        assert r.cuda_path in ("legacy_ipc", "vmm"), r.cuda_path
        waits = calls("stream_wait_event") + calls("stream_wait_value64")
        cap = f.__dlpack__(stream=s)
        assert calls("stream_wait_event") + calls("stream_wait_value64") == waits + 1  # inside
        consumer = launch(s, held=False)  # the consumer's kernel on the frame
        assert not done(consumer), "the consumer's stream did not wait for the producer's write"
        finish(writing)
        assert done(consumer)
        # The legacy stream was not made to wait (the wait went on S, not elsewhere).
        other = launch(LEGACY, held=False)
        assert done(other)
        del cap
        f.release()


def check_stream_minus_one_issues_no_wait(channel):
    with producer(channel) as p, ipcring.Reader(channel) as r:
        prod_stream = stream(nonblocking=True)
        writing = launch(prod_stream)
        publish(p, stream=prod_stream)
        f = r.read(timeout=1)
        waits = calls("stream_wait_event")
        cap = f.__dlpack__(stream=-1)
        assert calls("stream_wait_event") == waits
        finish(writing)
        del cap
        f.release()


def check_release_fence_on_consumer_stream(channel):
    """The release fence is queued on the consumer's stream, after its kernel: the producer does
    not reuse the slot until that kernel finished. The stream is non-blocking, so a fence on the
    legacy stream would not have waited for the kernel (the check would fail)."""
    with producer(channel) as p, ipcring.Reader(channel) as r:
        slot = publish(p)
        f = r.read(timeout=1)
        s = stream(nonblocking=True)
        cap = f.__dlpack__(stream=s)
        kernel = launch(s)  # the consumer's model still reads the frame
        writes = calls("stream_write_value64")
        del cap
        f.release()
        assert not f.slot_held
        assert calls("stream_write_value64") == writes + 1
        assert not fenced_slot_is_reused(p, slot, 6), "reused under a running consumer kernel"
        finish(kernel)
        assert fenced_slot_is_reused(p, slot, 6)


def check_loan_with_stream_waits_on_gpu(channel):
    """Producer.loan(stream=P) may hand out the slot a reader's fence still covers, and makes P
    wait for it on the GPU: the producer's work on P runs only after the reader's kernel."""
    with producer(channel) as p, ipcring.Reader(channel) as r:
        slot = publish(p)
        f = r.read(timeout=1)
        s = stream(nonblocking=True)
        cap = f.__dlpack__(stream=s)
        kernel = launch(s)
        del cap
        f.release()
        prod_stream = stream(nonblocking=True)
        waits = calls("stream_wait_value64")
        for _ in range(6):
            loan = p.loan(timeout=0, stream=prod_stream)
            if loan.slot == slot:
                break
            p.publish(loan, 0)
        assert loan.slot == slot, "loan(stream) did not reach the fenced slot"
        assert calls("stream_wait_value64") == waits + 1
        fill = launch(prod_stream, held=False)  # the producer's write of the loan
        assert not done(fill), "the producer's stream did not wait for the reader's fence"
        finish(kernel)
        assert done(fill)
        # The write-done signal, on the loan's stream by default: the IPC event's record (legacy
        # IPC), or the writes of the slot's word and of the producer's private copy (VMM).
        records = calls("record_event") + calls("stream_write_value64")
        p.publish(loan, 0)
        signals = 1 if r.cuda_path == "legacy_ipc" else 2
        assert calls("record_event") + calls("stream_write_value64") == records + signals


def check_release_with_views_alive(channel):
    """Release waits for the last view: the capsule's tensor (a consumer's view) keeps the slot
    held after frame.release(); its deleter (the view's death) releases it, fenced on the stream
    of the export."""
    with producer(channel) as p, ipcring.Reader(channel) as r:
        slot = publish(p)
        f = r.read(timeout=1)
        s = stream(nonblocking=True)
        managed = consume(f.__dlpack__(stream=s))
        kernel = launch(s)
        writes = calls("stream_write_value64")
        f.release()
        assert f.slot_held and calls("stream_write_value64") == writes
        delete(managed)  # the consumer's tensor dies (GC of the last view)
        assert not f.slot_held
        assert calls("stream_write_value64") == writes + 1
        assert not fenced_slot_is_reused(p, slot, 6)
        finish(kernel)
        assert fenced_slot_is_reused(p, slot, 6)


def check_release_without_consumer_stream(channel):
    """No stream named (__dlpack__() / stream=None, or no export at all): the fence goes on the
    legacy default stream, which is ordered after the work of the process's blocking streams."""
    with producer(channel) as p, ipcring.Reader(channel) as r:
        slot = publish(p)
        f = r.read(timeout=1)
        cap = f.__dlpack__()
        blocking = stream(nonblocking=False)
        kernel = launch(blocking)
        del cap
        f.release()
        assert not fenced_slot_is_reused(p, slot, 6)
        finish(kernel)
        assert fenced_slot_is_reused(p, slot, 6)
        # A frame never exported: released with a fence on the legacy stream too.
        slot = publish(p)
        f = r.read(timeout=1)
        kernel = launch(LEGACY)
        f.release()
        assert not fenced_slot_is_reused(p, slot, 6)
        finish(kernel)
        assert fenced_slot_is_reused(p, slot, 6)


def check_release_stream_argument(channel):
    """frame.release(stream=S) puts the fence on S (here after an export without a stream)."""
    with producer(channel) as p, ipcring.Reader(channel) as r:
        slot = publish(p)
        f = r.read(timeout=1)
        cap = f.__dlpack__(stream=-1)
        s = stream(nonblocking=True)
        kernel = launch(s)
        del cap
        f.release(stream=s)
        assert not fenced_slot_is_reused(p, slot, 6)
        finish(kernel)
        assert fenced_slot_is_reused(p, slot, 6)


def check_cuda_array_interface(channel):
    with producer(channel) as p, ipcring.Reader(channel) as r:
        prod_stream = stream(nonblocking=True)
        writing = launch(prod_stream)
        publish(p, stream=prod_stream, shape=(8, 128), dtype="float32")
        f = r.read(timeout=1)
        cai = f.__cuda_array_interface__
        assert cai["version"] == 3
        assert cai["shape"] == (8, 128) and cai["typestr"] == "<f4"
        assert cai["data"] == (f.address, True)
        assert cai["strides"] is None
        assert cai["stream"] == LEGACY
        # The producer's write is visible on that stream: work queued there waits for it.
        consumer = launch(LEGACY, held=False)
        assert not done(consumer)
        finish(writing)
        assert done(consumer)
        # Once the frame is used on a stream, the dict names that one.
        f2_slot = publish(p)
        assert f2_slot is not None
        f.release(stream=LEGACY)  # the consumer above ran on the legacy stream
        g = r.read(timeout=1)
        s = stream(nonblocking=True)
        cap = g.__dlpack__(stream=s)
        assert g.__cuda_array_interface__["stream"] == s
        del cap
        g.release()


def check_cuda_array_interface_needs_the_consumer_stream(channel):
    """A __cuda_array_interface__ consumer names no stream, and one on a non-blocking stream is
    not ordered before a fence on the legacy stream: release() without a stream is refused (and
    so is leaving a `with` block), release(stream=s) fences after the consumer's kernel on s."""
    with producer(channel) as p, ipcring.Reader(channel) as r:
        slot = publish(p)
        f = r.read(timeout=1)
        assert f.__cuda_array_interface__["stream"] == LEGACY
        s = stream(nonblocking=True)  # cupy.cuda.Stream(non_blocking=True), say
        kernel = launch(s)
        try:
            f.release()
            raise AssertionError("release() after a __cuda_array_interface__ export")
        except ipcring.InvalidArgument as e:
            assert channel in str(e) and "release(stream=" in str(e), str(e)
        assert f.slot_held
        f.release(stream=s)
        assert not f.slot_held
        assert not fenced_slot_is_reused(p, slot, 6), "reused under a running consumer kernel"
        finish(kernel)
        assert fenced_slot_is_reused(p, slot, 6)
        publish(p)
        try:
            with r.read(timeout=1) as g:
                g.__cuda_array_interface__
            raise AssertionError("a with block left after a __cuda_array_interface__ export")
        except ipcring.InvalidArgument as e:
            assert "release(stream=" in str(e), str(e)
        assert g.held
        g.release(stream=LEGACY)


def check_per_thread_stream_resolved_where_named(channel):
    """stream=2 is the per-thread default stream of whichever thread uses it. The consumer's
    kernel runs on this thread's; its tensor dies on another thread (a garbage collector's): the
    fence queued there must still follow the kernel."""
    import threading
    with producer(channel) as p, ipcring.Reader(channel) as r:
        slot = publish(p)
        f = r.read(timeout=1)
        cap = f.__dlpack__(stream=2)
        managed = consume(cap)
        kernel = launch(2)  # this thread's per-thread default stream
        del cap
        f.release()  # the tensor still holds the slot
        assert f.slot_held
        t = threading.Thread(target=delete, args=(managed,))
        t.start()
        t.join()
        assert not f.slot_held
        assert not fenced_slot_is_reused(p, slot, 6), "reused under a running consumer kernel"
        finish(kernel)
        assert fenced_slot_is_reused(p, slot, 6)


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]
READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY


def check_dlpack_versioned_read_only(channel):
    """A consumer that asks for DLPack 1.0 (max_version) gets a versioned capsule; frames are
    flagged read-only (CUDA and host), loans are not; older consumers get a 0.6 capsule."""
    with producer(channel) as p, ipcring.Reader(channel) as r:
        publish(p, shape=(16, 256), dtype="uint8")
        f = r.read(timeout=1)
        cap = f.__dlpack__(stream=LEGACY, max_version=(1, 0))
        assert _api.PyCapsule_IsValid(cap, b"dltensor_versioned") == 1
        v = DLManagedTensorVersioned.from_address(
            _api.PyCapsule_GetPointer(cap, b"dltensor_versioned"))
        assert (v.version.major, v.version.minor) == (1, 0)
        assert v.flags & READ_ONLY
        assert v.dl_tensor.device.device_type == 2 and v.dl_tensor.ndim == 2
        assert v.dl_tensor.data == f.address
        old = f.__dlpack__(stream=LEGACY, max_version=(0, 8))
        assert _api.PyCapsule_IsValid(old, b"dltensor") == 1
        old2 = f.__dlpack__(stream=LEGACY)
        assert _api.PyCapsule_IsValid(old2, b"dltensor") == 1
        try:
            f.__dlpack__(stream=LEGACY, max_version="1.0")
            raise AssertionError("max_version of the wrong type")
        except ipcring.InvalidArgument as e:
            assert channel in str(e) and "max_version" in str(e)
        del cap, old, old2
        f.release()
        loan = p.loan(timeout=0)
        lc = loan.__dlpack__(stream=LEGACY, max_version=(1, 2))
        lv = DLManagedTensorVersioned.from_address(
            _api.PyCapsule_GetPointer(lc, b"dltensor_versioned"))
        assert not lv.flags & READ_ONLY
        del lc
        loan.discard()
    host = channel + "-h"
    with ipcring.Producer(host, frame_bytes=64) as p, ipcring.Reader(host) as r:
        p.send(b"x" * 64)
        f = r.read(timeout=1)
        cap = f.__dlpack__(max_version=(1, 0))
        v = DLManagedTensorVersioned.from_address(
            _api.PyCapsule_GetPointer(cap, b"dltensor_versioned"))
        assert v.flags & READ_ONLY and v.dl_tensor.device.device_type == 1
        del cap
        f.release()


def check_stream_arguments(channel):
    with producer(channel) as p, ipcring.Reader(channel) as r:
        publish(p)
        f = r.read(timeout=1)
        for bad in (0, -2, "1", 1.5):
            try:
                f.__dlpack__(stream=bad)
                raise AssertionError(f"stream={bad!r} accepted")
            except ipcring.InvalidArgument as e:
                assert channel in str(e) and "stream=" in str(e)
        s = stream(nonblocking=True)
        cap = f.__dlpack__(stream=s)
        try:
            f.__dlpack__(stream=stream(nonblocking=True))
            raise AssertionError("a second stream accepted")
        except ipcring.InvalidArgument as e:
            assert "one stream per frame" in str(e) and channel in str(e)
        cap2 = f.__dlpack__(stream=s)  # the same stream again is fine
        del cap, cap2
        f.release()


def check_wrong_device_errors(channel):
    class CudaThing:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):
            raise AssertionError("not called")

    import numpy as np

    with producer(channel) as p:
        try:
            p.send(np.zeros(16, dtype=np.uint8))
            raise AssertionError("host array sent to a CUDA channel")
        except ipcring.InvalidArgument as e:
            assert channel in str(e) and "CUDA channel (device 0)" in str(e) and "host" in str(e)
    host = channel + "-h"
    with ipcring.Producer(host, frame_bytes=64) as p:
        try:
            p.send(CudaThing())
            raise AssertionError("CUDA object sent to a host channel")
        except ipcring.InvalidArgument as e:
            assert host in str(e) and "host channel" in str(e) and "(2, 0)" in str(e)
        try:
            p.publish(p.loan(timeout=0), stream=5)
            raise AssertionError("publish(stream=) on a host channel")
        except ipcring.InvalidArgument as e:
            assert host in str(e)


def check_observer_refused_on_cuda_channel(channel):
    # Observers copy frames with the CPU: a CUDA channel refuses them, naming the channel.
    with producer(channel):
        try:
            ipcring.Reader(channel, observer=True)
            raise AssertionError("an observer attached to a CUDA channel")
        except ipcring.Unsupported as e:
            assert channel in str(e) and "observers read host channels only" in str(e), str(e)
        with ipcring.Reader(channel) as r:  # a reader still attaches
            assert not r.observer


def check_legacy_path_without_vmm_descriptors(channel):
    # A device that cannot export VMM memory as descriptors: backend="cuda" takes legacy CUDA
    # IPC, and the path is said by the reader and inspect() alike.
    os.environ["IPCRING_FAKE_CUDA_DEVICE"] = "vmm_posix_fd=0"
    with ipcring.Producer(channel, slots=3, max_readers=1, max_held=1, frame_bytes=4096,
                          backend="cuda") as p, ipcring.Reader(channel) as r:
        assert p.backend == "cuda" and r.backend == "cuda"
        assert r.cuda_path == "legacy_ipc"
        assert ipcring.inspect(channel)["cuda_path"] == "legacy_ipc"
        publish(p)
        f = r.read(timeout=1)
        assert ctypes.string_at(f.address, len(FRAME)) == FRAME
        f.release()


def check_pinned_legacy_refused_on_integrated_gpu(channel):
    # A Jetson-like device (the fake's integrated attribute): legacy CUDA IPC is refused at
    # create, the reason naming the fix in Python's words (backend='cuda_vmm', not Backend::...).
    os.environ["IPCRING_FAKE_CUDA_DEVICE"] = "integrated=1"
    try:
        ipcring.Producer(channel, frame_bytes=4096, backend="cuda_legacy")
        raise AssertionError("legacy CUDA IPC accepted on an integrated GPU")
    except ipcring.Unsupported as e:
        text = str(e)
        assert channel in text and "integrated GPU" in text, text
        assert "backend='cuda_vmm' (or backend='cuda'" in text, text
        assert "Backend::" not in text, text


CHECKS = {name[len("check_"):]: fn for name, fn in globals().items() if name.startswith("check_")}

if __name__ == "__main__":
    load_fake()
    CHECKS[sys.argv[1]](sys.argv[2])
    print("ok")
