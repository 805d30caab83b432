/* backend_module.c - finding and opening the CUDA backend module and its small device probe
 * (cuda_module.h), and what gtrain asks of them: how many GPUs (backend_gpu_count, the probe), the
 * backend itself (backend_open_cuda, the module) and a line for --version (backend_describe).
 * Nothing here is cached: dlopen of a loaded module only counts a reference, so each question loads
 * (once per process) and asks again. */
#include "cuda_module.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* $GTRAIN_BACKEND_DIR/FILE when set, else FILE beside the running executable */
static int module_path(char *buf, size_t cap, const char *file, GtError *err) {
    const char *dir = getenv(GT_BACKEND_DIR_ENV);
    if (dir && *dir) {
        if ((size_t)snprintf(buf, cap, "%s/%s", dir, file) >= cap)
            return gt_error(err, GT_EXIT_BAD_INPUT, "%s: the folder is too long (%zu bytes)", GT_BACKEND_DIR_ENV,
                            strlen(dir));
        return 0;
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || (size_t)n >= sizeof exe - 1) {
        snprintf(buf, cap, "%s", file);
        return gt_error(err, GT_EXIT_BAD_INPUT, "the CUDA backend module: cannot find the executable's folder "
                        "(/proc/self/exe: %s); set %s", n < 0 ? strerror(errno) : "too long", GT_BACKEND_DIR_ENV);
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    if ((size_t)snprintf(buf, cap, "%s/%s", slash ? exe : ".", file) >= cap)
        return gt_error(err, GT_EXIT_BAD_INPUT, "the CUDA backend module: the executable's folder is too long");
    return 0;
}

int cuda_module_load(const GtCudaModule **out, char *path, size_t cap, GtError *err) {
    *out = NULL;
    char file[4200];
    if (module_path(file, sizeof file, GT_CUDA_MODULE_FILE, err)) {
        if (path && cap) snprintf(path, cap, "%s", file);
        return -1;
    }
    if (path && cap) snprintf(path, cap, "%s", file);
    if (access(file, R_OK) != 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "the CUDA backend module %s is missing (%s)%s", file,
                        strerror(errno),
                        getenv(GT_BACKEND_DIR_ENV) ? "" : "; build it with make CUDA=1, or set " GT_BACKEND_DIR_ENV);
    void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        /* dlerror names the library missing (libcublasLt.so.13: cannot open ...) or the file's fault */
        return gt_error(err, GT_EXIT_BAD_INPUT, "the CUDA backend module %s does not load: %s", file, why ? why : "?");
    }
    GtCudaModuleEntry entry;
    void *sym = dlsym(h, GT_CUDA_MODULE_ENTRY);
    memcpy(&entry, &sym, sizeof entry); /* object pointer to function pointer, as POSIX allows */
    const GtCudaModule *m = sym ? entry() : NULL;
    if (!m) {
        dlclose(h);
        return gt_error(err, GT_EXIT_BAD_INPUT, "the CUDA backend module %s has no entry point %s", file,
                        GT_CUDA_MODULE_ENTRY);
    }
    if (m->abi != GT_CUDA_MODULE_ABI || m->sizeof_backend != sizeof(Backend) || m->sizeof_ops != sizeof(BackendOps) ||
        m->sizeof_error != sizeof(GtError) || !m->device_count || !m->backend_create) {
        int abi = m->abi;
        dlclose(h);
        return gt_error(err, GT_EXIT_BAD_INPUT,
                        "the CUDA backend module %s was built for another gtrain (interface %d, this one %d, or other "
                        "headers): rebuild it with this gtrain (make)",
                        file, abi, GT_CUDA_MODULE_ABI);
    }
    *out = m; /* the handle stays open for the process's life */
    return 0;
}

int cuda_probe_count(char *why, size_t cap) {
    char file[4200];
    GtError err = {0};
    if (module_path(file, sizeof file, GT_CUDA_PROBE_FILE, &err)) {
        snprintf(why, cap, "%s", err.msg);
        return 0;
    }
    if (access(file, R_OK) != 0) {
        snprintf(why, cap, "the CUDA device probe %s is missing (%s)", file, strerror(errno));
        return 0;
    }
    void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, cap, "the CUDA device probe does not load: %s", e ? e : file);
        return 0;
    }
    GtCudaProbeEntry probe;
    void *sym = dlsym(h, GT_CUDA_PROBE_ENTRY);
    memcpy(&probe, &sym, sizeof probe); /* object pointer to function pointer, as POSIX allows */
    if (!sym) {
        dlclose(h);
        snprintf(why, cap, "the CUDA device probe %s has no entry point %s", file, GT_CUDA_PROBE_ENTRY);
        return 0;
    }
    return probe(why, cap); /* the handle stays open for the process's life */
}

int backend_gpu_count(void) {
    char why[512];
    return cuda_probe_count(why, sizeof why);
}

const char *backend_describe(char *buf, size_t cap) {
    const GtCudaModule *m;
    GtError err = {0};
    char path[4200], why[512] = "";
    int n = cuda_probe_count(why, sizeof why);
    if (module_path(path, sizeof path, GT_CUDA_MODULE_FILE, &err) || access(path, R_OK) != 0) {
        snprintf(buf, cap, "cpu (cuda: the CUDA backend module %s is missing)", path);
    } else if (n <= 0) {
        /* not loaded: without a device it would only cost time and memory */
        snprintf(buf, cap, "cpu, cuda (%s; no device: %s)", path, why);
    } else if (cuda_module_load(&m, path, sizeof path, &err)) {
        snprintf(buf, cap, "cpu (cuda: %d GPU%s, but %s)", n, n == 1 ? "" : "s", err.msg);
    } else {
        snprintf(buf, cap, "cpu, cuda (%s; %d GPU%s%s)", path, n, n == 1 ? "" : "s", m->nccl_open ? "; nccl" : "");
    }
    return buf;
}

/* device: cuda asked for: the module, a device, then the backend; each failure its one line */
int backend_open_cuda(Backend **out, int local_rank, GtError *err) {
    const GtCudaModule *m;
    GtError why_load = {0};
    char why[256] = "";
    if (cuda_module_load(&m, NULL, 0, &why_load))
        return gt_error(err, GT_EXIT_BAD_INPUT, "device: cuda asked for, but %s", why_load.msg);
    if (m->device_count(why, sizeof why) <= 0)
        return gt_error(err, GT_EXIT_BAD_INPUT, "device: cuda asked for, but no CUDA device is usable: %s", why);
    return m->backend_create(out, local_rank, err);
}
