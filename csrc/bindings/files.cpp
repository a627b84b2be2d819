// gdsio._core file-list reads (gdsio/io/many.py read_many, read's small-file
// path, the raw loader). The GIL is released around all file work. Paths are
// str, bytes or os.PathLike, as open() takes them.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/paths.hpp"
#include "bindings/registry.hpp"
#include "core/error.hpp"
#include "io/many_files.hpp"

namespace py = pybind11;
using namespace gdsio;

GDSIO_EXPORT(files) {
  m.def(
      "file_sizes",
      [](const py::sequence& names, std::size_t threads) {
        std::vector<std::string> paths;
        paths.reserve(names.size());
        for (const auto& p : names) paths.push_back(bindings::fs_path(p));
        py::gil_scoped_release nogil;
        return file_sizes(paths, threads);
      },
      py::arg("paths"), py::kw_only(), py::arg("threads"), "The byte size of every path (stat, in parallel).");

  m.def(
      "read_paths",
      [](const py::sequence& reqs, std::size_t threads) {
        std::vector<PathRead> reads;
        reads.reserve(reqs.size());
        for (const auto& item : reqs) {
          const auto r = item.cast<py::tuple>();
          if (r.size() != 4) throw py::value_error("reads: each entry is (path, dst_ptr, size, file_offset)");
          reads.push_back(PathRead{bindings::fs_path(r[0]), reinterpret_cast<void*>(r[1].cast<std::uintptr_t>()),
                                   r[2].cast<std::uint64_t>(), r[3].cast<std::uint64_t>()});
        }
        py::gil_scoped_release nogil;
        return read_paths(reads, threads);
      },
      py::arg("reads"), py::kw_only(), py::arg("threads"),
      "Reads [(path, dst_ptr, size, file_offset), ...] over the thread pool; returns the bytes read.");

  m.def(
      "read_whole_file",
      [](const py::object& name, std::uint64_t max_bytes) -> py::object {
        const std::string path = bindings::fs_path(name);
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

  m.def(
      "read_file_into",
      [](const py::object& name, std::uintptr_t dst, std::uint64_t nbytes) {
        const std::string path = bindings::fs_path(name);
        GDSIO_EXPECT(dst != 0 || nbytes == 0, ValueError, "dst: null pointer");
        py::gil_scoped_release nogil;
        return read_file_into(path, reinterpret_cast<void*>(dst), nbytes);
      },
      py::arg("path"), py::arg("dst"), py::arg("nbytes"),
      "The first nbytes of a file into host memory at dst in one pread; nbytes, or -1 when the file is shorter or "
      "a block device (the caller's general path then decides).");
}
