/* Compiled kernels of the frontier solver: the same arithmetic as the numpy code, one plan at a time.
 *
 * `wattwise.pipeline.kernels` wraps these functions, checks the arrays they get (dtype, shape, C order) and
 * falls back to numpy (and scipy for the shortest paths) when this module was not built. Every function
 * does the floating-point operations of its numpy twin in the same order, so both give the same plans
 * to the last bit (tests/unit/pipeline/test_kernels.py compares them):
 *
 * - `track` and `polish`: `wattwise.pipeline.rounding.track` / `polish` for plans laid out plan-major,
 *   shape (plans, nodes) in node order, option indices as int32; nodes are visited in the rounding's row
 *   order (level after level). The plans of a block of BLOCK are visited together: per row, their start or
 *   end times are one vectorised max or min over contiguous events, then each picks its option.
 *   Within one level the numpy code updates all nodes at once; they never read each other, so visiting
 *   them one by one gives the same figures.
 *   Optionally (trailing arguments) they also give each output plan's sums of option energies and times,
 *   added in node order (numpy's sum over axis 0 of a node-major array), block by block while the rows are
 *   in cache.
 * - `node_finish`: the relaxed finish times of `RelaxedFrontier.node_times`, in seconds, plan-major.
 * - `node_durations`: the relaxed durations of chosen nodes (units, as doubles), plan-major.
 * - `dijkstra`: shortest distances from one node over non-negative weights (an infinite weight is no arc).
 *
 * Arrays are passed as Python buffers (numpy arrays): this file needs no numpy headers. The GIL is released
 * while a kernel runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EPS_S 1e-12
/* Plans interleaved in `track` and `polish`: independent chains the processor overlaps. */
#define BLOCK 8
/* An option index in a plan (int32 arrays: half the memory traffic of int64). */
typedef int32_t opt_t;

/* ---- buffers ------------------------------------------------------------------------------------- */

typedef struct {
    Py_buffer view;
    int held;
} Buf;

/* A C-contiguous buffer of exactly `count` items of `itemsize` bytes (writable if asked). */
static int get_buf(PyObject *obj, Buf *buf, Py_ssize_t count, Py_ssize_t itemsize, int writable, const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    buf->held = 0;
    if (PyObject_GetBuffer(obj, &buf->view, flags) < 0) {
        return -1;
    }
    buf->held = 1;
    if (buf->view.itemsize != itemsize || buf->view.len != count * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes, got %zd bytes of %zd-byte items", name,
                     count, itemsize, buf->view.len, buf->view.itemsize);
        return -1;
    }
    return 0;
}

static void release(Buf *bufs, int count) {
    for (int i = 0; i < count; i++) {
        if (bufs[i].held) {
            PyBuffer_Release(&bufs[i].view);
            bufs[i].held = 0;
        }
    }
}

/* What an entry point returns, its `count` buffers released: NULL where an error was set on the way (a
 * buffer, a check, memory), else None (its results are in its output buffers). */
static PyObject *answer(Buf *bufs, int count) {
    release(bufs, count);
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
}

/* An entry point's sizes out of range, before any buffer is held. */
static PyObject *bad_sizes(const char *kernel) {
    PyErr_Format(PyExc_ValueError, "%s: bad sizes", kernel);
    return NULL;
}

/* ---- option lookup (OptionMap.entry) ------------------------------------------------------------- */

/* Per row, the entries of its type are first..last (times strictly increasing, costs decreasing). The
 * answer of `OptionMap.entry` is the last entry whose time is at most budget + EPS_S, else the first: the
 * numpy code finds it through a dense table and a few steps forward; here a walk from a hint (the row's
 * previous answer: neighbouring plans mostly pick the same or a next option) finds the same entry while
 * everything it reads stays in L1. */
typedef struct {
    const int64_t *first; /* per row */
    const int64_t *last;
    const opt_t *choice;      /* per entry: global option index */
    const double *times;      /* per entry: its time (s) */
    Py_ssize_t entries;
} Picker;

static inline int64_t pick(const Picker *m, Py_ssize_t row, double budget, int64_t hint) {
    double limit = budget + EPS_S;
    int64_t lo = m->first[row], hi = m->last[row], e = hint;
    if (m->times[e] <= limit) {
        while (e < hi && m->times[e + 1] <= limit) e++;
    } else {
        while (e > lo && m->times[e] > limit) e--;
    }
    return e;
}

/* Indices into `Buf` arrays of the picker arguments (same order in track and polish). */
enum { P_FIRST, P_LAST, P_CHOICE, P_TIMES, P_COUNT };

