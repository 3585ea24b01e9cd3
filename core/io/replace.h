/* replace.h: the check every whole-file writer makes before it replaces a
 * file by renaming a finished temporary file onto it. */
#ifndef ACCEL_IO_REPLACE_H
#define ACCEL_IO_REPLACE_H

/* NULL when path does not exist or is a regular file (a file rename may
 * replace); else what it is ("a character device", "a directory", ...):
 * renaming onto /dev/null would put a plain file in the device's place. */
const char *io_not_replaceable(const char *path);

#endif
