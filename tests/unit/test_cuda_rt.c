/* test_cuda_rt.c: unit tests for the runtime's CUDA half without a GPU: loading the driver (a path
 * that does not exist, a library that is not a driver, the default libcuda.so.1 where it is
 * absent), the WORK evaluator, descriptions with cuda_kernel/cuda_image records made into models
 * with rt_model_create (well-formed and malformed), device strings, "auto" falling back to the CPU,
 * and the ABI 2 additions (snn_run_device, graph_launches) on a CPU session. The end-to-end CUDA
 * runs are tests/cuda_emu's. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/cuda_driver.h"
#include "runtime/model_parts.h"
#include "runtime/snn.h"
#include "tests/unit/check.h"

#define NO_DRIVER "/nonexistent/snnc-test/libcuda.so.1"

/* a call that must fail with status st and a message containing `text` */
#define CHECK_ERR(call, st, text)                                                                  \
    do {                                                                                           \
        snn_status got_ = (call);                                                                  \
        const char *msg_ = snn_last_error();                                                       \
        if (got_ != (st) || !strstr(msg_, (text)))                                                 \
            fprintf(stderr, "%s:%d: %s gave %s \"%s\", expected %s with \"%s\"\n", __FILE__,       \
                    __LINE__, #call, snn_status_name(got_), msg_, #st, (text));                    \
        CHECK(got_ == (st) && strstr(msg_, (text)));                                               \
    } while (0)

/* A model whose CPU program has 2 static and 2 step kernels: y = x * w, four neurons per sample,
 * every one counted once per run in layer s (its i64 buffer s.n). Its CUDA program has buffers
 * and kernels of its own: 3 static, 2 step. */
static const char toy_meta[] =
    "snnc-model 2\n"
    "name toy\n"
    "timesteps 3\n"
    "devices cpu,cuda\n"
    "kernels 2 2\n"
    "input x 0 1 4\n"
    "output y 0 1 4\n"
    "weight w 1 4\n"
    "layer s 4\n"
    "buf w weight f32 0 4 0 0 0 1 0\n"
    "buf x input f32 4 0 0 0 0 1 0\n"
    "buf y output f32 4 0 0 0 0 1 0\n"
    "buf acc temp f32 4 0 -1 0 0 1 0\n"
    "buf s.n temp i64 4 0 -1 0 0 0 0\n"
    "cuda_layer s 3\n"
    "cuda_buf w weight f32 0 4 0 0 0 1 0\n"
    "cuda_buf x input f32 4 0 0 0 0 1 0\n"
    "cuda_buf y output f32 4 0 0 0 0 1 0\n"
    "cuda_buf s.n temp i64 4 0 -1 0 0 2 0\n"
    "cuda_kernel 0 snnk_k0 0 grid 2 1 3 B 4 *\n"
    "cuda_kernel 1 snnk_k1 1 grid 3 0 1 2 B 4 * 1 +\n"
    "cuda_kernel 2 snnk_k2 1 single 2 2 3 1\n"
    "cuda_kernel 3 snnk_k3 0 grid 3 0 2 3 B 4 * 2 /\n"
    "cuda_kernel 4 snnk_k4 0 single 0 1\n"
    "cuda_image ptx compute_80 0 8\n"
    "cuda_image cubin sm_90 8 8\n"
    "end\n";

/* the same without CUDA code */
static const char cpu_meta[] =
    "snnc-model 2\n"
    "name toy\n"
    "timesteps 3\n"
    "devices cpu\n"
    "kernels 2 2\n"
    "input x 0 1 4\n"
    "output y 0 1 4\n"
    "weight w 1 4\n"
    "layer s 4\n"
    "buf w weight f32 0 4 0 0 0 1 0\n"
    "buf x input f32 4 0 0 0 0 1 0\n"
    "buf y output f32 4 0 0 0 0 1 0\n"
    "buf acc temp f32 4 0 -1 0 0 1 0\n"
    "buf s.n temp i64 4 0 -1 0 0 0 0\n"
    "end\n";

static const unsigned char images[16] = "PTX....\0CUBIN...";

/* the CPU code of the toy model */
static void
toy_entry(void **bufs, int64_t batch, int64_t sample_base, SnnkRt *rt)
{
    const float *w = bufs[0], *x = bufs[1];
    float *y = bufs[2];
    int64_t *n = bufs[4];
    for (int64_t i = 0; i < batch * 4; i++) {
        y[i] = x[i] * w[i % 4];
        n[i] = 1;
    }
}

/* safetensors bytes holding w = [1, 2, 3, 4] (f32) */
static size_t
toy_weights(unsigned char *out)
{
    const char header[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    size_t hlen = (sizeof header - 1 + 7) / 8 * 8;
    memset(out, ' ', 8 + hlen);
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(out + 8, header, sizeof header - 1);
    const float w[4] = {1, 2, 3, 4};
    memcpy(out + 8 + hlen, w, sizeof w);
    return 8 + hlen + sizeof w;
}

/* meta with the first occurrence of `from` replaced by `to` (a static buffer) */
static const char *
edit(const char *meta, const char *from, const char *to)
{
    static char buf[4096];
    const char *at = strstr(meta, from);
    if (!at) {
        fprintf(stderr, "edit: '%s' not in the description\n", from);
        CHECK(at != NULL);
        return meta;
    }
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - meta), meta, to, at + strlen(from));
    return buf;
}

