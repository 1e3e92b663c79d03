// The collectives part (device API 1.5, DK_Collectives): communicators
// between processes on one host, over POSIX shared memory.
//
// Design (README "Collectives"):
// - The unique id names a shared-memory segment ("/dkcpu-coll-<pid>-<64
//   random bits>", plus "-n<nranks>" at init). Every rank opens or creates
//   it, claims its rank slot (pid) and waits for all; once all arrived the
//   segment is unlinked, so nothing is left in /dev/shm whatever happens
//   later (the mappings live on until each rank unmaps). A rank whose init
//   times out unlinks it too.
// - Each rank owns a control block (a step counter, the description of its
//   current call) and a double-buffered data slot of kChunkBytes per buffer;
//   each ordered pair (sender, receiver) owns a double-buffered mailbox for
//   send / recv. A rank writes only its own slot and reads its peers'.
// - A collective moves its data in chunks: every rank copies its chunk in,
//   posts a step, waits for all ranks' step, then reads the others' slots.
//   Reductions are split: rank k reduces the k-th slice of the chunk over
//   ranks 0..n-1 in that order (the same order for every element whoever
//   computes it, so every rank gets the same bits), then everyone copies the
//   reduced slices out. Double buffering lets a rank copy the next chunk in
//   while its peers still copy the last one out.
// - Every wait checks a deadline (the communicator's timeout), this end's
//   abort flag, the segment's "broken" flag (set by any rank that failed or
//   aborted) and whether the ranks it waits for are still alive.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <devicekit/plugin_half.h>

#include "api.h"
#include "internal.h"

struct DK_Comm;

namespace dkcpu {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x4c4f43555043444bull;  // "KDCPUCOL"
constexpr uint32_t kVersion = 1;
constexpr const char* kNamePrefix = "/dkcpu-coll-";
constexpr size_t kChunkBytes = size_t(512) << 10;  // per buffer, two per rank
// Reductions up to this size skip the split (one step less: latency).
constexpr size_t kSmallBytes = size_t(16) << 10;
constexpr size_t kP2PBytes = size_t(64) << 10;     // per buffer, two per ordered pair
constexpr int kMaxRanks = 64;
constexpr int kDescRing = 4;                       // a peer is at most one call ahead
constexpr size_t kPage = 4096;

// ---- The unique id ---------------------------------------------------------

struct IdLayout {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  char name[96];  // NUL-terminated segment base name
};
static_assert(sizeof(IdLayout) <= DK_COLL_UNIQUE_ID_BYTES, "unique id too small");

// ---- The segment -----------------------------------------------------------

struct Desc {  // one call, as its rank saw it
  uint64_t seq;
  int64_t count;
  int32_t collective, dtype, op, root;
};

struct alignas(64) Header {
  uint64_t magic;
  uint32_t version;
  int32_t nranks;
  std::atomic<uint32_t> init_state;  // 0 fresh, 1 being written, 2 ready
  std::atomic<int32_t> arrived;
  std::atomic<int32_t> broken;  // 0, or 1 + the rank that failed or aborted
  std::atomic<int32_t> reason_ready;
  char reason[512];  // that rank's error message, once reason_ready
};

struct alignas(64) RankCtl {
  std::atomic<int32_t> pid;
  alignas(64) std::atomic<uint64_t> step;
  alignas(64) Desc desc[kDescRing];
};

struct MsgHdr {  // one p2p chunk
  uint64_t msg;  // message number on this pair
  int64_t count;
  int32_t dtype;
  uint32_t bytes;
};

struct alignas(64) PairCtl {  // sender -> receiver
  std::atomic<uint64_t> posted;  // chunks written (by the sender)
  alignas(64) std::atomic<uint64_t> consumed;  // chunks read (by the receiver)
  alignas(64) MsgHdr hdr[2];
};

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

struct Layout {
  size_t ctl, pair, coll, p2p, total;
  explicit Layout(int n) {
    ctl = round_up(sizeof(Header), kPage);
    pair = ctl + round_up(sizeof(RankCtl) * size_t(n), kPage);
    coll = pair + round_up(sizeof(PairCtl) * size_t(n) * size_t(n), kPage);
    p2p = coll + 2 * kChunkBytes * size_t(n);
    total = p2p + 2 * kP2PBytes * size_t(n) * size_t(n);
  }
};

size_t dtype_size(int32_t dt) {
  switch (dt) {
    case DK_DTYPE_FLOAT32:
    case DK_DTYPE_INT32: return 4;
    case DK_DTYPE_FLOAT16:
    case DK_DTYPE_BFLOAT16: return 2;
    case DK_DTYPE_FLOAT64:
    case DK_DTYPE_INT64: return 8;
    default: return 1;  // int8, uint8, bool
  }
}

const char* coll_name(int32_t c) {
  switch (c) {
#define DKCPU_COLL_NAME(id, name) \
  case DK_COLL_##id: return #name;
    DK_COLLECTIVES(DKCPU_COLL_NAME)
#undef DKCPU_COLL_NAME
  }
  return "?";
}

const char* op_name(int32_t op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < DK_COLL_OP_COUNT_1_5 ? names[op] : "?";
}

const char* dtype_name(int32_t dt) {
  static const char* const names[] = {"float32", "float16", "bfloat16", "float64", "int8",
                                      "int32",   "int64",   "uint8",    "bool"};
  return dt >= 0 && dt < DK_DTYPE_COUNT_1_0 ? names[dt] : "?";
}

bool takes_reduce(int32_t c) {
  return c == DK_COLL_ALL_REDUCE || c == DK_COLL_REDUCE || c == DK_COLL_REDUCE_SCATTER;
}
bool takes_root(int32_t c) { return c == DK_COLL_BROADCAST || c == DK_COLL_REDUCE; }
bool takes_peer(int32_t c) { return c == DK_COLL_SEND || c == DK_COLL_RECV; }

std::string format(const char* fmt, ...) DKH_PRINTF(1, 2);
std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spin briefly, then yield, then sleep in short steps: no sleep on the hot
// path, no core burnt for long on an idle one.
struct Backoff {
  uint32_t n = 0;
  void pause() {
    ++n;
    if (n < 2000) {
      cpu_relax();
    } else if (n < 4000) {
      sched_yield();
    } else {
      timespec ts{0, 20000};  // 20 us
      nanosleep(&ts, nullptr);
    }
  }
  void reset() { n = 0; }
};

// Gone, or a zombie its parent has not reaped yet (Linux: /proc/<pid>/stat).
bool pid_dead(int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64], buf[256];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  const size_t got = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[got] = 0;
  const char* end = std::strrchr(buf, ')');  // "pid (comm) S ...": comm may hold spaces
  return end != nullptr && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
}

}  // namespace
}  // namespace dkcpu

