// gdsio._core: thin bindings only. Memory crosses as arrays (one validated
// view each, bindings/arrays.hpp), never as addresses; sizes, offsets, device
// indices and stream handles as ints; results as bound structs. The GIL is
// released around every blocking call.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>

#include "bindings/arrays.hpp"
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

using bindings::Array;
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

bool is_array(py::handle obj) {
  return py::hasattr(obj, "__dlpack__") || py::hasattr(obj, "__cuda_array_interface__") ||
         PyObject_CheckBuffer(obj.ptr());
}

using Reqs = std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>;

// The arrays a read writes into and its requests, checked before any byte
// moves (and before any CUDA call): `dst` is one array every request writes
// into, or a sequence of arrays, one per request; each is dense and writable,
// all on one device, which the engine must read into (host memory for posix
// and the host stand-in, a CUDA device for pinned and cuFile); every request's
// bytes lie inside its array. The views live as long as this object; build it
// with the GIL held, before releasing it.
struct Destinations {
  std::vector<Array> arrays;
  std::vector<ReadRequest> requests;
  int device = -1;

  Destinations(py::handle dst, const Reqs& reqs, bool cuda, const char* engine) {
    if (is_array(dst)) {
      arrays.push_back(bindings::view(dst, "dst"));
    } else {
      if (!py::isinstance<py::sequence>(dst) || py::isinstance<py::str>(dst))
        throw py::type_error("dst: expected an array or a sequence of arrays (one per request), got " +
                             std::string(py::str(py::type::handle_of(dst).attr("__name__"))));
      const auto seq = py::reinterpret_borrow<py::sequence>(dst);
      GDSIO_EXPECT(seq.size() == reqs.size(), ValueError, "dst: ", seq.size(), " arrays for ", reqs.size(),
                   " requests (one array, or one per request)");
      arrays.reserve(seq.size());
      for (std::size_t i = 0; i < seq.size(); ++i) arrays.push_back(bindings::view(seq[i], "dst[" + std::to_string(i) + "]"));
    }
    std::vector<const Array*> all;
    for (const Array& a : arrays) all.push_back(&a);
    device = bindings::common_device(all, cuda ? 0 : -1);
    if (cuda) {
      if (device < 0) throw ValueError(arrays[0].name + ": is on cpu; the " + engine + " engine reads into CUDA memory");
    } else {
      for (const Array& a : arrays) a.on(-1);
    }
    for (const Array& a : arrays) a.writable().is_dense();
    requests.reserve(reqs.size());
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const auto [off, size, file_offset] = reqs[i];
      const Array& a = arrays.size() == 1 ? arrays[0] : arrays[i];
      const std::uint64_t have = static_cast<std::uint64_t>(a.numel()) * a.dtype.itemsize();
      if (off < 0 || size < 0 || file_offset < 0)
        throw ValueError("requests[" + std::to_string(i) + "]: (dst_offset, size, file_offset) must not be negative");
      if (static_cast<std::uint64_t>(size) > have || static_cast<std::uint64_t>(off) > have - size)
        throw ValueError(a.name + ": holds " + std::to_string(have) + " bytes; requests[" + std::to_string(i) +
                         "] writes " + std::to_string(size) + " at offset " + std::to_string(off));
      requests.push_back(ReadRequest{reinterpret_cast<void*>(a.data + static_cast<std::uint64_t>(off)),
                                     static_cast<std::uint64_t>(size), static_cast<std::uint64_t>(file_offset)});
    }
  }
};

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

  // The core's read engines; gdsio/io/backends.py maps each backend record to one.
  py::enum_<Engine>(m, "Engine")
      .value("posix", Engine::posix)
      .value("pinned", Engine::pinned)
      .value("cufile", Engine::cufile)
      .value("cufile_batch", Engine::cufile_batch);
  bindings::result_struct<ReadResult>(
      m, "ReadResult", "What one read did: the backend that ran, bytes, seconds, threads, chunks, O_DIRECT, and why "
      "a better path (or O_DIRECT) was not used.",
      std::pair{"backend", &ReadResult::backend}, std::pair{"nbytes", &ReadResult::nbytes},
      std::pair{"seconds", &ReadResult::seconds}, std::pair{"threads", &ReadResult::threads},
      std::pair{"chunks", &ReadResult::chunks}, std::pair{"direct_io", &ReadResult::direct_io},
      std::pair{"reason", &ReadResult::reason});
  bindings::result_struct<HostEngineReport>(
      m, "HostEngineReport", "The host stand-in for the copy engine: copies, slots refilled under a pending copy "
      "(reuse_violations, 0 when correct), the most copies queued at once, waits for a slot.",
      std::pair{"copies", &HostEngineReport::copies}, std::pair{"reuse_violations", &HostEngineReport::reuse_violations},
      std::pair{"max_queued", &HostEngineReport::max_queued}, std::pair{"waits", &HostEngineReport::waits});
  m.def(
      "read",
      [](PyFile& pf, Engine engine, py::handle dst, const Reqs& reqs, std::size_t threads, std::size_t chunk_bytes,
         std::size_t staging_buffers, bool direct_io, std::uintptr_t stream) {
        static const char* names[] = {"posix", "pinned", "cufile", "cufile_batch"};
        const Destinations d(dst, reqs, engine != Engine::posix, names[static_cast<int>(engine)]);
        ReadOptions o = make_options(threads, chunk_bytes, staging_buffers, direct_io, std::max(d.device, 0), stream);
        ReadResult r;
        {
          py::gil_scoped_release nogil;
          // Declared in this order, the cuFile handle goes before the file it registered.
          const std::shared_ptr<FileHandle> f = pf.file();
          std::shared_ptr<CufileHandle> cf;
          switch (engine) {
            case Engine::posix: r = posix_read(*f, d.requests, o); break;
            case Engine::pinned: r = pinned_read(*f, d.requests, o); break;
            case Engine::cufile: cf = pf.cufile(d.device); r = cufile_read(*f, *cf, d.requests, o); break;
            case Engine::cufile_batch: cf = pf.cufile(d.device); r = cufile_read_batch(*f, *cf, d.requests, o); break;
          }
        }
        return r;
      },
      py::arg("file"), py::arg("engine"), py::arg("dst"), py::arg("requests"), py::kw_only(), py::arg("threads"),
      py::arg("chunk_bytes"), py::arg("staging_buffers"), py::arg("direct_io"), py::arg("stream") = 0,
      "Reads [(dst_offset, size, file_offset), ...] into `dst` (one array for every request, or a sequence of "
      "arrays, one per request: dense, writable, on one device, host memory for posix, a CUDA device for the "
      "others; each range inside its array, else ValueError) through one engine; returns a ReadResult.");

  m.def(
      "staged_read_host_engine",
      [](PyFile& pf, py::handle dst, const Reqs& reqs, std::size_t threads, std::size_t chunk_bytes,
         std::size_t staging_buffers, bool direct_io, unsigned copy_delay_us) {
        const Destinations d(dst, reqs, false, "host stand-in");
        ReadOptions o = make_options(threads, chunk_bytes, staging_buffers, direct_io, 0, 0);
        ReadResult r;
        HostEngineReport rep;
        {
          py::gil_scoped_release nogil;
          rep = staged_read_host_engine(*pf.file(), d.requests, o, copy_delay_us, r);
        }
        return py::make_tuple(r, rep);
      },
      py::arg("file"), py::arg("dst"), py::arg("requests"), py::kw_only(), py::arg("threads"), py::arg("chunk_bytes"),
      py::arg("staging_buffers"), py::arg("direct_io") = false, py::arg("copy_delay_us") = 0,
      "The pinned pipeline with a host stand-in for the copy engine (tests): `dst` and `requests` as read's, in host "
      "memory; returns (ReadResult, HostEngineReport).");

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
  m.def(
      "cuda_pointer_kind",
      [](py::handle array) {
        const Array a = bindings::view(array, "array");
        int dev = -1;
        std::string kind = cuda_pointer_kind(reinterpret_cast<const void*>(a.data), &dev);
        return py::make_tuple(kind, dev);
      },
      py::arg("array"),
      "(kind, device) of an array's memory as the CUDA runtime sees it: 'device', 'host' (pinned or pageable) or "
      "'managed' (for __cuda_array_interface__ objects, which do not say; nothing is read or written).");

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
  m.def(
      "cufile_register_buffer",
      [](py::handle buffer) {
        const Array b = bindings::view(buffer, "buffer");
        if (b.device < 0) throw ValueError("buffer: is on cpu; cuFile registers CUDA memory");
        b.writable().holds(1);
        std::string reason;
        bool ok;
        {
          py::gil_scoped_release nogil;
          ok = cufile_register_buffer(reinterpret_cast<void*>(b.data), b.extent_bytes(), b.device, &reason);
        }
        return py::make_tuple(ok, reason);
      },
      py::arg("buffer"),
      "Registers a dense, writable array of CUDA memory (its device, all its bytes) with cuFile; (ok, reason).");
  m.def(
      "cufile_deregister_buffer",
      [](py::handle buffer) {
        const Array b = bindings::view(buffer, "buffer");
        if (b.device < 0) throw ValueError("buffer: is on cpu; cuFile registers CUDA memory");
        py::gil_scoped_release nogil;
        cufile_deregister_buffer(reinterpret_cast<void*>(b.data));
      },
      py::arg("buffer"), "Deregisters what cufile_register_buffer registered for this array (nothing if it did not).");
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
