/* The backend table and the public backend calls. Backends sit in one constant table:
 * nothing registers at start-up, nothing can be dropped by a static link. Compiled with
 * EXAPT_BACKEND_MODULES (the shared library), the CUDA and Vulkan entries load their
 * module when opened (core/module.c) instead of being linked in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/engine.h"
#include "core/module.h"

struct ex_backend {
    const ex_backend_iface *iface;
    void *impl;
    ex_backend_caps caps;
};

typedef ex_status (*create_fn)(int arg, const ex_backend_iface **iface, void **impl,
                               ex_backend_caps *caps, char *msg, size_t msg_len);

typedef struct backend_entry {
    const char *name;
    int arg;      /* passed to create: for the CPU, whether it is the reference path */
    int auto_arg; /* passed instead when "auto" picks it (Vulkan: GPU-type devices only) */
    create_fn create;
    bool automatic; /* may "auto" pick it */
} backend_entry;

#if defined(EXAPT_BACKEND_MODULES) && (defined(EXAPT_HAVE_CUDA) || defined(EXAPT_HAVE_VULKAN))
/* The entry point `symbol` of module `file`, or NULL with the reason in msg. */
static create_fn module_create(const char *file, const char *symbol, char *msg, size_t len)
{
    create_fn f;
    *(void **)&f = ex__module_symbol(file, symbol, msg, len);
    return f;
}
#endif

#ifdef EXAPT_BACKEND_MODULES

#ifdef EXAPT_HAVE_CUDA
static ex_status cuda_create(int arg, const ex_backend_iface **iface, void **impl,
                             ex_backend_caps *caps, char *msg, size_t len)
{
    create_fn f = module_create("libexapt-cuda.so", "ex__cuda_backend_create", msg, len);
    return f ? f(arg, iface, impl, caps, msg, len) : EX_ERR_UNSUPPORTED;
}

#endif

#ifdef EXAPT_HAVE_VULKAN
static ex_status vulkan_create(int arg, const ex_backend_iface **iface, void **impl,
                               ex_backend_caps *caps, char *msg, size_t len)
{
    create_fn f = module_create("libexapt-vulkan.so", "ex__vulkan_backend_create", msg, len);
    return f ? f(arg, iface, impl, caps, msg, len) : EX_ERR_UNSUPPORTED;
}

static ex_status vulkan_devices(char *buf, size_t len)
{
    ex_status (*f)(char *, size_t);
    *(void **)&f = ex__module_symbol("libexapt-vulkan.so", "ex__vulkan_devices", buf, len);
    return f ? f(buf, len) : EX_ERR_UNSUPPORTED;
}
#endif
#else
#define cuda_create ex__cuda_backend_create
#define vulkan_create ex__vulkan_backend_create
#define vulkan_devices ex__vulkan_devices
#endif

/* In "auto" order. */
static const backend_entry backends[] = {
#ifdef EXAPT_HAVE_CUDA
    {"cuda", 0, 0, cuda_create, true},
#endif
#ifdef EXAPT_HAVE_VULKAN
    {"vulkan", 0, 1, vulkan_create, true},
#endif
    {"cpu", 0, 0, ex__cpu_backend_create, true},
    {"cpu-ref", 1, 1, ex__cpu_backend_create, false},
};

static const char *const backend_names[] = {
#ifdef EXAPT_HAVE_CUDA
    "cuda",
#endif
#ifdef EXAPT_HAVE_VULKAN
    "vulkan",
#endif
    "cpu", "cpu-ref", NULL};

/* The names above as one line, for messages. */
#ifdef EXAPT_HAVE_CUDA
#define BACKEND_NAMES_CUDA "cuda, "
#else
#define BACKEND_NAMES_CUDA ""
#endif
#ifdef EXAPT_HAVE_VULKAN
#define BACKEND_NAMES_VULKAN "vulkan, "
#else
#define BACKEND_NAMES_VULKAN ""
#endif
#define BACKEND_NAMES_LINE BACKEND_NAMES_CUDA BACKEND_NAMES_VULKAN "cpu, cpu-ref"

const char *const *ex_backend_list(void)
{
    return backend_names;
}

int ex_backend_supports(const char *name, ex_op op)
{
    if (!name || (unsigned)op >= EX_OP_COUNT)
        return 0;
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (!strcmp(backends[i].name, name))
            return 1; /* every backend's switch covers every op: the op suite checks it */
    return 0;
}

static void put(char *msg, size_t len, const char *fmt, const char *a, const char *b)
{
    if (msg && len)
        snprintf(msg, len, fmt, a, b);
}

static ex_status open_entry(const backend_entry *e, bool automatic, ex_backend **out, char *msg,
                            size_t len)
{
    ex_backend *be = calloc(1, sizeof *be);
    if (!be) {
        put(msg, len, "%s%s: out of host memory", e->name, "");
        return EX_ERR_NOMEM;
    }
    ex_status st =
        e->create(automatic ? e->auto_arg : e->arg, &be->iface, &be->impl, &be->caps, msg, len);
    if (st != EX_OK) {
        free(be);
        return st;
    }
    snprintf(be->caps.name, sizeof be->caps.name, "%s", e->name);
    *out = be;
    return EX_OK;
}

