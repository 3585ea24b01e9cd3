/* config_yaml.c: reading and writing the config file (see config_yaml.h).
 * The file is a YAML mapping with Accelerate's keys; deepspeed_config,
 * fsdp_config and mpirun_config are nested mappings. Accelerate's keys for
 * what does not exist here (unsupported.c) are accepted with a value that
 * asks for nothing (`tpu_use_cluster: false`, `dynamo_config: {}`), and
 * are otherwise an error naming the key and why; any other key is an
 * error. A null value (`key:`, `key: null`) leaves the setting unset.
 * Duplicate keys are errors. Older Accelerate's top-level `fp16: true` and
 * `dynamo_backend: 'NO'` are read as Accelerate still reads them. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "core/io/replace.h"
#include "host/config_yaml.h"
#include "host/host.h"

const char *config_default_path(char *buf, size_t n) {
    const char *env = getenv("ACCEL_LUA_CONFIG");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (env != NULL && env[0] != '\0')
        snprintf(buf, n, "%s", env);
    else if (xdg != NULL && xdg[0] == '/')
        snprintf(buf, n, "%s/accel-lua/default_config.yaml", xdg);
    else
        snprintf(buf, n, "%s/.cache/accel-lua/default_config.yaml", home ? home : ".");
    return buf;
}

const char *config_path_in_force(const char *given, char *buf, size_t n) {
    if (given != NULL) return given;
    config_default_path(buf, n);
    return access(buf, F_OK) == 0 ? buf : NULL;
}

/* ---- reading ---- */

typedef struct {
    yaml_document_t doc;
    LaunchConfig *c;
    const char *path;
    const char *who;
    int seen[S_COUNT];
    char *dropped; /* NULL, or where to list the accepted no-op keys */
    size_t dropped_len;
    int legacy_fp16; /* older Accelerate's top-level `fp16:`: 1 true, -1 false, 0 not given */
} Reader;

/* Prints "<who>: <path>:<line>: <message>"; returns -1. */
__attribute__((format(printf, 3, 4)))
static int fail(const Reader *r, const yaml_node_t *node, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: %s:%d: ", r->who, r->path, (int)node->start_mark.line + 1);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return -1;
}

