// gdsio._core.tf_*: the transforms (gdsio/transforms.py is the public face).
// Pointers, strides, device indices and streams cross as ints; device < 0
// runs the CPU twin on `threads` threads. The GIL is released around work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/registry.hpp"
#include "core/error.hpp"
#include "image/resample_simd.hpp"
#include "image/transforms.hpp"

namespace py = pybind11;
using namespace gdsio;
using namespace gdsio::image;

namespace {

// The image table: an (N, 6) or (N, 7) int64 array of rows (data,
// channel_stride, row_stride, height, width, flip[, pixel_stride]); an array
// rather than a list of tuples, so that a batch of hundreds crosses in
// microseconds. pixel_stride (default 1) lets the CPU read interleaved
// (H, W, C) memory as it is; the CUDA kernels take planes only.
using ImageTable = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

std::vector<ImageRef> to_refs(const ImageTable& t, bool cuda) {
  GDSIO_EXPECT(t.ndim() == 2 && (t.shape(1) == 6 || t.shape(1) == 7), ValueError,
               "images: an (N, 6) or (N, 7) table of (data, channel_stride, row_stride, height, width, flip"
               "[, pixel_stride]) expected");
  const std::int64_t n = t.shape(0), cols = t.shape(1);
  const std::int64_t* p = t.data();
  std::vector<ImageRef> v((std::size_t)n);
  for (std::int64_t i = 0; i < n; ++i, p += cols) {
    GDSIO_EXPECT(p[3] >= 0 && p[3] <= INT32_MAX && p[4] >= 0 && p[4] <= INT32_MAX, ValueError, "images[", i,
                 "]: size ", p[3], "x", p[4], " out of range");
    const std::int64_t ps = cols == 7 ? p[6] : 1;
    GDSIO_EXPECT(!cuda || ps == 1, ValueError, "images[", i, "]: the CUDA resize reads channel planes (pixel stride 1), ",
                 "got pixel stride ", ps, "; make the image contiguous first");
    ImageRef r{(std::uintptr_t)p[0], p[1], p[2], (std::int32_t)p[3], (std::int32_t)p[4], p[5] != 0};
    r.pixel_stride = ps;
    v[(std::size_t)i] = r;
  }
  return v;
}

Filter parse_filter(const std::string& s) {
  if (s == "nearest") return Filter::kNearest;
  if (s == "box") return Filter::kBox;
  if (s == "bilinear") return Filter::kBilinear;
  if (s == "bicubic") return Filter::kBicubic;
  throw ValueError("interpolation: unknown filter '" + s + "' (nearest, box, bilinear, bicubic)");
}

PixelType parse_dtype(const std::string& s) {
  if (s == "uint8") return PixelType::kU8;
  if (s == "float32") return PixelType::kF32;
  if (s == "float16") return PixelType::kF16;
  if (s == "bfloat16") return PixelType::kBF16;
  throw ValueError("dtype: unsupported '" + s + "' (uint8, float32, float16, bfloat16)");
}

void fill4(float* dst, const std::vector<float>& v, int channels, const char* name) {
  GDSIO_EXPECT((int)v.size() == channels, ValueError, name, ": ", v.size(), " values for ", channels, " channels");
  for (int c = 0; c < channels && c < 4; ++c) dst[c] = v[c];
}

ResizeSpec make_spec(int channels, int out_h, int out_w, const std::string& filter, bool antialias,
                     const std::string& out_dtype, bool scale, const std::optional<std::vector<float>>& mean,
                     const std::optional<std::vector<float>>& std) {
  ResizeSpec s;
  s.filter = parse_filter(filter);
  s.ref = antialias ? Reference::kPillow : Reference::kOpenCV;
  s.channels = channels;
  s.out_h = out_h;
  s.out_w = out_w;
  s.epilogue.out = parse_dtype(out_dtype);
  s.epilogue.scale = scale;
  s.epilogue.normalize = mean.has_value() || std.has_value();
  if (s.epilogue.normalize) {
    GDSIO_EXPECT(mean.has_value() && std.has_value(), ValueError, "mean and std: give both or neither");
    GDSIO_EXPECT(channels >= 1 && channels <= 4, ValueError, "images: 1 to 4 channels are supported, got ", channels);
    fill4(s.epilogue.mean, *mean, channels, "mean");
    fill4(s.epilogue.std, *std, channels, "std");
  }
  return s;
}

}  // namespace

