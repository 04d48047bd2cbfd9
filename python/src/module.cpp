// module.cpp — the extension ipcring._ipcring: Producer, Loan, Reader, Frame, inspect and friends.
//
// One file per class (bindings.hpp); this one registers them. Waiting calls (Reader.read,
// Producer.loan) release the GIL and check signals between slices (common.hpp); frames are
// released by reference counting, never by the garbage collector alone (state.hpp, frame.cpp).
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "errors.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_ipcring, m) {
  using namespace ipcring;
  using namespace ipcring::python;
  m.doc() = "ipcring: zero-copy frames between processes (compiled part; import ipcring)";
  init_errors(m);
  m.attr("__version__") = kVersion;

  bind_frame(m);
  bind_loan(m);
  bind_producer(m);
  bind_reader(m);
  bind_functions(m);

  // The public classes are re-exported by the package: show them as ipcring.X.
  for (const char* name : {"Frame", "Loan", "Producer", "Reader"}) {
    m.attr(name).attr("__module__") = "ipcring";
  }
}
