/* The Vulkan backend's own machinery on whatever device `--backend vulkan` picks (lavapipe
 * in CI), with the validation layer on (any message is an error of the next call):
 * device selection, transfers through the staging buffer, gates decided on the device,
 * the recorded step re-submitted with one host sync, profiling, a bad label reported
 * from the device, the portable profile's limits, failures as statuses, and the entry
 * points given bad arguments (the misuse case tests/api_coverage.sh relies on). A device that
 * cannot be opened is a failure. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exapt/exapt.h"

static ex_backend *open_vk(void)
{
    ex_backend *be = NULL;
    char msg[512] = "";
    if (ex_backend_open("vulkan", &be, msg, sizeof msg) != EX_OK)
        fail_msg("cannot open the Vulkan backend: %s", msg);
    return be;
}

/* "auto" never takes a CPU-type or virtual device; by name any device may be used, and
 * EXAPT_VK_DEVICE picks by index and by name, failing clearly when nothing matches. */
static void selection(void **state)
{
    (void)state;
    ex_backend *be = open_vk();
    char dev[128];
    snprintf(dev, sizeof dev, "%s", ex_backend_get_caps(be)->device);
    int cpu_type = strstr(dev, "(CPU,") != NULL || strstr(dev, "(virtual GPU,") != NULL;
    ex_backend_close(be);
    char msg[512] = "";
    if (ex_backend_open("auto", &be, msg, sizeof msg) != EX_OK)
        fail_msg("auto: %s", msg);
    if (cpu_type)
        assert_string_not_equal(ex_backend_get_caps(be)->name, "vulkan");
    ex_backend_close(be);

    char list[1024];
    assert_int_equal(ex_backend_devices("vulkan", list, sizeof list), EX_OK);
    assert_non_null(strstr(list, "0: "));
    assert_int_equal(ex_backend_devices("cpu", list, sizeof list), EX_ERR_UNSUPPORTED);

    setenv("EXAPT_VK_DEVICE", "0", 1);
    be = open_vk();
    ex_backend_close(be);
    setenv("EXAPT_VK_DEVICE", "no such device anywhere", 1);
    assert_int_equal(ex_backend_open("vulkan", &be, msg, sizeof msg), EX_ERR_UNSUPPORTED);
    assert_null(be);
    assert_non_null(strstr(msg, "EXAPT_VK_DEVICE"));
    unsetenv("EXAPT_VK_DEVICE");
}

/* Uploads larger than the staging buffer, overlapping copies both ways (memmove), fills,
 * a buffer with a block of its own, bytes exact after a download. */
static void transfers(void **state)
{
    (void)state;
    ex_backend *be = open_vk();
    const ex_backend_iface *f = ex_backend_iface_of(be);
    void *im = ex_backend_impl_of(be);
    uint64_t n = 20u << 20;
    ex_buffer *a = NULL, *big = NULL;
    assert_int_equal(f->buffer_alloc(im, n, &a), EX_OK);
    assert_int_equal(f->buffer_alloc(im, 100u << 20, &big), EX_OK);
    unsigned char *h = malloc(n), *r = malloc(n);
    assert_true(h && r);
    for (uint64_t i = 0; i < n; i++)
        h[i] = (unsigned char)(i * 131 + (i >> 9));
    assert_int_equal(f->upload(im, a, 0, h, n), EX_OK);
    assert_int_equal(f->upload(im, big, 1000, h, n), EX_OK);
    assert_int_equal(f->copy(im, a, 4096, a, 0, 12u << 20), EX_OK);
    memmove(h + 4096, h, 12u << 20);
    assert_int_equal(f->copy(im, a, 0, a, 8192, 9u << 20), EX_OK);
    memmove(h, h + 8192, 9u << 20);
    uint32_t one = 0x3f800000u;
    assert_int_equal(f->fill(im, a, 64, 4000, one), EX_OK);
    for (int i = 0; i < 1000; i++)
        memcpy(h + 64 + 4 * i, &one, 4);
    assert_int_equal(f->download(im, a, 0, r, n), EX_OK);
    assert_memory_equal(h, r, n);
    assert_int_equal(f->copy(im, a, 0, big, 1000, 4096), EX_OK);
    f->buffer_free(im, big);
    assert_int_equal(f->download(im, a, 0, r, 4096), EX_OK);
    for (uint64_t i = 0; i < 4096; i++)
        assert_int_equal(r[i], (unsigned char)(i * 131 + (i >> 9)));
    /* failures are statuses with messages */
    assert_int_equal(f->fill(im, a, 2, 8, one), EX_ERR_ARG);
    assert_int_equal(f->download(im, a, n - 4, r, 8), EX_ERR_ARG);
    ex_buffer *huge = NULL;
    assert_int_equal(f->buffer_alloc(im, (uint64_t)1 << 40, &huge), EX_ERR_NOMEM);
    assert_non_null(strstr(f->error(im), "bytes"));
    f->buffer_free(im, a);
    free(h);
    free(r);
    ex_backend_close(be);
}

