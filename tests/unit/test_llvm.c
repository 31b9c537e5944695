/* test_llvm.c: unit tests for the LLVM backend (codegen/llvm): small kernel-IR programs built by
 * hand covering every expression and statement kind and every type, compiled through ORC LLJIT,
 * run, and compared bit for bit with values computed here in C (the same operations in the same
 * order) and, when the kernel IR library is built (SNN_HAVE_KIR), with kir_eval; then parsed
 * models lowered by kir_lower and run by the runtime session (as --run and model.so run them)
 * against interp_run in f32 mode. Writes no files. */
#include "codegen/kir.h"
#include "codegen/llvm/cg_llvm.h"
#include "ir/fmath.h"
#include "runtime/f16.h"
#include "runtime/philox.h"
#include "runtime/pool.h"
#ifdef SNN_HAVE_KIR
#include "driver/session_run.h"
#include "frontend/frontend.h"
#endif

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/unit/check.h"

/* bit-for-bit comparison of n floats, reporting the first difference */
static bool
same_bits(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
            fprintf(stderr, "%s: element %zu: got %.9g, want %.9g\n", what, i, got[i], want[i]);
            return false;
        }
    return true;
}

/* ---- building kernel IR by hand (independent of kir_lower's builders) ---- */

#define MAXB 16
#define MAXK 16
#define MAXL 16

typedef struct TestProg {
    KProgram p;
    Module m;
    Weight weights[4];
} TestProg;

static TestProg *
new_prog(int T)
{
    TestProg *tp = calloc(1, sizeof *tp);
    tp->p.m = &tp->m;
    tp->p.timesteps = T;
    tp->m.name = "test";
    tp->m.timesteps = T;
    tp->m.weights = tp->weights;
    tp->p.bufs = arena_alloc(&tp->p.arena, MAXB * sizeof(KBuf));
    tp->p.kernels = arena_alloc(&tp->p.arena, MAXK * sizeof(Kernel));
    return tp;
}

static void
free_prog(TestProg *tp)
{
    arena_free(&tp->p.arena);
    free(tp);
}

static int
add_buf(TestProg *tp, const char *name, KType t, int64_t per_batch, int64_t fixed, KBufKind kind)
{
    KProgram *p = &tp->p;
    KBuf *b = &p->bufs[p->nbufs];
    b->name = name;
    b->type = t;
    b->size.per_batch = per_batch;
    b->size.fixed = fixed;
    b->kind = kind;
    b->value = -1;
    if (kind == KB_INPUT)
        b->io = tp->m.ninputs++;
    else if (kind == KB_OUTPUT)
        b->io = tp->m.noutputs++;
    else if (kind == KB_WEIGHT)
        b->io = tp->m.nweights++;
    return p->nbufs++;
}

static Kernel *
add_kernel(TestProg *tp, const char *name, bool is_step)
{
    Kernel *k = &tp->p.kernels[tp->p.nkernels++];
    k->name = name;
    k->is_step = is_step;
    k->locals = arena_alloc(&tp->p.arena, MAXL * sizeof(KLocal));
    return k;
}

static int
add_local(Kernel *k, const char *name, KType t)
{
    k->locals[k->nlocals].name = name;
    k->locals[k->nlocals].type = t;
    return k->nlocals++;
}

static KExpr *
x_new(TestProg *tp, KxKind kind, KType t)
{
    KExpr *e = arena_alloc(&tp->p.arena, sizeof *e);
    e->kind = kind;
    e->type = t;
    return e;
}

static KExpr *
xc(TestProg *tp, KType t, double v)
{
    KExpr *e = x_new(tp, KX_CONST, t);
    e->num = v;
    return e;
}

static KExpr *
xi(TestProg *tp, int64_t v)
{
    return xc(tp, KT_I64, (double)v);
}

static KExpr *
xk(TestProg *tp, KxKind kind)
{
    return x_new(tp, kind, KT_I64);
}

static KExpr *
xv(TestProg *tp, const Kernel *k, int var)
{
    KExpr *e = x_new(tp, KX_VAR, k->locals[var].type);
    e->var = var;
    return e;
}

static KExpr *
xld(TestProg *tp, int buf, KExpr *index)
{
    KExpr *e = x_new(tp, KX_LOAD, ktype_value(tp->p.bufs[buf].type));
    e->buf = buf;
    e->a = index;
    return e;
}

static KExpr *
xun(TestProg *tp, KUn op, KExpr *a)
{
    KExpr *e = x_new(tp, KX_UN, op == KU_NOT ? KT_BOOL : a->type);
    e->op = op;
    e->a = a;
    return e;
}

static KExpr *
xbin(TestProg *tp, KBin op, KExpr *a, KExpr *b)
{
    KExpr *e = x_new(tp, KX_BIN, op >= KB_LT ? KT_BOOL : a->type);
    e->op = op;
    e->a = a;
    e->b = b;
    return e;
}

static KExpr *
xsel(TestProg *tp, KExpr *c, KExpr *a, KExpr *b)
{
    KExpr *e = x_new(tp, KX_SELECT, a->type);
    e->a = c;
    e->b = a;
    e->c = b;
    return e;
}

static KExpr *
xcast(TestProg *tp, KType t, KExpr *a)
{
    KExpr *e = x_new(tp, KX_CAST, t);
    e->a = a;
    return e;
}

static KExpr *
xuni(TestProg *tp, uint64_t seed, uint32_t stream, KExpr *step, KExpr *index)
{
    KExpr *e = x_new(tp, KX_UNIFORM, KT_F32);
    e->seed = seed;
    e->stream = stream;
    e->a = step;
    e->b = index;
    return e;
}

static KStmt *
s_new(TestProg *tp, KsKind kind)
{
    KStmt *s = arena_alloc(&tp->p.arena, sizeof *s);
    s->kind = kind;
    return s;
}

/* a NULL-terminated list of statements into an arena array */
static KStmt **
s_list(TestProg *tp, int *n, va_list ap)
{
    KStmt *tmp[64];
    *n = 0;
    for (KStmt *s; (s = va_arg(ap, KStmt *)) != NULL;)
        tmp[(*n)++] = s;
    KStmt **arr = arena_alloc(&tp->p.arena, (size_t)(*n + 1) * sizeof *arr);
    memcpy(arr, tmp, (size_t)*n * sizeof *arr);
    return arr;
}

static KStmt *
sfor(TestProg *tp, int var, KExpr *lo, KExpr *hi, ...)
{
    KStmt *s = s_new(tp, KS_FOR);
    s->var = var;
    s->lo = lo;
    s->hi = hi;
    va_list ap;
    va_start(ap, hi);
    s->body = s_list(tp, &s->nbody, ap);
    va_end(ap);
    return s;
}

static KStmt *
pfor(KStmt *s)
{
    s->is_parallel = true;
    return s;
}

static KStmt *
sassign(TestProg *tp, int var, KExpr *a)
{
    KStmt *s = s_new(tp, KS_ASSIGN);
    s->var = var;
    s->a = a;
    return s;
}

static KStmt *
sstore(TestProg *tp, int buf, KExpr *index, KExpr *a)
{
    KStmt *s = s_new(tp, KS_STORE);
    s->buf = buf;
    s->index = index;
    s->a = a;
    return s;
}

/* if c then `then` (one statement or NULL) else `els` (one or NULL) */
static KStmt *
sif(TestProg *tp, KExpr *c, KStmt *then, KStmt *els)
{
    KStmt *s = s_new(tp, KS_IF);
    s->a = c;
    s->body = arena_alloc(&tp->p.arena, 2 * sizeof(KStmt *));
    s->els = arena_alloc(&tp->p.arena, 2 * sizeof(KStmt *));
    if (then) s->body[s->nbody++] = then;
    if (els) s->els[s->nels++] = els;
    return s;
}

static void
kbody(Kernel *k, TestProg *tp, ...)
{
    va_list ap;
    va_start(ap, tp);
    k->body = s_list(tp, &k->nbody, ap);
    va_end(ap);
}

/* ---- running ---- */

static void check_run_once(const char *what, TestProg *tp, int batch, int64_t sample_base,
                           const float *const *inputs, float *const *want);

/* is_lanes on every kernel's outermost parallel loops */
static void
set_lanes(TestProg *tp, bool is_on)
{
    for (int ki = 0; ki < tp->p.nkernels; ki++) {
        const Kernel *k = &tp->p.kernels[ki];
        for (int i = 0; i < k->nbody; i++)
            if (k->body[i]->kind == KS_FOR && k->body[i]->is_parallel)
                k->body[i]->is_lanes = is_on;
    }
}

/* One batch of hand-built program p through cg's code, on buffers bound as kir_eval binds them
 * (kir_bind: temporaries stored before they are loaded start as garbage) and one thread. */
static bool
run_bound(const CgLlvm *cg, const KProgram *p, int batch, int64_t sample_base,
          const float *const *inputs, float *const *outputs, char *err, size_t errlen)
{
    if (batch <= 0 || p->timesteps <= 0) return true;
    KBinding *bd = kir_bind(p, batch, inputs, outputs, err, errlen);
    if (!bd) return false;
    RtPool *pool = rt_pool_new(1, err, errlen);
    if (pool) {
        SnnkEntryFn entry = (SnnkEntryFn)(uintptr_t)cg_llvm_entry(cg);
        entry(bd->mem, batch, sample_base, rt_pool_rt(pool));
    }
    rt_pool_free(pool);
    kir_unbind(bd);
    return pool != NULL;
}

/* Compile, run one batch, and compare every output with want (and with kir_eval when built); then
 * again with the parallel loops in SIMD lanes (KStmt.is_lanes): the same bits. */
static void
check_run(const char *what, TestProg *tp, int batch, int64_t sample_base,
          const float *const *inputs, float *const *want)
{
    check_run_once(what, tp, batch, sample_base, inputs, want);
    char label[160];
    snprintf(label, sizeof label, "%s (SIMD lanes)", what);
    set_lanes(tp, true);
    check_run_once(label, tp, batch, sample_base, inputs, want);
    set_lanes(tp, false);
}

static void
check_run_once(const char *what, TestProg *tp, int batch, int64_t sample_base,
               const float *const *inputs, float *const *want)
{
    char err[512] = "";
    CgLlvm *cg = cg_llvm_compile(&tp->p, err, sizeof err);
    CHECK(cg != NULL);
    if (!cg) {
        fprintf(stderr, "%s: compile: %s\n", what, err);
        return;
    }
    int nout = tp->m.noutputs;
    float *got[8];
    size_t n[8];
    for (int i = 0; i < tp->p.nbufs; i++)
        if (tp->p.bufs[i].kind == KB_OUTPUT) {
            int o = tp->p.bufs[i].io;
            n[o] = (size_t)(tp->p.bufs[i].size.per_batch * batch + tp->p.bufs[i].size.fixed);
            got[o] = malloc(n[o] * sizeof(float) + 1);
            memset(got[o], 0xA5, n[o] * sizeof(float)); /* garbage: the program must write it all */
        }
    bool is_ok = run_bound(cg, &tp->p, batch, sample_base, inputs, got, err, sizeof err);
    CHECK(is_ok);
    if (!is_ok) fprintf(stderr, "%s: run: %s\n", what, err);
    for (int o = 0; o < nout && is_ok; o++) {
        char label[128];
        snprintf(label, sizeof label, "%s: output %d vs C", what, o);
        CHECK(same_bits(label, got[o], want[o], n[o]));
    }
#ifdef SNN_HAVE_KIR
    float *ev[8];
    for (int o = 0; o < nout; o++)
        ev[o] = calloc(n[o] + 1, sizeof(float));
    bool is_eval_ok = kir_eval(&tp->p, batch, sample_base, inputs, ev, NULL, err, sizeof err);
    CHECK(is_eval_ok);
    if (!is_eval_ok) fprintf(stderr, "%s: kir_eval: %s\n", what, err);
    for (int o = 0; o < nout && is_ok && is_eval_ok; o++) {
        char label[128];
        snprintf(label, sizeof label, "%s: output %d vs kir_eval", what, o);
        CHECK(same_bits(label, got[o], ev[o], n[o]));
    }
    for (int o = 0; o < nout; o++)
        free(ev[o]);
#endif
    for (int o = 0; o < nout; o++)
        free(got[o]);
    cg_llvm_free(cg);
}

/* awkward operands: signed zeros, NaN, infinities, tiny, huge, integers, halves */
static const float vals[] = {0.0f,    -0.0f, 1.0f,    -1.0f, 0.5f,       -2.5f, 3.75f,  1e-30f,
                             -1e-30f, 88.0f, -104.0f, 1e30f, 0.36787945f, 7.0f, -0.75f, 2.0f};
#define NV ((int)(sizeof vals / sizeof vals[0]))
static const float vals2[NV] = {-0.0f, 0.0f, 3.0f, -1.0f,  2.0f, 0.5f, -0.25f, 1e-30f,
                                4.0f,  1.5f, 0.0f, -1e30f, 1.0f, 7.0f, 2.0f,   -3.0f};

static float
sigmoidf_ref(float x)
{
    return f32_sigmoid(x);
}

