// A Sandbox that forwards every call to another one and reports what came
// back through two hooks: decorators that watch a sandbox (is it gone? what
// did the last command exit with?) override only those.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sandbox/sandbox.h"

namespace deepbox {

class ForwardingSandbox : public Sandbox {
 public:
  explicit ForwardingSandbox(Sandbox& inner) : inner_(inner) {}

  std::string id() const override { return inner_.id(); }
  std::string root() const override { return inner_.root(); }
  Result<ExecResult> Exec(const ExecRequest& r) override { return Executed(inner_.Exec(r)); }
  Result<ExecResult> ExecStream(const ExecRequest& r, const OutputCallback& cb) override {
    return Executed(inner_.ExecStream(r, cb));
  }
  Result<FileInfo> Stat(const std::string& p) override { return Check(inner_.Stat(p)); }
  Result<std::vector<FileInfo>> List(const std::string& p) override {
    return Check(inner_.List(p));
  }
  Result<std::vector<FileInfo>> ListNames(const std::string& p) override {
    return Check(inner_.ListNames(p));
  }
  Result<ReadResult> Read(const std::string& p, const ReadOptions& o) override {
    return Check(inner_.Read(p, o));
  }
  Status Write(const std::string& p, std::string_view c, uint32_t mode) override {
    return Check(inner_.Write(p, c, mode));
  }
  Result<EditResult> Edit(const std::string& p, const std::string& o, const std::string& n,
                          bool all) override {
    return Check(inner_.Edit(p, o, n, all));
  }
  Status Mkdir(const std::string& p, bool parents) override {
    return Check(inner_.Mkdir(p, parents));
  }
  Status Move(const std::string& f, const std::string& t, bool overwrite) override {
    return Check(inner_.Move(f, t, overwrite));
  }
  Status Delete(const std::string& p, bool recursive) override {
    return Check(inner_.Delete(p, recursive));
  }
  Result<GlobResult> Glob(const std::string& pattern, const std::string& p, size_t max) override {
    return Check(inner_.Glob(pattern, p, max));
  }
  Result<GrepResult> Grep(const GrepRequest& r) override { return Check(inner_.Grep(r)); }
  Result<TreeResult> Tree(const TreeRequest& r) override { return Check(inner_.Tree(r)); }
  Result<std::string> Download(const std::string& p) override { return Check(inner_.Download(p)); }
  Status Upload(const std::string& p, std::string_view c, uint32_t mode) override {
    return Check(inner_.Upload(p, c, mode));
  }

 protected:
  // Every failed call, whichever method.
  virtual void OnError(const Error& /*error*/) {}
  // Every command that ran to an outcome (Exec and ExecStream).
  virtual void OnExecResult(const ExecResult& /*result*/) {}

  Sandbox& inner_;

 private:
  template <typename R>
  R Check(R r) {
    if (!r) OnError(r.error());
    return r;
  }
  Result<ExecResult> Executed(Result<ExecResult> r) {
    r = Check(std::move(r));
    if (r) OnExecResult(*r);
    return r;
  }
};

}  // namespace deepbox