/* Two scales and two products, each gated by a mask element the device reads; then the
 * same plan again with the mask flipped: the recorded step is reused, one host sync per
 * run, and the profiler reports gated-off nodes as skipped. */
static void gated_plan(void)
{
    ex_backend *be = open_vk();
    ex_ctx *c = ex_ctx_new();
    int64_t ne[2] = {8, 8}, two = 2;
    ex_tensor *x = ex_input(c, EX_F32, 2, ne, "x"), *m = ex_input(c, EX_F32, 1, &two, "m");
    ex_tensor *y[4] = {ex_scale(c, x, 2.0f), ex_scale(c, x, 3.0f), ex_matmul(c, x, x),
                       ex_matmul(c, x, x)};
    for (int k = 0; k < 4; k++) {
        ex_set_gate(c, y[k], m, k & 1);
        ex_keep(c, y[k]);
    }
    ex_plan *p = NULL;
    assert_int_equal(ex_graph_plan(c, be, NULL, &p), EX_OK);
    float xv[64], mm[64], zero[64] = {0}, o[64];
    for (int i = 0; i < 64; i++)
        xv[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 64; i++) {
        mm[i] = 0.0f;
        for (int j = 0; j < 8; j++)
            mm[i] += xv[(i / 8) * 8 + j] * xv[j * 8 + i % 8];
    }
    for (int run = 0; run < 4; run++) {
        int on = run & 1; /* which mask element is 1 */
        float mv[2] = {on ? 0.0f : 1.0f, on ? 1.0f : 0.0f};
        assert_int_equal(ex_plan_write(p, x, xv, sizeof xv), EX_OK);
        assert_int_equal(ex_plan_write(p, m, mv, sizeof mv), EX_OK);
        for (int k = 0; k < 4; k++)
            assert_int_equal(ex_plan_write(p, y[k], zero, sizeof zero), EX_OK);
        assert_int_equal(ex_plan_set_profile(p, run >= 2), EX_OK);
        uint64_t h0 = ex_backend_host_syncs(be);
        if (ex_plan_run(p) != EX_OK)
            fail_msg("run %d: %s", run, ex_plan_error(p));
        if (run < 2)
            assert_int_equal(ex_backend_host_syncs(be) - h0, 1);
        for (int k = 0; k < 4; k++) {
            assert_int_equal(ex_plan_read(p, y[k], o, sizeof o), EX_OK);
            int live = (k & 1) == on;
            for (int i = 0; i < 64; i++) {
                float want = !live ? 0.0f : k == 0 ? 2 * xv[i] : k == 1 ? 3 * xv[i] : mm[i];
                assert_float_equal(o[i], want, 1e-4);
            }
            if (run >= 2) {
                ex_node_info in;
                assert_int_equal(ex_plan_node_info(p, k, &in), EX_OK);
                assert_int_equal(in.skipped, !live);
            }
        }
    }
    ex_plan_free(p);
    ex_ctx_free(c);
    ex_backend_close(be);
}

