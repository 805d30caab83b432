/* kernel.cpp - the CUDA simulator's kernel executor (make test-cudasim): every CUDA thread of a
 * block is a fiber of the calling host thread, with its own small stack (guard page below);
 * blocks run one after another. __syncthreads / __syncthreads_or and the warp collectives
 * (__syncwarp, __shfl*_sync, __ballot_sync) are real barriers between the fibers; the scheduler
 * runs the runnable fibers in thread order in even blocks and in reverse order in odd blocks, so
 * a missing barrier reads another thread's data before it is written (poison: 0xFF bytes) in one
 * of them. A block whose threads wait at barriers no thread can complete is a deadlock (fail).
 * Shared memory: the __shared__ statics (ELF section gtcsim_shared) and the dynamic shared memory
 * (a buffer that ends at a guard page) are poisoned before every block.
 *
 * Global state (documented, as the brief allows): the running block (g_blk), the running fiber
 * and the built-in variables (gtcsim::g_thread_idx, ...). Kernels run only inside queued work,
 * one at a time, on the host thread that drains the streams. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "gtcsim.h"
#include "include/cuda_runtime.h"
#include "sim_internal.h"

uint3 gtcsim::g_thread_idx, gtcsim::g_block_idx;
dim3 gtcsim::g_block_dim, gtcsim::g_grid_dim;

/* the __shared__ statics, if any kernel has some (the linker defines these for the section) */
extern "C" char __start_gtcsim_shared[] __attribute__((weak));
extern "C" char __stop_gtcsim_shared[] __attribute__((weak));

/* ------------------------------------------------------------------ context switch
 * x86-64: save the callee-saved registers on the current stack, store rsp in *save, load `to` as
 * rsp and pop the same from there. MXCSR and the x87 control word (callee-saved too) are left out:
 * nothing in the simulator or the kernels changes them, and saving and loading them took 3/4 of
 * every switch (measured with perf). */
#if defined(__x86_64__)
extern "C" void gtcsim_switch(void **save, void *to);
asm(".text\n"
    ".globl gtcsim_switch\n"
    ".type gtcsim_switch,@function\n"
    "gtcsim_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size gtcsim_switch, .-gtcsim_switch\n");
#else
#error "the CUDA simulator's fibers need x86-64 (add a context switch for this architecture)"
#endif

