/* session_run.c: a compiled program run by the runtime session, the executor model.so users run:
 * --run on the CPU and the GPU, and the LLVM backend's tests. */
#include "driver/session_run.h"

#include "runtime/model_parts.h"
#include "runtime/tensor_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool
session_open(SessionRun *r, const Module *m, const char *meta, SnnkEntryFn entry,
             const void *image, size_t image_size, const char *device, int batch, int threads,
             char *err, size_t errlen)
{
    RtTensor *ts = weights_as_tensors(m);
    unsigned char *wbytes = NULL;
    size_t wlen = 0;
    char msg[512];
    snn_status rc = SNN_ERR_WEIGHTS;
    if (rt_safetensors_encode(ts, m->nweights, RT_F32, &wbytes, &wlen, msg, sizeof msg) != 0)
        snprintf(err, errlen, "encoding the weights: %s", msg);
    else if ((rc = rt_model_create(meta, entry, wbytes, wlen, image, image_size, &r->model)) !=
             SNN_OK)
        snprintf(err, errlen, "%s", snn_last_error());
    else if ((rc = snn_session_create(r->model, device, batch, threads, &r->s)) != SNN_OK)
        snprintf(err, errlen, "%s", snn_last_error());
    free(wbytes);
    free(ts);
    int nlayers = r->model ? snn_model_num_layers(r->model) : 0;
    r->seen = xcalloc((size_t)nlayers + 1, sizeof *r->seen);
    r->now = xcalloc((size_t)nlayers + 1, sizeof *r->now);
    return rc == SNN_OK;
}

void
session_close(SessionRun *r)
{
    snn_session_destroy(r->s);
    rt_model_free(r->model);
    free(r->seen);
    free(r->now);
    memset(r, 0, sizeof *r);
}

/* the session's counts grow run by run: integers, exact in double */
bool
session_run(SessionRun *r, const KProgram *p, int batch, int64_t base, const float *const *in,
            float *const *out, double *counts, char *err, size_t errlen)
{
    if (snn_run(r->s, base, batch, in, out) != SNN_OK) {
        snprintf(err, errlen, "%s", snn_last_error());
        return false;
    }
    if (!counts) return true;
    if (snn_session_spike_counts(r->s, r->now, p->nstats) != SNN_OK) {
        snprintf(err, errlen, "%s", snn_last_error());
        return false;
    }
    for (int i = 0; i < p->nstats; i++) {
        counts[p->stats[i].value] += r->now[i] - r->seen[i];
        r->seen[i] = r->now[i];
    }
    return true;
}