/* In both profiles: the portable one profiles node by node on the host clock. */
static void gates_and_steps(void **state)
{
    (void)state;
    gated_plan();
    setenv("EXAPT_VK_PORTABLE", "1", 1);
    gated_plan();
    unsetenv("EXAPT_VK_PORTABLE");
}

/* A label outside [0, K) is found by the shader and reported after the step as the CPU
 * reports it; the next run with good labels succeeds. */
static void bad_label(void **state)
{
    (void)state;
    ex_backend *be = open_vk();
    ex_ctx *c = ex_ctx_new();
    int64_t ne[2] = {3, 5}, three = 3;
    ex_tensor *x = ex_input(c, EX_F32, 2, ne, "x"), *y = ex_input(c, EX_I32, 1, &three, "y");
    ex_tensor *loss = ex_keep(c, ex_cross_entropy(c, x, y));
    ex_plan *p = NULL;
    assert_int_equal(ex_graph_plan(c, be, NULL, &p), EX_OK);
    float xv[15] = {0};
    int32_t bad[3] = {1, 7, 0}, good[3] = {1, 4, 0};
    assert_int_equal(ex_plan_write(p, x, xv, sizeof xv), EX_OK);
    assert_int_equal(ex_plan_write(p, y, bad, sizeof bad), EX_OK);
    assert_int_equal(ex_plan_run(p), EX_ERR_ARG);
    assert_non_null(strstr(ex_plan_error(p), "label 7 of row 1"));
    assert_int_equal(ex_plan_write(p, y, good, sizeof good), EX_OK);
    assert_int_equal(ex_plan_run(p), EX_OK);
    float l = 0;
    assert_int_equal(ex_plan_read(p, loss, &l, sizeof l), EX_OK);
    assert_float_equal(l, 1.6094379f, 1e-5); /* log 5 */
    ex_plan_free(p);
    ex_ctx_free(c);
    ex_backend_close(be);
}

/* The portable profile keeps to Vulkan 1.1's guaranteed limits. */
static void portable_profile(void **state)
{
    (void)state;
    setenv("EXAPT_VK_PORTABLE", "1", 1);
    ex_backend *be = open_vk();
    const ex_backend_caps *caps = ex_backend_get_caps(be);
    assert_true(caps->max_binding_bytes <= (uint64_t)1 << 27);
    assert_true(caps->max_alloc_bytes <= (uint64_t)1 << 27);
    assert_int_equal(caps->features & EX_FEAT_TIMESTAMPS, 0);
    assert_non_null(strstr(caps->device, "portable profile"));
    ex_backend_close(be);
    unsetenv("EXAPT_VK_PORTABLE");
}

/* The Vulkan entry points given bad arguments: a status and a message, nothing opened. */
static void misuse(void **state)
{
    (void)state;
    char msg[256] = "";
    const ex_backend_iface *iface = NULL;
    void *impl = NULL;
    ex_backend_caps caps;
    assert_int_equal(ex_vulkan_backend_create(0, NULL, &impl, &caps, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(strstr(msg, "iface"));
    assert_int_equal(ex_vulkan_backend_create(0, &iface, NULL, &caps, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_vulkan_backend_create(1, &iface, &impl, NULL, NULL, 0), EX_ERR_ARG);
    assert_null(iface);
    assert_null(impl);

    assert_int_equal(ex_vulkan_devices(NULL, 16), EX_ERR_ARG);
    char small[8];
    memset(small, 'x', sizeof small);
    assert_int_equal(ex_vulkan_devices(small, 0), EX_ERR_ARG);
    assert_int_equal(small[0], 'x');
    /* a buffer too small for one line: cut and terminated, not overrun */
    assert_int_equal(ex_vulkan_devices(small, 4), EX_OK);
    assert_true(strlen(small) < 4);
    assert_int_equal(small[4], 'x');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(selection),        cmocka_unit_test(transfers),
        cmocka_unit_test(gates_and_steps),  cmocka_unit_test(bad_label),
        cmocka_unit_test(portable_profile), cmocka_unit_test(misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
