// Replays of the resize (_core.tf_resize): the CPU twin and the emulated
// kernels on the same inputs, each input in an allocation of exactly the
// bytes the call may read.
#include <stdexcept>

#include "image/transforms.hpp"
#include "replay.hpp"

namespace {

using namespace gdsio::image;
using gdsio_emu::Buffer;
using gdsio_emu::Record;

Filter filter_of(const std::string& s) {
  if (s == "nearest") return Filter::kNearest;
  if (s == "box") return Filter::kBox;
  if (s == "bilinear") return Filter::kBilinear;
  if (s == "bicubic") return Filter::kBicubic;
  throw std::runtime_error("unknown filter " + s);
}

PixelType dtype_of(const std::string& s) {
  if (s == "uint8") return PixelType::kU8;
  if (s == "float32") return PixelType::kF32;
  if (s == "float16") return PixelType::kF16;
  if (s == "bfloat16") return PixelType::kBF16;
  throw std::runtime_error("unknown dtype " + s);
}

std::size_t elem_bytes(PixelType t) { return t == PixelType::kU8 ? 1 : t == PixelType::kF32 ? 4 : 2; }

void fill4(float* dst, const std::vector<float>& v) {
  for (std::size_t c = 0; c < v.size() && c < 4; ++c) dst[c] = v[c];
}

std::size_t launches_for(std::size_t n, std::size_t per_launch) { return (n + per_launch - 1) / per_launch; }

}  // namespace

// One resize (or fused crop-flip-resize-normalize) of a batch: outputs equal,
// and the windows the device computed equal the host's, int for int.
GDSIO_EMU_OP(resize) {
  ResizeSpec spec;
  spec.filter = filter_of(r.str("filter"));
  spec.ref = r.num("antialias") ? Reference::kPillow : Reference::kOpenCV;
  spec.channels = static_cast<std::int32_t>(r.num("channels"));
  spec.out_h = static_cast<std::int32_t>(r.num("out_h"));
  spec.out_w = static_cast<std::int32_t>(r.num("out_w"));
  spec.epilogue.out = dtype_of(r.str("out_dtype"));
  spec.epilogue.scale = r.num("scale") != 0;
  spec.epilogue.normalize = r.has("mean");
  if (spec.epilogue.normalize) {
    fill4(spec.epilogue.mean, r.floats("mean"));
    fill4(spec.epilogue.std, r.floats("std"));
  }
  const auto& image_lines = r.lines("image");
  if (image_lines.size() != r.blobs.size()) throw std::runtime_error("one blob per image expected");
  std::vector<Buffer> sources;
  sources.reserve(image_lines.size());
  std::vector<ImageRef> refs;
  for (std::size_t i = 0; i < image_lines.size(); ++i) {
    const auto& l = image_lines[i];  // channel_stride row_stride height width flip
    sources.emplace_back(*r.blobs[i]);
    refs.push_back(ImageRef{sources.back().addr(), std::stoll(l.at(0)), std::stoll(l.at(1)),
                            static_cast<std::int32_t>(std::stol(l.at(2))), static_cast<std::int32_t>(std::stol(l.at(3))),
                            l.at(4) != "0"});
  }
  const std::size_t out_bytes = refs.size() * spec.channels * spec.out_h * spec.out_w * elem_bytes(spec.epilogue.out);
  Buffer cpu(out_bytes, gdsio_emu::kCpuFill), gpu(out_bytes, gdsio_emu::kGpuFill);
  resize_cpu(refs, spec, cpu.addr(), gdsio_emu::kCpuThreads);
  const std::size_t ws_bytes = resize_workspace_bytes(refs, spec);
  Buffer ws(ws_bytes, gdsio_emu::kGpuFill);
  gdsio_emu::take_launches();
  resize_cuda(refs, spec, gpu.addr(), ws.addr(), ws.size(), gdsio_emu::kDevice,
              reinterpret_cast<std::uintptr_t>(gdsio_emu::stream()));
  check.launches(2 * launches_for(refs.size(), kMaxImagesPerLaunch));  // windows + resample, per launch
  check.same("output", gpu, cpu);
  const std::vector<std::int32_t> host = resize_windows(refs, spec);
  if (host.size() * sizeof(std::int32_t) != ws.size())
    check.fail("workspace of " + std::to_string(ws.size()) + " bytes, host windows of " +
               std::to_string(host.size() * 4));
  else
    check.same("device windows vs host windows", ws.data(), host.data(), ws.size());
}