static void
check_bad(const char *meta, const char *text)
{
    snn_model *m = (snn_model *)1;
    CHECK_ERR(rt_model_create(meta, toy_entry, NULL, 0, images, sizeof images, &m), SNN_ERR_STATE,
              text);
    CHECK(m == NULL);
}

static void
test_work(void)
{
    static const struct {
        const char *text;
        int64_t batch, want;
    } good[] = {
        {"B 784 *", 3, 2352},
        {"B 256 + 1 - 256 /", 300, 2},
        {"7", 9, 7},
        {"10 3 %", 1, 1},
        {"B", 5, 5},
        {" B  2  * ", 4, 8},
        {"B 1 - 3 *", 1, 0},
        {"0", 1, 0},
        {"B 2 / 7 %", 31, 1},
        {"100 B 3 * -", 33, 1},
        {"999999999999999999", 1, 999999999999999999},
        /* >=: 1 or 0, a kernel's work from some batch on (GPU tiles) and its twin's below */
        {"B 784 * B 784 * 131072 >= *", 167, 0},
        {"B 784 * B 784 * 131072 >= *", 168, 131712},
        {"B 5 * 1 B 3 >= - *", 2, 10},
        {"B 5 * 1 B 3 >= - *", 3, 0},
        {"3 3 >=", 1, 1},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        RtCudaWork w;
        char err[256] = "";
        int64_t v = -1;
        bool is_ok = rt_cuda_work_parse(good[i].text, strlen(good[i].text), &w, err, sizeof err) &&
                     rt_cuda_work_eval(&w, good[i].batch, &v, err, sizeof err);
        if (!is_ok || v != good[i].want)
            fprintf(stderr, "WORK '%s' at B=%lld: %lld (%s), want %lld\n", good[i].text,
                    (long long)good[i].batch, (long long)v, err, (long long)good[i].want);
        CHECK(is_ok && v == good[i].want);
        rt_cuda_work_free(&w);
    }
    static const struct {
        const char *text, *why;
    } bad_texts[] = {
        {"", "empty"},
        {"   ", "empty"},
        {"B +", "one operand"},
        {"+", "no operands"},
        {"B 3", "leaves 2 values"},
        {"B x *", "'x' is not a number"},
        {"-3", "'-3' is not"},
        {"B 3 **", "'**' is not"},
        {"1.5", "'1.5' is not"},
        {"b 2 *", "'b' is not"},
        {"1000000000000000000", "is not a number"},
        {"B >=", "'>=' has one operand"},
        {"B 3 =>", "'=>' is not"},
        {"B 3 >", "'>' is not"},
    };
    for (size_t i = 0; i < sizeof bad_texts / sizeof bad_texts[0]; i++) {
        RtCudaWork w;
        char err[256] = "";
        bool is_ok = rt_cuda_work_parse(bad_texts[i].text, strlen(bad_texts[i].text), &w, err,
                                        sizeof err);
        if (is_ok || !strstr(err, bad_texts[i].why))
            fprintf(stderr, "WORK '%s': %s, want an error with '%s'\n", bad_texts[i].text,
                    is_ok ? "accepted" : err, bad_texts[i].why);
        CHECK(!is_ok && strstr(err, bad_texts[i].why));
        CHECK(w.toks == NULL && w.ntoks == 0);
    }
    /* deeper than the evaluator's stack */
    char deep[1024] = "";
    for (int i = 0; i <= RT_WORK_MAX_DEPTH; i++)
        strcat(deep, "1 ");
    RtCudaWork w;
    char err[256] = "";
    CHECK(!rt_cuda_work_parse(deep, strlen(deep), &w, err, sizeof err) && strstr(err, "deeper"));
    /* only the given length is read */
    CHECK(rt_cuda_work_parse("B 2 * garbage", 5, &w, err, sizeof err));
    int64_t v = 0;
    CHECK(rt_cuda_work_eval(&w, 21, &v, err, sizeof err) && v == 42);
    rt_cuda_work_free(&w);
    /* arithmetic that fails at run time, with the batch it failed at */
    static const struct {
        const char *text;
        int64_t batch;
        const char *why;
    } fails[] = {
        {"1 B /", 0, "divides by zero at B = 0"},
        {"5 B %", 0, "divides by zero at B = 0"},
        {"B 2 -", 0, "negative (-2) at B = 0"},
        {"999999999999999999 B *", 100, "overflows at B = 100"},
    };
    for (size_t i = 0; i < sizeof fails / sizeof fails[0]; i++) {
        const char *t = fails[i].text;
        CHECK(rt_cuda_work_parse(t, strlen(t), &w, err, sizeof err));
        err[0] = 0;
        CHECK(!rt_cuda_work_eval(&w, fails[i].batch, &v, err, sizeof err));
        CHECK(strstr(err, fails[i].why) != NULL);
        CHECK(rt_cuda_work_eval(&w, 2, &v, err, sizeof err)); /* fine at B = 2 */
        rt_cuda_work_free(&w);
    }
}

