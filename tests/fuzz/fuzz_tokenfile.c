/* fuzz_tokenfile.c: libFuzzer target for llm.c token files (core/io/tokenfile.c):
 * the header checks of tokenfile_map, then one block of tokens read through
 * tokenfile_blocks at a start and length taken from the header's spare words. */
#include "fuzz_input.h"
#include "io/datafiles.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Tensor *tok = tokenfile_map(fuzz_input_file(data, size, ".bin"));
    if (!tok) return 0;
    int32_t h[5] = {0};
    memcpy(h, data, size < sizeof h ? size : sizeof h);
    int64_t start = h[3], T = h[4];
    Tensor *x = NULL, *y = NULL;
    if (tokenfile_blocks(tok, &start, 1, T, &x, &y) == 0 && x->numel > 0)
        (void)tensor_get_flat(y, y->numel - 1);
    tensor_release(x), tensor_release(y), tensor_release(tok);
    return 0;
}
