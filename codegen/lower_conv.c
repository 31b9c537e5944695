/* Lowering of conv2d: tiled, flat and event-driven (spike lists per pixel), batchnorm applied
 * to its rows, and layers summed inside the neuron scan that reads them (LY_SUMMED). */
#include "codegen/lower.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- conv2d ---- */

static Conv
conv_geometry(Lower *lw, ValueId v)
{
    const Node *n = &lw->m->nodes[v];
    Conv cv;
    memset(&cv, 0, sizeof cv);
    cv.v = v;
    cv.x = n->args[0];
    cv.d = conv_geom(lw->m, n);
    /* W[o][cg][kh][kw] → [cg][kh][kw][o]: a row of output channels per (cg, kh, kw); one
     * channel's taps are neighbours, as neighbouring output pixels use them */
    if (n->op == OP_CONV1D) /* W[o][cg][k] → [cg][k][o], the same as [cg][1][k][o] */
        cv.w = wbuf_transposed(lw, n, 0, 3, (const int[]){1, 2, 0});
    else
        cv.w = wbuf_transposed(lw, n, 0, 4, (const int[]){1, 2, 3, 0});
    cv.bias = has_bias(n) ? wbuf(lw, n, 1) : -1;
    cv.list = cv.count = cv.tap_w = cv.tap_x = cv.flags = -1;
    return cv;
}

/* the input tap of output position (oh, ow): ih = oh*SH - PH + kh*DH; body runs if it is inside
 * (padding is skipped, never added); *ih and *iw are its locals */
static Cur
conv_taps(Lower *lw, Cur c, const Conv *cv, KExpr *oh, KExpr *ow, KExpr **kh, KExpr **kw,
          KExpr **ih, KExpr **iw)
{
    int ihv = local(lw, "ih", KT_I64), iwv = local(lw, "iw", KT_I64);
    KStmt *fkh = loop(lw, c, "kh", ci(lw, cv->d.KH), false, kh);
    s_assign(lw, body(fkh), ihv,
             bin(lw, KB_ADD, bin(lw, KB_SUB, bin(lw, KB_MUL, oh, ci(lw, cv->d.SH)), ci(lw, cv->d.PH)),
                 bin(lw, KB_MUL, *kh, ci(lw, cv->d.DH))));
    *ih = var(lw, ihv);
    KStmt *ifh = s_if(lw, body(fkh),
                      bin(lw, KB_AND, bin(lw, KB_GE, *ih, ci(lw, 0)),
                          bin(lw, KB_LT, *ih, ci(lw, cv->d.H))));
    KStmt *fkw = loop(lw, body(ifh), "kw", ci(lw, cv->d.KW), false, kw);
    s_assign(lw, body(fkw), iwv,
             bin(lw, KB_ADD, bin(lw, KB_SUB, bin(lw, KB_MUL, ow, ci(lw, cv->d.SW)), ci(lw, cv->d.PW)),
                 bin(lw, KB_MUL, *kw, ci(lw, cv->d.DW))));
    *iw = var(lw, iwv);
    KStmt *ifw = s_if(lw, body(fkw),
                      bin(lw, KB_AND, bin(lw, KB_GE, *iw, ci(lw, 0)),
                          bin(lw, KB_LT, *iw, ci(lw, cv->d.W))));
    return body(ifw);
}

/* x at channel (g*Cg + cg), pixel (ih, iw) of the row, as type */
static KExpr *
conv_input_as(Lower *lw, const Conv *cv, KExpr *cg, KExpr *ih, KExpr *iw, KType type)
{
    KExpr *chan = bin(lw, KB_ADD, bin(lw, KB_MUL, cv->g, ci(lw, cv->d.Cg)), cg);
    Pos px = cv->ps;
    px.i = bin(lw, KB_ADD,
               bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, chan, ci(lw, cv->d.H)), ih),
                   ci(lw, cv->d.W)),
               iw);
    return to(lw, type, vload(lw, cv->x, &px));
}

/* x at channel (g*Cg + cg), pixel (ih, iw) of the row, as f64 */
static KExpr *
conv_input(Lower *lw, const Conv *cv, KExpr *cg, KExpr *ih, KExpr *iw)
{
    return conv_input_as(lw, cv, cg, ih, iw, KT_F64);
}

/* the element of W[o0 + l][cg][kh][kw] in [cg][kh][kw][o] (o0 counts from the group's first) */
static KExpr *
conv_weight(Lower *lw, const Conv *cv, KExpr *cg, KExpr *kh, KExpr *kw, KExpr *o0)
{
    KExpr *tap = bin(lw, KB_ADD,
                     bin(lw, KB_MUL, bin(lw, KB_ADD, bin(lw, KB_MUL, cg, ci(lw, cv->d.KH)), kh),
                         ci(lw, cv->d.KW)),
                     kw);
    if (cv->packed) /* the row's offset in a tile; conv_term_tile adds the tile's */
        return bin(lw, KB_MUL, tap, ci(lw, cv->packed));
    return bin(lw, KB_ADD, bin(lw, KB_MUL, tap, ci(lw, cv->d.O)),
               bin(lw, KB_ADD, bin(lw, KB_MUL, cv->g, ci(lw, cv->d.Og)), o0));
}

/* the count of spiking channels at pixel q of group g, of this row */
static KExpr *
conv_count_index(Lower *lw, const Conv *cv, KExpr *q)
{
    KExpr *base = bin(lw, KB_MUL, row_of(&cv->ps), ci(lw, cv->d.G * cv->d.H * cv->d.W));
    return bin(lw, KB_ADD, base, bin(lw, KB_ADD, bin(lw, KB_MUL, cv->g, ci(lw, cv->d.H * cv->d.W)), q));
}

/* acc + bias of channels [o0, o0 + lanes) of group g (the interpreter's order: 1 * bias is
 * exact); returns the first channel's number */
static KExpr *
conv_bias(Lower *lw, Cur c, const Conv *cv, KExpr *o0, int t)
{
    KExpr *o = bin(lw, KB_ADD, bin(lw, KB_MUL, cv->g, ci(lw, cv->d.Og)), o0);
    if (cv->bias >= 0)
        tile_fma(lw, c, t, kx_const(lw->p, KT_F64, 1), cv->bias, o, false);
    return o;
}

/* acc + bias, stored to the output pixel (oh, ow) of channels [o0, o0 + lanes) of group g: one
 * channel apart is OH*OW elements apart (NCHW), or a window's (VStore.win_kh: window by window) */
static void
conv_store_at(Lower *lw, Cur c, const Conv *cv, const Pos *ps, KExpr *oh, KExpr *ow, KExpr *o0,
              int t)
{
    KExpr *o = conv_bias(lw, c, cv, o0, t);
    Pos py = *ps;
    const VStore *vs = &lw->vs[cv->v];
    if (vs->win_kh) {
        int64_t kh = vs->win_kh, kw = vs->win_kw, wh = cv->d.OH / kh, ww = cv->d.OW / kw;
        KExpr *plane = bin(lw, KB_ADD, bin(lw, KB_MUL, bin(lw, KB_REM, oh, ci(lw, kh)), ci(lw, kw)),
                           bin(lw, KB_REM, ow, ci(lw, kw)));
        KExpr *win = bin(lw, KB_ADD, bin(lw, KB_MUL, bin(lw, KB_DIV, oh, ci(lw, kh)), ci(lw, ww)),
                         bin(lw, KB_DIV, ow, ci(lw, kw)));
        py.i = bin(lw, KB_ADD, bin(lw, KB_MUL, plane, ci(lw, vs->numel / (kh * kw))),
                   bin(lw, KB_ADD, bin(lw, KB_MUL, o, ci(lw, wh * ww)), win));
        tile_store(lw, c, cv->v, &py, wh * ww, t);
        return;
    }
    py.i = bin(lw, KB_ADD, bin(lw, KB_MUL, o, ci(lw, cv->d.OH * cv->d.OW)),
               bin(lw, KB_ADD, bin(lw, KB_MUL, oh, ci(lw, cv->d.OW)), ow));
    tile_store(lw, c, cv->v, &py, cv->d.OH * cv->d.OW, t);
}

