/* fuzz_yaml.c: libFuzzer target for the launch config reader
 * (host/config_yaml.c over libyaml, values checked by host/settings.c).
 * Its error messages go to the FILE stderr, pointed at /dev/null here (the
 * sanitizers write their reports to fd 2 directly, which stays open). */
#include "fuzz_input.h"
#include "host/config_yaml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *quiet;
    if (!quiet && (quiet = fopen("/dev/null", "w"))) stderr = quiet;
    LaunchConfig c;
    memset(&c, 0, sizeof c);
    (void)config_read(&c, fuzz_input_file(data, size, ".yaml"), "fuzz");
    config_free(&c);
    return 0;
}