// ---- The communicator --------------------------------------------------------

struct DK_Comm {
  int32_t nranks = 0, rank = 0, device = 0;
  int64_t timeout_ms = 0;
  std::string name;  // segment name (already unlinked after init)
  char* base = nullptr;
  size_t bytes = 0;
  dkcpu::Header* hdr = nullptr;
  dkcpu::RankCtl* ctl = nullptr;
  dkcpu::PairCtl* pairs = nullptr;  // [sender * n + receiver]
  char* coll = nullptr;             // [rank][2][kChunkBytes]
  char* p2p = nullptr;              // [sender * n + receiver][2][kP2PBytes]

  std::atomic<bool> aborted{false};
  std::atomic<bool> failed{false};
  std::mutex fail_mu;
  std::string fail_message;
  std::atomic<int64_t> pending{0};  // enqueued calls not yet run
  std::mutex run_mu;                // one call at a time on this end

  // Owned by the call running under run_mu.
  uint64_t step = 0;
  uint64_t seq = 0;
  uint64_t chunk_no = 0;
  uint64_t free_after[2] = {0, 0};
  std::vector<uint64_t> sent_chunks, recv_chunks, sent_msgs, recv_msgs;

  dkcpu::PairCtl& pair(int s, int r) { return pairs[size_t(s) * nranks + r]; }
  char* coll_buf(int r, int b) { return coll + (size_t(r) * 2 + b) * dkcpu::kChunkBytes; }
  char* p2p_buf(int s, int r, int b) {
    return p2p + ((size_t(s) * nranks + r) * 2 + b) * dkcpu::kP2PBytes;
  }
};

namespace dkcpu {
namespace {

std::mutex g_comms_mu;
std::set<const DK_Comm*>& live_comms() {
  static auto* s = new std::set<const DK_Comm*>;  // never destroyed: see plugin.cpp
  return *s;
}

bool is_live(const DK_Comm* c) {
  std::lock_guard<std::mutex> lock(g_comms_mu);
  return live_comms().count(c) != 0;
}

// One call of a communicator, as the waits describe it in errors.
struct Ctx {
  DK_Comm* c;
  const char* call;  // "cpu.Coll_Run(all_reduce)"
};

std::string where(const Ctx& x) {
  return format("%s on communicator rank %d of %d", x.call, x.c->rank, x.c->nranks);
}

// Tells the peers this rank failed (the first failing rank's reason is kept).
void break_segment(DK_Comm* c, const std::string& why) {
  int32_t zero = 0;
  if (c->hdr->broken.compare_exchange_strong(zero, c->rank + 1)) {
    std::snprintf(c->hdr->reason, sizeof c->hdr->reason, "%s", why.c_str());
    c->hdr->reason_ready.store(1);
  }
}

// Marks this end failed (the first message is kept) and tells the peers.
DK_Error* fail(DK_Comm* c, int32_t code, const std::string& msg) {
  {
    std::lock_guard<std::mutex> lock(c->fail_mu);
    if (c->fail_message.empty()) c->fail_message = msg;
  }
  c->failed.store(true);
  if (c->hdr) break_segment(c, msg);
  return dkh_error(code, "%s", msg.c_str());
}

// Why a wait must stop now (aborted, a peer failed, a peer died, timed out):
// the message, or "" to go on waiting. `missing` lists the ranks waited for.
std::string check_wait(const Ctx& x, Clock::time_point deadline, const std::vector<int>& missing,
                       bool check_pids) {
  DK_Comm* c = x.c;
  if (c->aborted.load()) {
    return where(x) + ": aborted (Comm_Abort) while waiting for ranks " + rank_list(missing);
  }
  const int32_t broken = c->hdr->broken.load();
  if (broken != 0 && broken != c->rank + 1) {
    std::string why = c->hdr->reason_ready.load() ? std::string(c->hdr->reason) : "";
    return where(x) + format(": rank %d failed or aborted its communicator", broken - 1) +
           " while this rank waited for ranks " + rank_list(missing) +
           (why.empty() ? "" : " (rank " + std::to_string(broken - 1) + ": " + why + ")");
  }
  if (check_pids) {
    std::vector<int> dead;
    for (int r : missing) {
      if (pid_dead(c->ctl[r].pid.load())) dead.push_back(r);
    }
    if (!dead.empty()) {
      return where(x) + ": ranks " + rank_list(dead) +
             " died (their process is gone) while this rank waited for ranks " + rank_list(missing);
    }
  }
  if (Clock::now() > deadline) {
    return where(x) + format(": timed out after %" PRId64 " ms waiting for ranks ", c->timeout_ms) +
           rank_list(missing) + " (they never arrived, are stuck, or called something else)";
  }
  return "";
}

// Waits until `ready()`; `missing()` lists the ranks it waits for.
template <class Ready, class Missing>
DK_Error* wait_for(const Ctx& x, Ready ready, Missing missing) {
  if (ready()) return nullptr;
  const auto deadline = Clock::now() + std::chrono::milliseconds(x.c->timeout_ms);
  auto last_pid_check = Clock::now();
  Backoff backoff;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return nullptr;
      backoff.pause();
    }
    if (x.c->aborted.load() || x.c->hdr->broken.load() != 0 || backoff.n > 2000) {
      const auto now = Clock::now();
      const bool pids = now - last_pid_check > std::chrono::milliseconds(2);
      if (pids) last_pid_check = now;
      std::string why = check_wait(x, deadline, missing(), pids);
      if (!why.empty()) {
        if (ready()) return nullptr;  // arrived at the last moment: not a failure
        return fail(x.c, DK_ERROR_UNAVAILABLE, why);
      }
    }
  }
}

// ---- Steps: the collectives' barrier -----------------------------------------

void post(DK_Comm* c) { c->ctl[c->rank].step.store(++c->step, std::memory_order_release); }

DK_Error* wait_all(const Ctx& x, uint64_t target) {
  DK_Comm* c = x.c;
  return wait_for(
      x,
      [&] {
        for (int r = 0; r < c->nranks; ++r) {
          if (c->ctl[r].step.load(std::memory_order_acquire) < target) return false;
        }
        return true;
      },
      [&] {
        std::vector<int> m;
        for (int r = 0; r < c->nranks; ++r) {
          if (c->ctl[r].step.load() < target) m.push_back(r);
        }
        return m;
      });
}

