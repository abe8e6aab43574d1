#include "sandbox/testing/load_clients.h"

#include <fmt/format.h>
#include <poll.h>

#include <atomic>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

namespace deepbox::testing {

std::string JsonPost(std::string_view target, std::string_view body) {
  return fmt::format(
      "POST {} HTTP/1.1\r\nHost: load\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\n\r\n{}",
      target, body.size(), body);
}

Result<RawClient> RawClient::Connect(const std::string& endpoint, net::Deadline deadline) {
  auto ep = net::Endpoint::Parse(endpoint);
  if (!ep) return tl::unexpected(ep.error());
  auto c = net::Conn::Connect(*ep, deadline);
  if (!c) return tl::unexpected(c.error());
  RawClient rc;
  rc.conn_ = std::move(*c);
  return rc;
}

Status RawClient::Send(std::string_view bytes, net::Deadline deadline) {
  return conn_.WriteAll(bytes, deadline);
}

Result<std::string> RawClient::ReadSome(size_t max, net::Deadline deadline) {
  if (!pending_.empty()) {
    std::string out = pending_.substr(0, max);
    pending_.erase(0, out.size());
    return out;
  }
  std::string out(max, '\0');
  auto n = conn_.ReadSome(out.data(), out.size(), deadline);
  if (!n) return tl::unexpected(n.error());
  out.resize(*n);
  return out;
}

Status RawClient::Fill(net::Deadline deadline) {
  char buf[64 * 1024];
  auto n = conn_.ReadSome(buf, sizeof buf, deadline);
  if (!n) return tl::unexpected(n.error());
  if (*n == 0) return MakeError(ErrorCode::kUnavailable, "connection closed mid-response");
  pending_.append(buf, *n);
  return {};
}

Result<RawResponse> RawClient::ReadResponse(net::Deadline deadline) {
  for (;;) {
    RawResponse r;
    size_t end;
    while ((end = pending_.find("\r\n\r\n")) == std::string::npos) {
      if (auto s = Fill(deadline); !s) return tl::unexpected(s.error());
    }
    r.head = pending_.substr(0, end + 2);
    pending_.erase(0, end + 4);
    if (r.head.size() < 12 || !r.head.starts_with("HTTP/1.1 ") ||
        std::from_chars(r.head.data() + 9, r.head.data() + 12, r.status).ec != std::errc()) {
      return MakeError(ErrorCode::kInvalidArgument, "not an HTTP response: " + r.head);
    }
    if (r.status == 100) continue;
    std::string lower = r.head;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("\r\ntransfer-encoding: chunked\r\n") != std::string::npos) {
      for (;;) {
        while ((end = pending_.find("\r\n")) == std::string::npos) {
          if (auto s = Fill(deadline); !s) return tl::unexpected(s.error());
        }
        size_t size = 0;
        if (std::from_chars(pending_.data(), pending_.data() + end, size, 16).ec != std::errc()) {
          return MakeError(ErrorCode::kInvalidArgument, "bad chunk size");
        }
        while (pending_.size() < end + 2 + size + 2) {
          if (auto s = Fill(deadline); !s) return tl::unexpected(s.error());
        }
        r.body.append(pending_, end + 2, size);
        pending_.erase(0, end + 2 + size + 2);
        if (size == 0) return r;
      }
    }
    size_t length = 0;
    if (auto cl = lower.find("\r\ncontent-length: "); cl != std::string::npos) {
      std::from_chars(lower.data() + cl + 18, lower.data() + lower.size(), length);
    }
    while (pending_.size() < length) {
      if (auto s = Fill(deadline); !s) return tl::unexpected(s.error());
    }
    r.body = pending_.substr(0, length);
    pending_.erase(0, length);
    return r;
  }
}

Result<std::string> RawClient::ReadToEnd(net::Deadline deadline) {
  std::string out = std::move(pending_);
  pending_.clear();
  char buf[64 * 1024];
  for (;;) {
    auto n = conn_.ReadSome(buf, sizeof buf, deadline);
    if (!n) {
      if (n.error().code == ErrorCode::kTimeout) return tl::unexpected(n.error());
      return out;  // reset after the close
    }
    if (*n == 0) return out;
    out.append(buf, *n);
  }
}

