/* The kernel-IR evaluator: runs a KProgram on the CPU by walking its trees, one iteration at a time
 * (parallel loops run in order), with the float semantics kir.h states (f32 rounded after every
 * operation). It is the check that lowering is right, compared bit for bit with ir/interp.c; it
 * must stay obvious and never be clever about speed. Every index is bounds-checked. */
#include "codegen/kir.h"
#include "ir/fmath.h"
#include "runtime/layout.h"
#include "runtime/bigmem.h"
#include "runtime/f16.h"
#include "runtime/kernel_abi.h"
#include "runtime/philox.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef union KVal {
    double f;  /* f32 (holding a float value) and f64 */
    int64_t i; /* i64, u8, i8, bool */
} KVal;

typedef struct Eval {
    const KProgram *p;
    int64_t batch, sample_base, step;
    void **mem;     /* per buffer */
    int64_t *len;   /* elements per buffer */
    const Kernel *k;      /* the running kernel */
    KVal *locals;   /* of the running kernel */
    double **tiles; /* of the running kernel: per local, its lanes (tile locals) or NULL */
    int *lanes;     /* of the running kernel: per local, KLocal.lanes */
    int nlocals;
    /* a step loop run sample by sample: the running kernel's parallel loop over this range only */
    const KStmt *ranged;
    int64_t range_lo, range_hi;
    char *err;
    size_t errlen;
    jmp_buf fail;
} Eval;

static _Noreturn void efail(Eval *ev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static _Noreturn void
efail(Eval *ev, const char *fmt, ...)
{
    if (ev->err && ev->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ev->err, ev->errlen, fmt, ap);
        va_end(ap);
    }
    longjmp(ev->fail, 1);
}

static bool
is_float(KType t)
{
    return t == KT_F32 || t == KT_F64;
}

static double
rnd(KType t, double x)
{
    return t == KT_F32 ? (double)(float)x : x;
}

static double
min_nan(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
}

