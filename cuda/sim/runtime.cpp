/* runtime.cpp - the CUDA simulator's runtime (make test-cudasim): device memory, pinned host
 * memory, streams, events, copies and launches, strict rather than fast.
 *
 * Device memory: a reserved PROT_NONE arena; every cudaMalloc gets fresh pages (never reused, a
 * guard page after each, the allocation ending at its last page's end, 256-byte aligned) filled
 * with 0xFF (NaN). Live allocations are readable only while queued work runs (a kernel, a copy, a
 * library call): a host dereference of a device pointer faults and the SIGSEGV handler names it.
 * cudaFree synchronises the device (as CUDA does) and gives the pages back, inaccessible for good:
 * they are never handed out again, a kernel given a freed pointer fails at launch, and one that
 * reads freed memory through another pointer faults.
 *
 * Streams: work is queued, not run: it runs when the host waits (stream, event or device
 * synchronisation, a synchronous copy, a query), and then only as far as that wait needs, each
 * stream's items in order and a cudaStreamWaitEvent item first running the recorded stream up to
 * the event. So a stream nobody waits for (the offload copy stream) runs as late as the program
 * allows: a missing wait shows up as data read too early or overwritten too soon. A query that
 * finds work pending (cudaStreamQuery, cudaEventQuery) runs nothing: the next one runs it and
 * returns cudaSuccess, so whatever has run is known to the host, and everything queued after it
 * is ordered after it.
 *
 * Races: every queued item carries a vector clock (stream order, event waits, host
 * synchronisation). Copies, memsets and collectives declare their device ranges when they are
 * queued (enqueue_ranges), cuBLAS calls when they run (note_access); two accesses of overlapping
 * ranges from different streams, one a write, not ordered by the clocks, are a race: fail. A
 * kernel's accesses are not declared (any pointer it is given may be read or written anywhere):
 * while a kernel runs, the pages of the declared ranges of other streams' items not ordered with
 * it are protected (written ranges: no access; read ranges: read only), and a fault inside such a
 * range that conflicts (a write, or any access of a range the other item writes) is a race: fail.
 * A fault on such a page outside the ranges opens the page for the rest of that kernel (two
 * buffers' ranges may share a page: an allocation's gradient buckets). Not seen: a kernel against
 * a cuBLAS call or kernel of another stream that has not run yet (cuBLAS and kernels run on the
 * compute stream only in cuda/); none of it while the cost model (GTCSIM_COST) counts pages.
 *
 * Global state (the simulator's, documented as the project asks): one simulated device, its
 * allocation tables, streams, events, the last error, the access log; all behind one recursive
 * mutex. Kernels run on the host thread that drains the streams (kernel.cpp). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "gtcsim.h"
#include "include/cuda_runtime.h"
#include "sim_internal.h"

typedef std::vector<uint64_t> VClock;

struct CUstream_st {
    int id = 0;
    unsigned flags = 0;
    struct Item {
        const char *what;
        std::function<void()> fn; /* empty: a wait */
        CUstream_st *wait_stream;
        uint64_t wait_seq;
        VClock vc;
    };
    std::deque<Item> q;
    uint64_t enq = 0, done = 0; /* items queued / run so far */
    bool queried = false;       /* cudaStreamQuery said not ready: the next one runs the work */
    VClock vc;
    bool live = true;
};

struct CUevent_st {
    unsigned flags = 0;
    bool recorded = false;
    CUstream_st *stream = nullptr;
    uint64_t seq = 0;
    VClock vc;
    unsigned long long stamp = 0;
    bool queried_once = false;
};

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kArenaBytes = (size_t)256 << 30; /* reserved per arena (PROT_NONE, no memory) */
/* a positive integer from the environment, lo..hi; def when unset */
unsigned long long env_number(const char *name, unsigned long long lo, unsigned long long hi, unsigned long long def) {
    const char *e = getenv(name);
    if (!e || !*e) return def;
    char *end = nullptr;
    errno = 0;
    unsigned long long v = strtoull(e, &end, 10);
    if (errno || *end || v < lo || v > hi) gtcsim::fail("%s: expected an integer from %llu to %llu, found \"%s\"", name, lo, hi, e);
    return v;
}
/* the simulated device's memory: 80 GiB, or GTCSIM_DEVICE_MIB (a test that must run the device
 * out of memory: tests/test_reliability.c) */
