// gdsio._core.StagingRing: the pinned pipeline's staging slots for producers
// outside the core (the remote readers receive ranged GETs into them).
#include <pybind11/pybind11.h>

#include <algorithm>
#include <memory>

#include "bindings/registry.hpp"
#include "io/pinned_reader.hpp"
#include "io/staging_ring.hpp"

namespace py = pybind11;
using namespace gdsio;

GDSIO_EXPORT(staging_ring) {
  py::class_<StagingRing>(m, "StagingRing")
      .def(py::init([](std::size_t slots, std::size_t slot_bytes, int device, std::uintptr_t stream,
                       bool host_engine, unsigned copy_delay_us, std::size_t reserve_bytes) {
             std::unique_ptr<CopyEngine> e =
                 host_engine ? make_host_copy_engine(copy_delay_us)
                             : make_cuda_copy_engine(device, stream, std::max(reserve_bytes, slots * slot_bytes));
             return std::make_unique<StagingRing>(std::move(e), slots, slot_bytes);
           }),
           py::arg("slots"), py::arg("slot_bytes"), py::kw_only(), py::arg("device") = 0,
           py::arg("stream") = 0, py::arg("host_engine") = false, py::arg("copy_delay_us") = 0,
           py::arg("reserve_bytes") = 0,
           "Slots of pinned memory whose copies to `device` memory are ordered on `stream` (the pinned "
           "pool keeps up to reserve_bytes cached between calls); "
           "host_engine=True: the host stand-in (a copy thread, a check that no slot is refilled "
           "under its copy), for tests without a GPU.")
      .def("next", &StagingRing::next, py::call_guard<py::gil_scoped_release>(),
           "The next slot's index, once its previous copy has completed.")
      .def(
          "buffer",
          [](StagingRing& r, std::size_t k) {
            return py::memoryview::from_memory(r.data(k), static_cast<py::ssize_t>(r.slot_bytes()), false);
          },
          py::arg("k"), "A writable memoryview of slot k (valid until close()).")
      .def("copy", &StagingRing::copy, py::arg("k"), py::arg("dst"), py::arg("n"),
           py::call_guard<py::gil_scoped_release>(), "Queues the copy of slot k's first n bytes to dst.")
      .def("drain", &StagingRing::drain, py::call_guard<py::gil_scoped_release>())
      .def("close", &StagingRing::close, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("slot_bytes", &StagingRing::slot_bytes)
      .def_property_readonly("slots", &StagingRing::slots)
      .def("report", [](StagingRing& r) {
        HostEngineReport rep = host_copy_engine_report(r.engine());
        py::dict d;
        d["copies"] = r.copies();
        d["waits"] = r.waits();
        d["reuse_violations"] = rep.reuse_violations;
        d["max_queued"] = rep.max_queued;
        return d;
      }, "copies, waits; with the host engine also reuse_violations and max_queued.");
}
