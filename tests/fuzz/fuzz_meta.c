/* fuzz_meta.c: libFuzzer target for the model description parser (runtime/model_parts.c), which
 * reads the text a model.so carries (and snnc builds for --device=cuda). The input is the text; the
 * model is made with a CPU entry point that is never called and a 4 KiB image blob, so that CPU and
 * CUDA descriptions both parse fully. Accepted models must answer every snn_model_* query
 * consistently; rejected ones must come with a message. */
#include "tests/fuzz/fuzz_check.h"

#include "runtime/model_parts.h"
#include "runtime/snn.h"

static void
never_called(void **bufs, int64_t batch, int64_t sample_base, SnnkRt *rt)
{
    (void)bufs, (void)batch, (void)sample_base, (void)rt;
    abort();
}

static unsigned char images[4096];

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    FUZZ_ASSERT(text != NULL);
    memcpy(text, data, size);
    text[size] = 0;
    snn_model *m = NULL;
    snn_status st = rt_model_create(text, (size & 1) ? NULL : never_called, NULL, 0, images,
                                    sizeof images, &m);
    if (st != SNN_OK) {
        FUZZ_ASSERT(m == NULL);
        FUZZ_ASSERT(snn_last_error()[0] != 0);
        free(text);
        return 0;
    }
    FUZZ_ASSERT(m != NULL && snn_model_name(m) != NULL && snn_model_timesteps(m) >= 1);
    FUZZ_ASSERT(snn_model_devices(m) != NULL);
    snn_tensor_info info;
    for (int i = 0; i < snn_model_num_inputs(m); i++) {
        FUZZ_ASSERT(snn_model_input(m, i, &info) == SNN_OK);
        FUZZ_ASSERT(info.rank >= 0 && info.rank <= SNN_MAX_RANK && info.numel >= 0);
    }
    for (int i = 0; i < snn_model_num_outputs(m); i++)
        FUZZ_ASSERT(snn_model_output(m, i, &info) == SNN_OK && info.numel >= 0);
    for (int i = 0; i < snn_model_num_weights(m); i++)
        FUZZ_ASSERT(snn_model_weight(m, i, &info) == SNN_OK && info.numel >= 0);
    for (int i = 0; i < snn_model_num_layers(m); i++)
        FUZZ_ASSERT(snn_model_layer_name(m, i) != NULL);
    FUZZ_ASSERT(snn_model_input(m, snn_model_num_inputs(m), &info) == SNN_ERR_ARGUMENT);
    rt_model_free(m);
    free(text);
    return 0;
}
