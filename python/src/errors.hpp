// errors.hpp — C++ errors and hot-path statuses as Python exceptions.
//
// The exception classes are defined in Python (ipcring/_errors.py) so they can derive from the
// built-in exceptions Python users expect; init_errors() imports that module once and keeps the
// classes. ipcring::Error thrown anywhere below a binding becomes the class of its Errc (a
// translator registered with pybind11); a Status becomes the class of that status.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "ipcring/ipcring.hpp"

namespace ipcring::python {

namespace py = pybind11;

// Imports ipcring._errors, checks it against the C++ enums, registers the translator.
void init_errors(py::module_& m);

// The Python class for a code or status (ipcring.Error for an unknown one). Borrowed reference.
PyObject* error_class(Errc code) noexcept;
PyObject* status_class(Status status) noexcept;

// Set the Python error and throw py::error_already_set.
[[noreturn]] void raise_errc(Errc code, const std::string& message);
[[noreturn]] void raise_status(Status status, const std::string& message);
[[noreturn]] void raise_buffer_error(const std::string& message);

// For raw CPython slots (buffer protocol): converts the active C++ exception into a Python error.
// Call only from a catch block.
void set_python_error_from_current_exception() noexcept;

// "ipcring: channel 'NAME': "
// A library message in Python's words: backend='host' for Backend::host, and for
// too_many_readers and config_mismatch what to do about it.
std::string python_spelling(Errc code, std::string message);

std::string channel_prefix(const std::string& name);

}  // namespace ipcring::python
