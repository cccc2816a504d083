/* The one monotonic clock every timing in the engine reads (step times, capture and
 * instantiate times, bench rounds), so all of them measure on the same scale. */
#ifndef GT_CORE_CLOCK_H
#define GT_CORE_CLOCK_H

/* Milliseconds of CLOCK_MONOTONIC: only differences mean something. */
double gt_now_ms(void);

#endif
