/* fuzz_safetensors.c: libFuzzer target for the safetensors reader
 * (core/io/safetensors.c): header length, JSON header, offsets, data. */
#include "fuzz_input.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char **names, **keys, **vals;
    Tensor **ts;
    int n, n_meta;
    if (safetensors_load(fuzz_input_file(data, size, ".safetensors"), &names, &ts, &n, &keys, &vals, &n_meta) < 0) return 0;
    for (int i = 0; i < n; i++) {
        if (ts[i]->numel > 0) (void)tensor_get_flat(ts[i], ts[i]->numel - 1);
        tensor_release(ts[i]);
    }
    free(ts);
    safetensors_free_names(names, n);
    safetensors_free_names(keys, n_meta);
    safetensors_free_names(vals, n_meta);
    return 0;
}
