// errors.cpp — the exception table and the ipcring::Error translator.
#include "errors.hpp"

#include <array>
#include <exception>
#include <string>
#include <utility>

namespace ipcring::python {

namespace {

// Values of Errc are 1..17 and of Status 0..9 today; the tables leave room to grow. Entries are
// strong references kept for the life of the process (the module is never unloaded).
constexpr int kMaxCode = 64;
PyObject* g_base = nullptr;
std::array<PyObject*, kMaxCode> g_by_errc{};
std::array<PyObject*, kMaxCode> g_by_status{};

void fill(std::array<PyObject*, kMaxCode>& table, const py::dict& by_value) {
  for (auto item : by_value) {
    const int value = py::int_(py::reinterpret_borrow<py::object>(item.first));
    if (value < 0 || value >= kMaxCode) continue;
    table[static_cast<std::size_t>(value)] =
        py::reinterpret_borrow<py::object>(item.second).release().ptr();
  }
}

}  // namespace

std::string python_spelling(Errc code, std::string message) {
  // The library speaks C++ (Backend::host); a Python user passes backend='host'. The longer
  // names first: "Backend::cuda" is the start of "Backend::cuda_vmm".
  for (const auto& [cpp, py] :
       {std::pair<const char*, const char*>{"Backend::host", "backend='host'"},
        {"Backend::cuda_legacy", "backend='cuda_legacy'"},
        {"Backend::cuda_vmm", "backend='cuda_vmm'"},
        {"Backend::cuda", "backend='cuda'"}}) {
    const std::string from = cpp;
    for (auto at = message.find(from); at != std::string::npos;
         at = message.find(from, at + std::char_traits<char>::length(py))) {
      message.replace(at, from.size(), py);
    }
  }
  // What to do, in the Producer's and Reader's own words.
  if (code == Errc::too_many_readers) {
    message +=
        "; the producer's Producer(max_readers=N) (ringpub --readers N) sizes the reader "
        "entries, and ipcring.inspect() takes none";
  } else if (code == Errc::config_mismatch) {
    message +=
        "; stop the readers, or create the Producer with the channel's geometry "
        "(ipcring.inspect(name) shows it)";
  }
  return message;
}

std::string channel_prefix(const std::string& name) {
  return ipcring::channel_prefix(name);
}

PyObject* error_class(Errc code) noexcept {
  const int v = static_cast<int>(code);
  if (v >= 0 && v < kMaxCode && g_by_errc[static_cast<std::size_t>(v)] != nullptr) {
    return g_by_errc[static_cast<std::size_t>(v)];
  }
  return g_base != nullptr ? g_base : PyExc_RuntimeError;
}

PyObject* status_class(Status status) noexcept {
  const int v = static_cast<int>(status);
  if (v >= 0 && v < kMaxCode && g_by_status[static_cast<std::size_t>(v)] != nullptr) {
    return g_by_status[static_cast<std::size_t>(v)];
  }
  return g_base != nullptr ? g_base : PyExc_RuntimeError;
}

void raise_errc(Errc code, const std::string& message) {
  PyErr_SetString(error_class(code), message.c_str());
  throw py::error_already_set();
}

void raise_status(Status status, const std::string& message) {
  PyErr_SetString(status_class(status), message.c_str());
  throw py::error_already_set();
}

void raise_buffer_error(const std::string& message) {
  PyErr_SetString(PyExc_BufferError, message.c_str());
  throw py::error_already_set();
}

void set_python_error_from_current_exception() noexcept {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const ipcring::Error& e) {
    PyErr_SetString(error_class(e.code()), python_spelling(e.code(), e.what()).c_str());
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "ipcring: unknown C++ exception");
  }
}

void init_errors(py::module_& m) {
  py::module_ errors = py::module_::import("ipcring._errors");
  g_base = py::object(errors.attr("Error")).release().ptr();
  fill(g_by_errc, errors.attr("BY_ERRC"));
  fill(g_by_status, errors.attr("BY_STATUS"));

  // The enums in _errors.py must name the C++ values as to_string() does: a drift is an import
  // error, not a wrong exception at run time.
  py::object errc_enum = errors.attr("Errc");
  for (auto member : errc_enum) {
    const int v = py::int_(py::reinterpret_borrow<py::object>(member));
    const std::string py_name = py::str(member.attr("name"));
    const std::string cpp_name = to_string(static_cast<Errc>(v));
    if (py_name != cpp_name) {
      throw py::import_error("ipcring: ipcring._errors.Errc." + py_name + " = " +
                             std::to_string(v) + " but C++ Errc " + std::to_string(v) + " is " +
                             cpp_name);
    }
  }
  py::object status_enum = errors.attr("Status");
  for (auto member : status_enum) {
    const int v = py::int_(py::reinterpret_borrow<py::object>(member));
    const std::string py_name = py::str(member.attr("name"));
    const std::string cpp_name = to_string(static_cast<Status>(v));
    if (py_name != cpp_name) {
      throw py::import_error("ipcring: ipcring._errors.Status." + py_name + " = " +
                             std::to_string(v) + " but C++ Status " + std::to_string(v) + " is " +
                             cpp_name);
    }
  }

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ipcring::Error& e) {
      PyErr_SetString(error_class(e.code()), python_spelling(e.code(), e.what()).c_str());
    }
  });

  // For tests and tools: the C++ names of codes 0..kMaxCode-1 ("unknown" past the last one).
  m.def("_cpp_errc_names", [] {
    py::dict d;
    for (int v = 1; v < kMaxCode; ++v) {
      const char* n = to_string(static_cast<Errc>(v));
      if (std::string(n) != "unknown") d[py::int_(v)] = n;
    }
    return d;
  });
  m.def("_cpp_status_names", [] {
    py::dict d;
    for (int v = 0; v < kMaxCode; ++v) {
      const char* n = to_string(static_cast<Status>(v));
      if (std::string(n) != "unknown") d[py::int_(v)] = n;
    }
    return d;
  });
}

}  // namespace ipcring::python
