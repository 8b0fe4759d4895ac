/* Genotypes: DARTS's derivation rule on hand-made and random weights (against an
 * independent stable-sort implementation), the published cells' exact text, both text
 * forms and their parsers on good and broken input, and crash-safe files. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exapt/genotype.h"

/* The strings DARTS's genotypes.py gives for its two cells, as Python prints them. */
static const char darts_v2_text[] =
    "Genotype(normal=[('sep_conv_3x3', 0), ('sep_conv_3x3', 1), ('sep_conv_3x3', 0), "
    "('sep_conv_3x3', 1), ('sep_conv_3x3', 1), ('skip_connect', 0), ('skip_connect', 0), "
    "('dil_conv_3x3', 2)], normal_concat=[2, 3, 4, 5], reduce=[('max_pool_3x3', 0), "
    "('max_pool_3x3', 1), ('skip_connect', 2), ('max_pool_3x3', 1), ('max_pool_3x3', 0), "
    "('skip_connect', 2), ('skip_connect', 2), ('max_pool_3x3', 1)], reduce_concat=[2, 3, 4, "
    "5])";
static const char darts_v1_text[] =
    "Genotype(normal=[('sep_conv_3x3', 1), ('sep_conv_3x3', 0), ('skip_connect', 0), "
    "('sep_conv_3x3', 1), ('skip_connect', 0), ('sep_conv_3x3', 1), ('sep_conv_3x3', 0), "
    "('skip_connect', 2)], normal_concat=[2, 3, 4, 5], reduce=[('max_pool_3x3', 0), "
    "('max_pool_3x3', 1), ('skip_connect', 2), ('max_pool_3x3', 0), ('max_pool_3x3', 0), "
    "('skip_connect', 2), ('skip_connect', 2), ('avg_pool_3x3', 0)], reduce_concat=[2, 3, 4, "
    "5])";

/* DARTS's PRIMITIVES order. */
static const ex_cand darts_cands[8] = {
    EX_CAND_NONE,         EX_CAND_MAX_POOL_3X3, EX_CAND_AVG_POOL_3X3, EX_CAND_SKIP_CONNECT,
    EX_CAND_SEP_CONV_3X3, EX_CAND_SEP_CONV_5X5, EX_CAND_DIL_CONV_3X3, EX_CAND_DIL_CONV_5X5,
};

static void assert_same(const ex_genotype *a, const ex_genotype *b)
{
    char ta[EX_GENOTYPE_TEXT_MAX], tb[EX_GENOTYPE_TEXT_MAX];
    assert_int_equal(ex_genotype_format(a, ta, sizeof ta), EX_OK);
    assert_int_equal(ex_genotype_format(b, tb, sizeof tb), EX_OK);
    assert_string_equal(ta, tb);
    assert_int_equal(a->steps, b->steps);
}

/* ---- names ---- */

static void candidate_names(void **state)
{
    (void)state;
    const char *want[EX_CAND_COUNT] = {
        "none",         "max_pool_3x3", "avg_pool_3x3", "skip_connect", "sep_conv_3x3",
        "sep_conv_5x5", "dil_conv_3x3", "dil_conv_5x5", "sep_conv_7x7", "conv_7x1_1x7"};
    for (int c = 0; c < EX_CAND_COUNT; c++) {
        assert_string_equal(ex_cand_name((ex_cand)c), want[c]);
        assert_int_equal(ex_cand_parse(want[c]), c);
    }
    assert_string_equal(ex_cand_name(EX_CAND_COUNT), "?");
    assert_int_equal(ex_cand_parse("sep_conv_3X3"), -1);
    assert_int_equal(ex_cand_parse(""), -1);
    assert_int_equal(ex_cand_parse(NULL), -1);
}

/* ---- built-ins ---- */

static void published_cells(void **state)
{
    (void)state;
    ex_genotype g;
    char buf[EX_GENOTYPE_TEXT_MAX];
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &g), EX_OK);
    assert_int_equal(ex_genotype_format(&g, buf, sizeof buf), EX_OK);
    assert_string_equal(buf, darts_v2_text);
    assert_int_equal(ex_genotype_builtin("DARTS", &g), EX_OK);
    assert_int_equal(ex_genotype_format(&g, buf, sizeof buf), EX_OK);
    assert_string_equal(buf, darts_v2_text);
    assert_int_equal(ex_genotype_builtin("DARTS_V1", &g), EX_OK);
    assert_int_equal(ex_genotype_format(&g, buf, sizeof buf), EX_OK);
    assert_string_equal(buf, darts_v1_text);
    assert_int_equal(ex_genotype_builtin("darts_v2", &g), EX_ERR_ARG);
    assert_int_equal(ex_genotype_builtin(NULL, &g), EX_ERR_ARG);
    const char *const *names = ex_genotype_builtin_names();
    int n = 0;
    for (; names[n]; n++)
        assert_int_equal(ex_genotype_builtin(names[n], &g), EX_OK);
    assert_int_equal(n, 3);
}

