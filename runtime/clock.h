/* clock.h: the one monotonic clock every timer of snnc and its runtime reads (seconds). */
#ifndef SNN_RUNTIME_CLOCK_H
#define SNN_RUNTIME_CLOCK_H

double rt_now_seconds(void);

#endif
