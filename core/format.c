/* format.c: tensor_format, PyTorch-style printing ("tensor([1., 2.])").
 *
 * Follows torch/_tensor_str.py under print options (PrintOptions, whose
 * default is PyTorch's: precision 4, threshold 1000, edgeitems 3, linewidth
 * 80; the numbers below are those defaults):
 *  - one formatter per tensor, chosen from the nonzero finite values (only
 *    the printed edge values when summarizing): integer-valued floats print
 *    as "1.", scientific "1.0000e+08" when max/min > 1000, max > 1e8 or
 *    min < 1e-4, else "%.4f"; every element is
 *    right-aligned to the widest of those values (nan/inf do not count);
 *    a sci_mode option replaces the choice;
 *  - more than 1000 elements: 3 edge items and "..." in every dim longer
 *    than 6; 1-D rows wrap so a line holds floor((80 - indent) / (width + 2))
 *    elements;
 *  - suffixes device, size (empty tensors), dtype (not for float32, int64,
 *    bool), grad_fn or requires_grad, wrapped like PyTorch's _add_suffixes.
 * The values are read through the host-access API (host_access.c), so a
 * tensor on any device prints them; one off the cpu gets device='<device>'
 * as its first suffix (PyTorch prints it for every tensor off the device of
 * its default tensor type, the cpu, even under set_default_device). */
#include "tensor.h"
#include "autograd.h"
#include "strbuf.h"
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX "tensor("

PrintOptions print_options_default(void) {
    return (PrintOptions){.precision = 4, .threshold = 1000, .edgeitems = 3, .linewidth = 80, .sci_mode = -1};
}

/* ---------------- string builder ---------------- */

static void str_spaces(StrBuf *s, int n) {
    for (int i = 0; i < n; i++) strbuf_put(s, " ", 1);
}

/* ---------------- element formatter ---------------- */

typedef struct {
    bool is_float, is_bool;
    bool int_mode, sci_mode;
    int width, precision;
    double min_abs, max_abs; /* over nonzero finite values */
    bool any_finite;
} Fmt;

typedef struct {
    const Tensor *t;
    const char *base; /* element (0, ..., 0) */
    size_t esize;
    bool summarize;
    int edgeitems, linewidth;
    Fmt f;
    StrBuf *out;
} Printer;

static double elem_f64(const Printer *P, int64_t off) { return dtype_load(P->base + off * (int64_t)P->esize, P->t->dtype); }
static int64_t elem_i64(const Printer *P, int64_t off) { return dtype_load_i64(P->base + off * (int64_t)P->esize, P->t->dtype); }

/* Value text without padding: like Python's format of float/int/bool. */
static int value_text(const Fmt *f, double v, int64_t iv, char *buf, size_t n) {
    if (f->is_bool) return snprintf(buf, n, "%s", iv ? "True" : "False");
    if (!f->is_float) return snprintf(buf, n, "%lld", (long long)iv);
    if (isnan(v)) return snprintf(buf, n, "nan");
    if (isinf(v)) return snprintf(buf, n, "%s", v < 0 ? "-inf" : "inf");
    if (f->sci_mode) return snprintf(buf, n, "%.*e", f->precision, v);
    if (f->int_mode) return snprintf(buf, n, "%.0f.", v);
    return snprintf(buf, n, "%.*f", f->precision, v);
}

static void put_value(Printer *P, int64_t off) {
    char buf[512];
    double v = P->f.is_float ? elem_f64(P, off) : 0;
    int64_t iv = P->f.is_float ? 0 : elem_i64(P, off);
    int len = value_text(&P->f, v, iv, buf, sizeof buf);
    str_spaces(P->out, P->f.width - len);
    strbuf_puts(P->out, buf);
}

/* Whether index i of a dim of size n is printed. */
static bool shown(const Printer *P, int64_t i, int64_t n) {
    return !P->summarize || n <= 2 * (int64_t)P->edgeitems || i < P->edgeitems || i >= n - P->edgeitems;
}

typedef void (*VisitFn)(Printer *P, int64_t off);

/* Call fn on every printed element (all, or the edges when summarizing). */
static void visit(Printer *P, int dim, int64_t off, VisitFn fn) {
    if (dim == P->t->ndim) {
        fn(P, off);
        return;
    }
    int64_t n = P->t->shape[dim];
    for (int64_t i = 0; i < n; i++) {
        if (!shown(P, i, n)) {
            i = n - P->edgeitems - 1;
            continue;
        }
        visit(P, dim + 1, off + i * P->t->stride[dim], fn);
    }
}

