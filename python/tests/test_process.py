"""Across processes: PyTorch reader of a Python or ringpub producer, Python producer with a ringsub
reader, a SIGKILLed reader holding a tensor, a producer takeover, Ctrl-C in a blocked read."""

import os
import signal
import subprocess
import time

import pytest

import ipcring
import ringtest

torch = pytest.importorskip("torch")

FRAME_BYTES = 64 * 1024


def attach_when_ready(name, timeout=10.0, **kw):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ipcring.Reader(name, **kw)
        except (ipcring.NotFound, ipcring.NotReady):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def read_tensors_and_verify(reader, count, hold_s=0.0):
    """Reads `count` frames as torch tensors; each must share the frame's memory and carry its
    pattern, also after the Frame object is released and the producer went on for hold_s."""
    sequences = []
    for _ in range(count):
        frame = reader.read(timeout=10)
        tensor = torch.from_dlpack(frame)
        assert tensor.dtype == torch.uint8 and tuple(tensor.shape) == (frame.size,)
        assert tensor.data_ptr() == frame.address  # zero-copy: the tensor is the frame
        seq = frame.sequence
        assert ringtest.check_pattern(tensor.numpy(), seq)
        frame.release()  # the tensor keeps the slot held ...
        if hold_s:
            time.sleep(hold_s)
        assert ringtest.check_pattern(tensor.numpy(), seq)  # ... so nothing overwrote it
        del tensor
        sequences.append(seq)
    assert sequences == sorted(sequences) and len(set(sequences)) == count
    return sequences


def finish(proc, timeout=20):
    if proc.stdin is not None and proc.stdin.closed:
        proc.stdin = None  # communicate() would flush it
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError("child did not exit: stdout=%r stderr=%r" % (out, err))
    return proc.returncode, out, err


def test_torch_reader_of_python_producer_process(channel):
    proc = ringtest.spawn_child("producer", channel, 8, 2, 2, FRAME_BYTES, 200, 500,
                                stdin=subprocess.PIPE)
    try:
        ringtest.expect_line(proc, "ready")
        with attach_when_ready(channel, policy="latest") as reader:
            read_tensors_and_verify(reader, 20, hold_s=0.01)
        ringtest.expect_line(proc, "published")
    finally:
        proc.stdin.close()
        rc, out, err = finish(proc)
    assert rc == 0, err


