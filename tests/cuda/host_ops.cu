/* host_ops.cu: the CUDA kernels' scalar functions (kernels/cuda/scalar_ops.cuh)
 * compiled for the host, so test_cuda.c compares them with the CPU kernels
 * on a machine without a GPU. Host code only; the math library is the
 * host's, so this checks the formulas and edge cases, not device ulps. */
#include "kernels/cuda/scalar_ops.cuh"
#include "kernels/cuda/common.cuh"

extern "C" float hk_binop_f32(int op, float x, float y) { return binop<float>((KBinOp)op, x, y); }
extern "C" double hk_binop_f64(int op, double x, double y) { return binop<double>((KBinOp)op, x, y); }
extern "C" int64_t hk_binop_i64(int op, int64_t x, int64_t y) { return binop<int64_t>((KBinOp)op, x, y); }
extern "C" float hk_unop_f32(int op, float x, float p1, float p2) { return unop<float>((KUnOp)op, x, p1, p2); }
extern "C" double hk_unop_f64(int op, double x, double p1, double p2) { return unop<double>((KUnOp)op, x, p1, p2); }
extern "C" int64_t hk_unop_i64(int op, int64_t x, int64_t lo, int64_t hi) { return unop((KUnOp)op, x, lo, hi); }
extern "C" float hk_grad_f32(int op, float x, float y, float gy, float p1, float p2) {
    return unary_grad<float>((KUnOp)op, x, y, gy, p1, p2);
}
extern "C" double hk_grad_f64(int op, double x, double y, double gy, double p1, double p2) {
    return unary_grad<double>((KUnOp)op, x, y, gy, p1, p2);
}
extern "C" void hk_offsets(const KcIter *it, int64_t lin, int nops, int64_t off[4]) { kc_offsets(*it, lin, nops, off); }
