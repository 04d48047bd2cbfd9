"""The Python API in one process: publish and read, policies, metadata, inspect, errors."""

import time

import numpy as np
import pytest

import ipcring
import ringtest


def make(name, slots=4, readers=2, held=1, frame_bytes=4096):
    return ipcring.Producer(name, slots=slots, max_readers=readers, max_held=held,
                            frame_bytes=frame_bytes)


def publish_pattern(p, nbytes=256):
    with p.loan() as loan:
        loan.write(ringtest.pattern(loan.sequence, nbytes))
        return p.publish(loan, nbytes)


def test_publish_and_read_one_frame(channel):
    with make(channel) as p, ipcring.Reader(channel) as r:
        assert r.try_read() is None
        loan = p.loan()
        assert loan.capacity == 4096 and loan.sequence == 1 and loan.valid
        loan.write(ringtest.pattern(1, 256))
        loan.set_metadata(b"shape=16x16")
        slot = loan.slot
        assert p.publish(loan, 256) == 1
        assert loan.published and not loan.valid
        frame = r.try_read()
        assert frame is not None
        assert (frame.sequence, frame.size, frame.slot, frame.epoch) == (1, 256, slot, 1)
        assert frame.metadata == b"shape=16x16"
        assert frame.timestamp_ns <= time.monotonic_ns()
        assert ringtest.check_pattern(frame, 1)
        assert r.held == 1
        snap = ipcring.inspect(channel)
        assert snap["slots"][slot]["state"] == "held"
        assert snap["slots"][slot]["reader_mask"] == 1 << r.index
        frame.release()
        frame.release()  # idempotent
        assert r.held == 0 and not frame.held and not frame.slot_held
        assert ipcring.inspect(channel)["slots"][slot]["reader_mask"] == 0
        assert r.try_read() is None  # nothing newer
        # The descriptor stays readable after release; the memory does not.
        assert frame.sequence == 1
        with pytest.raises(ipcring.InvalidArgument):
            memoryview(frame)
        with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
            frame.__dlpack__()


def test_policies(channel):
    with make(channel, slots=8) as p:
        latest = ipcring.Reader(channel, policy="latest")
        seq = ipcring.Reader(channel, policy="sequential")
        assert (latest.policy, seq.policy) == ("latest", "sequential")
        for _ in range(3):
            publish_pattern(p)
        with latest.read(timeout=1) as f:
            assert f.sequence == 3
        got = []
        for _ in range(3):
            with seq.read(timeout=1) as f:
                got.append(f.sequence)
        assert got == [1, 2, 3]


def test_send_and_loan_views(channel):
    with make(channel) as p, ipcring.Reader(channel) as r:
        data = ringtest.pattern(1, 512)
        assert p.send(data, metadata=b"m") == 1
        with r.read(timeout=1) as f:
            assert ringtest.check_pattern(f, 1) and f.size == 512 and f.metadata == b"m"
        # A loan is a writable buffer: numpy writes land in shared memory.
        loan = p.loan()
        np.frombuffer(loan, dtype=np.uint8)[:4] = [9, 8, 7, 6]
        assert p.publish(loan, 4) == 2
        with r.read(timeout=1) as f:
            assert bytes(f) == b"\x09\x08\x07\x06"
        # send() compacts a strided array to C order and describes it; write() takes
        # C-contiguous bytes-like objects only.
        grid = np.arange(64, dtype=np.uint8).reshape(8, 8)
        with pytest.raises(ipcring.InvalidArgument):
            loan = p.loan()
            try:
                loan.write(grid.T)
            finally:
                loan.discard()
        with pytest.raises(ipcring.InvalidArgument):
            p.send(b"x" * 4097)
        assert p.send(grid.T) == 3
        with r.read(timeout=1) as f:
            assert bytes(f) == grid.T.tobytes()
            assert f.shape == (8, 8) and f.dtype == "uint8"


def test_loan_views_block_publish(channel):
    with make(channel) as p:
        loan = p.loan()
        view = memoryview(loan)
        view[0] = 1
        with pytest.raises(BufferError):
            p.publish(loan, 1)
        assert loan.valid  # untouched
        view.release()
        arr = np.asarray(loan)
        with pytest.raises(BufferError):
            p.publish(loan, 1)
        del arr
        arr = np.frombuffer(loan, dtype=np.float32)  # keeps a memoryview: counted
        with pytest.raises(BufferError):
            p.publish(loan, 1)
        del arr
        torch = pytest.importorskip("torch")
        t = torch.frombuffer(loan, dtype=torch.uint8)  # keeps the view's keeper: counted
        with pytest.raises(BufferError):
            p.publish(loan, 1)
        del t
        assert p.publish(loan, 1) == 1
        with pytest.raises(ipcring.InvalidArgument):
            memoryview(loan)  # published: no longer ours


