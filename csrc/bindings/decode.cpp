// Image decode bindings: thin. Pointers, sizes, devices and streams cross as
// ints; the GIL is released around every decode. Python (gdsio/image) parses
// headers, allocates outputs with torch and builds the jobs.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings/registry.hpp"
#include "core/error.hpp"
#include "image/decode.hpp"
#include "image/nvjpeg_shim.hpp"

namespace py = pybind11;

namespace {

using namespace gdsio::image;

// (src, src_bytes, dst, height, width, stride_c, stride_y, stride_x,
//  src_channels, dst_channels, sample, out, convert, maxval): the field order
// of PixelJob; gdsio/image/_pixels.py builds these tuples.
using JobTuple = std::array<std::int64_t, 14>;

std::vector<PixelJob> to_jobs(const std::vector<JobTuple>& t) {
  std::vector<PixelJob> out;
  out.reserve(t.size());
  for (const auto& a : t) {
    PixelJob j;
    j.src = reinterpret_cast<const std::uint8_t*>(static_cast<std::uintptr_t>(a[0]));
    j.src_bytes = static_cast<std::uint64_t>(a[1]);
    j.dst = reinterpret_cast<void*>(static_cast<std::uintptr_t>(a[2]));
    j.height = a[3];
    j.width = a[4];
    j.stride_c = a[5];
    j.stride_y = a[6];
    j.stride_x = a[7];
    j.src_channels = static_cast<std::int32_t>(a[8]);
    j.dst_channels = static_cast<std::int32_t>(a[9]);
    j.sample = static_cast<Sample>(a[10]);
    j.out = static_cast<OutType>(a[11]);
    j.convert = static_cast<Convert>(a[12]);
    j.maxval = static_cast<std::uint32_t>(a[13]);
    if (a[1] < 0 || a[13] < 0 || a[13] > 65535) throw gdsio::ValueError("pixel job: negative size or bad maxval");
    out.push_back(j);
  }
  return out;
}

JpegBackend to_backend(const std::string& name) {
  for (int k = 0; k < kJpegBackends; ++k)
    if (name == jpeg_backend_name(static_cast<JpegBackend>(k))) return static_cast<JpegBackend>(k);
  throw gdsio::ValueError("unknown nvJPEG backend '" + name +
                          "' (nvjpeg-hardware-device, nvjpeg-gpu-hybrid-device, nvjpeg-host)");
}

py::dict to_dict(const NvjpegStatus& s) {
  py::dict d;
  d["loaded"] = s.loaded;
  d["library"] = s.library;
  d["version"] = py::make_tuple(s.major, s.minor, s.patch);  // nvjpegGetProperty
  // nvjpegGetCudartProperty: the CUDA runtime this libnvjpeg was built for (None: not told).
  if (s.cudart_major)
    d["cudart_version"] = py::make_tuple(s.cudart_major, s.cudart_minor, s.cudart_patch);
  else
    d["cudart_version"] = py::none();
  d["reason"] = s.reason;
  return d;
}

}  // namespace

