// SandboxdClient against a hostile daemon: every malformed answer is an Error
// naming what was wrong, never a crash (issue 16: "mode":"zz" used to abort the
// CLI through an uncaught std::stoul).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "common/testing/temp_dir.h"
#include "net/http_server.h"
#include "sandbox/testing/hostile_daemon.h"

namespace deepbox {
namespace {

using testing::HostileDaemon;

class SandboxdClientHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = HostileDaemon::Start();
    ASSERT_TRUE(d) << d.error().ToString();
    daemon_ = std::move(*d);
    auto c = daemon_->Connect();
    ASSERT_TRUE(c) << c.error().ToString();
    client_ = std::move(*c);
  }

  // Answers stat with `body`; returns the client's result.
  Result<FileInfo> StatWith(const std::string& body) {
    daemon_->Answer("/deepbox/v1/fs/stat", body);
    return client_->Stat("/workspace/x");
  }

  std::unique_ptr<HostileDaemon> daemon_;
  std::unique_ptr<SandboxdClient> client_;
};

TEST_F(SandboxdClientHostileTest, WellFormedStatIsParsed) {
  auto info = StatWith(R"({"path":"/workspace/x","name":"x","type":"file","size":12,"mode":"0644",)"
                       R"("modified_at":"2024-01-01T00:00:00Z"})");
  ASSERT_TRUE(info) << info.error().ToString();
  EXPECT_EQ(info->path, "/workspace/x");
  EXPECT_EQ(info->type, FileType::kFile);
  EXPECT_EQ(info->size, 12);
  EXPECT_EQ(info->mode, 0644u);
}

TEST_F(SandboxdClientHostileTest, BadModeIsAnErrorNotAnAbort) {
  for (std::string mode : {R"("zz")", R"("-1")", R"("77777")", R"("99999999999999999999")",
                           R"("0o644")", R"(" 644")", "644", "true", "[]"}) {
    auto info = StatWith(R"({"path":"/workspace/x","type":"file","mode":)" + mode + "}");
    ASSERT_FALSE(info) << mode;
    EXPECT_EQ(info.error().code, ErrorCode::kInternal) << mode;
    EXPECT_NE(info.error().message.find("'mode'"), std::string::npos) << info.error().message;
  }
}

TEST_F(SandboxdClientHostileTest, BadSizeIsAnError) {
  for (std::string size :
       {"-1", "1e400", "-1e400", "18446744073709551615", "1.5", R"("12")", "null2"}) {
    auto info = StatWith(R"({"path":"/workspace/x","type":"file","size":)" + size + "}");
    ASSERT_FALSE(info) << size;
  }
  // The largest valid size is accepted.
  auto info = StatWith(R"({"path":"/workspace/x","type":"file","size":9223372036854775807})");
  ASSERT_TRUE(info) << info.error().ToString();
  EXPECT_EQ(info->size, INT64_MAX);
}

TEST_F(SandboxdClientHostileTest, WrongKindsTruncatedAndNonObjectAnswersAreErrors) {
  for (std::string body : {R"({"path":5,"type":"file"})", R"({"path":"/x","type":["file"]})",
                           R"({"path":"/x","link_target":{}})", R"({"path":"/workspace/x",)",
                           R"([1,2])", "", "\"just a string\"", "{\"path\":\"\xff\xfe\"}"}) {
    auto info = StatWith(body);
    EXPECT_FALSE(info) << body;
  }
}

TEST_F(SandboxdClientHostileTest, ListRejectsAnyBadEntry) {
  daemon_->Answer("/deepbox/v1/fs/list",
                  R"({"entries":[{"path":"/workspace/a","type":"file","mode":"0644"},)"
                  R"({"path":"/workspace/b","type":"file","mode":"zz"}]})");
  auto list = client_->List("/workspace");
  ASSERT_FALSE(list);
  EXPECT_NE(list.error().message.find("'mode'"), std::string::npos) << list.error().message;
  daemon_->Answer("/deepbox/v1/fs/list", R"({"entries":[{"path":"/workspace/a"}, 7]})");
  EXPECT_FALSE(client_->List("/workspace"));
  daemon_->Answer("/deepbox/v1/fs/list", R"({"entries":[{"path":"/workspace/a","size":-5}]})");
  EXPECT_FALSE(client_->List("/workspace"));
  daemon_->Answer("/deepbox/v1/fs/list", R"({"entries":[{"path":"/workspace/a","size":5}]})");
  auto ok = client_->List("/workspace");
  ASSERT_TRUE(ok) << ok.error().ToString();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].size, 5);
}