DK_Error* barrier(const Ctx& x) {
  post(x.c);
  return wait_all(x, x.c->step);
}

// ---- Reductions: fixed order, ranks 0..n-1 ------------------------------------

template <class S, class A, class Ld, class Cb, class Fin>
void reduce_span(S* dst, const S* const* src, int n, size_t len, Ld ld, Cb cb, Fin fin) {
  constexpr size_t B = 1024;
  A acc[B];
  for (size_t i0 = 0; i0 < len; i0 += B) {
    const size_t m = std::min(B, len - i0);
    const S* s0 = src[0] + i0;
    for (size_t i = 0; i < m; ++i) acc[i] = ld(s0[i]);
    for (int r = 1; r < n; ++r) {
      const S* sr = src[r] + i0;
      for (size_t i = 0; i < m; ++i) acc[i] = cb(acc[i], ld(sr[i]));
    }
    S* d = dst + i0;
    for (size_t i = 0; i < m; ++i) d[i] = fin(acc[i]);
  }
}

template <class A> A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return A(U(U(a) + U(b)));
  } else {
    return a + b;
  }
}
template <class A> A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return A(U(W(U(a)) * W(U(b))));
  } else {
    return a * b;
  }
}
template <class A> A op_max(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    return (a > b || a != a) ? a : b;  // NaN propagates
  } else {
    return a > b ? a : b;
  }
}
template <class A> A op_min(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    return (a < b || a != a) ? a : b;
  } else {
    return a < b ? a : b;
  }
}

// Storage S, accumulation A, load / store between them.
template <class S, class A, class Ld, class St>
void reduce_typed(void* dst, const void* const* src, int n, size_t len, int32_t op, Ld ld, St st) {
  S* d = static_cast<S*>(dst);
  const S* const* s = reinterpret_cast<const S* const*>(src);
  switch (op) {
    case DK_COLL_OP_SUM:
      reduce_span<S, A>(d, s, n, len, ld, [](A a, A b) { return wrap_add(a, b); }, st);
      break;
    case DK_COLL_OP_PROD:
      reduce_span<S, A>(d, s, n, len, ld, [](A a, A b) { return wrap_mul(a, b); }, st);
      break;
    case DK_COLL_OP_MAX:
      reduce_span<S, A>(d, s, n, len, ld, [](A a, A b) { return op_max(a, b); }, st);
      break;
    case DK_COLL_OP_MIN:
      reduce_span<S, A>(d, s, n, len, ld, [](A a, A b) { return op_min(a, b); }, st);
      break;
    case DK_COLL_OP_AVG:
      if constexpr (std::is_integral_v<A>) {  // exact sum in int64, truncated quotient
        const int64_t nn = n;
        reduce_span<S, int64_t>(
            d, s, n, len, [&](S v) { return int64_t(ld(v)); },
            [](int64_t a, int64_t b) { return wrap_add(a, b); },
            [&](int64_t a) { return st(A(a / nn)); });
      } else {
        const A nn = A(n);
        reduce_span<S, A>(
            d, s, n, len, ld, [](A a, A b) { return a + b; }, [&](A a) { return st(a / nn); });
      }
      break;
  }
}

void reduce_any(int32_t dtype, int32_t op, void* dst, const void* const* src, int n, size_t len) {
  if (len == 0) return;
  auto id = [](auto v) { return v; };
  switch (dtype) {
    case DK_DTYPE_FLOAT32: return reduce_typed<float, float>(dst, src, n, len, op, id, id);
    case DK_DTYPE_FLOAT64: return reduce_typed<double, double>(dst, src, n, len, op, id, id);
    case DK_DTYPE_FLOAT16:
      return reduce_typed<uint16_t, float>(
          dst, src, n, len, op, [](uint16_t v) { return dkh_half_to_float(v); },
          [](float a) { return dkh_float_to_half(a); });
    case DK_DTYPE_BFLOAT16:
      return reduce_typed<uint16_t, float>(
          dst, src, n, len, op, [](uint16_t v) { return dkh_bfloat16_to_float(v); },
          [](float a) { return dkh_float_to_bfloat16(a); });
    case DK_DTYPE_INT8: return reduce_typed<int8_t, int8_t>(dst, src, n, len, op, id, id);
    case DK_DTYPE_INT32: return reduce_typed<int32_t, int32_t>(dst, src, n, len, op, id, id);
    case DK_DTYPE_INT64: return reduce_typed<int64_t, int64_t>(dst, src, n, len, op, id, id);
    case DK_DTYPE_UINT8: return reduce_typed<uint8_t, uint8_t>(dst, src, n, len, op, id, id);
    case DK_DTYPE_BOOL: {
      // 0 / 1: sum and max are "or", prod and min "and"; avg is the count of
      // true values divided by nranks, truncated: "and".
      const int32_t o =
          op == DK_COLL_OP_SUM || op == DK_COLL_OP_MAX ? DK_COLL_OP_MAX : DK_COLL_OP_MIN;
      return reduce_typed<uint8_t, uint8_t>(
          dst, src, n, len, o, [](uint8_t v) { return uint8_t(v != 0); }, id);
    }
  }
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
}

// ---- One call ------------------------------------------------------------------

struct Call {
  DK_Comm* comm;
  const void* send;
  void* recv;
  int64_t count;
  int32_t collective, dtype, op, root, peer;
};

// Before writing my buffer b: every peer finished reading what it held.
DK_Error* reserve(const Ctx& x, int b) {
  if (x.c->free_after[b] == 0) return nullptr;
  return wait_all(x, x.c->free_after[b]);
}

// Publishes this call's description, posts the first step, waits for all
// and compares: a mismatch is DK_ERROR_INVALID_ARGUMENT naming both sides.
DK_Error* first_barrier(const Ctx& x, const Call& k) {
  DK_Comm* c = x.c;
  const uint64_t seq = ++c->seq;
  Desc& mine = c->ctl[c->rank].desc[seq % kDescRing];
  mine.seq = seq;
  mine.count = k.count;
  mine.collective = k.collective;
  mine.dtype = k.dtype;
  mine.op = takes_reduce(k.collective) ? k.op : -1;
  mine.root = takes_root(k.collective) ? k.root : -1;
  if (DK_Error* e = barrier(x)) return e;
  for (int r = 0; r < c->nranks; ++r) {
    const Desc& d = c->ctl[r].desc[seq % kDescRing];
    if (d.seq == seq && d.count == mine.count && d.collective == mine.collective &&
        d.dtype == mine.dtype && d.op == mine.op && d.root == mine.root) {
      continue;
    }
    auto show = [](const Desc& v) {
      return format("call #%" PRIu64 " %s(count=%" PRId64 ", dtype=%s, op=%s, root=%d)", v.seq,
                    coll_name(v.collective), v.count, dtype_name(v.dtype), op_name(v.op), v.root);
    };
    return fail(c, DK_ERROR_INVALID_ARGUMENT,
                where(x) + ": the ranks disagree: rank " + std::to_string(c->rank) + " made " +
                    show(mine) + ", rank " + std::to_string(r) + " made " + show(d) +
                    "; every rank must make the same collectives in the same order with the "
                    "same count, dtype, op and root");
  }
  return nullptr;
}

