/* fuzz_idx.c: libFuzzer target for the IDX reader (core/io/idx.c), plain and
 * gzipped inputs alike (zlib tells them apart by the gzip magic). */
#include "fuzz_input.h"
#include "io/datafiles.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Tensor *t = idx_read(fuzz_input_file(data, size, ".idx"));
    if (t && t->numel > 0) (void)tensor_get_flat(t, t->numel - 1); /* the last element is readable */
    tensor_release(t);
    return 0;
}
