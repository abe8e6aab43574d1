#include "agent/thread_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>

#include "agent/codec.h"
#include "agent/text.h"
#include "common/io.h"
#include "common/make_dirs.h"
#include "common/strings.h"
#include "common/unique_fd.h"

namespace deepbox::agent {
namespace {

bool ValidId(std::string_view id) {
  if (id.empty() || id.size() > 200 || id[0] == '.') return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool ValidThreadId(std::string_view id) { return ValidId(id); }

ThreadWriter::~ThreadWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status ThreadWriter::Append(std::string_view type, json::object record) {
  json::object line;
  line["type"] = type;
  for (auto& kv : record) line[kv.key()] = std::move(kv.value());
  std::string text = ToJson(line);
  text.push_back('\n');
  std::lock_guard<std::mutex> lock(mu_);
  return WriteAll(fd_, text, path_);
}

Status ThreadWriter::Message(const agent::Message& m) {
  json::object r;
  r["message"] = MessageToJson(m);
  return Append("message", std::move(r));
}

Status ThreadWriter::MessageReplace(const agent::Message& m) {
  json::object r;
  r["message"] = MessageToJson(m);
  return Append("message_replace", std::move(r));
}

ThreadStore::ThreadStore(std::string dir) : dir_(std::move(dir)) {}

std::string ThreadStore::NewThreadId() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return std::string("th-") + buf + "-" + RandomHex(8);
}

std::string ThreadStore::PathFor(const std::string& id) const { return dir_ + "/" + id + ".jsonl"; }

bool ThreadStore::Exists(const std::string& id) const {
  if (!ValidId(id)) return false;
  struct stat st {};
  return ::stat(PathFor(id).c_str(), &st) == 0;
}

Result<std::unique_ptr<ThreadWriter>> ThreadStore::OpenWriter(const std::string& id) const {
  if (!ValidId(id)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "invalid thread id '" + id + "' (use " + kThreadIdRules + ")");
  }
  if (auto st = MakeDirs(dir_, 0700); !st) return tl::unexpected(st.error());
  std::string path = PathFor(id);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return MakeSyscallError("open", errno, path);
  auto w = std::unique_ptr<ThreadWriter>(new ThreadWriter(path, fd));
  return w;
}

Result<std::ifstream> ThreadStore::Open(const std::string& id, std::string& path) const {
  if (!ValidId(id)) {
    return MakeError(ErrorCode::kInvalidArgument,
                     "invalid thread id '" + id + "' (use " + kThreadIdRules + ")");
  }
  path = PathFor(id);
  std::ifstream in(path);
  if (!in) return MakeError(ErrorCode::kNotFound, "no such thread: " + id + " (" + path + ")");
  return in;
}

Result<std::string> ThreadStore::Fork(const std::string& id) const {
  std::string path;
  auto opened = Open(id, path);
  if (!opened) return tl::unexpected(opened.error());
  const std::string fork_id = NewThreadId();
  std::string out;
  std::string line;
  bool whole = true;
  while (std::getline(*opened, line)) {
    whole = !opened->eof();  // the last line without its newline: being written
    if (!whole) break;
    auto parsed = ParseJsonObject(line);
    if (parsed && GetOptString(*parsed, "type").value_or("") == "thread") {
      (*parsed)["id"] = fork_id;
      (*parsed)["forked_from"] = id;
      out += ToJson(*parsed);
    } else {
      out += line;
    }
    out.push_back('\n');
  }
  if (opened->bad()) return MakeSyscallError("read", EIO, path);
  const std::string target = PathFor(fork_id);
  const std::string tmp = target + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return MakeSyscallError("open", errno, tmp);
  if (auto st = WriteAll(fd.get(), out, tmp); !st) {
    ::unlink(tmp.c_str());
    return tl::unexpected(st.error());
  }
  if (::fsync(fd.get()) != 0 || ::rename(tmp.c_str(), target.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return MakeSyscallError("rename", err, target);
  }
  return fork_id;
}

Result<LoadedThread> ThreadStore::Load(const std::string& id) const {
  std::string path;
  auto opened = Open(id, path);
  if (!opened) return tl::unexpected(opened.error());
  std::ifstream& in = *opened;
  LoadedThread t;
  t.id = id;
  AgentState& s = t.state;
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (Trim(line).empty()) continue;
    auto parsed = ParseJsonObject(line);
    if (!parsed) continue;  // a torn last line after a crash
    json::object& r = *parsed;
    std::string type = GetOptString(r, "type").value_or("");
    auto obj = [&](const char* key) -> const json::object* {
      const json::value* v = r.if_contains(key);
      return v && v->is_object() ? &v->get_object() : nullptr;
    };
    if (type == "thread") {
      t.header = r;
      t.sandbox_id = GetOptString(r, "sandbox").value_or("");
      t.created_at = GetOptString(r, "created_at").value_or("");
      t.model = GetOptString(r, "model").value_or("");
    } else if (type == "sandbox") {
      t.sandbox_id = GetOptString(r, "id").value_or(t.sandbox_id);
    } else if (type == "run_start") {
      ++t.runs;
      if (auto task = GetOptString(r, "task")) t.last_task = *task;
    } else if (type == "message") {
      if (const json::object* m = obj("message")) {
        if (auto msg = MessageFromJson(*m)) s.messages.push_back(std::move(*msg));
      }
    } else if (type == "message_replace") {
      if (const json::object* m = obj("message")) {
        if (auto msg = MessageFromJson(*m)) {
          for (auto& existing : s.messages) {
            if (existing.id == msg->id) existing = *msg;
          }
        }
      }
    } else if (type == "usage") {
      if (const json::object* u = obj("usage")) s.usage += UsageFromJson(*u);
    } else if (type == "summarization") {
      if (const json::object* e = obj("event")) {
        if (auto ev = SummarizationFromJson(*e)) s.summarization = std::move(*ev);
      }
    } else if (type == "interrupt") {
      if (const json::object* q = obj("request")) {
        if (auto req = InterruptFromJson(*q)) s.pending_interrupt = std::move(*req);
      }
    } else if (type == "interrupt_cleared") {
      s.pending_interrupt.reset();
    } else if (type == "todos") {
      if (const json::value* v = r.if_contains("todos"); v && v->is_array())
        s.todos = v->get_array();
    } else if (type == "project") {
      t.project = GetOptString(r, "path").value_or(t.project);
    }
  }
  if (t.header.empty() && s.messages.empty()) {
    return MakeError(ErrorCode::kInvalidArgument, "not a thread transcript: " + path);
  }
  return t;
}

Result<ThreadSummary> ThreadStore::Summarize(const std::string& id) const {
  std::string path;
  auto opened = Open(id, path);
  if (!opened) return tl::unexpected(opened.error());
  std::ifstream& in = *opened;
  // ThreadWriter::Append writes "type" first: only the lines that matter are parsed.
  constexpr std::string_view kProject = R"({"type":"project",)";
  constexpr std::string_view kMessage = R"({"type":"message",)";
  ThreadSummary out;
  bool prompt_found = false;
  std::string line;
  while (std::getline(in, line)) {
    const bool project = line.starts_with(kProject);
    if (!project && (prompt_found || !line.starts_with(kMessage))) continue;
    auto parsed = ParseJsonObject(line);
    if (!parsed) continue;  // a torn last line after a crash
    if (project) {
      out.project = GetOptString(*parsed, "path").value_or(out.project);
      continue;
    }
    const json::value* m = parsed->if_contains("message");
    if (!m || !m->is_object()) continue;
    if (auto msg = MessageFromJson(m->get_object()); msg && msg->role == Role::kUser) {
      out.first_prompt = msg->text;
      prompt_found = true;
    }
  }
  return out;
}

Result<std::vector<ThreadInfo>> ThreadStore::List() const {
  std::vector<ThreadInfo> out;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) {
    if (errno == ENOENT) return out;
    return MakeSyscallError("opendir", errno, dir_);
  }
  std::vector<std::pair<int64_t, ThreadInfo>> items;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (!name.ends_with(".jsonl")) continue;
    ThreadInfo info;
    info.id = name.substr(0, name.size() - 6);
    info.path = dir_ + "/" + name;
    struct stat st {};
    if (::stat(info.path.c_str(), &st) != 0) continue;
    info.size = st.st_size;
    std::tm tm{};
    gmtime_r(&st.st_mtime, &tm);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    info.modified_at = buf;
    items.emplace_back(static_cast<int64_t>(st.st_mtime), std::move(info));
  }
  ::closedir(d);
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& [t, info] : items) out.push_back(std::move(info));
  return out;
}

}  // namespace deepbox::agent
