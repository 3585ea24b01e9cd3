/* csv.c: CSV tables of numbers (see datafiles.h).
 *
 * The file is read whole and split into records as RFC 4180 says, with a
 * few leniencies of Python's csv module:
 *  - records end at \n or \r\n; blank lines (only spaces / tabs) are
 *    skipped; a UTF-8 byte-order mark at the start of the file is dropped;
 *  - a field whose first character (after spaces / tabs) is a double quote
 *    is quoted: it runs to the next lone quote, "" inside it is one quote,
 *    and delimiters and newlines inside it are text (a record may span
 *    lines); text after the closing quote up to the delimiter is appended
 *    as Python does ("a"b reads ab); a quote that is never closed is an
 *    error naming the line where it opens;
 *  - in an unquoted field quotes are ordinary characters;
 *  - spaces and tabs around a field are dropped (not those inside quotes,
 *    and never the delimiter itself);
 *  - every record has as many fields as the first one (the header line when
 *    there is one).
 * Only the columns a caller selects are read as numbers, each as its
 * field's dtype: float dtypes by strtod (the whole field: "1", "-2.5e3",
 * "nan", "inf"), integer dtypes (int64, int32, uint8, bool) exactly by
 * strtoll (the whole field, base 10: "1.5", "1e3" and "0x10" are refused)
 * and checked against the dtype's range; other columns may hold any text.
 * Errors name path:line, the column (and its header name) and the value. */
#include "datafiles.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CSV_MAX_FIELDS (1 << 30) /* per record: the field count is an int */

typedef struct {
    size_t off, len;  /* the field's text in Reader.text (NUL after it) */
    long long line;   /* where the field starts */
} FieldRef;

/* Splits the bytes [p, end) into records. */
typedef struct {
    const char *path;
    const char *p, *end;
    char delim;
    long long line;     /* the line p is on (1-based) */
    long long rec_line; /* the line the last record started on */
    char *text;         /* the last record's fields, unquoted, each NUL-terminated */
    size_t tlen, tcap;
    FieldRef *fields;
    int nf, fcap;
} Reader;

struct CsvFile {
    char *path;
    char *buf;          /* the whole file */
    const char *data;   /* the first byte after the header (or the BOM) */
    const char *end;
    long long data_line; /* the line data starts on */
    char delim;
    int ncols;
    long long ref_line; /* the record that fixed ncols */
    char **names;       /* NULL without header */
};

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

/* ---- splitting records ---- */

static int oom(const char *path) { return accel_fail_int("CSV: out of memory reading %s", path); }

/* Room for n more bytes of text (and the NUL). */
static int text_reserve(Reader *r, size_t n) {
    if (r->tcap - r->tlen > n) return 0;
    size_t cap = r->tcap ? r->tcap : 256;
    while (cap - r->tlen <= n) {
        if (cap > SIZE_MAX / 2) return oom(r->path);
        cap *= 2;
    }
    char *nt = realloc(r->text, cap);
    if (!nt) return oom(r->path);
    r->text = nt, r->tcap = cap;
    return 0;
}

static int text_put(Reader *r, const char *s, size_t n) {
    if (text_reserve(r, n) < 0) return -1;
    memcpy(r->text + r->tlen, s, n);
    r->tlen += n;
    return 0;
}

static int push_field(Reader *r, FieldRef f) {
    if (r->nf == r->fcap) {
        if (r->fcap > CSV_MAX_FIELDS / 2)
            return accel_fail_int("CSV: %s:%lld: more than %d fields in one record", r->path, r->rec_line, CSV_MAX_FIELDS);
        int cap = r->fcap ? r->fcap * 2 : 64;
        FieldRef *nf = realloc(r->fields, (size_t)cap * sizeof *nf);
        if (!nf) return oom(r->path);
        r->fields = nf, r->fcap = cap;
    }
    r->fields[r->nf++] = f;
    return 0;
}

static bool is_space(char ch, char delim) { return (ch == ' ' || ch == '\t' || ch == '\r') && ch != delim; }

/* A quoted field from just after its opening quote: the text up to the
 * closing quote into r->text, p left after it. */
static int quoted(Reader *r, const char **pp, int col) {
    const char *p = *pp, *end = r->end;
    long long open_line = r->line;
    for (;;) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        const char *stop = q ? q : end;
        for (const char *s = p; (s = memchr(s, '\n', (size_t)(stop - s))); s++) r->line++;
        if (text_put(r, p, (size_t)(stop - p)) < 0) return -1;
        if (!q)
            return accel_fail_int("CSV: %s:%lld: unclosed quote: the quoted field that starts here (column %d) runs to "
                                  "the end of the file (a quoted field may hold newlines, so an opening quote must be "
                                  "closed, and a quote inside it doubled as \"\")",
                                  r->path, open_line, col);
        if (q + 1 < end && q[1] == '"') {
            if (text_put(r, "\"", 1) < 0) return -1;
            p = q + 2;
            continue;
        }
        *pp = q + 1;
        return 0;
    }
}

