"""Child processes of the ipcring Python tests: python3 child.py ROLE ARGS...

Roles print one line per milestone on stdout (flushed) so the parent can synchronise on them.
"""

import os
import signal
import sys
import time

import ipcring
import ringtest


def producer(name, slots, readers, max_held, frame_bytes, count, rate):
    """Publishes `count` pattern frames at `rate` Hz, then keeps the channel until stdin closes."""
    slots, readers, max_held, frame_bytes, count = map(int, (slots, readers, max_held,
                                                             frame_bytes, count))
    rate = float(rate)
    with ipcring.Producer(name, slots=slots, max_readers=readers, max_held=max_held,
                          frame_bytes=frame_bytes) as p:
        print("ready", flush=True)
        for _ in range(count):
            with p.loan(timeout=5) as loan:
                loan.write(ringtest.pattern(loan.sequence, frame_bytes))
                p.publish(loan, frame_bytes)
            if rate > 0:
                time.sleep(1.0 / rate)
        print("published %d" % count, flush=True)
        sys.stdin.read()  # the parent closes our stdin when it is done reading


def holder(name):
    """Reads one frame, keeps only a torch tensor of it (the Frame object is gone), waits."""
    import torch
    reader = ipcring.Reader(name)
    frame = reader.read(timeout=10)
    tensor = torch.from_dlpack(frame)
    slot, address = frame.slot, frame.address
    ok = tensor.data_ptr() == address
    del frame  # the tensor alone holds the slot now
    print("holding slot=%d shares=%d pid=%d" % (slot, ok, os.getpid()), flush=True)
    while True:
        time.sleep(1)
        tensor.sum()  # keep using it


def waiting_reader(name):
    """Waits in Reader(wait_for_channel=600) for a channel nobody creates, until SIGINT."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print("waiting", flush=True)
    try:
        ipcring.Reader(name, wait_for_channel=600)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return
    print("attach returned", flush=True)


def blocked_reader(name):
    """Blocks in read() with no timeout until SIGINT; reports when KeyboardInterrupt arrived."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    reader = ipcring.Reader(name)
    print("reading", flush=True)
    try:
        reader.read()
    except KeyboardInterrupt:
        print("interrupted %d" % time.monotonic_ns(), flush=True)
        return
    print("read returned", flush=True)


if __name__ == "__main__":
    role = sys.argv[1]
    globals()[role](*sys.argv[2:])
