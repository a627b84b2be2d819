// Paths as Python holds them (str, bytes, os.PathLike) into the file
// system's bytes, as os.fsencode makes them: a str with surrogate escapes (a
// name os.listdir gave that is not UTF-8) reaches the file it names.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace gdsio::bindings {

inline std::string fs_path(const pybind11::handle& path) {
  namespace py = pybind11;
  py::object p = py::reinterpret_steal<py::object>(PyOS_FSPath(path.ptr()));  // TypeError for other types
  if (!p) throw py::error_already_set();
  if (PyUnicode_Check(p.ptr())) {
    p = py::reinterpret_steal<py::object>(PyUnicode_EncodeFSDefault(p.ptr()));
    if (!p) throw py::error_already_set();
  }
  char* data = nullptr;
  Py_ssize_t n = 0;
  if (PyBytes_AsStringAndSize(p.ptr(), &data, &n) != 0) throw py::error_already_set();
  return std::string(data, static_cast<std::size_t>(n));
}

}  // namespace gdsio::bindings
