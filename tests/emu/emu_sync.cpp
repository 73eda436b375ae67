// emu_sync.cpp: templates/kf_sync.cuh run by emu_coresident.h (every block of
// the grid resident at once, warps of KF_EMU_WARP lanes) on the paths HIP
// builds. Built with ThreadSanitizer where the compiler has it, which then
// also checks the release/acquire orders: a missing one is a data race on the
// phases' buffers.
//
//   chain: a multi-phase producer/consumer chain across blocks (each phase
//          reads its own tile and a neighbour's from the phase before, waiting
//          on a per-phase counter in even phases and on per-tile counters in
//          odd ones), over several launches with increasing epochs, fresh
//          random inputs and poisoned outputs, checked against a serial
//          reference; after every launch each counter holds exactly its
//          epoch's target and nothing is reset in between.
//   stuck: one block never arrives; one block waits with a short budget and
//          every other block with one far too long to run out: the grid
//          leaves promptly, the status word names the counter, target, block
//          and epoch, and a later launch leaves at enter() without running.
//   slots: kf_portability.cuh's software sub-block barriers (bar_sync without
//          hardware, as AMD builds and KF_EMU_SOFT_BARRIERS use them): one
//          block of 256 threads as two slots of 128 (a layer kernel's packed
//          phase), each passing its own data round a ring of its threads
//          over a different number of rounds on its own barrier id, then
//          the whole block on one id; every value read after a barrier is
//          the one written before it.
//
// Usage: emu_sync [chain|stuck|slots]... (no argument: all). Exit 0 when every
// check holds.
#include "emu_coresident.h"

#include "kf_portability.cuh"
#include "kf_sync.cuh"

#include <chrono>
#include <cstdarg>
#include <string>

namespace {

namespace ks = kf::sync;

constexpr unsigned kBlocks = 6;
constexpr unsigned kThreads = 64;
constexpr int kPhases = 5;
constexpr unsigned kPoison = 0xdeadbeefu;
constexpr unsigned kLongBudget = 1u << 30; // with a yield per poll: far longer than any test

// counters: one per phase (all blocks arrive), then one per (phase, tile)
constexpr int kPhaseCounters = kPhases;
constexpr int kCounters = kPhaseCounters + kPhases * (int)kBlocks;
int phase_counter(int p) { return p - 1; }
int tile_counter(int p, unsigned b) { return kPhaseCounters + (p - 1) * (int)kBlocks + (int)b; }

int failures = 0;
void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "  FAILED: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  ++failures;
}

uint64_t rng = 0x9e3779b97f4a7c15ull;
uint32_t next_random() {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 32);
}

// The sync area, 128-byte aligned, zeroed once.
struct Area {
  std::vector<ks::Counter> lines = std::vector<ks::Counter>(2 + kCounters);
  void *ptr() { return lines.data(); }
  const ks::Status &status() const { return *reinterpret_cast<const ks::Status *>(lines.data()); }
  unsigned long long exits() const { return lines[1].value; }
  unsigned long long counter(int i) const { return lines[2 + i].value; }
};
static_assert(ks::sync_bytes(kCounters) == (2 + kCounters) * sizeof(ks::Counter));

// y[p] holds phase p's output, kBlocks tiles of kThreads words; y[0] is the
// launch's input.
using Buffers = std::vector<std::vector<uint32_t>>;

enum Outcome { kRan = 0, kLeftAfterWait = 1, kRefusedAtEnter = 2 };

struct Launch {
  ks::Sync sync;
  Buffers *y;
  unsigned skip_block = ~0u;         // this block never arrives for skip_phase
  int skip_phase = 0;                //
  unsigned short_budget_block = ~0u; // this block's waits poll short_budget times
  unsigned short_budget = 0;         //
  std::vector<int> outcome = std::vector<int>(kBlocks, -1); // per block
};

// A few yields before a block produces, different per (epoch, phase, block),
// so that consumers often come first.
void stagger(unsigned long long epoch, int p, unsigned b) {
  const unsigned n = (unsigned)((epoch * 7919 + (unsigned)p * 104729 + b * 1299709) % 23);
  for (unsigned i = 0; i < n; ++i)
    std::this_thread::yield();
}

float warp_sum(float v) {
  for (int m = kf::kWarpSize / 2; m > 0; m /= 2)
    v += kf::shfl_xor(v, m);
  return v;
}

// The phase's work for one thread: its own word and a neighbour tile's.
uint32_t combine(uint32_t own, float neighbour_sum, int p) {
  return own * 2654435761u + (uint32_t)neighbour_sum + (uint32_t)p;
}
unsigned neighbour(unsigned b, int p) { return (b + (unsigned)p) % kBlocks; }
unsigned neighbour_word(unsigned t) { return (t * 7u) % kThreads; }

