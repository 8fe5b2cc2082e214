"""What the benchmarks share: each measurement runs in its own process and
prints its result as its last JSON line."""

import json
import subprocess


def measured(command, label, env=None, tail=500):
    """The result that `command` printed as its last JSON line, or None after
    printing why there is none (the end of its output)."""
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        print(f"  {label}: failed or skipped: {(out.stdout + out.stderr).strip()[-tail:]}", flush=True)
        return None
    return json.loads(lines[-1])