// Slice j of n over [0, len).
inline size_t slice_lo(size_t len, int j, int n) { return len * size_t(j) / size_t(n); }

DK_Error* run_collective(const Ctx& x, const Call& k) {
  DK_Comm* c = x.c;
  const int n = c->nranks, me = c->rank;
  const size_t es = dtype_size(k.dtype);
  const size_t count = size_t(k.count);
  const char* send = static_cast<const char*>(k.send);
  char* recv = static_cast<char*>(k.recv);
  const bool per_dest =
      k.collective == DK_COLL_REDUCE_SCATTER || k.collective == DK_COLL_ALL_TO_ALL;
  // Elements per chunk of `count` (per destination for the per_dest ones).
  size_t chunk = kChunkBytes / es;
  if (per_dest) chunk = std::max<size_t>(1, chunk / size_t(n));
  const size_t nchunks = count == 0 ? 1 : (count + chunk - 1) / chunk;
  std::vector<const void*> srcs(static_cast<size_t>(n));

  for (size_t ci = 0; ci < nchunks; ++ci) {
    const size_t off = ci * chunk;
    const size_t len = std::min(chunk, count - std::min(count, off));
    const int b = int(c->chunk_no++ % 2);  // alternates across chunks and calls
    if (DK_Error* e = reserve(x, b)) return e;
    char* mybuf = c->coll_buf(me, b);
    // Copy in.
    switch (k.collective) {
      case DK_COLL_ALL_REDUCE:
      case DK_COLL_REDUCE:
      case DK_COLL_ALL_GATHER: copy(mybuf, send + off * es, len * es); break;
      case DK_COLL_BROADCAST:
        if (me == k.root) copy(mybuf, send + off * es, len * es);
        break;
      case DK_COLL_REDUCE_SCATTER:
      case DK_COLL_ALL_TO_ALL:
        for (int j = 0; j < n; ++j) {
          copy(mybuf + size_t(j) * len * es, send + (size_t(j) * count + off) * es, len * es);
        }
        break;
    }
    if (ci == 0) {
      if (DK_Error* e = first_barrier(x, k)) return e;
    } else if (DK_Error* e = barrier(x)) {
      return e;
    }
    const bool reducing = k.collective == DK_COLL_ALL_REDUCE || k.collective == DK_COLL_REDUCE;
    if (reducing && len * es <= kSmallBytes) {
      // Small: every rank that needs the result reduces the whole chunk
      // itself, in the same order (the same bits), saving a step.
      if (k.collective == DK_COLL_ALL_REDUCE || me == k.root) {
        for (int r = 0; r < n; ++r) srcs[r] = c->coll_buf(r, b);
        reduce_any(k.dtype, k.op, recv + off * es, srcs.data(), n, len);
      }
      post(c);  // done reading the peers' buffers b
      c->free_after[b] = c->step;
      continue;
    }
    // Reduce my slice (all_reduce, reduce), then everyone sees all slices.
    if (reducing) {
      const size_t lo = slice_lo(len, me, n), hi = slice_lo(len, me + 1, n);
      for (int r = 0; r < n; ++r) srcs[r] = c->coll_buf(r, b) + lo * es;
      reduce_any(k.dtype, k.op, mybuf + lo * es, srcs.data(), n, hi - lo);
      if (DK_Error* e = barrier(x)) return e;
    }
    // Copy out.
    switch (k.collective) {
      case DK_COLL_ALL_REDUCE:
      case DK_COLL_REDUCE:
        if (k.collective == DK_COLL_ALL_REDUCE || me == k.root) {
          for (int j = 0; j < n; ++j) {
            const size_t lo = slice_lo(len, j, n), hi = slice_lo(len, j + 1, n);
            copy(recv + (off + lo) * es, c->coll_buf(j, b) + lo * es, (hi - lo) * es);
          }
        }
        break;
      case DK_COLL_BROADCAST:
        copy(recv + off * es, me == k.root ? send + off * es : c->coll_buf(k.root, b), len * es);
        break;
      case DK_COLL_ALL_GATHER:
        for (int j = 0; j < n; ++j) {
          copy(recv + (size_t(j) * count + off) * es, c->coll_buf(j, b), len * es);
        }
        break;
      case DK_COLL_REDUCE_SCATTER:
        for (int r = 0; r < n; ++r) srcs[r] = c->coll_buf(r, b) + size_t(me) * len * es;
        reduce_any(k.dtype, k.op, recv + off * es, srcs.data(), n, len);
        break;
      case DK_COLL_ALL_TO_ALL:
        for (int r = 0; r < n; ++r) {
          copy(recv + (size_t(r) * count + off) * es, c->coll_buf(r, b) + size_t(me) * len * es,
               len * es);
        }
        break;
    }
    post(c);  // done reading the peers' buffers b
    c->free_after[b] = c->step;
  }
  return nullptr;
}

// ---- Send / recv: per-pair mailboxes, progressed together ------------------------

struct P2P {
  Call k;
  size_t bytes = 0, nchunks = 0, done = 0;
  uint64_t msg = 0, first_chunk = 0;
};

void p2p_start(DK_Comm* c, P2P& p) {
  const size_t es = dtype_size(p.k.dtype);
  p.bytes = size_t(p.k.count) * es;
  p.nchunks = p.bytes == 0 ? 1 : (p.bytes + kP2PBytes - 1) / kP2PBytes;
  const int peer = p.k.peer;
  if (p.k.collective == DK_COLL_SEND) {
    p.msg = ++c->sent_msgs[peer];
    p.first_chunk = c->sent_chunks[peer];
    c->sent_chunks[peer] += p.nchunks;
  } else {
    p.msg = ++c->recv_msgs[peer];
    p.first_chunk = c->recv_chunks[peer];
    c->recv_chunks[peer] += p.nchunks;
  }
}

