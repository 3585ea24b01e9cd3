/* safetensors.h: reading and writing the safetensors file format, byte
 * compatible with the Python `safetensors` library: an 8-byte little-endian
 * header length, a JSON header naming each tensor's dtype, shape and byte
 * range, then the raw little-endian tensor bytes. Pure C, no Lua. Both calls
 * return 0, or -1 with a message in accel_last_error() that names the file
 * and the cause. */
#ifndef ACCEL_SAFETENSORS_H
#define ACCEL_SAFETENSORS_H

#include "tensor.h"

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

#endif
