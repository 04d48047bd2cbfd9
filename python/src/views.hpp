// views.hpp — zero-copy views of frames and loans: the buffer protocol and DLPack.
//
// Frames: every view (memoryview, numpy array, DLPack tensor) holds a reference to the frame's
// FrameHold, so the slot stays held until the last view dies, whatever happens to the Frame
// object. Buffer views are read-only (the reader maps the pool PROT_READ); DLPack 0.6 has no
// read-only flag, so a tensor made from a frame must not be written (the write faults).
//
// Loans: views are writable and counted in LoanState::exports; publish() refuses while one lives.
//
// Devices: host frames export kDLCPU. CUDA frames export kDLCUDA (and __cuda_array_interface__
// v3): the consumer's stream is made to wait on the frame's write-done event (Frame::wait_on)
// before the capsule or dict is returned, and that stream is remembered in the FrameHold, whose
// destructor queues the release fence on it (Frame::release(stream)). CUDA loans export kDLCUDA
// too; the stream a consumer names is where publish() records the write-done event.
#pragma once

#include <pybind11/pybind11.h>

#include "state.hpp"

namespace ipcring::python {

namespace py = pybind11;

// Installs the buffer-protocol slots on the pybind11 classes of Frame and Loan. A buffer view does
// not refer to the Frame or Loan but to a small keeper object (FrameView, LoanView) that owns the
// reference, so whoever keeps the view's `obj` (memoryview, numpy, torch.frombuffer) keeps the
// slot. Both classes also get a bf_releasebuffer (a no-op), which makes numpy.frombuffer wrap them
// in a memoryview instead of keeping the bare object.
void install_frame_buffer(py::handle frame_type);
void install_loan_buffer(py::handle loan_type);

// A frame's reference to its hold, as exported to buffer views (the class _FrameView).
struct FrameView {
  std::shared_ptr<FrameHold> hold;
  std::uint64_t sequence = 0;
  // A typed view's geometry (Py_buffer points at these while the view lives).
  Py_ssize_t shape[8] = {};
  Py_ssize_t strides[8] = {};
  std::string format;
};

// One live view of a loan: counted in LoanState::exports from construction to destruction.
class LoanExport {
 public:
  explicit LoanExport(std::shared_ptr<LoanState> state) : state_(std::move(state)) {
    state_->exports.fetch_add(1, std::memory_order_acq_rel);
  }
  LoanExport(const LoanExport&) = delete;
  LoanExport& operator=(const LoanExport&) = delete;
  ~LoanExport() { state_->exports.fetch_sub(1, std::memory_order_acq_rel); }

 private:
  std::shared_ptr<LoanState> state_;  // may be the last reference: drops a discarded loan
};

// A loan's buffer-view keeper (the class _LoanView).
struct LoanView {
  std::shared_ptr<LoanExport> token;
  std::uint64_t sequence = 0;
};

// __dlpack__(stream) and __dlpack_device__().
// max_version >= (1, 0): a DLPack 1.0 versioned capsule ("dltensor_versioned"; frames are flagged
// read-only); None or 0.x: a DLPack 0.6 capsule ("dltensor").
py::object frame_dlpack(const PyFrame& frame, const py::object& stream,
                        const py::object& max_version);
py::object loan_dlpack(PyLoan& loan, const py::object& stream, const py::object& max_version);
// A DLPack capsule of a loan typed as `tensor` (already checked against the capacity).
py::object loan_dlpack_typed(PyLoan& loan, const TensorDesc& tensor);
py::tuple dlpack_device(const Device& device);

// Device of a backend's buffers in this process (kDLCUDA ordinal `cuda_device` for CUDA).
Device device_for_backend(Backend backend, int cuda_device, const std::string& channel);

// DLPack's stream argument on CUDA (also __cuda_array_interface__'s numbering): None or 1 the
// legacy default stream, 2 the per-thread default stream, -1 no synchronisation (sync false),
// other positive ints a cudaStream_t; 0, other negatives and non-ints are InvalidArgument.
struct StreamArg {
  bool sync = true;
  std::uintptr_t value = 1;
};
StreamArg parse_stream(const py::object& stream, const std::string& channel, const char* what);

// __dlpack__'s newer keywords (array API 2023): copy=True and a dl_device other than the memory's
// are a BufferError; max_version is accepted and a DLPack 0.x capsule ("dltensor") returned, which
// the standard allows a producer without versioned capsules to do.
void check_dlpack_request(const Device& device, const std::string& channel,
                          const py::object& dl_device, const py::object& copy);

// The stream publish() records a CUDA loan's write-done event on (unless publish names one).
void set_write_stream(PyLoan& loan, std::uintptr_t stream);

// __cuda_array_interface__ (v3) of a held CUDA frame; the producer's write is visible on its
// `stream` (the frame's consumer stream, else 1) when it returns.
py::dict frame_cuda_array_interface(const PyFrame& frame);

// Frame.release(stream=...): the stream the release fence goes on (CUDA frames; None: keep).
void set_frame_release_stream(PyFrame& frame, const py::object& stream);

}  // namespace ipcring::python
