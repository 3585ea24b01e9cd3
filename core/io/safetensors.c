/* safetensors.c: the safetensors file format (see safetensors.h).
 *
 * Layout: u64 little-endian N, then N bytes of JSON header, then the data
 * section. The header maps each tensor name to {"dtype", "shape",
 * "data_offsets": [begin, end]} (offsets relative to the data section) and
 * may hold "__metadata__": {string: string}. Like the Rust/Python library
 * we write the header compactly, "__metadata__" first, tensors contiguous
 * and in the caller's order, the header padded with spaces so the data
 * section starts 8-byte aligned.
 *
 * Saving goes through "<path>.tmp.<pid>" + fsync + rename + directory fsync.
 * Loading validates every field with a small strict JSON parser (objects,
 * arrays, strings, integers only) before touching the data, and copies the
 * bytes into fresh CPU tensors. Assumes a little-endian host, as the format
 * stores little-endian data. */
#include "safetensors.h"
#include "replace.h"
#include "../strbuf.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define META_KEY "__metadata__"
#define JSON_MAX_DEPTH 32

static const char *const st_dtype_names[DT_COUNT] = {"F32", "F64",  "BF16", "F16", "F8_E4M3",
                                                     "F8_E5M2", "I64", "I32", "U8", "BOOL"};

static int st_dtype_from_name(const char *s) {
    for (int i = 0; i < DT_COUNT; i++)
        if (strcmp(s, st_dtype_names[i]) == 0) return i;
    return -1;
}

/* ======================= text into a StrBuf ======================= */

static void buf_printf(StrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(StrBuf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    strbuf_put(b, tmp, (size_t)k);
}

/* A JSON string literal; bytes >= 0x80 pass through (UTF-8), as serde_json does. */
static void buf_json_string(StrBuf *b, const char *s) {
    strbuf_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            strbuf_put(b, esc, 2);
        } else if (c == '\n') strbuf_puts(b, "\\n");
        else if (c == '\r') strbuf_puts(b, "\\r");
        else if (c == '\t') strbuf_puts(b, "\\t");
        else if (c == '\b') strbuf_puts(b, "\\b");
        else if (c == '\f') strbuf_puts(b, "\\f");
        else if (c < 0x20) buf_printf(b, "\\u%04x", c);
        else strbuf_put(b, (const char *)&c, 1);
    }
    strbuf_put(b, "\"", 1);
}

/* ======================= shared helpers ======================= */

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The first string that occurs twice among n, or NULL. */
static const char *find_duplicate(const char *const *strs, int n) {
    if (n < 2) return NULL;
    const char **sorted = malloc(sizeof *sorted * (size_t)n);
    if (!sorted) return NULL;
    memcpy(sorted, strs, sizeof *sorted * (size_t)n);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_str_ptr);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) dup = sorted[i];
    free(sorted);
    return dup;
}

/* Length of a valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    uint32_t cp = len == 1 ? s[0] : (uint32_t)(s[0] & (0x7F >> len));
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[k] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

static bool utf8_valid(const char *s, size_t n) {
    for (size_t k = 0, l; k < n; k += l)
        if (!(l = utf8_seq((const unsigned char *)s + k, n - k))) return false;
    return true;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = EIO;
            return -1;
        }
        c += k, n -= (size_t)k;
    }
    return 0;
}

/* Read exactly n bytes at off; -1 with errno (0 for end of file). */
static int pread_all(int fd, void *p, size_t n, off_t off) {
    char *c = p;
    while (n > 0) {
        ssize_t k = pread(fd, c, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = 0;
            return -1;
        }
        c += k, n -= (size_t)k, off += k;
    }
    return 0;
}

/* ======================= save ======================= */

static int check_save_args(const char *path, const char **names, Tensor **ts, int n, const char **mk, const char **mv,
                           int n_meta) {
    if (n < 0 || n_meta < 0) return accel_fail_int("accel.save: '%s': negative tensor or metadata count", path);
    const char *kind = io_not_replaceable(path);
    if (kind)
        return accel_fail_int("accel.save: '%s' is %s; a save writes a whole new file and renames it into place, "
                              "so it writes only over regular files", path, kind);
    for (int i = 0; i < n; i++) {
        if (!names[i] || !ts[i]) return accel_fail_int("accel.save: '%s': tensor %d has no name or no tensor", path, i);
        if (!utf8_valid(names[i], strlen(names[i])))
            return accel_fail_int("accel.save: '%s': tensor name %d is not valid UTF-8", path, i);
        if (strcmp(names[i], META_KEY) == 0)
            return accel_fail_int("accel.save: '%s': \"%s\" is reserved and cannot name a tensor", path, META_KEY);
    }
    for (int i = 0; i < n_meta; i++) {
        if (!mk[i]) return accel_fail_int("accel.save: '%s': metadata entry %d has no key", path, i);
        if (!utf8_valid(mk[i], strlen(mk[i])) || (mv[i] && !utf8_valid(mv[i], strlen(mv[i]))))
            return accel_fail_int("accel.save: '%s': metadata entry '%.200s' is not valid UTF-8", path, mk[i]);
    }
    const char *dup = find_duplicate(names, n);
    if (dup) return accel_fail_int("accel.save: '%s': tensor name '%.200s' is used twice; names must be unique", path, dup);
    dup = find_duplicate(mk, n_meta);
    if (dup) return accel_fail_int("accel.save: '%s': metadata key '%.200s' is used twice", path, dup);
    return 0;
}

