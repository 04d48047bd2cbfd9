"""GPU check of the Python module's CUDA frame path (tests/gpu/README.md; run by run.sh).

    python3 tests/gpu/python_cuda_frames.py            # needs ipcring (PYTHONPATH) and torch with CUDA

A producer process and a reader process (this one) on a Backend::cuda channel, torch on both sides:

  * wait:    the producer delays its stream (torch.cuda._sleep) before its copy into the loan, so
             a reader that did not make its stream wait for the producer's write-done event reads
             the previous contents. The reader checks every frame through torch.from_dlpack(frame)
             (whose __dlpack__(stream) call must make torch's current stream wait) and through
             loan.tensor()-filled frames;
  * release: the reader queues a long sleep and then a clone of the frame's tensor on its stream,
             releases the frame at once (the `with` block ends) and drops the tensor, while the
             producer tries to overwrite the slot as soon as it can; the clone must show the frame's
             own values, so the producer's reuse waited for the reader's queued work (the release
             fence on torch's stream) without a CPU sync on the reader's side;
  * the __cuda_array_interface__ dict points at the same memory and names a stream.

Exit 0: passed; 77: skipped (no torch with CUDA, no GPU, or no ipcring module; the reason is
printed); 1: failed.
"""

import os
import subprocess
import sys
import time

SKIP = 77


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(SKIP)


try:
    import torch
except ImportError as e:
    skip(f"torch is not installed ({e})")
if not torch.cuda.is_available():
    skip("torch.cuda.is_available() is False (no GPU, no driver, or a CPU-only torch)")
try:
    import ipcring
except ImportError as e:
    skip(f"the ipcring Python module is not importable ({e}); set PYTHONPATH")

SHAPE = (3, 256, 256)
FRAMES = 40
SLEEP_CYCLES = 20_000_000  # ~10 ms at 2 GHz: far longer than a copy of 768 KiB


def value(seq):
    return float(seq % 1000 + 1)


def producer(name):
    torch.cuda.set_device(0)
    nbytes = 4 * SHAPE[0] * SHAPE[1] * SHAPE[2]
    with ipcring.Producer(name, slots=3, max_readers=1, max_held=1, frame_bytes=nbytes,
                          backend="cuda", cuda_device=0) as p:
        print("producer: ready", flush=True)
        deadline = time.monotonic() + 60
        k = 0
        while k < 2 * FRAMES and time.monotonic() < deadline:
            v = value(k)  # also sent as the frame's metadata, for the reader to compare
            if k % 2 == 0:
                # send(): a device-to-device copy on torch's current stream, after a delay there.
                src = torch.full(SHAPE, v, dtype=torch.float32, device="cuda")
                torch.cuda._sleep(SLEEP_CYCLES)
                p.send(src, metadata=repr(v).encode(), timeout=10)
            else:
                # loan.tensor(): filled in place on torch's current stream, after a delay.
                loan = p.loan(timeout=10)
                loan.set_metadata(repr(v).encode())
                t = loan.tensor(SHAPE, torch.float32)
                torch.cuda._sleep(SLEEP_CYCLES)
                t.fill_(v)
                del t
                p.publish(loan)
            k += 1
            time.sleep(0.005)
        torch.cuda.synchronize()
        time.sleep(1)  # the reader detaches first
    print(f"producer: published {k} frames", flush=True)


def reader(name):
    torch.cuda.set_device(0)
    child = subprocess.Popen([sys.executable, __file__, "--producer", name],
                             stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        if "ready" not in line:
            print(f"FAILED: the producer did not start ({line!r})")
            return 1
        r = ipcring.Reader(name, policy="sequential", wait_for_channel=10)
        bad_wait = bad_release = checked = fenced = 0
        cai_ok = False
        deadline = time.monotonic() + 60
        while checked < FRAMES and time.monotonic() < deadline:
            try:
                f = r.read(timeout=5)
            except ipcring.Timeout:
                break
            with f:
                assert f.__dlpack_device__() == (2, 0), f.__dlpack_device__()
                y = torch.from_dlpack(f)  # torch's current stream waits for the producer
                assert y.is_cuda and tuple(y.shape) == SHAPE and y.dtype == torch.float32
                if not cai_ok:
                    cai = f.__cuda_array_interface__
                    cai_ok = (cai["version"] == 3 and cai["data"][0] == y.data_ptr()
                              and cai["typestr"] == "<f4" and cai["stream"] not in (None, 0))
                want = float(f.metadata.decode())
                if checked % 2 == 0:
                    lo, hi = torch.aminmax(y)
                    if lo.item() != want or hi.item() != want:
                        bad_wait += 1
                else:
                    # Release with work still queued: the clone runs after a long sleep.
                    torch.cuda._sleep(5 * SLEEP_CYCLES)
                    z = y.clone()
                    fenced += 1
            del y  # the last view: the release fence goes on torch's stream
            if checked % 2 == 1:
                lo, hi = torch.aminmax(z)
                if lo.item() != want or hi.item() != want:
                    bad_release += 1
                del z
            checked += 1
        r.close()
        child.wait(timeout=60)
        print(f"reader: {checked} frames checked, {fenced} released with queued work; "
              f"stale reads {bad_wait}, overwritten under queued work {bad_release}; "
              f"__cuda_array_interface__ {'ok' if cai_ok else 'WRONG'}")
        if checked < FRAMES // 2 or bad_wait or bad_release or not cai_ok or child.returncode:
            print(f"FAILED (producer exit {child.returncode})")
            return 1
        print("PASSED")
        return 0
    finally:
        if child.poll() is None:
            child.kill()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--producer":
        producer(sys.argv[2])
        sys.exit(0)
    sys.exit(reader(f"gpu-py-{os.getpid()}"))
