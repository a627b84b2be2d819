// The emulated device: launches checked against CUDA's limits, a grid run
// block by block, a block as a team of fibers (one per CUDA thread) with
// __syncthreads() a barrier over the team, streams as queues run by worker
// threads (copies, memsets, launches and events deferred; see "streams"), and
// the runtime calls gdsio makes. See cuda_emu.hpp for the model and README.md for why.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda_rt.hpp"
#include "emu_control.hpp"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
extern "C" void AnnotateIgnoreReadsBegin(const char*, int);
extern "C" void AnnotateIgnoreReadsEnd(const char*, int);
extern "C" void AnnotateIgnoreWritesBegin(const char*, int);
extern "C" void AnnotateIgnoreWritesEnd(const char*, int);
#define EMU_TSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif
#if !defined(__x86_64__) || defined(GDSIO_EMU_UCONTEXT)
#define EMU_UCONTEXT 1
#include <ucontext.h>
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace gdsio_emu {
namespace {

// ---- the machine's state --------------------------------------------------------------------
thread_local cudaError_t t_last_error = cudaSuccess;  // per host thread, as CUDA keeps it
thread_local int t_device = 0;
thread_local bool t_in_kernel = false;  // this OS thread is running a grid (a stream's worker)
int g_device_count = 1;
bool g_expect = false;
int g_expect_device = 0;
cudaStream_t g_expect_stream = nullptr;

std::mutex g_log_mu;
std::vector<LaunchRecord> g_launches;
std::vector<std::string> g_faults;
bool g_call_log = false;
std::vector<std::string> g_calls;

// Emulated allocations: device memory (cudaMalloc) and pinned memory (cudaHostAlloc -> its raw block).
std::mutex g_mem_mu;
std::map<std::uintptr_t, std::size_t> g_device_blocks;
struct PinnedBlock {
  void* raw;
  std::size_t n;
};
std::map<std::uintptr_t, PinnedBlock> g_pinned_blocks;  // by the pointer cudaHostAlloc returned

// What memory `p` (n bytes) is: 'd' device (cudaMalloc), 'p' pinned (cudaHostAlloc), 'h' pageable host.
char memory_kind(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lk(g_mem_mu);
  auto d = g_device_blocks.upper_bound(a);
  if (d != g_device_blocks.begin() && a < std::prev(d)->first + std::max<std::size_t>(std::prev(d)->second, 1))
    return 'd';
  auto h = g_pinned_blocks.upper_bound(a);
  if (h != g_pinned_blocks.begin() && a < std::prev(h)->first + std::max<std::size_t>(std::prev(h)->second.n, 1))
    return 'p';
  return 'h';
}

void log_call(const std::string& s) {
  std::lock_guard<std::mutex> lk(g_log_mu);
  if (g_call_log) g_calls.push_back(s);
}
std::string ptr(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

void fault(const std::string& what) {
  std::lock_guard<std::mutex> lk(g_log_mu);
  g_faults.push_back(what);
}

// ---- streams ------------------------------------------------------------------------------------
// Each stream is a FIFO of operations run by a worker thread of its own. A
// copy, memset, launch or event record is queued and the call returns; an
// event record is a marker, and cudaStreamWaitEvent queues a wait for the
// marker the event last recorded (captured at the call, as CUDA does).
//
// In the lazy mode (the default) a worker runs an operation only once
// something needs it: a host wait (cudaStreamSynchronize, cudaEventSynchronize,
// cudaDeviceSynchronize, a D2H copy into pageable memory, cudaFree), an event
// query (which answers cudaErrorNotReady first), or a queued wait of another
// stream that the other stream's worker has reached. So a copy whose source the
// host rewrites before waiting for it runs after the rewrite, deterministically,
// and a stream that should have waited for another runs before the other's
// work, whatever the timing. The eager mode runs each operation as soon as it
// is queued (after an optional delay), as a device does.
//
// The legacy default stream (a null stream, cudaStreamLegacy) is modelled:
// work queued on it waits for all earlier work of every blocking stream, and
// work queued on a blocking stream waits for all earlier work on it. Streams
// are made on first use (a handle from cudaStreamCreate, or any other value a
// test passes as a stream), blocking unless cudaStreamNonBlocking made them.
// cudaStreamPerThread is one more blocking stream (its per-thread identity is
// not modelled).
//
// Host-visible effects of a copy are checked where a device could not see
// them: a copy from pinned memory hashes its source when queued and again
// when run ("rewritten before its copy ran" is a fault, and the copy carries
// what is there then, as a DMA would); a copy from pageable memory takes its
// bytes at the call (CUDA stages them before returning); cudaFreeHost of
// memory a queued copy still uses is a fault.
struct Stream;
struct Op {
  enum Kind { kRun, kMarker, kWait } kind = kRun;
  std::uint64_t seq = 0;
  std::function<void()> fn;  // kRun
  Stream* on = nullptr;      // kWait: the stream, and its operation, waited for
  std::uint64_t until = 0;
  const void* src = nullptr;  // the host memory a copy reads and writes (for cudaFreeHost's check)
  const void* dst = nullptr;
  std::size_t n = 0;
  std::string what;
};
struct Stream {
  cudaStream_t handle = nullptr;
  bool legacy = false, nonblocking = false;
  std::deque<Op> q;
  std::uint64_t enqueued = 0, done = 0, released = 0;
  const Op* running = nullptr;
  std::string name;
};
struct Machine {
  std::mutex mu;
  std::condition_variable cv;
  std::map<cudaStream_t, Stream*> streams;
  std::vector<Stream*> order;  // in creation order
  StreamMode mode = StreamMode::kLazy;
  unsigned delay_us = 0;
  double wait_s = 60;
  std::uintptr_t next_handle = 0x5e000;  // cudaStreamCreate's handles
  Machine() {
    if (const char* m = std::getenv("GDSIO_EMU_STREAMS")) mode = std::string(m) == "eager" ? StreamMode::kEager : StreamMode::kLazy;
    if (const char* d = std::getenv("GDSIO_EMU_DELAY_US")) delay_us = static_cast<unsigned>(std::strtoul(d, nullptr, 10));
    if (const char* w = std::getenv("GDSIO_EMU_WAIT_S")) wait_s = std::strtod(w, nullptr);
  }
};
// Never destroyed: the workers wait on it until the process ends.
Machine& machine() {
  static Machine* m = new Machine();
  return *m;
}

void worker(Stream* s);

// The stream of a handle, made (with its worker) on first use. Lock held.
Stream* stream_locked(cudaStream_t h, bool nonblocking = false) {
  Machine& m = machine();
  if (h == cudaStreamLegacy) h = nullptr;
  auto it = m.streams.find(h);
  if (it != m.streams.end()) return it->second;
  auto* s = new Stream();
  s->handle = h;
  s->legacy = h == nullptr;
  s->nonblocking = nonblocking;
  s->name = h ? ptr(h) : std::string("the legacy default stream");
  m.streams[h] = s;
  m.order.push_back(s);
  std::thread(worker, s).detach();
  return s;
}

void release_locked(Stream* s, std::uint64_t until) {
  if (until > s->released) {
    s->released = until;
    machine().cv.notify_all();
  }
}

// Queues `op` on s after the legacy stream's implicit waits; returns its sequence number. Lock held.
std::uint64_t push_locked(Stream* s, Op op) {
  Machine& m = machine();
  auto wait_for = [&](Stream* o) {
    if (o == s || o->enqueued <= o->done) return;
    Op w;
    w.kind = Op::kWait;
    w.on = o;
    w.until = o->enqueued;
    w.what = "the legacy stream's implicit wait for " + o->name;
    w.seq = ++s->enqueued;
    s->q.push_back(std::move(w));
  };
  if (s->legacy) {
    for (Stream* o : m.order)
      if (!o->nonblocking) wait_for(o);
  } else if (!s->nonblocking) {
    wait_for(stream_locked(nullptr));
  }
  op.seq = ++s->enqueued;
  s->q.push_back(std::move(op));
  if (m.mode == StreamMode::kEager) s->released = s->enqueued;
  m.cv.notify_all();
  return s->enqueued;
}

std::uint64_t push(cudaStream_t h, Op op) {
  std::lock_guard<std::mutex> lk(machine().mu);
  return push_locked(stream_locked(h), std::move(op));
}

std::string state_locked() {
  std::ostringstream o;
  for (Stream* s : machine().order) {
    o << "\n  " << s->name << ": " << s->done << " of " << s->enqueued << " done, released to " << s->released;
    if (s->running) o << ", running: " << s->running->what;
    if (!s->q.empty()) o << ", next: " << (s->q.front().what.empty() ? "(an operation)" : s->q.front().what);
  }
  return o.str();
}

// Blocks until s has run its operation `until`, making it run; a wait past
// the timeout is reported with every stream's state and aborts the process.
void wait_locked(std::unique_lock<std::mutex>& lk, Stream* s, std::uint64_t until, const char* why) {
  Machine& m = machine();
  release_locked(s, until);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(m.wait_s);
  while (s->done < until) {
    if (m.cv.wait_until(lk, deadline) == std::cv_status::timeout && s->done < until) {
      std::fprintf(stderr, "gdsio_emu: FAULT: %s on %s did not finish within %g s (GDSIO_EMU_WAIT_S):%s\n", why,
                   s->name.c_str(), m.wait_s, state_locked().c_str());
      std::fflush(stderr);
      std::abort();
    }
  }
}

void wait_all_locked(std::unique_lock<std::mutex>& lk, const char* why) {
  // A stream's queue may grow meanwhile (waits queued by the legacy stream); go round until all are idle.
  for (bool again = true; again;) {
    again = false;
    for (std::size_t i = 0; i < machine().order.size(); ++i) {
      Stream* s = machine().order[i];
      if (s->done < s->enqueued) {
        wait_locked(lk, s, s->enqueued, why);
        again = true;
      }
    }
  }
}

void worker(Stream* s) {
  Machine& m = machine();
  std::unique_lock<std::mutex> lk(m.mu);
  for (;;) {
    if (s->q.empty() || s->q.front().seq > s->released) {
      m.cv.wait(lk);
      continue;
    }
    Op& front = s->q.front();
    if (front.kind == Op::kWait) {
      if (front.on->done >= front.until) {
        s->done = front.seq;
        s->q.pop_front();
        m.cv.notify_all();
      } else {
        release_locked(front.on, front.until);  // the device runs what this stream waits for
        m.cv.wait(lk);
      }
      continue;
    }
    Op op = std::move(front);
    s->q.pop_front();
    s->running = &op;
    const unsigned delay = m.delay_us;
    lk.unlock();
    if (delay && op.kind == Op::kRun) std::this_thread::sleep_for(std::chrono::microseconds(delay));
    if (op.fn) op.fn();
    lk.lock();
    s->running = nullptr;
    s->done = op.seq;
    m.cv.notify_all();
  }
}

// FNV-1a over n bytes.
std::uint64_t hash_bytes(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return an && bn && x < y + bn && y < x + an;
}

// Bookkeeping the fibers share with the scheduler is invisible to TSan: only
// the barriers may order the CUDA threads, or a missing one would go unseen.
struct Unseen {
#ifdef EMU_TSAN
  Unseen() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~Unseen() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#endif
};

inline void hb_release(void* p) {
#ifdef EMU_TSAN
  __tsan_release(p);
#else
  (void)p;
#endif
}
inline void hb_acquire(void* p) {
#ifdef EMU_TSAN
  __tsan_acquire(p);
#else
  (void)p;
#endif
}

// ---- fibers -------------------------------------------------------------------------------------
// 256 KiB a stack: a kernel frame holds its by-value parameters (up to 32 KiB)
// plus the sanitizers' redzones. A guard page below each catches an overflow.
constexpr std::size_t kStackBytes = 256 * 1024;
enum State : int { kReady = 0, kAtBarrier = 1, kDone = 2 };

struct Fiber {
  void* sp = nullptr;  // saved stack pointer (assembly switch)
#ifdef EMU_UCONTEXT
  ucontext_t ctx;
#endif
  char* stack = nullptr;  // lowest usable byte
  unsigned index = 0;     // linear thread index in the block
  bool started = false;
  std::atomic<int> state{kReady};
  std::atomic<const void*> site{nullptr};  // the __syncthreads() it waits at
  void* tsan = nullptr;
  void* asan_fake = nullptr;
};

struct Team {
  std::vector<std::unique_ptr<Fiber>> fibers;
  void* sched_sp = nullptr;
#ifdef EMU_UCONTEXT
  ucontext_t sched_ctx;
#endif
  void* sched_tsan = nullptr;
  const void* sched_bottom = nullptr;
  std::size_t sched_size = 0;
  std::atomic<Fiber*> current{nullptr};
  std::atomic<int> phase{0};
  Body body{};
  // The launch being run.
  dim3 grid, block;
  uint3 block_idx{};
  bool running = false;
  std::vector<std::pair<void*, std::size_t>> shared_seen;  // this launch's __shared__ arrays
  std::size_t static_shared = 0;
  std::unique_ptr<unsigned char[]> dynamic;
  std::size_t dynamic_bytes = 0;
  std::vector<char> poisoned;  // per shared_seen entry: poisoned in this block
  Site site{};
  // TSan sync objects: the block's start and end, and the barrier phases
  // (arrival at phase p releases phase_sync[p % 2]; see __syncthreads).
  char block_start = 0, block_end = 0;
  char phase_sync[2] = {0, 0};
};
Team g_team;
std::mutex g_launch_mu;  // one grid at a time

#ifndef EMU_UCONTEXT
extern "C" void gdsio_emu_switch(void** save_sp, void* to_sp);
extern "C" void gdsio_emu_fiber_entry();
// Saves the callee-saved registers, MXCSR and the x87 control word on the
// current stack, stores the stack pointer, and restores the same from `to_sp`.
asm(R"(
  .text
  .globl gdsio_emu_switch
  .type gdsio_emu_switch,@function
gdsio_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gdsio_emu_switch, .-gdsio_emu_switch
  .globl gdsio_emu_fiber_entry
  .type gdsio_emu_fiber_entry,@function
gdsio_emu_fiber_entry:
  movq %r12, %rdi
  xorl %ebp, %ebp
  call gdsio_emu_fiber_main@PLT
  ud2
  .size gdsio_emu_fiber_entry, .-gdsio_emu_fiber_entry
)");
#endif

void set_builtins(const Team& t, const Fiber& f) {
  [[maybe_unused]] Unseen quiet;
  const unsigned i = f.index;
  threadIdx = uint3{i % t.block.x, (i / t.block.x) % t.block.y, i / (t.block.x * t.block.y)};
  blockIdx = t.block_idx;
  blockDim = t.block;
  gridDim = t.grid;
}

void enter_fiber(Team& t, Fiber* f) {
  t.current.store(f, std::memory_order_relaxed);
  set_builtins(t, *f);
  void* const sp = f->sp;  // read as the scheduler: after the switch below TSan counts accesses as the fiber's
#ifdef EMU_TSAN
  __tsan_switch_to_fiber(f->tsan, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, kStackBytes);
#endif
#ifdef EMU_UCONTEXT
  (void)sp;
  swapcontext(&t.sched_ctx, &f->ctx);
#else
  gdsio_emu_switch(&t.sched_sp, sp);
#endif
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  t.current.store(nullptr, std::memory_order_relaxed);
}

void leave_fiber(Team& t, Fiber* f) {
#ifdef EMU_TSAN
  __tsan_switch_to_fiber(t.sched_tsan, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(&f->asan_fake, t.sched_bottom, t.sched_size);
#endif
#ifdef EMU_UCONTEXT
  swapcontext(&f->ctx, &t.sched_ctx);
#else
  gdsio_emu_switch(&f->sp, t.sched_sp);
#endif
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(f->asan_fake, &t.sched_bottom, &t.sched_size);
#endif
}

}  // namespace

// A fiber's life: one pass over the body per block, then back to the
// scheduler, which resumes it for the next block (its frame is never
// abandoned, so the sanitizers' shadow stacks stay balanced).
extern "C" void gdsio_emu_fiber_main(Fiber* f) {
  Team& t = g_team;
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &t.sched_bottom, &t.sched_size);
#endif
  for (;;) {
    hb_acquire(&t.block_start);
    t.body.call(t.body.obj);
    f->state.store(kDone, std::memory_order_relaxed);
    hb_release(&t.block_end);
    leave_fiber(t, f);
  }
}

namespace {

#ifdef EMU_UCONTEXT
void ucontext_entry(unsigned lo, unsigned hi) {
  gdsio_emu_fiber_main(reinterpret_cast<Fiber*>((static_cast<std::uintptr_t>(hi) << 32) | lo));
}
#endif

void start_fiber(Fiber* f) {
#ifdef EMU_UCONTEXT
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = kStackBytes;
  f->ctx.uc_link = nullptr;
  const auto p = reinterpret_cast<std::uintptr_t>(f);
  makecontext(&f->ctx, reinterpret_cast<void (*)()>(ucontext_entry), 2, static_cast<unsigned>(p),
              static_cast<unsigned>(p >> 32));
#else
  // The frame gdsio_emu_switch pops: MXCSR and x87 control word, r15..r12
  // (r12 = the fiber), rbx, rbp, then the return address (the entry).
  auto top = (reinterpret_cast<std::uintptr_t>(f->stack) + kStackBytes) & ~std::uintptr_t{15};
  auto* w = reinterpret_cast<std::uint64_t*>(top);
  std::uint32_t mxcsr;
  std::uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  w[-1] = reinterpret_cast<std::uint64_t>(&gdsio_emu_fiber_entry);
  w[-2] = 0;                                   // rbp
  w[-3] = 0;                                   // rbx
  w[-4] = reinterpret_cast<std::uint64_t>(f);  // r12
  w[-5] = w[-6] = w[-7] = 0;                   // r13, r14, r15
  w[-8] = mxcsr | (static_cast<std::uint64_t>(fpucw) << 32);
  f->sp = w - 8;
#endif
  f->started = true;
}

void grow_team(Team& t, unsigned n) {
  static const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  while (t.fibers.size() < n) {
    auto f = std::make_unique<Fiber>();
    void* m = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
      std::perror("gdsio_emu: mmap of a fiber stack");
      std::abort();
    }
    mprotect(m, page, PROT_NONE);  // the guard page
    f->stack = static_cast<char*>(m) + page;
    f->index = static_cast<unsigned>(t.fibers.size());
#ifdef EMU_TSAN
    f->tsan = __tsan_create_fiber(0);
    char name[32];
    std::snprintf(name, sizeof name, "CUDA thread %u", f->index);
    __tsan_set_fiber_name(f->tsan, name);
#endif
    t.fibers.push_back(std::move(f));
  }
}

std::string where(const Site& s) { return std::string(s.kernel) + " at " + s.file + ":" + std::to_string(s.line); }

// Runs one block; fibers run in index order, reversed in odd blocks, each
// until it waits at a barrier or returns.
std::uint64_t run_block(Team& t, unsigned n, bool reverse) {
  std::uint64_t phases = 0;
  {
    [[maybe_unused]] Unseen quiet;
    for (auto& p : t.poisoned) p = 0;
  }
  for (unsigned i = 0; i < n; ++i) t.fibers[i]->state.store(kReady, std::memory_order_relaxed);
  t.phase.store(0, std::memory_order_relaxed);
  hb_release(&t.block_start);
  for (;;) {
    ++phases;
    for (unsigned k = 0; k < n; ++k) {
      Fiber* f = t.fibers[reverse ? n - 1 - k : k].get();
      if (f->state.load(std::memory_order_relaxed) != kReady) continue;
      if (!f->started) start_fiber(f);
      enter_fiber(t, f);
    }
    unsigned waiting = 0, done = 0;
    const void* site = nullptr;
    bool same_site = true;
    for (unsigned i = 0; i < n; ++i) {
      const Fiber& f = *t.fibers[i];
      if (f.state.load(std::memory_order_relaxed) == kDone) {
        ++done;
        continue;
      }
      const void* s = f.site.load(std::memory_order_relaxed);
      if (waiting++ == 0) site = s;
      else if (s != site) same_site = false;
    }
    if (waiting == 0) break;
    // CUDA: a barrier in conditional code is defined only when the whole block takes the branch.
    if (done > 0)
      fault(where(t.site) + ": " + std::to_string(done) + " threads of block (" + std::to_string(t.block_idx.x) + "," +
            std::to_string(t.block_idx.y) + "," + std::to_string(t.block_idx.z) + ") returned while " +
            std::to_string(waiting) + " wait at __syncthreads()");
    if (!same_site) fault(where(t.site) + ": the threads of a block wait at different __syncthreads() calls");
    t.phase.fetch_add(1, std::memory_order_relaxed);
    for (unsigned i = 0; i < n; ++i)
      if (t.fibers[i]->state.load(std::memory_order_relaxed) == kAtBarrier)
        t.fibers[i]->state.store(kReady, std::memory_order_relaxed);
  }
  hb_acquire(&t.block_end);
  return phases;
}

}  // namespace

// ---- launches --------------------------------------------------------------------------------------
long Launch::admit(std::size_t params) {
  LaunchRecord r;
  r.kernel = site_.kernel;
  r.where = std::string(site_.file) + ":" + std::to_string(site_.line);
  r.grid = grid_;
  r.block = block_;
  r.dynamic_shared = dynamic_shared_;
  r.param_bytes = params;
  r.stream = stream_;
  r.device = t_device;
  const unsigned long long threads = 1ull * block_.x * block_.y * block_.z;
  std::ostringstream why;
  if (grid_.x == 0 || grid_.y == 0 || grid_.z == 0 || block_.x == 0 || block_.y == 0 || block_.z == 0)
    why << "an empty launch (grid " << grid_.x << "x" << grid_.y << "x" << grid_.z << ", block " << block_.x << "x"
        << block_.y << "x" << block_.z << ")";
  else if (grid_.x > kMaxGridX || grid_.y > kMaxGridYZ || grid_.z > kMaxGridYZ)
    why << "grid " << grid_.x << "x" << grid_.y << "x" << grid_.z << " exceeds 2^31-1 x 65535 x 65535";
  else if (block_.x > kMaxBlockXY || block_.y > kMaxBlockXY || block_.z > kMaxBlockZ || threads > kMaxThreadsPerBlock)
    why << "block " << block_.x << "x" << block_.y << "x" << block_.z << " exceeds 1024 threads (1024 x 1024 x 64)";
  if (!why.str().empty()) {
    r.result = cudaErrorInvalidConfiguration;
  } else if (dynamic_shared_ > kMaxSharedPerBlock) {
    why << dynamic_shared_ << " bytes of dynamic shared memory exceed 48 KiB";
    r.result = cudaErrorInvalidValue;
  } else if (params > kMaxParamBytes) {
    why << params << " bytes of kernel parameters exceed CUDA's 32764";
    r.result = cudaErrorInvalidValue;
  } else if (t_device < 0 || t_device >= g_device_count) {
    why << "no current device " << t_device;
    r.result = cudaErrorInvalidDevice;
  } else if (t_in_kernel) {
    why << "a launch from inside a kernel (dynamic parallelism is not emulated)";
    r.result = cudaErrorLaunchFailure;
  }
  r.why = why.str();
  if (g_expect && r.result == cudaSuccess && (t_device != g_expect_device || stream_ != g_expect_stream)) {
    std::ostringstream f;
    f << where(site_) << ": launched on device " << t_device << " stream " << stream_ << ", but the caller gave device "
      << g_expect_device << " stream " << g_expect_stream;
    fault(f.str());
  }
  long index;
  {
    std::lock_guard<std::mutex> lk(g_log_mu);
    g_launches.push_back(r);
    index = static_cast<long>(g_launches.size()) - 1;
  }
  if (r.result != cudaSuccess) {
    t_last_error = r.result;
    return -1;
  }
  return index;
}

namespace {
// Runs a grid on the calling thread (a stream's worker), one grid at a time.
void run_grid(long record, Site site, dim3 grid, dim3 block, std::size_t dynamic_shared, Body body) {
  std::lock_guard<std::mutex> lk(g_launch_mu);
  Team& t = g_team;
  const unsigned n = block.x * block.y * block.z;
  grow_team(t, n);
#ifdef EMU_TSAN
  {
    [[maybe_unused]] Unseen quiet;  // the fibers read it; grids run on the streams' workers, so it changes
    t.sched_tsan = __tsan_get_current_fiber();
  }
#endif
  t.body = body;
  t.grid = grid;
  t.block = block;
  t.site = site;
  t.shared_seen.clear();
  t.poisoned.clear();
  t.static_shared = 0;
  t.dynamic_bytes = dynamic_shared;
  t.dynamic.reset(new unsigned char[dynamic_shared]);  // exactly its size: ASan sees an overflow
  t.running = true;
  t_in_kernel = true;
  std::uint64_t b = 0, phases = 0;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x, ++b) {
        t.block_idx = uint3{x, y, z};
        std::memset(t.dynamic.get(), 0xA5, dynamic_shared);
        phases += run_block(t, n, (b & 1) != 0);
      }
  t_in_kernel = false;
  t.running = false;
  {
    std::lock_guard<std::mutex> lk2(g_log_mu);
    if (record < static_cast<long>(g_launches.size())) {
      g_launches[record].static_shared = t.static_shared;
      g_launches[record].blocks = b;
      g_launches[record].phases = phases;
    }
  }
  if (t.static_shared + dynamic_shared > kMaxSharedPerBlock)
    fault(where(site) + ": " + std::to_string(t.static_shared) + " bytes of static and " +
          std::to_string(dynamic_shared) + " of dynamic shared memory exceed 48 KiB a block");
}
}  // namespace