/* -1 when the unquoted field text [s, p) holds a '\r' that is not the
 * '\r' of a "\r\n" line end (or of the file's last line): a file with
 * old Mac line ends would otherwise read as one record. */
static int bare_cr(const char *s, const char *p, const char *end) {
    for (const char *x = s; (x = memchr(x, '\r', (size_t)(p - x))); x++)
        if (x + 1 < p || (p < end && *p != '\n')) return -1;
    return 0;
}

/* Reads the next record into r->fields; 1, or 0 at the end, or -1. */
static int next_record(Reader *r) {
    const char *end = r->end;
    for (;;) { /* skip blank lines */
        const char *q = r->p;
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
        if (q < end && *q != '\n') break;
        if (q == end) {
            r->p = end;
            return 0;
        }
        r->p = q + 1;
        r->line++;
    }
    r->rec_line = r->line;
    r->nf = 0;
    r->tlen = 0;
    const char *p = r->p;
    for (;;) {
        FieldRef f = {.off = r->tlen, .line = r->line};
        while (p < end && is_space(*p, r->delim)) p++;
        size_t keep = r->tlen; /* trailing spaces are trimmed down to here */
        if (p < end && *p == '"') {
            p++;
            if (quoted(r, &p, r->nf + 1) < 0) return -1;
            keep = r->tlen;
        }
        const char *s = p;
        while (p < end && *p != r->delim && *p != '\n') p++;
        if (bare_cr(s, p, end) < 0)
            return accel_fail_int("CSV: %s:%lld: a carriage return that does not end a line (column %d): records end "
                                  "at \\n or \\r\\n; convert old Mac (\\r) line ends first", r->path, r->line, r->nf + 1);
        if (text_put(r, s, (size_t)(p - s)) < 0) return -1;
        while (r->tlen > keep && is_space(r->text[r->tlen - 1], r->delim)) r->tlen--;
        f.len = r->tlen - f.off;
        if (text_put(r, "", 1) < 0 || push_field(r, f) < 0) return -1;
        if (p < end && *p == r->delim) {
            p++;
            continue;
        }
        if (p < end) p++, r->line++; /* the newline */
        r->p = p;
        return 1;
    }
}

static void reader_free(Reader *r) {
    free(r->text);
    free(r->fields);
}

/* ---- the file ---- */

void csv_close(CsvFile *f) {
    if (!f) return;
    datafiles_free_names(f->names, f->ncols);
    free(f->buf);
    free(f->path);
    free(f);
}