TEST_F(SandboxdClientHostileTest, TreeIsParsedAndRefusesAnyBadEntry) {
  daemon_->Answer("/deepbox/v1/fs/tree",
                  R"({"entries":[["a.txt",5,1700000000123456789,420,"f"],["l",5,7,511,"l"]],)"
                  R"("truncated":true})");
  auto ok = client_->Tree(TreeRequest{.path = "/workspace"});
  ASSERT_TRUE(ok) << ok.error().ToString();
  ASSERT_EQ(ok->entries.size(), 2u);
  EXPECT_EQ(ok->entries[0], (TreeEntry{"a.txt", false, 5, 1700000000123456789, 0644}));
  EXPECT_TRUE(ok->entries[1].symlink);
  EXPECT_TRUE(ok->truncated);
  EXPECT_FALSE(ok->unreadable);
  for (std::string entry :
       {R"(["a",-1,0,420,"f"])", R"(["a",1,0,4096,"f"])", R"(["a",1,0,420,"d"])",
        R"(["/etc/passwd",1,0,420,"f"])", R"(["",1,0,420,"f"])", R"(["a",1,0,420])",
        R"(["a","1",0,420,"f"])", R"(["a",1,1e400,420,"f"])", R"({"path":"a"})", "7"}) {
    daemon_->Answer("/deepbox/v1/fs/tree", R"({"entries":[)" + entry + "]}");
    auto r = client_->Tree(TreeRequest{});
    ASSERT_FALSE(r) << entry;
    EXPECT_NE(r.error().message.find("'entries'"), std::string::npos) << r.error().message;
  }
  daemon_->Answer("/deepbox/v1/fs/tree", R"({"truncated":false})");
  EXPECT_FALSE(client_->Tree(TreeRequest{}));
}

TEST_F(SandboxdClientHostileTest, ExecRejectsBadStatusAndNumbers) {
  ExecRequest req;
  req.shell = "true";
  for (std::string body :
       {R"({"status":"bogus","exit_code":0})", R"({"exit_code":0})",
        R"({"status":"exited","exit_code":1e400})", R"({"status":"exited","exit_code":4294967296})",
        R"({"status":"exited","exit_code":-1})", R"({"status":"signaled","signal":"9"})",
        R"({"status":"exited","duration_ms":-3})", R"({"status":"exited","stdout":42})",
        R"({"status":"exited","stdout_truncated":"yes"})"}) {
    daemon_->Answer("/deepbox/v1/exec", body);
    auto r = client_->Exec(req);
    EXPECT_FALSE(r) << body;
  }
  daemon_->Answer("/deepbox/v1/exec",
                  R"({"status":"exited","exit_code":3,"stdout":"hi","duration_ms":5})");
  auto r = client_->Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->stdout_data, "hi");
}

TEST_F(SandboxdClientHostileTest, ExecStreamRejectsABadExitEvent) {
  ExecRequest req;
  req.shell = "true";
  daemon_->AnswerStream("/deepbox/v1/exec/stream",
                        {"{\"type\":\"stdout\",\"data\":\"a\"}\n",
                         "{\"type\":\"exit\",\"status\":\"exited\",\"exit_code\":1e400}\n"});
  std::string seen;
  auto r = client_->ExecStream(req, [&](OutputStream, std::string_view d) {
    seen.append(d);
    return true;
  });
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("'exit_code'"), std::string::npos) << r.error().message;
  EXPECT_EQ(seen, "a");
}

TEST_F(SandboxdClientHostileTest, ExecStreamRefusesAnEndlessEventLine) {
  // 17 MiB without a newline: the client stops reading instead of buffering
  // whatever the daemon sends.
  ExecRequest req;
  req.shell = "true";
  std::string chunk(1 << 20, 'x');
  std::vector<std::string> chunks = {"{\"type\":\"stdout\",\"data\":\""};
  for (int i = 0; i < 17; ++i) chunks.push_back(chunk);
  daemon_->AnswerStream("/deepbox/v1/exec/stream", chunks);
  auto r = client_->ExecStream(req, [](OutputStream, std::string_view) { return true; });
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("exec event over"), std::string::npos) << r.error().message;
}

