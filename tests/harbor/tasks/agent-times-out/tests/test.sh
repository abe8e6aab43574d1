#!/bin/bash
# Also proves the timed-out command was killed: it never wrote its file.
sleep 1
[ "$(cat /app/result.txt 2>/dev/null)" = done ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
