#include "sandboxd/server/grpc_connection.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "sandboxd/server/nghttp2_loader.h"

namespace deepbox::sandboxd {

std::optional<std::chrono::milliseconds> ParseGrpcTimeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  int64_t amount = 0;
  for (char c : value.substr(0, value.size() - 1)) {
    if (c < '0' || c > '9') return std::nullopt;
    amount = amount * 10 + (c - '0');  // at most 8 digits: no overflow below
  }
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  switch (value.back()) {
    case 'H':
      return std::chrono::milliseconds(amount * 3600 * 1000);
    case 'M':
      return std::chrono::milliseconds(amount * 60 * 1000);
    case 'S':
      return std::chrono::milliseconds(amount * 1000);
    case 'm':
      return std::chrono::milliseconds(amount);
    case 'u':
      return std::chrono::milliseconds(ceil_div(amount, 1000));
    case 'n':
      return std::chrono::milliseconds(ceil_div(amount, 1000000));
    default:
      return std::nullopt;
  }
}

std::string PercentEncodeGrpcMessage(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (char c : message) {
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte <= 0x7e && byte != '%') {
      out.push_back(c);
    } else {
      out += fmt::format("%{:02X}", byte);
    }
  }
  return out;
}

namespace {

constexpr size_t kGrpcPrefixBytes = 5;  // compressed flag, 4-byte big-endian length

// One call: a request stream, then the thread that answers it.
struct GrpcStream {
  int32_t id = 0;
  std::string http_method;
  std::string path;
  std::string content_type;
  std::optional<std::string> timeout;
  std::optional<std::string> encoding;
  net::Headers metadata;
  size_t header_bytes = 0;
  std::string body;           // the framed request message(s)
  bool request_done = false;  // the client's END_STREAM came
  bool answered = false;      // a response (or reset) has been submitted
  bool closed = false;        // nghttp2 has closed the stream
  UniqueFd cancel;            // eventfd, written when the call must stop
  std::thread thread;         // joinable while the handler runs or until joined
  GrpcReply reply;            // set by the thread
  std::string out;            // the framed response message
  size_t out_sent = 0;
};

uint32_t ReadBigEndian32(std::string_view b) {
  return (uint32_t{static_cast<uint8_t>(b[0])} << 24) |
         (uint32_t{static_cast<uint8_t>(b[1])} << 16) |
         (uint32_t{static_cast<uint8_t>(b[2])} << 8) | uint32_t{static_cast<uint8_t>(b[3])};
}

std::string Frame(std::string_view message) {
  std::string out(kGrpcPrefixBytes, '\0');
  const auto n = static_cast<uint32_t>(message.size());
  out[1] = static_cast<char>(n >> 24);
  out[2] = static_cast<char>(n >> 16);
  out[3] = static_cast<char>(n >> 8);
  out[4] = static_cast<char>(n);
  out.append(message);
  return out;
}

nghttp2_nv Nv(std::string_view name, std::string_view value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

void Signal(int event_fd) {
  uint64_t one = 1;
  while (::write(event_fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

class GrpcConnection {
 public:
  GrpcConnection(net::Conn& conn, const GrpcServerOptions& options, const GrpcHandler& handler,
                 int shutdown_fd, const LibNghttp2& h2)
      : conn_(conn), options_(options), handler_(handler), shutdown_fd_(shutdown_fd), h2_(h2) {}

  ~GrpcConnection() {
    // Every call is told to stop, and waited for: a handler never outlives
    // its connection (nor touches a freed stream).
    for (auto& [id, stream] : streams_) {
      if (stream->thread.joinable()) Signal(stream->cancel.get());
    }
    for (auto& [id, stream] : streams_) {
      if (stream->thread.joinable()) stream->thread.join();
    }
    if (session_ != nullptr) h2_.nghttp2_session_del(session_);
  }

  void Serve(std::string_view received);

 private:
  static GrpcConnection& Self(void* user_data) { return *static_cast<GrpcConnection*>(user_data); }
  GrpcStream* Find(int32_t id) {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : it->second.get();
  }

  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user_data);
  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                      void* user_data);
  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data);
  static int OnDataChunk(nghttp2_session*, uint8_t flags, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user_data);
  static int OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t error_code,
                           void* user_data);
  static int OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user_data);
  static ssize_t ReadResponse(nghttp2_session* session, int32_t stream_id, uint8_t* buf,
                              size_t length, uint32_t* data_flags, nghttp2_data_source* source,
                              void* user_data);

