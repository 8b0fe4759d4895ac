/* The op suite: every forward op of the catalogue against a double-precision reference
 * (tests/ref.c) on odd shapes and non-contiguous views, every gradient against central
 * differences of that reference, and the quantized ops bit for bit against an integer
 * reference (tests/ops_quant.c), on the backend named by --backend. At the end every op
 * of the catalogue must have run in some plan.
 *
 *   test_ops --backend cpu|cpu-ref|vulkan|cuda
 *
 * A backend that cannot be opened is a failure, never a skip. OPS_VERBOSE=1 prints every
 * error measure next to its bound. OPS_FILTER=PATTERN runs only the tests whose name
 * matches (cmocka's * and ? wildcards, e.g. OPS_FILTER=family_conv): for developing one
 * family; the coverage test then fails unless it matches too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops_harness.h"

/* Appends " name" of op to a list. */
static void list_op(char *list, size_t size, int op)
{
    size_t len = strlen(list);
    snprintf(list + len, size - len, " %s", ex_op_name((ex_op)op));
}

/* Runs last: every op of the catalogue must have appeared in a plan (the backward ops
 * through the gradient checks), and every differentiable op must have had its gradient
 * checked by some case. */
static void coverage(void **state)
{
    suite *s = *state;
    char missing[2048] = "", nograd[2048] = "";
    int n = 0, ng = 0;
    for (int op = 0; op < EX_OP_COUNT; op++) {
        if (!s->seen[op]) {
            n++;
            list_op(missing, sizeof missing, op);
        }
        if (ex_op_differentiable((ex_op)op) && !s->grad_checked[op]) {
            ng++;
            list_op(nograd, sizeof nograd, op);
        }
    }
    if (s->verbose) {
        print_message("worst forward NMSE / bound per op:\n");
        for (int op = 0; op < EX_OP_COUNT; op++)
            if (s->worst_fwd[op] > 0)
                print_message("  %-22s %.3g\n", ex_op_name((ex_op)op), s->worst_fwd[op]);
        print_message("worst gradient NMSE %.3g (%s), bound %.3g\n", s->worst_grad,
                      s->worst_grad_case ? s->worst_grad_case : "-", GRAD_TOL);
    }
    if (n || ng)
        fail_msg("on backend %s, %d ops never ran:%s; %d differentiable ops without a gradient "
                 "check:%s",
                 s->backend_name, n, missing, ng, nograd);
}

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s --backend NAME   (cpu, cpu-ref, vulkan, cuda)\n", argv0);
    return 2;
}

int main(int argc, char **argv)
{
    const char *name = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
            name = argv[++i];
        else if (strncmp(argv[i], "--backend=", 10) == 0)
            name = argv[i] + 10;
        else
            return usage(argv[0]);
    }
    if (!name || !*name)
        return usage(argv[0]);

    suite s = {.backend_name = name};
    const char *v = getenv("OPS_VERBOSE");
    s.verbose = v && *v && strcmp(v, "0") != 0;
    char msg[512] = "";
    ex_status st = ex_backend_open(name, &s.be, msg, sizeof msg);
    if (st != EX_OK) {
        fprintf(stderr, "test_ops: cannot open backend \"%s\": %s (%s)\n", name, ex_status_str(st),
                msg);
        return 1;
    }

    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(family_elementwise, &s),
        cmocka_unit_test_prestate(family_reduce, &s),
        cmocka_unit_test_prestate(family_softmax, &s),
        cmocka_unit_test_prestate(softmax_node_errors, &s),
        cmocka_unit_test_prestate(family_conv, &s),
        cmocka_unit_test_prestate(conv_flag_errors, &s),
        cmocka_unit_test_prestate(bn_flag_errors, &s),
        cmocka_unit_test_prestate(bn_sync_flag_errors, &s),
        cmocka_unit_test_prestate(family_gemm, &s),
        cmocka_unit_test_prestate(gemm_node_errors, &s),
        cmocka_unit_test_prestate(family_pool, &s),
        cmocka_unit_test_prestate(family_batchnorm, &s),
        cmocka_unit_test_prestate(family_sync_batchnorm, &s),
        cmocka_unit_test_prestate(family_nas, &s),
        cmocka_unit_test_prestate(search_node_errors, &s),
        cmocka_unit_test_prestate(family_optim, &s),
        cmocka_unit_test_prestate(sgd_clip_node_errors, &s),
        cmocka_unit_test_prestate(update_groups, &s),
        cmocka_unit_test_prestate(family_random, &s),
        cmocka_unit_test_prestate(family_quant, &s),
        cmocka_unit_test_prestate(qconv_rq_errors, &s),
        cmocka_unit_test_prestate(qconcat_node_errors, &s),
        cmocka_unit_test_prestate(qew_node_errors, &s),
        cmocka_unit_test_prestate(qconv_window_errors, &s),
        cmocka_unit_test_prestate(coverage, &s),
    };
    const char *filter = getenv("OPS_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    int failed = cmocka_run_group_tests_name(name, tests, NULL, NULL);
    ex_backend_close(s.be);
    return failed ? 1 : 0;
}
