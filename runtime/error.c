/* The calling thread's last error message: what snn_last_error returns. Every unit of the runtime
 * that reports an error (session.c, model_parts.c, cuda_exec.c) writes it here, so none of them
 * needs another for that. */
#include "runtime/model_parts.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

snn_status
rt_fail(snn_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

void
rt_clear_error(void)
{
    last_error[0] = 0;
}

const char *
snn_last_error(void)
{
    return last_error;
}