size_t device_bytes() {
    static const size_t n = (size_t)env_number("GTCSIM_DEVICE_MIB", 1, (size_t)1 << 20, 80 << 10) << 20;
    return n;
}
/* the opt-in shared memory per block: 227 KiB (sm_90), or GTCSIM_SMEM_OPTIN_KIB (a test that
 * wants the kernels an RTX 3090/4090 runs, 99 KiB); read at every call, so a test may set it */
size_t smem_optin() {
    return (size_t)env_number("GTCSIM_SMEM_OPTIN_KIB", 48, gtcsim::kSmemOptinPerBlock >> 10,
                              gtcsim::kSmemOptinPerBlock >> 10) << 10;
}
/* how many devices cudaGetDeviceCount reports: 1, or GTCSIM_DEVICE_COUNT (ranks of a data-parallel
 * test on one node, each its own process, pick device = local rank). A process uses one of them:
 * they share this process's one memory, streams and events. */
int device_count() {
    static const int n = (int)env_number("GTCSIM_DEVICE_COUNT", 1, 8, 1);
    return n;
}
int g_device = 0; /* cudaSetDevice's */

struct DevAlloc {
    uintptr_t base;      /* the pointer cudaMalloc gave */
    uintptr_t span;      /* first page */
    size_t span_bytes;   /* pages, without the guard */
    size_t bytes;        /* as asked */
};
struct Access {
    uintptr_t lo, hi;
    bool write;
    int stream;
    uint64_t clock;
    VClock vc; /* what happens before the item */
    const char *what;
};
/* a kernel's protected ranges (race_kernel_begin): a conflicting access faults */
struct Hot {
    uintptr_t lo, hi;
    bool write; /* the other item writes the range: any access conflicts */
    int stream;
    const char *what;
};

std::recursive_mutex g_mu;
cudaError_t g_last_error = cudaSuccess;
std::vector<std::pair<uintptr_t, size_t>> g_arenas; /* reserved regions */
uintptr_t g_next = 0, g_arena_end = 0;
std::map<uintptr_t, DevAlloc> g_dev;      /* by user pointer */
std::map<uintptr_t, size_t> g_pinned;     /* by pointer: bytes */
size_t g_dev_used = 0;
int g_window = 0; /* > 0: device pages readable (queued work running) */
CUstream_st g_legacy;
std::vector<CUstream_st *> g_streams; /* every stream ever made (never freed: waits may name it) */
std::set<CUevent_st *> g_events;
VClock g_host_vc; /* what the host has waited for */
std::map<const void *, size_t> g_smem_limit;
std::deque<Access> g_log;
size_t g_log_pruned = 0; /* its size after the last prune */
std::vector<Hot> g_hot;  /* while a kernel runs */
std::vector<std::pair<uintptr_t, uintptr_t>> g_hot_pages; /* page runs protected for it */
const char *g_hot_kernel = nullptr;
int g_hot_stream = 0;
CUstream_st *g_cur_stream = nullptr; /* the stream whose item runs now */
const VClock *g_cur_vc = nullptr;
const char *g_cur_what = nullptr;
unsigned long long g_stamp = 0;
struct sigaction g_old_segv;
bool g_init = false;

void vc_merge(VClock &a, const VClock &b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); i++)
        if (b[i] > a[i]) a[i] = b[i];
}
uint64_t vc_at(const VClock &a, int i) { return (size_t)i < a.size() ? a[(size_t)i] : 0; }

bool in_arena(uintptr_t a) {
    for (auto &r : g_arenas)
        if (a >= r.first && a < r.first + r.second) return true;
    return false;
}

/* A fault while a kernel runs with protected ranges (race_kernel_begin): an access that conflicts
 * with a range is a race (said, and the process aborts, as gtcsim::fail); one elsewhere on a
 * protected page opens the page for the rest of the kernel. False: not a protected page. In the
 * signal handler: snprintf, write, mprotect and abort only. */
