// Results the core hands back: bound structs with read-only fields (not
// dicts), a repr listing them, and `_fields` (their names, as a namedtuple
// has) for the Python code that builds the public dicts gdsio shows users.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

namespace gdsio::bindings {

// result_struct<CudaStatus>(m, "CudaStatus", "...", std::pair{"device_count", &CudaStatus::device_count}, ...)
template <class C, class... M>
pybind11::class_<C> result_struct(pybind11::module_& m, const char* name, const char* doc,
                                  std::pair<const char*, M C::*>... fields) {
  namespace py = pybind11;
  py::class_<C> c(m, name, doc);
  (c.def_readonly(fields.first, fields.second), ...);
  std::vector<std::string> names{fields.first...};
  py::tuple field_names(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) field_names[i] = py::str(names[i]);
  c.attr("_fields") = field_names;
  c.def("__repr__", [names, type = std::string(name)](py::handle self) {
    std::string s = type + "(";
    for (std::size_t i = 0; i < names.size(); ++i)
      s += (i ? ", " : "") + names[i] + "=" + std::string(py::repr(self.attr(names[i].c_str())));
    return s + ")";
  });
  return c;
}

}  // namespace gdsio::bindings