TEST_F(SandboxdClientHostileTest, ReadEditGlobGrepRejectBadFields) {
  for (std::string body :
       {R"({"content_base64":"","size":-1})", R"({"content_base64":"","total_lines":-2})",
        R"({"content_base64":"","lines_returned":1e400})", R"({"content_base64":"","binary":1})",
        R"({"content_base64":"@@"})"}) {
    daemon_->Answer("/deepbox/v1/fs/read", body);
    EXPECT_FALSE(client_->Read("/workspace/x", {})) << body;
  }
  daemon_->Answer("/deepbox/v1/fs/edit", R"({"occurrences":4294967296})");
  EXPECT_FALSE(client_->Edit("/workspace/x", "a", "b", false));
  daemon_->Answer("/deepbox/v1/fs/glob", R"({"paths":["/a",5]})");
  EXPECT_FALSE(client_->Glob("*", "/workspace", 0));
  GrepRequest g;
  g.pattern = "x";
  for (std::string body : {R"({"matches":[{"path":"/a","line":-1,"text":"x"}]})",
                           R"({"matches":["nope"]})", R"({"counts":[{"path":"/a","count":1e400}]})",
                           R"({"files":[null]})", R"({"truncated":"no"})"}) {
    daemon_->Answer("/deepbox/v1/fs/grep", body);
    EXPECT_FALSE(client_->Grep(g)) << body;
  }
  daemon_->Answer("/deepbox/v1/fs/grep", R"({"matches":[{"path":"/a","line":2,"text":"x"}]})");
  auto ok = client_->Grep(g);
  ASSERT_TRUE(ok) << ok.error().ToString();
  ASSERT_EQ(ok->matches.size(), 1u);
  EXPECT_EQ(ok->matches[0].line, 2);
}

TEST_F(SandboxdClientHostileTest, ErrorAnswersAreBounded) {
  std::string huge(1 << 20, 'm');
  daemon_->Answer("/deepbox/v1/fs/stat",
                  R"({"error":{"code":"NOT_FOUND","message":")" + huge + "\"}}", 404);
  auto info = client_->Stat("/workspace/x");
  ASSERT_FALSE(info);
  EXPECT_EQ(info.error().code, ErrorCode::kNotFound);
  EXPECT_LT(info.error().message.size(), 5000u);
  // An unknown code and a non-string message do not crash either.
  daemon_->Answer("/deepbox/v1/fs/stat", R"({"error":{"code":7,"message":[1]}})", 500);
  info = client_->Stat("/workspace/x");
  ASSERT_FALSE(info);
  EXPECT_EQ(info.error().code, ErrorCode::kInternal);
}

TEST(SandboxdClientHostileConnectTest, BadInfoIsAnError) {
  auto d = HostileDaemon::Start();
  ASSERT_TRUE(d) << d.error().ToString();
  (*d)->Answer("/deepbox/v1/info", R"({"root":["/"],"hostname":"h"})");
  EXPECT_FALSE((*d)->Connect());
  (*d)->Answer("/deepbox/v1/info", R"({"root":"/workspace",)");
  EXPECT_FALSE((*d)->Connect());
}

// read_info_on_connect = false (a k8s claim's first command): no request
// until the first call, and what the call needs of /info it does without it.
// The canned daemon is an older one: /info lists no features, exec answers text.
TEST(SandboxdClientLazyInfoTest, TheFirstCallIsTheFirstRequest) {
  auto d = HostileDaemon::Start();
  ASSERT_TRUE(d) << d.error().ToString();
  (*d)->Answer("/deepbox/v1/exec",
               R"({"status":"exited","exit_code":0,"stdout":"hi\n","stderr":"","output":"hi\n"})");
  SandboxdClientOptions o;
  o.id = "ns/claim";
  o.read_info_on_connect = false;
  auto c = (*d)->Connect(o);
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_TRUE((*d)->requests().empty());
  EXPECT_EQ((*c)->id(), "ns/claim");
  ExecRequest req;
  req.argv = {"echo", "hi"};
  auto r = (*c)->Exec(req);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->stdout_data, "hi\n");
  auto seen = (*d)->requests();
  ASSERT_EQ(seen.size(), 1u);
  // The exact bytes are asked for unchecked (an older daemon ignores it).
  EXPECT_TRUE(seen[0].starts_with("POST /deepbox/v1/exec {")) << seen[0];
  EXPECT_NE(seen[0].find(R"("output_encoding":"base64")"), std::string::npos) << seen[0];
  // /info once, when first needed.
  EXPECT_EQ((*c)->root(), "/workspace");
  EXPECT_EQ((*c)->root(), "/workspace");
  seen = (*d)->requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen[1].starts_with("GET /deepbox/v1/info")) << seen[1];
}