  // The whole request has arrived: check it and start its call.
  void StartCall(GrpcStream& stream);
  // Submits a gRPC answer: a message and trailers for OK, else trailers only.
  void Answer(GrpcStream& stream, GrpcReply reply);
  // A plain HTTP answer (not gRPC at all: wrong method or content type).
  void AnswerHttp(GrpcStream& stream, int status);
  void FinishCalls();
  // Everything nghttp2 queued, to the socket. False when the socket failed.
  bool Flush();
  void ForgetIfDone(int32_t id);

  net::Conn& conn_;
  const GrpcServerOptions& options_;
  const GrpcHandler& handler_;
  const int shutdown_fd_;
  const LibNghttp2& h2_;
  nghttp2_session* session_ = nullptr;
  UniqueFd wake_;  // eventfd: a call thread finished
  std::map<int32_t, std::shared_ptr<GrpcStream>> streams_;
  size_t running_ = 0;  // call threads not yet joined
  std::mutex mu_;
  std::vector<int32_t> finished_;  // guarded by mu_
};

int GrpcConnection::OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto stream = std::make_shared<GrpcStream>();
  stream->id = frame->hd.stream_id;
  Self(user_data).streams_[stream->id] = std::move(stream);
  return 0;
}

int GrpcConnection::OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                             size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                             void* user_data) {
  GrpcConnection& self = Self(user_data);
  GrpcStream* stream = self.Find(frame->hd.stream_id);
  if (stream == nullptr || stream->answered) return 0;
  // Trailers from a client (HCAT_HEADERS) count against the same budget.
  stream->header_bytes += namelen + valuelen + 32;
  if (stream->header_bytes > self.options_.max_header_bytes) {
    // nghttp2 resets the stream (INTERNAL_ERROR); nothing is kept of it.
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  std::string_view n(reinterpret_cast<const char*>(name), namelen);
  std::string_view v(reinterpret_cast<const char*>(value), valuelen);
  if (n == ":method") {
    stream->http_method = v;
  } else if (n == ":path") {
    stream->path = v;
  } else if (n.starts_with(":")) {
    // :scheme, :authority: nothing to check for a cleartext daemon.
  } else if (n == "content-type") {
    stream->content_type = v;
  } else if (n == "grpc-timeout") {
    stream->timeout = std::string(v);
  } else if (n == "grpc-encoding") {
    stream->encoding = std::string(v);
  } else {
    stream->metadata.Add(std::string(n), std::string(v));
  }
  return 0;
}

int GrpcConnection::OnDataChunk(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data,
                                size_t len, void* user_data) {
  GrpcConnection& self = Self(user_data);
  GrpcStream* stream = self.Find(stream_id);
  if (stream == nullptr || stream->answered) return 0;  // discarded (flow control still credits it)
  const size_t cap = self.options_.max_message_bytes;
  auto too_big = [&](uint64_t size) {
    self.Answer(*stream,
                {GrpcStatus::kResourceExhausted,
                 fmt::format("the request message of {} bytes exceeds this server's limit of {} "
                             "bytes",
                             size, cap),
                 {}});
  };
  // Only what one framed message of at most `cap` bytes can hold is kept.
  if (stream->body.size() + len > kGrpcPrefixBytes + cap) {
    if (stream->body.size() >= kGrpcPrefixBytes) {
      uint32_t declared = ReadBigEndian32(std::string_view(stream->body).substr(1, 4));
      if (declared <= cap) {
        self.Answer(
            *stream,
            {GrpcStatus::kInvalidArgument, "a unary call takes exactly one request message", {}});
        return 0;
      }
      too_big(declared);
    } else {
      too_big(stream->body.size() + len);
    }
    return 0;
  }
  stream->body.append(reinterpret_cast<const char*>(data), len);
  if (stream->body.size() >= kGrpcPrefixBytes) {
    // Refused as soon as the prefix says so: the message is never buffered.
    uint32_t declared = ReadBigEndian32(std::string_view(stream->body).substr(1, 4));
    if (declared > cap) too_big(declared);
  }
  return 0;
}

int GrpcConnection::OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  GrpcConnection& self = Self(user_data);
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST &&
      self.options_.authorize) {
    // The request's headers are complete: a refused call costs no buffer.
    GrpcStream* stream = self.Find(frame->hd.stream_id);
    if (stream != nullptr && !stream->answered) {
      if (auto refusal = self.options_.authorize(stream->path, stream->metadata)) {
        if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) stream->request_done = true;
        self.Answer(*stream, std::move(*refusal));
        return 0;
      }
    }
  }
  if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    GrpcStream* stream = self.Find(frame->hd.stream_id);
    if (stream != nullptr) {
      stream->request_done = true;
      if (!stream->answered) self.StartCall(*stream);
    }
  }
  return 0;
}