// One step of p's progress if it can make one: >0 progressed, 0 not, <0 error.
int p2p_progress(const Ctx& x, P2P& p, DK_Error** err) {
  DK_Comm* c = x.c;
  const int me = c->rank, peer = p.k.peer;
  const uint64_t kc = p.first_chunk + p.done;
  const int b = int(kc % 2);
  const size_t off = p.done * kP2PBytes;
  const size_t len = std::min(kP2PBytes, p.bytes - std::min(p.bytes, off));
  if (p.k.collective == DK_COLL_SEND) {
    PairCtl& pc = c->pair(me, peer);
    if (pc.consumed.load(std::memory_order_acquire) + 2 <= kc) return 0;  // both buffers full
    copy(c->p2p_buf(me, peer, b), static_cast<const char*>(p.k.send) + off, len);
    pc.hdr[b] = MsgHdr{p.msg, p.k.count, p.k.dtype, uint32_t(len)};
    pc.posted.store(kc + 1, std::memory_order_release);
  } else {
    PairCtl& pc = c->pair(peer, me);
    if (pc.posted.load(std::memory_order_acquire) < kc + 1) return 0;
    const MsgHdr h = pc.hdr[b];
    if (h.msg != p.msg || h.count != p.k.count || h.dtype != p.k.dtype || h.bytes != len) {
      *err = fail(c, DK_ERROR_INVALID_ARGUMENT,
                  where(x) + format(": rank %d's send #%" PRIu64 " has count=%" PRId64
                                    ", dtype=%s; this rank's recv #%" PRIu64 " from it expects "
                                    "count=%" PRId64 ", dtype=%s (sends and recvs are matched in "
                                    "order per pair and must agree)",
                                    peer, h.msg, h.count, dtype_name(h.dtype), p.msg, p.k.count,
                                    dtype_name(p.k.dtype)));
      return -1;
    }
    copy(static_cast<char*>(p.k.recv) + off, c->p2p_buf(peer, me, b), len);
    pc.consumed.store(kc + 1, std::memory_order_release);
  }
  ++p.done;
  return 1;
}

// Runs the send / recv ops together until all are done.
DK_Error* run_p2p(const char* call, std::vector<P2P>& ops) {
  for (auto& p : ops) p2p_start(p.k.comm, p);
  auto deadline_for = [](const DK_Comm* c) {
    return Clock::now() + std::chrono::milliseconds(c->timeout_ms);
  };
  auto deadline = deadline_for(ops.front().k.comm);
  Backoff backoff;
  auto last_pid_check = Clock::now();
  for (;;) {
    bool all_done = true, progressed = false;
    for (auto& p : ops) {
      while (p.done < p.nchunks) {
        DK_Error* err = nullptr;
        const Ctx x{p.k.comm, call};
        const int r = p2p_progress(x, p, &err);
        if (r < 0) return err;
        if (r == 0) break;
        progressed = true;
      }
      if (p.done < p.nchunks) all_done = false;
    }
    if (all_done) return nullptr;
    if (progressed) {
      backoff.reset();
      deadline = deadline_for(ops.front().k.comm);
      continue;
    }
    backoff.pause();
    if (backoff.n % 64 != 0) continue;
    const auto now = Clock::now();
    const bool pids = now - last_pid_check > std::chrono::milliseconds(2);
    if (pids) last_pid_check = now;
    for (auto& p : ops) {
      if (p.done >= p.nchunks) continue;
      const Ctx x{p.k.comm, call};
      const std::string why = check_wait(x, deadline, {p.k.peer}, pids);
      if (!why.empty()) return fail(x.c, DK_ERROR_UNAVAILABLE, why);
    }
  }
}

// ---- Executing calls (on the stream's worker, or at once for stream NULL) ----------

std::string call_name(int32_t collective) {
  return std::string("cpu.Coll_Run(") + coll_name(collective) + ")";
}

DK_Error* check_usable(DK_Comm* c, const char* call) {
  if (c->aborted.load()) {
    return dkh_error(DK_ERROR_UNAVAILABLE, "%s on communicator rank %d of %d: aborted (Comm_Abort)",
                     call, c->rank, c->nranks);
  }
  if (c->failed.load()) {
    std::lock_guard<std::mutex> lock(c->fail_mu);
    return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                     "%s on communicator rank %d of %d: the communicator is unusable after an "
                     "earlier error (%s); destroy it with Comm_Destroy and make a new one",
                     call, c->rank, c->nranks, c->fail_message.c_str());
  }
  return nullptr;
}