static void header_tensor(StrBuf *b, const char *name, const Tensor *t, uint64_t *offset) {
    uint64_t nbytes = (uint64_t)t->numel * dtype_size(t->dtype);
    buf_json_string(b, name);
    buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_names[t->dtype]);
    for (int d = 0; d < t->ndim; d++) buf_printf(b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    buf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)*offset,
               (unsigned long long)(*offset + nbytes));
    *offset += nbytes;
}

/* The full header including the 8-byte length prefix and space padding. */
static int build_header(StrBuf *b, const char **names, Tensor **ts, int n, const char **mk, const char **mv, int n_meta) {
    strbuf_put(b, "\0\0\0\0\0\0\0\0", 8);
    strbuf_puts(b, "{");
    if (n_meta > 0) {
        strbuf_puts(b, "\"" META_KEY "\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) strbuf_puts(b, ",");
            buf_json_string(b, mk[i]);
            strbuf_puts(b, ":");
            buf_json_string(b, mv[i] ? mv[i] : "");
        }
        strbuf_puts(b, "}");
    }
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        if (i || n_meta > 0) strbuf_puts(b, ",");
        header_tensor(b, names[i], ts[i], &offset);
    }
    strbuf_puts(b, "}");
    while (!b->oom && (b->len - 8) % 8) strbuf_puts(b, " ");
    if (b->oom) return -1;
    uint64_t hlen = b->len - 8;
    for (int k = 0; k < 8; k++) b->p[k] = (char)(hlen >> (8 * k) & 0xff);
    return 0;
}

/* 0, -1 with errno (I/O), or -2 with accel_last_error (allocation). */
static int write_tensor_data(int fd, Tensor *t) {
    if (t->numel == 0) return 0;
    Tensor *c = tensor_is_contiguous(t) ? tensor_retain(t) : tensor_empty(t->shape, t->ndim, t->dtype, t->device);
    if (!c) return -2;
    if (c != t) tensor_copy_strided(c, t);
    HostMap m; /* the bytes are written from the host */
    const void *p = tensor_host_map(c, HOST_READ, &m);
    if (!p) {
        tensor_release(c);
        return -2;
    }
    int rc = write_all(fd, p, (size_t)c->numel * dtype_size(c->dtype));
    int saved = errno;
    tensor_host_unmap(&m);
    tensor_release(c);
    errno = saved;
    return rc;
}

/* fsync the directory holding path so the rename itself is durable. */
static int fsync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return 0; /* cannot open the directory: nothing more we can do */
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc < 0 && errno != EINVAL && errno != EROFS ? -1 : 0;
}

/* Header and data into the temporary file: 0, -1 with errno, or -2 with a
 * message already set. */
static int write_temp(const char *path, const char *tmp, const StrBuf *hdr, const char **names, Tensor **ts, int n,
                      const char **what) {
    *what = "cannot create";
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    *what = "cannot write";
    int rc = write_all(fd, hdr->p, hdr->len);
    for (int i = 0; i < n && rc == 0; i++) {
        rc = write_tensor_data(fd, ts[i]);
        if (rc == -2) {
            close(fd);
            accel_fail("accel.save: cannot write '%s': tensor '%.200s': %s", path, names[i], accel_last_error());
            return -2;
        }
    }
    if (rc == 0) rc = fsync(fd);
    int saved = errno;
    if (close(fd) < 0 && rc == 0) rc = -1, saved = errno;
    errno = saved;
    return rc;
}

int safetensors_save(const char *path, const char **names, Tensor **ts, int n, const char **meta_keys,
                     const char **meta_vals, int n_meta) {
    if (check_save_args(path, names, ts, n, meta_keys, meta_vals, n_meta) < 0) return -1;
    StrBuf hdr = {0};
    if (build_header(&hdr, names, ts, n, meta_keys, meta_vals, n_meta) < 0) {
        free(hdr.p);
        return accel_fail_int("accel.save: '%s': out of memory building the header", path);
    }
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tmp) {
        free(hdr.p);
        return accel_fail_int("accel.save: cannot write '%.200s...': %s", path, strerror(ENAMETOOLONG));
    }
    const char *what = "cannot write";
    int rc = write_temp(path, tmp, &hdr, names, ts, n, &what);
    free(hdr.p);
    if (rc == 0 && rename(tmp, path) < 0) rc = -1, what = "cannot rename the temporary file onto";
    if (rc < 0) {
        int saved = errno;
        unlink(tmp);
        if (rc == -2) return -1; /* message already set */
        return accel_fail_int("accel.save: %s '%s': %s", what, path, strerror(saved));
    }
    if (fsync_parent_dir(path) < 0)
        return accel_fail_int("accel.save: cannot sync the directory of '%s': %s", path, strerror(errno));
    return 0;
}

