"""Prints the native stacks of a process that a signal killed, from its core
file, read by gdb in batch mode: the crashing thread's whole stack, then the
top frames of every thread. `make test` runs it when a pass dies:

    python tests/native_backtrace.py PID [PROGRAM]

The core is looked for where /proc/sys/kernel/core_pattern puts it (relative
to the current directory, as the kernel writes it for a process that ran
here); a core piped to systemd-coredump is read with `coredumpctl`. Cores are
written only under `ulimit -c unlimited` (the Makefile sets it). Always exits
0: it only adds to the log of a failure.
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

GDB_COMMANDS = ["set pagination off", "echo \\n=== the crashing thread ===\\n", "bt 60",
                "echo \\n=== every thread, top frames ===\\n", "thread apply all bt 10"]


def core_file(pid, pattern):
    """The core file of `pid` in this directory (`pattern`: the kernel's
    core_pattern), or None and why there is none."""
    if pattern.startswith("|"):
        return None, f"core_pattern pipes cores to {pattern[1:].split()[0]}"
    # %p is the process id; any other specifier (%e, %t ...) matches anything.
    name = re.sub(r"%.", lambda m: {"%p": str(pid), "%P": str(pid), "%%": "%"}.get(m.group(), "*"), pattern)
    if "%p" not in pattern and open("/proc/sys/kernel/core_uses_pid").read().strip() == "1":
        name += f".{pid}"
    found = sorted(glob.glob(name), key=os.path.getmtime)
    if not found:
        return None, f"no core file {name!r} here (core_pattern {pattern!r}; is `ulimit -c` 0?)"
    return found[-1], None


def main(pid, program=sys.executable):
    if not shutil.which("gdb"):
        print("native backtrace: gdb is not installed (apt-get install gdb); only the Python stacks above.")
        return
    arguments = ["-batch", "-nx", "-iex", "set auto-load off", *(a for c in GDB_COMMANDS for a in ("-ex", c))]
    with open("/proc/sys/kernel/core_pattern") as f:
        pattern = f.read().strip()
    if "systemd-coredump" in pattern and shutil.which("coredumpctl"):
        command = ["coredumpctl", "debug", str(pid), "--debugger-arguments", shlex.join(arguments)]
    else:
        core, reason = core_file(pid, pattern)
        if core is None:
            print(f"native backtrace: {reason}")
            return
        print(f"native backtrace of {core} ({os.path.getsize(core) >> 20} MB):", flush=True)
        command = ["gdb", "-q", *arguments, os.path.realpath(program), core]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        print("native backtrace: gdb took over 15 minutes; gave up")
        return
    print(result.stdout + result.stderr, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