/* ---- derivation ---- */

static int edges_of(int steps)
{
    return steps * (steps + 3) / 2;
}

/* Weights whose derivation is g: the kept edges get their op at 0.5 and 0.4, other ops
 * 0.01, dropped edges 0.3 on every op, and `none` always at 0.9, above everything. */
static void weights_for(const ex_genotype_edge *cell, int steps, float *w)
{
    int e = 0;
    for (int i = 0; i < steps; i++)
        for (int j = 0; j < 2 + i; j++, e++) {
            float *row = w + e * 8;
            int keep = cell[2 * i].input == j ? 0 : cell[2 * i + 1].input == j ? 1 : -1;
            for (int k = 0; k < 8; k++)
                row[k] = keep < 0 ? 0.3f : 0.01f;
            if (keep >= 0)
                row[cell[2 * i + keep].op] = keep == 0 ? 0.5f : 0.4f;
            row[0] = 0.9f;
        }
}

static void derive_reproduces_darts_v2(void **state)
{
    (void)state;
    ex_genotype want, got;
    float wn[14 * 8], wr[14 * 8];
    char msg[256];
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &want), EX_OK);
    weights_for(want.normal, 4, wn);
    weights_for(want.reduce, 4, wr);
    assert_int_equal(ex_genotype_derive(wn, wr, 4, 4, 8, darts_cands, &got, msg, sizeof msg),
                     EX_OK);
    assert_same(&want, &got);
}