bool race_fault(uintptr_t a, bool is_write) {
    bool protected_page = false;
    for (const auto &r : g_hot_pages) protected_page = protected_page || (a >= r.first && a < r.second);
    if (!protected_page) return false;
    for (const Hot &h : g_hot) {
        if (a < h.lo || a >= h.hi || !(is_write || h.write)) continue;
        char buf[640];
        int n = snprintf(buf, sizeof buf,
                         "gtcsim: race: kernel %s on stream %d %s %p, inside [%p, %p) that %s on stream %d %s, and no "
                         "event orders the two\n",
                         g_hot_kernel, g_hot_stream, is_write ? "writes" : "reads", (void *)a, (void *)h.lo,
                         (void *)h.hi, h.what, h.stream, h.write ? "writes" : "reads");
        if (write(2, buf, (size_t)std::min(n, (int)sizeof buf - 1)) < 0) {
        }
        abort();
    }
    return mprotect((void *)(a & ~(uintptr_t)(kPage - 1)), kPage, PROT_READ | PROT_WRITE) == 0;
}

void segv_handler(int sig, siginfo_t *si, void *ctx) {
    char buf[512];
    const void *a = si->si_addr;
    if (race_fault((uintptr_t)a, (((ucontext_t *)ctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0)) return;
    /* the cost model's first-touch page count (x86-64: bit 1 of the page-fault error code = write) */
    if (in_arena((uintptr_t)a) &&
        gtcsim::cost_page_fault(si->si_addr, (((ucontext_t *)ctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0))
        return;
    const char *k = gtcsim::current_kernel();
    const char *d = gtcsim::describe_sim_address(a);
    int n;
    if (d)
        n = snprintf(buf, sizeof buf, "gtcsim: fault at %p: %s (kernel %s)\n", a, d, k ? k : "none");
    else if (in_arena((uintptr_t)a))
        n = snprintf(buf, sizeof buf,
                     "gtcsim: fault at %p: device memory %s (freed, out of bounds, or touched by the host outside "
                     "a kernel or copy)\n",
                     a, k ? "out of bounds or freed, in kernel" : "accessed by host code");
    else
        n = snprintf(buf, sizeof buf, "gtcsim: fault at %p (kernel %s)\n", a, k ? k : "none");
    if (k && !d && in_arena((uintptr_t)a)) n += snprintf(buf + n, sizeof buf - (size_t)n, "gtcsim: in kernel %s\n", k);
    if (write(2, buf, (size_t)n) < 0) {
    }
    sigaction(SIGSEGV, &g_old_segv, nullptr); /* returning re-faults with the previous action */
    (void)sig;
    (void)ctx;
}

void init() {
    if (g_init) return;
    g_init = true;
    g_legacy.id = 0;
    g_streams.push_back(&g_legacy);
    /* the fiber stacks' guard pages: the handler must run on its own stack */
    static char altstack[64 << 10];
    stack_t ss;
    memset(&ss, 0, sizeof ss);
    ss.ss_sp = altstack;
    ss.ss_size = sizeof altstack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
}

/* Criterion's running test, when the simulator is linked into the test binary (null otherwise) */
struct CrTestView {
    const char *name, *category;
};
extern "C" const CrTestView *const criterion_current_test __attribute__((weak));

cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) g_last_error = e;
    return e;
}
/* an API misuse: said on stderr (the program may only print the error string) and returned */
cudaError_t bad(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t bad(cudaError_t e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("gtcsim: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return ret(e);
}

/* One call per run of live allocations (an allocation's pages and the guard page after it; those
 * made one after another touch, so a model's buffers are a few runs): inside a window the guard
 * pages are readable too (per-allocation calls made whole test runs take minutes), so out-of-bounds
 * accesses from kernels are not caught by the MMU; the host outside a window is, and kernel pointer
 * arguments are checked at launch. Freed pages stay PROT_NONE for good (cudaFree): a window no
 * longer walks them. Protecting everything handed out so far, as before, cost each window the page
 * tables of every allocation the process ever made: 80 % of a test that creates a hundred models. */
void set_prot(int prot) {
    uintptr_t lo = 0, hi = 0;
    auto flush = [&] {
        if (hi > lo && mprotect((void *)lo, hi - lo, prot) != 0) gtcsim::fail("mprotect: %s", strerror(errno));
    };
    for (const auto &kv : g_dev) { /* by address */
        const DevAlloc &d = kv.second;
        const uintptr_t s = d.span, e = d.span + d.span_bytes + kPage;
        if (s == hi) {
            hi = e;
        } else {
            flush();
            lo = s, hi = e;
        }
    }
    flush();
}
struct Window {
    Window() {
        if (g_window++ == 0) set_prot(PROT_READ | PROT_WRITE);
    }
    ~Window() {
        if (--g_window == 0) set_prot(PROT_NONE);
    }
};

const DevAlloc *dev_find(const void *p) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_dev.upper_bound(a);
    if (it == g_dev.begin()) return nullptr;
    --it;
    if (a >= it->first && a < it->first + it->second.bytes) return &it->second;
    return nullptr;
}

bool valid_stream(cudaStream_t s) {
    if (!s) return true;
    for (CUstream_st *t : g_streams)
        if (t == s) return t->live;
    return false;
}
CUstream_st *S(cudaStream_t s) { return s ? s : &g_legacy; }

/* run stream s until `upto` of its items have run */
void run_stream(CUstream_st *s, uint64_t upto, int depth) {
    if (depth > 64) gtcsim::fail("stream waits nested too deep");
    while (s->done < upto) {
        CUstream_st::Item it = std::move(s->q.front());
        s->q.pop_front();
        if (!it.fn) {
            run_stream(it.wait_stream, it.wait_seq, depth + 1);
        } else {
            CUstream_st *ps = g_cur_stream;
            const VClock *pv = g_cur_vc;
            const char *pw = g_cur_what;
            g_cur_stream = s;
            g_cur_vc = &it.vc;
            g_cur_what = it.what;
            gtcsim::cost_item_begin(s->id, s->done + 1, it.what);
            it.fn();
            gtcsim::cost_item_end();
            g_cur_stream = ps;
            g_cur_vc = pv;
            g_cur_what = pw;
        }
        s->done++;
        g_stamp++;
    }
}
void drain(CUstream_st *s, uint64_t upto) {
    if (s->done >= upto) return;
    Window w;
    run_stream(s, upto, 0);
}
void sync_stream(CUstream_st *s) {
    drain(s, s->enq);
    vc_merge(g_host_vc, s->vc);
}
void sync_all() {
    /* the newest streams (the copy streams) last */
    for (size_t i = 0; i < g_streams.size(); i++) sync_stream(g_streams[i]);
    g_log.clear(); /* nothing queued, the host has waited for everything: nothing left to race */
    g_log_pruned = 0;
}

void push(CUstream_st *s, CUstream_st::Item it) {
    s->q.push_back(std::move(it));
    s->enq++;
}
void push_wait(CUstream_st *s, CUstream_st *on, uint64_t seq, const VClock &vc) {
    if (on == s || on->done >= seq) return;
    push(s, CUstream_st::Item{"wait", std::function<void()>(), on, seq, VClock()});
    vc_merge(s->vc, vc);
}

void enqueue_on(CUstream_st *s, const char *what, std::function<void()> work) {
    /* legacy default stream semantics: it waits for the blocking streams and they for it */
    if (s == &g_legacy) {
        for (CUstream_st *t : g_streams)
            if (t != s && t->live && !(t->flags & cudaStreamNonBlocking)) push_wait(s, t, t->enq, t->vc);
    } else if (!(s->flags & cudaStreamNonBlocking)) {
        push_wait(s, &g_legacy, g_legacy.enq, g_legacy.vc);
    }
    vc_merge(s->vc, g_host_vc);
    if (s->vc.size() <= (size_t)s->id) s->vc.resize((size_t)s->id + 1, 0);
    s->vc[(size_t)s->id]++;
    push(s, CUstream_st::Item{what, std::move(work), nullptr, 0, s->vc});
}

/* ------------------------------------------------------------------ the race check */

/* do the item (stream s, clock c there, vector clock vc) and a's item run in an order the clocks
 * fix (the same stream, a before it, or it before a)? */
bool ordered(int s, uint64_t c, const VClock &vc, const Access &a) {
    return a.stream == s || vc_at(vc, a.stream) >= a.clock || vc_at(a.vc, s) >= c;
}

/* Drop the accesses nothing can race with any more: the host has waited for them and every item
 * still queued (and the one running) is ordered after them; what is queued later merges the
 * host's clock. Past 1 << 16 entries the oldest go. */
void prune_log() {
    std::vector<const VClock *> first; /* each stream's first queued item's clock (the smallest) */
    for (CUstream_st *t : g_streams)
        for (const CUstream_st::Item &it : t->q)
            if (it.fn) {
                first.push_back(&it.vc);
                break;
            }
    if (g_cur_vc) first.push_back(g_cur_vc);
    auto dead = [&](const Access &a) {
        if (vc_at(g_host_vc, a.stream) < a.clock) return false;
        for (const VClock *f : first)
            if (vc_at(*f, a.stream) < a.clock) return false;
        return true;
    };
    g_log.erase(std::remove_if(g_log.begin(), g_log.end(), dead), g_log.end());
    while (g_log.size() > ((size_t)1 << 16)) g_log.pop_front();
    g_log_pruned = g_log.size();
}

/* the item (stream s, vector clock vc, named what) reads or writes [lo, hi): a race with a logged
 * access fails, else it is logged */
void log_access(int s, const VClock &vc, const char *what, uintptr_t lo, uintptr_t hi, bool write) {
    const uint64_t c = vc_at(vc, s);
    for (const Access &a : g_log) {
        if (a.hi <= lo || hi <= a.lo || !(a.write || write) || ordered(s, c, vc, a)) continue;
        gtcsim::fail("race: %s on stream %d %s [%p, %p) while %s on stream %d %s [%p, %p), and no event orders the two",
                     what, s, write ? "writes" : "reads", (void *)lo, (void *)hi, a.what, a.stream,
                     a.write ? "writes" : "reads", (void *)a.lo, (void *)a.hi);
    }
    g_log.push_back(Access{lo, hi, write, s, c, vc, what});
    if (g_log.size() > 2 * g_log_pruned + 256) prune_log();
}

/* queue work whose device (and pinned) ranges are known now: they are checked and logged at once,
 * so a kernel that runs before the item does sees them (race_kernel_begin) */
void enqueue_ranges_on(CUstream_st *s, const char *what, std::vector<gtcsim::Range> ranges, std::function<void()> work) {
    enqueue_on(s, what, [ranges, work = std::move(work)]() {
        for (const gtcsim::Range &r : ranges) gtcsim::cost_access(r.bytes, r.write);
        work();
    });
    const VClock vc = s->q.back().vc;
    for (const gtcsim::Range &r : ranges)
        if (r.bytes) log_access(s->id, vc, what, (uintptr_t)r.p, (uintptr_t)r.p + r.bytes, r.write);
}

/* Around a kernel: protect the pages of the logged ranges of other streams' items that are not
 * ordered with it (race_fault says what a fault there means), and open them again after */
void race_kernel_begin(const char *name) {
    if (!g_cur_stream || g_log.empty() || gtcsim::cost_on()) return; /* the cost model protects pages itself */
    const int s = g_cur_stream->id;
    const uint64_t c = vc_at(*g_cur_vc, s);
    g_hot.clear();
    for (const Access &a : g_log)
        if (!ordered(s, c, *g_cur_vc, a)) g_hot.push_back(Hot{a.lo, a.hi, a.write, a.stream, a.what});
    if (g_hot.empty()) return;
    /* page runs between the ranges' page boundaries: no access where a range is written, read
     * only where ranges are only read */
    std::vector<uintptr_t> cut;
    for (const Hot &h : g_hot) {
        cut.push_back(h.lo & ~(uintptr_t)(kPage - 1));
        cut.push_back((h.hi + kPage - 1) & ~(uintptr_t)(kPage - 1));
    }
    std::sort(cut.begin(), cut.end());
    cut.erase(std::unique(cut.begin(), cut.end()), cut.end());
    for (size_t i = 0; i + 1 < cut.size(); i++) {
        int prot = PROT_READ | PROT_WRITE;
        for (const Hot &h : g_hot)
            if (h.lo < cut[i + 1] && h.hi > cut[i]) prot = h.write || prot == PROT_NONE ? PROT_NONE : PROT_READ;
        if (prot == (PROT_READ | PROT_WRITE)) continue;
        if (mprotect((void *)cut[i], cut[i + 1] - cut[i], prot) != 0) gtcsim::fail("mprotect: %s", strerror(errno));
        g_hot_pages.push_back({cut[i], cut[i + 1]});
    }
    g_hot_kernel = name;
    g_hot_stream = s;
}
void race_kernel_end() {
    for (const auto &r : g_hot_pages)
        if (mprotect((void *)r.first, r.second - r.first, PROT_READ | PROT_WRITE) != 0)
            gtcsim::fail("mprotect: %s", strerror(errno));
    g_hot_pages.clear();
    g_hot.clear();
}

bool range_ok_device(const void *p, size_t n) { return n == 0 || gtcsim::is_device_range(p, n); }
bool host_side_ok(const void *p, size_t n) {
    if (!p) return n == 0;
    if (in_arena((uintptr_t)p) || in_arena((uintptr_t)p + (n ? n - 1 : 0))) return false;
    return true;
}

cudaError_t copy_async(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t stream,
                       const char *api) {
    if (!valid_stream(stream)) return bad(cudaErrorInvalidResourceHandle, "%s: invalid stream %p", api, (void *)stream);
    if (kind == cudaMemcpyDefault) {
        bool dd = gtcsim::is_device_range(dst, n ? n : 1), sd = gtcsim::is_device_range(src, n ? n : 1);
        kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    }
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((int)kind < 0 || (int)kind > 3) return bad(cudaErrorInvalidMemcpyDirection, "%s: kind %d", api, (int)kind);
    if (n == 0) return cudaSuccess;
    if (dst_dev ? !range_ok_device(dst, n) : !host_side_ok(dst, n))
        return bad(cudaErrorInvalidValue, "%s: destination %p (%zu bytes) is not %s memory", api, dst, n,
                   dst_dev ? "device" : "host");
    if (src_dev ? !range_ok_device(src, n) : !host_side_ok(src, n))
        return bad(cudaErrorInvalidValue, "%s: source %p (%zu bytes) is not %s memory", api, src, n,
                   src_dev ? "device" : "host");
    CUstream_st *s = S(stream);
    bool src_pageable = !src_dev && !gtcsim::is_pinned_range(src, n);
    bool dst_pageable = !dst_dev && !gtcsim::is_pinned_range(dst, n);
    const char *what = kind == cudaMemcpyHostToDevice   ? "cudaMemcpyAsync(HostToDevice)"
                       : kind == cudaMemcpyDeviceToHost ? "cudaMemcpyAsync(DeviceToHost)"
                       : kind == cudaMemcpyDeviceToDevice ? "cudaMemcpyAsync(DeviceToDevice)"
                                                          : "cudaMemcpyAsync(HostToHost)";
    std::vector<gtcsim::Range> ranges;
    if (!src_pageable && (src_dev || gtcsim::is_pinned_range(src, n))) ranges.push_back({src, n, false});
    if (dst_dev || gtcsim::is_pinned_range(dst, n)) ranges.push_back({dst, n, true});
    if (src_pageable) {
        /* CUDA stages a pageable source before the call returns: the caller may reuse it */
        std::vector<unsigned char> staged((const unsigned char *)src, (const unsigned char *)src + n);
        enqueue_ranges_on(s, what, std::move(ranges), [dst, n, staged = std::move(staged)]() { memcpy(dst, staged.data(), n); });
    } else {
        enqueue_ranges_on(s, what, std::move(ranges), [dst, src, n]() { memcpy(dst, src, n); });
    }
    if (dst_pageable) sync_stream(s); /* CUDA: a copy to pageable memory returns when it is done */
    return cudaSuccess;
}

} // namespace

/* GTCSIM_USAGE_LOG (scripts/test-cudasim.sh counts the tests that ran a kernel on the simulator):
 * one line, the test this process runs for: Criterion's own test in the test binary, else
 * GTRAIN_TEST_NAME, exported to the processes a test starts (tests/test_backend_select.h) */
void gtcsim::note_first_kernel() {
    static bool done = false;
    if (done) return;
    done = true;
    const char *log = getenv("GTCSIM_USAGE_LOG");
    if (!log || !*log) return;
    char line[512];
    int n;
    if (&criterion_current_test && criterion_current_test)
        n = snprintf(line, sizeof line, "%s::%s\n", criterion_current_test->category, criterion_current_test->name);
    else
        n = snprintf(line, sizeof line, "%s\n", getenv("GTRAIN_TEST_NAME") ? getenv("GTRAIN_TEST_NAME") : "(no test)");
    /* best effort, and never under a file-size limit (the disk-full tests), which would cut the
     * line short and tear it into the next process's: the count is a report, not a check */
    struct rlimit fs;
    if (getrlimit(RLIMIT_FSIZE, &fs) != 0 || fs.rlim_cur != RLIM_INFINITY) return;
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (write(fd, line, (size_t)std::min(n, (int)sizeof line - 1)) < 0) {
    }
    close(fd);
}

/* ------------------------------------------------------------------ gtcsim.h */

namespace gtcsim {


bool is_device_range(const void *p, size_t bytes) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    const DevAlloc *a = dev_find(p);
    if (!a) return false;
    return (uintptr_t)p + bytes <= a->base + a->bytes && (uintptr_t)p + bytes >= (uintptr_t)p;
}

bool is_pinned_range(const void *p, size_t bytes) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    uintptr_t a = (uintptr_t)p;
    auto it = g_pinned.upper_bound(a);
    if (it == g_pinned.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second && a + bytes >= a;
}

void enqueue(cudaStream_t s, const char *what, std::function<void()> work) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    init();
    if (!valid_stream(s)) fail("%s queued on an invalid or destroyed stream %p", what, (void *)s);
    enqueue_on(S(s), what, std::move(work));
}

void enqueue_ranges(cudaStream_t s, const char *what, std::vector<Range> ranges, std::function<void()> work) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    init();
    if (!valid_stream(s)) fail("%s queued on an invalid or destroyed stream %p", what, (void *)s);
    enqueue_ranges_on(S(s), what, std::move(ranges), std::move(work));
}

