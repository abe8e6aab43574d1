// The exec API of the real deepbox-sandboxd binary, driven through
// SandboxdClient and raw HTTP: exact output bytes (base64, negotiated through
// /info features, the text wire format unchanged for older clients), stdin
// streamed while the command runs, and pseudo-terminals.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "common/base64.h"
#include "common/json.h"
#include "common/unique_fd.h"
#include "common/utf8.h"
#include "net/http_client.h"
#include "sandbox/testing/scoped_sandboxd.h"

namespace deepbox {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ScopedSandboxd;

std::string AllByteValues() {
  std::string s;
  for (int i = 0; i < 256; ++i) s.push_back(static_cast<char>(i));
  return s;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(gen() & 0xff);
  return s;
}

// Output of a streamed command, collected per stream; a test thread may wait
// for some output to appear (the callback runs on ExecStream's thread).
class Collector {
 public:
  OutputCallback Callback() {
    return [this](OutputStream s, std::string_view d) {
      std::lock_guard<std::mutex> lock(mu_);
      (s == OutputStream::kStdout ? out_ : err_).append(d);
      cv_.notify_all();
      return true;
    };
  }
  // Waits (bounded: a safety net against hangs, not a timing check) until
  // stdout contains `text`.
  bool WaitFor(std::string_view text) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60),
                        [&] { return out_.find(text) != std::string::npos; });
  }
  std::string out() {
    std::lock_guard<std::mutex> lock(mu_);
    return out_;
  }
  std::string err() {
    std::lock_guard<std::mutex> lock(mu_);
    return err_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string out_, err_;
};

// Hands the ExecInput from on_started (ExecStream's thread) to a test thread.
class InputSlot {
 public:
  void Set(ExecInput& input) {
    std::lock_guard<std::mutex> lock(mu_);
    input_ = &input;
    cv_.notify_all();
  }
  ExecInput* Get() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(60), [&] { return input_ != nullptr; });
    return input_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  ExecInput* input_ = nullptr;
};

class ExecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = ScopedSandboxd::Start();
    ASSERT_TRUE(d) << d.error().ToString();
    daemon_ = std::move(*d);
  }
  Sandbox& sb() { return daemon_->client(); }
  net::Response Post(const std::string& target, const std::string& body) {
    auto http = net::HttpClient::Create(daemon_->unix_url());
    EXPECT_TRUE(http);
    net::ClientRequest req;
    req.method = "POST";
    req.target = target;
    req.body = body;
    auto r = (*http)->Send(req);
    EXPECT_TRUE(r) << r.error().ToString();
    return r ? *r : net::Response{};
  }
  std::unique_ptr<ScopedSandboxd> daemon_;
};

// ---------------------------------------------------------------- exact bytes

TEST_F(ExecTest, EveryByteValueAndMegabytesOfRandomBytesStreamExactly) {
  const std::string data = AllByteValues() + RandomBytes(3 << 20, 17) + AllByteValues();
  ASSERT_TRUE(sb().Upload("in.bin", data, 0644));
  Collector c;
  auto e = sb().ExecStream(ExecRequest{.shell = "cat in.bin; cat in.bin >&2"}, c.Callback());
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->kind, ExitKind::kExited);
  EXPECT_EQ(e->exit_code, 0);
  // Whole-string comparisons of MBs print MBs on failure: compare sizes, then bytes.
  ASSERT_EQ(c.out().size(), data.size());
  EXPECT_TRUE(c.out() == data);
  ASSERT_EQ(c.err().size(), data.size());
  EXPECT_TRUE(c.err() == data);
}

TEST_F(ExecTest, ExecToCompletionReturnsExactBytes) {
  const std::string data = AllByteValues() + RandomBytes(1 << 20, 5);
  ASSERT_TRUE(sb().Upload("in.bin", data, 0644));
  auto e =
      sb().Exec(ExecRequest{.shell = "cat in.bin; cat in.bin >&2", .max_output_bytes = 4u << 20});
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_TRUE(e->stdout_data == data);
  EXPECT_TRUE(e->stderr_data == data);
  EXPECT_EQ(e->combined.size(), 2 * data.size());
  EXPECT_FALSE(e->truncated());
}

