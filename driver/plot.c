/* plot.c: --plot's SVG figures (plot.h): plain SVG text made with fprintf into memory, then
 * written whole by rt_write_file, so a figure is never half drawn on disk. Black on white, axes
 * with ticks and labels, a title that says what was left out. No figure reads anything but the
 * numbers it is given. */
#include "driver/plot.h"

#include "ir/ir.h"
#include "runtime/tensor_io.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { WIDTH = 760, HEIGHT = 460, MAX_ROWS = 400, MAX_CELLS = 200000, TRACES = 5 };

static const char *const colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"};

/* the plotting area of a figure and the data range it shows */
typedef struct Axes {
    double px, py, pw, ph; /* pixels: left, top, width, height */
    double x0, x1, y0, y1; /* data */
} Axes;

static double
sx(const Axes *a, double x)
{
    return a->px + (x - a->x0) / (a->x1 - a->x0) * a->pw;
}

static double
sy(const Axes *a, double y)
{
    return a->py + a->ph - (y - a->y0) / (a->y1 - a->y0) * a->ph;
}

/* text as SVG character data */
static void
put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if ((unsigned char)*s >= ' ')
            fputc(*s, f);
    }
}

/* a text element; anchor start, middle or end; rotated -90 degrees when is_vertical */
static void
text(FILE *f, double x, double y, const char *anchor, int size, bool is_vertical, const char *fmt,
     ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"", x, y, anchor,
            size);
    if (is_vertical) fprintf(f, " transform=\"rotate(-90 %.1f %.1f)\"", x, y);
    fputc('>', f);
    put_escaped(f, buf);
    fputs("</text>\n", f);
}

static void
begin(FILE *f, int width, int height, const char *title)
{
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            width, height, width, height, width, height);
    text(f, width / 2.0, 24, "middle", 15, false, "%s", title);
}

/* at most about n ticks at 1, 2 or 5 times a power of ten inside [lo, hi]; integers only when
 * is_integer */
static int
ticks(double lo, double hi, int n, bool is_integer, double *out)
{
    double span = hi - lo, raw = span / n, p = pow(10, floor(log10(raw))), step = p;
    for (int i = 0; i < 3; i++) {
        static const double mult[] = {1, 2, 5};
        step = mult[i] * p;
        if (span / step <= n) break;
        step = 10 * p;
    }
    if (is_integer && step < 1) step = 1;
    int k = 0;
    for (double t = ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9 && k < 32; t += step)
        out[k++] = fabs(t) < step * 1e-9 ? 0 : t;
    return k;
}

/* the frame, grid, ticks and labels of a */
static void
axes(FILE *f, const Axes *a, const char *xlabel, const char *ylabel, bool is_x_integer,
     bool is_y_integer)
{
    double t[32];
    int n = ticks(a->x0, a->x1, 8, is_x_integer, t);
    for (int i = 0; i < n; i++) {
        double x = sx(a, t[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n",
                x, a->py, x, a->py + a->ph);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", x,
                a->py + a->ph, x, a->py + a->ph + 5);
        text(f, x, a->py + a->ph + 19, "middle", 12, false, "%.6g", t[i]);
    }
    n = ticks(a->y0, a->y1, 6, is_y_integer, t);
    for (int i = 0; i < n; i++) {
        double y = sy(a, t[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n",
                a->px, y, a->px + a->pw, y);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
                a->px - 5, y, a->px, y);
        text(f, a->px - 8, y + 4, "end", 12, false, "%.6g", t[i]);
    }
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"black\"/>\n",
            a->px, a->py, a->pw, a->ph);
    text(f, a->px + a->pw / 2, a->py + a->ph + 40, "middle", 13, false, "%s", xlabel);
    text(f, a->px - 52, a->py + a->ph / 2, "middle", 13, true, "%s", ylabel);
}

/* the figure's text, closed and written whole to path */
static bool
finish(const char *path, FILE *f, char **buf, size_t *len)
{
    fputs("</svg>\n", f);
    if (fclose(f) != 0) die("out of memory for a figure");
    char err[512];
    int rc = rt_write_file(path, *buf, *len, err, sizeof err);
    free(*buf);
    if (rc) diag_reader_error(path, err);
    return rc == 0;
}

static FILE *
open_figure(char **buf, size_t *len)
{
    FILE *f = open_memstream(buf, len);
    if (!f) die("out of memory for a figure");
    return f;
}

