// The provider interface: one object per kind of sandbox (local, k8s, ...)
// that creates sandboxes and manages them for their whole life. Every
// consumer (`deepbox run`, `deepbox sandbox ...`, `deepbox mcp`, the Python
// package through the CLI) goes through it; a provider answers UNIMPLEMENTED,
// with the reason, for a verb it cannot do.
//
// Ids: each provider has its own id form ("sb-1a2b3c" locally, "NAMESPACE/
// CLAIM" on Kubernetes) and says whether an id is of that form (OwnsId), so
// an id alone finds its provider (registry.h).
//
// Threads: a provider may be used from several threads at once (the MCP
// server does), except where a method says otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "sandbox/sandbox.h"
#include "sandbox/sandboxd_client.h"
#include "sandbox/secrets.h"

namespace deepbox {

struct ClaimOptions {
  std::map<std::string, std::string> labels;
  std::chrono::seconds ttl{0};  // 0 = no expiry
  std::string network;          // "" = provider default; "none" | "public" | "allow=..."
  std::string rootfs;           // local: an unpacked root filesystem directory
  // local: an OCI image reference (pulled on first use; excludes rootfs).
  // k8s: refused (the SandboxTemplate sets the image).
  std::string image;
  bool allow_warm = true;  // false: never take a warm sandbox (a cold create)
  // Suspend the sandbox after this long without use (no request, no command
  // or background process running); the next use resumes it. 0 = never.
  // Local only so far (the k8s provider ignores it: upstream has no idle timer).
  std::chrono::seconds idle_suspend{0};
  // A name, unique among this user's sandboxes of the provider, usable
  // wherever the id is ("" = none). k8s: the claim's name (a DNS label),
  // unique in its namespace, so the id is NAMESPACE/NAME.
  std::string name;
  // Secrets the sandbox can use but never read (sandbox/secrets.h): the
  // provider that cannot keep the value out of the sandbox refuses them.
  // A claim with secrets never takes a warm sandbox.
  std::vector<SecretGrant> secrets;
};

// What a provider knows about one of its sandboxes.
struct SandboxInfo {
  std::string id;
  std::string provider;  // the provider's name()
  std::map<std::string, std::string> labels;
  std::string created_at;   // RFC 3339, "" unknown
  std::string expires_at;   // RFC 3339, "" = no TTL
  std::string network;      // the effective network ("" where the provider does not enforce one)
  std::string state;        // the provider's word: local claimed/warm; k8s Ready/NotReady
  std::string limits;       // "memory 2 GiB, ..." ("" = the provider does not say)
  std::string limits_note;  // requested limits the host did not enforce ("" = none)
  std::string name;         // ClaimOptions::name ("" = none)
  std::vector<std::string> secrets;  // the secrets' names and hosts, "GH_TOKEN@api.github.com"
};

// One line of a sandbox's egress log (local/egress_log.h) as JSON text.
using EgressLogLine = std::string;

// A client of one sandbox's daemon for a one-shot command (`deepbox sandbox
// exec`, `sandbox cp`): the daemon's full API (streaming exec with stdin and
// a terminal, tar transfers) and how the provider explains a failure. Valid
// while the provider that made it lives.
struct DaemonAccess {
  std::unique_ptr<SandboxdClient> client;
  // After a call failed with `error`: the "is gone" error (NOT_FOUND) when
  // the sandbox was deleted or expired meanwhile, else nullopt (the call's
  // own error stands). May wait briefly for the provider to find out.
  std::function<std::optional<Error>(const Error& error)> why_gone;
  // A failed call's error as the user should read it (the k8s router's
  // answers named as the router's). Never empty.
  std::function<Error(const Error& error)> explain;
  std::shared_ptr<void> keep;  // what the client needs alive (a port-forward)
};

// A sandbox in use. Destroying the lease releases it: a claimed sandbox is
// deleted unless Keep() was called; a borrowed one (Attach) is left running.
class SandboxLease {
 public:
  virtual ~SandboxLease() = default;
  virtual Sandbox& sandbox() = 0;
  virtual Status Release() = 0;  // idempotent
  virtual void Keep() = 0;       // do not delete on destruction
  // Human-readable: how to reach and delete a kept sandbox.
  virtual std::string Describe() const = 0;
};

// A lease on a sandbox someone else owns: Release() only closes the
// connection (`on_close`, e.g. the end of a port-forward) and never deletes.
class BorrowedLease : public SandboxLease {
 public:
  BorrowedLease(std::unique_ptr<Sandbox> sandbox, std::string describe,
                std::function<void()> on_close = nullptr);
  ~BorrowedLease() override;
  Sandbox& sandbox() override { return *sandbox_; }
  Status Release() override;
  void Keep() override {}
  std::string Describe() const override { return describe_; }

 private:
  std::unique_ptr<Sandbox> sandbox_;
  std::string describe_;
  std::function<void()> on_close_;
};

// A watch on one sandbox (SandboxProvider::Watch). Destroying it stops it.
class SandboxWatch {
 public:
  virtual ~SandboxWatch() = default;
  // Ends the watch; on_gone is not called afterwards.
  virtual void Stop() = 0;
};

struct SuspendOptions {
  // Suspend even where the files do not survive it (k8s: a /workspace that
  // is an emptyDir, not a volume): they are lost.
  bool force = false;
};

struct SnapshotOptions {
  std::string name;  // "" = the provider picks one
};

// A snapshot: a sandbox's files (its workspace) at one moment, kept apart
// from it (it outlives the sandbox). Not its memory or processes.
struct SnapshotInfo {
  std::string name;
  std::string provider;
  std::string source_id;  // the sandbox it was taken of
  std::string created_at;
  int64_t size_bytes = -1;  // on disk; -1 unknown
  int64_t file_bytes = -1;  // the files' apparent size
  std::string note;         // e.g. how consistent it is ("" = taken while frozen)
};

// A snapshot's record as `deepbox sandbox snapshot --json` prints it and the
// snapshot store keeps it (snapshot_store.h: NAME/snapshot.json).
std::string SnapshotInfoJson(const SnapshotInfo& snapshot);

class SandboxProvider {
 public:
  virtual ~SandboxProvider() = default;

