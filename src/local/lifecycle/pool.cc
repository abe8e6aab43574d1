#include "local/lifecycle/pool.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/unique_fd.h"
#include "local/lifecycle/sandbox_image.h"

namespace deepbox::local::lifecycle {
namespace {

void Drain(int fd) {
  char buf[4096];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
}

}  // namespace

Status ValidatePoolName(std::string_view name) {
  return ValidateLabelValue(kPoolLabel, name).and_then([&]() -> Status {
    if (name.empty()) return MakeError(ErrorCode::kInvalidArgument, "the pool name is empty");
    return {};
  });
}

Status ServePool(LocalSandboxProvider& provider, const PoolOptions& options, int stop_fd) {
  if (auto st = ValidatePoolName(options.name); !st) return st;
  if (options.replicas < 0) {
    return MakeError(ErrorCode::kInvalidArgument, "--replicas must be >= 0");
  }
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  auto resolved = ResolveRootfs(options.rootfs);
  if (!resolved) return tl::unexpected(resolved.error());
  const std::string rootfs = *resolved;
  // Warm sandboxes of an image are made from what the cache has for its name
  // (pulled now if missing), and matched by its digest.
  std::string image_digest;
  std::string image_name;
  std::unique_ptr<oci::ImageStore> image_store;
  if (!options.image.empty()) {
    if (!options.rootfs.empty()) {
      return MakeError(ErrorCode::kInvalidArgument, "--image and --rootfs cannot be used together");
    }
    oci::StoreLock hold;
    auto image = PrepareSandboxImage(provider.options().image_dir, options.image, &hold);
    if (!image) return tl::unexpected(image.error());
    image_digest = image->digest;
    image_name = image->name;
    auto opened = oci::ImageStore::Open(image->store_dir);
    if (!opened) return tl::unexpected(opened.error());
    image_store = std::move(*opened);
    log(fmt::format("pool '{}': image {} ({})", options.name, image->name, image->digest));
  }
  if (auto st = ValidateSandboxLimits(provider.options().limits); !st) return st;
  const Store& store = provider.store();
  fs::path dir = store.pool_dir(options.name);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return MakeSyscallError("mkdir", errno, dir.string());
  }
  fs::path lock_path = dir / "lock";
  UniqueFd lock(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock) return MakeSyscallError("open", errno, lock_path.string());
  if (flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      std::ifstream in(dir / "pid");
      std::string pid;
      in >> pid;
      return MakeError(ErrorCode::kConflict,
                       fmt::format("pool '{}' is already served by another `deepbox pool serve`{}",
                                   options.name, pid.empty() ? "" : " (pid " + pid + ")"));
    }
    return MakeSyscallError("flock", errno, lock_path.string());
  }
  {
    std::ofstream out(dir / "pid", std::ios::trunc);
    out << getpid() << "\n";
  }
  UniqueFd ino(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!ino) return MakeSyscallError("inotify_init1", errno);
  if (inotify_add_watch(ino.get(), dir.c_str(), IN_CLOSE_WRITE | IN_CREATE | IN_ATTRIB) < 0) {
    return MakeSyscallError("inotify_add_watch", errno, dir.string());
  }

  log(fmt::format("pool '{}': warm sandboxes get {}", options.name,
                  provider.options().limits.Describe()));
  std::string last_status;
  int failures = 0;
  // Half-claimed sandboxes (see pool.h) -> when this daemon first saw them so.
  std::map<std::string, std::chrono::steady_clock::time_point> half_claimed;
  for (;;) {
    // A tag pulled again (`deepbox image pull`) names another digest in the
    // cache: claims for the name now ask for that one, so the warm
    // sandboxes of the old one become misfits and are replaced.
    if (image_store) {
      auto record = image_store->FindImage(image_name);
      if (record && *record && (*record)->manifest_digest != image_digest) {
        log(
            fmt::format("pool '{}': image {} now names {} (was {}): its warm sandboxes are "
                        "replaced",
                        options.name, image_name, (*record)->manifest_digest, image_digest));
        image_digest = (*record)->manifest_digest;
      }
    }
    auto all = provider.ListMeta();
    if (!all) return tl::unexpected(all.error());
    std::vector<SandboxMeta> members, misfits, abandoned;
    std::map<std::string, std::chrono::steady_clock::time_point> still_half_claimed;
    const auto now = std::chrono::steady_clock::now();
    int ready = 0;
    for (auto& m : *all) {
      if (m.pool != options.name || m.state != "warm") continue;
      if (access(store.Paths(m.id).claimed.c_str(), F_OK) == 0) {  // being claimed
        auto seen = half_claimed.find(m.id);
        auto since = seen == half_claimed.end() ? now : seen->second;
        still_half_claimed[m.id] = since;
        if (now - since >= kAbandonedClaimAfter) abandoned.push_back(m);
        continue;
      }
      if (m.network_requested != options.network || m.rootfs != rootfs ||
          m.image.digest != image_digest || m.limits != provider.options().limits) {
        misfits.push_back(m);
      } else {
        if (m.ready) ++ready;
        members.push_back(m);
      }
    }
    // Trim: misfits (a restart with another config) and extras, newest first.
    // Taking the marker first keeps claimers away from what we delete.
    std::vector<SandboxMeta> trim = misfits;
    std::sort(members.begin(), members.end(),
              [](const auto& a, const auto& b) { return a.created_at_ms > b.created_at_ms; });
    int extra = static_cast<int>(members.size()) - options.replicas;
    for (int i = 0; i < extra; ++i) {
      if (members[static_cast<size_t>(i)].ready) trim.push_back(members[static_cast<size_t>(i)]);
    }
    half_claimed = std::move(still_half_claimed);
    for (const auto& m : abandoned) {
      // Under the lock, only if still warm: a claimer that completes its claim
      // first keeps it; one that comes later fails (provider.cc, ClaimWarm).
      auto taken = store.Update(m.id, [](SandboxMeta& x) -> Status {
        if (x.state != "warm") return MakeError(ErrorCode::kConflict, "claimed meanwhile");
        x.state = "claimed";
        return {};
      });
      if (!taken) continue;
      half_claimed.erase(m.id);
      auto st = provider.Delete(m.id);
      log(st ? fmt::format("removed {} (its claim was abandoned half-way {} s ago)", m.id,
                           kAbandonedClaimAfter.count())
             : fmt::format("removing {} (abandoned claim): {}", m.id, st.error().message));
    }
    for (const auto& m : trim) {
      SandboxPaths p = store.Paths(m.id);
      if (rename(p.warm.c_str(), p.claimed.c_str()) != 0) continue;  // claimed meanwhile
      auto st = provider.Delete(m.id);
      log(st ? fmt::format("removed {} (more than {} warm)", m.id, options.replicas)
             : fmt::format("removing {}: {}", m.id, st.error().message));
    }
    int missing = options.replicas - static_cast<int>(members.size());
    std::string status =
        fmt::format("pool '{}': {}/{} warm{}", options.name, ready, options.replicas,
                    missing > 0 ? fmt::format(", creating {}", missing) : "");
    if (status != last_status) {
      log(status);
      last_status = status;
    }
    if (missing > 0) {
      int batch = std::min(missing, std::max(1, options.parallel));
      std::vector<std::thread> threads;
      std::mutex mu;
      int failed = 0;
      for (int i = 0; i < batch; ++i) {
        threads.emplace_back([&] {
          auto m =
              provider.CreateWarm(options.name, options.network, options.rootfs, options.image);
          std::lock_guard<std::mutex> g(mu);
          if (!m) {
            ++failed;
            log("creating a warm sandbox failed: " + m.error().ToString());
          } else if (failures == 0) {
            if (!m->network_note.empty()) log(m->network_note);
            if (!m->limits_note.empty()) log(m->limits_note);
          }
        });
      }
      for (auto& t : threads) t.join();
      failures = failed > 0 ? failures + 1 : 0;
    }
    // Wait for a claim (the wake file), a stop, or a periodic re-check. After
    // failures, back off (up to 30 s) instead of spinning.
    int timeout_ms = failures > 0  ? std::min(30000, 500 << std::min(failures, 6))
                     : missing > 0 ? 0
                                   : 1000;
    struct pollfd pfds[2] = {{stop_fd, POLLIN, 0}, {ino.get(), POLLIN, 0}};
    int rc = poll(pfds, 2, timeout_ms);
    if (rc < 0 && errno != EINTR) return MakeSyscallError("poll", errno);
    if (rc > 0 && pfds[0].revents) break;
    if (rc > 0 && pfds[1].revents) {
      Drain(ino.get());
      // Most likely a claim: its claimer's first requests come now. The
      // replacement (a cold create: tens of ms of CPU) waits a moment so as
      // not to take the cores from them.
      struct pollfd stop = {stop_fd, POLLIN, 0};
      const int waited = poll(&stop, 1, static_cast<int>(kRefillAfterClaim.count()));
      if (waited > 0) break;
      Drain(ino.get());
    }
  }
  log(fmt::format("pool '{}' stopped; its warm sandboxes keep running", options.name));
  return {};
}

}  // namespace deepbox::local::lifecycle
