"""Exceptions and result codes of ipcring.

Every exception the module raises for a channel problem is an ``ipcring.Error``. Two families:

* slow-path errors (create, attach, inspect, remove): one class per C++ ``ipcring::Errc``, with
  ``code`` set to the matching :class:`Errc` member (same name and value as in C++);
* hot-path results (loan, read, try_read) that are not a frame: one class per C++
  ``ipcring::Status`` that can surface, with ``status`` set to the matching :class:`Status`.

``code`` and ``status`` are class attributes, so ``except ipcring.Error as e: e.code`` works on
every instance; the one not applicable is ``None``. Some classes also derive from the built-in
exception a Python user would expect (``Timeout`` is a ``TimeoutError``, ``NotFound`` a
``FileNotFoundError``, the ``Invalid*`` classes ``ValueError`` ...).

The C++ extension imports this module and raises these classes; the tests check that the enum
names and values here match the C++ ``to_string`` names.
"""

import enum


class Errc(enum.IntEnum):
    """Why a slow-path operation failed (C++ ``ipcring::Errc``; values are stable)."""

    invalid_name = 1
    invalid_config = 2
    not_found = 3
    producer_exists = 4
    version_mismatch = 5
    permission_denied = 6
    corrupt_segment = 7
    too_many_readers = 8
    config_mismatch = 9
    system_error = 10
    unsupported = 11
    forked = 12
    invalid_argument = 13
    channel_busy = 14
    cuda_error = 15
    not_ready = 16
    no_space = 17


class Status(enum.IntEnum):
    """Why the hot path returned no value (C++ ``ipcring::Status``)."""

    ok = 0
    no_free_slot = 1
    timeout = 2
    no_frame = 3
    producer_gone = 4
    evicted = 5
    max_held = 6
    loan_outstanding = 7
    forked = 8
    backend_error = 9
    invalid_loan = 10  # C++ Producer::try_publish only


class Error(Exception):
    """Base class of every ipcring exception."""

    #: :class:`Errc` member for slow-path errors, else None.
    code = None
    #: :class:`Status` member for hot-path results, else None.
    status = None


# ---- slow path: one class per Errc ------------------------------------------------------------

class InvalidName(Error, ValueError):
    """Channel name empty, too long, or with a bad part (see validate_name)."""
    code = Errc.invalid_name


class InvalidConfig(Error, ValueError):
    """Zero slots or frame bytes, too many readers, sizes that overflow ..."""
    code = Errc.invalid_config


class NotFound(Error, FileNotFoundError):
    """No such channel."""
    code = Errc.not_found


class ProducerExists(Error):
    """A live producer already owns the channel."""
    code = Errc.producer_exists


class VersionMismatch(Error):
    """The segment has another layout version, type sizes or libc."""
    code = Errc.version_mismatch


class PermissionDenied(Error, PermissionError):
    """Owner or mode of the segment refuses us."""
    code = Errc.permission_denied


class CorruptSegment(Error):
    """A value read from the segment is out of range."""
    code = Errc.corrupt_segment


class TooManyReaders(Error):
    """Every reader entry is held by a live reader."""
    code = Errc.too_many_readers


class ConfigMismatch(Error):
    """Takeover with a geometry that the live readers cannot follow."""
    code = Errc.config_mismatch


class SystemError(Error, OSError):  # noqa: A001 - the C++ name; reach it as ipcring.SystemError
    """A system call failed (errno in the message)."""
    code = Errc.system_error


class Unsupported(Error):
    """Backend not built in or not supported here (for example CUDA frames in this build)."""
    code = Errc.unsupported


class Forked(Error):
    """Object used in a child process created by fork(): use it in the parent only."""
    code = Errc.forked
    status = Status.forked


class InvalidArgument(Error, ValueError):
    """A precondition broken by the caller (payload larger than capacity, released frame ...)."""
    code = Errc.invalid_argument


class ChannelBusy(Error):
    """Removal refused: a live producer or reader uses the channel."""
    code = Errc.channel_busy


class CudaError(Error):
    """A CUDA call failed."""
    code = Errc.cuda_error


class NotReady(Error):
    """The object at the channel's name is not a finished segment."""
    code = Errc.not_ready


class NoSpace(Error):
    """/dev/shm cannot hold the channel (``docker run --shm-size=...`` or ``--ipc=host``)."""
    code = Errc.no_space


# ---- hot path: one class per Status that surfaces as an exception -----------------------------
# (no_frame is not an exception: try_read() returns None.)

class NoFreeSlot(Error):
    """loan(): every slot stayed held by readers for the whole timeout."""
    status = Status.no_free_slot


class Timeout(Error, TimeoutError):
    """read(timeout=...): no frame arrived in time."""
    status = Status.timeout


class ProducerGone(Error):
    """The producer closed or died. The reader stays attached: a new producer may take over."""
    status = Status.producer_gone


class Evicted(Error):
    """This reader's lease was taken away (reaped or repaired): attach a new Reader."""
    status = Status.evicted


class MaxHeld(Error):
    """This reader already holds max_held frames (views of released frames count)."""
    status = Status.max_held


class LoanOutstanding(Error):
    """The producer already has a loan out (or a view of a dropped loan is still alive)."""
    status = Status.loan_outstanding


class BackendError(Error):
    """The frame pool failed (CUDA error, mapping failure)."""
    status = Status.backend_error


class InvalidLoan(Error, ValueError):
    """A publish of a loan the producer cannot publish (C++ ``Producer::try_publish``)."""
    status = Status.invalid_loan


BY_ERRC = {cls.code: cls for cls in (
    InvalidName, InvalidConfig, NotFound, ProducerExists, VersionMismatch, PermissionDenied,
    CorruptSegment, TooManyReaders, ConfigMismatch, SystemError, Unsupported, Forked,
    InvalidArgument, ChannelBusy, CudaError, NotReady, NoSpace)}

BY_STATUS = {cls.status: cls for cls in (
    NoFreeSlot, Timeout, ProducerGone, Evicted, MaxHeld, LoanOutstanding, Forked, BackendError,
    InvalidLoan)}

__all__ = ["Errc", "Status", "Error"] + [c.__name__ for c in BY_ERRC.values()] + [
    c.__name__ for c in BY_STATUS.values() if c is not Forked]
