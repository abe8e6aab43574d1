// Checks that program output contains the Fibonacci sequence
// 0, 1, 1, 2, 3, 5, 8, 13, 21, 34 in any print format: separated by commas,
// spaces or newlines, inside a list, labelled ("F(3) = 2"), as 1.0-style
// floats. Used by the example to verify fib.py inside the sandbox.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deepbox::examples {

inline const std::vector<long long> kExpectedFibonacci = {0, 1, 1, 2, 3, 5, 8, 13, 21, 34};

struct SequenceCheck {
  bool ok = false;
  // When !ok: what was seen, e.g. "found numbers [1, 1, 2, 3, 5] ...".
  std::string detail;
};

SequenceCheck CheckFibonacciOutput(std::string_view output);

}  // namespace deepbox::examples
