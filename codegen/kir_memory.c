/* The memory plan (MEMORY_REUSE): temporaries whose lifetimes do not overlap share storage. */
#include "codegen/lower.h"

#include <stdlib.h>
#include <string.h>

/* ---- the memory plan (MEMORY_REUSE) ---- */

static void
uses_expr(const KExpr *e, int ki, int *first, int *last)
{
    if (!e) return;
    if (e->kind == KX_LOAD) {
        if (ki < first[e->buf]) first[e->buf] = ki;
        if (ki > last[e->buf]) last[e->buf] = ki;
    }
    uses_expr(e->a, ki, first, last);
    uses_expr(e->b, ki, first, last);
    uses_expr(e->c, ki, first, last);
}

static void
uses_stmts(KStmt *const *s, int n, int ki, int *first, int *last)
{
    for (int i = 0; i < n; i++) {
        const KStmt *st = s[i];
        if (st->kind == KS_STORE || st->kind == KS_VLOAD || st->kind == KS_VFMA ||
            st->kind == KS_VSTORE || st->kind == KS_PREFETCH) {
            if (ki < first[st->buf]) first[st->buf] = ki;
            if (ki > last[st->buf]) last[st->buf] = ki;
        }
        uses_expr(st->lo, ki, first, last);
        uses_expr(st->hi, ki, first, last);
        uses_expr(st->index, ki, first, last);
        uses_expr(st->a, ki, first, last);
        uses_stmts(st->body, st->nbody, ki, first, last);
        uses_stmts(st->els, st->nels, ki, first, last);
    }
}

/* Temporaries whose lifetimes do not overlap share a slot (KBuf.slot). A lifetime is the span of
 * kernels that load or store the buffer, widened to a whole step loop it touches (the loop runs its
 * kernels T times in turn), to the start of the run for a buffer zeroed before it (not
 * written-first), to after the run for spike counts (read when it is over); GPU spike counts,
 * which keep totals across runs, never share. Largest first (at batch 64), each into the first slot
 * with no overlapping member: the greedy-by-size placement of inference engines. */
void
plan_memory(KProgram *p)
{
    plan_memory_with(p, NULL, NULL);
}

