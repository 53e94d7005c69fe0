// Fiber scheduler and CUDA feature emulation; see emu_runtime.h.
#include "emu_runtime.h"

#include <cstdarg>
#include <deque>
#include <memory>
#include <unordered_map>
#include <ucontext.h>

namespace emu {

unsigned char* smem_buffer = nullptr;
uint3_ block_idx, grid_dim;
LaunchStats stats;
bool land_late = true;
bool races_unchecked = false;

void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "EMULATOR FAILURE: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
  std::exit(3);
}

struct Copy {
  unsigned dst;
  const unsigned char* src;
  int bytes;
  bool pred;
};

struct Thread {
  uint3_ tidx;
  int tid = 0, warp = 0, lane = 0;
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  bool done = false;
  int epoch = 0;           // block barriers passed
  int wsync = 0;           // __syncwarp()s passed
  long long coll_seq = 0;  // warp collectives entered
  std::vector<Copy> open_group;
  std::deque<std::vector<Copy>> pending;
};

namespace {

constexpr int kStackBytes = 512 * 1024;
std::vector<std::unique_ptr<Thread>> g_threads;
Thread* g_cur = nullptr;
ucontext_t g_sched;
int g_threads_per_block = 0;
int g_smem_bytes = 0;
const std::function<void()>* g_kernel = nullptr;

struct WarpSlot {
  long long seq = -1;
  int arrived = 0;
  int departed = 0;
  std::string op;
  unsigned char data[32][64];
};
std::vector<WarpSlot> g_slots;  // [warp * 2 + seq % 2]
int g_barrier_arrived[2];
int g_barrier_value[2][3];  // count / or / and accumulators per epoch parity

struct Read {
  int tid, wsync;
};
struct Word {
  int w_tid = -1, w_epoch = -1, w_wsync = 0;
  bool w_atomic = false;  // the last write was an atomic (later atomics need no order against it)
  int r_epoch = -1;
  std::vector<Read> reads;
};
std::vector<Word> g_words;

struct NamedBarrier {
  int arrived[2] = {0, 0};  // per generation parity
  int value[2][2] = {{0, 0}, {0, 0}};  // count / or accumulators per generation parity
  long long generation = 0;
};
NamedBarrier g_named[16];
// Scheduler rounds a named-barrier or mbarrier wait may take before it is a deadlock: far more than a tile's
// epilogue takes (its warp collectives cost a round each), few enough that a deadlock fails in seconds.
constexpr long kSyncSpins = 200000;
struct MBarrier {
  unsigned count = 0, pending = 0;
  long long tx = 0, completed = 0;
  bool live = false;
};
std::unordered_map<unsigned, MBarrier> g_mbars;

struct GlobalRange {
  const unsigned char* lo;
  const unsigned char* hi;
};
std::vector<GlobalRange> g_globals;

void yield() { swapcontext(&g_cur->ctx, &g_sched); }

void entry() {
  (*g_kernel)();
  g_cur->done = true;
  for (auto& grp : g_cur->pending)
    for (auto& c : grp)
      if (c.bytes && c.pred) std::memcpy(smem_buffer + c.dst, c.src, c.bytes);
  swapcontext(&g_cur->ctx, &g_sched);
}

void race(const char* what, unsigned word, int other) {
  ++stats.races;
  if (stats.races <= 8)
    std::fprintf(stderr, "RACE (%s) at smem byte %u: thread %d vs thread %d, epoch %d, block (%u,%u)\n", what,
                 word * 4, g_cur->tid, other, g_cur->epoch, block_idx.x, block_idx.y);
}

// Is an earlier access by thread `tid` at (epoch, wsync) ordered before the current thread's access?
bool ordered(int tid, int epoch, int wsync) {
  const Thread* t = g_cur;
  if (tid == t->tid) return true;
  if (epoch < t->epoch) return true;
  return (tid / 32 == t->warp) && wsync < t->wsync;
}

// A write (atomic: a shared atomic, which needs no order against an earlier atomic on the word).
void do_write(unsigned off, int bytes, bool atomic = false) {
  ++stats.smem_writes;
  if (races_unchecked) return;
  for (unsigned w = off / 4; w < (off + bytes + 3) / 4; ++w) {
    Word& x = g_words[w];
    if (x.w_epoch >= 0 && !(atomic && x.w_atomic) && !ordered(x.w_tid, x.w_epoch, x.w_wsync))
      race("write after write", w, x.w_tid);
    if (x.r_epoch >= 0)
      for (const Read& r : x.reads)
        if (!ordered(r.tid, x.r_epoch, r.wsync)) {
          race("write after read", w, r.tid);
          break;
        }
    x.w_tid = g_cur->tid;
    x.w_epoch = g_cur->epoch;
    x.w_wsync = g_cur->wsync;
    x.w_atomic = atomic;
    x.reads.clear();
    x.r_epoch = -1;
  }
}

void land(const Copy& c) {
  if (c.pred) std::memcpy(smem_buffer + c.dst, c.src, c.bytes);
  else std::memset(smem_buffer + c.dst, 0, c.bytes);
  do_write(c.dst, c.bytes);
}

}  // namespace