void Launch::enqueue(long record, Body body, void (*destroy)(void*)) {
  Op op;
  op.what = std::string("the launch of ") + where(site_);
  const Site site = site_;
  const dim3 grid = grid_, block = block_;
  const std::size_t shm = dynamic_shared_;
  op.fn = [=] {
    run_grid(record, site, grid, block, shm, body);
    destroy(body.obj);
  };
  push(stream_, std::move(op));
}

void shared_array(void* p, std::size_t bytes, int line) {
  Team& t = g_team;
  [[maybe_unused]] Unseen quiet;  // the poison must not order the threads that write the array next
  if (!t.running) {
    fault("a __shared__ array (line " + std::to_string(line) + ") outside a kernel");
    return;
  }
  std::size_t k = 0;
  while (k < t.shared_seen.size() && t.shared_seen[k].first != p) ++k;
  if (k == t.shared_seen.size()) {
    t.shared_seen.emplace_back(p, bytes);
    t.poisoned.push_back(0);
    t.static_shared += bytes;
  }
  if (!t.poisoned[k]) {  // the block's first thread to pass the declaration
    std::memset(p, 0xA5, bytes);
    t.poisoned[k] = 1;
  }
}

void* dynamic_shared_bytes() { return g_team.dynamic.get(); }

// ---- control ----------------------------------------------------------------------------------------
std::vector<LaunchRecord> take_launches() {
  drain_all();
  std::lock_guard<std::mutex> lk(g_log_mu);
  std::vector<LaunchRecord> v;
  v.swap(g_launches);
  return v;
}

