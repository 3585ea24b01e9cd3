/* fuzz_csv.c: libFuzzer target for the CSV reader (core/io/csv.c). The first
 * byte picks the options: bit 0 a header line, bits 1-2 the delimiter. */
#include "fuzz_input.h"
#include "io/datafiles.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char delims[4] = {',', ';', '\t', ' '};
    if (size == 0) return 0;
    char **names;
    int ncols;
    Tensor *t = csv_read(fuzz_input_file(data + 1, size - 1, ".csv"), delims[data[0] >> 1 & 3], data[0] & 1, &names, &ncols);
    if (t && t->numel > 0) (void)tensor_get_flat(t, t->numel - 1);
    if (t) datafiles_free_names(names, ncols);
    tensor_release(t);
    return 0;
}
