// Stream and event ordering checked on the CPU: gdsio's pinned staging
// pipeline (csrc/io/staging_pipeline.cpp, pinned_reader.cpp) and the remote
// readers' staging ring into GPU memory (csrc/io/staging_ring.cpp, driven as
// gdsio/io/remote.py drives it), compiled as they are against the emulated
// runtime, whose streams are queues run by worker threads (emu_runtime.cpp,
// "streams"). In the lazy mode a queued copy runs only when something waits
// for it, so a wait the code forgot shows deterministically: the host refills
// a pinned slot before the copy out of it ran, the copy carries the new bytes
// (wrong bytes at the destination) and the emulator reports the rewrite.
//
// Usage: ordering_tests SCENARIO   (one scenario a process)
//        ordering_tests --list
// Prints "ordering SCENARIO: N checks, M failed" and exits 1 when any failed.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "emu_control.hpp"
#include "io/file.hpp"
#include "io/host_read.hpp"
#include "io/pinned_reader.hpp"
#include "io/staging_ring.hpp"
#include "scenario.hpp"

namespace {

// The ordering faults the emulator saw (a pinned source rewritten before its copy ran, ...).
std::vector<std::string> faults() { return gdsio_emu::take_faults(); }

// The first byte where got differs from want (n when none).
std::size_t first_difference(const unsigned char* got, const unsigned char* want, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) return i;
  return n;
}

cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  if (cudaStreamCreate(&s) != cudaSuccess) throw std::runtime_error("cudaStreamCreate");
  return s;
}

// Poison-on-release: every staging slot cached in the pinned pool is taken,
// overwritten and given back, as the next reader would refill it. A copy still
// queued from one of them (a slot handed back before its copy's event) then
// carries the poison, and the emulator reports the rewrite.
void poison_pool(std::size_t capacity) {
  auto engine = gdsio::make_cuda_copy_engine(0, 0, 0);
  std::vector<gdsio::StagingSlot> taken;
  const std::size_t cached = gdsio::staging_pool_stats().cached_buffers;
  for (std::size_t i = 0; i < cached; ++i) {
    taken.push_back(engine->acquire(capacity));
    std::memset(taken.back().host, 0xEB, taken.back().capacity);
  }
  for (auto& s : taken) engine->release(s);
}

// ---- the emulator's own ordering ---------------------------------------------------------------------

// A copy queued and never waited for has not run; a wait runs it.
void emulator_defers_copies_until_waited() {
  cudaStream_t s = new_stream();
  DeviceBuffer dst(64);
  void* pinned = nullptr;
  cudaHostAlloc(&pinned, 64, 0);
  std::memset(pinned, 7, 64);
  cudaEvent_t e;
  cudaEventCreate(&e);
  cudaMemcpyAsync(dst.p, pinned, 64, cudaMemcpyHostToDevice, s);
  cudaEventRecord(e, s);
  EXPECT(dst.p[0] == 0xEE && gdsio_emu::queued_ops() == 2, "the copy ran before anything waited for it");
  EXPECT(cudaEventQuery(e) == cudaErrorNotReady, "a query of a pending event said done");
  EXPECT(cudaEventSynchronize(e) == cudaSuccess && dst.p[63] == 7, "cudaEventSynchronize did not run the copy");
  EXPECT(cudaEventQuery(e) == cudaSuccess, "");
  // The host rewriting a pinned source before its copy ran: reported, and the copy carries the new bytes.
  cudaMemcpyAsync(dst.p, pinned, 64, cudaMemcpyHostToDevice, s);
  std::memset(pinned, 9, 64);
  cudaStreamSynchronize(s);
  const auto f = faults();
  EXPECT(dst.p[0] == 9 && f.size() == 1 && f[0].find("rewritten before the copy ran") != std::string::npos, joined(f));
  // Pageable sources are taken at the call, as CUDA stages them.
  std::vector<unsigned char> pageable(64, 3);
  cudaMemcpyAsync(dst.p, pageable.data(), 64, cudaMemcpyHostToDevice, s);
  std::memset(pageable.data(), 4, 64);
  cudaStreamSynchronize(s);
  EXPECT(dst.p[0] == 3 && faults().empty(), "");
  // Freeing pinned memory under a queued copy is a fault.
  cudaMemcpyAsync(dst.p, pinned, 64, cudaMemcpyHostToDevice, s);
  cudaFreeHost(pinned);
  const auto g = faults();
  EXPECT(g.size() == 1 && g[0].find("cudaFreeHost") != std::string::npos, joined(g));
  cudaEventDestroy(e);
}

