/* datafiles.h: readers for the data-set file formats of accel.data, usable
 * from C without Lua. Each returns a new tensor (or -1 / NULL) with the
 * error in accel_last_error() naming the file and what is wrong with it.
 *   idx.c        IDX files (the MNIST family), plain or gzipped
 *   csv.c        CSV tables (numbers from the selected columns)
 *   tokenfile.c  llm.c's .bin token files, memory-mapped */
#ifndef ACCEL_DATAFILES_H
#define ACCEL_DATAFILES_H

#include "../tensor.h"

/* IDX: a tensor with the file's shape; uint8 -> uint8, int32 -> int32,
 * float32 / float64 as stored, int8 / int16 widened to int32 (no narrower
 * signed dtype exists). Big-endian on disk, native in the tensor. */
Tensor *idx_read(const char *path);

/* CSV (RFC 4180 as Python's csv module reads it; the rules are at the top
 * of csv.c and in docs/data.md). csv_open reads the file and its header
 * (with header; otherwise the first record only fixes the column count);
 * csv_read_fields then reads the columns the fields select, each field's as
 * its dtype (integer dtypes exactly, range-checked), into one new CPU
 * tensor per field: (rows) for a vector field (one column), else (rows,
 * ncols). Columns no field selects may hold any text. */
typedef struct CsvFile CsvFile;
typedef struct {
    const int *cols; /* 0-based column indices, in the order wanted */
    int ncols;
    DType dtype;
    bool vector; /* a 1-D tensor (ncols must be 1) */
} CsvField;
CsvFile *csv_open(const char *path, char delim, bool header);
int csv_columns(const CsvFile *f);
const char *csv_column_name(const CsvFile *f, int col); /* 0-based; NULL without header */
int csv_read_fields(const CsvFile *f, const CsvField *fields, int nfields, Tensor **tensors);
void csv_close(CsvFile *f);

/* All columns as one float64 tensor (rows, columns). With header, *names
 * receives the column names (malloc'd array of malloc'd strings, free with
 * datafiles_free_names); otherwise *names is NULL. *ncols is the column
 * count. */
Tensor *csv_read(const char *path, char delim, bool header, char ***names, int *ncols);
void datafiles_free_names(char **names, int n);

/* llm.c token file: header of 256 little-endian int32 (magic 20240520,
 * version 1, token count), then uint16 token ids. Returns the token bytes
 * as a uint8 tensor of shape (ntok, 2) (little-endian: low byte first) that
 * views the memory-mapped file without copying; the mapping is removed when
 * the last tensor using it is released. */
Tensor *tokenfile_map(const char *path);

/* Token blocks from a tokenfile_map tensor: for each b < B, x[b] = ids
 * [starts[b], starts[b] + T) and y[b] = ids [starts[b] + 1, starts[b] + T + 1),
 * as int64 tensors (B, T). starts (0-based) must leave T + 1 tokens. */
int tokenfile_blocks(const Tensor *tokens, const int64_t *starts, int64_t B, int64_t T, Tensor **x, Tensor **y);

#endif
