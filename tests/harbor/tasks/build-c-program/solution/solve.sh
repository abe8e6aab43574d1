#!/bin/bash
set -euo pipefail
cat > /app/fib.c <<'C'
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  int n = atoi(argv[1]);
  unsigned long long a = 0, b = 1;
  for (int i = 0; i < n; i++) {
    unsigned long long t = a + b;
    a = b;
    b = t;
  }
  printf("%llu\n", a);
  return 0;
}
C
gcc -O2 -Wall -o /app/fib /app/fib.c