void datafiles_free_names(char **names, int n) {
    if (!names) return;
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

int csv_columns(const CsvFile *f) { return f->ncols; }

const char *csv_column_name(const CsvFile *f, int col) {
    return f->names && col >= 0 && col < f->ncols ? f->names[col] : NULL;
}

CsvFile *csv_open(const char *path, char delim, bool header) {
    CsvFile *f = calloc(1, sizeof *f);
    if (!f) return accel_fail("CSV: out of memory reading %s", path);
    f->delim = delim;
    size_t len = 0;
    if (!(f->path = strdup(path)) || !(f->buf = slurp(path, &len))) {
        if (!f->path) accel_fail("CSV: out of memory reading %s", path);
        csv_close(f);
        return NULL;
    }
    const char *start = f->buf;
    if (len >= 3 && memcmp(start, "\xEF\xBB\xBF", 3) == 0) start += 3; /* UTF-8 BOM (Excel writes one) */
    f->end = f->buf + len;
    Reader r = {.path = f->path, .p = start, .end = f->end, .delim = delim, .line = 1};
    int rc = next_record(&r);
    if (rc == 0) accel_fail("CSV: %s has no rows%s", path, header ? " (not even a header line)" : "");
    if (rc == 1) {
        f->ncols = r.nf;
        f->ref_line = r.rec_line;
        f->data = header ? r.p : start;
        f->data_line = header ? r.line : 1;
        if (header && !(f->names = calloc((size_t)r.nf, sizeof *f->names))) rc = oom(path);
        for (int i = 0; header && rc == 1 && i < r.nf; i++)
            if (!(f->names[i] = strdup(r.text + r.fields[i].off))) rc = oom(path);
    }
    reader_free(&r);
    if (rc != 1) {
        csv_close(f);
        return NULL;
    }
    return f;
}

/* ---- numbers ---- */

/* s[0..n) for a message: quoted, control bytes escaped, cut at 40 bytes. */
static const char *shown(char *out, size_t cap, const char *s, size_t n) {
    size_t k = 0;
    out[k++] = '"';
    for (size_t i = 0; i < n && k + 8 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (i == 40) {
            memcpy(out + k, "...", 3), k += 3;
            break;
        }
        if (ch == '\n') out[k++] = '\\', out[k++] = 'n';
        else if (ch == '\r') out[k++] = '\\', out[k++] = 'r';
        else if (ch == '\t') out[k++] = '\\', out[k++] = 't';
        else if (ch == '"' || ch == '\\') out[k++] = '\\', out[k++] = (char)ch;
        else if (ch < 0x20 || ch == 0x7f) k += (size_t)snprintf(out + k, cap - k, "\\x%02x", ch);
        else out[k++] = (char)ch;
    }
    out[k++] = '"';
    out[k] = 0;
    return out;
}

/* "column 2 (\"b\")" or "column 2" */
static const char *column_desc(char *out, size_t cap, const CsvFile *f, int col) {
    int k = snprintf(out, cap, "column %d", col + 1);
    const char *name = csv_column_name(f, col);
    if (name && k > 0 && (size_t)k + 4 < cap) {
        char q[200];
        snprintf(out + k, cap - (size_t)k, " (%s)", shown(q, sizeof q, name, strlen(name)));
    }
    return out;
}

static bool int_range(DType dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case DT_I64: *lo = INT64_MIN, *hi = INT64_MAX; return true;
    case DT_I32: *lo = INT32_MIN, *hi = INT32_MAX; return true;
    case DT_U8: *lo = 0, *hi = 255; return true;
    case DT_BOOL: *lo = 0, *hi = 1; return true;
    default: return false;
    }
}

/* The field's text (trimmed of any white space) as dtype dt into dst. */
static int parse_value(const CsvFile *f, const Reader *r, int col, DType dt, void *dst) {
    const FieldRef *fr = &r->fields[col];
    const char *s = r->text + fr->off;
    size_t n = fr->len;
    while (n > 0 && strchr(" \t\r\n\v\f", *s) && *s) s++, n--;
    while (n > 0 && strchr(" \t\r\n\v\f", s[n - 1]) && s[n - 1]) n--;
    char cd[256], sv[200];
    if (n == 0) return accel_fail_int("CSV: %s:%lld: %s is empty", f->path, fr->line, column_desc(cd, sizeof cd, f, col));
    char *endp;
    int64_t lo, hi;
    if (!int_range(dt, &lo, &hi)) {
        double v = strtod(s, &endp);
        if (endp != s + n)
            return accel_fail_int("CSV: %s:%lld: %s: %s is not a number", f->path, fr->line,
                                  column_desc(cd, sizeof cd, f, col), shown(sv, sizeof sv, s, n));
        dtype_store(dst, dt, v);
        return 0;
    }
    /* strtoll stops at the white space or NUL after s[0..n); it skips none before s */
    const char *d = s + (*s == '+' || *s == '-');
    errno = 0;
    long long v = d < s + n && *d >= '0' && *d <= '9' ? strtoll(s, &endp, 10) : (endp = (char *)s, 0);
    if (endp != s + n) {
        double x = strtod(s, &endp);
        bool numeric = endp == s + n, finite = numeric && x - x == 0;
        return accel_fail_int("CSV: %s:%lld: %s: %s is not %s (the column is read as %s%s)", f->path, fr->line,
                              column_desc(cd, sizeof cd, f, col), shown(sv, sizeof sv, s, n),
                              numeric ? "an integer" : "a number", dtype_name(dt),
                              finite ? ", which takes whole numbers in decimal digits only; read the column as a "
                                        "float dtype to keep fractions"
                                      : "");
    }
    if (errno == ERANGE || v < lo || v > hi)
        return accel_fail_int("CSV: %s:%lld: %s: %s is out of range for %s (%" PRId64 "..%" PRId64 ")", f->path, fr->line,
                              column_desc(cd, sizeof cd, f, col), shown(sv, sizeof sv, s, n), dtype_name(dt), lo, hi);
    dtype_store_i64(dst, dt, (int64_t)v);
    return 0;
}

/* ---- fields ---- */

typedef struct {
    char *buf;
    size_t cap, row_bytes, esize;
} Out;