int GrpcConnection::OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user_data) {
  GrpcConnection& self = Self(user_data);
  GrpcStream* stream = self.Find(stream_id);
  if (stream == nullptr) return 0;
  stream->closed = true;
  // A reset by the client (or the end of our answer): a running command stops.
  if (stream->thread.joinable()) Signal(stream->cancel.get());
  self.ForgetIfDone(stream_id);
  return 0;
}

void GrpcConnection::ForgetIfDone(int32_t id) {
  auto it = streams_.find(id);
  if (it != streams_.end() && it->second->closed && !it->second->thread.joinable()) {
    streams_.erase(it);
  }
}

int GrpcConnection::OnFrameSend(nghttp2_session* session, const nghttp2_frame* frame,
                                void* user_data) {
  GrpcConnection& self = Self(user_data);
  if (frame->hd.type != NGHTTP2_HEADERS || (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
    return 0;
  }
  // An answer sent before the request ended (an early refusal): the client
  // should stop sending, and the stream is closed at once (RST_STREAM
  // NO_ERROR, RFC 9113 8.1) instead of staying half open. After the answer,
  // so that the client has it first.
  GrpcStream* stream = self.Find(frame->hd.stream_id);
  if (stream != nullptr && !stream->request_done) {
    (void)self.h2_.nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream->id,
                                             NGHTTP2_NO_ERROR);
  }
  return 0;
}

ssize_t GrpcConnection::ReadResponse(nghttp2_session* session, int32_t stream_id, uint8_t* buf,
                                     size_t length, uint32_t* data_flags,
                                     nghttp2_data_source* source, void* user_data) {
  GrpcConnection& self = Self(user_data);
  auto* stream = static_cast<GrpcStream*>(source->ptr);
  size_t n = std::min(length, stream->out.size() - stream->out_sent);
  std::memcpy(buf, stream->out.data() + stream->out_sent, n);
  stream->out_sent += n;
  if (stream->out_sent == stream->out.size()) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_nv trailers[] = {Nv("grpc-status", "0")};
    int rv = self.h2_.nghttp2_submit_trailer(session, stream_id, trailers, 1);
    if (rv != 0) return NGHTTP2_ERR_CALLBACK_FAILURE;
    std::string().swap(stream->out);
    stream->out_sent = 0;
  }
  return static_cast<ssize_t>(n);
}

void GrpcConnection::Answer(GrpcStream& stream, GrpcReply reply) {
  if (stream.answered || stream.closed) return;
  stream.answered = true;
  const std::string status = std::to_string(static_cast<int>(reply.status));
  if (reply.status == GrpcStatus::kOk) {
    stream.out = Frame(reply.message);
    stream.out_sent = 0;
    nghttp2_nv headers[] = {Nv(":status", "200"), Nv("content-type", "application/grpc")};
    nghttp2_data_provider provider{};
    provider.source.ptr = &stream;
    provider.read_callback = &GrpcConnection::ReadResponse;
    (void)h2_.nghttp2_submit_response(session_, stream.id, headers, 2, &provider);
  } else {
    // Trailers-Only: one HEADERS frame that ends the stream.
    const std::string message = PercentEncodeGrpcMessage(reply.status_message);
    nghttp2_nv headers[] = {Nv(":status", "200"), Nv("content-type", "application/grpc"),
                            Nv("grpc-status", status), Nv("grpc-message", message)};
    (void)h2_.nghttp2_submit_response(session_, stream.id, headers, 4, nullptr);
  }
  std::string().swap(stream.body);
}

void GrpcConnection::AnswerHttp(GrpcStream& stream, int status) {
  stream.answered = true;
  const std::string code = std::to_string(status);
  nghttp2_nv headers[] = {Nv(":status", code)};
  (void)h2_.nghttp2_submit_response(session_, stream.id, headers, 1, nullptr);
}