// Streams: interactive ones learn the daemon's features before anything is
// run; a cut stream is re-sent or re-attached only once /info says the daemon
// keeps exec ids (an older one would run the command twice).
TEST(SandboxdClientLazyInfoTest, StreamsNeverRunACommandTwiceOnAnOlderDaemon) {
  auto d = HostileDaemon::Start();
  ASSERT_TRUE(d) << d.error().ToString();
  (*d)->AnswerStream("/deepbox/v1/exec/stream", {"{\"type\":\"stdout\",\"data\":\"x\"}\n"});
  SandboxdClientOptions o;
  o.id = "ns/claim";
  o.read_info_on_connect = false;
  auto c = (*d)->Connect(o);
  ASSERT_TRUE(c) << c.error().ToString();
  ExecRequest req;
  req.argv = {"cat"};
  req.stdin_stream = true;
  auto interactive = (*c)->ExecStream(req, [](OutputStream, std::string_view) { return true; });
  ASSERT_FALSE(interactive);
  EXPECT_EQ(interactive.error().code, ErrorCode::kUnimplemented);
  auto seen = (*d)->requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(seen[0].starts_with("GET /deepbox/v1/info")) << seen[0];

  auto d2 = HostileDaemon::Start();
  ASSERT_TRUE(d2) << d2.error().ToString();
  (*d2)->AnswerStream("/deepbox/v1/exec/stream", {"{\"type\":\"stdout\",\"data\":\"x\"}\n"});
  auto c2 = (*d2)->Connect(o);
  ASSERT_TRUE(c2) << c2.error().ToString();
  req.stdin_stream = false;
  std::string out;
  auto cut = (*c2)->ExecStream(req, [&](OutputStream, std::string_view data) {
    out.append(data);
    return true;
  });
  ASSERT_FALSE(cut);
  EXPECT_NE(cut.error().message.find("without an exit status"), std::string::npos)
      << cut.error().message;
  EXPECT_EQ(out, "x");
  seen = (*d2)->requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen[0].starts_with("POST /deepbox/v1/exec/stream")) << seen[0];
  EXPECT_TRUE(seen[1].starts_with("GET /deepbox/v1/info")) << seen[1];
}

// Until the daemon first answered, a connection that cannot be made (nothing
// sent) is tried again with backoff: here the daemon's socket appears 100 ms
// after the first call began (the retries span 750 ms). With /info read on
// connect (the default), a missing daemon fails Connect at once.
TEST(SandboxdClientLazyInfoTest, TheFirstConnectionIsRetriedUntilTheDaemonListens) {
  deepbox::testing::TempDir dir("deepbox-lazy", "/tmp");  // short: a socket path
  std::string socket = dir.Path("sandboxd.sock");
  EXPECT_FALSE(SandboxdClient::Connect("unix:" + socket));
  SandboxdClientOptions o;
  o.id = "ns/claim";
  o.read_info_on_connect = false;
  auto c = SandboxdClient::Connect("unix:" + socket, o);
  ASSERT_TRUE(c) << c.error().ToString();
  std::unique_ptr<net::HttpServer> server;
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto ep = net::Endpoint::Parse("unix:" + socket);
    ASSERT_TRUE(ep);
    auto s = net::HttpServer::Create(*ep, [](net::Request&, net::ResponseWriter& w) {
      (void)w.Send(net::Response::Json(200, R"({"status":"exited","exit_code":3})"));
    });
    ASSERT_TRUE(s) << s.error().ToString();
    server = std::move(*s);
    server->Start();
  });
  ExecRequest req;
  req.argv = {"false"};
  auto r = (*c)->Exec(req);
  later.join();
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->exit_code, 3);
  server->Stop(std::chrono::milliseconds(1000));
}

// Issue 29: a stream cut before its exit (the daemon died under it) is one
// error saying the command may not have completed, and why when the provider
// knows (the local one: its daemon restarted).
TEST(SandboxdClientLostConnectionTest, ACutCommandMayNotHaveCompleted) {
  for (bool knows : {false, true}) {
    auto d = HostileDaemon::Start();
    ASSERT_TRUE(d) << d.error().ToString();
    (*d)->AnswerStream("/deepbox/v1/exec/stream", {"{\"type\":\"stdout\",\"data\":\"x\"}\n"});
    SandboxdClientOptions o;
    o.id = "sb-1";
    int asked = 0;
    if (knows) {
      o.lost_connection_reason = [&asked] {
        ++asked;
        return std::string("its daemon (deepbox-sandboxd) restarted");
      };
    }
    auto c = (*d)->Connect(o);
    ASSERT_TRUE(c) << c.error().ToString();
    ExecRequest req;
    req.argv = {"sleep", "600"};
    auto r = (*c)->ExecStream(req, [](OutputStream, std::string_view) { return true; });
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
    if (knows) {
      EXPECT_EQ(r.error().message,
                "sandbox sb-1: its daemon (deepbox-sandboxd) restarted during the command, which "
                "may not have completed");
      EXPECT_EQ(asked, 1);
    } else {
      EXPECT_NE(r.error().message.find("the connection to its daemon broke during the command"),
                std::string::npos)
          << r.error().message;
      EXPECT_NE(r.error().message.find("may not have completed"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace deepbox