/* ======================= strict JSON subset ======================= */

typedef enum { J_OBJ, J_ARR, J_STR, J_INT } JType;

typedef struct JVal {
    JType type;
    size_t pos;   /* offset of the value in the header */
    int64_t i;    /* J_INT */
    char *s;      /* J_STR */
    int n;        /* J_OBJ / J_ARR members */
    char **keys;  /* J_OBJ */
    struct JVal *items;
} JVal;

typedef struct {
    const char *p;
    size_t len, pos;
    int depth;
    char err[200];
    size_t err_pos;
} JParser;

static void jval_free(JVal *v) {
    if (v->type == J_STR) free(v->s);
    for (int k = 0; k < v->n; k++) {
        if (v->keys) free(v->keys[k]);
        jval_free(&v->items[k]);
    }
    free(v->keys);
    free(v->items);
}

static int jerr(JParser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jerr(JParser *P, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->err, sizeof P->err, fmt, ap);
    va_end(ap);
    P->err_pos = P->pos;
    return -1;
}

static void jskip_ws(JParser *P) {
    while (P->pos < P->len) {
        char c = P->p[P->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        P->pos++;
    }
}

static int jpeek(JParser *P) { return P->pos < P->len ? (unsigned char)P->p[P->pos] : -1; }

static int jexpect(JParser *P, char c) {
    jskip_ws(P);
    if (jpeek(P) != c) {
        int got = jpeek(P);
        if (got < 0) return jerr(P, "expected '%c' but the header ends", c);
        return jerr(P, "expected '%c' but found '%c'", c, got >= 0x20 && got < 0x7f ? got : '?');
    }
    P->pos++;
    return 0;
}

static void put_utf8(StrBuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else
        u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3F)), u[2] = (char)(0x80 | (cp >> 6 & 0x3F)),
        u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    strbuf_put(b, u, n);
}

static int jhex4(JParser *P, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++, P->pos++) {
        int c = jpeek(P);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return jerr(P, "bad \\u escape: expected 4 hex digits");
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* After "\u": one code point, joining a surrogate pair. */
static int junicode(JParser *P, StrBuf *b) {
    uint32_t cp = 0, lo = 0;
    if (jhex4(P, &cp) < 0) return -1;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return jerr(P, "bad \\u escape: unpaired low surrogate");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (P->pos + 2 > P->len || P->p[P->pos] != '\\' || P->p[P->pos + 1] != 'u')
            return jerr(P, "bad \\u escape: high surrogate without a low surrogate");
        P->pos += 2;
        if (jhex4(P, &lo) < 0) return -1;
        if (lo < 0xDC00 || lo > 0xDFFF) return jerr(P, "bad \\u escape: high surrogate without a low surrogate");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp == 0) return jerr(P, "strings with NUL characters are not supported");
    put_utf8(b, cp);
    return 0;
}

static int jescape(JParser *P, StrBuf *b) {
    int c = jpeek(P);
    P->pos++;
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *hit = c > 0 ? strchr(from, c) : NULL;
    if (hit && *hit) {
        strbuf_put(b, to + (hit - from), 1);
        return 0;
    }
    if (c == 'u') return junicode(P, b);
    P->pos--;
    return jerr(P, "bad escape sequence in string");
}

static int jstring(JParser *P, char **out) {
    if (jexpect(P, '"') < 0) return -1;
    StrBuf b = {0};
    strbuf_put(&b, "", 0);
    for (;;) {
        int c = jpeek(P);
        if (c < 0) {
            free(b.p);
            return jerr(P, "unterminated string");
        }
        if (c == '"') break;
        int rc = 0;
        if (c == '\\') P->pos++, rc = jescape(P, &b);
        else if (c < 0x20) rc = jerr(P, "control character in string");
        else strbuf_put(&b, P->p + P->pos++, 1);
        if (rc < 0) {
            free(b.p);
            return -1;
        }
    }
    P->pos++;
    if (b.oom) {
        free(b.p);
        return jerr(P, "out of memory");
    }
    *out = b.p;
    return 0;
}

static int jint(JParser *P, int64_t *out) {
    bool neg = jpeek(P) == '-';
    if (neg) P->pos++;
    int c = jpeek(P);
    if (c < '0' || c > '9') return jerr(P, "expected a digit");
    if (c == '0' && P->pos + 1 < P->len && P->p[P->pos + 1] >= '0' && P->p[P->pos + 1] <= '9')
        return jerr(P, "numbers must not have leading zeros");
    uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; (c = jpeek(P)) >= '0' && c <= '9'; P->pos++) {
        if (v > (lim - (uint64_t)(c - '0')) / 10) return jerr(P, "integer out of range");
        v = v * 10 + (uint64_t)(c - '0');
    }
    if (c == '.' || c == 'e' || c == 'E') return jerr(P, "only integers are allowed, not fractions or exponents");
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int jvalue(JParser *P, JVal *v);

