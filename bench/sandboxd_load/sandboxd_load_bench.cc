// deepbox-sandboxd under load and slow clients (issue 15), each figure side by
// side with a baseline measured in the same run just before it (the machine
// is noisy: read the ratios):
//   * p50/p99 of a stat request alone, then with 1,000 idle keep-alive
//     connections open, with 20 slowloris clients dripping header bytes, with
//     4 readers taking 64 MiB downloads at 1 byte/s, and with all of them;
//   * the mixed workload (stat, read, write, ls, exec true, glob, grep, line
//     read: MixedWorkload) from 1 client and from 16 clients, in requests/s,
//     and the daemon's VmRSS before and after the 16-client run.
// The daemon runs with its default deadlines (headers 20 s, write stall
// 300 s), so every slow client stays for the whole measurement.
// Usage: sandboxd_load_bench [mixed_requests=50000] [stat_samples=5000]
// (release build).
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/testing/load_clients.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace {

using namespace std::chrono_literals;
using deepbox::testing::JsonPost;
using deepbox::testing::MixedWorkload;
using deepbox::testing::ProcStatusField;
using deepbox::testing::RawClient;
using Clock = std::chrono::steady_clock;

deepbox::net::Deadline Soon() { return deepbox::net::DeadlineAfter(30s); }

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "sandboxd_load_bench: %s\n", what.c_str());
  std::exit(1);
}

struct Stats {
  double p50_us = 0, p99_us = 0;
};

Stats MeasureStat(deepbox::Sandbox& sb, int n) {
  for (int i = 0; i < 50; ++i) (void)sb.Stat("bench.bin");
  std::vector<double> us;
  us.reserve(n);
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    if (!sb.Stat("bench.bin")) Die("stat failed");
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)]};
}

constexpr int kRounds = 3;

Stats Median(std::vector<Stats> runs) {
  auto mid = [&](auto field) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.*field);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {mid(&Stats::p50_us), mid(&Stats::p99_us)};
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  in >> one;
  return one;
}

// The slow clients of one scenario; destroying it ends them.
class Condition {
 public:
  virtual ~Condition() = default;
};

class IdleConnections : public Condition {
 public:
  IdleConnections(const std::string& where, int n) {
    for (int i = 0; i < n; ++i) {
      auto c = RawClient::Connect(where, Soon());
      if (!c) Die("connect: " + c.error().ToString());
      // One real request each, then silence: kept-alive idle connections.
      if (!c->Send(JsonPost("/deepbox/v1/fs/stat", R"({"path":"bench.bin"})"), Soon())) {
        Die("send failed");
      }
      auto r = c->ReadResponse(Soon());
      if (!r || r->status != 200) Die("idle connection's request failed");
      conns_.push_back(std::move(*c));
    }
  }

 private:
  std::vector<RawClient> conns_;
};

class Slowloris : public Condition {
 public:
  Slowloris(const std::string& where, int n) {
    for (int i = 0; i < n; ++i) {
      auto c = RawClient::Connect(where, Soon());
      if (!c) Die("connect: " + c.error().ToString());
      conns_.push_back(std::move(*c));
    }
    drip_ = std::thread([this] {
      const std::string header = "GET /deepbox/v1/health HTTP/1.1\r\nHost: b\r\nX-Slow: ";
      for (size_t byte = 0; !stop_; ++byte) {
        char c = byte < header.size() ? header[byte] : 'a';
        for (auto& conn : conns_) (void)conn.Send(std::string_view(&c, 1), Soon());
        for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(100ms);
      }
    });
    std::this_thread::sleep_for(2s);  // a few bytes in: mid-header
  }
  ~Slowloris() override {
    stop_ = true;
    drip_.join();
  }

 private:
  std::vector<RawClient> conns_;
  std::atomic<bool> stop_{false};
  std::thread drip_;
};

class OneBytePerSecondReaders : public Condition {
 public:
  OneBytePerSecondReaders(const std::string& where, int n) {
    for (int i = 0; i < n; ++i) {
      auto c = RawClient::Connect(where, Soon());
      if (!c) Die("connect: " + c.error().ToString());
      if (!c->Send("GET /deepbox/v1/fs/raw?path=big.bin HTTP/1.1\r\nHost: b\r\n\r\n", Soon())) {
        Die("send failed");
      }
      conns_.push_back(std::move(*c));
    }
    read_ = std::thread([this] {
      while (!stop_) {
        for (auto& conn : conns_) (void)conn.ReadSome(1, Soon());
        for (int i = 0; i < 10 && !stop_; ++i) std::this_thread::sleep_for(100ms);
      }
    });
    std::this_thread::sleep_for(1s);  // the daemon's writes block on full buffers
  }
  ~OneBytePerSecondReaders() override {
    stop_ = true;
    read_.join();
  }

 private:
  std::vector<RawClient> conns_;
  std::atomic<bool> stop_{false};
  std::thread read_;
};

struct Row {
  std::string name;
  Stats baseline, loaded;
};

}  // namespace