void GrpcConnection::StartCall(GrpcStream& stream) {
  if (stream.http_method != "POST") return AnswerHttp(stream, 405);
  // gRPC's rule: anything not application/grpc[+proto|;...] is not gRPC.
  if (!stream.content_type.starts_with("application/grpc")) return AnswerHttp(stream, 415);
  if (stream.encoding && *stream.encoding != "identity") {
    return Answer(stream, {GrpcStatus::kUnimplemented,
                           fmt::format("grpc-encoding '{}' is not supported: send messages "
                                       "uncompressed (identity)",
                                       *stream.encoding),
                           {}});
  }
  std::optional<std::chrono::milliseconds> timeout;
  if (stream.timeout) {
    timeout = ParseGrpcTimeout(*stream.timeout);
    if (!timeout) {
      return Answer(stream, {GrpcStatus::kInvalidArgument,
                             fmt::format("malformed grpc-timeout '{}'", *stream.timeout),
                             {}});
    }
  }
  const std::string_view body = stream.body;
  if (body.size() < kGrpcPrefixBytes) {
    return Answer(stream, {GrpcStatus::kInvalidArgument,
                           body.empty() ? "a unary call needs one request message, and none came"
                                        : "the request ended inside a message's 5-byte prefix",
                           {}});
  }
  const auto flag = static_cast<uint8_t>(body[0]);
  if (flag == 1) {
    return Answer(stream, {GrpcStatus::kInternal,
                           "the request message is marked compressed but the call names no "
                           "grpc-encoding; this server takes uncompressed messages only",
                           {}});
  }
  if (flag != 0) {
    return Answer(stream, {GrpcStatus::kInvalidArgument,
                           fmt::format("the message prefix's compressed flag is {} (0 or 1)", flag),
                           {}});
  }
  const uint32_t declared = ReadBigEndian32(body.substr(1, 4));
  if (body.size() - kGrpcPrefixBytes < declared) {
    return Answer(stream, {GrpcStatus::kInvalidArgument,
                           fmt::format("the request message is cut short: {} of {} bytes came",
                                       body.size() - kGrpcPrefixBytes, declared),
                           {}});
  }
  if (body.size() - kGrpcPrefixBytes > declared) {
    return Answer(
        stream,
        {GrpcStatus::kInvalidArgument, "a unary call takes exactly one request message", {}});
  }
  if (running_ >= options_.max_concurrent_calls) {
    return Answer(stream, {GrpcStatus::kResourceExhausted,
                           fmt::format("{} calls of this connection are still running", running_),
                           {}});
  }
  UniqueFd cancel(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!cancel) {
    return Answer(
        stream,
        {GrpcStatus::kResourceExhausted, fmt::format("eventfd: {}", std::strerror(errno)), {}});
  }
  GrpcCall call;
  call.method = stream.path;
  call.metadata = std::move(stream.metadata);
  call.timeout = timeout;
  call.message = std::string(body.substr(kGrpcPrefixBytes));
  call.cancel_fd = cancel.get();
  std::string().swap(stream.body);
  stream.cancel = std::move(cancel);
  std::shared_ptr<GrpcStream> owner = streams_.at(stream.id);
  try {
    stream.thread = std::thread([this, owner, call = std::move(call)] {
      owner->reply = handler_(call);
      std::lock_guard lock(mu_);
      finished_.push_back(owner->id);
      Signal(wake_.get());
    });
  } catch (const std::system_error& e) {
    return Answer(stream, {GrpcStatus::kResourceExhausted,
                           fmt::format("cannot start a thread for this call: {}", e.what()),
                           {}});
  }
  ++running_;
}

void GrpcConnection::FinishCalls() {
  uint64_t count = 0;
  while (::read(wake_.get(), &count, sizeof count) < 0 && errno == EINTR) {
  }
  std::vector<int32_t> finished;
  {
    std::lock_guard lock(mu_);
    finished.swap(finished_);
  }
  for (int32_t id : finished) {
    auto it = streams_.find(id);
    if (it == streams_.end()) continue;
    GrpcStream& stream = *it->second;
    stream.thread.join();
    --running_;
    Answer(stream, std::move(stream.reply));
    ForgetIfDone(id);
  }
}

bool GrpcConnection::Flush() {
  for (;;) {
    const uint8_t* data = nullptr;
    ssize_t n = h2_.nghttp2_session_mem_send(session_, &data);
    if (n < 0) return false;
    if (n == 0) return true;
    // Bounded by the connection's write stall timeout (a reader that takes
    // nothing), not by a deadline for the whole answer.
    if (!conn_.WriteAll(
            std::string_view(reinterpret_cast<const char*>(data), static_cast<size_t>(n)),
            net::Deadline::max())) {
      return false;
    }
  }
}

