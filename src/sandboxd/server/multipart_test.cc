#include "sandboxd/server/multipart.h"

#include <gtest/gtest.h>

namespace deepbox::sandboxd {
namespace {

TEST(MultipartTest, ParsesFilePartWithBinaryData) {
  std::string data("a\0b\r\nc--x", 9);
  std::string body =
      "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"dir/a b.bin\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\n" +
      data + "\r\n--XyZ\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nv\r\n--XyZ--\r\n";
  auto parts = ParseMultipart("multipart/form-data; boundary=XyZ", body);
  ASSERT_TRUE(parts) << parts.error().message;
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].name, "file");
  EXPECT_EQ((*parts)[0].filename, "dir/a b.bin");
  EXPECT_EQ((*parts)[0].data, data);
  EXPECT_EQ((*parts)[1].name, "other");
  EXPECT_EQ((*parts)[1].data, "v");
}

TEST(MultipartTest, QuotedBoundaryAndErrors) {
  std::string body = "--b;x\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n1\r\n--b;x--";
  auto parts = ParseMultipart("multipart/form-data; boundary=\"b;x\"", body);
  ASSERT_TRUE(parts) << parts.error().message;
  EXPECT_EQ((*parts)[0].data, "1");
  EXPECT_FALSE(ParseMultipart("application/json", body));
  EXPECT_FALSE(ParseMultipart("multipart/form-data", body));
  EXPECT_FALSE(ParseMultipart("multipart/form-data; boundary=zz", body));
  EXPECT_FALSE(ParseMultipart("multipart/form-data; boundary=b;x",
                              "--b;x\r\nContent-Disposition: form-data\r\n\r\nunterminated"));
}

// A client's body is hostile: every truncation and every single-byte
// corruption of a valid body is parsed or refused, never read out of bounds
// (std::string_view::substr past the end would throw).
TEST(MultipartTest, EveryTruncationAndCorruptionIsSafe) {
  const std::string ctype = "multipart/form-data; boundary=\"b;x\"";
  const std::string body =
      "--b;x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\\\"b\"\r\n"
      "Content-Type: text/plain\r\n\r\nhello\r\n--b;x\r\nContent-Disposition: form-data; "
      "name=\"n\"\r\n\r\n1\r\n--b;x--\r\n";
  ASSERT_TRUE(ParseMultipart(ctype, body));
  size_t ok = 0;
  for (size_t n = 0; n <= body.size(); ++n) {
    auto parts = ParseMultipart(ctype, std::string_view(body).substr(0, n));
    if (parts) {
      ++ok;
      for (const auto& p : *parts) EXPECT_LE(p.data.size(), n);
    }
  }
  EXPECT_GE(ok, 1u);  // at least the whole body
  for (size_t i = 0; i < body.size(); ++i) {
    for (char c : {'\0', '\r', '\n', '-', '"', ';', '\\'}) {
      std::string bad = body;
      bad[i] = c;
      (void)ParseMultipart(ctype, bad);
    }
  }
  for (size_t n = 0; n <= ctype.size(); ++n) {
    (void)ParseMultipart(std::string_view(ctype).substr(0, n), body);
  }
}

}  // namespace
}  // namespace deepbox::sandboxd
