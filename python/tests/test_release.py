"""Release semantics: `with`, release(), dropping the last reference, views outliving release,
reference cycles, and max_held turning a leak into MaxHeld."""

import gc
import warnings

import numpy as np
import pytest

import ipcring
import ringtest


@pytest.fixture
def chan(channel):
    """(producer, reader) with max_held=1 and a publish(n) helper."""
    p = ipcring.Producer(channel, slots=4, max_readers=1, max_held=1, frame_bytes=4096)
    r = ipcring.Reader(channel)

    def publish(count=1):
        for _ in range(count):
            with p.loan() as loan:
                loan.write(ringtest.pattern(loan.sequence, 4096))
                p.publish(loan, 4096)

    yield p, r, publish
    r.close()
    p.close()


def held_slots(name):
    (reader,) = ipcring.inspect(name)["readers"]
    return reader["held_slots"]


def test_with_block_releases_at_block_end(chan, channel):
    p, r, publish = chan
    publish()
    with r.read(timeout=1) as frame:
        assert held_slots(channel) == [frame.slot]
    assert held_slots(channel) == [] and r.held == 0 and not frame.held


def test_dropping_last_reference_releases_at_once(chan, channel):
    p, r, publish = chan
    gc.disable()  # prove it is reference counting, not the collector
    try:
        publish()
        frame = r.read(timeout=1)
        assert held_slots(channel) == [frame.slot]
        del frame
        assert held_slots(channel) == [] and r.held == 0
        # A frame never bound to a name is released as soon as the expression is done.
        publish()
        assert r.read(timeout=1).sequence == 2
        assert r.held == 0
    finally:
        gc.enable()


@pytest.mark.parametrize("make_view", ["memoryview", "numpy", "np_frombuffer", "np_from_dlpack",
                                       "torch", "torch_frombuffer", "capsule"])
def test_view_outliving_release_defers_it(chan, channel, make_view):
    """A view keeps the slot held after frame.release(); the slot goes with the last view."""
    p, r, publish = chan
    publish()
    frame = r.read(timeout=1)
    slot, seq = frame.slot, frame.sequence
    if make_view == "memoryview":
        view = memoryview(frame)
    elif make_view == "numpy":
        view = np.asarray(frame)
        assert view.ctypes.data == frame.address and not view.flags.writeable
    elif make_view == "np_frombuffer":
        view = np.frombuffer(frame, dtype=np.uint8)
        assert view.base is not frame  # a memoryview: it holds the slot, not the Frame object
    elif make_view == "np_from_dlpack":
        view = np.from_dlpack(frame)
        assert view.ctypes.data == frame.address and not view.flags.writeable
    elif make_view == "torch":
        torch = pytest.importorskip("torch")
        view = torch.from_dlpack(frame)
        assert view.data_ptr() == frame.address
    elif make_view == "torch_frombuffer":
        torch = pytest.importorskip("torch")
        with warnings.catch_warnings():  # torch warns (once) that the buffer is not writable
            warnings.simplefilter("ignore")
            view = torch.frombuffer(frame, dtype=torch.uint8)
        assert view.data_ptr() == frame.address
    else:
        view = frame.__dlpack__()
    frame.release()
    assert not frame.held and frame.slot_held
    assert held_slots(channel) == [slot]
    assert ringtest.slot_states(channel)[slot] == "held"
    # max_held=1: the deferred hold counts, so the reader cannot take another frame yet ...
    publish()
    with pytest.raises(ipcring.MaxHeld) as e:
        r.try_read()
    assert "max_held=1" in str(e.value)
    # ... and the producer never rewrites the slot under the view: cycle the pool a few times.
    publish(8)
    if make_view != "capsule":
        data = bytes(memoryview(view.numpy() if make_view.startswith("torch") else view)
                     .cast("B"))
        assert ringtest.check_pattern(data, seq)
    del view
    assert not frame.slot_held and held_slots(channel) == [] and r.held == 0
    assert r.try_read() is not None


def test_slices_and_copies_of_views(chan, channel):
    p, r, publish = chan
    publish()
    frame = r.read(timeout=1)
    slot = frame.slot
    words = np.asarray(frame).view("<u8")[10:20]  # a slice keeps the base buffer
    copy = np.array(frame)  # a copy does not
    frame.release()
    del copy
    assert held_slots(channel) == [slot]
    del words
    assert held_slots(channel) == []


def test_reference_cycle_waits_for_gc_and_max_held_reports_it(chan, channel):
    """Documented: a frame in a reference cycle is released when the cycle collector runs.
    Until then max_held turns the leak into MaxHeld instead of exhausting the pool."""
    p, r, publish = chan
    gc.disable()
    try:
        publish()

        class Node:
            pass

        node = Node()
        node.frame = r.read(timeout=1)
        node.self = node  # a cycle
        slot = node.frame.slot
        del node
        assert held_slots(channel) == [slot]  # unreachable but not yet collected
        publish()
        with pytest.raises(ipcring.MaxHeld):
            r.try_read()
        gc.collect()
        assert held_slots(channel) == []
        assert r.try_read() is not None
    finally:
        gc.enable()


def test_frame_outlives_reader_close(chan, channel):
    p, r, publish = chan
    publish()
    frame = r.read(timeout=1)
    r.close()
    # The reader entry stays leased (and the slot held) until the frame goes.
    s = ipcring.inspect(channel)
    assert [e["held_slots"] for e in s["readers"]] == [[frame.slot]]
    assert ringtest.check_pattern(frame, frame.sequence)
    del frame
    assert ipcring.inspect(channel)["readers"] == []


def test_loan_view_outliving_discard_keeps_loan_out(channel):
    with ipcring.Producer(channel, slots=4, max_readers=1, frame_bytes=64) as p:
        loan = p.loan()
        view = np.asarray(loan)
        loan.discard()
        with pytest.raises(ipcring.LoanOutstanding):
            p.loan(timeout=0)
        del view  # the last reference to the discarded loan: its slot returns
        p.loan(timeout=0).discard()
