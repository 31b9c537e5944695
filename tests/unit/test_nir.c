/* NIR import without HDF5: trees written as text (nir_tree_parse) through the graph builder and
 * the translation to the language, whose output must compile. Malformed graphs must fail with a
 * message naming the node and field; well-formed ones must translate as documented. */
#include "frontend/frontend.h"
#include "nir/nir.h"
#include "tests/unit/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a small valid graph: x[4] -> fc (Affine 3x4) -> lif (LIF) -> out */
#define HEAD "node/type s - NIRGraph\n"
#define MLP_NODES                                                                                 \
    "node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 4\n"                                     \
    "node/nodes/fc/type s - Affine\nnode/nodes/fc/weight f 3x4 1 0 0 0 0 1 0 0 0 0 1 0\n"         \
    "node/nodes/fc/bias f 3 0.5 0 -0.5\n"                                                         \
    "node/nodes/lif/type s - LIF\nnode/nodes/lif/tau f 3 1e-3 1e-3 1e-3\n"                        \
    "node/nodes/lif/r f 3 10 10 10\nnode/nodes/lif/v_leak f 3 0 0 0\n"                            \
    "node/nodes/lif/v_threshold f 3 1 1 1\nnode/nodes/lif/v_reset f 3 0 0 0\n"                    \
    "node/nodes/out/type s - Output\n"
#define MLP_EDGES "node/edges s 3x2 x fc fc lif lif out\n"

static NirImportOptions
defaults(void)
{
    return (NirImportOptions){.dt = 1e-4, .timesteps = 4};
}

/* text → import; on success the .snn text must load in the frontend */
static bool
import(const char *tree, const NirImportOptions *o, NirImport *im, char *err, size_t errlen)
{
    NirObj root;
    memset(im, 0, sizeof *im);
    if (!nir_tree_parse(tree, strlen(tree), &root, err, errlen)) return false;
    NirGraph g;
    bool ok = nir_graph_build(&root, "t.nir", &g, err, errlen);
    if (ok) {
        ok = nir_to_snn(&g, "t.nir", o, im, err, errlen);
        nir_graph_free(&g);
    }
    nir_obj_free(&root);
    if (ok) {
        Module *m = fe_load_text("t.nir.snn", im->text, im->len, NULL);
        if (!m) {
            fprintf(stderr, "generated text does not compile:\n%s\n", im->text);
            snprintf(err, errlen, "the generated text does not compile");
            nir_import_free(im);
            return false;
        }
        module_free(m);
    }
    return ok;
}

static void
expect_error(const char *tree, const NirImportOptions *o, const char *want)
{
    NirImport im;
    char err[1024] = "";
    bool ok = import(tree, o, &im, err, sizeof err);
    CHECK(!ok);
    CHECK(strstr(err, want) != NULL);
    if (ok || !strstr(err, want)) fprintf(stderr, "  want '%s'\n  got  '%s'\n", want, err);
    if (ok) nir_import_free(&im);
}

static char *
expect_ok(const char *tree, const NirImportOptions *o)
{
    NirImport im;
    char err[1024] = "";
    bool ok = import(tree, o, &im, err, sizeof err);
    CHECK(ok);
    if (!ok) {
        fprintf(stderr, "  unexpected error: %s\n", err);
        return strdup("");
    }
    char *text = strdup(im.text);
    nir_import_free(&im);
    return text;
}

static void
expect_text(const char *text, const char *want)
{
    CHECK(strstr(text, want) != NULL);
    if (!strstr(text, want)) fprintf(stderr, "  want '%s' in:\n%s\n", want, text);
}

