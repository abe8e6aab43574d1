// MCP tool-call round trip vs the daemon's own HTTP round trip (bench/mcp/README.md).
//
// One deepbox-sandboxd (ScopedSandboxd) is the sandbox. The floor is the
// production SandboxdClient calling it directly: a 4 KiB read and `true`
// through the streamed exec API. The MCP rows make the same operations as
// tools/call requests over the stdio transport (newline-delimited JSON-RPC on
// pipes) to a `deepbox mcp` server in this process: read_file and execute,
// each a full request -> response on the wire, sequential, one client.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/mcp/sandbox_tools.h"
#include "cli/mcp/testing/daemon_provider.h"
#include "mcp/server.h"
#include "mcp/stdio.h"

using namespace deepbox;
using Clock = std::chrono::steady_clock;

namespace {

struct Stats {
  double p50 = 0, p99 = 0;
};

Stats Summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  Stats s;
  if (us.empty()) return s;
  s.p50 = us[us.size() / 2];
  s.p99 = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return s;
}

// Times `a` and `b` alternately, call by call, so both see the same noise
// (the machine is shared): p50/p99 of each.
template <typename A, typename B>
std::pair<Stats, Stats> TimeSideBySide(int n, A a, B b) {
  for (int i = 0; i < std::max(5, n / 20); ++i) {  // warm-up
    a();
    b();
  }
  std::vector<double> ua, ub;
  ua.reserve(n);
  ub.reserve(n);
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    a();
    auto t1 = Clock::now();
    b();
    auto t2 = Clock::now();
    ua.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    ub.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  return {Summarize(ua), Summarize(ub)};
}

class LineClient {
 public:
  LineClient(int to, int from) : to_(to), from_(from) {}
  std::string Call(const std::string& line) {
    std::string l = line + "\n";
    if (::write(to_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) std::abort();
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string out = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return out;
      }
      char chunk[65536];
      ssize_t n = ::read(from_, chunk, sizeof chunk);
      if (n <= 0) std::abort();
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int to_, from_;
  std::string buf_;
};

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  auto provider = std::make_unique<mcp::testing::DaemonProvider>();
  auto* daemons = provider.get();
  std::vector<std::unique_ptr<SandboxProvider>> v;
  v.push_back(std::move(provider));
  auto broker = std::make_shared<mcp::SandboxBroker>(mcp::BrokerOptions{}, std::move(v));
  // Created as the stdio client it is then used by.
  auto info = broker->Create({}, mcp::kStdioOwner);
  if (!info) {
    std::fprintf(stderr, "cannot start the daemon: %s\n", info.error().message.c_str());
    return 1;
  }
  std::string id = info->id;
  auto direct = daemons->daemon(id)->Connect();
  if (!direct) return 1;
  std::string content(4096, 'x');
  for (size_t i = 80; i < content.size(); i += 81) content[i] = '\n';
  std::string path = (*direct)->root() + "/bench.txt";
  if (!(*direct)->Write(path, content, 0644)) return 1;

  // deepbox mcp over stdio pipes, in this process.
  auto registry = std::make_shared<mcp::ToolRegistry>();
  mcp::AddSandboxTools(*registry, broker);
  mcp::McpServer server(registry, mcp::ServerConfig{});
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return 1;
  mcp::StdioOptions so;
  so.in_fd = in[0];
  so.out_fd = out[1];
  std::thread serving([&] { (void)mcp::ServeStdio(server, so); });
  LineClient client(in[1], out[0]);
  const std::string meta = R"("_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",)"
                           R"("io.modelcontextprotocol/clientCapabilities":{}})";
  int next = 0;
  auto call = [&](const std::string& tool, const std::string& args) {
    std::string req =
        fmt::format(R"({{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{{},"name":"{}",)"
                    R"("arguments":{}}}}})",
                    ++next, meta, tool, args);
    std::string resp = client.Call(req);
    if (resp.find("\"isError\":false") == std::string::npos) {
      std::fprintf(stderr, "unexpected answer: %s\n", resp.substr(0, 300).c_str());
      std::abort();
    }
  };
  std::string sid = fmt::format(R"("sandbox_id":"{}")", id);
  // The floor: the daemon's own HTTP API through SandboxdClient, each call
  // alternating with the same operation through MCP.
  auto [floor_read, mcp_read] = TimeSideBySide(
      n,
      [&] {
        ReadOptions o;
        o.line_offset = 0;
        o.line_limit = 100;
        if (!(*direct)->Read(path, o)) std::abort();
      },
      [&] { call("read_file", fmt::format(R"({{"file_path":"{}",{}}})", path, sid)); });
  auto [floor_exec, mcp_exec] = TimeSideBySide(
      n / 2,
      [&] {
        ExecRequest r;
        r.shell = "true";
        auto res = (*direct)->ExecStream(r, [](OutputStream, std::string_view) { return true; });
        if (!res) std::abort();
      },
      [&] { call("execute", fmt::format(R"({{"command":"true",{}}})", sid)); });
  ::close(in[1]);
  serving.join();
  ::close(out[0]);
  broker->ReleaseAll();
  (void)broker->Delete(id, mcp::kStdioOwner);

  std::printf("%-22s %12s %12s %14s %14s %8s\n", "op", "mcp p50 us", "mcp p99 us", "floor p50 us",
              "floor p99 us", "ratio");
  std::printf("%-22s %12.1f %12.1f %14.1f %14.1f %7.2fx\n", "read_file 4 KiB", mcp_read.p50,
              mcp_read.p99, floor_read.p50, floor_read.p99, mcp_read.p50 / floor_read.p50);
  std::printf("%-22s %12.1f %12.1f %14.1f %14.1f %7.2fx\n", "execute true", mcp_exec.p50,
              mcp_exec.p99, floor_exec.p50, floor_exec.p99, mcp_exec.p50 / floor_exec.p50);
  return 0;
}
