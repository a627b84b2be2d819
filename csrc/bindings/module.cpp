// gdsio._core: thin bindings only. Pointers, sizes, device indices and stream
// handles cross as ints; the GIL is released around every blocking call.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>

#include "bindings/paths.hpp"
#include "bindings/registry.hpp"
#include "bindings/structs.hpp"

#include "core/cuda_rt.hpp"
#include "core/error.hpp"
#include "io/cufile_shim.hpp"
#include "io/file.hpp"
#include "io/pinned_reader.hpp"
#include "io/posix_reader.hpp"
#include "io/staging_pipeline.hpp"
#include "io/thread_pool.hpp"

#ifndef GDSIO_CUDA_ARCHITECTURES
#define GDSIO_CUDA_ARCHITECTURES ""
#endif

namespace py = pybind11;
using namespace gdsio;

namespace {

// A file as Python holds it: the descriptors, and the cuFile registration
// made on first use by a cuFile read. A read holds its own references, so a
// close() from another thread while it runs frees nothing under it: the file
// goes when the last read ends.
enum class Engine { posix, pinned, cufile, cufile_batch };

// Messages and paths as Python's os.fsdecode makes them: a file name that is
// not UTF-8 comes back as the str (with surrogate escapes) the caller passed.
py::object fs_text(const std::string& text) {
  return py::reinterpret_steal<py::object>(PyUnicode_DecodeFSDefaultAndSize(text.data(), static_cast<Py_ssize_t>(text.size())));
}

using bindings::fs_path;  // str or bytes: the file system's bytes

class PyFile {
 public:
  explicit PyFile(const std::string& path) : f_(std::make_shared<FileHandle>(path)) {}
  std::shared_ptr<FileHandle> file() {
    std::lock_guard<std::mutex> lk(mu_);
    if (!f_) throw ValueError("I/O on a closed gdsio file");
    return f_;
  }
  std::shared_ptr<CufileHandle> cufile(int device) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!f_) throw ValueError("I/O on a closed gdsio file");
    if (!cf_) cf_ = std::make_shared<CufileHandle>(*f_, device);
    return cf_;
  }
  void close() {
    std::lock_guard<std::mutex> lk(mu_);
    cf_.reset();  // before the file: its deregistration needs the descriptor open
    f_.reset();
  }
  bool closed() {
    std::lock_guard<std::mutex> lk(mu_);
    return !f_;
  }

 private:
  std::mutex mu_;
  std::shared_ptr<FileHandle> f_;
  std::shared_ptr<CufileHandle> cf_;
};

std::vector<ReadRequest> to_requests(const std::vector<std::tuple<std::uintptr_t, std::uint64_t, std::uint64_t>>& t) {
  std::vector<ReadRequest> out;
  out.reserve(t.size());
  for (const auto& [ptr, size, off] : t)
    out.push_back(ReadRequest{reinterpret_cast<void*>(ptr), size, off});
  return out;
}

py::dict to_dict(const ReadResult& r) {
  py::dict d;
  d["backend"] = r.backend;
  d["nbytes"] = r.nbytes;
  d["seconds"] = r.seconds;
  d["threads"] = r.threads;
  d["chunks"] = r.chunks;
  d["direct_io"] = r.direct_io;
  d["reason"] = r.reason;
  return d;
}

