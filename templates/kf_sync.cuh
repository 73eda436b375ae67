// kf_sync.cuh: synchronisation between the phases of a persistent kernel
// (one launch that runs several kinds' work items in turn, each block
// waiting only for the work items it reads). Counters in global memory that
// only ever grow, released by the blocks that produce and acquired by the
// blocks that consume, and a bounded wait that reports instead of hanging.
//
// Layout: a sync area of sync_bytes(n) bytes in global memory, zeroed ONCE by
// the host when it is allocated, then used by every launch without being
// zeroed again:
//   line 0      the status line (Status): the watchdog word and, once a wait
//               has expired, which counter, target and block
//   line 1      the exit counter: every block adds 1 as it leaves
//   line 2 + i  counter i (a 64-bit count), alone on its 128-byte line, so
//               that a block spinning on one counter never shares a line
//               with another counter's writers or with the status word
//
// Epochs: the host numbers its launches 0, 1, 2, ... and passes the number
// (Sync::epoch). A counter that receives `count` arrivals per launch holds
// epoch * count when launch `epoch` starts; its k-th arrival of that launch
// (k = 1..count) takes it to target(epoch, count, k), and a consumer that
// needs all of them waits for target(epoch, count, count). Counts are 64-bit
// so they never wrap. Nothing is reset between launches.
//
// What a caller must guarantee:
// - Every block of the grid is resident at once (a cooperative launch, which
//   the runtime performs for manifests with "launch": {"cooperative": true}
//   after checking the compiled kernel's occupancy): a block that waits for
//   one that has not started would otherwise wait for ever.
// - Every function here is called by every thread of the block, in the same
//   order (they contain block barriers), with the same arguments.
// - A counter receives exactly `count` arrivals per launch, the same count
//   in every launch; launches of one sync area are ordered (one stream, or
//   joined), with epochs increasing by one from 0.
// - Data produced for another block is written with ordinary stores before
//   arrive(); the consumer reads it after a wait that returned true with
//   coherent loads (kf::load_vec, kf::load_coherent), never with the
//   read-only path (kf::load_stream, kf::load_shared_ro: ld.global.nc may
//   return a line cached before the producer wrote it).
// - After a launch in which a wait expired (status().state != 0) the
//   counters are inconsistent (some arrivals never happened): the host zeroes
//   the whole area before the next launch, or stops using the kernel (the
//   server falls back to the separate kinds). Until then every later launch
//   leaves at enter() and does nothing.
//
// Memory ordering: arrive() is a release of everything the block wrote
// before it (the block barrier first, then one thread's release add at
// device scope, cumulative over the barrier); a wait that returns true is an
// acquire (one thread's acquire loads at device scope, then a block barrier),
// so all of the block's later loads see what every arrival counted before
// the target wrote. NVIDIA sm_70 and later use PTX red.release.gpu /
// ld.acquire.gpu; AMD uses agent-scope atomics with those orders plus a
// fence in every thread on both sides of the barrier (a work-group may span
// CUs in threadgroup-split mode); other targets fence in every thread. The
// host emulation (tests/emu, KF_EMU_WARP) runs the AMD orders through the
// compiler's __atomic builtins, which ThreadSanitizer checks.
//
// The bounded wait counts polls, not clock time: a GPU shared by time slices
// (or stopped in a debugger) stops a block's polls but not the clock, and a
// clock-based budget would then expire in a wait that is merely preempted;
// the poll count also needs no timer rate (AMD's wall clock has a device-
// specific one) and behaves the same in the host emulation. Between polls a
// block backs off for up to kMaxPauseNs (NVIDIA __nanosleep, AMD s_sleep), so
// a budget of B polls bounds an uncontested wait at about B * (kMaxPauseNs +
// one L2 round trip), about B microseconds on an H200. While a block waits it
// polls the status word too: once any wait of the launch has expired, every
// other wait returns false at its next poll, so the whole grid leaves.
//
// Overlap: only one thread of a waiting block polls; the block issues the
// next phase's weight loads (kf::prefetch_l2, kf::async_copy16 into shared
// memory: weights only, which no phase writes) before it calls
// wait_at_least, and they complete while it waits.
#ifndef KF_SYNC_CUH
#define KF_SYNC_CUH

#include "kf_portability.cuh"