char *
plot_path(const char *dir, const char *kind, const char *name)
{
    size_t n = strlen(dir) + strlen(kind) + (name ? strlen(name) : 0) + 8;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s%s%s.svg", dir, kind, name ? "_" : "", name ? name : "");
    return p;
}

bool
plot_dir_check(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        diag_file_error(dir, "--plot names a directory for the figures; this is a file, left as "
                             "it was");
        return false;
    }
    return true;
}

bool
plot_dir_make(const char *dir)
{
    struct stat st;
    if (mkdir(dir, 0777) != 0 && (errno != EEXIST || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        diag_file_error(dir, "cannot make the --plot directory: %s",
                        errno == EEXIST ? "a file of that name is in the way" : strerror(errno));
        return false;
    }
    return true;
}

/* "1st", "2nd", "3rd", "4th", ... */
static const char *
ordinal(int64_t k)
{
    return k % 100 / 10 == 1 ? "th"
           : k % 10 == 1     ? "st"
           : k % 10 == 2     ? "nd"
           : k % 10 == 3     ? "rd"
                             : "th";
}

bool
plot_raster(const char *path, const PlotSeries *s)
{
    int T = s->timesteps;
    /* every stride-th neuron, so that at most MAX_ROWS rows and MAX_CELLS cells are drawn */
    int64_t rows = MAX_ROWS < MAX_CELLS / (T ? T : 1) ? MAX_ROWS : MAX_CELLS / (T ? T : 1);
    if (rows < 1) rows = 1;
    int64_t stride = (s->numel + rows - 1) / rows;
    if (stride < 1) stride = 1;
    int64_t shown = (s->numel + stride - 1) / stride, nspikes = 0;
    char title[300], *buf;
    size_t len;
    if (stride == 1)
        snprintf(title, sizeof title, "%s (%s): spikes of sample %lld, %lld neurons", s->layer,
                 s->kind, (long long)s->sample, (long long)s->numel);
    else
        snprintf(title, sizeof title,
                 "%s (%s): spikes of sample %lld, every %lld%s of %lld "
                 "neurons (%lld shown)",
                 s->layer, s->kind, (long long)s->sample, (long long)stride, ordinal(stride),
                 (long long)s->numel, (long long)shown);
    FILE *f = open_figure(&buf, &len);
    begin(f, WIDTH, HEIGHT, title);
    Axes a = {80, 45, WIDTH - 110, HEIGHT - 115, -0.5, T - 0.5, -0.5, (double)s->numel - 0.5};
    axes(f, &a, "time step", "neuron", true, true);
    double w = a.pw / (T ? T : 1), h = a.ph / (double)shown;
    double mw = w * 0.8 > 1 ? w * 0.8 : 1, mh = h * 0.8 > 1 ? h * 0.8 : 1;
    for (int64_t i = 0; i < s->numel; i += stride)
        for (int t = 0; t < T; t++) {
            float x = s->data[(int64_t)t * s->numel + i];
            if (x == 0) continue;
            nspikes++;
            fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>\n",
                    sx(&a, t) - mw / 2, sy(&a, (double)i) - mh / 2, mw, mh,
                    x > 0 ? "black" : "#d62728");
        }
    text(f, a.px + a.pw, a.py - 6, "end", 12, false, "%lld spikes drawn", (long long)nspikes);
    return finish(path, f, &buf, &len);
}