def test_loan_discard_and_outstanding(channel):
    with make(channel) as p:
        loan = p.loan()
        with pytest.raises(ipcring.LoanOutstanding):
            p.loan()
        loan.discard()
        assert not loan.valid and not loan.published
        loan2 = p.loan()  # the slot came back
        with pytest.raises(ipcring.InvalidArgument):
            p.publish(loan, 1)  # discarded
        with pytest.raises(ipcring.InvalidArgument):
            p.publish(loan2, 4097)  # beyond the capacity
        with pytest.raises(ipcring.InvalidArgument):
            loan2.set_metadata(b"x" * 257)  # the default metadata_bytes is 256
        with pytest.raises(ipcring.InvalidArgument):
            loan2.write(b"x" * 10, offset=4090)
        assert p.publish(loan2) == 1  # default: the whole capacity
        # A `with` block without publish discards.
        with p.loan() as loan3:
            pass
        assert not loan3.valid
        p.loan().discard()


def test_loan_timeout_no_free_slot(channel):
    # slots < max_readers*max_held + 2: a reader holding frames can starve the producer.
    with make(channel, slots=2, readers=1, held=2) as p, ipcring.Reader(channel) as r:
        publish_pattern(p)
        f1 = r.try_read()
        publish_pattern(p)
        f2 = r.try_read()
        assert f1 and f2
        with pytest.raises(ipcring.NoFreeSlot):
            p.loan(timeout=0)
        t0 = time.monotonic()
        with pytest.raises(ipcring.NoFreeSlot):
            p.loan(timeout=0.1)
        assert 0.09 <= time.monotonic() - t0 < 2
        f1.release()
        p.loan(timeout=0).discard()


def test_read_timeout_and_producer_gone(channel):
    p = make(channel)
    r = ipcring.Reader(channel)
    t0 = time.monotonic()
    with pytest.raises(ipcring.Timeout) as e:
        r.read(timeout=0.12)
    assert 0.11 <= time.monotonic() - t0 < 2
    assert isinstance(e.value, TimeoutError) and e.value.status == ipcring.Status.timeout
    with pytest.raises(ipcring.Timeout):
        r.read(timeout=0)
    p.close()
    assert p.closed
    with pytest.raises(ipcring.ProducerGone):
        r.read(timeout=1)
    with pytest.raises(ipcring.InvalidArgument):
        p.loan()
    r.close()
    assert r.closed
    with pytest.raises(ipcring.InvalidArgument):
        r.try_read()


def test_producer_gone_is_reported_once_per_epoch(channel):
    p = make(channel)
    r = ipcring.Reader(channel)
    r2 = ipcring.Reader(channel)
    publish_pattern(p)
    r.read(timeout=1).release()
    p.close()
    with pytest.raises(ipcring.ProducerGone):
        r.try_read()
    assert r.try_read() is None  # once per ended epoch ...
    with pytest.raises(ipcring.Timeout):
        r.read(timeout=0.2)  # ... then read() waits for a producer to take over
    with pytest.raises(ipcring.ProducerGone):
        r2.read(timeout=1)  # a reader blocked in read() is told as well, once
    with pytest.raises(ipcring.Timeout):
        r2.read(timeout=0.2)


def test_inspect_dict(channel):
    with make(channel) as p, ipcring.Reader(channel) as r:
        publish_pattern(p)
        f = r.read(timeout=1)
        s = ipcring.inspect(channel)
        assert s["name"] == channel and s["backend"] == "host"
        assert s["max_readers"] == 2 and s["max_held"] == 1 and s["frame_bytes"] == 4096
        assert len(s["slots"]) == s["slot_count"] == 4
        assert s["reap_period_ns"] == 100_000_000 and s["created_unix_ns"] > 0
        assert s["producer"]["state"] == "alive"
        import os
        assert s["producer"]["pid"] == os.getpid() and s["producer"]["alive"]
        assert s["producer"]["epoch"] == p.epoch == 1
        slot = s["slots"][f.slot]
        assert set(slot) >= {"index", "sequence", "state", "reader_mask"}
        assert slot["sequence"] == 1 and slot["state"] == "held"
        assert slot["reader_indices"] == [r.index]
        (entry,) = s["readers"]
        assert set(entry) >= {"index", "pid", "alive", "held_slots"}
        assert entry["held_slots"] == [f.slot] and entry["alive"] and entry["policy"] == "latest"
        assert s["problems"] == []
        assert channel in ipcring.list_channels()
        f.release()