static float
minf_ref(float a, float b)
{
    return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
}

static float
maxf_ref(float a, float b)
{
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

static double
min_ref(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
}

static double
max_ref(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

/* every unary op on f32 and on f64 (cast in and out), plus NaN and infinity inputs */
static void
test_unary(void)
{
    static const KUn ops[] = {KU_NEG,  KU_EXP, KU_LOG,   KU_SQRT,
                              KU_TANH, KU_ABS, KU_FLOOR, KU_SIGMOID};
    enum { NOPS = sizeof ops / sizeof ops[0], N = NV + 2 };
    float x[N];
    memcpy(x, vals, sizeof vals);
    x[NV] = NAN;
    x[NV + 1] = -INFINITY;

    TestProg *tp = new_prog(1);
    int bx = add_buf(tp, "x", KT_F32, 0, N, KB_INPUT);
    int bo = add_buf(tp, "out", KT_F32, 0, 2 * NOPS * N, KB_OUTPUT);
    Kernel *k = add_kernel(tp, "unary", false);
    int i = add_local(k, "i", KT_I64);
    KStmt *st[2 * NOPS + 1];
    for (int o = 0; o < NOPS; o++) {
        st[o] = sstore(tp, bo, xbin(tp, KB_ADD, xv(tp, k, i), xi(tp, o * N)),
                       xun(tp, ops[o], xld(tp, bx, xv(tp, k, i))));
        st[NOPS + o] = sstore(
            tp, bo, xbin(tp, KB_ADD, xv(tp, k, i), xi(tp, (NOPS + o) * N)),
            xcast(tp, KT_F32, xun(tp, ops[o], xcast(tp, KT_F64, xld(tp, bx, xv(tp, k, i))))));
    }
    KStmt *loop = pfor(sfor(tp, i, xi(tp, 0), xi(tp, N), NULL));
    loop->body = arena_alloc(&tp->p.arena, sizeof st);
    memcpy(loop->body, st, 2 * NOPS * sizeof *st);
    loop->nbody = 2 * NOPS;
    kbody(k, tp, loop, NULL);

    float want[2 * NOPS * N];
    for (int j = 0; j < N; j++) {
        float a = x[j];
        double d = a;
        float r32[NOPS] = {-a,          f32_exp(a), f32_log(a), sqrtf(a),
                           f32_tanh(a), fabsf(a),  floorf(a),  sigmoidf_ref(a)};
        double r64[NOPS] = {-d,      exp(d),  log(d),   sqrt(d),
                            tanh(d), fabs(d), floor(d), 1.0 / (1.0 + exp(-d))};
        for (int o = 0; o < NOPS; o++) {
            want[o * N + j] = r32[o];
            want[(NOPS + o) * N + j] = (float)r64[o];
        }
    }
    const float *in[] = {x};
    float *w[] = {want};
    check_run("unary", tp, 1, 0, in, w);
    free_prog(tp);
}

/* SIMD lanes (llvm_gen.c: simd_plan): a parallel loop of 37 iterations (4 in lanes of 8, 5 left
 * over) with contiguous, gathered (negative stride, modulo) and scattered accesses; a uniform
 * inner loop; conditions that differ between lanes around assignments, a contiguous store and a
 * load that would read past the end where its lanes are off (masked: ASan builds catch a miss);
 * u8, i8, bool and i64 buffers; libm in lanes; a second kernel reading what the first scattered. */
static void
test_lanes(void)
{
    enum { N = 37, NOUT = 9, N2 = 48 };
    TestProg *tp = new_prog(1);
    int bx = add_buf(tp, "x", KT_F32, 0, N, KB_INPUT);
    int bu = add_buf(tp, "u8", KT_U8, 0, N, KB_TEMP);
    int bs = add_buf(tp, "i8", KT_I8, 0, N, KB_TEMP);
    int bb = add_buf(tp, "flag", KT_BOOL, 0, N, KB_TEMP);
    int bo = add_buf(tp, "out", KT_F32, 0, NOUT * N + N2, KB_OUTPUT);
    Kernel *k = add_kernel(tp, "lanes", false);
    int i = add_local(k, "i", KT_I64), v = add_local(k, "v", KT_F32);
    int acc = add_local(k, "acc", KT_F64), kk = add_local(k, "k", KT_I64);
    int c = add_local(k, "c", KT_I64), fl = add_local(k, "fl", KT_BOOL);
#define I() xv(tp, k, i)
#define V() xv(tp, k, v)
#define AT(o, e) xbin(tp, KB_ADD, (e), xi(tp, (o)*N))
#define MODN(e) xbin(tp, KB_REM, (e), xi(tp, N))
    KStmt *big = sif(tp,
                     xbin(tp, KB_AND, xbin(tp, KB_GT, V(), xc(tp, KT_F32, 0.5)),
                          xbin(tp, KB_LT, V(), xc(tp, KT_F32, 1000))),
                     NULL, NULL);
    big->body[big->nbody++] = sassign(tp, c, xcast(tp, KT_I64, xbin(tp, KB_MUL, V(), xc(tp, KT_F32, 3))));
    big->body[big->nbody++] =
        sstore(tp, bu, I(), xcast(tp, KT_U8, xbin(tp, KB_MUL, V(), xc(tp, KT_F32, 10))));
    big->els[big->nels++] = sassign(tp, c, xi(tp, -1));
    big->els[big->nels++] = sstore(tp, bu, I(), xcast(tp, KT_U8, xv(tp, k, c)));
    KStmt *l1 = pfor(sfor(
        tp, i, xi(tp, 0), xi(tp, N), sassign(tp, v, xld(tp, bx, I())),
        sassign(tp, acc, xc(tp, KT_F64, 0)),
        sfor(tp, kk, xi(tp, 0), xi(tp, 3),
             sassign(tp, acc,
                     xbin(tp, KB_ADD, xv(tp, k, acc),
                          xcast(tp, KT_F64,
                                xld(tp, bx, MODN(xbin(tp, KB_ADD, xbin(tp, KB_MUL, I(), xi(tp, 7)),
                                                      xv(tp, k, kk))))))),
             NULL),
        sassign(tp, c, xi(tp, 0)), big,
        sif(tp, xbin(tp, KB_LT, I(), xi(tp, N - 7)),
            sassign(tp, v, xbin(tp, KB_ADD, V(), xld(tp, bx, xbin(tp, KB_ADD, I(), xi(tp, 7))))),
            NULL),
        sstore(tp, bs, MODN(xbin(tp, KB_MUL, I(), xi(tp, 5))), xcast(tp, KT_I8, xv(tp, k, c))),
        sstore(tp, bb, I(), xbin(tp, KB_LT, V(), xc(tp, KT_F32, 1))),
        sassign(tp, fl, xld(tp, bb, I())), sstore(tp, bo, AT(0, I()), V()),
        sstore(tp, bo, AT(1, I()), xcast(tp, KT_F32, xv(tp, k, acc))),
        sstore(tp, bo, AT(2, I()), xcast(tp, KT_F32, xv(tp, k, c))),
        sstore(tp, bo, AT(3, MODN(xbin(tp, KB_MUL, I(), xi(tp, 5)))), xun(tp, KU_EXP, V())),
        sstore(tp, bo, AT(4, I()),
               xsel(tp, xv(tp, k, fl), xc(tp, KT_F32, 1), xc(tp, KT_F32, 0))),
        sstore(tp, bo, AT(5, I()), xcast(tp, KT_F32, xld(tp, bu, I()))),
        sstore(tp, bo, AT(6, I()),
               xbin(tp, KB_MAX, V(), xld(tp, bx, xbin(tp, KB_SUB, xi(tp, N - 1), I())))),
        sstore(tp, bo, AT(7, I()), xcast(tp, KT_F32, I())), NULL));
    kbody(k, tp, l1, NULL);
    Kernel *k2 = add_kernel(tp, "gathered", false);
    int j = add_local(k2, "j", KT_I64);
    kbody(k2, tp,
          pfor(sfor(tp, j, xi(tp, 0), xi(tp, N),
                    sstore(tp, bo, xbin(tp, KB_ADD, xv(tp, k2, j), xi(tp, 8 * N)),
                           xcast(tp, KT_F32, xld(tp, bs, xv(tp, k2, j)))),
                    NULL)),
          NULL);
    /* lanes from a multiple of 8: j / 16 is one value for all of them and j % 16 linear, so the
     * store at (j / 16) * 16 + j % 16 + 9N is contiguous, its value j / 16 * 100 + j % 16 */
    Kernel *k3 = add_kernel(tp, "aligned", false);
    int qi = add_local(k3, "q", KT_I64);
    KExpr *qd = xbin(tp, KB_DIV, xv(tp, k3, qi), xi(tp, 16));
    KExpr *qr = xbin(tp, KB_REM, xv(tp, k3, qi), xi(tp, 16));
    kbody(k3, tp,
          pfor(sfor(tp, qi, xi(tp, 0), xi(tp, N2),
                    sstore(tp, bo,
                           xbin(tp, KB_ADD, xbin(tp, KB_ADD, xbin(tp, KB_MUL, qd, xi(tp, 16)), qr),
                                xi(tp, NOUT * N)),
                           xcast(tp, KT_F32, xbin(tp, KB_ADD, xbin(tp, KB_MUL, qd, xi(tp, 100)), qr))),
                    NULL)),
          NULL);
#undef I
#undef V
#undef AT
#undef MODN
    float x[N], want[NOUT * N + N2];
    for (int q2 = 0; q2 < N2; q2++)
        want[NOUT * N + q2] = (float)(q2 / 16 * 100 + q2 % 16);
    for (int q = 0; q < N; q++)
        x[q] = vals[q % NV] * (q % 3 ? 1.0f : -1.5f) + (float)q / 8;
    x[4] = NAN;
    int8_t si[N];
    for (int q = 0; q < N; q++) {
        float fv = x[q];
        double a = 0;
        for (int t = 0; t < 3; t++)
            a = a + (double)x[(q * 7 + t) % N];
        int64_t cv;
        uint8_t u;
        if (fv > 0.5f && fv < 1000.0f) {
            cv = (int64_t)(fv * 3.0f);
            u = (uint8_t)(int64_t)(fv * 10.0f);
        } else {
            cv = -1;
            u = (uint8_t)cv;
        }
        if (q < N - 7) fv = fv + x[q + 7];
        si[(q * 5) % N] = (int8_t)cv;
        bool flag = fv < 1.0f;
        float other = x[N - 1 - q];
        want[q] = fv;
        want[N + q] = (float)a;
        want[2 * N + q] = (float)cv;
        want[3 * N + (q * 5) % N] = f32_exp(fv);
        want[4 * N + q] = flag ? 1.0f : 0.0f;
        want[5 * N + q] = (float)u;
        want[6 * N + q] = isnan(fv) || isnan(other) ? NAN : fv > other ? fv : other;
        want[7 * N + q] = (float)q;
    }
    for (int q = 0; q < N; q++)
        want[8 * N + q] = (float)si[q];
    const float *in[] = {x};
    float *w[] = {want};
    check_run("lanes", tp, 1, 0, in, w);
    /* the SIMD code is there: a lanes loop, gathers, scatters, a masked load and store, of the
     * lanes the host's code runs (16 with AVX-512, else 8) */
    set_lanes(tp, true);
    char err[256];
    char *text = cg_llvm_module_text(&tp->p, false, err, sizeof err);
    int lanes = 0;
    for (int ki = 0; ki < tp->p.nkernels; ki++)
        if (cg_llvm_simd_lanes(&tp->p.kernels[ki])) lanes = cg_llvm_simd_lanes(&tp->p.kernels[ki]);
    CHECK(lanes == 8 || lanes == 16);
    char names[4][48];
    snprintf(names[0], sizeof names[0], "llvm.masked.gather.v%df32", lanes);
    snprintf(names[1], sizeof names[1], "llvm.masked.scatter.v%di8", lanes);
    snprintf(names[2], sizeof names[2], "llvm.masked.load.v%df32", lanes);
    snprintf(names[3], sizeof names[3], "llvm.masked.store.v%di8", lanes);
    CHECK(text && strstr(text, "simd.body") && strstr(text, names[0]) && strstr(text, names[1]) &&
          strstr(text, names[2]) && strstr(text, names[3]));
    /* the aligned kernel stores contiguously: no f32 scatter in its function */
    const char *k3f = text ? strstr(text, "aligned") : NULL;
    const char *k3end = k3f ? strstr(k3f, "\n}\n") : NULL;
    CHECK(k3f && k3end);
    if (k3f && k3end) {
        char *body = strndup(k3f, (size_t)(k3end - k3f));
        CHECK(body && !strstr(body, "llvm.masked.scatter") && strstr(body, "simd.body"));
        free(body);
    }
    free(text);
    set_lanes(tp, false);
    free_prog(tp);
}

/* Blocked scans (llvm_gen.c: scan_plan): a lanes loop around one step loop that streams, run block
 * by block with the locals between segments in slots. n = B * N iterations: past several blocks,
 * a partial block and a scalar tail (batch 1), and within one block (n < 8: scalar only, batch
 * 0 aside). Carried locals of every shape: a membrane (per lane) reset under a condition that
 * differs between lanes, an i64 count, a uniform (j / 16 on aligned lanes) and a linear (j + 3)
 * value read only after the steps, a static input loaded before them; a local assigned first in
 * each step (not carried). At N = 420,000 the two step outputs take 2 * 5 * N floats, 16.8 MB,
 * past NT_MIN_BYTES: their stores bypass the caches (check_run's buffers come from malloc, 16-byte
 * aligned as NumPy's), and must leave the same bits. */
static void
scan_case(int64_t N, int batch)
{
    enum { T = 5 };
    TestProg *tp = new_prog(T);
    int bx = add_buf(tp, "x", KT_F32, T * N, 0, KB_INPUT);
    int bst = add_buf(tp, "bias", KT_F32, N, 0, KB_INPUT);
    int bv = add_buf(tp, "v_out", KT_F32, T * N, 0, KB_OUTPUT);
    int bs = add_buf(tp, "s_out", KT_F32, T * N, 0, KB_OUTPUT);
    int bc = add_buf(tp, "counts", KT_F32, 2 * N, 0, KB_OUTPUT);
    Kernel *k = add_kernel(tp, "scan", false);
    int j = add_local(k, "j", KT_I64), t = add_local(k, "t", KT_I64);
    int v = add_local(k, "v", KT_F32), in = add_local(k, "in", KT_F32);
    int b0 = add_local(k, "b0", KT_F32), cnt = add_local(k, "cnt", KT_I64);
    int q = add_local(k, "q", KT_I64), lin = add_local(k, "lin", KT_I64);
    KExpr *n = xbin(tp, KB_MUL, xk(tp, KX_BATCH), xi(tp, N));
    KExpr *at = xbin(tp, KB_ADD, xbin(tp, KB_MUL, xv(tp, k, t), n), xv(tp, k, j));
    KStmt *fire = sif(tp, xbin(tp, KB_GE, xv(tp, k, v), xc(tp, KT_F32, 1)),
                      sassign(tp, v, xc(tp, KT_F32, 0)), NULL);
    fire->body[fire->nbody++] = sassign(tp, cnt, xbin(tp, KB_ADD, xv(tp, k, cnt), xi(tp, 1)));
    KStmt *steps =
        sfor(tp, t, xi(tp, 0), xi(tp, T),
             sassign(tp, in, xbin(tp, KB_ADD, xld(tp, bx, at), xv(tp, k, b0))),
             sassign(tp, v,
                     xbin(tp, KB_ADD, xbin(tp, KB_MUL, xv(tp, k, v), xc(tp, KT_F32, 0.5)),
                          xv(tp, k, in))),
             sstore(tp, bv, at, xv(tp, k, v)), fire,
             sstore(tp, bs, at, xcast(tp, KT_F32, xv(tp, k, cnt))), NULL);
    kbody(k, tp,
          pfor(sfor(tp, j, xi(tp, 0), n, sassign(tp, v, xc(tp, KT_F32, 0)),
                    sassign(tp, cnt, xi(tp, 0)), sassign(tp, b0, xld(tp, bst, xv(tp, k, j))),
                    sassign(tp, q, xbin(tp, KB_DIV, xv(tp, k, j), xi(tp, 16))),
                    sassign(tp, lin, xbin(tp, KB_ADD, xv(tp, k, j), xi(tp, 3))), steps,
                    sstore(tp, bc, xv(tp, k, j), xcast(tp, KT_F32, xv(tp, k, cnt))),
                    sstore(tp, bc, xbin(tp, KB_ADD, xv(tp, k, j), n),
                           xcast(tp, KT_F32, xbin(tp, KB_ADD, xv(tp, k, q), xv(tp, k, lin)))),
                    NULL)),
          NULL);
    int64_t nn = (int64_t)batch * N;
    float *x = malloc((size_t)(T * nn + 1) * sizeof *x),
          *bias = malloc((size_t)(nn + 1) * sizeof *bias);
    float *wv = malloc((size_t)(T * nn + 1) * sizeof *wv),
          *ws = malloc((size_t)(T * nn + 1) * sizeof *ws);
    float *wc = malloc((size_t)(2 * nn + 1) * sizeof *wc);
    for (int64_t i = 0; i < T * nn; i++)
        x[i] = vals[i % NV] * 0.25f + (float)(i % 7) * 0.125f;
    for (int64_t i = 0; i < nn; i++)
        bias[i] = (float)(i % 5) * 0.0625f;
    for (int64_t i = 0; i < nn; i++) {
        float vv = 0;
        int64_t c = 0;
        for (int s = 0; s < T; s++) {
            float inv = x[s * nn + i] + bias[i];
            vv = vv * 0.5f + inv;
            wv[s * nn + i] = vv;
            if (vv >= 1) {
                vv = 0;
                c++;
            }
            ws[s * nn + i] = (float)c;
        }
        wc[i] = (float)c;
        wc[nn + i] = (float)(i / 16 + i + 3);
    }
    const float *ins[] = {x, bias};
    float *w[] = {wv, ws, wc};
    char what[64];
    snprintf(what, sizeof what, "scan N=%lld B=%d", (long long)N, batch);
    check_run(what, tp, batch, 0, ins, w);
    /* the blocked code is there; where a step's row is whole vectors (N a multiple of 8), its
     * stores may bypass the caches */
    set_lanes(tp, true);
    char err[256];
    char *text = cg_llvm_module_text(&tp->p, false, err, sizeof err);
    CHECK(text && strstr(text, "scan.block") && strstr(text, "fence seq_cst"));
    CHECK(text && !strstr(text, "!nontemporal") == (N % 8 != 0));
    free(text);
    set_lanes(tp, false);
    free(x);
    free(bias);
    free(wv);
    free(ws);
    free(wc);
    free_prog(tp);
}

static void
test_scan(void)
{
    scan_case(2 * 2048 + 8 * 5 + 3, 1); /* two blocks, a partial one, a tail of 3 */
    scan_case(2 * 2048 + 8 * 5 + 3, 2);
    scan_case(5, 1);                /* scalar only */
    scan_case(2 * 2048 + 8 * 5, 3); /* rows of whole vectors: non-temporal code, cached run */
    scan_case(420000, 1);           /* 16.8 MB of step outputs: non-temporal run */
}

/* every binary op on f32 and f64; comparisons, and/or/not and select through bool */
static void
test_binary(void)
{
    static const KBin ar[] = {KB_ADD, KB_SUB, KB_MUL, KB_DIV, KB_MIN, KB_MAX, KB_POW};
    static const KBin cmp[] = {KB_LT, KB_LE, KB_GT, KB_GE, KB_EQ, KB_NE};
    enum { NAR = 7, NCMP = 6, N = NV + 1, NOUT = 2 * NAR + NCMP + 4 };
    float x[N], y[N];
    memcpy(x, vals, sizeof vals);
    memcpy(y, vals2, sizeof vals2);
    x[NV] = NAN;
    y[NV] = 1.0f;

    TestProg *tp = new_prog(1);
    int bx = add_buf(tp, "x", KT_F32, 0, N, KB_INPUT);
    int by = add_buf(tp, "y", KT_F32, 0, N, KB_INPUT);
    int bo = add_buf(tp, "out", KT_F32, 0, NOUT * N, KB_OUTPUT);
    Kernel *k = add_kernel(tp, "binary", false);
    int i = add_local(k, "i", KT_I64);
    KStmt *loop = pfor(sfor(tp, i, xi(tp, 0), xi(tp, N), NULL));
    loop->body = arena_alloc(&tp->p.arena, NOUT * sizeof(KStmt *));
#define X() xld(tp, bx, xv(tp, k, i))
#define Y() xld(tp, by, xv(tp, k, i))
#define AT(o) xbin(tp, KB_ADD, xv(tp, k, i), xi(tp, (o)*N))
    int o = 0;
    for (int j = 0; j < NAR; j++, o++)
        loop->body[loop->nbody++] = sstore(tp, bo, AT(o), xbin(tp, ar[j], X(), Y()));
    for (int j = 0; j < NAR; j++, o++)
        loop->body[loop->nbody++] = sstore(
            tp, bo, AT(o),
            xcast(tp, KT_F32, xbin(tp, ar[j], xcast(tp, KT_F64, X()), xcast(tp, KT_F64, Y()))));
    for (int j = 0; j < NCMP; j++, o++)
        loop->body[loop->nbody++] =
            sstore(tp, bo, AT(o), xcast(tp, KT_F32, xbin(tp, cmp[j], X(), Y())));
    /* (x < y) && (y > 0) ; (x < y) || !(y > 0) ; x > 0 ? x : y ; (f32)(bool)x */
    KExpr *lt = xbin(tp, KB_LT, X(), Y()), *ypos = xbin(tp, KB_GT, Y(), xc(tp, KT_F32, 0));
    loop->body[loop->nbody++] =
        sstore(tp, bo, AT(o++), xcast(tp, KT_F32, xbin(tp, KB_AND, lt, ypos)));
    loop->body[loop->nbody++] =
        sstore(tp, bo, AT(o++), xcast(tp, KT_F32, xbin(tp, KB_OR, lt, xun(tp, KU_NOT, ypos))));
    loop->body[loop->nbody++] =
        sstore(tp, bo, AT(o++), xsel(tp, xbin(tp, KB_GT, X(), xc(tp, KT_F32, 0)), X(), Y()));
    loop->body[loop->nbody++] = sstore(tp, bo, AT(o++), xcast(tp, KT_F32, xcast(tp, KT_BOOL, X())));
#undef X
#undef Y
#undef AT
    kbody(k, tp, loop, NULL);

    float want[NOUT * N];
    for (int j = 0; j < N; j++) {
        float a = x[j], b = y[j];
        double da = a, db = b;
        float r[NOUT] = {a + b,
                         a - b,
                         a * b,
                         a / b,
                         minf_ref(a, b),
                         maxf_ref(a, b),
                         f32_pow(a, b),
                         (float)(da + db),
                         (float)(da - db),
                         (float)(da * db),
                         (float)(da / db),
                         (float)min_ref(da, db),
                         (float)max_ref(da, db),
                         (float)pow(da, db),
                         (float)(a < b),
                         (float)(a <= b),
                         (float)(a > b),
                         (float)(a >= b),
                         (float)(a == b),
                         (float)(a != b),
                         (float)(a < b && b > 0),
                         (float)(a < b || !(b > 0)),
                         a > 0 ? a : b,
                         (float)(a != 0)};
        for (int q = 0; q < NOUT; q++)
            want[q * N + j] = r[q];
    }
    const float *in[] = {x, y};
    float *w[] = {want};
    check_run("binary", tp, 1, 0, in, w);
    free_prog(tp);
}

/* i64 arithmetic, comparisons and casts; u8, i8 and bool buffers; f32 → i64 truncation */
static void
test_integers(void)
{
    enum { N = 20, NOUT = 21 };
    TestProg *tp = new_prog(1);
    int bx = add_buf(tp, "x", KT_F32, 0, N, KB_INPUT);
    int bu = add_buf(tp, "u8", KT_U8, 0, N, KB_TEMP);
    int bi = add_buf(tp, "i8", KT_I8, 0, N, KB_TEMP);
    int bb = add_buf(tp, "flag", KT_BOOL, 0, N, KB_TEMP);
    int bl = add_buf(tp, "i64", KT_I64, 0, N, KB_TEMP);
    int bd = add_buf(tp, "f64", KT_F64, 0, N, KB_TEMP);
    int bo = add_buf(tp, "out", KT_F32, 0, NOUT * N + 1, KB_OUTPUT);
    Kernel *k = add_kernel(tp, "ints", false);
    int i = add_local(k, "i", KT_I64);
    int a = add_local(k, "a", KT_I64);
    int u = add_local(k, "u", KT_U8);
#define I() xv(tp, k, i)
#define A() xv(tp, k, a)
#define B3() xi(tp, 3)
#define AT(o) xbin(tp, KB_ADD, I(), xi(tp, (o)*N))
#define F(e) xcast(tp, KT_F32, e)
    KStmt *l1 = sfor(
        tp, i, xi(tp, 0), xi(tp, N), sassign(tp, a, xbin(tp, KB_SUB, I(), xi(tp, 7))),
        sstore(tp, bu, I(), xcast(tp, KT_U8, xbin(tp, KB_REM, I(), xi(tp, 2)))),
        sstore(tp, bi, I(),
               xcast(tp, KT_I8, xbin(tp, KB_SUB, xbin(tp, KB_REM, I(), B3()), xi(tp, 1)))),
        sstore(tp, bb, I(), xbin(tp, KB_EQ, xbin(tp, KB_REM, I(), B3()), xi(tp, 0))),
        sstore(tp, bl, I(),
               xcast(tp, KT_I64, xbin(tp, KB_MUL, xld(tp, bx, I()), xc(tp, KT_F32, 2.5)))),
        sstore(tp, bd, I(), xbin(tp, KB_DIV, xcast(tp, KT_F64, A()), xc(tp, KT_F64, 3.0))),
        sassign(tp, u, xld(tp, bu, I())), sstore(tp, bo, AT(0), F(xbin(tp, KB_ADD, A(), B3()))),
        sstore(tp, bo, AT(1), F(xbin(tp, KB_SUB, A(), B3()))),
        sstore(tp, bo, AT(2), F(xbin(tp, KB_MUL, A(), B3()))),
        sstore(tp, bo, AT(3), F(xbin(tp, KB_DIV, I(), B3()))),
        sstore(tp, bo, AT(4), F(xbin(tp, KB_REM, I(), B3()))),
        sstore(tp, bo, AT(5), F(xbin(tp, KB_MIN, A(), B3()))),
        sstore(tp, bo, AT(6), F(xbin(tp, KB_MAX, A(), B3()))),
        sstore(tp, bo, AT(7),
               F(xsel(tp, xbin(tp, KB_LT, A(), B3()), xun(tp, KU_NEG, A()),
                      xbin(tp, KB_MUL, A(), A())))),
        sstore(tp, bo, AT(8),
               F(xbin(
                   tp, KB_ADD,
                   xbin(tp, KB_ADD, F(xbin(tp, KB_LE, A(), B3())), F(xbin(tp, KB_GE, A(), B3()))),
                   F(xbin(tp, KB_NE, A(), B3()))))),
        sstore(tp, bo, AT(9), F(xv(tp, k, u))), sstore(tp, bo, AT(10), F(xld(tp, bi, I()))),
        sstore(tp, bo, AT(11),
               xsel(tp, xld(tp, bb, I()), xc(tp, KT_F32, 1.5), xc(tp, KT_F32, -1.5))),
        sstore(tp, bo, AT(12), F(xld(tp, bl, I()))), sstore(tp, bo, AT(13), F(xld(tp, bd, I()))),
        sstore(tp, bo, AT(14), F(xcast(tp, KT_I64, xld(tp, bi, I())))),
        sstore(tp, bo, AT(15),
               F(xbin(tp, KB_ADD, xcast(tp, KT_I64, xv(tp, k, u)), xk(tp, KX_BATCH)))),
        /* u8/i8 values do not wrap in arithmetic, only in casts (kir_eval) */
        sstore(tp, bo, AT(16),
               F(xbin(tp, KB_ADD, xcast(tp, KT_U8, xbin(tp, KB_ADD, xi(tp, 200), I())),
                      xcast(tp, KT_U8, xi(tp, 100))))),
        sstore(tp, bo, AT(17),
               F(xcast(tp, KT_U8,
                       xbin(tp, KB_ADD, xcast(tp, KT_U8, xbin(tp, KB_ADD, xi(tp, 200), I())),
                            xcast(tp, KT_U8, xi(tp, 100)))))),
        sstore(tp, bo, AT(18), F(xcast(tp, KT_I8, xbin(tp, KB_ADD, xi(tp, 120), I())))),
        sstore(tp, bo, AT(19), F(xbin(tp, KB_LT, xld(tp, bi, I()), xcast(tp, KT_I8, xi(tp, 0))))),
        sstore(tp, bo, AT(20), F(xun(tp, KU_FLOOR, A()))), NULL);
    /* after its loop a loop variable holds its last value */
    KStmt *after = sstore(tp, bo, xi(tp, NOUT * N), xcast(tp, KT_F32, xv(tp, k, i)));
#undef I
#undef A
#undef B3
#undef AT
#undef F
    kbody(k, tp, l1, after, NULL);

    float x[N], want[NOUT * N + 1];
    for (int j = 0; j < N; j++)
        x[j] = (float)(j - 10) * 0.37f;
    for (int64_t j = 0; j < N; j++) {
        int64_t av = j - 7;
        uint8_t uv = (uint8_t)(j % 2);
        int8_t iv = (int8_t)(j % 3 - 1);
        bool fl = j % 3 == 0;
        int64_t lv = (int64_t)(x[j] * 2.5f);
        double dv = (double)av / 3.0;
        float r[NOUT] = {(float)(av + 3),
                         (float)(av - 3),
                         (float)(av * 3),
                         (float)(j / 3),
                         (float)(j % 3),
                         (float)(av < 3 ? av : 3),
                         (float)(av > 3 ? av : 3),
                         (float)(av < 3 ? -av : av * av),
                         (float)(av <= 3) + (float)(av >= 3) + (float)(av != 3),
                         (float)uv,
                         (float)iv,
                         fl ? 1.5f : -1.5f,
                         (float)lv,
                         (float)dv,
                         (float)(int64_t)iv,
                         (float)(uv + 1),
                         (float)((uint8_t)(200 + j) + 100),
                         (float)(uint8_t)(300 + j),
                         (float)(int8_t)(120 + j),
                         (float)(iv < 0),
                         (float)av};
        for (int q = 0; q < NOUT; q++)
            want[q * N + j] = r[q];
    }
    want[NOUT * N] = N - 1;
    const float *in[] = {x};
    float *w[] = {want};
    check_run("integers", tp, 1, 0, in, w);
    free_prog(tp);
}

/* nested loops, an f64 local accumulator, if/else, weights: y = W x, halved where negative */
static void
test_matvec(void)
{
    enum { M = 13, K = 37 };
    TestProg *tp = new_prog(1);
    static float W[M * K], x[K];
    for (int j = 0; j < M * K; j++)
        W[j] = (float)((j * 7919) % 101 - 50) / 37.0f;
    for (int j = 0; j < K; j++)
        x[j] = (float)(j % 5) - 1.7f;
    int bw = add_buf(tp, "W", KT_F32, 0, M * K, KB_WEIGHT);
    tp->weights[0].name = "W";
    tp->weights[0].numel = M * K;
    tp->weights[0].data = W;
    int bx = add_buf(tp, "x", KT_F32, 0, K, KB_INPUT);
    int by = add_buf(tp, "y", KT_F32, 0, M, KB_OUTPUT);
    int bs = add_buf(tp, "ysum", KT_F32, 0, M, KB_OUTPUT);
    Kernel *k = add_kernel(tp, "matvec", false);
    int m = add_local(k, "m", KT_I64), kk = add_local(k, "k", KT_I64);
    int acc = add_local(k, "acc", KT_F64), accf = add_local(k, "accf", KT_F32);
    KExpr *w_mk =
        xld(tp, bw, xbin(tp, KB_ADD, xbin(tp, KB_MUL, xv(tp, k, m), xi(tp, K)), xv(tp, k, kk)));
    KExpr *x_k = xld(tp, bx, xv(tp, k, kk));
    kbody(
        k, tp,
        sfor(tp, m, xi(tp, 0), xi(tp, M), sassign(tp, acc, xc(tp, KT_F64, 0)),
             sassign(tp, accf, xc(tp, KT_F32, 0)),
             sfor(tp, kk, xi(tp, 0), xi(tp, K),
                  sassign(tp, acc,
                          xbin(tp, KB_ADD, xv(tp, k, acc),
                               xbin(tp, KB_MUL, xcast(tp, KT_F64, w_mk), xcast(tp, KT_F64, x_k)))),
                  sassign(tp, accf, xbin(tp, KB_ADD, xv(tp, k, accf), xbin(tp, KB_MUL, w_mk, x_k))),
                  NULL),
             sif(tp, xbin(tp, KB_GT, xv(tp, k, acc), xc(tp, KT_F64, 0)),
                 sstore(tp, by, xv(tp, k, m), xcast(tp, KT_F32, xv(tp, k, acc))),
                 sstore(tp, by, xv(tp, k, m),
                        xcast(tp, KT_F32, xbin(tp, KB_MUL, xv(tp, k, acc), xc(tp, KT_F64, 0.5))))),
             sstore(tp, bs, xv(tp, k, m), xv(tp, k, accf)), NULL),
        NULL);

    float want_y[M], want_s[M];
    for (int r = 0; r < M; r++) {
        double a = 0;
        float af = 0;
        for (int c = 0; c < K; c++) {
            a = a + (double)W[r * K + c] * (double)x[c];
            af = af + W[r * K + c] * x[c];
        }
        want_y[r] = a > 0 ? (float)a : (float)(a * 0.5);
        want_s[r] = af;
    }
    const float *in[] = {x};
    float *w[] = {want_y, want_s};
    check_run("matvec", tp, 1, 0, in, w);
    free_prog(tp);
}

/* The schedule: an init kernel, two step kernels sharing the t loop (integrate; fire and reset
 * under an if), a Poisson-style draw keyed by sample_base, a final kernel; sizes per batch. */
static void
test_steps(void)
{
    enum { T = 6, N = 5, BATCH = 3 };
    const int64_t sb = 11;
    const uint64_t seed = 0x123456789abcdefULL;
    TestProg *tp = new_prog(T);
    int bx = add_buf(tp, "x", KT_F32, T * N, 0, KB_INPUT);
    int bv = add_buf(tp, "v", KT_F32, N, 0, KB_TEMP);
    int bs = add_buf(tp, "spikes", KT_F32, T * N, 0, KB_OUTPUT);
    int bp = add_buf(tp, "poisson", KT_F32, T * N, 0, KB_OUTPUT);
    int bf = add_buf(tp, "vfinal", KT_F32, N, 1, KB_OUTPUT);

    Kernel *k0 = add_kernel(tp, "init", false);
    int i0 = add_local(k0, "i", KT_I64);
    kbody(k0, tp,
          sfor(tp, i0, xi(tp, 0), xbin(tp, KB_MUL, xk(tp, KX_BATCH), xi(tp, N)),
               sstore(tp, bv, xv(tp, k0, i0), xc(tp, KT_F32, 0.5)), NULL),
          NULL);

    /* v[b,n] = v*0.9 + x[b,t,n] */
    Kernel *k1 = add_kernel(tp, "integrate", true);
    int b1 = add_local(k1, "b", KT_I64), n1 = add_local(k1, "n", KT_I64);
    KExpr *vi1 = xbin(tp, KB_ADD, xbin(tp, KB_MUL, xv(tp, k1, b1), xi(tp, N)), xv(tp, k1, n1));
    KExpr *xi1 =
        xbin(tp, KB_ADD,
             xbin(tp, KB_MUL,
                  xbin(tp, KB_ADD, xbin(tp, KB_MUL, xv(tp, k1, b1), xi(tp, T)), xk(tp, KX_STEP)),
                  xi(tp, N)),
             xv(tp, k1, n1));
    kbody(k1, tp,
          pfor(sfor(tp, b1, xi(tp, 0), xk(tp, KX_BATCH),
                    pfor(sfor(tp, n1, xi(tp, 0), xi(tp, N),
                              sstore(tp, bv, vi1,
                                     xbin(tp, KB_ADD,
                                          xbin(tp, KB_MUL, xld(tp, bv, vi1), xc(tp, KT_F32, 0.9)),
                                          xld(tp, bx, xi1))),
                              NULL)),
                    NULL)),
          NULL);

    /* spikes[b,t,n] = v >= 1; if spike: v = 0; poisson[b,t,n] = uniform(t, (sb + b)*N + n) < 0.5 */
    Kernel *k2 = add_kernel(tp, "fire", true);
    int b2 = add_local(k2, "b", KT_I64), n2 = add_local(k2, "n", KT_I64),
        s2 = add_local(k2, "s", KT_BOOL);
    KExpr *vi2 = xbin(tp, KB_ADD, xbin(tp, KB_MUL, xv(tp, k2, b2), xi(tp, N)), xv(tp, k2, n2));
    KExpr *oi2 =
        xbin(tp, KB_ADD,
             xbin(tp, KB_MUL,
                  xbin(tp, KB_ADD, xbin(tp, KB_MUL, xv(tp, k2, b2), xi(tp, T)), xk(tp, KX_STEP)),
                  xi(tp, N)),
             xv(tp, k2, n2));
    KExpr *gidx =
        xbin(tp, KB_ADD,
             xbin(tp, KB_MUL, xbin(tp, KB_ADD, xk(tp, KX_SAMPLE_BASE), xv(tp, k2, b2)), xi(tp, N)),
             xv(tp, k2, n2));
    kbody(k2, tp,
          pfor(sfor(tp, b2, xi(tp, 0), xk(tp, KX_BATCH),
                    sfor(tp, n2, xi(tp, 0), xi(tp, N),
                         sassign(tp, s2, xbin(tp, KB_GE, xld(tp, bv, vi2), xc(tp, KT_F32, 1.0))),
                         sstore(tp, bs, oi2, xcast(tp, KT_F32, xv(tp, k2, s2))),
                         sif(tp, xv(tp, k2, s2), sstore(tp, bv, vi2, xc(tp, KT_F32, 0)), NULL),
                         sstore(tp, bp, oi2,
                                xcast(tp, KT_F32,
                                      xbin(tp, KB_LT, xuni(tp, seed, 3, xk(tp, KX_STEP), gidx),
                                           xc(tp, KT_F32, 0.5)))),
                         NULL),
                    NULL)),
          NULL);

    /* vfinal[i] = v[i] for i < B*N, and vfinal[B*N] = (f32)(T*100 + sample_base) */
    Kernel *k3 = add_kernel(tp, "final", false);
    int i3 = add_local(k3, "i", KT_I64);
    kbody(k3, tp,
          sfor(tp, i3, xi(tp, 0), xbin(tp, KB_MUL, xk(tp, KX_BATCH), xi(tp, N)),
               sstore(tp, bf, xv(tp, k3, i3), xld(tp, bv, xv(tp, k3, i3))), NULL),
          sstore(tp, bf, xbin(tp, KB_MUL, xk(tp, KX_BATCH), xi(tp, N)),
                 xcast(tp, KT_F32, xbin(tp, KB_ADD, xi(tp, T * 100), xk(tp, KX_SAMPLE_BASE)))),
          NULL);

    float x[BATCH * T * N], want_s[BATCH * T * N], want_p[BATCH * T * N], want_f[BATCH * N + 1];
    for (int j = 0; j < BATCH * T * N; j++)
        x[j] = (float)((j * 37) % 11) * 0.13f;
    float v[BATCH * N];
    for (int j = 0; j < BATCH * N; j++)
        v[j] = 0.5f;
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < BATCH; b++)
            for (int n = 0; n < N; n++)
                v[b * N + n] = v[b * N + n] * 0.9f + x[(b * T + t) * N + n];
        for (int b = 0; b < BATCH; b++)
            for (int n = 0; n < N; n++) {
                bool s = v[b * N + n] >= 1.0f;
                want_s[(b * T + t) * N + n] = (float)s;
                if (s) v[b * N + n] = 0;
                want_p[(b * T + t) * N + n] =
                    (float)(rt_uniform(seed, 3, (uint32_t)t, (uint64_t)((sb + b) * N + n)) < 0.5f);
            }
    }
    memcpy(want_f, v, sizeof v);
    want_f[BATCH * N] = (float)(T * 100 + sb);
    const float *in[] = {x};
    float *w[] = {want_s, want_p, want_f};
    (void)bp;
    check_run("steps", tp, BATCH, sb, in, w);
    free_prog(tp);
}

