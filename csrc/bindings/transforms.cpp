// gdsio._core.tf_*: the transforms (gdsio/transforms.py is the public face).
// Images, outputs and workspaces cross as arrays (bindings/arrays.hpp), each
// viewed and checked here before any byte moves; the device is the arrays'
// (cpu: the CPU twin on `threads` threads; cuda:n: the kernels on `stream`).
// The GIL is released around work.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings/arrays.hpp"
#include "bindings/image_arrays.hpp"
#include "bindings/registry.hpp"
#include "core/error.hpp"
#include "image/resample_simd.hpp"
#include "image/resize_cpu_simd.hpp"
#include "image/transforms.hpp"

namespace py = pybind11;
using namespace gdsio;
using namespace gdsio::image;
using bindings::Array;

namespace {

// Per image (top, left, height, width) crops and left-right mirrors; value
// arrays, read here (numpy converts lists; no unsafe casts).
using Boxes = py::array_t<std::int64_t, py::array::c_style>;
using Flips = py::array_t<bool, py::array::c_style>;

// A resize's images: a sequence of (C, H, W) uint8 arrays or one
// (N, C, H, W) array, read through their strides: a (C, H, W) view of
// (H, W, C) memory (pixel stride C) is read as it is by the CPU; the CUDA
// kernels take channel planes (pixel stride 1). A box crops its image in
// place (a pointer offset), inside the image.
struct ResizeBatch {
  std::vector<Array> arrays;  // the views: they keep the images alive until the call ends
  std::vector<ImageRef> refs;
  int channels = 0;
};

ResizeBatch resize_batch(py::handle images, const std::optional<Boxes>& boxes, const std::optional<Flips>& flips) {
  ResizeBatch b;
  b.arrays = bindings::view_batch(images, "images", 3);
  const auto n = static_cast<std::int64_t>(b.arrays.size());
  GDSIO_EXPECT(n > 0, ValueError, "images: the batch is empty");
  if (boxes)
    GDSIO_EXPECT(boxes->ndim() == 2 && boxes->shape(0) == n && boxes->shape(1) == 4, ValueError, "boxes: an (", n,
                 ", 4) array of (top, left, height, width) expected, one row per image");
  if (flips)
    GDSIO_EXPECT(flips->ndim() == 1 && flips->shape(0) == n, ValueError, "flips: ", n,
                 " flags expected, one per image");
  b.channels = static_cast<int>(b.arrays[0].size(0));
  b.refs.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const Array& a = b.arrays[static_cast<std::size_t>(i)];
    a.of(bindings::kUInt8).shaped({b.channels, -1, -1});
    const std::int64_t h = a.shape[1], w = a.shape[2];
    std::int64_t top = 0, left = 0, bh = h, bw = w;
    if (boxes) {
      const std::int64_t* r = boxes->data(i, 0);
      top = r[0], left = r[1], bh = r[2], bw = r[3];
      GDSIO_EXPECT(bh > 0 && bw > 0 && top >= 0 && left >= 0 && top <= h - bh && left <= w - bw, ValueError,
                   "boxes[", i, "] = (top=", top, ", left=", left, ", height=", bh, ", width=", bw,
                   ") is outside images[", i, "] (", h, "x", w, ")");
    }
    GDSIO_EXPECT(bh <= INT32_MAX && bw <= INT32_MAX, ValueError, a.name, ": size ", bh, "x", bw, " out of range");
    ImageRef& r = b.refs[static_cast<std::size_t>(i)];
    r.channel_stride = a.strides[0];
    r.row_stride = a.strides[1];
    r.pixel_stride = a.strides[2];
    r.data = a.data + static_cast<std::uintptr_t>(top * r.row_stride + left * r.pixel_stride);  // uint8: bytes
    r.height = static_cast<std::int32_t>(bh);
    r.width = static_cast<std::int32_t>(bw);
    r.flip = flips && flips->data()[i];
  }
  return b;
}

// The CUDA kernels read channel planes only.
void require_planes(const ResizeBatch& b) {
  for (std::size_t i = 0; i < b.refs.size(); ++i)
    GDSIO_EXPECT(b.refs[i].pixel_stride == 1, ValueError, "images[", i,
                 "]: the CUDA resize reads channel planes (pixel stride 1), got pixel stride ", b.refs[i].pixel_stride,
                 "; make the image contiguous first");
}

