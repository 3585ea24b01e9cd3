/* config_yaml.h: the config file. Where it lives ($ACCEL_LUA_CONFIG, else
 * $XDG_CACHE_HOME/accel-lua/default_config.yaml, else
 * ~/.cache/accel-lua/default_config.yaml), reading it with libyaml into a
 * LaunchConfig (unknown keys and bad values are errors naming the key and
 * the file) and writing one with Accelerate's key names. */
#ifndef ACCEL_HOST_CONFIG_YAML_H
#define ACCEL_HOST_CONFIG_YAML_H

#include <stddef.h>

#include "host/settings.h"

/* The default config path (whether or not it exists) into buf. */
const char *config_default_path(char *buf, size_t n);

/* The file in force: `given` (from --config_file) if not NULL, else the
 * default path if that file exists, else NULL. */
const char *config_path_in_force(const char *given, char *buf, size_t n);

/* Reads path into c (source SRC_FILE). On error prints
 * "<who>: <path>:<line>: <what>" to stderr and returns -1. */
int config_read(LaunchConfig *c, const char *path, const char *who);
/* The same, listing in dropped ("a, b", n bytes) Accelerate's keys that
 * were accepted as asking for nothing (`tpu_use_cluster: false`). */
int config_read_noting(LaunchConfig *c, const char *path, const char *who, char *dropped,
                       size_t n);

/* Writes the set values of c as YAML (parent folders created, written to a
 * temporary name then renamed). On error prints it and returns -1. */
int config_write(const LaunchConfig *c, const char *path, const char *who);

#endif