bool
plot_rates(const char *path, const PlotSeries *s)
{
    enum { BINS = 20 };
    int T = s->timesteps;
    double *rate = xcalloc((size_t)s->numel + 1, sizeof *rate), mean = 0, top = 0;
    for (int64_t k = 0; k < s->nsamples; k++)
        for (int t = 0; t < T; t++) {
            const float *x = s->data + (k * T + t) * s->numel;
            for (int64_t i = 0; i < s->numel; i++)
                rate[i] += fabsf(x[i]);
        }
    double steps = (double)s->nsamples * T;
    for (int64_t i = 0; i < s->numel; i++) {
        rate[i] = steps > 0 ? rate[i] / steps : 0;
        mean += rate[i] / (double)s->numel;
        if (rate[i] > top) top = rate[i];
    }
    /* the x range: the smallest of 0.01, 0.02, 0.05, ..., 1 that holds every rate */
    double hi = 1;
    for (double p = 0.01; p < 1; p *= 10)
        for (int m = 0; m < 3 && hi == 1; m++) {
            static const double mult[] = {1, 2, 5};
            if (top <= mult[m] * p) hi = mult[m] * p;
        }
    int64_t count[BINS] = {0}, most = 1;
    for (int64_t i = 0; i < s->numel; i++) {
        int b = (int)(rate[i] / hi * BINS);
        b = b < 0 ? 0 : b >= BINS ? BINS - 1 : b;
        if (++count[b] > most) most = count[b];
    }
    free(rate);
    char title[300], *buf;
    size_t len;
    snprintf(title, sizeof title,
             "%s (%s): firing rates of %lld neurons over %lld sample%s x %d "
             "steps (mean %.4g)",
             s->layer, s->kind, (long long)s->numel, (long long)s->nsamples,
             s->nsamples == 1 ? "" : "s", T, mean);
    FILE *f = open_figure(&buf, &len);
    begin(f, WIDTH, HEIGHT, title);
    Axes a = {80, 45, WIDTH - 110, HEIGHT - 115, 0, hi, 0, most * 1.05};
    axes(f, &a, "firing rate (spikes per neuron per step)", "neurons", false, true);
    for (int b = 0; b < BINS; b++) {
        if (!count[b]) continue;
        double x0 = sx(&a, hi * b / BINS), x1 = sx(&a, hi * (b + 1) / BINS);
        double y = sy(&a, (double)count[b]);
        fprintf(f,
                "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#1f77b4\" "
                "stroke=\"white\"/>\n",
                x0, y, x1 - x0, a.py + a.ph - y);
    }
    return finish(path, f, &buf, &len);
}

bool
plot_trace(const char *path, const PlotSeries *s)
{
    int T = s->timesteps;
    int n = s->numel < TRACES ? (int)s->numel : TRACES;
    int64_t idx[TRACES];
    double lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < n; j++) {
        idx[j] = (int64_t)j * s->numel / n;
        for (int t = 0; t < T; t++) {
            double x = s->data[(int64_t)t * s->numel + idx[j]];
            if (!isfinite(x)) continue;
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
    }
    bool has_th = isfinite(s->threshold);
    if (has_th) {
        lo = s->threshold < lo ? s->threshold : lo;
        hi = s->threshold > hi ? s->threshold : hi;
    }
    if (!(lo <= hi)) lo = 0, hi = 1;
    double pad = hi > lo ? (hi - lo) * 0.06 : fabs(hi) * 0.1 + 0.5;
    const char *dot = strchr(s->name, '.');
    char title[300], *buf;
    size_t len;
    snprintf(title, sizeof title, "%s (%s): %s%s of %d neuron%s, sample %lld", s->name, s->kind,
             dot ? "state " : "values", dot ? dot + 1 : "", n, n == 1 ? "" : "s",
             (long long)s->sample);
    FILE *f = open_figure(&buf, &len);
    begin(f, WIDTH, HEIGHT, title);
    Axes a = {80,       45,      WIDTH - 230, HEIGHT - 115, T > 1 ? 0 : -0.5, T > 1 ? T - 1 : 0.5,
              lo - pad, hi + pad};
    axes(f, &a, "time step", dot ? dot + 1 : "value", true, false);
    if (has_th) {
        double y = sy(&a, s->threshold);
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                "stroke-dasharray=\"6 4\"/>\n",
                a.px, y, a.px + a.pw, y);
    }
    for (int j = 0; j < n; j++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                colours[j]);
        for (int t = 0; t < T; t++) {
            double x = s->data[(int64_t)t * s->numel + idx[j]];
            if (isfinite(x)) fprintf(f, "%.2f,%.2f ", sx(&a, t), sy(&a, x));
        }
        fputs("\"/>\n", f);
        for (int t = 0; t < T && T <= 64; t++) {
            double x = s->data[(int64_t)t * s->numel + idx[j]];
            if (isfinite(x))
                fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"/>\n", sx(&a, t),
                        sy(&a, x), colours[j]);
        }
        /* the legend, right of the axes */
        double ly = a.py + 14 + 20 * j, lx = a.px + a.pw + 16;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2\"/>\n",
                lx, ly - 4, lx + 22, ly - 4, colours[j]);
        text(f, lx + 28, ly, "start", 12, false, "neuron %lld", (long long)idx[j]);
    }
    if (has_th) {
        double ly = a.py + 14 + 20 * n, lx = a.px + a.pw + 16;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                "stroke-dasharray=\"6 4\"/>\n",
                lx, ly - 4, lx + 22, ly - 4);
        text(f, lx + 28, ly, "start", 12, false, "%s = %.6g",
             s->threshold_name ? s->threshold_name : "threshold", s->threshold);
    }
    return finish(path, f, &buf, &len);
}