bool RawClient::PeerClosed() const {
  pollfd p{conn_.fd(), POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool RawClient::Readable() const {
  pollfd p{conn_.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

long ProcStatusField(pid_t pid, std::string_view key) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string status((std::istreambuf_iterator<char>(in)), {});
  auto pos = status.find("\n" + std::string(key) + ":");
  if (pos == std::string::npos) return -1;
  pos += key.size() + 2;
  while (pos < status.size() && (status[pos] == ' ' || status[pos] == '\t')) ++pos;
  long v = -1;
  std::from_chars(status.data() + pos, status.data() + status.size(), v);
  return v;
}

long OpenFdCount(pid_t pid) {
  long n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

namespace {

constexpr int kMixFiles = 50;

std::string MixFile(size_t n) { return fmt::format("{}/f{:02}.txt", MixedWorkload::kDir, n); }

Status Failed(std::string_view what, const std::string& why) {
  return MakeError(ErrorCode::kInternal, fmt::format("{}: {}", what, why));
}

}  // namespace

Status MixedWorkload::Prepare(Sandbox& sandbox) {
  for (int i = 0; i < kMixFiles; ++i) {
    auto s = sandbox.Write(MixFile(i), fmt::format("line one\nneedle {}\nline three\n", i), 0644);
    if (!s) return s;
  }
  return {};
}

Status MixedWorkload::One(Sandbox& sb, int client, size_t i) {
  const std::string f = MixFile((i * 7 + static_cast<size_t>(client)) % kMixFiles);
  const std::string dir(kDir);
  switch ((i + static_cast<size_t>(client)) % 8) {
    case 0: {
      auto r = sb.Stat(f);
      if (!r) return Failed("stat", r.error().ToString());
      if (r->size <= 0) return Failed("stat", "empty file");
      return {};
    }
    case 1: {
      auto r = sb.Read(f, {});
      if (!r) return Failed("read", r.error().ToString());
      if (r->content.find("needle") == std::string::npos) return Failed("read", r->content);
      return {};
    }
    case 2: {
      auto r =
          sb.Write(fmt::format("{}/w{}/{}.txt", dir, client, i % 20), fmt::format("w {}", i), 0644);
      if (!r) return Failed("write", r.error().ToString());
      return {};
    }
    case 3: {
      auto r = sb.List(dir);
      if (!r) return Failed("ls", r.error().ToString());
      if (r->size() < static_cast<size_t>(kMixFiles)) return Failed("ls", "entries missing");
      return {};
    }
    case 4: {
      auto r = sb.Exec(ExecRequest{.argv = {"true"}});
      if (!r) return Failed("exec", r.error().ToString());
      if (r->kind != ExitKind::kExited || r->exit_code != 0) return Failed("exec", r->error);
      return {};
    }
    case 5: {
      auto r = sb.Glob("f1*.txt", dir, 0);
      if (!r) return Failed("glob", r.error().ToString());
      if (r->paths.size() != 10) return Failed("glob", fmt::format("{} paths", r->paths.size()));
      return {};
    }
    case 6: {
      auto r = sb.Grep(GrepRequest{.pattern = "needle 7", .path = dir});
      if (!r) return Failed("grep", r.error().ToString());
      if (r->matches.size() != 1)
        return Failed("grep", fmt::format("{} matches", r->matches.size()));
      return {};
    }
    default: {
      auto r = sb.Read(f, ReadOptions{.line_offset = 1, .line_limit = 1});
      if (!r) return Failed("read lines", r.error().ToString());
      if (!r->content.starts_with("needle")) return Failed("read lines", r->content);
      return {};
    }
  }
}

size_t MixedWorkload::Run(const std::vector<Sandbox*>& clients, size_t total,
                          std::string* first_failure) {
  std::atomic<size_t> failures{0};
  std::mutex mu;
  std::vector<std::thread> threads;
  const size_t n = clients.size();
  for (size_t c = 0; c < n; ++c) {
    threads.emplace_back([&, c] {
      for (size_t i = c; i < total; i += n) {
        auto s = One(*clients[c], static_cast<int>(c), i);
        if (!s && failures++ == 0 && first_failure != nullptr) {
          std::lock_guard lock(mu);
          *first_failure = fmt::format("request {} of client {}: {}", i, c, s.error().ToString());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return failures.load();
}

}  // namespace deepbox::testing
