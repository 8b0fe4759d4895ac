/* The exapt-bench report: the versioned JSON document (docs/bench.md) and the human
 * table printed while the benchmark runs. */
#include <math.h>

#include "bench.h"

/* Giga-units per second from an amount per run and a time in ms; a time too small for
 * the clock to see has no rate (NaN, written as JSON null). */
static double giga_per_s(double amount, double ms)
{
    return ms > 0 ? amount / (ms * 1e6) : NAN;
}

static double pct_of(double gbs, double peak)
{
    return peak > 0 ? 100.0 * gbs / peak : NAN;
}

static json_t *real_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *result_json(const bench_result *r, double peak)
{
    double gbs = giga_per_s((double)r->min_bytes, r->ms);
    json_t *o = json_object();
    json_object_set_new(o, "op", json_string(ex_op_name(r->op)));
    json_object_set_new(o, "shape", json_string(r->shape));
    json_object_set_new(o, "case", json_string(r->about));
    json_object_set_new(o, "ms", json_real(r->ms));
    json_object_set_new(o, "gbs", real_or_null(gbs));
    json_object_set_new(o, "pct_peak", real_or_null(pct_of(gbs, peak)));
    json_object_set_new(o, "gflops", real_or_null(giga_per_s((double)r->flops, r->ms)));
    json_object_set_new(o, "min_bytes", json_integer((json_int_t)r->min_bytes));
    json_object_set_new(o, "flops", json_integer((json_int_t)r->flops));
    json_object_set_new(o, "nodes", json_integer(r->nodes));
    json_object_set_new(o, "iters", json_integer(r->iters));
    return o;
}

static json_t *machine_json(void)
{
    bench_machine m;
    bench_machine_get(&m);
    return json_pack("{s:s, s:s, s:i}", "hostname", m.hostname, "cpu", m.cpu, "cores", m.cores);
}

static json_t *backend_json(const bench_meta *m)
{
    return json_pack("{s:s, s:s, s:i, s:o}", "name", m->caps->name, "device", m->caps->device,
                     "threads", m->caps->threads, "peak_copy_gbs", real_or_null(m->peak_gbs));
}

json_t *bench_report_json(const bench_meta *m, const bench_result *r, int n)
{
    json_t *results = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(results, result_json(&r[i], m->peak_gbs));
    /* "o" steals each reference, also when packing fails, so nothing leaks on NULL. */
    return json_pack("{s:s, s:i, s:s, s:o, s:o, s:s, s:s, s:s, s:o}", "format", "exapt-bench",
                     "version", 1, "exapt_version", ex_version(), "machine", machine_json(),
                     "backend", backend_json(m), "date", m->date, "command", m->command,
                     "shape_set", m->shape_set, "results", results);
}

void bench_table_header(FILE *f)
{
    fprintf(f, "%-20s %-14s %10s %9s %7s %9s\n", "op", "shape", "ms", "GB/s", "%peak", "GFLOP/s");
}

/* A rate in a fixed width, or "-" where there is none. */
static void put_rate(FILE *f, int width, int prec, double v)
{
    if (isfinite(v))
        fprintf(f, " %*.*f", width, prec, v);
    else
        fprintf(f, " %*s", width, "-");
}

void bench_table_row(FILE *f, const bench_result *r, double peak_gbs)
{
    double gbs = giga_per_s((double)r->min_bytes, r->ms);
    fprintf(f, "%-20s %-14s %10.4f", ex_op_name(r->op), r->shape, r->ms);
    put_rate(f, 9, 2, gbs);
    put_rate(f, 7, 1, pct_of(gbs, peak_gbs));
    put_rate(f, 9, 2, giga_per_s((double)r->flops, r->ms));
    fputc('\n', f);
}