int main(int argc, char** argv) {
  const size_t mixed = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 50000;
  const int samples = argc > 2 ? std::atoi(argv[2]) : 5000;
  struct rlimit nofile {};
  ::getrlimit(RLIMIT_NOFILE, &nofile);
  if (nofile.rlim_cur < 4096) {
    nofile.rlim_cur = std::max<rlim_t>(4096, nofile.rlim_cur);
    nofile.rlim_max = std::max(nofile.rlim_max, nofile.rlim_cur);
    if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0) Die("cannot raise RLIMIT_NOFILE to 4096");
  }
  auto daemon = deepbox::testing::ScopedSandboxd::Start();
  if (!daemon) Die("cannot start deepbox-sandboxd: " + daemon.error().ToString());
  auto& sb = (*daemon)->client();
  const std::string where = (*daemon)->unix_url();
  const pid_t pid = (*daemon)->pid();
  {
    std::ofstream out((*daemon)->root() + "/big.bin", std::ios::binary);
    std::string block(1 << 20, 'b');
    for (int i = 0; i < 64; ++i) out << block;
  }
  if (!sb.Write("bench.bin", std::string(4096, 'a'), 0644)) Die("write failed");
  const double load_before = LoadAverage();

  // Each scenario right after its own baseline.
  using Make = std::function<std::unique_ptr<Condition>()>;
  const std::vector<std::pair<std::string, Make>> scenarios = {
      {"1,000 idle keep-alive connections",
       [&] { return std::make_unique<IdleConnections>(where, 1000); }},
      {"20 slowloris clients (1 header byte/s)",
       [&] { return std::make_unique<Slowloris>(where, 20); }},
      {"4 readers of 64 MiB at 1 byte/s",
       [&] { return std::make_unique<OneBytePerSecondReaders>(where, 4); }},
  };
  // Rounds of (baseline, scenario) pairs; the median of each figure over the
  // rounds, so that one hiccup of a busy machine does not make a p99.
  std::vector<std::vector<Stats>> base(scenarios.size() + 1), loaded(scenarios.size() + 1);
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < scenarios.size(); ++i) {
      base[i].push_back(MeasureStat(sb, samples));
      auto condition = scenarios[i].second();
      loaded[i].push_back(MeasureStat(sb, samples));
    }
    base.back().push_back(MeasureStat(sb, samples));
    std::vector<std::unique_ptr<Condition>> all;
    for (const auto& [name, make] : scenarios) all.push_back(make());
    loaded.back().push_back(MeasureStat(sb, samples));
  }
  std::vector<Row> rows;
  for (size_t i = 0; i <= scenarios.size(); ++i) {
    rows.push_back({i < scenarios.size() ? scenarios[i].first : "all three at once",
                    Median(base[i]), Median(loaded[i])});
  }

  // The mixed workload from 1 and from 16 clients.
  if (auto s = MixedWorkload::Prepare(sb); !s) Die("prepare: " + s.error().ToString());
  std::vector<std::unique_ptr<deepbox::SandboxdClient>> owned;
  for (int c = 0; c < 16; ++c) {
    auto client = (*daemon)->Connect();
    if (!client) Die("connect: " + client.error().ToString());
    owned.push_back(std::move(*client));
  }
  std::vector<deepbox::Sandbox*> one = {owned[0].get()};
  std::vector<deepbox::Sandbox*> sixteen;
  for (auto& c : owned) sixteen.push_back(c.get());
  std::string failure;
  if (MixedWorkload::Run(sixteen, 3200, &failure) != 0) Die("warm-up: " + failure);
  const long rss_warm = ProcStatusField(pid, "VmRSS");
  auto timed = [&](const std::vector<deepbox::Sandbox*>& clients) {
    auto t0 = Clock::now();
    if (MixedWorkload::Run(clients, mixed, &failure) != 0) Die("mixed: " + failure);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const double one_s = timed(one);
  const double sixteen_s = timed(sixteen);
  const long rss_after = ProcStatusField(pid, "VmRSS");
  const double load_after = LoadAverage();

  std::printf(
      "deepbox-sandboxd under load: stat over a keep-alive unix connection, %d samples; median "
      "of %d rounds\n",
      samples, kRounds);
  std::printf("%-40s %9s %9s %9s %9s %7s %7s\n", "while", "base p50", "base p99", "p50 (us)",
              "p99 (us)", "p50 x", "p99 x");
  for (const auto& r : rows) {
    std::printf("%-40s %9.1f %9.1f %9.1f %9.1f %6.2fx %6.2fx\n", r.name.c_str(), r.baseline.p50_us,
                r.baseline.p99_us, r.loaded.p50_us, r.loaded.p99_us,
                r.loaded.p50_us / r.baseline.p50_us, r.loaded.p99_us / r.baseline.p99_us);
  }
  std::printf("\nmixed workload, %zu requests\n", mixed);
  std::printf("%-10s %10s %12s %8s\n", "clients", "seconds", "requests/s", "x");
  std::printf("%-10d %10.2f %12.0f %7.2fx\n", 1, one_s, static_cast<double>(mixed) / one_s, 1.0);
  std::printf("%-10d %10.2f %12.0f %7.2fx\n", 16, sixteen_s, static_cast<double>(mixed) / sixteen_s,
              one_s / sixteen_s);
  std::printf("daemon VmRSS: %ld KiB after warm-up, %ld KiB after both runs (%+ld KiB)\n", rss_warm,
              rss_after, rss_after - rss_warm);
  std::printf("load average (1 min): %.2f before, %.2f after\n", load_before, load_after);
  return 0;
}
