#include "common/terminal_text.h"

#include <gtest/gtest.h>

#include <string>

#include "common/utf8.h"

namespace deepbox {
namespace {

constexpr std::string_view kFffd = "\xEF\xBF\xBD";

std::string R(std::string_view a, std::string_view b = {}, std::string_view c = {}) {
  std::string s(a);
  s.append(kFffd);
  s.append(b);
  if (!c.empty()) {
    s.append(kFffd);
    s.append(c);
  }
  return s;
}

// Every property a terminal relies on: nothing below 0x20 but \n and \t, no DEL,
// valid UTF-8, no C1 code point, no bidi control.
void ExpectInert(const std::string& s, bool one_line = false) {
  EXPECT_TRUE(IsValidUtf8(s)) << s;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\t' || c == '\n') {
      EXPECT_FALSE(one_line) << "line break or tab at " << i;
      continue;
    }
    EXPECT_GE(c, 0x20) << "control byte at " << i;
    EXPECT_NE(c, 0x7F) << "DEL at " << i;
    if (c == 0xC2 && i + 1 < s.size()) {
      unsigned char d = static_cast<unsigned char>(s[i + 1]);
      EXPECT_FALSE(d >= 0x80 && d <= 0x9F) << "C1 control at " << i;
    }
  }
  EXPECT_EQ(s.find("\u202E"), std::string::npos);
  EXPECT_EQ(s.find("\u2066"), std::string::npos);
}

TEST(TerminalTextTest, PlainTextIsUnchanged) {
  for (std::string_view s :
       {"", "hello", "a\tb\nc\n", "héllo ✓ 日本語 🙂", "~!@#$%^&*()[]{}\\|"}) {
    EXPECT_EQ(SanitizeForTerminal(s), s);
  }
}

TEST(TerminalTextTest, ColorsAndCursorMovesAreRemoved) {
  EXPECT_EQ(SanitizeForTerminal("\x1b[31merror\x1b[0m: bad"), "error: bad");
  EXPECT_EQ(SanitizeForTerminal("\x1b[1;38;5;196mX\x1b[m"), "X");
  // Cursor up, clear line, cursor position, private modes, save/restore.
  EXPECT_EQ(SanitizeForTerminal("a\x1b[2A\x1b[2K\x1b[10;20Hb\x1b[?25l\x1b[?1049hc\x1b"
                                "7d\x1b"
                                "8"),
            "abcd");
  // Reset (RIS), index, charset selection.
  EXPECT_EQ(SanitizeForTerminal("x\x1b"
                                "cy\x1bMz\x1b(Bw"),
            "xyzw");
}

