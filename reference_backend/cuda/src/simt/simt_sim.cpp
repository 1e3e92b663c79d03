// The CPU SIMT emulator behind simt.h's host build: runs a kernel launch
// exactly as the dialect promises, and checks what a GPU would not report.
//
// Mechanism:
//  * a launch runs its blocks one after another, in a shuffled order (an
//    affine permutation of the block index, seeded per launch), on the
//    calling thread (the stream's worker);
//  * a block runs its threads as fibers on reused stacks. A fiber runs until
//    it reaches a switch point (dk_barrier, a shuffle) or returns; when every
//    fiber of the block is parked, the scheduler resolves the warps' shuffles
//    or, when every thread waits at the same barrier, opens it (a new epoch);
//  * shared memory is per block, allocated on first declaration, filled with
//    a pattern, with a history per slot: who wrote it and who read it in the
//    current epoch. That is enough to report, deterministically whatever the
//    thread order: out-of-bounds indices, reads of slots nobody wrote, and
//    read/write or write/write pairs of different threads with no barrier
//    between them (a race on a GPU);
//  * a barrier or a shuffle that only part of the block (warp) reaches, and
//    a launch configuration the CUDA runtime would refuse, are reported too.
// The first finding ends the launch: the failing fiber unwinds, the block's
// other fibers are abandoned where they wait (the dialect forbids kernels to
// own anything) and run_grid returns the text.
//
// Context switches: a dozen instructions of x86-64 assembly (no system call,
// unlike swapcontext's signal-mask save), ucontext elsewhere. Under
// AddressSanitizer every switch is announced (__sanitizer_*_switch_fiber) and
// a stack is unpoisoned before reuse, so ASan checks kernel code too.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "simt.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DK_SIM_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(DK_SIM_ASAN)
#define DK_SIM_ASAN 1
#endif
#ifdef DK_SIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace dk {
namespace sim {

thread_local Thread* current = nullptr;

namespace {

// ------------------------------------------------------------ fibers
#if defined(__x86_64__)
// dk_sim_switch(save, to): saves the callee-saved registers, MXCSR and the
// x87 control word on the current stack, stores the stack pointer in *save,
// and resumes the stack `to` as saved by an earlier switch (or prepared by
// make_context below).
extern "C" void dk_sim_switch(void** save, void* to);
asm(R"(
.text
.p2align 4
.type dk_sim_switch,@function
dk_sim_switch:
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
.size dk_sim_switch,.-dk_sim_switch
.section .note.GNU-stack,"",@progbits
.text
)");

struct Context { void* sp = nullptr; };
void make_context(Context* c, char* stack, size_t size, void (*entry)()) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t(15);
  uint64_t* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;                                  // entry's (never used) return address
  *--sp = reinterpret_cast<uint64_t>(entry);  // what `ret` jumps to
  for (int i = 0; i < 6; ++i) *--sp = 0;      // rbp rbx r12..r15
  --sp;
  const uint32_t mxcsr = 0x1f80;  // default: all exceptions masked, round to nearest
  const uint16_t fcw = 0x037f;
  std::memcpy(sp, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(sp) + 4, &fcw, 2);
  c->sp = sp;
}
inline void raw_switch(Context* from, Context* to) { dk_sim_switch(&from->sp, to->sp); }
#else
struct Context { ucontext_t uc; };
void make_context(Context* c, char* stack, size_t size, void (*entry)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}
inline void raw_switch(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

#ifdef DK_SIM_ASAN
constexpr size_t kStackBytes = size_t(1) << 20;  // ASan's redzones make frames larger
#else
constexpr size_t kStackBytes = size_t(256) << 10;
#endif

// Stacks are reserved once per OS thread (pages are touched only as used)
// and reused by every block that thread runs.
struct StackPool {
  std::vector<char*> stacks;
  char* get(size_t i) {
    while (stacks.size() <= i) {
      void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        std::fprintf(stderr, "cuda_sim: cannot map a fiber stack\n");
        std::abort();
      }
      stacks.push_back(static_cast<char*>(p));
    }
    return stacks[i];
  }
  ~StackPool() {
    for (char* s : stacks) munmap(s, kStackBytes);
  }
};
thread_local StackPool stack_pool;

enum class State { Runnable, AtBarrier, AtShuffle, Done };

struct Fiber {
  Context ctx;
  char* stack = nullptr;
  State state = State::Runnable;
  Thread thread;
  const char* file = nullptr;  // the barrier or shuffle it waits at
  int line = 0;
  int shfl_kind = 0, shfl_arg = 0;
  uint64_t shfl_value = 0;
};

struct Slot {
  uint32_t write_epoch = 0, read_epoch = 0;
  int32_t writer = -1, reader = -1;
  bool written = false, many_readers = false;
};

}  // namespace

