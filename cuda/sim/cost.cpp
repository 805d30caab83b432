/* cost.cpp - the CUDA simulator's work counters for the GPU cost model (make gpu-model,
 * scripts/gpu_model.py). Off unless GTCSIM_COST names an output file; then every queued item the
 * simulator runs (a kernel launch, a cuBLAS/cuBLASLt call, a copy, a memset, an NCCL call) is
 * counted, and at exit the items of the last timed window (the last cudaEventElapsedTime pair, which
 * gtrain's step timer records around one optimizer step) are written, summed by name, as
 *   kind<TAB>name<TAB>launches<TAB>bytes_read<TAB>bytes_written<TAB>tensor_flops<TAB>flops
 * (all items when nothing was timed). What each column measures:
 *   kernels: bytes = the device pages (4 KiB) the launch first reads / first writes: the arena is
 *            made PROT_NONE at launch, and the fault handler opens each page touched (read: read
 *            only, write: read-write) and counts it. This is the compulsory DRAM traffic at page
 *            granularity with a perfect L2 within a launch (a page read by many blocks counts
 *            once); a read-modify-write instruction's first touch counts as a write only.
 *            tensor_flops = 2 m n k per warp-level MMA (wmma 16x16x16, mma.sync m16n8k16): each lane
 *            adds its 1/32 (cost_mma). flops (CUDA-core arithmetic) are not counted: 0.
 *   cuBLAS:  flops = 2 m n k (tensor_flops for bf16 operands, flops for fp32), bytes = the operands'
 *            extents (A, B, C when beta != 0, bias read; D, aux and a BGRADB bias gradient written;
 *            not the workspace): the bias gradient is counted inside its GEMM, B read once.
 *   copies, memsets, NCCL: the ranges they declare (note_access); a host-to-device copy counts the
 *            device bytes written (the model charges copies with "Host" in their name to PCIe).
 * GTCSIM_COST_FAST_BLAS=1: the cuBLAS model writes zeros instead of computing (the counts are the
 * same; the numbers are not: only for the cost model, whose runs compute nothing that is checked).
 *
 * Global state (the simulator's, documented): the records, the interned names, the window; only
 * touched from the host thread that drains the streams (and its SIGSEGV handler). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <map>
#include <string>
#include <vector>

#include "gtcsim.h"

namespace {

constexpr size_t kPage = 4096;

struct Rec {
    int name = -1; /* index into g_names; -1: the item's own description */
    int kind = 0;  /* 0 other (copy, memset, nccl), 1 kernel, 2 blas */
    int stream = 0;
    uint64_t idx = 0; /* the item's number on its stream (1-based) */
    uint64_t rd = 0, wr = 0;
    double tc = 0, fl = 0;
};

bool g_on = false, g_checked = false, g_fast_blas = false;
const char *g_path = nullptr;
std::vector<Rec> g_recs;
std::vector<std::string> g_names;
std::map<std::string, int> g_name_ids;
Rec *g_cur = nullptr;          /* the item running now */
volatile bool g_pages = false; /* a kernel runs with the arena protected: faults count pages */
bool g_have_window = false;
int g_wa_stream = 0, g_wb_stream = 0;
uint64_t g_wa_seq = 0, g_wb_seq = 0;

int intern(const std::string &s) {
    auto it = g_name_ids.find(s);
    if (it != g_name_ids.end()) return it->second;
    int id = (int)g_names.size();
    g_names.push_back(s);
    g_name_ids.emplace(s, id);
    return id;
}

