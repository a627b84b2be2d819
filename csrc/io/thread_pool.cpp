#include "io/thread_pool.hpp"

namespace gdsio {

ThreadPool::ThreadPool(std::size_t nthreads) { grow(nthreads); }

void ThreadPool::grow(std::size_t nthreads) {
  while (workers_.size() < nthreads) workers_.emplace_back([this] { run(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      // Drain the queue before stopping: queued tasks hold shared state only
      // and return at once when their loop is over.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

namespace {
std::mutex g_pool_mu;
std::unique_ptr<ThreadPool> g_pool;
}  // namespace

void ThreadPool::submit_global(std::size_t min_threads, std::function<void()> task) {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  if (!g_pool) g_pool = std::make_unique<ThreadPool>(min_threads);
  g_pool->grow(min_threads);
  g_pool->submit(std::move(task));
}

void ThreadPool::shutdown_global() {
  std::unique_ptr<ThreadPool> old;
  {
    std::lock_guard<std::mutex> lk(g_pool_mu);
    old = std::move(g_pool);
  }
}

std::size_t ThreadPool::global_size() {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  return g_pool ? g_pool->size() : 0;
}

namespace {
// Shared between the caller and its helper tasks; tasks still queued when the
// caller returns see an exhausted queue and touch nothing else.
struct LoopState {
  LoopState(std::size_t n, const std::function<void(std::size_t, WorkQueue&)>* fn)
      : queue(n), fn(fn) {}
  WorkQueue queue;
  const std::function<void(std::size_t, WorkQueue&)>* fn;
  std::mutex mu;
  std::condition_variable cv;
  std::size_t active = 0;
  bool closed = false;  // set by the caller once it stops waiting
};

void run_worker(const std::shared_ptr<LoopState>& st, std::size_t widx) {
  {
    std::lock_guard<std::mutex> lk(st->mu);
    if (st->closed) return;
    ++st->active;
  }
  try {
    (*st->fn)(widx, st->queue);
  } catch (...) {
    st->queue.fail(std::current_exception());
  }
  {
    std::lock_guard<std::mutex> lk(st->mu);
    --st->active;
  }
  st->cv.notify_all();
}
}  // namespace

void parallel_for(std::size_t nitems, std::size_t nworkers,
                  const std::function<void(std::size_t, WorkQueue&)>& worker) {
  if (nitems == 0) return;
  if (nworkers < 1) nworkers = 1;
  if (nworkers > nitems) nworkers = nitems;
  auto st = std::make_shared<LoopState>(nitems, &worker);
  if (nworkers > 1) {
    for (std::size_t w = 1; w < nworkers; ++w)
      ThreadPool::submit_global(nworkers - 1, [st, w] { run_worker(st, w); });
  }
  run_worker(st, 0);
  {
    // Every item is claimed or the loop failed: wait for workers still running,
    // then close so that tasks not yet started never call `worker`.
    std::unique_lock<std::mutex> lk(st->mu);
    st->cv.wait(lk, [&] { return st->active == 0; });
    st->closed = true;
  }
  if (auto e = st->queue.error()) std::rethrow_exception(e);
}

}  // namespace gdsio
