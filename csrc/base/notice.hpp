// What an outcome says besides its status: one sentence per event, written where the decision is made,
// for the caller to log as it is (Python: the outcome's `notices`; flink-gpu-discovery: its stderr).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace flinkgpu {

enum class NoticeLevel { kInfo, kWarning };

struct Notice {
    NoticeLevel level = NoticeLevel::kWarning;
    std::string text;  // a full sentence
};

using Notices = std::vector<Notice>;

inline void warn(Notices* notices, std::string text) { notices->push_back({NoticeLevel::kWarning, std::move(text)}); }
inline void inform(Notices* notices, std::string text) { notices->push_back({NoticeLevel::kInfo, std::move(text)}); }

}  // namespace flinkgpu