namespace {

constexpr size_t kStackBytes = 256 << 10; /* per fiber; only touched pages are committed */
constexpr size_t kPage = 4096;
constexpr size_t kXchBytes = 64; /* per lane, one warp_exchange */

struct Barrier {
    int arrived = 0;
    unsigned gen = 0;
    int or_acc = 0, or_result = 0;
    const char *what = nullptr; /* the collective the current generation is */
};

struct Fiber {
    void *sp = nullptr;
    char *stack = nullptr; /* lowest usable byte; the guard page is below */
    uint3 tid{};
    int linear = 0;
    bool done = false;
    Barrier *wait_bar = nullptr;
    unsigned wait_gen = 0;
    /* cp.async copies issued and not yet waited for (mma_ptx.cuh): done at cp.async.wait_group */
    struct Copy {
        void *dst;
        const void *src;
        unsigned bytes;
        int group; /* -1: not yet committed */
    };
    std::vector<Copy> pending;
    int groups = 0; /* committed groups so far */
};

struct Block {
    std::vector<Fiber> fibers;
    int nthreads = 0, live = 0;
    Barrier block_bar;
    std::vector<Barrier> warp_bar;
    std::vector<int> warp_live;
    std::vector<uint64_t> xch; /* [warp][parity][lane] */
    std::vector<unsigned char> xbuf; /* [warp][parity][lane][kXchBytes]: warp_exchange */
    const std::function<void()> *body = nullptr;
    const char *name = nullptr;
    Fiber *cur = nullptr;
    void *sched_sp = nullptr;
    bool reverse = false; /* this block's round order: thread order, or reversed */
    unsigned char *smem = nullptr; /* this block's dynamic shared memory */
    size_t smem_bytes = 0;
    unsigned char *smem_region = nullptr; /* mapped once: kSmemOptin + 128 rounded, + guard */
    size_t smem_region_bytes = 0;
};
Block g_blk;

void handoff(Fiber *from);

[[noreturn]] void fiber_entry() {
    Fiber *f = g_blk.cur;
    (*g_blk.body)();
    f->done = true;
    g_blk.live--;
    g_blk.warp_live[f->linear >> 5]--;
    /* threads that exited no longer hold up __syncthreads (as on sm_70+) */
    Barrier &b = g_blk.block_bar;
    if (b.arrived > 0 && b.arrived >= g_blk.live) {
        b.or_result = b.or_acc;
        b.or_acc = 0;
        b.arrived = 0;
        b.gen++;
    }
    handoff(f);
    __builtin_unreachable();
}

/* the first fiber at or after round position k that can run, or null */
Fiber *next_runnable(int k) {
    Block &B = g_blk;
    for (; k < B.nthreads; k++) {
        Fiber &f = B.fibers[B.reverse ? B.nthreads - 1 - k : k];
        if (f.done || (f.wait_bar && f.wait_bar->gen == f.wait_gen)) continue;
        return &f;
    }
    return nullptr;
}

/* from stops (waits or exits): straight on to the next runnable fiber of this round, in round
 * order, or back to the scheduler, which starts the next round (one switch per stop, not two) */
void handoff(Fiber *from) {
    Block &B = g_blk;
    int k = B.reverse ? B.nthreads - 1 - from->linear : from->linear;
    Fiber *to = next_runnable(k + 1);
    if (!to) {
        gtcsim_switch(&from->sp, B.sched_sp);
        return;
    }
    to->wait_bar = nullptr;
    B.cur = to;
    gtcsim::g_thread_idx = to->tid;
    gtcsim_switch(&from->sp, to->sp);
}

void yield() { handoff(g_blk.cur); }

char *new_stack() {
    void *p = mmap(nullptr, kStackBytes + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) gtcsim::fail("fiber stack: mmap: %s", strerror(errno));
    if (mprotect(p, kPage, PROT_NONE) != 0) gtcsim::fail("fiber stack guard: %s", strerror(errno));
    return (char *)p + kPage;
}

void fiber_init(Fiber &f) {
    /* the stack as gtcsim_switch leaves it: 6 registers, the return address (fiber_entry, entered
     * with rsp = 8 mod 16 as after a call) */
    uintptr_t top = ((uintptr_t)f.stack + kStackBytes) & ~(uintptr_t)15;
    uintptr_t ret = top - 16;
    uint64_t *sp = (uint64_t *)(ret - 48);
    memset(sp, 0, 48);
    *(uint64_t *)ret = (uint64_t)(uintptr_t)&fiber_entry;
    f.sp = sp;
}

Fiber &cur_fiber(const char *what) {
    if (!g_blk.cur) gtcsim::fail("%s called outside a kernel", what);
    return *g_blk.cur;
}

/* wait at b until `expected` threads arrived; the last one to arrive releases the others (and
 * gets true: it sees every thread stopped at the barrier) */
bool arrive(Barrier &b, int expected, const char *what) {
    Fiber &f = *g_blk.cur;
    if (b.arrived == 0) {
        b.what = what;
    } else if (b.what != what && strcmp(b.what, what) != 0) {
        gtcsim::fail("kernel %s: thread (%u,%u,%u) of block (%u,%u,%u) at %s while others wait at %s",
                     g_blk.name, f.tid.x, f.tid.y, f.tid.z, gtcsim::g_block_idx.x,
                     gtcsim::g_block_idx.y, gtcsim::g_block_idx.z, what, b.what);
    }
    unsigned g = b.gen;
    if (++b.arrived >= expected) {
        b.or_result = b.or_acc;
        b.or_acc = 0;
        b.arrived = 0;
        b.gen++;
        return true;
    }
    f.wait_bar = &b;
    f.wait_gen = g;
    yield();
    return false;
}

/* the calling lane's warp, after checking a full mask and a full, live warp */
int warp_enter(unsigned mask, const char *what) {
    Fiber &f = cur_fiber(what);
    int w = f.linear >> 5;
    if (mask != 0xffffffffu)
        gtcsim::fail("kernel %s: %s with mask 0x%08x: only the full mask is simulated", g_blk.name, what, mask);
    if ((w + 1) * 32 > g_blk.nthreads)
        gtcsim::fail("kernel %s: %s with a full mask in a partial warp (block of %d threads)", g_blk.name, what,
                     g_blk.nthreads);
    if (g_blk.warp_live[w] != 32)
        gtcsim::fail("kernel %s: %s with a full mask after %d lane(s) of warp %d exited", g_blk.name, what,
                     32 - g_blk.warp_live[w], w);
    return w;
}

void run_block(bool reverse) {
    Block &B = g_blk;
    int n = B.nthreads;
    for (int i = 0; i < n; i++) {
        Fiber &f = B.fibers[i];
        f.done = false;
        f.wait_bar = nullptr;
        f.pending.clear(); /* copies a thread never waited for are lost (as if still in flight) */
        f.groups = 0;
        fiber_init(f);
    }
    B.live = n;
    B.block_bar = Barrier();
    for (auto &w : B.warp_bar) w = Barrier();
    for (size_t w = 0; w < B.warp_live.size(); w++)
        B.warp_live[w] = (int)std::min<size_t>(32, (size_t)n - w * 32);
    B.reverse = reverse;
    while (B.live > 0) {
        Fiber *f = next_runnable(0);
        if (!f) {
            int at_block = B.block_bar.arrived;
            gtcsim::fail("kernel %s: deadlock in block (%u,%u,%u): %d live thread(s), %d waiting at %s, the others "
                         "at warp collectives (a barrier in divergent code, or a warp collective after lanes "
                         "exited)",
                         B.name, gtcsim::g_block_idx.x, gtcsim::g_block_idx.y, gtcsim::g_block_idx.z, B.live,
                         at_block, B.block_bar.what ? B.block_bar.what : "__syncthreads");
        }
        /* one round: f runs until it stops, then hands off to the next (handoff) */
        f->wait_bar = nullptr;
        B.cur = f;
        gtcsim::g_thread_idx = f->tid;
        gtcsim_switch(&B.sched_sp, f->sp);
    }
    B.cur = nullptr;
}

} // namespace