/* Philox through KX_UNIFORM against rt_uniform, with indices above 2^32 and steps near 2^32 */
static void
test_uniform(void)
{
    enum { N = 64 };
    TestProg *tp = new_prog(1);
    int bo = add_buf(tp, "u", KT_F32, 0, 2 * N, KB_OUTPUT);
    Kernel *k = add_kernel(tp, "uniform", false);
    int i = add_local(k, "i", KT_I64);
    const uint64_t seed = 0xfedcba9876543210ULL;
    kbody(k, tp,
          sfor(tp, i, xi(tp, 0), xi(tp, N),
               sstore(tp, bo, xv(tp, k, i),
                      xuni(tp, seed, 7, xv(tp, k, i),
                           xbin(tp, KB_ADD, xv(tp, k, i), xi(tp, 5000000000LL)))),
               sstore(tp, bo, xbin(tp, KB_ADD, xv(tp, k, i), xi(tp, N)),
                      xuni(tp, 42, 0xffffffffu,
                           xbin(tp, KB_ADD, xv(tp, k, i), xi(tp, 4294967290LL)), xv(tp, k, i))),
               NULL),
          NULL);
    float want[2 * N];
    for (int j = 0; j < N; j++) {
        want[j] = rt_uniform(seed, 7, (uint32_t)j, (uint64_t)j + 5000000000ULL);
        want[N + j] = rt_uniform(42, 0xffffffffu, (uint32_t)(j + 4294967290LL), (uint64_t)j);
    }
    float *w[] = {want};
    check_run("uniform", tp, 1, 0, NULL, w);
    free_prog(tp);
}