/* Parse the picker: (first, last, choice, times); `rows` nodes. */
static int get_picker(PyObject *args_tuple, Py_ssize_t rows, Buf *bufs, Picker *m) {
    PyObject *first, *last, *choice, *times;
    if (!PyArg_ParseTuple(args_tuple, "OOOO", &first, &last, &choice, &times)) {
        return -1;
    }
    if (get_buf(first, &bufs[P_FIRST], rows, 8, 0, "first") < 0) return -1;
    if (get_buf(last, &bufs[P_LAST], rows, 8, 0, "last") < 0) return -1;
    if (get_buf(choice, &bufs[P_CHOICE], PyObject_Length(choice), sizeof(opt_t), 0, "choice") < 0) return -1;
    Py_ssize_t entries = bufs[P_CHOICE].view.len / (Py_ssize_t)sizeof(opt_t);
    if (get_buf(times, &bufs[P_TIMES], entries, 8, 0, "times") < 0) return -1;
    m->first = bufs[P_FIRST].view.buf;
    m->last = bufs[P_LAST].view.buf;
    m->choice = bufs[P_CHOICE].view.buf;
    m->times = bufs[P_TIMES].view.buf;
    m->entries = entries;
    for (Py_ssize_t r = 0; r < rows; r++) {
        if (m->first[r] < 0 || m->last[r] >= entries || m->first[r] > m->last[r]) {
            PyErr_SetString(PyExc_ValueError, "picker: entries out of range");
            return -1;
        }
    }
    for (Py_ssize_t e = 0; e < entries; e++) {
        if (isnan(m->times[e])) {
            PyErr_SetString(PyExc_ValueError, "picker: NaN time");
            return -1;
        }
    }
    return 0;
}

/* The DAG in rounding rows: order[p] = node at row p; preds/succs (rows x k) padded with row n. */
typedef struct {
    Py_ssize_t n, kp, ks;
    const int64_t *order;
    const int64_t *preds;
    const int64_t *succs;
} Layout;

static int check_rows(const int64_t *rows, Py_ssize_t count, Py_ssize_t n, const char *name) {
    for (Py_ssize_t i = 0; i < count; i++) {
        if (rows[i] < 0 || rows[i] > n) {
            PyErr_Format(PyExc_ValueError, "%s: row out of range", name);
            return -1;
        }
    }
    return 0;
}

static int check_order(const int64_t *order, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (order[i] < 0 || order[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "order: node out of range");
            return -1;
        }
    }
    return 0;
}

static int check_options(const opt_t *choice, Py_ssize_t count, Py_ssize_t options) {
    for (Py_ssize_t i = 0; i < count; i++) {
        if (choice[i] < 0 || choice[i] >= options) {
            PyErr_SetString(PyExc_ValueError, "choice: option out of range");
            return -1;
        }
    }
    return 0;
}

static int check_phases(const int64_t *slower, const int64_t *faster, Py_ssize_t plans, Py_ssize_t phases,
                        const char *name) {
    for (Py_ssize_t b = 0; b < plans; b++) {
        if (slower[b] < 0 || slower[b] >= phases || faster[b] < 0 || faster[b] >= phases) {
            PyErr_Format(PyExc_ValueError, "%s: phase out of range", name);
            return -1;
        }
    }
    return 0;
}

enum { EARLIEST, LATEST };

/* The latest or earliest (`which`) of `events` over one row's neighbours (`rows`, `count` of them, padded
 * with the virtual row), for every plan of a block at once (`out[k]`, k < BLOCK; lanes past the block's plans
 * hold figures nobody reads): `_latest_of` / `_earliest_of` of rounding.py, the same comparisons in the same
 * order. Rows of BLOCK contiguous events, so the compiler vectorises them (inlined, `which` a constant: one
 * loop per caller). */
static inline void extreme_block(const double *restrict events, const int64_t *rows, Py_ssize_t count, int which,
                                 double *restrict out) {
    const double *first = events + rows[0] * BLOCK;
    for (int k = 0; k < BLOCK; k++) out[k] = first[k];
    for (Py_ssize_t j = 1; j < count; j++) {
        const double *row = events + rows[j] * BLOCK;
        for (int k = 0; k < BLOCK; k++) {
            out[k] = (which == LATEST ? row[k] > out[k] : row[k] < out[k]) ? row[k] : out[k];
        }
    }
}

/* ---- splitting plans over threads ---------------------------------------------------------------- */

/* A kernel over plans [lo, hi) of one call; returns 0, or -1 when out of memory. */
typedef int (*RangeFn)(void *ctx, Py_ssize_t lo, Py_ssize_t hi);

typedef struct {
    RangeFn fn;
    void *ctx;
    Py_ssize_t lo, hi;
    int status;
} Part;

static void *run_part(void *arg) {
    Part *part = arg;
    part->status = part->fn(part->ctx, part->lo, part->hi);
    return NULL;
}

