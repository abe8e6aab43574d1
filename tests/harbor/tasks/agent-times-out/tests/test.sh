#!/bin/bash
# The killed solution must be gone: the daemon ends a cancelled command's
# process group within 2 s. One still running after 10 s earns reward 1 here,
# which check_results.py reports as a failure (this task must fail).
leftover() {
  for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <"$f" 2>/dev/null; echo; done | grep -q '[s]leep 30\|[s]olve\.sh'
}
for _ in $(seq 1 100); do leftover || break; sleep 0.1; done
if leftover || [ "$(cat /app/result.txt 2>/dev/null)" = done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