/* a tile statement (kir.h KS_V*) */
static KStmt *
stile(TestProg *tp, KsKind kind, int var, int buf, KExpr *index, KExpr *a, int64_t stride,
      bool is_sparse)
{
    KStmt *s = s_new(tp, kind);
    s->var = var;
    s->buf = buf;
    s->index = index;
    s->a = a;
    s->stride = stride;
    s->is_sparse = is_sparse;
    return s;
}

/* Tiles for lane counts that are and are not multiples of the pieces (8, 4, 2, 1): set from a
 * scalar, loaded from an f32 weight and an f64 temporary, fused multiply-adds with and without
 * is_sparse over awkward values (signed zeros, a zero against an infinite weight, NaN weights),
 * stored with strides 1 and 3 to f32 and f64 buffers. The JIT, kir_eval and C's fma() agree bit
 * for bit; a zero skipped by is_sparse leaves even a -0 accumulator as it is. */
static void
tiles_of_type(KType tt)
{
    static const int lanes_of[] = {1, 2, 3, 5, 7, 8, 9, 13, 21, 32};
    enum { K = 6, MAXN = 32 };
    static const float xs[K] = {0.0f, -0.0f, 1.5f, -2.0f, 0.0f, 3.0f};
    for (size_t c = 0; c < sizeof lanes_of / sizeof lanes_of[0]; c++) {
        int n = lanes_of[c];
        static float W[(K + 1) * MAXN];
        for (int j = 0; j < (K + 1) * n; j++) {
            int row = j / n, l = j % n;
            W[j] = (float)((j * 7919) % 97 - 48) / 13.0f;
            /* against x = 0: skipped (is_sparse) or NaN */
            if (l % 5 == 1 && (row == 1 || row == 2 || row == 5))
                W[j] = l % 2 ? INFINITY : -INFINITY;
            if (l % 7 == 3 && row == 3) /* against x = 1.5 */
                W[j] = NAN;
        }
        TestProg *tp = new_prog(1);
        int bw = add_buf(tp, "W", KT_F32, 0, (K + 1) * n, KB_WEIGHT);
        tp->weights[0].name = "W";
        tp->weights[0].numel = (K + 1) * n;
        tp->weights[0].data = W;
        int bx = add_buf(tp, "x", KT_F32, 0, K, KB_INPUT);
        int bt = add_buf(tp, "tmp", tt, 0, n, KB_TEMP);
        int by = add_buf(tp, "y", KT_F32, 0, 3 * n, KB_OUTPUT);
        int bz = add_buf(tp, "z", KT_F32, 0, n, KB_OUTPUT);
        Kernel *k = add_kernel(tp, "tiles", false);
        int t0 = add_local(k, "t0", tt), t1 = add_local(k, "t1", tt);
        int t2 = add_local(k, "t2", tt), t3 = add_local(k, "t3", tt);
        int kk = add_local(k, "k", KT_I64);
        k->locals[t0].lanes = k->locals[t1].lanes = k->locals[t2].lanes = k->locals[t3].lanes = n;
        KExpr *xk = xcast(tp, tt, xld(tp, bx, xv(tp, k, kk)));
        KExpr *wrow = xbin(tp, KB_MUL, xbin(tp, KB_ADD, xv(tp, k, kk), xi(tp, 1)), xi(tp, n));
        kbody(k, tp, stile(tp, KS_VSET, t0, -1, NULL, xc(tp, tt, 0.5), 1, false),
              stile(tp, KS_VLOAD, t1, bw, xi(tp, 0), NULL, 1, false),
              stile(tp, KS_VSET, t2, -1, NULL, xc(tp, tt, -0.0), 1, false),
              sfor(tp, kk, xi(tp, 0), xi(tp, K), stile(tp, KS_VFMA, t1, bw, wrow, xk, 1, false),
                   stile(tp, KS_VFMA, t2, bw, wrow, xk, 1, true), NULL),
              stile(tp, KS_VSTORE, t1, bt, xi(tp, 0), NULL, 1, false),
              stile(tp, KS_VLOAD, t3, bt, xi(tp, 0), NULL, 1, false),
              stile(tp, KS_VFMA, t3, bt, xi(tp, 0), xc(tp, tt, -1.0), 1, false),
              stile(tp, KS_VSTORE, t1, by, xi(tp, 0), NULL, 3, false),
              stile(tp, KS_VSTORE, t2, by, xi(tp, 1), NULL, 3, false),
              stile(tp, KS_VSTORE, t3, by, xi(tp, 2), NULL, 3, false),
              stile(tp, KS_VSTORE, t0, bz, xi(tp, 0), NULL, 1, false), NULL);
        float want_y[3 * MAXN], want_z[MAXN];
        for (int l = 0; l < n; l++) {
            double a1 = W[l], a2 = -0.0;
            float f1 = W[l], f2 = -0.0f;
            for (int j = 0; j < K; j++) {
                double w = W[(j + 1) * n + l];
                a1 = fma(xs[j], w, a1);
                f1 = fmaf(xs[j], (float)w, f1);
                if (xs[j] != 0) {
                    a2 = fma(xs[j], w, a2);
                    f2 = fmaf(xs[j], (float)w, f2);
                }
            }
            bool is_f32 = tt == KT_F32;
            want_y[3 * l] = is_f32 ? f1 : (float)a1;
            want_y[3 * l + 1] = is_f32 ? f2 : (float)a2;
            want_y[3 * l + 2] = is_f32 ? fmaf(-1.0f, f1, f1) : (float)fma(-1.0, a1, a1);
            want_z[l] = 0.5f;
        }
        const float *in[] = {xs};
        float *w[] = {want_y, want_z};
        char what[32];
        snprintf(what, sizeof what, "%s tiles of %d", ktype_name(tt), n);
        check_run(what, tp, 1, 0, in, w);
        if (n == 13) { /* the module: fused, vector-wide, nothing left in memory */
            char err[256];
            char *opt = cg_llvm_module_text(&tp->p, true, err, sizeof err);
            if (tt == KT_F64)
                CHECK(opt && strstr(opt, "@llvm.fma.v8f64") && strstr(opt, "@llvm.fma.v4f64") &&
                      strstr(opt, "@llvm.fma.f64"));
            else
                CHECK(opt && strstr(opt, "@llvm.fma.v8f32") && strstr(opt, "@llvm.fma.v4f32") &&
                      strstr(opt, "@llvm.fma.f32") && !strstr(opt, "double"));
            CHECK(opt && !strstr(opt, "alloca"));
            free(opt);
        }
        free_prog(tp);
    }
}

