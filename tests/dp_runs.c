/* The data-parallel tests' runs (dp_runs.h). No cmocka assertion here: the runs may be
 * threads, and a failing rank must return so that the others can end too. */
#include "dp_runs.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 8
#define HW 12
#define PIX (HW * HW)
#define NHW 20

/* The global batch of a step: two classes told apart by a faint bright top or bottom half
 * under pseudo-random noise, so that the loss stays well above 0 for the 20 steps (a task
 * learnt to a vanishing loss stops the weights, and so would hide a wrong gradient). */
static void global_batch(int step, int salt, int pix, float *x, int32_t *y)
{
    for (int i = 0; i < B; i++) {
        y[i] = (i * 5 + step + salt) % 2;
        for (int p = 0; p < pix; p++) {
            uint32_t h = (uint32_t)(p * 2654435761u) ^ (uint32_t)(i * 40503 + step * 977 + salt);
            h *= 2246822519u;
            h ^= h >> 15;
            x[i * pix + p] =
                0.2f * (float)((p < pix / 2) == (y[i] == 1)) + (float)(h >> 8) / 16777216.0f - 0.5f;
        }
    }
}

static ex_backend *open_backend(const char *name, int rank)
{
    ex_backend *be = NULL;
    char msg[512];
    if (ex_backend_open(name, &be, msg, sizeof msg) != EX_OK)
        fprintf(stderr, "rank %d: backend %s: %s\n", rank, name, msg);
    return be;
}

bool dp_run_search(const char *backend, const ex_comm *comm, const char *path, dp_step_hook hook)
{
    int ranks = comm ? comm->size : 1, rank = comm ? comm->rank : 0, share = B / ranks;
    ex_backend *be = open_backend(backend, rank);
    if (!be)
        return false;
    char msg[512];
    ex_search_config c;
    ex_search_config_default(&c);
    c.in_channels = 1;
    c.height = c.width = HW;
    c.classes = 2;
    c.batch = B;
    c.channels = 4;
    c.layers = 3;
    c.steps = 2;
    c.multiplier = 2;
    c.arch_lr = 3e-2f;
    c.seed = 11;
    c.comm = comm;
    ex_search *s = NULL;
    bool ok = ex_search_new(&c, be, &s, msg, sizeof msg) == EX_OK;
    if (!ok)
        fprintf(stderr, "rank %d: search: %s\n", rank, msg);
    float xt[B * PIX], xv[B * PIX];
    int32_t yt[B], yv[B];
    for (int step = 0; ok && step < DP_STEPS; step++) {
        if (hook)
            hook(rank, step);
        global_batch(step, 0, PIX, xt, yt);
        global_batch(step, 1, PIX, xv, yv);
        size_t at = (size_t)rank * (size_t)share;
        ex_search_stats st;
        ok = ex_search_step(s, xt + at * PIX, yt + at, xv + at * PIX, yv + at, 0.02f, 1.0f, &st) ==
                 EX_OK &&
             !st.skipped;
        if (!ok)
            fprintf(stderr, "rank %d: step %d: %s\n", rank, step,
                    st.skipped ? "skipped" : ex_search_error(s));
    }
    if (ok && !(ok = ex_search_save(s, path, NULL) == EX_OK))
        fprintf(stderr, "rank %d: save %s: %s\n", rank, path, ex_search_error(s));
    ex_search_free(s);
    ex_backend_close(be);
    return ok;
}

/* DARTS_V2 at 4 channels with its auxiliary head (which needs 20x20 images); affine batch
 * norms, unlike the search's. */