GDSIO_EXPORT(transforms) {
  m.attr("tf_max_images_per_launch") = kMaxImagesPerLaunch;
  m.attr("tf_max_pad_fill") = kMaxPadFill;

  m.def(
      "tf_resize_workspace_bytes",
      [](const ImageTable& images, int channels, int out_h, int out_w, const std::string& filter,
         bool antialias) {
        ResizeSpec s = make_spec(channels, out_h, out_w, filter, antialias, "uint8", false, std::nullopt, std::nullopt);
        return resize_workspace_bytes(to_refs(images, true), s);
      },
      py::arg("images"), py::kw_only(), py::arg("channels"), py::arg("out_h"), py::arg("out_w"), py::arg("filter"),
      py::arg("antialias"), "Bytes of device workspace tf_resize needs for these images.");

  m.def(
      "tf_resize_windows",
      [](const ImageTable& images, int channels, int out_h, int out_w, const std::string& filter,
         bool antialias) {
        ResizeSpec s = make_spec(channels, out_h, out_w, filter, antialias, "uint8", false, std::nullopt, std::nullopt);
        std::vector<ImageRef> refs = to_refs(images, false);
        std::vector<std::int32_t> co = resize_windows(refs, s);
        return py::bytes(reinterpret_cast<const char*>(co.data()), co.size() * sizeof(std::int32_t));
      },
      py::arg("images"), py::kw_only(), py::arg("channels"), py::arg("out_h"), py::arg("out_w"), py::arg("filter"),
      py::arg("antialias"),
      "The host's filter windows, int32 bytes laid out as the device workspace (tests compare the two).");

  m.def(
      "tf_resize",
      [](const ImageTable& images, int channels, int out_h, int out_w, const std::string& filter,
         bool antialias, std::uintptr_t out, const std::string& out_dtype, bool scale,
         const std::optional<std::vector<float>>& mean, const std::optional<std::vector<float>>& std, int device,
         std::uintptr_t stream, std::uintptr_t workspace, std::size_t workspace_bytes, std::size_t threads) {
        ResizeSpec s = make_spec(channels, out_h, out_w, filter, antialias, out_dtype, scale, mean, std);
        std::vector<ImageRef> refs = to_refs(images, device >= 0);
        py::gil_scoped_release nogil;
        if (device < 0)
          resize_cpu(refs, s, out, threads);
        else
          resize_cuda(refs, s, out, workspace, workspace_bytes, device, stream);
      },
      py::arg("images"), py::kw_only(), py::arg("channels"), py::arg("out_h"), py::arg("out_w"), py::arg("filter"),
      py::arg("antialias"), py::arg("out"), py::arg("out_dtype") = "uint8", py::arg("scale") = false,
      py::arg("mean") = py::none(), py::arg("std") = py::none(), py::arg("device") = -1, py::arg("stream") = 0,
      py::arg("workspace") = 0, py::arg("workspace_bytes") = 0, py::arg("threads") = 1,
      "Resizes the (N, 6) table of uint8 CHW images [data, channel_stride, row_stride, h, w, flip] into a "
      "contiguous "
      "(N, C, out_h, out_w) output, optionally scaled to [0, 1] and normalized; device < 0: CPU.");

  m.def(
      "tf_cpu_simd", [] { return std::string(simd::level_name(simd::level())); },
      "The SIMD level the CPU resize runs at: 'avx512', 'avx2' or 'scalar' (GDSIO_CPU_SIMD=avx2 or scalar "
      "lowers it).");
  m.def(
      "tf_set_cpu_simd",
      [](const std::string& name) {
        GDSIO_EXPECT(name == "avx512" || name == "avx2" || name == "scalar", ValueError,
                     "level: 'avx512', 'avx2' or 'scalar', got '", name, "'");
        simd::set_level(name == "avx512" ? simd::Level::kAvx512
                        : name == "avx2" ? simd::Level::kAvx2
                                         : simd::Level::kScalar);
        return std::string(simd::level_name(simd::level()));
      },
      py::arg("level"),
      "Sets the CPU resize's SIMD level (clamped to what this CPU has; tests compare the levels); returns it.");

  m.def(
      "tf_pad",
      [](std::uintptr_t in, std::uintptr_t out, std::int64_t planes, int channels, std::int64_t height,
         std::int64_t width, int elem_size, std::int64_t left, std::int64_t top, std::int64_t right,
         std::int64_t bottom, const std::string& mode, const std::vector<std::uint64_t>& fill, int device,
         std::uintptr_t stream, std::size_t threads) {
        PadSpec s;
        s.planes = planes;
        s.channels = channels;
        s.elem_size = elem_size;
        s.rows = PadAxis{height, top, bottom};
        s.cols = PadAxis{width, left, right};
        if (mode == "constant") s.mode = PadMode::kConstant;
        else if (mode == "edge") s.mode = PadMode::kEdge;
        else if (mode == "reflect") s.mode = PadMode::kReflect;
        else if (mode == "symmetric") s.mode = PadMode::kSymmetric;
        else throw ValueError("padding_mode: '" + mode + "' is not constant, edge, reflect or symmetric");
        GDSIO_EXPECT(!fill.empty() && fill.size() <= (std::size_t)kMaxPadFill, ValueError, "fill: 1 to ",
                     kMaxPadFill, " values, got ", fill.size());
        s.fill_count = (std::int32_t)fill.size();
        for (std::size_t i = 0; i < fill.size(); ++i) s.fill[i] = fill[i];
        check_pad(s);
        py::gil_scoped_release nogil;
        if (device < 0)
          pad_cpu(in, out, s, threads);
        else
          pad_cuda(in, out, s, device, stream);
      },
      py::arg("src"), py::arg("out"), py::kw_only(), py::arg("planes"), py::arg("channels"), py::arg("height"),
      py::arg("width"), py::arg("elem_size"), py::arg("left"), py::arg("top"), py::arg("right"), py::arg("bottom"),
      py::arg("mode"), py::arg("fill"), py::arg("device") = -1, py::arg("stream") = 0, py::arg("threads") = 1,
      "Pads contiguous (planes, height, width) into (planes, height', width'); negative padding crops; fill "
      "holds the fill's bits per channel (or one for all).");
}