struct SharedArrayState {
  const void* tag;
  std::string name, where;
  int64_t n;
  size_t elem_size;
  std::vector<unsigned char> data;
  std::vector<Slot> slots;
};

struct Block {
  const char* kernel;
  const std::function<void()>* body;
  std::vector<Fiber> fibers;
  Context scheduler;
  uint32_t epoch = 1;  // bumped each time a barrier opens
  std::vector<std::unique_ptr<SharedArrayState>> shared;
  size_t shared_bytes = 0;
  std::string error;  // the first finding, if any
#ifdef DK_SIM_ASAN
  const void* sched_stack_bottom = nullptr;
  size_t sched_stack_size = 0;
#endif
};

namespace {

thread_local Fiber* running = nullptr;  // the fiber being run (or starting)

struct Abandon {};  // thrown by a failing check, caught where the fiber began

std::string dims(const Dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

std::string who(const Thread& t) { return "block " + dims(t.bid) + " thread " + dims(t.tid); }

// Fiber -> scheduler. `dying`: the fiber will never be resumed.
void to_scheduler(Fiber* f, bool dying) {
  Block* b = f->thread.block;
#ifdef DK_SIM_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(dying ? nullptr : &fake, b->sched_stack_bottom,
                                 b->sched_stack_size);
#else
  (void)dying;
#endif
  raw_switch(&f->ctx, &b->scheduler);
#ifdef DK_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  current = &f->thread;
}

// Scheduler -> fiber.
void resume(Block* b, Fiber* f) {
  running = f;
  current = &f->thread;
#ifdef DK_SIM_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, kStackBytes);
#endif
  raw_switch(&b->scheduler, &f->ctx);
#ifdef DK_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  current = nullptr;
  running = nullptr;
}

void fiber_entry() {
  Fiber* f = running;
#ifdef DK_SIM_ASAN
  Block* blk = f->thread.block;
  __sanitizer_finish_switch_fiber(nullptr, &blk->sched_stack_bottom, &blk->sched_stack_size);
#endif
  current = &f->thread;
  try {
    (*f->thread.block->body)();
  } catch (const Abandon&) {
    // a check failed: its frames are unwound (temporaries freed), the
    // finding is in the block
  }
  f->state = State::Done;
  to_scheduler(f, true);
  std::abort();  // a finished fiber is never resumed
}

Fiber* self(const char* what) {
  if (current == nullptr || running == nullptr) {
    std::fprintf(stderr, "cuda_sim: %s called outside a kernel\n", what);
    std::abort();
  }
  return running;
}

// Records the block's first finding and unwinds the fiber to fiber_entry.
[[noreturn]] void fail_here(const std::string& what) {
  Fiber* f = self("a failing check");
  Block* b = f->thread.block;
  if (b->error.empty()) b->error = who(f->thread) + ": " + what;
  throw Abandon();
}

std::string site(const char* file, int line) {
  const char* slash = std::strrchr(file, '/');
  return std::string(slash ? slash + 1 : file) + ":" + std::to_string(line);
}

uint64_t launch_seed() {
  static const uint64_t base = [] {
    const char* s = std::getenv("DK_CUDA_SIM_SEED");
    return s ? std::strtoull(s, nullptr, 0) : 0x5eed5eedull;
  }();
  static std::atomic<uint64_t> launches{0};
  return base ^ (0x9e3779b97f4a7c15ull * ++launches);
}

uint64_t gcd(uint64_t a, uint64_t b) {
  while (b) {
    const uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// Resolves every warp whose lanes wait at a shuffle. "" or the finding.
std::string resolve_shuffles(Block* b) {
  const size_t n = b->fibers.size();
  for (size_t w0 = 0; w0 < n; w0 += DK_WARP_SIZE) {
    const size_t lanes = std::min<size_t>(DK_WARP_SIZE, n - w0);
    Fiber* first = nullptr;
    for (size_t l = 0; l < lanes && !first; ++l)
      if (b->fibers[w0 + l].state == State::AtShuffle) first = &b->fibers[w0 + l];
    if (!first) continue;
    const std::string at = site(first->file, first->line);
    if (lanes < DK_WARP_SIZE)
      return who(first->thread) + ": shuffle at " + at + " in a partial warp of " +
             std::to_string(lanes) + " lanes (the block has " + std::to_string(n) +
             " threads; shuffles take all 32 lanes: use a multiple of 32)";
    for (size_t l = 0; l < lanes; ++l) {
      const Fiber& f = b->fibers[w0 + l];
      if (f.state == State::AtShuffle && f.file == first->file && f.line == first->line &&
          f.shfl_kind == first->shfl_kind)
        continue;
      const std::string doing = f.state == State::Done ? "has returned"
                                : f.state == State::AtBarrier
                                    ? "waits at the barrier at " + site(f.file, f.line)
                                    : "waits at the shuffle at " + site(f.file, f.line);
      return who(first->thread) + ": shuffle at " + at +
             " not reached by every lane of its warp: lane " + std::to_string(l) + " (" +
             who(f.thread) + ") " + doing;
    }
    uint64_t values[DK_WARP_SIZE];
    for (size_t l = 0; l < lanes; ++l) values[l] = b->fibers[w0 + l].shfl_value;
    for (size_t l = 0; l < lanes; ++l) {
      Fiber& f = b->fibers[w0 + l];
      size_t src = l;
      if (f.shfl_kind == SHFL_XOR) {
        src = l ^ size_t(f.shfl_arg & 31);
      } else if (f.shfl_kind == SHFL_DOWN) {
        if (f.shfl_arg >= 0 && l + size_t(f.shfl_arg) < DK_WARP_SIZE) src = l + size_t(f.shfl_arg);
      } else {
        src = size_t(f.shfl_arg) & 31;
      }
      f.shfl_value = values[src];
      f.state = State::Runnable;
    }
  }
  return std::string();
}

// Runs one block to completion: "" or the first finding.
std::string run_block(Block* b) {
  const size_t n = b->fibers.size();
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = b->fibers[i];
    f.stack = stack_pool.get(i);
#ifdef DK_SIM_ASAN
    __asan_unpoison_memory_region(f.stack, kStackBytes);  // frames of abandoned fibers
#endif
    make_context(&f.ctx, f.stack, kStackBytes, fiber_entry);
  }
  for (;;) {
    for (size_t i = 0; i < n; ++i) {
      if (b->fibers[i].state != State::Runnable) continue;
      resume(b, &b->fibers[i]);
      if (!b->error.empty()) return b->error;
    }
    size_t done = 0, at_barrier = 0, at_shuffle = 0;
    for (const Fiber& f : b->fibers) {
      done += f.state == State::Done;
      at_barrier += f.state == State::AtBarrier;
      at_shuffle += f.state == State::AtShuffle;
    }
    if (done == n) return std::string();
    if (at_shuffle) {
      const std::string e = resolve_shuffles(b);
      if (!e.empty()) return e;
      continue;
    }
    const Fiber* waiting = nullptr;
    for (const Fiber& f : b->fibers)
      if (f.state == State::AtBarrier && !waiting) waiting = &f;
    for (const Fiber& f : b->fibers) {
      if (f.state == State::Done)
        return who(waiting->thread) + ": waits at the barrier at " +
               site(waiting->file, waiting->line) + ", which " + who(f.thread) +
               " never reaches: it has returned (a barrier inside a branch, or an early "
               "return before it)";
      if (f.file != waiting->file || f.line != waiting->line)
        return who(waiting->thread) + ": waits at the barrier at " +
               site(waiting->file, waiting->line) + " while " + who(f.thread) +
               " waits at the one at " + site(f.file, f.line) +
               " (threads of a block must reach the same barrier)";
    }
    ++b->epoch;
    for (Fiber& f : b->fibers) f.state = State::Runnable;
  }
}

}  // namespace

SharedArrayState* shared_array(const void* tag, size_t elem_size, int64_t n, const char* name,
                               const char* file, int line, void** data) {
  Fiber* f = self("DK_SHARED");
  Block* b = f->thread.block;
  for (auto& s : b->shared) {
    if (s->tag != tag) continue;
    *data = s->data.data();
    return s.get();
  }
  if (n <= 0)
    fail_here("shared array " + std::string(name) + " declared with " + std::to_string(n) +
              " elements at " + site(file, line));
  auto s = std::make_unique<SharedArrayState>();
  s->tag = tag;
  s->name = name;
  s->where = site(file, line);
  s->n = n;
  s->elem_size = elem_size;
  b->shared_bytes += elem_size * size_t(n);
  if (b->shared_bytes > DK_MAX_STATIC_SHARED_BYTES)
    fail_here("static shared memory reaches " + std::to_string(b->shared_bytes) + " bytes with " +
              s->name + " (" + s->where + "); a block may have at most " +
              std::to_string(DK_MAX_STATIC_SHARED_BYTES));
  s->data.assign(elem_size * size_t(n), 0xa5);  // what a GPU leaves there: anything
  s->slots.resize(size_t(n));
  *data = s->data.data();
  b->shared.push_back(std::move(s));
  return b->shared.back().get();
}

namespace {
Slot& slot(SharedArrayState* s, int64_t i, const char* access) {
  if (i < 0 || i >= s->n)
    fail_here(std::string(access) + " of " + s->name + "[" + std::to_string(i) +
              "] out of bounds: the shared array (" + s->where + ") has " + std::to_string(s->n) +
              " elements");
  return s->slots[size_t(i)];
}
std::string slot_name(SharedArrayState* s, int64_t i) {
  return s->name + "[" + std::to_string(i) + "] (" + s->where + ")";
}
std::string thread_name(Block* b, int32_t linear) { return who(b->fibers[size_t(linear)].thread); }
}  // namespace

void shared_read(SharedArrayState* s, int64_t i) {
  Fiber* f = self("a shared read");
  Block* b = f->thread.block;
  Slot& x = slot(s, i, "read");
  const int32_t me = f->thread.linear;
  if (!x.written)
    fail_here("read of " + slot_name(s, i) +
              ", which no thread of the block has written yet (a missing barrier, or a slot "
              "nobody writes)");
  if (x.write_epoch == b->epoch && x.writer != me)
    fail_here("race: reads " + slot_name(s, i) + ", written by " + thread_name(b, x.writer) +
              " with no barrier between");
  if (x.read_epoch != b->epoch) {
    x.read_epoch = b->epoch;
    x.reader = me;
    x.many_readers = false;
  } else if (x.reader != me) {
    x.many_readers = true;
  }
}

void shared_write(SharedArrayState* s, int64_t i) {
  Fiber* f = self("a shared write");
  Block* b = f->thread.block;
  Slot& x = slot(s, i, "write");
  const int32_t me = f->thread.linear;
  if (x.write_epoch == b->epoch && x.writer != me)
    fail_here("race: writes " + slot_name(s, i) + ", also written by " + thread_name(b, x.writer) +
              " with no barrier between");
  if (x.read_epoch == b->epoch && (x.many_readers || x.reader != me))
    fail_here("race: writes " + slot_name(s, i) + ", read by " +
              (x.reader != me ? thread_name(b, x.reader) : std::string("another thread")) +
              " with no barrier between");
  x.written = true;
  x.write_epoch = b->epoch;
  x.writer = me;
}

void barrier(const char* file, int line) {
  Fiber* f = self("dk_barrier");
  f->file = file;
  f->line = line;
  f->state = State::AtBarrier;
  to_scheduler(f, false);
}

uint64_t shuffle(uint64_t bits, int kind, int arg, const char* file, int line) {
  Fiber* f = self("a shuffle");
  f->file = file;
  f->line = line;
  f->shfl_kind = kind;
  f->shfl_arg = arg;
  f->shfl_value = bits;
  f->state = State::AtShuffle;
  to_scheduler(f, false);
  return f->shfl_value;
}

[[noreturn]] void fail(const std::string& what) { fail_here(what); }

std::string check_config(const char* kernel, Dim3 grid, Dim3 block) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  std::string why;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0)
    why = "a grid or block dimension is 0";
  else if (block.x > 1024 || block.y > 1024 || block.z > 64 || threads > DK_MAX_THREADS_PER_BLOCK)
    why = "block " + dims(block) + " has " + std::to_string(threads) +
          " threads; at most 1024 (x, y <= 1024, z <= 64)";
  else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    why = "grid " + dims(grid) + " exceeds (2^31-1, 65535, 65535)";
  if (why.empty()) return why;
  return std::string("launch of ") + kernel + " failed: invalid configuration argument (" + why +
         ")";
}

