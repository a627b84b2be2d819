// Replays of the v2 transforms (_core.tf_color, tf_pad): the CPU
// twin and the emulated kernels on the same inputs, each input in an
// allocation of exactly the bytes the call may read, each output of exactly
// its size.
#include <stdexcept>

#include "image/transforms.hpp"
#include "replay.hpp"

namespace {

using namespace gdsio::image;
using gdsio_emu::Buffer;

PixelType color_type(const std::string& s) {
  if (s == "uint8") return PixelType::kU8;
  if (s == "float32") return PixelType::kF32;
  if (s == "float16") return PixelType::kF16;
  if (s == "bfloat16") return PixelType::kBF16;
  throw std::runtime_error("unknown dtype " + s);
}

PadMode pad_mode(const std::string& s) {
  if (s == "constant") return PadMode::kConstant;
  if (s == "edge") return PadMode::kEdge;
  if (s == "reflect") return PadMode::kReflect;
  if (s == "symmetric") return PadMode::kSymmetric;
  throw std::runtime_error("unknown padding mode " + s);
}

std::uintptr_t stream_int() { return reinterpret_cast<std::uintptr_t>(gdsio_emu::stream()); }

}  // namespace

// One tf_color call: a batch of images, each with up to 4 ops in its order.
// The launches: per 256 images, the contrast sums and means (when an image of
// them has a contrast op) and the pixels.
GDSIO_EMU_OP(color) {
  const ColorSpec spec{color_type(r.str("dtype")), static_cast<std::int32_t>(r.num("channels"))};
  const std::size_t elem = spec.type == PixelType::kU8 ? 1 : spec.type == PixelType::kF32 ? 4 : 2;
  const auto& image_lines = r.lines("image");
  if (image_lines.size() != r.blobs.size()) throw std::runtime_error("one blob per image expected");
  std::vector<Buffer> sources, cpu_out, gpu_out;
  sources.reserve(image_lines.size());
  cpu_out.reserve(image_lines.size());
  gpu_out.reserve(image_lines.size());
  std::vector<ColorImage> cpu, gpu;
  for (std::size_t i = 0; i < image_lines.size(); ++i) {
    const auto& l = image_lines[i];  // channel_stride row_stride height width op0..op3 factor0..factor3
    ColorImage im;
    sources.emplace_back(*r.blobs[i]);
    im.src = sources.back().addr();
    im.channel_stride = std::stoll(l.at(0));
    im.row_stride = std::stoll(l.at(1));
    im.height = static_cast<std::int32_t>(std::stol(l.at(2)));
    im.width = static_cast<std::int32_t>(std::stol(l.at(3)));
    for (int k = 0; k < kMaxColorOps; ++k) {
      const double f = std::stod(l.at(8 + k));
      im.ops[k] = static_cast<ColorOp>(std::stoi(l.at(4 + k)));
      im.factor[k] = static_cast<float>(f);
      im.one_minus[k] = static_cast<float>(1.0 - f);  // as the binding computes it
    }
    const std::size_t bytes = static_cast<std::size_t>(spec.channels) * im.height * im.width * elem;
    cpu_out.emplace_back(bytes, gdsio_emu::kCpuFill);
    gpu_out.emplace_back(bytes, gdsio_emu::kGpuFill);
    im.dst = cpu_out.back().addr();
    cpu.push_back(im);
    im.dst = gpu_out.back().addr();
    gpu.push_back(im);
  }
  color_cpu(cpu, spec, gdsio_emu::kCpuThreads);
  std::vector<ColorImage> planned = gpu;
  Buffer ws(plan_color(planned, spec), gdsio_emu::kGpuFill);
  gdsio_emu::take_launches();
  color_cuda(gpu, spec, ws.addr(), ws.size(), gdsio_emu::kDevice, stream_int());
  std::size_t expect = 0;
  for (std::size_t first = 0; first < planned.size(); first += kMaxColorImagesPerLaunch) {
    bool contrast = false;
    for (std::size_t k = first; k < planned.size() && k < first + kMaxColorImagesPerLaunch; ++k)
      contrast |= planned[k].bands > 0;
    expect += contrast ? 3 : 1;
  }
  check.launches(expect);
  for (std::size_t i = 0; i < gpu_out.size(); ++i) check.same("image " + std::to_string(i), gpu_out[i], cpu_out[i]);
}

// One tf_pad call: contiguous (planes, height, width) padded (or cropped) per side.
GDSIO_EMU_OP(pad) {
  PadSpec s;
  s.planes = r.num("planes");
  s.channels = static_cast<std::int32_t>(r.num("channels"));
  s.elem_size = static_cast<std::int32_t>(r.num("elem_size"));
  const auto& ltrb = r.line("ltrb");
  s.cols = PadAxis{r.num("width"), std::stoll(ltrb.at(0)), std::stoll(ltrb.at(2))};
  s.rows = PadAxis{r.num("height"), std::stoll(ltrb.at(1)), std::stoll(ltrb.at(3))};
  s.mode = pad_mode(r.str("mode"));
  const auto& fill = r.line("fill");
  if (fill.empty() || fill.size() > static_cast<std::size_t>(kMaxPadFill)) throw std::runtime_error("bad fill line");
  s.fill_count = static_cast<std::int32_t>(fill.size());
  for (std::size_t i = 0; i < fill.size(); ++i) s.fill[i] = std::stoull(fill[i]);
  Buffer src(*r.blobs.at(0));
  const std::size_t n = static_cast<std::size_t>(s.planes * s.rows.out() * s.cols.out() * s.elem_size);
  Buffer cpu(n, gdsio_emu::kCpuFill), gpu(n, gdsio_emu::kGpuFill);
  pad_cpu(src.addr(), cpu.addr(), s, gdsio_emu::kCpuThreads);
  pad_cuda(src.addr(), gpu.addr(), s, gdsio_emu::kDevice, stream_int());
  check.launches(s.planes ? 1 : 0);
  check.same("output", gpu, cpu);
}