def test_remove_channel(channel):
    p = make(channel)
    with pytest.raises(ipcring.ChannelBusy):
        ipcring.remove_channel(channel)
    p.close()  # a clean close removes the channel itself
    assert channel not in ipcring.list_channels()
    assert ipcring.remove_channel(channel) is False


def test_bad_inputs_raise_error_subclasses(channel):
    cases = [
        (lambda: ipcring.Producer("", frame_bytes=64), ipcring.InvalidName),
        (lambda: ipcring.Producer("bad name!", frame_bytes=64), ipcring.InvalidName),
        (lambda: ipcring.Producer("x" * 201, frame_bytes=64), ipcring.InvalidName),
        (lambda: ipcring.Reader("bad name"), ipcring.InvalidName),
        (lambda: ipcring.validate_name("a/../b"), ipcring.InvalidName),
        (lambda: ipcring.Producer(channel), ipcring.InvalidConfig),  # frame_bytes=0
        (lambda: ipcring.Producer(channel, slots=0, frame_bytes=64), ipcring.InvalidConfig),
        (lambda: ipcring.Producer(channel, slots=-1, frame_bytes=64), ipcring.InvalidConfig),
        (lambda: ipcring.Producer(channel, max_readers=1000, frame_bytes=64),
         ipcring.InvalidConfig),
        (lambda: ipcring.Producer(channel, frame_bytes=-5), ipcring.InvalidConfig),
        (lambda: ipcring.Producer(channel, frame_bytes=64, backend="tpu"), ipcring.InvalidConfig),
        (lambda: ipcring.Producer(channel, frame_bytes=64, mode=0o70000), ipcring.InvalidConfig),
        (lambda: ipcring.Producer(channel, frame_bytes=64, backend="cuda"), ipcring.Unsupported),
        (lambda: ipcring.Reader(channel), ipcring.NotFound),
        (lambda: ipcring.inspect(channel), ipcring.NotFound),
        (lambda: ipcring.reap_dead_readers(channel), ipcring.NotFound),
    ]
    for call, cls in cases:
        with pytest.raises(cls) as e:
            call()
        assert isinstance(e.value, ipcring.Error)
        assert e.value.code == cls.code and e.value.code is not None
        assert str(e.value)  # a message
    with make(channel) as p:
        with pytest.raises(ipcring.ProducerExists) as e:
            make(channel)
        assert "pid" in str(e.value)
        with pytest.raises(ipcring.InvalidArgument):
            ipcring.Reader(channel, policy="newest")
        with pytest.raises(ipcring.InvalidArgument):
            ipcring.Reader(channel, spin=-1.0)
        r = ipcring.Reader(channel)
        with pytest.raises(ipcring.InvalidArgument):
            r.read(timeout=-1)
        with pytest.raises(ipcring.InvalidArgument):
            r.read(timeout=float("nan"))
        with pytest.raises(ipcring.InvalidArgument):
            p.loan(timeout=-0.5)
        r2 = ipcring.Reader(channel)
        with pytest.raises(ipcring.TooManyReaders):
            ipcring.Reader(channel)
        r.close()
        r2.close()
        with pytest.raises(ipcring.InvalidName):
            ipcring.remove_channel("no//slash")
        with pytest.raises(TypeError):  # wrong types stay TypeError
            ipcring.Producer(channel, slots="8", frame_bytes=64)


def test_messages_speak_python_and_say_what_to_do(channel):
    with ipcring.Producer(channel, max_readers=1, frame_bytes=64):
        with ipcring.Reader(channel):
            with pytest.raises(ipcring.TooManyReaders) as e:
                ipcring.Reader(channel)
    assert "Producer(max_readers=N)" in str(e.value)
    assert "ipcring.inspect() takes none" in str(e.value)
    # The library's "use Backend::host" reaches Python as backend='host'.
    try:
        ipcring.Producer(channel, frame_bytes=64, backend="cuda").close()
    except ipcring.Unsupported as e:
        assert "backend='host'" in str(e) and "Backend::" not in str(e), str(e)
    else:
        pytest.skip("backend='cuda' works here: no refusal to read")