// Runs calls in order; consecutive sends / recvs are progressed together.
DK_Error* execute(const Call* calls, size_t ncalls) {
  // Lock every communicator involved, in address order.
  std::vector<DK_Comm*> comms;
  for (size_t i = 0; i < ncalls; ++i) comms.push_back(calls[i].comm);
  std::sort(comms.begin(), comms.end());
  comms.erase(std::unique(comms.begin(), comms.end()), comms.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  for (DK_Comm* c : comms) locks.emplace_back(c->run_mu);

  DK_Error* first = nullptr;
  for (size_t i = 0; i < ncalls;) {
    const Call& k = calls[i];
    const std::string name = call_name(k.collective);
    if (takes_peer(k.collective)) {
      std::vector<P2P> ops;
      size_t j = i;
      for (; j < ncalls && takes_peer(calls[j].collective); ++j) {
        P2P p;
        p.k = calls[j];
        ops.push_back(p);
      }
      DK_Error* e = nullptr;
      for (DK_Comm* c : comms) {
        if (!e) e = check_usable(c, name.c_str());
      }
      if (!e) e = run_p2p(ops.size() > 1 ? "cpu.Coll_Run(grouped send/recv)" : name.c_str(), ops);
      if (e && !first) first = e;
      else if (e) {
        DK_Error_Destroy_Args d = {DK_Error_Destroy_Args_STRUCT_SIZE, e};
        dkh_Error_Destroy(&d);
      }
      i = j;
      if (first) break;
      continue;
    }
    DK_Error* e = check_usable(k.comm, name.c_str());
    if (!e) e = run_collective(Ctx{k.comm, name.c_str()}, k);
    if (e) {
      first = e;
      break;
    }
    ++i;
  }
  return first;
}

struct OnePayload { Call call; };
struct GroupPayload { std::vector<Call>* calls; };

void finish_pending(const Call* calls, size_t n) {
  for (size_t i = 0; i < n; ++i) calls[i].comm->pending.fetch_sub(1);
}

DK_Error* run_one(const void* payload) {
  const OnePayload& p = *static_cast<const OnePayload*>(payload);
  DK_Error* e = execute(&p.call, 1);
  finish_pending(&p.call, 1);
  return e;
}

DK_Error* run_group(const void* payload) {
  std::vector<Call>* calls = static_cast<const GroupPayload*>(payload)->calls;
  DK_Error* e = execute(calls->data(), calls->size());
  finish_pending(calls->data(), calls->size());
  delete calls;
  return e;
}

// ---- Groups (per calling thread) ------------------------------------------------

struct GroupState {
  int depth = 0;
  std::vector<Call> calls;
  DK_Stream* stream = nullptr;
};
thread_local GroupState t_group;

// ---- Argument checks of Coll_Run --------------------------------------------------

constexpr uint64_t kCollMask = (uint64_t(1) << DK_COLLECTIVE_COUNT_1_5) - 1;
constexpr uint64_t kDTypeMask = DK_DTYPE_MASK_ALL_1_0;
constexpr uint64_t kOpMask = (uint64_t(1) << DK_COLL_OP_COUNT_1_5) - 1;

DK_Error* invalid(const std::string& call, const char* fmt, ...) DKH_PRINTF(2, 3);
DK_Error* invalid(const std::string& call, const char* fmt, ...) {
  char buf[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s", call.c_str(), buf);
}

DK_Error* check_buffer(const std::string& call, const DK_Comm* c, const char* what, const void* p,
                       uint64_t bytes) {
  if (bytes == 0) return nullptr;
  if (p == nullptr) {
    return invalid(call, "%s is NULL with %" PRIu64 " bytes to %s; expected device memory", what,
                   bytes, std::strcmp(what, "send") == 0 ? "read" : "write");
  }
  return check_device_memory(call.c_str(), what, c->device, p, bytes);
}

DK_Error* check_run(const DK_Coll_Run_Args* a, std::string& call) {
  call = "cpu.Coll_Run";
  if (a->comm == nullptr) return invalid(call, "comm is NULL; expected a communicator");
  if (!is_live(a->comm)) {
    return invalid(call, "comm %p is not a live communicator (destroyed, or not from Comm_Init)",
                   static_cast<const void*>(a->comm));
  }
  DK_Comm* c = a->comm;
  const int32_t coll = a->collective;
  if (coll < 0) return invalid(call, "collective is %d; expected a DK_CollectiveId", coll);
  if (coll >= 64 || !(kCollMask >> coll & 1)) {
    return dkh_error(DK_ERROR_UNIMPLEMENTED,
                     "cpu.Coll_Run: collective %d is not implemented by the cpu plugin "
                     "(DK_Collectives.collectives lists what it implements)",
                     coll);
  }
  call = call_name(coll);
  if (a->stream != nullptr) {
    if (DK_Error* e = check_stream(call.c_str(), a->stream, c->device)) return e;
    if (stream_capture(a->stream) != nullptr) {  // its work item owns heap state: not replayable
      return dkh_error(DK_ERROR_UNIMPLEMENTED,
                       "%s: the stream is capturing a graph; the cpu plugin does not record "
                       "collectives in a graph",
                       call.c_str());
    }
  }
  if (a->dtype < 0) return invalid(call, "dtype is %d; expected a DK_DType", a->dtype);
  if (a->dtype >= 64 || !(kDTypeMask >> a->dtype & 1)) {
    return dkh_error(DK_ERROR_UNIMPLEMENTED,
                     "%s: dtype %d is not implemented by the cpu plugin's collectives "
                     "(DK_Collectives.dtypes)",
                     call.c_str(), a->dtype);
  }
  if (takes_reduce(coll)) {
    if (a->op < 0) return invalid(call, "op is %d; expected a DK_CollReduceOp", a->op);
    if (a->op >= 64 || !(kOpMask >> a->op & 1)) {
      return dkh_error(DK_ERROR_UNIMPLEMENTED,
                       "%s: reduce op %d is not implemented by the cpu plugin "
                       "(DK_Collectives.reduce_ops)",
                       call.c_str(), a->op);
    }
  }
  if (a->count < 0) return invalid(call, "count is %" PRId64 "; expected >= 0", a->count);
  const int n = c->nranks;
  if (takes_root(coll) && (a->root < 0 || a->root >= n)) {
    return invalid(call, "root is %d; expected 0 <= root < nranks (%d)", a->root, n);
  }
  if (takes_peer(coll) && (a->peer < 0 || a->peer >= n || a->peer == c->rank)) {
    return invalid(call, "peer is %d; expected 0 <= peer < nranks (%d) and != this rank (%d)",
                   a->peer, n, c->rank);
  }
  const uint64_t es = dtype_size(a->dtype);
  const uint64_t cnt = uint64_t(a->count);
  if (cnt > (uint64_t(1) << 56) / es / uint64_t(n)) {
    return invalid(call, "count %" PRId64 " is too large", a->count);
  }
  const uint64_t one = cnt * es, all = one * uint64_t(n);
  uint64_t send_bytes = 0, recv_bytes = 0;
  const bool root = takes_root(coll) && a->root == c->rank;
  switch (coll) {
    case DK_COLL_ALL_REDUCE:
      send_bytes = one;
      recv_bytes = one;
      break;
    case DK_COLL_BROADCAST:
      send_bytes = root ? one : 0;
      recv_bytes = one;
      break;
    case DK_COLL_REDUCE:
      send_bytes = one;
      recv_bytes = root ? one : 0;
      break;
    case DK_COLL_ALL_GATHER:
      send_bytes = one;
      recv_bytes = all;
      break;
    case DK_COLL_REDUCE_SCATTER:
      send_bytes = all;
      recv_bytes = one;
      break;
    case DK_COLL_ALL_TO_ALL:
      send_bytes = all;
      recv_bytes = all;
      break;
    case DK_COLL_SEND: send_bytes = one; break;
    case DK_COLL_RECV: recv_bytes = one; break;
  }
  if (DK_Error* e = check_buffer(call, c, "send", a->send, send_bytes)) return e;
  if (DK_Error* e = check_buffer(call, c, "recv", a->recv, recv_bytes)) return e;
  if (send_bytes != 0 && recv_bytes != 0 && a->send != a->recv) {
    const uintptr_t s = uintptr_t(a->send), r = uintptr_t(a->recv);
    const bool in_place = (coll == DK_COLL_ALL_GATHER && s == r + c->rank * one) ||
                          (coll == DK_COLL_REDUCE_SCATTER && r == s + c->rank * one);
    const bool overlap = s < r + recv_bytes && r < s + send_bytes;
    if (overlap && !in_place) {
      return invalid(call,
                     "send [%p, +%" PRIu64 ") and recv [%p, +%" PRIu64
                     ") overlap; expected the same pointer (in place), %s, or disjoint buffers",
                     a->send, send_bytes, a->recv, recv_bytes,
                     coll == DK_COLL_ALL_GATHER       ? "send == recv + rank * count"
                     : coll == DK_COLL_REDUCE_SCATTER ? "recv == send + rank * count"
                                                      : "nothing else");
    }
  }
  return nullptr;
}

// ---- The segment: open, map, unlink ------------------------------------------------

std::string seg_name(const DK_CollUniqueId* id, int32_t nranks, std::string* err) {
  IdLayout l;
  std::memcpy(&l, id->bytes, sizeof l);
  if (l.magic != kMagic || l.version != kVersion) {
    *err = "id is not a unique id of this plugin (made by cpu.Comm_GetUniqueId)";
    return "";
  }
  l.name[sizeof l.name - 1] = 0;
  if (std::strncmp(l.name, kNamePrefix, std::strlen(kNamePrefix)) != 0 ||
      std::strchr(l.name + 1, '/') != nullptr) {
    *err = "id holds a malformed segment name";
    return "";
  }
  return std::string(l.name) + "-n" + std::to_string(nranks);
}

}  // namespace
}  // namespace dkcpu

