#include "io/staging_pipeline.hpp"

#include <algorithm>

#include "io/host_read.hpp"
#include "io/thread_pool.hpp"

namespace gdsio {

namespace {

// Waits for and returns every slot of a ring, also when unwinding after an
// error: a slot is never handed back while a copy may still read from it.
class SlotRing {
 public:
  SlotRing(CopyEngine& e, std::size_t n) : e_(e), n_(n) {}
  ~SlotRing() {
    for (auto& s : slots_) {
      try {
        if (s.pending) e_.wait(s);
      } catch (...) {
        // Unwinding already; the first error is the one reported.
        e_.abandon(s);
        continue;
      }
      try {
        e_.release(s);
      } catch (...) {
      }
    }
  }
  // The k-th slot in round-robin order, acquiring lazily up to n slots.
  StagingSlot& next(std::size_t capacity) {
    if (slots_.size() < n_ && k_ == slots_.size()) slots_.push_back(e_.acquire(capacity));
    StagingSlot& s = slots_[k_ % slots_.size()];
    ++k_;
    return s;
  }
  void drain() {
    for (auto& s : slots_)
      if (s.pending) e_.wait(s);
  }

 private:
  CopyEngine& e_;
  std::size_t n_;
  std::size_t k_ = 0;
  std::vector<StagingSlot> slots_;
};

}  // namespace

void staged_read(FileHandle& f, CopyEngine& engine, const std::vector<ReadRequest>& reqs,
                 const ReadOptions& opts, ReadResult& res) {
  const HostReadPlan plan = plan_host_read(f, reqs, opts, res);
  const int dfd = plan.direct_fd;
  const std::vector<Chunk>& chunks = plan.chunks;
  const std::size_t capacity = direct_span_capacity(opts.chunk_bytes);
  parallel_for(chunks.size(), opts.threads, [&](std::size_t, WorkQueue& q) {
    engine.bind_thread();
    SlotRing ring(engine, opts.staging_buffers);
    std::size_t i;
    while (q.claim(&i)) {
      const Chunk& c = chunks[i];
      StagingSlot& s = ring.next(capacity);
      if (s.pending) engine.wait(s);  // the copy from staging_buffers chunks ago
      const char* src = s.host;
      if (dfd >= 0) {
        src = read_span_direct(f, dfd, s.host, c.file_offset, c.len);
      } else {
        f.pread_exact(s.host, c.len, c.file_offset);
      }
      engine.copy_async(c.dst, src, c.len, s);
    }
    ring.drain();
  });
  for (const auto& r : reqs) res.nbytes += r.size;
}

}  // namespace gdsio
