// gdsio._core host buffers from the reuse pool (csrc/core/host_pool.hpp):
// a numpy array owning its block, which goes back to the pool when the last
// view (a torch tensor made by torch.from_numpy) lets go of it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "bindings/registry.hpp"
#include "bindings/structs.hpp"
#include "core/host_pool.hpp"

namespace py = pybind11;
using namespace gdsio;

namespace {

struct Owned {
  HostBlock block;
  bool huge;
};

}  // namespace

GDSIO_EXPORT(host_memory) {
  m.def(
      "host_buffer",
      [](std::size_t nbytes, bool huge_pages) {
        HostBlock b;
        {
          py::gil_scoped_release nogil;  // munmap of an evicted block, or a large mmap, may take a while
          b = host_acquire(nbytes, huge_pages);
        }
        auto* own = new Owned{b, huge_pages};
        py::capsule owner(own, [](void* p) {
          auto* o = static_cast<Owned*>(p);
          host_release(o->block.data, o->block.bytes, o->huge);
          delete o;
        });
        py::array_t<std::uint8_t> arr({static_cast<py::ssize_t>(nbytes)}, {1}, static_cast<std::uint8_t*>(b.data), owner);
        return py::make_tuple(arr, b.reused);
      },
      py::arg("nbytes"), py::kw_only(), py::arg("huge_pages"),
      "(array, reused): a 1-D uint8 numpy array of `nbytes` on a page-aligned mapping from the host pool (2 MiB-"
      "aligned and advised MADV_HUGEPAGE with huge_pages), and whether the mapping was reused.");
  bindings::result_struct<HostPoolStats>(
      m, "HostPoolStats", "The host pool: idle bytes and blocks, the idle cap, reuses and fresh mappings so far.",
      std::pair{"idle_bytes", &HostPoolStats::idle_bytes}, std::pair{"idle_blocks", &HostPoolStats::idle_blocks},
      std::pair{"cap_bytes", &HostPoolStats::cap_bytes}, std::pair{"reuses", &HostPoolStats::reuses},
      std::pair{"maps", &HostPoolStats::maps});
  m.def("host_pool_stats", &host_pool_stats, "The host pool's HostPoolStats now.");
  m.def("host_pool_trim", &host_pool_trim, py::call_guard<py::gil_scoped_release>(),
        "Unmaps every idle block of the host pool; returns the bytes given back.");
}