/* `none` dominating an edge never decides: ranking and op use the non-none weights. */
static void derive_none_dominates(void **state)
{
    (void)state;
    float w[5 * 8] = {0};
    /* node 0: edge 0 is almost all none, its best real op skip_connect (0.06);
     * edge 1 has sep_conv_5x5 at 0.05 and none at 0.01 */
    const float e0[8] = {0.9f, 0.01f, 0.01f, 0.06f, 0.005f, 0.005f, 0.005f, 0.005f};
    const float e1[8] = {0.01f, 0.02f, 0.02f, 0.02f, 0.02f, 0.05f, 0.02f, 0.02f};
    memcpy(w, e0, sizeof e0);
    memcpy(w + 8, e1, sizeof e1);
    /* node 1: edge 2 (input 0) none 0.99 with dil_conv_5x5 0.004; edge 3 (input 1)
     * avg_pool 0.3; edge 4 (input 2) none 0.97 with max_pool 0.02 */
    for (int k = 0; k < 8; k++)
        w[16 + k] = w[32 + k] = 0.001f;
    w[16] = 0.99f;
    w[16 + 7] = 0.004f;
    for (int k = 0; k < 8; k++)
        w[24 + k] = 0.1f;
    w[24 + 2] = 0.3f;
    w[32] = 0.97f;
    w[32 + 1] = 0.02f;
    ex_genotype g;
    char msg[256], buf[EX_GENOTYPE_TEXT_MAX];
    assert_int_equal(ex_genotype_derive(w, w, 2, 2, 8, darts_cands, &g, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_genotype_format(&g, buf, sizeof buf), EX_OK);
    assert_string_equal(buf, "Genotype(normal=[('skip_connect', 0), ('sep_conv_5x5', 1), "
                             "('avg_pool_3x3', 1), ('max_pool_3x3', 2)], normal_concat=[2, 3], "
                             "reduce=[('skip_connect', 0), ('sep_conv_5x5', 1), "
                             "('avg_pool_3x3', 1), ('max_pool_3x3', 2)], reduce_concat=[2, 3])");
}

/* The collapse guard: the weakest parameter-free choices of the normal cell give way to
 * their edges' strongest parametric candidates, weakest first, until the cap holds. */
static void derive_cap_param_free(void **state)
{
    (void)state;
    float w[5 * 8];
    for (int k = 0; k < 8; k++) {
        w[k] = k == 0 ? 0.9f : k == 3 ? 0.06f : k == 5 ? 0.012f : 0.005f;
        w[8 + k] = k == 5 ? 0.05f : 0.02f;
        w[16 + k] = k == 0 ? 0.99f : 0.001f;
        w[24 + k] = k == 2 ? 0.3f : k == 6 ? 0.2f : 0.1f;
        w[32 + k] = k == 0 ? 0.97f : k == 1 ? 0.02f : 0.001f;
    }
    ex_genotype g, before;
    char msg[256], buf[EX_GENOTYPE_TEXT_MAX];
    assert_int_equal(ex_genotype_derive(w, w, 2, 2, 8, darts_cands, &g, msg, sizeof msg), EX_OK);
    before = g;
    /* three free: skip_connect 0.06, avg_pool 0.3, max_pool 0.02 */
    assert_int_equal(ex_genotype_cap_param_free(&g, w, 8, darts_cands, 3, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_genotype_cap_param_free(&g, w, 8, darts_cands, -1, msg, sizeof msg), EX_OK);
    assert_same(&g, &before);
    assert_int_equal(ex_genotype_cap_param_free(&g, w, 8, darts_cands, 1, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_genotype_format(&g, buf, sizeof buf), EX_OK);
    assert_string_equal(buf, "Genotype(normal=[('sep_conv_5x5', 0), ('sep_conv_5x5', 1), "
                             "('avg_pool_3x3', 1), ('sep_conv_3x3', 2)], normal_concat=[2, 3], "
                             "reduce=[('skip_connect', 0), ('sep_conv_5x5', 1), "
                             "('avg_pool_3x3', 1), ('max_pool_3x3', 2)], reduce_concat=[2, 3])");
    assert_int_equal(ex_genotype_cap_param_free(&g, w, 8, darts_cands, 0, msg, sizeof msg), EX_OK);
    assert_int_equal(g.normal[2].op, EX_CAND_DIL_CONV_3X3);
    assert_int_equal(g.normal[2].input, 1);
    /* a space without parametric candidates cannot meet a cap */
    const ex_cand free_only[4] = {EX_CAND_NONE, EX_CAND_MAX_POOL_3X3, EX_CAND_AVG_POOL_3X3,
                                  EX_CAND_SKIP_CONNECT};
    float w4[5 * 4];
    for (int k = 0; k < 20; k++)
        w4[k] = 0.25f;
    assert_int_equal(ex_genotype_derive(w4, w4, 2, 2, 4, free_only, &g, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_genotype_cap_param_free(&g, w4, 4, free_only, 2, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_non_null(strstr(msg, "no parametric candidate"));
    assert_int_equal(ex_genotype_cap_param_free(NULL, w, 8, darts_cands, 1, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_true(ex_cand_is_parametric(EX_CAND_CONV_7X1_1X7));
    assert_false(ex_cand_is_parametric(EX_CAND_SKIP_CONNECT));
    assert_false(ex_cand_is_parametric(EX_CAND_COUNT));
}

/* Ties: equal edges keep input order, equal ops the first column. */
static void derive_ties(void **state)
{
    (void)state;
    float w[5 * 8];
    for (int i = 0; i < 5 * 8; i++)
        w[i] = 0.125f;
    ex_genotype g;
    char msg[256], buf[EX_GENOTYPE_TEXT_MAX];
    assert_int_equal(ex_genotype_derive(w, w, 2, 1, 8, darts_cands, &g, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_genotype_format(&g, buf, sizeof buf), EX_OK);
    assert_string_equal(buf, "Genotype(normal=[('max_pool_3x3', 0), ('max_pool_3x3', 1), "
                             "('max_pool_3x3', 0), ('max_pool_3x3', 1)], normal_concat=[3], "
                             "reduce=[('max_pool_3x3', 0), ('max_pool_3x3', 1), "
                             "('max_pool_3x3', 0), ('max_pool_3x3', 1)], reduce_concat=[3])");
    /* node 1: edges 1 and 2 tie above edge 0; the best op of edge 2 ties between columns
     * 3 and 5 */
    w[24 + 3] = w[24 + 5] = 0.5f;
    w[32 + 3] = w[32 + 5] = 0.5f;
    assert_int_equal(ex_genotype_derive(w, w, 2, 2, 8, darts_cands, &g, msg, sizeof msg), EX_OK);
    assert_int_equal(g.normal[2].input, 1);
    assert_int_equal(g.normal[3].input, 2);
    assert_int_equal(g.normal[2].op, EX_CAND_SKIP_CONNECT);
    assert_int_equal(g.normal[3].op, EX_CAND_SKIP_CONNECT);
    /* a higher later edge goes first */
    w[32 + 6] = 0.6f;
    assert_int_equal(ex_genotype_derive(w, w, 2, 2, 8, darts_cands, &g, msg, sizeof msg), EX_OK);
    assert_int_equal(g.normal[2].input, 2);
    assert_int_equal(g.normal[2].op, EX_CAND_DIL_CONV_3X3);
    assert_int_equal(g.normal[3].input, 1);
}

/* Columns map to candidates through cands, `none` anywhere (or absent). */
static void derive_custom_columns(void **state)
{
    (void)state;
    const ex_cand cands[3] = {EX_CAND_SEP_CONV_7X7, EX_CAND_NONE, EX_CAND_CONV_7X1_1X7};
    const float w[2 * 3] = {0.2f, 0.7f, 0.1f, 0.1f, 0.6f, 0.3f};
    ex_genotype g;
    char msg[256];
    assert_int_equal(ex_genotype_derive(w, w, 1, 1, 3, cands, &g, msg, sizeof msg), EX_OK);
    assert_int_equal(g.normal[0].input, 1);
    assert_int_equal(g.normal[0].op, EX_CAND_CONV_7X1_1X7);
    assert_int_equal(g.normal[1].input, 0);
    assert_int_equal(g.normal[1].op, EX_CAND_SEP_CONV_7X7);
    assert_int_equal(g.n_normal_concat, 1);
    assert_int_equal(g.normal_concat[0], 2);
}

/* The rule written the obvious way: Python's stable sort on -max, top two. */
static void reference_parse(const float *w, int steps, int ncand, const ex_cand *cands,
                            ex_genotype_edge *out)
{
    int start = 0;
    for (int i = 0; i < steps; i++) {
        int n = 2 + i, idx[16];
        float key[16];
        for (int j = 0; j < n; j++) {
            idx[j] = j;
            key[j] = -INFINITY;
            for (int k = 0; k < ncand; k++)
                if (cands[k] != EX_CAND_NONE && w[(start + j) * ncand + k] > key[j])
                    key[j] = w[(start + j) * ncand + k];
        }
        for (int a = 1; a < n; a++) /* insertion sort: stable */
            for (int b = a; b > 0 && key[idx[b]] > key[idx[b - 1]]; b--) {
                int t = idx[b];
                idx[b] = idx[b - 1];
                idx[b - 1] = t;
            }
        for (int r = 0; r < 2; r++) {
            int j = idx[r], best = -1;
            for (int k = 0; k < ncand; k++)
                if (cands[k] != EX_CAND_NONE &&
                    (best < 0 || w[(start + j) * ncand + k] > w[(start + j) * ncand + best]))
                    best = k;
            out[2 * i + r] = (ex_genotype_edge){cands[best], j};
        }
        start += n;
    }
}

static void derive_random_against_reference(void **state)
{
    (void)state;
    uint64_t seed = 12345;
    float w[44 * 8];
    for (int trial = 0; trial < 2000; trial++) {
        int steps = 1 + trial % EX_MAX_STEPS, levels = trial % 3 == 0 ? 3 : 1000;
        int n = edges_of(steps) * 8;
        for (int i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            w[i] = (float)((seed >> 33) % (uint64_t)levels) / (float)levels; /* ties often */
        }
        ex_genotype g;
        ex_genotype_edge want[2 * EX_MAX_STEPS];
        char msg[256];
        assert_int_equal(
            ex_genotype_derive(w, w, steps, steps, 8, darts_cands, &g, msg, sizeof msg), EX_OK);
        reference_parse(w, steps, 8, darts_cands, want);
        for (int e = 0; e < 2 * steps; e++) {
            assert_int_equal(g.normal[e].op, want[e].op);
            assert_int_equal(g.normal[e].input, want[e].input);
            assert_int_equal(g.reduce[e].input, want[e].input);
        }
        assert_int_equal(ex_genotype_validate(&g, msg, sizeof msg), EX_OK);
    }
}

static void derive_rejects(void **state)
{
    (void)state;
    float w[14 * 8];
    for (int i = 0; i < 14 * 8; i++)
        w[i] = 0.1f;
    ex_genotype g;
    char msg[256];
    const ex_cand nones[2] = {EX_CAND_NONE, EX_CAND_NONE};
    const ex_cand bogus[2] = {EX_CAND_SKIP_CONNECT, (ex_cand)42};
    assert_int_equal(ex_genotype_derive(w, w, 0, 1, 8, darts_cands, &g, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_int_equal(ex_genotype_derive(w, w, 9, 1, 8, darts_cands, &g, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_int_equal(ex_genotype_derive(w, w, 4, 5, 8, darts_cands, &g, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_int_equal(ex_genotype_derive(w, w, 4, 0, 8, darts_cands, &g, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_int_equal(ex_genotype_derive(w, w, 4, 4, 0, darts_cands, &g, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_int_equal(ex_genotype_derive(w, w, 4, 4, 2, nones, &g, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(strstr(msg, "none"));
    assert_int_equal(ex_genotype_derive(w, w, 4, 4, 2, bogus, &g, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_genotype_derive(NULL, w, 4, 4, 8, darts_cands, &g, msg, sizeof msg),
                     EX_ERR_ARG);
    w[13 * 8 + 7] = NAN;
    assert_int_equal(ex_genotype_derive(w, w, 4, 4, 8, darts_cands, &g, msg, sizeof msg),
                     EX_ERR_NONFINITE);
    assert_non_null(strstr(msg, "edge 13"));
    w[13 * 8 + 7] = INFINITY;
    assert_int_equal(ex_genotype_derive(w, w, 4, 4, 8, darts_cands, &g, NULL, 0), EX_ERR_NONFINITE);
}

/* ---- text and JSON forms ---- */

static void text_forms_parse(void **state)
{
    (void)state;
    ex_genotype v2, g;
    char msg[256];
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &v2), EX_OK);
    /* as printed, as written in genotypes.py, and with the liberties Python allows */
    const char *forms[] = {
        darts_v2_text,
        "DARTS_V2_is_not_here",
        "Genotype(\n    normal=[('sep_conv_3x3', 0), ('sep_conv_3x3', 1), ('sep_conv_3x3', 0),"
        " ('sep_conv_3x3', 1),\n            ('sep_conv_3x3', 1),\n            ('skip_connect', 0),"
        " ('skip_connect', 0), ('dil_conv_3x3', 2)],\n    normal_concat=range(2, 6),\n"
        "    reduce=[('max_pool_3x3', 0), ('max_pool_3x3', 1), ('skip_connect', 2), "
        "('max_pool_3x3', 1),\n            ('max_pool_3x3', 0),\n            ('skip_connect', 2),"
        " ('skip_connect', 2), ('max_pool_3x3', 1)],\n    reduce_concat=range(2,6),\n)\n",
        "  Genotype( reduce_concat = [2,3,4,5,] , reduce=[(\"max_pool_3x3\",0),(\"max_pool_3x3\","
        "1),(\"skip_connect\",2),(\"max_pool_3x3\",1),(\"max_pool_3x3\",0),(\"skip_connect\",2),"
        "(\"skip_connect\",2),(\"max_pool_3x3\",1,),], normal=[('sep_conv_3x3',0),('sep_conv_3x3'"
        ",1),('sep_conv_3x3',0),('sep_conv_3x3',1),('sep_conv_3x3',1),('skip_connect',0),"
        "('skip_connect',0),('dil_conv_3x3',2)],normal_concat=range(2, 6, ))\t\r\n",
    };
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        if (i == 1)
            continue;
        ex_status st = ex_genotype_parse_text(forms[i], strlen(forms[i]), &g, msg, sizeof msg);
        if (st != EX_OK)
            fail_msg("form %zu: %s", i, msg);
        assert_same(&v2, &g);
        assert_int_equal(ex_genotype_parse(forms[i], strlen(forms[i]), &g, msg, sizeof msg), EX_OK);
    }
    /* range(6) is 0..5: states 0 and 1 are allowed in a concat */
    const char *r6 = "Genotype(normal=[('skip_connect', 0), ('skip_connect', 1)], "
                     "normal_concat=range(3), reduce=[('skip_connect', 1), ('skip_connect', 0)],"
                     " reduce_concat=[2])";
    assert_int_equal(ex_genotype_parse_text(r6, strlen(r6), &g, msg, sizeof msg), EX_OK);
    assert_int_equal(g.steps, 1);
    assert_int_equal(g.n_normal_concat, 3);
    assert_int_equal(g.normal_concat[2], 2);
}

static void text_and_json_round_trip(void **state)
{
    (void)state;
    const char *const *names = ex_genotype_builtin_names();
    char text[EX_GENOTYPE_TEXT_MAX], json[EX_GENOTYPE_TEXT_MAX], msg[256];
    for (int n = 0; names[n]; n++) {
        ex_genotype g, back;
        assert_int_equal(ex_genotype_builtin(names[n], &g), EX_OK);
        assert_int_equal(ex_genotype_format(&g, text, sizeof text), EX_OK);
        assert_int_equal(ex_genotype_parse_text(text, strlen(text), &back, msg, sizeof msg), EX_OK);
        assert_same(&g, &back);
        assert_int_equal(ex_genotype_format_json(&g, json, sizeof json), EX_OK);
        assert_int_equal(ex_genotype_parse(json, strlen(json), &back, msg, sizeof msg), EX_OK);
        assert_same(&g, &back);
    }
    ex_genotype g;
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &g), EX_OK);
    assert_int_equal(ex_genotype_format_json(&g, json, sizeof json), EX_OK);
    assert_string_equal(
        json, "{\"format\":\"exapt-genotype\",\"version\":1,\"steps\":4,\"normal\":[[\"sep_conv_3x3"
              "\",0],[\"sep_conv_3x3\",1],[\"sep_conv_3x3\",0],[\"sep_conv_3x3\",1],[\"sep_conv_3x3"
              "\",1],[\"skip_connect\",0],[\"skip_connect\",0],[\"dil_conv_3x3\",2]],\"normal_conca"
              "t\":[2,3,4,5],\"reduce\":[[\"max_pool_3x3\",0],[\"max_pool_3x3\",1],[\"skip_connect"
              "\",2],[\"max_pool_3x3\",1],[\"max_pool_3x3\",0],[\"skip_connect\",2],[\"skip_connec"
              "t\",2],[\"max_pool_3x3\",1]],\"reduce_concat\":[2,3,4,5]}");
}

/* The longest genotype fits EX_GENOTYPE_TEXT_MAX in both forms; small buffers fail. */
static void format_limits(void **state)
{
    (void)state;
    ex_genotype g;
    memset(&g, 0, sizeof g);
    g.steps = EX_MAX_STEPS;
    for (int e = 0; e < 2 * EX_MAX_STEPS; e++)
        g.normal[e] = g.reduce[e] = (ex_genotype_edge){EX_CAND_CONV_7X1_1X7, 1 + e / 2};
    g.n_normal_concat = g.n_reduce_concat = EX_MAX_STEPS + 2;
    for (int i = 0; i < EX_MAX_STEPS + 2; i++)
        g.normal_concat[i] = g.reduce_concat[i] = EX_MAX_STEPS + 1 - i;
    char buf[EX_GENOTYPE_TEXT_MAX], msg[256];
    ex_genotype back;
    assert_int_equal(ex_genotype_format(&g, buf, sizeof buf), EX_OK);
    assert_int_equal(ex_genotype_parse_text(buf, strlen(buf), &back, msg, sizeof msg), EX_OK);
    assert_same(&g, &back);
    size_t need = strlen(buf);
    assert_int_equal(ex_genotype_format(&g, buf, need), EX_ERR_ARG);
    assert_int_equal(ex_genotype_format(&g, buf, need + 1), EX_OK);
    assert_int_equal(ex_genotype_format_json(&g, buf, sizeof buf), EX_OK);
    assert_int_equal(ex_genotype_parse_json(buf, strlen(buf), &back, msg, sizeof msg), EX_OK);
    assert_same(&g, &back);
    assert_int_equal(ex_genotype_format_json(&g, buf, 20), EX_ERR_ARG);
    /* invalid genotypes are refused */
    g.normal[0].input = 2; /* node 0 sees states 0 and 1 only */
    assert_int_equal(ex_genotype_format(&g, buf, sizeof buf), EX_ERR_ARG);
    assert_int_equal(ex_genotype_validate(&g, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(strstr(msg, "input 2"));
    g.normal[0] = (ex_genotype_edge){EX_CAND_NONE, 0};
    assert_int_equal(ex_genotype_format_json(&g, buf, sizeof buf), EX_ERR_ARG);
    assert_int_equal(ex_genotype_format(NULL, buf, sizeof buf), EX_ERR_ARG);
}

typedef struct bad_text {
    const char *text;
    const char *needle;
} bad_text;

#define EDGES2 "[('skip_connect', 0), ('skip_connect', 1)]"

static void text_malformed(void **state)
{
    (void)state;
    static const bad_text cases[] = {
        {"", "expected a name"},
        {"Genotype", "expected '('"},
        {"Genome(normal=[])", "expected Genotype"},
        {"Genotype(normal=" EDGES2 ", normal_concat=[2], reduce=" EDGES2 ")", "reduce_concat is "
                                                                              "missing"},
        {"Genotype(normal=" EDGES2 ", normal_concat=[2], reduce=" EDGES2
         ", reduce_concat=[2], normal=" EDGES2 ")",
         "given twice"},
        {"Genotype(normal=" EDGES2 ", normal_concat=[2], reduce=" EDGES2
         ", reduce_concat=[2], extra=[])",
         "unknown field 'extra'"},
        {"Genotype(normal=[('skip_connect', 0), ('sep_conv_9x9', 1)], normal_concat=[2], "
         "reduce=" EDGES2 ", reduce_concat=[2])",
         "'sep_conv_9x9' is not"},
        {"Genotype(normal=[('none', 0), ('skip_connect', 1)], normal_concat=[2], reduce=" EDGES2
         ", reduce_concat=[2])",
         "'none' is not"},
        {"Genotype(normal=[('skip_connect', 0), ('skip_connect', 2)], normal_concat=[2], "
         "reduce=" EDGES2 ", reduce_concat=[2])",
         "input 2"},
        {"Genotype(normal=[('skip_connect', 0), ('skip_connect', -1)], normal_concat=[2], "
         "reduce=" EDGES2 ", reduce_concat=[2])",
         "input -1"},
        {"Genotype(normal=[('skip_connect', 0)], normal_concat=[2], reduce=[('skip_connect', 0)],"
         " reduce_concat=[2])",
         "2 per step"},
        {"Genotype(normal=" EDGES2 ", normal_concat=[2], reduce=[], reduce_concat=[2])",
         "2 per step"},
        {"Genotype(normal=" EDGES2 ", normal_concat=[3], reduce=" EDGES2 ", reduce_concat=[2])",
         "state 3"},
        {"Genotype(normal=" EDGES2 ", normal_concat=[2, 2], reduce=" EDGES2 ", reduce_concat=[2])",
         "twice"},
        {"Genotype(normal=" EDGES2 ", normal_concat=[], reduce=" EDGES2 ", reduce_concat=[2])",
         "0 entries"},
        {"Genotype(normal=" EDGES2 ", normal_concat=range(5, 2), reduce=" EDGES2
         ", reduce_concat=[2])",
         "range"},
        {"Genotype(normal=" EDGES2 ", normal_concat=range(1, 2, 3), reduce=" EDGES2
         ", reduce_concat=[2])",
         "at most 2"},
        {"Genotype(normal=" EDGES2 ", normal_concat=list(2), reduce=" EDGES2 ", reduce_concat=[2])",
         "a list or range"},
        {"Genotype(normal=" EDGES2 ", normal_concat=[99999999999], reduce=" EDGES2
         ", reduce_concat=[2])",
         "too large"},
        {"Genotype(normal=[('skip_connect, 0)], normal_concat=[2], reduce=" EDGES2
         ", reduce_concat=[2])",
         "bad operation name"},
        {"Genotype(normal=[('skip_connect', 0) ('skip_connect', 1)], normal_concat=[2], "
         "reduce=" EDGES2 ", reduce_concat=[2])",
         "expected ']'"},
        {"Genotype(normal=" EDGES2 ", normal_concat=[2], reduce=" EDGES2 ", reduce_concat=[2]) x",
         "after the genotype"},
        {"Genotype(normal=" EDGES2 EDGES2 ")", "expected ')'"},
    };
    ex_genotype g;
    char msg[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        msg[0] = 0;
        ex_status st =
            ex_genotype_parse_text(cases[i].text, strlen(cases[i].text), &g, msg, sizeof msg);
        if (st != EX_ERR_FORMAT || !strstr(msg, cases[i].needle))
            fail_msg("case %zu: status %d, message '%s'", i, st, msg);
    }
    /* 17 edges */
    char big[2048] = "Genotype(normal=[";
    for (int e = 0; e < 17; e++)
        strcat(big, "('skip_connect', 0), ");
    strcat(big, "])");
    assert_int_equal(ex_genotype_parse_text(big, strlen(big), &g, msg, sizeof msg), EX_ERR_FORMAT);
    assert_non_null(strstr(msg, "more than 16"));
    /* every proper prefix of a good text fails cleanly; so does a NUL inside it */
    for (size_t n = 0; n < strlen(darts_v2_text); n++) {
        assert_int_equal(ex_genotype_parse_text(darts_v2_text, n, &g, msg, sizeof msg),
                         EX_ERR_FORMAT);
        assert_true(msg[0] != 0);
    }
    char copy[sizeof darts_v2_text];
    memcpy(copy, darts_v2_text, sizeof copy);
    copy[40] = 0;
    assert_int_equal(ex_genotype_parse_text(copy, sizeof copy - 1, &g, msg, sizeof msg),
                     EX_ERR_FORMAT);
}

static void json_malformed(void **state)
{
    (void)state;
#define J(x) "{\"format\":\"exapt-genotype\",\"version\":1,\"steps\":1," x "}"
#define JE "\"normal\":[[\"skip_connect\",0],[\"skip_connect\",1]]"
#define JR "\"reduce\":[[\"skip_connect\",0],[\"skip_connect\",1]]"
#define JC "\"normal_concat\":[2],\"reduce_concat\":[2]"
    static const struct {
        const char *text;
        ex_status want;
        const char *needle;
    } cases[] = {
        {J(JE "," JR "," JC), EX_OK, ""},
        {"{\"format\":\"exapt-genotype\",\"version\":2}", EX_ERR_UNSUPPORTED, "version 2"},
        {"{\"format\":\"genotype\",\"version\":1}", EX_ERR_FORMAT, "format"},
        {"{\"version\":1}", EX_ERR_FORMAT, "format"},
        {"{\"format\":\"exapt-genotype\",\"version\":\"1\"}", EX_ERR_FORMAT, "version"},
        {"[1,2]", EX_ERR_FORMAT, "not a JSON object"},
        {"{\"format\":", EX_ERR_FORMAT, "genotype JSON"},
        {J(JR "," JC), EX_ERR_FORMAT, "\"normal\" missing"},
        {J("\"normal\":[[\"skip_connect\",0],[\"skip_connect\"]]," JR "," JC), EX_ERR_FORMAT,
         "normal[1]"},
        {J("\"normal\":[[\"skip_connect\",0],[7,1]]," JR "," JC), EX_ERR_FORMAT, "normal[1]"},
        {J("\"normal\":[[\"skip_connect\",0],[\"skip_connect\",1.0]]," JR "," JC), EX_ERR_FORMAT,
         "normal[1]"},
        {J("\"normal\":[[\"skip_connect\",0],[\"nothing\",1]]," JR "," JC), EX_ERR_FORMAT,
         "unknown op"},
        {J("\"normal\":[[\"skip_connect\",0],[\"skip_connect\",5]]," JR "," JC), EX_ERR_FORMAT,
         "input 5"},
        {J("\"normal\":[[\"skip_connect\",0],[\"skip_connect\",-5]]," JR "," JC), EX_ERR_FORMAT,
         "out of range"},
        {J(JE "," JR ",\"normal_concat\":[2],\"reduce_concat\":2"), EX_ERR_FORMAT, "reduce_concat"},
        {J(JE "," JR ",\"normal_concat\":[2],\"reduce_concat\":[\"2\"]"), EX_ERR_FORMAT,
         "reduce_concat[0]"},
        {"{\"format\":\"exapt-genotype\",\"version\":1,\"steps\":2," JE "," JR "," JC "}",
         EX_ERR_FORMAT, "steps"},
        {"{\"format\":\"exapt-genotype\",\"version\":1," JE "," JR "," JC "}", EX_ERR_FORMAT,
         "steps"},
        {J(JE "," JE "," JR "," JC), EX_ERR_FORMAT, "duplicate"},
    };
    ex_genotype g;
    char msg[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        msg[0] = 0;
        ex_status st =
            ex_genotype_parse_json(cases[i].text, strlen(cases[i].text), &g, msg, sizeof msg);
        if (st != cases[i].want || !strstr(msg, cases[i].needle))
            fail_msg("case %zu: status %d, message '%s'", i, st, msg);
    }
    const char *good = cases[0].text;
    for (size_t n = 0; n < strlen(good); n++)
        assert_int_equal(ex_genotype_parse_json(good, n, &g, msg, sizeof msg), EX_ERR_FORMAT);
#undef J
#undef JE
#undef JR
#undef JC
}

/* ---- files ---- */

typedef struct scratch {
    char dir[64];
    char path[128];
} scratch;

static int setup(void **state)
{
    scratch *s = calloc(1, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/exapt-gt-XXXXXX");
    if (!s || !mkdtemp(s->dir))
        return -1;
    snprintf(s->path, sizeof s->path, "%s/genotype.json", s->dir);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    scratch *s = *state;
    char p[200];
    const char *names[] = {"genotype.json", "genotype.txt", "d/x", "d", "big"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", s->dir, names[i]);
        remove(p);
    }
    assert_int_equal(rmdir(s->dir), 0);
    free(s);
    return 0;
}

static void files(void **state)
{
    scratch *s = *state;
    ex_genotype v1, v2, g;
    char msg[512], txt[160];
    assert_int_equal(ex_genotype_builtin("DARTS_V1", &v1), EX_OK);
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &v2), EX_OK);
    assert_int_equal(ex_genotype_save_json(s->path, &v2, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_genotype_load(s->path, &g, msg, sizeof msg), EX_OK);
    assert_same(&v2, &g);
    snprintf(txt, sizeof txt, "%s/genotype.txt", s->dir);
    assert_int_equal(ex_genotype_save_text(txt, &v1, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_genotype_load(txt, &g, msg, sizeof msg), EX_OK);
    assert_same(&v1, &g);
    FILE *f = fopen(txt, "r");
    char line[EX_GENOTYPE_TEXT_MAX + 2];
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_int_equal(strlen(line), strlen(darts_v1_text) + 1);
    assert_int_equal(strncmp(line, darts_v1_text, strlen(darts_v1_text)), 0);

    /* broken and missing files name themselves */
    f = fopen(txt, "w");
    fputs("Genotype(normal=[('skip_connect', 0)", f);
    fclose(f);
    assert_int_equal(ex_genotype_load(txt, &g, msg, sizeof msg), EX_ERR_FORMAT);
    assert_non_null(strstr(msg, txt));
    char missing[200];
    snprintf(missing, sizeof missing, "%s/missing", s->dir);
    assert_int_equal(ex_genotype_load(missing, &g, msg, sizeof msg), EX_ERR_IO);
    assert_non_null(strstr(msg, missing));
    assert_int_equal(ex_genotype_load(s->dir, &g, msg, sizeof msg), EX_ERR_IO);
    char big[200];
    snprintf(big, sizeof big, "%s/big", s->dir);
    f = fopen(big, "w");
    for (int i = 0; i < (1 << 20) / 16 + 1; i++)
        fputs("                ", f);
    fclose(f);
    assert_int_equal(ex_genotype_load(big, &g, msg, sizeof msg), EX_ERR_FORMAT);

    /* a failed save leaves the old file whole: the target is a non-empty directory */
    char dir[200], inner[220];
    snprintf(dir, sizeof dir, "%s/d", s->dir);
    snprintf(inner, sizeof inner, "%s/x", dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    f = fopen(inner, "w");
    fclose(f);
    assert_int_equal(ex_genotype_save_json(dir, &v1, msg, sizeof msg), EX_ERR_IO);
    assert_non_null(strstr(msg, dir));
    assert_int_equal(ex_genotype_load(s->path, &g, msg, sizeof msg), EX_OK);
    assert_same(&v2, &g);
    /* an invalid genotype is refused before anything is written */
    g.steps = 0;
    assert_int_equal(ex_genotype_save_text(s->path, &g, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_genotype_load(s->path, &g, msg, sizeof msg), EX_OK);
    assert_same(&v2, &g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(candidate_names),
        cmocka_unit_test(published_cells),
        cmocka_unit_test(derive_reproduces_darts_v2),
        cmocka_unit_test(derive_none_dominates),
        cmocka_unit_test(derive_ties),
        cmocka_unit_test(derive_cap_param_free),
        cmocka_unit_test(derive_custom_columns),
        cmocka_unit_test(derive_random_against_reference),
        cmocka_unit_test(derive_rejects),
        cmocka_unit_test(text_forms_parse),
        cmocka_unit_test(text_and_json_round_trip),
        cmocka_unit_test(format_limits),
        cmocka_unit_test(text_malformed),
        cmocka_unit_test(json_malformed),
        cmocka_unit_test_setup_teardown(files, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
