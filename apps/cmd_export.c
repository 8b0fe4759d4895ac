/* exapt export: saved weights as a model another runtime can run (ONNX). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "options.h"
#include "run.h"

static const char export_usage[] =
    "usage: exapt export RUN|WEIGHTS --out FILE [options]\n"
    "  RUN|WEIGHTS      a weights file, or a run directory (its weights.safetensors, or\n"
    "                   train/weights.safetensors of a search)\n"
    "  --out FILE       the model to write (replaced atomically)\n"
    "  --format NAME    onnx (the default and only one): opset 13, input \"input\"\n"
    "                   [N, C, H, W] normalized as in training, output \"logits\" [N, classes],\n"
    "                   batch norms folded into the convolutions\n";

int cli_export(const cli_global *g, int argc, char **argv)
{
    (void)g;
    const char *out = NULL, *format = "onnx", *arg = NULL;
    const opt_spec specs[] = {
        {"--out", OPT_STRING, &out, 0, 0, NULL},
        {"--format", OPT_STRING, &format, 0, 0, NULL},
    };
    int nargs = 0;
    int rc = opt_parse_args("export", export_usage, specs, (int)(sizeof specs / sizeof specs[0]),
                            argc, argv, &arg, 1, &nargs);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (!nargs)
        return cli_usage_error("export", "which weights? give a weights file or a run directory");
    if (!out)
        return cli_usage_error("export", "--out FILE is required");
    if (strcmp(format, "onnx"))
        return cli_usage_error("export", "--format takes onnx, not '%s'", format);
    char path[4096], dir[4096], msg[512];
    if ((rc = run_find_weights(arg, path, sizeof path, dir, sizeof dir, "export")))
        return rc;
    /* the model is read from the weights on the host: the CPU backend, whatever --backend */
    ex_backend *be = NULL;
    ex_network *net = NULL;
    if (ex_backend_open("cpu", &be, msg, sizeof msg) != EX_OK)
        return cli_fail("export", "%s", msg);
    if (ex_network_open(path, be, 1, &net, msg, sizeof msg) != EX_OK)
        rc = cli_fail("export", "%s", msg);
    else if (ex_network_export_onnx(net, out) != EX_OK)
        rc = cli_fail("export", "%s", ex_network_error(net));
    else
        printf("export: %s written from %s\n", out, path);
    ex_network_free(net);
    ex_backend_close(be);
    return rc;
}