void chain_kernel(Launch &L) {
  const ks::Sync &s = L.sync;
  const unsigned b = blockIdx.x, t = threadIdx.x;
  const unsigned budget = b == L.short_budget_block ? L.short_budget : kLongBudget;
  Buffers &y = *L.y;
  if (!ks::enter(s)) {
    ks::leave(s);
    if (t == 0)
      L.outcome[b] = kRefusedAtEnter;
    return;
  }
  for (int p = 1; p <= kPhases; ++p) {
    const unsigned nb = neighbour(b, p);
    if (p > 1) {
      bool ok;
      if (p % 2 == 0) // every tile of the phase before
        ok = ks::wait_at_least(s, phase_counter(p - 1), ks::target(s.epoch, kBlocks, kBlocks),
                               budget);
      else // the two tiles this phase reads
        ok = ks::wait_at_least(s, tile_counter(p - 1, nb), ks::target(s.epoch, 1, 1), budget) &&
             ks::wait_at_least(s, tile_counter(p - 1, b), ks::target(s.epoch, 1, 1), budget);
      if (!ok) {
        ks::leave(s);
        if (t == 0)
          L.outcome[b] = kLeftAfterWait;
        return;
      }
    }
    stagger(s.epoch, p, b);
    const uint32_t own = y[p - 1][b * kThreads + t];
    const uint32_t other = y[p - 1][nb * kThreads + neighbour_word(t)];
    const float sum = warp_sum((float)(other & 0xffu));
    y[p][b * kThreads + t] = combine(own, sum, p);
    if (b == L.skip_block && p == L.skip_phase)
      continue; // the stuck producer: wrote, never arrives
    ks::arrive(s, phase_counter(p));
    ks::arrive(s, tile_counter(p, b));
  }
  ks::leave(s);
  if (t == 0)
    L.outcome[b] = kRan;
}

Buffers reference(const std::vector<uint32_t> &input) {
  Buffers y(kPhases + 1, std::vector<uint32_t>(kBlocks * kThreads));
  y[0] = input;
  for (int p = 1; p <= kPhases; ++p)
    for (unsigned b = 0; b < kBlocks; ++b)
      for (unsigned t = 0; t < kThreads; ++t) {
        const unsigned nb = neighbour(b, p), w0 = t / kf::kWarpSize * kf::kWarpSize;
        float sum = 0;
        for (unsigned u = w0; u < w0 + (unsigned)kf::kWarpSize; ++u)
          sum += (float)(y[p - 1][nb * kThreads + neighbour_word(u)] & 0xffu);
        y[p][b * kThreads + t] = combine(y[p - 1][b * kThreads + t], sum, p);
      }
  return y;
}

Buffers fresh_buffers() {
  Buffers y(kPhases + 1, std::vector<uint32_t>(kBlocks * kThreads, kPoison));
  for (auto &v : y[0])
    v = next_random();
  return y;
}

void run(Launch &L) {
  emu::launch_coresident(kBlocks, kThreads, 0, [&] { chain_kernel(L); });
}

void expect_counters(const Area &a, unsigned long long launches, const char *what) {
  // after `launches` launches, each counter holds its count times that
  for (int p = 1; p <= kPhases; ++p) {
    if (a.counter(phase_counter(p)) != launches * kBlocks)
      fail("%s: phase counter %d is %llu, want %llu", what, p, a.counter(phase_counter(p)),
           launches * kBlocks);
    for (unsigned b = 0; b < kBlocks; ++b)
      if (a.counter(tile_counter(p, b)) != launches)
        fail("%s: tile counter (%d, %u) is %llu, want %llu", what, p, b,
             a.counter(tile_counter(p, b)), launches);
  }
  if (a.exits() != launches * kBlocks)
    fail("%s: exit counter is %llu, want %llu", what, a.exits(), launches * kBlocks);
}

void test_chain() {
  const int before = failures;
  Area area; // zeroed here, never again
  for (unsigned long long epoch = 0; epoch < 5; ++epoch) {
    Buffers y = fresh_buffers();
    const Buffers want = reference(y[0]);
    Launch L{{area.ptr(), epoch}, &y};
    run(L);
    long bad = 0;
    for (int p = 1; p <= kPhases; ++p)
      for (size_t i = 0; i < y[p].size(); ++i)
        if (y[p][i] != want[p][i] && bad++ < 5)
          fail("launch %llu: phase %d word %zu is %#x, want %#x", epoch, p, i, y[p][i], want[p][i]);
    for (unsigned b = 0; b < kBlocks; ++b)
      if (L.outcome[b] != kRan)
        fail("launch %llu: block %u did not run to the end (outcome %d)", epoch, b, L.outcome[b]);
    if (area.status().state != ks::kStateClear)
      fail("launch %llu: the status word is set (counter %u, block %u)", epoch,
           area.status().counter, area.status().block);
    char what[64];
    snprintf(what, sizeof what, "after launch %llu", epoch);
    expect_counters(area, epoch + 1, what);
  }
  printf("%-64s %s\n", "sync: chain of 5 phases, 6 blocks, 5 launches, no reset",
         failures == before ? "ok" : "FAILED");
}

