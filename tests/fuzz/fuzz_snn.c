/* fuzz_snn.c: libFuzzer target for the frontend's scanner and parser (fe_parse). Any bytes must
 * give an AST or exactly one diagnostic: never a crash, a hang, a leak or a read past the input
 * (which is not NUL-terminated). Needs snnfe's parser.c and lexer.c and ir/arena.c, ir/diag.c only;
 * with replay.c instead of libFuzzer it replays a corpus with any compiler. */
#include "frontend/frontend.h"

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
    diag_set_stream(devnull);
    Arena arena = {0};
    AstFile *f = fe_parse(&arena, "fuzz.snn", (const char *)data, size);
    if (f ? diag_error_count() != 0 : diag_error_count() != 1)
        die("fe_parse returned %s after %d errors", f ? "an AST" : "NULL", diag_error_count());
    arena_free(&arena);
    diag_reset();
    return 0;
}
