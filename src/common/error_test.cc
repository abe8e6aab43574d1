#include "common/error.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace deepbox {
namespace {

TEST(ErrorTest, CodeNamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(ErrorCode::kInternal); ++i) {
    auto code = static_cast<ErrorCode>(i);
    EXPECT_EQ(ErrorCodeFromName(ErrorCodeName(code)), code);
  }
  EXPECT_EQ(ErrorCodeFromName("BOGUS"), ErrorCode::kInternal);
}

TEST(ErrorTest, SyscallErrorNamesCallAndErrno) {
  Error e = SyscallError("openat2", ENOENT, "/workspace/a");
  EXPECT_EQ(e.code, ErrorCode::kNotFound);
  EXPECT_NE(e.message.find("openat2(/workspace/a)"), std::string::npos);
  EXPECT_NE(e.message.find("ENOENT"), std::string::npos);
  EXPECT_EQ(SyscallError("x", EACCES).code, ErrorCode::kPermissionDenied);
  EXPECT_EQ(SyscallError("x", ENOTEMPTY).code, ErrorCode::kConflict);
}

TEST(ErrorTest, HttpStatus) {
  EXPECT_EQ(ErrorCodeHttpStatus(ErrorCode::kNotFound), 404);
  EXPECT_EQ(ErrorCodeHttpStatus(ErrorCode::kConflict), 409);
  EXPECT_EQ(ErrorCodeHttpStatus(ErrorCode::kUnauthenticated), 401);
}

}  // namespace
}  // namespace deepbox
