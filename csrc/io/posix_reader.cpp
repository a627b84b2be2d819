#include "io/posix_reader.hpp"

#include <chrono>

#include "io/host_read.hpp"
#include "io/thread_pool.hpp"

namespace gdsio {

ReadResult posix_read(FileHandle& f, const std::vector<ReadRequest>& reqs,
                      const ReadOptions& opts_in) {
  const ReadOptions opts = checked(opts_in);
  ReadResult res;
  res.backend = "posix";
  const auto t0 = std::chrono::steady_clock::now();
  const HostReadPlan plan = plan_host_read(f, reqs, opts, res);
  const int dfd = plan.direct_fd;
  const std::vector<Chunk>& chunks = plan.chunks;
  parallel_for(chunks.size(), opts.threads, [&](std::size_t, WorkQueue& q) {
    AlignedBuffer bounce;  // per worker, only if an O_DIRECT chunk needs it
    std::size_t i;
    while (q.claim(&i)) {
      const Chunk& c = chunks[i];
      read_host_chunk(f, dfd, c.dst, c.len, c.file_offset, bounce, opts.chunk_bytes);
    }
  });
  for (const auto& r : reqs) res.nbytes += r.size;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace gdsio
