#!/bin/bash
# The task's own test, plus one the agent never saw.
cd /app
cat > /tmp/test_hidden.py <<'PY'
import sys, unittest
sys.path.insert(0, "/app")
from stats import mean
class Hidden(unittest.TestCase):
    def test_floats(self):
        self.assertAlmostEqual(mean([0.5, 1.5]), 1.0)
unittest.main(argv=["hidden"])
PY
if python3 -m unittest test_stats && python3 /tmp/test_hidden.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
