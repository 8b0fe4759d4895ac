/* ex_comm over NCCL (comm_nccl.h). The communicator is non-blocking, so that joining and
 * every call can be polled against a deadline; a rank that died or hangs turns into
 * ncclCommAbort and an error on the others, never a hang. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "exapt/comm_nccl.h"

struct ex_nccl_comm {
    ex_comm comm;
    ncclComm_t nc;
    int device;
    double timeout_s;
    bool broken;     /* aborted, or init failed: every call fails */
    char why[256];   /* what broke it */
    cudaStream_t hs; /* the host-side sums' stream */
    float *dbuf;     /* their device copy */
    size_t dcap;
    char *id_path; /* rank 0's id file, removed on free */
};

static void say(char *msg, size_t len, const char *fmt, const char *a, const char *b)
{
    if (msg && len)
        snprintf(msg, len, fmt, a, b);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void nap(long polls)
{
    struct timespec t = {0, polls < 1000 ? 20000L : 1000000L};
    nanosleep(&t, NULL);
}

static void *abort_comm(void *nc)
{
    ncclCommAbort(nc);
    return NULL;
}

/* ncclCommAbort first raises the flag that ends the kernels waiting in the group's sums,
 * then frees the communicator, which can wait without end once a peer is gone (for its
 * proxy threads, or in cudaFree): it runs on a thread of its own, so that the error
 * reaches the caller now. Without a thread it runs here. */
static void abort_detached(ncclComm_t nc)
{
    pthread_attr_t a;
    pthread_t t;
    bool started = pthread_attr_init(&a) == 0;
    if (started) {
        started = pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0 &&
                  pthread_create(&t, &a, abort_comm, nc) == 0;
        pthread_attr_destroy(&a);
    }
    if (!started)
        ncclCommAbort(nc);
}

/* Aborts the group's sums (the kernels waiting in them end) and remembers why. */
static ex_status breaks(ex_nccl_comm *c, const char *why, char *msg, size_t len)
{
    if (!c->broken) {
        snprintf(c->why, sizeof c->why, "nccl: rank %d of %d: %s", c->comm.rank, c->comm.size, why);
        if (c->nc)
            abort_detached(c->nc);
        c->nc = NULL;
        c->broken = true;
    }
    say(msg, len, "%s%s", c->why, "");
    return EX_ERR_COMM;
}

/* Whether the group is still sound: EX_OK while NCCL reports nothing and the wait began
 * no more than timeout_s ago; otherwise it breaks. */
static ex_status check(ex_nccl_comm *c, double waited_s, char *msg, size_t len)
{
    if (c->broken)
        return breaks(c, "", msg, len);
    ncclResult_t async = ncclSuccess, r = ncclCommGetAsyncError(c->nc, &async);
    if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
        char why[200];
        snprintf(why, sizeof why, "%s (%s)", ncclGetErrorString(r != ncclSuccess ? r : async),
                 ncclGetLastError(c->nc));
        return breaks(c, why, msg, len);
    }
    if (waited_s > c->timeout_s) {
        char why[160];
        snprintf(why, sizeof why,
                 "no answer from the other ranks in %g s (a rank died, hangs or is far behind)",
                 c->timeout_s);
        return breaks(c, why, msg, len);
    }
    return EX_OK;
}

/* Polls until the communicator's last call is done (non-blocking: ncclInProgress). */
static ex_status settle(ex_nccl_comm *c, ncclResult_t r, const char *what, char *msg, size_t len)
{
    if (r != ncclSuccess && r != ncclInProgress) {
        char why[200];
        snprintf(why, sizeof why, "%s: %s (%s)", what, ncclGetErrorString(r),
                 c->nc ? ncclGetLastError(c->nc) : "");
        return breaks(c, why, msg, len);
    }
    double t0 = now_s();
    for (long polls = 0;; polls++) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(c->nc, &async) == ncclSuccess && async == ncclSuccess)
            return EX_OK;
        ex_status st = check(c, now_s() - t0, msg, len);
        if (st != EX_OK)
            return st;
        nap(polls);
    }
}

static ex_status device_waiting(void *user, double waited_s, char *msg, size_t len)
{
    return check(user, waited_s, msg, len);
}

static ex_status allreduce_device(void *user, const float *src, float *dst, size_t n, void *queue,
                                  char *msg, size_t len)
{
    ex_nccl_comm *c = user;
    if (c->broken)
        return breaks(c, "", msg, len);
    return settle(c, ncclAllReduce(src, dst, n, ncclFloat, ncclSum, c->nc, (cudaStream_t)queue),
                  "allreduce", msg, len);
}