#define MAX_THREADS 64

/* Run `fn` over plans [0, plans) in up to `threads` parts of whole blocks (the GIL released): plans are
 * independent and every lookup finds the same option whatever its hint, so the figures do not depend on
 * the split. Where a thread cannot start, its part runs on this thread. -1 with a MemoryError where a part
 * ran out of memory. */
static int run_split(RangeFn fn, void *ctx, Py_ssize_t plans, Py_ssize_t threads) {
    Py_ssize_t blocks = (plans + BLOCK - 1) / BLOCK;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > blocks) threads = blocks;
    if (threads < 1) threads = 1;
    Part parts[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS];
    int status = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < threads; i++) {
        parts[i].fn = fn;
        parts[i].ctx = ctx;
        parts[i].lo = blocks * i / threads * BLOCK;
        parts[i].hi = blocks * (i + 1) / threads * BLOCK;
        if (parts[i].hi > plans) parts[i].hi = plans;
        parts[i].status = 0;
        started[i] = i > 0 && pthread_create(&ids[i], NULL, run_part, &parts[i]) == 0;
    }
    run_part(&parts[0]);
    for (Py_ssize_t i = 1; i < threads; i++) {
        if (started[i]) {
            pthread_join(ids[i], NULL);
        } else {
            run_part(&parts[i]);
        }
        if (parts[i].status < 0) status = -1;
    }
    if (parts[0].status < 0) status = -1;
    Py_END_ALLOW_THREADS
    if (status < 0) PyErr_NoMemory();
    return status;
}

/* ---- plan sums ------------------------------------------------------------------------------------ */

/* Optional sums of each output plan's option energies and times, filled by `track` and `polish` for each
 * block of plans while its rows are still in cache. */
typedef struct {
    const double *energy, *time; /* per option; NULL: no sums asked */
    Py_ssize_t options;
    double *out_e, *out_t;       /* per plan */
} Totals;

/* Plans b0 .. b0 + nb: the sums over each row, added in node order (numpy's sum over axis 0 of a node-major
 * array). The plans' sums are independent chains of additions: interleaved, they overlap. */
static inline void block_sums(const Totals *totals, const opt_t *choice, Py_ssize_t n, Py_ssize_t b0,
                              Py_ssize_t nb) {
    if (totals->energy == NULL) return;
    double se[BLOCK], st[BLOCK];
    const opt_t *c = choice + b0 * n;
    for (Py_ssize_t k = 0; k < nb; k++) {
        se[k] = totals->energy[c[k * n]];
        st[k] = totals->time[c[k * n]];
    }
    for (Py_ssize_t v = 1; v < n; v++) {
        for (Py_ssize_t k = 0; k < nb; k++) {
            opt_t o = c[k * n + v];
            se[k] += totals->energy[o];
            st[k] += totals->time[o];
        }
    }
    for (Py_ssize_t k = 0; k < nb; k++) {
        totals->out_e[b0 + k] = se[k];
        totals->out_t[b0 + k] = st[k];
    }
}

/* The optional trailing arguments `sums` (energy, time, out_energy, out_time) of `track` and `polish`: all four
 * or none (NULL). `bufs` holds 4 buffers. Every option the picker can output must index the tables. */
static int get_totals(PyObject *const sums[4], Py_ssize_t plans, const Picker *m, Buf *bufs, Totals *totals) {
    memset(totals, 0, sizeof(*totals));
    if (sums[0] == NULL || sums[0] == Py_None) return 0;
    if (get_buf(sums[0], &bufs[0], PyObject_Length(sums[0]), 8, 0, "energy") < 0) return -1;
    Py_ssize_t options = bufs[0].view.len / 8;
    if (get_buf(sums[1], &bufs[1], options, 8, 0, "time") < 0) return -1;
    if (get_buf(sums[2], &bufs[2], plans, 8, 1, "out_energy") < 0) return -1;
    if (get_buf(sums[3], &bufs[3], plans, 8, 1, "out_time_sum") < 0) return -1;
    *totals = (Totals){bufs[0].view.buf, bufs[1].view.buf, options, bufs[2].view.buf, bufs[3].view.buf};
    return check_options(m->choice, m->entries, options);
}

/* ---- what track and polish share ----------------------------------------------------------------- */

/* A `track` or `polish` call's picker, DAG layout, output plans (plan-major) and iteration times, and optional
 * sums; each kernel's job adds its own inputs. */
typedef struct {
    Picker m;
    Layout lay;
    opt_t *out_choice;
    double *out_time;
    Totals totals;
} PlanJob;

/* Indices into `Buf` arrays of the DAG layout, after the picker's (track has no succs); each kernel's own
 * buffers follow. */
enum { L_ORDER = P_COUNT, L_PREDS, L_SUCCS, L_COUNT };