void
plan_memory_with(KProgram *p, const int *first_at, const int *last_at)
{
    int nb = p->nbufs, nk = p->nkernels;
    Arena scratch = {0}; /* freed at the end */
    int *first = arena_alloc(&scratch, ((size_t)nb + 1) * sizeof *first);
    int *last = arena_alloc(&scratch, ((size_t)nb + 1) * sizeof *last);
    int *order = arena_alloc(&scratch, ((size_t)nb + 1) * sizeof *order);
    for (int b = 0; b < nb; b++) {
        first[b] = INT32_MAX;
        last[b] = -1;
    }
    for (int k = 0; k < nk; k++)
        uses_stmts(p->kernels[k].body, p->kernels[k].nbody, k, first, last);
    for (int b = 0; b < nb; b++) {
        const KBuf *kb = &p->bufs[b];
        if (kb->kind != KB_TEMP || last[b] < 0) continue;
        if (!kb->is_written_first) first[b] = -1;
    }
    for (int i = 0; i < p->nstats; i++)
        last[p->stats[i].buf] = nk;
    for (int b = 0; b < nb && first_at; b++)
        if (last[b] >= 0 && first_at[b] >= 0 && first_at[b] < first[b]) first[b] = first_at[b];
    for (int b = 0; b < nb && last_at; b++)
        if (last[b] >= 0 && last_at[b] > last[b]) last[b] = last_at[b];
    for (int i = 0; i < nk;) {
        if (!p->kernels[i].is_step) {
            i++;
            continue;
        }
        int j = i;
        while (j < nk && p->kernels[j].is_step)
            j++;
        for (int b = 0; b < nb; b++)
            if (last[b] >= i && first[b] <= j - 1) {
                if (first[b] > i) first[b] = i;
                if (last[b] < j - 1) last[b] = j - 1;
            }
        i = j;
    }
    int n = 0;
    for (int b = 0; b < nb; b++)
        if (p->bufs[b].kind == KB_TEMP && !p->bufs[b].is_accumulator && last[b] >= 0)
            order[n++] = b;
    /* each buffer's bytes at batch 64, by which the plan chooses */
    int64_t *at64 = arena_alloc(&scratch, ((size_t)nb + 1) * sizeof *at64);
    for (int b = 0; b < nb; b++)
        at64[b] = kbytes(p->bufs[b].type, ksize_eval(p->bufs[b].size, 64));
    /* by bytes at batch 64, largest first; ties by when they start (greedy in start order
     * colours intervals with the fewest slots: the conv SNN's training step has ten buffers of
     * 24.5 MiB, and in buffer order they took 2 slots more than they ever overlap), then in buffer
     * order (a stable insertion sort) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            int64_t bx = at64[order[j]], by = at64[order[j - 1]];
            if (bx < by || (bx == by && first[order[j]] >= first[order[j - 1]])) break;
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int nslots = 0;
    for (int i = 0; i < n; i++) {
        int b = order[i], slot = 0;
        for (int s = 1; s <= nslots && !slot; s++) {
            bool is_free = true;
            for (int k = 0; k < i && is_free; k++) {
                int o = order[k];
                if (p->bufs[o].slot == s && first[o] <= last[b] && first[b] <= last[o])
                    is_free = false;
            }
            if (is_free) slot = s;
        }
        p->bufs[b].slot = slot ? slot : ++nslots;
    }
    /* A buffer much larger than the rest of its slot (the conv net's 49 MiB weight gradient,
     * computed at the step's end, among 24.5 MiB activations) makes that slot its size for the
     * whole run. Where w = 2..SPAN_MAX other slots are free for its whole lifetime, it covers
     * them instead (KBuf.span: the binders lay their regions out one after another, each at
     * least a w-th of it, rt_arena_layout) and its own slot shrinks to its next largest member,
     * when that saves more than the w slots grow (at batch 64). A slot is in one run at most. */
    enum { SPAN_MAX = 4 };
    int64_t *ssize = arena_alloc(&scratch, ((size_t)nslots + 2) * sizeof *ssize);
    int *run = arena_alloc(&scratch, ((size_t)nslots + 2) * sizeof *run); /* slot: run id + 1 */
    int(*runs)[SPAN_MAX] = arena_alloc(&scratch, ((size_t)n + 1) * sizeof *runs);
    int nruns = 0;
    for (int i = 0; i < n; i++) {
        int b = order[i], sl = p->bufs[b].slot;
        if (at64[b] > ssize[sl]) ssize[sl] = at64[b];
    }
    for (int i = 0; i < n; i++) {
        int l = order[i], s = p->bufs[l].slot;
        int64_t size = at64[l], second = 0;
        if (run[s]) continue;
        for (int k = 0; k < n; k++) {
            int o = order[k];
            if (o != l && p->bufs[o].slot == s && at64[o] > second) second = at64[o];
        }
        if (size - second < size / 4) continue; /* too little to gain */
        /* the free slots, largest first */
        int cand[SPAN_MAX], ncand = 0;
        for (int t = 1; t <= nslots; t++) {
            if (t == s || run[t]) continue;
            bool is_free = true;
            for (int k = 0; k < n && is_free; k++) {
                int o = order[k];
                is_free = p->bufs[o].slot != t || first[o] > last[l] || first[l] > last[o];
            }
            if (!is_free) continue;
            int at;
            if (ncand < SPAN_MAX)
                at = ncand++;
            else if (ssize[t] > ssize[cand[SPAN_MAX - 1]])
                at = SPAN_MAX - 1; /* in place of the smallest kept */
            else
                continue;
            cand[at] = t;
            for (; at > 0 && ssize[cand[at]] > ssize[cand[at - 1]]; at--) {
                int x = cand[at];
                cand[at] = cand[at - 1];
                cand[at - 1] = x;
            }
        }
        /* the span that saves the most: its own slot shrinks by size - second, the w slots
         * grow where they hold less than a w-th of it */
        int best = 0;
        int64_t best_net = 0;
        for (int w = 2; w <= ncand; w++) {
            int64_t part = (size + w - 1) / w, grow = 0;
            for (int k = 0; k < w; k++)
                grow += part > ssize[cand[k]] ? part - ssize[cand[k]] : 0;
            if (size - second - grow > best_net) {
                best_net = size - second - grow;
                best = w;
            }
        }
        if (best) {
            int64_t part = (size + best - 1) / best;
            for (int k = 0; k < best; k++) {
                runs[nruns][k] = cand[k];
                run[cand[k]] = nruns + 1;
                if (ssize[cand[k]] < part) ssize[cand[k]] = part;
            }
            p->bufs[l].slot = cand[0];
            p->bufs[l].span = best;
            nruns++;
            ssize[s] = second;
        }
    }
    /* a slot of one buffer is memory of its own (0); the shared ones numbered from 1 in order, a
     * run's slots one after another (a spanning buffer counts in each) */
    int *members = arena_alloc(&scratch, ((size_t)nslots + 2) * sizeof *members);
    int *renum = arena_alloc(&scratch, ((size_t)nslots + 2) * sizeof *renum);
    for (int b = 0; b < nb; b++) {
        const KBuf *kb = &p->bufs[b];
        for (int k = 0; k < (kb->span > 1 ? kb->span : 1); k++)
            members[kb->span > 1 ? runs[run[kb->slot] - 1][k] : kb->slot]++;
    }
    int nshared = 0;
    for (int b = 0; b < nb; b++) {
        int sl = p->bufs[b].slot;
        if (sl > 0 && members[sl] > 1 && !renum[sl]) {
            if (run[sl])
                for (int k = 0; k < SPAN_MAX && runs[run[sl] - 1][k]; k++)
                    renum[runs[run[sl] - 1][k]] = ++nshared;
            else
                renum[sl] = ++nshared;
        }
        p->bufs[b].slot = sl > 0 && members[sl] > 1 ? renum[sl] : 0;
    }
    arena_free(&scratch);
}
