/* Embedding exapt for inference: trained weights (from exapt train or exapt search) classify
 * a PNG image. Build against the installed library:
 *   cc classify_png.c $(pkg-config --cflags --libs exapt) -o classify_png
 * Usage: classify_png WEIGHTS.safetensors IMAGE.png */
#include <stdio.h>
#include <stdlib.h>

#include <exapt/exapt.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: classify_png WEIGHTS.safetensors IMAGE.png\n");
        return 2;
    }
    char msg[512];
    ex_backend *be = NULL;
    ex_network *net = NULL;
    /* the best backend there is, and the network the file records, for one image a call */
    if (ex_backend_open("auto", &be, msg, sizeof msg) != EX_OK ||
        ex_network_open(argv[1], be, 1, &net, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "classify_png: %s\n", msg);
        ex_backend_close(be);
        return 1;
    }
    ex_network_config c;
    ex_network_config_default(&c);
    ex_network_get_config(net, &c);
    float *pixels = malloc((size_t)c.in_channels * c.height * c.width * sizeof *pixels);
    float *probs = malloc((size_t)c.classes * sizeof *probs);
    int rc = 1;
    if (!pixels || !probs)
        fprintf(stderr, "classify_png: out of memory\n");
    else if (ex_image_load_png(argv[2], c.in_channels, c.height, c.width, pixels, msg,
                               sizeof msg) != EX_OK)
        fprintf(stderr, "classify_png: %s\n", msg);
    else if (ex_network_classify(net, pixels, 1, probs) != EX_OK)
        fprintf(stderr, "classify_png: %s\n", ex_network_error(net));
    else
        rc = 0;
    int best = 0;
    for (int k = 1; rc == 0 && k < c.classes; k++)
        best = probs[k] > probs[best] ? k : best;
    if (rc == 0)
        printf("%s: class %d (probability %.3f) on %s\n", argv[2], best, (double)probs[best],
               ex_backend_get_caps(be)->name);
    free(pixels);
    free(probs);
    ex_network_free(net);
    ex_backend_close(be);
    return rc;
}
