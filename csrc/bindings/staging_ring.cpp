// gdsio._core.StagingRing: the pinned pipeline's staging slots for producers
// outside the core (the remote readers receive ranged GETs into them).
#include <pybind11/pybind11.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "bindings/arrays.hpp"
#include "bindings/registry.hpp"
#include "core/error.hpp"
#include "io/pinned_reader.hpp"
#include "io/staging_ring.hpp"

namespace py = pybind11;
using namespace gdsio;

namespace {

// The ring, and what each slot's queued copy writes into: a copy runs after
// copy() returns, so the ring keeps its destination array alive until the
// copy is known to be done (next() hands the slot out again, drain, close).
struct PyRing {
  std::vector<py::object> targets;  // declared first: destroyed after the ring has drained
  std::unique_ptr<StagingRing> ring;

  std::size_t next() {
    std::size_t k;
    {
      py::gil_scoped_release nogil;
      k = ring->next();
    }
    if (k < targets.size()) targets[k] = py::none();
    return k;
  }
  void copy(std::size_t k, py::handle dst, std::int64_t offset, std::int64_t n) {
    const bindings::Array d = bindings::view(dst, "dst");
    d.on(ring->engine().device()).writable().is_dense();
    const std::uint64_t have = static_cast<std::uint64_t>(d.numel()) * d.dtype.itemsize();
    GDSIO_EXPECT(offset >= 0 && n >= 0, ValueError, "offset and n must not be negative, got ", offset, " and ", n);
    if (static_cast<std::uint64_t>(n) > have || static_cast<std::uint64_t>(offset) > have - n)
      throw ValueError("dst: holds " + std::to_string(have) + " bytes; the copy writes " + std::to_string(n) +
                       " at offset " + std::to_string(offset));
    {
      py::gil_scoped_release nogil;
      ring->copy(k, d.data + static_cast<std::uint64_t>(offset), static_cast<std::size_t>(n));
    }
    if (targets.size() < ring->slots()) targets.resize(ring->slots());
    targets[k] = d.owner;
  }
  void drain() {
    {
      py::gil_scoped_release nogil;
      ring->drain();
    }
    targets.clear();
  }
  void close() {
    {
      py::gil_scoped_release nogil;
      ring->close();
    }
    targets.clear();
  }
};

}  // namespace

GDSIO_EXPORT(staging_ring) {
  py::class_<PyRing>(m, "StagingRing")
      .def(py::init([](std::size_t slots, std::size_t slot_bytes, int device, std::uintptr_t stream,
                       bool host_engine, unsigned copy_delay_us, std::size_t reserve_bytes) {
             std::unique_ptr<CopyEngine> e =
                 host_engine ? make_host_copy_engine(copy_delay_us)
                             : make_cuda_copy_engine(device, stream, std::max(reserve_bytes, slots * slot_bytes));
             auto r = std::make_unique<PyRing>();
             r->ring = std::make_unique<StagingRing>(std::move(e), slots, slot_bytes);
             return r;
           }),
           py::arg("slots"), py::arg("slot_bytes"), py::kw_only(), py::arg("device") = 0,
           py::arg("stream") = 0, py::arg("host_engine") = false, py::arg("copy_delay_us") = 0,
           py::arg("reserve_bytes") = 0,
           "Slots of pinned memory whose copies to `device` memory are ordered on `stream` (the pinned "
           "pool keeps up to reserve_bytes cached between calls); "
           "host_engine=True: the host stand-in (a copy thread, a check that no slot is refilled "
           "under its copy) copying into host memory, for tests without a GPU.")
      .def("next", &PyRing::next, "The next slot's index, once its previous copy has completed.")
      .def(
          "buffer",
          [](PyRing& r, std::size_t k) {
            return py::memoryview::from_memory(r.ring->data(k), static_cast<py::ssize_t>(r.ring->slot_bytes()), false);
          },
          py::arg("k"), "A writable memoryview of slot k (valid until close()).")
      .def("copy", &PyRing::copy, py::arg("k"), py::arg("dst"), py::arg("offset"), py::arg("n"),
           "Queues the copy of slot k's first n bytes into `dst` at byte `offset`: a dense, writable array on the "
           "ring's device (host memory for the host stand-in) holding them, else ValueError. The ring keeps `dst` "
           "alive until the copy is done.")
      .def("drain", &PyRing::drain, "Waits for every queued copy.")
      .def("close", &PyRing::close, "Drains, then gives the slots back (idempotent).")
      .def_property_readonly("slot_bytes", [](PyRing& r) { return r.ring->slot_bytes(); })
      .def_property_readonly("slots", [](PyRing& r) { return r.ring->slots(); })
      .def("report", [](PyRing& r) {
        HostEngineReport rep = host_copy_engine_report(r.ring->engine());
        rep.copies = r.ring->copies();
        rep.waits = r.ring->waits();
        return rep;
      }, "A HostEngineReport: copies, waits; with the host engine also reuse_violations and max_queued.");
}
