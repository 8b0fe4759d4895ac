// The public headers compile as C++ and declare C linkage: were a declaration mangled, the
// link against libexapt would fail on the reference below.
#include <exapt/exapt.h>

extern "C++" const char *exapt_cxx_version();
const char *exapt_cxx_version()
{
    return ex_version();
}
