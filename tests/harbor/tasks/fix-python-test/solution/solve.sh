#!/bin/bash
set -euo pipefail
cd /app
sed -i 's|(len(values) + 1)|len(values)|' stats.py
python3 -m unittest test_stats
