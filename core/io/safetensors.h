/* safetensors.h: reading and writing the safetensors file format, byte
 * compatible with the Python `safetensors` library: an 8-byte little-endian
 * header length, a JSON header naming each tensor's dtype, shape and byte
 * range, then the raw little-endian tensor bytes. Pure C, no Lua. Both calls
 * return 0, or -1 with a message in accel_last_error() that names the file
 * and the cause. */
#ifndef ACCEL_SAFETENSORS_H
#define ACCEL_SAFETENSORS_H

#include "../tensor.h"

/* Largest JSON header accepted (the Python library's limit). */
#define SAFETENSORS_MAX_HEADER 100000000u

/* Write n CPU tensors under the given unique names, in the given order,
 * plus optional string metadata ("__metadata__"; omitted when n_meta == 0).
 * The file is written to "<path>.tmp.<pid>", fsynced and renamed over path,
 * so path holds either its old contents or the complete new file. */
int safetensors_save(const char *path, const char **names, Tensor **ts, int n, const char **meta_keys,
                     const char **meta_vals, int n_meta);

/* Read and validate a whole file. On success *names / *ts hold *n entries in
 * header order (malloc'd strings, new CPU tensor references) and *meta_keys /
 * *meta_vals hold *n_meta metadata pairs. The caller frees the strings with
 * safetensors_free_names and releases the tensors and the *ts array itself
 * (free). On failure every output is set to NULL / 0. */
int safetensors_load(const char *path, char ***names, Tensor ***ts, int *n, char ***meta_keys, char ***meta_vals,
                     int *n_meta);

/* Free an array of n malloc'd strings and the array (NULL is fine). */
void safetensors_free_names(char **names, int n);

/* ---- one tensor at a time (never the whole file in memory) ---- */

/* A file whose header is parsed and validated; NULL with a message on error. */
typedef struct SafetensorsFile SafetensorsFile;
SafetensorsFile *safetensors_open(const char *path);
void safetensors_close(SafetensorsFile *f);
int safetensors_count(const SafetensorsFile *f);
/* Entry i (0-based, header order): its name (valid until close), dtype and shape. */
void safetensors_entry(const SafetensorsFile *f, int i, const char **name, DType *dt, int *ndim, const int64_t **shape);
int safetensors_find(const SafetensorsFile *f, const char *name); /* -1 when absent */
/* Entry i as a new CPU tensor (count < 0), or its elements [first, first +
 * count) in storage order as a 1-D tensor. */
Tensor *safetensors_read(SafetensorsFile *f, int i, int64_t first, int64_t count);

/* A file written one tensor at a time: open writes the header from specs'
 * dtypes and shapes (their data is not read: a tensor whose memory is
 * released works), put writes the next tensor's bytes (same dtype and
 * element count as its spec), finish fsyncs and renames the temporary
 * "<path>.tmp.<pid>" over path; abort (also after a failed put) removes
 * it. finish and abort free the writer. */
typedef struct SafetensorsWriter SafetensorsWriter;
SafetensorsWriter *safetensors_writer_open(const char *path, const char **names, Tensor **specs, int n,
                                           const char **meta_keys, const char **meta_vals, int n_meta);
int safetensors_writer_put(SafetensorsWriter *w, Tensor *t);
int safetensors_writer_finish(SafetensorsWriter *w);
void safetensors_writer_abort(SafetensorsWriter *w);

#endif
