/* The metrics-log parser: each input is one line for ex_metrics_parse_line and, written
 * to a file, a whole log for ex_metrics_read. */
#include <stdint.h>
#include <stdlib.h>

#include "exapt/metrics.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count(const ex_metrics_record *rec, int64_t line, void *user)
{
    (void)rec;
    (void)line;
    ++*(int64_t *)user;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the record is large (alpha matrices); one per input on the heap */
    ex_metrics_record *rec = malloc(sizeof *rec);
    char msg[256];
    if (!rec)
        return 0;
    ex_metrics_parse_line((const char *)data, size, rec, msg, sizeof msg);
    free(rec);
    const char *path = fuzz_write("metrics.jsonl", data, size);
    if (!path)
        return 0;
    ex_metrics_stats st;
    int64_t n = 0;
    ex_metrics_read(path, count, &n, &st, msg, sizeof msg);
    if (n != st.records)
        abort();
    return 0;
}
