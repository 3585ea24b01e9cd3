#!/usr/bin/env python3
# run-on-pty.py COLS MARKER OUTFILE CMD...: runs CMD on a new pseudo-terminal
# COLS wide, with output post-processing off (no \n -> \r\n translation, so
# every \r in OUTFILE was written by CMD), writes what it printed to OUTFILE
# and prints "SECONDS_UNTIL_MARKER_SEEN SECONDS_UNTIL_END EXIT_STATUS"
# (-1 when MARKER never appeared; MARKER "" is seen with the first output).
# For the tests of progress bars under `accel-lua launch`
# (scripts/test-progress-launch.sh, scripts/test-machines.sh).
import os, pty, sys, time, struct, fcntl, termios
cols, marker, outpath, cmd = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3], sys.argv[4:]
t0 = time.monotonic()
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    attrs = termios.tcgetattr(1)
    attrs[1] &= ~termios.OPOST
    termios.tcsetattr(1, termios.TCSANOW, attrs)
    os.execvp(cmd[0], cmd)
data, seen = b"", -1.0
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
    if seen < 0 and marker in data:
        seen = time.monotonic() - t0
_, status = os.waitpid(pid, 0)
end = time.monotonic() - t0
open(outpath, "wb").write(data)
print("%.3f %.3f %d" % (seen, end, os.waitstatus_to_exitcode(status)))
