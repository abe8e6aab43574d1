// Internal: adapts Conn to Beast's SyncReadStream/SyncWriteStream concepts so
// Beast's parser and serializer run over our deadline-aware sockets. Include
// only from http_server.cc and http_client.cc.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>
#include <string_view>

#include "net/conn.h"

namespace deepbox::net::internal {

class BeastStream {
 public:
  explicit BeastStream(Conn& conn) : conn_(conn) {}

  void set_deadline(Deadline d) { deadline_ = d; }
  // The deepbox error behind the last failed operation (TIMEOUT, CANCELLED...).
  const Error& last_error() const { return last_error_; }
  bool eof() const { return eof_; }

  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, boost::system::error_code& ec) {
    ec = {};
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      boost::asio::mutable_buffer b = *it;
      if (b.size() == 0) continue;
      auto r = conn_.ReadSome(static_cast<char*>(b.data()), b.size(), deadline_);
      if (!r) {
        last_error_ = r.error();
        ec = boost::asio::error::make_error_code(r.error().code == ErrorCode::kTimeout
                                                     ? boost::asio::error::timed_out
                                                     : boost::asio::error::connection_aborted);
        return 0;
      }
      if (*r == 0) {
        eof_ = true;
        last_error_ = Error(ErrorCode::kUnavailable, "connection closed by peer");
        ec = boost::asio::error::eof;
      }
      return *r;
    }
    return 0;
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    boost::system::error_code ec;
    return read_some(buffers, ec);
  }

  // Beast hands over a message as many small buffers (status line, each
  // header, body): they go out in gathered writes so the peer wakes once.
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
    ec = {};
    constexpr size_t kBatch = 64;
    std::string_view parts[kBatch];
    size_t n = 0;
    size_t total = 0;
    size_t pending = 0;
    auto flush = [&]() -> bool {
      auto s = conn_.WriteAllGather(parts, n, deadline_);
      if (!s) {
        last_error_ = s.error();
        ec = boost::asio::error::make_error_code(s.error().code == ErrorCode::kTimeout
                                                     ? boost::asio::error::timed_out
                                                     : boost::asio::error::broken_pipe);
        return false;
      }
      total += pending;
      n = 0;
      pending = 0;
      return true;
    };
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      boost::asio::const_buffer b = *it;
      if (b.size() == 0) continue;
      parts[n++] = std::string_view(static_cast<const char*>(b.data()), b.size());
      pending += b.size();
      if (n == kBatch && !flush()) return total;
    }
    if (n > 0 && !flush()) return total;
    return total;
  }
  template <class ConstBufferSequence>
  size_t write_some(const ConstBufferSequence& buffers) {
    boost::system::error_code ec;
    return write_some(buffers, ec);
  }

 private:
  Conn& conn_;
  Deadline deadline_ = Deadline::max();
  Error last_error_;
  bool eof_ = false;
};

}  // namespace deepbox::net::internal
