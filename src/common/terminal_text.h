// Text from a sandbox, its daemon or a model is hostile when printed: escape
// sequences can set the window title, write the clipboard (OSC 52), move the
// cursor to overwrite what the user sees, or reorder a line (bidi overrides).
// Everything such text passes through on its way to a terminal goes through
// here, except output the user asked for raw (`deepbox sandbox exec` stdout,
// `--json` documents, which JSON escaping already makes inert).
#pragma once

#include <string>
#include <string_view>

namespace deepbox {

// Returns `text` safe to write to a terminal:
// - escape sequences introduced by ESC or by a C1 control (CSI, OSC up to BEL or
//   ST, DCS/SOS/PM/APC up to ST, two-byte ESC sequences) are removed whole, so
//   colored compiler output stays readable; an unterminated string sequence is
//   removed to the end of the text;
// - any other control character (C0 except \n and \t, DEL, a lone C1 code point)
//   becomes U+FFFD, which marks that something was there;
// - \r\n becomes \n and a lone \r becomes \n: a carriage return can otherwise
//   hide text by overwriting it ("rm -rf ~\rls     "), and as a line break
//   progress output stays legible;
// - bidi embedding/override/isolate controls (U+202A..U+202E, U+2066..U+2069)
//   become U+FFFD ("Trojan Source");
// - invalid UTF-8 (including raw 8-bit C1 bytes) becomes U+FFFD.
// The result contains no byte below 0x20 except \n and \t, no DEL, and is valid
// UTF-8. Sanitizing twice changes nothing.
std::string SanitizeForTerminal(std::string_view text);

// The same for a one-line field (a name, label, note, command shown on one
// line): additionally \t becomes a space and each line break (\n, \r, \r\n)
// becomes U+FFFD, so a value cannot forge extra rows of a table.
std::string SanitizeLineForTerminal(std::string_view text);

}  // namespace deepbox
