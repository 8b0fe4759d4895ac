/* API misuse: every public function that test_errors.c does not already drive with bad
 * arguments, called with NULL and out-of-range arguments. Each must return its documented
 * failure value (a status, NULL, 0, a constant name, or an inert tensor with the sticky
 * error set), write a message wherever it takes a message buffer or has an object to
 * hold one, and never crash. tests/api_coverage.sh checks that together the two tests name
 * every function of include/exapt/. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <png.h>

#include "core/backend_iface.h"
#include "exapt/data.h"
#include "exapt/exapt.h"
#include "exapt/file.h"
#include "exapt/metrics.h"
#include "exapt/network.h"
#include "exapt/safetensors.h"
#include "exapt/search.h"

static char msg[512];

/* A status call that takes msg: the status, and a message. */
#define FAILS_MSG(call, want)                                                                      \
    do {                                                                                           \
        msg[0] = '\0';                                                                             \
        assert_int_equal((call), (want));                                                          \
        if (msg[0] == '\0')                                                                        \
            fail_msg("%s: no message", #call);                                                     \
    } while (0)

static ex_backend *cpu(void)
{
    ex_backend *be = NULL;
    assert_int_equal(ex_backend_open("cpu", &be, msg, sizeof msg), EX_OK);
    return be;
}

static void backend_and_names(void **state)
{
    (void)state;
    assert_null(ex_backend_get_caps(NULL));
    assert_null(ex__backend_iface_of(NULL));
    assert_string_equal(ex_backend_error(NULL), "");
    assert_null(ex__backend_impl_of(NULL));
    assert_non_null(ex_backend_list());
    assert_int_equal(ex_backend_host_syncs(NULL), 0);
    assert_non_null(ex_genotype_builtin_names());
    double gbs = 0;
    assert_int_equal(ex_backend_measure_bandwidth(NULL, 1 << 20, &gbs), EX_ERR_ARG);
    ex_backend *be = cpu();
    assert_int_equal(ex_backend_measure_bandwidth(be, 1 << 20, NULL), EX_ERR_ARG);
    ex_backend_counters c;
    memset(&c, 0xAB, sizeof c);
    assert_int_equal(ex_backend_get_counters(NULL, &c), EX_ERR_ARG);
    assert_int_equal(c.created, 0); /* zeroed even on failure */
    assert_int_equal(ex_backend_get_counters(be, NULL), EX_ERR_ARG);
    assert_int_equal(ex_backend_get_counters(be, &c), EX_ERR_UNSUPPORTED); /* the CPU keeps none */
    ex_backend_close(be);
    assert_int_equal(ex_backend_supports(NULL, EX_OP_ADD), 0);
    assert_int_equal(ex_backend_supports("cpu", (ex_op)EX_OP_COUNT), 0);
    assert_int_equal(ex_backend_supports("no-such-backend", EX_OP_ADD), 0);
    char list[64] = "x";
    assert_int_equal(ex_backend_devices(NULL, list, sizeof list), EX_ERR_ARG);
    assert_int_equal(ex_backend_devices("cpu", NULL, sizeof list), EX_ERR_ARG);
    assert_int_equal(ex_backend_devices("cpu", list, 0), EX_ERR_ARG);
    assert_string_equal(list, "x");
    assert_int_equal(ex_backend_devices("no-such-backend", list, sizeof list), EX_ERR_UNSUPPORTED);
    assert_true(list[0] != '\0');
    FAILS_MSG(ex__cpu_backend_create(0, NULL, NULL, NULL, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(ex_cand_name((ex_cand)-1));
    assert_non_null(ex_cand_name((ex_cand)EX_CAND_COUNT));
    assert_int_equal(ex_cand_parse(NULL), -1);
    assert_int_equal(ex_cand_parse("no_such_op"), -1);
    assert_non_null(ex_dtype_name((ex_dtype)99));
    assert_int_equal(ex_dtype_size((ex_dtype)99), 0);
    assert_non_null(ex_st_dtype_name((ex_st_dtype)99));
    assert_int_equal(ex_st_dtype_size((ex_st_dtype)99), 0);
    assert_non_null(ex_op_name((ex_op)EX_OP_COUNT));
    assert_non_null(ex_op_name((ex_op)-1));
    assert_int_equal(ex_op_differentiable((ex_op)EX_OP_COUNT), 0);
    assert_true(ex_op_tolerance((ex_op)EX_OP_COUNT) == 0.0);
    assert_non_null(ex_search_mode_name((ex_search_mode)99));
    assert_int_equal(ex_search_mode_parse(NULL), -1);
    assert_int_equal(ex_search_mode_parse("bogus"), -1);
    assert_non_null(ex_version());
    assert_non_null(ex_status_str((ex_status)-1));
}

static void context_and_tensors(void **state)
{
    (void)state;
    assert_int_equal(ex_ctx_alloc_count(NULL), 0);
    assert_int_equal(ex_ctx_begin_stage(NULL), -1);
    ex_ctx_set_error(NULL, EX_ERR_ARG, "ignored %d", 1);
    ex_ctx_set_gate(NULL, NULL, 0);
    ex_graph_set_recompute(NULL, true); /* no context: nothing to set, no crash */
    ex_graph_set_recompute_level(NULL, 2);
    assert_null(ex_requires_grad(NULL, NULL));
    assert_int_equal(ex_graph_gradients(NULL, NULL, 0, NULL, NULL), EX_ERR_ARG);
    assert_string_equal(ex_tensor_name(NULL), "");
    assert_int_equal(ex_tensor_numel(NULL), 0);
    assert_int_equal(ex_tensor_stride(NULL, 0), 0);
    assert_int_equal(ex_tensor_dtype(NULL), EX_DTYPE_COUNT);
    char buf[64];
    assert_non_null(ex_tensor_shape_str(NULL, buf, sizeof buf));
    ex_ctx *ctx = ex_ctx_new();
    int64_t n = 4;
    ex_tensor *x = ex_input(ctx, EX_F32, 1, &n, "x");
    /* a gate index outside the mask: the sticky error, with a message */
    ex_tensor *mask = ex_input(ctx, EX_F32, 1, &n, "mask");
    ex_ctx_set_gate(ctx, mask, 99);
    assert_int_not_equal(ex_ctx_status(ctx), EX_OK);
    assert_true(ex_ctx_error(ctx)[0] != '\0');
    ex_ctx_clear_error(ctx);
    ex_ctx_set_gate(ctx, NULL, 0);
    /* gradients: NULL loss, and n without room */
    assert_int_not_equal(ex_graph_gradients(ctx, NULL, 1, &x, NULL), EX_OK);
    assert_true(ex_ctx_error(ctx)[0] != '\0');
    ex_ctx_clear_error(ctx);
    ex_tensor *r = ex_requires_grad(ctx, NULL);
    assert_non_null(r); /* the inert tensor */
    assert_int_not_equal(ex_ctx_status(ctx), EX_OK);
    ex_ctx_clear_error(ctx);
    ex_ctx_set_error(ctx, EX_OK, "%s", "set with EX_OK becomes a bad argument");
    assert_int_equal(ex_ctx_status(ctx), EX_ERR_ARG);
    ex_ctx_free(ctx);
}

static ex_plan *small_plan(ex_ctx *ctx, ex_backend *be, bool snapshot)
{
    int64_t n = 4;
    ex_tensor *x = ex_input(ctx, EX_F32, 1, &n, "x");
    ex_keep(ctx, ex_relu(ctx, x));
    ex_plan_opts o;
    ex_plan_opts_default(&o);
    o.snapshot = snapshot;
    ex_plan *p = NULL;
    assert_int_equal(ex_graph_plan(ctx, be, &o, &p), EX_OK);
    return p;
}

static void plans(void **state)
{
    (void)state;
    ex_node_info info;
    assert_int_equal(ex_plan_node_info(NULL, 0, &info), EX_ERR_ARG);
    assert_int_equal(ex_plan_restore(NULL), EX_ERR_ARG);
    assert_int_equal(ex_plan_snapshot(NULL), EX_ERR_ARG);
    assert_int_equal(ex_plan_run_stage(NULL, 0), EX_ERR_ARG);
    assert_int_equal(ex_plan_submit_stage(NULL, 0), EX_ERR_ARG);
    assert_int_equal(ex_plan_sync(NULL), EX_ERR_ARG);
    assert_int_equal(ex_plan_set_profile(NULL, true), EX_ERR_ARG);
    ex_backend *be = cpu();
    ex_ctx *ctx = ex_ctx_new();
    ex_plan *p = small_plan(ctx, be, false);
    int64_t four = 4;
    ex_tensor *t = ex_input(ctx, EX_F32, 1, &four, "late"); /* made after planning */
    assert_int_equal(ex_tensor_stride(t, 5), 0);
    assert_int_equal(ex_tensor_stride(t, -1), 0);
    assert_int_equal(ex_plan_write(p, t, &four, sizeof four), EX_ERR_ARG);
    assert_true(ex_plan_error(p)[0] != '\0');
    assert_int_equal(ex_plan_node_info(p, -1, &info), EX_ERR_ARG);
    assert_int_equal(ex_plan_node_info(p, ex_plan_node_count(p), &info), EX_ERR_ARG);
    assert_int_equal(ex_plan_launch_count(NULL), 0);
    assert_true(ex_plan_launch_count(p) >= 1 && ex_plan_launch_count(p) <= ex_plan_node_count(p));
    assert_int_equal(ex_plan_node_info(p, 0, NULL), EX_ERR_ARG);
    assert_int_equal(ex_plan_run_stage(p, 7), EX_ERR_ARG);
    assert_true(ex_plan_error(p)[0] != '\0');
    assert_int_equal(ex_plan_run_stage(p, -1), EX_ERR_ARG);
    assert_int_equal(ex_plan_submit_stage(p, 7), EX_ERR_ARG);
    assert_non_null(strstr(ex_plan_error(p), "no stage 7"));
    assert_int_equal(ex_plan_sync(p), EX_OK); /* nothing queued: nothing to report */
    /* snapshot and restore need opts.snapshot */
    assert_int_equal(ex_plan_snapshot(p), EX_ERR_STATE);
    assert_non_null(strstr(ex_plan_error(p), "snapshot"));
    assert_int_equal(ex_plan_restore(p), EX_ERR_STATE);
    ex_plan_free(p);
    ex_ctx_free(ctx);
    /* options not filled by ex_plan_opts_default(), or a newer exapt's, are refused */
    ex_plan_opts_init(NULL, sizeof(ex_plan_opts));
    ex_plan_opts bad[2];
    memset(bad, 0, sizeof bad);
    for (int i = 0; i < 2; i++) {
        bad[0].size = i ? sizeof bad[0] + 8 : 0;
        ctx = ex_ctx_new();
        int64_t n = 4;
        ex_keep(ctx, ex_relu(ctx, ex_input(ctx, EX_F32, 1, &n, "x")));
        assert_int_equal(ex_graph_plan(ctx, be, &bad[0], &p), EX_ERR_ARG);
        assert_null(p);
        assert_non_null(strstr(ex_ctx_error(ctx), "size"));
        ex_ctx_free(ctx);
    }
    /* an older program's shorter struct: what lies past it is not read */
    memset(bad, 0xff, sizeof bad);
    ex_plan_opts_init(&bad[0], offsetof(ex_plan_opts, no_inplace));
    assert_int_equal(bad[0].size, offsetof(ex_plan_opts, no_inplace));
    ctx = ex_ctx_new();
    int64_t n = 4;
    ex_keep(ctx, ex_relu(ctx, ex_input(ctx, EX_F32, 1, &n, "x")));
    assert_int_equal(ex_graph_plan(ctx, be, &bad[0], &p), EX_OK);
    assert_int_equal(ex_plan_snapshot(p), EX_ERR_STATE); /* snapshot (0xff) was not read */
    ex_plan_free(p);
    ex_ctx_free(ctx);
    ex_backend_close(be);
}

/* A communicator of `size` ranks that all hold this rank's values: the sum is size times
 * them; `broken` makes every collective fail. */
typedef struct fake_group {
    int size;
    bool broken;
} fake_group;

static ex_status fake_allreduce(void *user, float *buf, size_t n, char *why, size_t len)
{
    const fake_group *g = user;
    if (g->broken) {
        snprintf(why, len, "rank 1 is gone");
        return EX_ERR_COMM;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] *= (float)g->size;
    return EX_OK;
}

/* Communicators, ranks and the all-reduce node given bad arguments, and the plan's
 * all-reduce through a communicator that sums, fails, or does not fit the graph. */
/* Device sums that a CPU plan must never call. */
static ex_status no_device_sum(void *user, const float *src, float *dst, size_t n, void *queue,
                               char *why, size_t len)
{
    (void)user, (void)src, (void)dst, (void)n, (void)queue, (void)why, (void)len;
    fail_msg("a CPU plan called the communicator's device sums");
    return EX_ERR_COMM;
}

static ex_status no_device_wait(void *user, double waited_s, char *why, size_t len)
{
    (void)user, (void)waited_s, (void)why, (void)len;
    fail_msg("a CPU plan waited through the communicator");
    return EX_ERR_COMM;
}

static void data_parallel(void **state)
{
    (void)state;
    fake_group group = {2, false};
    ex_comm good = {.size = 2, .rank = 1, .allreduce_sum = fake_allreduce, .user = &group};
    ex_comm bad = good;
    assert_true(ex_comm_valid(&good, NULL, 0));
    assert_false(ex_comm_valid(NULL, msg, sizeof msg));
    assert_non_null(strstr(msg, "NULL"));
    bad.rank = 2;
    assert_false(ex_comm_valid(&bad, msg, sizeof msg));
    bad = good;
    bad.allreduce_sum = NULL;
    assert_false(ex_comm_valid(&bad, msg, sizeof msg));
    assert_non_null(strstr(msg, "allreduce_sum"));
    ex_ctx_set_ranks(NULL, 2);                   /* no context: no crash */
    assert_null(ex_allreduce(NULL, NULL, 1.0f)); /* no context: no tensor */
    assert_int_equal(ex_plan_set_comm(NULL, &good), EX_ERR_ARG);
    ex_ctx *ctx = ex_ctx_new();
    ex_ctx_set_ranks(ctx, 0);
    assert_int_equal(ex_ctx_status(ctx), EX_ERR_ARG);
    ex_ctx_clear_error(ctx);
    int64_t n = 3;
    ex_allreduce(ctx, ex_input(ctx, EX_I32, 1, &n, "counts"), 1.0f);
    assert_int_equal(ex_ctx_status(ctx), EX_ERR_ARG);
    ex_ctx_clear_error(ctx);
    ex_allreduce(ctx, ex_input(ctx, EX_F32, 1, &n, "v"), NAN);
    assert_non_null(strstr(ex_ctx_error(ctx), "not finite"));
    ex_ctx_free(ctx);
    /* a graph for two ranks: 0.5 times the sum of x over them */
    ctx = ex_ctx_new();
    ex_ctx_set_ranks(ctx, 2);
    ex_tensor *x = ex_input(ctx, EX_F32, 1, &n, "x");
    ex_tensor *y = ex_keep(ctx, ex_allreduce(ctx, ex_scale(ctx, x, 3.0f), 0.5f));
    ex_backend *be = cpu();
    ex_plan *p = NULL;
    assert_int_equal(ex_graph_plan(ctx, be, NULL, &p), EX_OK);
    float xv[3] = {1, -2, 0.25f}, yv[3];
    assert_int_equal(ex_plan_write(p, x, xv, sizeof xv), EX_OK);
    assert_int_equal(ex_plan_run(p), EX_ERR_STATE); /* no communicator: a group of one */
    assert_non_null(strstr(ex_plan_error(p), "built for 2 rank(s)"));
    bad = good;
    bad.size = 0;
    assert_int_equal(ex_plan_set_comm(p, &bad), EX_ERR_ARG);
    /* device sums: all three fields or none; refused for a backend without them, and
     * another backend's go unused (the sums then go through the host) */
    bad = good;
    bad.device_backend = "cpu";
    assert_false(ex_comm_valid(&bad, msg, sizeof msg));
    assert_non_null(strstr(msg, "together"));
    assert_int_equal(ex_plan_set_comm(p, &bad), EX_ERR_ARG);
    bad.allreduce_device = no_device_sum;
    bad.device_waiting = no_device_wait;
    assert_int_equal(ex_plan_set_comm(p, &bad), EX_ERR_UNSUPPORTED);
    assert_non_null(strstr(ex_plan_error(p), "cannot"));
    bad.device_backend = "cuda";
    assert_int_equal(ex_plan_set_comm(p, &bad), EX_OK);
    assert_int_equal(ex_plan_run(p), EX_OK);
    assert_int_equal(ex_plan_set_comm(p, &good), EX_OK);
    assert_int_equal(ex_plan_run(p), EX_OK);
    assert_int_equal(ex_plan_read(p, y, yv, sizeof yv), EX_OK);
    for (int i = 0; i < 3; i++)
        assert_true(yv[i] == 0.5f * 2.0f * 3.0f * xv[i]);
    group.broken = true;
    assert_int_equal(ex_plan_run(p), EX_ERR_COMM);
    assert_non_null(strstr(ex_plan_error(p), "rank 1 is gone"));
    ex_plan_free(p);
    ex_ctx_free(ctx);
    /* a search or network whose batch does not split over the ranks, or order 2 */
    group = (fake_group){3, false};
    good.size = 3;
    ex_search_config sc;
    ex_search_config_default(&sc);
    sc.batch = 8;
    sc.comm = &good;
    ex_search *s = NULL;
    FAILS_MSG(ex_search_new(&sc, be, &s, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(strstr(msg, "communicator"));
    good.size = 2;
    sc.order = 2;
    FAILS_MSG(ex_search_new(&sc, be, &s, msg, sizeof msg), EX_ERR_ARG);
    assert_null(s);
    ex_network_config nc;
    ex_network_config_default(&nc);
    nc.batch = 9;
    nc.comm = &good;
    ex_genotype g;
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &g), EX_OK);
    ex_network *net = NULL;
    FAILS_MSG(ex_network_new(&g, &nc, be, &net, msg, sizeof msg), EX_ERR_ARG);
    assert_null(net);
    ex_backend_close(be);
}

static void datasets_and_loaders(void **state)
{
    (void)state;
    ex_dataset *ds = NULL, *a = NULL, *b = NULL;
    assert_int_equal(ex_dataset_channels(NULL), 0);
    assert_int_equal(ex_dataset_count(NULL), 0);
    assert_int_equal(ex_dataset_height(NULL), 0);
    assert_int_equal(ex_dataset_width(NULL), 0);
    assert_int_equal(ex_dataset_classes(NULL), 0);
    assert_null(ex_dataset_name(NULL));
    (void)ex_dataset_pixel_type(NULL);
    ex_dataset_free(NULL);
    FAILS_MSG(ex_dataset_load("/nonexistent/dir", "mnist", EX_SPLIT_TRAIN, &ds, msg, sizeof msg),
              EX_ERR_IO);
    assert_null(ds);
    FAILS_MSG(ex_dataset_load(NULL, "no-such-set", EX_SPLIT_TRAIN, &ds, msg, sizeof msg),
              EX_ERR_ARG);
    FAILS_MSG(ex_dataset_load(NULL, NULL, EX_SPLIT_TRAIN, NULL, msg, sizeof msg), EX_ERR_ARG);
    uint8_t px[2 * 4] = {0};
    int32_t labels[2] = {0, 5};
    FAILS_MSG(
        ex_dataset_from_memory(NULL, EX_PIXEL_U8, 2, 1, 2, 2, labels, 2, &ds, msg, sizeof msg),
        EX_ERR_ARG);
    FAILS_MSG(ex_dataset_from_memory(px, EX_PIXEL_U8, 2, 1, 2, 2, labels, 2, &ds, msg, sizeof msg),
              EX_ERR_ARG); /* label 5 of 2 classes */
    FAILS_MSG(ex_dataset_from_memory(px, EX_PIXEL_U8, -1, 1, 2, 2, labels, 2, &ds, msg, sizeof msg),
              EX_ERR_ARG);
    labels[1] = 1;
    assert_int_equal(
        ex_dataset_from_memory(px, EX_PIXEL_U8, 2, 1, 2, 2, labels, 2, &ds, msg, sizeof msg),
        EX_OK);
    float img[4];
    int32_t y;
    assert_int_equal(ex_dataset_sample(NULL, 0, img, &y), EX_ERR_ARG);
    assert_int_equal(ex_dataset_sample(ds, -1, img, &y), EX_ERR_ARG);
    assert_int_equal(ex_dataset_sample(ds, 2, img, &y), EX_ERR_ARG);
    FAILS_MSG(ex_dataset_split(NULL, 0.5, &a, &b, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_dataset_split(ds, 1.5, &a, &b, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_dataset_split(ds, NAN, &a, &b, msg, sizeof msg), EX_ERR_ARG);
    ex_normalize nz;
    FAILS_MSG(ex_dataset_normalization(NULL, &nz, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_dataset_normalization(ds, NULL, msg, sizeof msg), EX_ERR_ARG);
    ex_loader *l = NULL;
    ex_loader_opts o;
    ex_loader_opts_default(&o, NULL, true);
    FAILS_MSG(ex_loader_new(NULL, &o, &l, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_loader_new(ds, NULL, &l, msg, sizeof msg), EX_ERR_ARG);
    ex_loader_opts_init(NULL, sizeof o, ds, true);
    ex_loader_opts_default(&o, ds, true);
    o.size = 0; /* not filled by its default function */
    FAILS_MSG(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_ERR_ARG);
    o.size = sizeof o + 1; /* a newer exapt's */
    FAILS_MSG(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_ERR_ARG);
    /* an older program's struct, ending before prefetch: the field past it is not read */
    ex_loader_opts_init(&o, offsetof(ex_loader_opts, prefetch), ds, false);
    o.prefetch = -5;
    assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_OK);
    ex_loader_free(l);
    l = NULL;
    ex_loader_opts_default(&o, ds, true);
    o.batch = 0;
    FAILS_MSG(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_ERR_ARG);
    assert_null(l);
    o.batch = 1;
    o.prefetch = 1000;
    FAILS_MSG(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_ERR_ARG);
    o.prefetch = 1;
    assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_OK);
    int count;
    assert_int_equal(ex_loader_next(NULL, img, &y, &count), EX_ERR_ARG);
    assert_int_equal(ex_loader_next(l, NULL, &y, &count), EX_ERR_ARG);
    assert_int_equal(ex_loader_batch_floats(NULL), 0);
    assert_int_equal(ex_loader_batches_per_epoch(NULL), 0);
    ex_loader_state zero = ex_loader_get_state(NULL);
    assert_int_equal(zero.epoch, 0);
    assert_int_equal(zero.position, 0);
    FAILS_MSG(ex_loader_set_state(NULL, zero, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_loader_set_state(l, (ex_loader_state){-1, 0}, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_loader_set_state(l, (ex_loader_state){0, 99}, msg, sizeof msg), EX_ERR_ARG);
    ex_loader_free(l);
    ex_loader_free(NULL);
    ex_dataset_free(ds);
}

static void genotypes(void **state)
{
    (void)state;
    ex_genotype g;
    char buf[EX_GENOTYPE_TEXT_MAX];
    assert_int_equal(ex_genotype_builtin(NULL, &g), EX_ERR_ARG);
    assert_int_equal(ex_genotype_builtin("NOPE", &g), EX_ERR_ARG);
    assert_int_equal(ex_genotype_builtin("DARTS_V2", NULL), EX_ERR_ARG);
    assert_int_equal(ex_genotype_format(NULL, buf, sizeof buf), EX_ERR_ARG);
    assert_int_equal(ex_genotype_format_json(NULL, buf, sizeof buf), EX_ERR_ARG);
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &g), EX_OK);
    assert_int_not_equal(ex_genotype_format(&g, buf, 8), EX_OK); /* too small */
    assert_int_not_equal(ex_genotype_format_json(&g, NULL, 0), EX_OK);
    FAILS_MSG(ex_genotype_validate(NULL, msg, sizeof msg), EX_ERR_ARG);
    ex_genotype bad = g;
    bad.steps = 99;
    FAILS_MSG(ex_genotype_validate(&bad, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_parse(NULL, 4, &g, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_parse("x", 1, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_parse_json(NULL, 4, &g, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_parse_text(NULL, 4, &g, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_load(NULL, &g, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_load("/nonexistent/g.json", &g, msg, sizeof msg), EX_ERR_IO);
    FAILS_MSG(ex_genotype_save_json(NULL, &g, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_save_text("/tmp/x.txt", NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_save_json("/nonexistent/dir/g.json", &g, msg, sizeof msg), EX_ERR_IO);
    FAILS_MSG(ex_genotype_save_text("/nonexistent/dir/g.txt", &g, msg, sizeof msg), EX_ERR_IO);
    float w[2 * 8] = {0};
    ex_cand cands[2] = {EX_CAND_SKIP_CONNECT, EX_CAND_MAX_POOL_3X3};
    FAILS_MSG(ex_genotype_derive(NULL, w, 1, 1, 2, cands, &g, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_derive(w, w, 0, 1, 2, cands, &g, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_derive(w, w, 1, 1, 99, cands, &g, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_cap_param_free(NULL, w, 2, cands, 1, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_cap_param_free(&g, NULL, 2, cands, 1, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_genotype_cap_param_free(&g, w, 0, cands, 1, msg, sizeof msg), EX_ERR_ARG);
    bad = g;
    bad.normal[0].input = 50; /* would index past w */
    FAILS_MSG(ex_genotype_cap_param_free(&bad, w, 2, cands, 0, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_cand_is_parametric((ex_cand)-1), 0);
    assert_int_equal(ex_cand_is_parametric((ex_cand)EX_CAND_COUNT), 0);
}

static void safetensors_files(void **state)
{
    (void)state;
    ex_safetensors *f = NULL;
    ex_st_info info;
    char data[8];
    FAILS_MSG(ex_safetensors_open(NULL, &f, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_safetensors_open("/nonexistent/x.safetensors", &f, msg, sizeof msg), EX_ERR_IO);
    assert_null(f);
    ex_safetensors_close(NULL);
    assert_int_equal(ex_safetensors_count(NULL), 0);
    assert_null(ex_safetensors_name(NULL, 0));
    assert_null(ex_safetensors_metadata(NULL, "k"));
    assert_int_equal(ex_safetensors_metadata_count(NULL), 0);
    assert_null(ex_safetensors_metadata_key(NULL, 0));
    FAILS_MSG(ex_safetensors_info(NULL, "w", &info, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_safetensors_read(NULL, "w", data, sizeof data, msg, sizeof msg), EX_ERR_ARG);
    float v[2] = {1, 2};
    ex_st_tensor t = {"w", EX_ST_F32, 1, {2}, v};
    ex_st_meta m = {"k", "v"};
    FAILS_MSG(ex_safetensors_save(NULL, &t, 1, NULL, 0, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_safetensors_save("/tmp/x.safetensors", NULL, 1, NULL, 0, msg, sizeof msg),
              EX_ERR_ARG);
    ex_st_tensor bad = t;
    bad.ndim = -1;
    FAILS_MSG(ex_safetensors_save("/tmp/x.safetensors", &bad, 1, NULL, 0, msg, sizeof msg),
              EX_ERR_ARG);
    char path[] = "/tmp/exapt-misuse-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ex_safetensors_save(path, &t, 1, &m, 1, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_safetensors_open(path, &f, msg, sizeof msg), EX_OK);
    assert_null(ex_safetensors_name(f, 1));
    assert_null(ex_safetensors_metadata_key(f, 1));
    assert_null(ex_safetensors_metadata(f, NULL));
    assert_null(ex_safetensors_metadata(f, "absent"));
    FAILS_MSG(ex_safetensors_info(f, NULL, &info, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_safetensors_info(f, "absent", &info, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_safetensors_read(f, "w", data, 3, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_safetensors_read(f, "w", NULL, 8, msg, sizeof msg), EX_ERR_ARG);
    ex_safetensors_close(f);
    unlink(path);
}

static void metrics_logs(void **state)
{
    (void)state;
    ex_metrics_writer *w = NULL;
    ex_metrics_record *rec = calloc(1, sizeof *rec);
    assert_non_null(rec);
    FAILS_MSG(ex_metrics_open(NULL, EX_METRICS_NEW, &w, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_metrics_open("/nonexistent/dir/m.jsonl", EX_METRICS_NEW, &w, msg, sizeof msg),
              EX_ERR_IO);
    assert_null(w);
    assert_false(ex_metrics_needs_header(NULL));
    assert_int_equal(ex_metrics_close(NULL, msg, sizeof msg), EX_OK);
    FAILS_MSG(ex_metrics_sync(NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_metrics_write_header(NULL, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_metrics_write_step(NULL, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_metrics_write_epoch(NULL, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_metrics_write_profile(NULL, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_metrics_write_genotype(NULL, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_metrics_parse_line(NULL, 3, rec, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_metrics_parse_line("{}", 2, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_metrics_read(NULL, NULL, NULL, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_metrics_read("/nonexistent/m.jsonl", NULL, NULL, NULL, msg, sizeof msg),
              EX_ERR_IO);
    FAILS_MSG(ex_metrics_read_from("/nonexistent/m.jsonl", -5, NULL, NULL, NULL, msg, sizeof msg),
              EX_ERR_ARG);
    free(rec);
}

/* The smallest derived network: 8x8x1 images of `classes` classes, C=2, one cell. */
static void tiny_network(ex_network_config *nc, int classes)
{
    ex_network_config_default(nc);
    nc->in_channels = 1;
    nc->height = nc->width = 8;
    nc->classes = classes;
    nc->batch = 2;
    nc->channels = 2;
    nc->layers = 1;
    nc->auxiliary = false;
}

static void searches_and_networks(void **state)
{
    (void)state;
    ex_search_config_init(NULL, sizeof(ex_search_config));
    ex_network_config_init(NULL, sizeof(ex_network_config));
    /* an older program's shorter struct: the defaults are written up to its end, not past */
    ex_search_config two[2];
    memset(two, 0xab, sizeof two);
    size_t old_size = offsetof(ex_search_config, partial_channels);
    ex_search_config_init(&two[0], old_size);
    assert_int_equal(two[0].size, old_size);
    assert_int_equal(two[0].channels, 16);
    for (size_t i = old_size; i < sizeof two; i++)
        assert_int_equal(((const unsigned char *)two)[i], 0xab);
    ex_search_config_init(&two[0], 1); /* below the size field: nothing written */
    assert_int_equal(two[0].size, old_size);
    ex_network_config nets[2];
    memset(nets, 0xab, sizeof nets);
    ex_network_config_init(&nets[0], offsetof(ex_network_config, seed));
    assert_int_equal(nets[0].channels, 36);
    for (size_t i = offsetof(ex_network_config, seed); i < sizeof nets; i++)
        assert_int_equal(((const unsigned char *)nets)[i], 0xab);
    assert_int_equal(ex_search_edges(NULL), 0);
    assert_non_null(ex_search_error(NULL));
    assert_null(ex_search_plan(NULL));
    ex_search_free(NULL);
    float buf[64];
    ex_genotype g;
    assert_int_equal(ex_search_alphas(NULL, buf, buf), EX_ERR_ARG);
    assert_int_equal(ex_search_weights(NULL, buf, buf), EX_ERR_ARG);
    assert_int_equal(ex_search_masks(NULL, buf, buf), EX_ERR_ARG);
    assert_int_equal(ex_search_genotype(NULL, &g), EX_ERR_ARG);
    assert_int_equal(ex_search_load(NULL, "x"), EX_ERR_ARG);
    assert_int_equal(ex_search_save(NULL, "x", NULL), EX_ERR_ARG);
    assert_int_equal(ex_search_step(NULL, buf, NULL, buf, NULL, 0.1f, 1, NULL), EX_ERR_ARG);
    assert_int_equal(ex_search_eval(NULL, buf, NULL, NULL, NULL), EX_ERR_ARG);
    assert_int_equal(ex_search_alloc_count(NULL), 0);
    ex_search_setup none = ex_search_setup_times(NULL);
    assert_true(none.build_ms == 0.0 && none.plan_ms == 0.0 && none.init_ms == 0.0);
    ex_backend *be = cpu();
    ex_search_config c;
    ex_search_config_default(&c);
    ex_search *s = NULL;
    FAILS_MSG(ex_search_new(NULL, be, &s, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_search_new(&c, NULL, &s, msg, sizeof msg), EX_ERR_ARG);
    c.nonfinite_limit = -1;
    FAILS_MSG(ex_search_new(&c, be, &s, msg, sizeof msg), EX_ERR_ARG);
    ex_search_config_default(&c);
    c.recompute = 3;
    FAILS_MSG(ex_search_new(&c, be, &s, msg, sizeof msg), EX_ERR_ARG);
    ex_search_config_default(&c);
    c.layers = 0;
    FAILS_MSG(ex_search_new(&c, be, &s, msg, sizeof msg), EX_ERR_ARG);
    ex_search_config_default(&c);
    c.in_channels = 1;
    c.height = c.width = 8;
    c.classes = 2;
    c.batch = 2;
    c.channels = 2;
    c.layers = 1;
    c.steps = c.multiplier = 1;
    c.ncand = 2;
    c.cand[0] = EX_CAND_SKIP_CONNECT;
    c.cand[1] = EX_CAND_AVG_POOL_3X3;
    /* the size field: unset or from a newer exapt is refused; a program built against an
     * older, shorter struct gets the defaults of the fields it lacks, whatever lies past
     * its end (here fields that would be refused) */
    ex_search_config other = c;
    other.size = 0;
    FAILS_MSG(ex_search_new(&other, be, &s, msg, sizeof msg), EX_ERR_ARG);
    other.size = sizeof other + 8;
    FAILS_MSG(ex_search_new(&other, be, &s, msg, sizeof msg), EX_ERR_ARG);
    other = c;
    other.partial_channels = 3; /* does not divide channels */
    other.nonfinite_limit = -1;
    FAILS_MSG(ex_search_new(&other, be, &s, msg, sizeof msg), EX_ERR_ARG);
    other.size = offsetof(ex_search_config, partial_channels);
    assert_int_equal(ex_search_new(&other, be, &s, msg, sizeof msg), EX_OK);
    ex_search_free(s);
    s = NULL;
    assert_int_equal(ex_search_new(&c, be, &s, msg, sizeof msg), EX_OK);
    float x[2 * 64] = {0};
    int32_t y[2] = {0, 7}; /* 7: outside two classes */
    assert_int_equal(ex_search_step(s, x, y, x, y, 0.1f, 1, NULL), EX_ERR_ARG);
    assert_non_null(strstr(ex_search_error(s), "label"));
    assert_int_equal(ex_search_step(s, NULL, y, x, y, 0.1f, 1, NULL), EX_ERR_ARG);
    assert_int_equal(ex_search_step(s, x, y, x, y, INFINITY, 1, NULL), EX_ERR_ARG);
    assert_int_equal(ex_search_eval(s, x, y, NULL, NULL), EX_ERR_ARG);
    assert_int_not_equal(ex_search_load(s, "/nonexistent/c.safetensors"), EX_OK);
    assert_true(ex_search_error(s)[0] != '\0');
    assert_int_equal(ex_search_load(s, NULL), EX_ERR_ARG);
    assert_int_equal(ex_search_genotype(s, NULL), EX_ERR_ARG);
    ex_search_free(s);

    assert_non_null(ex_network_error(NULL));
    assert_null(ex_network_plan(NULL));
    ex_network_free(NULL);
    assert_int_equal(ex_network_param_count(NULL), 0);
    assert_int_equal(ex_network_load(NULL, "x", true), EX_ERR_ARG);
    assert_int_equal(ex_network_save(NULL, "x", true), EX_ERR_ARG);
    assert_int_equal(ex_network_checkpoint(NULL, "x", "{}"), EX_ERR_ARG);
    assert_int_equal(ex_network_set_drop_path(NULL, 0.1f), EX_ERR_ARG);
    assert_int_equal(ex_network_step(NULL, x, y, 0.1f, NULL), EX_ERR_ARG);
    assert_int_equal(ex_network_eval(NULL, x, y, NULL, NULL), EX_ERR_ARG);
    float logits[4];
    assert_int_equal(ex_network_predict(NULL, x, logits), EX_ERR_ARG);
    ex_network_config nc;
    tiny_network(&nc, 2);
    ex_network *n = NULL;
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &g), EX_OK);
    FAILS_MSG(ex_network_new(NULL, &nc, be, &n, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_network_new(&g, &nc, NULL, &n, msg, sizeof msg), EX_ERR_ARG);
    nc.channels = 3;
    FAILS_MSG(ex_network_new(&g, &nc, be, &n, msg, sizeof msg), EX_ERR_ARG);
    nc.channels = 2;
    nc.label_smoothing = 1.0f;
    FAILS_MSG(ex_network_new(&g, &nc, be, &n, msg, sizeof msg), EX_ERR_ARG);
    nc.label_smoothing = NAN;
    FAILS_MSG(ex_network_new(&g, &nc, be, &n, msg, sizeof msg), EX_ERR_ARG);
    nc.size = 0;
    FAILS_MSG(ex_network_new(&g, &nc, be, &n, msg, sizeof msg), EX_ERR_ARG);
    nc.size = sizeof nc + 1;
    FAILS_MSG(ex_network_new(&g, &nc, be, &n, msg, sizeof msg), EX_ERR_ARG);
    nc.size = offsetof(ex_network_config, label_smoothing); /* an older caller: NAN unread */
    assert_int_equal(ex_network_new(&g, &nc, be, &n, msg, sizeof msg), EX_OK);
    ex_network_free(n);
    n = NULL;
    nc.size = sizeof nc;
    nc.label_smoothing = 0.0f;
    assert_int_equal(ex_network_new(&g, &nc, be, &n, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_network_predict(n, NULL, logits), EX_ERR_ARG);
    assert_int_equal(ex_network_predict(n, x, NULL), EX_ERR_ARG);
    assert_true(ex_network_error(n)[0] != '\0');
    assert_int_equal(ex_network_set_drop_path(n, 1.5f), EX_ERR_ARG);
    assert_int_equal(ex_network_set_drop_path(n, NAN), EX_ERR_ARG);
    assert_int_equal(ex_network_step(n, x, y, 0.1f, NULL), EX_ERR_ARG);
    assert_true(ex_network_error(n)[0] != '\0');
    assert_int_equal(ex_network_step(n, NULL, y, 0.1f, NULL), EX_ERR_ARG);
    assert_int_not_equal(ex_network_load(n, "/nonexistent/n.safetensors", false), EX_OK);
    assert_int_equal(ex_network_save(n, NULL, false), EX_ERR_ARG);
    assert_int_equal(ex_network_checkpoint(n, NULL, NULL), EX_ERR_ARG);
    ex_network_free(n);
    ex_backend_close(be);
}

/* A safetensors file of one tensor and the given metadata (NULL value: no entry). */
static void weights_file(const char *path, const char *format, const char *genotype,
                         const char *network)
{
    float v = 1.0f;
    ex_st_tensor t = {
        .name = "stem.0.weight", .dtype = EX_ST_F32, .ndim = 1, .shape = {1}, .data = &v};
    ex_st_meta meta[3];
    size_t n = 0;
    if (format)
        meta[n++] = (ex_st_meta){"format", format};
    if (genotype)
        meta[n++] = (ex_st_meta){"genotype", genotype};
    if (network)
        meta[n++] = (ex_st_meta){"network", network};
    assert_int_equal(ex_safetensors_save(path, &t, 1, meta, n, msg, sizeof msg), EX_OK);
}

/* A grey PNG of w x h pixels of value v. */
static void png_file(const char *path, int w, int h, uint8_t v)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = PNG_FORMAT_GRAY;
    uint8_t *px = malloc((size_t)w * (size_t)h);
    assert_non_null(px);
    memset(px, v, (size_t)w * (size_t)h);
    assert_true(png_image_write_to_file(&im, path, 0, px, 0, NULL));
    free(px);
}

/* Saved weights opened for inference: the recorded architecture and normalization,
 * classify against predict, training refused, bad files and arguments; the image readers. */
static void deployment(void **state)
{
    (void)state;
    ex_backend *be = cpu();
    ex_genotype g;
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &g), EX_OK);
    ex_network_config nc;
    tiny_network(&nc, 3);
    nc.input.enabled = true;
    nc.input.mean[0] = 0.5f;
    nc.input.std[0] = 0.25f;
    ex_network *n = NULL, *o = NULL;
    assert_int_equal(ex_network_new(&g, &nc, be, &n, msg, sizeof msg), EX_OK);
    char path[] = "/tmp/exapt-deploy-XXXXXX", file[64], other[64];
    assert_non_null(mkdtemp(path));
    snprintf(file, sizeof file, "%s/w.safetensors", path);
    snprintf(other, sizeof other, "%s/x", path);
    assert_int_equal(ex_network_save(n, file, false), EX_OK);

    FAILS_MSG(ex_network_open(NULL, be, 1, &o, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_network_open(file, NULL, 1, &o, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_network_open(file, be, 1, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_network_open(file, be, 0, &o, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_network_open("/nonexistent/w", be, 1, &o, msg, sizeof msg), EX_ERR_IO);
    weights_file(other, NULL, NULL, NULL);
    FAILS_MSG(ex_network_open(other, be, 1, &o, msg, sizeof msg), EX_ERR_FORMAT);
    weights_file(other, "exapt-network", "DARTS_V2", NULL); /* before 0.2.0 */
    FAILS_MSG(ex_network_open(other, be, 1, &o, msg, sizeof msg), EX_ERR_FORMAT);
    assert_non_null(strstr(msg, "0.2.0"));
    weights_file(other, "exapt-network", "not a genotype", "{}");
    FAILS_MSG(ex_network_open(other, be, 1, &o, msg, sizeof msg), EX_ERR_FORMAT);
    char text[EX_GENOTYPE_TEXT_MAX];
    ex_genotype_format(&g, text, sizeof text);
    weights_file(other, "exapt-network", text, "{\"in_channels\":1}");
    FAILS_MSG(ex_network_open(other, be, 1, &o, msg, sizeof msg), EX_ERR_FORMAT);
    weights_file(other, "exapt-network", text,
                 "{\"in_channels\":1,\"height\":8,\"width\":8,\"classes\":3,\"channels\":2,"
                 "\"layers\":1,\"stem_multiplier\":3,\"auxiliary\":false,\"mean\":[0.5],"
                 "\"std\":[0]}");
    FAILS_MSG(ex_network_open(other, be, 1, &o, msg, sizeof msg), EX_ERR_FORMAT);
    weights_file(other, "exapt-network", text, /* beyond exapt train's bounds */
                 "{\"in_channels\":1,\"height\":8,\"width\":8,\"classes\":3,\"channels\":5000,"
                 "\"layers\":1,\"stem_multiplier\":3,\"auxiliary\":false}");
    FAILS_MSG(ex_network_open(other, be, 1, &o, msg, sizeof msg), EX_ERR_FORMAT);
    /* within them but huge, over a small file: refused before anything is built */
    assert_int_equal(ex_network_save(n, other, false), EX_OK);
    ex_safetensors *sf = NULL;
    assert_int_equal(ex_safetensors_open(other, &sf, msg, sizeof msg), EX_OK);
    size_t nt = ex_safetensors_count(sf);
    ex_st_tensor *ts = calloc(nt, sizeof *ts);
    void **bufs = calloc(nt, sizeof *bufs);
    assert_non_null(ts);
    assert_non_null(bufs);
    for (size_t i = 0; i < nt; i++) {
        ex_st_info info;
        ts[i].name = ex_safetensors_name(sf, i);
        assert_int_equal(ex_safetensors_info(sf, ts[i].name, &info, msg, sizeof msg), EX_OK);
        bufs[i] = malloc(info.nbytes + 1);
        assert_int_equal(ex_safetensors_read(sf, ts[i].name, bufs[i], info.nbytes, msg, sizeof msg),
                         EX_OK);
        ts[i].dtype = info.dtype;
        ts[i].ndim = info.ndim;
        memcpy(ts[i].shape, info.shape, sizeof ts[i].shape);
        ts[i].data = bufs[i];
    }
    ex_st_meta huge[3] = {{"format", "exapt-network"},
                          {"genotype", text},
                          {"network", "{\"in_channels\":1,\"height\":8,\"width\":8,\"classes\":3,"
                                      "\"channels\":4096,\"layers\":1000,\"stem_multiplier\":64,"
                                      "\"auxiliary\":false}"}};
    char bigger[80];
    snprintf(bigger, sizeof bigger, "%s/huge", path);
    assert_int_equal(ex_safetensors_save(bigger, ts, nt, huge, 3, msg, sizeof msg), EX_OK);
    FAILS_MSG(ex_network_open(bigger, be, 1, &o, msg, sizeof msg), EX_ERR_FORMAT);
    assert_non_null(strstr(msg, "do not fit"));
    remove(bigger);
    for (size_t i = 0; i < nt; i++)
        free(bufs[i]);
    free(bufs);
    free(ts);
    ex_safetensors_close(sf);
    weights_file(other, "exapt-network", text, /* the architecture, but not its tensors */
                 "{\"in_channels\":1,\"height\":8,\"width\":8,\"classes\":3,\"channels\":2,"
                 "\"layers\":1,\"stem_multiplier\":3,\"auxiliary\":false}");
    FAILS_MSG(ex_network_open(other, be, 1, &o, msg, sizeof msg), EX_ERR_FORMAT);
    assert_null(o);

    assert_int_equal(ex_network_open(file, be, 3, &o, msg, sizeof msg), EX_OK);
    ex_network_config got;
    ex_network_config_default(&got);
    ex_network_get_config(o, &got);
    ex_network_get_config(NULL, &got);
    ex_network_get_config(o, NULL);
    assert_int_equal(got.height, 8);
    assert_int_equal(got.classes, 3);
    assert_int_equal(got.eval_batch, 3);
    assert_true(got.input.enabled);
    assert_true(got.input.mean[0] == 0.5f && got.input.std[0] == 0.25f);

    /* classify normalizes and takes the softmax of what predict gives */
    float px[2 * 64], x[2 * 64], logits[2 * 3], probs[2 * 3];
    for (int i = 0; i < 2 * 64; i++) {
        px[i] = (float)((i * 37) % 101) / 100.0f;
        x[i] = (px[i] - 0.5f) / 0.25f;
    }
    assert_int_equal(ex_network_predict(n, x, logits), EX_OK);
    assert_int_equal(ex_network_classify(NULL, px, 2, probs), EX_ERR_ARG);
    assert_int_equal(ex_network_classify(o, NULL, 2, probs), EX_ERR_ARG);
    assert_int_equal(ex_network_classify(o, px, 2, NULL), EX_ERR_ARG);
    assert_int_equal(ex_network_classify(o, px, 0, probs), EX_ERR_ARG);
    assert_int_equal(ex_network_classify(o, px, 4, probs), EX_ERR_ARG);
    assert_true(ex_network_error(o)[0] != '\0');
    assert_int_equal(ex_network_classify(o, px, 2, probs), EX_OK);
    for (int i = 0; i < 2; i++) {
        double sum = 0, top = logits[3 * i];
        for (int k = 1; k < 3; k++)
            top = fmax(top, logits[3 * i + k]);
        for (int k = 0; k < 3; k++)
            sum += exp(logits[3 * i + k] - top);
        for (int k = 0; k < 3; k++)
            assert_float_equal(probs[3 * i + k], exp(logits[3 * i + k] - top) / sum, 1e-5);
    }

    /* an opened network has no training pass */
    int32_t y[3] = {0, 1, 2};
    assert_int_equal(ex_network_step(o, x, y, 0.1f, NULL), EX_ERR_STATE);
    assert_int_equal(ex_network_set_drop_path(o, 0.1f), EX_ERR_STATE);
    assert_int_equal(ex_network_checkpoint(o, other, NULL), EX_ERR_STATE);
    assert_int_equal(ex_network_save(o, other, true), EX_ERR_STATE);
    assert_int_equal(ex_network_save(o, other, false), EX_OK);

    /* int8: quantized from the opened network, opened again; inference only */
    char q8[80];
    snprintf(q8, sizeof q8, "%s/int8.safetensors", path);
    assert_int_equal(ex_network_quantize(NULL, px, 2, q8), EX_ERR_ARG);
    assert_int_equal(ex_network_quantize(o, NULL, 2, q8), EX_ERR_ARG);
    assert_int_equal(ex_network_quantize(o, px, 0, q8), EX_ERR_ARG);
    assert_int_equal(ex_network_quantize(o, px, 2, NULL), EX_ERR_ARG);
    assert_int_equal(ex_network_quantize(o, px, 2, "/nonexistent/q.safetensors"), EX_ERR_IO);
    assert_int_equal(ex_network_quantize(o, px, 2, q8), EX_OK);
    ex_network *q = NULL;
    assert_int_equal(ex_network_open(q8, be, 3, &q, msg, sizeof msg), EX_OK);
    float qp[6];
    assert_int_equal(ex_network_classify(q, px, 2, qp), EX_OK);
    for (int i = 0; i < 2; i++)
        assert_float_equal(qp[3 * i] + qp[3 * i + 1] + qp[3 * i + 2], 1.0, 1e-5);
    assert_int_equal(ex_network_quantize(q, px, 2, other), EX_ERR_STATE);
    assert_int_equal(ex_network_export_onnx(q, other), EX_ERR_STATE);
    assert_int_equal(ex_network_save(q, other, false), EX_ERR_STATE);
    assert_int_equal(ex_network_load(q, q8, false), EX_ERR_STATE);
    assert_int_equal(ex_network_step(q, x, y, 0.1f, NULL), EX_ERR_STATE);
    ex_network_free(q);

    assert_int_equal(ex_network_export_onnx(NULL, other), EX_ERR_ARG);
    assert_int_equal(ex_network_export_onnx(o, NULL), EX_ERR_ARG);
    assert_int_equal(ex_network_export_onnx(o, "/nonexistent/m.onnx"), EX_ERR_IO);
    assert_true(ex_network_error(o)[0] != '\0');

    /* the image readers */
    ex_dataset *ds = NULL;
    float img[64];
    char png[80];
    snprintf(png, sizeof png, "%s/i.png", path);
    png_file(png, 8, 8, 51);
    FAILS_MSG(ex_images_load(NULL, &ds, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_images_load(file, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_images_load("/nonexistent/i", &ds, msg, sizeof msg), EX_ERR_IO);
    FAILS_MSG(ex_images_load(png, &ds, msg, sizeof msg), EX_ERR_FORMAT);
    assert_null(ds);
    FAILS_MSG(ex_image_load_png(NULL, 1, 8, 8, img, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_image_load_png(png, 2, 8, 8, img, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_image_load_png(png, 1, 0, 8, img, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_image_load_png(png, 1, 8, 8, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_image_load_png("/nonexistent/i.png", 1, 8, 8, img, msg, sizeof msg), EX_ERR_IO);
    FAILS_MSG(ex_image_load_png(file, 1, 8, 8, img, msg, sizeof msg), EX_ERR_FORMAT);
    FAILS_MSG(ex_image_load_png(png, 1, 8, 9, img, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(strstr(msg, "8 x 8"));
    assert_int_equal(ex_image_load_png(png, 1, 8, 8, img, msg, sizeof msg), EX_OK);
    assert_float_equal(img[0], 0.2, 1e-6);
    float rgb[3 * 64];
    assert_int_equal(ex_image_load_png(png, 3, 8, 8, rgb, msg, sizeof msg), EX_OK);
    assert_float_equal(rgb[0], 0.2, 1e-6); /* grey repeated in every plane */
    assert_float_equal(rgb[2 * 64 + 63], 0.2, 1e-6);
    /* truncated: the header read, the pixels gone */
    FILE *f = fopen(png, "r+b");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), 40), 0);
    fclose(f);
    FAILS_MSG(ex_image_load_png(png, 1, 8, 8, img, msg, sizeof msg), EX_ERR_FORMAT);

    remove(file);
    remove(other);
    remove(png);
    rmdir(path);
    ex_network_free(o);
    ex_network_free(n);
    ex_backend_close(be);
}

/* The crash-safe writer: bad arguments, a directory that is not there (the old file is
 * kept), and a replacement that holds exactly the new bytes. */
static void files(void **state)
{
    (void)state;
    FAILS_MSG(ex_file_write_atomic(NULL, "x", 1, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_file_write_atomic("/tmp/x", NULL, 1, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_file_write_atomic("/nonexistent/x", "x", 1, msg, sizeof msg), EX_ERR_IO);
    char path[] = "/tmp/exapt-file-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ex_file_write_atomic(path, "old", 3, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_file_write_atomic(path, "new!", 4, msg, sizeof msg), EX_OK);
    char got[8] = {0};
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(got, 1, sizeof got, f), 4);
    fclose(f);
    assert_string_equal(got, "new!");
    assert_int_equal(remove(path), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(backend_and_names),
        cmocka_unit_test(context_and_tensors),
        cmocka_unit_test(plans),
        cmocka_unit_test(data_parallel),
        cmocka_unit_test(datasets_and_loaders),
        cmocka_unit_test(genotypes),
        cmocka_unit_test(safetensors_files),
        cmocka_unit_test(metrics_logs),
        cmocka_unit_test(files),
        cmocka_unit_test(searches_and_networks),
        cmocka_unit_test(deployment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