std::string run_grid(const char* kernel, Dim3 grid, Dim3 block, const std::function<void()>& body) {
  if (running != nullptr) {
    std::fprintf(stderr, "cuda_sim: kernel %s launched from inside a kernel\n", kernel);
    std::abort();
  }
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  const size_t threads = size_t(block.x) * block.y * block.z;
  // The shuffled order: i -> (a*i + c) mod blocks with a coprime to blocks.
  std::mt19937_64 rng(launch_seed());
  uint64_t a = 1, c = 0;
  if (blocks > 1) {
    c = rng() % blocks;
    do a = (rng() % blocks) | 1;
    while (gcd(a, blocks) != 1);
  }
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint64_t lin = (uint64_t((unsigned __int128)a * i % blocks) + c) % blocks;
    Block b;
    b.kernel = kernel;
    b.body = &body;
    b.fibers.resize(threads);
    const Dim3 bid(unsigned(lin % grid.x), unsigned(lin / grid.x % grid.y),
                   unsigned(lin / (uint64_t(grid.x) * grid.y)));
    for (size_t t = 0; t < threads; ++t) {
      Thread& th = b.fibers[t].thread;
      th.tid = Dim3(unsigned(t % block.x), unsigned(t / block.x % block.y),
                    unsigned(t / (size_t(block.x) * block.y)));
      th.bid = bid;
      th.bdim = block;
      th.gdim = grid;
      th.linear = int(t);
      th.block = &b;
    }
    std::string e = run_block(&b);
    if (!e.empty()) return std::string("kernel ") + kernel + ": " + e;
  }
  return std::string();
}

}  // namespace sim
}  // namespace dk
