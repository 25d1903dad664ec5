// Flink's duration grammar (TimeUtils.parseDuration): "5 s", "500ms", "2 min", a bare number is
// milliseconds; units d, h, min/m, s, ms, µs, ns and their long names, case ignored. One
// implementation for the driver's Duration options and flink-gpu-discovery's --nvml-timeout.
#pragma once

#include <string>
#include <string_view>

namespace flinkgpu {

// The duration `text` names, in seconds; false with Flink's reason in *error when it names none.
bool parse_flink_duration(std::string_view text, double* seconds, std::string* error);

}  // namespace flinkgpu
