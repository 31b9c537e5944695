/* The surrogate gradients of `fire` (ir/surrogates.def): how training differentiates a spike.
 * surrogate_grad computes g'(u) * grad in the op order of the framework the row names, rounding
 * each operation to float32 when is_f32 (the same functions the interpreter's float32 mode uses),
 * and surrogate_primitive the smooth function whose derivative that is (the finite-difference
 * tests replace the spike by it). */
#include "ir/fmath.h"
#include "ir/ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *params, *framework, *derivative;
} table[] = {
#define SURROGATE(id, name, params, fw, deriv) {name, params, fw, deriv},
#include "ir/surrogates.def"
#undef SURROGATE
};

const char *
surrogate_name(SurrogateId id)
{
    return table[id].name;
}

/* the k-th "name=default" of a row's params: its name into buf and its default; false past the end
 */
static bool
param_at(SurrogateId id, int k, char *buf, size_t len, double *def)
{
    const char *p = table[id].params;
    for (int i = 0; *p; i++) {
        const char *end = strchr(p, ' ');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (i == k) {
            const char *eq = memchr(p, '=', n);
            size_t nn = eq ? (size_t)(eq - p) : n;
            snprintf(buf, len, "%.*s", (int)nn, p);
            *def = eq ? strtod(eq + 1, NULL) : 0;
            return true;
        }
        p += n;
        while (*p == ' ')
            p++;
    }
    return false;
}

bool
surrogate_resolve(const Surrogate *s, SurrogateFn *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!s->name || strcmp(s->name, "none") == 0) {
        diag_format(err, errlen,
                    "it fires but has no surrogate gradient (a `surrogate NAME` "
                    "statement: %s)",
                    surrogate_known());
        return false;
    }
    int id = -1;
    for (int i = 0; i < SG_COUNT_; i++)
        if (strcmp(table[i].name, s->name) == 0) id = i;
    if (id < 0) {
        diag_format(err, errlen, "unknown surrogate '%s' (%s)", s->name, surrogate_known());
        return false;
    }
    out->id = (SurrogateId)id;
    char name[32];
    double def;
    int np = 0;
    while (param_at(out->id, np, name, sizeof name, &def))
        out->args[np++] = def;
    for (int i = 0; i < s->nargs; i++) {
        bool found = false;
        for (int k = 0; k < np && !found; k++) {
            param_at(out->id, k, name, sizeof name, &def);
            if (strcmp(name, s->arg_names[i]) == 0) {
                out->args[k] = s->arg_values[i];
                found = true;
            }
        }
        if (!found && strcmp(s->arg_names[i], "detach_reset") == 0) {
            double d = s->arg_values[i];
            if (d != 0 && d != 1) {
                diag_format(err, errlen, "surrogate %s: detach_reset is 0 or 1, not %g", s->name,
                            d);
                return false;
            }
            out->detach_reset = d != 0;
            found = true;
        }
        if (!found) {
            diag_format(err, errlen,
                        "surrogate %s has no argument '%s' (it takes %s%sdetach_reset)", s->name,
                        s->arg_names[i], table[id].params, *table[id].params ? " " : "");
            return false;
        }
    }
    return true;
}

const char *
surrogate_known(void)
{
    static char buf[512];
    if (!buf[0]) {
        size_t n = (size_t)snprintf(buf, sizeof buf, "known:");
        for (int i = 0; i < SG_COUNT_ && n < sizeof buf; i++)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s %s", i ? "," : "", table[i].name);
    }
    return buf;
}

void
surrogates_help(FILE *f)
{
    for (int i = 0; i < SG_COUNT_; i++) {
        char sig[96];
        snprintf(sig, sizeof sig, "%s(%s)", table[i].name, table[i].params);
        fprintf(f, "  %-32s %s: %s\n", sig, table[i].framework, table[i].derivative);
    }
}