def test_backend_names(channel):
    # The three CUDA requests are backend names the module knows (no GPU here: each is refused
    # as unsupported, not as an unknown name); anything else lists them all.
    with pytest.raises(ipcring.InvalidConfig) as e:
        ipcring.Producer(channel, frame_bytes=64, backend="cuda-vmm")
    assert channel in str(e.value) and "backend='cuda-vmm'" in str(e.value)
    assert "'host', 'cuda' (the producer chooses the CUDA path), 'cuda_legacy' or 'cuda_vmm'" \
        in str(e.value)
    for name in ("cuda", "cuda_legacy", "cuda_vmm"):
        try:
            ipcring.Producer(channel, frame_bytes=64, backend=name).close()
        except ipcring.Unsupported as u:
            assert "Backend::" not in str(u), str(u)
        else:
            pytest.skip("backend='%s' works here" % name)
    # A host channel has no CUDA path.
    with ipcring.Producer(channel, frame_bytes=64) as p, ipcring.Reader(channel) as r:
        assert p.backend == r.backend == "host"
        assert r.cuda_path == "none"
        assert ipcring.inspect(channel)["cuda_path"] == "none"


def test_exception_hierarchy_matches_cpp():
    cpp_errc = ipcring._ipcring._cpp_errc_names()
    assert {m.value: m.name for m in ipcring.Errc} == cpp_errc
    cpp_status = ipcring._ipcring._cpp_status_names()
    assert {m.value: m.name for m in ipcring.Status} == cpp_status
    from ipcring import _errors
    # One class per Errc, one per Status that can surface (no_frame is None, ok is a frame).
    assert set(_errors.BY_ERRC) == set(ipcring.Errc)
    assert set(_errors.BY_STATUS) == set(ipcring.Status) - {ipcring.Status.ok,
                                                            ipcring.Status.no_frame}
    for cls in list(_errors.BY_ERRC.values()) + list(_errors.BY_STATUS.values()):
        assert issubclass(cls, ipcring.Error)
    assert ipcring.NotFound.code == ipcring.Errc.not_found == 3
    assert ipcring.Errc.not_found.name == "not_found"
    assert issubclass(ipcring.Timeout, TimeoutError)
    assert issubclass(ipcring.InvalidArgument, ValueError)
    assert ipcring.Error.code is None and ipcring.Timeout.code is None
    assert ipcring.MaxHeld.status == ipcring.Status.max_held


def test_dlpack_protocol_details(channel):
    with make(channel) as p, ipcring.Reader(channel) as r:
        publish_pattern(p, 64)
        f = r.read(timeout=1)
        assert f.__dlpack_device__() == (1, 0)  # kDLCPU
        assert not hasattr(f, "__cuda_array_interface__")
        with pytest.raises(ipcring.InvalidArgument):
            f.__dlpack__(stream=1)  # host frames take stream=None
        cap = f.__dlpack__()
        assert "dltensor" in repr(cap)
        f.release()
        assert f.slot_held  # the unconsumed capsule holds the slot
        del cap  # an unconsumed capsule releases its hold when it dies
        assert not f.slot_held and r.held == 0


def test_blocking_read_releases_the_gil(channel):
    import threading
    with make(channel) as p, ipcring.Reader(channel) as r:
        got = []

        def reader_thread():
            with r.read(timeout=5) as f:
                got.append(f.sequence)

        t = threading.Thread(target=reader_thread)
        t.start()
        time.sleep(0.1)  # the reader thread is blocked in read(); we still run Python code
        publish_pattern(p)
        t.join(timeout=5)
        assert got == [1]


def test_close_from_another_thread_ends_a_blocked_read(channel):
    import threading
    with make(channel):
        r = ipcring.Reader(channel)
        errors = []

        def reader_thread():
            try:
                r.read()
            except ipcring.Error as e:
                errors.append(e)

        t = threading.Thread(target=reader_thread)
        t.start()
        time.sleep(0.1)
        r.close()  # waits for the reader thread's current slice (<= 50 ms), then detaches
        t.join(timeout=5)
        assert not t.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], ipcring.InvalidArgument)
        assert "closed" in str(errors[0])