static void
test_malformed(void)
{
    NirImportOptions o = defaults();
    expect_error("version s - 1.0\n", &o, "no group 'node'");
    expect_error("node/type s - LIF\nnode/nodes/a/type s - Input\n", &o, "not a NIRGraph");
    expect_error(HEAD "node/nodes/a/shape i 1 4\n", &o, "node 'a': field 'type' is missing");
    expect_error(HEAD "node/nodes/a/type s - Foo\n", &o, "node 'a': unknown type 'Foo'");
    expect_error(HEAD MLP_NODES "node/edges s 3x2 x fc fc lif lif nope\n", &o,
                 "no node named 'nope'");
    expect_error(HEAD MLP_NODES "node/edges s 2 x fc\n", &o, "field 'edges' must be pairs");
    expect_error(HEAD MLP_NODES "node/edges s 4x2 x fc fc lif lif out x fc\n", &o, "given twice");
    expect_error(HEAD MLP_NODES "node/edges s 3x2 x fc fc lif lif x\n", &o,
                 "'x' is an input of the model; nothing may write it");
    expect_error(HEAD MLP_NODES "node/nodes/y/type s - Affine\nnode/nodes/y/weight f 1x3 1 1 1\n"
                 "node/nodes/y/bias f 1 0\nnode/edges s 4x2 x fc fc lif lif out out y\n", &o,
                 "'out' is an output of the model; nothing may read it");
    expect_error(HEAD MLP_NODES "node/edges s 2x2 x fc fc lif\n", &o,
                 "node 'out' (Output): no edge leads into it");
    expect_error(HEAD "node/nodes/o/type s - Output\nnode/edges s 0x2\n", &o, "no Input node");
    /* fields */
    const char *bad_weight =
        HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 5\n"
        "node/nodes/fc/type s - Linear\nnode/nodes/fc/weight f 2x4 1 1 1 1 1 1 1 1\n"
        "node/nodes/out/type s - Output\nnode/edges s 2x2 x fc fc out\n";
    expect_error(bad_weight, &o, "node 'fc' (Linear): field 'weight': [2, 4] for an input of shape [5]");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 4\n"
                 "node/nodes/fc/type s - Linear\nnode/nodes/out/type s - Output\n"
                 "node/edges s 2x2 x fc fc out\n", &o, "node 'fc' (Linear): field 'weight': missing");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 4\n"
                 "node/nodes/fc/type s - Linear\nnode/nodes/fc/weight s 1 w\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 x fc fc out\n", &o,
                 "field 'weight': expected numbers, found strings");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 2\n"
                 "node/nodes/fc/type s - Linear\nnode/nodes/fc/weight f 1x2 1 nan\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 x fc fc out\n", &o,
                 "field 'weight': element 1 is nan (not finite)");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 2 100000 100000\n"
                 "node/nodes/out/type s - Output\nnode/edges s 1x2 x out\n", &o,
                 "node 'x' (Input): field 'shape': more than 2^31 elements");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape f 1 2.5\n"
                 "node/nodes/out/type s - Output\nnode/edges s 1x2 x out\n", &o,
                 "dimension 0 is 2.5");
    expect_error(HEAD "node/nodes/x/type s - Input\n"
                 "node/nodes/out/type s - Output\nnode/edges s 1x2 x out\n", &o,
                 "node 'x' (Input): field 'shape': missing");
    char tree[4096];
    snprintf(tree, sizeof tree, "%s", HEAD MLP_NODES MLP_EDGES);
    char *tau = strstr(tree, "tau f 3 1e-3 1e-3 1e-3");
    memcpy(tau, "tau f 3 1e-3 2e-3 1e-3", 22);
    expect_error(tree, &o, "node 'lif' (LIF): field 'tau': values differ across neurons");
    memcpy(tau, "tau f 2 1e-3 1e-3     ", 22);
    expect_error(tree, &o, "field 'tau': 2 values for a layer of shape [3]");
    memcpy(tau, "tau f 3 -1e-3 -1 -1e-3", 22);
    expect_error(tree, &o, "values differ");
    memcpy(tau, "tau f - -1e-3         ", 22);
    expect_error(tree, &o, "field 'tau': -0.001 (a time constant must be positive)");
    /* two inputs of different shapes into one node */
    expect_error(HEAD "node/nodes/a/type s - Input\nnode/nodes/a/shape i 1 4\n"
                 "node/nodes/b/type s - Input\nnode/nodes/b/shape i 1 5\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 a out b out\n", &o,
                 "node 'out' (Output): its inputs differ in shape: [4] from 'a', [5] from 'b'");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 3 2 8 8\n"
                 "node/nodes/c/type s - Conv1d\nnode/nodes/c/weight f 1x2x1 1 1\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 x c c out\n", &o,
                 "node 'c' (Conv1d): its input has shape [2, 8, 8]; a 1-D convolution reads [C, L]");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 2 2 8\n"
                 "node/nodes/c/type s - Conv1d\nnode/nodes/c/weight f 1x2x1 1 1\n"
                 "node/nodes/c/stride i 2 1 2\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 x c c out\n", &o,
                 "are one number each");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 4\n"
                 "node/nodes/d/type s - Delay\nnode/nodes/d/delay f 1 1.5e-4\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 x d d out\n", &o,
                 "node 'd' (Delay): field 'delay': 0.00015 s is not a whole number of steps");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 3 2 3 4\n"
                 "node/nodes/f/type s - Flatten\nnode/nodes/f/start_dim i - 1\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 x f f out\n", &o,
                 "snnc flattens whole samples only");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 3 2 3 4\n"
                 "node/nodes/c/type s - Conv2d\nnode/nodes/c/weight f 1x3x1x1 1 1 1\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 x c c out\n", &o,
                 "field 'weight': [1, 3, ...] with groups = 1 for 2 input channels");
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 3 1 3 4\n"
                 "node/nodes/c/type s - Conv2d\nnode/nodes/c/weight f 1x1x5x1 1 1 1 1 1\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 x c c out\n", &o,
                 "the kernel does not fit the input [1, 3, 4]");
    /* a cycle nothing feeds */
    expect_error(HEAD MLP_NODES "node/nodes/a/type s - Scale\nnode/nodes/a/scale f 1 1\n"
                 "node/nodes/b/type s - Scale\nnode/nodes/b/scale f 1 1\n"
                 "node/edges s 5x2 x fc fc lif lif out a b b a\n", &o, "depends on itself");
    /* nested graphs: two Input nodes inside, and too deep */
    expect_error(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 4\n"
                 "node/nodes/s/type s - NIRGraph\nnode/nodes/s/nodes/i1/type s - Input\n"
                 "node/nodes/s/nodes/i2/type s - Input\nnode/nodes/s/edges s 0x2\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 x s s out\n", &o,
                 "graph 's' has more than one Input node");
    char deep[8192] = HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 4\n";
    char path[1024] = "node/nodes/g";
    for (int d = 0; d < NIR_MAX_DEPTH + 2; d++) {
        size_t k = strlen(deep);
        snprintf(deep + k, sizeof deep - k, "%s/type s - NIRGraph\n", path);
        k = strlen(path);
        snprintf(path + k, sizeof path - k, "/nodes/g");
    }
    expect_error(deep, &o, "nested more than 16 graphs deep");
    NirImportOptions no_t = o;
    no_t.timesteps = 0;
    expect_error(HEAD MLP_NODES MLP_EDGES, &no_t, "give --timesteps=N");
    /* the text format's own errors */
    expect_error("node/type q - x\n", &o, "line 1: expected a kind s, f or i");
    expect_error("node/a f 2 1\n", &o, "line 1: 2 values expected, 1 given");
    expect_error("node/a f 1 1 2\n", &o, "more values than dimensions");
    expect_error("node/a f 1 1\nnode/a/b f 1 1\n", &o, "line 2: a path through a dataset");
}

