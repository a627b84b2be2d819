// Image decode bindings: thin. The images cross as arrays (one validated
// view each, bindings/arrays.hpp), built with the GIL held; the GIL is
// released around every decode. Python (gdsio/image) parses headers,
// allocates outputs with torch and builds the jobs.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bindings/arrays.hpp"
#include "bindings/registry.hpp"
#include "bindings/structs.hpp"
#include "core/error.hpp"
#include "image/decode.hpp"
#include "image/nvjpeg_shim.hpp"

namespace py = pybind11;

namespace {

using namespace gdsio::image;
using gdsio::bindings::Array;
using gdsio::bindings::view;

JpegBackend to_backend(const std::string& name) {
  for (int k = 0; k < kJpegBackends; ++k)
    if (name == jpeg_backend_name(static_cast<JpegBackend>(k))) return static_cast<JpegBackend>(k);
  throw gdsio::ValueError("unknown nvJPEG backend '" + name +
                          "' (nvjpeg-hardware-device, nvjpeg-gpu-hybrid-device, nvjpeg-host)");
}

// _core.PixelJob: the core's job plus the views of its two arrays, which keep
// them alive as long as the job object (the job's pointers point into them).
struct BoundPixelJob {
  PixelJob job;
  Array src, dst;
  py::object src_array, dst_array;  // as given (the properties)
  std::uint64_t offset = 0;
};

OutType out_type_of(const Array& dst) {
  if (dst.dtype == gdsio::bindings::kUInt8) return OutType::kU8;
  if (dst.dtype == gdsio::bindings::kUInt16) return OutType::kU16;
  if (dst.dtype == gdsio::bindings::kFloat32) return OutType::kF32;
  throw gdsio::ValueError("dst: has dtype " + dst.dtype.name() + ", expected uint8, uint16 or float32");
}

BoundPixelJob make_pixel_job(py::handle src, py::handle dst, std::uint64_t offset, std::int64_t stride_c,
                             std::int64_t stride_y, std::int64_t stride_x, std::int32_t src_channels, Sample sample,
                             Convert convert, std::uint32_t maxval) {
  if (maxval > 65535) throw gdsio::ValueError("maxval: " + std::to_string(maxval) + " is over 65535");
  BoundPixelJob b;
  b.dst = view(dst, "dst");
  b.src = view(src, "src");
  gdsio::bindings::common_device({&b.dst, &b.src}, -1);
  b.dst.writable().dims(3);
  // Before the layout check: exporters describe an empty array's strides each their own way.
  if (b.dst.numel() == 0)
    throw gdsio::ValueError("dst: has shape (" + std::to_string(b.dst.shape[0]) + ", " +
                            std::to_string(b.dst.shape[1]) + ", " + std::to_string(b.dst.shape[2]) +
                            "), an image of no pixels");
  b.dst.is_dense();
  b.src.of(gdsio::bindings::kUInt8).is_dense();
  const std::uint64_t src_bytes = static_cast<std::uint64_t>(b.src.numel());
  if (offset > src_bytes)
    throw gdsio::ValueError("offset: " + std::to_string(offset) + " is past the end of src (" +
                            std::to_string(src_bytes) + " bytes)");
  PixelJob& j = b.job;
  j.src = reinterpret_cast<const std::uint8_t*>(b.src.data) + offset;
  j.src_bytes = src_bytes - offset;  // validate_pixel_job checks every sample read against it
  j.dst = reinterpret_cast<void*>(b.dst.data);
  j.dst_channels = static_cast<std::int32_t>(std::min<std::int64_t>(b.dst.shape[0], INT32_MAX));
  j.height = b.dst.shape[1];
  j.width = b.dst.shape[2];
  j.stride_c = stride_c;
  j.stride_y = stride_y;
  j.stride_x = stride_x;
  j.src_channels = src_channels;
  j.sample = sample;
  j.out = out_type_of(b.dst);
  j.convert = convert;
  j.maxval = maxval;
  b.src_array = py::reinterpret_borrow<py::object>(src);
  b.dst_array = py::reinterpret_borrow<py::object>(dst);
  b.offset = offset;
  return b;
}

// The core's jobs of a call: each job's arrays on `device` (-1: the host) and
// the job itself valid, every message naming jobs[i]. The views stay with the
// job objects, which the caller's list keeps alive through the call.
std::vector<PixelJob> pixel_jobs(const std::vector<const BoundPixelJob*>& jobs, int device) {
  std::vector<PixelJob> js;
  js.reserve(jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const std::string name = "jobs[" + std::to_string(i) + "]";
    const BoundPixelJob* b = jobs[i];
    if (!b) throw py::type_error(name + ": expected a PixelJob, got None");
    if (b->dst.device != device)  // src is on dst's device (the job's constructor checks)
      throw gdsio::ValueError(name + ".dst: is on " + b->dst.where() + ", expected " +
                              (device < 0 ? std::string("cpu") : "cuda:" + std::to_string(device)));
    validate_pixel_job(b->job, name);
    js.push_back(b->job);
  }
  return js;
}

// _core.NvjpegStatus: the shim's status with its versions as tuples (made with the GIL held).
struct NvjpegStatusResult {
  bool loaded = false;
  std::string library;
  py::tuple version;          // nvjpegGetProperty
  py::object cudart_version;  // nvjpegGetCudartProperty: the CUDA runtime this libnvjpeg was built for; None: not told
  std::string reason;
};

NvjpegStatusResult status_result(const NvjpegStatus& s) {
  NvjpegStatusResult r;
  r.loaded = s.loaded;
  r.library = s.library;
  r.version = py::make_tuple(s.major, s.minor, s.patch);
  r.cudart_version =
      s.cudart_major ? py::object(py::make_tuple(s.cudart_major, s.cudart_minor, s.cudart_patch)) : py::object(py::none());
  r.reason = s.reason;
  return r;
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
  py::class_<BoundPixelJob>(m, "PixelJob",
                            "One uncompressed image to decode (csrc/image/decode.hpp): its source bytes and its\n"
                            "(C, H, W) output, viewed once; the job keeps both arrays alive.")
      .def(py::init(&make_pixel_job), py::kw_only(), py::arg("src"), py::arg("dst"), py::arg("offset") = 0,
           py::arg("stride_c"), py::arg("stride_y"), py::arg("stride_x"), py::arg("src_channels"), py::arg("sample"),
           py::arg("convert"), py::arg("maxval") = 0,
           "src: a dense uint8 array holding the samples from byte `offset` on (strides in samples);\n"
           "dst: a contiguous (channels, height, width) array of uint8, uint16 or float32 on src's device,\n"
           "which gives the output's size and type. Every sample the job reads is checked against src's size.")
      .def_readonly("src", &BoundPixelJob::src_array)
      .def_readonly("dst", &BoundPixelJob::dst_array)
      .def_readonly("offset", &BoundPixelJob::offset)
      .def_property_readonly("src_bytes", [](const BoundPixelJob& b) { return b.job.src_bytes; })
      .def_property_readonly("height", [](const BoundPixelJob& b) { return b.job.height; })
      .def_property_readonly("width", [](const BoundPixelJob& b) { return b.job.width; })
      .def_property_readonly("stride_c", [](const BoundPixelJob& b) { return b.job.stride_c; })
      .def_property_readonly("stride_y", [](const BoundPixelJob& b) { return b.job.stride_y; })
      .def_property_readonly("stride_x", [](const BoundPixelJob& b) { return b.job.stride_x; })
      .def_property_readonly("src_channels", [](const BoundPixelJob& b) { return b.job.src_channels; })
      .def_property_readonly("dst_channels", [](const BoundPixelJob& b) { return b.job.dst_channels; })
      .def_property_readonly("sample", [](const BoundPixelJob& b) { return b.job.sample; })
      .def_property_readonly("out", [](const BoundPixelJob& b) { return b.job.out; })
      .def_property_readonly("convert", [](const BoundPixelJob& b) { return b.job.convert; })
      .def_property_readonly("maxval", [](const BoundPixelJob& b) { return b.job.maxval; });

  m.def(
      "img_decode_pixels_cpu",
      [](const std::vector<const BoundPixelJob*>& jobs, std::size_t threads) {
        const std::vector<PixelJob> js = pixel_jobs(jobs, -1);
        py::gil_scoped_release nogil;
        decode_pixels_cpu(js, threads);
      },
      py::arg("jobs"), py::kw_only(), py::arg("threads"),
      "Decodes uncompressed pixel jobs (arrays in host memory) on the CPU.");

  m.def(
      "img_decode_pixels_cuda",
      [](const std::vector<const BoundPixelJob*>& jobs, int device, std::uintptr_t stream) {
        if (device < 0) throw gdsio::ValueError("device: expected a CUDA device index, got " + std::to_string(device));
        const std::vector<PixelJob> js = pixel_jobs(jobs, device);
        py::gil_scoped_release nogil;
        return decode_pixels_cuda(js, device, stream);
      },
      py::arg("jobs"), py::kw_only(), py::arg("device"), py::arg("stream"),
      "Queues the pixel jobs (arrays on cuda:`device`) on `stream`; returns the kernel launches.");

  gdsio::bindings::result_struct<NvjpegStatusResult>(
      m, "NvjpegStatus", "libnvjpeg here: loaded from where, its version and its CUDA runtime's, or why not.",
      std::pair{"loaded", &NvjpegStatusResult::loaded}, std::pair{"library", &NvjpegStatusResult::library},
      std::pair{"version", &NvjpegStatusResult::version},
      std::pair{"cudart_version", &NvjpegStatusResult::cudart_version},
      std::pair{"reason", &NvjpegStatusResult::reason});
  m.def(
      "nvjpeg_load",
      [](const std::string& path) {
        NvjpegStatus s;
        {
          py::gil_scoped_release nogil;  // dlopen may take a while; the result is built with the GIL
          s = nvjpeg_load(path);
        }
        return status_result(s);
      },
      py::arg("path") = "", "Loads libnvjpeg (empty path: libnvjpeg.so.13, then .so.12); never raises.");
  m.def("nvjpeg_status", [] { return status_result(nvjpeg_status()); }, "libnvjpeg as loaded so far.");

  gdsio::bindings::result_struct<NvjpegBackendInfo>(
      m, "NvjpegBackendProbe", "One nvJPEG backend on one device (nvjpeg_probe).",
      std::pair{"usable", &NvjpegBackendInfo::usable}, std::pair{"reason", &NvjpegBackendInfo::reason},
      std::pair{"fancy_upsampling_flag", &NvjpegBackendInfo::fancy_upsampling_flag});
  gdsio::bindings::result_struct<NvjpegDeviceInfo>(
      m, "NvjpegProbe", "What nvjpeg_probe found on one device.",
      std::pair{"hardware_engines", &NvjpegDeviceInfo::hardware_engines},
      std::pair{"hardware_cores", &NvjpegDeviceInfo::hardware_cores})
      .def_property_readonly(
          "backends",
          [](const NvjpegDeviceInfo& d) {
            py::tuple t(kJpegBackends);
            for (int k = 0; k < kJpegBackends; ++k) t[k] = py::cast(d.backends[k]);
            return t;
          },
          "One NvjpegBackendProbe per backend, in jpeg_backends' order.");

  m.def(
      "nvjpeg_probe",
      [](int device) {
        NvjpegDeviceInfo info;
        {
          py::gil_scoped_release nogil;
          info = nvjpeg_probe(device);
        }
        return info;
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

  m.def(
      "nvjpeg_decode_batch",
      [](int device, const std::string& backend, const std::string& output, const py::sequence& jobs,
         std::uintptr_t stream) {
        const JpegBackend b = to_backend(backend);
        JpegOutput out;
        if (output == "rgb") out = JpegOutput::kRGB;
        else if (output == "y") out = JpegOutput::kY;
        else throw gdsio::ValueError("nvJPEG output must be 'rgb' or 'y', got '" + output + "'");
        if (device < 0) throw gdsio::ValueError("device: expected a CUDA device index, got " + std::to_string(device));
        const std::int64_t channels = out == JpegOutput::kRGB ? 3 : 1;
        const int data_device = b == JpegBackend::kHost ? -1 : device;  // nvjpeg-host reads host bitstreams
        const std::size_t n = jobs.size();
        std::vector<Array> views;  // every view made before any CUDA call, kept until the decode returns
        views.reserve(2 * n);
        std::vector<JpegJob> js;
        js.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
          const std::string name = "jobs[" + std::to_string(i) + "]";
          const py::object item = jobs[i];
          if (!py::isinstance<py::tuple>(item) || py::len(item) != 2)
            throw py::type_error(name + ": expected a (data, dst) tuple of arrays");
          const py::tuple t = item.cast<py::tuple>();
          const Array& data = views.emplace_back(view(t[0], name + ".data"));
          data.on(data_device).of(gdsio::bindings::kUInt8).is_dense();
          if (data.numel() == 0) throw gdsio::ValueError(name + ".data: is empty (no bitstream)");
          const Array& dst = views.emplace_back(view(t[1], name + ".dst"));
          dst.on(device).writable().of(gdsio::bindings::kUInt8).shaped({channels, -1, -1}).is_dense();
          JpegJob j;
          j.data = reinterpret_cast<const std::uint8_t*>(data.data);
          j.length = static_cast<std::size_t>(data.numel());
          j.dst = reinterpret_cast<std::uint8_t*>(dst.data);
          j.height = dst.shape[1];
          j.width = dst.shape[2];
          js.push_back(j);
        }
        py::gil_scoped_release nogil;
        nvjpeg_decode_batch(device, b, out, js, stream);
      },
      py::arg("device"), py::arg("backend"), py::arg("output"), py::arg("jobs"), py::arg("stream"),
      "One nvjpegDecodeBatched call over [(data, dst), ...]: data a dense uint8 bitstream (on cuda:`device`,\n"
      "on the host for nvjpeg-host), dst a contiguous uint8 (3, H, W) ('rgb') or (1, H, W) ('y') array on\n"
      "cuda:`device` of the image's size: nvJPEG's own size of each image (nvjpegGetImageInfo) is checked\n"
      "against dst's (H, W) before anything is decoded, and a job that differs is refused (ValueError).");

  m.def("nvjpeg_release", &nvjpeg_release, py::call_guard<py::gil_scoped_release>(),
        "Destroys the idle nvJPEG states and handles; False while a decode is in flight.");
}
