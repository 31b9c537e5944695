/* fuzz_lower.c: libFuzzer target for the whole frontend: parse, lower, verify and infer a model
 * from any bytes, as a .snn (with the prelude) or as textual IR (.snnir) by the first byte's low
 * bit. Never a crash, hang or leak; and every module that loads must print, re-parse and print to
 * the same bytes (the IR round-trip property), and its train-step module (ir_grad) print and load
 * back to the same forward, its marks cleared. Includes of anything but regular files are refused
 * by the frontend. */
#include "frontend/frontend.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *devnull;
    if (!devnull) {
        devnull = fopen("/dev/null", "w");
        if (!devnull)
            die("cannot open /dev/null");
    }
    if (size == 0)
        return 0;
    diag_set_stream(devnull);
    const char *path = data[0] & 1 ? "fuzz.snnir" : "fuzz.snn";
    Module *m = fe_load_text(path, (const char *)data + 1, size - 1, NULL);
    if (m) {
        char *once = ir_print_to_string(m);
        Module *again = fe_load_text("fuzz-printed.snnir", once, strlen(once), NULL);
        if (!again)
            die("printed IR does not load back:\n%s", once);
        char *twice = ir_print_to_string(again);
        if (strcmp(once, twice) != 0)
            die("IR round trip differs:\n%s\n---\n%s", once, twice);
        free(twice);
        free(once);
        module_free(again);
        /* its train-step module (ir/grad.c) prints, and that loads back to the same forward */
        Module *tm = ir_grad(m, data[0] & 2);
        char *train = ir_print_to_string(tm);
        Module *fwd = fe_load_text("fuzz-train.snnir", train, strlen(train), NULL);
        if (!fwd) die("printed train-step module does not load back:\n%s", train);
        Module *plain = module_clone(m); /* the forward as ir_grad copies it: no marks */
        module_clear_marks(plain);
        char *a = ir_print_to_string(plain), *b = ir_print_to_string(fwd);
        if (strcmp(a, b) != 0) die("train-step module's forward differs:\n%s\n---\n%s", a, b);
        free(a);
        free(b);
        module_free(plain);
        free(train);
        module_free(fwd);
        module_free(tm);
        module_free(m);
    }
    diag_reset();
    return 0;
}
