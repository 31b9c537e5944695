/* model_parts.c: a model's description text parsed and checked (rt_model_parse), and models made
 * from parts in memory (rt_model_create, for snnc). Every index a session uses later is checked
 * here. Format, one record per line, fields separated by single spaces (names never hold spaces):
 *   snnc-model ABI                     first line; ABI = SNNK_ABI_VERSION
 *   name NAME / timesteps T / devices LIST / kernels NSTATIC NSTEP
 *   input NAME PER_STEP RANK DIMS...   output NAME PER_STEP RANK DIMS...   weight NAME RANK DIMS...
 *   layer NAME BUF                     a counted spiking layer and its i64 spike-count buffer
 *   buf NAME KIND TYPE PER_BATCH FIXED IO NPERM PERM... ZERO SLOT   buffer i of the program, in
 *                                      order; ZERO 0: every element is stored before it is loaded;
 *                                      1: zeroed before every run; 2 (cuda_buf only): a spike
 *                                      count that accumulates across runs; 3 (16-bit weights
 *                                      only): stored narrower because every value was exact
 *                                      there, so loaded values must be too; SLOT (temporaries) 0:
 *                                      memory of its own, k > 0: the arena region it shares with
 *                                      the other buffers of slot k; SPAN (optional, 1): the
 *                                      regions it covers from there (runtime/layout.h)
 *   cuda_layer NAME BUF   cuda_buf ...  as layer and buf, for the CUDA program (its own buffers)
 *   cuda_kernel I SYMBOL STEP MODE NB B0 ... WORK...   cuda_image FORMAT ARCH OFFSET SIZE
 *                                      CUDA code (runtime/cuda_abi.h), optional
 *   train_buf ... / train_layer ...    as buf and layer, for the training step's program
 *                                      (optional: a library built with --train)
 *   train_out_grad K BUF               the train_buf that takes output K's loss gradient
 *   train_weight_grad W BUF            the train_buf that holds weight W's gradient (-1: none)
 *   train_input_grad K BUF             the train_buf that holds input K's gradient after
 *                                      snnk_train_bwd_in (-1: none flows; no records: the
 *                                      library computes no input gradients)
 *   train_bn MEAN VAR RMEAN RVAR C INNER   a batchnorm's statistics (train_bufs) and the weights
 *                                      keeping its running ones
 *   end                                the last line
 * LIST names device kinds (cpu, cuda); what the model carries decides what it runs on: CPU code
 * (an entry point) and CUDA code (cuda_kernel records for every kernel, and images). Nothing here
 * prints or exits. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model_parts.h"
#include "runtime/tensor_io.h"

/* ---- WORK: RPN ---- */

/* WORK := token (' ' token)*, token := digits | 'B' | '+' | '-' | '*' | '/' | '%' */
bool
rt_cuda_work_parse(const char *text, size_t len, RtCudaWork *w, char *err, size_t errlen)
{
    w->toks = NULL;
    w->ntoks = 0;
    int ntoks = 0, depth = 0;
    for (size_t i = 0; i < len; i++)
        if (text[i] != ' ' && (i == 0 || text[i - 1] == ' ')) ntoks++;
    if (ntoks == 0) {
        snprintf(err, errlen, "WORK is empty");
        return false;
    }
    w->toks = calloc((size_t)ntoks, sizeof *w->toks);
    if (!w->toks) {
        snprintf(err, errlen, "out of memory reading WORK");
        return false;
    }
    static const char ops[] = "+-*/%";
    size_t i = 0;
    while (i < len) {
        if (text[i] == ' ') {
            i++;
            continue;
        }
        size_t k = i;
        while (k < len && text[k] != ' ')
            k++;
        RtWorkTok *t = &w->toks[w->ntoks++];
        int tlen = (int)(k - i);
        if (tlen == 1 && text[i] == 'B') {
            t->op = RT_WORK_B;
            depth++;
        } else if ((tlen == 1 && strchr(ops, text[i])) ||
                   (tlen == 2 && text[i] == '>' && text[i + 1] == '=')) {
            t->op = tlen == 2 ? RT_WORK_GE : (RtWorkOp)(RT_WORK_ADD + (strchr(ops, text[i]) - ops));
            if (depth < 2) {
                snprintf(err, errlen, "WORK '%.*s': '%.*s' has %s", (int)len, text, tlen, text + i,
                         depth ? "one operand" : "no operands");
                rt_cuda_work_free(w);
                return false;
            }
            depth--;
        } else {
            int64_t v = 0;
            bool is_num = tlen <= 18;
            for (size_t d = i; d < k && is_num; d++) {
                is_num = text[d] >= '0' && text[d] <= '9';
                v = v * 10 + (text[d] - '0');
            }
            if (!is_num) {
                snprintf(err, errlen, "WORK '%.*s': '%.*s' is not a number (0 to 10^18), B or an "
                                      "operator", (int)len, text, tlen, text + i);
                rt_cuda_work_free(w);
                return false;
            }
            t->op = RT_WORK_NUM;
            t->num = v;
            depth++;
        }
        if (depth > RT_WORK_MAX_DEPTH) {
            snprintf(err, errlen, "WORK '%.*s' nests deeper than %d", (int)len, text,
                     RT_WORK_MAX_DEPTH);
            rt_cuda_work_free(w);
            return false;
        }
        i = k;
    }
    if (depth != 1) {
        snprintf(err, errlen, "WORK '%.*s' leaves %d values (an operator is missing)", (int)len,
                 text, depth);
        rt_cuda_work_free(w);
        return false;
    }
    return true;
}

