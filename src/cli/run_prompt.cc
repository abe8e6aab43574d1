#include "cli/run_prompt.h"

#include <fcntl.h>
#include <histedit.h>
#include <langinfo.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include "common/unique_fd.h"
#include "common/user_state_dir.h"

namespace deepbox::run {

namespace {

// libedit draws and returns UTF-8 only under a UTF-8 LC_CTYPE; the process
// starts in the C locale. Only LC_CTYPE changes (numbers keep formatting the
// same), and only for the interactive prompt.
void UseUtf8Ctype() {
  if (std::setlocale(LC_CTYPE, "") != nullptr && std::strcmp(nl_langinfo(CODESET), "UTF-8") == 0) {
    return;
  }
  std::setlocale(LC_CTYPE, "C.UTF-8");
}

void Drain(int fd) {
  uint64_t n;
  while (::read(fd, &n, sizeof n) > 0) {
  }
}

size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 0;  // a continuation byte or invalid
}

}  // namespace

struct LinePrompt::Impl {
  Options options;
  EditLine* el = nullptr;
  History* history = nullptr;
  FILE* out = nullptr;  // el_init wants stdio streams
  std::string prompt;
  bool interrupted = false;
  // The terminal opened again, non-blocking: a private open file description
  // (stdin's flags are shared with the shell). Ctrl-C flushes the terminal's
  // input queue, so bytes poll() reported can be gone by the time read()
  // runs; a blocking read() would then wait past the interrupt.
  UniqueFd read_fd;
  int ReadFd() const { return read_fd ? read_fd.get() : options.in_fd; }

  ~Impl() {
    if (el != nullptr) el_end(el);
    if (history != nullptr) history_end(history);
    if (out != nullptr) std::fclose(out);
  }

  static Impl* From(EditLine* el) {
    void* data = nullptr;
    el_get(el, EL_CLIENTDATA, &data);
    return static_cast<Impl*>(data);
  }

  static char* Prompt(EditLine* el) { return From(el)->prompt.data(); }

  // One byte from the terminal: 0..255, kEof, or kStop (interrupted or an
  // error; errno says which).
  static constexpr int kEof = -1;
  static constexpr int kStop = -2;
  int ReadByte() {
    for (;;) {
      struct pollfd fds[2] = {{ReadFd(), POLLIN, 0}, {options.interrupt_fd, POLLIN, 0}};
      int nfds = options.interrupt_fd >= 0 ? 2 : 1;
      if (::poll(fds, static_cast<nfds_t>(nfds), -1) < 0) {
        if (errno == EINTR) continue;
        return kStop;
      }
      if (nfds == 2 && fds[1].revents != 0) {
        Drain(options.interrupt_fd);
        interrupted = true;
        errno = EINTR;
        return kStop;
      }
      if (fds[0].revents == 0) continue;
      unsigned char byte;
      ssize_t n = ::read(ReadFd(), &byte, 1);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0) return kStop;
      if (n == 0) return kEof;
      return byte;
    }
  }

  // Replaces libedit's read(): also wakes on interrupt_fd, which a blocked
  // SIGINT cannot do. Decodes UTF-8 itself (invalid input becomes U+FFFD).
  static int GetChar(EditLine* el, wchar_t* out) {
    Impl* self = From(el);
    unsigned char seq[4];
    size_t have = 0, need = 0;
    *out = L'\0';
    for (;;) {
      int byte = self->pending;
      self->pending = -1;
      if (byte < 0) byte = self->ReadByte();
      if (byte == kEof) return 0;
      if (byte == kStop) return -1;
      if (have == 0) {
        need = Utf8Length(static_cast<unsigned char>(byte));
        if (need == 0) {
          *out = 0xFFFD;
          return 1;
        }
      } else if ((byte & 0xC0) != 0x80) {
        self->pending = byte;  // starts the next character
        *out = 0xFFFD;
        return 1;
      }
      seq[have++] = static_cast<unsigned char>(byte);
      if (have < need) continue;
      uint32_t cp = need == 1   ? seq[0]
                    : need == 2 ? (seq[0] & 0x1Fu) << 6 | (seq[1] & 0x3Fu)
                    : need == 3 ? (seq[0] & 0x0Fu) << 12 | (seq[1] & 0x3Fu) << 6 | (seq[2] & 0x3Fu)
                                : (seq[0] & 0x07u) << 18 | (seq[1] & 0x3Fu) << 12 |
                                      (seq[2] & 0x3Fu) << 6 | (seq[3] & 0x3Fu);
      bool overlong =
          (need == 2 && cp < 0x80) || (need == 3 && cp < 0x800) || (need == 4 && cp < 0x10000);
      if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
      *out = static_cast<wchar_t>(cp);
      return 1;
    }
  }

  int pending = -1;  // a byte that ended a broken sequence: the next character's first
};