static void
test_translation(void)
{
    NirImportOptions o = defaults();
    /* the exporters' convention: r = tau/dt, so gain 1; decay = 1 - dt/tau */
    char *t = expect_ok(HEAD MLP_NODES MLP_EDGES, &o);
    expect_text(t, "input x : f32[T, 4]");
    expect_text(t, "fc = dense(x, 3, bias = true, name = \"fc\")");
    expect_text(t, "lif = NIR_LIF(fc, decay = 0.8999999761581421, gain = 1, v_leak = 0, v_th = 1, "
                   "v_reset = 0)");
    expect_text(t, "output out = sequence(lif)");
    expect_text(t, "fire v > v_th\n  reset v = v_reset\n");
    free(t);
    /* subtract at the next step: the reset written before fire */
    NirImportOptions sn = o;
    sn.reset = NIR_RESET_SUBTRACT;
    sn.reset_next = true;
    t = expect_ok(HEAD MLP_NODES MLP_EDGES, &sn);
    expect_text(t, "neuron NIR_LIF_sub_next(");
    expect_text(t, "  reset v -= v_th\n  fire v > v_th\n");
    free(t);
    /* exact integration: decay e^(-dt/tau), gain (1 - decay) r */
    NirImportOptions ex = o;
    ex.integrator = NIR_EXACT;
    t = expect_ok(HEAD MLP_NODES MLP_EDGES, &ex);
    char want[128], num[64];
    print_double(num, sizeof num, (double)(float)exp(-0.1));
    snprintf(want, sizeof want, "decay = %s, gain = ", num);
    expect_text(t, want);
    free(t);
    /* another dt: r = tau/dt no longer holds, the gain is dt/tau * r */
    NirImportOptions dt = o;
    dt.dt = 5e-4;
    t = expect_ok(HEAD MLP_NODES MLP_EDGES, &dt);
    expect_text(t, "decay = 0.5, gain = 5,");
    free(t);
    /* snnTorch's float32 tau = dt / (1 - beta) is inverted exactly, for many beta */
    int nexact = 0, ntried = 0;
    for (float beta = 0.5f; beta < 0.999f; beta += 0.0137f) {
        float tau = (float)(1e-4 / (double)(1.0f - beta)), r = (float)((double)tau / 1e-4);
        char tree[2048];
        snprintf(tree, sizeof tree,
                 HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 2\n"
                 "node/nodes/l/type s - LIF\nnode/nodes/l/tau f - %.9g\nnode/nodes/l/r f - %.9g\n"
                 "node/nodes/l/v_leak f - 0\nnode/nodes/l/v_threshold f - 1\n"
                 "node/nodes/out/type s - Output\nnode/edges s 2x2 x l l out\n",
                 (double)tau, (double)r);
        t = expect_ok(tree, &o);
        print_double(num, sizeof num, (double)beta);
        snprintf(want, sizeof want, "decay = %s, gain = 1,", num);
        nexact += strstr(t, want) != NULL;
        ntried++;
        free(t);
    }
    CHECK(nexact == ntried);
    if (nexact != ntried) fprintf(stderr, "  beta recovered exactly %d of %d\n", nexact, ntried);
    /* old files: no v_reset means 0; names that are keywords or numbers; a nested graph written
     * with dots (nirtorch) and one nested as groups; a cycle gets a delay on a synapse's input */
    t = expect_ok(HEAD "node/nodes/input/type s - Input\nnode/nodes/input/shape i 1 3\n"
                  "node/nodes/0/type s - Affine\nnode/nodes/0/weight f 3x3 1 0 0 0 1 0 0 0 1\n"
                  "node/nodes/0/bias f 3 0 0 0\n"
                  "node/nodes/r.lif/type s - LIF\nnode/nodes/r.lif/tau f - 1e-3\n"
                  "node/nodes/r.lif/r f - 10\nnode/nodes/r.lif/v_leak f - 0\n"
                  "node/nodes/r.lif/v_threshold f - 1\n"
                  "node/nodes/r.w/type s - Linear\nnode/nodes/r.w/weight f 3x3 0 1 0 0 0 1 1 0 0\n"
                  "node/nodes/s/type s - NIRGraph\nnode/nodes/s/nodes/i/type s - Input\n"
                  "node/nodes/s/nodes/li/type s - LI\nnode/nodes/s/nodes/li/tau f - 2e-4\n"
                  "node/nodes/s/nodes/li/r f - 1\nnode/nodes/s/nodes/li/v_leak f - 0\n"
                  "node/nodes/s/nodes/o/type s - Output\nnode/nodes/s/edges s 2x2 i li li o\n"
                  "node/nodes/output/type s - Output\n"
                  "node/edges s 6x2 input 0 0 r.lif r.lif r.w r.w r.lif r.lif s s output\n",
                  &o);
    expect_text(t, "input input_ : f32[T, 3]");
    expect_text(t, "n_0 = dense(input_, 3, bias = true, name = \"0\")");
    expect_text(t, "r_w = dense(prev(r_lif), 3, bias = false, name = \"r.w\")");
    expect_text(t, "r_lif = NIR_LIF(n_0 + r_w, decay = 0.8999999761581421, gain = 1, v_leak = 0, "
                   "v_th = 1, v_reset = 0)");
    expect_text(t, "s_li = NIR_LI(r_lif, decay = 0.5, gain = 0.5, v_leak = 0)");
    expect_text(t, "output output_ = sequence(s_li)");
    free(t);
    /* the remaining node types */
    t = expect_ok(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 3 2 4 4\n"
                  "node/nodes/c/type s - Conv2d\nnode/nodes/c/weight f 2x1x3x3 "
                  "1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\nnode/nodes/c/bias f 2 0 1\n"
                  "node/nodes/c/groups i - 2\nnode/nodes/c/padding s - same\n"
                  "node/nodes/p/type s - AvgPool2d\nnode/nodes/p/kernel_size i 2 2 2\n"
                  "node/nodes/q/type s - SumPool2d\nnode/nodes/q/kernel_size i - 2\n"
                  "node/nodes/q/stride i - 1\nnode/nodes/f/type s - Flatten\n"
                  "node/nodes/k/type s - Scale\nnode/nodes/k/scale f 2 3 3\n"
                  "node/nodes/d/type s - Delay\nnode/nodes/d/delay f - 3e-4\n"
                  "node/nodes/th/type s - Threshold\nnode/nodes/th/threshold f - 0.5\n"
                  "node/nodes/i/type s - I\nnode/nodes/i/r f - 2\n"
                  "node/nodes/if/type s - IF\nnode/nodes/if/r f - 10000\n"
                  "node/nodes/if/v_threshold f - 1\n"
                  "node/nodes/cl/type s - CubaLIF\nnode/nodes/cl/tau_syn f - 5e-4\n"
                  "node/nodes/cl/tau_mem f - 1e-3\nnode/nodes/cl/r f - 10\n"
                  "node/nodes/cl/v_leak f - 0\nnode/nodes/cl/w_in f - 5\n"
                  "node/nodes/cl/v_threshold f - 1\n"
                  "node/nodes/o1/type s - Output\nnode/nodes/o2/type s - Output\n"
                  "node/nodes/o3/type s - Output\nnode/nodes/o4/type s - Output\n"
                  "node/edges s 14x2 x c c p p q q f f k k d d th th o1 f i i o2 f if if o3 "
                  "f cl cl o4\n",
                  &o);
    expect_text(t, "c = conv2d(x, 2, kernel = (3, 3), stride = (1, 1), pad = (1, 1), dilation = "
                   "(1, 1), groups = 2, bias = true, name = \"c\")");
    expect_text(t, "p = avgpool2d(c, (2, 2), stride = (2, 2), pad = (0, 0))");

    expect_text(t, "q = sumpool2d(p, (2, 2), stride = (1, 1), pad = (0, 0))");
    expect_text(t, "f = flatten(q)");
    expect_text(t, "k = scale(f, 3)");
    expect_text(t, "d = delay(k, steps = 3)");
    expect_text(t, "th = NIR_Threshold(d, v_th = 0.5)");
    expect_text(t, "i = NIR_I(f, gain = 0.00019999999494757503)"); /* float32(dt r) */
    expect_text(t, "if = NIR_IF(f, gain = 1, v_th = 1, v_reset = 0)"); /* r = 1/dt */
    expect_text(t, "cl = NIR_CubaLIF(f, syn_decay = 0.800000011920929, syn_gain = 1, decay = "
                   "0.8999999761581421, gain = 1, v_leak = 0, v_th = 1, v_reset = 0)");
    free(t);
    t = expect_ok(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 2 2 8\n"
                  "node/nodes/c/type s - Conv1d\nnode/nodes/c/weight f 2x1x3 1 2 3 4 5 6\n"
                  "node/nodes/c/groups i - 2\nnode/nodes/c/padding s - same\n"
                  "node/nodes/c/bias f 2 0 0\nnode/nodes/c/dilation i 1 2\n"
                  "node/nodes/out/type s - Output\nnode/edges s 2x2 x c c out\n", &o);
    expect_text(t, "c = conv1d(x, 2, kernel = 3, stride = 1, pad = 2, dilation = 2, groups = 2, "
                   "bias = true, name = \"c\")");
    free(t);
    /* --impulses: IF and the synaptic current take r I and w_in I per step */
    NirImportOptions imp = o;
    imp.impulses = true;
    t = expect_ok(HEAD "node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 2\n"
                  "node/nodes/if/type s - IF\nnode/nodes/if/r f - 2\n"
                  "node/nodes/if/v_threshold f - 1\nnode/nodes/o/type s - Output\n"
                  "node/edges s 2x2 x if if o\n", &imp);
    expect_text(t, "NIR_IF(x, gain = 2,");
    free(t);
}

