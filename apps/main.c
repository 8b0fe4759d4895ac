/* exapt: the command-line tool. Parses the global options, then hands the rest of the
 * command line to one subcommand. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct cli_command {
    const char *name;
    cli_command_fn run;
    const char *summary;
    bool parallel; /* runs as several ranks (data parallelism) */
} cli_command;

static const cli_command commands[] = {
    {"info", cli_info, "show the version, the backends and what each device offers", false},
    {"bench", cli_bench, "time every op on representative shapes (JSON)", false},
    {"search", cli_search, "search an architecture (DARTS, GDAS, top-k) on a dataset", true},
    {"train", cli_train, "train the network of a genotype from scratch", true},
    {"eval", cli_eval, "accuracy, loss and confusion matrix of saved weights on a dataset", false},
    {"predict", cli_predict, "classify images (PNG or IDX files) with saved weights", false},
    {"export", cli_export, "write saved weights as an ONNX model", false},
    {"quantize", cli_quantize, "write saved weights as int8, calibrated on training images", false},
    {"viz", cli_viz, "watch a search: replay or follow its metrics log, or snapshot it", false},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void print_usage(FILE *out)
{
    fprintf(out, "usage: exapt [--backend NAME] [--ranks N] <command> [options]\n"
                 "       exapt --help | --version\n\n"
                 "commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nglobal options:\n"
                 "  --backend NAME  backend to run on: auto, cpu, cpu-ref or another name\n"
                 "                  that 'exapt info' lists; beats EXAPT_BACKEND\n"
                 "  --ranks N       run search or train as N data-parallel processes on this\n"
                 "                  machine (through mpirun; each on its own GPU); mpirun\n"
                 "                  may also start exapt itself, on one machine or several;\n"
                 "                  'search --gpus N' and 'train --gpus N' say the same\n"
                 "  --help          this text ('exapt <command> --help' for a command)\n"
                 "  --version       the library's version\n");
}

/* One line for the problem and a pointer to the help, not the whole usage. */
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("exapt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\nTry 'exapt --help'.\n", stderr);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

static const cli_command *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* "exapt help [command]" reads better in scripts' docs than "--help". */
static int run_help(const cli_global *g, int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stdout);
        return CLI_EXIT_OK;
    }
    const cli_command *c = find_command(argv[1]);
    if (c == NULL) {
        return usage_error("unknown command '%s'", argv[1]);
    }
    char help_opt[] = "--help";
    char *sub[] = {argv[1], help_opt, NULL};
    return c->run(g, 2, sub);
}

/* A number of ranks, 1 to 4096, or -1. */
static int ranks_of(const char *val)
{
    char *end = NULL;
    long n = strtol(val, &end, 10);
    return end && end != val && !*end && n >= 1 && n <= 4096 ? (int)n : -1;
}

/* search and train take --gpus N, the global --ranks N under the name of what it is for:
 * taken out of the command's arguments (from argv[from] on), so that neither the ranks
 * mpirun starts nor the command (and the run it records) see it. */
static int take_gpus(int *argc, char **argv, int from, int *ranks)
{
    for (int i = from; i < *argc; i++) {
        const char *val = NULL;
        int at = i;
        cli_match m = cli_option_value(*argc, argv, &at, "--gpus", &val);
        if (m == CLI_NO_MATCH)
            continue;
        int n = m == CLI_MATCHED ? ranks_of(val) : -1;
        if (n < 0)
            return usage_error("--gpus needs a number of GPUs, 1 to 4096");
        if (*ranks && *ranks != n)
            return usage_error("--gpus %d and --ranks %d disagree", n, *ranks);
        *ranks = n;
        int used = at - i + 1; /* "--gpus N" or "--gpus=N" */
        memmove(&argv[i], &argv[i + used], (size_t)(*argc - i - used + 1) * sizeof *argv);
        *argc -= used;
        i--;
    }
    return 0;
}

int main(int argc, char **argv)
{
    cli_global g = {.backend = NULL, .argc = argc, .argv = argv};
    int i = 1, ranks = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *val = NULL;
        cli_match m = cli_option_value(argc, argv, &i, "--backend", &val);
        cli_match mr =
            m == CLI_NO_MATCH ? cli_option_value(argc, argv, &i, "--ranks", &val) : CLI_NO_MATCH;
        if (m == CLI_MATCHED) {
            g.backend = val;
        } else if (m == CLI_MISSING_VALUE) {
            return usage_error("--backend needs a name");
        } else if (mr == CLI_MATCHED) {
            if ((ranks = ranks_of(val)) < 0)
                return usage_error("--ranks needs a number of processes, 1 to 4096");
        } else if (mr == CLI_MISSING_VALUE) {
            return usage_error("--ranks needs a number of processes");
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_usage(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("exapt %s\n", ex_version());
            return CLI_EXIT_OK;
        } else {
            return usage_error("unknown option '%s'", argv[i]);
        }
    }
    if (i >= argc) {
        return usage_error("no command given");
    }
    if (strcmp(argv[i], "help") == 0)
        return run_help(&g, argc - i, argv + i);
    const cli_command *c = find_command(argv[i]);
    if (c == NULL) {
        return usage_error("unknown command '%s'", argv[i]);
    }
    if (ranks > 1 && !c->parallel)
        return usage_error("--ranks: '%s' runs in one process (search and train run as ranks)",
                           c->name);
    int rc = c->parallel ? take_gpus(&argc, argv, i + 1, &ranks) : 0;
    if (rc)
        return rc;
    g.argc = argc;
    if (ranks > 1)
        return cli_ranks_launch(ranks, argc, argv);
    if ((rc = cli_ranks_start(&g)))
        return rc;
    if (g.comm && !c->parallel)
        rc = cli_fail(c->name, "runs in one process, not as one of %d ranks", g.comm->size);
    else
        rc = c->run(&g, argc - i, argv + i);
    return cli_ranks_finish(&g, rc);
}