def test_torch_reader_of_ringpub(channel, ringpub):
    proc = subprocess.Popen([ringpub, channel, "--slots", "8", "--readers", "2", "--max-held", "2",
                             "--frame-bytes", str(FRAME_BYTES), "--rate", "1000", "--duration",
                             "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with attach_when_ready(channel, policy="sequential") as reader:
            read_tensors_and_verify(reader, 30, hold_s=0.005)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc, out, err = finish(proc)
    assert rc == 0, err
    assert "published=" in out


def test_ringsub_reader_of_python_producer(channel, ringsub):
    count = 50
    with ipcring.Producer(channel, slots=8, max_readers=2, max_held=1,
                          frame_bytes=FRAME_BYTES) as p:
        proc = subprocess.Popen([ringsub, channel, "--policy", "sequential", "--hold-ms", "1",
                                 "--count", str(count)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert ringtest.wait_until(lambda: ipcring.inspect(channel)["readers"], 10)
            deadline = time.monotonic() + 30
            while proc.poll() is None and time.monotonic() < deadline:
                with p.loan(timeout=5) as loan:
                    loan.write(ringtest.pattern(loan.sequence, FRAME_BYTES))
                    p.publish(loan, FRAME_BYTES)
                time.sleep(0.002)
        finally:
            rc, out, err = finish(proc)
    assert rc == 0, (out, err)  # ringsub exits 1 on a corrupt frame
    assert "frames=%d" % count in out and "corrupt=0" in out, out


def test_sigkilled_reader_holding_a_tensor_is_reaped(channel):
    with ipcring.Producer(channel, slots=4, max_readers=1, max_held=1,
                          frame_bytes=4096, reap_period=3600) as p:
        p.send(ringtest.pattern(1, 4096).tobytes())  # bytes: torch 1.13 imports no uint64
        child = ringtest.spawn_child("holder", channel)
        try:
            line = ringtest.expect_line(child, "holding")
            fields = dict(f.split("=") for f in line.split()[1:])
            slot, pid = int(fields["slot"]), int(fields["pid"])
            assert fields["shares"] == "1"  # the child's tensor shared the frame's memory
            s = ipcring.inspect(channel)
            assert [(e["pid"], e["alive"], e["held_slots"]) for e in s["readers"]] == [
                (pid, True, [slot])]
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
        finally:
            if child.poll() is None:
                child.kill()
            child.communicate()
        s = ipcring.inspect(channel)
        assert [(e["alive"], e["held_slots"]) for e in s["readers"]] == [(False, [slot])]
        assert p.reap_dead_readers() == 1
        s = ipcring.inspect(channel)
        assert s["readers"] == [] and s["slots"][slot]["reader_mask"] == 0
        # The producer recycles the dead reader's slot.
        seen = set()
        for _ in range(8):
            with p.loan(timeout=1) as loan:
                seen.add(loan.slot)
                p.publish(loan, 8)
        assert slot in seen


def test_reader_survives_producer_death_and_takeover(channel):
    proc = ringtest.spawn_child("producer", channel, 4, 2, 1, 4096, 1, 0, stdin=subprocess.PIPE)
    ringtest.expect_line(proc, "published")
    with attach_when_ready(channel) as reader:
        assert ringtest.check_pattern(reader.read(timeout=5), 1)
        proc.kill()
        proc.wait(timeout=10)
        proc.communicate()
        with pytest.raises(ipcring.ProducerGone):
            reader.read(timeout=5)
        with ipcring.Producer(channel, slots=4, max_readers=2, max_held=1,
                              frame_bytes=4096) as p2:
            assert p2.epoch == 2
            p2.send(ringtest.pattern(2, 4096))
            # producer_gone is reported once per ended producer: the probe reported epoch 1's end
            # already, so following the new producer is not reported again; frames follow. A new
            # producer makes fresh memory: its sequence numbers start again at 1.
            with reader.read(timeout=5) as frame:
                assert frame.epoch == 2 and frame.sequence == 1
                assert ringtest.check_pattern(frame, 2)


def test_ctrl_c_interrupts_a_blocked_read(channel):
    with ipcring.Producer(channel, slots=4, max_readers=1, frame_bytes=64):
        child = ringtest.spawn_child("blocked_reader", channel)
        try:
            ringtest.expect_line(child, "reading")
            time.sleep(0.33)  # let it block in read() (not on a 50 ms slice boundary)
            assert child.poll() is None
            sent = time.monotonic_ns()
            child.send_signal(signal.SIGINT)
            line = ringtest.expect_line(child, "interrupted", timeout=5)
            latency = (int(line.split()[1]) - sent) / 1e9
            rc, out, err = finish(child)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
    assert rc == 0, err
    assert latency < 0.5, "KeyboardInterrupt took %.3f s" % latency


def test_reader_started_before_its_producer_waits_for_the_channel(channel):
    """Reader(name, wait_for_channel=S) attaches once a producer (another process, started after
    the reader began waiting) creates the channel, and reads that producer's frames."""
    import threading
    with pytest.raises(ipcring.NotFound):
        ipcring.Reader(channel)  # nothing there yet: the default fails at once
    procs = []
    starting = threading.Event()

    def start_producer():
        starting.set()
        procs.append(ringtest.spawn_child("producer", channel, 8, 2, 1, FRAME_BYTES, 400, 200,
                                          stdin=subprocess.PIPE))

    timer = threading.Timer(0.3, start_producer)  # runs while Reader() waits without the GIL
    timer.start()
    try:
        with ipcring.Reader(channel, policy="sequential", wait_for_channel=60) as reader:
            assert starting.is_set(), "attach returned before the producer was started"
            read_tensors_and_verify(reader, 5)
    finally:
        timer.join()
        for proc in procs:
            proc.stdin.close()
            finish(proc)
    assert procs[0].returncode == 0


def test_ctrl_c_interrupts_wait_for_channel(channel):
    child = ringtest.spawn_child("waiting_reader", channel)
    try:
        ringtest.expect_line(child, "waiting")
        time.sleep(0.3)  # inside Reader(): it would wait 600 s for a channel nobody creates
        assert child.poll() is None
        child.send_signal(signal.SIGINT)
        ringtest.expect_line(child, "interrupted", timeout=30)
        rc, out, err = finish(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert rc == 0, err


def test_wait_for_channel_runs_out_with_not_found_naming_the_wait(channel):
    with pytest.raises(ipcring.NotFound) as info:
        ipcring.Reader(channel, wait_for_channel=0.05)
    assert channel in str(info.value) and "waited" in str(info.value)
    assert "wait_for_channel" in str(info.value)
    with pytest.raises(ipcring.InvalidArgument):
        ipcring.Reader(channel, wait_for_channel=-1)


def test_defaults_satisfy_the_sizing_rule(channel):
    with ipcring.Producer(channel, frame_bytes=4096) as p:
        assert p.slots >= p.max_readers * p.max_held + 2
        readers = [ipcring.Reader(channel) for _ in range(p.max_readers)]
        held = []
        for _ in range(4 * p.slots):  # every reader holds what it may; loan never fails
            with p.loan(timeout=0) as loan:
                p.publish(loan, 64)
            for r in readers:
                if r.held < r.max_held:
                    f = r.try_read()
                    if f is not None:
                        held.append(f)
        assert len(held) == p.max_readers * p.max_held
        for f in held:
            f.release()
        for r in readers:
            r.close()


@pytest.mark.parametrize("handlers", ["no", "yes"])
def test_sigterm_of_a_python_producer(channel, handlers):
    """systemctl stop sends SIGTERM. Python's default ends the process on the spot and the channel
    stays (stale); after ipcring.install_signal_handlers() the `with` block closes the Producer,
    which removes its channel, and the process exits 0, as ringpub does."""
    child = ringtest.spawn_child("service_producer", channel, handlers)
    try:
        ringtest.expect_line(child, "ready")
        time.sleep(0.2)
        child.send_signal(signal.SIGTERM)
        rc, out, err = finish(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    if handlers == "yes":
        assert rc == 0, err
        assert "stopping" in out
        assert channel not in ipcring.list_channels()
    else:
        assert rc == -signal.SIGTERM
        assert channel in ipcring.list_channels()  # what install_signal_handlers() is for
        with pytest.raises(ipcring.NotFound):  # stale names: nobody serves the channel
            ipcring.inspect(channel)


def test_install_signal_handlers_returns_the_previous_ones():
    before = signal.getsignal(signal.SIGTERM)
    previous = ipcring.install_signal_handlers()
    try:
        assert previous[int(signal.SIGTERM)] == before
        assert signal.getsignal(signal.SIGTERM) is not before
        with pytest.raises(SystemExit) as info:
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
        assert info.value.code == 0
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def test_ros2_images_through_ringbridge_keep_their_shape_in_torch(channel):
    """A numpy (48, 64, 3) uint8 image published from Python goes out with `ringbridge export
    --ros2` (no --width/--height: from the frame's tensor) and comes back through `ringbridge
    import --ros2` as frames a torch reader sees as (48, 64, 3) uint8 images."""
    np = pytest.importorskip("numpy")
    bridge = os.environ.get("IPCRING_RINGBRIDGE")
    if not bridge or not os.access(bridge, os.X_OK):
        pytest.skip("ringbridge not built (IPCRING_RINGBRIDGE unset or not executable)")
    a, b = channel + "A", channel + "B"
    topic = "pyros%d" % os.getpid()  # DDS topic names take no hyphen
    domain = str(1 + os.getpid() % 100)
    common = ["--ros2", "--reliable", "--depth", "64", "--domain", domain, "--interface", "lo"]
    image = (np.arange(48 * 64 * 3) % 251).astype(np.uint8).reshape(48, 64, 3)
    imp = subprocess.Popen([bridge, "import", topic, "--channel", b, "--frame-bytes", "9216"] +
                           common, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    exp = None
    try:
        reader = attach_when_ready(b, timeout=20)
        with ipcring.Producer(a, slots=8, max_readers=2, frame_bytes=image.nbytes) as p:
            exp = subprocess.Popen([bridge, "export", a, "--topic", topic] + common,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            got = None
            deadline = time.monotonic() + 30
            while got is None and time.monotonic() < deadline:
                assert imp.poll() is None and exp.poll() is None, (imp.communicate(),
                                                                    exp.communicate())
                p.send(image)
                time.sleep(0.05)
                got = reader.try_read()
            assert got is not None, "no image came back through the bridge"
            tensor = torch.from_dlpack(got)
            assert tensor.dtype == torch.uint8
            assert tuple(tensor.shape) == (48, 64, 3)
            assert torch.equal(tensor, torch.from_numpy(image))
            assert got.capture_time_ns  # the Image's header stamp
            del tensor
            got.release()
        reader.close()
    finally:
        for proc in (exp, imp):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.communicate(timeout=20)
        for name in (a, b):
            try:
                ipcring.remove_channel(name, force=True)
            except ipcring.Error:
                pass