static int check_fields(const CsvFile *f, const CsvField *fields, int nfields) {
    if (nfields < 1) return accel_fail_int("CSV: %s: no columns asked for", f->path);
    for (int i = 0; i < nfields; i++) {
        const CsvField *fd = &fields[i];
        if ((int)fd->dtype < 0 || fd->dtype >= DT_COUNT)
            return accel_fail_int("CSV: %s: field %d has no valid dtype", f->path, i + 1);
        if (fd->ncols < 1 || (fd->vector && fd->ncols != 1))
            return accel_fail_int("CSV: %s: field %d must select %s column, got %d", f->path, i + 1,
                                  fd->vector ? "exactly one" : "at least one", fd->ncols);
        for (int k = 0; k < fd->ncols; k++)
            if (fd->cols[k] < 0 || fd->cols[k] >= f->ncols)
                return accel_fail_int("CSV: %s: column %d is out of range 1..%d", f->path, fd->cols[k] + 1, f->ncols);
    }
    return 0;
}

static int read_rows(const CsvFile *f, const CsvField *fields, int nfields, Out *out, int64_t *rows) {
    Reader r = {.path = f->path, .p = f->data, .end = f->end, .delim = f->delim, .line = f->data_line};
    int rc;
    int64_t n = 0;
    while ((rc = next_record(&r)) == 1) {
        if (r.nf != f->ncols) {
            rc = accel_fail_int("CSV: %s:%lld: expected %d fields (as on line %lld), found %d", f->path, r.rec_line,
                                f->ncols, f->ref_line, r.nf);
            break;
        }
        for (int i = 0; rc == 1 && i < nfields; i++) {
            Out *o = &out[i];
            size_t need = (size_t)(n + 1) * o->row_bytes;
            if (need > o->cap) {
                size_t cap = o->cap ? o->cap : 4096;
                while (cap < need) cap *= 2;
                char *nb = realloc(o->buf, cap);
                if (!nb) {
                    rc = oom(f->path);
                    break;
                }
                o->buf = nb, o->cap = cap;
            }
            char *dst = o->buf + (size_t)n * o->row_bytes;
            for (int k = 0; k < fields[i].ncols; k++)
                if (parse_value(f, &r, fields[i].cols[k], fields[i].dtype, dst + (size_t)k * o->esize) < 0) {
                    rc = -1;
                    break;
                }
        }
        if (rc != 1) break;
        n++;
    }
    reader_free(&r);
    *rows = n;
    return rc;
}

int csv_read_fields(const CsvFile *f, const CsvField *fields, int nfields, Tensor **tensors) {
    if (check_fields(f, fields, nfields) < 0) return -1;
    Out *out = calloc((size_t)nfields, sizeof *out);
    if (!out) return oom(f->path);
    for (int i = 0; i < nfields; i++) {
        out[i].esize = dtype_size(fields[i].dtype);
        out[i].row_bytes = out[i].esize * (size_t)fields[i].ncols;
        tensors[i] = NULL;
    }
    int64_t rows = 0;
    int rc = read_rows(f, fields, nfields, out, &rows);
    for (int i = 0; rc == 0 && i < nfields; i++) {
        int64_t shape[2] = {rows, fields[i].ncols};
        Tensor *t = tensor_empty(shape, fields[i].vector ? 1 : 2, fields[i].dtype, (Device){DEV_CPU, 0});
        if (t && rows > 0 && tensor_from_host(t, out[i].buf) < 0) {
            tensor_release(t);
            t = NULL;
        }
        if (!t) rc = -1;
        tensors[i] = t;
    }
    for (int i = 0; i < nfields; i++) {
        free(out[i].buf);
        if (rc != 0) {
            tensor_release(tensors[i]);
            tensors[i] = NULL;
        }
    }
    free(out);
    return rc;
}

Tensor *csv_read(const char *path, char delim, bool header, char ***names, int *ncols) {
    *names = NULL;
    *ncols = 0;
    CsvFile *f = csv_open(path, delim, header);
    if (!f) return NULL;
    int *cols = malloc((size_t)f->ncols * sizeof *cols);
    Tensor *t = NULL;
    if (!cols) {
        oom(path);
    } else {
        for (int i = 0; i < f->ncols; i++) cols[i] = i;
        CsvField all = {.cols = cols, .ncols = f->ncols, .dtype = DT_F64};
        if (csv_read_fields(f, &all, 1, &t) == 0) {
            *names = f->names, *ncols = f->ncols;
            f->names = NULL;
        }
    }
    free(cols);
    csv_close(f);
    return t;
}
