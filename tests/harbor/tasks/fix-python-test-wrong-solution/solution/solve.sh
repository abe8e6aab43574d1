#!/bin/bash
# Deliberately wrong: weakens the visible test, leaves the bug.
cd /app
sed -i 's|2.5)|mean([1, 2, 3, 4]))|' test_stats.py
