#include "io/read_plan.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "io/file.hpp"

namespace gdsio {

std::vector<Chunk> plan_chunks(const std::vector<ReadRequest>& reqs, std::size_t chunk_bytes) {
  std::vector<Chunk> out;
  for (const auto& r : reqs) {
    std::uint64_t off = r.file_offset;
    const std::uint64_t end = r.file_offset + r.size;
    char* dst = static_cast<char*>(r.dst);
    while (off < end) {
      std::uint64_t next = std::min<std::uint64_t>(align_down(off, chunk_bytes) + chunk_bytes, end);
      out.push_back(Chunk{dst + (off - r.file_offset), off, static_cast<std::size_t>(next - off)});
      off = next;
    }
  }
  return out;
}

ReadOptions checked(ReadOptions o) {
  GDSIO_EXPECT(o.chunk_bytes >= kDirectAlign && o.chunk_bytes % kDirectAlign == 0, ValueError,
               "chunk_bytes must be a positive multiple of 4096, got ", o.chunk_bytes);
  GDSIO_EXPECT(o.chunk_bytes <= (std::size_t{1} << 30), ValueError,
               "chunk_bytes must be at most 1 GiB, got ", o.chunk_bytes);
  GDSIO_EXPECT(o.staging_buffers >= 2 && o.staging_buffers <= 64, ValueError,
               "staging_buffers must be between 2 and 64 (the pipeline needs two to overlap), got ",
               o.staging_buffers);
  GDSIO_EXPECT(o.device >= 0, ValueError, "device must be >= 0, got ", o.device);
  o.threads = std::clamp<std::size_t>(o.threads, 1, 256);
  return o;
}

}  // namespace gdsio
