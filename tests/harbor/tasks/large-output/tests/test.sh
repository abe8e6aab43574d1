#!/bin/bash
want=$(head -c 16777216 /dev/zero | tr '\0' 'x' | sha256sum | cut -d' ' -f1)
got=$(sha256sum < /app/data.bin | cut -d' ' -f1)
log=$(stat -c %s /logs/agent/oracle.txt 2>/dev/null || echo 0)
# The verifier's own large output, downloaded by Harbor with /logs/verifier.
head -c 8388608 /dev/zero > /logs/verifier/big.log
if [ "$want" = "$got" ] && [ "$log" = 33554432 ]; then echo 1; else echo "sha $got log $log"; echo 0; fi > /logs/verifier/reward.txt
