// Threads: every run is persisted as a JSONL transcript,
// <dir>/<thread id>.jsonl, one record per line, appended while the run
// progresses. Each record is written with a single write(2) on an O_APPEND
// descriptor, so a crash loses at most the line being written (the loader
// ignores a torn last line). The default directory is
// $XDG_STATE_HOME/deepbox/threads, else ~/.local/state/deepbox/threads.
//
// Records ("type"):
//   thread           {id, created_at, version, model?, sandbox?}  (first line)
//   sandbox          {id, root, ts}     a later run in another sandbox (where
//                                       the thread's files are from then on)
//   run_start        {ts, task | resume}
//   message          {message}          appended conversation message
//   message_replace  {message}          same id, new content (HITL edit)
//   usage            {usage, model, stop_reason}  one model call
//   summarization    {event}
//   interrupt        {request} / interrupt_cleared {}
//   decisions        {decisions}        audit of human decisions
//   todos            {todos}
//   project          {path, ts}         the client's project a session worked
//                                       on (deepbox acp's session/list)
//   run_end          {ts, stop_reason, error?, usage, cost_usd, final_text}
#pragma once

#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/state.h"
#include "common/json.h"

namespace deepbox::agent {

struct LoadedThread {
  std::string id;
  json::object header;  // the "thread" record
  AgentState state;
  size_t runs = 0;
  std::string last_task;
  std::string sandbox_id;  // the sandbox of the latest run ("" = unknown)
  std::string created_at;  // from the header
  std::string model;       // from the header
  std::string project;     // the latest "project" record's path ("" = none)
};

// Thread ids: letters, digits, '-', '_' and '.', not starting with '.', at
// most 200 characters (they name files).
bool ValidThreadId(std::string_view id);
inline constexpr const char* kThreadIdRules =
    "letters, digits, '-', '_' and '.' (not first), at most 200 characters";

// What a listing needs of a thread, read without decoding its whole
// conversation: the latest "project" record's path ("" = none) and the text
// of its first user message.
struct ThreadSummary {
  std::string project;
  std::string first_prompt;
};

struct ThreadInfo {
  std::string id;
  std::string path;
  int64_t size = 0;
  std::string modified_at;
};

class ThreadWriter {
 public:
  ~ThreadWriter();
  ThreadWriter(const ThreadWriter&) = delete;
  ThreadWriter& operator=(const ThreadWriter&) = delete;

  const std::string& path() const { return path_; }
  // Appends one record (adds "type"). Thread-safe.
  Status Append(std::string_view type, json::object record);

  Status Message(const agent::Message& m);
  Status MessageReplace(const agent::Message& m);

 private:
  friend class ThreadStore;
  ThreadWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
  std::mutex mu_;
};

class ThreadStore {
 public:
  explicit ThreadStore(std::string dir);
  static std::string NewThreadId();  // "th-YYYYMMDD-HHMMSS-<hex>"

  const std::string& dir() const { return dir_; }
  std::string PathFor(const std::string& id) const;
  bool Exists(const std::string& id) const;

  // Opens (creating the directory and file as needed) for appending.
  Result<std::unique_ptr<ThreadWriter>> OpenWriter(const std::string& id) const;
  // Replays a transcript into a state.
  Result<LoadedThread> Load(const std::string& id) const;
  Result<ThreadSummary> Summarize(const std::string& id) const;
  // Newest first.
  Result<std::vector<ThreadInfo>> List() const;
  // A copy of thread `id` under a new id (returned): its records up to the
  // last whole line, the "thread" header's id the new one (with
  // "forked_from"). Written to a temporary file and renamed into place.
  Result<std::string> Fork(const std::string& id) const;

 private:
  // Thread `id`'s file, opened for reading (`path` names it): INVALID_ARGUMENT
  // for a malformed id, NOT_FOUND when there is none.
  Result<std::ifstream> Open(const std::string& id, std::string& path) const;
  std::string dir_;
};

}  // namespace deepbox::agent
