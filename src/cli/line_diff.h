// A line diff for the approval prompt of edit_file: what the edit changes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deepbox::run {

// " kept", "-removed", "+added" lines turning `before` into `after` (the
// longest common subsequence of lines; removals before additions, as diff
// shows them). A huge edit (over 250,000 line pairs) is shown as all
// removed, then all added.
std::vector<std::string> LineDiff(std::string_view before, std::string_view after);

}  // namespace deepbox::run
