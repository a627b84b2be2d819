// The emulated device: launches checked against CUDA's limits, a grid run
// block by block, a block as a team of fibers (one per CUDA thread) with
// __syncthreads() a barrier over the team, and the few runtime calls the
// launchers make. See cuda_emu.hpp for the model and README.md for why.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
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
std::map<void*, void*> g_pinned_blocks;

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
bool Launch::admit(std::size_t params) {
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
  } else if (g_team.running) {
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
  {
    std::lock_guard<std::mutex> lk(g_log_mu);
    g_launches.push_back(r);
  }
  if (r.result != cudaSuccess) {
    t_last_error = r.result;
    return false;
  }
  return true;
}

void Launch::execute(Body body) {
  std::lock_guard<std::mutex> lk(g_launch_mu);
  Team& t = g_team;
  const unsigned n = block_.x * block_.y * block_.z;
  grow_team(t, n);
#ifdef EMU_TSAN
  if (!t.sched_tsan) t.sched_tsan = __tsan_get_current_fiber();
#endif
  t.body = body;
  t.grid = grid_;
  t.block = block_;
  t.site = site_;
  t.shared_seen.clear();
  t.poisoned.clear();
  t.static_shared = 0;
  t.dynamic_bytes = dynamic_shared_;
  t.dynamic.reset(new unsigned char[dynamic_shared_]);  // exactly its size: ASan sees an overflow
  t.running = true;
  std::uint64_t b = 0, phases = 0;
  for (unsigned z = 0; z < grid_.z; ++z)
    for (unsigned y = 0; y < grid_.y; ++y)
      for (unsigned x = 0; x < grid_.x; ++x, ++b) {
        t.block_idx = uint3{x, y, z};
        std::memset(t.dynamic.get(), 0xA5, dynamic_shared_);
        phases += run_block(t, n, (b & 1) != 0);
      }
  t.running = false;
  {
    std::lock_guard<std::mutex> lk2(g_log_mu);
    g_launches.back().static_shared = t.static_shared;
    g_launches.back().blocks = b;
    g_launches.back().phases = phases;
  }
  if (t.static_shared + dynamic_shared_ > kMaxSharedPerBlock)
    fault(where(site_) + ": " + std::to_string(t.static_shared) + " bytes of static and " +
          std::to_string(dynamic_shared_) + " of dynamic shared memory exceed 48 KiB a block");
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
  std::lock_guard<std::mutex> lk(g_log_mu);
  std::vector<LaunchRecord> v;
  v.swap(g_launches);
  return v;
}

std::vector<std::string> take_faults() {
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
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

// Launches run to completion when made: every stream is always idle.
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  gdsio_emu::log_call("cudaStreamSynchronize " + gdsio_emu::ptr(s));
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  gdsio_emu::log_call("cudaDeviceSynchronize");
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
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t n, cudaMemcpyKind) {
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t n, cudaMemcpyKind, cudaStream_t s) {
  gdsio_emu::log_call("cudaMemcpyAsync src=" + gdsio_emu::ptr(src) + " n=" + std::to_string(n) + " stream=" +
                      gdsio_emu::ptr(s));
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t n, cudaStream_t) {
  std::memset(dst, value, n);
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, std::size_t n) {
  *p = std::malloc(n ? n : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
  gdsio_emu::g_device_blocks[reinterpret_cast<std::uintptr_t>(*p)] = n;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  {
    std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
    gdsio_emu::g_device_blocks.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** p, std::size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }

cudaError_t cudaHostAlloc(void** p, std::size_t n, unsigned) {
  constexpr std::size_t kOff = 256;  // 256-byte aligned, never page-aligned
  void* raw = nullptr;
  if (posix_memalign(&raw, 4096, n + kOff) != 0) return cudaErrorMemoryAllocation;
  *p = static_cast<char*>(raw) + kOff;  // the block ends right after the n bytes asked for
  {
    std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
    gdsio_emu::g_pinned_blocks[*p] = raw;
  }
  gdsio_emu::log_call("cudaHostAlloc " + gdsio_emu::ptr(*p) + " n=" + std::to_string(n));
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  void* raw = nullptr;
  {
    std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
    auto it = gdsio_emu::g_pinned_blocks.find(p);
    if (it != gdsio_emu::g_pinned_blocks.end()) {
      raw = it->second;
      gdsio_emu::g_pinned_blocks.erase(it);
    }
  }
  if (!raw) {
    gdsio_emu::fault("cudaFreeHost(" + gdsio_emu::ptr(p) + "): not a pointer cudaHostAlloc returned");
    return gdsio_emu::t_last_error = cudaErrorInvalidValue;
  }
  std::free(raw);
  return cudaSuccess;
}

namespace {
struct EmuEvent {
  int id;
};
std::atomic<int> g_next_event{1};
}  // namespace
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = reinterpret_cast<cudaEvent_t>(new EmuEvent{g_next_event++});
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<EmuEvent*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  gdsio_emu::log_call("cudaEventRecord " + std::to_string(reinterpret_cast<EmuEvent*>(e)->id) + " stream=" +
                      gdsio_emu::ptr(s));
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  gdsio_emu::log_call("cudaEventSynchronize " + std::to_string(reinterpret_cast<EmuEvent*>(e)->id));
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  gdsio_emu::log_call("cudaStreamWaitEvent stream=" + gdsio_emu::ptr(s) + " " +
                      std::to_string(reinterpret_cast<EmuEvent*>(e)->id));
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
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lk(gdsio_emu::g_mem_mu);
  auto it = gdsio_emu::g_device_blocks.upper_bound(a);
  if (it != gdsio_emu::g_device_blocks.begin() && a < std::prev(it)->first + std::prev(it)->second) {
    if (device) *device = gdsio_emu::t_device;
    return "device";
  }
  if (device) *device = -1;
  return "host";
}
}  // namespace gdsio