namespace gtcsim {

void *dyn_smem() {
    if (!g_blk.cur) fail("dynamic shared memory used outside a kernel");
    return g_blk.smem;
}

void syncthreads() {
    cur_fiber("__syncthreads");
    arrive(g_blk.block_bar, g_blk.live, "__syncthreads");
}

int syncthreads_or(int pred) {
    cur_fiber("__syncthreads_or");
    g_blk.block_bar.or_acc |= pred != 0;
    arrive(g_blk.block_bar, g_blk.live, "__syncthreads");
    return g_blk.block_bar.or_result;
}

void syncwarp(unsigned mask) {
    int w = warp_enter(mask, "__syncwarp");
    arrive(g_blk.warp_bar[w], 32, "__syncwarp");
}

int lane_id() { return cur_fiber("lane id").linear & 31; }

uint64_t shfl(unsigned mask, uint64_t v, int src_lane, int width, const char *what) {
    int w = warp_enter(mask, what);
    if (width != 32) fail("kernel %s: %s with width %d: only width 32 is simulated", g_blk.name, what, width);
    if (src_lane < 0 || src_lane > 31) src_lane &= 31; /* CUDA: srcLane modulo width */
    Barrier &b = g_blk.warp_bar[w];
    unsigned par = b.gen & 1u;
    int lane = g_blk.cur->linear & 31;
    g_blk.xch[((size_t)w * 2 + par) * 32 + lane] = v;
    arrive(b, 32, "a warp shuffle/ballot");
    return g_blk.xch[((size_t)w * 2 + par) * 32 + src_lane];
}

unsigned ballot(unsigned mask, int pred) {
    int w = warp_enter(mask, "__ballot_sync");
    Barrier &b = g_blk.warp_bar[w];
    unsigned par = b.gen & 1u;
    int lane = g_blk.cur->linear & 31;
    g_blk.xch[((size_t)w * 2 + par) * 32 + lane] = pred != 0;
    arrive(b, 32, "a warp shuffle/ballot");
    unsigned r = 0;
    for (int l = 0; l < 32; l++)
        if (g_blk.xch[((size_t)w * 2 + par) * 32 + l]) r |= 1u << l;
    return r;
}

void warp_exchange(const void *mine, size_t n, void *all) {
    int w = warp_enter(0xffffffffu, "a warp-collective mma/ldmatrix");
    if (n > kXchBytes) fail("kernel %s: warp exchange of %zu bytes per lane (at most %zu)", g_blk.name, n, kXchBytes);
    Barrier &b = g_blk.warp_bar[w];
    unsigned par = b.gen & 1u;
    int lane = g_blk.cur->linear & 31;
    unsigned char *base = &g_blk.xbuf[((size_t)w * 2 + par) * 32 * kXchBytes];
    memcpy(base + (size_t)lane * kXchBytes, mine, n);
    arrive(b, 32, "a warp-collective mma/ldmatrix");
    for (int l = 0; l < 32; l++) memcpy((unsigned char *)all + (size_t)l * n, base + (size_t)l * kXchBytes, n);
}

void cp_async(void *dst, const void *src, unsigned bytes) {
    Fiber &f = cur_fiber("cp.async");
    if (!in_shared(dst, bytes)) fail("kernel %s: cp.async destination %p not in shared memory", g_blk.name, dst);
    if (((uintptr_t)dst | (uintptr_t)src) % bytes) fail("kernel %s: cp.async of %u bytes misaligned", g_blk.name, bytes);
    f.pending.push_back({dst, src, bytes, -1});
}

void cp_async_commit() {
    Fiber &f = cur_fiber("cp.async.commit_group");
    for (auto &c : f.pending)
        if (c.group < 0) c.group = f.groups;
    f.groups++;
}

void cp_async_wait(int n) {
    Fiber &f = cur_fiber("cp.async.wait_group");
    /* every committed group but the newest n is complete */
    size_t k = 0;
    for (auto &c : f.pending) {
        if (c.group >= 0 && c.group < f.groups - n) memcpy(c.dst, c.src, c.bytes);
        else f.pending[k++] = c;
    }
    f.pending.resize(k);
}

bool in_shared(const void *p, size_t bytes) {
    const unsigned char *a = (const unsigned char *)p, *e = a + bytes;
    if (g_blk.smem && a >= g_blk.smem && e <= g_blk.smem + g_blk.smem_bytes) return true;
    if (__start_gtcsim_shared && a >= (const unsigned char *)__start_gtcsim_shared &&
        e <= (const unsigned char *)__stop_gtcsim_shared)
        return true;
    return false;
}

const char *current_kernel() { return g_blk.name; }

const char *describe_sim_address(const void *p) {
    const unsigned char *a = (const unsigned char *)p;
    if (g_blk.smem_region && a >= g_blk.smem_region + g_blk.smem_region_bytes - kPage &&
        a < g_blk.smem_region + g_blk.smem_region_bytes)
        return "past the end of the block's dynamic shared memory";
    for (const Fiber &f : g_blk.fibers)
        if (a >= (const unsigned char *)f.stack - kPage && a < (const unsigned char *)f.stack)
            return "a CUDA thread's fiber stack overflowed";
    return nullptr;
}

void run_grid(const char *name, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
    Block &B = g_blk;
    note_first_kernel();
    int n = (int)(block.x * block.y * block.z);
    if (!B.smem_region) {
        B.smem_region_bytes = ((kSmemOptinPerBlock + 128 + kPage - 1) / kPage) * kPage + kPage;
        void *p = mmap(nullptr, B.smem_region_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) fail("shared memory: mmap: %s", strerror(errno));
        B.smem_region = (unsigned char *)p;
        if (mprotect(B.smem_region + B.smem_region_bytes - kPage, kPage, PROT_NONE) != 0)
            fail("shared memory guard: %s", strerror(errno));
    }
    size_t rounded = (smem + 127) & ~(size_t)127;
    B.smem = B.smem_region + B.smem_region_bytes - kPage - rounded;
    B.smem_bytes = smem;
    while ((int)B.fibers.size() < n) {
        Fiber f;
        f.stack = new_stack();
        B.fibers.push_back(f);
    }
    for (int i = 0; i < n; i++) {
        Fiber &f = B.fibers[i];
        f.linear = i;
        f.tid = uint3{(unsigned)i % block.x, ((unsigned)i / block.x) % block.y, (unsigned)i / (block.x * block.y)};
    }
    B.nthreads = n;
    int nwarps = (n + 31) / 32;
    B.warp_bar.assign(nwarps, Barrier());
    B.warp_live.assign(nwarps, 0);
    B.xch.assign((size_t)nwarps * 64, 0);
    B.xbuf.assign((size_t)nwarps * 64 * kXchBytes, 0);
    B.body = &body;
    B.name = name;
    g_grid_dim = grid;
    g_block_dim = block;
    unsigned long long blk = 0;
    cost_kernel_begin(name);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++, blk++) {
                g_block_idx = uint3{x, y, z};
                memset(B.smem, 0xFF, rounded); /* NaN in fp32 and bf16 */
                if (__start_gtcsim_shared)
                    memset(__start_gtcsim_shared, 0xFF, (size_t)(__stop_gtcsim_shared - __start_gtcsim_shared));
                run_block(blk & 1);
            }
    cost_kernel_end();
    B.body = nullptr;
    B.name = nullptr;
    B.smem = nullptr;
}

} // namespace gtcsim