static void
test_driver(bool has_libcuda)
{
    RtCudaDriver d;
    char err[512] = "";
    CHECK(!rt_cuda_driver_open(NO_DRIVER, &d, err, sizeof err));
    CHECK(strstr(err, "CUDA is unavailable") && strstr(err, NO_DRIVER));
    CHECK(d.handle == NULL);
    /* a library that is not a driver: the first function it lacks */
    err[0] = 0;
    CHECK(!rt_cuda_driver_open("libm.so.6", &d, err, sizeof err));
    CHECK(strstr(err, "CUDA is unavailable: libm.so.6 has no cuGetErrorName (too old)") != NULL);
    if (!has_libcuda) {
        err[0] = 0;
        CHECK(!rt_cuda_driver_open(NULL, &d, err, sizeof err));
        CHECK(strstr(err, "CUDA is unavailable: the NVIDIA driver (libcuda.so.1) is not "
                          "installed: ") == err);
        CHECK(strstr(err, "libcuda.so.1") != NULL);
    }
    /* the process's driver: $SNN_CUDA_DRIVER, set by main, the same answer every time */
    for (int i = 0; i < 2; i++) {
        err[0] = 0;
        CHECK(rt_cuda_driver(err, sizeof err) == NULL && strstr(err, NO_DRIVER));
    }
    /* the message of a failed call without a driver to name it */
    rt_cuda_error(NULL, 2, "cuMemAlloc_v2", err, sizeof err);
    CHECK(!strcmp(err, "cuMemAlloc_v2 failed: CUDA error 2"));
}