const uint3_& thread_idx() { return g_cur->tidx; }
int lane() { return g_cur->lane; }

void note_smem_read(unsigned off, int bytes) {
  if (off + bytes > static_cast<unsigned>(g_smem_bytes))
    fail("shared read [%u, %u) beyond the %d-byte allocation (thread %d)", off, off + bytes, g_smem_bytes, g_cur->tid);
  ++stats.smem_reads;
  if (races_unchecked) return;
  for (unsigned w = off / 4; w < (off + bytes + 3) / 4; ++w) {
    Word& x = g_words[w];
    if (x.w_epoch >= 0 && !ordered(x.w_tid, x.w_epoch, x.w_wsync)) race("read after write", w, x.w_tid);
    if (x.r_epoch != g_cur->epoch) {
      x.reads.clear();
      x.r_epoch = g_cur->epoch;
    }
    bool found = false;
    for (Read& r : x.reads)
      if (r.tid == g_cur->tid) {
        r.wsync = g_cur->wsync;
        found = true;
      }
    if (!found) x.reads.push_back({g_cur->tid, g_cur->wsync});
  }
}

void note_smem_write(unsigned off, int bytes) {
  if (off + bytes > static_cast<unsigned>(g_smem_bytes))
    fail("shared write [%u, %u) beyond the %d-byte allocation (thread %d)", off, off + bytes, g_smem_bytes, g_cur->tid);
  do_write(off, bytes);
}

void note_smem_atomic(unsigned off) {
  if (off % 4 || off + 4 > static_cast<unsigned>(g_smem_bytes))
    fail("shared atomic at %u: unaligned or beyond the %d-byte allocation (thread %d)", off, g_smem_bytes, g_cur->tid);
  do_write(off, 4, true);
}

void register_global(const void* p, size_t bytes) {
  auto* c = static_cast<const unsigned char*>(p);
  g_globals.push_back({c, c + bytes});
}
void clear_globals() { g_globals.clear(); }

void cp_async(unsigned smem_off, const void* src, int bytes, bool pred) {
  auto* s = static_cast<const unsigned char*>(src);
  bool ok = false;
  for (auto& r : g_globals)
    if (s >= r.lo && s + (pred ? bytes : 1) <= r.hi) ok = true;
  if (!ok) {
    ++stats.oob;
    if (stats.oob <= 5) std::fprintf(stderr, "OOB cp.async source (pred=%d) by thread %d\n", pred, g_cur->tid);
    pred = false;
  }
  if (smem_off % bytes) fail("cp.async destination %u not %d-byte aligned", smem_off, bytes);
  if (reinterpret_cast<uintptr_t>(src) % bytes) fail("cp.async source not %d-byte aligned", bytes);
  if (smem_off + bytes > static_cast<unsigned>(g_smem_bytes)) fail("cp.async destination beyond the smem allocation");
  Copy c{smem_off, s, bytes, pred};
  if (land_late) {
    std::memset(smem_buffer + smem_off, 0xff, bytes);  // NaN until landed
    do_write(smem_off, bytes);
    g_cur->open_group.push_back(c);
  } else {
    land(c);
    g_cur->open_group.push_back(Copy{smem_off, s, 0, pred});  // keep group counts honest
  }
}

void cp_async_commit() {
  g_cur->pending.push_back(std::move(g_cur->open_group));
  g_cur->open_group.clear();
}

void cp_async_wait(int n) {
  while (static_cast<int>(g_cur->pending.size()) > n) {
    for (auto& c : g_cur->pending.front())
      if (c.bytes) land(c);
    g_cur->pending.pop_front();
  }
}