/* tiles of f64 (exact sums) and of f32 (accumulate f32: fmaf per term), every lane count that
 * splits into pieces differently; and a tile read as a scalar is refused */
static void
test_tiles(void)
{
    tiles_of_type(KT_F64);
    tiles_of_type(KT_F32);
    /* a tile is not a scalar */
    TestProg *tp = new_prog(1);
    int bf = add_buf(tp, "o", KT_F32, 0, 1, KB_OUTPUT);
    Kernel *k = add_kernel(tp, "bad", false);
    int t = add_local(k, "t", KT_F64);
    k->locals[t].lanes = 4;
    kbody(k, tp, stile(tp, KS_VSET, t, -1, NULL, xc(tp, KT_F64, 1), 1, false),
          sstore(tp, bf, xi(tp, 0), xcast(tp, KT_F32, xv(tp, k, t))), NULL);
    char err[256] = "";
    CHECK(cg_llvm_compile(&tp->p, err, sizeof err) == NULL);
    CHECK(strstr(err, "tile") != NULL);
    free_prog(tp);
}

/* errors come back as messages, never crashes: a bad local, a missing input, an unbound weight */
static void
test_errors(void)
{
    char err[256] = "";
    TestProg *tp = new_prog(1);
    int bo = add_buf(tp, "out", KT_F32, 0, 4, KB_OUTPUT);
    Kernel *k = add_kernel(tp, "bad", false);
    KExpr *bad = x_new(tp, KX_VAR, KT_I64);
    bad->var = 3;
    kbody(k, tp, sstore(tp, bo, xi(tp, 0), xcast(tp, KT_F32, bad)), NULL);
    CHECK(cg_llvm_compile(&tp->p, err, sizeof err) == NULL);
    CHECK(strstr(err, "local 3") != NULL);
    CHECK(cg_llvm_module_text(&tp->p, false, err, sizeof err) == NULL);
    free_prog(tp);

    tp = new_prog(1);
    int bx = add_buf(tp, "x", KT_F32, 0, 4, KB_INPUT);
    k = add_kernel(tp, "clobber", false);
    kbody(k, tp, sstore(tp, bx, xi(tp, 0), xc(tp, KT_F32, 1)), NULL);
    CHECK(cg_llvm_compile(&tp->p, err, sizeof err) == NULL);
    CHECK(strstr(err, "read-only") != NULL);
    free_prog(tp);

    tp = new_prog(1);
    int bw = add_buf(tp, "W", KT_F32, 0, 4, KB_WEIGHT);
    bo = add_buf(tp, "out", KT_F32, 0, 4, KB_OUTPUT);
    k = add_kernel(tp, "copy", false);
    kbody(k, tp, sstore(tp, bo, xi(tp, 0), xld(tp, bw, xi(tp, 1))), NULL);
    CgLlvm *cg = cg_llvm_compile(&tp->p, err, sizeof err);
    CHECK(cg != NULL);
    float out[4];
    float *outs[] = {out};
    err[0] = 0;
    CHECK(cg && !run_bound(cg, &tp->p, 1, 0, NULL, outs, err, sizeof err));
    CHECK(strstr(err, "not bound") != NULL);
    cg_llvm_free(cg);
    free_prog(tp);
}