bool
rt_cuda_work_eval(const RtCudaWork *w, int64_t batch, int64_t *out, char *err, size_t errlen)
{
    int64_t stack[RT_WORK_MAX_DEPTH];
    int n = 0;
    for (int i = 0; i < w->ntoks; i++) {
        const RtWorkTok *t = &w->toks[i];
        if (t->op == RT_WORK_NUM || t->op == RT_WORK_B) {
            stack[n++] = t->op == RT_WORK_B ? batch : t->num;
            continue;
        }
        int64_t a = stack[n - 2], b = stack[n - 1], r = 0;
        bool is_bad = false;
        switch (t->op) {
        case RT_WORK_ADD: is_bad = __builtin_add_overflow(a, b, &r); break;
        case RT_WORK_SUB: is_bad = __builtin_sub_overflow(a, b, &r); break;
        case RT_WORK_MUL: is_bad = __builtin_mul_overflow(a, b, &r); break;
        case RT_WORK_DIV:
        case RT_WORK_REM:
            if (b == 0) {
                snprintf(err, errlen, "WORK divides by zero at B = %lld", (long long)batch);
                return false;
            }
            is_bad = a == INT64_MIN && b == -1;
            if (!is_bad) r = t->op == RT_WORK_DIV ? a / b : a % b;
            break;
        case RT_WORK_GE:
            r = a >= b;
            break;
        case RT_WORK_NUM:
        case RT_WORK_B: break;
        }
        if (is_bad) {
            snprintf(err, errlen, "WORK overflows at B = %lld", (long long)batch);
            return false;
        }
        stack[n - 2] = r;
        n--;
    }
    if (stack[0] < 0) {
        snprintf(err, errlen, "WORK is negative (%lld) at B = %lld", (long long)stack[0],
                 (long long)batch);
        return false;
    }
    *out = stack[0];
    return true;
}

void
rt_cuda_work_free(RtCudaWork *w)
{
    free(w->toks);
    w->toks = NULL;
    w->ntoks = 0;
}

/* ---- the description ---- */

typedef struct Parser {
    const char *p;
    int line;
    bool is_bad;
    char why[256]; /* what is wrong, when more can be said than the line */
} Parser;

static void
bad(Parser *ps, const char *fmt, ...)
{
    if (ps->why[0]) return; /* the first reason is the one to report */
    ps->is_bad = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->why, sizeof ps->why, fmt, ap);
    va_end(ap);
}

/* the next space-separated word of the current line into buf (empty at the end of the line) */
static void
word(Parser *ps, char *buf, size_t n)
{
    size_t k = 0;
    while (*ps->p == ' ')
        ps->p++;
    while (*ps->p && *ps->p != ' ' && *ps->p != '\n') {
        if (k + 1 < n) buf[k++] = *ps->p;
        else ps->is_bad = true;
        ps->p++;
    }
    buf[k] = 0;
}

static int64_t
number(Parser *ps)
{
    char buf[32], *end;
    word(ps, buf, sizeof buf);
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (!buf[0] || *end || errno) ps->is_bad = true;
    return v;
}

static void
end_line(Parser *ps)
{
    while (*ps->p == ' ')
        ps->p++;
    if (*ps->p && *ps->p != '\n') ps->is_bad = true;
    while (*ps->p && *ps->p != '\n')
        ps->p++;
    if (*ps->p == '\n') ps->p++;
    ps->line++;
}

static void
parse_tensor(Parser *ps, RtModelTensor *t, bool has_step)
{
    word(ps, t->name, sizeof t->name);
    t->info.name = t->name;
    t->info.dtype = SNN_F32;
    t->info.per_step = has_step ? (int)number(ps) : 0;
    t->info.rank = (int)number(ps);
    if (t->info.rank < 0 || t->info.rank > SNN_MAX_RANK) {
        ps->is_bad = true;
        return;
    }
    t->info.numel = 1;
    for (int d = 0; d < t->info.rank; d++) {
        int64_t n = number(ps);
        /* no tensor a runtime could hold is larger (and the product cannot overflow) */
        if (n < 0 || n > RT_MAX_NUMEL || (n > 0 && t->info.numel > RT_MAX_NUMEL / n)) {
            ps->is_bad = true;
            return;
        }
        t->info.dims[d] = n;
        t->info.numel *= n;
    }
}