// A stream that waits for another's event runs after the other's work up to
// it; one that does not wait runs first and sees the stale bytes.
void emulator_orders_streams_by_events() {
  cudaStream_t producer = new_stream(), consumer = new_stream();
  DeviceBuffer a(32), b(32);
  void* pinned = nullptr;
  cudaHostAlloc(&pinned, 32, 0);
  std::memset(pinned, 5, 32);
  cudaEvent_t ready;
  cudaEventCreate(&ready);
  for (bool wait : {true, false}) {
    std::memset(a.p, 0xEE, 32);
    cudaMemcpyAsync(a.p, pinned, 32, cudaMemcpyHostToDevice, producer);  // the batch
    cudaEventRecord(ready, producer);
    if (wait) cudaStreamWaitEvent(consumer, ready, 0);
    cudaMemcpyAsync(b.p, a.p, 32, cudaMemcpyDeviceToDevice, consumer);  // the consumer's use of it
    cudaStreamSynchronize(consumer);
    EXPECT((b.p[0] == 5) == wait, wait ? "the wait did not order the consumer after the producer"
                                       : "the consumer saw the batch without waiting: the emulation shows nothing");
    cudaStreamSynchronize(producer);
  }
  // A kernel is queued like a copy, and runs in its stream's order.
  int out = 0;
  gdsio_emu::Launch({"store", __FILE__, __LINE__}, dim3(1), dim3(1), 0, consumer)
      .run([](int* p, int v) { *p = v; }, &out, 42);
  EXPECT(out == 0, "a launch ran when made");
  cudaStreamSynchronize(consumer);
  EXPECT(out == 42, "");
  cudaEventDestroy(ready);
  cudaFreeHost(pinned);
  EXPECT(faults().empty(), joined(faults()));
}

// The legacy default stream waits for the blocking streams' earlier work, and they for its.
void emulator_legacy_stream_is_implicitly_ordered() {
  cudaStream_t s = new_stream(), nb = nullptr;
  cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking);
  DeviceBuffer a(16), b(16), c(16);
  std::vector<unsigned char> one(16, 1);
  cudaMemcpyAsync(a.p, one.data(), 16, cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(b.p, a.p, 16, cudaMemcpyDeviceToDevice, nullptr);  // after s's copy
  cudaMemcpyAsync(c.p, b.p, 16, cudaMemcpyDeviceToDevice, s);        // after the legacy copy
  cudaStreamSynchronize(s);
  EXPECT(b.p[0] == 1 && c.p[0] == 1, "the legacy stream did not order s");
  std::vector<unsigned char> two(16, 2);
  cudaMemcpyAsync(a.p, two.data(), 16, cudaMemcpyHostToDevice, nullptr);
  cudaMemcpyAsync(c.p, a.p, 16, cudaMemcpyDeviceToDevice, nb);  // a non-blocking stream does not wait
  cudaStreamSynchronize(nb);
  EXPECT(c.p[0] == 1, "a non-blocking stream waited for the legacy stream");
  cudaDeviceSynchronize();
  EXPECT(gdsio_emu::queued_ops() == 0 && faults().empty(), "");
}