/* ---- training ---- */

struct PlotCurves {
    char *path;
    char *model;
    int n, cap;
    int64_t *epoch;
    double *loss, *train_acc, *test_acc;
};

PlotCurves *
plot_curves_new(const char *dir, const char *model)
{
    if (!plot_dir_make(dir)) return NULL;
    PlotCurves *c = xcalloc(1, sizeof *c);
    c->path = plot_path(dir, "curves", NULL);
    c->model = xstrdup(model ? model : "the model");
    return c;
}

void
plot_curves_free(PlotCurves *c)
{
    if (!c) return;
    free(c->path);
    free(c->model);
    free(c->epoch);
    free(c->loss);
    free(c->train_acc);
    free(c->test_acc);
    free(c);
}

/* one series of points joined, with a marker each; ys[i] < 0 skipped where is_skip_negative */
static void
series(FILE *f, const Axes *a, const PlotCurves *c, const double *ys, const char *colour,
       bool is_skip_negative)
{
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", colour);
    for (int i = 0; i < c->n; i++)
        if (!is_skip_negative || ys[i] >= 0)
            fprintf(f, "%.2f,%.2f ", sx(a, (double)c->epoch[i]), sy(a, ys[i]));
    fputs("\"/>\n", f);
    for (int i = 0; i < c->n; i++)
        if (!is_skip_negative || ys[i] >= 0)
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\"/>\n",
                    sx(a, (double)c->epoch[i]), sy(a, ys[i]), colour);
}

static void
legend(FILE *f, double x, double y, const char *colour, const char *label)
{
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"2\"/>\n",
            x, y - 4, x + 22, y - 4, colour);
    text(f, x + 28, y, "start", 12, false, "%s", label);
}

bool
plot_curves_add(PlotCurves *c, int64_t epoch, double loss, double train_acc, double test_acc)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->epoch = xrealloc(c->epoch, (size_t)c->cap * sizeof *c->epoch);
        c->loss = xrealloc(c->loss, (size_t)c->cap * sizeof *c->loss);
        c->train_acc = xrealloc(c->train_acc, (size_t)c->cap * sizeof *c->train_acc);
        c->test_acc = xrealloc(c->test_acc, (size_t)c->cap * sizeof *c->test_acc);
    }
    c->epoch[c->n] = epoch;
    c->loss[c->n] = loss;
    c->train_acc[c->n] = train_acc;
    c->test_acc[c->n++] = test_acc;
    double lo = INFINITY, hi = -INFINITY;
    bool has_test = false;
    for (int i = 0; i < c->n; i++) {
        lo = c->loss[i] < lo ? c->loss[i] : lo;
        hi = c->loss[i] > hi ? c->loss[i] : hi;
        has_test = has_test || c->test_acc[i] >= 0;
    }
    double pad = hi > lo ? (hi - lo) * 0.08 : fabs(hi) * 0.1 + 1e-3;
    double e0 = (double)c->epoch[0], e1 = (double)c->epoch[c->n - 1];
    double epad = (e1 - e0) * 0.03 > 0.3 ? (e1 - e0) * 0.03 : 0.3; /* markers off the frame */
    e0 -= epad;
    e1 += epad;
    char title[300], *buf;
    size_t len;
    snprintf(title, sizeof title, "training %s: epochs %lld to %lld", c->model,
             (long long)c->epoch[0], (long long)c->epoch[c->n - 1]);
    FILE *f = open_figure(&buf, &len);
    begin(f, WIDTH, 720, title);
    Axes top = {80, 50, WIDTH - 230, 250, e0, e1, lo - pad < 0 && lo >= 0 ? 0 : lo - pad, hi + pad};
    axes(f, &top, "epoch", "loss (training, mean)", true, false);
    series(f, &top, c, c->loss, colours[0], false);
    legend(f, top.px + top.pw + 16, top.py + 14, colours[0], "loss");
    Axes bottom = {80, 390, WIDTH - 230, 250, e0, e1, 0, 1};
    axes(f, &bottom, "epoch", "accuracy", true, false);
    series(f, &bottom, c, c->train_acc, colours[0], false);
    legend(f, bottom.px + bottom.pw + 16, bottom.py + 14, colours[0], "train");
    if (has_test) {
        series(f, &bottom, c, c->test_acc, colours[1], true);
        legend(f, bottom.px + bottom.pw + 16, bottom.py + 34, colours[1], "test");
    }
    return finish(c->path, f, &buf, &len);
}
