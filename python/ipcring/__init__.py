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
