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
  {
    py::list names;  // JpegBackend's names, in the enum's order (best first)
    for (int k = 0; k < kJpegBackends; ++k) names.append(jpeg_backend_name(static_cast<JpegBackend>(k)));
    m.attr("jpeg_backends") = py::tuple(names);
  }
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

  // csrc/image/decode.hpp's enums and PixelJob, bound: gdsio.image builds jobs
  // by field name and enum member, so the two sides cannot drift.
  py::enum_<Sample>(m, "Sample", "How one source sample is stored.")
      .value("u8", Sample::kU8)
      .value("u16le", Sample::kU16LE)
      .value("u16be", Sample::kU16BE)
      .value("f32le", Sample::kF32LE)
      .value("f32be", Sample::kF32BE);
  py::enum_<OutType>(m, "OutType", "The output element type.")
      .value("uint8", OutType::kU8)
      .value("uint16", OutType::kU16)
      .value("float32", OutType::kF32);
  py::enum_<Convert>(m, "Convert", "Source channels -> output channels.")
      .value("copy", Convert::kCopy)
      .value("replicate", Convert::kReplicate)
      .value("luma", Convert::kLuma);
  m.def("sample_bytes", &sample_bytes, py::arg("sample"), "Bytes of one stored sample.");
  py::class_<PixelJob>(m, "PixelJob", "One uncompressed image to decode (csrc/image/decode.hpp).")
      .def(py::init([](std::uintptr_t src, std::uint64_t src_bytes, std::uintptr_t dst, std::int64_t height,
                       std::int64_t width, std::int64_t stride_c, std::int64_t stride_y, std::int64_t stride_x,
                       std::int32_t src_channels, std::int32_t dst_channels, Sample sample, OutType out,
                       Convert convert, std::uint32_t maxval) {
             if (maxval > 65535) throw gdsio::ValueError("pixel job: bad maxval " + std::to_string(maxval));
             PixelJob j;
             j.src = reinterpret_cast<const std::uint8_t*>(src);
             j.src_bytes = src_bytes;
             j.dst = reinterpret_cast<void*>(dst);
             j.height = height;
             j.width = width;
             j.stride_c = stride_c;
             j.stride_y = stride_y;
             j.stride_x = stride_x;
             j.src_channels = src_channels;
             j.dst_channels = dst_channels;
             j.sample = sample;
             j.out = out;
             j.convert = convert;
             j.maxval = maxval;
             return j;
           }),
           py::kw_only(), py::arg("src"), py::arg("src_bytes"), py::arg("dst"), py::arg("height"), py::arg("width"),
           py::arg("stride_c"), py::arg("stride_y"), py::arg("stride_x"), py::arg("src_channels"),
           py::arg("dst_channels"), py::arg("sample"), py::arg("out"), py::arg("convert"), py::arg("maxval") = 0)
      .def_property_readonly("src", [](const PixelJob& j) { return reinterpret_cast<std::uintptr_t>(j.src); })
      .def_readonly("src_bytes", &PixelJob::src_bytes)
      .def_property_readonly("dst", [](const PixelJob& j) { return reinterpret_cast<std::uintptr_t>(j.dst); })
      .def_readonly("height", &PixelJob::height)
      .def_readonly("width", &PixelJob::width)
      .def_readonly("stride_c", &PixelJob::stride_c)
      .def_readonly("stride_y", &PixelJob::stride_y)
      .def_readonly("stride_x", &PixelJob::stride_x)
      .def_readonly("src_channels", &PixelJob::src_channels)
      .def_readonly("dst_channels", &PixelJob::dst_channels)
      .def_readonly("sample", &PixelJob::sample)
      .def_readonly("out", &PixelJob::out)
      .def_readonly("convert", &PixelJob::convert)
      .def_readonly("maxval", &PixelJob::maxval);

  m.def(
      "img_decode_pixels_cpu",
      [](const std::vector<PixelJob>& jobs, std::size_t threads) {
        py::gil_scoped_release nogil;
        decode_pixels_cpu(jobs, threads);
      },
      py::arg("jobs"), py::kw_only(), py::arg("threads"), "Decodes uncompressed pixel jobs on the CPU.");

  m.def(
      "img_decode_pixels_cuda",
      [](const std::vector<PixelJob>& jobs, int device, std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        return decode_pixels_cuda(jobs, device, stream);
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
