#include "sandboxd/proc/output_buffer.h"

#include <algorithm>
#include <utility>

#include "common/utf8.h"

namespace deepbox::sandboxd::proc {

void CappedBuffer::Append(std::string_view bytes) {
  total_ += bytes.size();
  if (data_.size() >= cap_) return;
  data_.append(bytes.substr(0, cap_ - data_.size()));
}

LogRing::LogRing(size_t capacity) : capacity_(capacity) {}

void LogRing::Append(std::string_view bytes) {
  end_ += bytes.size();
  if (capacity_ == 0) return;
  if (bytes.size() >= capacity_) {
    // Only the last `capacity_` bytes survive.
    bytes = bytes.substr(bytes.size() - capacity_);
    buf_.assign(bytes);
    head_ = 0;
    size_ = capacity_;
    return;
  }
  if (buf_.size() < capacity_) {
    // Still growing (never wrapped yet: head_ == 0 and size_ == buf_.size()).
    size_t room = capacity_ - buf_.size();
    size_t n = std::min(room, bytes.size());
    buf_.append(bytes.substr(0, n));
    size_ = buf_.size();
    bytes.remove_prefix(n);
    if (bytes.empty()) return;
  }
  // Full: overwrite from head_ (the oldest byte), wrapping.
  while (!bytes.empty()) {
    size_t n = std::min(bytes.size(), capacity_ - head_);
    buf_.replace(head_, n, bytes.substr(0, n));
    head_ = (head_ + n) % capacity_;
    bytes.remove_prefix(n);
  }
  size_ = capacity_;
}

LogRing::Slice LogRing::Read(uint64_t offset, size_t max_bytes) const {
  Slice slice;
  const uint64_t start = start_offset();
  if (offset < start) {
    slice.dropped = start - offset;
    offset = start;
  }
  if (offset >= end_) {
    slice.offset = end_;
    slice.next_offset = end_;
    return slice;
  }
  const size_t available = static_cast<size_t>(end_ - offset);
  const size_t n = std::min(available, max_bytes);
  // Position of `offset` in buf_: the oldest byte is at head_ (0 until wrapped).
  size_t pos = (head_ + static_cast<size_t>(offset - start)) % std::max<size_t>(buf_.size(), 1);
  slice.data.reserve(n);
  size_t first = std::min(n, buf_.size() - pos);
  slice.data.append(buf_, pos, first);
  if (first < n) slice.data.append(buf_, 0, n - first);
  slice.offset = offset;
  slice.next_offset = offset + n;
  return slice;
}

std::string_view Utf8Aligner::Push(std::string_view chunk) {
  std::string_view input = chunk;
  if (!carry_.empty()) {
    scratch_.assign(carry_);
    scratch_.append(chunk);
    carry_.clear();
    input = scratch_;
  }
  size_t complete = Utf8CompletePrefix(input);
  carry_.assign(input.substr(complete));
  return input.substr(0, complete);
}

std::string Utf8Aligner::Flush() { return std::exchange(carry_, std::string()); }

}  // namespace deepbox::sandboxd::proc
