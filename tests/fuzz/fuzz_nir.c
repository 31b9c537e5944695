/* fuzz_nir.c: libFuzzer target for NIR import and export after the HDF5 layer: the first byte
 * chooses the import options (integrator, reset, reset step, impulses, dt), the input's length a
 * --framework preset (which fills the options no bit states as given), the rest is a .nir
 * file's tree as nir_tree_parse text. Never a crash, hang or leak; a graph that imports must give
 * a .snn text the frontend compiles (the importer checks everything the language would reject),
 * and that model must export to NIR (--emit=nir) and import again. libhdf5 itself is not fuzzed
 * here: its reader is its own project's. */
#include "frontend/frontend.h"
#include "nir/nir.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull) {
        devnull = fopen("/dev/null", "w");
        if (!devnull) die("cannot open /dev/null");
    }
    if (size == 0) return 0;
    diag_set_stream(devnull);
    NirImportOptions o = {
        .integrator = data[0] & 1 ? NIR_EXACT : NIR_EULER,
        .reset = data[0] & 2 ? NIR_RESET_SUBTRACT : NIR_RESET_VALUE,
        .reset_next = (data[0] & 4) != 0,
        .impulses = (data[0] & 8) != 0,
        .dt = data[0] & 16 ? 1e-3 : 1e-4,
        .timesteps = 1 + (data[0] >> 5),
        .framework = (NirFramework)(size % NIR_FW_COUNT),
        .given = size / NIR_FW_COUNT % 2 ? NIR_GIVEN_RESET | NIR_GIVEN_RESET_STEP : 0,
    };
    NirObj root;
    char err[1024];
    if (nir_tree_parse((const char *)data + 1, size - 1, &root, err, sizeof err)) {
        NirGraph g;
        if (nir_graph_build(&root, "fuzz.nir", &g, err, sizeof err)) {
            NirImport im;
            if (nir_to_snn(&g, "fuzz.nir", &o, &im, err, sizeof err)) {
                Module *m = fe_load_text("fuzz.nir.snn", im.text, im.len, NULL);
                if (!m) { /* say why, then fail */
                    diag_set_stream(stderr);
                    fe_load_text("fuzz.nir.snn", im.text, im.len, NULL);
                    die("an imported graph does not compile:\n%s", im.text);
                }
                RtTensorSet set = {im.tensors, im.ntensors};
                if (!weights_bind_set(m, &set, "fuzz.nir")) die("imported weights do not bind");
                /* exported with the options the import ran with, and read back with them (as
                 * the file's stored options would give them) */
                NirImportOptions eff = o;
                nir_apply_preset(&eff);
                eff.given = ~0u;
                NirObj back;
                char notes[2048];
                bool is_exported = nir_from_module(m, eff.dt, eff.impulses, eff.framework, &back,
                                                   notes, sizeof notes, err, sizeof err);
                /* only a neuron without a time constant (decay >= 1 in a synapse, say) or with
                 * parameters whose NIR form overflows float32 may fail */
                if (!is_exported && !strstr(err, "has no positive time constant") &&
                    !strstr(err, "does not fit float32"))
                    die("an imported graph does not export: %s\n%s", err, im.text);
                NirGraph g2;
                NirImport im2;
                if (is_exported) {
                    if (!nir_graph_build(&back, "back.nir", &g2, err, sizeof err) ||
                        !nir_to_snn(&g2, "back.nir", &eff, &im2, err, sizeof err))
                        die("an exported graph does not import: %s\n%s", err, im.text);
                    nir_import_free(&im2);
                    nir_graph_free(&g2);
                    nir_obj_free(&back);
                }
                module_free(m);
                nir_import_free(&im);
            }
            nir_graph_free(&g);
        }
        nir_obj_free(&root);
    }
    diag_reset();
    return 0;
}
