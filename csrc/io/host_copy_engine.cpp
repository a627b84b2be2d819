// The host stand-in for the CUDA copy engine (see staging_pipeline.hpp).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "io/host_read.hpp"
#include "io/staging_pipeline.hpp"

namespace gdsio {

namespace {

std::uint64_t fnv1a(const char* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}

class HostCopyEngine final : public CopyEngine {
 public:
  explicit HostCopyEngine(unsigned delay_us) : delay_us_(delay_us), worker_([this] { run(); }) {}
  ~HostCopyEngine() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    for (auto* b : owned_) delete b;
  }

  StagingSlot acquire(std::size_t capacity) override {
    auto* b = new AlignedBuffer(capacity);
    {
      std::lock_guard<std::mutex> lk(mu_);
      owned_.push_back(b);
    }
    StagingSlot s;
    s.host = b->data();
    s.capacity = capacity;
    return s;
  }
  void release(StagingSlot& s) override { s.host = nullptr; }

  void copy_async(char* dst, const char* src, std::size_t n, StagingSlot& s) override {
    std::lock_guard<std::mutex> lk(mu_);
    s.ticket = ++queued_;
    s.pending = true;
    jobs_.push_back(Job{dst, src, n, fnv1a(src, n), s.ticket});
    report_.max_queued = std::max<std::uint64_t>(report_.max_queued, jobs_.size());
    cv_.notify_all();
  }

  void wait(StagingSlot& s) override {
    std::unique_lock<std::mutex> lk(mu_);
    if (done_ < s.ticket) ++report_.waits;
    cv_.wait(lk, [&] { return done_ >= s.ticket; });
    s.pending = false;
  }

  HostEngineReport report() {
    std::lock_guard<std::mutex> lk(mu_);
    return report_;
  }

 private:
  struct Job {
    char* dst;
    const char* src;
    std::size_t n;
    std::uint64_t hash;
    std::uint64_t ticket;
  };

  void run() {
    for (;;) {
      Job j;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        j = jobs_.front();
      }
      if (delay_us_) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
      const bool intact = fnv1a(j.src, j.n) == j.hash;
      std::memcpy(j.dst, j.src, j.n);
      {
        std::lock_guard<std::mutex> lk(mu_);
        jobs_.pop_front();
        ++report_.copies;
        if (!intact) ++report_.reuse_violations;
        done_ = j.ticket;
      }
      cv_.notify_all();
    }
  }

  unsigned delay_us_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::uint64_t queued_ = 0;
  std::uint64_t done_ = 0;
  bool stop_ = false;
  HostEngineReport report_;
  std::vector<AlignedBuffer*> owned_;
  std::thread worker_;  // last: started after every other member exists
};

}  // namespace

std::unique_ptr<CopyEngine> make_host_copy_engine(unsigned copy_delay_us) {
  return std::make_unique<HostCopyEngine>(copy_delay_us);
}

HostEngineReport host_copy_engine_report(CopyEngine& engine) {
  auto* h = dynamic_cast<HostCopyEngine*>(&engine);
  return h ? h->report() : HostEngineReport{};
}

HostEngineReport staged_read_host_engine(FileHandle& f, const std::vector<ReadRequest>& reqs,
                                         const ReadOptions& opts_in, unsigned copy_delay_us,
                                         ReadResult& res) {
  const ReadOptions opts = checked(opts_in);
  HostCopyEngine engine(copy_delay_us);
  res.backend = "pinned-host-engine";
  const auto t0 = std::chrono::steady_clock::now();
  staged_read(f, engine, reqs, opts, res);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return engine.report();
}

}  // namespace gdsio
