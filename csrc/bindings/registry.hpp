// Each bindings file adds its part of gdsio._core through a static
// registrar, so that a new area (image decode, transforms) adds a file and
// touches neither module.cpp nor the others.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

namespace gdsio::bindings {

using Exporter = void (*)(pybind11::module_&);

inline std::vector<std::pair<std::string, Exporter>>& exporters() {
  static std::vector<std::pair<std::string, Exporter>> v;
  return v;
}

struct Registrar {
  Registrar(const char* name, Exporter f) { exporters().emplace_back(name, f); }
};

}  // namespace gdsio::bindings

// GDSIO_EXPORT(transforms) { m.def(...); } in one .cpp file under csrc/bindings/.
#define GDSIO_EXPORT(name)                                                       \
  static void gdsio_export_##name(pybind11::module_& m);                         \
  static ::gdsio::bindings::Registrar gdsio_registrar_##name(#name, &gdsio_export_##name); \
  static void gdsio_export_##name(pybind11::module_& m)
