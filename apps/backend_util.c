/* Backend helpers shared by the subcommands: peak bandwidth, sizes. */
#include <stdio.h>

#include "cli.h"

ex_status cli_measure_peak(ex_backend *be, double *gbs)
{
    /* 256 MiB is far beyond every cache, yet a copy of it takes well under a second on
     * the CPU; backends with a smaller allocation or binding limit (Vulkan guarantees
     * 1 GiB and 128 MiB, some devices less) get the largest copy they allow. */
    uint64_t bytes = 256ull << 20;
    const ex_backend_caps *caps = ex_backend_get_caps(be);
    if (caps->max_alloc_bytes != 0 && caps->max_alloc_bytes < bytes)
        bytes = caps->max_alloc_bytes;
    if (caps->max_binding_bytes != 0 && caps->max_binding_bytes < bytes)
        bytes = caps->max_binding_bytes;
    return ex_backend_measure_bandwidth(be, bytes, gbs);
}

char *cli_bytes_str(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}