void GrpcConnection::Serve(std::string_view received) {
  wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) return;
  nghttp2_session_callbacks* callbacks = nullptr;
  if (h2_.nghttp2_session_callbacks_new(&callbacks) != 0) return;
  h2_.nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &OnBeginHeaders);
  h2_.nghttp2_session_callbacks_set_on_header_callback(callbacks, &OnHeader);
  h2_.nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &OnFrameRecv);
  h2_.nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &OnDataChunk);
  h2_.nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &OnStreamClose);
  h2_.nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, &OnFrameSend);
  int rv = h2_.nghttp2_session_server_new(&session_, callbacks, this);
  h2_.nghttp2_session_callbacks_del(callbacks);
  if (rv != 0) {
    session_ = nullptr;
    return;
  }
  nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_.max_concurrent_calls},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(options_.max_header_bytes)},
  };
  if (h2_.nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 2) != 0) return;
  auto feed = [this](std::string_view bytes) {
    ssize_t n = h2_.nghttp2_session_mem_recv(
        session_, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    return n >= 0;
  };
  // A protocol error queues a GOAWAY; it is still sent below.
  bool alive = feed(received);
  bool shutting_down = false;
  auto last_activity = std::chrono::steady_clock::now();
  std::vector<char> buffer(16 << 10);
  while (alive) {
    if (!Flush()) return;
    const bool want = h2_.nghttp2_session_want_read(session_) != 0 ||
                      h2_.nghttp2_session_want_write(session_) != 0;
    if (!want && running_ == 0) return;
    if (shutting_down && streams_.empty()) return;
    int wait_ms = -1;
    // Idle: no call running and nothing received for idle_timeout, whatever
    // streams are open (a request that never ends, an answer the client
    // never takes) so that they cannot hold the connection forever.
    if (options_.idle_timeout.count() > 0 && running_ == 0) {
      auto left = options_.idle_timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                              std::chrono::steady_clock::now() - last_activity);
      if (left.count() <= 0) {
        (void)h2_.nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
        (void)Flush();
        return;
      }
      wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
    }
    pollfd fds[3] = {{conn_.fd(), POLLIN, 0}, {wake_.get(), POLLIN, 0}, {-1, POLLIN, 0}};
    if (!shutting_down && shutdown_fd_ >= 0) fds[2].fd = shutdown_fd_;
    int ready = ::poll(fds, 3, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) FinishCalls();
    if ((fds[2].revents & POLLIN) != 0) {
      // Server stopping: no new call; the running ones finish (or are
      // stopped with the daemon's processes).
      shutting_down = true;
      (void)h2_.nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                                      h2_.nghttp2_session_get_last_proc_stream_id(session_),
                                      NGHTTP2_NO_ERROR, nullptr, 0);
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      ssize_t n = ::recv(conn_.fd(), buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return;  // the client left: the destructor stops its calls
      last_activity = std::chrono::steady_clock::now();
      alive = feed(std::string_view(buffer.data(), static_cast<size_t>(n)));
    }
  }
  (void)Flush();
}

// Without libnghttp2 the client learns why: the server's SETTINGS, then a
// GOAWAY (INTERNAL_ERROR) whose debug data is the reason.
void RefuseWithoutNghttp2(net::Conn& conn, const std::string& reason) {
  std::string frames("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);  // empty SETTINGS
  const std::string debug = reason.substr(0, 1024);
  const size_t length = 8 + debug.size();
  frames += static_cast<char>(length >> 16);
  frames += static_cast<char>(length >> 8);
  frames += static_cast<char>(length);
  frames += std::string("\x07\x00\x00\x00\x00\x00", 6);          // GOAWAY on stream 0
  frames += std::string("\x00\x00\x00\x00\x00\x00\x00\x02", 8);  // last stream 0, INTERNAL_ERROR
  frames += debug;
  (void)conn.WriteAll(frames, net::DeadlineAfter(std::chrono::seconds(5)));
}

}  // namespace

void ServeGrpcConnection(net::Conn& conn, std::string_view received,
                         const GrpcServerOptions& options, const GrpcHandler& handler,
                         int shutdown_fd) {
  auto h2 = LoadLibNghttp2("gRPC (HTTP/2)");
  if (!h2) {
    std::fprintf(stderr, "deepbox-sandboxd: %s\n", h2.error().message.c_str());
    RefuseWithoutNghttp2(conn, h2.error().message);
    return;
  }
  GrpcConnection connection(conn, options, handler, shutdown_fd, **h2);
  connection.Serve(received);
}

}  // namespace deepbox::sandboxd