LinePrompt::LinePrompt(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LinePrompt::~LinePrompt() = default;

Result<std::unique_ptr<LinePrompt>> LinePrompt::Create(Options options) {
  UseUtf8Ctype();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->prompt = options.color ? "\1\x1b[1;36m\1›\1\x1b[0m\1 " : "› ";
  int out_fd = ::dup(options.out_fd);
  if (out_fd < 0) return MakeSyscallError("dup", errno);
  impl->out = ::fdopen(out_fd, "w");
  if (impl->out == nullptr) {
    int e = errno;
    ::close(out_fd);
    return MakeSyscallError("fdopen", e);
  }
  std::string reopen = "/proc/self/fd/" + std::to_string(options.in_fd);
  impl->read_fd.reset(::open(reopen.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  // (Not reopenable, e.g. no /proc: the shared fd, blocking as before.)
  FILE* in = options.in_fd == STDIN_FILENO ? stdin : nullptr;
  if (in == nullptr) {
    return MakeError(ErrorCode::kInvalidArgument, "the prompt reads standard input only");
  }
  impl->el = el_init("deepbox", in, impl->out, stderr);
  if (impl->el == nullptr) return MakeError(ErrorCode::kInternal, "el_init failed");
  EditLine* el = impl->el;
  el_set(el, EL_CLIENTDATA, impl.get());
  el_set(el, EL_SIGNAL, 0);  // SignalWatcher owns the signals
  el_set(el, EL_EDITOR, "emacs");
  el_set(el, EL_PROMPT_ESC, &Impl::Prompt, '\1');
  el_set(el, EL_GETCFN, &Impl::GetChar);
  impl->history = history_init();
  if (impl->history == nullptr) return MakeError(ErrorCode::kInternal, "history_init failed");
  HistEvent ev;
  ::history(impl->history, &ev, H_SETSIZE, static_cast<int>(options.history_size));
  ::history(impl->history, &ev, H_SETUNIQUE, 1);
  el_set(el, EL_HIST, ::history, impl->history);
  // Ctrl-R searches the history, as in bash.
  el_set(el, EL_BIND, "^R", "em-inc-search-prev", nullptr);
  el_source(el, nullptr);  // ~/.editrc, like other libedit programs
  if (!options.history_file.empty()) {
    ::history(impl->history, &ev, H_LOAD, options.history_file.c_str());  // absent: fine
  }
  return std::unique_ptr<LinePrompt>(new LinePrompt(std::move(impl)));
}

LinePrompt::Read LinePrompt::ReadLine() {
  Impl& I = *impl_;
  I.interrupted = false;
  el_resize(I.el);  // the window may have changed since the last line
  // The terminal goes to edit (raw) mode before the prompt shows: el_gets
  // draws the prompt first, and a key typed as soon as it appears (Ctrl-D,
  // an arrow) would otherwise meet the line discipline in canonical mode:
  // echoed as ^[[A, or taken as end-of-file and lost. el_gets restores the
  // mode when it returns; the second call covers the interrupted path.
  el_set(I.el, EL_PREP_TERM, 1);
  int count = 0;
  const char* line = el_gets(I.el, &count);
  el_set(I.el, EL_PREP_TERM, 0);
  Read r;
  if (I.interrupted) {
    // libedit left the cursor after the abandoned text.
    std::fputs("\n", I.out);
    std::fflush(I.out);
    el_reset(I.el);
    r.outcome = Outcome::kInterrupted;
    return r;
  }
  if (line == nullptr || count <= 0) {
    std::fputs("\n", I.out);
    std::fflush(I.out);
    r.outcome = Outcome::kEof;
    return r;
  }
  r.outcome = Outcome::kLine;
  r.line.assign(line, static_cast<size_t>(count));
  while (!r.line.empty() && (r.line.back() == '\n' || r.line.back() == '\r')) r.line.pop_back();
  return r;
}

Status LinePrompt::AddHistory(const std::string& line) {
  Impl& I = *impl_;
  HistEvent ev;
  ::history(I.history, &ev, H_ENTER, line.c_str());
  if (I.options.history_file.empty()) return {};
  std::error_code ec;
  std::filesystem::path file(I.options.history_file);
  if (file.has_parent_path()) {
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) {
      return MakeError(ErrorCode::kUnavailable,
                       "cannot create " + file.parent_path().string() + ": " + ec.message());
    }
  }
  // Written in place of the old file, owner-only, never through a symlink.
  std::string tmp = I.options.history_file + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return MakeSyscallError("open", errno, tmp);
  if (::fchmod(fd.get(), 0600) != 0) return MakeSyscallError("fchmod", errno, tmp);
  FILE* f = ::fdopen(fd.get(), "w");
  if (f == nullptr) return MakeSyscallError("fdopen", errno, tmp);
  (void)fd.release();
  int saved = ::history(I.history, &ev, H_SAVE_FP, f);
  bool ok = saved >= 0 && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  int e = errno;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    ::unlink(tmp.c_str());
    return MakeSyscallError("writing", e, tmp);
  }
  if (::rename(tmp.c_str(), I.options.history_file.c_str()) != 0) {
    e = errno;
    ::unlink(tmp.c_str());
    return MakeSyscallError("rename", e, I.options.history_file);
  }
  return {};
}

std::string DefaultHistoryFile() {
  // "" without a home: no history is kept.
  return UserStateDir(ProcessEnvironment(), "run_history", "HOME").value_or("");
}

}  // namespace deepbox::run