void dump() {
    if (!g_on) return;
    /* the window: from the first item after event a on its stream to the last item up to event b */
    size_t lo = 0, hi = g_recs.size();
    if (g_have_window) {
        lo = g_recs.size();
        hi = 0;
        for (size_t i = 0; i < g_recs.size(); i++) {
            const Rec &r = g_recs[i];
            if (lo == g_recs.size() && r.stream == g_wa_stream && r.idx > g_wa_seq) lo = i;
            if (r.stream == g_wb_stream && r.idx <= g_wb_seq) hi = i + 1;
        }
    }
    struct Sum {
        int kind = 0;
        uint64_t n = 0, rd = 0, wr = 0;
        double tc = 0, fl = 0;
    };
    std::map<int, Sum> by;
    for (size_t i = lo; i < hi; i++) {
        const Rec &r = g_recs[i];
        Sum &s = by[r.name];
        s.kind = r.kind;
        s.n++;
        s.rd += r.rd;
        s.wr += r.wr;
        s.tc += r.tc;
        s.fl += r.fl;
    }
    FILE *f = fopen(g_path, "w");
    if (!f) {
        fprintf(stderr, "gtcsim: GTCSIM_COST: cannot write %s: %s\n", g_path, strerror(errno));
        return;
    }
    static const char *kinds[] = {"other", "kernel", "blas"};
    fprintf(f, "# gtcsim work counters: %s, %zu item(s)\n",
            g_have_window ? "the last timed window" : "every item (nothing timed)", hi > lo ? hi - lo : 0);
    for (auto &e : by)
        fprintf(f, "%s\t%s\t%llu\t%llu\t%llu\t%.0f\t%.0f\n", kinds[e.second.kind], g_names[(size_t)e.first].c_str(),
                (unsigned long long)e.second.n, (unsigned long long)e.second.rd, (unsigned long long)e.second.wr,
                e.second.tc, e.second.fl);
    if (fclose(f) != 0) fprintf(stderr, "gtcsim: GTCSIM_COST: writing %s: %s\n", g_path, strerror(errno));
}

bool on() {
    if (!g_checked) {
        g_checked = true;
        const char *p = getenv("GTCSIM_COST");
        g_on = p && *p;
        if (g_on) {
            g_path = p;
            const char *fb = getenv("GTCSIM_COST_FAST_BLAS");
            g_fast_blas = fb && !strcmp(fb, "1");
            if (atexit(dump) != 0) gtcsim::fail("GTCSIM_COST: atexit failed");
        }
    }
    return g_on;
}

} // namespace

namespace gtcsim {

bool cost_on() { return on(); }
bool cost_fast_blas() { return on() && g_fast_blas; }

void cost_item_begin(int stream, uint64_t idx, const char *what) {
    if (!on()) return;
    Rec r;
    r.stream = stream;
    r.idx = idx;
    r.name = intern(what ? what : "?");
    g_recs.push_back(r);
    g_cur = &g_recs.back();
}
void cost_item_end() { g_cur = nullptr; }

void cost_kernel_begin(const char *name) {
    if (!on() || !g_cur) return;
    g_cur->kind = 1;
    g_cur->name = intern(name);
    arena_protect(true);
    g_pages = true;
}
void cost_kernel_end() {
    if (!g_pages) return;
    g_pages = false;
    arena_protect(false);
}

bool cost_page_fault(void *addr, bool write) {
    if (!g_pages || !g_cur) return false;
    void *page = (void *)((uintptr_t)addr & ~(uintptr_t)(kPage - 1));
    if (mprotect(page, kPage, write ? PROT_READ | PROT_WRITE : PROT_READ) != 0) return false;
    if (write)
        g_cur->wr += kPage;
    else
        g_cur->rd += kPage;
    return true;
}

void cost_mma(unsigned m, unsigned n, unsigned k) {
    if (g_cur) g_cur->tc += 2.0 * m * n * k / 32.0;
}

void cost_blas(const char *name, double flops, bool tensor, double rd, double wr) {
    if (!on() || !g_cur) return;
    g_cur->kind = 2;
    g_cur->name = intern(name);
    (tensor ? g_cur->tc : g_cur->fl) += flops;
    g_cur->rd += (uint64_t)rd;
    g_cur->wr += (uint64_t)wr;
}

void cost_access(size_t bytes, bool write) {
    if (!g_cur || g_pages || g_cur->kind == 2) return; /* a cuBLAS call counts its operands itself */
    (write ? g_cur->wr : g_cur->rd) += bytes;
}

void cost_window(int a_stream, uint64_t a_seq, int b_stream, uint64_t b_seq) {
    if (!on()) return;
    g_have_window = true;
    g_wa_stream = a_stream;
    g_wa_seq = a_seq;
    g_wb_stream = b_stream;
    g_wb_seq = b_seq;
}

} // namespace gtcsim
