/* cmd_test.c: `accel-lua test [--config_file PATH]`, like `accelerate
 * test`: writes a small built-in Lua script to a temporary file and runs
 * it through `accel-lua launch` on the configured setup (so with
 * num_processes > 1 it goes through mpirun), then prints "Test is a
 * success!" when every rank passed.
 *
 * The script checks that the launch settings reached the rank (the
 * ACCEL_LUA_* variables, the rank count), trains a linear regression with
 * tensors and autograd, and sums the ranks with accel.dist.all_reduce.
 * SEAM: once accel.nn / accel.optim and the Accelerator are settled,
 * extend TEST_SCRIPT to train through accelerator:prepare (DDP) and check
 * that every rank ends with the same parameters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host/subcommands.h"

#define WHO "accel-lua test"

static const char TEST_SCRIPT[] =
    "-- accel-lua test: written and run by `accel-lua test`\n"
    "local accel = require('accel')\n"
    "local rank = tonumber(os.getenv('OMPI_COMM_WORLD_RANK') or os.getenv('PMI_RANK') or '0')\n"
    "local size = tonumber(os.getenv('OMPI_COMM_WORLD_SIZE') or os.getenv('PMI_SIZE') or '1')\n"
    "local want = tonumber(os.getenv('ACCEL_LUA_NUM_PROCESSES') or '1')\n"
    "assert(size == want, ('launched %d ranks, expected num_processes = %d'):format(size, want))\n"
    "for _, name in ipairs{'ACCEL_LUA_MIXED_PRECISION', 'ACCEL_LUA_DISTRIBUTED_TYPE',\n"
    "                      'ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS', 'ACCEL_LUA_USE_CPU'} do\n"
    "  assert(os.getenv(name), name .. ' did not reach the rank')\n"
    "end\n"
    "accel.set_seed(1234 + rank)\n"
    "local x = accel.randn(64, 3)\n"
    "local y = x:matmul(accel.tensor{{1.5}, {-2.0}, {0.5}}) + 0.25\n"
    "local w = accel.zeros(3, 1, {requires_grad = true})\n"
    "local b = accel.zeros(1, {requires_grad = true})\n"
    "local first, last\n"
    "for _ = 1, 300 do\n"
    "  local loss = (x:matmul(w) + b - y):pow(2):mean()\n"
    "  loss:backward()\n"
    "  accel.no_grad(function() w:sub_(w.grad * 0.1); b:sub_(b.grad * 0.1) end)\n"
    "  w.grad:zero_(); b.grad:zero_()\n"
    "  first = first or loss:item(); last = loss:item()\n"
    "end\n"
    "assert(last < 1e-4 * first, ('training did not converge: loss %g -> %g'):format(first, last))\n"
    "local sum = accel.dist.all_reduce(accel.tensor{rank + 1.0}, 'sum'):item()\n"
    "assert(sum == size * (size + 1) / 2, ('all_reduce over %d ranks gave %g'):format(size, sum))\n"
    "print(('rank %d/%d: loss %.3g -> %.3g; %s, mixed_precision %s, %d thread(s)'):format(\n"
    "  rank, size, first, last, os.getenv('ACCEL_LUA_DISTRIBUTED_TYPE'),\n"
    "  os.getenv('ACCEL_LUA_MIXED_PRECISION'), accel.num_threads()))\n";

static int write_script(char *path) {
    const char *tmp = getenv("TMPDIR");
    snprintf(path, 4096, "%s/accel-lua-test-XXXXXX.lua", tmp && tmp[0] ? tmp : "/tmp");
    int fd = mkstemps(path, 4);
    if (fd < 0) return -1;
    size_t n = sizeof TEST_SCRIPT - 1;
    int ok = write(fd, TEST_SCRIPT, n) == (ssize_t)n;
    return close(fd) == 0 && ok ? 0 : -1;
}

int cmd_test(int argc, char **argv) {
    char path[4096];
    char *args[5] = {"launch", NULL, NULL, NULL, NULL};
    int n = 1;
    if (argc == 2 && host_is_help(argv[1])) {
        printf("usage: accel-lua test [--config_file PATH]\n\n"
               "Runs a short built-in training script through `accel-lua launch` with the\n"
               "config's settings (mpirun when num_processes > 1) and says \"Test is a\n"
               "success!\" when every rank passed.\n\n"
               "  --config_file PATH   the config to launch with [$ACCEL_LUA_CONFIG, else\n"
               "                       ~/.cache/accel-lua/default_config.yaml]\n"
               "  -h, --help           this help\n\n"
               "Example:\n  accel-lua test --config_file ./accel.yaml\n");
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "--config_file") == 0) {
        args[n++] = "--config_file";
        args[n++] = argv[2];
    } else if (argc != 1) {
        fprintf(stderr, "%s: unknown flag %s\nusage: accel-lua test [--config_file PATH]\n", WHO,
                argv[1]);
        return 2;
    }
    if (write_script(path) != 0) {
        perror(WHO ": cannot write the test script");
        return 1;
    }
    args[n++] = path;
    printf("Running: accel-lua launch%s%s %s\n", n > 2 ? " --config_file " : "",
           n > 2 ? args[2] : "", path);
    fflush(stdout);
    int status = cmd_launch(n, args);
    unlink(path);
    if (status == 0)
        printf("Test is a success! You are ready for your distributed training!\n");
    else
        fprintf(stderr, "%s: the test failed (exit %d); see the messages above\n", WHO, status);
    return status;
}
