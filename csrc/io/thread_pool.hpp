// A fixed-size pool of reader threads and `parallel_for`, the one way gdsio
// fans work out. The calling thread takes part in the loop, so a read issued
// from inside a pool thread (read_batch) cannot deadlock on a busy pool.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gdsio {

class ThreadPool {
 public:
  explicit ThreadPool(std::size_t nthreads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void submit(std::function<void()> task);
  void grow(std::size_t nthreads);
  std::size_t size() const noexcept { return workers_.size(); }

  // Queues `task` on the process-wide pool, first grown to at least
  // `min_threads` workers; the pool is created on first use so that importing
  // gdsio starts no thread.
  static void submit_global(std::size_t min_threads, std::function<void()> task);
  // Joins the global pool's threads (atexit, and tests that count threads).
  static void shutdown_global();
  static std::size_t global_size();

 private:
  void run();
  std::vector<std::thread> workers_;
  std::deque<std::function<void()>> queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

// Runs `worker(worker_index, claim)` on up to `nworkers` threads (the caller
// is worker 0). Each worker calls `claim()` for the next item index until it
// returns false. The first exception stops further claims and is rethrown in
// the caller once every started worker has returned.
class WorkQueue {
 public:
  explicit WorkQueue(std::size_t nitems) : nitems_(nitems) {}
  // Next item index into *i; false when none is left or the loop failed.
  bool claim(std::size_t* i) {
    if (failed_.load(std::memory_order_relaxed)) return false;
    std::size_t v = next_.fetch_add(1, std::memory_order_relaxed);
    if (v >= nitems_) return false;
    *i = v;
    return true;
  }
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_) error_ = e;
    failed_.store(true);
  }
  std::exception_ptr error() {
    std::lock_guard<std::mutex> lk(mu_);
    return error_;
  }

 private:
  std::size_t nitems_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::exception_ptr error_;
};

void parallel_for(std::size_t nitems, std::size_t nworkers,
                  const std::function<void(std::size_t worker, WorkQueue& q)>& worker);

}  // namespace gdsio