ex_status ex_backend_open(const char *name, ex_backend **out, char *msg, size_t msg_len)
{
    if (msg && msg_len)
        msg[0] = '\0';
    if (!out) {
        put(msg, msg_len, "%s%s", "ex_backend_open: out is NULL", "");
        return EX_ERR_ARG;
    }
    *out = NULL;
    if (!name || !*name)
        name = getenv("EXAPT_BACKEND");
    if (!name || !*name)
        name = "auto";
    size_t n = sizeof backends / sizeof backends[0];
    if (!strcmp(name, "auto")) {
        ex_status st = EX_ERR_UNSUPPORTED;
        for (size_t i = 0; i < n; i++)
            if (backends[i].automatic &&
                (st = open_entry(&backends[i], true, out, msg, msg_len)) == EX_OK) {
                if (msg && msg_len)
                    msg[0] = '\0'; /* an earlier candidate's failure is no failure of auto */
                return EX_OK;
            }
        return st;
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(backends[i].name, name))
            return open_entry(&backends[i], false, out, msg, msg_len);
    put(msg, msg_len, "unknown or absent backend '%s' (compiled in: %s)", name, BACKEND_NAMES_LINE);
    return EX_ERR_UNSUPPORTED;
}

void ex_backend_close(ex_backend *be)
{
    if (!be)
        return;
    be->iface->close(be->impl);
    free(be);
}

const char *ex_backend_error(const ex_backend *be)
{
    const char *msg = be && be->iface->error ? be->iface->error(be->impl) : NULL;
    return msg ? msg : "";
}

const ex_backend_caps *ex_backend_get_caps(const ex_backend *be)
{
    return be ? &be->caps : NULL;
}

uint64_t ex_backend_host_syncs(const ex_backend *be)
{
    return be && be->iface->host_syncs ? be->iface->host_syncs(be->impl) : 0;
}

ex_status ex_backend_get_counters(const ex_backend *be, ex_backend_counters *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!be || !out)
        return EX_ERR_ARG;
    if (!be->iface->counters)
        return EX_ERR_UNSUPPORTED;
    be->iface->counters(be->impl, out);
    return EX_OK;
}

ex_status ex_backend_devices(const char *name, char *buf, size_t len)
{
    if (!name || !buf || len == 0)
        return EX_ERR_ARG;
    buf[0] = '\0';
#ifdef EXAPT_HAVE_VULKAN
    if (!strcmp(name, "vulkan"))
        return vulkan_devices(buf, len);
#endif
    snprintf(buf, len, "%s: no device list (not a device backend, or not compiled in)", name);
    return EX_ERR_UNSUPPORTED;
}

const ex_backend_iface *ex__backend_iface_of(const ex_backend *be)
{
    return be ? be->iface : NULL;
}

void *ex__backend_impl_of(const ex_backend *be)
{
    return be ? be->impl : NULL;
}

/* Seconds one copy of `bytes` from src to dst takes. A backend that times nodes runs it as
 * a COPY node and times it on its own clock (the device's, on a GPU): a host clock around
 * a GPU submission counts its launch and the wait too, several times the copy itself on
 * a fast GPU. Otherwise the host clock around copy(). */
static ex_status timed_copy(ex_backend *be, ex_buffer *dst, ex_buffer *src, uint64_t bytes,
                            double *seconds)
{
    const ex_backend_iface *f = be->iface;
    ex_status st = f->synchronize(be->impl);
    if (st != EX_OK)
        return st;
    if (be->caps.features & EX_FEAT_TIMESTAMPS) {
        ex_tdesc s = {EX_F32, 1, {(int64_t)(bytes / 4), 1, 1, 1}, {1, 0, 0, 0}, src, 0};
        ex_node_exec n = {.op = EX_OP_COPY, .nsrc = 1, .src = &s, .tag = {-1, -1, -1}};
        n.dst = s;
        n.dst.buf = dst;
        n.bytes_read = n.bytes_written = bytes / 4 * 4;
        n.min_bytes = 2 * n.bytes_read;
        double ms = 0.0;
        st = f->compute(be->impl, &n, 1, &ms);
        *seconds = 1e-3 * ms;
        return st;
    }
    double t0 = 1e-3 * ex__clock_ms();
    st = f->copy(be->impl, dst, 0, src, 0, bytes);
    if (st == EX_OK)
        st = f->synchronize(be->impl);
    *seconds = 1e-3 * ex__clock_ms() - t0;
    return st;
}

ex_status ex_backend_measure_bandwidth(ex_backend *be, uint64_t bytes, double *gbs)
{
    if (!be || bytes < 4096 || !gbs)
        return EX_ERR_ARG;
    const ex_backend_iface *f = be->iface;
    ex_buffer *a = NULL, *b = NULL;
    ex_status st = f->buffer_alloc(be->impl, bytes, &a);
    if (st == EX_OK)
        st = f->buffer_alloc(be->impl, bytes, &b);
    if (st == EX_OK)
        st = f->fill(be->impl, a, 0, bytes & ~(uint64_t)3, 0x3f800000u);
    if (st == EX_OK)
        st = f->copy(be->impl, b, 0, a, 0, bytes); /* warm-up: pages touched, caches cold */
    double best = 0.0, dt = 0.0;
    for (int rep = 0; st == EX_OK && rep < 5; rep++) {
        st = timed_copy(be, rep & 1 ? a : b, rep & 1 ? b : a, bytes, &dt);
        /* a copy reads and writes every byte: count both, as min_bytes does */
        if (st == EX_OK && dt > 0 && 2.0 * (double)bytes / dt / 1e9 > best)
            best = 2.0 * (double)bytes / dt / 1e9;
    }
    if (b)
        f->buffer_free(be->impl, b);
    if (a)
        f->buffer_free(be->impl, a);
    if (st == EX_OK) {
        be->caps.peak_copy_gbs = best;
        *gbs = best;
    }
    return st;
}
