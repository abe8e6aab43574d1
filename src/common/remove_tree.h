// Removes a directory tree that a sandbox wrote (hostile content): never
// following a symlink, giving back permissions a sandbox took away (a chmod
// 000 directory), refusing more than 256 levels. Shared by the local state
// store and the snapshot store.
#pragma once

#include <filesystem>

#include "common/error.h"

namespace deepbox {

// A missing `path` is no error.
Status RemoveTree(const std::filesystem::path& path);

}  // namespace deepbox
