/* lua_util.h: helpers shared by the binding files: tensor userdata,
 * errors with the user's file:line, and argument parsing with Lua's 1-based
 * dims. */
#ifndef ACCEL_LUA_UTIL_H
#define ACCEL_LUA_UTIL_H

#include "lua_compat.h"
#include <time.h>
#include "../core/tensor.h"
#include "../core/ops.h"

#define TENSOR_MT "accel.Tensor"

typedef struct {
    Tensor *t; /* NULL once freed */
} TensorUD;

/* Binding data of one Lua state, reached through lua_getextraspace (the
 * program and accel.so both own their state's extra space). */
typedef struct {
    const void *tensor_mt; /* the Tensor metatable; also a registry key for it */
    size_t gc_debt;        /* tensor bytes not yet reported to the GC */
    size_t gc_since_full;  /* tensor bytes pushed since the last forced full collection */
    size_t gc_full_base;   /* tensor bytes alive right after it */
    size_t gc_pushed;      /* tensor bytes pushed in all (estimate-memory reads it) */
} LuState;

LuState *lu_state(lua_State *L);
/* fn(L) runs when the state closes (the finaliser of a userdata kept in
 * the registry under key; finalisers run in reverse order of creation). */
void lu_at_close(lua_State *L, const char *key, lua_CFunction fn);
/* "file:line" of the first Lua frame of L that is not the embedded library
 * (the user's code) into buf, or "". */
void lu_user_site(lua_State *L, char *buf, size_t n);
void lu_state_init(lua_State *L); /* after the Tensor metatable exists */

/* Raise a Lua error "file:line: message" at the first frame outside the
 * embedded library. Never returns. */