double
surrogate_grad(const SurrogateFn *s, double grad, double u, bool is_f32)
{
    const double *a = s->args;
#define R(x) (is_f32 ? (double)(float)(x) : (double)(x))
    double au = fabs(u), p;
    switch (s->id) {
    case SG_SIGMOID: {
        double x = R(u * R(a[0]));
        double sg = is_f32 ? (double)f32_sigmoid((float)x) : 1.0 / (1.0 + exp(-x));
        return R(R(R(grad * R(1.0 - sg)) * sg) * R(a[0]));
    }
    case SG_ATAN: {
        double h = a[0] / 2, ax = R(R(M_PI * h) * u);
        return R(R(R(1.0 / R(1.0 + R(ax * ax))) * R(h)) * grad);
    }
    case SG_PW_QUADRATIC:
        if (au > R(1.0 / a[0])) return 0.0;
        return R(grad * R(R(R(-(a[0] * a[0])) * au) + R(a[0])));
    case SG_PW_EXP: {
        double x = R(R(-a[0]) * au);
        double e = is_f32 ? (double)f32_exp((float)x) : exp(x);
        return R(R(R(a[0] / 2) * e) * grad);
    }
    case SG_SOFT_SIGN:
        p = R(R(1.0 / a[0]) + au);
        return R(grad / R(R(2 * a[0]) * R(p * p)));
    case SG_SJ_SUPERSPIKE:
        p = R(au + 1.0);
        return R(R(R(a[0]) * grad) / R(p * p));
    case SG_ERF: {
        double x = R(u * R(a[0])), x2 = -R(x * x);
        double e = is_f32 ? (double)f32_exp((float)x2) : exp(x2);
        return R(R(grad * e) * R(a[0] / sqrt(M_PI)));
    }
    case SG_FAST_SIGMOID:
        p = R(R(R(a[0]) * au) + 1.0);
        return R(grad / R(p * p));
    case SG_SUPERSPIKE:
        p = R(au + 1.0);
        return R(grad / R(p * p));
    case SG_STRAIGHT:
        return grad;
    case SG_COUNT_:
        break;
    }
#undef R
    unreachable();
}

bool
neuron_surrogate(const NeuronDef *nd, SurrogateFn *sg, char *err, size_t errlen)
{
    memset(sg, 0, sizeof *sg);
    sg->id = SG_STRAIGHT;
    bool fires = false;
    for (int s = 0; s < nd->nstmts; s++) {
        const NStmt *st = &nd->stmts[s];
        if (st->kind == NS_REFRACTORY) {
            diag_format(err, errlen, "a refractory period cannot be differentiated yet");
            return false;
        }
        if (st->kind == NS_FIRE_DOWN) {
            diag_format(err, errlen, "-1 spikes (fire down) cannot be differentiated");
            return false;
        }
        if (st->kind != NS_FIRE) continue;
        fires = true;
        const NExpr *e = st->e;
        if (e->kind != NX_BIN ||
            !(e->op == NB_GE || e->op == NB_GT || e->op == NB_LE || e->op == NB_LT)) {
            diag_format(err, errlen,
                        "its fire condition is not one comparison (a >= b, a > b, "
                        "a <= b or a < b), so it has no surrogate gradient");
            return false;
        }
    }
    if (!fires) return true;
    return surrogate_resolve(&nd->surrogate, sg, err, errlen);
}

double
surrogate_primitive(const SurrogateFn *s, double u)
{
    const double *a = s->args;
    double au = fabs(u);
    switch (s->id) {
    case SG_SIGMOID:
        return 1.0 / (1.0 + exp(-a[0] * u));
    case SG_ATAN:
        return atan(M_PI / 2 * a[0] * u) / M_PI + 0.5;
    case SG_PW_QUADRATIC:
        if (u > 1 / a[0]) return 1.0;
        if (u < -1 / a[0]) return 0.0;
        return -a[0] * a[0] / 2 * u * au + a[0] * u + 0.5;
    case SG_PW_EXP:
        return u >= 0 ? 1 - exp(-a[0] * u) / 2 : exp(a[0] * u) / 2;
    case SG_SOFT_SIGN:
        return (a[0] * u / (1 + a[0] * au) + 1) / 2;
    case SG_SJ_SUPERSPIKE:
        return a[0] * u / (au + 1);
    case SG_ERF:
        return erfc(-a[0] * u) / 2;
    case SG_FAST_SIGMOID:
        return u / (1 + a[0] * au);
    case SG_SUPERSPIKE:
        return u / (1 + au);
    case SG_STRAIGHT:
        return u;
    case SG_COUNT_:
        break;
    }
    unreachable();
}