/* The picker and the DAG layout (no succs where `succs_o` is NULL) into bufs[0 .. L_COUNT); `check_layout`
 * checks its rows once the kernel's own buffers are fetched too. */
static int get_layout(PyObject *picker_args, Py_ssize_t n, Py_ssize_t kp, Py_ssize_t ks, PyObject *order_o,
                      PyObject *preds_o, PyObject *succs_o, Buf *bufs, PlanJob *plan) {
    if (get_picker(picker_args, n, bufs, &plan->m) < 0) return -1;
    if (get_buf(order_o, &bufs[L_ORDER], n, 8, 0, "order") < 0) return -1;
    if (get_buf(preds_o, &bufs[L_PREDS], n * kp, 8, 0, "preds") < 0) return -1;
    if (succs_o != NULL && get_buf(succs_o, &bufs[L_SUCCS], n * ks, 8, 0, "succs") < 0) return -1;
    plan->lay = (Layout){n, kp, ks, bufs[L_ORDER].view.buf, bufs[L_PREDS].view.buf,
                         succs_o == NULL ? NULL : bufs[L_SUCCS].view.buf};
    return 0;
}

static int check_layout(const Layout *lay) {
    if (check_order(lay->order, lay->n) < 0 || check_rows(lay->preds, lay->n * lay->kp, lay->n, "preds") < 0) {
        return -1;
    }
    return lay->succs == NULL ? 0 : check_rows(lay->succs, lay->n * lay->ks, lay->n, "succs");
}

/* The end of `track` and `polish`, their job checked: the optional sums' buffers (`get_totals`), then `fn` over
 * the plans. */
static int run_plans(RangeFn fn, void *job, PlanJob *plan, PyObject *const sums[4], Py_ssize_t plans,
                     Py_ssize_t threads, Buf *bufs) {
    if (get_totals(sums, plans, &plan->m, bufs, &plan->totals) < 0) return -1;
    return run_split(fn, job, plans, threads);
}

/* ---- track ---------------------------------------------------------------------------------------- */

typedef struct {
    PlanJob plan;
    const double *target;
} TrackJob;

static int track_range(void *ctx, Py_ssize_t lo, Py_ssize_t hi) {
    const TrackJob *job = ctx;
    const Picker *m = &job->plan.m;
    Py_ssize_t n = job->plan.lay.n, kp = job->plan.lay.kp;
    const int64_t *order = job->plan.lay.order, *preds = job->plan.lay.preds;
    double *finish = calloc((size_t)((n + 1) * BLOCK), sizeof(double));
    int64_t *hint = malloc(sizeof(int64_t) * (size_t)n);
    if (!finish || !hint) {
        free(finish);
        free(hint);
        return -1;
    }
    memcpy(hint, m->first, sizeof(int64_t) * (size_t)n);
    for (Py_ssize_t k = 0; k < BLOCK; k++) finish[n * BLOCK + k] = 0.0;
    for (Py_ssize_t b0 = lo; b0 < hi; b0 += BLOCK) {
        Py_ssize_t nb = hi - b0 < BLOCK ? hi - b0 : BLOCK;
        double longest[BLOCK];
        for (Py_ssize_t k = 0; k < BLOCK; k++) longest[k] = -INFINITY;
        for (Py_ssize_t p = 0; p < n; p++) {
            const int64_t *pr = preds + p * kp;
            int64_t node = order[p];
            int64_t e = hint[p];
            double start[BLOCK];
            extreme_block(finish, pr, kp, LATEST, start);
            for (Py_ssize_t k = 0; k < nb; k++) {
                e = pick(m, p, job->target[(b0 + k) * n + node] - start[k], e);
                job->plan.out_choice[(b0 + k) * n + node] = m->choice[e];
                double f = start[k] + m->times[e];
                finish[p * BLOCK + k] = f;
                if (f > longest[k]) longest[k] = f;
            }
            hint[p] = e;
        }
        for (Py_ssize_t k = 0; k < nb; k++) job->plan.out_time[b0 + k] = longest[k];
        block_sums(&job->plan.totals, job->plan.out_choice, n, b0, nb);
    }
    free(finish);
    free(hint);
    return 0;
}

