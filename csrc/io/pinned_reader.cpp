#include "io/pinned_reader.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "core/cuda_rt.hpp"
#include "io/host_read.hpp"
#include "io/staging_pipeline.hpp"

namespace gdsio {

#ifdef GDSIO_WITH_CUDA

namespace {

// Pinned buffers with their events, keyed by capacity. cudaHostAlloc and
// cudaFreeHost are slow and synchronising, hence the pool.
class StagingPool {
 public:
  // A slot of `capacity` bytes whose event belongs to `device`, the current device.
  StagingSlot acquire(std::size_t capacity, int device) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->capacity == capacity && it->device == device) {
          StagingSlot s = *it;
          free_.erase(it);
          cached_bytes_ -= s.capacity;
          ++in_use_;
          return s;
        }
      }
    }
    StagingSlot s;
    s.capacity = capacity;
    s.device = device;
    void* p = nullptr;
    // O_DIRECT reads land here, and cudaHostAlloc promises no page alignment:
    // a page of slack, and the slot starts at the first page boundary in it.
    GDSIO_CUDA_CHECK(cudaHostAlloc(&p, capacity + kDirectAlign, cudaHostAllocPortable),
                     "cudaHostAlloc of a ", capacity + kDirectAlign, "-byte staging buffer");
    s.allocation = p;
    s.host = static_cast<char*>(p) + (kDirectAlign - reinterpret_cast<std::uintptr_t>(p) % kDirectAlign) % kDirectAlign;
    cudaEvent_t ev = nullptr;
    // Blocking sync: a reader waiting for its slot sleeps instead of spinning
    // on a core that the other readers need.
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync);
    if (e != cudaSuccess) {
      cudaFreeHost(p);
      GDSIO_CUDA_CHECK(e, "cudaEventCreate");
    }
    s.event = ev;
    std::lock_guard<std::mutex> lk(mu_);
    ++in_use_;
    return s;
  }

  void release(StagingSlot& s) {
    if (!s.host) return;
    std::lock_guard<std::mutex> lk(mu_);
    --in_use_;
    s.pending = false;
    if (cached_bytes_ + s.capacity <= limit_) {
      free_.push_back(s);
      cached_bytes_ += s.capacity;
    } else {
      destroy(s);
    }
    s.host = nullptr;
  }

  // The pool keeps at most the bytes one call needs at once, the largest seen.
  void reserve_limit(std::size_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    limit_ = std::max(limit_, bytes);
  }

  void clear() {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& s : free_) destroy(s);
    free_.clear();
    cached_bytes_ = 0;
    limit_ = 0;
  }

  // A slot whose copy could not be waited for: counted out, never reused or freed.
  void abandon(StagingSlot& s) {
    if (!s.host) return;
    std::lock_guard<std::mutex> lk(mu_);
    --in_use_;
    s.host = nullptr;
  }

  StagingPoolStats stats() {
    std::lock_guard<std::mutex> lk(mu_);
    return StagingPoolStats{free_.size(), cached_bytes_, in_use_, limit_};
  }

 private:
  static void destroy(StagingSlot& s) {
    if (s.event) cudaEventDestroy(static_cast<cudaEvent_t>(s.event));
    cudaFreeHost(s.allocation);
  }
  std::mutex mu_;
  std::vector<StagingSlot> free_;
  std::size_t cached_bytes_ = 0;
  std::size_t in_use_ = 0;
  std::size_t limit_ = 0;
};

// Never destroyed: freeing pinned memory during static destruction races the
// CUDA runtime's own teardown. release_staging() runs from Python's atexit.
StagingPool& pool() {
  static auto* p = new StagingPool();
  return *p;
}

class CudaCopyEngine final : public CopyEngine {
 public:
  CudaCopyEngine(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  void bind_thread() override { GDSIO_CUDA_CHECK(cudaSetDevice(device_), "cudaSetDevice"); }
  int device() const override { return device_; }
  StagingSlot acquire(std::size_t capacity) override { return pool().acquire(capacity, device_); }
  void release(StagingSlot& s) override { pool().release(s); }
  void abandon(StagingSlot& s) override { pool().abandon(s); }
  void copy_async(char* dst, const char* src, std::size_t n, StagingSlot& s) override {
    GDSIO_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_),
                     "cudaMemcpyAsync of ", n, " bytes to the GPU");
    const cudaError_t e = cudaEventRecord(static_cast<cudaEvent_t>(s.event), stream_);
    if (e != cudaSuccess) {
      // The copy is queued but unguarded: let it finish before the slot can be reused.
      (void)cudaStreamSynchronize(stream_);
      GDSIO_CUDA_CHECK(e, "cudaEventRecord");
    }
    s.pending = true;
  }
  void wait(StagingSlot& s) override {
    GDSIO_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(s.event)),
                     "waiting for a host-to-device copy");
    s.pending = false;
  }

 private:
  int device_;
  cudaStream_t stream_;
};

}  // namespace

ReadResult pinned_read(FileHandle& f, const std::vector<ReadRequest>& reqs,
                       const ReadOptions& opts_in) {
  const ReadOptions opts = checked(opts_in);
  DeviceGuard device(opts.device);  // the caller is reader 0; its device is restored after
  for (const auto& r : reqs) {
    if (r.size == 0) continue;
    int dev = -1;
    std::string kind = cuda_pointer_kind(r.dst, &dev);
    GDSIO_EXPECT(kind == "device" || kind == "managed", ValueError,
                 "the pinned backend reads into GPU memory, but the destination is ", kind,
                 " memory");
    GDSIO_EXPECT(kind == "managed" || dev == opts.device, ValueError,
                 "the destination lives on cuda:", dev, ", not on cuda:", opts.device);
  }
  ReadResult res;
  res.backend = "pinned";
  const auto t0 = std::chrono::steady_clock::now();
  pool().reserve_limit(opts.threads * opts.staging_buffers * (direct_span_capacity(opts.chunk_bytes) + kDirectAlign));
  CudaCopyEngine engine(opts.device, reinterpret_cast<cudaStream_t>(opts.stream));
  staged_read(f, engine, reqs, opts, res);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::unique_ptr<CopyEngine> make_cuda_copy_engine(int device, std::uintptr_t stream, std::size_t reserve_bytes) {
  pool().reserve_limit(reserve_bytes);
  return std::make_unique<CudaCopyEngine>(device, reinterpret_cast<cudaStream_t>(stream));
}

StagingPoolStats staging_pool_stats() { return pool().stats(); }
void release_staging() { pool().clear(); }

#else

ReadResult pinned_read(FileHandle&, const std::vector<ReadRequest>&, const ReadOptions&) {
  throw_no_cuda();
}
std::unique_ptr<CopyEngine> make_cuda_copy_engine(int, std::uintptr_t, std::size_t) { throw_no_cuda(); }
StagingPoolStats staging_pool_stats() { return {}; }
void release_staging() {}

#endif

}  // namespace gdsio