static void
conv_store(Lower *lw, Cur c, const Conv *cv, KExpr *oh, KExpr *ow, KExpr *o0, int t)
{
    conv_store_at(lw, c, cv, &cv->ps, oh, ow, o0, t);
}

/* one output pixel (oh, ow): a tile of channels [o0, o0 + lanes) summed over (kh, kw, c), the
 * interpreter's order, padding skipped */
static void
conv_pixel(Lower *lw, Cur px, const Conv *cv, KExpr *oh, KExpr *ow, KExpr *o0, int lanes)
{
    KExpr *kh, *kw, *ih, *iw, *cg;
    int t = tile(lw, "acc", lanes);
    s_tile(lw, px, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
    Cur in = conv_taps(lw, px, cv, oh, ow, &kh, &kw, &ih, &iw);
    KStmt *fc = loop(lw, in, "c", ci(lw, cv->d.Cg), false, &cg);
    tile_fma(lw, body(fc), t, conv_input(lw, cv, cg, ih, iw), cv->w,
             conv_weight(lw, cv, cg, kh, kw, o0), false);
    conv_store(lw, px, cv, oh, ow, o0, t);
}

/* np (at most CONV_NP) neighbouring output pixels (oh, ow0 ..) whose every tap column lies
 * inside the input: one tile each, every weight vector loaded once for all of them (the single
 * pixel's loop streams the layer's weights from L2 once per pixel); each tile's terms in the same
 * (kh, kw, c) order as conv_pixel's */
static void
conv_pixels(Lower *lw, Cur px, const Conv *cv, KExpr *oh, KExpr *ow0, KExpr *o0, int lanes, int np)
{
    const ConvGeom *d = &cv->d;
    int t[CONV_NP];
    for (int q = 0; q < np; q++) {
        t[q] = tile(lw, "acc", lanes);
        s_tile(lw, px, KS_VSET, t[q], -1, NULL, kx_const(lw->p, KT_F64, 0));
    }
    KExpr *kh, *kw, *cg;
    KStmt *fkh = loop(lw, px, "kh", ci(lw, d->KH), false, &kh);
    int ihv = local(lw, "ih", KT_I64);
    s_assign(lw, body(fkh), ihv,
             bin(lw, KB_ADD, bin(lw, KB_SUB, bin(lw, KB_MUL, oh, ci(lw, d->SH)), ci(lw, d->PH)),
                 bin(lw, KB_MUL, kh, ci(lw, d->DH))));
    KExpr *ih = var(lw, ihv);
    KStmt *ifh =
        s_if(lw, body(fkh),
             bin(lw, KB_AND, bin(lw, KB_GE, ih, ci(lw, 0)), bin(lw, KB_LT, ih, ci(lw, d->H))));
    KStmt *fkw = loop(lw, body(ifh), "kw", ci(lw, d->KW), false, &kw);
    int iwv = local(lw, "iw", KT_I64);
    s_assign(lw, body(fkw), iwv,
             bin(lw, KB_ADD, bin(lw, KB_SUB, bin(lw, KB_MUL, ow0, ci(lw, d->SW)), ci(lw, d->PW)),
                 bin(lw, KB_MUL, kw, ci(lw, d->DW))));
    KStmt *fc = loop(lw, body(fkw), "c", ci(lw, d->Cg), false, &cg);
    KExpr *w = conv_weight(lw, cv, cg, kh, kw, o0);
    for (int q = 0; q < np; q++)
        tile_fma(lw, body(fc), t[q],
                 conv_input(lw, cv, cg, ih, bin(lw, KB_ADD, var(lw, iwv), ci(lw, q * d->SW))),
                 cv->w, w, false);
    for (int q = 0; q < np; q++)
        conv_store(lw, px, cv, oh, bin(lw, KB_ADD, ow0, ci(lw, q)), o0, t[q]);
}

/* pixels [from, from + n) of output row oh one at a time */
static void
conv_pixel_run(Lower *lw, Cur row, const Conv *cv, KExpr *oh, int64_t from, int64_t n, KExpr *o0,
               int lanes)
{
    if (n <= 0) return;
    KExpr *u;
    KStmt *fu = loop(lw, row, "ow", ci(lw, n), false, &u);
    conv_pixel(lw, body(fu), cv, oh, from ? bin(lw, KB_ADD, u, ci(lw, from)) : u, o0, lanes);
}

/* real-valued input: one tile of output channels [o0, o0 + lanes) of group g at every output
 * pixel, summed over (kh, kw, c), the interpreter's order (the tile outer: its weights stay in
 * cache over the pixels): the pixels of a row whose every tap column lies inside the input in
 * blocks of CONV_NP (2 without AVX-512: conv_pixels), the others one at a time */
static void
conv_tile(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const Conv *cv = ctx;
    const ConvGeom *d = &cv->d;
    KExpr *oh, *ob;
    KStmt *foh = loop(lw, c, "oh", ci(lw, d->OH), false, &oh);
    Cur row = body(foh);
    /* inside: ow SW - PW >= 0 and ow SW - PW + (KW - 1) DW <= W - 1 */
    int64_t lo = (d->PW + d->SW - 1) / d->SW, span = d->W - 1 + d->PW - (d->KW - 1) * d->DW;
    int64_t hi = span < 0 ? -1 : span / d->SW;
    if (hi > d->OW - 1) hi = d->OW - 1;
    int np = lower_wide_vectors() ? CONV_NP : 2; /* AVX2's 16 registers: 2 pixels */
    int64_t nblk = hi >= lo ? (hi - lo + 1) / np : 0;
    if (nblk == 0) lo = 0;
    conv_pixel_run(lw, row, cv, oh, 0, lo, o0, lanes);
    if (nblk > 0) {
        KStmt *fb = loop(lw, row, "ob", ci(lw, nblk), false, &ob);
        KExpr *ow0 = bin(lw, KB_ADD, bin(lw, KB_MUL, ob, ci(lw, np)), ci(lw, lo));
        conv_pixels(lw, body(fb), cv, oh, ow0, o0, lanes, np);
    }
    int64_t done = lo + nblk * np;
    conv_pixel_run(lw, row, cv, oh, done, d->OW - done, o0, lanes);
}

/* spikes: one tile of the output pixel's channels over the pixel's term list */
static void
conv_term_tile(Lower *lw, Cur c, KExpr *o0, int lanes, const void *ctx)
{
    const Conv *cv = ctx;
    int t = tile(lw, "acc", lanes);
    s_tile(lw, c, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
    KExpr *j;
    KStmt *fj = loop(lw, c, "j", cv->nterms, false, &j);
    KExpr *ti = bin(lw, KB_ADD, cv->terms, j);
    /* packed: tile o0 / nt starts at o0 * Cg*KH*KW */
    KExpr *base = cv->packed ? bin(lw, KB_MUL, o0, ci(lw, cv->d.Cg * cv->d.KH * cv->d.KW)) : o0;
    /* a spike of bits is 1: fma(1, w, acc) is acc + w, which the backend emits as an add */
    KExpr *x = cv->tap_x < 0 ? kx_const(lw->p, KT_F64, 1) : kx_load(lw->p, cv->tap_x, ti);
    tile_fma(lw, body(fj), t, x, cv->w, bin(lw, KB_ADD, kx_load(lw->p, cv->tap_w, ti), base),
             false);
    conv_store(lw, c, cv, cv->oh, cv->ow, o0, t);
}

/* the listed entry of a spiking channel as (channel, input): a spike of bits is 1 (fma(1, w, acc)
 * is acc + w, which the backend emits as an add); of bit pairs, its sign is in the entry
 * (conv_list_append); else the input is loaded */
static KExpr *
conv_listed(Lower *lw, const Conv *cv, int cgv, KExpr *ih, KExpr *iw, KExpr **cg)
{
    *cg = var(lw, cgv);
    if (bits_of(lw, cv->x) == 1) return kx_const(lw->p, KT_F64, 1);
    if (bits_of(lw, cv->x) == 2) {
        KExpr *is_neg = bin(lw, KB_REM, var(lw, cgv), ci(lw, 2));
        *cg = bin(lw, KB_DIV, var(lw, cgv), ci(lw, 2));
        return to(lw, lw->acc, bin(lw, KB_SUB, ci(lw, 1), bin(lw, KB_MUL, ci(lw, 2), is_neg)));
    }
    return conv_input(lw, cv, *cg, ih, iw);
}

/* spikes: per output pixel, its terms in (kh, kw, spiking c in channel order). All channels in
 * one tile: each tap's listed channels summed straight from the list. Several tiles: the listed
 * channels of each tap's input pixel become (weight row, input value) pairs, which every channel
 * tile then sums in one loop (one short loop per tap and tile would cost a mispredicted exit
 * each, and the list's decoding once per tile) */
static void
conv_event_pixels(Lower *lw, Cur c, Conv *cv)
{
    KExpr *oh, *ow, *kh, *kw, *ih, *iw, *cg, *e;
    Cur rowc = c;
    if (cv->row_oh) {
        oh = cv->row_oh;
    } else {
        KStmt *foh = loop(lw, c, "oh", ci(lw, cv->d.OH), false, &oh);
        rowc = body(foh);
    }
    KStmt *fow = loop(lw, rowc, "ow", ci(lw, cv->d.OW), false, &ow);
    Cur px = body(fow);
    cv->oh = oh;
    cv->ow = ow;
    int qv = local(lw, "qi", KT_I64), cgv = local(lw, "cg", KT_I64), t = -1, t1 = -1, nv = -1;
    if (cv->d.Og <= cv->nt) {
        t = tile(lw, "acc", (int)cv->d.Og);
        s_tile(lw, px, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
        if (cv->flags >= 0) {
            t1 = tile(lw, "acc", (int)cv->d.Og);
            s_tile(lw, px, KS_VSET, t1, -1, NULL, kx_const(lw->p, KT_F64, 0));
        }
    } else {
        nv = local(lw, "nterms", KT_I64);
        s_assign(lw, px, nv, ci(lw, 0));
    }
    Cur in = conv_taps(lw, px, cv, oh, ow, &kh, &kw, &ih, &iw);
    s_assign(lw, in, qv,
             conv_count_index(lw, cv, bin(lw, KB_ADD, bin(lw, KB_MUL, ih, ci(lw, cv->d.W)), iw)));
    KStmt *fe = loop(lw, in, "e", kx_load(lw->p, cv->count, var(lw, qv)), false, &e);
    KExpr *at = bin(lw, KB_ADD, bin(lw, KB_MUL, var(lw, qv), ci(lw, cv->d.Cg)), e);
    s_assign(lw, body(fe), cgv, kx_load(lw->p, cv->list, at));
    KExpr *x = conv_listed(lw, cv, cgv, ih, iw, &cg);
    if (cv->flags >= 0) { /* paired rows: each listed weight row loaded once for both */
        KExpr *f = to(lw, KT_I64, kx_load(lw->p, cv->flags, at));
        KExpr *wi = conv_weight(lw, cv, cg, kh, kw, ci(lw, 0));
        tile_fma(lw, body(fe), t, to(lw, lw->acc, bin(lw, KB_BITAND, f, ci(lw, 1))), cv->w, wi,
                 true);
        tile_fma(lw, body(fe), t1, to(lw, lw->acc, bin(lw, KB_DIV, f, ci(lw, 2))), cv->w, wi, true);
        conv_store(lw, px, cv, oh, ow, ci(lw, 0), t);
        conv_store_at(lw, px, cv, &cv->ps1, oh, ow, ci(lw, 0), t1);
        return;
    }
    if (t >= 0) {
        tile_fma(lw, body(fe), t, x, cv->w, conv_weight(lw, cv, cg, kh, kw, ci(lw, 0)), false);
        conv_store(lw, px, cv, oh, ow, ci(lw, 0), t);
        return;
    }
    KExpr *ti = bin(lw, KB_ADD, cv->terms, var(lw, nv));
    s_store(lw, body(fe), cv->tap_w, ti, conv_weight(lw, cv, cg, kh, kw, ci(lw, 0)));
    if (cv->tap_x >= 0) /* bits: no input to keep (conv_term_tile) */
        s_store(lw, body(fe), cv->tap_x, ti, x);
    s_assign(lw, body(fe), nv, bin(lw, KB_ADD, var(lw, nv), ci(lw, 1)));
    cv->nterms = var(lw, nv);
    for_tiles(lw, px, cv->d.Og, cv->nt, conv_term_tile, cv);
}

/* the batchnorm fused into this conv (fold-batchnorm) on the CPU: over the row the conv has just
 * stored, while it is in cache, channel by channel (its terms the same for the channel's pixels)
 * over contiguous pixels (a loop the compiler can vectorise), in the batchnorm kernel's arithmetic
 * on the same f32 values. (Normalising each tile's lanes as they are stored, channels a pixel
 * apart, is a scalar loop; both measured at parity with the separate kernel on
 * bench/cpu/models/conv_bn.snn, where the convolutions dominate: the gain is the conv's buffer
 * and a launch per batchnorm.) A channel's batchnorm terms are the same at each of its pixels, so
 * the square root is computed once a channel (hoisted out of the pixel loop). */
static void
batchnorm_part(Lower *lw, Cur c, const Conv *cv, const Pos *ps, KExpr *ch0, int64_t nch)
{
    ValueId bn = lw->epilogue;
    const VStore *vs = &lw->vs[bn];
    int64_t HW = cv->d.OH * cv->d.OW;
    KExpr *ch, *i;
    KStmt *fc = loop(lw, c, "ch", ci(lw, nch), false, &ch);
    KExpr *chan = bin(lw, KB_ADD, ch0, ch);
    Pos pe = *ps;
    Cur in = body(fc);
    batchnorm_terms(lw, in, bn, chan); /* once per channel, not per pixel */
    if (!vs->win_kh) {                 /* NCHW: the channel's pixels, or one output row's */
        KExpr *p0 = cv->row_oh ? bin(lw, KB_MUL, cv->row_oh, ci(lw, cv->d.OW)) : ci(lw, 0);
        KStmt *fi = loop(lw, in, "i", ci(lw, cv->row_oh ? cv->d.OW : HW), false, &i);
        pe.i = bin(lw, KB_ADD, bin(lw, KB_MUL, chan, ci(lw, HW)), bin(lw, KB_ADD, p0, i));
        in = body(fi);
    } else { /* window by window (conv_store_at): the channel's run in each plane, or the
              * output row's pixels in each of its KW planes */
        int64_t kh = vs->win_kh, kw = vs->win_kw, ww = cv->d.OW / kw, per = HW / (kh * kw);
        KExpr *k;
        KStmt *fk = loop(lw, in, "k", ci(lw, cv->row_oh ? kw : kh * kw), false, &k);
        KStmt *fi = loop(lw, body(fk), "i", ci(lw, cv->row_oh ? ww : per), false, &i);
        KExpr *plane = k, *run = bin(lw, KB_MUL, chan, ci(lw, per));
        if (cv->row_oh) {
            plane = bin(lw, KB_ADD,
                        bin(lw, KB_MUL, bin(lw, KB_REM, cv->row_oh, ci(lw, kh)), ci(lw, kw)), k);
            run = bin(lw, KB_ADD, run,
                      bin(lw, KB_MUL, bin(lw, KB_DIV, cv->row_oh, ci(lw, kh)), ci(lw, ww)));
        }
        pe.i = bin(lw, KB_ADD, bin(lw, KB_MUL, plane, ci(lw, vs->numel / (kh * kw))),
                   bin(lw, KB_ADD, run, i));
        in = body(fi);
    }
    vstore(lw, in, bn, &pe, batchnorm_expr(lw, &lw->m->nodes[bn], chan, vload(lw, bn, &pe)));
    lw->hoisted_bn = NULL;
}

/* ... over channels [ch0, ch0 + nch) of the row (or rows: paired) at every pixel, or of one
 * output row's pixels where the sums run by output row (cv->row_oh) */
static void
batchnorm_row(Lower *lw, Cur c, const Conv *cv, KExpr *ch0, int64_t nch)
{
    batchnorm_part(lw, c, cv, &cv->ps, ch0, nch);
    if (cv->flags < 0) return;
    if (lw->T % 2) /* an odd T's last pair is one row twice: normalised once */
        c = body(s_if(lw, c, bin(lw, KB_NE, cv->ps1.r, cv->ps.r)));
    batchnorm_part(lw, c, cv, &cv->ps1, ch0, nch);
}

static void
conv_groups(Lower *lw, Cur c, Conv *cv)
{
    Cur row = c;
    if (cv->d.G > 1) {
        KStmt *fg = loop(lw, c, "g", ci(lw, cv->d.G), false, &cv->g);
        c = body(fg);
    } else {
        cv->g = ci(lw, 0);
    }
    if (cv->list < 0)
        for_tiles(lw, c, cv->d.Og, conv_block_lanes(lw, cv->d.Cg * cv->d.KH * cv->d.KW), conv_tile,
                  cv);
    else
        conv_event_pixels(lw, c, cv);
    if (lw->is_epilogue_by_row) batchnorm_row(lw, row, cv, ci(lw, 0), cv->d.G * cv->d.Og);
}

/* PyTorch Conv2d gathered per output pixel and channel tile: acc = sum over kh, kw, c of the
 * group (the interpreter's order), then + bias, rounded once. With one group of whole tiles, the
 * threads share (row, tile) pairs rather than rows (at batch 1 a static layer is one row: the conv
 * SNN's c1 ran on one thread), a batchnorm fused into the conv applied to the tile's channels in
 * the same iteration. */
void
lower_conv2d(Lower *lw, ValueId v)
{
    Conv cv = conv_geometry(lw, v);
    int64_t nt = conv_block_lanes(lw, cv.d.Cg * cv.d.KH * cv.d.KW), ntiles = cv.d.Og / nt;
    if (cv.d.G > 1 || cv.d.Og % nt != 0 || ntiles < 2) {
        Cur c = open_rows(lw, v, &cv.ps);
        conv_groups(lw, c, &cv);
        return;
    }
    KExpr *q;
    KStmt *fq = loop(lw, top(lw), "q", bin(lw, KB_MUL, rows_of(lw, v), ci(lw, ntiles)), true, &q);
    int rv = local(lw, "r", KT_I64), otv = local(lw, "ot", KT_I64);
    s_assign(lw, body(fq), rv, bin(lw, KB_DIV, q, ci(lw, ntiles)));
    s_assign(lw, body(fq), otv, bin(lw, KB_REM, q, ci(lw, ntiles)));
    cv.ps = row_pos(lw, v, var(lw, rv), NULL);
    cv.g = ci(lw, 0);
    KExpr *o0 = bin(lw, KB_MUL, var(lw, otv), ci(lw, nt));
    conv_tile(lw, body(fq), o0, (int)nt, &cv);
    if (lw->is_epilogue_by_row) batchnorm_row(lw, body(fq), &cv, o0, nt);
}

/* output (channel o of group cv->g, oh, ow) of the row at cv->ps into the one-lane tile t, without
 * the bias (conv_store adds it): summed over (kh, kw, c), the interpreter's order, zeros skipped
 * for spikes */
static void
conv_sum(Lower *lw, Cur c, const Conv *cv, KExpr *oh, KExpr *ow, KExpr *o, int t)
{
    KExpr *cg, *kh, *kw, *ih, *iw;
    s_tile(lw, c, KS_VSET, t, -1, NULL, kx_const(lw->p, KT_F64, 0));
    Cur in = conv_taps(lw, c, cv, oh, ow, &kh, &kw, &ih, &iw);
    KStmt *fc = loop(lw, in, "c", ci(lw, cv->d.Cg), false, &cg);
    tile_fma(lw, body(fc), t, conv_input(lw, cv, cg, ih, iw), cv->w,
             conv_weight(lw, cv, cg, kh, kw, o), is_spike_value(lw, cv->x));
}

/* GPU: the outputs of one thread, GPU_CONV_NP neighbouring pixels (in OH*OW order, from pixel p0)
 * times the channels [o0, o0 + lanes) of group cv->g: one tile per pixel, each summed over (kh,
 * kw, c), the interpreter's order, its padding taps (and pixels past the last) skipped, then +
 * bias. Each weight vector loaded serves every pixel and each input every channel. Zeros are
 * added, not tested for: a sum from +0 never holds -0, so 0 * w (w finite) leaves it as it was,
 * and the pixels' inputs differ across a warp, where a test would diverge. */
static void
conv_gpu_block(Lower *lw, Cur c, Conv *cv, KExpr *p0, KExpr *o0, int lanes)
{
    const ConvGeom *d = &cv->d;
    int64_t HW = d->OH * d->OW;
    int np = HW < GPU_CONV_NP ? (int)HW : GPU_CONV_NP;
    int t[GPU_CONV_NP], pv[GPU_CONV_NP], ohv[GPU_CONV_NP], owv[GPU_CONV_NP];
    int ihv[GPU_CONV_NP], iwv[GPU_CONV_NP];
    for (int i = 0; i < np; i++) {
        pv[i] = local(lw, "p", KT_I64);
        ohv[i] = local(lw, "oh", KT_I64);
        owv[i] = local(lw, "ow", KT_I64);
        ihv[i] = local(lw, "ih", KT_I64);
        iwv[i] = local(lw, "iw", KT_I64);
        s_assign(lw, c, pv[i], bin(lw, KB_ADD, p0, ci(lw, i)));
        s_assign(lw, c, ohv[i], bin(lw, KB_DIV, var(lw, pv[i]), ci(lw, d->OW)));
        s_assign(lw, c, owv[i], bin(lw, KB_REM, var(lw, pv[i]), ci(lw, d->OW)));
        t[i] = tile(lw, "acc", lanes);
        s_tile(lw, c, KS_VSET, t[i], -1, NULL, kx_const(lw->p, KT_F64, 0));
    }
    KExpr *kh, *kw, *cg;
    KStmt *fkh = loop(lw, c, "kh", ci(lw, d->KH), false, &kh);
    KStmt *fkw = loop(lw, body(fkh), "kw", ci(lw, d->KW), false, &kw);
    Cur tap = body(fkw);
    KExpr *in[GPU_CONV_NP];
    for (int i = 0; i < np; i++) {
        s_assign(
            lw, tap, ihv[i],
            bin(lw, KB_ADD,
                bin(lw, KB_SUB, bin(lw, KB_MUL, var(lw, ohv[i]), ci(lw, d->SH)), ci(lw, d->PH)),
                bin(lw, KB_MUL, kh, ci(lw, d->DH))));
        s_assign(
            lw, tap, iwv[i],
            bin(lw, KB_ADD,
                bin(lw, KB_SUB, bin(lw, KB_MUL, var(lw, owv[i]), ci(lw, d->SW)), ci(lw, d->PW)),
                bin(lw, KB_MUL, kw, ci(lw, d->DW))));
        KExpr *ih = var(lw, ihv[i]), *iw = var(lw, iwv[i]);
        in[i] = bin(
            lw, KB_AND,
            bin(lw, KB_AND, bin(lw, KB_LT, var(lw, pv[i]), ci(lw, HW)),
                bin(lw, KB_AND, bin(lw, KB_GE, ih, ci(lw, 0)), bin(lw, KB_LT, ih, ci(lw, d->H)))),
            bin(lw, KB_AND, bin(lw, KB_GE, iw, ci(lw, 0)), bin(lw, KB_LT, iw, ci(lw, d->W))));
    }
    /* each pixel's input first (0 at a padding tap), then the tiles' terms side by side: one
     * weight vector for all of them */
    KStmt *fc = loop(lw, tap, "c", ci(lw, d->Cg), false, &cg);
    KExpr *wi = conv_weight(lw, cv, cg, kh, kw, o0);
    int xv[GPU_CONV_NP];
    for (int i = 0; i < np; i++) {
        xv[i] = local(lw, "xv", lw->acc);
        s_assign(lw, body(fc), xv[i], kx_const(lw->p, lw->acc, 0));
        KStmt *inside = s_if(lw, body(fc), in[i]);
        s_assign(lw, body(inside), xv[i],
                 conv_input_as(lw, cv, cg, var(lw, ihv[i]), var(lw, iwv[i]), lw->acc));
    }
    for (int i = 0; i < np; i++)
        tile_fma(lw, body(fc), t[i], var(lw, xv[i]), cv->w, wi, false);
    for (int i = 0; i < np; i++) {
        KStmt *is = s_if(lw, c, bin(lw, KB_LT, var(lw, pv[i]), ci(lw, HW)));
        conv_store(lw, body(is), cv, var(lw, ohv[i]), var(lw, owv[i]), o0, t[i]);
    }
}

/* GPU: one thread per output element (row, group, channel, oh, ow), ow fastest so that
 * neighbouring threads read neighbouring inputs and store neighbouring outputs; a one-lane tile
 * summed over (kh, kw, c), the interpreter's order, zeros skipped for spikes, then + bias. Runs
 * over [0, rows*per_row * (1 - on)) (on NULL: all of it). */
static void
conv_gpu_flat(Lower *lw, ValueId v, KExpr *on)
{
    Conv cv = conv_geometry(lw, v);
    const ConvGeom *d = &cv.d;
    int64_t per_row = d->G * d->Og * d->OH * d->OW;
    KExpr *n = bin(lw, KB_MUL, rows_of(lw, v), ci(lw, per_row)), *q;
    KStmt *fq = loop(lw, top(lw), "q", on ? bin(lw, KB_MUL, n, bin(lw, KB_SUB, ci(lw, 1), on)) : n,
                     true, &q);
    Cur c = body(fq);
    int owv = local(lw, "ow", KT_I64), ohv = local(lw, "oh", KT_I64);
    int ov = local(lw, "o", KT_I64), gv = local(lw, "g", KT_I64), rv = local(lw, "r", KT_I64);
    s_assign(lw, c, owv, bin(lw, KB_REM, q, ci(lw, d->OW)));
    s_assign(lw, c, ohv, bin(lw, KB_REM, bin(lw, KB_DIV, q, ci(lw, d->OW)), ci(lw, d->OH)));
    s_assign(lw, c, ov,
             bin(lw, KB_REM, bin(lw, KB_DIV, q, ci(lw, d->OW * d->OH)), ci(lw, d->Og)));
    s_assign(lw, c, gv,
             bin(lw, KB_REM, bin(lw, KB_DIV, q, ci(lw, d->OW * d->OH * d->Og)), ci(lw, d->G)));
    s_assign(lw, c, rv, bin(lw, KB_DIV, q, ci(lw, per_row)));
    cv.ps = row_pos(lw, v, var(lw, rv), NULL);
    cv.g = var(lw, gv);
    int t = tile(lw, "acc", 1);
    conv_sum(lw, c, &cv, var(lw, ohv), var(lw, owv), var(lw, ov), t);
    conv_store(lw, c, &cv, var(lw, ohv), var(lw, owv), var(lw, ov), t);
}

/* GPU tiles: a thread per (row, group, block of GPU_CONV_NP output pixels, tile of GPU_CONV_NT
 * channels), the channel tile fastest: a warp's threads load neighbouring weights of
 * [cg][kh][kw][o] (coalesced) and the same few input pixels (broadcasts). Where they are too few
 * to fill the GPU, the one-thread-per-output twin runs instead (lower_layers.c, "GPU"). */
static void
conv_gpu_tiles(Lower *lw, ValueId v)
{
    Conv cv = conv_geometry(lw, v);
    const ConvGeom *d = &cv.d;
    int64_t HW = d->OH * d->OW;
    int np = HW < GPU_CONV_NP ? (int)HW : GPU_CONV_NP;
    int nt = d->Og < GPU_CONV_NT ? (int)d->Og : GPU_CONV_NT;
    int64_t nfull = d->Og / nt, tail = d->Og % nt, ntiles = nfull + (tail > 0);
    int64_t npb = (HW + np - 1) / np, per_row = d->G * npb * ntiles;
    KExpr *threads = bin(lw, KB_MUL, rows_of(lw, v), ci(lw, per_row));
    KExpr *on = gpu_tiles_on(lw, threads);
    KExpr *q;
    KStmt *fq = loop(lw, top(lw), "q", bin(lw, KB_MUL, threads, on), true, &q);
    Cur c = body(fq);
    int otv = local(lw, "ot", KT_I64), p0v = local(lw, "p0", KT_I64);
    int gv = local(lw, "g", KT_I64), rv = local(lw, "r", KT_I64);
    s_assign(lw, c, otv, bin(lw, KB_REM, q, ci(lw, ntiles)));
    s_assign(lw, c, p0v,
             bin(lw, KB_MUL, bin(lw, KB_REM, bin(lw, KB_DIV, q, ci(lw, ntiles)), ci(lw, npb)),
                 ci(lw, np)));
    s_assign(lw, c, gv, bin(lw, KB_REM, bin(lw, KB_DIV, q, ci(lw, ntiles * npb)), ci(lw, d->G)));
    s_assign(lw, c, rv, bin(lw, KB_DIV, q, ci(lw, per_row)));
    cv.ps = row_pos(lw, v, var(lw, rv), NULL);
    cv.g = var(lw, gv);
    KExpr *o0 = bin(lw, KB_MUL, var(lw, otv), ci(lw, nt));
    if (!tail) {
        conv_gpu_block(lw, c, &cv, var(lw, p0v), o0, nt);
    } else {
        KStmt *i = s_if(lw, c, bin(lw, KB_LT, var(lw, otv), ci(lw, nfull)));
        conv_gpu_block(lw, body(i), &cv, var(lw, p0v), o0, nt);
        conv_gpu_block(lw, els(i), &cv, var(lw, p0v), ci(lw, nfull * nt), (int)tail);
    }
    gpu_twin_kernel(lw);
    conv_gpu_flat(lw, v, on);
}

/* GPU: tiles and their one-thread-per-output twin, or one thread per output: for a layer in a
 * step loop (whose kernels Kernel.sample_iters fuses) and one of few terms an output (the conv
 * SNN's first layer, 9: tiles measured slower, 158 -> 188 us at batch 256) */
void
lower_conv2d_flat(Lower *lw, ValueId v)
{
    ConvGeom d = conv_geom(lw->m, &lw->m->nodes[v]);
    if (ctx_of(lw, v) != CTX_STEP && d.Cg * d.KH * d.KW >= GPU_CONV_TILED_MIN_TERMS)
        conv_gpu_tiles(lw, v);
    else
        conv_gpu_flat(lw, v, NULL);
}

/* Layer v (dense or conv, LY_SUMMED) at the position ps of the scan that reads it: the one-lane
 * sum of lower_dense_flat / lower_conv2d_flat for that element (the same terms in the same
 * order, zeros skipped for spikes, then the conv's bias), its statements put at lw->pre, read as
 * the f32 the layer's store would round it to (and on to 16 bits where its output is stored so,
 * Node.astore). */
KExpr *
summed_value(Lower *lw, ValueId v, Pos *ps)
{
    Cur c = lw->pre;
    if (!c.arr) die("kir: layer %d summed outside a scan", (int)v);
    kernel_add_node(lw, v);
    Pos row;
    memset(&row, 0, sizeof row);
    row.b = pos_b(lw, ps);
    if (!lw->is_static[v]) row.t = pos_t(lw, ps);
    KExpr *i = pos_i(lw, ps);
    int t = tile(lw, "acc", 1);
    if (lw->m->nodes[v].op == OP_DENSE) {
        dense_sum(lw, c, v, &row, i, t);
    } else {
        Conv cv = conv_geometry(lw, v);
        const ConvGeom *d = &cv.d;
        int64_t HW = d->OH * d->OW;
        int ohv = local(lw, "oh", KT_I64), ov = local(lw, "o", KT_I64), gv = local(lw, "g", KT_I64);
        s_assign(lw, c, ohv, bin(lw, KB_REM, bin(lw, KB_DIV, i, ci(lw, d->OW)), ci(lw, d->OH)));
        s_assign(lw, c, ov, bin(lw, KB_REM, bin(lw, KB_DIV, i, ci(lw, HW)), ci(lw, d->Og)));
        s_assign(lw, c, gv, bin(lw, KB_DIV, i, ci(lw, HW * d->Og)));
        cv.ps = row;
        cv.g = var(lw, gv);
        conv_sum(lw, c, &cv, var(lw, ohv), bin(lw, KB_REM, i, ci(lw, d->OW)), var(lw, ov), t);
        conv_bias(lw, c, &cv, var(lw, ov), t);
    }
    KExpr *y = to(lw, KT_F32, var(lw, t));
    WeightStore as = lw->m->nodes[v].astore;
    return as == WSTORE_F32 ? y : kx_un(lw->p, as == WSTORE_F16 ? KU_ROUND_F16 : KU_ROUND_BF16, y);
}

/* building a conv row's spike lists: the locals and sizes an append needs */
typedef struct ConvList {
    Conv *cv;
    int qv, nv;  /* count index, count */
    int flagv;   /* paired rows: the entry's flags (for_bit_spikes_pair) */
    int64_t HW;
    int ev, chv; /* bit-stored input: the element, its channel */
    KExpr *cg;   /* ... read channel by channel: the channel in the group */
} ConvList;

/* channel cg of group cv->g spikes at input pixel q: list[g][q][count++] = cg; for an input of
 * bit pairs (-1/0/1) cg * 2 + (the spike is -1), its value loaded once here rather than at each
 * of its taps (conv_event_pixels decodes it) */
static void
conv_list_append(Lower *lw, Cur c, const ConvList *cl, KExpr *q, KExpr *cg)
{
    const Conv *cv = cl->cv;
    if (bits_of(lw, cv->x) == 2) {
        KExpr *chan = bin(lw, KB_ADD, bin(lw, KB_MUL, cv->g, ci(lw, cv->d.Cg)), cg);
        Pos px = cv->ps;
        px.i = bin(lw, KB_ADD, bin(lw, KB_MUL, chan, ci(lw, cl->HW)), q);
        KExpr *x = to(lw, KT_I64, vload(lw, cv->x, &px));
        KExpr *is_neg = bin(lw, KB_DIV, bin(lw, KB_SUB, ci(lw, 1), x), ci(lw, 2)); /* +1: 0, -1: 1 */
        cg = bin(lw, KB_ADD, bin(lw, KB_MUL, cg, ci(lw, 2)), is_neg);
    }
    s_assign(lw, c, cl->qv, conv_count_index(lw, cv, q));
    s_assign(lw, c, cl->nv, kx_load(lw->p, cv->count, var(lw, cl->qv)));
    KExpr *at =
        bin(lw, KB_ADD, bin(lw, KB_MUL, var(lw, cl->qv), ci(lw, cv->d.Cg)), var(lw, cl->nv));
    s_store(lw, c, cv->list, at, cg);
    if (cv->flags >= 0) s_store(lw, c, cv->flags, at, var(lw, cl->flagv));
    s_store(lw, c, cv->count, var(lw, cl->qv), bin(lw, KB_ADD, var(lw, cl->nv), ci(lw, 1)));
}

/* SpikeBody of a bit-stored input read channel by channel: the element is the pixel */
static void
conv_list_pixel(Lower *lw, Cur c, KExpr *q, void *ctx)
{
    const ConvList *cl = ctx;
    conv_list_append(lw, c, cl, q, cl->cg);
}

/* SpikeBody of a bit-stored input: element e of the row is (channel, pixel) */
static void
conv_list_bit(Lower *lw, Cur c, KExpr *e, void *ctx)
{
    ConvList *cl = ctx;
    Conv *cv = cl->cv;
    s_assign(lw, c, cl->ev, e);
    s_assign(lw, c, cl->chv, bin(lw, KB_DIV, var(lw, cl->ev), ci(lw, cl->HW)));
    KExpr *ch = var(lw, cl->chv);
    cv->g = cv->d.G == 1 ? ci(lw, 0) : bin(lw, KB_DIV, ch, ci(lw, cv->d.Cg));
    conv_list_append(lw, c, cl, bin(lw, KB_REM, var(lw, cl->ev), ci(lw, cl->HW)),
                     cv->d.G == 1 ? ch : bin(lw, KB_REM, ch, ci(lw, cv->d.Cg)));
}

/* loops over the input channels of every group (cv->g, *cg) in order; returns their body */
static Cur
conv_channels(Lower *lw, Cur c, Conv *cv, KExpr **cg)
{
    if (cv->d.G == 1) {
        cv->g = ci(lw, 0);
    } else {
        KStmt *fg = loop(lw, c, "g", ci(lw, cv->d.G), false, &cv->g);
        c = body(fg);
    }
    return body(loop(lw, c, "c", ci(lw, cv->d.Cg), false, cg));
}

/* Paired rows: steps t and t + 1 of a sample share one list per input pixel, of the channels that
 * spiked there at either step, each entry flagged with the steps it spiked at; each output pixel
 * then sums both steps in two tiles, every listed weight row loaded (and widened) once for both
 * and added to a step's tile with a multiplier of 1, or 0 where that step did not spike there
 * (KS_VFMA is_sparse: the interpreter skips it, the CPU adds 0 * w, the same bits). Each tile
 * still sums its own step's terms in (kh, kw, channel) order. A neuron's spikes at neighbouring
 * steps overlap: on the conv SNN's c2 (trained weights, batch 1) the union is 0.73 of the two
 * lists' sum, and its inner loop is bound by the widening of the 16-bit weight rows. The same
 * for one tile of all channels (the registers hold two), bits in, T >= 2, layer by layer. */
static bool
pairs_rows(Lower *lw, const Conv *cv, bool is_batched)
{
    return is_batched && lw->T >= 2 && bits_of(lw, cv->x) == 1 && cv->d.G == 1 &&
           cv->d.Og <= cv->nt;
}

/* pair rp of rows: steps t = 2 (rp / B) and t + 1 (t again where t + 1 == T: the same sums
 * stored twice) of sample rp % B, as cv->ps and cv->ps1 */
static void
pair_rows(Lower *lw, Cur c, Conv *cv, KExpr *rp)
{
    KExpr *B = kx_kind(lw->p, KX_BATCH);
    int r0v = local(lw, "r0", KT_I64), r1v = local(lw, "r1", KT_I64);
    KExpr *t0 = bin(lw, KB_MUL, bin(lw, KB_DIV, rp, B), ci(lw, 2));
    s_assign(lw, c, r0v, bin(lw, KB_ADD, bin(lw, KB_MUL, t0, B), bin(lw, KB_REM, rp, B)));
    KExpr *next = B; /* t + 1 < T, or the last step of an odd T */
    if (lw->T % 2)
        next =
            bin(lw, KB_MUL, B, bin(lw, KB_MIN, ci(lw, 1), bin(lw, KB_SUB, ci(lw, lw->T - 1), t0)));
    s_assign(lw, c, r1v, bin(lw, KB_ADD, var(lw, r0v), next));
    memset(&cv->ps, 0, sizeof cv->ps);
    memset(&cv->ps1, 0, sizeof cv->ps1);
    cv->ps.r = var(lw, r0v);
    cv->ps1.r = var(lw, r1v);
}

static KExpr *
row_pairs(Lower *lw)
{
    return bin(lw, KB_MUL, ci(lw, (lw->T + 1) / 2), kx_kind(lw->p, KX_BATCH));
}

/* for rp in 0..ceil(T/2)*B parallel: the pair's rows (pair_rows) */
static Cur
open_row_pairs(Lower *lw, Conv *cv)
{
    KExpr *rp;
    KStmt *f = loop(lw, top(lw), "rp", row_pairs(lw), true, &rp);
    pair_rows(lw, body(f), cv, rp);
    return body(f);
}

/* Paired rows' sums in a kernel of their own, after the one that lists every pair's spikes: its
 * threads share (output row, pair) iterations rather than pairs, output rows outer, each pair's
 * rows turned by rp * OH / pairs, so that each thread's contiguous share holds every pair, and at
 * batch 1 the top half of one pair's rows with the bottom half of the other's. By pair, the 2
 * pairs of T = 4 at batch 1 made 2 iterations whose spikes differ by a third (steps 2 and 3 fire
 * more than 0 and 1: the IF neurons start from rest), and one thread waited for the other. Rows
 * interleaved between the threads (even, odd) were slower still wherever the two cores are far
 * apart: a channel's output row is 14 floats, so neighbouring rows share cache lines, and both
 * threads wrote them. The lists kernel has no node: its time is the layer's, its FLOPs counted
 * once (--profile). */
static Cur
open_pair_sums(Lower *lw, Conv *cv)
{
    const char *name = lw->k.name, *what = lw->k.what;
    lw->k.name = arena_printf(&lw->p->arena, "%s_lists", name);
    lw->k.what = arena_printf(&lw->p->arena,
                              "%s; the spikes of steps t and t + 1 listed by input "
                              "pixel",
                              what);
    lw->k.nnodes = 0;
    end_kernel(lw);
    begin_kernel(lw, cv->v,
                 arena_printf(&lw->p->arena, "%s; summed by (output row, steps t and t + 1)", what),
                 false);
    lw->k.name = name;
    KExpr *u, *np = row_pairs(lw);
    KStmt *f = loop(lw, top(lw), "u", bin(lw, KB_MUL, ci(lw, cv->d.OH), np), true, &u);
    int rpv = local(lw, "rp", KT_I64), ohv = local(lw, "oh", KT_I64);
    s_assign(lw, body(f), rpv, bin(lw, KB_REM, u, np));
    KExpr *j = bin(lw, KB_DIV, u, np), *rp = var(lw, rpv);
    KExpr *turn = bin(lw, KB_DIV, bin(lw, KB_MUL, rp, ci(lw, cv->d.OH)), np);
    s_assign(lw, body(f), ohv, bin(lw, KB_REM, bin(lw, KB_ADD, j, turn), ci(lw, cv->d.OH)));
    cv->row_oh = var(lw, ohv);
    pair_rows(lw, body(f), cv, rp);
    return body(f);
}

/* A training step's weight can leave the finite range, where skipping a zero spike's terms and
 * adding 0 * w differ (NaN, as PyTorch's training computes it). A kernel of its own notes whether
 * any weight of the layer is not finite (w - w is then NaN, not 0), in one byte; every row is then
 * summed by the tiled kernel's pixel blocks, zeros too. With finite weights a zero term changes no
 * sum (each starts from +0, and fma(0, w, acc) is acc for finite w and acc not -0, which no sum
 * from +0 becomes), so the lists give the tiled kernel's bits. A listed term costs about twice a
 * dense one here (a 128-channel weight row loaded per listed channel, where the pixel blocks load
 * each row once for 4 pixels): a row whose input spikes at more than this percentage is summed
 * by the pixel blocks too (c2 of the conv net, 10 steps: lists 0.378 s against 0.414 at 33% input
 * spikes, 0.448 against 0.411 at 36%). */
enum { LISTS_MAX_PERCENT = 35 };

static KExpr *
conv_weights_nonfinite(Lower *lw, const Conv *cv)
{
    const char *name = lw->k.name, *what = lw->k.what, *vn = value_name(lw, cv->v);
    int flag = scratch_buf_sized(lw, arena_printf(&lw->p->arena, "%s.nonfinite", vn), KT_U8,
                                 (KSize){0, 1});
    lw->k.name = arena_printf(&lw->p->arena, "%s_finite", name);
    lw->k.what = arena_printf(&lw->p->arena, "%s; whether every weight is finite", what);
    s_store(lw, top(lw), flag, ci(lw, 0), ci(lw, 0));
    const KBuf *w = &lw->p->bufs[cv->w];
    KExpr *i;
    KStmt *fi = loop(lw, top(lw), "i", ci(lw, w->size.fixed), false, &i);
    KExpr *x = kx_load(lw->p, cv->w, i);
    KStmt *bad =
        s_if(lw, body(fi), bin(lw, KB_NE, bin(lw, KB_SUB, x, x), kx_const(lw->p, KT_F32, 0)));
    s_store(lw, body(bad), flag, ci(lw, 0), ci(lw, 1));
    bool is_step = lw->k.is_step;
    end_kernel(lw);
    begin_kernel(lw, cv->v, what, is_step);
    lw->k.name = name;
    return to(lw, KT_I64, kx_load(lw->p, flag, ci(lw, 0)));
}

/* conv2d over spikes: each row first lists, for every input pixel and group, the channels that
 * spike there (count[g][q], list[g][q][n] = cg), then gathers each output pixel over its taps and
 * their listed channels only. In a training step (CPU, spikes in bytes) too: the same terms in the
 * same order as the tiled kernel, whose place it takes (kir_lower.c layer_kind), the weight in
 * the tiled kernel's layout (the backward reads it), and a row summed by the tiled kernel's pixel
 * blocks where its input spikes too often or a weight is not finite (conv_weights_nonfinite). */
void
lower_conv2d_events(Lower *lw, ValueId v)
{
    Conv cv = conv_geometry(lw, v);
    bool is_batched = ctx_of(lw, v) == CTX_BATCHED;
    int64_t HW = cv.d.H * cv.d.W, rows = is_batched ? lw->T : 1;
    KExpr *nonfinite = lw->train ? conv_weights_nonfinite(lw, &cv) : NULL;
    /* whole channel tiles: the weight packed tile by tile, [O/nt][Cg][KH][KW][nt], so that a tile's
     * rows are one contiguous block (Cg*KH*KW*nt values) instead of nt values every O: the rows a
     * pixel's terms pick then spread over all cache sets (measured on c2 below) */
    int64_t nt = tile_lanes(lw, lower_wide_vectors() ? CONV_NT_WIDE : CONV_NT);
    cv.nt = (int)nt;
    if (lw->m->nodes[v].op == OP_CONV2D && cv.d.G == 1 && cv.d.O % nt == 0 && nt < cv.d.O &&
        !lw->train) {
        KBuf *kb = &lw->p->bufs[cv.w];
        kb->nperm = 5;
        memcpy(kb->perm, (const int[]){0, 2, 3, 4, 1}, 5 * sizeof *kb->perm);
        kb->split = nt;
        cv.packed = nt;
    }
    const char *vn = value_name(lw, v);
    /* channel numbers in bytes where they fit (bit pairs: with the sign, twice the channel): the
     * list is as large as the input */
    int64_t entries = bits_of(lw, cv.x) == 2 ? 2 * cv.d.Cg : cv.d.Cg;
    cv.list = scratch_buf(lw, arena_printf(&lw->p->arena, "%s.spikes", vn),
                          entries <= 256 ? KT_U8 : KT_I64, cv.d.C * HW * rows);
    cv.count = scratch_buf(lw, arena_printf(&lw->p->arena, "%s.nspiking", vn), KT_I64,
                           cv.d.G * HW * rows);
    int64_t nterms = cv.d.KH * cv.d.KW * cv.d.Cg; /* at most, per output pixel */
    if (cv.d.Og > nt) { /* term lists for several tiles (conv_event_pixels) */
        cv.tap_w =
            scratch_buf(lw, arena_printf(&lw->p->arena, "%s.term_w", vn), KT_I64, nterms * rows);
        if (bits_of(lw, cv.x) != 1)
            cv.tap_x = scratch_buf(lw, arena_printf(&lw->p->arena, "%s.term_x", vn), lw->acc,
                                   nterms * rows);
    }
    if (pairs_rows(lw, &cv, is_batched)) {
        cv.flags =
            scratch_buf(lw, arena_printf(&lw->p->arena, "%s.flags", vn), KT_U8, cv.d.C * HW * rows);
    }
    Cur c = cv.flags >= 0 ? open_row_pairs(lw, &cv) : open_rows(lw, v, &cv.ps);
    if (nonfinite) {
        /* a training step: a row whose input spikes at more than LISTS_MAX_PERCENT, or any
         * weight not finite, is summed by the tiled kernel's pixel blocks instead (the same
         * terms, zeros added: the same bits with finite weights, and 0 * inf = NaN without) */
        int sv = local(lw, "nspikes", KT_I64);
        s_assign(lw, c, sv, ci(lw, 0));
        KExpr *e;
        KStmt *fe = loop(lw, c, "e", ci(lw, cv.d.C * HW), false, &e);
        Pos px = cv.ps;
        px.i = e;
        KExpr *spike =
            to(lw, KT_I64, bin(lw, KB_NE, to(lw, KT_I64, vload(lw, cv.x, &px)), ci(lw, 0)));
        s_assign(lw, body(fe), sv, bin(lw, KB_ADD, var(lw, sv), spike));
        KExpr *is_dense = bin(lw, KB_OR, bin(lw, KB_NE, nonfinite, ci(lw, 0)),
                              bin(lw, KB_GT, bin(lw, KB_MUL, var(lw, sv), ci(lw, 100)),
                                  ci(lw, LISTS_MAX_PERCENT * cv.d.C * HW)));
        KStmt *ifd = s_if(lw, c, is_dense);
        Conv tiled = cv;
        tiled.list = -1;
        conv_groups(lw, body(ifd), &tiled);
        c = els(ifd);
    }
    KExpr *row = row_of(&cv.ps), *z, *cg, *q;
    cv.terms = bin(lw, KB_MUL, row, ci(lw, nterms));
    KStmt *fz = loop(lw, c, "z", ci(lw, cv.d.G * HW), false, &z);
    s_store(lw, body(fz), cv.count, bin(lw, KB_ADD, bin(lw, KB_MUL, row, ci(lw, cv.d.G * HW)), z),
            ci(lw, 0));
    ConvList cl = {&cv, local(lw, "qi", KT_I64), local(lw, "n", KT_I64), -1, HW, -1, -1, NULL};
    if (cv.flags >= 0) cl.flagv = local(lw, "flag", KT_I64);
    if (is_bits(lw, cv.x) && HW % (8 / bits_of(lw, cv.x)) == 0) {
        /* channel by channel (each starts on a byte): the pixel is the element, no division */
        Cur in = conv_channels(lw, c, &cv, &cg);
        cl.cg = cg;
        KExpr *chan = bin(lw, KB_ADD, bin(lw, KB_MUL, cv.g, ci(lw, cv.d.Cg)), cg);
        KExpr *first = bin(lw, KB_MUL, chan, ci(lw, HW));
        if (cv.flags >= 0)
            for_bit_spikes_pair(lw, in, cv.x, &cv.ps, &cv.ps1, cl.flagv, first, HW, conv_list_pixel,
                                &cl);
        else
            for_bit_spikes(lw, in, cv.x, &cv.ps, first, HW, conv_list_pixel, &cl);
    } else if (is_bits(lw, cv.x)) {
        /* the row's spikes in element order: per pixel the channels still come in order */
        cl.ev = local(lw, "e", KT_I64);
        cl.chv = local(lw, "chan", KT_I64);
        if (cv.flags >= 0)
            for_bit_spikes_pair(lw, c, cv.x, &cv.ps, &cv.ps1, cl.flagv, ci(lw, 0), cv.d.C * HW,
                                conv_list_bit, &cl);
        else
            for_bit_spikes(lw, c, cv.x, &cv.ps, ci(lw, 0), cv.d.C * HW, conv_list_bit, &cl);
    } else {
        KStmt *fq = loop(lw, conv_channels(lw, c, &cv, &cg), "q", ci(lw, HW), false, &q);
        int xv = local(lw, "x", KT_F64);
        Pos px = cv.ps;
        KExpr *chan = bin(lw, KB_ADD, bin(lw, KB_MUL, cv.g, ci(lw, cv.d.Cg)), cg);
        px.i = bin(lw, KB_ADD, bin(lw, KB_MUL, chan, ci(lw, HW)), q);
        s_assign(lw, body(fq), xv, to(lw, KT_F64, vload(lw, cv.x, &px)));
        KExpr *is_listed = bin(lw, KB_NE, var(lw, xv), kx_const(lw->p, KT_F64, 0));
        if (lw->train) {
            /* a training step: appended without a branch (spikes at a third of the inputs
             * defeat its prediction): the entry stored at the count, which then grows by one
             * where it is listed (the count never passes the channel, so it stays in the
             * pixel's list) */
            s_assign(lw, body(fq), cl.qv, conv_count_index(lw, &cv, q));
            s_assign(lw, body(fq), cl.nv, kx_load(lw->p, cv.count, var(lw, cl.qv)));
            KExpr *at =
                bin(lw, KB_ADD, bin(lw, KB_MUL, var(lw, cl.qv), ci(lw, cv.d.Cg)), var(lw, cl.nv));
            s_store(lw, body(fq), cv.list, at, cg);
            s_store(lw, body(fq), cv.count, var(lw, cl.qv),
                    bin(lw, KB_ADD, var(lw, cl.nv), to(lw, KT_I64, is_listed)));
        } else {
            KStmt *nz = s_if(lw, body(fq), is_listed);
            conv_list_append(lw, body(nz), &cl, q, cg);
        }
    }
    if (cv.flags >= 0) c = open_pair_sums(lw, &cv);
    conv_groups(lw, c, &cv);
}

/* max (NaN propagates, padding never wins), avg (count_include_pad) and sum pooling */