Filter parse_filter(const std::string& s) {
  if (s == "nearest") return Filter::kNearest;
  if (s == "box") return Filter::kBox;
  if (s == "bilinear") return Filter::kBilinear;
  if (s == "bicubic") return Filter::kBicubic;
  throw ValueError("interpolation: unknown filter '" + s + "' (nearest, box, bilinear, bicubic)");
}

void fill4(float* dst, const std::vector<float>& v, int channels, const char* name) {
  GDSIO_EXPECT((int)v.size() == channels, ValueError, name, ": ", v.size(), " values for ", channels, " channels");
  for (int c = 0; c < channels && c < 4; ++c) dst[c] = v[c];
}

ResizeSpec make_spec(int channels, int out_h, int out_w, const std::string& filter, bool antialias,
                     PixelType out_type, bool scale, const std::optional<std::vector<float>>& mean,
                     const std::optional<std::vector<float>>& std) {
  ResizeSpec s;
  s.filter = parse_filter(filter);
  s.ref = antialias ? Reference::kPillow : Reference::kOpenCV;
  s.channels = channels;
  s.out_h = out_h;
  s.out_w = out_w;
  s.epilogue.out = out_type;
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
      [](py::handle images, int out_h, int out_w, const std::string& filter, bool antialias,
         const std::optional<Boxes>& boxes) {
        ResizeBatch b = resize_batch(images, boxes, std::nullopt);
        require_planes(b);
        const ResizeSpec s =
            make_spec(b.channels, out_h, out_w, filter, antialias, PixelType::kU8, false, std::nullopt, std::nullopt);
        return resize_workspace_bytes(b.refs, s);
      },
      py::arg("images"), py::kw_only(), py::arg("out_h"), py::arg("out_w"), py::arg("filter"), py::arg("antialias"),
      py::arg("boxes") = py::none(),
      "Bytes of device workspace tf_resize needs for these images (cropped to boxes).");

  m.def(
      "tf_resize_windows",
      [](py::handle images, int out_h, int out_w, const std::string& filter, bool antialias,
         const std::optional<Boxes>& boxes) {
        ResizeBatch b = resize_batch(images, boxes, std::nullopt);
        const ResizeSpec s =
            make_spec(b.channels, out_h, out_w, filter, antialias, PixelType::kU8, false, std::nullopt, std::nullopt);
        std::vector<std::int32_t> co = resize_windows(b.refs, s);
        return py::bytes(reinterpret_cast<const char*>(co.data()), co.size() * sizeof(std::int32_t));
      },
      py::arg("images"), py::kw_only(), py::arg("out_h"), py::arg("out_w"), py::arg("filter"), py::arg("antialias"),
      py::arg("boxes") = py::none(),
      "The host's filter windows, int32 bytes laid out as the device workspace (tests compare the two).");

  m.def(
      "tf_resize",
      [](py::handle images, py::handle out, const std::string& filter, bool antialias,
         const std::optional<Boxes>& boxes, const std::optional<Flips>& flips, bool scale,
         const std::optional<std::vector<float>>& mean, const std::optional<std::vector<float>>& std,
         std::uintptr_t stream, py::handle workspace, std::size_t threads) {
        ResizeBatch b = resize_batch(images, boxes, flips);
        const Array o = bindings::view(out, "out");
        std::vector<const Array*> all;
        all.reserve(b.arrays.size() + 1);
        for (const Array& a : b.arrays) all.push_back(&a);
        all.push_back(&o);
        const int device = bindings::common_device(all, -1);
        o.writable().dims(4).shaped({static_cast<std::int64_t>(b.refs.size()), b.channels, -1, -1}).is_dense();
        GDSIO_EXPECT(o.shape[2] <= INT32_MAX && o.shape[3] <= INT32_MAX, ValueError, "out: an output of ", o.shape[2],
                     "x", o.shape[3], " is out of range");
        const ResizeSpec s = make_spec(b.channels, static_cast<int>(o.shape[2]), static_cast<int>(o.shape[3]), filter,
                                       antialias, bindings::pixel_type_of(o, "the resize writes"), scale, mean, std);
        if (device < 0) {
          py::gil_scoped_release nogil;
          resize_cpu(b.refs, s, o.data, threads);
          return;
        }
        require_planes(b);
        const Array ws = bindings::workspace_for(workspace, resize_workspace_bytes(b.refs, s), device);
        py::gil_scoped_release nogil;
        resize_cuda(b.refs, s, o.data, ws.data, static_cast<std::size_t>(ws.numel()) * ws.dtype.itemsize(), device,
                    stream);
      },
      py::arg("images"), py::kw_only(), py::arg("out"), py::arg("filter"), py::arg("antialias"),
      py::arg("boxes") = py::none(), py::arg("flips") = py::none(), py::arg("scale") = false,
      py::arg("mean") = py::none(), py::arg("std") = py::none(), py::arg("stream") = 0,
      py::arg("workspace") = py::none(), py::arg("threads") = 1,
      "Resizes uint8 (C, H, W) images (a sequence, or one (N, C, H, W) array), each cropped to boxes[i] = (top, "
      "left, height, width) and mirrored where flips[i], into the contiguous (N, C, out_h, out_w) `out` of "
      "uint8, float32, float16 or bfloat16, optionally scaled to [0, 1] and normalized; on the arrays' device "
      "(CUDA: `workspace`, a byte buffer or a callable given the bytes that returns one).");

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
      "tf_vector_epilogue",
      [](int channels, const std::string& dtype, bool scale, const std::optional<std::vector<float>>& mean,
         const std::optional<std::vector<float>>& std) {
        GDSIO_EXPECT(dtype == "float32" || dtype == "float16" || dtype == "bfloat16", ValueError,
                     "dtype: 'float32', 'float16' or 'bfloat16', got '", dtype, "'");
        const PixelType out = dtype == "float32" ? PixelType::kF32
                              : dtype == "float16" ? PixelType::kF16
                                                   : PixelType::kBF16;
        const ResizeSpec s = make_spec(channels, 1, 1, "bilinear", true, out, scale, mean, std);
        return image::detail::epilogue_table(s.epilogue, channels, simd::level()).vector;
      },
      py::arg("channels"), py::arg("dtype") = "float32", py::kw_only(), py::arg("scale") = false,
      py::arg("mean") = py::none(), py::arg("std") = py::none(),
      "Whether the CPU resize writes this epilogue (scale, then normalize, then the dtype) with its vector "
      "kernel at the current SIMD level: the kernel gave its table's 256 values of every channel back bit for "
      "bit (False: one table lookup a value, the same bits; always False at 'scalar').");

  m.def(
      "tf_pad",
      [](py::handle src, py::handle out, std::int64_t left, std::int64_t top, std::int64_t right,
         std::int64_t bottom, const std::string& mode, const std::vector<std::uint64_t>& fill, std::uintptr_t stream,
         std::size_t threads) {
        const Array in = bindings::view(src, "src"), o = bindings::view(out, "out");
        const int device = bindings::common_device({&in, &o}, -1);
        GDSIO_EXPECT(in.ndim() >= 2, ValueError, "src: has ", in.ndim(), " dimensions, expected (..., H, W)");
        in.is_dense();
        const std::size_t elem = in.dtype.itemsize();
        GDSIO_EXPECT(elem == 1 || elem == 2 || elem == 4 || elem == 8, ValueError, "src: has dtype ", in.dtype.name(),
                     " of ", elem, " bytes; pad moves elements of 1, 2, 4 or 8 bytes");
        PadSpec s;
        s.planes = 1;
        for (int d = 0; d + 2 < in.ndim(); ++d) s.planes *= in.shape[d];
        s.channels = in.ndim() >= 3 ? static_cast<std::int32_t>(std::min<std::int64_t>(in.size(-3), INT32_MAX)) : 1;
        s.elem_size = static_cast<std::int32_t>(elem);
        s.rows = PadAxis{in.size(-2), top, bottom};
        s.cols = PadAxis{in.size(-1), left, right};
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
        std::vector<std::int64_t> want = in.shape;
        want[want.size() - 2] = s.rows.out();
        want[want.size() - 1] = s.cols.out();
        o.writable().of(in.dtype).shaped(want).is_dense();
        py::gil_scoped_release nogil;
        if (device < 0)
          pad_cpu(in.data, o.data, s, threads);
        else
          pad_cuda(in.data, o.data, s, device, stream);
      },
      py::arg("src"), py::arg("out"), py::kw_only(), py::arg("left"), py::arg("top"), py::arg("right"),
      py::arg("bottom"), py::arg("mode"), py::arg("fill"), py::arg("stream") = 0, py::arg("threads") = 1,
      "Pads the contiguous (..., C, H, W) or (H, W) `src` into the contiguous `out` of the padded shape, same "
      "dtype (1, 2, 4 or 8 bytes) and device; negative padding crops; fill holds the fill's bits per channel (or "
      "one for all).");
}
