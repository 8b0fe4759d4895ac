/* Shared pieces of the search and training commands. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "run.h"

/* The one piece of process state: set by the signal handler, read by the loops. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

void run_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

bool run_stop_requested(void)
{
    return stop_requested != 0;
}

double run_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int run_load(const char *dir, const char *name, ex_data_split split, int64_t limit,
             ex_dataset **out, const char *cmd)
{
    char msg[512];
    ex_dataset *ds = NULL;
    if (ex_dataset_load(dir, name, split, &ds, msg, sizeof msg) != EX_OK)
        return cli_fail(cmd, "%s", msg);
    int64_t n = ex_dataset_count(ds);
    if (limit > 0 && limit < n) {
        ex_dataset *head = NULL, *rest = NULL;
        ex_status st =
            ex_dataset_split(ds, (double)limit / (double)n, &head, &rest, msg, sizeof msg);
        ex_dataset_free(ds);
        ex_dataset_free(rest);
        if (st != EX_OK)
            return cli_fail(cmd, "%s", msg);
        ds = head;
    }
    *out = ds;
    return CLI_EXIT_OK;
}

size_t run_share_start(const ex_comm *comm, int batch, size_t img)
{
    return comm ? (size_t)comm->rank * (size_t)(batch / comm->size) * img : 0;
}

int run_rank_times(const ex_comm *comm, double step_ms, ex_metrics_step *m, const char *cmd)
{
    m->n_ranks = 0;
    if (!comm || comm->size < 2)
        return 0;
    int n = comm->size < EX_METRICS_MAX_RANKS ? comm->size : EX_METRICS_MAX_RANKS;
    float v[EX_METRICS_MAX_RANKS] = {0};
    if (comm->rank < n)
        v[comm->rank] = (float)step_ms;
    char msg[256] = "";
    if (comm->allreduce_sum(comm->user, v, (size_t)n, msg, sizeof msg) != EX_OK)
        return cli_fail(cmd, "the ranks' step times: %s", msg);
    for (int r = 0; r < n; r++)
        m->rank_step_ms[r] = v[r];
    m->n_ranks = n;
    return 0;
}

int run_eval_batch(int64_t n, int cap)
{
    for (int b = cap; b > 1; b--)
        if (n % b == 0)
            return b;
    return 1;
}

int run_loader(const ex_dataset *ds, bool train, int batch, uint64_t seed, int cutout, bool flip,
               ex_loader **out, const char *cmd)
{
    char msg[512];
    ex_loader_opts o;
    ex_loader_opts_default(&o, ds, train);
    o.batch = batch;
    o.seed = seed;
    o.drop_last = train;
    o.prefetch = 2;
    if (train) {
        o.augment.cutout = cutout;
        o.augment.flip |= flip;
    }
    if (ex_loader_new(ds, &o, out, msg, sizeof msg) != EX_OK)
        return cli_fail(cmd, "%s", msg);
    return CLI_EXIT_OK;
}

int run_find_weights(const char *arg, char *path, size_t len, char *dir, size_t dir_len,
                     const char *cmd)
{
    struct stat sb;
    if (stat(arg, &sb) != 0)
        return cli_fail(cmd, "%s: %s", arg, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(path, len, "%s", arg);
        const char *slash = strrchr(arg, '/');
        snprintf(dir, dir_len, "%.*s", slash ? (int)(slash - arg) : 1, slash ? arg : ".");
        return CLI_EXIT_OK;
    }
    for (int i = 0; i < 2; i++) {
        if (i == 0)
            snprintf(dir, dir_len, "%s", arg);
        else
            run_path(dir, dir_len, arg, "train");
        run_path(path, len, dir, "weights.safetensors");
        if (stat(path, &sb) == 0)
            return CLI_EXIT_OK;
    }
    return cli_fail(cmd,
                    "%s: no weights.safetensors there or in its train/ (a run not trained to "
                    "the end?)",
                    arg);
}

float run_cosine(float hi, float lo, double done, double total)
{
    if (total <= 0)
        return hi;
    return lo + 0.5f * (hi - lo) * (1.0f + (float)cos(3.14159265358979323846 * done / total));
}

/* What exapt search and exapt train write into a run's directory (the search's training
 * into its train/). */
static const char *const run_files[] = {"metrics.jsonl",
                                        "checkpoint.safetensors",
                                        "checkpoint.safetensors.prev",
                                        "checkpoint.safetensors.tmp",
                                        "genotype.txt",
                                        "genotype.json",
                                        "weights.safetensors",
                                        "weights.safetensors.tmp",
                                        "position",
                                        "position.tmp",
                                        NULL};

/* Removes (force) or names in *found the run files of dir; 0, or an exit code. */
static int claim_files(const char *dir, bool force, const char **found, const char *cmd)
{
    char path[4200];
    for (int i = 0; run_files[i]; i++) {
        run_path(path, sizeof path, dir, run_files[i]);
        if (access(path, F_OK) != 0)
            continue;
        if (!force) {
            *found = run_files[i];
            return CLI_EXIT_OK;
        }
        if (unlink(path) != 0)
            return cli_fail(cmd, "--force: cannot remove %s: %s", path, strerror(errno));
    }
    return CLI_EXIT_OK;
}

int run_claim_dir(const char *dir, bool force, const char *cmd)
{
    char sub[4200];
    const char *found = NULL;
    run_path(sub, sizeof sub, dir, "train");
    int rc = claim_files(dir, force, &found, cmd);
    if (!rc && !found)
        rc = claim_files(sub, force, &found, cmd);
    if (!rc && force && rmdir(sub) != 0 && errno != ENOENT && errno != ENOTEMPTY)
        rc = cli_fail(cmd, "--force: cannot remove %s: %s", sub, strerror(errno));
    if (!rc && found)
        rc = cli_fail(cmd,
                      "%s holds a run (%s); --resume %s continues it, --force replaces it, or "
                      "choose another --out",
                      dir, found, dir);
    return rc;
}

int run_mkdir(const char *dir, const char *cmd)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return cli_fail(cmd, "cannot create %s: %s", path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return cli_fail(cmd, "cannot create %s: %s", path, strerror(errno));
    return CLI_EXIT_OK;
}

const char *run_path(char *buf, size_t len, const char *dir, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
    return buf;
}

static void clock_str(double s, char *buf, size_t len)
{
    long t = s > 0 && s < 1e8 ? (long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
}

void run_progress(const char *what, int epoch, int epochs, int64_t step, int64_t steps,
                  const char *figures, double images_per_s, double eta_s)
{
    char eta[32];
    clock_str(eta_s, eta, sizeof eta);
    fprintf(stderr, "%s epoch %d/%d step %lld/%lld | %s | %.1f img/s | ETA %s\n", what, epoch + 1,
            epochs, (long long)step, (long long)steps, figures, images_per_s, eta);
}

void run_keep_previous(const char *path)
{
    /* a hard link keeps the current checkpoint as .prev while path itself stays complete;
     * the next save then replaces path atomically */
    char prev[4200], tmp[4210];
    snprintf(prev, sizeof prev, "%s.prev", path);
    snprintf(tmp, sizeof tmp, "%s.prev.tmp", path);
    unlink(tmp);
    if (link(path, tmp) == 0 && rename(tmp, prev) != 0)
        unlink(tmp);
}