def test_frames_released_on_another_thread(channel):
    import threading
    with make(channel, slots=8, held=4) as p, ipcring.Reader(channel) as r:
        frames = []
        for _ in range(4):
            publish_pattern(p)
            frames.append(r.try_read())
        assert r.held == 4
        t = threading.Thread(target=lambda: [f.release() for f in frames])
        t.start()
        t.join()
        assert r.held == 0


def test_torch_writes_into_a_loan(channel):
    torch = pytest.importorskip("torch")
    with make(channel) as p, ipcring.Reader(channel) as r:
        loan = p.loan()
        t = torch.from_dlpack(loan)
        assert t.data_ptr() == loan.address and t.shape == (4096,)
        t[:256].copy_(torch.from_numpy(ringtest.pattern(1, 256).view(np.uint8)))
        with pytest.raises(BufferError):
            p.publish(loan, 256)  # the tensor is a live view of the loan
        del t
        p.publish(loan, 256)
        with r.read(timeout=1) as f:
            assert ringtest.check_pattern(f, 1)


def test_objects_inherited_through_fork_raise_forked(channel):
    import os
    with make(channel) as p, ipcring.Reader(channel) as r:
        pid = os.fork()
        if pid == 0:  # child: only os._exit from here
            code = 1
            try:
                r.try_read()
            except ipcring.Forked:
                try:
                    p.send(b"x")
                except ipcring.Forked:
                    code = 0
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        publish_pattern(p)  # the parent's objects still work
        assert r.read(timeout=1).sequence == 1


def test_observer_reads_a_full_channel_and_takes_no_entry(channel):
    with make(channel, readers=1) as p, ipcring.Reader(channel) as r:
        with pytest.raises(ipcring.TooManyReaders):
            ipcring.Reader(channel)
        with ipcring.Reader(channel, observer=True) as o:
            assert o.observer and not r.observer
            assert o.observer_dropped == 0
            publish_pattern(p, 304)
            frame = o.read(timeout=1)
            assert frame.size == 304 and ringtest.check_pattern(frame, frame.sequence)
            # A copy: no slot is held, and the one reader entry is the reader's.
            snap = ipcring.inspect(channel)
            assert [s["reader_mask"] for s in snap["slots"]] == [0] * len(snap["slots"])
            assert len(snap["readers"]) == 1
            # One frame at a time: the copy it views is the observer's one buffer.
            publish_pattern(p, 304)
            with pytest.raises(ipcring.MaxHeld):
                o.try_read()
            frame.release()
            nxt = o.try_read()
            assert nxt is not None and nxt.sequence == frame.sequence + 1
            assert ringtest.check_pattern(nxt, nxt.sequence)
            nxt.release()
        # The reader was not disturbed: it reads the newest frame.
        with r.read(timeout=1) as f:
            assert f.sequence == 2


def test_channel_directory_and_access_lists(channel, tmp_path):
    """dir= places the channel's names in a directory of one's own; a reader that looks elsewhere
    does not find it. allow_uids / allow_gids / trust_uids take ids, checked."""
    private = tmp_path / "channels"
    private.mkdir(mode=0o700)
    with ipcring.Producer(channel, frame_bytes=64, dir=str(private), allow_uids=[65534],
                          allow_gids=[65534]) as producer:
        assert sorted(p.name for p in private.iterdir()) == [channel + ".lock", channel + ".sock"]
        producer.send(b"in a directory of its own")
        with pytest.raises(ipcring.NotFound):
            ipcring.Reader(channel)  # the default directory holds no such channel
        reader = ipcring.Reader(channel, dir=str(private), trust_uids=[65534])
        frame = reader.try_read()
        assert bytes(frame) == b"in a directory of its own"
        frame.release()
        reader.close()
    for bad in ([-1], [2**32 - 1], [2**32]):
        with pytest.raises(ipcring.InvalidConfig, match="not a user or group id"):
            ipcring.Producer(channel, frame_bytes=64, dir=str(private), allow_uids=bad)
        with pytest.raises(ipcring.InvalidConfig, match=str(bad[0])):
            ipcring.Reader(channel, dir=str(private), trust_uids=bad)
    with pytest.raises(ipcring.InvalidConfig, match="allow_gids"):
        ipcring.Producer(channel, frame_bytes=64, dir=str(private), allow_gids=[-5])