ReadOptions make_options(std::size_t threads, std::size_t chunk_bytes, std::size_t staging_buffers,
                         bool direct_io, int device, std::uintptr_t stream) {
  ReadOptions o;
  o.threads = threads;
  o.chunk_bytes = chunk_bytes;
  o.staging_buffers = staging_buffers;
  o.direct_io = direct_io;
  o.device = device;
  o.stream = stream;
  return o;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "gdsio's compiled core (private: use the gdsio package)";
  m.attr("built_with_cuda") = built_with_cuda();
  m.attr("cuda_architectures") = std::string(GDSIO_CUDA_ARCHITECTURES);

  static py::exception<Unavailable> unavailable(m, "BackendUnavailable", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OsError& e) {
      // OSError(errno, strerror, filename) picks the subclass from errno.
      py::object exc = py::reinterpret_borrow<py::object>(PyExc_OSError)(e.error_number(), fs_text(e.what()),
                                                                          fs_text(e.path()));
      PyErr_SetObject(PyExc_OSError, exc.ptr());
    } catch (const ValueError& e) {
      PyErr_SetObject(PyExc_ValueError, fs_text(e.what()).ptr());
    } catch (const Unavailable& e) {
      PyErr_SetObject(unavailable.ptr(), fs_text(e.what()).ptr());
    } catch (const CudaError& e) {
      PyErr_SetObject(PyExc_RuntimeError, fs_text(e.what()).ptr());
    }
  });

  py::class_<PyFile>(m, "File")
      .def(py::init([](const py::object& path) {
             std::string p = fs_path(path);
             py::gil_scoped_release nogil;
             return std::make_unique<PyFile>(p);
           }),
           py::arg("path"))
      .def("size", [](PyFile& f) { return f.file()->size(); })
      .def("close", &PyFile::close)
      .def("register_cufile", [](PyFile& f, int device) { f.cufile(device); }, py::arg("device"),
           py::call_guard<py::gil_scoped_release>(),
           "Registers the file with cuFile (O_DIRECT when the file system allows it).")
      .def_property_readonly("closed", &PyFile::closed)
      .def_property_readonly("path", [](PyFile& f) { return fs_text(f.file()->path()); })
      .def("direct_io_refusal", [](PyFile& f) {
        const auto h = f.file();
        h->direct_fd();
        return h->direct_io_refusal();
      });

  using Reqs = std::vector<std::tuple<std::uintptr_t, std::uint64_t, std::uint64_t>>;
  // The core's read engines; gdsio/io/backends.py maps each backend record to one.
  py::enum_<Engine>(m, "Engine")
      .value("posix", Engine::posix)
      .value("pinned", Engine::pinned)
      .value("cufile", Engine::cufile)
      .value("cufile_batch", Engine::cufile_batch);
  m.def(
      "read",
      [](PyFile& pf, Engine engine, const Reqs& reqs, std::size_t threads, std::size_t chunk_bytes,
         std::size_t staging_buffers, bool direct_io, int device, std::uintptr_t stream) {
        ReadOptions o = make_options(threads, chunk_bytes, staging_buffers, direct_io, device, stream);
        std::vector<ReadRequest> rq = to_requests(reqs);
        ReadResult r;
        {
          py::gil_scoped_release nogil;
          // Declared in this order, the cuFile handle goes before the file it registered.
          const std::shared_ptr<FileHandle> f = pf.file();
          std::shared_ptr<CufileHandle> cf;
          switch (engine) {
            case Engine::posix: r = posix_read(*f, rq, o); break;
            case Engine::pinned: r = pinned_read(*f, rq, o); break;
            case Engine::cufile: cf = pf.cufile(device); r = cufile_read(*f, *cf, rq, o); break;
            case Engine::cufile_batch: cf = pf.cufile(device); r = cufile_read_batch(*f, *cf, rq, o); break;
          }
        }
        return to_dict(r);
      },
      py::arg("file"), py::arg("engine"), py::arg("requests"), py::kw_only(), py::arg("threads"),
      py::arg("chunk_bytes"), py::arg("staging_buffers"), py::arg("direct_io"), py::arg("device") = 0,
      py::arg("stream") = 0,
      "Reads [(dst_ptr, size, file_offset), ...] through one engine; returns the stats.");

  m.def(
      "staged_read_host_engine",
      [](PyFile& pf, const Reqs& reqs, std::size_t threads, std::size_t chunk_bytes,
         std::size_t staging_buffers, bool direct_io, unsigned copy_delay_us) {
        ReadOptions o = make_options(threads, chunk_bytes, staging_buffers, direct_io, 0, 0);
        std::vector<ReadRequest> rq = to_requests(reqs);
        ReadResult r;
        HostEngineReport rep;
        {
          py::gil_scoped_release nogil;
          rep = staged_read_host_engine(*pf.file(), rq, o, copy_delay_us, r);
        }
        py::dict d;
        d["copies"] = rep.copies;
        d["reuse_violations"] = rep.reuse_violations;
        d["max_queued"] = rep.max_queued;
        d["waits"] = rep.waits;
        return py::make_tuple(to_dict(r), d);
      },
      py::arg("file"), py::arg("requests"), py::kw_only(), py::arg("threads"), py::arg("chunk_bytes"),
      py::arg("staging_buffers"), py::arg("direct_io") = false, py::arg("copy_delay_us") = 0,
      "The pinned pipeline with a host stand-in for the copy engine (tests).");

  bindings::result_struct<CudaStatus>(
      m, "CudaStatus", "The CUDA runtime here: devices, runtime and driver versions, why no device can be used.",
      std::pair{"device_count", &CudaStatus::device_count}, std::pair{"runtime_version", &CudaStatus::runtime_version},
      std::pair{"driver_version", &CudaStatus::driver_version}, std::pair{"error", &CudaStatus::error});
  m.def("cuda_status", &cuda_status);
  m.def(
      "cuda_stream_synchronize",
      [](std::uintptr_t stream, int device) {
        DeviceGuard g(device);
        cuda_stream_synchronize(stream);
      },
      py::arg("stream"), py::arg("device"), py::call_guard<py::gil_scoped_release>(),
      "cudaStreamSynchronize on cuda:device (before a write outside stream order).");
  m.def("kernel_probe", &cuda_kernel_probe, py::arg("device"), py::call_guard<py::gil_scoped_release>());
  m.def("cuda_pointer_kind", [](std::uintptr_t p) {
    int dev = -1;
    std::string kind = cuda_pointer_kind(reinterpret_cast<void*>(p), &dev);
    return py::make_tuple(kind, dev);
  });

  bindings::result_struct<CufileStatus>(
      m, "CufileStatus", "libcufile here: loaded from where, driver open, true GDS or compat mode and why, its "
      "properties.",
      std::pair{"loaded", &CufileStatus::loaded}, std::pair{"library", &CufileStatus::library},
      std::pair{"driver_open", &CufileStatus::driver_open}, std::pair{"true_gds", &CufileStatus::true_gds},
      std::pair{"mode", &CufileStatus::mode}, std::pair{"reason", &CufileStatus::reason},
      std::pair{"version", &CufileStatus::version}, std::pair{"max_batch_io_size", &CufileStatus::max_batch_io_size},
      std::pair{"batch_timeout_ms", &CufileStatus::batch_timeout_ms},
      std::pair{"use_pci_p2pdma", &CufileStatus::use_pci_p2pdma},
      std::pair{"p2pdma_supported", &CufileStatus::p2pdma_supported});
  m.def("cufile_load", &cufile_load, py::arg("path") = "");
  m.def("cufile_status", &cufile_status, py::arg("open_driver") = false, py::arg("device") = 0,
        py::call_guard<py::gil_scoped_release>());
  m.def("cufile_shutdown", &cufile_shutdown, py::call_guard<py::gil_scoped_release>());
  m.def("cufile_register_buffer",
        [](std::uintptr_t p, std::size_t n, int device) {
          std::string reason;
          bool ok = cufile_register_buffer(reinterpret_cast<void*>(p), n, device, &reason);
          return py::make_tuple(ok, reason);
        },
        py::arg("ptr"), py::arg("nbytes"), py::arg("device"));
  m.def("cufile_deregister_buffer", [](std::uintptr_t p) { cufile_deregister_buffer(reinterpret_cast<void*>(p)); });
  m.def("cufile_registered_buffers", &cufile_registered_buffers);

  bindings::result_struct<StagingPoolStats>(
      m, "StagingPoolStats", "The pinned staging pool: cached buffers and bytes, buffers in use, the cache's limit.",
      std::pair{"cached_buffers", &StagingPoolStats::cached_buffers},
      std::pair{"cached_bytes", &StagingPoolStats::cached_bytes},
      std::pair{"in_use_buffers", &StagingPoolStats::in_use_buffers},
      std::pair{"limit_bytes", &StagingPoolStats::limit_bytes});
  m.def("staging_pool_stats", &staging_pool_stats);
  m.def("release_staging", &release_staging, py::call_guard<py::gil_scoped_release>());
  m.def("pool_threads", &ThreadPool::global_size);
  m.def("shutdown_pool", &ThreadPool::shutdown_global, py::call_guard<py::gil_scoped_release>());

  // The other areas (csrc/bindings/*.cpp), in a fixed order.
  auto parts = bindings::exporters();
  std::sort(parts.begin(), parts.end());
  for (auto& [name, fn] : parts) fn(m);
}