/* a message at a line of the generated text names the .nir file and the node it stands for */
static void
test_origin(void)
{
    NirImportOptions o = defaults();
    NirImport im;
    char err[512];
    CHECK(import(HEAD MLP_NODES MLP_EDGES, &o, &im, err, sizeof err));
    int fc_line = 0, lif_line = 0, line = 1;
    for (const char *p = im.text; *p; p++) {
        if (strncmp(p, "  fc = dense(", 13) == 0 && (p == im.text || p[-1] == '\n')) fc_line = line;
        if (strncmp(p, "  lif = NIR_LIF(", 16) == 0 && p[-1] == '\n') lif_line = line;
        if (*p == '\n') line++;
    }
    CHECK(fc_line > 0 && lif_line > 0);
    CHECK(nir_import_origin(&im, 1) == NULL); /* the header comment */
    const char *what = nir_import_origin(&im, fc_line);
    CHECK(what && strcmp(what, "node 'fc' (Affine)") == 0);
    what = nir_import_origin(&im, lif_line);
    CHECK(what && strcmp(what, "node 'lif' (LIF)") == 0);
    CHECK(nir_import_origin(&im, im.nlines + 5) == NULL);
    /* the report: at the .nir file and node, the generated line after it */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    diag_add_source("t.nir.snn", im.text);
    diag_set_stream(f);
    diag_set_origin("t.nir.snn", "t.nir", nir_import_origin, &im);
    diag_error((Loc){diag_intern("t.nir.snn"), lif_line, 9}, "something is wrong");
    diag_error((Loc){diag_intern("t.nir.snn"), 1, 1}, "in the header");
    diag_set_origin(NULL, NULL, NULL, NULL);
    fclose(f);
    diag_set_stream(stderr);
    CHECK(strstr(buf, "t.nir: error: node 'lif' (LIF): something is wrong\n  in the model snnc "
                      "generated from it (--emit=snn writes it), t.nir.snn:") != NULL);
    CHECK(strstr(buf, "t.nir.snn:1:1: error: in the header") != NULL);
    free(buf);
    nir_import_free(&im);
}