static int jpush(JParser *P, JVal *v, char *key) {
    if (v->n % 16 == 0) {
        JVal *items = realloc(v->items, sizeof *items * (size_t)(v->n + 16));
        if (items) v->items = items;
        char **keys = v->type == J_OBJ ? realloc(v->keys, sizeof *keys * (size_t)(v->n + 16)) : NULL;
        if (keys) v->keys = keys;
        if (!items || (v->type == J_OBJ && !keys)) {
            free(key);
            return jerr(P, "out of memory");
        }
    }
    if (v->type == J_OBJ) v->keys[v->n] = key;
    memset(&v->items[v->n], 0, sizeof(JVal));
    v->n++;
    return 0;
}

/* Shared loop of objects and arrays: members separated by ',' up to close. */
static int jcontainer(JParser *P, JVal *v, char close) {
    P->pos++;
    jskip_ws(P);
    if (jpeek(P) == close) {
        P->pos++;
        return 0;
    }
    for (;;) {
        char *key = NULL;
        if (v->type == J_OBJ && (jstring(P, &key) < 0 || jexpect(P, ':') < 0)) {
            free(key);
            return -1;
        }
        if (jpush(P, v, key) < 0 || jvalue(P, &v->items[v->n - 1]) < 0) return -1;
        jskip_ws(P);
        int c = jpeek(P);
        P->pos++;
        if (c == close) return 0;
        if (c != ',') {
            P->pos--;
            return jerr(P, "expected ',' or '%c'", close);
        }
    }
}

static int jvalue(JParser *P, JVal *v) {
    jskip_ws(P);
    v->pos = P->pos;
    int c = jpeek(P);
    if (c < 0) return jerr(P, "the header ends where a value was expected");
    if (c == '{' || c == '[') {
        if (++P->depth > JSON_MAX_DEPTH) return jerr(P, "nesting deeper than %d levels", JSON_MAX_DEPTH);
        v->type = c == '{' ? J_OBJ : J_ARR;
        int rc = jcontainer(P, v, c == '{' ? '}' : ']');
        P->depth--;
        const char *dup = rc == 0 && v->type == J_OBJ ? find_duplicate((const char *const *)v->keys, v->n) : NULL;
        if (dup) {
            P->pos = v->pos;
            return jerr(P, "key '%.80s' appears twice in the object", dup);
        }
        return rc;
    }
    if (c == '"') {
        v->type = J_STR;
        return jstring(P, &v->s);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->type = J_INT;
        return jint(P, &v->i);
    }
    return jerr(P, "unexpected character '%c' (only objects, arrays, strings and integers are allowed)",
                c >= 0x20 && c < 0x7f ? c : '?');
}

static int json_parse(JParser *P, JVal *root) {
    if (!utf8_valid(P->p, P->len)) return jerr(P, "the header is not valid UTF-8");
    jskip_ws(P);
    if (jpeek(P) != '{') return jerr(P, "the header must be a JSON object starting with '{'");
    if (jvalue(P, root) < 0) return -1;
    jskip_ws(P);
    if (P->pos != P->len) return jerr(P, "unexpected data after the JSON object");
    return 0;
}

/* ======================= load ======================= */

typedef struct {
    const char *name;
    DType dt;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    uint64_t begin, end;
} Entry;

typedef struct {
    const char *path;
    int fd;
    int64_t file_size;
    uint64_t data_start, data_len;
    JVal root;
    const JVal *meta;
    Entry *entries;
    int n;
} Loader;

