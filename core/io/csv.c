/* csv.c: numeric CSV tables (see datafiles.h).
 *
 * One pass over the file's bytes, line by line (\n or \r\n). Blank lines are
 * skipped. With a header, the first non-blank line gives the column names;
 * every other line must have as many fields as the first row, each a number
 * that strtod reads completely ("1", "-2.5e3", "nan", "inf"); spaces around
 * a field and one pair of double quotes are stripped, and a delimiter inside
 * double quotes does not split. Errors name path:line and the field. */
#include "datafiles.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *a, *b; /* field text [a, b), trimmed and unquoted */
} Field;

#define CSV_MAX_FIELDS (1 << 30) /* per line: the field count is an int */

typedef struct {
    const char *path;
    long long line; /* files of more than 2^31 lines exist */
    char delim;
    int ncols;   /* -1 until the first row fixes it */
    long long ref_line; /* the line that fixed ncols */
    double *vals;
    int64_t nvals, cap;
    Field *fields; /* the current line's fields */
    int fcap;
} Csv;

/* Whole file into a malloc'd, NUL-terminated buffer. */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return accel_fail("CSV: cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *nb = realloc(buf, cap *= 2);
        if (!nb) free(buf);
        buf = nb;
    }
    bool err = ferror(f);
    fclose(f);
    if (!buf) return accel_fail("CSV: out of memory reading %s", path);
    if (err) {
        free(buf);
        return accel_fail("CSV: cannot read %s", path);
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static Field trim(const char *a, const char *b) {
    while (a < b && (*a == ' ' || *a == '\t')) a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
    if (b - a >= 2 && *a == '"' && b[-1] == '"') a++, b--;
    return (Field){a, b};
}

static int grow_fields(Csv *c) {
    if (c->fcap > CSV_MAX_FIELDS / 2)
        return accel_fail_int("CSV: %s:%lld: more than %d fields on one line", c->path, c->line, CSV_MAX_FIELDS);
    int cap = c->fcap ? c->fcap * 2 : 64;
    Field *nf = realloc(c->fields, (size_t)cap * sizeof *nf);
    if (!nf) return accel_fail_int("CSV: out of memory reading %s", c->path);
    c->fields = nf, c->fcap = cap;
    return 0;
}

/* Split line [p, end) into c->fields; returns the count, or -1. */
static int split(Csv *c, const char *p, const char *end) {
    int n = 0;
    bool quoted = false;
    for (const char *start = p;; p++) {
        if (p < end && (*p != c->delim || quoted)) {
            quoted ^= *p == '"';
            continue;
        }
        if (n == c->fcap && grow_fields(c) < 0) return -1;
        c->fields[n++] = trim(start, p);
        if (p == end) return n;
        start = p + 1;
    }
}

static int fixed_cols(Csv *c, int n) {
    if (c->ncols < 0) {
        c->ncols = n, c->ref_line = c->line;
        return 0;
    }
    if (n == c->ncols) return 0;
    return accel_fail_int("CSV: %s:%lld: expected %d fields (as on line %lld), found %d", c->path, c->line, c->ncols,
                          c->ref_line, n);
}

static int push_value(Csv *c, double v) {
    if (c->nvals == c->cap) {
        int64_t cap = c->cap ? c->cap * 2 : 1024;
        double *nv = realloc(c->vals, (size_t)cap * sizeof *nv);
        if (!nv) return accel_fail_int("CSV: out of memory reading %s", c->path);
        c->vals = nv, c->cap = cap;
    }
    c->vals[c->nvals++] = v;
    return 0;
}

static int parse_number(Csv *c, Field f, int col) {
    char tmp[128], *end;
    size_t n = (size_t)(f.b - f.a);
    if (n == 0) return accel_fail_int("CSV: %s:%lld: field %d is empty", c->path, c->line, col);
    if (n < sizeof tmp) {
        memcpy(tmp, f.a, n);
        tmp[n] = 0;
        double v = strtod(tmp, &end);
        if (*end == 0) return push_value(c, v);
    }
    return accel_fail_int("CSV: %s:%lld: field %d (\"%.*s\") is not a number", c->path, c->line, col,
                          (int)(n > 40 ? 40 : n), f.a);
}

static int parse_row(Csv *c, const char *p, const char *end) {
    int n = split(c, p, end);
    if (n < 0 || fixed_cols(c, n) < 0) return -1;
    for (int i = 0; i < n; i++)
        if (parse_number(c, c->fields[i], i + 1) < 0) return -1;
    return 0;
}

static char *field_name(Field f) {
    size_t n = (size_t)(f.b - f.a), k = 0;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    for (size_t i = 0; i < n; i++) {
        s[k++] = f.a[i];
        if (f.a[i] == '"' && i + 1 < n && f.a[i + 1] == '"') i++; /* "" inside quotes */
    }
    s[k] = 0;
    return s;
}

static int parse_header(Csv *c, const char *p, const char *end, char ***names) {
    int n = split(c, p, end);
    if (n < 0) return -1;
    fixed_cols(c, n);
    *names = calloc((size_t)n, sizeof **names);
    if (!*names) return accel_fail_int("CSV: out of memory reading %s", c->path);
    for (int i = 0; i < n; i++)
        if (!((*names)[i] = field_name(c->fields[i]))) return accel_fail_int("CSV: out of memory reading %s", c->path);
    return 0;
}

void datafiles_free_names(char **names, int n) {
    if (!names) return;
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static bool blank(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p == end;
}

static int parse_all(Csv *c, const char *buf, size_t len, bool header, char ***names) {
    const char *p = buf, *stop = buf + len;
    bool need_header = header;
    while (p < stop) {
        const char *nl = memchr(p, '\n', (size_t)(stop - p)), *end = nl ? nl : stop;
        c->line++;
        if (end > p && end[-1] == '\r') end--;
        if (!blank(p, end)) {
            int rc = need_header ? parse_header(c, p, end, names) : parse_row(c, p, end);
            if (rc < 0) return -1;
            need_header = false;
        }
        p = nl ? nl + 1 : stop;
    }
    if (c->ncols < 0) return accel_fail_int("CSV: %s has no rows%s", c->path, header ? " (not even a header line)" : "");
    return 0;
}

Tensor *csv_read(const char *path, char delim, bool header, char ***names, int *ncols) {
    size_t len = 0;
    char *buf = slurp(path, &len);
    if (!buf) return NULL;
    Csv c = {.path = path, .delim = delim, .ncols = -1};
    *names = NULL;
    int rc = parse_all(&c, buf, len, header, names);
    free(buf);
    Tensor *t = NULL;
    if (rc == 0) {
        int64_t shape[2] = {c.ncols ? c.nvals / c.ncols : 0, c.ncols};
        t = tensor_empty(shape, 2, DT_F64, (Device){DEV_CPU, 0});
        if (t && c.nvals && tensor_from_host(t, c.vals) < 0) {
            tensor_release(t);
            t = NULL;
        }
    }
    free(c.vals);
    free(c.fields);
    if (!t) {
        datafiles_free_names(*names, c.ncols);
        *names = NULL;
    }
    *ncols = c.ncols;
    return t;
}
