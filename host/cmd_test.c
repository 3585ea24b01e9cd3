/* cmd_test.c: `accel-lua test [--config_file PATH]`, like `accelerate
 * test`: writes a small built-in Lua script to a temporary file and runs
 * it through `accel-lua launch` on the configured setup (so with
 * num_processes > 1 it goes through mpirun), then prints "Test is a
 * success!" when every rank passed.
 *
 * The script checks that the launch settings reached the rank (the
 * ACCEL_LUA_* variables, the rank count), then trains a small MLP the way
 * a user's script does: an Accelerator built from those settings (mixed
 * precision, accumulation, DDP or a sharding plugin), prepare(model,
 * optimizer, shuffled loader), accumulate / backward / step; the mean loss
 * over the ranks must fall tenfold and every rank must end with rank 0's
 * weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host/subcommands.h"

#define WHO "accel-lua test"

static const char TEST_SCRIPT[] =
    "-- accel-lua test: written and run by `accel-lua test`\n"
    "local accel = require('accel')\n"
    "local nn, data = accel.nn, accel.data\n"
    "local size = tonumber(os.getenv('OMPI_COMM_WORLD_SIZE') or os.getenv('PMI_SIZE') or '1')\n"
    "local want = tonumber(os.getenv('ACCEL_LUA_NUM_PROCESSES') or '1')\n"
    "assert(size == want, ('launched %d ranks, expected num_processes = %d'):format(size, want))\n"
    "for _, name in ipairs{'ACCEL_LUA_MIXED_PRECISION', 'ACCEL_LUA_DISTRIBUTED_TYPE',\n"
    "                      'ACCEL_LUA_GRADIENT_ACCUMULATION_STEPS', 'ACCEL_LUA_USE_CPU'} do\n"
    "  assert(os.getenv(name), name .. ' did not reach the rank')\n"
    "end\n"
    "-- the configured Accelerator (precision, accumulation, DDP / sharding from launch's settings)\n"
    "local acc = accel.Accelerator()\n"
    "local rank = acc.process_index\n"
    "assert(acc.num_processes == size, ('the Accelerator sees %d processes of %d'):format(acc.num_processes, size))\n"
    "accel.set_seed(1234)\n"
    "local x = accel.randn(256, 3)\n"
    "local y = x:matmul(accel.tensor{{1.5}, {-2.0}, {0.5}}) + 0.25\n"
    "accel.set_seed(1234 + rank) -- prepare must make the ranks' weights equal\n"
    "local model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))\n"
    "local opt = accel.optim.AdamW(model:parameters(), {lr = 0.02})\n"
    "local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = 16, shuffle = true})\n"
    "model, opt, loader = acc:prepare(model, opt, loader)\n"
    "local first, last\n"
    "for _ = 1, 20 do\n"
    "  for xb, yb in loader:iter() do\n"
    "    acc:accumulate(model, function()\n"
    "      local loss = (model(xb) - yb):pow(2):mean()\n"
    "      acc:backward(loss)\n"
    "      opt:step()\n"
    "      opt:zero_grad()\n"
    "      first = first or loss:item(); last = loss:item()\n"
    "    end)\n"
    "  end\n"
    "end\n"
    "local mean = acc:reduce(accel.tensor{last}, 'mean'):item()\n"
    "assert(mean < 0.1 * first, ('training did not converge: loss %g -> %g'):format(first, mean))\n"
    "local sum = 0\n"
    "for _, t in pairs(acc:get_state_dict(model)) do sum = sum + t:double():sum():item() end\n"
    "local sums = acc:gather(accel.tensor({sum}, {dtype = accel.float64})):tolist()\n"
    "for r, v in ipairs(sums) do\n"
    "  assert(v == sums[1], ('rank %d ended with other weights than rank 0'):format(r - 1))\n"
    "end\n"
    "acc:print(('rank 0/%d: loss %.3g -> %.3g (mean over ranks); %s, mixed_precision %s, %d thread(s); the '\n"
    "  .. 'ranks agree on the weights'):format(size, first, mean, acc.distributed_type, acc.mixed_precision,\n"
    "  accel.num_threads()))\n";

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
    if (host_help_asked(argc, argv)) {
        printf("usage: accel-lua test [--config_file PATH]\n\n"
               "Runs a short built-in training script through `accel-lua launch` with the\n"
               "config's settings (mpirun when num_processes > 1) and says \"Test is a\n"
               "success!\" when every rank passed.\n\n"
               "  --config_file PATH   the config to launch with [$ACCEL_LUA_CONFIG, else\n"
               "                       ~/.cache/accel-lua/default_config.yaml;\n"
               "                       $XDG_CACHE_HOME replaces ~/.cache when set]\n"
               "  -h, --help           this help\n\n"
               "Example:\n  accel-lua test --config_file ./accel.yaml\n");
        return 0;
    }
    const char *given = NULL;
    if (host_parse_config_file(argc, argv, WHO, "usage: accel-lua test [--config_file PATH]\n",
                               &given) != 0)
        return 2;
    if (given != NULL) {
        args[n++] = "--config_file";
        args[n++] = (char *)given;
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