TEST(TerminalTextTest, OscTitleAndClipboardAreRemoved) {
  // Window title, BEL-terminated and ST-terminated.
  EXPECT_EQ(SanitizeForTerminal("a\x1b]0;pwned\x07"
                                "b"),
            "ab");
  EXPECT_EQ(SanitizeForTerminal("a\x1b]2;pwned\x1b\\b"), "ab");
  // OSC 52: write "rm -rf ~" to the clipboard.
  std::string osc52 =
      "before\x1b]52;c;cm0gLXJmIH4=\x07"
      "after";
  EXPECT_EQ(SanitizeForTerminal(osc52), "beforeafter");
  // Hyperlink: the link goes, its text stays.
  EXPECT_EQ(SanitizeForTerminal("\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\"), "click");
  // Unterminated: removed to the end (a terminal would swallow it too).
  EXPECT_EQ(SanitizeForTerminal("ok\x1b]52;c;AAAA"), "ok");
}

TEST(TerminalTextTest, DcsApcPmSosAreRemoved) {
  EXPECT_EQ(SanitizeForTerminal("a\x1bP+q544e\x1b\\b"), "ab");       // DCS (XTGETTCAP)
  EXPECT_EQ(SanitizeForTerminal("a\x1b_Gf=100;AAAA\x1b\\b"), "ab");  // APC (kitty graphics)
  EXPECT_EQ(SanitizeForTerminal("a\x1b^privacy\x1b\\b"), "ab");      // PM
  EXPECT_EQ(SanitizeForTerminal("a\x1bXsos\x1b\\b"), "ab");          // SOS
  // CAN aborts a string; an ESC that is not ST ends it and starts anew.
  EXPECT_EQ(SanitizeForTerminal("a\x1bPdata\x18"
                                "b"),
            "ab");
  EXPECT_EQ(SanitizeForTerminal("a\x1b]0;t\x1b[31mb"), "ab");
}

TEST(TerminalTextTest, C1ControlsAsUtf8AreRemoved) {
  // U+009B is CSI, U+009D OSC, U+009C ST, U+0090 DCS, U+009F APC.
  EXPECT_EQ(SanitizeForTerminal("a\u009b31mb"), "ab");
  EXPECT_EQ(SanitizeForTerminal("a\u009d0;title\u009cb"), "ab");
  EXPECT_EQ(SanitizeForTerminal("a\u009d52;c;AAAA\x07"
                                "b"),
            "ab");
  EXPECT_EQ(SanitizeForTerminal("a\u0090q\u009cb"), "ab");
  EXPECT_EQ(SanitizeForTerminal("a\u009fx\u009cb"), "ab");
  // Other C1 controls (NEL, IND, SS2) become U+FFFD.
  EXPECT_EQ(SanitizeForTerminal("a\u0085b\u0084c"), R("a", "b", "c"));
  ExpectInert(SanitizeForTerminal("\u0080\u0081\u008e\u008f\u0099\u009a"));
}

TEST(TerminalTextTest, RawC1BytesAreInvalidUtf8) {
  // 8-bit CSI and OSC: a terminal in 8-bit mode would obey them.
  std::string s = SanitizeForTerminal(
      "a\x9b"
      "31mb\x9d"
      "0;t\x9c");
  ExpectInert(s);
  EXPECT_EQ(s.find('\x9b'), std::string::npos);
  EXPECT_EQ(s.substr(0, 1), "a");
}

TEST(TerminalTextTest, OtherC0ControlsAndDelBecomeReplacement) {
  EXPECT_EQ(SanitizeForTerminal("a\bb"), R("a", "b"));  // backspace overwrites
  EXPECT_EQ(SanitizeForTerminal("a\x07"
                                "b"),
            R("a", "b"));  // bell
  EXPECT_EQ(SanitizeForTerminal(std::string("a\0b", 3)), R("a", "b"));
  EXPECT_EQ(SanitizeForTerminal("a\x7f"
                                "b"),
            R("a", "b"));
  EXPECT_EQ(SanitizeForTerminal("a\x0e"
                                "b\x0f"),
            R("a", "b") + std::string(kFffd));  // shift out/in (charset switch)
  std::string all;
  for (int c = 0; c < 0x20; ++c) all.push_back(static_cast<char>(c));
  ExpectInert(SanitizeForTerminal(all));
}

TEST(TerminalTextTest, CarriageReturnBecomesLineBreak) {
  // "rm -rf ~\rls      " would show as "ls      " on a terminal.
  EXPECT_EQ(SanitizeForTerminal("rm -rf ~\rls      "), "rm -rf ~\nls      ");
  EXPECT_EQ(SanitizeForTerminal("line1\r\nline2\r\n"), "line1\nline2\n");
  EXPECT_EQ(SanitizeForTerminal("10%\r50%\r100%\n"), "10%\n50%\n100%\n");
}

TEST(TerminalTextTest, BidiControlsAreNeutralized) {
  // Trojan Source: RLO makes "txt.exe" render reversed.
  EXPECT_EQ(SanitizeForTerminal("invoice\u202Etxt.exe"), R("invoice", "txt.exe"));
  for (std::string_view s :
       {"\u202A", "\u202B", "\u202C", "\u202D", "\u2066", "\u2067", "\u2068", "\u2069"}) {
    EXPECT_EQ(SanitizeForTerminal(s), kFffd) << s;
  }
  // Neighbouring non-controls stay.
  EXPECT_EQ(SanitizeForTerminal("\u2029\u2070"), "\u2029\u2070");
}

TEST(TerminalTextTest, InvalidUtf8IsReplaced) {
  EXPECT_EQ(SanitizeForTerminal("a\xff"
                                "b"),
            R("a", "b"));
  EXPECT_EQ(SanitizeForTerminal("a\xc3"), R("a"));  // truncated
  EXPECT_EQ(SanitizeForTerminal("a\xe2\x9c"
                                "b"),
            R("a", "b"));  // truncated 3-byte: one U+FFFD
  EXPECT_EQ(SanitizeForTerminal("\xc0\xaf"), std::string(kFffd) + std::string(kFffd));  // overlong
  EXPECT_EQ(SanitizeForTerminal("\xed\xa0\x80"),
            R("", "") + std::string(kFffd) + std::string(kFffd));                      // surrogate
  EXPECT_EQ(SanitizeForTerminal("\xf4\x90\x80\x80").find("\xf4"), std::string::npos);  // > U+10FFFF
  ExpectInert(SanitizeForTerminal("\xf8\x88\x80\x80\x80\xfe\xff\xc2"));
}

TEST(TerminalTextTest, IncompleteSequencesAtTheEndAreDropped) {
  EXPECT_EQ(SanitizeForTerminal("a\x1b"), "a");
  EXPECT_EQ(SanitizeForTerminal("a\x1b["), "a");
  EXPECT_EQ(SanitizeForTerminal("a\x1b[12;"), "a");
  EXPECT_EQ(SanitizeForTerminal("a\x1b]"), "a");
  // A malformed CSI stops at the offending byte, which is then handled alone.
  EXPECT_EQ(SanitizeForTerminal("a\x1b[1\nb"), "a\nb");
  EXPECT_EQ(SanitizeForTerminal("a\x1b[1é"), "aé");
}

TEST(TerminalTextTest, LineVariantHasNoLineBreaks) {
  EXPECT_EQ(SanitizeLineForTerminal("name"), "name");
  EXPECT_EQ(SanitizeLineForTerminal("a\tb"), "a b");
  EXPECT_EQ(SanitizeLineForTerminal("a\nb"), R("a", "b"));
  EXPECT_EQ(SanitizeLineForTerminal("a\r\nb"), R("a", "b"));
  EXPECT_EQ(SanitizeLineForTerminal("a\rb"), R("a", "b"));
  EXPECT_EQ(SanitizeLineForTerminal("fake\n sb-1  running"), R("fake", " sb-1  running"));
  EXPECT_EQ(SanitizeLineForTerminal("\x1b[31mred\x1b[0m"), "red");
  ExpectInert(SanitizeLineForTerminal("x\n\r\t\x1b]0;t\x07\u202e\xff"), true);
}

TEST(TerminalTextTest, EveryByteAndPairIsInertAndIdempotent) {
  // Exhaustive over short inputs: every byte, and every byte after ESC and
  // after each C1 introducer; the output is always inert and a fixed point.
  std::vector<std::string> inputs;
  for (int a = 0; a < 256; ++a) {
    inputs.push_back(std::string(1, static_cast<char>(a)) + "x");
    for (std::string_view prefix :
         {"\x1b", "\x1b[", "\x1b]", "\u009b", "\u009d", "\xc2", "\xe2\x80"}) {
      inputs.push_back(std::string(prefix) + static_cast<char>(a) + "y\n");
    }
  }
  for (const auto& in : inputs) {
    std::string once = SanitizeForTerminal(in);
    ExpectInert(once);
    EXPECT_EQ(SanitizeForTerminal(once), once);
    std::string line = SanitizeLineForTerminal(in);
    ExpectInert(line, true);
    EXPECT_EQ(SanitizeLineForTerminal(line), line);
  }
}

}  // namespace
}  // namespace deepbox