GDSIO_EXPORT(decode) {
  m.attr("img_jobs_per_launch") = kJobsPerLaunch;
  // Registered after the module's translator, so tried before it: an nvJPEG
  // failure is its own type, not a plain RuntimeError.
  static py::exception<NvjpegError> nvjpeg_error(m, "NvjpegError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const NvjpegError& e) {
      PyErr_SetString(nvjpeg_error.ptr(), e.what());
    }
  });

  m.def(
      "img_decode_pixels_cpu",
      [](const std::vector<JobTuple>& jobs, std::size_t threads) {
        std::vector<PixelJob> j = to_jobs(jobs);
        py::gil_scoped_release nogil;
        decode_pixels_cpu(j, threads);
      },
      py::arg("jobs"), py::kw_only(), py::arg("threads"),
      "Decodes uncompressed pixel jobs (tuples in PixelJob field order) on the CPU.");

  m.def(
      "img_decode_pixels_cuda",
      [](const std::vector<JobTuple>& jobs, int device, std::uintptr_t stream) {
        std::vector<PixelJob> j = to_jobs(jobs);
        py::gil_scoped_release nogil;
        return decode_pixels_cuda(j, device, stream);
      },
      py::arg("jobs"), py::kw_only(), py::arg("device"), py::arg("stream"),
      "Queues the pixel jobs on `stream` (device memory in and out); returns the kernel launches.");

  m.def(
      "nvjpeg_load",
      [](const std::string& path) {
        NvjpegStatus s;
        {
          py::gil_scoped_release nogil;  // dlopen may take a while; the dict is built with the GIL
          s = nvjpeg_load(path);
        }
        return to_dict(s);
      },
      py::arg("path") = "", "Loads libnvjpeg (empty path: libnvjpeg.so.13, then .so.12); never raises.");
  m.def("nvjpeg_status", [] { return to_dict(nvjpeg_status()); });

  m.def(
      "nvjpeg_probe",
      [](int device) {
        NvjpegDeviceInfo info;
        {
          py::gil_scoped_release nogil;
          info = nvjpeg_probe(device);
        }
        py::dict backends;
        for (int k = 0; k < kJpegBackends; ++k) {
          py::dict b;
          b["usable"] = info.backends[k].usable;
          b["reason"] = info.backends[k].reason;
          b["fancy_upsampling_flag"] = info.backends[k].fancy_upsampling_flag;
          backends[jpeg_backend_name(static_cast<JpegBackend>(k))] = b;
        }
        py::dict d;
        d["backends"] = backends;
        d["hardware_engines"] = info.hardware_engines;
        d["hardware_cores"] = info.hardware_cores;
        return d;
      },
      py::arg("device"), "Creates the nvJPEG handles of `device` once and says which backends work there.");

  m.def(
      "nvjpeg_hardware_supported",
      [](int device, const std::vector<py::bytes>& headers) {
        std::vector<const std::uint8_t*> ptrs;
        std::vector<std::size_t> lens;
        for (const auto& h : headers) {
          char* p = nullptr;
          Py_ssize_t n = 0;
          if (PyBytes_AsStringAndSize(h.ptr(), &p, &n) != 0) throw py::error_already_set();
          ptrs.push_back(reinterpret_cast<const std::uint8_t*>(p));
          lens.push_back(static_cast<std::size_t>(n));
        }
        py::gil_scoped_release nogil;  // `headers` keeps the bytes alive
        return nvjpeg_hardware_supported(device, ptrs, lens);
      },
      py::arg("device"), py::arg("headers"),
      "Per JPEG header (bytes up to the first scan): 1 the hardware decoder takes it, 0 not, -1 unknown.");

  using JpegTuple = std::array<std::int64_t, 5>;  // (data, length, dst, height, width)
  m.def(
      "nvjpeg_decode_batch",
      [](int device, const std::string& backend, const std::string& output, const std::vector<JpegTuple>& jobs,
         std::uintptr_t stream) {
        const JpegBackend b = to_backend(backend);
        JpegOutput out;
        if (output == "rgb") out = JpegOutput::kRGB;
        else if (output == "y") out = JpegOutput::kY;
        else throw gdsio::ValueError("nvJPEG output must be 'rgb' or 'y', got '" + output + "'");
        std::vector<JpegJob> js;
        js.reserve(jobs.size());
        for (const auto& a : jobs) {
          if (a[1] <= 0) throw gdsio::ValueError("JPEG job: empty bitstream");
          JpegJob j;
          j.data = reinterpret_cast<const std::uint8_t*>(static_cast<std::uintptr_t>(a[0]));
          j.length = static_cast<std::size_t>(a[1]);
          j.dst = reinterpret_cast<std::uint8_t*>(static_cast<std::uintptr_t>(a[2]));
          j.height = a[3];
          j.width = a[4];
          js.push_back(j);
        }
        py::gil_scoped_release nogil;
        nvjpeg_decode_batch(device, b, out, js, stream);
      },
      py::arg("device"), py::arg("backend"), py::arg("output"), py::arg("jobs"), py::arg("stream"),
      "One nvjpegDecodeBatched call over [(data_ptr, length, dst_ptr, height, width), ...].");

  m.def("nvjpeg_release", &nvjpeg_release, py::call_guard<py::gil_scoped_release>(),
        "Destroys the idle nvJPEG states and handles; False while a decode is in flight.");
}
