/* The DARTS text (Genotype(normal=[...], ...)) reader on arbitrary bytes; a parsed
 * genotype must validate and survive a format/parse round trip. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exapt/genotype.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ex_genotype g;
    char msg[256];
    if (ex_genotype_parse_text((const char *)data, size, &g, msg, sizeof msg) != EX_OK)
        return 0;
    char buf[EX_GENOTYPE_TEXT_MAX];
    ex_genotype back;
    if (ex_genotype_validate(&g, msg, sizeof msg) != EX_OK ||
        ex_genotype_format(&g, buf, sizeof buf) != EX_OK ||
        ex_genotype_parse_text(buf, strlen(buf), &back, msg, sizeof msg) != EX_OK)
        abort();
    return 0;
}