static PyObject *k_track(PyObject *self, PyObject *args) {
    PyObject *picker_args, *order_o, *preds_o, *target_o, *out_choice_o, *out_time_o;
    PyObject *sums[4] = {NULL, NULL, NULL, NULL};
    Py_ssize_t n, kp, plans, threads;
    if (!PyArg_ParseTuple(args, "OnnnnOOOOO|OOOO", &picker_args, &n, &kp, &plans, &threads, &order_o, &preds_o,
                          &target_o, &out_choice_o, &out_time_o, &sums[0], &sums[1], &sums[2], &sums[3])) {
        return NULL;
    }
    if (n < 1 || kp < 1 || plans < 0) return bad_sizes("track");
    Buf bufs[L_COUNT + 7];
    memset(bufs, 0, sizeof(bufs));
    TrackJob job;
    if (get_layout(picker_args, n, kp, 0, order_o, preds_o, NULL, bufs, &job.plan) < 0) goto done;
    if (get_buf(target_o, &bufs[L_COUNT], plans * n, 8, 0, "target") < 0) goto done;
    if (get_buf(out_choice_o, &bufs[L_COUNT + 1], plans * n, sizeof(opt_t), 1, "out_choice") < 0) goto done;
    if (get_buf(out_time_o, &bufs[L_COUNT + 2], plans, 8, 1, "out_time") < 0) goto done;
    job.target = bufs[L_COUNT].view.buf;
    job.plan.out_choice = bufs[L_COUNT + 1].view.buf;
    job.plan.out_time = bufs[L_COUNT + 2].view.buf;
    if (check_layout(&job.plan.lay) < 0) goto done;
    run_plans(track_range, &job, &job.plan, sums, plans, threads, &bufs[L_COUNT + 3]);
done:
    return answer(bufs, L_COUNT + 7);
}

/* ---- polish --------------------------------------------------------------------------------------- */

typedef struct {
    PlanJob plan;
    const double *option_time;
    const opt_t *choice_in;
    const double *deadline;
} PolishJob;

static int polish_range(void *ctx, Py_ssize_t lo, Py_ssize_t hi) {
    const PolishJob *job = ctx;
    const Picker *m = &job->plan.m;
    Py_ssize_t n = job->plan.lay.n, kp = job->plan.lay.kp, ks = job->plan.lay.ks;
    const int64_t *order = job->plan.lay.order, *preds = job->plan.lay.preds, *succs = job->plan.lay.succs;
    /* Per row and plan of the block: time, latest finish, events (begin, finish) and the forward pass's
       entry; the virtual row n closes each. */
    size_t cells = (size_t)((n + 1) * BLOCK);
    double *work = calloc(4 * cells, sizeof(double));
    int32_t *ch = malloc(sizeof(int32_t) * cells);
    int64_t *hint = malloc(sizeof(int64_t) * (size_t)n);
    if (!work || !ch || !hint) {
        free(work);
        free(ch);
        free(hint);
        return -1;
    }
    double *t = work, *latest = work + cells, *begin = work + 2 * cells, *finish = work + 3 * cells;
    memcpy(hint, m->first, sizeof(int64_t) * (size_t)n);
    for (Py_ssize_t b0 = lo; b0 < hi; b0 += BLOCK) {
        Py_ssize_t nb = hi - b0 < BLOCK ? hi - b0 : BLOCK;
        const double *deadline = job->deadline + b0;
        for (Py_ssize_t p = 0; p < n; p++) {
            int64_t node = order[p];
            for (Py_ssize_t k = 0; k < nb; k++) {
                t[p * BLOCK + k] = job->option_time[job->choice_in[(b0 + k) * n + node]];
            }
        }
        /* Latest finish of every node with the others as they are (`begin` holds latest starts). */
        for (Py_ssize_t k = 0; k < nb; k++) begin[n * BLOCK + k] = deadline[k];
        for (Py_ssize_t p = n - 1; p >= 0; p--) {
            const int64_t *su = succs + p * ks;
            double *end = latest + p * BLOCK;
            extreme_block(begin, su, ks, EARLIEST, end);
            for (int k = 0; k < BLOCK; k++) begin[p * BLOCK + k] = end[k] - t[p * BLOCK + k];
        }
        /* Forward: the cheapest option finishing by the latest finish, predecessors as now. */
        for (Py_ssize_t k = 0; k < nb; k++) finish[n * BLOCK + k] = 0.0;
        for (Py_ssize_t p = 0; p < n; p++) {
            const int64_t *pr = preds + p * kp;
            int64_t e = hint[p];
            double start[BLOCK];
            extreme_block(finish, pr, kp, LATEST, start);
            for (Py_ssize_t k = 0; k < nb; k++) {
                e = pick(m, p, latest[p * BLOCK + k] - start[k], e);
                ch[p * BLOCK + k] = e;
                t[p * BLOCK + k] = m->times[e];
                finish[p * BLOCK + k] = start[k] + m->times[e];
            }
            hint[p] = e;
        }
        /* Backward: the cheapest option starting no earlier than the forward pass's start. */
        double earliest[BLOCK];
        for (Py_ssize_t k = 0; k < nb; k++) {
            begin[n * BLOCK + k] = deadline[k];
            earliest[k] = INFINITY;
        }
        for (Py_ssize_t p = n - 1; p >= 0; p--) {
            const int64_t *su = succs + p * ks;
            int64_t node = order[p];
            double end_k[BLOCK];
            extreme_block(begin, su, ks, EARLIEST, end_k);
            for (Py_ssize_t k = 0; k < nb; k++) {
                double end = end_k[k];
                Py_ssize_t cell = p * BLOCK + k;
                int64_t e = pick(m, p, end - (finish[cell] - t[cell]), ch[cell]);
                job->plan.out_choice[(b0 + k) * n + node] = m->choice[e];
                double bg = end - m->times[e];
                begin[cell] = bg;
                if (bg < earliest[k]) earliest[k] = bg;
            }
        }
        for (Py_ssize_t k = 0; k < nb; k++) job->plan.out_time[b0 + k] = deadline[k] - earliest[k];
        block_sums(&job->plan.totals, job->plan.out_choice, n, b0, nb);
    }
    free(work);
    free(ch);
    free(hint);
    return 0;
}