static ex_status cuda_said(ex_nccl_comm *c, cudaError_t e, const char *what, char *msg, size_t len)
{
    if (e == cudaSuccess)
        return EX_OK;
    char why[200];
    snprintf(why, sizeof why, "%s: %s", what, cudaGetErrorString(e));
    return breaks(c, why, msg, len);
}

/* The host-side sums: through the GPU, on the communicator's own stream. */
static ex_status allreduce_sum(void *user, float *buf, size_t n, char *msg, size_t len)
{
    ex_nccl_comm *c = user;
    if (c->broken)
        return breaks(c, "", msg, len);
    ex_status st = cuda_said(c, cudaSetDevice(c->device), "cudaSetDevice", msg, len);
    if (st == EX_OK && n > c->dcap) {
        cudaFree(c->dbuf);
        c->dbuf = NULL;
        c->dcap = 0;
        st = cuda_said(c, cudaMalloc((void **)&c->dbuf, n * sizeof *buf), "cudaMalloc", msg, len);
        c->dcap = st == EX_OK ? n : 0;
    }
    if (st == EX_OK)
        st = cuda_said(
            c, cudaMemcpyAsync(c->dbuf, buf, n * sizeof *buf, cudaMemcpyHostToDevice, c->hs),
            "copy to the device", msg, len);
    if (st == EX_OK)
        st = allreduce_device(c, c->dbuf, c->dbuf, n, c->hs, msg, len);
    if (st == EX_OK)
        st = cuda_said(
            c, cudaMemcpyAsync(buf, c->dbuf, n * sizeof *buf, cudaMemcpyDeviceToHost, c->hs),
            "copy to the host", msg, len);
    double t0 = now_s();
    for (long polls = 0; st == EX_OK; polls++) {
        cudaError_t q = cudaStreamQuery(c->hs);
        if (q != cudaErrorNotReady)
            return cuda_said(c, q, "the sum", msg, len);
        st = check(c, now_s() - t0, msg, len);
        nap(polls);
    }
    return st;
}

ex_status ex_nccl_id(unsigned char id[EX_NCCL_ID_BYTES], char *msg, size_t msg_len)
{
    if (!id) {
        say(msg, msg_len, "nccl: %s%s", "id is NULL", "");
        return EX_ERR_ARG;
    }
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        say(msg, msg_len, "nccl: the group's id: %s%s", ncclGetErrorString(r), "");
        return EX_ERR_COMM;
    }
    _Static_assert(sizeof u.internal == EX_NCCL_ID_BYTES, "NCCL's id size");
    memcpy(id, u.internal, EX_NCCL_ID_BYTES);
    return EX_OK;
}

static const char *bad_args(int size, int rank, const void *id, int device, double timeout_s,
                            ex_nccl_comm **out)
{
    return !out                       ? "out is NULL"
           : !id                      ? "id is NULL"
           : size < 1                 ? "size must be at least 1"
           : rank < 0 || rank >= size ? "rank must lie in 0 .. size - 1"
           : device < 0               ? "device must be at least 0"
           : !(timeout_s > 0.0)       ? "timeout must be above 0"
                                      : NULL;
}

ex_status ex_nccl_comm_new(int size, int rank, const unsigned char id[EX_NCCL_ID_BYTES], int device,
                           double timeout_s, ex_nccl_comm **out, char *msg, size_t msg_len)
{
    const char *bad = bad_args(size, rank, id, device, timeout_s, out);
    if (out)
        *out = NULL;
    if (bad) {
        say(msg, msg_len, "nccl: %s%s", bad, "");
        return EX_ERR_ARG;
    }
    *out = NULL;
    ex_nccl_comm *c = calloc(1, sizeof *c);
    if (!c) {
        say(msg, msg_len, "nccl: %s%s", "out of host memory", "");
        return EX_ERR_NOMEM;
    }
    c->comm = (ex_comm){.size = size,
                        .rank = rank,
                        .allreduce_sum = allreduce_sum,
                        .user = c,
                        .device_backend = "cuda",
                        .allreduce_device = allreduce_device,
                        .device_waiting = device_waiting};
    c->device = device;
    c->timeout_s = timeout_s;
    ex_status st = cuda_said(c, cudaSetDevice(device), "cudaSetDevice", msg, msg_len);
    if (st == EX_OK)
        st = cuda_said(c, cudaStreamCreateWithFlags(&c->hs, cudaStreamNonBlocking),
                       "cudaStreamCreate", msg, msg_len);
    if (st == EX_OK) {
        ncclUniqueId u;
        memcpy(u.internal, id, EX_NCCL_ID_BYTES);
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        st = settle(c, ncclCommInitRankConfig(&c->nc, size, u, rank, &config), "joining the group",
                    msg, msg_len);
    }
    if (st != EX_OK) {
        ex_nccl_comm_free(c);
        return st;
    }
    *out = c;
    return EX_OK;
}