static const struct {
    const char *name;
    size_t size;
    int bits;
} elem_types[] = {
#define ELEM(id, name, bytes, bits, value) [RT_ELEM_##id] = {name, bytes, bits},
#include "runtime/elem_types.def"
#undef ELEM
};

size_t
rt_buf_bytes(const RtBuf *b, int64_t batch)
{
    size_t n = (size_t)(b->per_batch * batch + b->fixed);
    size_t bits = (size_t)elem_types[b->type].bits;
    return bits ? (n * bits + 7) / 8 : n * b->elem;
}

static void
parse_buf(Parser *ps, RtBuf *b)
{
    static const char *const kinds[] = {"input", "output", "weight", "temp"};
    char kind[16], type[16];
    word(ps, b->name, sizeof b->name);
    word(ps, kind, sizeof kind);
    word(ps, type, sizeof type);
    b->kind = (RtBufKind)-1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(kind, kinds[i])) b->kind = (RtBufKind)i;
    b->elem = 0;
    for (size_t i = 0; i < sizeof elem_types / sizeof elem_types[0]; i++)
        if (!strcmp(type, elem_types[i].name)) {
            b->type = (RtElem)i;
            b->elem = elem_types[i].size;
        }
    b->per_batch = number(ps);
    b->fixed = number(ps);
    b->io = (int)number(ps);
    b->nperm = (int)number(ps);
    b->split = number(ps);
    if ((int)b->kind < 0 || !b->elem || b->per_batch < 0 || b->fixed < 0 ||
        b->per_batch > RT_MAX_NUMEL || b->fixed > RT_MAX_NUMEL || b->nperm < 0 ||
        b->nperm > SNN_MAX_RANK || b->split < 0 || b->split > RT_MAX_NUMEL) {
        ps->is_bad = true;
        return;
    }
    for (int d = 0; d < b->nperm; d++)
        b->perm[d] = (int)number(ps);
    int64_t zero = number(ps), slot = number(ps), span = 1;
    while (*ps->p == ' ')
        ps->p++;
    if (*ps->p && *ps->p != '\n') span = number(ps); /* optional: 1 */
    bool is_16 = b->type == RT_ELEM_F16 || b->type == RT_ELEM_BF16;
    if (zero < 0 || zero > 3 || slot < 0 || slot > RT_MAX_SLOT || span < 1 ||
        span > RT_MAX_SLOT - slot || (zero == 3 && (b->kind != RT_BUF_WEIGHT || !is_16)))
        ps->is_bad = true;
    b->needs_zero = zero == 1;
    b->is_accumulator = zero == 2;
    b->is_exact = zero == 3;
    b->slot = (int)slot;
    b->span = (int)span;
}

