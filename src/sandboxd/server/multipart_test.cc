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

}  // namespace
}  // namespace deepbox::sandboxd