bool dp_run_network(const char *backend, const ex_comm *comm, const char *path)
{
    int ranks = comm ? comm->size : 1, rank = comm ? comm->rank : 0, share = B / ranks;
    ex_backend *be = open_backend(backend, rank);
    if (!be)
        return false;
    char msg[512];
    ex_network_config c;
    ex_network_config_default(&c);
    c.in_channels = 1;
    c.height = c.width = NHW;
    c.classes = 2;
    c.batch = B;
    c.channels = 4;
    c.layers = 3;
    c.auxiliary = true;
    c.seed = 5;
    c.comm = comm;
    ex_genotype g;
    ex_network *n = NULL;
    bool ok = ex_genotype_builtin("DARTS_V2", &g) == EX_OK &&
              ex_network_new(&g, &c, be, &n, msg, sizeof msg) == EX_OK;
    if (!ok)
        fprintf(stderr, "rank %d: network: %s\n", rank, msg);
    float x[B * NHW * NHW];
    int32_t y[B];
    for (int step = 0; ok && step < DP_STEPS; step++) {
        global_batch(step, 2, NHW * NHW, x, y);
        size_t at = (size_t)rank * (size_t)share;
        if (!(ok = ex_network_step(n, x + at * NHW * NHW, y + at, 0.005f, NULL) == EX_OK))
            fprintf(stderr, "rank %d: step %d: %s\n", rank, step, ex_network_error(n));
    }
    if (ok && !(ok = ex_network_save(n, path, true) == EX_OK))
        fprintf(stderr, "rank %d: save %s: %s\n", rank, path, ex_network_error(n));
    ex_network_free(n);
    ex_backend_close(be);
    return ok;
}

static char *slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (*len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (b = malloc((size_t)*len + 1)) != NULL && fread(b, 1, (size_t)*len, f) != (size_t)*len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

bool dp_same_file(const char *pa, const char *pb)
{
    long la = 0, lb = 0;
    char *a = slurp(pa, &la), *b = slurp(pb, &lb);
    bool same = a && b && la == lb && !memcmp(a, b, (size_t)la);
    free(a);
    free(b);
    return same;
}

/* The NMSE of tensor name between a and b, or -1 after printing why it cannot be had. */
static double tensor_nmse(ex_safetensors *a, ex_safetensors *b, const char *name,
                          const ex_st_info *ia)
{
    char msg[256];
    ex_st_info ib;
    if (ex_safetensors_info(b, name, &ib, msg, sizeof msg) != EX_OK || ib.nbytes != ia->nbytes) {
        fprintf(stderr, "%s: not in both states alike\n", name);
        return -1.0;
    }
    size_t n = ia->nbytes / sizeof(float);
    float *va = malloc(ia->nbytes + 1), *vb = malloc(ib.nbytes + 1);
    double e = -1.0;
    if (va && vb && ex_safetensors_read(a, name, va, ia->nbytes, msg, sizeof msg) == EX_OK &&
        ex_safetensors_read(b, name, vb, ib.nbytes, msg, sizeof msg) == EX_OK) {
        double num = 0.0, den = 0.0;
        for (size_t k = 0; k < n; k++) {
            num += ((double)va[k] - vb[k]) * ((double)va[k] - vb[k]);
            den += (double)vb[k] * vb[k];
        }
        e = den > 0.0 ? num / den : num;
    } else {
        fprintf(stderr, "%s: cannot be read\n", name);
    }
    free(va);
    free(vb);
    return e;
}

double dp_worst_nmse(const char *pa, const char *pb)
{
    ex_safetensors *a = NULL, *b = NULL;
    char msg[256];
    if (ex_safetensors_open(pa, &a, msg, sizeof msg) != EX_OK ||
        ex_safetensors_open(pb, &b, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "%s\n", msg);
        ex_safetensors_close(a);
        return -1.0;
    }
    double worst = 0.0;
    int tensors = 0;
    for (size_t i = 0; worst >= 0.0 && ex_safetensors_name(a, i); i++, tensors++) {
        const char *name = ex_safetensors_name(a, i);
        ex_st_info ia;
        if (ex_safetensors_info(a, name, &ia, msg, sizeof msg) != EX_OK) {
            worst = -1.0;
        } else if (ia.dtype == EX_ST_F32) { /* counters: compared as the files' bytes */
            double e = tensor_nmse(a, b, name, &ia);
            if (e > DP_NMSE_BOUND)
                fprintf(stderr, "%s: NMSE %.3g\n", name, e);
            worst = e < 0.0 || e > worst ? e : worst;
        }
    }
    if (worst >= 0.0 && tensors <= 10) {
        fprintf(stderr, "%s: only %d tensors\n", pa, tensors);
        worst = -1.0;
    }
    ex_safetensors_close(a);
    ex_safetensors_close(b);
    return worst;
}
