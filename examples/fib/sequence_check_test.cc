#include "sequence_check.h"

#include <gtest/gtest.h>

namespace deepbox::examples {
namespace {

TEST(FibonacciCheckTest, AcceptsManyPrintFormats) {
  const char* good[] = {
      "0, 1, 1, 2, 3, 5, 8, 13, 21, 34\n",
      "0 1 1 2 3 5 8 13 21 34",
      "0\n1\n1\n2\n3\n5\n8\n13\n21\n34\n",
      "[0, 1, 1, 2, 3, 5, 8, 13, 21, 34]\n",
      "First 10 Fibonacci numbers: [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]",
      "F(0) = 0\nF(1) = 1\nF(2) = 1\nF(3) = 2\nF(4) = 3\nF(5) = 5\nF(6) = 8\nF(7) = 13\nF(8) = "
      "21\nF(9) = 34\n",
      "fib(0): 0\nfib(1): 1\nfib(2): 1\nfib(3): 2\nfib(4): 3\nfib(5): 5\nfib(6): 8\nfib(7): 13\n"
      "fib(8): 21\nfib(9): 34\n",
      "1: 0\n2: 1\n3: 1\n4: 2\n5: 3\n6: 5\n7: 8\n8: 13\n9: 21\n10: 34\n",
      "0.0 1.0 1.0 2.0 3.0 5.0 8.0 13.0 21.0 34.0",
      "0 1 1 2 3 5 8 13 21 34 55 89 144",
      "Fibonacci sequence:\n0 -> 1 -> 1 -> 2 -> 3 -> 5 -> 8 -> 13 -> 21 -> 34\nDone.",
      "(0, 1, 1, 2, 3, 5, 8, 13, 21, 34)",
      "0\t1\t1\t2\t3\t5\t8\t13\t21\t34",
  };
  for (const char* out : good) {
    EXPECT_TRUE(CheckFibonacciOutput(out).ok) << out;
  }
}

TEST(FibonacciCheckTest, RejectsNearMisses) {
  const char* bad[] = {
      "",
      "1, 1, 2, 3, 5, 8, 13, 21, 34, 55",   // missing 0
      "0, 1, 1, 2, 3, 5, 8, 13, 21",        // 34 absent
      "0, 1, 1, 2, 3, 5, 8, 13, 22, 34",    // a wrong number
      "0, 1, 2, 3, 5, 8, 13, 21, 34",       // a 1 missing
      "0, 1, 1, 2, 3, 5, 8, 13, 21, 34.5",  // not an integer
      "Traceback (most recent call last):\n  File \"fib.py\", line 3\nNameError",
      "34 21 13 8 5 3 2 1 1 0",            // reversed
      "x0 x1 x1 x2 x3 x5 x8 x13 x21 x34",  // labels, not values
  };
  for (const char* out : bad) {
    auto r = CheckFibonacciOutput(out);
    EXPECT_FALSE(r.ok) << out;
    EXPECT_FALSE(r.detail.empty());
  }
}

TEST(FibonacciCheckTest, DetailShowsWhatWasFound) {
  auto r = CheckFibonacciOutput("1 1 2");
  EXPECT_NE(r.detail.find("[1, 1, 2]"), std::string::npos) << r.detail;
}

}  // namespace
}  // namespace deepbox::examples
