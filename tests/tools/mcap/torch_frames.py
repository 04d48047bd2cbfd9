"""A Python producer of torch tensors and a reader that checks them, for the MCAP tests.

    torch_frames.py produce NAME SECONDS   publishes float32 (2, 3, 4) tensors at 100 Hz:
                                           arange(24) + frame number, metadata b"torch"
    torch_frames.py check NAME COUNT       reads COUNT frames in order and checks each one's
                                           shape, dtype, values and metadata; exit 1 when wrong
"""
import sys
import time

import ipcring
import torch


def produce(name, seconds):
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    end = time.monotonic() + seconds
    with ipcring.Producer(name, frame_bytes=4096) as p:
        i = 0
        while time.monotonic() < end:
            p.send(base + i, capture_time_ns=time.monotonic_ns(), metadata=b"torch")
            i += 1
            time.sleep(0.01)


def check(name, count):
    bad = 0
    with ipcring.Reader(name, policy="sequential", wait_for_channel=20) as r:
        for n in range(count):
            with r.read(timeout=20) as f:
                t = torch.from_dlpack(f).clone()
                meta = f.metadata
            if t.shape != (2, 3, 4) or t.dtype != torch.float32 or meta != b"torch":
                print(f"torch_frames {name}: frame {n}: {tuple(t.shape)} {t.dtype} {meta!r}",
                      file=sys.stderr)
                bad += 1
                continue
            want = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) + t.flatten()[0]
            if not torch.equal(t, want):
                print(f"torch_frames {name}: frame {n}: values {t.flatten().tolist()}",
                      file=sys.stderr)
                bad += 1
    print(f"torch_frames {name}: checked={count} bad={bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "produce":
        produce(sys.argv[2], float(sys.argv[3]))
    else:
        sys.exit(check(sys.argv[2], int(sys.argv[3])))