int lu_error(lua_State *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Raise the core runtime's last error. */
int lu_core_error(lua_State *L);

Tensor *lu_check_tensor(lua_State *L, int idx);
/* Argument 1 of a tensor method (t:name(...)); anything else raises
 * "Tensor.name: call it as t:name(...), not t.name(...)". */
Tensor *lu_check_self(lua_State *L);
/* The same, also for a stage-3 parameter whose storage is released: for shape queries. */
Tensor *lu_check_self_meta(lua_State *L);
Tensor *lu_to_tensor(lua_State *L, int idx); /* NULL if not a tensor */
/* As lu_to_tensor, also for a tensor whose memory a sharding engine released
 * (its shape, dtype, ... stay readable); not for reading data. */
Tensor *lu_tensor_meta(lua_State *L, int idx);
bool lu_is_tensor(lua_State *L, int idx);
/* Push a tensor (steals the reference); raises the core error when t is NULL. */
void lu_push_tensor(lua_State *L, Tensor *t);
/* Push a tensor that may already have a Lua twin (returns the same userdata). */
void lu_push_existing(lua_State *L, Tensor *t);

/* A Lua dim (1-based, negative from the end) to a core dim (0-based, negative kept). */
int lu_dim(lua_State *L, int idx);
int lu_dim_value(lua_State *L, lua_Integer d);
/* Dims from a number or a list of numbers at idx into out; returns count. */
int lu_dims(lua_State *L, int idx, int *out);
/* Field key of the options table at idx as a core dim; def when absent (or
 * no options table); anything but an integer is an error naming the option. */
int lu_opt_dim(lua_State *L, int idx, const char *key, int def);
/* Shape from varargs numbers starting at idx, or one table at idx; returns ndim;
 * *next receives the index after the shape arguments. */
int lu_shape(lua_State *L, int idx, int64_t *shape, int *next);
/* lu_shape for sizes given as varargs (creation functions, view): an
 * explicit nil right after them is an error naming it. */
int lu_sizes(lua_State *L, int idx, int64_t *shape, int *next);
/* The values dtype dt holds (false for float64 and fp8, which take any double). */
bool lu_dtype_limits(DType dt, double *lo, double *hi);
/* A fill value v for dtype dt (full, fill_, masked_fill, tensor literals): one
 * the dtype cannot hold (300 in uint8, 1e5 in float16, NaN in an integer dtype)
 * is an error naming op, as torch's "cannot be converted ... without overflow";
 * whole negatives wrap in uint8 (-1 -> 255), fp8 saturates and bool takes any
 * value, as torch's. */
void lu_check_fill_value(lua_State *L, double v, DType dt, const char *op);
/* An options table at idx (or none). */
bool lu_is_opts(lua_State *L, int idx); /* idx 0: false */
/* The string -> string table at idx (none/nil: empty) as two arrays of n
 * entries, kept alive by a userdata pushed on the stack; any other entry is
 * an error naming `what`. Returns n. */
int lu_string_map(lua_State *L, int idx, const char ***keys, const char ***vals, const char *what);
/* Raises "<fn>: unknown option '<k>' (options: <keys>)" at the user's line
 * for a key of the options table at idx that is not in keys (a
 * space-separated list); nothing when idx is 0 or holds no options table. */
void lu_check_opts(lua_State *L, int idx, const char *fn, const char *keys);
/* The same, fn being the name the running C function was called by
 * ("zeros", "sum", ...). */
void lu_check_call_opts(lua_State *L, int idx, const char *keys);
/* Arguments from idx on must be nil or empty options tables: anything else
 * is an error naming the running function ("unexpected argument #k", or
 * "unknown option 'k'" for an options table with a key). */
void lu_check_no_more_args(lua_State *L, int idx);
/* The value at idx as an int64 when it is a Lua integer or a float with an
 * integral value in int64's range (2^62 is a float in Lua 5.4); else false. */
bool lu_to_int64(lua_State *L, int idx, int64_t *out);
/* The same after an optional options table at idx (checked by the caller). */
void lu_check_no_more_after_opts(lua_State *L, int idx);
/* Error naming the running function: argument idx should have been what
 * (e.g. "a boolean keepdim"), with the type it has. */
int lu_arg_type_error(lua_State *L, int idx, const char *what);
/* torch's dim keyword: when argument idx is an options table (its keys in
 * keys, dim among them), its dim field (maybe nil) takes its place and the
 * table is pushed on top for its other keys; returns that index, or 0 when
 * idx holds no options table (nothing changes). */
int lu_dim_keyword(lua_State *L, int idx, const char *keys);
bool lu_opt_bool(lua_State *L, int idx, const char *key, bool def);
double lu_opt_number(lua_State *L, int idx, const char *key, double def);
int lu_opt_dtype(lua_State *L, int idx, const char *key, int def); /* -1 default passthrough */
int lu_check_dtype(lua_State *L, int idx);                          /* dtype object or string */
Device lu_opt_device(lua_State *L, int idx, const char *key); /* absent: the default device */
Device lu_default_device(lua_State *L);
Device lu_check_device(lua_State *L, int idx); /* accel.device or "cpu" / "cuda:N" / "sim" */
void lu_set_default_device(lua_State *L, int idx); /* device at idx becomes the default */
void lu_push_dtype(lua_State *L, DType dt);
void lu_push_device(lua_State *L, Device d);
bool lu_is_dtype(lua_State *L, int idx);
bool lu_is_device(lua_State *L, int idx);

/* Tensor or number at idx as a tensor (numbers become 0-dim of dtype like). */
Tensor *lu_tensor_or_scalar(lua_State *L, int idx, const Tensor *like);
/* A Lua integer at idx that a double cannot hold exactly (beyond +-2^53) */
bool lu_is_wide_integer(lua_State *L, int idx);
/* The Lua integer at idx as an exact 0-dim int64 tensor on device d */
Tensor *lu_int64_scalar(lua_State *L, int idx, Device d);
/* Raises lu_tensor_or_scalar's type error for idx, if any: call it first
 * when a tensor made from an earlier argument would leak. */
void lu_check_tensor_or_scalar(lua_State *L, int idx);
/* where(cond, a, b), a and b the tensors or numbers at ia / ib (a number
 * becomes a 0-dim tensor like the other operand and must be a value of its
 * integer dtype); NULL with the core error set when op_where failed. */
Tensor *lu_where(lua_State *L, Tensor *cond, int ia, int ib);

/* Push the time of clock (CLOCK_MONOTONIC, CLOCK_REALTIME) in seconds, with
 * fractions; returns 1, the count of results. */
int lu_push_clock(lua_State *L, clockid_t clock);
/* Errors of accel's C functions name the op they were registered as:
 * lu_name_op records the function at index fn as op `name` (the first name
 * wins); lu_name_ops records fns as they are set in table t. */
void lu_name_op(lua_State *L, int fn, const char *name);
void lu_name_ops(lua_State *L, int t, const luaL_Reg *fns);
/* Register the metatable mt of a userdata class: methods as its __index,
 * gc as __gc and tostring as __tostring. */
void lu_new_class(lua_State *L, const char *mt, const luaL_Reg *methods, lua_CFunction gc, lua_CFunction tostring);

/* Report n bytes of tensor memory to the Lua GC. */
void lu_gc_account(lua_State *L, size_t n);
void lu_gc_before_backward(lua_State *L); /* full collection as backward starts (lua_util.c) */
void lu_gc_after_checkpoint(lua_State *L);  /* the one after a checkpointed forward / recompute */

void lu_open_tensor(lua_State *L); /* registers the Tensor metatable */
void lu_open_device(lua_State *L);
int lu_device_new(lua_State *L);
int lu_size_new(lua_State *L); /* accel.Size({2, 3}) */
/* print_options_lua.c: accel.set_printoptions / get_printoptions; the
 * state's current options (PyTorch's defaults until set) */
int lu_set_printoptions(lua_State *L);
int lu_get_printoptions(lua_State *L);
void lu_print_options(lua_State *L, PrintOptions *o);
/* Add functions to accel._C (created by luaopen_accel before any lu_open_*). */
void lu_register_c(lua_State *L, int module_idx, const luaL_Reg *fns);
void lu_open_autograd(lua_State *L, int module_idx);
/* Run ag_backward with custom Lua Function backwards called on L (the running
 * thread); a failure is raised as a Lua error (a backward's own error value
 * when it raised one that is not a string). */
void lu_run_backward(lua_State *L, Tensor *root, Tensor *grad, bool retain_graph);
/* t:register_hook(fn) and t:retain_grad() (autograd_lua.c) */
int lu_tensor_register_hook(lua_State *L);
int lu_tensor_register_post_accumulate_grad_hook(lua_State *L);
int lu_tensor_retain_grad(lua_State *L);
void lu_open_functions(lua_State *L, int module_idx);
void lu_open_conv(lua_State *L, int module_idx); /* conv_lua.c: conv2d, max_pool2d */
void lu_open_optim(lua_State *L, int module_idx); /* optim_lua.c: sgd_step, adam_step, total_norm */
void lu_open_tracking(lua_State *L, int module_idx); /* crc32c, fsync, isatty, mkdirs, raise, ... */
void lu_open_fs(lua_State *L, int module_idx); /* fs_write, fs_rename, fs_crc32, fs_listdir, ... (fs_lua.c) */
void lu_open_data(lua_State *L, int module_idx); /* data_lua.c: data_randperm, read_idx, read_csv, token_map, ... */
void lu_open_dist(lua_State *L, int module_idx); /* dist_lua.c: dist_all_reduce, dist_all_gather, ... (core/dist/dist.h) */
void lu_open_ddp(lua_State *L, int module_idx); /* ddp_lua.c: ddp_reducer (core/dist/ddp.h) */
void lu_open_shard(lua_State *L, int module_idx); /* shard_lua.c: shard_engine (core/dist/shard.h) */
void lu_open_safetensors(lua_State *L, int module_idx); /* safetensors_lua.c: st_open, st_writer (one tensor at a time) */
void lu_open_attention(lua_State *L, int module_idx); /* attention_lua.c: scaled_dot_product_attention (fused) */
void lu_open_profile(lua_State *L, int module_idx); /* profile_lua.c: profile_start/stop/events (core/profile.h) */
void lu_open_cuda(lua_State *L, int module_idx); /* cuda_lua.c: device_count, accel.cuda.*, accel.backends.cuda.matmul */
void lu_open_sort(lua_State *L, int module_idx); /* sort_lua.c: argsort_last */
/* Loads accel.tensor_methods (the tensor methods written in Lua) into the
 * method table the first time it is called; true then. */
bool lu_load_lua_tensor_methods(lua_State *L);
void lu_open_fp8(lua_State *L, int module_idx); /* fp8_lua.c: fp8_quantize, fp8_dequantize, fp8_amax, fp8_update_scale, fp8_scaled_mm (core/fp8.h) */

#endif