using namespace dkcpu;

extern "C" {

DK_Error* dk_cpu_Comm_GetUniqueId(DK_Comm_GetUniqueId_Args* args) {
  static const char* const kCall = "cpu.Comm_GetUniqueId";
  DKCPU_CHECK_ARGS(kCall, args, DK_Comm_GetUniqueId_Args);
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  return guarded(kCall, [&]() -> DK_Error* {
    std::random_device rd;
    const uint64_t bits = (uint64_t(rd()) << 32) ^ uint64_t(rd()) ^
                          uint64_t(Clock::now().time_since_epoch().count()) * 0x9e3779b97f4a7c15ull;
    IdLayout l{};
    l.magic = kMagic;
    l.version = kVersion;
    std::snprintf(l.name, sizeof l.name, "%s%d-%016" PRIx64, kNamePrefix, int(getpid()), bits);
    std::memset(args->id.bytes, 0, sizeof args->id.bytes);
    std::memcpy(args->id.bytes, &l, sizeof l);
    return nullptr;
  });
}

DK_Error* dk_cpu_Comm_Init(DK_Comm_Init_Args* args) {
  static const char* const kCall = "cpu.Comm_Init";
  DKCPU_CHECK_ARGS(kCall, args, DK_Comm_Init_Args);
  if (args->id == nullptr) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: id is NULL; expected a unique id", kCall);
  }
  const int32_t n = args->nranks, rank = args->rank;
  if (n < 1 || rank < 0 || rank >= n) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: nranks %d, rank %d; expected nranks >= 1 and 0 <= rank < nranks", kCall,
                     n, rank);
  }
  if (n > kMaxRanks) {
    return dkh_error(DK_ERROR_UNIMPLEMENTED, "%s: nranks %d; the cpu plugin takes at most 64",
                     kCall, n);
  }
  if (args->timeout_ms < 0) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: timeout_ms is %" PRId64 "; expected >= 0",
                     kCall, args->timeout_ms);
  }
  if (DK_Error* e = check_device(kCall, args->device)) return e;
  std::string why;
  const std::string name = seg_name(args->id, n, &why);
  if (name.empty()) return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: %s", kCall, why.c_str());
  return guarded(kCall, [&]() -> DK_Error* {
    auto* c = new DK_Comm;
    c->nranks = n;
    c->rank = rank;
    c->device = args->device;
    // (capped at about 3 years so that now + timeout cannot overflow the clock)
    c->timeout_ms = args->timeout_ms == 0 ? DK_COLL_DEFAULT_TIMEOUT_MS
                                          : std::min<int64_t>(args->timeout_ms, int64_t(1e11));
    c->name = name;
    c->sent_chunks.assign(size_t(n), 0);
    c->recv_chunks.assign(size_t(n), 0);
    c->sent_msgs.assign(size_t(n), 0);
    c->recv_msgs.assign(size_t(n), 0);
    const Layout lay(n);
    auto give_up = [&](int32_t code, const std::string& msg, bool unlink) {
      if (unlink) shm_unlink(name.c_str());
      if (c->base) munmap(c->base, c->bytes);
      delete c;
      return dkh_error(code, "%s (communicator rank %d of %d): %s", kCall, rank, n, msg.c_str());
    };
    const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0) {
      return give_up(DK_ERROR_UNAVAILABLE,
                     format("shm_open(%s) failed: %s", name.c_str(), std::strerror(errno)), false);
    }
    if (ftruncate(fd, off_t(lay.total)) != 0) {
      const int err = errno;
      close(fd);
      return give_up(
          DK_ERROR_UNAVAILABLE,
          format("ftruncate(%s, %zu) failed: %s", name.c_str(), lay.total, std::strerror(err)),
          true);
    }
    void* p = mmap(nullptr, lay.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int map_err = errno;
    close(fd);
    if (p == MAP_FAILED) {
      return give_up(DK_ERROR_UNAVAILABLE,
                     format("mmap of %zu bytes failed: %s", lay.total, std::strerror(map_err)),
                     true);
    }
    c->base = static_cast<char*>(p);
    c->bytes = lay.total;
    c->hdr = reinterpret_cast<Header*>(c->base);
    c->ctl = reinterpret_cast<RankCtl*>(c->base + lay.ctl);
    c->pairs = reinterpret_cast<PairCtl*>(c->base + lay.pair);
    c->coll = c->base + lay.coll;
    c->p2p = c->base + lay.p2p;
    const auto deadline = Clock::now() + std::chrono::milliseconds(c->timeout_ms);

    // The first rank writes the header; the others wait for it.
    uint32_t fresh = 0;
    if (c->hdr->init_state.compare_exchange_strong(fresh, 1)) {
      c->hdr->magic = kMagic;
      c->hdr->version = kVersion;
      c->hdr->nranks = n;
      c->hdr->init_state.store(2);
    } else {
      Backoff backoff;
      while (c->hdr->init_state.load() != 2) {
        if (Clock::now() > deadline) {
          return give_up(DK_ERROR_UNAVAILABLE, "timed out waiting for the segment header", true);
        }
        backoff.pause();
      }
    }
    if (c->hdr->magic != kMagic || c->hdr->version != kVersion || c->hdr->nranks != n) {
      return give_up(DK_ERROR_INVALID_ARGUMENT,
                     format("segment %s holds nranks %d (version %u); this rank expects %d",
                            name.c_str(), c->hdr->nranks, c->hdr->version, n),
                     false);
    }
    int32_t none = 0;
    if (!c->ctl[rank].pid.compare_exchange_strong(none, int32_t(getpid()))) {
      return give_up(DK_ERROR_INVALID_ARGUMENT,
                     format("rank %d already joined this communicator (pid %d); each rank "
                            "calls Comm_Init once",
                            rank, none),
                     false);
    }
    c->hdr->arrived.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(g_comms_mu);
      live_comms().insert(c);
    }
    const Ctx x{c, kCall};
    DK_Error* e = wait_for(
        x, [&] { return c->hdr->arrived.load() >= n; },
        [&] {
          std::vector<int> m;
          for (int r = 0; r < n; ++r) {
            if (c->ctl[r].pid.load() == 0) m.push_back(r);
          }
          return m;
        });
    // Everyone is in (or this rank gives up): the name is no longer needed.
    shm_unlink(name.c_str());
    if (e != nullptr) {
      {
        std::lock_guard<std::mutex> lock(g_comms_mu);
        live_comms().erase(c);
      }
      munmap(c->base, c->bytes);
      delete c;
      return e;
    }
    args->comm = c;
    return nullptr;
  });
}

