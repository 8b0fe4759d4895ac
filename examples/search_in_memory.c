/* Embedding exapt: a small architecture search on data held in memory (no files), then
 * the genotype it found. Build against the installed library:
 *   cc search_in_memory.c $(pkg-config --cflags --libs exapt) -o search_in_memory */
#include <stdio.h>
#include <stdlib.h>

#include <exapt/exapt.h>
#include <exapt/search.h>

enum { N = 256, HW = 12, BATCH = 16, STEPS = 30 };

/* Two classes of 12x12 images: a bright left or right half, with a little noise. */
static void make_data(unsigned char *pixels, int32_t *labels)
{
    unsigned seed = 1;
    for (int i = 0; i < N; i++) {
        labels[i] = i % 2;
        for (int p = 0; p < HW * HW; p++) {
            seed = seed * 1103515245u + 12345u;
            int bright = (p % HW < HW / 2) == (labels[i] == 0);
            pixels[i * HW * HW + p] = (unsigned char)(bright * 200 + (seed >> 16) % 40);
        }
    }
}

int main(void)
{
    static unsigned char pixels[N * HW * HW];
    static int32_t labels[N];
    make_data(pixels, labels);
    char msg[512];
    ex_dataset *all = NULL, *train = NULL, *valid = NULL;
    ex_loader *lt = NULL, *lv = NULL;
    ex_backend *be = NULL;
    ex_search *s = NULL;
    int rc = 1;
    if (ex_dataset_from_memory(pixels, EX_PIXEL_U8, N, 1, HW, HW, labels, 2, &all, msg,
                               sizeof msg) != EX_OK ||
        ex_dataset_split(all, 0.5, &train, &valid, msg, sizeof msg) != EX_OK)
        goto out;
    ex_loader_opts o;
    ex_loader_opts_default(&o, train, true);
    o.batch = BATCH;
    o.drop_last = true;
    if (ex_loader_new(train, &o, &lt, msg, sizeof msg) != EX_OK ||
        ex_loader_new(valid, &o, &lv, msg, sizeof msg) != EX_OK)
        goto out;
    if (ex_backend_open("auto", &be, msg, sizeof msg) != EX_OK)
        goto out;
    ex_search_config c;
    ex_search_config_default(&c);
    c.in_channels = 1;
    c.height = c.width = HW;
    c.classes = 2;
    c.batch = BATCH;
    c.channels = 4;
    c.layers = 3;
    c.steps = 2;
    c.multiplier = 2;
    c.arch_lr = 3e-2f;
    if (ex_search_new(&c, be, &s, msg, sizeof msg) != EX_OK)
        goto out;
    static float xt[BATCH * HW * HW], xv[BATCH * HW * HW];
    int32_t yt[BATCH], yv[BATCH];
    ex_search_stats st = {0};
    for (int step = 0; step < STEPS; step++) {
        int nt, nv;
        if (ex_loader_next(lt, xt, yt, &nt) != EX_OK || ex_loader_next(lv, xv, yv, &nv) != EX_OK ||
            ex_search_step(s, xt, yt, xv, yv, 0.025f, 1.0f, &st) != EX_OK) {
            snprintf(msg, sizeof msg, "step %d: %s", step, ex_search_error(s));
            goto out;
        }
    }
    ex_genotype g;
    char text[EX_GENOTYPE_TEXT_MAX];
    if (ex_search_genotype(s, &g) != EX_OK)
        goto out;
    ex_genotype_format(&g, text, sizeof text);
    printf("after %d steps on %s: train loss %.3f, validation accuracy %.2f\n%s\n", STEPS,
           ex_backend_get_caps(be)->name, st.train_loss, st.valid_acc, text);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "search_in_memory: %s\n", s ? ex_search_error(s) : msg);
    ex_search_free(s);
    ex_backend_close(be);
    ex_loader_free(lt);
    ex_loader_free(lv);
    ex_dataset_free(train);
    ex_dataset_free(valid);
    ex_dataset_free(all);
    return rc;
}