namespace kf {
namespace sync {

constexpr int kLineBytes = 128; // one counter per line: no false sharing
// KF_SYNC_MAX_PAUSE_NS: the back-off's cap between polls (NVIDIA).
#ifndef KF_SYNC_MAX_PAUSE_NS
#define KF_SYNC_MAX_PAUSE_NS 512
#endif // KF_SYNC_MAX_PAUSE_NS
constexpr unsigned kMaxPauseNs = KF_SYNC_MAX_PAUSE_NS;

constexpr unsigned kStateClear = 0;   // no wait of any launch has expired
constexpr unsigned kStateExpired = 1; // a wait expired; the fields below say which

// Line 0 of the sync area. The first block whose wait expires claims `state`
// (compare-and-swap from kStateClear) and then fills in the rest, which the
// host reads after the launch.
struct alignas(kLineBytes) Status {
  unsigned state;            // kStateClear or kStateExpired
  unsigned counter;          // the index of the counter that did not reach its target
  unsigned block;            // the linear index of the block that waited
  unsigned reserved;         //
  unsigned long long target; // what it waited for
  unsigned long long seen;   // the counter's value when the budget ran out
  unsigned long long epoch;  // the launch's epoch
};
static_assert(sizeof(Status) == kLineBytes, "the status word has its own line");

struct alignas(kLineBytes) Counter {
  unsigned long long value;
};
static_assert(sizeof(Counter) == kLineBytes, "one counter per line");

// Bytes of a sync area with n counters (status and exit lines included).
__host__ __device__ constexpr unsigned long long sync_bytes(int n) {
  return (unsigned long long)(2 + n) * kLineBytes;
}

// What each launch passes to its blocks: the area and the launch's number.
struct Sync {
  void *area;               // sync_bytes(n) bytes, kLineBytes-aligned, zeroed once
  unsigned long long epoch; // 0 for the area's first launch, then +1 per launch
};

// The value a counter with `count` arrivals per launch reaches at its k-th
// arrival (1..count) of launch `epoch`.
__host__ __device__ constexpr unsigned long long
target(unsigned long long epoch, unsigned long long count, unsigned long long k) {
  return epoch * count + k;
}

KF_DEVICE Status *status(const Sync &s) { return reinterpret_cast<Status *>(s.area); }
KF_DEVICE unsigned long long *exits(const Sync &s) {
  return &(reinterpret_cast<Counter *>(s.area) + 1)->value;
}
KF_DEVICE unsigned long long *counter(const Sync &s, int i) {
  return &(reinterpret_cast<Counter *>(s.area) + 2 + i)->value;
}

// ---- the atomics, per target -----------------------------------------------
// KF_SYNC_SCOPED: C11-style atomics with explicit orders (AMD at agent scope,
// the host emulation through __atomic builtins); otherwise NVIDIA PTX or
// fences around plain CUDA atomics.
#if KF_VENDOR_HIP
#define KF_SYNC_SCOPED 1
#define KF_SYNC_LOAD(p, order) __hip_atomic_load((p), (order), __HIP_MEMORY_SCOPE_AGENT)
#define KF_SYNC_ADD(p, v, order) __hip_atomic_fetch_add((p), (v), (order), __HIP_MEMORY_SCOPE_AGENT)
#elif defined(KF_EMU_WARP)
#define KF_SYNC_SCOPED 1
#define KF_SYNC_LOAD(p, order) __atomic_load_n((p), (order))
#define KF_SYNC_ADD(p, v, order) __atomic_fetch_add((p), (v), (order))
#else
#define KF_SYNC_SCOPED 0
#endif // KF_VENDOR_HIP

namespace detail {

KF_DEVICE bool is_thread0() { return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0; }

KF_DEVICE unsigned linear_block() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

// Adds v to *p, releasing what this thread (and, through the barrier before
// it, its block) wrote.
KF_DEVICE void add_release(unsigned long long *p, unsigned long long v) {
#if KF_HAS_ACQ_REL_ATOMIC
  asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#elif KF_SYNC_SCOPED
  (void)KF_SYNC_ADD(p, v, __ATOMIC_RELEASE);
#else
  __threadfence();
  atomicAdd(p, v);
#endif // KF_HAS_ACQ_REL_ATOMIC
}

KF_DEVICE unsigned long long load_acquire(const unsigned long long *p) {
#if KF_HAS_ACQ_REL_ATOMIC
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#elif KF_SYNC_SCOPED
  return KF_SYNC_LOAD(p, __ATOMIC_ACQUIRE);
#else
  const unsigned long long v = *reinterpret_cast<const volatile unsigned long long *>(p);
  __threadfence();
  return v;
#endif // KF_HAS_ACQ_REL_ATOMIC
}

// The status word, read without ordering: it only says whether to leave.
KF_DEVICE unsigned load_state(const unsigned *p) {
#if KF_HAS_ACQ_REL_ATOMIC
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#elif KF_SYNC_SCOPED
  return KF_SYNC_LOAD(p, __ATOMIC_RELAXED);
#else
  return *reinterpret_cast<const volatile unsigned *>(p);
#endif // KF_HAS_ACQ_REL_ATOMIC
}

// Waits between polls, longer each time up to a cap: a spinning block
// leaves its SM's issue slots (and the memory system) to the blocks it
// waits for.
KF_DEVICE void back_off(unsigned &pause_ns) {
#if KF_ARCH_IS_NVIDIA && KF_ARCH_CODE >= 700
  __nanosleep(pause_ns);
#elif KF_ARCH_IS_AMD
  __builtin_amdgcn_s_sleep(2); // about 128 clocks (the operand must be a constant)
#elif defined(KF_EMU_WARP)
  emu_back_off(); // the host's scheduler runs the producers
#endif // back-off per target
  pause_ns = pause_ns * 2 < kMaxPauseNs ? pause_ns * 2 : kMaxPauseNs;
}

// Fences every thread does on the paths without cumulative PTX orders.
KF_DEVICE void fence_if_not_ptx() {
#if !KF_HAS_ACQ_REL_ATOMIC
  __threadfence();
#endif // !KF_HAS_ACQ_REL_ATOMIC
}

} // namespace detail

// At the start of a launch: false when a wait of an earlier launch expired
// (the status word is set), which leaves the counters unusable; the block
// must then return at once (after leave(), so the exit count stays whole).
KF_DEVICE bool enter(const Sync &s) {
  int stop = 0;
  if (detail::is_thread0())
    stop = detail::load_state(&status(s)->state) != kStateClear;
  return !__syncthreads_or(stop);
}

// The block's arrival at counter i, counting `n` arrivals: everything any
// thread of the block wrote before the call is visible to a block whose
// wait for a value this arrival reaches returns true.
KF_DEVICE void arrive(const Sync &s, int i, unsigned n = 1) {
  detail::fence_if_not_ptx();
  __syncthreads();
  if (detail::is_thread0())
    detail::add_release(counter(s, i), n);
}

// Waits until counter i is at least `target`, polling at most `budget` times.
// True: it is, and every write released by the arrivals it counts is
// visible to every thread of the block. False: the budget ran out (the
// status word then names this counter, target and block, unless another
// wait had already claimed it) or another wait of the launch had expired;
// the block must stop its phases and leave.
KF_DEVICE bool wait_at_least(const Sync &s, int i, unsigned long long target, unsigned budget);

// One thread's part of wait_at_least: polls counter i until it is at least
// `target`, at most `budget` times. True: it is (an acquire by this thread).
// False: the budget ran out (the status word then names this counter,
// target and block, unless another wait had already claimed it) or another
// wait of the launch had expired. A layer kernel's threads each call it for
// themselves (kf_layer.cuh).
KF_DEVICE bool poll_at_least(const Sync &s, int i, unsigned long long target, unsigned budget) {
  const unsigned long long *c = counter(s, i);
  Status *st = status(s);
  unsigned pause_ns = 32;
  for (unsigned polls = 0;; ++polls) {
    const unsigned long long v = detail::load_acquire(c);
    if (v >= target)
      return true;
    if (detail::load_state(&st->state) != kStateClear)
      return false; // another wait expired: the whole grid leaves
    if (polls >= budget) {
      if (atomicCAS(&st->state, kStateClear, kStateExpired) == kStateClear) {
        st->counter = (unsigned)i; // first writer wins; the host reads these
        st->block = detail::linear_block();
        st->target = target;
        st->seen = v;
        st->epoch = s.epoch;
      }
      return false;
    }
    detail::back_off(pause_ns);
  }
}

KF_DEVICE bool wait_at_least(const Sync &s, int i, unsigned long long target, unsigned budget) {
  int stop = 0;
  if (detail::is_thread0())
    stop = !poll_at_least(s, i, target, budget);
  stop = __syncthreads_or(stop);
  detail::fence_if_not_ptx();
  return !stop;
}

// The block's last call, on every path out of the kernel (a wait that
// returned false included): counts it on the exit counter, which reaches
// (epoch + 1) * blocks once the whole grid of launch `epoch` has left, so
// the host can tell that every block saw the status word and returned.
KF_DEVICE void leave(const Sync &s) {
  detail::fence_if_not_ptx();
  __syncthreads();
  if (detail::is_thread0())
    detail::add_release(exits(s), 1);
}

} // namespace sync
} // namespace kf

#endif // KF_SYNC_CUH