std::vector<std::string> take_faults() {
  drain_all();
  std::lock_guard<std::mutex> lk(g_log_mu);
  std::vector<std::string> v;
  v.swap(g_faults);
  return v;
}

void set_device_count(int count) { g_device_count = count; }

void set_call_log(bool on) {
  std::lock_guard<std::mutex> lk(g_log_mu);
  g_call_log = on;
}

std::vector<std::string> take_calls() {
  std::lock_guard<std::mutex> lk(g_log_mu);
  std::vector<std::string> v;
  v.swap(g_calls);
  return v;
}

void expect_launch_target(int device, cudaStream_t stream) {
  g_expect = true;
  g_expect_device = device;
  g_expect_stream = stream;
}

void set_stream_mode(StreamMode mode, unsigned delay_us) {
  Machine& m = machine();
  std::lock_guard<std::mutex> lk(m.mu);
  m.mode = mode;
  m.delay_us = delay_us;
  if (mode == StreamMode::kEager)
    for (Stream* s : m.order) release_locked(s, s->enqueued);
}
StreamMode stream_mode() {
  std::lock_guard<std::mutex> lk(machine().mu);
  return machine().mode;
}
void set_wait_timeout(double seconds) {
  std::lock_guard<std::mutex> lk(machine().mu);
  machine().wait_s = seconds;
}
std::size_t queued_ops() {
  std::lock_guard<std::mutex> lk(machine().mu);
  std::size_t n = 0;
  for (Stream* s : machine().order) n += s->enqueued - s->done;
  return n;
}
void drain_all() {
  std::unique_lock<std::mutex> lk(machine().mu);
  wait_all_locked(lk, "a device-wide wait");
}

