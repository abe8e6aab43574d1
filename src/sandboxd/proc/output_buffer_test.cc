#include "sandboxd/proc/output_buffer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/utf8.h"

namespace deepbox::sandboxd::proc {
namespace {

TEST(CappedBufferTest, KeepsTheHeadAndCountsEverything) {
  CappedBuffer b(10);
  b.Append("hello ");
  EXPECT_FALSE(b.truncated());
  b.Append("world, and more");
  EXPECT_EQ(b.data(), "hello worl");
  EXPECT_EQ(b.total_bytes(), 21u);
  EXPECT_TRUE(b.truncated());
  b.Append(std::string(1 << 20, 'x'));
  EXPECT_EQ(b.data(), "hello worl");
  EXPECT_EQ(b.total_bytes(), 21u + (1u << 20));
  EXPECT_EQ(b.Take(), "hello worl");
}

TEST(CappedBufferTest, ExactCapIsNotTruncatedAndZeroCapKeepsNothing) {
  CappedBuffer exact(5);
  exact.Append("12345");
  EXPECT_FALSE(exact.truncated());
  CappedBuffer none(0);
  none.Append("abc");
  EXPECT_EQ(none.data(), "");
  EXPECT_EQ(none.total_bytes(), 3u);
  EXPECT_TRUE(none.truncated());
}

TEST(LogRingTest, ReadsFromOffsetsBeforeWrapping) {
  LogRing ring(16);
  ring.Append("abcdef");
  auto s = ring.Read(2, 100);
  EXPECT_EQ(s.data, "cdef");
  EXPECT_EQ(s.offset, 2u);
  EXPECT_EQ(s.next_offset, 6u);
  EXPECT_EQ(s.dropped, 0u);
  s = ring.Read(0, 3);
  EXPECT_EQ(s.data, "abc");
  EXPECT_EQ(s.next_offset, 3u);
  s = ring.Read(6, 10);
  EXPECT_EQ(s.data, "");
  EXPECT_EQ(s.next_offset, 6u);
  s = ring.Read(100, 10);  // past the end
  EXPECT_EQ(s.data, "");
  EXPECT_EQ(s.next_offset, 6u);
}

TEST(LogRingTest, WrapsAndReportsDroppedBytes) {
  LogRing ring(8);
  ring.Append("0123456789");  // larger than the ring at once
  EXPECT_EQ(ring.start_offset(), 2u);
  EXPECT_EQ(ring.end_offset(), 10u);
  auto s = ring.Read(0, 100);
  EXPECT_EQ(s.dropped, 2u);
  EXPECT_EQ(s.offset, 2u);
  EXPECT_EQ(s.data, "23456789");
  ring.Append("abc");
  s = ring.Read(3, 100);
  EXPECT_EQ(s.dropped, 2u);
  EXPECT_EQ(s.data, "56789abc");
  EXPECT_EQ(s.next_offset, 13u);
}

TEST(LogRingTest, ZeroCapacityCountsOnly) {
  LogRing ring(0);
  ring.Append("abc");
  auto s = ring.Read(0, 10);
  EXPECT_EQ(s.data, "");
  EXPECT_EQ(s.dropped, 3u);
  EXPECT_EQ(s.next_offset, 3u);
}

TEST(LogRingTest, MatchesAReferenceUnderRandomAppendsAndReads) {
  std::mt19937 rng(12345);
  for (size_t capacity : {1u, 7u, 64u, 1000u}) {
    LogRing ring(capacity);
    std::string all;
    for (int step = 0; step < 2000; ++step) {
      std::string chunk(rng() % (capacity * 2 + 3), '\0');
      for (char& c : chunk) c = static_cast<char>('a' + rng() % 26);
      ring.Append(chunk);
      all += chunk;
      ASSERT_EQ(ring.end_offset(), all.size());
      ASSERT_EQ(ring.start_offset(), all.size() - std::min(all.size(), capacity));
      const uint64_t offset = rng() % (all.size() + 2);
      const size_t max = rng() % (capacity + 5);
      auto s = ring.Read(offset, max);
      const uint64_t start = std::max<uint64_t>(offset, ring.start_offset());
      ASSERT_EQ(s.dropped, start - std::min(offset, start));
      if (start >= all.size()) {
        ASSERT_EQ(s.data, "");
        ASSERT_EQ(s.next_offset, all.size());
      } else {
        ASSERT_EQ(s.offset, start);
        ASSERT_EQ(s.data, all.substr(start, max)) << "capacity " << capacity << " step " << step;
        ASSERT_EQ(s.next_offset, start + s.data.size());
      }
    }
  }
}

TEST(Utf8AlignerTest, HoldsBackAnIncompleteSequence) {
  Utf8Aligner a;
  const std::string e_acute = "\xc3\xa9";
  const std::string euro = "\xe2\x82\xac";
  EXPECT_EQ(a.Push("ab\xc3"), "ab");
  EXPECT_EQ(a.Push("\xa9"
                   "c\xe2\x82"),
            e_acute + "c");
  EXPECT_EQ(a.Push("\xac"), euro);
  EXPECT_EQ(a.Flush(), "");
  EXPECT_EQ(a.Push("x\xf0\x9f"), "x");
  EXPECT_EQ(a.Flush(), "\xf0\x9f");  // truncated at end of stream: given as is
}

TEST(Utf8AlignerTest, ChunksConcatenateToTheInputAndEachIsComplete) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "h\xc3\xa9llo w\xc3\xb6rld \xe2\x82\xac \xf0\x9f\x98\x80 ";
  std::mt19937 rng(7);
  Utf8Aligner a;
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t n = std::min<size_t>(text.size() - pos, 1 + rng() % 9);
    std::string_view chunk = a.Push(std::string_view(text).substr(pos, n));
    EXPECT_TRUE(IsValidUtf8(chunk));
    out.append(chunk);
    pos += n;
  }
  out += a.Flush();
  EXPECT_EQ(out, text);
}

TEST(Utf8AlignerTest, BinaryPassesThroughWithBoundedHoldBack) {
  Utf8Aligner a;
  std::string binary(100, '\xff');
  EXPECT_EQ(a.Push(binary).size(), 100u);
  std::string leads(10, '\xf0');  // lead bytes: the last one may wait
  size_t got = a.Push(leads).size();
  EXPECT_GE(got, 7u);
  EXPECT_EQ(got + a.Flush().size(), 10u);
}

}  // namespace
}  // namespace deepbox::sandboxd::proc