void note_access(const void *p, size_t bytes, bool write) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (!g_cur_stream) fail("note_access outside queued work");
    if (!bytes) return;
    log_access(g_cur_stream->id, *g_cur_vc, g_cur_what, (uintptr_t)p, (uintptr_t)p + bytes, write);
    cost_access(bytes, write);
}

void set_last_error(cudaError_t e) { g_last_error = e; }

void arena_protect(bool none) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    set_prot(none ? PROT_NONE : PROT_READ | PROT_WRITE);
}

size_t func_smem_limit(const void *fn) {
    auto it = g_smem_limit.find(fn);
    return it == g_smem_limit.end() ? kSmemDefaultPerBlock : it->second;
}

void launch(const void *fn, const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
            std::function<void()> body) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    init();
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!valid_stream(s)) {
        bad(cudaErrorInvalidResourceHandle, "launch of %s on an invalid stream", name);
        return;
    }
    if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        threads > (unsigned long long)kMaxThreadsPerBlock) {
        bad(cudaErrorInvalidConfiguration, "launch of %s: block (%u,%u,%u) outside the limits (1024 threads)", name,
            block.x, block.y, block.z);
        return;
    }
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
        bad(cudaErrorInvalidConfiguration, "launch of %s: grid (%u,%u,%u) outside the limits", name, grid.x, grid.y,
            grid.z);
        return;
    }
    size_t lim = func_smem_limit(fn);
    if (smem > lim) {
        bad(cudaErrorInvalidValue, "launch of %s: %zu bytes of dynamic shared memory, the kernel's limit is %zu%s",
            name, smem, lim, lim == kSmemDefaultPerBlock ? " (no cudaFuncSetAttribute)" : "");
        return;
    }
    enqueue_on(S(s), name, [name, grid, block, smem, body = std::move(body)]() {
        race_kernel_begin(name);
        run_grid(name, grid, block, smem, body);
        race_kernel_end();
    });
}

void check_kernel_pointer(const char *kernel, int index, const void *p) {
    if (!p) return;
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (dev_find(p) || is_pinned_range(p, 1)) return;
    fail("launch of %s: argument %d (%p) is neither device memory nor pinned host memory%s", kernel, index, p,
         in_arena((uintptr_t)p) ? " (freed device memory?)" : "");
}

} // namespace gtcsim

/* the API functions (a second file only to keep each under 800 lines; it shares this file's
 * internals) */
#include "runtime_api.inc"
