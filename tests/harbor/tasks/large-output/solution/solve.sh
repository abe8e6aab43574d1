#!/bin/bash
set -euo pipefail
head -c 16777216 /dev/zero | tr '\0' 'x' > /app/data.bin
cat /app/data.bin /app/data.bin