static bool
is_identifier(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
    for (s++; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

/* cuda_kernel I SYMBOL STEP MODE NB B0 ... B(NB-1) WORK... (the rest of the line) */
static void
parse_cuda_kernel(Parser *ps, snn_model *m)
{
    int64_t i = number(ps);
    if (ps->is_bad || i < 0 || i >= m->ncuda_kernels) {
        bad(ps, "cuda_kernel: the kernel index is not in 0..%d", m->ncuda_kernels - 1);
        return;
    }
    RtCudaKernel *k = &m->cuda_kernels[i];
    if (k->symbol[0]) {
        bad(ps, "cuda_kernel: kernel %lld is described twice", (long long)i);
        return;
    }
    char mode[16];
    word(ps, k->symbol, sizeof k->symbol);
    if (ps->is_bad || !is_identifier(k->symbol)) {
        bad(ps, "cuda_kernel %lld: the symbol is not a C identifier", (long long)i);
        k->symbol[0] = '?'; /* described, for the check above */
        return;
    }
    int64_t step = number(ps);
    word(ps, mode, sizeof mode);
    int64_t nb = number(ps);
    bool is_mode = !strcmp(mode, "grid") || !strcmp(mode, "single");
    if (ps->is_bad || (step != 0 && step != 1) || !is_mode || nb < 0 || nb > m->ncuda_bufs) {
        bad(ps, "cuda_kernel %lld: expected STEP (0 or 1), MODE (grid or single) and NB (0..%d)",
            (long long)i, m->ncuda_bufs);
        return;
    }
    k->is_step = step == 1;
    k->is_single = !strcmp(mode, "single");
    k->bufs = calloc((size_t)nb + 1, sizeof *k->bufs);
    if (!k->bufs) {
        bad(ps, "out of memory reading the model description");
        return;
    }
    for (int j = 0; j < nb; j++) {
        int64_t b = number(ps);
        if (ps->is_bad || b < 0 || b >= m->ncuda_bufs || (j && b <= k->bufs[j - 1])) {
            bad(ps, "cuda_kernel %lld: buffer parameter %d is not an increasing cuda_buf index "
                    "in 0..%d", (long long)i, j, m->ncuda_bufs - 1);
            return;
        }
        k->bufs[k->nbufs++] = (int)b;
    }
    while (*ps->p == ' ')
        ps->p++;
    const char *end = strchr(ps->p, '\n');
    size_t len = end ? (size_t)(end - ps->p) : strlen(ps->p);
    char why[200];
    if (!rt_cuda_work_parse(ps->p, len, &k->work, why, sizeof why)) {
        bad(ps, "cuda_kernel %lld: %s", (long long)i, why);
        return;
    }
    ps->p += len;
}

/* cuda_image FORMAT ARCH OFFSET SIZE */
static void
parse_cuda_image(Parser *ps, RtCudaImage *im, size_t image_size)
{
    char format[16];
    word(ps, format, sizeof format);
    word(ps, im->arch, sizeof im->arch);
    int64_t off = number(ps), size = number(ps);
    if (ps->is_bad || (strcmp(format, "cubin") && strcmp(format, "ptx"))) {
        bad(ps, "cuda_image: expected FORMAT (cubin or ptx), ARCH, OFFSET and SIZE");
        return;
    }
    im->is_cubin = !strcmp(format, "cubin");
    const char *prefix = im->is_cubin ? "sm_" : "compute_";
    size_t np = strlen(prefix);
    const char *digits = im->arch + np;
    bool is_arch = !strncmp(im->arch, prefix, np) && strlen(digits) >= 2 && strlen(digits) <= 4;
    for (const char *c = digits; is_arch && *c; c++)
        is_arch = (*c >= '0' && *c <= '9') || (c > digits + 1 && *c >= 'a' && *c <= 'z');
    if (!is_arch) {
        bad(ps, "cuda_image: a %s image's ARCH must be %sNN, not '%s'", format, prefix, im->arch);
        return;
    }
    im->cc = (int)strtol(digits, NULL, 10); /* sm_90a: 90 */
    if (off < 0 || size <= 0 || (uint64_t)off > image_size || (uint64_t)size > image_size - off) {
        bad(ps, "cuda_image %s: bytes [%lld, %lld + %lld) are not within the %zu bytes of the "
                "model's CUDA images", im->arch, (long long)off, (long long)off, (long long)size,
            image_size);
        return;
    }
    im->offset = (uint64_t)off;
    im->size = (uint64_t)size;
}

/* the count of lines starting with `key ` */
static int
count_records(const char *text, const char *key)
{
    int n = 0;
    size_t k = strlen(key);
    for (const char *p = text; *p;) {
        if (!strncmp(p, key, k) && p[k] == ' ') n++;
        p = strchr(p, '\n');
        if (!p) break;
        p++;
    }
    return n;
}

/* The checks that make every later index of a program (the CPU's buf/layer records, or CUDA's
 * cuda_buf/cuda_layer) safe: io indices, element types, weight sizes and transposes, count
 * buffers. */
static bool
program_check(const snn_model *m, const RtBuf *bufs, int nbufs, const RtLayer *layers,
              int nlayers)
{
    for (int i = 0; i < nbufs; i++) {
        const RtBuf *b = &bufs[i];
        int limit = b->kind == RT_BUF_INPUT    ? m->ninputs
                    : b->kind == RT_BUF_OUTPUT ? m->noutputs
                    : b->kind == RT_BUF_WEIGHT ? m->nweights
                                               : 1;
        if (b->kind != RT_BUF_TEMP && (b->io < 0 || b->io >= limit)) return false;
        /* 16-bit elements: weights and layer outputs (temporaries) stored narrower */
        bool is_16 = b->type == RT_ELEM_F16 || b->type == RT_ELEM_BF16;
        if (b->kind != RT_BUF_TEMP && b->type != RT_ELEM_F32 && !(is_16 && b->kind == RT_BUF_WEIGHT))
            return false;
        bool is_bits = b->type == RT_ELEM_BIT || b->type == RT_ELEM_BIT2;
        if (is_bits && (b->kind != RT_BUF_TEMP || bufs == m->cuda_bufs))
            return false; /* spikes as bits: CPU temporaries only */
        if (b->kind == RT_BUF_WEIGHT) {
            const snn_tensor_info *w = &m->weights[b->io].info;
            if (b->per_batch != 0 || b->fixed != w->numel) return false;
            if (b->split && (!b->nperm || !w->rank || w->dims[0] % b->split)) return false;
            if (b->nperm && b->nperm != w->rank + (b->split > 0)) return false;
            unsigned seen = 0;
            for (int d = 0; d < b->nperm; d++) {
                if (b->perm[d] < 0 || b->perm[d] >= b->nperm || (seen >> b->perm[d] & 1))
                    return false;
                seen |= 1u << b->perm[d];
            }
        }
    }
    for (int i = 0; i < nlayers; i++) {
        int b = layers[i].buf;
        /* spike counters: int64, or bytes where a run's count fits one (never accumulating) */
        if (b < 0 || b >= nbufs || bufs[b].kind != RT_BUF_TEMP ||
            !(bufs[b].type == RT_ELEM_I64 || (bufs[b].type == RT_ELEM_U8 && !bufs[b].is_accumulator)))
            return false;
    }
    /* accumulators are spike counts of a CUDA program (those of the CUDA records, or of the
     * program a model made for CUDA alone describes), and the CUDA records' counts all are */
    bool is_cuda = bufs == m->cuda_bufs;
    for (int i = 0; i < nbufs; i++) {
        bool is_layer = false;
        for (int l = 0; l < nlayers; l++)
            is_layer |= layers[l].buf == i;
        if (bufs[i].is_accumulator && (!is_layer || (!is_cuda && m->entry))) return false;
        if (is_cuda && is_layer && !bufs[i].is_accumulator) return false;
    }
    return true;
}

/* The CUDA records against the rest: a program whose buffers pass the CPU program's checks, the
 * model's layers in order, every kernel of its schedule described once, images; inputs and
 * outputs the size of the caller's arrays (the runtime copies exactly that many bytes). */
static bool
cuda_check(const snn_model *m, char *why, size_t n)
{
    if (!m->ncuda_kernels && !m->ncuda_images && !m->ncuda_bufs && !m->ncuda_layers) return true;
    if (!m->ncuda_kernels) {
        snprintf(why, n, "it has CUDA records but no cuda_kernel");
        return false;
    }
    if (!m->ncuda_images) {
        snprintf(why, n, "it has cuda_kernel records but no cuda_image");
        return false;
    }
    if (m->ncuda_layers != m->nlayers) {
        snprintf(why, n, "it has %d cuda_layer records for %d layers", m->ncuda_layers,
                 m->nlayers);
        return false;
    }
    /* the kernels are all there: as many records as indices, each index once */
    if (!program_check(m, m->cuda_bufs, m->ncuda_bufs, m->cuda_layers, m->ncuda_layers)) {
        snprintf(why, n, "its cuda_buf or cuda_layer records do not fit its inputs, outputs, "
                         "weights or counted layers");
        return false;
    }
    for (int l = 0; l < m->nlayers; l++)
        if (strcmp(m->cuda_layers[l].name, m->layers[l].name)) {
            snprintf(why, n, "cuda_layer %d is '%.100s', layer %d '%.100s'", l,
                     m->cuda_layers[l].name, l, m->layers[l].name);
            return false;
        }
    for (int i = 0; i < m->ncuda_bufs; i++) {
        const RtBuf *b = &m->cuda_bufs[i];
        const RtModelTensor *t = b->kind == RT_BUF_INPUT    ? &m->inputs[b->io]
                                 : b->kind == RT_BUF_OUTPUT ? &m->outputs[b->io]
                                                            : NULL;
        if (t && (b->per_batch != t->info.numel || b->fixed != 0)) {
            snprintf(why, n, "cuda_buf '%.100s' is not the size of %s '%.100s'", b->name,
                     b->kind == RT_BUF_INPUT ? "input" : "output", t->name);
            return false;
        }
    }
    return true;
}

/* LIST of the devices line: known kinds only. It says what the compiler meant to build; what the
 * model carries decides where it runs (a description for snnc's --device cuda says cpu and comes
 * without CPU code). */
static bool
devices_check(const char *list, char *why, size_t n)
{
    char copy[64];
    snprintf(copy, sizeof copy, "%s", list);
    char *save = NULL;
    for (char *d = strtok_r(copy, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
        if (strcmp(d, "cpu") && strcmp(d, "cuda")) {
            snprintf(why, n, "its devices line names an unknown device '%s'", d);
            return false;
        }
    }
    return true;
}

/* The training records, where there are any: their buffers a program of their own whose every
 * index is checked, every output's gradient buffer and every weight's given, the batchnorm
 * records' buffers f32 [C] and f64 [C], their weights [C] */
static bool
train_check(const snn_model *m, char *why, size_t n)
{
    if (!m->ntrain_bufs) return m->ntrain_bn == 0;
    if (!program_check(m, m->train_bufs, m->ntrain_bufs, NULL, 0)) {
        snprintf(why, n, "its train_buf records do not fit its inputs, outputs and weights");
        return false;
    }
    for (int k = 0; k < m->noutputs; k++)
        if (m->train_out_grad[k] < 0 || m->train_bufs[m->train_out_grad[k]].type != RT_ELEM_F32) {
            snprintf(why, n, "output %d has no f32 train_out_grad buffer", k);
            return false;
        }
    for (int w = 0; w < m->nweights; w++) {
        int b = m->train_weight_grad[w];
        if (b == -2 ||
            (b >= 0 && (m->train_bufs[b].type != RT_ELEM_F32 || m->train_bufs[b].per_batch != 0 ||
                        m->train_bufs[b].fixed != m->weights[w].info.numel))) {
            snprintf(why, n, "weight %d has no train_weight_grad record of its size", w);
            return false;
        }
    }
    /* input gradients: a record for every input or none, each buffer f32 of the input's size */
    int nin = 0;
    for (int k = 0; k < m->ninputs; k++)
        nin += m->train_input_grad[k] != -2;
    for (int k = 0; nin && k < m->ninputs; k++) {
        int b = m->train_input_grad[k];
        if (b == -2 ||
            (b >= 0 && (m->train_bufs[b].type != RT_ELEM_F32 || m->train_bufs[b].fixed != 0 ||
                        m->train_bufs[b].per_batch != m->inputs[k].info.numel))) {
            snprintf(why, n, "input %d has no train_input_grad record of its size", k);
            return false;
        }
    }
    for (int i = 0; i < m->ntrain_bn; i++) {
        const RtTrainBn *bn = &m->train_bn[i];
        bool ok = bn->mean >= 0 && bn->mean < m->ntrain_bufs && bn->var >= 0 &&
                  bn->var < m->ntrain_bufs && bn->running_mean >= 0 &&
                  bn->running_mean < m->nweights && bn->running_var >= 0 &&
                  bn->running_var < m->nweights && bn->C > 0 && bn->inner >= 0;
        ok = ok && m->train_bufs[bn->mean].type == RT_ELEM_F32 &&
             m->train_bufs[bn->mean].fixed == bn->C && m->train_bufs[bn->var].type == RT_ELEM_F64 &&
             m->train_bufs[bn->var].fixed == bn->C &&
             m->weights[bn->running_mean].info.numel == bn->C &&
             m->weights[bn->running_var].info.numel == bn->C;
        if (!ok) {
            snprintf(why, n, "its train_bn record %d does not fit", i);
            return false;
        }
    }
    return true;
}

void
rt_model_clear(snn_model *m)
{
    for (int i = 0; m->cuda_kernels && i < m->ncuda_kernels; i++) {
        free(m->cuda_kernels[i].bufs);
        rt_cuda_work_free(&m->cuda_kernels[i].work);
    }
    free(m->cuda_kernels);
    free(m->cuda_images);
    free(m->cuda_bufs);
    free(m->cuda_layers);
    free(m->inputs);
    free(m->outputs);
    free(m->weights);
    free(m->layers);
    free(m->bufs);
    free(m->train_bufs);
    free(m->train_out_grad);
    free(m->train_weight_grad);
    free(m->train_input_grad);
    free(m->train_bn);
    memset(m, 0, sizeof *m);
}

bool
rt_model_parse(snn_model *m, const char *text, SnnkEntryFn entry, const void *weights,
               size_t weights_size, const void *images, size_t images_size, char *err,
               size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->ninputs = count_records(text, "input");
    m->noutputs = count_records(text, "output");
    m->nweights = count_records(text, "weight");
    m->nlayers = count_records(text, "layer");
    m->nbufs = count_records(text, "buf");
    m->ncuda_bufs = count_records(text, "cuda_buf");
    m->ncuda_layers = count_records(text, "cuda_layer");
    m->ncuda_kernels = count_records(text, "cuda_kernel");
    m->ncuda_images = count_records(text, "cuda_image");
    m->inputs = calloc((size_t)m->ninputs + 1, sizeof *m->inputs);
    m->outputs = calloc((size_t)m->noutputs + 1, sizeof *m->outputs);
    m->weights = calloc((size_t)m->nweights + 1, sizeof *m->weights);
    m->layers = calloc((size_t)m->nlayers + 1, sizeof *m->layers);
    m->bufs = calloc((size_t)m->nbufs + 1, sizeof *m->bufs);
    m->cuda_kernels = calloc((size_t)m->ncuda_kernels + 1, sizeof *m->cuda_kernels);
    m->cuda_images = calloc((size_t)m->ncuda_images + 1, sizeof *m->cuda_images);
    m->cuda_bufs = calloc((size_t)m->ncuda_bufs + 1, sizeof *m->cuda_bufs);
    m->cuda_layers = calloc((size_t)m->ncuda_layers + 1, sizeof *m->cuda_layers);
    m->ntrain_bufs = count_records(text, "train_buf");
    m->ntrain_bn = count_records(text, "train_bn");
    m->train_bufs = calloc((size_t)m->ntrain_bufs + 1, sizeof *m->train_bufs);
    m->train_out_grad = calloc((size_t)m->noutputs + 1, sizeof *m->train_out_grad);
    m->train_weight_grad = calloc((size_t)m->nweights + 1, sizeof *m->train_weight_grad);
    m->train_input_grad = calloc((size_t)m->ninputs + 1, sizeof *m->train_input_grad);
    m->train_bn = calloc((size_t)m->ntrain_bn + 1, sizeof *m->train_bn);
    if (!m->inputs || !m->outputs || !m->weights || !m->layers || !m->bufs || !m->cuda_kernels ||
        !m->cuda_images || !m->cuda_bufs || !m->cuda_layers || !m->train_bufs ||
        !m->train_out_grad || !m->train_weight_grad || !m->train_input_grad || !m->train_bn) {
        rt_model_clear(m);
        snprintf(err, errlen, "out of memory reading the model description");
        return false;
    }
    Parser ps = {text, 1, false, ""};
    char key[32], devices[64] = "";
    int ni = 0, no = 0, nw = 0, nl = 0, nb = 0, nci = 0, ncb = 0, ncl = 0, ntb = 0, nbn = 0;
    for (int i = 0; i < m->noutputs; i++)
        m->train_out_grad[i] = -1;
    for (int i = 0; i < m->nweights; i++)
        m->train_weight_grad[i] = -2; /* -2: no record yet */
    for (int i = 0; i < m->ninputs; i++)
        m->train_input_grad[i] = -2;
    long long abi = -1;
    bool is_end = false;
    while (*ps.p && !ps.is_bad && !is_end) {
        word(&ps, key, sizeof key);
        if (!strcmp(key, "snnc-model")) abi = number(&ps);
        else if (!strcmp(key, "name")) word(&ps, m->name, sizeof m->name);
        else if (!strcmp(key, "devices")) word(&ps, devices, sizeof devices);
        else if (!strcmp(key, "timesteps")) m->timesteps = (int)number(&ps);
        else if (!strcmp(key, "kernels")) {
            m->nstatic = (int)number(&ps);
            m->nstep = (int)number(&ps);
        } else if (!strcmp(key, "input")) {
            parse_tensor(&ps, &m->inputs[ni], true);
            if (m->inputs[ni].info.per_step) m->inputs[ni].info.numel *= m->timesteps;
            ni++;
        } else if (!strcmp(key, "output")) {
            parse_tensor(&ps, &m->outputs[no], true);
            if (m->outputs[no].info.per_step) m->outputs[no].info.numel *= m->timesteps;
            no++;
        } else if (!strcmp(key, "weight")) parse_tensor(&ps, &m->weights[nw++], false);
        else if (!strcmp(key, "layer")) {
            word(&ps, m->layers[nl].name, sizeof m->layers[nl].name);
            m->layers[nl++].buf = (int)number(&ps);
        } else if (!strcmp(key, "buf")) parse_buf(&ps, &m->bufs[nb++]);
        else if (!strcmp(key, "cuda_layer")) {
            word(&ps, m->cuda_layers[ncl].name, sizeof m->cuda_layers[ncl].name);
            m->cuda_layers[ncl++].buf = (int)number(&ps);
        } else if (!strcmp(key, "cuda_buf")) parse_buf(&ps, &m->cuda_bufs[ncb++]);
        else if (!strcmp(key, "cuda_kernel")) parse_cuda_kernel(&ps, m);
        else if (!strcmp(key, "cuda_image")) parse_cuda_image(&ps, &m->cuda_images[nci++],
                                                              images ? images_size : 0);
        else if (!strcmp(key, "train_buf"))
            parse_buf(&ps, &m->train_bufs[ntb++]);
        else if (!strcmp(key, "train_layer")) { /* its spike counts: a trainer reports none */
            char name[RT_MAX_NAME];
            word(&ps, name, sizeof name);
            number(&ps);
        } else if (!strcmp(key, "train_out_grad") || !strcmp(key, "train_weight_grad") ||
                   !strcmp(key, "train_input_grad")) {
            bool is_out = key[6] == 'o', is_in = key[6] == 'i';
            long long k = number(&ps), b = number(&ps);
            int n = is_out ? m->noutputs : is_in ? m->ninputs : m->nweights;
            int *slot = is_out  ? m->train_out_grad
                        : is_in ? m->train_input_grad
                                : m->train_weight_grad;
            if (k < 0 || k >= n || b < (is_out ? 0 : -1) || b >= m->ntrain_bufs || slot[k] >= 0)
                ps.is_bad = true;
            else
                slot[k] = (int)b;
        } else if (!strcmp(key, "train_bn")) {
            RtTrainBn *bn = &m->train_bn[nbn++];
            bn->mean = (int)number(&ps);
            bn->var = (int)number(&ps);
            bn->running_mean = (int)number(&ps);
            bn->running_var = (int)number(&ps);
            bn->C = number(&ps);
            bn->inner = number(&ps);
        } else if (!strcmp(key, "end"))
            is_end = true;
        else ps.is_bad = true;
        end_line(&ps);
    }
    char why[256] = "";
    const char *rest = ps.p + strspn(ps.p, " \n");
    m->entry = entry; /* program_check asks whether the model has CPU code */
    if (abi != SNNK_ABI_VERSION) {
        snprintf(err, errlen, "the model's description is for runtime ABI %lld, this runtime is %d",
                 abi, SNNK_ABI_VERSION);
    } else if (ps.is_bad || !is_end || m->timesteps < 1 || m->nstatic < 0 || m->nstep < 0 ||
               !program_check(m, m->bufs, m->nbufs, m->layers, m->nlayers)) {
        if (ps.why[0])
            snprintf(err, errlen, "the model's description is malformed (line %d: %s)",
                     ps.line - 1, ps.why);
        else
            snprintf(err, errlen, "the model's description is malformed (line %d)", ps.line - 1);
    } else if (*rest) {
        snprintf(err, errlen, "the model's description is malformed (text after its end record, "
                              "line %d)", ps.line);
    } else if (!cuda_check(m, why, sizeof why) || !devices_check(devices, why, sizeof why) ||
               !train_check(m, why, sizeof why)) {
        snprintf(err, errlen, "the model's description is malformed: %s", why);
    } else if (!entry && !m->ncuda_kernels) {
        snprintf(err, errlen, "the model carries code for no device (neither CPU nor CUDA code)");
    } else {
        m->entry = entry;
        m->weight_data = weights_size ? weights : NULL;
        m->weight_size = weights ? weights_size : 0;
        m->image_data = images_size ? images : NULL;
        m->image_size = images ? images_size : 0;
        snprintf(m->devices, sizeof m->devices, "%s%s%s", entry ? "cpu" : "",
                 entry && m->ncuda_kernels ? "," : "", m->ncuda_kernels ? "cuda" : "");
        return true;
    }
    rt_model_clear(m);
    return false;
}

/* ---- models made from parts ---- */

static pthread_mutex_t made_lock = PTHREAD_MUTEX_INITIALIZER;
static snn_model *made; /* every model rt_model_create made and rt_model_free has not freed */

snn_status
rt_model_create(const char *meta, SnnkEntryFn cpu_entry, const void *weights, size_t weights_size,
                const void *cuda_images, size_t cuda_images_size, snn_model **out)
{
    if (out) *out = NULL;
    if (!meta || !out)
        return rt_fail(SNN_ERR_ARGUMENT, "rt_model_create: %s is NULL", meta ? "out" : "meta");
    if ((weights_size && !weights) || (cuda_images_size && !cuda_images))
        return rt_fail(SNN_ERR_ARGUMENT, "rt_model_create: %s is NULL with a size",
                       weights_size && !weights ? "weights" : "cuda_images");
    snn_model *m = malloc(sizeof *m);
    unsigned char *w = malloc(weights_size ? weights_size : 1);
    unsigned char *im = malloc(cuda_images_size ? cuda_images_size : 1);
    if (!m || !w || !im) {
        free(m);
        free(w);
        free(im);
        return rt_fail(SNN_ERR_MEMORY, "out of memory for a model");
    }
    if (weights_size) memcpy(w, weights, weights_size);
    if (cuda_images_size) memcpy(im, cuda_images, cuda_images_size);
    char err[512];
    if (!rt_model_parse(m, meta, cpu_entry, w, weights_size, im, cuda_images_size, err,
                        sizeof err)) {
        free(m);
        free(w);
        free(im);
        return rt_fail(SNN_ERR_STATE, "%s", err);
    }
    /* the copies are owned even where the sizes are 0 */
    m->weight_data = w;
    m->image_data = im;
    m->is_made = true;
    pthread_mutex_lock(&made_lock);
    m->next = made;
    made = m;
    pthread_mutex_unlock(&made_lock);
    *out = m;
    return SNN_OK;
}

bool
rt_model_is_made(const snn_model *m)
{
    pthread_mutex_lock(&made_lock);
    const snn_model *p = made;
    while (p && p != m)
        p = p->next;
    pthread_mutex_unlock(&made_lock);
    return p != NULL;
}

void
rt_model_free(snn_model *m)
{
    if (!m) return;
    pthread_mutex_lock(&made_lock);
    snn_model **p = &made;
    while (*p && *p != m)
        p = &(*p)->next;
    if (*p) *p = m->next;
    pthread_mutex_unlock(&made_lock);
    free((void *)m->weight_data);
    free((void *)m->image_data);
    rt_model_clear(m);
    free(m);
}