/* --emit=llvm text, before and after O3 */
static void
test_module_text(void)
{
    TestProg *tp = new_prog(4);
    int bx = add_buf(tp, "x", KT_F32, 4, 0, KB_INPUT);
    int by = add_buf(tp, "y", KT_F32, 4, 0, KB_OUTPUT);
    Kernel *k = add_kernel(tp, "scale", true);
    int i = add_local(k, "i", KT_I64);
    kbody(k, tp,
          pfor(sfor(tp, i, xi(tp, 0), xbin(tp, KB_MUL, xk(tp, KX_BATCH), xi(tp, 4)),
                    sstore(tp, by, xv(tp, k, i),
                           xbin(tp, KB_ADD, xld(tp, by, xv(tp, k, i)),
                                xun(tp, KU_EXP, xld(tp, bx, xv(tp, k, i))))),
                    NULL)),
          NULL);
    /* a loop without calls must be vectorised for the host (AVX-512 here: 16 floats) */
    int bz = add_buf(tp, "z", KT_F32, 4, 0, KB_OUTPUT);
    Kernel *k2 = add_kernel(tp, "affine", false);
    int j = add_local(k2, "j", KT_I64);
    kbody(k2, tp,
          sfor(tp, j, xi(tp, 0), xbin(tp, KB_MUL, xk(tp, KX_BATCH), xi(tp, 4)),
               sstore(tp, bz, xv(tp, k2, j),
                      xbin(tp, KB_ADD,
                           xbin(tp, KB_MUL, xld(tp, bx, xv(tp, k2, j)), xc(tp, KT_F32, 2)),
                           xc(tp, KT_F32, 1))),
               NULL),
          NULL);
    char err[256];
    char *raw = cg_llvm_module_text(&tp->p, false, err, sizeof err);
    char *opt = cg_llvm_module_text(&tp->p, true, err, sizeof err);
    /* an f32 exp is ir/fmath.h's f32_exp_poly in vector operations (fma explicit), no libm call */
    CHECK(raw && strstr(raw, "define void @snnk_run") && !strstr(raw, "@exp(") &&
          strstr(raw, "llvm.fma.f64") && strstr(raw, "llvm.rint.f64"));
    CHECK(raw && strstr(raw, "llvm.loop.parallel_accesses") && strstr(raw, "!llvm.access.group"));
    CHECK(opt && strstr(opt, "define void @kernel_0"));
    CHECK(opt && strstr(opt, "x float>")); /* vectorised */
    /* the affine kernel's multiply and add are never contracted into an fma */
    const char *k1 = opt ? strstr(opt, "define void @kernel_1") : NULL;
    const char *k1_end = k1 ? strstr(k1 + 1, "\ndefine ") : NULL;
    CHECK(k1 && k1_end);
    if (k1 && k1_end) {
        const char *f = strstr(k1, "fma");
        CHECK(!f || f > k1_end);
    }
    if (getenv("TEST_LLVM_PRINT")) printf("%s\n----\n%s\n", raw ? raw : err, opt ? opt : err);
    free(raw);
    free(opt);
    free_prog(tp);
}

#ifdef SNN_HAVE_KIR
/* A parsed model lowered by kir_lower, run by the JIT's code in the runtime session and by
 * interp_run in f32 mode: bit for bit. */
static const char model_text[] = "model tiny {\n"
                                 "  timesteps 8\n"
                                 "  seed 5\n"
                                 "  input x : f32[20]\n"
                                 "  s = LIF(dense(x, 16))\n"
                                 "  r = LI(dense(s, 4))\n"
                                 "  output readout = last(r)\n"
                                 "  output spikes = sequence(s)\n"
                                 "}\n";