static int lfail(const Loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lfail(const Loader *L, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return accel_fail_int("accel.load: '%s' %s", L->path, msg);
}

static const JVal *jget(const JVal *obj, const char *key) {
    for (int k = 0; k < obj->n; k++)
        if (strcmp(obj->keys[k], key) == 0) return &obj->items[k];
    return NULL;
}

/* "a zip archive" or "a pickle" when the file's first n bytes are those of
 * a torch.save file (its default zip format, "PK\3\4"; the legacy format,
 * a pickle: 0x80 then protocol 2-5); NULL otherwise. */
static const char *torch_save_kind(const unsigned char *b, size_t n) {
    if (n >= 4 && memcmp(b, "PK\x03\x04", 4) == 0) return "a zip archive";
    if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return "a pickle";
    return NULL;
}

/* Checks the header length hlen read from the file's first n (<= 8) bytes
 * b against the file's size; a file torch.save wrote is named as such. */
static int check_header_length(const Loader *L, const unsigned char *b, size_t n, uint64_t hlen) {
    int bad = n < 8 || hlen > SAFETENSORS_MAX_HEADER || hlen > (uint64_t)L->file_size - 8;
    const char *torch = bad ? torch_save_kind(b, n) : NULL;
    if (torch != NULL)
        return lfail(L, "is not a safetensors file: it looks like a torch.save file (%s), which accel-lua does not "
                        "read (no pickle): save it with safetensors.torch.save_file", torch);
    if (bad && n > 0 && b[0] == '{')
        return lfail(L, "is not a safetensors file: it looks like JSON text (the index of a sharded checkpoint? its "
                        "weight_map names the safetensors files that hold the tensors)");
    if (n < 8)
        return lfail(L, "is not a safetensors file: it has %lld bytes, fewer than the 8-byte header length",
                     (long long)L->file_size);
    if (hlen > SAFETENSORS_MAX_HEADER)
        return lfail(L, "is not a safetensors file: header length %llu exceeds the limit of %u bytes",
                     (unsigned long long)hlen, SAFETENSORS_MAX_HEADER);
    if (hlen > (uint64_t)L->file_size - 8)
        return lfail(L, "is truncated or not a safetensors file: the header needs %llu bytes but the file has %lld after the length field",
                     (unsigned long long)hlen, (long long)L->file_size - 8);
    return 0;
}

static int read_header(Loader *L) {
    struct stat st;
    if (fstat(L->fd, &st) < 0) return lfail(L, "cannot be read: %s", strerror(errno));
    if (S_ISDIR(st.st_mode)) return lfail(L, "is a directory, not a safetensors file");
    L->file_size = st.st_size;
    unsigned char len8[8] = {0};
    size_t n = L->file_size < 8 ? (size_t)L->file_size : 8;
    if (pread_all(L->fd, len8, n, 0) < 0) return lfail(L, "cannot be read: %s", strerror(errno ? errno : EIO));
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | len8[k];
    if (check_header_length(L, len8, n, hlen) < 0) return -1;
    L->data_start = 8 + hlen;
    L->data_len = (uint64_t)L->file_size - L->data_start;
    char *text = malloc(hlen ? hlen : 1);
    if (!text) return lfail(L, "header of %llu bytes: out of memory", (unsigned long long)hlen);
    if (pread_all(L->fd, text, hlen, 8) < 0) {
        free(text);
        return lfail(L, "cannot be read: %s", errno ? strerror(errno) : "unexpected end of file");
    }
    JParser P = {.p = text, .len = hlen};
    int rc = json_parse(&P, &L->root);
    free(text);
    if (rc < 0) return lfail(L, "has an invalid header: %s at byte %zu of the JSON header", P.err, P.err_pos);
    return 0;
}

static int check_meta(Loader *L, const JVal *m) {
    if (m->type != J_OBJ) return lfail(L, "has an invalid header: \"%s\" must be an object of strings", META_KEY);
    for (int k = 0; k < m->n; k++)
        if (m->items[k].type != J_STR)
            return lfail(L, "has an invalid header: \"%s\" value for key '%.200s' is not a string", META_KEY, m->keys[k]);
    L->meta = m;
    return 0;
}

static int parse_shape(Loader *L, Entry *e, const JVal *s) {
    if (!s || s->type != J_ARR) return lfail(L, "has an invalid header: tensor '%.200s' needs a \"shape\" list", e->name);
    if (s->n > TENSOR_MAX_DIMS)
        return lfail(L, "has tensor '%.200s' with %d dims; at most %d are supported", e->name, s->n, TENSOR_MAX_DIMS);
    e->ndim = s->n;
    for (int d = 0; d < s->n; d++) {
        if (s->items[d].type != J_INT || s->items[d].i < 0)
            return lfail(L, "has an invalid header: tensor '%.200s' has a shape entry that is not a non-negative integer",
                         e->name);
        e->shape[d] = s->items[d].i;
    }
    return 0;
}

/* Bytes the shape needs; -1 with the error when no tensor can have it
 * (more than 2^63 elements or bytes, or strides that would overflow). */
static int64_t shape_nbytes(const Loader *L, const Entry *e) {
    char op[600];
    snprintf(op, sizeof op, "accel.load: '%s' has an invalid header: tensor '%.200s'", L->path, e->name);
    int64_t n = shape_check(op, e->shape, e->ndim, (int)e->dt);
    return n < 0 ? -1 : n * (int64_t)dtype_size(e->dt);
}

static int parse_offsets(Loader *L, Entry *e, const JVal *o) {
    if (!o || o->type != J_ARR || o->n != 2 || o->items[0].type != J_INT || o->items[1].type != J_INT ||
        o->items[0].i < 0 || o->items[1].i < o->items[0].i)
        return lfail(L, "has an invalid header: tensor '%.200s' needs \"data_offsets\" [begin, end] with 0 <= begin <= end",
                     e->name);
    e->begin = (uint64_t)o->items[0].i, e->end = (uint64_t)o->items[1].i;
    int64_t need = shape_nbytes(L, e);
    char shp[160];
    shape_str(e->shape, e->ndim, shp, sizeof shp);
    if (need < 0) return -1;
    if ((uint64_t)need != e->end - e->begin)
        return lfail(L, "has an invalid header: tensor '%.200s' has data_offsets [%llu, %llu] (%llu bytes) but shape %s of %s needs %lld bytes",
                     e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                     (unsigned long long)(e->end - e->begin), shp, st_dtype_names[e->dt], (long long)need);
    if (e->end > L->data_len)
        return lfail(L, "is truncated: tensor '%.200s' needs bytes %llu..%llu of the data section but the file has %llu",
                     e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                     (unsigned long long)L->data_len);
    return 0;
}

static int parse_entry(Loader *L, Entry *e, const char *name, const JVal *v) {
    e->name = name;
    if (v->type != J_OBJ) return lfail(L, "has an invalid header: entry '%.200s' is not an object", name);
    const JVal *dt = jget(v, "dtype");
    if (!dt || dt->type != J_STR) return lfail(L, "has an invalid header: tensor '%.200s' has no \"dtype\" string", name);
    int k = st_dtype_from_name(dt->s);
    if (k < 0)
        return lfail(L, "has tensor '%.200s' of dtype '%.40s', which is not supported (F64 F32 BF16 F16 F8_E4M3 F8_E5M2 I64 I32 U8 BOOL)",
                     name, dt->s);
    e->dt = (DType)k;
    if (parse_shape(L, e, jget(v, "shape")) < 0) return -1;
    return parse_offsets(L, e, jget(v, "data_offsets"));
}

static int cmp_entry_ptr(const void *a, const void *b) {
    const Entry *x = *(Entry *const *)a, *y = *(Entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int check_overlap(Loader *L) {
    Entry **order = malloc(sizeof *order * (size_t)(L->n ? L->n : 1));
    if (!order) return lfail(L, "out of memory");
    int m = 0;
    for (int i = 0; i < L->n; i++)
        if (L->entries[i].end > L->entries[i].begin) order[m++] = &L->entries[i];
    qsort(order, (size_t)m, sizeof *order, cmp_entry_ptr);
    int rc = 0;
    for (int i = 1; i < m && rc == 0; i++)
        if (order[i]->begin < order[i - 1]->end)
            rc = lfail(L, "has an invalid header: tensors '%.200s' (bytes %llu..%llu) and '%.200s' (bytes %llu..%llu) overlap",
                       order[i - 1]->name, (unsigned long long)order[i - 1]->begin,
                       (unsigned long long)order[i - 1]->end, order[i]->name, (unsigned long long)order[i]->begin,
                       (unsigned long long)order[i]->end);
    /* the tensors cover the data section exactly, as the safetensors library requires */
    uint64_t at = 0;
    for (int i = 0; i < m && rc == 0; i++) {
        if (order[i]->begin > at)
            rc = lfail(L, "has an invalid header: bytes %llu..%llu of the data section belong to no tensor (before "
                          "'%.200s')", (unsigned long long)at, (unsigned long long)order[i]->begin, order[i]->name);
        at = order[i]->end;
    }
    if (rc == 0 && at != L->data_len)
        rc = lfail(L, "is not fully covered by its header: the tensors end at byte %llu of the data section, which has "
                      "%llu bytes", (unsigned long long)at, (unsigned long long)L->data_len);
    free(order);
    return rc;
}

static int parse_entries(Loader *L) {
    const JVal *r = &L->root;
    L->entries = calloc((size_t)(r->n ? r->n : 1), sizeof *L->entries);
    if (!L->entries) return lfail(L, "out of memory");
    for (int k = 0; k < r->n; k++) {
        if (strcmp(r->keys[k], META_KEY) == 0) {
            if (check_meta(L, &r->items[k]) < 0) return -1;
        } else if (parse_entry(L, &L->entries[L->n++], r->keys[k], &r->items[k]) < 0) {
            return -1;
        }
    }
    return check_overlap(L);
}

static Tensor *read_tensor(Loader *L, const Entry *e) {
    Tensor *t = tensor_empty(e->shape, e->ndim, e->dt, (Device){DEV_CPU, 0});
    if (!t) {
        lfail(L, "tensor '%.200s': %s", e->name, accel_last_error());
        return NULL;
    }
    HostMap m;
    void *p = tensor_host_map(t, HOST_WRITE, &m);
    if (!p) {
        lfail(L, "tensor '%.200s': %s", e->name, accel_last_error());
        tensor_release(t);
        return NULL;
    }
    if (e->end > e->begin && pread_all(L->fd, p, e->end - e->begin, (off_t)(L->data_start + e->begin)) < 0) {
        int err = errno;
        tensor_host_unmap(&m);
        tensor_release(t);
        if (err == 0) lfail(L, "is truncated: tensor '%.200s' could not be read completely", e->name);
        else lfail(L, "cannot be read: tensor '%.200s': %s", e->name, strerror(err));
        return NULL;
    }
    if (!(t = tensor_host_finish(t, &m))) lfail(L, "tensor '%.200s': %s", e->name, accel_last_error());
    return t;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c) memcpy(c, s, n);
    return c;
}

void safetensors_free_names(char **names, int n) {
    if (!names) return;
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Copy the metadata strings out; 0 or -1. */
static int export_meta(Loader *L, char ***keys, char ***vals, int *n) {
    int m = L->meta ? L->meta->n : 0;
    *keys = calloc((size_t)(m ? m : 1), sizeof **keys);
    *vals = calloc((size_t)(m ? m : 1), sizeof **vals);
    if (!*keys || !*vals) return lfail(L, "out of memory");
    *n = m;
    for (int i = 0; i < m; i++) {
        (*keys)[i] = dup_str(L->meta->keys[i]);
        (*vals)[i] = dup_str(L->meta->items[i].s);
        if (!(*keys)[i] || !(*vals)[i]) return lfail(L, "out of memory");
    }
    return 0;
}

static int export_tensors(Loader *L, char ***names, Tensor ***ts, int *n) {
    *names = calloc((size_t)(L->n ? L->n : 1), sizeof **names);
    *ts = calloc((size_t)(L->n ? L->n : 1), sizeof **ts);
    if (!*names || !*ts) return lfail(L, "out of memory");
    *n = L->n;
    for (int i = 0; i < L->n; i++) {
        if (!((*names)[i] = dup_str(L->entries[i].name))) return lfail(L, "out of memory");
        if (!((*ts)[i] = read_tensor(L, &L->entries[i]))) return -1;
    }
    return 0;
}

int safetensors_load(const char *path, char ***names, Tensor ***ts, int *n, char ***meta_keys, char ***meta_vals,
                     int *n_meta) {
    *names = NULL, *ts = NULL, *n = 0, *meta_keys = NULL, *meta_vals = NULL, *n_meta = 0;
    Loader L = {.path = path};
    L.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (L.fd < 0) return accel_fail_int("accel.load: cannot open '%s': %s", path, strerror(errno));
    int rc = read_header(&L);
    if (rc == 0) rc = parse_entries(&L);
    if (rc == 0) rc = export_meta(&L, meta_keys, meta_vals, n_meta);
    if (rc == 0) rc = export_tensors(&L, names, ts, n);
    close(L.fd);
    jval_free(&L.root);
    free(L.entries);
    if (rc == 0) return 0;
    for (int i = 0; *ts && i < *n; i++) tensor_release((*ts)[i]);
    free(*ts);
    safetensors_free_names(*names, *n);
    safetensors_free_names(*meta_keys, *n_meta);
    safetensors_free_names(*meta_vals, *n_meta);
    *names = NULL, *ts = NULL, *n = 0, *meta_keys = NULL, *meta_vals = NULL, *n_meta = 0;
    return -1;
}

/* ======================= one tensor at a time ======================= */

/* A file opened for reading tensors one by one (the header is parsed and
 * validated once; each read is a pread of the bytes asked for). */
struct SafetensorsFile {
    Loader L;
    char *path;
};

SafetensorsFile *safetensors_open(const char *path) {
    SafetensorsFile *f = calloc(1, sizeof *f);
    size_t len = strlen(path) + 1;
    if (f) f->path = malloc(len);
    if (!f || !f->path) {
        free(f);
        return accel_fail("accel.load: '%s': out of memory", path);
    }
    memcpy(f->path, path, len);
    f->L.path = f->path;
    f->L.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->L.fd < 0) {
        accel_fail("accel.load: cannot open '%s': %s", path, strerror(errno));
        safetensors_close(f);
        return NULL;
    }
    int rc = read_header(&f->L);
    if (rc == 0) rc = parse_entries(&f->L);
    if (rc == 0) return f;
    safetensors_close(f);
    return NULL;
}

void safetensors_close(SafetensorsFile *f) {
    if (!f) return;
    if (f->L.fd >= 0) close(f->L.fd);
    jval_free(&f->L.root);
    free(f->L.entries);
    free(f->path);
    free(f);
}

int safetensors_count(const SafetensorsFile *f) { return f->L.n; }

void safetensors_entry(const SafetensorsFile *f, int i, const char **name, DType *dt, int *ndim, const int64_t **shape) {
    const Entry *e = &f->L.entries[i];
    *name = e->name, *dt = e->dt, *ndim = e->ndim, *shape = e->shape;
}

int safetensors_find(const SafetensorsFile *f, const char *name) {
    for (int i = 0; i < f->L.n; i++)
        if (strcmp(f->L.entries[i].name, name) == 0) return i;
    return -1;
}

Tensor *safetensors_read(SafetensorsFile *f, int i, int64_t first, int64_t count) {
    const Entry *e = &f->L.entries[i];
    if (count < 0) return read_tensor(&f->L, e);
    int64_t numel = (int64_t)((e->end - e->begin) / dtype_size(e->dt));
    if (first < 0 || first > numel || count > numel - first)
        return accel_fail("accel.load: '%s': elements [%lld, %lld) are outside tensor '%.200s' of %lld elements", f->path,
                          (long long)first, (long long)(first + count), e->name, (long long)numel);
    Entry part = *e;
    part.ndim = 1, part.shape[0] = count;
    part.begin = e->begin + (uint64_t)first * dtype_size(e->dt);
    part.end = part.begin + (uint64_t)count * dtype_size(e->dt);
    return read_tensor(&f->L, &part);
}

/* A file written one tensor at a time: the header (from the tensors'
 * dtypes and shapes, known up front) first, then each tensor's bytes as it
 * is put, into "<path>.tmp.<pid>", renamed over path by finish. */
struct SafetensorsWriter {
    char *path, *tmp;
    int fd, n, next;
    DType *dt;
    int64_t *numel;
};

static SafetensorsWriter *writer_fail(SafetensorsWriter *w, const char *what) {
    int saved = errno;
    accel_fail("accel.save: %s '%s': %s", what, w->path, strerror(saved));
    safetensors_writer_abort(w);
    return NULL;
}

static SafetensorsWriter *writer_new(const char *path, int n) {
    SafetensorsWriter *w = calloc(1, sizeof *w);
    size_t len = strlen(path);
    if (w) w->path = malloc(len + 1), w->tmp = malloc(len + 32);
    if (w) w->dt = calloc((size_t)(n ? n : 1), sizeof *w->dt), w->numel = calloc((size_t)(n ? n : 1), sizeof *w->numel);
    if (!w || !w->path || !w->tmp || !w->dt || !w->numel) {
        safetensors_writer_abort(w);
        return accel_fail("accel.save: '%s': out of memory", path);
    }
    memcpy(w->path, path, len + 1);
    snprintf(w->tmp, len + 32, "%s.tmp.%d", path, (int)getpid());
    w->fd = -1, w->n = n;
    return w;
}

SafetensorsWriter *safetensors_writer_open(const char *path, const char **names, Tensor **specs, int n,
                                           const char **meta_keys, const char **meta_vals, int n_meta) {
    if (check_save_args(path, names, specs, n, meta_keys, meta_vals, n_meta) < 0) return NULL;
    SafetensorsWriter *w = writer_new(path, n);
    if (!w) return NULL;
    for (int i = 0; i < n; i++) w->dt[i] = specs[i]->dtype, w->numel[i] = specs[i]->numel;
    StrBuf hdr = {0};
    if (build_header(&hdr, names, specs, n, meta_keys, meta_vals, n_meta) < 0) {
        free(hdr.p);
        safetensors_writer_abort(w);
        return accel_fail("accel.save: '%s': out of memory building the header", path);
    }
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = w->fd < 0 ? -1 : write_all(w->fd, hdr.p, hdr.len);
    free(hdr.p);
    return rc < 0 ? writer_fail(w, w->fd < 0 ? "cannot create" : "cannot write") : w;
}

int safetensors_writer_put(SafetensorsWriter *w, Tensor *t) {
    if (w->next >= w->n) return accel_fail_int("accel.save: '%s': all %d tensors are written already", w->path, w->n);
    int i = w->next;
    if (t->dtype != w->dt[i] || t->numel != w->numel[i]) /* any device: the bytes come through the host */
        return accel_fail_int("accel.save: '%s': tensor %d is %s with %lld elements, the header says %s with %lld",
                              w->path, i + 1, st_dtype_names[t->dtype], (long long)t->numel, st_dtype_names[w->dt[i]],
                              (long long)w->numel[i]);
    int rc = write_tensor_data(w->fd, t);
    if (rc == -1) return accel_fail_int("accel.save: cannot write '%s': %s", w->path, strerror(errno));
    if (rc == -2) return -1;
    w->next++;
    return 0;
}

int safetensors_writer_finish(SafetensorsWriter *w) {
    if (w->next != w->n) {
        int rc = accel_fail_int("accel.save: '%s': %d of %d tensors were written", w->path, w->next, w->n);
        safetensors_writer_abort(w);
        return rc;
    }
    int rc = fsync(w->fd);
    if (close(w->fd) < 0) rc = -1;
    w->fd = -1;
    if (rc == 0 && rename(w->tmp, w->path) < 0) rc = -1;
    if (rc == 0 && fsync_parent_dir(w->path) < 0) rc = -1;
    if (rc < 0) {
        writer_fail(w, "cannot finish");
        return -1;
    }
    free(w->path), free(w->tmp), free(w->dt), free(w->numel), free(w);
    return 0;
}

void safetensors_writer_abort(SafetensorsWriter *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp) unlink(w->tmp);
    free(w->path), free(w->tmp), free(w->dt), free(w->numel), free(w);
}