static PyObject *k_polish(PyObject *self, PyObject *args) {
    PyObject *picker_args, *order_o, *preds_o, *succs_o, *option_time_o, *choice_o, *deadline_o, *out_choice_o,
        *out_time_o;
    PyObject *sums[4] = {NULL, NULL, NULL, NULL};
    Py_ssize_t n, kp, ks, plans, threads;
    if (!PyArg_ParseTuple(args, "OnnnnnOOOOOOOO|OOOO", &picker_args, &n, &kp, &ks, &plans, &threads, &order_o,
                          &preds_o, &succs_o, &option_time_o, &choice_o, &deadline_o, &out_choice_o, &out_time_o,
                          &sums[0], &sums[1], &sums[2], &sums[3])) {
        return NULL;
    }
    if (n < 1 || kp < 1 || ks < 1 || plans < 0) return bad_sizes("polish");
    Buf bufs[L_COUNT + 9];
    memset(bufs, 0, sizeof(bufs));
    PolishJob job;
    if (get_layout(picker_args, n, kp, ks, order_o, preds_o, succs_o, bufs, &job.plan) < 0) goto done;
    if (get_buf(option_time_o, &bufs[L_COUNT], PyObject_Length(option_time_o), 8, 0, "option_time") < 0) goto done;
    if (get_buf(choice_o, &bufs[L_COUNT + 1], plans * n, sizeof(opt_t), 0, "choice") < 0) goto done;
    if (get_buf(deadline_o, &bufs[L_COUNT + 2], plans, 8, 0, "deadline") < 0) goto done;
    if (get_buf(out_choice_o, &bufs[L_COUNT + 3], plans * n, sizeof(opt_t), 1, "out_choice") < 0) goto done;
    if (get_buf(out_time_o, &bufs[L_COUNT + 4], plans, 8, 1, "out_time") < 0) goto done;
    job.option_time = bufs[L_COUNT].view.buf;
    Py_ssize_t options = bufs[L_COUNT].view.len / 8;
    job.choice_in = bufs[L_COUNT + 1].view.buf;
    job.deadline = bufs[L_COUNT + 2].view.buf;
    job.plan.out_choice = bufs[L_COUNT + 3].view.buf;
    job.plan.out_time = bufs[L_COUNT + 4].view.buf;
    if (check_layout(&job.plan.lay) < 0 || check_options(job.choice_in, plans * n, options) < 0) goto done;
    run_plans(polish_range, &job, &job.plan, sums, plans, threads, &bufs[L_COUNT + 5]);
done:
    return answer(bufs, L_COUNT + 9);
}

/* ---- the relaxed potentials of node_durations and node_finish ------------------------------------ */

/* Per phase a row of `width` potentials (units: two, then a start and a finish per node); per plan the two
 * phases it lies between and the shift of the faster one. */
typedef struct {
    Py_ssize_t width;
    const int64_t *pot, *slower, *faster, *shift;
} Potentials;

/* The potentials' arguments `pots` (potentials, slower, faster, shift) into bufs[0 .. 4): `phases` rows for `n`
 * nodes, and per plan its two phases and shift. */
static int get_potentials(PyObject *const pots[4], Py_ssize_t phases, Py_ssize_t width, Py_ssize_t n,
                          Py_ssize_t plans, Buf *bufs, Potentials *p, const char *kernel) {
    if (phases < 1 || n < 1 || width < 2 * n + 2 || plans < 0) {
        bad_sizes(kernel);
        return -1;
    }
    if (get_buf(pots[0], &bufs[0], phases * width, 8, 0, "potentials") < 0) return -1;
    if (get_buf(pots[1], &bufs[1], plans, 8, 0, "slower") < 0) return -1;
    if (get_buf(pots[2], &bufs[2], plans, 8, 0, "faster") < 0) return -1;
    if (get_buf(pots[3], &bufs[3], plans, 8, 0, "shift") < 0) return -1;
    *p = (Potentials){width, bufs[0].view.buf, bufs[1].view.buf, bufs[2].view.buf, bufs[3].view.buf};
    return 0;
}

