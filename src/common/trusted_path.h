// The files and directories whose contents decide what deepbox does (the
// local state directory, the snapshot store): trusted only when nobody but
// this user could have written them, or swapped them for their own. One
// rule, one wording, for every such place.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "common/error.h"

namespace deepbox {

// What a checked path is, for the messages.
struct TrustedPath {
  std::string_view what;    // "the state directory", "the sandbox record"
  std::string_view env;     // the variable that moves it: "DEEPBOX_STATE_DIR"
  std::string_view stakes;  // what a writer would control, after "whoever can write it "
};

// "0755": the permission bits of `mode`, for messages.
std::string FormatMode(mode_t mode);

// `fd` (opened from `path`) is a directory (`want_dir`) or a regular file,
// owned by the effective uid and not writable by group or others; else
// PERMISSION_DENIED saying whose it is and what to do.
Status CheckOwnedByUs(int fd, const std::filesystem::path& path, const TrustedPath& t,
                      bool want_dir = true);

// Each directory from / down to `parent` (symlinks resolved) may be changed
// only by root or this user, or is sticky (like /tmp: others cannot rename
// our entries): otherwise its owner could swap `target` (below `parent`)
// for their own after the checks. PERMISSION_DENIED names the culprit.
Status CheckAncestorsCannotSwap(const std::filesystem::path& parent,
                                const std::filesystem::path& target, const TrustedPath& t);

}  // namespace deepbox
