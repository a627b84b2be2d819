// Replay of the uncompressed decoders (_core.img_decode_pixels_*): the jobs
// gdsio.image built for one call, each source in an allocation of exactly
// src_bytes and each output of exactly its size.
#include <stdexcept>

#include "image/decode.hpp"
#include "replay.hpp"

GDSIO_EMU_OP(decode) {
  using namespace gdsio::image;
  const auto& job_lines = r.lines("job");
  if (job_lines.size() != r.blobs.size()) throw std::runtime_error("one blob per job expected");
  std::vector<gdsio_emu::Buffer> src, cpu_out, gpu_out;
  src.reserve(job_lines.size());
  cpu_out.reserve(job_lines.size());
  gpu_out.reserve(job_lines.size());
  std::vector<PixelJob> cpu_jobs, gpu_jobs;
  for (std::size_t i = 0; i < job_lines.size(); ++i) {
    // height width stride_c stride_y stride_x src_channels dst_channels sample out convert maxval
    const auto& l = job_lines[i];
    auto n = [&](int k) { return std::stoll(l.at(k)); };
    PixelJob j;
    src.emplace_back(*r.blobs[i]);
    j.src = src.back().data();
    j.src_bytes = src.back().size();
    j.height = n(0);
    j.width = n(1);
    j.stride_c = n(2);
    j.stride_y = n(3);
    j.stride_x = n(4);
    j.src_channels = static_cast<std::int32_t>(n(5));
    j.dst_channels = static_cast<std::int32_t>(n(6));
    j.sample = static_cast<Sample>(n(7));
    j.out = static_cast<OutType>(n(8));
    j.convert = static_cast<Convert>(n(9));
    j.maxval = static_cast<std::uint32_t>(n(10));
    const std::size_t bytes = j.dst_channels * j.height * j.width * out_bytes(j.out);
    cpu_out.emplace_back(bytes, gdsio_emu::kCpuFill);
    gpu_out.emplace_back(bytes, gdsio_emu::kGpuFill);
    j.dst = cpu_out.back().data();
    cpu_jobs.push_back(j);
    j.dst = gpu_out.back().data();
    gpu_jobs.push_back(j);
  }
  decode_pixels_cpu(cpu_jobs, gdsio_emu::kCpuThreads);
  const std::size_t launches =
      decode_pixels_cuda(gpu_jobs, gdsio_emu::kDevice, reinterpret_cast<std::uintptr_t>(gdsio_emu::stream()));
  const std::size_t expect = (gpu_jobs.size() + kJobsPerLaunch - 1) / kJobsPerLaunch;
  if (launches != expect)
    check.fail("decode_pixels_cuda says " + std::to_string(launches) + " launches, " + std::to_string(expect) +
               " expected");
  check.launches(expect);
  for (std::size_t i = 0; i < gpu_out.size(); ++i) check.same("job " + std::to_string(i), gpu_out[i], cpu_out[i]);
}