/* A plan's rows of potentials: its slower phase's, its faster phase's and the shift of the faster one. */
typedef struct {
    const int64_t *slower, *faster;
    int64_t shift;
} PlanRows;

static inline PlanRows plan_rows(const Potentials *p, Py_ssize_t b) {
    return (PlanRows){p->pot + p->slower[b] * p->width, p->pot + p->faster[b] * p->width, p->shift[b]};
}

/* A plan's relaxed potential `i`: the earlier of its two phases' (the faster one's shifted). */
static inline int64_t relaxed(PlanRows r, Py_ssize_t i) {
    int64_t a = r.slower[i], c = r.faster[i] + r.shift;
    return a < c ? a : c;
}

/* ---- node_durations ------------------------------------------------------------------------------- */

/* The relaxed durations of `RelaxedFrontier.durations(events(...))` (units, as exact doubles) of the nodes
 * `columns` only, plan-major (plans, len(columns)): one instruction type's nodes at a time, contiguous, as
 * `relaxed_cost_by_type_j` interpolates them. */
static PyObject *k_node_durations(PyObject *self, PyObject *args) {
    PyObject *pots[4], *hi_o, *columns_o, *out_o;
    Py_ssize_t phases, width, n, plans;
    if (!PyArg_ParseTuple(args, "nnnnOOOOOOO", &phases, &width, &n, &plans, &pots[0], &pots[1], &pots[2], &pots[3],
                          &hi_o, &columns_o, &out_o)) {
        return NULL;
    }
    Buf bufs[7];
    memset(bufs, 0, sizeof(bufs));
    Potentials p;
    if (get_potentials(pots, phases, width, n, plans, bufs, &p, "node_durations") < 0) goto done;
    if (get_buf(hi_o, &bufs[4], n, 8, 0, "hi") < 0) goto done;
    if (get_buf(columns_o, &bufs[5], PyObject_Length(columns_o), 8, 0, "columns") < 0) goto done;
    Py_ssize_t m = bufs[5].view.len / 8;
    if (get_buf(out_o, &bufs[6], plans * m, 8, 1, "out") < 0) goto done;
    {
        const int64_t *hi = bufs[4].view.buf, *columns = bufs[5].view.buf;
        double *out = bufs[6].view.buf;
        if (check_phases(p.slower, p.faster, plans, phases, "node_durations") < 0) goto done;
        for (Py_ssize_t j = 0; j < m; j++) {
            if (columns[j] < 0 || columns[j] >= n) {
                PyErr_SetString(PyExc_ValueError, "node_durations: column out of range");
                goto done;
            }
        }
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t b = 0; b < plans; b++) {
            PlanRows r = plan_rows(&p, b);
            double *o = out + b * m;
            for (Py_ssize_t j = 0; j < m; j++) {
                Py_ssize_t v = columns[j];
                int64_t d = relaxed(r, 3 + 2 * v) - relaxed(r, 2 + 2 * v);
                o[j] = (double)(d < hi[v] ? d : hi[v]);
            }
        }
        Py_END_ALLOW_THREADS
    }
done:
    return answer(bufs, 7);
}

/* ---- node_finish ---------------------------------------------------------------------------------- */

static PyObject *k_node_finish(PyObject *self, PyObject *args) {
    PyObject *pots[4], *out_o;
    Py_ssize_t phases, width, n, plans;
    double resolution;
    if (!PyArg_ParseTuple(args, "nnnndOOOOO", &phases, &width, &n, &plans, &resolution, &pots[0], &pots[1],
                          &pots[2], &pots[3], &out_o)) {
        return NULL;
    }
    Buf bufs[5];
    memset(bufs, 0, sizeof(bufs));
    Potentials p;
    if (get_potentials(pots, phases, width, n, plans, bufs, &p, "node_finish") < 0) goto done;
    if (get_buf(out_o, &bufs[4], plans * n, 8, 1, "out") < 0) goto done;
    {
        double *out = bufs[4].view.buf;
        if (check_phases(p.slower, p.faster, plans, phases, "node_finish") < 0) goto done;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t b = 0; b < plans; b++) {
            PlanRows r = plan_rows(&p, b);
            double *o = out + b * n;
            for (Py_ssize_t v = 0; v < n; v++) o[v] = (double)relaxed(r, 3 + 2 * v) * resolution;
        }
        Py_END_ALLOW_THREADS
    }
done:
    return answer(bufs, 5);
}

