// The warm pool daemon (`deepbox pool serve`): keeps N sandboxes of a pool
// warm. It only creates and trims; claims never talk to it (a claimer renames
// a sandbox's `warm` marker, see provider.h) and merely wake it up through an
// inotify'd file. Its sandboxes belong to their supervisors, so killing or
// restarting the daemon loses nothing: on start it adopts the warm sandboxes
// of its pool that exist and creates only the missing ones. Stopping it
// leaves the warm sandboxes running (drain with
// `deepbox sandbox rm --selector deepbox.dev/pool=NAME`).
//
// A warm sandbox nobody claims expires after kWarmLifetime (supervisor.h):
// even one whose pool is gone for good does not run for ever; the daemon
// replaces it. A claim gives it the claimer's TTL (or none).
//
// A claim is two steps (rename of the `warm` marker, then meta.json's state
// set to claimed). A claimer killed between them leaves a sandbox that no
// claimer can take (no marker), that the pool does not count (being claimed)
// and that nothing deletes but its kWarmLifetime; the same for a
// deleter killed after its rename. The daemon takes such a sandbox back once
// it has seen it half-claimed for kAbandonedClaimAfter, under the sandbox's
// lock (a claimer still alive then fails its step two and moves on), and
// deletes it.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "common/error.h"
#include "local/lifecycle/provider.h"

namespace deepbox::local::lifecycle {

inline constexpr std::chrono::seconds kAbandonedClaimAfter{10};

// After a wake-up (a claim), the pool waits this long before it replaces the
// claimed sandbox: a replacement is a cold create (tens of ms of CPU), and on
// a small machine it took the cores from the claimer's first command
// (bench_local_lifecycle --warm).
inline constexpr std::chrono::milliseconds kRefillAfterClaim{100};

struct PoolOptions {
  std::string name = "default";
  int replicas = 1;
  std::string network;  // "" = host default
  std::string rootfs;   // "" = host system dirs
  std::string image;    // an OCI image reference (pulled at start); "" = none
  int parallel = 2;     // sandboxes created at once
  std::function<void(const std::string&)> log;  // progress lines
};

Status ValidatePoolName(std::string_view name);

// The warm sandboxes get the limits of `provider` (LocalProviderOptions::limits);
// only claimers asking for exactly those limits take them (see provider.h).
// Runs until `stop_fd` becomes readable (e.g. an eventfd or a signalfd).
// Fails at once if another daemon serves the same pool.
Status ServePool(LocalSandboxProvider& provider, const PoolOptions& options, int stop_fd);

}  // namespace deepbox::local::lifecycle