static void stats_fn(Printer *P, int64_t off) {
    Fmt *f = &P->f;
    if (!f->is_float) {
        char buf[32];
        int len = value_text(f, 0, elem_i64(P, off), buf, sizeof buf);
        if (len > f->width) f->width = len;
        return;
    }
    double v = elem_f64(P, off);
    if (!isfinite(v) || v == 0) return;
    double a = fabs(v);
    if (!f->any_finite || a < f->min_abs) f->min_abs = a;
    if (!f->any_finite || a > f->max_abs) f->max_abs = a;
    f->any_finite = true;
    if (v != ceil(v)) f->int_mode = false;
}

static void width_fn(Printer *P, int64_t off) {
    double v = elem_f64(P, off);
    if (!isfinite(v) || v == 0) return;
    char buf[512];
    int len = value_text(&P->f, v, 0, buf, sizeof buf);
    if (len > P->f.width) P->f.width = len;
}

static void fmt_init(Printer *P, int precision, int sci_mode) {
    Fmt *f = &P->f;
    *f = (Fmt){.is_float = dtype_is_float(P->t->dtype), .is_bool = P->t->dtype == DT_BOOL, .int_mode = true, .width = 1,
               .precision = precision};
    visit(P, 0, 0, stats_fn);
    if (!f->is_float || !f->any_finite) return;
    double ratio = f->max_abs / f->min_abs;
    f->sci_mode = sci_mode >= 0 ? sci_mode : ratio > 1000.0 || f->max_abs > 1.0e8 || f->min_abs < 1.0e-4;
    visit(P, 0, 0, width_fn);
}

/* ---------------- layout ---------------- */

static void put_vector(Printer *P, int dim, int64_t off, int indent) {
    int64_t n = P->t->shape[dim], st = P->t->stride[dim];
    int per_line = (P->linewidth - indent) / (P->f.width + 2);
    if (per_line < 1) per_line = 1;
    strbuf_puts(P->out, "[");
    int k = 0; /* items on the current line, "..." included */
    for (int64_t i = 0; i < n; i++) {
        bool ellipsis = !shown(P, i, n);
        if (i > 0) {
            if (k == per_line) {
                strbuf_puts(P->out, ",\n");
                str_spaces(P->out, indent + 1);
                k = 0;
            } else {
                strbuf_puts(P->out, ", ");
            }
        }
        if (ellipsis) {
            strbuf_puts(P->out, " ...");
            i = n - P->edgeitems - 1;
        } else {
            put_value(P, off + i * st);
        }
        k++;
    }
    strbuf_puts(P->out, "]");
}

static void put_nested(Printer *P, int dim, int64_t off, int indent) {
    int rest = P->t->ndim - dim;
    if (rest == 1) {
        put_vector(P, dim, off, indent);
        return;
    }
    int64_t n = P->t->shape[dim];
    strbuf_puts(P->out, "[");
    for (int64_t i = 0; i < n; i++) {
        if (i > 0) {
            strbuf_puts(P->out, ",");
            for (int r = 1; r < rest; r++) strbuf_puts(P->out, "\n");
            str_spaces(P->out, indent + 1);
        }
        if (!shown(P, i, n)) {
            strbuf_puts(P->out, "...");
            i = n - P->edgeitems - 1;
            continue;
        }
        put_nested(P, dim + 1, off + i * P->t->stride[dim], indent + 1);
    }
    strbuf_puts(P->out, "]");
}

static int put_contents(const Tensor *t, const PrintOptions *o, StrBuf *out) {
    HostMap m; /* the values are read on the host */
    Printer P = {.t = t, .base = tensor_host_map(t, HOST_READ, &m), .esize = dtype_size(t->dtype),
                 .summarize = (double)t->numel > o->threshold, .edgeitems = o->edgeitems, .linewidth = o->linewidth,
                 .out = out};
    if (!P.base) return -1;
    fmt_init(&P, o->precision, o->sci_mode);
    if (t->ndim == 0) put_value(&P, 0);
    else put_nested(&P, 0, 0, (int)strlen(PREFIX));
    return tensor_host_unmap(&m);
}

/* ---------------- suffixes ---------------- */

/* "add" -> "AddBackward0"; "index_select" -> "IndexSelectBackward0";
 * "TransposeBackward" -> "TransposeBackward0". */