static void
test_models(void)
{
    snn_model *m = NULL;
    CHECK(rt_model_create(toy_meta, toy_entry, NULL, 0, images, sizeof images, &m) == SNN_OK);
    if (!m) return;
    CHECK(rt_model_is_made(m));
    CHECK(!strcmp(snn_model_devices(m), "cpu,cuda"));
    CHECK(m->ncuda_kernels == 5 && m->ncuda_images == 2 && m->ncuda_bufs == 4);
    CHECK(m->nbufs == 5 && m->ncuda_layers == 1 && m->cuda_layers[0].buf == 3);
    CHECK(m->cuda_bufs[3].type == RT_ELEM_I64 && !m->cuda_bufs[3].needs_zero &&
          m->cuda_bufs[3].is_accumulator);
    const RtCudaKernel *k = m->cuda_kernels;
    CHECK(!strcmp(k[0].symbol, "snnk_k0") && !k[0].is_step && !k[0].is_single);
    CHECK(k[0].nbufs == 2 && k[0].bufs[0] == 1 && k[0].bufs[1] == 3);
    CHECK(k[1].is_step && k[1].nbufs == 3 && k[1].bufs[2] == 2);
    CHECK(k[2].is_step && k[2].is_single && k[2].nbufs == 2);
    CHECK(!k[3].is_step && k[3].nbufs == 3);
    CHECK(!k[4].is_step && k[4].is_single && k[4].nbufs == 0);
    /* a weight stored in 16 bits: 2 bytes per element */
    snn_model *m16 = NULL;
    const char *meta16 = edit(toy_meta, "cuda_buf w weight f32", "cuda_buf w weight f16");
    CHECK(rt_model_create(meta16, toy_entry, NULL, 0, images, sizeof images, &m16) == SNN_OK);
    CHECK(m16 && m16->cuda_bufs[0].type == RT_ELEM_F16 && m16->cuda_bufs[0].elem == 2);
    rt_model_free(m16);
    /* ... and a layer's output (a temporary) too */
    meta16 = edit(toy_meta, "buf acc temp f32", "buf acc temp bf16");
    CHECK(rt_model_create(meta16, toy_entry, NULL, 0, images, sizeof images, &m16) == SNN_OK);
    rt_model_free(m16);
    int64_t v = 0;
    char err[256];
    CHECK(rt_cuda_work_eval(&k[1].work, 5, &v, err, sizeof err) && v == 21);
    CHECK(rt_cuda_work_eval(&k[3].work, 5, &v, err, sizeof err) && v == 10);
    CHECK(!m->cuda_images[0].is_cubin && m->cuda_images[0].cc == 80);
    CHECK(m->cuda_images[1].is_cubin && m->cuda_images[1].cc == 90);
    CHECK(!strcmp(m->cuda_images[1].arch, "sm_90") && m->cuda_images[1].offset == 8);
    CHECK(snn_model_has_weights(m) == 0);
    rt_model_free(m);
    CHECK(!rt_model_is_made(m));
    rt_model_free(NULL);

    /* CUDA code only: devices "cuda"; records before "end" in any order */
    CHECK(rt_model_create(toy_meta, NULL, NULL, 0, images, sizeof images, &m) == SNN_OK);
    if (m) CHECK(!strcmp(snn_model_devices(m), "cuda"));
    rt_model_free(m);
    const char *swapped = edit(toy_meta, "cuda_kernel 0 snnk_k0 0 grid 2 1 3 B 4 *\n", "");
    char reordered[4096];
    snprintf(reordered, sizeof reordered, "%s", swapped);
    char *end = strstr(reordered, "end\n");
    snprintf(end, sizeof reordered - (size_t)(end - reordered),
             "cuda_kernel 0 snnk_k0 0 grid 2 1 3 B 4 *\nend\n");
    CHECK(rt_model_create(reordered, NULL, NULL, 0, images, sizeof images, &m) == SNN_OK);
    if (m) CHECK(!strcmp(m->cuda_kernels[0].symbol, "snnk_k0"));
    rt_model_free(m);

    /* no CUDA code: as before the CUDA backend, whatever the devices line says */
    CHECK(rt_model_create(cpu_meta, toy_entry, NULL, 0, NULL, 0, &m) == SNN_OK);
    if (m) CHECK(!strcmp(snn_model_devices(m), "cpu") && m->ncuda_kernels == 0);
    rt_model_free(m);
    CHECK(rt_model_create(edit(cpu_meta, "devices cpu", "devices cpu,cuda"), toy_entry, NULL, 0,
                          NULL, 0, &m) == SNN_OK);
    if (m) CHECK(!strcmp(snn_model_devices(m), "cpu"));
    rt_model_free(m);

    /* malformed records, each with what is wrong */
    check_bad(edit(toy_meta, "cuda_kernel 3 snnk_k3", "cuda_kernel 5 snnk_k3"),
              "(line 23: cuda_kernel: the kernel index is not in 0..4)");
    check_bad(edit(toy_meta, "cuda_kernel 3 snnk_k3", "cuda_kernel 2 snnk_k3"),
              "kernel 2 is described twice");
    check_bad(edit(toy_meta, "cuda_kernel 3 snnk_k3", "cuda_kernel -1 snnk_k3"),
              "the kernel index is not in 0..4");
    check_bad(edit(toy_meta, "cuda_kernel 3 snnk_k3 0 grid 3 0 2 3 B 4 * 2 /\n", ""),
              "(line 23: cuda_kernel: the kernel index is not in 0..3)");
    check_bad(edit(toy_meta, "snnk_k2", "2k"), "cuda_kernel 2: the symbol is not a C identifier");
    check_bad(edit(toy_meta, "snnk_k2 1 single", "snnk_k2 2 single"),
              "cuda_kernel 2: expected STEP (0 or 1), MODE (grid or single) and NB (0..4)");
    check_bad(edit(toy_meta, "snnk_k2 1 single", "snnk_k2 1 warp"), "MODE (grid or single)");
    check_bad(edit(toy_meta, "single 2 2 3 1", "single 9 2 3 1"), "NB (0..4)");
    check_bad(edit(toy_meta, "single 2 2 3 1", "single 2 3 2 1"),
              "cuda_kernel 2: buffer parameter 1 is not an increasing cuda_buf index in 0..3");
    check_bad(edit(toy_meta, "single 2 2 3 1", "single 2 2 4 1"), "buffer parameter 1");
    check_bad(edit(toy_meta, "single 2 2 3 1", "single 2 2 3"), "cuda_kernel 2: WORK is empty");
    check_bad(edit(toy_meta, "B 4 * 1 +", "B 4 * 1"),
              "cuda_kernel 1: WORK 'B 4 * 1' leaves 2 values (an operator is missing)");
    check_bad(edit(toy_meta, "B 4 * 2 /", "B 4 * 2 ^"), "'^' is not a number");
    check_bad(edit(toy_meta, "cuda_image ptx compute_80", "cuda_image cubin compute_80"),
              "(line 25: cuda_image: a cubin image's ARCH must be sm_NN, not 'compute_80')");
    check_bad(edit(toy_meta, "cuda_image ptx compute_80", "cuda_image elf compute_80"),
              "cuda_image: expected FORMAT (cubin or ptx), ARCH, OFFSET and SIZE");
    check_bad(edit(toy_meta, "cubin sm_90", "cubin sm90"), "ARCH must be sm_NN, not 'sm90'");
    check_bad(edit(toy_meta, "ptx compute_80", "ptx sm_80"), "ARCH must be compute_NN");
    check_bad(edit(toy_meta, "cubin sm_90 8 8", "cubin sm_90 8 9"),
              "cuda_image sm_90: bytes [8, 8 + 9) are not within the 16 bytes of the model's CUDA "
              "images");
    check_bad(edit(toy_meta, "cubin sm_90 8 8", "cubin sm_90 8 0"), "are not within");
    check_bad(edit(toy_meta, "cubin sm_90 8 8", "cubin sm_90 -1 8"), "are not within");
    check_bad(edit(toy_meta, "cubin sm_90 8 8", "cubin sm_90 8"), "cuda_image: expected");
    check_bad(edit(toy_meta, "cuda_image ptx compute_80 0 8\ncuda_image cubin sm_90 8 8\n", ""),
              "the model's description is malformed: it has cuda_kernel records but no "
              "cuda_image");
    {
        const char *k0 = strstr(toy_meta, "cuda_kernel 0"), *img = strstr(toy_meta, "cuda_image");
        char kernels[512];
        snprintf(kernels, sizeof kernels, "%.*s", (int)(img - k0), k0);
        check_bad(edit(toy_meta, kernels, ""), "it has CUDA records but no cuda_kernel");
    }
    check_bad(edit(toy_meta, "cuda_layer s 3\n", ""), "it has 0 cuda_layer records for 1 layers");
    /* the CUDA program's spike counts accumulate across runs; nothing else does */
    check_bad(edit(toy_meta, "cuda_buf s.n temp i64 4 0 -1 0 0 2 0",
                   "cuda_buf s.n temp i64 4 0 -1 0 0 0 0"),
              "its cuda_buf or cuda_layer records do not fit its inputs, outputs, weights or "
              "counted layers");
    check_bad(edit(toy_meta, "cuda_buf y output f32 4 0 0 0 0 1 0",
                   "cuda_buf y output f32 4 0 0 0 0 2 0"),
              "its cuda_buf or cuda_layer records do not fit its inputs, outputs, weights or "
              "counted layers");
    check_bad(edit(toy_meta, "cuda_layer s 3", "cuda_layer t 3"),
              "cuda_layer 0 is 't', layer 0 's'");
    check_bad(edit(toy_meta, "cuda_layer s 3", "cuda_layer s 2"),
              "its cuda_buf or cuda_layer records do not fit its inputs, outputs, weights or "
              "counted layers");
    check_bad(edit(toy_meta, "cuda_buf w weight f32 0 4", "cuda_buf w weight f32 0 5"),
              "do not fit");
    check_bad(edit(toy_meta, "cuda_buf y output f32 4 0 0", "cuda_buf y output f32 4 0 1"),
              "do not fit");
    check_bad(edit(toy_meta, "cuda_buf x input f32 4 0", "cuda_buf x input f32 5 0"),
              "cuda_buf 'x' is not the size of input 'x'");
    check_bad(edit(toy_meta, "cuda_buf x input f32", "cuda_buf x input f33"),
              "malformed (line 17)");
    /* 16-bit element types are for weights and temporaries only: inputs and outputs are the
     * caller's floats */
    check_bad(edit(toy_meta, "cuda_buf x input f32", "cuda_buf x input f16"), "do not fit");
    check_bad(edit(toy_meta, "buf y output f32", "buf y output bf16"), "malformed");
    check_bad(edit(toy_meta, "devices cpu,cuda", "devices cpu,tpu"),
              "its devices line names an unknown device 'tpu'");
    check_bad(edit(toy_meta, "end\n", "end\ncuda_kernel 5 x 0 grid 0 1\n"),
              "text after its end record");
    check_bad(edit(toy_meta, "snnc-model 2", "snnc-model 1"),
              "the model's description is for runtime ABI 1, this runtime is 2");
    check_bad(edit(toy_meta, "buf s.n temp i64", "buf s.n temp f64"), "malformed (line");
    /* spike counters: int64, or on the CPU bytes (a run's count that fits one); never bytes that
     * accumulate across runs, never another type */
    CHECK(rt_model_create(edit(cpu_meta, "buf s.n temp i64", "buf s.n temp u8"), toy_entry, NULL, 0,
                          NULL, 0, &m) == SNN_OK);
    if (m) CHECK(m->bufs[m->layers[0].buf].type == RT_ELEM_U8 && m->bufs[m->layers[0].buf].elem == 1);
    rt_model_free(m);
    check_bad(edit(toy_meta, "buf s.n temp i64", "buf s.n temp i8"), "malformed (line");
    check_bad(edit(toy_meta, "cuda_buf s.n temp i64 4 0 -1 0 0 2 0",
                   "cuda_buf s.n temp u8 4 0 -1 0 0 2 0"),
              "its cuda_buf or cuda_layer records do not fit");
    /* a weight in tiles: split needs a transpose over rank + 1 dims and must divide dim 0 */
    check_bad(edit(toy_meta, "cuda_buf w weight f32 0 4 0 0 0", "cuda_buf w weight f32 0 4 0 0 2"),
              "its cuda_buf or cuda_layer records do not fit");
    check_bad(edit(toy_meta, "cuda_buf w weight f32 0 4 0 0 0", "cuda_buf w weight f32 0 4 0 1 3 0"),
              "its cuda_buf or cuda_layer records do not fit");
    /* the memory plan's slot: a count from 0 */
    check_bad(edit(toy_meta, "buf acc temp f32 4 0 -1 0 0 1 0", "buf acc temp f32 4 0 -1 0 0 1 -1"),
              "malformed (line");
    check_bad(edit(toy_meta, "buf acc temp f32 4 0 -1 0 0 1 0", "buf acc temp f32 4 0 -1 0 0 1"),
              "malformed (line");
    /* ... and its optional span (runtime/layout.h): 1 or more regions from there */
    {
        snn_model *ms = NULL;
        CHECK(rt_model_create(edit(toy_meta, "buf acc temp f32 4 0 -1 0 0 1 0",
                                   "buf acc temp f32 4 0 -1 0 0 1 0 3"),
                              toy_entry, NULL, 0, images, sizeof images, &ms) == SNN_OK);
        if (ms) CHECK(ms->bufs[3].span == 3 && ms->bufs[4].span == 1);
        rt_model_free(ms);
    }
    check_bad(
        edit(toy_meta, "buf acc temp f32 4 0 -1 0 0 1 0", "buf acc temp f32 4 0 -1 0 0 1 0 0"),
        "malformed (line");
    check_bad(
        edit(toy_meta, "buf acc temp f32 4 0 -1 0 0 1 0", "buf acc temp f32 4 0 -1 0 0 1 0 x"),
        "malformed (line");
    /* images the records index must be there */
    CHECK_ERR(rt_model_create(toy_meta, toy_entry, NULL, 0, NULL, 0, &m), SNN_ERR_STATE,
              "not within the 0 bytes");
    CHECK_ERR(rt_model_create(cpu_meta, NULL, NULL, 0, NULL, 0, &m), SNN_ERR_STATE,
              "carries code for no device");
    CHECK_ERR(rt_model_create(NULL, toy_entry, NULL, 0, NULL, 0, &m), SNN_ERR_ARGUMENT,
              "meta is NULL");
    CHECK_ERR(rt_model_create(toy_meta, toy_entry, NULL, 4, NULL, 0, &m), SNN_ERR_ARGUMENT,
              "weights is NULL");
}