TEST_F(ExecTest, StdinBytesReachTheCommandExactly) {
  const std::string data = AllByteValues() + RandomBytes(1 << 20, 9);
  Collector c;
  auto e = sb().ExecStream(ExecRequest{.argv = {"cat"}, .stdin_data = data}, c.Callback());
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_TRUE(c.out() == data);
}

TEST_F(ExecTest, InfoListsTheExecFeatures) {
  auto http = net::HttpClient::Create(daemon_->unix_url());
  ASSERT_TRUE(http);
  net::ClientRequest req;
  req.target = "/deepbox/v1/info";
  auto r = (*http)->Send(req);
  ASSERT_TRUE(r);
  auto info = ParseJsonObject(r->body);
  ASSERT_TRUE(info);
  auto features = info->find("features");
  ASSERT_NE(features, info->end());
  std::string text = ToJson(features->value());
  for (const char* f : {"exec_output_base64", "exec_stdin_stream", "exec_tty"}) {
    EXPECT_THAT(text, HasSubstr(f));
  }
}

// A client that does not ask for base64 (an older one) gets the wire format it
// always got: valid UTF-8 text with U+FFFD for what is not.
TEST_F(ExecTest, TextWireFormatIsUnchangedWithoutOutputEncoding) {
  auto r = Post("/deepbox/v1/exec", R"({"shell":"printf 'ok\\377end'"})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto o = ParseJsonObject(r.body);
  ASSERT_TRUE(o);
  EXPECT_EQ(GetOptString(*o, "stdout").value_or(""),
            "ok\xEF\xBF\xBD"
            "end");
  EXPECT_FALSE(o->contains("stdout_base64"));

  r = Post("/deepbox/v1/exec/stream", R"({"shell":"printf 'ok\\377end'"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr("{\"type\":\"stdout\",\"data\":\"ok\xEF\xBF\xBD"
                                "end\"}"));
  EXPECT_THAT(r.body, Not(HasSubstr("data_base64")));
  EXPECT_TRUE(IsValidUtf8(r.body));

  r = Post("/deepbox/v1/exec/stream",
           R"({"shell":"printf 'ok\\377end'","output_encoding":"base64"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr(R"({"type":"stdout","data_base64":")" +
                                Base64Encode("ok\xFF"
                                             "end") +
                                "\"}"));

  r = Post("/deepbox/v1/exec", R"({"shell":"true","output_encoding":"latin1"})");
  EXPECT_EQ(r.status, 400) << r.body;
}

// Every streamed exec is named (so a cut stream can be re-attached to), and a
// named exec outlives its connection: the caller's cancel must still stop it.
TEST_F(ExecTest, CallerCancelStopsTheCommand) {
  ExecRequest req{.shell = "echo $$ > cancel.pid; echo go; exec sleep 600"};
  auto e = sb().ExecStream(req, [](OutputStream, std::string_view d) { return d.empty(); });
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, ErrorCode::kCancelled);
  auto pid_text = sb().Download("cancel.pid");
  ASSERT_TRUE(pid_text) << pid_text.error().ToString();
  const std::string stat = "/proc/" + pid_text->substr(0, pid_text->find('\n')) + "/stat";
  // read(2), not an ifstream: a read of a stat file whose process exits
  // between open and read fails with ESRCH, which libstdc++ throws.
  auto gone = [&] {
    UniqueFd fd(::open(stat.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return true;
    char buf[512];
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0) return true;
    return std::string_view(buf, static_cast<size_t>(n)).find(") Z") != std::string_view::npos;
  };
  // A safety bound against a hang, not a timing check.
  for (int i = 0; i < 3000 && !gone(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(gone());
}

TEST_F(ExecTest, CancelOfAnUnknownExecIsNotFound) {
  auto r = Post("/deepbox/v1/exec/cancel", R"({"exec_id":"x0123456789abcdef"})");
  EXPECT_EQ(r.status, 404) << r.body;
  r = Post("/deepbox/v1/exec/cancel", R"({})");
  EXPECT_EQ(r.status, 400) << r.body;
}

// ---------------------------------------------------------------- streamed stdin

// The second line is sent only after the command answered the first: the
// command reads its stdin while it runs.
TEST_F(ExecTest, StreamedStdinArrivesWhileTheCommandRuns) {
  Collector c;
  InputSlot slot;
  std::thread feeder([&] {
    ExecInput* in = slot.Get();
    ASSERT_NE(in, nullptr);
    ASSERT_TRUE(in->Write("one\n"));
    ASSERT_TRUE(c.WaitFor("got:one\n"));
    ASSERT_TRUE(in->Write("two\n"));
    ASSERT_TRUE(c.WaitFor("got:two\n"));
    ASSERT_TRUE(in->Close());
  });
  ExecRequest req{.shell = "while read l; do echo got:$l; done; echo eof"};
  req.stdin_stream = true;
  req.on_started = [&](ExecInput& in) { slot.Set(in); };
  auto e = sb().ExecStream(req, c.Callback());
  feeder.join();
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_EQ(c.out(), "got:one\ngot:two\neof\n");
}

TEST_F(ExecTest, StreamedStdinCarriesBinaryDataInChunks) {
  const std::string data = AllByteValues() + RandomBytes(2 << 20, 3);
  Collector c;
  InputSlot slot;
  std::thread feeder([&] {
    ExecInput* in = slot.Get();
    ASSERT_NE(in, nullptr);
    for (size_t at = 0; at < data.size(); at += 100000) {
      ASSERT_TRUE(in->Write(std::string_view(data).substr(at, 100000)));
    }
    ASSERT_TRUE(in->Close());
  });
  ExecRequest req{.shell = "cat > got.bin; wc -c < got.bin"};
  req.stdin_stream = true;
  req.on_started = [&](ExecInput& in) { slot.Set(in); };
  auto e = sb().ExecStream(req, c.Callback());
  feeder.join();
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(c.out(), std::to_string(data.size()) + "\n");
  auto got = sb().Download("got.bin");
  ASSERT_TRUE(got);
  EXPECT_TRUE(*got == data);
}

// A write the command never reads must not hang: it fails once the command
// has ended (here it reads one byte and exits).
TEST_F(ExecTest, WriteToACommandThatStopsReadingFails) {
  InputSlot slot;
  Status write_status;
  std::thread feeder([&] {
    ExecInput* in = slot.Get();
    ASSERT_NE(in, nullptr);
    write_status = in->Write(std::string(4 << 20, 'x'));
  });
  ExecRequest req{.argv = {"head", "-c", "1"}};
  req.stdin_stream = true;
  req.on_started = [&](ExecInput& in) { slot.Set(in); };
  // The write may still be waiting for its answer when the stream ends: the
  // feeder is joined while the input is valid.
  req.on_input_closing = [&] { feeder.join(); };
  Collector c;
  auto e = sb().ExecStream(req, c.Callback());
  EXPECT_FALSE(feeder.joinable());
  if (feeder.joinable()) feeder.join();
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(c.out(), "x");
  ASSERT_FALSE(write_status);
  EXPECT_THAT(write_status.error().code,
              ::testing::AnyOf(ErrorCode::kConflict, ErrorCode::kNotFound));
}

// The ExecInput stays valid until on_input_closing returns: a writer that
// keeps writing while the command exits at once is stopped there, once, on
// every end of the stream (a write after the input was destroyed is what
// ASan reported from an MCP server's channel in CI).
TEST_F(ExecTest, OnInputClosingComesBeforeTheInputGoesAndStopsItsWriters) {
  InputSlot slot;
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0};
  std::thread writer([&] {
    ExecInput* in = slot.Get();
    ASSERT_NE(in, nullptr);
    do {
      (void)in->Write("x\n");  // fails once the command has ended
      writes.fetch_add(1);
    } while (!stop.load());
  });
  int closing_calls = 0;
  ExecRequest req{.argv = {"true"}};
  req.stdin_stream = true;
  req.on_started = [&](ExecInput& in) { slot.Set(in); };
  req.on_input_closing = [&] {
    ++closing_calls;
    stop.store(true);
    writer.join();
  };
  Collector c;
  auto e = sb().ExecStream(req, c.Callback());
  if (writer.joinable()) {  // only if the hook never came: fail below, not in std::terminate
    stop.store(true);
    writer.join();
  }
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_EQ(closing_calls, 1);
  EXPECT_GE(writes.load(), 1);
}

TEST_F(ExecTest, SessionRequestsForUnknownSessionsAreRefused) {
  auto r = Post("/deepbox/v1/exec/sessions/x-0123/stdin", "data");
  EXPECT_EQ(r.status, 404) << r.body;
  r = Post("/deepbox/v1/exec/sessions/x-0123/resize", R"({"rows":10,"cols":10})");
  EXPECT_EQ(r.status, 404) << r.body;
  r = Post("/deepbox/v1/exec/sessions/x-0123/nope", "");
  EXPECT_EQ(r.status, 404) << r.body;
}

TEST_F(ExecTest, ResizeNeedsATerminal) {
  InputSlot slot;
  Status resize;
  std::thread feeder([&] {
    ExecInput* in = slot.Get();
    ASSERT_NE(in, nullptr);
    resize = in->Resize(TerminalSize{10, 10});
    ASSERT_TRUE(in->Close());
  });
  ExecRequest req{.argv = {"cat"}};
  req.stdin_stream = true;
  req.on_started = [&](ExecInput& in) { slot.Set(in); };
  Collector c;
  auto e = sb().ExecStream(req, c.Callback());
  feeder.join();
  ASSERT_TRUE(e) << e.error().ToString();
  ASSERT_FALSE(resize);
  EXPECT_EQ(resize.error().code, ErrorCode::kInvalidArgument);
}

// ---------------------------------------------------------------- terminals

TEST_F(ExecTest, TerminalSessionSizeResizeAndInterrupt) {
  Collector c;
  InputSlot slot;
  std::thread feeder([&] {
    ExecInput* in = slot.Get();
    ASSERT_NE(in, nullptr);
    ASSERT_TRUE(c.WaitFor("ready"));
    ASSERT_TRUE(in->Resize(TerminalSize{40, 100}));
    ASSERT_TRUE(c.WaitFor("40 100"));
    ASSERT_TRUE(in->Write("\x03"));  // ^C: SIGINT through the terminal
  });
  ExecRequest req{.shell =
                      "stty size; trap 'stty size' WINCH; trap 'echo got-int; exit 9' INT; "
                      "echo ready; while :; do sleep 1; done"};
  req.stdin_stream = true;
  req.tty = TerminalSize{33, 91};
  req.on_started = [&](ExecInput& in) { slot.Set(in); };
  auto e = sb().ExecStream(req, c.Callback());
  feeder.join();
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->exit_code, 9) << c.out();
  EXPECT_THAT(c.out(), HasSubstr("33 91\r\n"));
  EXPECT_THAT(c.out(), HasSubstr("40 100\r\n"));
  EXPECT_THAT(c.out(), HasSubstr("got-int"));
  EXPECT_EQ(c.err(), "");  // a terminal has one output stream
}

TEST_F(ExecTest, TerminalWithoutInputStillRuns) {
  Collector c;
  ExecRequest req{.shell = "test -t 0 && test -t 1 && test -t 2 && echo all-tty"};
  req.stdin_stream = true;
  req.tty = TerminalSize{};
  auto e = sb().ExecStream(req, c.Callback());
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_EQ(c.out(), "all-tty\r\n");
}

TEST_F(ExecTest, ExecToCompletionRefusesInteractiveRequests) {
  ExecRequest req{.argv = {"true"}};
  req.tty = TerminalSize{};
  auto e = sb().Exec(req);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(ExecTest, BadTerminalSizesAreRefused) {
  auto r = Post("/deepbox/v1/exec/stream", R"({"argv":["true"],"tty":{"rows":0,"cols":80}})");
  EXPECT_EQ(r.status, 400) << r.body;
  r = Post("/deepbox/v1/exec/stream", R"({"argv":["true"],"tty":"big"})");
  EXPECT_EQ(r.status, 400) << r.body;
}

}  // namespace
}  // namespace deepbox
