// bindings.hpp — the pieces of the extension ipcring._ipcring, one per Python class.
//
// PYBIND11_MODULE (module.cpp) registers them in this order: frame views and Frame (frame.cpp),
// loan views and Loan (loan.cpp), Producer (producer.cpp), Reader (reader.cpp), then the
// functions inspect, list_channels, remove_channel ... (snapshot.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

#include "ipcring/ipcring.hpp"
#include "state.hpp"

namespace ipcring::python {

namespace py = pybind11;

void bind_frame(py::module_& m);
void bind_loan(py::module_& m);
void bind_producer(py::module_& m);
void bind_reader(py::module_& m);
void bind_functions(py::module_& m);

// Loan.set_metadata and Producer.send(metadata=...): up to the channel's metadata_bytes.
void set_loan_metadata(PyLoan& l, const py::bytes& metadata);

// Loan.tensor(shape, dtype): a writable torch tensor over the loan (kDLCUDA on a CUDA channel).
py::object loan_tensor(PyLoan& l, const py::object& shape, const py::object& dtype);

// The raw Snapshot under ringdump's JSON names (ipcring.inspect()).
py::dict snapshot_dict(const Snapshot& s);

}  // namespace ipcring::python