static void
test_sessions(void)
{
    unsigned char wbytes[256];
    size_t wsize = toy_weights(wbytes);
    snn_model *m = NULL, *cuda_only = NULL, *cpu_only = NULL;
    CHECK(rt_model_create(toy_meta, toy_entry, wbytes, wsize, images, sizeof images, &m) ==
          SNN_OK);
    CHECK(rt_model_create(toy_meta, NULL, wbytes, wsize, images, sizeof images, &cuda_only) ==
          SNN_OK);
    CHECK(rt_model_create(cpu_meta, toy_entry, wbytes, wsize, NULL, 0, &cpu_only) == SNN_OK);
    if (!m || !cuda_only || !cpu_only) return;
    memset(wbytes, 0, sizeof wbytes); /* the models hold copies */
    CHECK(snn_model_has_weights(m) == 1);

    /* no driver: every CUDA device says why */
    snn_session *s = (snn_session *)1;
    CHECK_ERR(snn_session_create(m, "cuda", 4, 1, &s), SNN_ERR_DEVICE, "CUDA is unavailable: ");
    CHECK(s == NULL);
    CHECK_ERR(snn_session_create(m, "cuda:1", 4, 1, &s), SNN_ERR_DEVICE, NO_DRIVER);
    CHECK_ERR(snn_session_create(cuda_only, "auto", 4, 1, &s), SNN_ERR_DEVICE,
              "CUDA is unavailable");
    CHECK_ERR(snn_session_create(cuda_only, NULL, 4, 1, &s), SNN_ERR_DEVICE, "CUDA is unavailable");
    /* device strings */
    CHECK_ERR(snn_session_create(m, "cuda:x", 4, 1, &s), SNN_ERR_DEVICE,
              "unknown device 'cuda:x' (CUDA devices are cuda, cuda:0, cuda:1, ...)");
    CHECK_ERR(snn_session_create(m, "cuda:", 4, 1, &s), SNN_ERR_DEVICE, "unknown device");
    CHECK_ERR(snn_session_create(m, "cuda:01", 4, 1, &s), SNN_ERR_DEVICE, "unknown device");
    CHECK_ERR(snn_session_create(m, "cuda:-1", 4, 1, &s), SNN_ERR_DEVICE, "unknown device");
    CHECK_ERR(snn_session_create(m, "gpu", 4, 1, &s), SNN_ERR_DEVICE,
              "unknown device 'gpu' (this library runs on: cpu,cuda)");
    CHECK_ERR(snn_session_create(cpu_only, "cuda:0", 4, 1, &s), SNN_ERR_DEVICE,
              "device 'cuda:0': this library holds code for cpu only");
    CHECK_ERR(snn_session_create(cpu_only, "cuda:x", 4, 1, &s), SNN_ERR_DEVICE,
              "this library holds code for cpu only");
    CHECK_ERR(snn_session_create(cuda_only, "cpu", 4, 1, &s), SNN_ERR_DEVICE,
              "device 'cpu': this library holds code for cuda only");
    CHECK_ERR(snn_session_create(m, "cuda", 0, 1, &s), SNN_ERR_ARGUMENT, "max_batch");
    CHECK_ERR(snn_session_create((const snn_model *)images, "cpu", 4, 1, &s), SNN_ERR_ARGUMENT,
              "not a model of this library");

    /* auto: the CPU when CUDA cannot be had */
    const char *devices[] = {"auto", "", NULL, "cpu"};
    for (int i = 0; i < 4; i++) {
        s = NULL;
        CHECK(snn_session_create(m, devices[i], 4, 2, &s) == SNN_OK);
        if (!s) continue;
        CHECK(!strcmp(snn_session_device(s), "cpu") && snn_session_threads(s) == 2);
        float x[8] = {1, 1, 1, 1, 2, 2, 2, 2}, y[8] = {0};
        const float *in[] = {x};
        float *out[] = {y};
        CHECK(snn_run(s, 0, 2, in, out) == SNN_OK);
        CHECK(y[0] == 1 && y[3] == 4 && y[4] == 2 && y[7] == 8);
        double counts[1] = {0};
        CHECK(snn_session_spike_counts(s, counts, 1) == SNN_OK && counts[0] == 8);
        snn_stats st;
        CHECK(snn_session_stats(s, &st) == SNN_OK && st.runs == 1 && st.samples == 2);
        CHECK(st.kernel_launches == 2 + 2 * 3 && st.graph_launches == 0);
        /* device pointers need a cuda session */
        const void *din[] = {x};
        void *dout[] = {y};
        CHECK_ERR(snn_run_device(s, 0, 2, din, dout), SNN_ERR_DEVICE,
                  "snn_run_device needs a cuda session (this one is on cpu)");
        CHECK_ERR(snn_run_stream(s, NULL, 0, 2, din, dout), SNN_ERR_DEVICE,
                  "snn_run_stream needs a cuda session (this one is on cpu)");
        CHECK_ERR(snn_run_stream(s, NULL, 0, 0, din, dout), SNN_ERR_ARGUMENT,
                  "snn_run_stream: batch 0 is not in 1..4");
        CHECK_ERR(snn_run_device(s, 0, 9, din, dout), SNN_ERR_ARGUMENT,
                  "snn_run_device: batch 9 is not in 1..4");
        CHECK_ERR(snn_run_device(NULL, 0, 1, din, dout), SNN_ERR_ARGUMENT, "session is NULL");
        CHECK_ERR(snn_run_device(s, 0, 1, NULL, dout), SNN_ERR_ARGUMENT, "inputs is NULL");
        const float *nullin[] = {NULL};
        CHECK_ERR(snn_run(s, 0, 1, nullin, out), SNN_ERR_ARGUMENT, "inputs[0] ('x') is NULL");
        snn_session_destroy(s);
    }
    /* weights replaced on a CPU session of a model from parts */
    CHECK(snn_session_create(cpu_only, "auto", 1, 1, &s) == SNN_OK);
    if (s) {
        CHECK(!strcmp(snn_session_device(s), "cpu"));
        unsigned char w2[256];
        size_t n2 = toy_weights(w2);
        float neg[4] = {-1, -2, -3, -4};
        memcpy(w2 + n2 - sizeof neg, neg, sizeof neg);
        CHECK(snn_session_load_weights(s, w2, n2) == SNN_OK);
        float x[4] = {1, 1, 1, 1}, y[4] = {0};
        const float *in[] = {x};
        float *out[] = {y};
        CHECK(snn_run(s, 0, 1, in, out) == SNN_OK && y[0] == -1 && y[3] == -4);
        snn_session_destroy(s);
    }
    rt_model_free(m);
    rt_model_free(cuda_only);
    rt_model_free(cpu_only);
}