static void grad_fn_name(const char *name, char *buf, size_t n) {
    size_t len = strlen(name);
    const char *bw = "Backward";
    size_t bl = strlen(bw);
    if (len >= bl && strcmp(name + len - bl, bw) == 0) {
        snprintf(buf, n, "%s0", name);
    } else if (strstr(name, bw) && isdigit((unsigned char)name[len - 1])) {
        snprintf(buf, n, "%s", name);
    } else {
        /* PyTorch's node names where they differ from the op's name */
        static const struct { const char *op, *node; } renamed[] = {
            {"cross_entropy", "NllLoss"}, {"layer_norm", "NativeLayerNorm"}, {"linear", "Addmm"}};
        for (size_t i = 0; i < sizeof renamed / sizeof renamed[0]; i++)
            if (strcmp(name, renamed[i].op) == 0) name = renamed[i].node;
        /* snake_case -> CamelCase: "log_softmax" -> "LogSoftmaxBackward0" */
        size_t k = 0;
        bool up = true;
        for (const char *c = name; *c && k + 1 < n; c++) {
            if (*c == '_') {
                up = true;
                continue;
            }
            buf[k++] = up ? (char)toupper((unsigned char)*c) : *c;
            up = false;
        }
        buf[k] = 0;
        snprintf(buf + k, n - k, "Backward0");
    }
}

static void size_suffix(const Tensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "size=(");
    for (int d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (k < n) snprintf(buf + k, n - k, t->ndim == 1 ? ",)" : ")");
}

typedef struct {
    char text[6][160];
    int n;
} Suffixes;

static void suffix_add(Suffixes *s, const char *fmt, const char *arg) {
    snprintf(s->text[s->n++], sizeof s->text[0], fmt, arg);
}

static void collect_suffixes(const Tensor *t, Suffixes *s) {
    char buf[128];
    if (t->device.type != DEV_CPU) suffix_add(s, "device='%s'", device_str(t->device, buf, sizeof buf));
    bool empty = t->numel == 0;
    if (empty && t->ndim != 1) {
        size_suffix(t, buf, sizeof buf);
        suffix_add(s, "%s", buf);
    }
    bool default_dt = empty ? t->dtype == DT_F32 : (t->dtype == DT_F32 || t->dtype == DT_I64 || t->dtype == DT_BOOL);
    if (!default_dt) suffix_add(s, "dtype=accel.%s", dtype_name(t->dtype));
    if (t->grad_fn) {
        grad_fn_name(t->grad_fn->name ? t->grad_fn->name : "unknown", buf, sizeof buf);
        suffix_add(s, "grad_fn=<%s>", buf);
    } else if (t->requires_grad) {
        suffix_add(s, "%s", "requires_grad=True");
    }
}

/* PyTorch's _add_suffixes: ", suffix", or ",\n" + indent when the line would pass linewidth. */
static void put_suffixes(StrBuf *out, const Suffixes *s, int linewidth) {
    const char *nl = out->p ? strrchr(out->p, '\n') : NULL;
    size_t last = nl ? (size_t)(out->p + out->len - nl) + 1 : out->len + 2; /* len - rfind("\n") + 1 */
    int indent = (int)strlen(PREFIX);
    for (int i = 0; i < s->n; i++) {
        size_t sl = strlen(s->text[i]);
        if (last + sl + 2 > (size_t)(linewidth > 0 ? linewidth : 0)) {
            strbuf_puts(out, ",\n");
            str_spaces(out, indent);
            last = (size_t)indent + sl;
        } else {
            strbuf_puts(out, ", ");
            last += sl + 2;
        }
        strbuf_puts(out, s->text[i]);
    }
    strbuf_puts(out, ")");
}

char *tensor_format(const Tensor *t) {
    PrintOptions o = print_options_default();
    return tensor_format_with(t, &o);
}

char *tensor_format_with(const Tensor *t, const PrintOptions *o) {
    StrBuf out = {0};
    strbuf_puts(&out, PREFIX);
    if (t->numel == 0) strbuf_puts(&out, "[]");
    else if (put_contents(t, o, &out) < 0) {
        free(out.p);
        return NULL;
    }
    Suffixes s = {.n = 0};
    collect_suffixes(t, &s);
    put_suffixes(&out, &s, o->linewidth);
    if (out.oom) {
        free(out.p);
        return accel_fail("tensor_format: out of memory");
    }
    return out.p;
}