static const char *scalar(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static int is_null(const yaml_node_t *n) {
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *s = scalar(n);
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* An empty sequence or mapping ([] / {}) asks for nothing, like null. */
static int is_empty(const yaml_node_t *n) {
    if (n->type == YAML_SEQUENCE_NODE) return n->data.sequence.items.top == n->data.sequence.items.start;
    if (n->type == YAML_MAPPING_NODE) return n->data.mapping.pairs.top == n->data.mapping.pairs.start;
    return is_null(n);
}

/* One of Accelerate's keys for what accel-lua lacks: fine if its value
 * asks for nothing (noted in r->dropped), else an error saying why. */
static int read_unsupported(Reader *r, const Unsupported *u, const char *key,
                            const yaml_node_t *vn) {
    int scalar_value = vn->type == YAML_SCALAR_NODE && !is_null(vn);
    if (!is_empty(vn) && !(scalar_value && unsupported_is_neutral(u, scalar(vn)))) {
        if (scalar_value) return fail(r, vn, "%s: '%s' is not supported: %s", key, scalar(vn), u->reason);
        return fail(r, vn, "%s is not supported: %s", key, u->reason);
    }
    if (r->dropped != NULL) {
        size_t used = strlen(r->dropped);
        snprintf(r->dropped + used, r->dropped_len - used, "%s%s", used ? ", " : "", key);
    }
    return 0;
}

/* Older Accelerate's top-level `fp16: true|false` (its process_config
 * turns it into mixed_precision: fp16 when the file has no
 * mixed_precision; config_read_noting applies it after the whole file). */
static int read_legacy_fp16(Reader *r, const yaml_node_t *kn, const yaml_node_t *vn) {
    if (r->legacy_fp16 != 0) return fail(r, kn, "'fp16' given twice");
    if (is_null(vn)) return 0;
    const char *v = vn->type == YAML_SCALAR_NODE ? scalar(vn) : "";
    int on = setting_bool(v);
    if (on < 0) return fail(r, vn, "fp16: '%s' is not a boolean (true or false)", v);
    r->legacy_fp16 = on ? 1 : -1;
    return 0;
}

static int read_value(Reader *r, const char *key, const yaml_node_t *kn, const yaml_node_t *vn) {
    char err[256];
    if (strcmp(key, "fp16") == 0) return read_legacy_fp16(r, kn, vn);
    int id = setting_by_key(key);
    if (id < 0) {
        const Unsupported *u = unsupported_by_key(key);
        if (u != NULL) return read_unsupported(r, u, key, vn);
        return fail(r, kn, "unknown key '%s'", key);
    }
    if (r->seen[id]) return fail(r, kn, "'%s' given twice", key);
    r->seen[id] = 1;
    if (is_null(vn)) return 0;
    if (vn->type != YAML_SCALAR_NODE) return fail(r, vn, "%s: expected a single value", key);
    if (config_set(r->c, id, scalar(vn), SRC_FILE, err, sizeof err) != 0)
        return fail(r, vn, "%s: %s", key, err);
    if (strcmp(key, "deepspeed_config.gradient_accumulation_steps") == 0) r->c->ds_gradient_accumulation = 1;
    return 0;
}

/* Reads the pairs of a mapping node; prefix is "" or "section.". */
static int read_mapping(Reader *r, const yaml_node_t *map, const char *prefix) {
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(&r->doc, p->key);
        yaml_node_t *vn = yaml_document_get_node(&r->doc, p->value);
        if (kn->type != YAML_SCALAR_NODE) return fail(r, kn, "keys must be names");
        char key[256];
        snprintf(key, sizeof key, "%s%s", prefix, scalar(kn));
        int status;
        if (prefix[0] == '\0' && setting_is_section(key)) {
            if (is_null(vn)) continue;
            if (vn->type != YAML_MAPPING_NODE)
                return fail(r, vn, "%s: expected a mapping of keys", key);
            strcat(key, ".");
            status = read_mapping(r, vn, key);
        } else {
            status = read_value(r, key, kn, vn);
        }
        if (status != 0) return status;
    }
    return 0;
}

int config_read(LaunchConfig *c, const char *path, const char *who) {
    return config_read_noting(c, path, who, NULL, 0);
}

int config_read_noting(LaunchConfig *c, const char *path, const char *who, char *dropped,
                       size_t n) {
    Reader r = {.c = c, .path = path, .who = who, .dropped = dropped, .dropped_len = n};
    if (dropped != NULL && n > 0) dropped[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot read config file %s: %s\n", who, path, strerror(errno));
        return -1;
    }
    yaml_parser_t parser;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    int status = -1;
    if (!yaml_parser_load(&parser, &r.doc)) {
        fprintf(stderr, "%s: %s:%d: not valid YAML: %s\n", who, path,
                (int)parser.problem_mark.line + 1, parser.problem ? parser.problem : "?");
    } else {
        yaml_node_t *root = yaml_document_get_root_node(&r.doc);
        if (root == NULL || is_null(root))
            status = 0; /* empty file: no settings */
        else if (root->type != YAML_MAPPING_NODE)
            status = fail(&r, root, "expected a mapping of keys to values");
        else
            status = read_mapping(&r, root, "");
        char err[256];
        if (status == 0 && r.legacy_fp16 > 0 && !r.seen[S_MIXED_PRECISION] &&
            config_set(c, S_MIXED_PRECISION, "fp16", SRC_FILE, err, sizeof err) != 0)
            status = fail(&r, root, "fp16: %s", err);
        yaml_document_delete(&r.doc);
    }
    yaml_parser_delete(&parser);
    fclose(f);
    return status;
}

/* ---- writing ---- */

static void write_scalar(FILE *f, const Setting *s, const char *v) {
    if (s->type != ST_STR && s->type != ST_ENUM) {
        fputs(v, f);
        return;
    }
    fputc('\'', f);
    for (; *v != '\0'; v++) {
        if (*v == '\'') fputc('\'', f);
        fputc(*v, f);
    }
    fputc('\'', f);
}

/* Writes the set settings whose key starts with section (length n; 0 =
 * top level, i.e. keys without a dot). */
static void write_group(FILE *f, const LaunchConfig *c, const char *section, size_t n) {
    int header = 0;
    for (int i = 0; i < S_COUNT; i++) {
        const char *key = host_settings[i].key;
        if (key == NULL || c->value[i] == NULL) continue;
        const char *dot = strchr(key, '.');
        if (n == 0 ? dot != NULL : (strncmp(key, section, n) != 0 || key[n] != '.')) continue;
        if (n > 0 && !header) fprintf(f, "%.*s:\n", (int)n, section);
        header = 1;
        fprintf(f, "%s%s: ", n > 0 ? "  " : "", n > 0 ? key + n + 1 : key);
        write_scalar(f, &host_settings[i], c->value[i]);
        fputc('\n', f);
    }
}

/* mkdir -p of the folder holding path. */
static int make_parents(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash == NULL || slash == path ? 0 : host_make_dirs(path, (size_t)(slash - path));
}

int config_write(const LaunchConfig *c, const char *path, const char *who) {
    static const char *const sections[] = {"deepspeed_config", "fsdp_config", "mpirun_config"};
    char tmp[4096];
    const char *kind = io_not_replaceable(path);
    if (kind) {
        fprintf(stderr, "%s: cannot write %s: it is %s (the config is written to a new file renamed into place)\n",
                who, path, kind);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = make_parents(path) == 0 ? fopen(tmp, "w") : NULL;
    if (f == NULL) {
        fprintf(stderr, "%s: cannot write %s: %s\n", who, path, strerror(errno));
        return -1;
    }
    fprintf(f, "# accel-lua config (Accelerate's keys); `accel-lua config` writes it,\n"
               "# `accel-lua launch` reads it. Command-line flags take precedence.\n");
    write_group(f, c, "", 0);
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        write_group(f, c, sections[i], strlen(sections[i]));
    int bad = ferror(f) | (fclose(f) != 0);
    if (bad || rename(tmp, path) != 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", who, path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