/* In a child process (the driver is loaded once per process): the default driver, libcuda.so.1,
 * absent here, as a session sees it. Returns the number of failed checks. */
static int
check_default_driver(void)
{
    unsetenv("SNN_CUDA_DRIVER");
    snn_model *m = NULL;
    if (rt_model_create(toy_meta, toy_entry, NULL, 0, images, sizeof images, &m) != SNN_OK)
        return 1;
    int nbad = 0;
    snn_session *s = NULL;
    if (snn_session_create(m, "cuda:0", 1, 1, &s) != SNN_ERR_DEVICE ||
        !strstr(snn_last_error(), "CUDA is unavailable: the NVIDIA driver (libcuda.so.1) is not "
                                  "installed: ")) {
        fprintf(stderr, "default driver: \"%s\"\n", snn_last_error());
        nbad++;
    }
    if (snn_session_create(m, "auto", 1, 1, &s) != SNN_OK || strcmp(snn_session_device(s), "cpu"))
        nbad++;
    snn_session_destroy(s);
    rt_model_free(m);
    return nbad;
}

int
main(void)
{
    void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (libcuda) dlclose(libcuda);
    if (!libcuda) {
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) _exit(check_default_driver() ? 1 : 0);
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0);
    }
    /* before anything loads the driver: this process's CUDA is one that does not exist */
    setenv("SNN_CUDA_DRIVER", NO_DRIVER, 1);

    CHECK(snn_abi_version() == SNN_ABI_VERSION);
    /* no generated object here: no model of its own */
    CHECK(snn_model_get() == NULL && strstr(snn_last_error(), "holds no compiled model"));
    test_work();
    test_driver(libcuda != NULL);
    test_models();
    test_sessions();
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
