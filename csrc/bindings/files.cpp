// gdsio._core file-list reads (gdsio/io.py read_many, read's small-file path,
// the raw loader). The GIL is released around all file work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/registry.hpp"
#include "io/many_files.hpp"

namespace py = pybind11;
using namespace gdsio;

GDSIO_EXPORT(files) {
  m.def(
      "file_sizes",
      [](const std::vector<std::string>& paths, std::size_t threads) {
        py::gil_scoped_release nogil;
        return file_sizes(paths, threads);
      },
      py::arg("paths"), py::kw_only(), py::arg("threads"), "The byte size of every path (stat, in parallel).");

  using Req = std::tuple<std::string, std::uintptr_t, std::uint64_t, std::uint64_t>;
  m.def(
      "read_paths",
      [](const std::vector<Req>& reqs, std::size_t threads) {
        std::vector<PathRead> reads;
        reads.reserve(reqs.size());
        for (const auto& [path, dst, size, off] : reqs) reads.push_back(PathRead{path, reinterpret_cast<void*>(dst), size, off});
        py::gil_scoped_release nogil;
        return read_paths(reads, threads);
      },
      py::arg("reads"), py::kw_only(), py::arg("threads"),
      "Reads [(path, dst_ptr, size, file_offset), ...] over the thread pool; returns the bytes read.");

  m.def(
      "read_whole_file",
      [](const std::string& path, std::uint64_t max_bytes) -> py::object {
        void* data = nullptr;
        std::uint64_t n;
        {
          py::gil_scoped_release nogil;
          n = read_whole_file(path, max_bytes, &data);
        }
        if (data == nullptr) return py::int_(n);
        py::capsule owner(data, [](void* p) { std::free(p); });
        return py::array_t<std::uint8_t>({static_cast<py::ssize_t>(n)}, {1}, static_cast<std::uint8_t*>(data), owner);
      },
      py::arg("path"), py::kw_only(), py::arg("max_bytes"),
      "A whole file as a 1-D uint8 numpy array owning its memory, or its size (an int) when larger than max_bytes.");
}