static void
test_model(void)
{
    Module *m = fe_load_text("tiny.snn", model_text, strlen(model_text), NULL);
    CHECK(m != NULL);
    if (!m) return;
    CHECK(weights_bind(m, NULL));
    m->schedule = SCHEDULE_LAYER; /* what the default pipeline's time-batch pass chooses */
    KProgram *p = kir_lower(m);
    CHECK(p != NULL);
    if (!p) {
        module_free(m);
        return;
    }
    enum { BATCH = 5 };
    const int64_t sb = 3;
    char err[512] = "";
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CgLlvm *cg = cg_llvm_compile(p, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(cg != NULL);
    if (!cg)
        fprintf(stderr, "model: compile: %s\n", err);
    else
        printf("model tiny: %d kernels, compiled in %.1f ms\n", p->nkernels,
               (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    float *in[4] = {0}, *got[4] = {0}, *ref[4] = {0};
    size_t n_in[4], n_out[4];
    for (int i = 0; i < m->ninputs; i++) {
        const Node *nd = &m->nodes[m->inputs[i]];
        n_in[i] = (size_t)BATCH * (size_t)type_numel(&nd->type) *
                  (nd->type.has_time ? (size_t)m->timesteps : 1);
        in[i] = malloc(n_in[i] * sizeof(float));
        for (size_t j = 0; j < n_in[i]; j++)
            in[i][j] = (float)((j * 2654435761u) % 1000) / 500.0f;
    }
    for (int i = 0; i < m->noutputs; i++) {
        const Node *nd = &m->nodes[m->outputs[i]];
        n_out[i] = (size_t)BATCH * (size_t)type_numel(&nd->type) *
                   (nd->type.has_time ? (size_t)m->timesteps : 1);
        got[i] = calloc(n_out[i], sizeof(float));
        ref[i] = calloc(n_out[i], sizeof(float));
    }
    InterpOptions opt = {INTERP_F32, -1, false, false};
    double *cref = calloc((size_t)m->nnodes, sizeof *cref), *cgot = calloc((size_t)m->nnodes, sizeof *cgot);
    CHECK(interp_run(m, &opt, BATCH, sb, (const float *const *)in, ref, cref, err, sizeof err));
    if (cg) {
        char *meta = kir_describe(p);
        SessionRun r = {0};
        bool is_ok = session_open(&r, m, meta, (SnnkEntryFn)(uintptr_t)cg_llvm_entry(cg), NULL, 0,
                                  "cpu", BATCH, 1, err, sizeof err) &&
                     session_run(&r, p, BATCH, sb, (const float *const *)in, got, cgot, err,
                                 sizeof err);
        session_close(&r);
        free(meta);
        CHECK(is_ok);
        if (!is_ok) fprintf(stderr, "model: run: %s\n", err);
        for (int i = 0; i < m->noutputs && is_ok; i++)
            CHECK(same_bits("model vs interp_run", got[i], ref[i], n_out[i]));
        bool is_same = true;
        for (int v = 0; v < m->nnodes && is_ok; v++)
            is_same = is_same && cgot[v] == cref[v];
        CHECK(is_same);
        if (!is_same) fprintf(stderr, "model: spike counts differ from interp_run\n");
    }
    free(cref);
    free(cgot);
    for (int i = 0; i < 4; i++) {
        free(in[i]);
        free(got[i]);
        free(ref[i]);
    }
    cg_llvm_free(cg);
    kir_free(p);
    module_free(m);
}
/* Dense and conv2d layers as kir_lower tiles them (register-blocked GEMM, spike tiles, the
 * event-driven scatter, gathered and spike-list convolutions): sizes that are not multiples of
 * the tiles or the row blocks, static, per-step and recurrent (step kernel) rows, biases or none,
 * groups, strides, dilation and padding, u8 and i8 spikes; batches 1, 3, 4 and 7 on 1 and 3
 * threads. The JIT's outputs and spike counts are interp_run's in f32 mode, bit for bit. */
#define BIPOLAR_NEURON                                                                             \
    "neuron Bip(th = 0.5) {\n state v = 0.0\n v = v + I\n fire v >= th\n"                      \
    " fire down v <= -th\n v = v - spike * th\n}\n"
static const char *const layer_models[] = {
    BIPOLAR_NEURON
    "model dense_layers {\n timesteps 3\n input x : f32[T, 37]\n input u : f32[19]\n"
    " h = dense(x, 45)\n s = LIF(h, tau = 2.0, v_th = 0.3)\n"
    " a = dense(s, 7, bias = false)\n b = dense(s, 40)\n c = dense(u, 3)\n"
    " q = Bip(h)\n d = dense(q, 70, bias = false)\n e = dense(q, 33)\n f = dense(q, 9)\n"
    " r = LIF(dense(x, 17) + dense(prev(r), 17, bias = false), tau = 2.0, v_th = 0.2)\n"
    " output oh = sequence(h)\n output oa = sequence(a)\n output ob = sequence(b)\n"
    " output oc = last(c)\n output od = sequence(d)\n output oe = max(e)\n"
    " output orr = count(r)\n output of = mean(f)\n}\n",
    BIPOLAR_NEURON
    "model conv_layers {\n timesteps 2\n input x : f32[T, 4, 11, 10]\n input u : f32[3, 7, 6]\n"
    " c1 = conv2d(x, 36, kernel = 3, stride = 2, pad = 1, groups = 2)\n"
    " s1 = IF(c1, v_th = 0.3)\n"
    " c2 = conv2d(s1, 70, kernel = (2, 3), pad = (1, 2), dilation = (2, 1), stride = (1, 2), "
    "bias = false)\n"
    " s2 = IF(c2, v_th = 0.2)\n c3 = conv2d(s2, 6, kernel = 1, groups = 2)\n"
    " c4 = conv2d(u, 5, kernel = (3, 2), pad = (2, 0), dilation = (1, 2))\n"
    " q = Bip(c1, th = 0.3)\n"
    " c5 = conv2d(q, 33, kernel = 3, pad = 1, groups = 3, bias = false)\n"
    " output o1 = sequence(c1)\n output o2 = sequence(c2)\n output o3 = sequence(c3)\n"
    " z = IF(conv2d(x, 4, kernel = 3, pad = 1) + conv2d(prev(z), 4, kernel = 3, pad = 1,"
    " bias = false), v_th = 0.3)\n"
    " output o4 = last(c4)\n output o5 = sequence(c5)\n output r = mean(s2)\n"
    " output oz = count(z)\n}\n",
    /* more than 256 channels per group: the spike lists hold i64, not bytes */
    "model wide_conv {\n timesteps 2\n input x : f32[T, 2, 3, 4]\n"
    " s = IF(conv2d(x, 300, kernel = 1), v_th = 0.2)\n c = conv2d(s, 5, kernel = 3, pad = 1)\n"
    " output o = sequence(c)\n}\n",
};

static void
test_layers(void)
{
    static const int batches[] = {1, 3, 4, 7};
    for (size_t mi = 0; mi < sizeof layer_models / sizeof layer_models[0]; mi++) {
        const char *text = layer_models[mi];
        Module *m = fe_load_text("layers.snn", text, strlen(text), NULL);
        CHECK(m != NULL);
        if (!m) continue;
        CHECK(weights_bind(m, NULL));
        m->schedule = SCHEDULE_LAYER; /* the default pipeline's; step by step in test_kir */
        KProgram *p = kir_lower(m);
        CHECK(p != NULL);
        char err[512] = "";
        CgLlvm *cg = p ? cg_llvm_compile(p, err, sizeof err) : NULL;
        CHECK(cg != NULL);
        if (!cg) fprintf(stderr, "%s: compile: %s\n", m->name, err);
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0] && cg; bi++) {
            int batch = batches[bi];
            float *in[4] = {0}, *got[8] = {0}, *ref[8] = {0};
            size_t n_out[8];
            for (int i = 0; i < m->ninputs; i++) {
                const Node *nd = &m->nodes[m->inputs[i]];
                size_t n = (size_t)batch * (size_t)type_numel(&nd->type) *
                           (nd->is_per_step_input ? (size_t)m->timesteps : 1);
                in[i] = malloc(n * sizeof(float));
                /* zeros, negatives, values above threshold */
                for (size_t j = 0; j < n; j++)
                    in[i][j] = (float)((j * 2654435761u + 977 * (unsigned)i) % 1000) / 400.0f -
                               0.6f;
            }
            for (int i = 0; i < m->noutputs; i++) {
                const Node *nd = &m->nodes[m->outputs[i]];
                n_out[i] = (size_t)batch * (size_t)type_numel(&nd->type) *
                           (nd->type.has_time ? (size_t)m->timesteps : 1);
                got[i] = calloc(n_out[i], sizeof(float));
                ref[i] = calloc(n_out[i], sizeof(float));
            }
            InterpOptions opt = {INTERP_F32, -1, false, false};
            double *cref = calloc((size_t)m->nnodes, sizeof *cref);
            double *cgot = calloc((size_t)m->nnodes, sizeof *cgot);
            CHECK(interp_run(m, &opt, batch, 0, (const float *const *)in, ref, cref, err,
                             sizeof err));
            for (int nthreads = 1; nthreads <= 3; nthreads += 2) {
                for (int v = 0; v < m->nnodes; v++)
                    cgot[v] = 0;
                char *meta = kir_describe(p);
                SessionRun r = {0};
                bool is_ok =
                    session_open(&r, m, meta, (SnnkEntryFn)(uintptr_t)cg_llvm_entry(cg), NULL, 0,
                                 "cpu", batch, nthreads, err, sizeof err) &&
                    session_run(&r, p, batch, 0, (const float *const *)in, got, cgot, err,
                                sizeof err);
                session_close(&r);
                free(meta);
                CHECK(is_ok);
                if (!is_ok) fprintf(stderr, "%s: run: %s\n", m->name, err);
                for (int i = 0; i < m->noutputs && is_ok; i++) {
                    char label[96];
                    snprintf(label, sizeof label, "%s batch %d threads %d output %d", m->name,
                             batch, nthreads, i);
                    CHECK(same_bits(label, got[i], ref[i], n_out[i]));
                }
                bool is_same = true;
                for (int v = 0; v < m->nnodes && is_ok; v++)
                    is_same = is_same && cgot[v] == cref[v];
                CHECK(is_same);
            }
            free(cref);
            free(cgot);
            for (int i = 0; i < 8; i++) {
                free(got[i]);
                free(ref[i]);
            }
            for (int i = 0; i < 4; i++)
                free(in[i]);
        }
        cg_llvm_free(cg);
        kir_free(p);
        module_free(m);
    }
}
#endif

/* a kernel "tiles" over [0, n) in tiles of `lanes`: src through an f64 tile into dst64, and through
 * an f32 tile into dst32, loaded (VLOAD) or, is_fma, summed from -0 as fmaf(1, src, -0) (VFMA) */
static void
tiles_kernel(TestProg *tp, int lanes, int64_t n, int src, int dst64, int dst32, bool is_fma)
{
    Kernel *kt = add_kernel(tp, "tiles", false);
    int j = add_local(kt, "j", KT_I64);
    int t64 = add_local(kt, "t64", KT_F64), t32 = add_local(kt, "t32", KT_F32);
    kt->locals[t64].lanes = kt->locals[t32].lanes = lanes;
    KExpr *at = xbin(tp, KB_MUL, xv(tp, kt, j), xi(tp, lanes));
    KStmt *first32 = is_fma ? stile(tp, KS_VSET, t32, -1, NULL, xc(tp, KT_F32, -0.0), 1, false)
                            : stile(tp, KS_VLOAD, t32, src, at, NULL, 1, false);
    KStmt *sum32 = is_fma ? stile(tp, KS_VFMA, t32, src, at, xc(tp, KT_F32, 1.0), 1, false) : NULL;
    kbody(kt, tp,
          sfor(tp, j, xi(tp, 0), xi(tp, n / lanes), stile(tp, KS_VLOAD, t64, src, at, NULL, 1, false),
               stile(tp, KS_VSTORE, t64, dst64, at, NULL, 1, false), first32,
               sum32 ? sum32 : stile(tp, KS_VSTORE, t32, dst32, at, NULL, 1, false),
               sum32 ? stile(tp, KS_VSTORE, t32, dst32, at, NULL, 1, false) : NULL, NULL),
          NULL);
}

/* weight 0 of tp: n floats of data, in a buffer of type t (16-bit types: the binder narrows) */
static int
weight0(TestProg *tp, const char *name, KType t, int64_t n, float *data)
{
    int b = add_buf(tp, name, t, 0, n, KB_WEIGHT);
    tp->weights[0].name = name;
    tp->weights[0].numel = n;
    tp->weights[0].data = data;
    return b;
}

/* 16-bit weight buffers: every binary16 and bfloat16 value (from the f32 weights the binder
 * narrows) loads as its exact f32, through scalar loads (and SIMD lanes: check_run), f64 and f32
 * tiles, and with binary16 both ways LLVM widens: F16C's conversion and the integer one. */
static void
test_weights16(void)
{
    enum { N = 65536, L = 8 };
    static const KType types[] = {KT_F16, KT_BF16};
    for (int soft = 0; soft < 2; soft++)
        for (size_t c = 0; c < 2; c++) {
            KType wt = types[c];
            if (wt == KT_BF16 && soft) continue; /* one way only */
            llvm_gen_soft_f16 = soft;
            static float W[N], want[N];
            for (int h = 0; h < N; h++) {
                W[h] = wt == KT_F16 ? rt_f16_to_f32((uint16_t)h) : rt_bf16_to_f32((uint16_t)h);
                uint16_t r = wt == KT_F16 ? rt_f32_to_f16(W[h]) : rt_f32_to_bf16(W[h]);
                want[h] = wt == KT_F16 ? rt_f16_to_f32(r) : rt_bf16_to_f32(r);
            }
            TestProg *tp = new_prog(1);
            int bw = weight0(tp, "W", wt, N, W);
            int by = add_buf(tp, "y", KT_F32, 0, N, KB_OUTPUT);
            int bz = add_buf(tp, "z", KT_F32, 0, N, KB_OUTPUT);
            int bu = add_buf(tp, "u", KT_F32, 0, N, KB_OUTPUT);
            Kernel *k = add_kernel(tp, "scalar", false);
            int i = add_local(k, "i", KT_I64);
            kbody(k, tp,
                  pfor(sfor(tp, i, xi(tp, 0), xi(tp, N),
                            sstore(tp, by, xv(tp, k, i), xld(tp, bw, xv(tp, k, i))), NULL)),
                  NULL);
            tiles_kernel(tp, L, N, bw, bz, bu, true);
            /* fmaf(1, w, -0) is w for every w but NaN, whose payload fma may not keep */
            static float want_u[N];
            for (int h = 0; h < N; h++)
                want_u[h] = isnan(want[h]) ? fmaf(1.0f, want[h], -0.0f) : want[h];
            float *w[] = {want, want, want_u};
            char what[64];
            snprintf(what, sizeof what, "%s weights%s", ktype_name(wt),
                     soft ? " (integer widening)" : "");
            check_run(what, tp, 1, 0, NULL, w);
            free_prog(tp);
        }
    llvm_gen_soft_f16 = false;
}

/* 16-bit stores (layer outputs stored narrower, Node.astore): f32 values rounded to binary16 and
 * bfloat16 as runtime/f16.h rounds them, through scalar stores (and SIMD lanes: check_run), f64
 * and f32 tile stores and KU_ROUND_F16/BF16, both ways LLVM narrows binary16 (F16C's and the
 * integer one). The values: every 16-bit value, its neighbours and the ties halfway to the next
 * (where rounding decides), NaN payloads, infinities, and pseudo-random bit patterns. */
static void
test_stores16(void)
{
    enum { NH = 65536, NR = 1 << 18, N = 4 * NH + NR, L = 8 };
    static const KType types[] = {KT_F16, KT_BF16};
    static float X[N], want[N];
    for (int soft = 0; soft < 2; soft++)
        for (size_t c = 0; c < 2; c++) {
            KType ht = types[c];
            if (ht == KT_BF16 && soft) continue; /* one way only */
            llvm_gen_soft_f16 = soft;
            bool is_f16 = ht == KT_F16;
            int n = 0;
            for (uint32_t h = 0; h < NH; h++) {
                float a = is_f16 ? rt_f16_to_f32((uint16_t)h) : rt_bf16_to_f32((uint16_t)h);
                uint32_t ab = rt_f32_bits(a), mb = ab | 0x8000u;
                if (is_f16 && (h & 0x7fffu) < 0x7c00u) {
                    float b = rt_f16_to_f32((uint16_t)(h + 1)); /* the next magnitude */
                    mb = rt_f32_bits((float)(((double)a + (double)b) / 2));
                }
                X[n++] = a;
                X[n++] = rt_bits_f32(mb - 1);
                X[n++] = rt_bits_f32(mb);
                X[n++] = rt_bits_f32(mb + 1);
            }
            uint32_t r = 0x9e3779b9u;
            while (n < N) {
                r ^= r << 13, r ^= r >> 17, r ^= r << 5;
                X[n++] = rt_bits_f32(r);
            }
            for (int i = 0; i < N; i++)
                want[i] = is_f16 ? rt_f16_to_f32(rt_f32_to_f16(X[i]))
                                 : rt_bf16_to_f32(rt_f32_to_bf16(X[i]));
            TestProg *tp = new_prog(1);
            int bx = weight0(tp, "X", KT_F32, N, X);
            int bh = add_buf(tp, "h", ht, 0, N, KB_TEMP), bg = add_buf(tp, "g", ht, 0, N, KB_TEMP);
            int bq = add_buf(tp, "q", ht, 0, N, KB_TEMP);
            int by = add_buf(tp, "y", KT_F32, 0, N, KB_OUTPUT);
            int bz = add_buf(tp, "z", KT_F32, 0, N, KB_OUTPUT);
            int bu = add_buf(tp, "u", KT_F32, 0, N, KB_OUTPUT);
            int bv = add_buf(tp, "v", KT_F32, 0, N, KB_OUTPUT);
            int bp = add_buf(tp, "p", KT_F32, 0, N, KB_OUTPUT);
            Kernel *k = add_kernel(tp, "scalar", false);
            int i = add_local(k, "i", KT_I64);
            KUn round = is_f16 ? KU_ROUND_F16 : KU_ROUND_BF16;
            kbody(k, tp,
                  pfor(sfor(tp, i, xi(tp, 0), xi(tp, N),
                            sstore(tp, bh, xv(tp, k, i), xld(tp, bx, xv(tp, k, i))),
                            sstore(tp, by, xv(tp, k, i), xld(tp, bh, xv(tp, k, i))),
                            sstore(tp, bu, xv(tp, k, i), xun(tp, round, xld(tp, bx, xv(tp, k, i)))),
                            NULL)),
                  NULL);
            tiles_kernel(tp, L, N, bx, bg, bq, false);
            Kernel *kb = add_kernel(tp, "back", false);
            int m = add_local(kb, "m", KT_I64);
            kbody(kb, tp,
                  pfor(sfor(tp, m, xi(tp, 0), xi(tp, N),
                            sstore(tp, bz, xv(tp, kb, m), xld(tp, bg, xv(tp, kb, m))),
                            sstore(tp, bv, xv(tp, kb, m), xld(tp, bq, xv(tp, kb, m))),
                            /* scattered loads: SIMD lanes gather them (16-bit words) */
                            sstore(tp, bp, xv(tp, kb, m),
                                   xld(tp, bh, xbin(tp, KB_REM,
                                                    xbin(tp, KB_MUL, xv(tp, kb, m), xi(tp, 7919)),
                                                    xi(tp, N)))),
                            NULL)),
                  NULL);
            static float want_p[N];
            for (int q = 0; q < N; q++)
                want_p[q] = want[(int64_t)q * 7919 % N];
            float *w[] = {want, want, want, want, want_p};
            char what[64];
            snprintf(what, sizeof what, "%s stores%s", ktype_name(ht),
                     soft ? " (integer narrowing)" : "");
            check_run(what, tp, 1, 0, NULL, w);
            free_prog(tp);
        }
    llvm_gen_soft_f16 = false;
}

/* The producer of the bit-buffer tests (test_bits, test_bit_pairs), into buffers of bit type bt:
 * s[T * N] = code(x (t + 1)) from aligned SIMD lanes (the index t*(B*N) + j is a lane multiple
 * plus the loop variable), m[N] = on or off under a condition that varies by lane (x > 0.5:
 * masked lanes), r[j * 5 % (B*N)] = code(-2x) at a scattered index, lane by lane; an output
 * buffer of NO * N and a kernel "consume" for the test's loads. cval is code in C: the values
 * are also returned in sv, mv, rv (ints), from the inputs xin. */
typedef struct BitsTest {
    TestProg *tp;
    int bs, bm, br, bo;
    KExpr *BN;
    Kernel *kc;
    KExpr *i; /* the consumer's parallel loop variable, 0..BN */
} BitsTest;

static BitsTest
bits_test(KType bt, int N, int T, int NO, KExpr *(*code)(TestProg *, KExpr *), int on, int off)
{
    BitsTest b = {new_prog(1), 0, 0, 0, 0, NULL, NULL, NULL};
    TestProg *tp = b.tp;
    int bx = add_buf(tp, "x", KT_F32, N, 0, KB_INPUT);
    b.bs = add_buf(tp, "s", bt, T * N, 0, KB_TEMP);
    b.bm = add_buf(tp, "m", bt, N, 0, KB_TEMP);
    b.br = add_buf(tp, "r", bt, N, 0, KB_TEMP);
    b.bo = add_buf(tp, "out", KT_F32, NO * N, 0, KB_OUTPUT);
    KExpr *BN = b.BN = xbin(tp, KB_MUL, xk(tp, KX_BATCH), xi(tp, N));
    KType st = ktype_value(bt);
    Kernel *k = add_kernel(tp, "produce", false);
    int j = add_local(k, "j", KT_I64), t = add_local(k, "t", KT_I64);
    int x = add_local(k, "xv", KT_F32);
#define J() xv(tp, k, j)
#define X() xv(tp, k, x)
    KExpr *grow = xbin(tp, KB_MUL, X(), xcast(tp, KT_F32, xbin(tp, KB_ADD, xv(tp, k, t), xi(tp, 1))));
    kbody(k, tp,
          pfor(sfor(tp, j, xi(tp, 0), BN, sassign(tp, x, xld(tp, bx, J())),
                    sfor(tp, t, xi(tp, 0), xi(tp, T),
                         sstore(tp, b.bs, xbin(tp, KB_ADD, xbin(tp, KB_MUL, xv(tp, k, t), BN), J()),
                                code(tp, grow)),
                         NULL),
                    sif(tp, xbin(tp, KB_GT, X(), xc(tp, KT_F32, 0.5)),
                        sstore(tp, b.bm, J(), xcast(tp, st, xi(tp, on))),
                        sstore(tp, b.bm, J(), xcast(tp, st, xi(tp, off)))),
                    sstore(tp, b.br, xbin(tp, KB_REM, xbin(tp, KB_MUL, J(), xi(tp, 5)), BN),
                           code(tp, xbin(tp, KB_MUL, X(), xc(tp, KT_F32, -2.0)))),
                    NULL)),
          NULL);
#undef J
#undef X
    b.kc = add_kernel(tp, "consume", false);
    b.i = xv(tp, b.kc, add_local(b.kc, "i", KT_I64));
    return b;
}

/* element i of output o: the consumer's store index */
static KExpr *
bits_at(const BitsTest *b, int o)
{
    return xbin(b->tp, KB_ADD, xbin(b->tp, KB_MUL, xi(b->tp, o), b->BN), b->i);
}

/* bits_test's inputs for bn = B*N elements, and the values its producer stores (C's cval) */
static void
bits_test_values(int bn, int T, int offset, int (*cval)(float), int on, int off, float *xin,
                 int *sv, int *mv, int *rv)
{
    for (int q = 0; q < bn; q++)
        xin[q] = (float)((q * 37) % 19 - offset) * 0.23f;
    for (int q = 0; q < bn; q++) {
        for (int tt = 0; tt < T; tt++)
            sv[tt * bn + q] = cval(xin[q] * (float)(tt + 1));
        mv[q] = xin[q] > 0.5f ? on : off;
        rv[(q * 5) % bn] = cval(xin[q] * -2.0f);
    }
}

/* The two outputs every bit-buffer test checks first, at element i of the consumer: the steps of
 * s as one number, s[0] + base s[1] + base^2 s[2] (each element loaded alone), and m[i] + base
 * r[i]; want0 and want1 the same from bits_test_values' values. And the 8 bytes from byte
 * (i / 8) % 2 of s as a word (KLOAD_WORD). */
static KExpr *
bits_steps(const BitsTest *b, KExpr *i, int base)
{
    TestProg *tp = b->tp;
#define LD(buf, e) xcast(tp, KT_I64, xld(tp, buf, e))
    KExpr *s2 = LD(b->bs, xbin(tp, KB_ADD, xbin(tp, KB_MUL, xi(tp, 2), b->BN), i));
    return xbin(tp, KB_ADD, LD(b->bs, i),
                xbin(tp, KB_ADD, xbin(tp, KB_MUL, xi(tp, base), LD(b->bs, xbin(tp, KB_ADD, b->BN, i))),
                     xbin(tp, KB_MUL, xi(tp, base * base), s2)));
}

static KExpr *
bits_mr(const BitsTest *b, KExpr *i, int base)
{
    TestProg *tp = b->tp;
    return xbin(tp, KB_ADD, LD(b->bm, i), xbin(tp, KB_MUL, xi(tp, base), LD(b->br, i)));
#undef LD
}

static KExpr *
bits_word(const BitsTest *b, KExpr *i)
{
    KExpr *w = xld(b->tp, b->bs, xbin(b->tp, KB_REM, xbin(b->tp, KB_DIV, i, xi(b->tp, 8)), xi(b->tp, 2)));
    w->op = KLOAD_WORD;
    w->type = KT_I64;
    return w;
}

static void
bits_want(int bn, int base, const int *sv, const int *mv, const int *rv, float *want)
{
    for (int q = 0; q < bn; q++) {
        want[q] = (float)(sv[q] + base * sv[bn + q] + base * base * sv[2 * bn + q]);
        want[bn + q] = (float)(mv[q] + base * rv[q]);
    }
}

static KExpr *
code_bit(TestProg *tp, KExpr *v)
{
    return xcast(tp, KT_U8, xbin(tp, KB_GT, v, xc(tp, KT_F32, 1.0)));
}

static int
cval_bit(float v)
{
    return v > 1.0f;
}

static KExpr *
code_pair(TestProg *tp, KExpr *v)
{
    return xcast(tp, KT_I8,
                 xsel(tp, xbin(tp, KB_GT, v, xc(tp, KT_F32, 1.0)), xi(tp, 1),
                      xsel(tp, xbin(tp, KB_LT, v, xc(tp, KT_F32, -1.0)), xi(tp, -1), xi(tp, 0))));
}

static int
cval_pair(float v)
{
    return v > 1.0f ? 1 : v < -1.0f ? -1 : 0;
}

/* spikes stored as bits (KT_BIT), produced by bits_test; loads of single bits gather bytes, a byte
 * load (KLOAD_BYTES) at a uniform index is one scalar load; ctz, popcount and & on lanes and
 * scalars. Against C, kir_eval, scalar and SIMD code alike, at two batch sizes. */
static void
test_bits(void)
{
    enum { N = 24, T = 3, NO = 7 };
    for (int batch = 1; batch <= 2; batch++) {
        int bn = batch * N;
        BitsTest b = bits_test(KT_BIT, N, T, NO, code_bit, 1, 0);
        TestProg *tp = b.tp;
        KExpr *I = b.i;
#define F(e) xcast(tp, KT_F32, e)
        KExpr *byte_s = xld(tp, b.bs, xbin(tp, KB_DIV, I, xi(tp, 8)));
        byte_s->op = KLOAD_BYTES;
        KExpr *byte_r = xld(tp, b.br, xbin(tp, KB_DIV, I, xi(tp, 8)));
        byte_r->op = KLOAD_BYTES;
        KExpr *word_s = bits_word(&b, I);
        kbody(b.kc, tp,
              pfor(sfor(tp, b.i->var, xi(tp, 0), b.BN,
                        sstore(tp, b.bo, bits_at(&b, 0), F(bits_steps(&b, I, 2))),
                        sstore(tp, b.bo, bits_at(&b, 1), F(bits_mr(&b, I, 2))),
                        sstore(tp, b.bo, bits_at(&b, 2), F(xcast(tp, KT_I64, byte_s))),
                        sstore(tp, b.bo, bits_at(&b, 3),
                               F(xbin(tp, KB_ADD, xun(tp, KU_POPCOUNT, xbin(tp, KB_MUL, I, xi(tp, 7))),
                                      xbin(tp, KB_MUL, xi(tp, 100),
                                           xun(tp, KU_CTZ, xbin(tp, KB_ADD, I, xi(tp, 1))))))),
                        sstore(tp, b.bo, bits_at(&b, 4), F(xbin(tp, KB_BITAND, xbin(tp, KB_MUL, I, xi(tp, 3)), xi(tp, 10)))),
                        sstore(tp, b.bo, bits_at(&b, 5), F(xun(tp, KU_CTZ, xcast(tp, KT_I64, byte_r)))),
                        sstore(tp, b.bo, bits_at(&b, 6),
                               F(xbin(tp, KB_ADD, xun(tp, KU_POPCOUNT, word_s),
                                      xbin(tp, KB_MUL, xi(tp, 100), xun(tp, KU_CTZ, word_s))))),
                        NULL)),
              NULL);
#undef F
        float xin[2 * N], want[NO * 2 * N];
        int sb[T * 2 * N], mb[2 * N], rb[2 * N];
        bits_test_values(bn, T, 6, cval_bit, 1, 0, xin, sb, mb, rb);
        bits_want(bn, 2, sb, mb, rb, want);
        for (int q = 0; q < bn; q++) {
            int byte = 0, rbyte = 0;
            for (int l = 0; l < 8; l++) {
                byte |= sb[q / 8 * 8 + l] << l;
                rbyte |= rb[q / 8 * 8 + l] << l;
            }
            want[2 * bn + q] = (float)byte;
            want[3 * bn + q] =
                (float)(__builtin_popcountll((unsigned long long)q * 7) + 100 * __builtin_ctzll((unsigned long long)q + 1));
            want[4 * bn + q] = (float)((q * 3) & 10);
            want[5 * bn + q] = (float)(rbyte ? __builtin_ctz((unsigned)rbyte) : 64);
            uint64_t word = 0; /* elements 8w..8w+63 of s, w = (q / 8) % 2 */
            for (int l = 0; l < 64; l++)
                word |= (uint64_t)sb[(q / 8) % 2 * 8 + l] << l;
            want[6 * bn + q] = (float)(__builtin_popcountll(word) +
                                       100 * (word ? __builtin_ctzll(word) : 64));
        }
        const float *in[] = {xin};
        float *w[] = {want};
        char what[64];
        snprintf(what, sizeof what, "bits at batch %d", batch);
        check_run(what, tp, batch, 0, in, w);
        free_prog(tp);
    }
}

/* -1/0/1 spikes stored as bit pairs (KT_BIT2), produced by bits_test (8 aligned lanes store two
 * bytes, as <8 x i2>); loads of single elements sign-extend the pair (gathered in lanes, one byte
 * scalar); byte (KLOAD_BYTES) and word (KLOAD_WORD) loads give the raw pairs, as u8 and i64, the
 * low bit of each pair masked as the event listers do. Against C, kir_eval, scalar and SIMD code
 * alike, at two batch sizes. */
static void
test_bit_pairs(void)
{
    enum { N = 24, T = 3, NO = 5 };
    for (int batch = 1; batch <= 2; batch++) {
        int bn = batch * N;
        BitsTest b = bits_test(KT_BIT2, N, T, NO, code_pair, -1, 1);
        TestProg *tp = b.tp;
        KExpr *I = b.i;
#define F(e) xcast(tp, KT_F32, e)
        KExpr *low = xbin(tp, KB_MUL, xi(tp, 0x55555555), xi(tp, 0x100000001));
        KExpr *byte_s = xld(tp, b.bs, xbin(tp, KB_DIV, I, xi(tp, 4)));
        byte_s->op = KLOAD_BYTES;
        byte_s->type = KT_U8;
        KExpr *word_s = bits_word(&b, I);
        KExpr *word_low = xbin(tp, KB_BITAND, word_s, low);
        kbody(b.kc, tp,
              pfor(sfor(tp, b.i->var, xi(tp, 0), b.BN,
                        sstore(tp, b.bo, bits_at(&b, 0), F(bits_steps(&b, I, 3))),
                        sstore(tp, b.bo, bits_at(&b, 1), F(bits_mr(&b, I, 3))),
                        sstore(tp, b.bo, bits_at(&b, 2), F(xcast(tp, KT_I64, byte_s))),
                        sstore(tp, b.bo, bits_at(&b, 3),
                               F(xbin(tp, KB_ADD, xun(tp, KU_POPCOUNT, word_low),
                                      xbin(tp, KB_MUL, xi(tp, 100), xun(tp, KU_CTZ, word_low))))),
                        /* the bytes' sign bits above the low ones: the word's high half */
                        sstore(tp, b.bo, bits_at(&b, 4),
                               F(xun(tp, KU_POPCOUNT,
                                     xbin(tp, KB_BITAND, word_s, xbin(tp, KB_MUL, low, xi(tp, 2)))))),
                        NULL)),
              NULL);
#undef F
        float xin[2 * N], want[NO * 2 * N];
        int sv[T * 2 * N], mv[2 * N], rv[2 * N];
        bits_test_values(bn, T, 9, cval_pair, -1, 1, xin, sv, mv, rv);
        bits_want(bn, 3, sv, mv, rv, want);
        for (int q = 0; q < bn; q++) {
            int byte = 0;
            for (int l = 0; l < 4; l++)
                byte |= (sv[q / 4 * 4 + l] & 3) << (2 * l);
            uint64_t word = 0; /* the 8 bytes from byte w = (q / 8) % 2: elements 4w..4w+31 */
            for (int l = 0; l < 32; l++)
                word |= (uint64_t)(sv[(q / 8) % 2 * 4 + l] & 3) << (2 * l);
            uint64_t lo = word & 0x5555555555555555u;
            want[2 * bn + q] = (float)byte;
            want[3 * bn + q] = (float)(__builtin_popcountll(lo) + 100 * (lo ? __builtin_ctzll(lo) : 64));
            want[4 * bn + q] = (float)__builtin_popcountll(word & 0xAAAAAAAAAAAAAAAAu);
        }
        const float *in[] = {xin};
        float *w[] = {want};
        char what[64];
        snprintf(what, sizeof what, "bit pairs at batch %d", batch);
        check_run(what, tp, batch, 0, in, w);
        free_prog(tp);
    }
}

int
main(void)
{
    test_unary();
    test_binary();
    test_integers();
    test_lanes();
    test_scan();
    test_matvec();
    test_steps();
    test_tiles();
    test_weights16();
    test_stores16();
    test_bits();
    test_bit_pairs();
    test_uniform();
    test_errors();
    test_module_text();
#ifdef SNN_HAVE_KIR
    test_model();
    test_layers();
#endif
    printf("%d passed, %d failed\n", npass, nfail);
    return nfail ? 1 : 0;
}