int syncthreads_reduce(int pred, int op) {
  const int e = g_cur->epoch;
  int* acc = g_barrier_value[e % 2];
  if (g_barrier_arrived[e % 2] == 0) {
    acc[0] = 0;
    acc[1] = 0;
    acc[2] = 1;
  }
  acc[0] += pred ? 1 : 0;
  acc[1] |= pred ? 1 : 0;
  acc[2] &= pred ? 1 : 0;
  g_barrier_arrived[e % 2]++;
  if (g_barrier_arrived[e % 2] == g_threads_per_block) g_barrier_arrived[(e + 1) % 2] = 0;
  long spins = 0;
  while (g_barrier_arrived[e % 2] < g_threads_per_block) {
    yield();
    if (++spins > 2000000) fail("barrier deadlock (thread %d, epoch %d)", g_cur->tid, e);
  }
  const int result = acc[op];
  g_cur->epoch = e + 1;
  return result;
}

void syncthreads() { syncthreads_reduce(0, 0); }

int named_barrier(int id, int count, int pred, int op) {
  if (id < 0 || id >= 16) fail("named barrier id %d outside 0..15 (thread %d)", id, g_cur->tid);
  if (count <= 0 || count % 32 || count > g_threads_per_block)
    fail("named barrier %d with %d threads: a multiple of 32 up to the block's %d expected", id, count,
         g_threads_per_block);
  NamedBarrier& b = g_named[id];
  const long long gen = b.generation;
  const int par = static_cast<int>(gen & 1);
  if (b.arrived[par] == 0) b.value[par][0] = b.value[par][1] = 0;
  b.value[par][0] += pred ? 1 : 0;
  b.value[par][1] |= pred ? 1 : 0;
  if (++b.arrived[par] == count) {
    b.arrived[par] = 0;
    b.arrived[par ^ 1] = 0;
    b.generation = gen + 1;
  }
  long spins = 0;
  while (b.generation == gen) {
    yield();
    if (++spins > kSyncSpins) fail("named barrier %d deadlock (thread %d, %d threads expected)", id, g_cur->tid, count);
  }
  return b.value[par][op];
}

namespace {
MBarrier& mbar_at(unsigned off, const char* what) {
  auto it = g_mbars.find(off);
  if (it == g_mbars.end() || !it->second.live)
    fail("%s on shared byte %u, which holds no initialized mbarrier (thread %d)", what, off, g_cur->tid);
  return it->second;
}
void mbar_settle(MBarrier& b) {
  if (b.tx < 0) fail("mbarrier: more transaction bytes completed than expected (thread %d)", g_cur->tid);
  if (b.pending == 0 && b.tx == 0) {
    ++b.completed;
    b.pending = b.count;
  }
}
}  // namespace

void mbar_init(unsigned off, unsigned count) {
  if (off % 8) fail("mbarrier at shared byte %u is not 8-byte aligned", off);
  if (count == 0) fail("mbarrier at shared byte %u initialized with no arrivals", off);
  note_smem_write(off, 8);
  g_mbars[off] = MBarrier{count, count, 0, 0, true};
}
void mbar_arrive(unsigned off, unsigned tx_bytes) {
  MBarrier& b = mbar_at(off, "mbarrier.arrive");
  if (b.pending == 0) fail("mbarrier at shared byte %u: more arrivals than its count (thread %d)", off, g_cur->tid);
  b.tx += tx_bytes;
  --b.pending;
  mbar_settle(b);
}
void mbar_complete_tx(unsigned off, unsigned bytes) {
  MBarrier& b = mbar_at(off, "complete_tx");
  b.tx -= bytes;
  mbar_settle(b);
}
void mbar_wait(unsigned off, unsigned parity) {
  long spins = 0;
  while ((mbar_at(off, "mbarrier.try_wait").completed & 1) == static_cast<long long>(parity & 1)) {
    yield();
    if (++spins > kSyncSpins) fail("mbarrier at shared byte %u: wait for parity %u deadlocks (thread %d)", off, parity,
                                g_cur->tid);
  }
}

