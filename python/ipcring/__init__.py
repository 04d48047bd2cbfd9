"""ipcring: zero-copy frames between processes on one machine.

A :class:`Producer` creates a named channel and publishes frames into a fixed pool of
shared-memory buffers; any number of :class:`Reader` objects (up to ``max_readers``) attach to
it by name and read frames without a copy. A :class:`Frame` holds its slot until it is released
(``with``, :meth:`Frame.release`, or dropping the last reference); ``torch.from_dlpack(frame)``,
``numpy.asarray(frame)`` and ``memoryview(frame)`` share the frame's memory and keep its slot held
while they live.

Reference: docs/python.md in the source tree.
"""

from ._errors import (  # noqa: F401
    BackendError, ChannelBusy, ConfigMismatch, CorruptSegment, CudaError, Errc, Error, Evicted,
    Forked, InvalidArgument, InvalidConfig, InvalidLoan, InvalidName, LoanOutstanding, MaxHeld,
    NoFreeSlot, NoSpace, NotFound, NotReady, PermissionDenied, ProducerExists, ProducerGone, Status,
    SystemError, Timeout, TooManyReaders, Unsupported, VersionMismatch)
from ._ipcring import (  # noqa: F401
    Frame, Loan, Producer, Reader, __version__, inspect, layout_version, list_channels,
    reap_dead_readers, remove_channel, validate_name)


def install_signal_handlers(signals=None, exit_code=0):
    """Make SIGTERM (``systemctl stop``, ``docker stop``, ``kill``) and SIGHUP end the program as
    Ctrl-C would: by an exception that unwinds ``with`` blocks and runs ``close()``, so the
    Producer removes its channel as ringpub does, instead of dying at once and leaving it stale.

    Python's default for SIGTERM is the operating system's: the process ends on the spot, no
    ``finally`` runs, and the channel's objects stay in /dev/shm (``ringdump list`` shows them
    ``stale`` until a new producer takes them over or ``ringdump gc`` removes them). After this
    call each of `signals` (default: SIGTERM and SIGHUP) raises ``SystemExit(exit_code)`` in the
    main thread; blocking calls (``read``, ``loan``, ``Reader(..., wait_for_channel=...)``) see it
    within about 50 ms. SIGINT keeps Python's KeyboardInterrupt. Returns the previous handlers, a
    dict by signal number, for ``signal.signal`` to put back. Call it from the main thread.
    """
    import signal as _signal

    if signals is None:
        signals = (_signal.SIGTERM, _signal.SIGHUP)

    def _exit(signum, frame):  # noqa: ARG001 (signal handler signature)
        raise SystemExit(exit_code)

    return {int(s): _signal.signal(s, _exit) for s in signals}
