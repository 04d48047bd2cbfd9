// views.hpp — zero-copy views of frames and loans: the buffer protocol and DLPack.
//
// Frames: every view (memoryview, numpy array, DLPack tensor) holds a reference to the frame's
// FrameHold, so the slot stays held until the last view dies, whatever happens to the Frame
// object. Buffer views are read-only (the reader maps the pool PROT_READ); DLPack 0.6 has no
// read-only flag, so a tensor made from a frame must not be written (the write faults).
//
// Loans: views are writable and counted in LoanState::exports; publish() refuses while one lives.
//
// Devices: host frames export kDLCPU. CUDA frames will export kDLCUDA (and
// __cuda_array_interface__ v3), making the consumer's stream wait on the frame's write-done event
// (Frame::wait_on) before the capsule is returned; until the Python module implements that, every
// entry point refuses CUDA with ipcring.Unsupported (see require_supported_backend()).
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
py::object frame_dlpack(const PyFrame& frame, const py::object& stream);
py::object loan_dlpack(PyLoan& loan, const py::object& stream);
// A DLPack capsule of a loan typed as `tensor` (already checked against the capacity).
py::object loan_dlpack_typed(PyLoan& loan, const TensorDesc& tensor);
py::tuple dlpack_device(const Device& device);

// Device of a backend's buffers in this process; throws ipcring::Error(unsupported) for backends
// the Python module cannot export yet.
Device device_for_backend(Backend backend, int cuda_device, const std::string& channel);

}  // namespace ipcring::python