DK_Error* dk_cpu_Comm_Destroy(DK_Comm_Destroy_Args* args) {
  static const char* const kCall = "cpu.Comm_Destroy";
  DKCPU_CHECK_ARGS(kCall, args, DK_Comm_Destroy_Args);
  DK_Comm* c = args->comm;
  if (c == nullptr) return nullptr;
  if (!is_live(c)) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT,
                     "%s: comm %p is not a live communicator (destroyed, or not from Comm_Init)",
                     kCall, static_cast<void*>(c));
  }
  for (const Call& k : t_group.calls) {
    if (k.comm == c) {
      return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                       "%s: calls on this communicator are grouped on this thread and not issued "
                       "yet; end the group (Coll_Group end) first",
                       kCall);
    }
  }
  return guarded(kCall, [&]() -> DK_Error* {
    // Queued work first (within the timeout; then it is aborted, which ends it promptly).
    const auto deadline = Clock::now() + std::chrono::milliseconds(c->timeout_ms);
    Backoff backoff;
    while (c->pending.load() > 0) {
      if (Clock::now() > deadline) c->aborted.store(true);
      backoff.pause();
    }
    {
      std::lock_guard<std::mutex> lock(c->run_mu);  // a synchronous call still running
      std::lock_guard<std::mutex> lock2(g_comms_mu);
      live_comms().erase(c);
    }
    munmap(c->base, c->bytes);
    delete c;
    return nullptr;
  });
}

DK_Error* dk_cpu_Comm_Abort(DK_Comm_Abort_Args* args) {
  static const char* const kCall = "cpu.Comm_Abort";
  DKCPU_CHECK_ARGS(kCall, args, DK_Comm_Abort_Args);
  DK_Comm* c = args->comm;
  if (c == nullptr || !is_live(c)) {
    return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: comm %p is not a live communicator", kCall,
                     static_cast<void*>(c));
  }
  c->aborted.store(true);
  break_segment(c, format("cpu.Comm_Abort on communicator rank %d of %d", c->rank, c->nranks));
  return nullptr;
}

DK_Error* dk_cpu_Coll_Run(DK_Coll_Run_Args* args) {
  static const char* const kCall = "cpu.Coll_Run";
  DKCPU_CHECK_ARGS(kCall, args, DK_Coll_Run_Args);
  return guarded(kCall, [&]() -> DK_Error* {
    std::string call;
    if (DK_Error* e = check_run(args, call)) return e;
    DK_Comm* c = args->comm;
    if (DK_Error* e = check_usable(c, call.c_str())) return e;
    const Call k{c,
                 args->send,
                 args->recv,
                 args->count,
                 args->collective,
                 args->dtype,
                 takes_reduce(args->collective) ? args->op : -1,
                 takes_root(args->collective) ? args->root : -1,
                 takes_peer(args->collective) ? args->peer : -1};
    GroupState& g = t_group;
    if (g.depth > 0) {
      if (!g.calls.empty() && g.stream != args->stream) {
        return invalid(call,
                       "stream %p differs from the group's first call's (%p); every call "
                       "in a group uses the same stream",
                       static_cast<void*>(args->stream), static_cast<void*>(g.stream));
      }
      g.stream = args->stream;
      g.calls.push_back(k);
      return nullptr;
    }
    if (args->stream == nullptr) return execute(&k, 1);
    c->pending.fetch_add(1);
    enqueue(args->stream, run_one, OnePayload{k});
    return nullptr;
  });
}

DK_Error* dk_cpu_Coll_Group(DK_Coll_Group_Args* args) {
  static const char* const kCall = "cpu.Coll_Group";
  DKCPU_CHECK_ARGS(kCall, args, DK_Coll_Group_Args);
  return guarded(kCall, [&]() -> DK_Error* {
    GroupState& g = t_group;
    if (args->end == 0) {
      ++g.depth;
      return nullptr;
    }
    if (args->end != 1) {
      return dkh_error(DK_ERROR_INVALID_ARGUMENT, "%s: end is %d; expected 0 (start) or 1 (end)",
                       kCall, args->end);
    }
    if (g.depth == 0) {
      return dkh_error(DK_ERROR_FAILED_PRECONDITION,
                       "%s: group end without a group start on this thread", kCall);
    }
    if (--g.depth > 0 || g.calls.empty()) return nullptr;
    auto* calls = new std::vector<Call>(std::move(g.calls));
    g.calls.clear();
    DK_Stream* stream = g.stream;
    g.stream = nullptr;
    if (stream == nullptr) {
      DK_Error* e = execute(calls->data(), calls->size());
      delete calls;
      return e;
    }
    for (const Call& k : *calls) k.comm->pending.fetch_add(1);
    enqueue(stream, run_group, GroupPayload{calls});
    return nullptr;
  });
}

// The part's table, linked into DK_Api.extension_start (api.h).
const DK_Collectives dk_cpu_collectives = {
    {DK_Collectives_STRUCT_SIZE, DK_EXTENSION_COLLECTIVES, &dk_cpu_graphs.base},
    kCollMask,
    kDTypeMask,
    kOpMask,
    dk_cpu_Comm_GetUniqueId,
    dk_cpu_Comm_Init,
    dk_cpu_Comm_Destroy,
    dk_cpu_Comm_Abort,
    dk_cpu_Coll_Run,
    dk_cpu_Coll_Group,
};

}  // extern "C"
