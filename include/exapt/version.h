/* exapt — version. */
#ifndef EXAPT_VERSION_H
#define EXAPT_VERSION_H

#define EXAPT_VERSION_MAJOR 0
#define EXAPT_VERSION_MINOR 2
#define EXAPT_VERSION_PATCH 0
#define EXAPT_VERSION_STRING "0.2.0"

#ifdef __cplusplus
extern "C" {
#endif

/** The library's version string, which may differ from the header's when linked
 *  against another build. */
const char *ex_version(void);

#ifdef __cplusplus
}
#endif
#endif
