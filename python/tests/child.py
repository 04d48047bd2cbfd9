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


def tensor_frames():
    """The two frames of the tensor tests: a (480, 640, 3) uint8 image and a (3, 64, 64) float32
    feature map, with values derived from their index."""
    import numpy as np
    import torch
    image = (np.arange(480 * 640 * 3) % 251).astype(np.uint8).reshape(480, 640, 3)
    features = torch.arange(3 * 64 * 64, dtype=torch.float32).reshape(3, 64, 64) / 7
    return image, features


def tensor_producer(name):
    """Creates the channel, waits for 'go' on stdin, sends tensor_frames() (with capture times
    and metadata), then keeps the channel until stdin closes."""
    image, features = tensor_frames()
    with ipcring.Producer(name, slots=6, max_readers=4, max_held=2, frame_bytes=1 << 20) as p:
        print("ready", flush=True)
        sys.stdin.readline()
        p.send(image, capture_time_ns=1111, metadata=b"camera front")
        p.send(features, capture_time_ns=2222, metadata=bytes([0, 1, 2, 255]))
        print("sent", flush=True)
        sys.stdin.read()


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


def service_producer(name, handlers):
    """A producer as a service runs it: publishes until stopped. handlers == "yes": with
    ipcring.install_signal_handlers(), so SIGTERM ends it through its `with` block."""
    if handlers == "yes":
        ipcring.install_signal_handlers()
    with ipcring.Producer(name, slots=4, max_readers=1, frame_bytes=256) as p:
        print("ready", flush=True)
        try:
            while True:
                with p.loan(timeout=5) as loan:
                    loan.write(ringtest.pattern(loan.sequence, 256))
                    p.publish(loan, 256)
                time.sleep(0.01)
        finally:
            print("stopping", flush=True)


if __name__ == "__main__":
    role = sys.argv[1]
    globals()[role](*sys.argv[2:])