static double
max_nan(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

static int64_t
index_of(Eval *ev, int buf, KVal ix)
{
    if (ix.i < 0 || ix.i >= ev->len[buf])
        efail(ev, "kernel IR: index %lld out of bounds of buffer '%s' (%lld elements)",
              (long long)ix.i, ev->p->bufs[buf].name, (long long)ev->len[buf]);
    return ix.i;
}

static KVal eval(Eval *ev, const KExpr *e);

static KVal
load(Eval *ev, const KExpr *e)
{
    KVal ix = eval(ev, e->a);
    void *m = ev->mem[e->buf];
    KVal r;
    if (e->op == KLOAD_BYTES || e->op == KLOAD_WORD) { /* bytes of a bit buffer, all in bounds */
        int nb = e->op == KLOAD_WORD ? 8 : 1, bits = ktype_bits(ev->p->bufs[e->buf].type);
        if (!bits)
            efail(ev, "kernel IR: a byte load from %s buffer '%s'",
                  ktype_name(ev->p->bufs[e->buf].type), ev->p->bufs[e->buf].name);
        int64_t per = 8 / bits; /* elements in a byte */
        index_of(ev, e->buf,
                 (KVal){.i = ix.i < 0 || ix.i > INT64_MAX / 16 ? -1 : ix.i * per + per * nb - 1});
        uint64_t w = 0;
        for (int q = 0; q < nb; q++) /* little-endian, as the CPU loads it */
            w |= (uint64_t)((const uint8_t *)m)[ix.i + q] << (8 * q);
        r.i = (int64_t)w;
        return r;
    }
    int64_t i = index_of(ev, e->buf, ix);
    switch (ev->p->bufs[e->buf].type) {
    case KT_F32: r.f = ((const float *)m)[i]; break;
    case KT_F64: r.f = ((const double *)m)[i]; break;
    case KT_I64: r.i = ((const int64_t *)m)[i]; break;
    case KT_U8:
    case KT_BOOL: r.i = ((const uint8_t *)m)[i]; break;
    case KT_I8: r.i = ((const int8_t *)m)[i]; break;
    case KT_F16: r.f = rt_f16_to_f32(((const uint16_t *)m)[i]); break;
    case KT_BF16: r.f = rt_bf16_to_f32(((const uint16_t *)m)[i]); break;
    case KT_BIT: r.i = ((const uint8_t *)m)[i / 8] >> (i % 8) & 1; break;
    case KT_BIT2: { /* the pair, sign-extended */
        int pair = ((const uint8_t *)m)[i / 4] >> (2 * (i % 4)) & 3;
        r.i = pair & 2 ? pair - 4 : pair;
        break;
    }
    default: unreachable();
    }
    return r;
}

static KVal
eval_un(Eval *ev, const KExpr *e)
{
    KVal a = eval(ev, e->a), r;
    KType t = e->a->type;
    if (e->op == KU_NOT) {
        r.i = a.i == 0;
        return r;
    }
    if (!is_float(t)) {
        switch ((KUn)e->op) {
        case KU_NEG: r.i = -a.i; return r;
        case KU_ABS: r.i = a.i < 0 ? -a.i : a.i; return r;
        case KU_FLOOR: return a;
        case KU_CTZ: r.i = a.i ? __builtin_ctzll((unsigned long long)a.i) : 64; return r;
        case KU_POPCOUNT: r.i = __builtin_popcountll((unsigned long long)a.i); return r;
        default: efail(ev, "kernel IR: %s of %s", kun_str((KUn)e->op), ktype_name(t));
        }
    }
    bool f32 = t == KT_F32;
    double x = a.f;
    switch ((KUn)e->op) {
    case KU_NEG: r.f = -x; break;
    case KU_EXP: r.f = f32 ? (double)f32_exp((float)x) : exp(x); break;
    case KU_LOG: r.f = f32 ? (double)f32_log((float)x) : log(x); break;
    case KU_SQRT: r.f = rnd(t, sqrt(x)); break;
    case KU_TANH: r.f = f32 ? (double)f32_tanh((float)x) : tanh(x); break;
    case KU_ABS: r.f = fabs(x); break;
    case KU_FLOOR: r.f = floor(x); break;
    case KU_SIGMOID:
        r.f = f32 ? (double)f32_sigmoid((float)x) : 1.0 / (1.0 + exp(-x));
        break;
    case KU_ROUND_F16: r.f = rt_f16_to_f32(rt_f32_to_f16((float)x)); break;
    case KU_ROUND_BF16: r.f = rt_bf16_to_f32(rt_f32_to_bf16((float)x)); break;
    default: unreachable();
    }
    return r;
}

static KVal
eval_bin(Eval *ev, const KExpr *e)
{
    KVal a = eval(ev, e->a), b = eval(ev, e->b), r;
    KType t = e->a->type;
    KBin op = (KBin)e->op;
    if (op == KB_AND || op == KB_OR) {
        r.i = op == KB_AND ? (a.i != 0 && b.i != 0) : (a.i != 0 || b.i != 0);
        return r;
    }
    if (is_float(t)) {
        double x = a.f, y = b.f;
        switch (op) {
        case KB_ADD: r.f = rnd(t, x + y); break;
        case KB_SUB: r.f = rnd(t, x - y); break;
        case KB_MUL: r.f = rnd(t, x * y); break;
        case KB_DIV: r.f = rnd(t, x / y); break;
        case KB_MIN: r.f = min_nan(x, y); break;
        case KB_MAX: r.f = max_nan(x, y); break;
        case KB_POW: r.f = t == KT_F32 ? (double)f32_pow((float)x, (float)y) : pow(x, y); break;
        case KB_LT: r.i = x < y; break;
        case KB_LE: r.i = x <= y; break;
        case KB_GT: r.i = x > y; break;
        case KB_GE: r.i = x >= y; break;
        case KB_EQ: r.i = x == y; break;
        case KB_NE: r.i = x != y; break;
        default: efail(ev, "kernel IR: %s on %s", kbin_str(op), ktype_name(t));
        }
        return r;
    }
    int64_t x = a.i, y = b.i;
    switch (op) {
    case KB_ADD: r.i = (int64_t)((uint64_t)x + (uint64_t)y); break;
    case KB_SUB: r.i = (int64_t)((uint64_t)x - (uint64_t)y); break;
    case KB_MUL: r.i = (int64_t)((uint64_t)x * (uint64_t)y); break;
    case KB_DIV:
    case KB_REM:
        if (y == 0 || (x == INT64_MIN && y == -1))
            efail(ev, "kernel IR: integer division by %lld", (long long)y);
        r.i = op == KB_DIV ? x / y : x % y;
        break;
    case KB_MIN: r.i = x < y ? x : y; break;
    case KB_MAX: r.i = x > y ? x : y; break;
    case KB_BITAND: r.i = x & y; break;
    case KB_BITOR: r.i = x | y; break;
    case KB_SHL:
        if (y < 0 || y > 63) efail(ev, "kernel IR: shift by %lld", (long long)y);
        r.i = (int64_t)((uint64_t)x << y);
        break;
    case KB_LT: r.i = x < y; break;
    case KB_LE: r.i = x <= y; break;
    case KB_GT: r.i = x > y; break;
    case KB_GE: r.i = x >= y; break;
    case KB_EQ: r.i = x == y; break;
    case KB_NE: r.i = x != y; break;
    default: efail(ev, "kernel IR: %s on %s", kbin_str(op), ktype_name(t));
    }
    return r;
}

static KVal
eval_cast(Eval *ev, const KExpr *e)
{
    KVal a = eval(ev, e->a), r;
    KType from = e->a->type, t = e->type;
    if (is_float(from)) {
        double x = a.f;
        switch (t) {
        case KT_F32: r.f = (double)(float)x; return r;
        case KT_F64: r.f = x; return r;
        case KT_BOOL: r.i = x != 0; return r;
        default:
            if (!(x > -9.2e18 && x < 9.2e18))
                efail(ev, "kernel IR: %g does not convert to %s", x, ktype_name(t));
            r.i = (int64_t)x;
            break;
        }
    } else {
        switch (t) {
        case KT_F32: r.f = (double)(float)a.i; return r;
        case KT_F64: r.f = (double)a.i; return r;
        case KT_BOOL: r.i = a.i != 0; return r;
        default: r.i = a.i; break;
        }
    }
    if (t == KT_U8)
        r.i = (uint8_t)r.i;
    else if (t == KT_I8)
        r.i = (int8_t)r.i;
    return r;
}

static KVal
eval(Eval *ev, const KExpr *e)
{
    KVal r;
    switch (e->kind) {
    case KX_CONST:
        if (is_float(e->type))
            r.f = rnd(e->type, e->num);
        else
            r.i = (int64_t)e->num;
        return r;
    case KX_BATCH: r.i = ev->batch; return r;
    case KX_STEP: r.i = ev->step; return r;
    case KX_SAMPLE_BASE: r.i = ev->sample_base; return r;
    case KX_VAR:
        if (ev->tiles[e->var]) {
            /* a one-lane tile reads as its lane (kir.h) */
            if (ev->lanes[e->var] != 1)
                efail(ev, "kernel IR: tile local %d of %d lanes read as a scalar", e->var,
                      ev->lanes[e->var]);
            r.f = ev->tiles[e->var][0]; /* a float tile's lanes hold floats already */
            return r;
        }
        return ev->locals[e->var];
    case KX_LOAD: return load(ev, e);
    case KX_UN: return eval_un(ev, e);
    case KX_BIN: return eval_bin(ev, e);
    case KX_SELECT: return eval(ev, e->a).i ? eval(ev, e->b) : eval(ev, e->c);
    case KX_CAST: return eval_cast(ev, e);
    case KX_UNIFORM: {
        KVal a = eval(ev, e->a), b = eval(ev, e->b);
        r.f = rt_uniform(e->seed, e->stream, (uint32_t)a.i, (uint64_t)b.i);
        return r;
    }
    }
    efail(ev, "kernel IR: expression of kind %d", (int)e->kind);
}

static void exec(Eval *ev, KStmt *const *s, int n);

/* the f64 value of buf[i] (tile statements read f32, f64, f16 and bf16 buffers only) */
static double
load_f64(Eval *ev, int buf, int64_t i)
{
    KVal ix = {.i = i};
    i = index_of(ev, buf, ix);
    switch (ev->p->bufs[buf].type) {
    case KT_F32: return ((const float *)ev->mem[buf])[i];
    case KT_F64: return ((const double *)ev->mem[buf])[i];
    case KT_F16: return rt_f16_to_f32(((const uint16_t *)ev->mem[buf])[i]);
    case KT_BF16: return rt_bf16_to_f32(((const uint16_t *)ev->mem[buf])[i]);
    case KT_U8: return ((const uint8_t *)ev->mem[buf])[i]; /* spikes 0/1 (loads only) */
    case KT_I8: return ((const int8_t *)ev->mem[buf])[i];  /* spikes -1/0/1 */
    default:
        efail(ev, "kernel IR: tile access to %s buffer '%s'", ktype_name(ev->p->bufs[buf].type),
              ev->p->bufs[buf].name);
    }
}

static double *
tile_of(Eval *ev, const KStmt *s)
{
    double *t = ev->tiles[s->var];
    if (!t)
        efail(ev, "kernel IR: local %d is not a tile", s->var);
    return t;
}

/* KS_VSET, KS_VLOAD, KS_VFMA, KS_VSTORE (kir.h), lane by lane in order */
static void
exec_tile(Eval *ev, const KStmt *s)
{
    double *t = tile_of(ev, s);
    int n = ev->lanes[s->var];
    /* a float tile (accumulate f32) holds floats: every value rounded to float, fmaf per term */
    bool is_f32 = ev->k->locals[s->var].type == KT_F32;
    if (s->kind == KS_VSET) {
        double a = eval(ev, s->a).f;
        for (int l = 0; l < n; l++)
            t[l] = is_f32 ? (double)(float)a : a;
        return;
    }
    int64_t base = eval(ev, s->index).i;
    switch (s->kind) {
    case KS_VLOAD:
        for (int l = 0; l < n; l++) {
            double w = load_f64(ev, s->buf, base + l);
            t[l] = is_f32 ? (double)(float)w : w;
        }
        return;
    case KS_VFMA: {
        double a = eval(ev, s->a).f;
        for (int l = 0; l < n; l++) {
            double w = load_f64(ev, s->buf, base + l); /* in bounds whatever a is */
            if (a != 0 || !s->is_sparse || ev->p->adds_zero_terms)
                t[l] = is_f32 ? (double)fmaf((float)a, (float)w, (float)t[l]) : fma(a, w, t[l]);
        }
        return;
    }
    case KS_VSTORE: {
        const KBuf *kb = &ev->p->bufs[s->buf];
        if (kb->kind == KB_INPUT || kb->kind == KB_WEIGHT)
            efail(ev, "kernel IR: store to read-only buffer '%s'", kb->name);
        if (s->stride < 1)
            efail(ev, "kernel IR: tile store with stride %lld", (long long)s->stride);
        for (int l = 0; l < n; l++) {
            KVal ix = {.i = base + l * s->stride};
            int64_t i = index_of(ev, s->buf, ix);
            if (kb->type == KT_F32)
                ((float *)ev->mem[s->buf])[i] = (float)t[l];
            else if (kb->type == KT_F64)
                ((double *)ev->mem[s->buf])[i] = t[l];
            else if (kb->type == KT_F16)
                ((uint16_t *)ev->mem[s->buf])[i] = rt_f32_to_f16((float)t[l]);
            else if (kb->type == KT_BF16)
                ((uint16_t *)ev->mem[s->buf])[i] = rt_f32_to_bf16((float)t[l]);
            else
                efail(ev, "kernel IR: tile store to %s buffer '%s'", ktype_name(kb->type),
                      kb->name);
        }
        return;
    }
    default: unreachable();
    }
}

static void
store(Eval *ev, const KStmt *s)
{
    int64_t i = index_of(ev, s->buf, eval(ev, s->index));
    KVal v = eval(ev, s->a);
    void *m = ev->mem[s->buf];
    switch (ev->p->bufs[s->buf].type) {
    case KT_F32: ((float *)m)[i] = (float)v.f; break;
    case KT_F64: ((double *)m)[i] = v.f; break;
    case KT_I64: ((int64_t *)m)[i] = v.i; break;
    case KT_U8:
    case KT_BOOL: ((uint8_t *)m)[i] = (uint8_t)v.i; break;
    case KT_I8: ((int8_t *)m)[i] = (int8_t)v.i; break;
    case KT_BIT: {
        uint8_t *byte = (uint8_t *)m + i / 8, bit = (uint8_t)(1u << (i % 8));
        *byte = v.i != 0 ? *byte | bit : *byte & (uint8_t)~bit;
        break;
    }
    case KT_BIT2: {
        uint8_t *byte = (uint8_t *)m + i / 4;
        int sh = 2 * (int)(i % 4);
        *byte = (uint8_t)((*byte & ~(3u << sh)) | ((uint64_t)v.i & 3u) << sh);
        break;
    }
    case KT_F16: ((uint16_t *)m)[i] = rt_f32_to_f16((float)v.f); break;
    case KT_BF16: ((uint16_t *)m)[i] = rt_f32_to_bf16((float)v.f); break;
    }
}

static void
exec(Eval *ev, KStmt *const *ss, int n)
{
    for (int k = 0; k < n; k++) {
        const KStmt *s = ss[k];
        switch (s->kind) {
        case KS_FOR: {
            int64_t lo = eval(ev, s->lo).i, hi = eval(ev, s->hi).i;
            if (s == ev->ranged) { /* a block of samples' iterations (kir_by_sample) */
                if (hi != ev->k->sample_iters * ev->batch)
                    efail(ev, "kernel IR: %s runs %lld iterations, not %lld per sample",
                          ev->k->name, (long long)hi, (long long)ev->k->sample_iters);
                lo = ev->range_lo;
                hi = ev->range_hi;
            }
            for (int64_t i = lo; i < hi; i++) {
                ev->locals[s->var].i = i;
                exec(ev, s->body, s->nbody);
            }
            break;
        }
        case KS_ASSIGN:
            if (ev->tiles[s->var])
                efail(ev, "kernel IR: assignment to tile local %d", s->var);
            ev->locals[s->var] = eval(ev, s->a);
            break;
        case KS_STORE:
            if (ev->p->bufs[s->buf].kind == KB_INPUT || ev->p->bufs[s->buf].kind == KB_WEIGHT)
                efail(ev, "kernel IR: store to read-only buffer '%s'", ev->p->bufs[s->buf].name);
            store(ev, s);
            break;
        case KS_IF:
            if (eval(ev, s->a).i)
                exec(ev, s->body, s->nbody);
            else
                exec(ev, s->els, s->nels);
            break;
        case KS_VSET:
        case KS_VLOAD:
        case KS_VFMA:
        case KS_VSTORE: exec_tile(ev, s); break;
        case KS_COUNT: {
            const KBuf *kb = &ev->p->bufs[s->buf];
            if (kb->kind != KB_TEMP || kb->type != KT_I64)
                efail(ev, "kernel IR: count into %s buffer '%s'", ktype_name(kb->type), kb->name);
            ((int64_t *)ev->mem[s->buf])[0] += eval(ev, s->a).i;
            break;
        }
        case KS_PREFETCH:
            index_of(ev, s->buf, eval(ev, s->index));
            break; /* a hint: in bounds */
        }
    }
}

static void
free_kernel_state(Eval *ev, int nlocals)
{
    if (ev->tiles)
        for (int v = 0; v < nlocals; v++)
            free(ev->tiles[v]);
    free(ev->tiles);
    free(ev->lanes);
    free(ev->locals);
    ev->tiles = NULL;
    ev->lanes = NULL;
    ev->locals = NULL;
}

static void
run_kernel(Eval *ev, const Kernel *k)
{
    /* in ev, so that a failure (longjmp) finds and frees them */
    ev->nlocals = k->nlocals;
    ev->k = k;
    ev->locals = calloc((size_t)k->nlocals + 1, sizeof *ev->locals);
    ev->tiles = calloc((size_t)k->nlocals + 1, sizeof *ev->tiles);
    ev->lanes = calloc((size_t)k->nlocals + 1, sizeof *ev->lanes);
    if (!ev->locals || !ev->tiles || !ev->lanes)
        efail(ev, "kernel IR: out of memory");
    for (int v = 0; v < k->nlocals; v++) {
        int n = k->locals[v].lanes;
        if (n <= 0)
            continue;
        if (k->locals[v].type != KT_F64 && k->locals[v].type != KT_F32)
            efail(ev, "kernel IR: tile %s is neither f64 nor f32", k->locals[v].name);
        ev->lanes[v] = n;
        ev->tiles[v] = calloc((size_t)n, sizeof **ev->tiles);
        if (!ev->tiles[v])
            efail(ev, "kernel IR: out of memory");
    }
    exec(ev, k->body, k->nbody);
    free_kernel_state(ev, k->nlocals);
}

const void *
kir_bind_weight(const KProgram *p, int b, void **packed, char *err, size_t errlen)
{
    const KBuf *kb = &p->bufs[b];
    *packed = NULL;
    const Weight *w = kb->io >= 0 && kb->io < p->m->nweights ? &p->m->weights[kb->io] : NULL;
    if (!w || !w->data) {
        snprintf(err, errlen, "weight '%s' is not bound", kb->name);
        return NULL;
    }
    if (w->numel != kb->size.fixed || kb->size.per_batch != 0) {
        snprintf(err, errlen, "weight '%s' has %lld elements, the program wants %lld", kb->name,
                 (long long)w->numel, (long long)kb->size.fixed);
        return NULL;
    }
    bool is_16 = kb->type == KT_F16 || kb->type == KT_BF16;
    if (kb->nperm == 0 && !is_16) return w->data;
    if (kb->nperm != 0 && kb->nperm != w->rank + (kb->split > 0)) {
        snprintf(err, errlen, "weight '%s': a transpose of rank %d for a weight of rank %d",
                 kb->name, kb->nperm, w->rank);
        return NULL;
    }
    if (kb->split && (w->rank < 1 || w->dims[0] % kb->split)) {
        snprintf(err, errlen, "weight '%s': tiles of %lld do not divide its first dimension",
                 kb->name, (long long)kb->split);
        return NULL;
    }
    size_t n = (size_t)(w->numel ? w->numel : 1);
    float *f = rt_big_alloc(n * sizeof *f); /* huge pages where large: bigmem.h */
    if (!f) die("out of memory");
    if (kb->nperm) {
        int64_t dims[IR_MAX_RANK + 1];
        int rank = rt_split_dims(w->rank, w->dims, kb->split, dims);
        rt_transpose_f32(w->data, rank, dims, kb->perm, f);
    }
    else memcpy(f, w->data, (size_t)w->numel * sizeof *f);
    if (!is_16) return *packed = f;
    uint16_t *h = xmalloc(n * sizeof *h);
    rt_narrow16(f, w->numel, kb->type == KT_BF16, h);
    free(f);
    return *packed = h;
}

void
kir_add_spike_counts(const KProgram *p, int64_t batch, void *const *mem, double *spike_counts)
{
    if (!spike_counts)
        return;
    for (int s = 0; s < p->nstats; s++) {
        const KStat *st = &p->stats[s];
        int64_t n = ksize_eval(p->bufs[st->buf].size, batch);
        int64_t sum = rt_count_sum(mem[st->buf], ktype_size(p->bufs[st->buf].type), n);
        spike_counts[st->value] += (double)sum;
    }
}

KBinding *
kir_bind(const KProgram *p, int batch, const float *const *inputs, float *const *outputs,
         char *err, size_t errlen)
{
    return kir_bind_sharing(p, batch, inputs, outputs, NULL, err, errlen);
}

KBinding *
kir_bind_sharing(const KProgram *p, int batch, const float *const *inputs, float *const *outputs,
                 const KBinding *host, char *err, size_t errlen)
{
    KBinding *bd = xcalloc(1, sizeof *bd);
    bd->nbufs = p->nbufs;
    bd->mem = xcalloc((size_t)p->nbufs + 1, sizeof *bd->mem);
    bd->owned = xcalloc((size_t)p->nbufs + 1, sizeof *bd->owned);
    /* the temporaries in one arena, laid out by the memory plan (KBuf.slot) as every binder does */
    size_t *bytes = xmalloc(((size_t)p->nbufs + 1) * sizeof *bytes);
    size_t *off = xmalloc(((size_t)p->nbufs + 1) * sizeof *off);
    int *slot = xmalloc(((size_t)p->nbufs + 1) * sizeof *slot);
    int *span = xmalloc(((size_t)p->nbufs + 1) * sizeof *span);
    for (int b = 0; b < p->nbufs; b++) {
        int64_t n = ksize_eval(p->bufs[b].size, batch);
        bytes[b] = p->bufs[b].kind == KB_TEMP ? (size_t)kbytes(p->bufs[b].type, n ? n : 1)
                                              : SIZE_MAX;
        slot[b] = p->bufs[b].slot;
        span[b] = p->bufs[b].span;
    }
    size_t total = rt_arena_layout(p->nbufs, bytes, slot, span, 64, off);
    free(slot);
    free(span);
    bd->arena_borrowed = host && host->arena && total <= host->arena_bytes;
    /* on huge pages where large (bigmem.h): a training step's arena is 100 MB and more */
    bd->arena = bd->arena_borrowed ? host->arena : rt_big_alloc(total ? total : 1);
    bd->arena_bytes = bd->arena_borrowed ? host->arena_bytes : total;
    bool ok = bd->arena != NULL;
    if (!ok)
        snprintf(err, errlen, "kernel IR: out of memory for the temporaries (%zu bytes)", total);
    /* a buffer said to be stored before it is loaded starts as garbage (0xA5 bytes: NaN-free odd
     * values, so any load before a store changes the results), which is what the compiled backends
     * may leave there, a region shared with other buffers too: the tests catch a false claim and a
     * wrong plan; the others start at zero */
    if (ok) memset(bd->arena, 0xA5, total);
    for (int b = 0; b < p->nbufs && ok; b++)
        if (p->bufs[b].kind == KB_TEMP) {
            bd->mem[b] = bd->arena + off[b];
            if (!p->bufs[b].is_written_first) memset(bd->mem[b], 0, bytes[b]);
        }
    free(bytes);
    free(off);
    for (int b = 0; b < p->nbufs && ok; b++) {
        const KBuf *kb = &p->bufs[b];
        if ((kb->kind == KB_INPUT || kb->kind == KB_OUTPUT) && kb->type != KT_F32) {
            snprintf(err, errlen, "kernel IR: caller buffer '%s' is not f32", kb->name);
            ok = false;
            break;
        }
        bool is_in = kb->kind == KB_INPUT;
        if (is_in || kb->kind == KB_OUTPUT) {
            int nio = is_in ? p->m->ninputs : p->m->noutputs;
            const void *const *io = is_in ? (const void *const *)inputs : (const void *const *)outputs;
            if (kb->io < 0 || kb->io >= nio || !io || !io[kb->io]) {
                snprintf(err, errlen, "kernel IR: buffer '%s': no %s %d", kb->name,
                         is_in ? "input" : "output", kb->io);
                ok = false;
                break;
            }
            bd->mem[b] = (void *)io[kb->io];
        } else if (kb->kind == KB_WEIGHT) {
            char msg[256];
            void *packed;
            bd->mem[b] = (void *)kir_bind_weight(p, b, &packed, msg, sizeof msg);
            bd->owned[b] = packed != NULL;
            if (!bd->mem[b]) {
                snprintf(err, errlen, "kernel IR: %s", msg);
                ok = false;
            }
        }
    }
    if (!ok) {
        kir_unbind(bd);
        return NULL;
    }
    return bd;
}

void
kir_zero_temps(const KProgram *p, KBinding *bd, int batch)
{
    for (int b = 0; b < p->nbufs; b++) {
        const KBuf *kb = &p->bufs[b];
        if (kb->kind == KB_TEMP && !kb->is_written_first)
            memset(bd->mem[b], 0, (size_t)kbytes(kb->type, ksize_eval(kb->size, batch)));
    }
}

void
kir_unbind(KBinding *bd)
{
    if (!bd) return;
    for (int b = 0; b < bd->nbufs; b++)
        if (bd->owned[b]) free(bd->mem[b]);
    if (!bd->arena_borrowed) free(bd->arena);
    free(bd->mem);
    free(bd->owned);
    free(bd);
}

size_t
kir_share_weights(const KProgram *p, KBinding *bd, const KProgram *from, const KBinding *fbd)
{
    size_t freed = 0;
    for (int b = 0; b < p->nbufs; b++) {
        const KBuf *kb = &p->bufs[b];
        if (kb->kind != KB_WEIGHT || !bd->owned[b]) continue;
        for (int f = 0; f < from->nbufs; f++) {
            const KBuf *o = &from->bufs[f];
            bool same = o->kind == KB_WEIGHT && fbd->owned[f] && o->io == kb->io &&
                        o->type == kb->type && o->nperm == kb->nperm && o->split == kb->split &&
                        o->size.fixed == kb->size.fixed && o->size.per_batch == kb->size.per_batch;
            for (int d = 0; same && d < kb->nperm; d++)
                same = o->perm[d] == kb->perm[d];
            if (!same) continue;
            freed += (size_t)kbytes(kb->type, kb->size.fixed);
            free(bd->mem[b]);
            bd->mem[b] = fbd->mem[f];
            bd->owned[b] = false;
            break;
        }
    }
    return freed;
}

/* a packed weight transposed in slices of its outermost dimension (perm[0] == 0): slice i of src
 * becomes slice i of dst */
typedef struct Repack {
    const float *src;
    float *dst;
    int rank; /* of a slice */
    const int64_t *dims;
    int perm[IR_MAX_RANK + 1];
    int64_t inner; /* elements a slice */
} Repack;

/* SnnkChunkFn over [lo, hi) in SNNK_CHUNK_ALIGN parts of a slice (the pool cuts at multiples of
 * that, so a weight of few slices still feeds every thread) */
static void
repack_chunk(void **bufs, int64_t batch, int64_t step, int64_t sample_base, int64_t lo, int64_t hi)
{
    (void)batch, (void)step, (void)sample_base;
    const Repack *r = bufs[0];
    for (int64_t i = lo / SNNK_CHUNK_ALIGN; i < hi / SNNK_CHUNK_ALIGN; i++)
        rt_transpose_f32(r->src + i * r->inner, r->rank, r->dims, r->perm, r->dst + i * r->inner);
}

bool
kir_rebind_weights(const KProgram *p, KBinding *bd, struct SnnkRt *rt, char *err, size_t errlen)
{
    for (int b = 0; b < p->nbufs; b++) {
        const KBuf *kb = &p->bufs[b];
        if (kb->kind != KB_WEIGHT || !bd->owned[b])
            continue; /* the module's own data (unpacked f32) is bound as it is */
        const Weight *w = &p->m->weights[kb->io];
        if (kb->type == KT_F32 && kb->nperm && w->data) {
            /* packed again where it is (no allocation: a fresh copy of a large weight is fresh
             * pages every step) */
            int64_t dims[IR_MAX_RANK + 1];
            int rank = rt_split_dims(w->rank, w->dims, kb->split, dims);
            if (!rt || rank < 2 || kb->perm[0] != 0 || dims[0] < 2 || w->numel < 65536) {
                rt_transpose_f32(w->data, rank, dims, kb->perm, bd->mem[b]);
                continue;
            }
            Repack r = {w->data, bd->mem[b], rank - 1, dims + 1, {0}, w->numel / dims[0]};
            for (int d = 1; d < rank; d++)
                r.perm[d - 1] = kb->perm[d] - 1;
            void *job[1] = {&r};
            rt->parallel_for(rt, repack_chunk, job, 0, 0, 0, 0, dims[0] * SNNK_CHUNK_ALIGN);
            continue;
        }
        void *packed;
        const void *m = kir_bind_weight(p, b, &packed, err, errlen);
        if (!m)
            return false;
        free(bd->mem[b]);
        bd->mem[b] = packed;
    }
    return true;
}

bool
kir_eval(const KProgram *p, int batch, int64_t sample_base, const float *const *inputs,
         float *const *outputs, double *spike_counts, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (batch <= 0 || p->timesteps <= 0)
        return true;
    char msg[256] = "";
    KBinding *bd = kir_bind(p, batch, inputs, outputs, msg, sizeof msg);
    if (!bd) {
        if (err && errlen) snprintf(err, errlen, "%s", msg);
        return false;
    }
    bool ok = kir_eval_bound(p, bd, batch, sample_base, 0, p->nkernels, spike_counts, err, errlen);
    kir_unbind(bd);
    return ok;
}

bool
kir_eval_bound(const KProgram *p, KBinding *bd, int batch, int64_t sample_base, int first,
               int end, double *spike_counts, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    if (batch <= 0 || p->timesteps <= 0)
        return true;
    /* on the heap: what changes between setjmp and longjmp must not live in this frame */
    Eval *ev = xcalloc(1, sizeof *ev);
    ev->p = p;
    ev->batch = batch;
    ev->sample_base = sample_base;
    ev->err = err;
    ev->errlen = errlen;
    ev->mem = bd->mem;
    ev->len = xcalloc((size_t)p->nbufs + 1, sizeof *ev->len);
    for (int b = 0; b < p->nbufs; b++)
        ev->len[b] = ksize_eval(p->bufs[b].size, batch);
    bool ok = true;
    if (setjmp(ev->fail) == 0) {
        for (int i = first; i < end;) {
            if (!p->kernels[i].is_step) {
                ev->step = 0;
                run_kernel(ev, &p->kernels[i++]);
                continue;
            }
            int j = i;
            while (j < end && p->kernels[j].is_step)
                j++;
            if (kir_by_sample(p, i, j)) {
                /* each sample through every step, the last sample first: a kernel that read
                 * another sample's elements would find them not yet computed (garbage) */
                for (int64_t b = batch - 1; b >= 0; b--)
                    for (ev->step = 0; ev->step < p->timesteps; ev->step++)
                        for (int k = i; k < j; k++) {
                            const Kernel *kk = &p->kernels[k];
                            ev->ranged = kk->body[0];
                            ev->range_lo = b * kk->sample_iters;
                            ev->range_hi = (b + 1) * kk->sample_iters;
                            run_kernel(ev, kk);
                            ev->ranged = NULL;
                        }
            } else {
                for (ev->step = 0; ev->step < p->timesteps; ev->step++)
                    for (int k = i; k < j; k++)
                        run_kernel(ev, &p->kernels[k]);
            }
            i = j;
        }
        kir_add_spike_counts(p, batch, ev->mem, spike_counts);
    } else {
        ok = false;
        free_kernel_state(ev, ev->nlocals);
    }
    free(ev->len);
    free(ev);
    return ok;
}