/* Rank 0: the id into path through a temporary file, so that a reader sees all or none
 * (rename), and a file that is not there yet when it starts (checked by the caller). */
static ex_status write_id(const char *path, const unsigned char *id, char *msg, size_t len)
{
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
        say(msg, len, "nccl: %s%s", "out of host memory", "");
        return EX_ERR_NOMEM;
    }
    snprintf(tmp, n, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(id, 1, EX_NCCL_ID_BYTES, f) == EX_NCCL_ID_BYTES;
    ok = (f && fclose(f) == 0) && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) {
        say(msg, len, "nccl: cannot write %s: %s", path, strerror(errno));
        remove(tmp);
    }
    free(tmp);
    return ok ? EX_OK : EX_ERR_IO;
}

static ex_status read_id(const char *path, double timeout_s, unsigned char *id, char *msg,
                         size_t len)
{
    double t0 = now_s();
    for (long polls = 0;; polls++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, 1, EX_NCCL_ID_BYTES, f);
            fclose(f);
            if (got == EX_NCCL_ID_BYTES)
                return EX_OK;
            say(msg, len, "nccl: %s is not a group's id (too short)%s", path, "");
            return EX_ERR_IO;
        }
        if (now_s() - t0 > timeout_s) {
            say(msg, len, "nccl: %s did not appear in time (rank 0 writes it)%s", path, "");
            return EX_ERR_IO;
        }
        nap(polls + 1000);
    }
}

ex_status ex_nccl_comm_new_file(const char *path, int size, int rank, int device, double timeout_s,
                                ex_nccl_comm **out, char *msg, size_t msg_len)
{
    unsigned char id[EX_NCCL_ID_BYTES];
    const char *bad = !path || !*path ? "path is NULL or empty"
                                      : bad_args(size, rank, id, device, timeout_s, out);
    if (out)
        *out = NULL;
    if (bad) {
        say(msg, msg_len, "nccl: %s%s", bad, "");
        return EX_ERR_ARG;
    }
    *out = NULL;
    if (rank == 0 && access(path, F_OK) == 0) {
        say(msg, msg_len,
            "nccl: %s exists: remove it or name a new file (another rank could "
            "read an old group's id)%s",
            path, "");
        return EX_ERR_ARG;
    }
    ex_status st = rank == 0 ? ex_nccl_id(id, msg, msg_len) : EX_OK;
    if (st == EX_OK)
        st = rank == 0 ? write_id(path, id, msg, msg_len)
                       : read_id(path, timeout_s, id, msg, msg_len);
    if (st == EX_OK)
        st = ex_nccl_comm_new(size, rank, id, device, timeout_s, out, msg, msg_len);
    if (st == EX_OK && rank == 0 && !((*out)->id_path = strdup(path))) {
        ex_nccl_comm_free(*out);
        *out = NULL;
        st = EX_ERR_NOMEM;
        say(msg, msg_len, "nccl: %s%s", "out of host memory", "");
    }
    if (st != EX_OK && rank == 0 && st != EX_ERR_ARG)
        remove(path);
    return st;
}

const ex_comm *ex_nccl_comm_get(const ex_nccl_comm *c)
{
    return c ? &c->comm : NULL;
}

void ex_nccl_comm_free(ex_nccl_comm *c)
{
    if (!c)
        return;
    if (c->nc && !c->broken) {
        /* flush what is queued, then free; a rank gone meanwhile: abort instead */
        if (settle(c, ncclCommFinalize(c->nc), "leaving the group", NULL, 0) == EX_OK)
            ncclCommDestroy(c->nc);
    }
    cudaFree(c->dbuf);
    if (c->hs)
        cudaStreamDestroy(c->hs);
    if (c->id_path)
        remove(c->id_path);
    free(c->id_path);
    free(c);
}