/* ---- dijkstra ------------------------------------------------------------------------------------- */

typedef struct {
    double key;
    int64_t node;
} HeapItem;

static void heap_push(HeapItem *heap, Py_ssize_t *size, double key, int64_t node) {
    Py_ssize_t i = (*size)++;
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (heap[parent].key <= key) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i].key = key;
    heap[i].node = node;
}

static HeapItem heap_pop(HeapItem *heap, Py_ssize_t *size) {
    HeapItem top = heap[0];
    HeapItem last = heap[--(*size)];
    Py_ssize_t i = 0, n = *size;
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && heap[child + 1].key < heap[child].key) child++;
        if (heap[child].key >= last.key) break;
        heap[i] = heap[child];
        i = child;
    }
    if (n > 0) heap[i] = last;
    return top;
}

static PyObject *k_dijkstra(PyObject *self, PyObject *args) {
    PyObject *indptr_o, *indices_o, *weights_o, *out_o;
    Py_ssize_t nodes, source;
    if (!PyArg_ParseTuple(args, "nnOOOO", &nodes, &source, &indptr_o, &indices_o, &weights_o, &out_o)) {
        return NULL;
    }
    if (nodes < 1 || source < 0 || source >= nodes) return bad_sizes("dijkstra");
    Buf bufs[4];
    memset(bufs, 0, sizeof(bufs));
    if (get_buf(indptr_o, &bufs[0], nodes + 1, 8, 0, "indptr") < 0) goto done;
    if (get_buf(indices_o, &bufs[1], PyObject_Length(indices_o), 8, 0, "indices") < 0) goto done;
    Py_ssize_t arcs = bufs[1].view.len / 8;
    if (get_buf(weights_o, &bufs[2], arcs, 8, 0, "weights") < 0) goto done;
    if (get_buf(out_o, &bufs[3], nodes, 8, 1, "out") < 0) goto done;
    {
        const int64_t *indptr = bufs[0].view.buf, *indices = bufs[1].view.buf;
        const double *w = bufs[2].view.buf;
        double *dist = bufs[3].view.buf;
        if (indptr[0] != 0 || indptr[nodes] != arcs) {
            PyErr_SetString(PyExc_ValueError, "dijkstra: indptr does not span the arcs");
            goto done;
        }
        for (Py_ssize_t v = 0; v < nodes; v++) {
            if (indptr[v + 1] < indptr[v]) {
                PyErr_SetString(PyExc_ValueError, "dijkstra: indptr not ascending");
                goto done;
            }
        }
        for (Py_ssize_t a = 0; a < arcs; a++) {
            if (indices[a] < 0 || indices[a] >= nodes) {
                PyErr_SetString(PyExc_ValueError, "dijkstra: arc head out of range");
                goto done;
            }
            if (w[a] < 0 || isnan(w[a])) {
                PyErr_SetString(PyExc_ValueError, "dijkstra: negative or NaN weight");
                goto done;
            }
        }
        /* Lazy deletion: each arc pushes at most once, so the heap holds at most arcs + 1 items. */
        HeapItem *heap = malloc(sizeof(HeapItem) * (size_t)(arcs + 1));
        char *done_flag = calloc((size_t)nodes, 1);
        if (!heap || !done_flag) {
            free(heap);
            free(done_flag);
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t v = 0; v < nodes; v++) dist[v] = INFINITY;
        Py_ssize_t size = 0;
        dist[source] = 0.0;
        heap_push(heap, &size, 0.0, source);
        while (size > 0) {
            HeapItem item = heap_pop(heap, &size);
            int64_t u = item.node;
            if (done_flag[u]) continue;
            done_flag[u] = 1;
            for (int64_t a = indptr[u]; a < indptr[u + 1]; a++) {
                if (isinf(w[a])) continue;
                int64_t v = indices[a];
                double d = item.key + w[a];
                if (d < dist[v]) {
                    dist[v] = d;
                    heap_push(heap, &size, d, v);
                }
            }
        }
        Py_END_ALLOW_THREADS
        free(heap);
        free(done_flag);
    }
done:
    return answer(bufs, 4);
}

static PyMethodDef methods[] = {
    {"track", k_track, METH_VARARGS, "Track relaxed finish times with real options (see rounding.track)."},
    {"polish", k_polish, METH_VARARGS, "Polish plans (see rounding.polish)."},
    {"node_durations", k_node_durations, METH_VARARGS, "Relaxed durations (units, as doubles) of some nodes, plan-major."},
    {"node_finish", k_node_finish, METH_VARARGS, "Relaxed finish times (s) of every node, plan-major."},
    {"dijkstra", k_dijkstra, METH_VARARGS, "Shortest distances from a source over non-negative weights."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels", "Compiled kernels of the frontier solver (see kernels.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
