"""A Python reader follows its channel by name across a clean producer restart: it gets the frames
of both producers (the second with another frame size) and ProducerGone exactly once."""

import subprocess
import time

import ipcring
import ringtest


def read_frames(reader, want, gone):
    """Reads until `want` frames came (each checked against its pattern); returns their sizes.
    ProducerGone is counted in gone[0]."""
    sizes = []
    deadline = time.monotonic() + 20
    while len(sizes) < want and time.monotonic() < deadline:
        try:
            with reader.read(timeout=1) as frame:
                assert ringtest.check_pattern(frame, frame.sequence)
                sizes.append(frame.size)
        except ipcring.Timeout:
            pass
        except ipcring.ProducerGone:
            gone[0] += 1
    return sizes


def start_producer(channel, frame_bytes):
    proc = ringtest.spawn_child("producer", channel, 8, 2, 1, frame_bytes, 300, 100,
                                stdin=subprocess.PIPE)
    ringtest.expect_line(proc, "ready")
    return proc


def stop_producer(proc):
    proc.stdin.close()  # it exits cleanly after its frames: the channel's name is unlinked
    proc.wait(timeout=30)
    proc.stdout.close()
    assert proc.returncode == 0


def test_reader_follows_a_clean_restart(channel):
    gone = [0]
    first = start_producer(channel, 4096)
    try:
        reader = ipcring.Reader(channel, wait_for_channel=10)
        assert read_frames(reader, 3, gone) == [4096] * 3
    finally:
        stop_producer(first)
    second = start_producer(channel, 8192)
    try:
        sizes = read_frames(reader, 3, gone)
    finally:
        stop_producer(second)
    assert sizes == [8192] * 3  # the second producer's frames, in its geometry
    assert gone[0] == 1  # exactly once, for the producer that ended