/* --framework presets: names, what they set, and user options winning over them */
static void
test_frameworks(void)
{
    CHECK(nir_framework_parse("snntorch") == NIR_FW_SNNTORCH);
    CHECK(nir_framework_parse("Lava_DL") == NIR_FW_LAVA_DL);
    CHECK(nir_framework_parse("lava-dl") == NIR_FW_LAVA_DL);
    CHECK(nir_framework_parse("none") == NIR_FW_NONE);
    CHECK(nir_framework_parse("torch") == NIR_FW_COUNT);
    CHECK(nir_framework_parse("") == NIR_FW_COUNT);
    CHECK(strcmp(nir_framework_name(NIR_FW_SPIKINGJELLY), "spikingjelly") == 0);
    NirImportOptions o = {.framework = NIR_FW_SINABS};
    nir_apply_preset(&o);
    CHECK(o.dt == 1.0 && o.integrator == NIR_EXACT && o.reset == NIR_RESET_SUBTRACT &&
          !o.reset_next && o.impulses);
    o = (NirImportOptions){.framework = NIR_FW_SNNTORCH, .reset = NIR_RESET_VALUE,
                           .given = NIR_GIVEN_RESET};
    nir_apply_preset(&o);
    CHECK(o.dt == 1e-4 && o.reset == NIR_RESET_VALUE && o.reset_next);
    o = (NirImportOptions){.framework = NIR_FW_NORSE, .dt = 1e-3, .stored = NIR_GIVEN_DT};
    nir_apply_preset(&o);
    CHECK(o.dt == 1e-3 && o.impulses);
    /* Sinabs: multi-spike IF clamped at -v_th, counts emitted */
    NirImportOptions sb = defaults();
    sb.framework = NIR_FW_SINABS;
    char *t = expect_ok(HEAD MLP_NODES MLP_EDGES, &sb);
    expect_text(t, "neuron NIR_LIF_multi(");
    expect_text(t, "  let n = v > 0 ? floor(v / v_th) : 0\n  v = v - n * v_th\n  output n\n");
    free(t);
    /* snnTorch, reset_delay=False with subtract */
    NirImportOptions st = defaults();
    st.framework = NIR_FW_SNNTORCH;
    st.reset_next = false;
    st.given = NIR_GIVEN_RESET_STEP;
    t = expect_ok(HEAD MLP_NODES MLP_EDGES, &st);
    expect_text(t, "NIR_LIF_sub_redo(");
    expect_text(t, "  v = v - (spike - was_over) * v_th\n");
    free(t);
}

int
main(void)
{
    diag_set_stream(stderr);
    test_malformed();
    test_translation();
    test_frameworks();
    test_origin(); /* last: it reports errors, which later loads would count */
    printf("test_nir: %d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
