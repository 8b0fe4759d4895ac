/* The engine's one clock: step, record and measurement times. */
#ifndef EXAPT_CORE_CLOCK_H
#define EXAPT_CORE_CLOCK_H

/** Milliseconds on the monotonic clock (an arbitrary origin; differences only). */
double ex__clock_ms(void);

#endif