void warp_collective(const char* op, const void* in, int in_bytes,
                     const std::function<void(const unsigned char* const*)>& fn) {
  Thread* t = g_cur;
  const long long seq = t->coll_seq++;
  WarpSlot& s = g_slots[t->warp * 2 + (seq & 1)];
  long spins = 0;
  while (s.seq != seq && s.seq != -1 && s.departed < 32) {  // previous user of this slot still reading
    yield();
    if (++spins > 2000000) fail("collective slot deadlock");
  }
  if (s.seq != seq) {
    s.seq = seq;
    s.arrived = 0;
    s.departed = 0;
    s.op = op;
  } else if (s.op != op) {
    fail("warp %d diverged: lane %d runs %s while others run %s", t->warp, t->lane, op, s.op.c_str());
  }
  std::memcpy(s.data[t->lane], in, in_bytes);
  s.arrived++;
  spins = 0;
  while (s.arrived < 32) {
    yield();
    if (++spins > 2000000) fail("warp %d collective %s deadlock (lane %d)", t->warp, op, t->lane);
  }
  const unsigned char* ptrs[32];
  for (int l = 0; l < 32; ++l) ptrs[l] = s.data[l];
  fn(ptrs);
  s.departed++;
}

void syncwarp() {
  int dummy = 0;
  warp_collective("syncwarp", &dummy, 4, [](const unsigned char* const*) {});
  g_cur->wsync++;
}

bool vote_any(bool p) {
  int v = p, any = 0;
  warp_collective("vote", &v, 4, [&](const unsigned char* const* all) {
    for (int l = 0; l < 32; ++l) any |= *reinterpret_cast<const int*>(all[l]);
  });
  return any != 0;
}

void launch(uint3_ grid, int threads, int smem_bytes, const std::function<void()>& kernel) {
  static const unsigned long long g_sched_seed = [] {
    const char* v = std::getenv("EMU_SCHED_SEED");
    return v ? std::strtoull(v, nullptr, 10) : 0ull;
  }();
  if (smem_bytes > kSmemCapacity) fail("smem %d beyond emulator capacity", smem_bytes);
  if (threads % 32) fail("threads must be a multiple of 32");
  grid_dim = grid;
  races_unchecked = false;  // until the kernel uses a named barrier or an mbarrier (emu_runtime.h)
  g_threads_per_block = threads;
  g_smem_bytes = smem_bytes;
  g_kernel = &kernel;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        block_idx = {x, y, z};
        std::memset(smem_buffer, 0xff, kSmemCapacity);  // stale shared memory reads as NaN / -1
        g_words.assign((smem_bytes + 3) / 4, Word{});
        g_slots.assign(threads / 32 * 2, WarpSlot{});
        g_barrier_arrived[0] = g_barrier_arrived[1] = 0;
        for (auto& nb : g_named) nb = NamedBarrier{};
        g_mbars.clear();
        g_threads.clear();
        for (int i = 0; i < threads; ++i) {
          auto th = std::make_unique<Thread>();
          th->tid = i;
          th->warp = i / 32;
          th->lane = i % 32;
          th->tidx = {static_cast<unsigned>(i), 0, 0};
          th->stack.reset(new char[kStackBytes]);
          getcontext(&th->ctx);
          th->ctx.uc_stack.ss_sp = th->stack.get();
          th->ctx.uc_stack.ss_size = kStackBytes;
          th->ctx.uc_link = nullptr;
          makecontext(&th->ctx, entry, 0);
          g_threads.push_back(std::move(th));
        }
        // Jitter (EMU_SCHED_SEED set, not 0): a warp that runs may fall asleep for 1..64 rounds (1 in 8), so that
        // warps drift apart as they do on a GPU and an order a kernel only assumes shows up (the round-robin
        // schedule alone keeps warps in step).
        std::vector<int> asleep(threads / 32, 0);
        for (unsigned long long rng = g_sched_seed * 0x9E3779B97F4A7C15ull + block_idx.x + 7919ull * block_idx.y;;) {
          bool any = false;
          for (auto& th : g_threads) {
            if (th->done) continue;
            any = true;
            if (g_sched_seed != 0 && th->lane == 0) {
              if (asleep[th->warp] > 0) {
                --asleep[th->warp];
              } else {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                if ((rng >> 61) == 0) asleep[th->warp] = 1 + static_cast<int>((rng >> 40) & 63);
              }
            }
            if (asleep[th->warp] > 0) continue;
            g_cur = th.get();
            swapcontext(&g_sched, &th->ctx);
          }
          if (!any) break;
        }
        for (auto& th : g_threads)
          if (th->epoch != g_threads[0]->epoch) fail("threads passed different numbers of barriers");
      }
}

}  // namespace emu