  virtual std::string name() const = 0;  // "local" | "k8s"
  // For a person: "local sandbox", "k8s sandbox from warm pool ns/pool".
  virtual std::string description() const { return name() + " sandbox"; }
  // Whether `id` has this provider's id form (not whether it exists).
  virtual bool OwnsId(std::string_view id) const = 0;
  // Whether ClaimOptions::network means anything here.
  virtual bool enforces_network() const { return false; }

  // A new sandbox for as long as the lease lives (deleted on release).
  virtual Result<std::unique_ptr<SandboxLease>> Claim(const ClaimOptions& options) = 0;
  // A new sandbox that outlives this process: it lives until Delete or its TTL.
  virtual Result<SandboxInfo> Create(const ClaimOptions& options);
  // A lease on an existing sandbox that leaves it as it is when released.
  // NOT_FOUND: no such sandbox; UNAVAILABLE: it exists but cannot be used now.
  virtual Result<std::unique_ptr<SandboxLease>> Attach(const std::string& id);
  // Its daemon, for one command. NOT_FOUND: no such sandbox; UNAVAILABLE: it
  // cannot be reached now; INVALID_ARGUMENT: a malformed id.
  virtual Result<DaemonAccess> ConnectDaemon(const std::string& id);

  virtual Result<SandboxInfo> Inspect(const std::string& id);
  // The sandboxes matching a label selector (Kubernetes syntax; "" = all).
  virtual Result<std::vector<SandboxInfo>> List(const std::string& selector);
  // Deletes one sandbox. NOT_FOUND if there is none.
  virtual Status Delete(const std::string& id);
  // Deletes every sandbox matching (an empty selector is refused); their ids.
  virtual Result<std::vector<std::string>> DeleteMatching(const std::string& selector);

  // After a call on sandbox `id` failed: why it is gone (NOT_FOUND: deleted
  // or expired), or nullopt if it still exists or that cannot be told.
  virtual std::optional<Error> WhyGone(const std::string& id);
  // on_gone (from another thread, at most once) as soon as sandbox `id` is
  // deleted or expires while in use.
  virtual Result<std::unique_ptr<SandboxWatch>> Watch(const std::string& id,
                                                      std::function<void(const Error&)> on_gone);

  // The durable-workspace verbs (issue 22). Each keeps the id, the files,
  // the labels and the TTL (which keeps counting); the next use of a paused
  // or suspended sandbox (Attach, an exec) resumes it.
  //   Pause    freezes every process: memory kept, no CPU; resumes in ms.
  //   Suspend  ends every process (memory and CPU freed); files stay.
  //   Resume   either back to running (a suspended one gets fresh processes).
  // Idempotent. CONFLICT for a transition that cannot be made (pausing a
  // suspended sandbox), UNAVAILABLE for a broken one.
  virtual Status Pause(const std::string& id);
  virtual Status Suspend(const std::string& id, const SuspendOptions& options);
  virtual Status Resume(const std::string& id);
  // Snapshot: the sandbox's files as they are (a running sandbox is paused
  // for the copy where the provider can, so no file is caught half-written
  // by a process; the daemon's own writes are atomic anyway; the note says
  // when it could not be). Kept in the snapshot store every provider shares
  // (snapshot_store.h). CONFLICT for a name taken; RESOURCE_EXHAUSTED past
  // the snapshot quota or a full disk (nothing is kept then, the sandbox is
  // untouched).
  virtual Result<SnapshotInfo> Snapshot(const std::string& id, const SnapshotOptions& options);
  // Every provider's snapshots (SnapshotInfo::provider says whose).
  virtual Result<std::vector<SnapshotInfo>> ListSnapshots();
  virtual Status DeleteSnapshot(const std::string& name);
  // A new sandbox (as Create) whose workspace holds the snapshot's files;
  // INVALID_ARGUMENT for a snapshot another provider took.
  virtual Result<SandboxInfo> CreateFromSnapshot(const std::string& snapshot,
                                                 const ClaimOptions& options);
  // `count` new sandboxes (as Create) holding sandbox `id`'s files as they
  // are now; all or none.
  virtual Result<std::vector<SandboxInfo>> Fork(const std::string& id, int count,
                                                const ClaimOptions& options);

  // Changes the network policy of a running sandbox ("none" | "allow=..."):
  // new connections follow it at once, open ones it refuses are closed.
  // Returns the policy in force. CONFLICT where the sandbox's
  // network cannot change live (the reason says what can).
  virtual Result<std::string> SetNetwork(const std::string& id, const std::string& policy);
  // The last `limit` lines (0 = all) of the sandbox's egress log: every
  // connection and request its proxy allowed or refused, and policy changes.
  virtual Result<std::vector<EgressLogLine>> NetworkLog(const std::string& id, size_t limit);

 protected:
  // "the NAME provider cannot VERB sandboxes[: why]" as UNIMPLEMENTED.
  Error Unimplemented(std::string_view verb, std::string_view why = "") const;
};

}  // namespace deepbox