const char* fiber_switch_name() {
#ifdef EMU_UCONTEXT
  return "ucontext";
#else
  return "x86-64 assembly";
#endif
}

}  // namespace gdsio_emu

// ---- CUDA's barrier ------------------------------------------------------------------------------
void __syncthreads() {
  using namespace gdsio_emu;
  Team& t = g_team;
  Fiber* f = t.current.load(std::memory_order_relaxed);
  if (!f) {
    fault("__syncthreads() called outside a kernel");
    return;
  }
  f->site.store(__builtin_return_address(0), std::memory_order_relaxed);
  const int p = t.phase.load(std::memory_order_relaxed);
  hb_release(&t.phase_sync[p & 1]);
  f->state.store(kAtBarrier, std::memory_order_relaxed);
  leave_fiber(t, f);
  hb_acquire(&t.phase_sync[p & 1]);
}

// ---- the runtime calls ------------------------------------------------------------------------------
cudaError_t cudaGetLastError() {
  cudaError_t e = gdsio_emu::t_last_error;
  gdsio_emu::t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return gdsio_emu::t_last_error; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

// ---- streams and events ------------------------------------------------------------------------------
namespace {
using gdsio_emu::Op;
using gdsio_emu::Stream;
using gdsio_emu::machine;

struct EmuEvent {
  int id;
  Stream* stream = nullptr;  // where it was last recorded (null: never)
  std::uint64_t seq = 0;     // the marker it was last recorded as
};
std::atomic<int> g_next_event{1};
EmuEvent* ev(cudaEvent_t e) { return reinterpret_cast<EmuEvent*>(e); }

// A host wait for everything queued on s so far.
cudaError_t sync_stream(cudaStream_t h, const char* why) {
  std::unique_lock<std::mutex> lk(machine().mu);
  Stream* s = gdsio_emu::stream_locked(h);
  gdsio_emu::wait_locked(lk, s, s->enqueued, why);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  gdsio_emu::log_call("cudaStreamSynchronize " + gdsio_emu::ptr(s));
  return sync_stream(s, "cudaStreamSynchronize");
}
cudaError_t cudaStreamQuery(cudaStream_t h) {
  std::lock_guard<std::mutex> lk(machine().mu);
  Stream* s = gdsio_emu::stream_locked(h);
  if (s->done >= s->enqueued) return cudaSuccess;
  gdsio_emu::release_locked(s, s->enqueued);  // asking is what makes it run
  return cudaErrorNotReady;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  std::lock_guard<std::mutex> lk(machine().mu);
  *s = reinterpret_cast<cudaStream_t>(machine().next_handle += 0x10);
  gdsio_emu::stream_locked(*s, (flags & cudaStreamNonBlocking) != 0);
  return cudaSuccess;
}
// As CUDA's: returns at once; what was queued still runs (when needed).
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() {
  gdsio_emu::log_call("cudaDeviceSynchronize");
  gdsio_emu::drain_all();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = gdsio_emu::t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= gdsio_emu::g_device_count) return gdsio_emu::t_last_error = cudaErrorInvalidDevice;
  gdsio_emu::t_device = device;
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t n, cudaMemcpyKind, cudaStream_t s) {
  gdsio_emu::log_call("cudaMemcpyAsync src=" + gdsio_emu::ptr(src) + " n=" + std::to_string(n) + " stream=" +
                      gdsio_emu::ptr(s));
  if (n == 0) return cudaSuccess;
  const char from = gdsio_emu::memory_kind(src), to = gdsio_emu::memory_kind(dst);
  Op op;
  op.src = src;
  op.dst = dst;
  op.n = n;
  op.what = "cudaMemcpyAsync of " + std::to_string(n) + " bytes from " + gdsio_emu::ptr(src) + " to " + gdsio_emu::ptr(dst);
  if (from == 'h') {
    // Pageable memory: CUDA stages the bytes before the call returns.
    auto bytes = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                              static_cast<const unsigned char*>(src) + n);
    op.fn = [dst, bytes] { std::memcpy(dst, bytes->data(), bytes->size()); };
  } else if (from == 'p') {
    // Pinned memory is read by the DMA when the copy runs: bytes the host
    // rewrote meanwhile are what arrives, and a fault says so.
    const std::uint64_t h = gdsio_emu::hash_bytes(src, n);
    const std::string what = op.what + " on stream " + gdsio_emu::ptr(s);
    op.fn = [dst, src, n, h, what] {
      if (gdsio_emu::hash_bytes(src, n) != h)
        gdsio_emu::fault(what + ": its pinned source was rewritten before the copy ran (the host reused the buffer "
                                "without waiting for the copy's event)");
      std::memcpy(dst, src, n);
    };
  } else {
    op.fn = [dst, src, n] { std::memcpy(dst, src, n); };
  }
  const std::uint64_t seq = gdsio_emu::push(s, std::move(op));
  if (to == 'h' && from == 'd') {  // into pageable memory: CUDA returns once the copy is done
    std::unique_lock<std::mutex> lk(machine().mu);
    gdsio_emu::wait_locked(lk, gdsio_emu::stream_locked(s), seq, "a copy into pageable memory");
  }
  return cudaSuccess;
}
// Synchronous: queued on the legacy stream, and waited for.
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind) {
  cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, nullptr);
  if (e == cudaSuccess) e = sync_stream(nullptr, "cudaMemcpy");
  return e;
}
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t n, cudaStream_t s) {
  Op op;
  op.dst = dst;
  op.n = n;
  op.what = "cudaMemsetAsync of " + std::to_string(n) + " bytes at " + gdsio_emu::ptr(dst);
  op.fn = [dst, value, n] { std::memset(dst, value, n); };
  gdsio_emu::push(s, std::move(op));
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, std::size_t n) {
  *p = std::malloc(n ? n : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xDD, n);  // what a device gives is garbage; this garbage is recognisable
  std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
  gdsio_emu::g_device_blocks[reinterpret_cast<std::uintptr_t>(*p)] = n;
  return cudaSuccess;
}
// cudaFree waits for the device, as CUDA's does.
cudaError_t cudaFree(void* p) {
  gdsio_emu::drain_all();
  {
    std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
    gdsio_emu::g_device_blocks.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** p, std::size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  Op op;
  op.what = "cudaFreeAsync of " + gdsio_emu::ptr(p);
  op.fn = [p] {
    {
      std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
      gdsio_emu::g_device_blocks.erase(reinterpret_cast<std::uintptr_t>(p));
    }
    std::free(p);
  };
  gdsio_emu::push(s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, std::size_t n, unsigned) {
  constexpr std::size_t kOff = 256;  // 256-byte aligned, never page-aligned
  void* raw = nullptr;
  if (posix_memalign(&raw, 4096, n + kOff) != 0) return cudaErrorMemoryAllocation;
  *p = static_cast<char*>(raw) + kOff;  // the block ends right after the n bytes asked for
  std::memset(*p, 0xDB, n);
  {
    std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
    gdsio_emu::g_pinned_blocks[reinterpret_cast<std::uintptr_t>(*p)] = gdsio_emu::PinnedBlock{raw, n};
  }
  gdsio_emu::log_call("cudaHostAlloc " + gdsio_emu::ptr(*p) + " n=" + std::to_string(n));
  return cudaSuccess;
}
// Freeing pinned memory that a queued copy still reads or writes is a fault
// (CUDA's cudaFreeHost happens to wait for the device, which hides it); then
// it waits for the device, poisons the block and frees it.
cudaError_t cudaFreeHost(void* p) {
  gdsio_emu::PinnedBlock b{nullptr, 0};
  {
    std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
    auto it = gdsio_emu::g_pinned_blocks.find(reinterpret_cast<std::uintptr_t>(p));
    if (it != gdsio_emu::g_pinned_blocks.end()) b = it->second;
  }
  if (!b.raw) {
    gdsio_emu::fault("cudaFreeHost(" + gdsio_emu::ptr(p) + "): not a pointer cudaHostAlloc returned");
    return gdsio_emu::t_last_error = cudaErrorInvalidValue;
  }
  {
    std::lock_guard<std::mutex> lk(machine().mu);
    for (Stream* s : machine().order) {
      auto check = [&](const Op& op) {
        if (gdsio_emu::overlaps(op.src, op.n, p, b.n) || gdsio_emu::overlaps(op.dst, op.n, p, b.n))
          gdsio_emu::fault("cudaFreeHost(" + gdsio_emu::ptr(p) + ") while " + op.what + " is still queued on " +
                           s->name + " (free pinned memory only after the copy's event)");
      };
      for (const Op& op : s->q) check(op);
      if (s->running) check(*s->running);
    }
  }
  gdsio_emu::drain_all();
  {
    std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
    gdsio_emu::g_pinned_blocks.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  std::memset(p, 0xDF, b.n);
  std::free(b.raw);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = reinterpret_cast<cudaEvent_t>(new EmuEvent{g_next_event++});
  return cudaSuccess;
}
// As CUDA's: at once; a marker still queued stays queued (waits captured it already).
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete ev(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  gdsio_emu::log_call("cudaEventRecord " + std::to_string(ev(e)->id) + " stream=" + gdsio_emu::ptr(s));
  std::lock_guard<std::mutex> lk(machine().mu);
  Stream* st = gdsio_emu::stream_locked(s);
  Op op;
  op.kind = Op::kMarker;
  op.what = "the record of event " + std::to_string(ev(e)->id);
  ev(e)->seq = gdsio_emu::push_locked(st, std::move(op));
  ev(e)->stream = st;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  gdsio_emu::log_call("cudaEventSynchronize " + std::to_string(ev(e)->id));
  std::unique_lock<std::mutex> lk(machine().mu);
  if (ev(e)->stream) gdsio_emu::wait_locked(lk, ev(e)->stream, ev(e)->seq, "cudaEventSynchronize");
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::lock_guard<std::mutex> lk(machine().mu);
  EmuEvent* x = ev(e);
  if (!x->stream || x->stream->done >= x->seq) return cudaSuccess;
  gdsio_emu::release_locked(x->stream, x->seq);  // asking is what makes it run
  return cudaErrorNotReady;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  gdsio_emu::log_call("cudaStreamWaitEvent stream=" + gdsio_emu::ptr(s) + " " + std::to_string(ev(e)->id));
  std::lock_guard<std::mutex> lk(machine().mu);
  if (!ev(e)->stream) return cudaSuccess;  // never recorded: nothing to wait for, as in CUDA
  Op op;
  op.kind = Op::kWait;
  op.on = ev(e)->stream;
  op.until = ev(e)->seq;
  op.what = "a wait for event " + std::to_string(ev(e)->id) + " (recorded on " + op.on->name + ")";
  gdsio_emu::push_locked(gdsio_emu::stream_locked(s), std::move(op));
  return cudaSuccess;
}

extern "C" void gdsio_emu_log(const char* line) { gdsio_emu::log_call(line); }

// ---- gdsio's device guard (core/cuda_rt.hpp) on the emulated machine ------------------------------------
namespace gdsio {
void cuda_use_device(int device) {
  GDSIO_EXPECT(device >= 0 && device < gdsio_emu::g_device_count, ValueError, "device cuda:", device,
               " does not exist (", gdsio_emu::g_device_count, " visible)");
  gdsio_emu::t_device = device;
}
DeviceGuard::DeviceGuard(int device) {
  previous_ = gdsio_emu::t_device;
  cuda_use_device(device);
}
DeviceGuard::~DeviceGuard() { gdsio_emu::t_device = previous_; }
void cuda_stream_synchronize(std::uintptr_t s) { (void)cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(s)); }
// Device memory is what cudaMalloc gave; pinned what cudaHostAlloc gave; the rest pageable.
std::string cuda_pointer_kind(const void* p, int* device) {
  if (gdsio_emu::memory_kind(p) == 'd') {
    if (device) *device = gdsio_emu::t_device;
    return "device";
  }
  if (device) *device = -1;
  return "host";
}
}  // namespace gdsio
