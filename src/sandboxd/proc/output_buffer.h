// Bounded output storage: a head-keeping capped buffer (run to completion), a
// byte ring with absolute offsets (background process logs), and a UTF-8
// chunk aligner (streaming). None of them grows past its cap, whatever the
// amount of output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepbox::sandboxd::proc {

// Keeps the first `cap` bytes appended and counts all of them.
class CappedBuffer {
 public:
  explicit CappedBuffer(size_t cap) : cap_(cap) {}

  void Append(std::string_view bytes);

  const std::string& data() const { return data_; }
  std::string Take() { return std::move(data_); }
  size_t cap() const { return cap_; }
  // Bytes appended, kept or not.
  uint64_t total_bytes() const { return total_; }
  bool truncated() const { return total_ > data_.size(); }

 private:
  size_t cap_;
  uint64_t total_ = 0;
  std::string data_;
};

// A ring of the last `capacity` bytes of a stream. Every byte has an absolute
// offset (0 for the first byte ever appended); readers ask from an offset and
// learn what they missed.
class LogRing {
 public:
  explicit LogRing(size_t capacity);

  void Append(std::string_view bytes);

  struct Slice {
    std::string data;
    uint64_t offset = 0;       // offset of data[0] (>= the requested offset)
    uint64_t next_offset = 0;  // offset to ask for next
    uint64_t dropped = 0;      // bytes between the requested offset and `offset`
                               // that the ring no longer holds
  };
  // Up to max_bytes from `offset`. An offset past the end returns nothing with
  // next_offset == end_offset().
  Slice Read(uint64_t offset, size_t max_bytes) const;

  uint64_t start_offset() const { return end_ - size_; }  // oldest byte kept
  uint64_t end_offset() const { return end_; }            // total bytes appended
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::string buf_;   // grows up to capacity_, then wraps
  size_t head_ = 0;   // index in buf_ of the oldest byte (once full)
  size_t size_ = 0;   // bytes held
  uint64_t end_ = 0;  // total appended
};

// Holds back the incomplete UTF-8 sequence at the end of a chunk (at most 3
// bytes) so that delivered chunks of a stream end on character boundaries.
// Bytes that are not UTF-8 pass through (a hold-back never exceeds 3 bytes).
class Utf8Aligner {
 public:
  // Returns the bytes to deliver now. The view stays valid until the next call.
  std::string_view Push(std::string_view chunk);
  // Whatever is held back (call at end of stream).
  std::string Flush();

 private:
  std::string carry_;
  std::string scratch_;
};

}  // namespace deepbox::sandboxd::proc