// Every host wait is bounded: one that cannot finish aborts with the streams' state.
void emulator_bounds_every_wait() {
  gdsio_emu::set_wait_timeout(0.5);
  cudaStream_t s = new_stream();
  static std::atomic<bool> never{false};
  gdsio_emu::Launch({"spin", __FILE__, __LINE__}, dim3(1), dim3(1), 0, s).run([](int) {
    while (!never.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }, 0);
  cudaStreamSynchronize(s);  // aborts: "did not finish within 0.5 s"
  EXPECT(false, "the wait returned");
}

// ---- the pinned pipeline -------------------------------------------------------------------------------

// Many chunks per reader through two slots each, so every slot is refilled
// several times: a refill before the copy out of it ran shows as wrong bytes
// and as the emulator's fault. The copies have completed when pinned_read
// returns (nothing left queued), on a stream of its own or the legacy stream.
void pinned_pipeline_waits_for_each_slot(bool direct, cudaStream_t stream) {
  constexpr std::size_t kChunk = 64 << 10;
  TestFile file(kChunk * 24 + 4096 * 3 + 123, direct ? "ordering-pinned-direct.bin" : "ordering-pinned.bin");
  gdsio::FileHandle f(file.path);
  if (direct) EXPECT(f.direct_fd() >= 0, "O_DIRECT is refused in the working directory: ", f.direct_io_refusal());
  for (std::size_t threads : {1, 3}) {
    DeviceBuffer dst(file.bytes.size() - 4096);
    gdsio::ReadOptions o;
    o.threads = threads;
    o.chunk_bytes = kChunk;
    o.staging_buffers = 2;
    o.direct_io = direct;
    o.stream = reinterpret_cast<std::uintptr_t>(stream);
    const auto res = gdsio::pinned_read(f, {{dst.p, dst.n, 4096}}, o);
    EXPECT(res.backend == "pinned" && res.chunks >= 24, res.backend, " ", res.chunks, " chunks");
    EXPECT(gdsio_emu::queued_ops() == 0, gdsio_emu::queued_ops(), " operations still queued when pinned_read returned");
    poison_pool(gdsio::direct_span_capacity(kChunk));
    gdsio_emu::drain_all();
    const std::size_t at = first_difference(dst.p, file.bytes.data() + 4096, dst.n);
    EXPECT(at == dst.n, threads, " threads: the bytes differ from byte ", at, " of ", dst.n);
    const auto fs = faults();
    EXPECT(fs.empty(), threads, " threads:", joined(fs));
  }
  gdsio::release_staging();
  EXPECT(faults().empty(), "cudaFreeHost under a queued copy:", joined(faults()));
}

// ---- the remote readers' staging ring into GPU memory -------------------------------------------------

// gdsio/io/remote.py's fetch() with to_gpu=True, in C++: `workers` threads,
// each with its own StagingRing on the CUDA copy engine (the pinned pool),
// claim chunks; for each, next() (the only wait), the body "received" into
// the slot, copy() to the destination on the caller's stream; then drain()
// and close(). A worker may fail after `fail_after` chunks (its read raised):
// close() alone must still wait for its copies before the slots go back.
struct Fetch {
  std::size_t copied = 0;  // bytes whose copies were queued
  bool failed = false;
};
Fetch remote_fetch(const std::vector<unsigned char>& object, unsigned char* dst, std::size_t chunk, unsigned workers,
                   std::size_t slots, cudaStream_t stream, long fail_after = -1) {
  const std::size_t nchunks = (object.size() + chunk - 1) / chunk;
  std::atomic<std::size_t> next{0}, copied{0};
  std::atomic<bool> failed{false};
  auto work = [&] {
    gdsio::StagingRing r(gdsio::make_cuda_copy_engine(0, reinterpret_cast<std::uintptr_t>(stream), workers * slots * chunk),
                         slots, chunk);
    try {
      long done = 0;
      for (std::size_t c; (c = next.fetch_add(1)) < nchunks && !failed;) {
        const std::size_t off = c * chunk, n = std::min(chunk, object.size() - off);
        const std::size_t k = r.next();
        if (fail_after >= 0 && done == fail_after) throw std::runtime_error("the GET failed");
        std::memcpy(r.data(k), object.data() + off, n);  // HTTPResponse.readinto(slot)
        r.copy(k, reinterpret_cast<std::uintptr_t>(dst + off), n);
        copied += n;
        ++done;
      }
      r.drain();
      r.close();
    } catch (const std::runtime_error&) {
      failed = true;
      r.close();  // remote.py's `finally: r.close()`
    }
  };
  std::vector<std::thread> ts;
  if (workers == 1) {
    work();  // remote.py runs a single worker on the caller's thread
  } else {
    for (unsigned i = 0; i < workers; ++i) ts.emplace_back(work);
    for (auto& t : ts) t.join();
  }
  return Fetch{copied.load(), failed.load()};
}

void remote_ring_into_gpu_memory(cudaStream_t stream) {
  constexpr std::size_t kChunk = 40000;  // not a page multiple: the slots are what the object's chunks need
  std::vector<unsigned char> object(kChunk * 17 + 999);
  for (unsigned round = 0; round < 2; ++round) {  // the second fetch reuses the pool's cached slots
    for (std::size_t i = 0; i < object.size(); ++i) object[i] = pattern(i, round);
    for (unsigned workers : {1u, 3u}) {
      DeviceBuffer dst(object.size());
      const Fetch r = remote_fetch(object, dst.p, kChunk, workers, 2, stream);
      EXPECT(!r.failed && r.copied == object.size(), r.copied);
      EXPECT(gdsio_emu::queued_ops() == 0, gdsio_emu::queued_ops(), " operations still queued when the fetch returned");
      poison_pool(kChunk);
      gdsio_emu::drain_all();
      const std::size_t at = first_difference(dst.p, object.data(), object.size());
      EXPECT(at == object.size(), "round ", round, ", ", workers, " workers: the bytes differ from byte ", at);
      const auto fs = faults();
      EXPECT(fs.empty(), "round ", round, ", ", workers, " workers:", joined(fs));
    }
  }
  gdsio::release_staging();
  EXPECT(faults().empty(), joined(faults()));
}

// A worker whose GET fails after some chunks: close() without drain() must
// still wait for the copies out of its slots before handing them back; the
// chunks it copied arrive intact, and nothing is left queued.
void remote_ring_failed_worker_waits_before_release(cudaStream_t stream) {
  constexpr std::size_t kChunk = 40000;
  std::vector<unsigned char> object(kChunk * 9);
  for (std::size_t i = 0; i < object.size(); ++i) object[i] = pattern(i, 7);
  DeviceBuffer dst(object.size());
  const Fetch r = remote_fetch(object, dst.p, kChunk, 1, 3, stream, /*fail_after=*/5);
  EXPECT(r.failed && r.copied == 5 * kChunk, r.copied);
  EXPECT(gdsio_emu::queued_ops() == 0, gdsio_emu::queued_ops(), " operations still queued after close()");
  poison_pool(kChunk);  // the next fetch refills the slots
  gdsio_emu::drain_all();
  const std::size_t at = first_difference(dst.p, object.data(), r.copied);
  EXPECT(at == r.copied, "the bytes copied before the failure differ from byte ", at);
  const auto fs = faults();
  EXPECT(fs.empty(), joined(fs));
  gdsio::release_staging();
  EXPECT(faults().empty(), joined(faults()));
}

const cudaStream_t kLegacy = nullptr;

std::map<std::string, std::function<void()>> scenarios() {
  return {
      {"emulator-defers-copies-until-waited", emulator_defers_copies_until_waited},
      {"emulator-orders-streams-by-events", emulator_orders_streams_by_events},
      {"emulator-legacy-stream-is-implicitly-ordered", emulator_legacy_stream_is_implicitly_ordered},
      {"emulator-bounds-every-wait", emulator_bounds_every_wait},
      {"pinned-pipeline", [] { pinned_pipeline_waits_for_each_slot(false, new_stream()); }},
      {"pinned-pipeline-direct", [] { pinned_pipeline_waits_for_each_slot(true, new_stream()); }},
      {"pinned-pipeline-legacy-stream", [] { pinned_pipeline_waits_for_each_slot(false, kLegacy); }},
      {"remote-ring-into-gpu-memory", [] { remote_ring_into_gpu_memory(new_stream()); }},
      {"remote-ring-into-gpu-memory-legacy-stream", [] { remote_ring_into_gpu_memory(kLegacy); }},
      {"remote-ring-failed-worker-waits-before-release",
       [] { remote_ring_failed_worker_waits_before_release(new_stream()); }},
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--list") {
    for (const auto& [name, fn] : scenarios()) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (argc != 2 || !scenarios().count(argv[1])) {
    std::fprintf(stderr, "usage: %s SCENARIO (or --list)\n", argv[0]);
    return 2;
  }
  const std::string name = argv[1];
  try {
    scenarios().at(name)();
  } catch (const std::exception& e) {
    ++g_failed;
    std::fprintf(stderr, "FAILED: %s threw: %s\n", name.c_str(), e.what());
  }
  for (const auto& f : gdsio_emu::take_faults()) {
    ++g_failed;
    std::fprintf(stderr, "FAULT: %s\n", f.c_str());
  }
  std::printf("ordering %s (%s streams): %d checks, %d failed\n", name.c_str(),
              gdsio_emu::stream_mode() == gdsio_emu::StreamMode::kLazy ? "lazy" : "eager", g_checks, g_failed);
  return g_failed ? 1 : 0;
}
