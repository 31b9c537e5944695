/* The CUDA backend's build: lower for the GPU, generate CUDA C, compile images with NVRTC (the
 * compile cache and SNN_KERNEL_OVERRIDE included). What the driver's --emit=cuda|ptx|cubin and
 * model.so's CUDA images call. */
#include "codegen/cuda/build.h"

#include "codegen/cache.h"
#include "codegen/cuda/cuda_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
cuda_build_free(CudaBuild *b)
{
    for (int i = 0; i < b->nimages; i++)
        cuda_image_free(&b->images[i]);
    cuda_override_free(&b->ov);
    free(b->source);
    kir_free(b->gp);
    memset(b, 0, sizeof *b);
}

/* Lower m for the GPU and generate its CUDA C; read SNN_KERNEL_OVERRIDE (saying so on stderr). */
bool
cuda_build_begin(CudaBuild *b, KProgram *gp, char *source, const char *model_name)
{
    memset(b, 0, sizeof *b);
    b->gp = gp;
    b->source = source;
    snprintf(b->name, sizeof b->name, "%s.cu", model_name);
    cache_dir_default(b->cache, sizeof b->cache);
    char err[1200];
    if (!cuda_override_load(&b->ov, err, sizeof err)) {
        diag_error((Loc){0}, "%s", err);
        cuda_build_free(b);
        return false;
    }
    if (b->ov.path)
        diag_note((Loc){0}, "SNN_KERNEL_OVERRIDE: %s is used in place of the generated %s",
                  b->ov.path, b->ov.is_ptx ? "PTX" : "CUDA C");
    return true;
}

/* NVRTC's log as it wrote it, ending in a newline */
static void
print_log(const char *log)
{
    size_t n = strlen(log);
    while (n > 0 && (log[n - 1] == '\n' || log[n - 1] == ' '))
        n--;
    if (n) fprintf(stderr, "%.*s\n", (int)n, log);
}

/* Compile the next image. NVRTC's log goes to stderr with an error's reasons, and with the
 * warnings of an override (the user's code; those of generated code are not theirs to act on). */
CudaImage *
cuda_build_add(CudaBuild *b, const char *arch, bool is_cubin)
{
    if (b->nimages == MAX_CUDA_IMAGES) die("too many CUDA images");
    CudaImage *img = &b->images[b->nimages++];
    char err[1200];
    bool is_ok = cuda_build_image(b->source, b->name, &b->ov, arch, is_cubin, b->cache, img, err,
                                  sizeof err);
    if (!is_ok) diag_error((Loc){0}, "%s", err);
    if (!is_ok || b->ov.path) print_log(img->log);
    return is_ok ? img : NULL;
}
