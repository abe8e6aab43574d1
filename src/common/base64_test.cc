#include "common/base64.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace deepbox {
namespace {

TEST(Base64Test, KnownVectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
}

TEST(Base64Test, RoundTripAllBytes) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  auto back = Base64Decode(Base64Encode(all));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, all);
}

TEST(Base64Test, RejectsGarbage) {
  EXPECT_FALSE(Base64Decode("Zm9v!"));
  EXPECT_FALSE(Base64Decode("Z"));
}

TEST(Base64Test, LineBreaksAnywhereAndPaddingAreAccepted) {
  EXPECT_EQ(Base64Decode("Zm9v\nYmFy"), "foobar");
  EXPECT_EQ(Base64Decode("Zm\r\n9vYm\nFy\n"), "foobar");
  EXPECT_EQ(Base64Decode("Zm8="), "fo");
  EXPECT_EQ(Base64Decode("Zm8"), "fo");
  EXPECT_EQ(Base64Decode("Zg=="), "f");
  EXPECT_FALSE(Base64Decode("Zg=a"));  // padding only at the end
  EXPECT_FALSE(Base64Decode("Zm9vY"));
}

// The one-character-at-a-time decoder the fast one must agree with: the
// definition of what is accepted.
std::optional<std::string> ReferenceDecode(std::string_view text) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '\n' || c == '\r') continue;
    const char* at = c == '\0' ? nullptr : std::strchr(alphabet, c);
    if (at == nullptr) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(at - alphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (bits >= 6) return std::nullopt;
  return out;
}

TEST(Base64Test, AgreesWithTheReferenceOnRandomInput) {
  std::mt19937 rng(12345);
  const char kNoise[] = "\n\r=!- \0\xff";
  const std::string noise(kNoise, sizeof(kNoise) - 1);  // with its NUL
  for (int round = 0; round < 20000; ++round) {
    std::string bytes(rng() % 40, '\0');
    for (auto& b : bytes) b = static_cast<char>(rng());
    std::string text = Base64Encode(bytes);
    ASSERT_EQ(Base64Decode(text), bytes);
    // Damage it: line breaks, padding, invalid bytes, cuts.
    const int edits = static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0:
          text.insert(at, 1, noise[rng() % noise.size()]);
          break;
        case 1:
          text.erase(std::min(at, text.size() - 1), 1);
          break;
        default:
          text.resize(at);
      }
    }
    ASSERT_EQ(Base64Decode(text), ReferenceDecode(text)) << "input: " << text;
  }
}

}  // namespace
}  // namespace deepbox
