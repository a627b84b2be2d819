// gdsio._core file-list reads (gdsio/io/many.py read_many, read's small-file
// path, the raw loader). The GIL is released around all file work. Paths are
// str, bytes or os.PathLike, as open() takes them.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/arrays.hpp"
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
      [](py::handle dst, const py::sequence& reqs, std::size_t threads) {
        // One view of the one buffer every read goes into, each range checked
        // against it: a view per file would cost more than many small reads.
        const bindings::Array d = bindings::view(dst, "dst");
        d.on(-1).writable().is_dense();
        const std::uint64_t have = static_cast<std::uint64_t>(d.numel()) * d.dtype.itemsize();
        std::vector<PathRead> reads;
        reads.reserve(reqs.size());
        for (std::size_t i = 0; i < reqs.size(); ++i) {
          const auto r = reqs[i].cast<py::tuple>();
          if (r.size() != 4)
            throw py::value_error("reads[" + std::to_string(i) + "]: expected (path, dst_offset, size, file_offset)");
          const auto off = r[1].cast<std::int64_t>(), size = r[2].cast<std::int64_t>();
          const auto file_offset = r[3].cast<std::int64_t>();
          if (off < 0 || size < 0 || file_offset < 0)
            throw ValueError("reads[" + std::to_string(i) + "]: dst_offset, size and file_offset must not be negative");
          if (static_cast<std::uint64_t>(size) > have || static_cast<std::uint64_t>(off) > have - size)
            throw ValueError("dst: holds " + std::to_string(have) + " bytes; reads[" + std::to_string(i) + "] writes " +
                             std::to_string(size) + " at offset " + std::to_string(off));
          reads.push_back(PathRead{bindings::fs_path(r[0]), reinterpret_cast<void*>(d.data + off),
                                   static_cast<std::uint64_t>(size), static_cast<std::uint64_t>(file_offset)});
        }
        py::gil_scoped_release nogil;
        return read_paths(reads, threads);
      },
      py::arg("dst"), py::arg("reads"), py::kw_only(), py::arg("threads"),
      "Reads [(path, dst_offset, size, file_offset), ...] into `dst` (a dense, writable host array; each range "
      "inside it, else ValueError) over the thread pool; returns the bytes read.");

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
      [](const py::object& name, py::handle dst, std::optional<std::uint64_t> nbytes) {
        const std::string path = bindings::fs_path(name);
        const bindings::Array d = bindings::view(dst, "dst");
        d.on(-1).writable();
        const std::uint64_t n = nbytes ? *nbytes : static_cast<std::uint64_t>(d.numel()) * d.dtype.itemsize();
        d.holds(n);
        py::gil_scoped_release nogil;
        return read_file_into(path, reinterpret_cast<void*>(d.data), n);
      },
      py::arg("path"), py::arg("dst"), py::arg("nbytes") = py::none(),
      "The first nbytes (default: all of dst's) of a file into `dst` (a dense, writable host array holding them, "
      "else ValueError) in one pread; nbytes, or -1 when the file is shorter or a block device (the caller's "
      "general path then decides).");
}