void test_stuck() {
  const int before = failures;
  Area area;
  { // epoch 0 runs whole, so that the stuck launch is not the first
    Buffers y = fresh_buffers();
    Launch L{{area.ptr(), 0}, &y};
    run(L);
    expect_counters(area, 1, "before the stuck launch");
  }
  const unsigned victim = 2, watcher = 4;
  Buffers y = fresh_buffers();
  Launch L{{area.ptr(), 1}, &y, victim, 1, watcher, 2000};
  const auto t0 = std::chrono::steady_clock::now();
  run(L);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // the other blocks' budgets would take minutes: they left on the status word
  if (secs > 60)
    fail("the grid took %.1f s to leave after one wait expired", secs);
  for (unsigned b = 0; b < kBlocks; ++b)
    if (L.outcome[b] != kLeftAfterWait)
      fail("stuck launch: block %u outcome %d, want it to leave after a wait", b, L.outcome[b]);
  const ks::Status &st = area.status();
  if (st.state != ks::kStateExpired || st.counter != (unsigned)phase_counter(1) ||
      st.target != ks::target(1, kBlocks, kBlocks) || st.block != watcher || st.epoch != 1 ||
      st.seen >= st.target)
    fail("status: state %u counter %u target %llu seen %llu block %u epoch %llu; want state %u "
         "counter %d target %llu seen below it, block %u epoch 1",
         st.state, st.counter, st.target, st.seen, st.block, st.epoch, ks::kStateExpired,
         phase_counter(1), ks::target(1, kBlocks, kBlocks), watcher);
  if (area.exits() != 2 * kBlocks)
    fail("exit counter %llu after the stuck launch, want %u: a block did not leave", area.exits(),
         2 * kBlocks);

  // a later launch on the same area does nothing: its counters are unusable
  const unsigned long long c1 = area.counter(phase_counter(1));
  Buffers z = fresh_buffers();
  Launch M{{area.ptr(), 2}, &z};
  run(M);
  for (unsigned b = 0; b < kBlocks; ++b)
    if (M.outcome[b] != kRefusedAtEnter)
      fail("launch after the stuck one: block %u outcome %d, want it refused at enter", b,
           M.outcome[b]);
  for (int p = 1; p <= kPhases; ++p)
    for (uint32_t v : z[p])
      if (v != kPoison) {
        fail("launch after the stuck one wrote phase %d", p);
        break;
      }
  if (area.counter(phase_counter(1)) != c1 || area.exits() != 3 * kBlocks)
    fail("launch after the stuck one: counter 0 %llu (was %llu), exits %llu (want %u)",
         area.counter(phase_counter(1)), c1, area.exits(), 3 * kBlocks);
  if (area.status().block != watcher)
    fail("the status word changed after its first writer");
  printf("%-64s %s (%.2f s)\n", "sync: a producer never arrives, the grid leaves and reports",
         failures == before ? "ok" : "FAILED", secs);
}

} // namespace

#if KF_HAS_SOFT_BARRIERS
void test_slots() {
  const int before = failures;
  constexpr unsigned kSlotThreads = 128, kBlock = 2 * kSlotThreads;
  const int rounds[2] = {37, 53};
  std::vector<unsigned> ring(kBlock, kPoison);
  std::atomic<long> wrong{0};
  emu::launch_coresident(1, kBlock, 0, [&] {
    const unsigned t = threadIdx.x, s = t / kSlotThreads, i = t % kSlotThreads;
    kf::bar_init();
    __syncthreads();
    for (int r = 0; r < rounds[s]; ++r) {
      ring[t] = (unsigned)r * 1000003u + t;
      kf::bar_sync(15 - (int)s, kSlotThreads);
      // a neighbour further round the slot's ring each round: another wavefront's
      const unsigned from = s * kSlotThreads + (i + 1 + (unsigned)r * 17u) % kSlotThreads;
      if (ring[from] != (unsigned)r * 1000003u + from)
        ++wrong;
      kf::bar_sync(15 - (int)s, kSlotThreads); // every read is done before the next write
    }
    ring[t] = ~t;
    kf::bar_sync(1, kBlock);
    if (ring[kBlock - 1 - t] != ~(kBlock - 1 - t))
      ++wrong;
  });
  if (wrong)
    fail("slots: %ld values read after a barrier were not the ones written before it",
         wrong.load());
  printf("%-64s %s\n", "sync: software barriers, two slots of 128 and the block",
         failures == before ? "ok" : "FAILED");
}
#endif // KF_HAS_SOFT_BARRIERS

int main(int argc, char **argv) {
  printf("emu sync, warps of %d lanes\n", kf::kWarpSize);
  const bool all = argc < 2;
  bool known = all;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "chain")
      test_chain();
    else if (a == "stuck")
      test_stuck();
#if KF_HAS_SOFT_BARRIERS
    else if (a == "slots")
      test_slots();
#endif // KF_HAS_SOFT_BARRIERS
    else {
      fprintf(stderr, "emu_sync: unknown test '%s' (chain, stuck, slots)\n", argv[i]);
      return 2;
    }
    known = true;
  }
  if (all) {
    test_chain();
    test_stuck();
#if KF_HAS_SOFT_BARRIERS
    test_slots();
#endif // KF_HAS_SOFT_BARRIERS
  }
  if (emu::errors)
    fail("%ld shuffles read a missing lane", emu::errors.load());
  return known && failures == 0 ? 0 : 1;
}
