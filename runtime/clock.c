/* clock.c: CLOCK_MONOTONIC in seconds (clock.h). */
#include <time.h>

#include "runtime/clock.h"

double
rt_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
